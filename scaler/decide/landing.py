"""Step 6, ``landing``: the metric value that lands the HPA on the count, and the state it leaves (pure;
docs/policy.md, "Landing the HPA on the target")."""

from __future__ import annotations

from dataclasses import replace

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.decide.trace import Step
from warmscale.scaler.hpa import metric_value_for
from warmscale.scaler.observation import Observation
from warmscale.scaler.state import ScalerState

# The External metric's AverageValue target: one unit per replica, so the value is a count.
METRIC_TARGET = 1.0


def landing(desired: int, active: bool, obs: Observation, state: ScalerState, cfg: ScalerConfig, now: float,
            may_zero: bool, sized: bool) -> tuple[float, bool, ScalerState, Step]:
    """Returns (metric value, active, new state, step)."""
    current = obs.current_replicas if obs.current_replicas is not None else state.last_desired
    value = metric_value_for(desired, current, METRIC_TARGET, cfg.hpa_tolerance)
    if not may_zero:
        active = True
    increased = state.last_desired is not None and desired > state.last_desired
    new_state = replace(
        state,
        last_desired=desired if sized else state.last_desired,  # an unsized count is no basis to hold
        last_decision_at=now,
        last_increase_at=now if increased else state.last_increase_at,
    )
    step = Step("landing", desired, desired, "sized" if sized else "unsized",
                {"current": current, "metric_value": value, "hpa_tolerance": cfg.hpa_tolerance, "active": active})
    return value, active, new_state, step
