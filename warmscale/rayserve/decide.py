"""What the Ray Serve policy returns, from the scaler's last answer (pure: no I/O, no Ray import).

The scaler answers a ScaledObject reference as it answers KEDA: ``GetMetrics`` gives a value and
``GetMetricSpec`` a per-replica target such that the HPA's ``ceil(value / target)`` is the replica
count it decided (:mod:`warmscale.scaler.server`). The policy turns that into Ray Serve's decision:

- an answer younger than ``stale_s``: ``ceil(value / target)``;
- no answer yet, an answer older than ``stale_s`` (the scaler down, hung, or refusing: UNAVAILABLE
  while it has no basis), or one that makes no sense (target <= 0, not finite): the deployment's
  current target count (``AutoscalingContext.target_num_replicas``), so missing data never scales
  anything down, and a scale-up Serve is already making is kept.

Ray Serve then clamps the count to the deployment's min/max replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The HPA's ceil() of a float that should be an integer but carries rounding (3.0000000001 -> 3).
CEIL_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer of the scaler: GetMetrics' value and GetMetricSpec's target, at ``at`` (monotonic s)."""

    value: float
    target: float
    at: float


@dataclass(frozen=True, slots=True)
class Decision:
    replicas: int
    reason: str  # "scaler" | "no answer yet" | "stale answer (N s)" | "invalid answer"


def decide(answer: Answer | None, now: float, current_target: int, stale_s: float) -> Decision:
    """The replica count for Ray Serve (see the module docstring)."""
    keep = max(0, int(current_target))
    if answer is None:
        return Decision(keep, "no answer yet")
    age = now - answer.at
    if age > stale_s:
        return Decision(keep, f"stale answer ({age:.0f} s)")
    if not (math.isfinite(answer.value) and math.isfinite(answer.target)) or answer.target <= 0 or answer.value < 0:
        return Decision(keep, "invalid answer")
    return Decision(max(0, math.ceil(answer.value / answer.target - CEIL_SLACK)), "scaler")
