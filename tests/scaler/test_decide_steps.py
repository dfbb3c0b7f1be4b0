"""Table tests of the decision pipeline's steps, one function each (pure, injected clock)."""

from __future__ import annotations

import pytest

from tests.scaler.test_policy import cfg
from warmscale.scaler.counts import ceil_count
from warmscale.scaler.decide.bounds import bounds
from warmscale.scaler.decide.fleet import Fleet
from warmscale.scaler.decide.guards import partial_data, pd_ratio
from warmscale.scaler.decide.hold import burst_hold, lost_state_hold
from warmscale.scaler.decide.landing import landing
from warmscale.scaler.observation import Observation
from warmscale.scaler.state import ScalerState

NOW = 10_000.0
COLD = (("cold", 1, 510.0),)


def fleet(ready: int = 2, starting: int = 0, min_replicas: int = 1, may_zero: bool = False) -> Fleet:
    return Fleet(ladder=COLD, ttr=510.0, ready=ready, starting=starting, min_replicas=min_replicas,
                 may_zero=may_zero)


# A quiet, fully known fleet; each case sets what it is about.
QUIET: dict[str, object] = dict(
    now=NOW, known_replicas=2, unknown_replicas=0, waiting=0.0, running=0.0, queue=0.0, queue_unknown=False,
    kv_usage_max=None, kv_usage_mean=None, preemption_rate=0.0, ttft_window=None, load=0.0, running_slope=0.0,
    waiting_slope=0.0, completion_rate=None, idle_for=0.0, ready_replicas=None, starting_replicas=None,
    current_replicas=None, time_to_ready_s=None)


