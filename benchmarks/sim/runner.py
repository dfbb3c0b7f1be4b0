"""Run one policy over a workload, and all of them (with the oracle's sizing) on the same arrivals.

Time is continuous (see :mod:`benchmarks.sim.engine`): requests reach the router at their arrival
times and engines run step by step in between; the control loops (scrapes, KEDA, HPA, schedules)
run every ``dt`` (default 1 s; ``tests/bench/test_convergence.py`` shows halving it changes no
result materially). Every policy starts at t = 0 from the same fleet of ``initial`` ready replicas,
charged from t = 0 like every other held GPU.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from warmscale.benchmarks.sim.arrivals import Workload, weighted_quantile
from warmscale.benchmarks.sim.cluster import Cluster
from warmscale.benchmarks.sim.conditions import STARTUP_MIN_FACTOR, Conditions
from warmscale.benchmarks.sim.engine import EngineProfile, Request
from warmscale.benchmarks.sim.policies import (
    DynamoPlannerPolicy,
    KpaPolicy,
    LlmdQueueGuardPolicy,
    Policy,
    PromHpaPolicy,
    SchedulePolicy,
    WarmscalePolicy,
    WvaSaturationPolicy,
    kpa_scale_target,
    max_replicas_for,
    model_profile_for,
    warmscale_metadata,
)
from warmscale.benchmarks.sim.references import (
    DEFAULT_SEARCH_EVALS,
    SLO_TARGET,
    ReferenceCache,
    SearchOutcome,
    cache_key,
    clairvoyant_best,
    lower_bound,
    static_best,
)
from warmscale.simulation.actuation import HpaBehavior, KedaConfig, KpaConfig
from warmscale.warmpool.startup_model import COLD, StartupProfile, time_to_ready

POLICY_NAMES = ("warmscale", "keda-prometheus-queue", "keda-prometheus-kv", "hpa-gpu-util", "kpa-concurrency",
                "llm-d-queue-guard", "wva-saturation", "dynamo-planner", "never-scale", "static-peak-clairvoyant",
                "clairvoyant-heuristic", "oracle-instant")
# The HPA behaviour every HPA-driven policy runs with (issue 21, requirement 3: equal information).
# "shipped-example": warmscale's shipped ScaledObjects (manifests/examples/vllm/scaledobject.yaml):
# scale-up stabilisation 0, max(100%, 2 pods) per 15 s, tolerance 0 (hpaTolerance "0"); warmscale also
# takes its scale-down side (stabilisation 0, 1 pod per 60 s: the scaler stabilises itself). The
# baselines take the scale-up side and the tolerance, and keep the scale-down stabilisation their own
# guides document. "kubernetes-default": the HPA's defaults for everyone (max(100%, 4 pods) per 15 s,
# tolerance 0.1); warmscale keeps only its scale-down stabilisation 0.
HPA_PROFILES = ("shipped-example", "kubernetes-default")
SHIPPED_EXAMPLE_HPA = HpaBehavior(tolerance=0.0, scale_up_stabilization_s=0.0, scale_up_percent=100.0,
                                  scale_up_pods=2, scale_up_period_s=15.0, scale_down_stabilization_s=0.0,
                                  scale_down_pods=1, scale_down_period_s=60.0)


def hpa_behavior(profile: str, *, subject: bool) -> HpaBehavior:
    """The HPA behaviour of warmscale (``subject``) or of a baseline (before its own scale-down)."""
    if profile not in HPA_PROFILES:
        raise ValueError(f"unknown HPA profile {profile!r} (known: {', '.join(HPA_PROFILES)})")
    if profile == "shipped-example":
        if subject:
            return SHIPPED_EXAMPLE_HPA
        e = SHIPPED_EXAMPLE_HPA
        return HpaBehavior(tolerance=e.tolerance, scale_up_stabilization_s=e.scale_up_stabilization_s,
                           scale_up_percent=e.scale_up_percent, scale_up_pods=e.scale_up_pods,
                           scale_up_period_s=e.scale_up_period_s)
    return HpaBehavior(scale_down_stabilization_s=0.0) if subject else HpaBehavior()
# The cost references (issue 21): rows of every run unless BenchConfig.references is off.
STATIC_BEST = "static-best"
CLAIRVOYANT_BEST = "clairvoyant-best"
REFERENCE_ROWS = (STATIC_BEST, CLAIRVOYANT_BEST)
# Rows that know the future: never counted in ``dominated_by`` (static-best is: it is a fixed fleet an
# operator could size from one past run of the same trace).
CLAIRVOYANT = ("clairvoyant-heuristic", "oracle-instant", "static-peak-clairvoyant", CLAIRVOYANT_BEST)
# v2's name of the heuristic clairvoyant schedule, still accepted by --policies.
ALIASES = {"oracle": "clairvoyant-heuristic"}


@dataclass
class PolicyResult:
    name: str
    slo_attainment: float
    gpu_hours: float
    ttft_p50_s: float
    ttft_p99_s: float
    cold_starts: int
    max_replicas: int
    requests: int
    served: int
    wall_s: float
    starts: dict[str, int]
    timeline: dict[str, list[float]]
    slo_attainment_warm: float = 1.0
    gpu_hours_warm: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    misses: list[tuple[float, float]] = field(default_factory=list)  # (arrival, ttft) of SLO misses
    # Prefix cache over the run (traces with block ids): (prompt tokens looked up, tokens hit); None: off.
    prefix_cache: tuple[float, float] | None = None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Share of the prompt tokens looked up that the replicas' prefix caches held (vLLM's hit rate)."""
        if self.prefix_cache is None:
            return None
        q, h = self.prefix_cache
        return h / q if q > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "slo_attainment": self.slo_attainment,
            "gpu_hours": self.gpu_hours,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p99_s": self.ttft_p99_s,
            "cold_starts": self.cold_starts,
            "max_replicas": self.max_replicas,
        }


