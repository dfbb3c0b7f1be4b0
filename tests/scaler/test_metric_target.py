"""The published HPA target (metricUnit, scaler/metric_target.py): pure tables and the safety property
that a target change never moves the HPA by itself."""

from __future__ import annotations

import itertools

import pytest

from warmscale.scaler import metric_target as mt
from warmscale.scaler.config import parse_metadata
from warmscale.scaler.hpa import hpa_replicas, metric_value_for
from warmscale.scaler.state import ScalerState

BASE = {"endpoints": "http://e:8000/metrics"}


def test_replica_units_never_change_the_target() -> None:
    cfg = parse_metadata(BASE)
    assert cfg.metric_unit == "replicas"
    assert mt.initial_target(cfg) == mt.wanted_target(cfg, 7.0) == 1.0


def test_inflight_target_is_the_per_replica_concurrency() -> None:
    override = parse_metadata({**BASE, "metricUnit": "inflight", "targetInflightPerReplica": "32"})
    assert mt.initial_target(override) == mt.wanted_target(override, 500.0) == 32.0
    learned = parse_metadata({**BASE, "metricUnit": "inflight", "engine": "sglang", "targetUtilization": "0.5"})
    assert mt.wanted_target(learned, 100.0) == 50.0
    assert mt.wanted_target(learned, 123.0) == 62.0  # two significant digits
    assert mt.initial_target(learned) == 510.0  # 0.5 x the sglang prior's 1,024 sequences, rounded
    with pytest.raises(ValueError, match="metricUnit"):
        parse_metadata({**BASE, "metricUnit": "tokens"})


def test_changes_wait_for_a_real_difference_and_the_interval() -> None:
    pub = mt.PublishedTarget(100.0)
    assert mt.retarget(pub, 105.0, 4, 4, 0.1, 0.0) == pub  # within RETARGET_MIN_CHANGE
    first = mt.retarget(pub, 200.0, 4, 4, 0.1, 0.0)
    assert first.target > 100.0 and first.previous == 100.0 and first.changed_at == 0.0
    assert mt.retarget(first, 200.0, 4, 4, 0.1, mt.RETARGET_MIN_INTERVAL_S - 1) == first
    second = mt.retarget(first, 200.0, 4, 4, 0.1, mt.RETARGET_MIN_INTERVAL_S)
    assert second.target > first.target and second.previous == first.target
    # Never by more than the largest step, and it converges.
    for a, b in itertools.pairwise([pub, first, second]):
        assert b.target <= a.target * (1 + mt.RETARGET_STEPS[0]) + 1e-9
    t, now = second, mt.RETARGET_MIN_INTERVAL_S
    for _ in range(20):
        now += mt.RETARGET_MIN_INTERVAL_S
        t = mt.retarget(t, 200.0, 4, 4, 0.1, now)
    assert abs(t.target / 200.0 - 1) < mt.RETARGET_MIN_CHANGE  # within the dead band of what is wanted


GRID = list(itertools.product((1, 2, 3, 5, 10, 11, 40, 100), (None, 1, 2, 5, 10, 12, 40, 100), (0.0, 0.1),
                              (10.0, 30.0, 80.0, 200.0), (0.3, 0.7, 1.05, 1.5, 4.0)))


@pytest.mark.parametrize(("desired", "current", "tol", "old", "factor"), GRID)
def test_a_change_never_moves_the_hpa_by_itself(desired: int, current: int | None, tol: float, old: float,
                                                factor: float) -> None:
    """Whatever target the HPA holds while KEDA applies the change, the value reported at the change
    lands it on what the landing under the new target gives; during the settle time a count that
    changed lands at least that count under both."""
    pub = mt.retarget(mt.PublishedTarget(old), old * factor, desired, current, tol, 1000.0)
    cur = current or 0
    if pub.target == old:
        return  # no change: nothing to check (a change waits for a decision where it is safe)
    v = mt.value_for(pub, desired, current, tol, 1000.0)
    want = hpa_replicas(metric_value_for(desired, current, pub.target, tol), pub.target, cur, tol)
    assert hpa_replicas(v, old, cur, tol) == want == hpa_replicas(v, pub.target, cur, tol)
    for later in (max(1, desired - 3), desired + 1, desired * 2):
        v = mt.value_for(pub, later, current, tol, 1000.0 + mt.RETARGET_SETTLE_S / 2)
        floor = hpa_replicas(metric_value_for(later, current, pub.target, tol), pub.target, cur, tol)
        assert hpa_replicas(v, old, cur, tol) >= floor and hpa_replicas(v, pub.target, cur, tol) >= floor
    # After the settle time: the plain landing under the new target.
    assert mt.value_for(pub, desired, current, tol, 1000.0 + mt.RETARGET_SETTLE_S) == \
        metric_value_for(desired, current, pub.target, tol)


def test_published_target_survives_the_store() -> None:
    state = ScalerState(published_target=(74.0, 80.0, 12.5))
    assert ScalerState.from_dict(state.to_dict()).published_target == (74.0, 80.0, 12.5)
    assert ScalerState.from_dict(ScalerState().to_dict()).published_target is None
    assert ScalerState.from_dict({"published_target": ["x"]}).published_target is None
    cfg = parse_metadata({**BASE, "metricUnit": "inflight", "targetInflightPerReplica": "32"})
    assert mt.PublishedTarget.restore(cfg, None).target == 32.0
    assert mt.PublishedTarget.restore(cfg, (74.0, 80.0, 12.5)) == mt.PublishedTarget(74.0, 80.0, 12.5)
