"""``python -m tests.cluster`` = ``python -m warmscale.localcluster`` (the harness moved there)."""

import sys

from warmscale.localcluster.cli import main

sys.exit(main())
