"""Step 3, ``guards``: what the need alone must not do (pure).

- ``partial-data``: replicas whose signals are unknown block any scale-down (unknown is never idle).
- ``gpu-busy``: DCGM, secondary: GPUs busy at ``DCGM_BUSY_UTILIZATION`` hold a scale-down below what
  runs (scaler/dcgm_guard.py).
- ``pd-ratio``: the prefill/decode ratio bound of the pdGroup raises a lagging role, never lowers one.
"""

from __future__ import annotations

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.dcgm_guard import gpu_busy_hold
from warmscale.scaler.decide.trace import Step
from warmscale.scaler.observation import Observation
from warmscale.scaler.state import ScalerState


def partial_data(desired: int, reason: str, obs: Observation, state: ScalerState) -> tuple[int, str, Step]:
    last = state.last_desired
    before = desired
    if obs.uncertain and last is not None and desired < last:
        desired, reason = last, "partial-data-hold"
    # Unknown running requests (a gateway-only pool whose picker does not report them) never read as
    # idle, from the first decision on: what runs is the floor.
    if obs.running_unknown and last is None and obs.current_replicas is not None and desired < obs.current_replicas:
        desired, reason = obs.current_replicas, "partial-data-hold"
    return desired, reason, Step("partial-data", before, desired, reason if desired != before else "ok",
                                 {"uncertain": obs.uncertain, "unknown_replicas": obs.unknown_replicas,
                                  "running_unknown": obs.running_unknown, "last_desired": last})


def gpu_busy(desired: int, reason: str, obs: Observation, state: ScalerState,
             cfg: ScalerConfig) -> tuple[int, str, Step]:
    before = desired
    current = obs.current_replicas if obs.current_replicas is not None else state.last_desired
    desired, reason = gpu_busy_hold(desired, reason, obs, cfg, current)
    return desired, reason, Step("gpu-busy", before, desired, reason if desired != before else "ok",
                                 {"gpu_utilization": obs.gpu_utilization,
                                  "busy_at": cfg.dcgm_busy_utilization, "current": current})


def pd_ratio(desired: int, reason: str, obs: Observation) -> tuple[int, str, Step]:
    before = desired
    if obs.pd_floor is not None and desired < obs.pd_floor:
        desired, reason = obs.pd_floor, "pd-ratio"
    return desired, reason, Step("pd-ratio", before, desired, reason if desired != before else "ok",
                                 {"pd_floor": obs.pd_floor})
