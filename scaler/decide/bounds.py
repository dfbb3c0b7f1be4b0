"""Step 4, ``bounds``: scale to zero, minReplicas (raised by the warm pool's floor), maxReplicas (pure)."""

from __future__ import annotations

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.decide.fleet import Fleet
from warmscale.scaler.decide.trace import Step
from warmscale.scaler.observation import Observation


def bounds(desired: int, reason: str, obs: Observation, cfg: ScalerConfig, fleet: Fleet,
           holding: bool = False) -> tuple[int, bool, str, Step]:
    """Zero only where allowed, every input is known and the workload has been idle for
    ``idleWindowSeconds``; otherwise at least ``max(1, minReplicas, warm floor)``; at most
    ``maxReplicas``. The idle window wins over a burst hold (``holding``: one is in force) unless
    ``holdThroughIdle`` is set. Returns (count, active, reason, step)."""
    before = desired
    # Awake hot-tier sleepers serve load the scale target's signals do not show: idle only where the
    # waker read them idle (an unknown load is never idle evidence).
    idle = (desired == 0 and obs.load == 0 and obs.idle_for >= cfg.idle_window_seconds
            and (fleet.hot_awake == 0 or obs.hot_load == 0))
    active = True
    held_through = idle and cfg.hold_through_idle and holding
    if fleet.may_zero and idle and not obs.uncertain and not held_through:
        desired, active, reason = 0, False, "idle"
    else:
        lower = max(1, fleet.min_replicas)
        if desired < lower:
            desired, reason = lower, "warm-floor" if lower > max(1, cfg.min_replicas) else "min-replicas"
    if desired > cfg.max_replicas:
        desired, reason = cfg.max_replicas, "max-replicas"
    step = Step("bounds", before, desired, reason if desired != before or not active else "ok",
                {"min_replicas": fleet.min_replicas, "max_replicas": cfg.max_replicas, "may_zero": fleet.may_zero,
                 "load": obs.load, "idle_for_s": obs.idle_for, "idle_window_s": cfg.idle_window_seconds,
                 "hold_through_idle": cfg.hold_through_idle, "held_through_idle": held_through})
    return desired, active, reason, step
