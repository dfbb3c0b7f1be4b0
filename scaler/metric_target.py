"""The HPA target the scaler publishes (``GetMetricSpec`` / ``StreamMetricSpec``) and the value that
lands the HPA under it. Pure; docs/scaler.md, "Metric units and target changes".

``metricUnit: replicas`` (the default): target 1 and value ~ the decided count (scaler.hpa); the spec
never changes. ``metricUnit: inflight``: the metric reads in requests, like a KEDA Prometheus
trigger on running + waiting requests: the target is the in-flight requests one replica is sized for
(``targetInflightPerReplica``, else ``targetUtilization`` x the sequences one replica runs, learned
from the engines), the value is ``desired x target`` (corrected for the tolerance as in scaler.hpa).
The HPA lands on the same count either way; with ``inflight`` its target changes as the capacity is
learned, and every change is streamed to KEDA (``StreamMetricSpec``), which updates the HPA.

A target change is a moment where KEDA's HPA may still hold the old target while the scaler reports
a value for the new one (KEDA applies a streamed spec within about a second). So a change is made
only where it cannot move the HPA by itself:

- the published target follows the wanted one only when they differ by ``RETARGET_MIN_CHANGE`` or
  more, at most once per ``RETARGET_MIN_INTERVAL_S``, by at most the largest of ``RETARGET_STEPS``;
- a change is made only when some value lands the HPA on the same count under the old and the new
  target (:func:`agreeing_value`), else it waits for the next decision;
- for ``RETARGET_SETTLE_S`` after a change the value is chosen to land the same under both targets
  again, and where none does (the count changed meanwhile), the value that lands at least the
  decided count under both: the HPA may briefly get more, never fewer;
- the tracker calls :func:`retarget` only while KEDA has a StreamMetricSpec stream open to it (KEDA
  reads GetMetricSpec when it builds the HPA, not after: without the stream the HPA keeps its target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warmscale.scaler import capacity as cap
from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.hpa import hpa_replicas, metric_value_for

# The wanted target must differ by this share before the published one moves: learned capacity
# wobbles by a few percent between intervals, and every change rebuilds KEDA's HPA spec.
RETARGET_MIN_CHANGE = 0.1
# At most one change this often (a 2x learned capacity is reached in about 10 minutes).
RETARGET_MIN_INTERVAL_S = 60.0
# Relative steps a change may take, largest first: each is taken only where a value lands the HPA the
# same under both targets (agreeing_value). The largest bounds what a count change during the settle
# time can cost (the HPA may get up to this share more replicas for one sync). The smallest passes for
# a steady fleet (desired = current) under the HPA's default 10% tolerance (1 / 1.08 = 0.926).
RETARGET_STEPS = (0.25, 0.08)
# After a change, values must land the same under the previous target for this long: KEDA applies a
# streamed spec to the HPA within about a second (docs/keda.md: 0.2-0.4 s); 30 s covers two default
# HPA syncs (15 s) with room for a KEDA reconcile retry.
RETARGET_SETTLE_S = 30.0
# Targets are kept to this many significant digits (a readable spec, no churn from noise).
TARGET_DIGITS = 2


@dataclass(frozen=True)
class PublishedTarget:
    """The target KEDA was given, the one before it, and when it changed (``None``: never)."""

    target: float
    previous: float | None = None
    changed_at: float | None = None

    @classmethod
    def restore(cls, cfg: ScalerConfig, stored: tuple[float, float | None, float | None] | None) -> PublishedTarget:
        """From ``ScalerState.published_target``, else the initial target."""
        if stored is None or cfg.metric_unit == "replicas":
            return cls(initial_target(cfg))
        return cls(*stored)

    def stored(self) -> tuple[float, float | None, float | None]:
        return (self.target, self.previous, self.changed_at)


def inflight_per_replica(cfg: ScalerConfig, max_seqs: float) -> float:
    """Running + waiting requests one replica is sized for: the override, else the share
    ``targetUtilization`` of the sequences one replica runs (the policy's demand rule uses it)."""
    if cfg.target_inflight_per_replica is not None:
        return cfg.target_inflight_per_replica
    return max(1.0, cfg.target_utilization * max_seqs)


def _round(x: float) -> float:
    if x <= 0 or not math.isfinite(x):
        return 1.0
    digits = TARGET_DIGITS - 1 - math.floor(math.log10(x))
    return round(x, digits)


def initial_target(cfg: ScalerConfig) -> float:
    """The target before anything is learned (the capacity prior), as answered from the first RPC."""
    if cfg.metric_unit == "replicas":
        return 1.0
    return _round(inflight_per_replica(cfg, cap.prior_for(cfg.engine, cfg.model_profile).max_seqs))


def wanted_target(cfg: ScalerConfig, max_seqs: float) -> float:
    """The target the HPA should aim at now (1 in replica units)."""
    if cfg.metric_unit == "replicas":
        return 1.0
    return _round(inflight_per_replica(cfg, max_seqs))


def agreeing_value(desired: int, current: int | None, targets: tuple[float, ...], tolerance: float) -> float | None:
    """A value that lands the HPA on what the landing under ``targets[-1]`` gives, under every one of
    ``targets`` (``None`` if none of the candidates does)."""
    last = targets[-1]
    intended = metric_value_for(desired, current, last, tolerance)
    cur = current if current is not None else 0
    want = hpa_replicas(intended, last, cur, tolerance)
    lo, hi = min(targets), max(targets)
    candidates = [intended, *(metric_value_for(desired, current, t, tolerance) for t in targets),
                  want * lo, (want - 0.5) * hi, ((want - 1) * hi + want * lo) / 2]
    for v in candidates:
        if v >= 0 and all(hpa_replicas(v, t, cur, tolerance) == want for t in targets):
            return v
    return None


def retarget(pub: PublishedTarget, wanted: float, desired: int, current: int | None, tolerance: float,
             now: float) -> PublishedTarget:
    """The published target after this decision (see the module docstring)."""
    if pub.target <= 0 or abs(wanted / pub.target - 1.0) < RETARGET_MIN_CHANGE:
        return pub
    if pub.changed_at is not None and now - pub.changed_at < RETARGET_MIN_INTERVAL_S:
        return pub
    for most in RETARGET_STEPS:
        ratio = min(max(wanted / pub.target, 1.0 / (1.0 + most)), 1.0 + most)
        step = _round(pub.target * ratio)
        if step != pub.target and agreeing_value(desired, current, (pub.target, step), tolerance) is not None:
            return replace(pub, target=step, previous=pub.target, changed_at=now)
    return pub


def value_for(pub: PublishedTarget, desired: int, current: int | None, tolerance: float, now: float) -> float:
    """The metric value to report under ``pub``: the landing value, and while a change settles one
    that lands the same under the previous target (else at least the decided count under both)."""
    plain = metric_value_for(desired, current, pub.target, tolerance)
    if pub.previous is None or pub.changed_at is None or now - pub.changed_at >= RETARGET_SETTLE_S:
        return plain
    agreed = agreeing_value(desired, current, (pub.previous, pub.target), tolerance)
    if agreed is not None:
        return agreed
    # The HPA's count grows with the value under either target: the larger landing value lands at
    # least the decided count under both.
    return max(plain, metric_value_for(desired, current, pub.previous, tolerance))
