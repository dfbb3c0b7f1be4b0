"""``python -m warmscale`` = the ``warmscale`` command."""

import sys

from warmscale.cli import main

sys.exit(main())
