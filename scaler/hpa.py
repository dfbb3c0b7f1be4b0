"""The HPA's arithmetic for an External metric with an AverageValue target, and its inverse.

The HPA computes ``ratio = value / (target * current)``; when ``|1 - ratio| <= tolerance`` it keeps
``current``, else it scales to ``ceil(value / target)``. :func:`metric_value_for` picks the value to
report so that the HPA lands on the replica count the policy computed (see docs/policy.md, "Landing
the HPA on the target").
"""

from __future__ import annotations

import math

from warmscale.scaler.counts import ceil_count

# The HPA compares with a float tolerance: reported values keep this far clear of its band's edges
# (a margin on the metric, not the rounding of a count: that is ceil_count's).
_EPS = 1e-6


def hpa_replicas(value: float, target: float, current: int, tolerance: float) -> int:
    """The replica count the HPA derives from ``value`` (before its min/max and behaviour)."""
    if current <= 0:
        return ceil_count(value / target) if value > 0 else 0
    ratio = value / (target * current)
    if abs(1.0 - ratio) <= tolerance:
        return current
    return max(0, ceil_count(value / target))


def metric_value_for(desired: int, current: int | None, target: float, tolerance: float) -> float:
    """The metric value that makes the HPA move from ``current`` to ``desired``.

    - Outside the tolerance band the plain value ``desired * target`` does it.
    - Scale-up inside the band cannot land exactly: it lands on the smallest count just outside the
      band (a small overshoot, taken because an SLO miss costs more than a replica for a while).
    - Scale-down inside the band reports a value in ``((desired-1)*target, desired*target]`` below the
      band when one exists; otherwise it reports ``current`` (hold) until the drop is large enough.
    """
    plain = desired * target
    if current is None or current <= 0 or tolerance <= 0 or desired == current:
        return float(plain)
    if abs(1.0 - desired / current) > tolerance + _EPS:
        return float(plain)
    if desired > current:
        n = math.floor((1.0 + tolerance) * current + _EPS) + 1
        return float(n * target)
    lo = (desired - 1) * target
    hi = min(plain, (1.0 - tolerance) * current * target - _EPS * target)
    if hi > lo + _EPS:
        return (lo + hi) / 2.0
    return float(current * target)


def unsized_message(ref: object) -> str:
    """GetMetrics' UNAVAILABLE text while a ScaledObject's count has no basis yet."""
    where = f"{getattr(ref, 'namespace', '')}/{getattr(ref, 'name', '')}"
    return f"{where}: no signals yet and the target's replicas unknown; holding (the HPA keeps the current count)"
