"""DCGM's one effect on a decision: busy GPUs hold a scale-down (pure; docs/scaler.md, "DCGM").

While the mean utilisation of the GPUs DCGM attributes to the ScaledObject's pods is at or above
``DCGM_BUSY_UTILIZATION``, the count does not go below what runs (reason ``gpu-busy-hold``). It never
raises the count above what runs and never lowers what the rules ask; unknown GPUs change nothing.
"""

from __future__ import annotations

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.observation import Observation


def gpu_busy_hold(desired: int, reason: str, obs: Observation, cfg: ScalerConfig,
                  current: int | None) -> tuple[int, str]:
    """``(desired, reason)`` after the guard; ``current`` is what runs (the target's replicas, else the
    last decided count)."""
    busy = obs.gpu_utilization is not None and obs.gpu_utilization >= cfg.dcgm_busy_utilization
    if busy and current is not None and desired < current:
        return current, "gpu-busy-hold"
    return desired, reason
