"""The trace benchmark's warm pool comes from the warm-pool planner: its placeholders equal what
warmpool.planning.plan() decides for the same inputs (the scaler's published burst statistics, the
measured time-to-ready, the simulated placeholder pods), with standby: auto and with --standby N."""

from __future__ import annotations

from datetime import UTC, datetime

from warmscale.benchmarks.sim.arrivals import load_trace, truncate
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES
from warmscale.benchmarks.sim.policies import WarmscalePolicy, warmscale_metadata
from warmscale.benchmarks.sim.runner import SimSettings, simulate
from warmscale.scaler.bursts import BurstMemory, record
from warmscale.scaler.state import ScalerState
from warmscale.simulation.actuation import HpaBehavior, KedaConfig
from warmscale.traces import resolve
from warmscale.warmpool.planning import plan
from warmscale.warmpool.startup_model import PROFILES

PROFILE = "8b-h100"


def _policy(standby: int | None) -> WarmscalePolicy:
    md = warmscale_metadata(32, 2.0)
    return WarmscalePolicy(md, PROFILES[PROFILE], standby,
                           HpaBehavior(scale_down_stabilization_s=0.0, scale_up_pods=32),
                           KedaConfig(min_replicas=1, max_replicas=32), fast_signals=True, initial_replicas=2)


def _bursty_history() -> BurstMemory:
    """Four hours before the replay: +2 replicas for 10 minutes every 30 minutes (a bursty day)."""
    mem, t = BurstMemory(), -4 * 3600.0
    while t < 0:
        need = 4 if (t % 1800) < 600 else 2
        mem = record(mem, need, need, 90.0, t)
        t += 5.0
    return mem


def _run(pol: WarmscalePolicy, minutes: float) -> None:
    work = truncate(load_trace(resolve("azure_llm_2023_code.csv"), dt=1.0, seed=1), minutes * 60)
    pol.plan_inputs = []
    simulate(work, pol, ENGINE_PROFILES[PROFILE], PROFILES[PROFILE], 2, SimSettings(fast_signals=True))


def _check_equal(pol: WarmscalePolicy) -> list[int]:
    assert pol.plan_inputs is not None and len(pol.plan_inputs) == len(pol.plans) > 5
    planned = []
    for (t, n, held), (wl, pods, evidence) in zip(pol.plans, pol.plan_inputs, strict=True):
        direct = plan(wl, [], pods, [], None, datetime.fromtimestamp(t, UTC), standby=evidence)
        assert n == direct.standby == held, (t, n, direct.standby, held)
        planned.append(n)
    return planned


def test_auto_placeholders_are_the_planners_from_the_published_burst_statistics() -> None:
    pol = _policy(None)
    assert pol.standby == 0  # no burst statistics at t = 0
    # the scaler's stored state carries a bursty history (as after a day of traffic): the tracker
    # continues from it, publishes its statistics, and the planner sizes the warm pool from them
    # the warm pool measured its start-ups before (a controller seeds them from the store after a
    # fail-over): placeholder 90 s, cold 510 s
    pol.start = lambda cluster, now: cluster.ttr.seed({"placeholder+staged": 90.0, "cold": 510.0})  # type: ignore
    claim = pol.loop.run_until_complete(pol.store.claim(pol.tracker.id, "seed", 0.001))
    assert claim.owner
    pol.store._states[pol.tracker.id] = ScalerState(bursts=_bursty_history())
    pol.loop.run_until_complete(pol.store.release(pol.tracker.id, "seed"))
    _run(pol, 8)
    planned = _check_equal(pol)
    assert all(ev.bursts is not None for _, _, ev in pol.plan_inputs or [])
    assert max(planned) >= 1  # the bursty history pays for warm capacity


def test_fixed_standby_override_goes_through_the_planner() -> None:
    pol = _policy(2)
    assert pol.standby == 2
    _run(pol, 4)
    assert set(_check_equal(pol)) == {2}

