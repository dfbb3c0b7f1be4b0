import sys

from warmscale.localcluster.cli import main

sys.exit(main())