@dataclass
class SimSettings:
    dt: float = 1.0
    slo_ttft: float = 2.0
    drain_max_s: float = 1800.0
    sample_s: float = 10.0
    node_idle_s: float = 600.0
    warmup_s: float = 0.0  # results also reported for arrivals (and GPU time) after this
    fast_signals: bool = False
    # start-up draws and loop phases (benchmarks/sim/conditions.py); the default: exact, phases 0
    conditions: Conditions = field(default_factory=Conditions)
    progress: Callable[[str, float], None] | None = None


def simulate(work: Workload, policy: Policy, engine: EngineProfile, startup: StartupProfile, initial: int,
             s: SimSettings, *, keep_misses: bool = False, make_engine: Any = None) -> PolicyResult:
    wall0 = time.perf_counter()
    cluster = Cluster(engine, startup, standby=policy.standby, node_idle_s=s.node_idle_s, instant=policy.instant,
                      make_engine=make_engine, draws=s.conditions.startup_draws())
    cluster.start_ready(initial, 0.0)
    policy.start(cluster, 0.0)
    T, N, IN, OUT = work.t.tolist(), work.n.tolist(), work.inp.tolist(), work.out.tolist()
    H = work.hashes.tolist() if work.hashes is not None else None
    HT = work.hash_tokens
    total_n = work.requests
    m = len(T)
    ptr = 0
    dt = s.dt
    step_i = 0
    t = 0.0
    span = work.span_s
    end_limit = span + s.drain_max_s
    warm = s.warmup_s
    gpu_warm = 0.0
    tl_t: list[float] = []
    tl_spec: list[float] = []
    tl_ready: list[float] = []
    tl_wait: list[float] = []
    tl_hold: list[float] = []
    next_sample = 0.0
    next_progress = span / 20 if span > 0 else math.inf
    policy.control(cluster, 0.0, dt)
    while True:
        step_i += 1
        t_next = step_i * dt
        # Arrivals of (t, t_next], each at its own time.
        while ptr < m and T[ptr] < t_next:
            ta = T[ptr]
            cluster.events_until(ta)
            cluster.dispatch(Request(ta, IN[ptr], OUT[ptr], N[ptr]) if H is None
                             else Request(ta, IN[ptr], OUT[ptr], N[ptr], H[ptr], HT))
            ptr += 1
        cluster.advance(t_next)
        if t < span:
            seg = min(t_next, span) - t
            units = cluster.units() * cluster.gpus
            cluster.gpu_seconds += units * seg
            lo = max(t, warm)
            hi = min(t_next, span)
            if hi > lo:
                gpu_warm += units * (hi - lo)
        t = t_next
        policy.control(cluster, t, dt)
        if t >= next_sample and t <= span + dt:
            next_sample = t + s.sample_s
            tl_t.append(round(t, 3))
            tl_spec.append(cluster.spec)
            tl_ready.append(cluster.n_ready())
            tl_wait.append(cluster.waiting_total())
            tl_hold.append(len(cluster.placeholders) + len(cluster.idle_nodes))
        if s.progress is not None and t >= next_progress:
            next_progress = t + span / 20
            s.progress(policy.name, min(1.0, t / span))
        if t >= span and ptr >= m:
            busy = cluster.gateway_n > 0 or any(not p.engine.idle for p in cluster.pods) or cluster.draining
            if not busy or t >= end_limit:
                break
    policy.close()
    # Metrics.
    sink = cluster.ttft_sink
    arr = np.array([x[0] for x in sink], dtype=np.float64)
    ttft = np.array([x[1] for x in sink], dtype=np.float64)
    w = np.array([x[2] for x in sink], dtype=np.float64)
    served = int(w.sum())
    unserved = total_n - served
    if unserved > 0:  # never got a first token before the drain limit: a lower bound on their TTFT
        never = _unserved_arrivals(work, sink)
        ttft = np.concatenate([ttft, np.full(len(never), float(s.drain_max_s))])
        w = np.concatenate([w, [float(x[1]) for x in never]])
        arr = np.concatenate([arr, [x[0] for x in never]])
    ok = ttft <= s.slo_ttft
    attain = float(w[ok].sum()) / total_n if total_n else 1.0
    late = arr >= warm
    n_warm = float(w[late].sum())
    attain_warm = float(w[late & ok].sum()) / n_warm if n_warm > 0 else 1.0
    misses: list[tuple[float, float]] = []
    if keep_misses:
        bad = ~ok
        misses = list(zip(arr[bad].tolist(), ttft[bad].tolist(), strict=True))
    params = policy.params()
    params["initial_replicas"] = initial
    return PolicyResult(
        name=policy.name,
        slo_attainment=attain,
        gpu_hours=cluster.gpu_seconds / 3600.0,
        ttft_p50_s=weighted_quantile(ttft, w, 0.5) if len(w) else 0.0,
        ttft_p99_s=weighted_quantile(ttft, w, 0.99) if len(w) else 0.0,
        cold_starts=cluster.cold_starts,
        max_replicas=cluster.max_replicas,
        requests=total_n,
        served=served,
        wall_s=time.perf_counter() - wall0,
        starts=dict(cluster.starts),
        timeline={"t": tl_t, "spec": tl_spec, "ready": tl_ready, "waiting": tl_wait, "held": tl_hold},
        slo_attainment_warm=attain_warm,
        gpu_hours_warm=gpu_warm / 3600.0,
        params=params,
        misses=misses,
        prefix_cache=cluster.prefix_cache_tokens() if work.hashes is not None else None,
    )


