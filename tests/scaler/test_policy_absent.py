"""Absent data is unknown, never idle (issue 10 item 1): the pure policy with an injected clock."""

from __future__ import annotations

import pytest

from tests.scaler.test_policy import Run, cfg, replica, unknown
from warmscale.signals.model import ReplicaReading

ZERO = {"scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "5", "scaleDownStabilizationSeconds": "0",
        "nodeIdleSeconds": "0", "timeToReadySeconds": "0", "targetInflightPerReplica": "10"}


def test_a_replica_source_that_sees_nothing_holds_a_busy_workload() -> None:
    run = Run(cfg(**ZERO))
    assert run.step([replica("a", running=22), replica("b", running=22)]).desired == 5
    for _ in range(60):
        d = run.step([], absent=("prometheus",))
        assert (d.desired, d.active, d.reason) == (5, True, "signals-unknown")


def test_a_fresh_tracker_that_sees_nothing_never_goes_to_zero() -> None:
    run = Run(cfg(**ZERO))
    for _ in range(60):
        d = run.step([], absent=("prometheus",))
        assert d.active and d.desired >= 1


def test_at_zero_an_empty_source_is_expected() -> None:
    run = Run(cfg(**ZERO))
    run.step([replica("a", requests=1)])
    for _ in range(10):
        d = run.step([replica("a", requests=1)])
    assert (d.desired, d.active) == (0, False)
    for _ in range(10):
        d = run.step([], absent=("pods",))
        assert (d.desired, d.active) == (0, False)


def test_idle_window_restarts_after_unknown_or_a_hole() -> None:
    run = Run(cfg(**ZERO))
    run.step([replica("a", running=3, requests=1)])
    for _ in range(20):  # unknown for a long time: no idle evidence accumulates
        run.step([unknown("a")])
    d = run.step([replica("a", requests=1)])
    assert d.active  # the idle window starts now, not 20 s ago
    for _ in range(3):
        d = run.step([replica("a", requests=1)])
    assert d.active
    for _ in range(3):
        d = run.step([replica("a", requests=1)])
    assert not d.active  # 5 s of the engine's own idle data
    run2 = Run(cfg(**ZERO))
    run2.step([replica("a", requests=1)])
    d = run2.step([replica("a", requests=1)], dt=30)  # no decision for 30 s (sources unreadable)
    assert d.active


def test_ready_pods_missing_from_the_sources_are_unknown() -> None:
    run = Run(cfg(**ZERO))
    for _ in range(10):
        d = run.step([replica("a", requests=1)], ready_replicas=2)
    assert d.active and d.desired >= 1


def test_idle_window_counts_from_when_the_data_was_read_not_when_the_read_began() -> None:
    """A slow read (sources answered 2 s after the tick began) must not lend the idle window those 2 s:
    activity, and idle evidence that starts afresh, are stamped when the data was read."""
    for first in ([replica("a", running=3, requests=1)], [unknown("a")]):  # last activity / no evidence yet
        run = Run(cfg(**ZERO))
        run.step(first)
        t0 = run.clock.now + 1
        d = run.step([replica("a", running=3 if first[0].signal else 0, requests=1)], read_until=t0 + 2.0)
        assert d.active
        for _ in range(6):  # t0 + 1 .. t0 + 6: under 5 s since the data read at t0 + 2
            d = run.step([replica("a", requests=1)])
            assert d.active, run.clock.now - t0
        d = run.step([replica("a", requests=1)])  # t0 + 7: 5 s of idle data
        assert not d.active


# A fresh tracker (no decision yet) that knows nothing never answers a count below what runs: with the
# scale target's replicas known it holds them; without, the count is unsized (GetMetrics UNAVAILABLE,
# tests/scaler/test_grpc.py) and not remembered as a count to hold.
FRESH = [
    # (name, metadata, replicas seen, snapshot fields, desired, sized)
    ("target at 10, one unknown endpoint", {}, [unknown("a")], {"current_replicas": 10}, 10, True),
    ("target at 10, nothing seen", {}, [], {"current_replicas": 10, "absent": ("pods",)}, 10, True),
    ("API counts 7 ready, target unknown", {}, [unknown("a")], {"ready_replicas": 7, "starting_replicas": 0},
     7, False),
    ("nothing known at all", {"minReplicas": "2"}, [], {"absent": ("prometheus",)}, 2, False),
    ("target at 0 with zero allowed: wakes to 1", ZERO, [], {"current_replicas": 0, "absent": ("pods",)}, 1, True),
]


@pytest.mark.parametrize(("name", "meta", "replicas", "snap", "desired", "sized"), FRESH, ids=[r[0] for r in FRESH])
def test_a_fresh_tracker_that_knows_nothing_never_answers_below_what_runs(
        name: str, meta: dict[str, str], replicas: list[ReplicaReading], snap: dict[str, object], desired: int,
        sized: bool) -> None:
    run = Run(cfg(**meta))
    d = run.step(replicas, **snap)
    assert (d.desired, d.sized, d.active, d.reason) == (desired, sized, True, "signals-unknown")
    assert (run.state.last_desired is None) == (not sized)
    # The first known signals size it: from then on every decision is sized.
    d = run.step([replica("a", running=1)], current_replicas=snap.get("current_replicas"))
    assert d.sized
