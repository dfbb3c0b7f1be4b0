"""The simulator's speed-ups change no result (issue 11, item 9).

- The engine's scheduler (one pass per step, block checks by capacity, one ITL observation per
  segment, an arrival scheduled once) equals the scheduler as first written
  (``tests/bench/reference_engine.py``) exactly: same TTFTs, counters and histograms on a cohort
  stream with preemptions, and the same per-policy results on a rate-curve excerpt.
- Simulating the policies in parallel processes (``--jobs``) gives the results of one after the other,
  with the oracle's sizing passes as one of the tasks; also when the sizing passes change the start
  fleet the reactive policies were started from (they are simulated again from the refined one).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

import warmscale.benchmarks.sim.cluster as cluster_mod
import warmscale.benchmarks.sim.runner as runner_mod
from tests.bench.reference_engine import ReferenceEngine
from warmscale.benchmarks.sim.arrivals import load_trace
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, Engine, Request
from warmscale.benchmarks.sim.runner import (
    POLICY_NAMES,
    BenchConfig,
    SimSettings,
    build_policies,
    need_curve,
    run_all,
    simulate,
)
from warmscale.traces import resolve
from warmscale.warmpool.startup_model import PROFILES

RATE = resolve("servegen_reason_deepseek-r1_rate_600s.csv")
PROFILE = "8b-h100"


def _excerpt(minutes: float, scale: float) -> object:
    work = load_trace(RATE, dt=1.0, seed=3, rate_scale=scale)
    keep = work.t < minutes * 60
    work.t, work.n, work.inp, work.out = work.t[keep], work.n[keep], work.inp[keep], work.out[keep]
    work.span_s = minutes * 60
    return work


def _state(e: Engine) -> tuple:
    hists = tuple((h.counts, h.sum, h.count) for h in (e.h_ttft, e.h_itl, e.h_e2e, e.h_queue, e.h_prefill,
                                                      e.h_decode, e.h_iter))
    return (sorted(e.sink or []), e.requests_total, e.prompt_tokens_total, e.generation_tokens_total,
            e.preemptions_total, e.rejected_total, e.steps_total, e.busy_s, e.free_blocks, hists)


def _cohort_stream(cls: type[Engine], seed: int) -> Engine:
    # A small KV cache: cohorts pile up and the newest are preempted (and arrivals meet preempting steps).
    e = cls(replace(ENGINE_PROFILES[PROFILE], kv_capacity_tokens=40_000, max_num_seqs=64), [])
    rng = random.Random(seed)
    t = 0.0
    for _ in range(600):
        t += rng.expovariate(3.0)
        e.advance_to(t)
        e.enqueue(Request(t, rng.randint(20, 3000), rng.randint(1, 500), rng.choice((1, 1, 2, 3, 7))), t)
        if rng.random() < 0.2:
            e.sync(t + rng.random())  # an observation (a scrape) cuts a segment
    e.advance_to(1e7)
    return e


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_engine_equals_the_reference_scheduler_exactly(seed: int) -> None:
    fast, ref = _cohort_stream(Engine, seed), _cohort_stream(ReferenceEngine, seed)
    assert ref.preemptions_total > 0 and ref.idle and fast.idle
    got, want = _state(fast), _state(ref)
    assert got[:9] == want[:9]
    for (c1, s1, n1), (c2, s2, n2) in zip(got[9], want[9], strict=True):
        assert (c1, n1) == (c2, n2)
        assert s1 == pytest.approx(s2, rel=1e-12)  # the ITL sum is added per segment, not per request


def _all_policies(monkeypatch: pytest.MonkeyPatch, engine_cls: type[Engine]) -> dict[str, tuple]:
    monkeypatch.setattr(cluster_mod, "Engine", engine_cls)
    work = _excerpt(20, 2.5)
    eng, sp = ENGINE_PROFILES[PROFILE], PROFILES[PROFILE]
    s = SimSettings(dt=1.0, fast_signals=True, warmup_s=510.0)
    curve = need_curve(work, eng, 2.0, 10.0)
    bc = BenchConfig(profile=PROFILE, warmscale_overrides={"scrapeIntervalSeconds": "15"})
    out = {}
    for pol in build_policies(POLICY_NAMES, curve, int(curve.need.max()), eng, sp, s, bc, 1):
        r = simulate(work, pol, eng, sp, 1, s)  # from 1 replica: overload, queues, preemptions
        out[pol.name] = (r.summary(), r.slo_attainment_warm, r.gpu_hours_warm, r.served, r.starts, r.timeline)
    return out


@pytest.mark.skipif(not RATE.exists(), reason="trace not present")
def test_every_policy_gets_the_reference_results_on_a_rate_curve(monkeypatch: pytest.MonkeyPatch) -> None:
    got = _all_policies(monkeypatch, Engine)
    want = _all_policies(monkeypatch, ReferenceEngine)
    assert set(got) == set(POLICY_NAMES)
    assert min(v[0]["slo_attainment"] for v in want.values()) < 0.99  # not a trivially idle excerpt
    for name in POLICY_NAMES:
        assert got[name] == want[name], name


def _bump_start(real: object) -> object:
    def refine(*args: object, **kwargs: object) -> object:
        curve, last = real(*args, **kwargs)  # type: ignore[operator]
        need = curve.need.copy()
        need[:30] += 2  # the sizing passes "found" misses in the first minutes: a larger start fleet
        return runner_mod.NeedCurve(grid_s=curve.grid_s, need=need), last
    return refine


@pytest.mark.skipif(not RATE.exists(), reason="trace not present")
@pytest.mark.parametrize("start_moves", [False, True])
def test_policies_in_processes_equal_one_after_the_other(monkeypatch: pytest.MonkeyPatch, start_moves: bool) -> None:
    if start_moves:
        monkeypatch.setattr(runner_mod, "refine_need", _bump_start(runner_mod.refine_need))
    work = _excerpt(12, 2.0)
    eng, sp = ENGINE_PROFILES[PROFILE], PROFILES[PROFILE]
    runs = []
    for jobs in (1, 2):
        bc = BenchConfig(profile=PROFILE, oracle_iterations=1, jobs=jobs,
                         warmscale_overrides={"scrapeIntervalSeconds": "15"})
        res, meta = run_all(work, eng, sp, SimSettings(dt=1.0, fast_signals=True), bc, lambda m: None)
        runs.append(({n: (r.summary(), r.slo_attainment_warm, r.gpu_hours_warm, r.timeline) for n, r in res.items()},
                     list(res), meta))
    assert runs[0] == runs[1]
    curve = runner_mod.need_curve(work, eng, 2.0, 10.0)
    unrefined_start = runner_mod.start_replicas_from_need(curve)
    assert (runs[0][2]["initial_replicas"] != unrefined_start) == start_moves


# ---- the trace replay's shortcuts (issue 21's budget) change no result ----------------------------------

MOONCAKE = resolve("mooncake_fast25_conversation.csv")


def _mooncake_excerpt(minutes: float) -> object:
    work = load_trace(MOONCAKE, dt=1.0, seed=1)  # with its block ids: prefix caching on
    work.keep(work.t < minutes * 60)
    work.span_s = minutes * 60
    return work


def _row(r: runner_mod.PolicyResult) -> dict:
    d = dict(vars(r))
    d.pop("wall_s")
    return d


def test_gateway_skips_only_checks_that_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # From one replica the gateway holds requests for minutes (every endpoint saturated): the checks it
    # skips would have found the same state; the results equal checking every 0.1 s.
    work = _mooncake_excerpt(8)
    eng, sp = ENGINE_PROFILES[PROFILE], PROFILES[PROFILE]
    s = SimSettings(dt=1.0, slo_ttft=10.0, fast_signals=True, warmup_s=300.0,
                    conditions=runner_mod.Conditions(seed=7))
    curve = need_curve(work, eng, 10.0, 10.0)
    bc = BenchConfig(profile=PROFILE, slo_ttft=10.0)
    names = ("keda-prometheus-queue", "never-scale", "dynamo-planner", "clairvoyant-heuristic")

    def rows() -> dict[str, dict]:
        return {p.name: _row(simulate(work, p, eng, sp, 1, s, keep_misses=True))
                for p in build_policies(names, curve, int(curve.need.max()), eng, sp, s, bc, 1)}

    skipped = {"n": 0}
    real = cluster_mod.Cluster._skip_quiet_checks

    def counted(self: cluster_mod.Cluster, t: float) -> None:
        k = self._release_k
        real(self, t)
        skipped["n"] += self._release_k - k

    monkeypatch.setattr(cluster_mod.Cluster, "_skip_quiet_checks", counted)
    fast = rows()
    assert skipped["n"] > 1000  # the shortcut is taken, many times
    monkeypatch.setattr(cluster_mod.Cluster, "_skip_quiet_checks", lambda self, t: None)
    assert fast == rows()


def test_a_repeated_schedule_is_simulated_once_with_the_same_result() -> None:
    work = _mooncake_excerpt(6)
    eng, sp = ENGINE_PROFILES[PROFILE], PROFILES[PROFILE]
    s = SimSettings(dt=1.0, slo_ttft=10.0, warmup_s=300.0, conditions=runner_mod.Conditions(seed=3))
    runs = runner_mod.ScheduleRuns(work, eng, sp)
    sched = ([0.0, 120.0, 240.0], [2, 4, 1])
    first = runs.simulate(runner_mod.SchedulePolicy("a", *sched), 2, s)
    again = runs.simulate(runner_mod.SchedulePolicy("b", *sched, info={"x": 1}), 2, s)
    other = runs.simulate(runner_mod.SchedulePolicy("c", *sched), 3, s)  # another start fleet: simulated
    assert runs.hits == 1
    fresh = simulate(work, runner_mod.SchedulePolicy("b", *sched, info={"x": 1}), eng, sp, 2, s)
    assert _row(again) == _row(fresh)
    assert again.name == "b" and first.name == "a" and again.params == {"x": 1, "initial_replicas": 2}
    assert _row(other) != _row(first)


def test_a_cached_oracle_sizing_is_the_sizing(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    work = _excerpt(12, 2.0)
    eng, sp = ENGINE_PROFILES[PROFILE], PROFILES[PROFILE]
    s = SimSettings(dt=1.0)
    curve = need_curve(work, eng, 2.0, 10.0)
    bc = BenchConfig(profile=PROFILE, oracle_iterations=2, cache_dir=tmp_path)  # type: ignore[arg-type]
    want, _ = runner_mod.refine_need(work, curve, eng, sp, s, 2, lambda m: None)
    lines: list[str] = []
    got = runner_mod.sized_need(work, curve, eng, sp, s, bc, lines.append)
    assert (got.need == want.need).all() and lines

    def no_simulation(*args: object, **kwargs: object) -> object:
        raise AssertionError("a cached sizing simulates nothing")

    monkeypatch.setattr(runner_mod, "refine_need", no_simulation)
    replayed: list[str] = []
    cached = runner_mod.sized_need(work, curve, eng, sp, s, bc, replayed.append)
    assert (cached.need == want.need).all() and cached.need.dtype == want.need.dtype and replayed == lines
    with pytest.raises(AssertionError):  # other settings: another key
        runner_mod.sized_need(work, curve, eng, sp, replace(s, slo_ttft=1.0), bc, replayed.append)


def test_compute_floor_is_recomputed_when_the_entries_change() -> None:
    work = _mooncake_excerpt(10)
    floor = work.compute_floor()
    assert work.compute_floor() is floor  # asked again: the same answer, not recomputed
    work.keep(work.t < 300.0)
    shorter = work.compute_floor()
    assert len(shorter) == len(work.t) < len(floor)
    fresh = load_trace(MOONCAKE, dt=1.0, seed=1)
    fresh.keep(fresh.t < 300.0)
    assert (shorter == fresh.compute_floor()).all()
