"""The scaler's clock for decisions: wall-clock seconds that advance with the monotonic clock.

Decisions are timed in epoch seconds (they are stored and compared across replicas and with the warm-pool
controller's status), but the stabilisation and idle windows must not jump with the wall clock: a
+1 h step (NTP after a suspend, a VM migration, an operator's ``date -s``) made every window look
elapsed (8 -> 1 replicas in 0.5 s), a -1 h step would freeze them. :class:`SteadyClock` follows the wall
clock while it agrees with the monotonic one (within :data:`STEP_TOLERANCE_SECONDS`, NTP's slewing
included); after a step it keeps advancing at the monotonic rate and converges on the wall clock at
most :data:`SLEW_RATE` faster or slower, so a window never runs more than 5% short or long. It never
goes back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("warmscale.scaler.clock")

# Disagreement between wall and monotonic time taken as it is (NTP slews at most 0.5 ms/s; a tick
# is at most an hour apart): anything larger is a step.
STEP_TOLERANCE_SECONDS = 1.0
# How fast a step is caught up: 5% of the monotonic time elapsed (a 1 h step takes 20 h).
SLEW_RATE = 0.05


class SteadyClock:
    """``clock()`` -> epoch seconds, steady across wall-clock steps (see the module docstring)."""

    def __init__(self, wall: Callable[[], float] | None = None, mono: Callable[[], float] | None = None) -> None:
        self._wall = wall if wall is not None else (lambda: time.time())  # looked up per call (tests patch it)
        self._mono = mono if mono is not None else time.monotonic
        self._last = self._wall()
        self._last_mono = self._mono()
        self._stepped = False

    def __call__(self) -> float:
        m = self._mono()
        wall = self._wall()
        elapsed = max(0.0, m - self._last_mono)
        steady = self._last + elapsed
        error = wall - steady
        if abs(error) <= STEP_TOLERANCE_SECONDS:
            value = wall
            if self._stepped:
                self._stepped = False
                log.info("wall clock caught up after a step")
        else:
            if not self._stepped:
                self._stepped = True
                log.warning("wall clock stepped; decisions keep monotonic time and catch up slowly",
                            extra={"step_seconds": round(error, 3), "slew_rate": SLEW_RATE})
            value = steady + max(-SLEW_RATE * elapsed, min(SLEW_RATE * elapsed, error))
        value = max(value, self._last)
        self._last, self._last_mono = value, m
        return value
