"""scaler/gctune.py (called by both scaler processes once start-up is done; the CLI tests run it)."""

from __future__ import annotations

import subprocess
import sys

from warmscale.scaler import gctune


def test_tune_freezes_start_up_and_raises_the_young_threshold() -> None:
    probe = ("import gc, sys; from scaler import gctune; gctune.tune(); "
             "sys.exit(0 if gc.get_threshold() == (gctune.YOUNG_THRESHOLD, *gctune.OLDER_THRESHOLDS) "
             "and gc.get_freeze_count() > 0 else 1)")
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0  # own process: ours keeps its GC


def test_the_front_collects_its_young_generation_often() -> None:
    """The RPC front's garbage is cyclic (grpc.aio leaves ~5 objects in a reference cycle per call):
    with the scaler process's 50,000 each young collection freed ~50,000 objects at once, a 20-66 ms
    stop of every answer every ~5 s at 2,000 RPC/s. A small young generation keeps each under ~2 ms."""
    probe = ("import gc, sys; from scaler import gctune; gctune.tune(gctune.FRONT_YOUNG_THRESHOLD); "
             "sys.exit(0 if gc.get_threshold()[0] == gctune.FRONT_YOUNG_THRESHOLD "
             "and gc.get_freeze_count() > 0 else 1)")
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
    assert gctune.FRONT_YOUNG_THRESHOLD <= 5_000
