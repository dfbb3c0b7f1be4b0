"""``python -m warmscale.localcluster up|down|status|token|build`` (from a checkout: see docs/cluster.md)."""

import sys

from .cli import main

sys.exit(main())
