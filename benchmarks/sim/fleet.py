"""Several models on one cluster, each with its own trace, Deployment and scaler, in lockstep.

Every model is a :class:`benchmarks.sim.cluster.Cluster` driven by one of the bench's policies
(:mod:`benchmarks.sim.policies`: the production tracker for warmscale, the KEDA/HPA baseline for
KEDA), stepped together so that a shared hot pool (:mod:`benchmarks.sim.hotpool`) sees every model's
decisions at the same simulated time. Arrivals, control ticks and GPU accounting are those of
:func:`benchmarks.sim.runner.simulate`; a model's GPUs are its Deployment's (pods, draining pods, idle
nodes, placeholders), the pool's GPUs are charged once for the fleet, in full.

A run's conditions (``SimSettings.conditions``, :mod:`benchmarks.sim.conditions`) are one member's, as
in the trace bench: every model's replicas draw their start-up factors from the member's one stream, in
creation order across the fleet, and every model's loops take the member's phase per loop kind (one
cluster's controllers). A trace with block ids (mooncake-conv) is replayed with prefix caching.

The configurations (``CONFIGS``), as their users write them:

- ``keda-min1``: per model, KEDA's Prometheus scaler on ``sum(vllm:num_requests_waiting)`` (target 5),
  ``minReplicaCount: 1`` (the trace bench's ``keda-prometheus-queue``);
- ``keda-zero``: the same with ``minReplicaCount: 0`` (KEDA's cooldown 300 s to zero) and a second
  trigger on ``sum(vllm:num_requests_running)`` that keeps it active while requests run (without it,
  ``keda-zero-waiting-only``, a fleet that serves without a queue is scaled to zero under load);
- ``warmscale-warm``: per model, warmscale with ``minReplicas: 1`` and a warm pool (``standby: auto``),
  as the trace bench runs it;
- ``warmscale-hot``: warmscale with ``minReplicas: 0`` and the warm pool, plus one sleeper per model in
  a shared hot pool (``hot-standby: "1"``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from warmscale.benchmarks.sim.arrivals import Workload, rotated, truncate, weighted_quantile
from warmscale.benchmarks.sim.cluster import Cluster
from warmscale.benchmarks.sim.conditions import Conditions
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, Request
from warmscale.benchmarks.sim.hotpool import HotCluster, HotPool, build_pool
from warmscale.benchmarks.sim.policies import (
    Policy,
    PromHpaPolicy,
    WarmscalePolicy,
    cold_start_for,
    max_replicas_for,
    model_profile_for,
    warmscale_metadata,
)
from warmscale.benchmarks.sim.runner import SimSettings, need_curve, start_replicas_from_need
from warmscale.simulation.actuation import HpaBehavior, KedaConfig
from warmscale.warmpool.startup_model import PROFILES

CONFIGS = ("keda-min1", "keda-zero", "warmscale-warm", "warmscale-hot")
# keda-zero with the queue trigger alone (no trigger on running requests): not in CONFIGS; --configs names it.
KEDA_ZERO_WAITING_ONLY = "keda-zero-waiting-only"
# The KEDA baseline's trigger: the trace bench's keda-prometheus-queue (vllm:num_requests_waiting, 5 per replica).
KEDA_QUEUE_TARGET = 5.0


@dataclass(frozen=True)
class ModelSpec:
    """One model of the fleet: a shipped trace (rotated by ``rotation`` of its length), a profile, its SLO."""

    name: str
    trace: str
    rotation: float
    profile: str
    slo_ttft: float


# Six models from the shipped per-request traces (warmscale/traces), rotations counted as distinct
# models, 8B and 70B-TP4 profiles; SLOs as the trace suite sets them (benchmarks/suite.py RUNS:
# Mooncake's long prompts take 10 s on 8B).
FLEET: tuple[ModelSpec, ...] = (
    ModelSpec("code-8b-a", "azure-code", 0.0, "8b-h100", 2.0),
    ModelSpec("code-8b-b", "azure-code", 1 / 3, "8b-h100", 2.0),
    ModelSpec("conv-8b", "azure-conv", 0.0, "8b-h100", 2.0),
    ModelSpec("mooncake-8b", "mooncake-conv", 0.0, "8b-h100", 10.0),
    ModelSpec("code-70b", "azure-code", 2 / 3, "70b-h100-tp4", 2.0),
    ModelSpec("conv-70b", "azure-conv", 1 / 2, "70b-h100-tp4", 2.0),
)


@dataclass
class Member:
    spec: ModelSpec
    work: Workload
    initial: int
    policy: Policy
    cluster: Cluster


@dataclass
class FleetResult:
    config: str
    span_s: float
    per_model: dict[str, dict[str, Any]]
    deployment_gpu_hours: float
    pool_gpus: int
    wakes: int = 0
    failed_wakes: int = 0
    wake_to_first_token_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    pool: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_hours(self) -> float:
        return self.deployment_gpu_hours + self.pool_gpus * self.span_s / 3600.0


def model_work(spec: ModelSpec, hours: float | None, traces: str | None, dt: float, *,
               prefix_cache: bool = True) -> Workload:
    """The model's arrivals: the shipped trace (with its block ids if it has them and ``prefix_cache``),
    truncated to ``hours``, then rotated."""
    from warmscale.benchmarks.sim.arrivals import load_trace
    from warmscale.traces import resolve

    work = load_trace(resolve(spec.trace, traces), dt=dt, seed=1, prefix_cache=prefix_cache)
    if hours is not None:
        work = truncate(work, hours * 3600.0)
    if spec.rotation:
        work = rotated(work, spec.rotation)
    work.name = spec.name
    return work


def initial_replicas(spec: ModelSpec, work: Workload, s: SimSettings) -> int:
    """The fleet every configuration starts with: the trace bench's rule (the oracle's need over the
    first 5 minutes; :func:`benchmarks.sim.runner.start_replicas_from_need`)."""
    curve = need_curve(work, ENGINE_PROFILES[spec.profile], spec.slo_ttft, max(10.0, s.dt))
    return start_replicas_from_need(curve)


def build_policy(config: str, spec: ModelSpec, initial: int, fast: bool, cond: Conditions | None = None) -> Policy:
    """The model's scaler under ``config``; ``cond``: the member's loop phases (None: every phase 0)."""
    max_r = max_replicas_for(spec.profile)
    if config == "keda-min1":
        keda = KedaConfig(min_replicas=1, max_replicas=max_r)
        return PromHpaPolicy(config, "waiting", KEDA_QUEUE_TARGET, max_r, keda=keda, fast_signals=fast, cond=cond)
    if config in ("keda-zero", KEDA_ZERO_WAITING_ONLY):
        # minReplicaCount 0. KEDA is active while its triggers' value is above the activation threshold
        # (0): a user who scales to zero adds a trigger on vllm:num_requests_running, else a fleet that
        # serves without a queue looks inactive and is scaled to zero under load after the cooldown
        # (KEDA_ZERO_WAITING_ONLY: that configuration, for the docs).
        keda = KedaConfig(min_replicas=0, max_replicas=max_r)
        act = ("waiting", "running") if config == "keda-zero" else ("waiting",)
        zero = PromHpaPolicy(config, "waiting", KEDA_QUEUE_TARGET, max_r, keda=keda, fast_signals=fast,
                             activation=act, cond=cond)
        assert zero.kedal is not None
        # The start fleet was serving before the trace starts: KEDA's cooldown to zero runs from t = 0
        # (its first poll, before any scrape, would otherwise find it inactive and scale it to zero).
        zero.kedal.last_active_at = 0.0
        return zero
    if config not in ("warmscale-warm", "warmscale-hot"):
        raise ValueError(f"unknown configuration {config!r}; known: {', '.join(CONFIGS)}")
    floor = 1 if config == "warmscale-warm" else 0
    md = warmscale_metadata(max_r, spec.slo_ttft, {"minReplicas": str(floor)}, cold_start_for(spec.profile),
                            model_profile_for(spec.profile))
    # As build_policies runs warmscale: scale-down stabilised by the scaler, not the HPA; standby: auto.
    beh = HpaBehavior(scale_down_stabilization_s=0.0, scale_up_pods=max_r)
    pol = WarmscalePolicy(md, PROFILES[spec.profile], None, beh, KedaConfig(min_replicas=floor, max_replicas=max_r),
                          fast_signals=fast, workload=spec.name, initial_replicas=initial, cond=cond)
    pol.name = config
    pol.keda.last_active_at = 0.0  # as for keda-zero: the cooldown to zero runs from t = 0
    return pol


def _attainment(work: Workload, sink: list[tuple[float, float, int]], slo: float) -> tuple[float, float, float]:
    """(share of requests with TTFT <= SLO, TTFT p50, p99); a request never served counts as a miss."""
    total = work.requests
    if not sink:
        return (0.0 if total else 1.0), math.nan, math.nan
    ttft = np.array([x[1] for x in sink], dtype=np.float64)
    w = np.array([x[2] for x in sink], dtype=np.float64)
    ok = float(w[ttft <= slo].sum())
    return (ok / total if total else 1.0), weighted_quantile(ttft, w, 0.5), weighted_quantile(ttft, w, 0.99)


def simulate_fleet(config: str, specs: tuple[ModelSpec, ...], works: dict[str, Workload], initial: dict[str, int],
                   s: SimSettings, *, level: int = 1, faulty_wake: Callable[[str, int], bool] | None = None,
                   progress: Callable[[float], None] | None = None) -> tuple[FleetResult, HotPool | None]:
    """One configuration on the whole fleet, every model in lockstep (see the module's docstring)."""
    wall0 = time.perf_counter()
    hot_on = config == "warmscale-hot"
    members: list[Member] = []
    draws = s.conditions.startup_draws()  # one stream for the fleet (the module's docstring)
    for spec in specs:
        pol = build_policy(config, spec, initial[spec.name], s.fast_signals, s.conditions)
        kind = HotCluster if hot_on else Cluster
        cluster = kind(ENGINE_PROFILES[spec.profile], PROFILES[spec.profile], standby=pol.standby,
                       node_idle_s=s.node_idle_s, draws=draws)
        members.append(Member(spec, works[spec.name], initial[spec.name], pol, cluster))
    hot: HotPool | None = None
    if hot_on:
        hot = build_pool([(m.spec.name, m.spec.profile, ENGINE_PROFILES[m.spec.profile], m.cluster)  # type: ignore[misc]
                          for m in members], level)
        if faulty_wake is not None:
            hot.faulty_wake = faulty_wake
    span = max(m.work.span_s for m in members)
    arrays = [(m.work.t.tolist(), m.work.n.tolist(), m.work.inp.tolist(), m.work.out.tolist()) for m in members]
    hashes = [m.work.hashes.tolist() if m.work.hashes is not None else None for m in members]
    ptrs = [0] * len(members)
    for m in members:
        m.cluster.start_ready(m.initial, 0.0)
        m.policy.start(m.cluster, 0.0)
        m.policy.control(m.cluster, 0.0, s.dt)
    dt, t, step_i = s.dt, 0.0, 0
    end_limit = span + s.drain_max_s
    next_progress = span / 20 if span > 0 else math.inf
    while True:
        step_i += 1
        t_next = step_i * dt
        for k, m in enumerate(members):
            T, N, IN, OUT = arrays[k]
            H, HT = hashes[k], m.work.hash_tokens
            c = m.cluster
            while ptrs[k] < len(T) and T[ptrs[k]] < t_next:
                i = ptrs[k]
                c.events_until(T[i])
                c.dispatch(Request(T[i], IN[i], OUT[i], N[i]) if H is None
                           else Request(T[i], IN[i], OUT[i], N[i], H[i], HT))
                ptrs[k] += 1
            c.advance(t_next)
            if t < span:
                c.gpu_seconds += c.units() * c.gpus * (min(t_next, span) - t)
        if hot is not None:
            hot.step(t_next)
        t = t_next
        for m in members:
            seen = getattr(m.policy, "decisions", 0)
            m.policy.control(m.cluster, t, dt)
            if hot is not None and isinstance(m.policy, WarmscalePolicy) and m.policy.decisions != seen:
                assert m.policy.last is not None
                hot.on_decision(m.spec.name, m.policy.last.desired, t)
        if progress is not None and t >= next_progress:
            next_progress = t + span / 20
            progress(min(1.0, t / span))
        if t >= span and all(ptrs[k] >= len(arrays[k][0]) for k in range(len(members))):
            busy = any(m.cluster.gateway_n > 0 or any(not p.engine.idle for p in m.cluster.pods)
                       or m.cluster.draining or (isinstance(m.cluster, HotCluster) and m.cluster.busy())
                       for m in members)
            if not busy or t >= end_limit:
                break
    for m in members:
        m.policy.close()
    if hot is not None:
        hot.close()
    per_model: dict[str, dict[str, Any]] = {}
    dep_gpu_s = 0.0
    for m in members:
        att, p50, p99 = _attainment(m.work, m.cluster.ttft_sink, m.spec.slo_ttft)
        dep_gpu_s += m.cluster.gpu_seconds
        per_model[m.spec.name] = {"slo_attainment": att, "ttft_p50_s": p50, "ttft_p99_s": p99,
                                  "deployment_gpu_hours": m.cluster.gpu_seconds / 3600.0,
                                  "requests": m.work.requests, "cold_starts": m.cluster.cold_starts,
                                  "max_replicas": m.cluster.max_replicas, "starts": dict(m.cluster.starts)}
        if m.work.hashes is not None:  # the Deployment's replicas' prefix caches (vLLM's hit rate, in tokens)
            q, h = m.cluster.prefix_cache_tokens()
            per_model[m.spec.name]["prefix_cache_hit_rate"] = h / q if q > 0 else 0.0
    res = FleetResult(config, span, per_model, dep_gpu_s / 3600.0, hot.gpus() if hot is not None else 0)
    if hot is not None:
        res.wakes, res.failed_wakes = hot.wakes, hot.failed_wakes
        res.wake_to_first_token_s = list(hot.wake_to_first_token)
        res.pool = {name: {"gpus": [g.device for g in p.gpus], "awake_per_gpu": p.awake_per_gpu,
                           "placements": [[pl.workload, pl.device] for pl in hot.plans[name].placements],
                           "left_out": [list(x) for x in hot.plans[name].left_out]}
                    for name, p in hot.pools.items()}
    res.wall_s = time.perf_counter() - wall0
    return res, hot