class ScheduleRuns:
    """The simulations of :class:`SchedulePolicy` schedules in one :func:`run_all` (one workload, engine
    and start-up profile), by what a simulation depends on: the schedule, ``instant``, the start fleet
    and the settings. The same schedule comes back several times (``never-scale`` and
    ``static-peak-clairvoyant`` when the peak is the start fleet; static-best's sweep at the start
    fleet; the static-best and clairvoyant-best rows re-simulating the winner of their search): each
    is simulated once and its result copied under the new name and parameters. A simulation is
    deterministic (fresh cluster, engines and start-up draws), so the copy is what simulating again
    gives (``tests/bench/test_sim_speed.py``); only its ``wall_s`` is the lookup's."""

    def __init__(self, work: Workload, engine: EngineProfile, startup: StartupProfile) -> None:
        self.work, self.engine, self.startup = work, engine, startup
        self.results: dict[tuple[Any, ...], PolicyResult] = {}
        self.hits = 0

    def simulate(self, policy: SchedulePolicy, initial: int, s: SimSettings) -> PolicyResult:
        wall0 = time.perf_counter()
        # Every setting but the progress callback (a new field joins the key by itself).
        key = (tuple(policy.times), tuple(policy.counts), policy.instant, initial,
               *(getattr(s, f.name) for f in fields(s) if f.name != "progress"))
        found = self.results.get(key)
        if found is None:
            found = self.results[key] = simulate(self.work, policy, self.engine, self.startup, initial, s)
            return found
        self.hits += 1
        params = policy.params()
        params["initial_replicas"] = initial
        return replace(found, name=policy.name, params=params, starts=dict(found.starts),
                       timeline={k: list(v) for k, v in found.timeline.items()}, misses=list(found.misses),
                       wall_s=time.perf_counter() - wall0)


def _unserved_arrivals(work: Workload, sink: list[tuple[float, float, int]]) -> list[tuple[float, int]]:
    """(arrival, count) of the requests that never got a first token (by arrival time multiset)."""
    served: dict[float, int] = {}
    for ta, _, n in sink:
        served[ta] = served.get(ta, 0) + n
    out = []
    for ta, n in zip(work.t.tolist(), work.n.tolist(), strict=True):
        got = served.get(ta, 0)
        if got >= n:
            served[ta] = got - n
            continue
        if got:
            served[ta] = 0
        out.append((ta, n - got))
    return out


# ---- oracle sizing --------------------------------------------------------------------------------

