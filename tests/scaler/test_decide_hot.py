"""The hot step (decide/hot.py) and the hot tier's accounting in the fleet and the ladder: tables on an
injected clock (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.scaler.test_decide_steps import obs
from tests.scaler.test_policy import Run, cfg, replica, ttft
from warmscale.scaler.decide.bounds import bounds
from warmscale.scaler.decide.fleet import Fleet, fleet_of
from warmscale.scaler.decide.hot import hot
from warmscale.scaler.hot_status import HotStatus, WakeIntent
from warmscale.scaler.ladder import HOT, break_even, time_to_ready, warm_steps, with_hot
from warmscale.scaler.observation import HOT_REPLICA, observe
from warmscale.scaler.state import ScalerState
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import ReplicaReading, ReplicaSignal, Snapshot

NOW = 10_000.0
COLD_S = 510.0
WAKE_S = 2.2  # an 8B's level-1 wake (vllm PR #48337)


def fleet(own: int, awake: int = 0, starting: int = 0) -> Fleet:
    return Fleet(ladder=(("cold", 0, COLD_S),), ttr=COLD_S, ready=own + awake, starting=starting, min_replicas=1,
                 may_zero=True, hot_awake=awake, own_ttr=COLD_S)


# (name, desired, active, own ready, awake, asleep, starting, last increase ago (s), target, wake, release, hot)
CASES = [
    ("onset from zero wakes one", 1, True, 0, 0, 3, 0, None, 1, 1, 0, "wake"),
    ("a burst beyond the own replicas wakes the shortfall", 5, True, 2, 0, 3, 0, None, 3, 3, 0, "wake"),
    ("bounded by the sleepers there are", 9, True, 2, 0, 3, 0, None, 3, 3, 0, "wake"),
    ("starting replicas ready later than a wake do not cover", 5, True, 2, 0, 3, 3, 10.0, 3, 3, 0, "wake"),
    ("starting replicas ready sooner than a wake cover", 5, True, 2, 0, 3, 3, COLD_S - 1.0, 0, 0, 0, "none"),
    ("bridging: awake sleepers stay while the own replicas grow", 5, True, 3, 3, 0, 2, 10.0, 3, 0, 0, "bridge"),
    ("a smaller shortfall releases none early", 5, True, 4, 3, 0, 1, 10.0, 3, 0, 0, "bridge"),
    ("the own replicas cover the count: release all", 5, True, 5, 3, 0, 0, None, 0, 0, 3, "release"),
    ("scaled to zero: release", 0, False, 0, 1, 2, 0, None, 0, 0, 1, "release"),
    ("nothing short, nothing awake", 2, True, 2, 0, 3, 0, None, 0, 0, 0, "none"),
    ("no sleepers asleep: none to wake", 3, True, 1, 0, 0, 0, None, 0, 0, 0, "none"),
]


@pytest.mark.parametrize(("name", "desired", "active", "own", "awake", "asleep", "starting", "ago", "target", "wake",
                          "release", "what"), CASES, ids=[c[0] for c in CASES])
def test_hot_step(name: str, desired: int, active: bool, own: int, awake: int, asleep: int, starting: int,
                  ago: float | None, target: int, wake: int, release: int, what: str) -> None:
    state = ScalerState(last_increase_at=None if ago is None else NOW - ago)
    plan = hot(desired, active, obs(hot_asleep=asleep, hot_awake=awake, hot_wake_s=WAKE_S), state,
               fleet(own, awake, starting), NOW)
    assert (plan.target, plan.wake, plan.release) == (target, wake, release)
    assert plan.step.step == "hot" and plan.step.before == plan.step.after == desired and plan.step.why == "ok"
    assert plan.step.inputs["hot"] == what and plan.step.inputs["because"]


# (desired, rules' need, own ready, awake, target, release, hot)
HELD = [
    (5, 1, 3, 3, 0, 3, "release"),  # a lull under the burst hold: the own replicas cover the need
    (5, 4, 3, 3, 3, 0, "bridge"),   # the need still beyond the own replicas: no early release
    (5, 9, 2, 0, 3, 0, "wake"),     # a need beyond the count (confirmation pending): the count bounds it
]


@pytest.mark.parametrize(("desired", "needed", "own", "awake", "target", "release", "what"), HELD)
def test_sleepers_bridge_the_need_not_a_count_only_a_hold_keeps(desired: int, needed: int, own: int, awake: int,
                                                               target: int, release: int, what: str) -> None:
    """The demo's hot row kept 3 sleepers awake for 4 idle minutes because the burst hold kept the count
    above the own ready replicas (1,321 awake GPU-seconds)."""
    plan = hot(desired, True, obs(hot_asleep=3 - awake, hot_awake=awake, hot_wake_s=WAKE_S),
               ScalerState(last_increase_at=NOW - 10.0), fleet(own, awake, 2), NOW, needed=needed)
    assert (plan.target, plan.release, plan.step.inputs["hot"]) == (target, release, what)


def test_without_a_hot_status_the_step_is_off_and_publishes_nothing() -> None:
    plan = hot(4, True, obs(), ScalerState(), fleet(1), NOW)
    assert plan.target is None and plan.wake == plan.release == 0 and plan.step.inputs == {"hot": "off"}


def test_awake_sleepers_are_ready_capacity_and_asleep_ones_the_hot_rung() -> None:
    f = fleet_of(obs(ready_replicas=2, hot_asleep=3, hot_awake=1, hot_wake_s=WAKE_S), ScalerState(), cfg(), NOW)
    assert (f.ready, f.own_ready, f.hot_awake) == (3, 2, 1)
    assert f.ladder[0] == (HOT, 3, WAKE_S) and f.ttr == WAKE_S and f.own_ttr == cfg().time_to_ready_seconds
    # Unknown hot status (hot_asleep None): awake counts are not trusted, the ladder has no hot rung.
    g = fleet_of(obs(ready_replicas=2, hot_awake=1), ScalerState(), cfg(), NOW)
    assert (g.ready, g.hot_awake) == (2, 0) and g.ladder[0][0] != HOT


@pytest.mark.parametrize(("own", "awake", "starting", "provisioned"), [
    (1, 3, 3, 4),  # the 3 starting replicas the 3 awake sleepers bridge: counted once
    (1, 3, 5, 6),  # more starting than awake: the starting ones
    (1, 3, 0, 4),  # nothing starting: the awake sleepers
    (2, 0, 3, 5),  # no hot tier: ready + starting as before
])
def test_an_awake_sleeper_and_the_starting_replica_it_bridges_are_provisioned_once(
        own: int, awake: int, starting: int, provisioned: int) -> None:
    assert fleet(own, awake, starting).provisioned == provisioned


def test_awake_sleepers_do_not_ratchet_the_count_while_the_scale_target_starts_their_replacements() -> None:
    """The demo's hot row: 1 own replica, 3 sleepers awake, the first tokens a little over the SLO.
    Each decision's count goes to the HPA, which starts the scale target's own replicas for it; with
    the sleepers counted as well as those starting replicas, the TTFT rule's ``max(provisioned, ...)``
    grew the count by 3 at every decision (4 -> 7 -> 10: 5 cold starts in the demo)."""
    from warmscale.signals.histogram import Histogram

    run = Run(cfg(maxReplicas="20", ttftSloSeconds="2"))
    hot_snap = {"hot_asleep": 0, "hot_awake": 3, "hot_wake_s": WAKE_S}
    desired = 4
    seen = []
    for i in range(1, 8):
        # 40 first tokens per decision, p95 ~2.35 s; the scale target runs what was decided last:
        # 1 ready, the rest starting.
        slow = Histogram.from_buckets([(1.0, 20.0 * i), (2.5, 40.0 * i), (float("inf"), 40.0 * i)], 60.0 * i)
        d = run.step([replica("a", running=20, hist=slow)], ready_replicas=1, starting_replicas=desired - 1,
                     current_replicas=desired, **hot_snap)
        desired = d.desired
        seen.append((desired, d.reason))
    assert max(n for n, _ in seen) <= 6, seen


def test_the_hot_rung_on_the_ladder() -> None:
    ladder = with_hot((("placeholder+staged", 1, 90.0), ("cold", 0, COLD_S)), 2, WAKE_S)
    assert [time_to_ready(ladder, k) for k in (1, 2, 3, 4)] == [WAKE_S, WAKE_S, 90.0, COLD_S]
    assert warm_steps(ladder) == 3
    # A release that returns by a sleeper costs no idle node (the pool's GPUs are charged anyway).
    assert break_even(ladder, 1, node_idle_s=300.0, min_hold_s=60.0) == 60.0
    assert with_hot(ladder, 0, WAKE_S) == ladder


def test_the_pipeline_wakes_on_onset_from_zero_without_changing_the_count() -> None:
    """Scale from zero: the queue's onset asks for one replica through KEDA and wakes one sleeper now;
    the count the HPA gets is the same as without the hot tier."""
    meta = {"scaleToZero": "true", "targetInflightPerReplica": "4"}
    plain, with_hot_ = Run(cfg(**meta)), Run(cfg(**meta))
    hot_snap = {"hot_asleep": 2, "hot_awake": 0, "hot_wake_s": WAKE_S}
    for sim, extra in ((plain, {}), (with_hot_, hot_snap)):
        sim.step([replica("a")], ready_replicas=0, starting_replicas=0, current_replicas=0, **extra)
    a = plain.step([replica("a", waiting=3)], ready_replicas=0, starting_replicas=0, current_replicas=0)
    b = with_hot_.step([replica("a", waiting=3)], ready_replicas=0, starting_replicas=0, current_replicas=0,
                       **hot_snap)
    assert a.desired == b.desired >= 1 and a.active and b.active
    assert a.hot_target is None and (b.hot_target, b.hot_wake, b.hot_release) == (1, 1, 0)
    assert [s.step for s in b.trace][-2:] == ["hot", "landing"]


def test_records_round_trip_and_default_missing_keys() -> None:
    hs = HotStatus("ns", "m", 5.0, asleep=2, awake=1, wake_s={"NVIDIA-H100-80GB-HBM3": 2.2, "": 3.0})
    assert HotStatus.from_dict(hs.to_dict()) == hs
    assert hs.wake_seconds("NVIDIA-H100-80GB-HBM3", 9.0) == 2.2 and hs.wake_seconds("other", 9.0) == 3.0
    assert HotStatus("ns", "m", 5.0).wake_seconds(None, 9.0) == 9.0
    assert HotStatus.from_dict({"namespace": "ns", "name": "m", "updated_at": 1, "future": 1}).asleep == 0
    wi = WakeIntent("ns", "m", 2, 7.0, "wake", "s1")
    assert WakeIntent.from_dict(wi.to_dict()) == wi


@pytest.mark.parametrize(("awake", "hot_load", "zero"), [
    (0, None, True),   # no sleeper awake: the usual idle rule
    (1, None, False),  # an awake sleeper whose load is unknown: never idle evidence
    (1, 2.0, False),   # ... that serves requests
    (1, 0.0, True),    # ... read idle by the waker
])
def test_awake_sleepers_block_scale_to_zero_unless_read_idle(awake: int, hot_load: float | None,
                                                             zero: bool) -> None:
    o = obs(idle_for=1e6, hot_asleep=1, hot_awake=awake, hot_load=hot_load)
    d, active, _, _ = bounds(0, "demand", o, cfg(scaleToZero="true"), fleet(0, awake), False)
    assert (d == 0 and not active) is zero


@pytest.mark.parametrize(("desired", "own", "waking", "asleep", "target", "wake", "release", "what"), [
    (1, 0, 1, 0, 1, 0, 0, "bridge"),  # the wake in flight is kept: no intent of 0 while it wakes
    (3, 0, 1, 2, 3, 2, 0, "wake"),  # the rest of the shortfall from the ones asleep
    (1, 1, 1, 0, 0, 0, 1, "release"),  # covered: released, even mid-wake (slept once awake)
])
def test_a_wake_in_progress_counts_as_on_its_way(desired: int, own: int, waking: int, asleep: int, target: int,
                                                 wake: int, release: int, what: str) -> None:
    plan = hot(desired, True, obs(hot_asleep=asleep, hot_waking=waking, hot_wake_s=WAKE_S), ScalerState(),
               fleet(own), NOW)
    assert (plan.target, plan.wake, plan.release, plan.step.inputs["hot"]) == (target, wake, release, what)


def test_in_a_lull_the_sleepers_go_back_to_sleep_while_the_hold_keeps_the_count() -> None:
    """A wave lifts the count to 4 with 3 sleepers awake; the queue empties. Within idleWindowSeconds
    of the last rise they keep bridging (a dip within a wave); after it the rules' need (1) is covered
    by the own ready replica, so they are released while the holds keep the count for the own replicas."""
    run = Run(cfg(maxReplicas="8", targetInflightPerReplica="10"))
    hot_snap = {"hot_asleep": 0, "hot_awake": 3, "hot_wake_s": WAKE_S}
    run.step([replica("a", running=1)], ready_replicas=1, starting_replicas=0, current_replicas=1,
             **{**hot_snap, "hot_awake": 0, "hot_asleep": 3})
    d = run.step([replica("a", running=10, waiting=30)], dt=5, ready_replicas=1, starting_replicas=0,
                 current_replicas=1, **hot_snap)
    peak = d.desired
    assert peak >= 4 and d.hot_target == 3
    plans = []
    for _ in range(20):  # 100 s of an idle lull, the scale target's replicas still starting
        d = run.step([replica("a", running=0, waiting=0)], dt=5, ready_replicas=1, starting_replicas=peak - 1,
                     current_replicas=peak, **hot_snap)
        plans.append((run.clock.now, d.desired, d.hot_target))
    early = [p for p in plans if p[0] - plans[0][0] < 50.0]
    assert all(t == 3 for _, _, t in early), plans  # within the idle window: still bridging
    assert plans[-1][2] == 0 and plans[-1][1] > 1, plans  # then released, the count still held


def _hot_snapshot(at: float, own: Histogram, sleeper: Histogram | None) -> Snapshot:
    return Snapshot(taken_at=at, replicas=(replica("own", running=5, hist=own, at=at),),
                    hot_asleep=1, hot_awake=1, hot_load=5.0,
                    hot_replicas=() if sleeper is None else (ReplicaReading(
                        "http://10.0.0.9:8000", at, ReplicaSignal(engine="vllm", waiting=0, running=5, ttft=sleeper)),))


def test_the_awake_sleepers_first_tokens_join_the_ttft_window_but_not_the_load() -> None:
    """A woken sleeper serves the workload's requests: its first tokens are the SLO's too. Its load is
    the waker's ``hot_load`` (not counted twice); a reading that fails keeps its last one."""
    c = cfg(ttftSloSeconds="0.5", targetInflightPerReplica="1000", burstConfirmSeconds="0")
    state = ScalerState()
    o, state = observe(_hot_snapshot(0.0, ttft({}), ttft({})), state, c)
    # The own replica's first tokens are fast; the sleeper's 18 of 20 take 1 s.
    o, state = observe(_hot_snapshot(1.0, ttft({0.1: 20}), ttft({0.1: 2, 1.0: 18})), state, c)
    assert o.ttft_window is not None and o.ttft_window.count == 40
    assert o.running == 5  # the own replica's; the sleeper's 5 are hot_load
    # The sleeper's read failed this time: nothing of it, and its last reading is kept...
    failed = replace(_hot_snapshot(2.0, ttft({0.1: 20}), None),
                     hot_replicas=(ReplicaReading("http://10.0.0.9:8000", 2.0, None, "timeout"),))
    o, state = observe(failed, state, c)
    # ...so that its next reading is differenced against it (2 more first tokens, not 22).
    o, state = observe(_hot_snapshot(3.0, ttft({0.1: 20}), ttft({0.1: 4, 1.0: 18})), state, c)
    assert o.ttft_window is not None and o.ttft_window.count == 42
    # No longer awake: forgotten (its next wake starts from a new reading).
    o, state = observe(_hot_snapshot(4.0, ttft({0.1: 20}), None), state, c)
    assert not any(k.startswith(HOT_REPLICA) for k in state.replicas)
