"""Equal information (issue 21, requirement 3): start-up drawn per replica around the ladder, loop
phases drawn per member, warmscale without the exact start-up, one HPA behaviour for everyone; and
ensembles of distinct members (requirement 4)."""

from __future__ import annotations

import math
import statistics

import numpy as np

from warmscale.benchmarks.sim.arrivals import Workload, distinct_members, perturbed
from warmscale.benchmarks.sim.cluster import Cluster
from warmscale.benchmarks.sim.conditions import (
    STARTUP_MAX_FACTOR,
    STARTUP_MIN_FACTOR,
    STARTUP_SIGMA,
    Conditions,
    startup_factor,
)
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES
from warmscale.benchmarks.sim.references import acquisition_s
from warmscale.benchmarks.sim.runner import (
    SHIPPED_EXAMPLE_HPA,
    BenchConfig,
    NeedCurve,
    SimSettings,
    build_policies,
    hpa_behavior,
)
from warmscale.warmpool.startup_model import COLD, PROFILES, time_to_ready

ENGINE = ENGINE_PROFILES["8b-h100"]
STARTUP = PROFILES["8b-h100"]


def _cold_starts(seed: int | None, n: int) -> list[float]:
    c = Cluster(ENGINE, STARTUP, node_idle_s=0.0, draws=Conditions(seed=seed).startup_draws())
    c.start_ready(0, 0.0)
    c.set_spec(n, 0.0)
    return [p.ready_at - p.created_at for p in c.pods]


def test_start_ups_are_drawn_per_replica_lognormal_around_the_ladder() -> None:
    cold = time_to_ready(STARTUP, COLD)
    exact = _cold_starts(None, 5)
    assert exact == [cold] * 5  # --exact-startup: the ladder itself
    drawn = _cold_starts(7, 400)
    assert len(set(drawn)) > 300  # one draw per replica
    assert all(STARTUP_MIN_FACTOR * cold - 1e-9 <= t <= STARTUP_MAX_FACTOR * cold + 1e-9 for t in drawn)
    logs = [math.log(t / cold) for t in drawn]
    assert abs(statistics.median(logs)) < 0.05  # median on the ladder
    assert abs(statistics.pstdev(logs) - STARTUP_SIGMA) < 0.04
    assert _cold_starts(7, 400) == drawn  # the member's seed decides them
    assert _cold_starts(8, 400) != drawn


def test_the_sigma_is_the_published_factor_two_read_as_p10_to_p90() -> None:
    # coldstart-and-warm-pools.md (a): 8B 5-10 min cold, 1-2 min warm node: a factor 2 end to end.
    assert abs(startup_factor(1.2816) / startup_factor(-1.2816) - 2.0) < 1e-3
    assert startup_factor(10.0) == STARTUP_MAX_FACTOR and startup_factor(-10.0) == STARTUP_MIN_FACTOR


def test_the_bound_assumes_the_fastest_start_up_a_draw_can_give() -> None:
    assert acquisition_s(STARTUP, STARTUP_MIN_FACTOR) < acquisition_s(STARTUP)
    assert acquisition_s(STARTUP, 1.0) == acquisition_s(STARTUP)


def test_phases_are_drawn_per_member_within_each_period() -> None:
    a = Conditions(seed=1000)
    for kind, period in (("scrape", 15.0), ("poll", 30.0), ("sync", 15.0), ("cycle", 180.0), ("plan", 30.0)):
        drawn = [Conditions(seed=1000 + i).phase(kind, period) for i in range(8)]
        assert all(0.0 <= x < period and x == int(x) for x in drawn)  # whole seconds within the period
        assert len(set(drawn)) >= 4, (kind, drawn)  # members differ
        assert a.phase(kind, period) == drawn[0]  # the seed decides
    assert Conditions().phase("sync", 15.0) == 0.0
    assert Conditions(seed=5).phase("scrape", 1.0) == 0.0  # a 1 s loop: no phase below the tick


def _policies(cond: Conditions, hpa: str = "shipped-example") -> dict:
    curve = NeedCurve(grid_s=10.0, need=np.ones(10, dtype=np.int64))
    names = ("warmscale", "keda-prometheus-queue", "llm-d-queue-guard", "wva-saturation", "kpa-concurrency",
             "dynamo-planner")
    bc = BenchConfig(policies=names, hpa_profile=hpa)
    pols = build_policies(names, curve, 1, ENGINE, STARTUP, SimSettings(conditions=cond), bc, 1)
    return {p.name: p for p in pols}


def test_every_policy_takes_the_members_phases() -> None:
    cond = Conditions(seed=1003)
    p = _policies(cond)
    assert p["keda-prometheus-queue"].hpa.next_sync == cond.phase("sync", 15.0)
    assert p["keda-prometheus-queue"].prom.next_at == cond.phase("scrape", 15.0)
    assert p["llm-d-queue-guard"].keda.next_poll == cond.phase("poll", 15.0)
    assert p["wva-saturation"].next_cycle == cond.phase("cycle", 30.0)
    assert p["kpa-concurrency"].kpa.next_tick == cond.phase("cycle", 2.0)
    assert p["dynamo-planner"].next_at == cond.phase("cycle", 180.0)
    w = p["warmscale"]
    assert w.hpa.next_sync == cond.phase("sync", 15.0) and w.next_scrape == cond.phase("scrape", 1.0)


def test_warmscale_is_not_told_the_start_up_and_every_hpa_scales_up_alike() -> None:
    p = _policies(Conditions(seed=1))
    w = p["warmscale"]
    assert "timeToReadySeconds" not in w.metadata  # the documented default until it measures starts
    assert w.cfg.time_to_ready_seconds != time_to_ready(STARTUP, COLD)
    assert w.hpa.b == SHIPPED_EXAMPLE_HPA and w.metadata["hpaTolerance"] == "0"
    for name in ("keda-prometheus-queue", "llm-d-queue-guard", "wva-saturation"):
        b = p[name].hpa.b
        assert (b.scale_up_pods, b.scale_up_percent, b.scale_up_period_s, b.tolerance) == (2, 100.0, 15.0, 0.0), name
    d = _policies(Conditions(seed=1), "kubernetes-default")
    assert d["warmscale"].hpa.b.scale_up_pods == d["keda-prometheus-queue"].hpa.b.scale_up_pods == 4
    assert hpa_behavior("kubernetes-default", subject=True).scale_down_stabilization_s == 0.0


def test_warmscale_learns_time_to_ready_from_the_starts_it_observes() -> None:
    c = Cluster(ENGINE, STARTUP, node_idle_s=0.0, draws=Conditions(seed=3).startup_draws())
    c.start_ready(1, 0.0)
    c.set_spec(4, 0.0)
    c.events_until(3 * time_to_ready(STARTUP, COLD))
    med = c.ttr.medians()
    assert med and all(v > 0 for v in med.values())  # what the WarmStatus carries to the scaler
    starts = sorted(p.ready_at - p.created_at for p in c.pods if p.warm != "initial")
    assert min(starts) <= max(med.values()) <= max(starts)


def test_ensemble_members_are_distinct() -> None:
    members = distinct_members(8, 1)
    assert len({m[1]["seed"] for m in members}) == 8 and len({m[1]["fraction"] for m in members}) == 8
    work = Workload(name="w", kind="requests", t=np.arange(0.0, 100.0, 1.0), n=np.ones(100, dtype=np.int64),
                    inp=np.arange(100.0), out=np.ones(100), span_s=100.0)
    firsts = {float(perturbed(work, k, p).inp[0]) for k, p in members}
    assert len(firsts) == 8  # every member starts the trace elsewhere
