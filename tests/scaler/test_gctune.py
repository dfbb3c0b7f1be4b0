"""scaler/gctune.py (called by both scaler processes once start-up is done; the CLI tests run it)."""

from __future__ import annotations

import subprocess
import sys


def test_tune_freezes_start_up_and_raises_the_young_threshold() -> None:
    probe = ("import gc, sys; from scaler import gctune; gctune.tune(); "
             "sys.exit(0 if gc.get_threshold() == (gctune.YOUNG_THRESHOLD, *gctune.OLDER_THRESHOLDS) "
             "and gc.get_freeze_count() > 0 else 1)")
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0  # own process: ours keeps its GC