def obs(**kw: object) -> Observation:
    return Observation(**{**QUIET, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("x", "want"), [(0.0, 0), (1.0, 1), (1.0 + 1e-12, 1), (1.01, 2), (3 * (1 / 3) * 3, 3),
                                         (-0.5, 0)])
def test_ceil_count_forgives_float_error_only(x: float, want: int) -> None:
    assert ceil_count(x) == want


@pytest.mark.parametrize(("desired", "uncertain", "last", "want", "why"), [
    (1, True, 3, 3, "partial-data-hold"),   # unknown replicas block a scale-down
    (4, True, 3, 4, "ok"),                  # ... not a scale-up
    (1, False, 3, 1, "ok"),
    (1, True, None, 1, "ok"),               # nothing decided before: nothing to hold
])
def test_partial_data(desired: int, uncertain: bool, last: int | None, want: int, why: str) -> None:
    o = obs(unknown_replicas=1 if uncertain else 0, known_replicas=1)
    assert o.uncertain is uncertain
    d, _, step = partial_data(desired, "demand", o, ScalerState(last_desired=last))
    assert (d, step.why, step.before, step.after) == (want, why, desired, want)


@pytest.mark.parametrize(("desired", "pd_floor", "want"), [(1, 3, 3), (4, 3, 4), (2, None, 2)])
def test_pd_ratio_raises_never_lowers(desired: int, pd_floor: int | None, want: int) -> None:
    d, reason, _ = pd_ratio(desired, "demand", obs(pd_floor=pd_floor))
    assert d == want and (reason == "pd-ratio") is (want != desired)


@pytest.mark.parametrize(("desired", "meta", "f", "o", "want", "active", "reason"), [
    (0, {}, fleet(), {}, 1, True, "min-replicas"),
    (0, {"scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "60"}, fleet(may_zero=True),
     {"idle_for": 61.0}, 0, False, "idle"),
    # idle, but not for idleWindowSeconds yet: the floor of one stands
    (0, {"scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "60"}, fleet(may_zero=True),
     {"idle_for": 30.0}, 1, True, "min-replicas"),
    # unknown replicas: never to zero
    (0, {"scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "0"}, fleet(may_zero=True),
     {"idle_for": 99.0, "unknown_replicas": 1}, 1, True, "min-replicas"),
    (1, {"minReplicas": "1"}, fleet(min_replicas=3), {}, 3, True, "warm-floor"),
    (9, {"maxReplicas": "5"}, fleet(), {}, 5, True, "max-replicas"),
])
def test_bounds(desired: int, meta: dict[str, str], f: Fleet, o: dict[str, object], want: int, active: bool,
                reason: str) -> None:
    d, a, r, step = bounds(desired, "demand", obs(**o), cfg(**meta), f)
    assert (d, a, r) == (want, active, reason)
    assert step.step == "bounds" and step.before == desired and step.after == want


def test_burst_hold_keeps_the_peak_for_its_break_even_time() -> None:
    c = cfg(nodeIdleSeconds="600", scaleDownStabilizationSeconds="60")
    state = ScalerState(recommendations=((NOW - 100.0, 6),), last_decision_at=NOW - 1.0, last_desired=6)
    d, reason, state2, step = burst_hold(2, "demand", obs(current_replicas=6), state, c, NOW, fleet(ready=6))
    assert d == 6 and reason == "burst-hold" and step.before == 2 and step.after == 6
    assert step.inputs["peak"] == 6 and step.inputs["hold_window_s"] >= 600.0
    # past the break-even time (node idle + cold time-to-ready) the peak is released
    late = NOW + 600.0 + 510.0 + 1.0
    d, reason, _, step = burst_hold(2, "demand", obs(current_replicas=6), state, c, late, fleet(ready=6))
    assert d == 2 and step.why == "ok"
    assert state2.recommendations[-1] == (NOW, 2)


def test_lost_state_holds_one_window_then_forgets() -> None:
    c = cfg(nodeIdleSeconds="0", scaleDownStabilizationSeconds="60")
    state = ScalerState(state_lost_at=NOW - 10.0)
    d, active, reason, state2, _ = lost_state_hold(1, True, "demand", obs(current_replicas=5), state, c, NOW,
                                                   fleet(), last=4)
    assert (d, active, reason) == (5, True, "state-lost-hold") and state2.state_lost_at == NOW - 10.0
    d, _, reason, state3, _ = lost_state_hold(1, True, "demand", obs(current_replicas=5), state, c, NOW + 1e4,
                                              fleet(), last=4)
    assert (d, reason) == (1, "demand") and state3.state_lost_at is None


@pytest.mark.parametrize(("desired", "current", "sized", "last_after"), [(3, 2, True, 3), (3, 2, False, None)])
def test_landing_reports_the_count_and_keeps_an_unsized_one_out_of_the_state(
        desired: int, current: int, sized: bool, last_after: int | None) -> None:
    value, active, state, step = landing(desired, False, obs(current_replicas=current), ScalerState(),
                                         cfg(hpaTolerance="0"), NOW, may_zero=False, sized=sized)
    assert value == pytest.approx(desired) and active is True  # no zero allowed: always active
    assert state.last_desired == last_after and state.last_decision_at == NOW
    assert step.why == ("sized" if sized else "unsized")


def _burst_then_idle(**meta: str) -> list[tuple[int, bool, str]]:
    """6 replicas busy for 30 s, then fully idle for 40 s; (desired, active, reason) per idle second."""
    from tests.scaler.test_policy import Run, replica

    r = Run(cfg(scaleToZero="true", minReplicas="0", idleWindowSeconds="5", targetInflightPerReplica="10",
                burstConfirmSeconds="0", maxReplicas="10", nodeIdleSeconds="600", timeToReadySeconds="120", **meta))
    names = [f"r{i}" for i in range(6)]
    done = 0
    for _ in range(30):
        done += 10
        r.step([replica(n, running=10, requests=done) for n in names], ready_replicas=6, current_replicas=6,
               starting_replicas=0)
    out = []
    for _ in range(40):
        d = r.step([replica(n, running=0, requests=done) for n in names], ready_replicas=6, current_replicas=6,
                   starting_replicas=0)
        out.append((d.desired, d.active, d.reason))
    return out


def test_an_explicit_idle_window_wins_over_the_burst_hold() -> None:
    seen = _burst_then_idle()
    assert seen[0][0] == 6 and seen[0][2] in ("scale-down-stabilization", "burst-hold")  # held while not idle yet
    assert seen[-1] == (0, False, "idle")  # 600 + 120 s of hold do not outlast 5 s of full idleness
    first_zero = next(i for i, s in enumerate(seen) if s[0] == 0)
    assert 4 <= first_zero <= 6


def test_hold_through_idle_keeps_the_held_peak() -> None:
    seen = _burst_then_idle(holdThroughIdle="true")
    assert all(d == 6 and active for d, active, _ in seen)  # the hold (720 s) is still in force
    assert {reason for *_, reason in seen} <= {"scale-down-stabilization", "burst-hold"}


# (waiting, earlier peak) -> desired: one replica at KV 0.55 asks for a second one (KV residency). The
# ladder has no warm step, so the second replica is a 510-s cold start. With requests waiting it is
# the warm path's stand-in (granted at once); with nothing waiting it is headroom, granted only once
# it lasted burstConfirmSeconds, and a headroom peak that came before does not confirm it (the light
# load of docs/policy.md, "Burst confirmation": these cold starts held 1.27x KEDA's GPU-hours).
@pytest.mark.parametrize(("waiting", "earlier_peak", "want", "why"), [
    (2.0, False, 2, "kv"),
    (0.0, False, 1, "burst-unconfirmed"),
    (0.0, True, 1, "burst-unconfirmed"),
    (2.0, True, 2, "kv"),
])
def test_cold_headroom_must_last(waiting: float, earlier_peak: bool, want: int, why: str) -> None:
    from warmscale.scaler.decide.confirm import confirm

    c = cfg(burstConfirmSeconds="30")
    peaks = ((NOW - 300.0, 2),) if earlier_peak else ()
    state = ScalerState(needs=tuple((NOW - 60.0 + t, 1) for t in range(0, 60, 5)), need_peaks=peaks)
    desired, reason, _, inputs = confirm(2, "kv", state, COLD, c, NOW, ready=1, provisioned=1,
                                         unserved=waiting > 0)
    assert (desired, reason) == (want, why), inputs


def test_the_need_step_shows_the_capacity_model_and_the_demand_put_to_it() -> None:
    from tests.scaler.test_policy import Run, replica

    d = Run(cfg(ttftSloSeconds="2")).step([replica("a", running=10), replica("b", running=30)])
    step = d.trace[0]
    assert step.step == "need"
    for key in ("model.prefill_tps", "model.capacity_samples", "model.prompt_per_request", "model.itl_base_s",
                "model.itl_per_seq_s", "model.max_seqs", "model.kv_usage_mean", "demand.inflight_now",
                "demand.growth_per_s", "backlog", "queue", "horizon_s", "rule.demand"):
        assert key in step.inputs, key
    assert step.inputs["demand.inflight_now"] == 40.0


@pytest.mark.parametrize(("unserved", "needs", "want"), [
    (False, 1, 1),  # KV headroom of 2 for a second, 1 before: only 1 is worth holding
    (False, 2, 2),  # headroom that lasted is held
    (True, 1, None),  # load left unserved: its peak is held as it is
])
def test_confirm_says_how_much_headroom_the_hold_may_keep(unserved: bool, needs: int, want: int | None) -> None:
    from warmscale.scaler.decide.confirm import confirm

    state = ScalerState(needs=tuple((NOW - 60.0 + t, needs) for t in range(0, 60, 5)))
    desired, _, _, inputs = confirm(2, "kv", state, COLD, cfg(burstConfirmSeconds="30"), NOW, ready=2,
                                    provisioned=2, unserved=unserved)
    assert desired == 2 and inputs.get("holdable") == want, inputs


def test_a_peak_of_headroom_that_did_not_last_holds_nothing() -> None:
    c = cfg(nodeIdleSeconds="600", scaleDownStabilizationSeconds="60")
    state = ScalerState(recommendations=((NOW - 2_000.0, 1),), last_decision_at=NOW - 1.0, last_desired=2)
    # a second of KV headroom asks for 2 (granted: 2 are ready); only 1 of it lasted
    d, _, state2, step = burst_hold(2, "kv", obs(current_replicas=2), state, c, NOW, fleet(ready=2), peak=1)
    assert d == 2 and step.inputs["recorded"] == 1
    # a minute later the need is 1: nothing holds the second replica
    d, reason, _, step = burst_hold(1, "demand", obs(current_replicas=2), state2, c, NOW + 60.0, fleet(ready=2))
    assert (d, step.why) == (1, "ok")
    # the same second as load left unserved (no peak given) holds it for its break-even time
    _, _, state3, _ = burst_hold(2, "kv", obs(current_replicas=2), state, c, NOW, fleet(ready=2))
    d, reason, _, _ = burst_hold(1, "demand", obs(current_replicas=2), state3, c, NOW + 60.0, fleet(ready=2))
    assert (d, reason) == (2, "burst-hold")