@dataclass
class NeedCurve:
    grid_s: float
    need: np.ndarray  # replicas needed in each grid cell

    def at(self, t: float) -> int:
        i = min(len(self.need) - 1, max(0, int(t // self.grid_s)))
        return int(self.need[i])


def need_curve(work: Workload, engine: EngineProfile, slo: float, grid_s: float) -> NeedCurve:
    """Replicas needed per grid cell, from the future arrivals: prefill work within the cell,
    and the KV tokens and sequences in flight (each request held for its estimated decode time)."""
    cells = math.ceil((work.span_s + 1.0) / grid_s) + 1
    idx = np.minimum((work.t // grid_s).astype(np.int64), cells - 1)
    prefill_tokens = np.bincount(idx, weights=work.inp * work.n, minlength=cells)
    rate = engine.prefill_rate(engine.max_num_seqs / 8, engine.kv_capacity_tokens / 4)
    need_prefill = prefill_tokens / grid_s / (0.7 * rate)
    tpot = engine.decode_step_s(engine.max_num_seqs / 4, engine.kv_capacity_tokens / 2)
    dur = work.inp / rate + work.out * tpot
    end_idx = np.minimum(((work.t + dur) // grid_s).astype(np.int64) + 1, cells - 1)
    kv = np.zeros(cells + 1)
    seqs = np.zeros(cells + 1)
    np.add.at(kv, idx, (work.inp + work.out) * work.n)
    np.add.at(kv, end_idx, -(work.inp + work.out) * work.n)
    np.add.at(seqs, idx, work.n.astype(np.float64))
    np.add.at(seqs, end_idx, -work.n.astype(np.float64))
    kv_in_flight = np.cumsum(kv)[:cells]
    seqs_in_flight = np.cumsum(seqs)[:cells]
    need = np.maximum.reduce([
        need_prefill,
        kv_in_flight / (0.8 * engine.kv_capacity_tokens),
        seqs_in_flight / (0.8 * engine.max_num_seqs),
        np.ones(cells),
    ])
    return NeedCurve(grid_s=grid_s, need=np.ceil(need - 1e-9).astype(np.int64))


def _intervals(mask: np.ndarray) -> list[tuple[int, int]]:
    out = []
    i, n = 0, len(mask)
    while i < n:
        if mask[i]:
            j = i
            while j < n and mask[j]:
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def schedule_from_need(curve: NeedCurve, *, lead_s: float, breakeven_s: float) -> tuple[list[float], list[int]]:
    """Per level k: cells where need >= k, gaps shorter than ``breakeven_s`` kept on (ski rental:
    a restart costs more than holding), each interval started ``lead_s`` early. Returns a step function."""
    g = curve.grid_s
    need = curve.need
    cells = len(need)
    events = np.zeros(cells + 1, dtype=np.int64)
    lead = math.ceil(lead_s / g)
    gap_cells = breakeven_s / g
    for k in range(1, int(need.max()) + 1):
        ivs = _intervals(need >= k)
        merged: list[list[int]] = []
        for a, b in ivs:
            if merged and a - merged[-1][1] < gap_cells:
                merged[-1][1] = b
            else:
                merged.append([a, b])
        for a, b in merged:
            events[max(0, a - lead)] += 1
            events[b] -= 1
    counts = np.cumsum(events)[:cells]
    times, vals = [], []
    for i, c in enumerate(counts.tolist()):
        if not vals or c != vals[-1]:
            times.append(i * g)
            vals.append(max(1, int(c)))
    return times, vals


def refine_need(work: Workload, curve: NeedCurve, engine: EngineProfile, startup: StartupProfile,
                s: SimSettings, iterations: int, log: Callable[[str], None]) -> tuple[NeedCurve, PolicyResult | None]:
    """Simulate the instant oracle and add a replica around every fixable SLO miss, a few times."""
    rate_alone = engine.prefill_rate(0, 0)
    last: PolicyResult | None = None
    for it in range(iterations + 1):
        times, vals = schedule_from_need(curve, lead_s=0.0, breakeven_s=0.0)
        pol = SchedulePolicy("oracle-instant", times, vals, instant=True)
        res = simulate(work, pol, engine, startup, curve.at(0), s, keep_misses=True)
        last = res
        # A prompt whose prefill alone exceeds the SLO cannot be helped by more replicas.
        fixable = [a for a, ttft in res.misses
                   if ttft > s.slo_ttft and _prefill_alone(work, a) / rate_alone <= 0.9 * s.slo_ttft]
        log(f"oracle sizing pass {it}: attainment {res.slo_attainment:.4f}, gpu-h {res.gpu_hours:.1f}, "
            f"fixable misses {len(fixable)}")
        if it == iterations or not fixable or res.slo_attainment >= 0.998:
            break
        need = curve.need.copy()
        g = curve.grid_s
        bump = np.zeros(len(need), dtype=bool)
        for a in fixable:
            lo = max(0, int((a - 60.0) // g))
            hi = min(len(need), int((a + 10.0) // g) + 1)
            bump[lo:hi] = True
        need[bump] += 1
        curve = NeedCurve(grid_s=g, need=need)
    return curve, last


def _prefill_alone(work: Workload, arrival: float) -> float:
    i = int(np.searchsorted(work.t, arrival))
    i = min(i, len(work.t) - 1)
    return float(work.inp[i])


# ---- all policies ---------------------------------------------------------------------------------

@dataclass
class BenchConfig:
    slo_ttft: float = 2.0
    standby: int | None = None  # warmscale's warm pool: None = standby: auto (the planner), else a fixed count
    warmscale_overrides: dict[str, str] = field(default_factory=dict)
    oracle_iterations: int = 3
    policies: tuple[str, ...] = POLICY_NAMES
    profile: str = "8b-h100"
    start_replicas: int | None = None  # default: start_replicas_from_need (first 5 minutes)
    max_replicas: int | None = None  # default: MAX_REPLICAS[profile]
    start_window_s: float = 300.0
    jobs: int = 1  # the oracle's sizing passes and the policies as tasks on this many forked processes
    references: bool = True  # the bound, static-best and clairvoyant-best (issue 21)
    tuned: bool = False  # also a ``<name>-tuned`` row per reactive baseline in ``policies`` (TUNING)
    search_evals: int = DEFAULT_SEARCH_EVALS  # simulations the clairvoyant-best search may spend
    cache_dir: Path | None = None  # found reference schedules (None: no cache)
    hpa_profile: str = "shipped-example"  # HPA_PROFILES


def tuned_names(bc: BenchConfig) -> list[str]:
    return [n + TUNED_SUFFIX for n in bc.policies if n in TUNING] if bc.tuned else []


def start_replicas_from_need(curve: NeedCurve, window_s: float = 300.0) -> int:
    """What an operator sizes the fleet to before the run: the most replicas the oracle's need asks
    for in the first ``window_s`` seconds (at least 1)."""
    cells = max(1, math.ceil(window_s / curve.grid_s))
    return max(1, int(curve.need[:cells].max()))


# The reactive baselines' main threshold and the values a ``-tuned`` row sweeps (issue 21, requirement
# 2: warmscale against a tuned competitor, not only defaults). The first value is the default row's.
# queue: waiting requests per replica; kv, util: the per-replica target; kpa: the container concurrency
# (KPA targets 70% of it; the default row's value is the per-model KPA_SCALE_TARGET, 16 on every
# profile); wva: the KV threshold (the queue threshold and both spare triggers scaled alike); llm-d:
# the queue divisor of max(queue/q, running/16).
TUNING: dict[str, tuple[float, ...]] = {
    "keda-prometheus-queue": (5.0, 1.0, 2.0, 10.0),
    "keda-prometheus-kv": (0.8, 0.4, 0.6, 0.9),
    "hpa-gpu-util": (0.8, 0.4, 0.6, 0.9),
    "kpa-concurrency": (16.0, 4.0, 8.0, 32.0),
    "llm-d-queue-guard": (1.0, 2.0, 4.0, 8.0),
    "wva-saturation": (0.8, 0.5, 0.6, 0.7),
}
TUNED_SUFFIX = "-tuned"


def reactive_policy(name: str, value: float | None, max_r: int, fast: bool, *, cond: Conditions | None = None,
                    hpa_profile: str = "shipped-example", profile: str = "8b-h100") -> Policy:
    """A reactive baseline with its main threshold at ``value`` (None: its default, TUNING[name][0];
    KPA's: the per-model scaleTarget), loops phased by ``cond``, HPA scale-up per ``hpa_profile``."""
    v = TUNING[name][0] if value is None else value
    beh = hpa_behavior(hpa_profile, subject=False)
    if name == "keda-prometheus-queue":
        return PromHpaPolicy(name, "waiting", v, max_r, fast_signals=fast, behavior=beh, cond=cond)
    if name == "keda-prometheus-kv":
        return PromHpaPolicy(name, "kv", v, max_r, fast_signals=fast, behavior=beh, cond=cond)
    if name == "hpa-gpu-util":
        return PromHpaPolicy(name, "util", v, max_r, use_keda=False, fast_signals=fast, behavior=beh, cond=cond)
    if name == "kpa-concurrency":
        target = kpa_scale_target(profile) if value is None else value
        return KpaPolicy(KpaConfig(max_replicas=max_r, container_concurrency=target), cond=cond)
    if name == "llm-d-queue-guard":
        return LlmdQueueGuardPolicy(max_r, fast_signals=fast, queue_per_replica=v, behavior=beh, cond=cond)
    if name == "wva-saturation":
        return WvaSaturationPolicy(max_r, kv=v, queue=5.0 * v / 0.8, fast_signals=fast, behavior=beh, cond=cond)
    raise ValueError(f"not a reactive baseline: {name!r}")


def default_value(name: str, profile: str) -> float:
    """The main threshold of a reactive baseline's default row (what :func:`reactive_policy` takes for None)."""
    return kpa_scale_target(profile) if name == "kpa-concurrency" else TUNING[name][0]


# What a ``-tuned`` row's cached sweep depends on besides the workload and the settings: the source of
# the modules that simulate a baseline (its policy, the actuation, the cluster, the engine, this runner),
# so that a cached sweep never outlives the code that produced it.
_SWEEP_SOURCES = ("warmscale.benchmarks.sim.policies", "warmscale.benchmarks.sim.cluster",
                  "warmscale.benchmarks.sim.engine", "warmscale.benchmarks.sim.exposition",
                  "warmscale.benchmarks.sim.conditions", "warmscale.benchmarks.sim.runner",
                  "warmscale.simulation.actuation", "warmscale.simulation.profiles", "warmscale.scaler.hpa",
                  "warmscale.simulation.prefix_cache", "warmscale.warmpool.planning",
                  "warmscale.warmpool.startup_model", "warmscale.signals.histogram")


def _sweep_code_digest() -> str:
    import importlib

    h = hashlib.sha256()
    for mod in _SWEEP_SOURCES:
        f = importlib.import_module(mod).__file__
        h.update(Path(f).read_bytes() if f else mod.encode())
    return h.hexdigest()[:16]


def tuned(name: str, work: Workload, engine: EngineProfile, startup: StartupProfile, s: SimSettings,
          bc: BenchConfig, initial: int, default_row: PolicyResult | None = None) -> PolicyResult:
    """``<name>-tuned``: the best of TUNING[name] on this trace - the cheapest that reaches the target,
    else the highest warm attainment to a tenth of a point (then the cheapest).

    The default row (``default_row``: the same policy at its default threshold, same start and
    settings) is not simulated again. The sweep's figures and pick are cached like the references
    (``bc.cache_dir``; keyed by the workload, the member's settings and conditions, the start fleet and
    the simulator's source): a cached sweep simulates only its pick, nothing when the pick is the
    default. The row is the same either way; its ``wall_s`` is the time it spent."""
    base = name.removesuffix(TUNED_SUFFIX)
    max_r = bc.max_replicas or max_replicas_for(bc.profile)
    quiet = replace(s, progress=None)
    values = list(TUNING[base])
    dv = default_value(base, bc.profile)
    wall0 = time.perf_counter()

    def run(v: float) -> PolicyResult:
        if default_row is not None and v == dv:
            return default_row
        return simulate(work, reactive_policy(base, v, max_r, s.fast_signals, cond=s.conditions,
                                              hpa_profile=bc.hpa_profile, profile=bc.profile),
                        engine, startup, initial, quiet)

    cache = ReferenceCache(bc.cache_dir)
    key = cache_key(f"tuned:{base}", work, engine, startup,
                    _reference_settings(s, bc, initial=initial, values=values, default=dv, hpa=bc.hpa_profile,
                                        profile=bc.profile, fast=s.fast_signals, code=_sweep_code_digest()))
    found = cache.get_json(key)
    if found is not None and found.get("values") == values:
        pick, sweep = int(found["pick"]), list(found["sweep"])
        value, res = values[pick], run(values[pick])
    else:
        runs = [(v, run(v)) for v in values]
        meets = [(r.gpu_hours, i) for i, (_, r) in enumerate(runs) if r.slo_attainment_warm >= SLO_TARGET]
        pick = min(meets)[1] if meets else min((-round(r.slo_attainment_warm, 3), r.gpu_hours, i)
                                               for i, (_, r) in enumerate(runs))[2]
        value, res = runs[pick]
        sweep = [{"value": v, "slo_attainment_warm": round(r.slo_attainment_warm, 6),
                  "gpu_hours": round(r.gpu_hours, 4)} for v, r in runs]
        cache.put_json(key, {"values": values, "pick": pick, "sweep": sweep})
    return replace(res, name=name, params={**res.params, "tuned_value": value, "sweep": sweep},
                   wall_s=time.perf_counter() - wall0)


ORACLE_SIZING = "oracle-sizing"


def sized_need(work: Workload, curve: NeedCurve, engine: EngineProfile, startup: StartupProfile, s: SimSettings,
               bc: BenchConfig, log: Callable[[str], None]) -> NeedCurve:
    """:func:`refine_need` from ``curve``, cached like the references (``bc.cache_dir``): the refined
    need and the passes' log lines, keyed by the workload, the need it starts from, the settings, the
    passes and the simulator's source (:func:`_sweep_code_digest`), so that a cached sizing is what the
    passes give again; a re-run replays the log lines and simulates nothing."""
    settings = _reference_settings(s, bc, sample=s.sample_s, fast=s.fast_signals, iterations=bc.oracle_iterations,
                                   grid=curve.grid_s, need=hashlib.sha256(curve.need.tobytes()).hexdigest(),
                                   code=_sweep_code_digest())
    cache = ReferenceCache(bc.cache_dir)
    key = cache_key(ORACLE_SIZING, work, engine, startup, settings)
    found = cache.get_json(key)
    if found is not None and isinstance(found.get("need"), list) and len(found["need"]) == len(curve.need):
        for line in found.get("lines", []):
            log(line)
        return NeedCurve(grid_s=curve.grid_s, need=np.asarray(found["need"], dtype=curve.need.dtype))
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        log(line)

    refined, _ = refine_need(work, curve, engine, startup, s, bc.oracle_iterations, say)
    cache.put_json(key, {"need": refined.need.tolist(), "lines": lines})
    return refined


def build_policies(names: tuple[str, ...], curve: NeedCurve, peak: int, engine: EngineProfile,
                   startup: StartupProfile, s: SimSettings, bc: BenchConfig, initial: int = 1) -> list[Policy]:
    max_r = bc.max_replicas or max_replicas_for(bc.profile)
    ttr_cold = time_to_ready(startup, COLD)
    fast = s.fast_signals
    out: list[Policy] = []
    for name in names:
        if name == "warmscale":
            # No timeToReadySeconds (issue 21, requirement 3): the key's documented default until the
            # warm-pool controller has measured starts, as on a fresh install; never the exact start-up.
            beh = hpa_behavior(bc.hpa_profile, subject=True)
            overrides = dict(bc.warmscale_overrides)
            if beh.tolerance == 0.0:  # the shipped examples pair tolerance 0 with hpaTolerance "0"
                overrides.setdefault("hpaTolerance", "0")
            md = warmscale_metadata(max_r, s.slo_ttft, overrides, None, model_profile_for(bc.profile))
            out.append(WarmscalePolicy(md, startup, bc.standby, beh, KedaConfig(min_replicas=1, max_replicas=max_r),
                                       fast_signals=fast, initial_replicas=initial, cond=s.conditions))
        elif name in TUNING:
            out.append(reactive_policy(name, None, max_r, fast, cond=s.conditions, hpa_profile=bc.hpa_profile,
                                       profile=bc.profile))
        elif name == "dynamo-planner":
            out.append(DynamoPlannerPolicy(engine, max_r, cond=s.conditions))
        elif name == "never-scale":  # issue 21: the start fleet, held; what not autoscaling at all costs
            out.append(SchedulePolicy(name, [0.0], [initial], info={"replicas": initial}))
        elif name == "static-peak-clairvoyant":
            out.append(SchedulePolicy(name, [0.0], [peak], info={"replicas": peak, "knows": "the oracle's peak need"}))
        elif name == "clairvoyant-heuristic":
            breakeven = ttr_cold + s.node_idle_s
            times, vals = schedule_from_need(curve, lead_s=ttr_cold, breakeven_s=breakeven)
            out.append(SchedulePolicy(name, times, vals, info={"lead_s": ttr_cold, "hold_gaps_below_s": breakeven,
                                                               "grid_s": curve.grid_s}))
        elif name == "oracle-instant":
            times, vals = schedule_from_need(curve, lead_s=0.0, breakeven_s=0.0)
            out.append(SchedulePolicy(name, times, vals, instant=True, info={"grid_s": curve.grid_s}))
        else:
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
    return out


def run_all(work: Workload, engine: EngineProfile, startup: StartupProfile, s: SimSettings, bc: BenchConfig,
            log: Callable[[str], None] | None = None, done: Callable[[str], None] | None = None
            ) -> tuple[dict[str, PolicyResult], dict[str, Any]]:
    """Every policy of ``bc`` on ``work``; ``done(name)`` after each task (the oracle's sizing passes,
    then each policy: ``len(bc.policies) + 1`` calls, more when a re-run is needed), for progress."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    tick = done or (lambda name: None)
    grid = max(10.0, s.dt)
    curve = need_curve(work, engine, s.slo_ttft, grid)
    s_oracle = replace(s)  # the sizing passes see the settings as given (before the warm-up default)
    if s.warmup_s <= 0:
        s.warmup_s = time_to_ready(startup, COLD)
    results: dict[str, PolicyResult] = {}

    def report(res: PolicyResult) -> None:
        tick(res.name)
        say(f"{res.name:24s} attainment {res.slo_attainment:.4f}  gpu-h {res.gpu_hours:8.2f}  "
            f"p99 {res.ttft_p99_s:7.2f}s  max {res.max_replicas:3d}  ({res.wall_s:.1f}s)")

    if bc.jobs > 1 and len(bc.policies) > 1:
        curve, initial, finished = _simulate_in_processes(work, curve, engine, startup, s_oracle, s, bc, say, report,
                                                          tick)
        peak = int(curve.need.max())
        results = {name: finished[name] for name in (*bc.policies, *tuned_names(bc),
                                                  *(REFERENCE_ROWS if bc.references else ()))}
    else:
        first_peak = int(curve.need.max())
        curve = sized_need(work, curve, engine, startup, s_oracle, bc, say)
        tick(_SIZING)
        peak = int(curve.need.max())
        initial = _initial(curve, bc)
        runs = ScheduleRuns(work, engine, startup)
        for pol in build_policies(bc.policies, curve, peak, engine, startup, s, bc, initial):
            res = (runs.simulate(pol, initial, s) if type(pol) is SchedulePolicy
                   else simulate(work, pol, engine, startup, initial, s))
            results[pol.name] = res
            report(res)
        for name in tuned_names(bc):
            results[name] = tuned(name, work, engine, startup, s, bc, initial,
                                  default_row=results[name.removesuffix(TUNED_SUFFIX)])
            report(results[name])
        if bc.references:
            for res in reference_rows(work, first_peak, curve, engine, startup, s, bc, initial, runs):
                results[res.name] = res
                report(res)
    meta = {"peak_need": peak, "initial_replicas": initial,
            "initial_replicas_rule": ("--start-replicas" if bc.start_replicas is not None else
                                      f"max of the oracle's need over the first {bc.start_window_s:g} s"),
            "max_replicas": bc.max_replicas or max_replicas_for(bc.profile), "need_grid_s": grid,
            "warmup_s": s.warmup_s}
    if bc.references:
        meta["references"] = references_meta(work, engine, startup, s, results)
    return results, meta


# ---- the cost references (issue 21) --------------------------------------------------------------------

def _evaluator(runs: ScheduleRuns, s: SimSettings) -> Callable[[list[float], list[int], int], PolicyResult]:
    quiet = replace(s, progress=None)

    def evaluate(times: list[float], counts: list[int], initial: int) -> PolicyResult:
        return runs.simulate(SchedulePolicy("search", times, counts), initial, quiet)

    return evaluate


def _reference_settings(s: SimSettings, bc: BenchConfig, **extra: Any) -> dict[str, Any]:
    return {"dt": s.dt, "slo": s.slo_ttft, "warmup": s.warmup_s, "idle": s.node_idle_s, "drain": s.drain_max_s,
            "target": SLO_TARGET, "max_r": bc.max_replicas or max_replicas_for(bc.profile),
            "conditions": s.conditions.to_dict(), **extra}


def _cached(kind: str, work: Workload, engine: EngineProfile, startup: StartupProfile, settings: dict[str, Any],
            bc: BenchConfig, search: Callable[[], SearchOutcome]) -> SearchOutcome:
    cache = ReferenceCache(bc.cache_dir)
    key = cache_key(kind, work, engine, startup, settings)
    found = cache.get(key)
    if found is None:
        t0 = time.perf_counter()
        found = search()
        found.log.append(f"searched in {time.perf_counter() - t0:.1f} s")
        cache.put(key, found)
    return found


def _reference_row(name: str, out: SearchOutcome, runs: ScheduleRuns, s: SimSettings, info: dict[str, Any]
                   ) -> PolicyResult:
    info = {**info, "meets_target": out.meets, "target_warm_attainment": SLO_TARGET,
            "search_simulations": out.evaluations, "cached": out.cached, "search_log": out.log}
    pol = SchedulePolicy(name, out.times, out.counts, info=info)
    return runs.simulate(pol, out.initial, replace(s, progress=None))


def reference_rows(work: Workload, start: int, curve: NeedCurve, engine: EngineProfile, startup: StartupProfile,
                   s: SimSettings, bc: BenchConfig, initial: int, runs: ScheduleRuns | None = None
                   ) -> list[PolicyResult]:
    """The ``static-best`` row (the smallest fixed fleet, all ready at t = 0, that meets the target; the
    sweep starts at ``start``), then ``clairvoyant-best`` (the local search from the refined need, and
    from static-best's fleet held from the common start: benchmarks/sim/references.py). ``runs``: the
    schedule simulations the caller already made (a new set when None)."""
    max_r = bc.max_replicas or max_replicas_for(bc.profile)
    runs = runs if runs is not None else ScheduleRuns(work, engine, startup)
    evaluate = _evaluator(runs, s)
    sb = _cached(STATIC_BEST, work, engine, startup, _reference_settings(s, bc, start=start), bc,
                 lambda: static_best(evaluate, start=start, max_replicas=max_r))
    lead = time_to_ready(startup, COLD)
    breakeven = lead + s.node_idle_s
    flat = sb.replicas
    settings = _reference_settings(s, bc, initial=initial, evals=bc.search_evals, grid=curve.grid_s, flat=flat,
                                   need=hashlib.sha256(curve.need.tobytes()).hexdigest())
    cb = _cached(CLAIRVOYANT_BEST, work, engine, startup, settings, bc,
                 lambda: clairvoyant_best(evaluate, curve.need, curve.grid_s, lead_s=lead, breakeven_s=breakeven,
                                          initial=initial, max_evals=bc.search_evals, flat=flat,
                                          span_s=work.span_s))
    return [_reference_row(STATIC_BEST, sb, runs, s, {"replicas": sb.replicas}),
            _reference_row(CLAIRVOYANT_BEST, cb, runs, s,
                           {"lead_s": lead, "hold_gaps_below_s": breakeven, "grid_s": curve.grid_s})]


def references_meta(work: Workload, engine: EngineProfile, startup: StartupProfile, s: SimSettings,
                    results: dict[str, PolicyResult]) -> dict[str, Any]:
    """The ``references`` object: the bound, and the two searched rows' GPU-hours."""
    floor = 1.0 if s.conditions.exact else STARTUP_MIN_FACTOR
    b = lower_bound(work, engine, startup, slo=s.slo_ttft, warmup_s=s.warmup_s, node_idle_s=s.node_idle_s,
                    startup_floor=floor)
    cb = results.get(CLAIRVOYANT_BEST)
    sb = results.get(STATIC_BEST)
    return {
        "bound_gpu_hours": b.gpu_hours,
        "bound_gpu_hours_warm": b.gpu_hours_warm,
        "clairvoyant_best_gpu_hours": cb.gpu_hours if cb is not None else None,
        "clairvoyant_best_gpu_hours_warm": cb.gpu_hours_warm if cb is not None else None,
        "static_best": {"replicas": sb.params.get("replicas") if sb is not None else None,
                        "gpu_hours": sb.gpu_hours if sb is not None else None},
        "target_warm_attainment": SLO_TARGET,
        "bound_details": {"window_s": b.window_s, "offset_s": b.offset_s,
                          "peak_tokens_per_s_per_replica": round(b.peak_tokens_per_s, 1),
                          "acquisition_s": b.acquisition_s, "idle_tail_s": b.tail_s,
                          "miss_budget_requests": b.miss_budget, "unavoidable_misses": b.unavoidable_misses,
                          "configurations": b.configurations},
    }


def _initial(curve: NeedCurve, bc: BenchConfig) -> int:
    return bc.start_replicas if bc.start_replicas is not None else start_replicas_from_need(curve, bc.start_window_s)


# ---- policies in parallel processes -----------------------------------------------------------------

# What a forked worker needs, set by the parent just before it forks (read-only in the workers).
_FORK_STATE: dict[str, Any] = {}

# Scheduling order in the process pool, longest first as measured on the week-long rate curve
# (docs/benchmarks.md, "The week"): the oracle's sizing passes (they gate the clairvoyant rows), then
# the reactive policies that can scale to ``maxReplicas``, then the rest. Only the order changes
# with it, never a result.
_REFERENCES = "(references)"
_COST_RANK = (_REFERENCES, "keda-prometheus-queue", "warmscale", "hpa-gpu-util",
              "keda-prometheus-kv", "kpa-concurrency", "llm-d-queue-guard", "wva-saturation", "dynamo-planner",
              "never-scale",
              "static-peak-clairvoyant", "clairvoyant-heuristic", "oracle-instant")
_SIZING = "(oracle sizing)"


def _job(name: str, initial: int, need: np.ndarray | None) -> tuple[str, int, Any]:
    """One task in a worker: the oracle's sizing passes (``name == _SIZING``: returns the refined need
    and the passes' log lines), or one policy's simulation from ``initial`` replicas (``need``: the
    refined need, for the clairvoyant policies; the reactive ones do not read it)."""
    st = _FORK_STATE
    if name == _SIZING:
        lines: list[str] = []
        curve = sized_need(st["work"], st["curve"], st["engine"], st["startup"], st["s_oracle"], st["bc"],
                           lines.append)
        return name, initial, (curve.need, lines)
    curve = st["curve"] if need is None else NeedCurve(grid_s=st["curve"].grid_s, need=need)
    if name.endswith(TUNED_SUFFIX):  # the default row too: the sweep's default value is that simulation
        base = name.removesuffix(TUNED_SUFFIX)
        (pol,) = build_policies((base,), curve, int(curve.need.max()), st["engine"], st["startup"], st["s"],
                                st["bc"], initial)
        default = simulate(st["work"], pol, st["engine"], st["startup"], initial, st["s"])
        return name, initial, [default, tuned(name, st["work"], st["engine"], st["startup"], st["s"], st["bc"],
                                              initial, default_row=default)]
    if name == _REFERENCES:  # static-best's sweep from the unrefined peak, as in the sequential path
        return name, initial, reference_rows(st["work"], int(st["curve"].need.max()), curve, st["engine"],
                                             st["startup"], st["s"], st["bc"], initial)
    peak = int(curve.need.max())
    (pol,) = build_policies((name,), curve, peak, st["engine"], st["startup"], st["s"], st["bc"], initial)
    return name, initial, simulate(st["work"], pol, st["engine"], st["startup"], initial, st["s"])


def _simulate_in_processes(work: Workload, curve: NeedCurve, engine: EngineProfile, startup: StartupProfile,
                           s_oracle: SimSettings, s: SimSettings, bc: BenchConfig, say: Callable[[str], None],
                           report: Callable[[PolicyResult], None], tick: Callable[[str], None]
                           ) -> tuple[NeedCurve, int, dict[str, PolicyResult]]:
    """The oracle's sizing passes and every policy as tasks on ``bc.jobs`` forked processes, longest
    first; the same inputs, so the same results as one after the other (each simulation is
    deterministic and shares nothing with the others).

    Only the clairvoyant policies read the refined need; the reactive ones read only the start fleet,
    which the refined need decides too (its first ``start_window_s``). They start at once from the
    fleet the unrefined need gives (the sizing passes only ever add replicas, mostly where the
    instant oracle missed, rarely in the first minutes) and are simulated again from the refined
    one in the rare case it differs; a result from another start is never used.
    Returns the refined need curve, the start fleet and the results."""
    import multiprocessing as mp
    import queue

    guess = _initial(curve, bc)
    rank = {n: i for i, n in enumerate(_COST_RANK)}
    order = sorted(bc.policies, key=lambda n: rank.get(n, -1))  # an unranked name: first (unknown cost)
    todo: list[tuple[str, int, np.ndarray | None]] = [(_SIZING, guess, None)]
    swept = {n.removesuffix(TUNED_SUFFIX) for n in tuned_names(bc)}  # their default rows come with the sweep
    order = [*tuned_names(bc), *(n for n in order if n not in swept)]  # a sweep: the longest tasks
    todo += [(n, guess, None) for n in order if n not in CLAIRVOYANT]
    later = [n for n in order if n in CLAIRVOYANT]  # after the sizing passes
    if bc.references:
        later.append(_REFERENCES)
    _FORK_STATE.update(work=work, curve=curve, engine=engine, startup=startup, s=s, s_oracle=s_oracle, bc=bc)
    out: dict[str, PolicyResult] = {}
    refined: NeedCurve | None = None
    initial = guess
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    try:
        ctx = mp.get_context("fork")
        with ctx.Pool(max(1, min(bc.jobs, len(order) + 2))) as pool:
            in_flight = 0

            def submit() -> None:
                nonlocal in_flight
                while todo and in_flight < bc.jobs:
                    args = todo.pop(0)
                    pool.apply_async(_job, args, callback=inbox.put, error_callback=inbox.put)
                    in_flight += 1

            submit()
            while in_flight:
                got = inbox.get()
                in_flight -= 1
                if isinstance(got, BaseException):
                    raise got
                name, start, value = got
                if name == _SIZING:
                    need, lines = value
                    tick(_SIZING)
                    for line in lines:
                        say(line)
                    refined = NeedCurve(grid_s=curve.grid_s, need=need)
                    initial = _initial(refined, bc)
                    if initial != guess:  # the reactive policies again, from the refined start
                        say(f"start fleet {guess} -> {initial} after the oracle's sizing: reactive policies re-run")
                        out.clear()  # only reactive results so far, all from the guess
                        todo[:] = [(n, initial, None) for n in order if n not in CLAIRVOYANT]
                    todo[:] = sorted(todo + [(n, initial, need) for n in later], key=lambda a: rank.get(a[0], -1))
                elif name == _REFERENCES or start == initial:  # else from a start the sizing passes overruled
                    for res in value if isinstance(value, list) else [value]:
                        out[res.name] = res
                        report(res)
                submit()
    finally:
        _FORK_STATE.clear()
    assert refined is not None
    return refined, initial, out
