"""The autoscaling policies compared by the trace replay, each with its actuation path.

``warmscale`` runs the production code path end to end: each ready replica renders its ``/metrics``
text, :class:`benchmarks.sim.exposition.SimScrapeSource` parses it with the production parser, the
production :class:`signals.sources.collector.SnapshotCollector` gathers the snapshot and a production
:class:`scaler.tracker.Tracker` (in-memory store, simulated clock) runs ``observe`` + ``decide`` every
``scrapeIntervalSeconds`` (production default 1 s), filling its look-ahead from the
:class:`scaler.warm_status.WarmStatus` the warm-pool controller publishes (measured time-to-ready
medians from :class:`warmpool.planning.TimeToReady`; the config's ``timeToReadySeconds`` until a
measurement exists). The decision goes through KEDA (push activation) and the HPA (External
AverageValue, ``metric_value`` compensating the tolerance) to the Deployment.

Its warm pool is sized by the warm-pool planner's pure code: every ``PLAN_EVERY_S`` (the controller's
resync) :func:`warmpool.planning.plan` runs on the workload (annotations ``warmscale.io/standby: auto``,
or the ``--standby N`` override) and the simulated placeholder pods, with the burst statistics the
tracker published to the store (:mod:`scaler.bursts`), the measured time-to-ready and the last size,
as :class:`warmpool.controller.Controller` gathers them; the cluster applies the count it decides.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from warmscale.benchmarks.sim.cluster import Cluster
from warmscale.benchmarks.sim.conditions import Conditions
from warmscale.benchmarks.sim.engine import EngineProfile
from warmscale.benchmarks.sim.exposition import PromScrape, SimScrapeSource
from warmscale.scaler.capacity import MODEL_PROFILES
from warmscale.scaler.config import ScalerConfig, parse_metadata
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.policy import Decision
from warmscale.scaler.store import MemoryStore
from warmscale.scaler.tracker import ScaledObjectKey, Tracker, TrackerManager
from warmscale.scaler.warm_status import WarmStatus
from warmscale.signals.model import Snapshot
from warmscale.signals.sources.collector import SnapshotCollector
from warmscale.simulation.actuation import Hpa, HpaBehavior, Keda, KedaConfig, Kpa, KpaConfig
from warmscale.warmpool import objects as ob
from warmscale.warmpool.planning import Plan, StandbyEvidence, plan, standby_time_to_ready
from warmscale.warmpool.startup_model import COLD, PROFILES, StartupProfile, time_to_ready

NAMESPACE, WORKLOAD = "bench", "llm"
PLAN_EVERY_S = 30.0  # the warm-pool controller's resync period (Options.resync_s)


def bench_workload(standby: int | None, replicas: int, name: str = WORKLOAD) -> ob.Workload:
    """The simulated Deployment the warm-pool planner sees (standby None: ``auto``)."""
    ann = {"warmscale.io/enabled": "true", "warmscale.io/standby": "auto" if standby is None else str(standby)}
    tmpl = {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return ob.Workload(kind="Deployment", namespace=NAMESPACE, name=name, uid=f"bench-{name}", replicas=replicas,
                       template=tmpl, annotations=ann, selector={"app": name})


def placeholder_pods(wl: ob.Workload, available_at: list[float], now: float) -> list[dict[str, Any]]:
    """The placeholder pods the planner sees for the cluster's placeholders (Running once staged)."""
    return [{"metadata": {"name": ob.placeholder_name(wl, i), "namespace": wl.namespace,
                          "labels": ob.labels(wl, "placeholder"), "annotations": {ob.PIN_ANN: ob.pin_hash(None)}},
             "spec": {}, "status": {"phase": "Running" if t <= now else "Pending"}}
            for i, t in enumerate(sorted(available_at))]


class Policy:
    name = "base"
    standby = 0
    instant = False

    def params(self) -> dict[str, Any]:
        return {}

    def start(self, cluster: Cluster, now: float) -> None:
        pass

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


# ---- warmscale ---------------------------------------------------------------------------------

def warmscale_metadata(max_replicas: int, slo_ttft: float, overrides: dict[str, str] | None = None,
                       time_to_ready_s: float | None = None, model_profile: str | None = None) -> dict[str, str]:
    """The trigger metadata a user writes for the benchmark's warmscale; ``time_to_ready_s`` is the
    ``timeToReadySeconds`` they write (:func:`cold_start_for`), else the key's default (120 s);
    ``model_profile`` the ``modelProfile`` they write (:func:`model_profile_for`), else none."""
    md = {
        "endpoints": "http://simulated-engine:8000/metrics",  # the simulator's SimScrapeSource serves it
        "engine": "vllm",
        "minReplicas": "1",
        "maxReplicas": str(max_replicas),
        "ttftSloSeconds": f"{slo_ttft:g}",
        "ttftQuantile": "0.95",
        "ttftWindowSeconds": "60",
        # No targetInflightPerReplica: the per-replica capacity is learned from the engines' token
        # counters (scaler/capacity.py, issue 12), starting from the modelProfile's prior when the
        # operator names one (model_profile_for), else the engine's generic prior.
        "scaleDownStabilizationSeconds": "600",
        # The simulated cluster provisions GPU nodes on demand and keeps an unneeded one 10 minutes
        # (benchmarks/sim/cluster.py node_idle_s, cluster-autoscaler's default): its users write that.
        "nodeIdleSeconds": "600",
    }
    if time_to_ready_s is not None:
        md["timeToReadySeconds"] = f"{time_to_ready_s:g}"
    if model_profile is not None:
        md["modelProfile"] = model_profile
    md.update(overrides or {})
    return md


class WarmscalePolicy(Policy):
    name = "warmscale"

    def __init__(self, metadata: dict[str, str], startup: StartupProfile, standby: int | None,
                 hpa_behavior: HpaBehavior, keda: KedaConfig, *, fast_signals: bool = False,
                 store: MemoryStore | None = None, workload: str = WORKLOAD, clock: list[float] | None = None,
                 initial_replicas: int = 1, cond: Conditions | None = None) -> None:
        cond = cond or Conditions()
        self.metadata = metadata
        self.cfg: ScalerConfig = parse_metadata(metadata)
        self.sp = startup
        self.standby_override = standby
        self.warm_workload = bench_workload(standby, initial_replicas, workload)
        self.next_plan = cond.phase("plan", PLAN_EVERY_S) or PLAN_EVERY_S
        self.standby_last: int | None = None
        self.plans: list[tuple[float, int, int]] = []  # (time, planned, placeholders held after applying)
        self.plan_inputs: list[tuple[ob.Workload, list[dict[str, Any]], StandbyEvidence]] | None = None  # tests
        # the size at t = 0: no burst statistics yet (auto: 0), else the override
        self.standby = self.plan_at(0.0, [], StandbyEvidence()).standby
        self.last: Decision | None = None
        self.hpa = Hpa(keda.min_replicas, self.cfg.max_replicas, hpa_behavior,
                       phase_s=cond.phase("sync", hpa_behavior.sync_period_s))
        self.keda = Keda(keda, phase_s=cond.phase("poll", keda.polling_interval_s))
        self.keda_cfg = keda
        self.next_scrape = cond.phase("scrape", self.cfg.scrape_interval_seconds)
        self.decisions = 0
        self.reasons: dict[str, int] = {}
        self.fast = fast_signals
        self.now = 0.0
        self.workload = workload
        # The roles of a P/D fleet share one store (the pdGroup ratio bound) and one simulated clock.
        self._clock = clock if clock is not None else [0.0]
        self.cluster: Cluster | None = None
        self.loop = asyncio.new_event_loop()
        self.store = store if store is not None else MemoryStore(clock=lambda: self._clock[0])
        self.source = SimScrapeSource(self._pods, self._queue, fast=fast_signals)
        self.collector = SnapshotCollector([self.source], staleness_seconds=self.cfg.staleness_seconds,
                                           deadline=self.cfg.scrape_timeout_seconds + 1.0, clock=lambda: self.now)
        self.manager = TrackerManager(self.store, self._read, ScalerMetrics(), DecisionLog(), instance_id="bench",
                                      clock=lambda: self.now)
        self.tracker = Tracker(self.manager, NAMESPACE, workload, dict(metadata), self.cfg)
        self.snapshots: list[Snapshot] | None = None  # set to a list to record every snapshot (tests)

    def params(self) -> dict[str, Any]:
        sizes = [n for _, n, _ in self.plans] or [self.standby]
        return {"metadata": self.metadata,
                "standby": "auto" if self.standby_override is None else self.standby_override,
                "standby_placeholders": {"min": min(sizes), "max": max(sizes), "last": sizes[-1],
                                         "mean": round(sum(sizes) / len(sizes), 3)},
                "hpa": self.hpa.b.to_dict(), "keda": self.keda_cfg.to_dict(), "trigger": "external-push",
                "signals": "rendered text -> production parsers" if not self.fast else "fast (engine objects)",
                "scrape_interval_s": self.cfg.scrape_interval_seconds}

    def _pods(self) -> list[Any]:
        assert self.cluster is not None
        return list(self.cluster.ready_pods())

    def _queue(self) -> float:
        assert self.cluster is not None
        return float(self.cluster.gateway_n)

    async def _read(self, cfg: ScalerConfig, now: float, key: ScaledObjectKey) -> Snapshot:
        """The scaler's snapshot reader: the collector, plus the pod counts pod discovery reports."""
        c = self.cluster
        assert c is not None
        snap = await self.collector.collect(now)
        snap = replace(snap, ready_replicas=c.n_ready(), starting_replicas=c.n_starting(),
                       current_replicas=c.spec, target_name=self.workload)
        if self.snapshots is not None:
            self.snapshots.append(snap)
        return snap

    def plan_at(self, now: float, pods: list[dict[str, Any]], evidence: StandbyEvidence) -> Plan:
        """The warm-pool planner's decision for the simulated workload (production code, pure)."""
        return plan(self.warm_workload, [], pods, [], None, datetime.fromtimestamp(now, UTC), standby=evidence)

    def _evidence(self, c: Cluster) -> StandbyEvidence:
        """What the controller gathers (warmpool.controller.Controller._standby_evidence)."""
        bursts = self.loop.run_until_complete(self.store.get_burst_stats(NAMESPACE, self.workload))
        return StandbyEvidence(bursts=bursts, last=self.standby_last,
                               time_to_ready=standby_time_to_ready(c.ttr.medians()))

    def _plan_warm_pool(self, c: Cluster, now: float) -> None:
        self.warm_workload = replace(self.warm_workload, replicas=c.spec)
        pods, evidence = placeholder_pods(self.warm_workload, c.placeholders, now), self._evidence(c)
        if self.plan_inputs is not None:
            self.plan_inputs.append((self.warm_workload, pods, evidence))
        p = self.plan_at(now, pods, evidence)
        self.standby_last = p.standby
        c.set_standby(p.standby, now)
        self.plans.append((now, p.standby, len(c.placeholders)))

    async def _tick(self, c: Cluster, now: float) -> None:
        # The warm-pool controller publishes its status (measured time-to-ready) as in production.
        status = WarmStatus(namespace=NAMESPACE, name=self.workload, updated_at=now,
                            placeholders_ready=c.placeholders_ready(now), staged_nodes=c.placeholders_ready(now),
                            ready_replicas=c.n_ready(), starting_replicas=c.n_starting(), spec_replicas=c.spec,
                            time_to_ready_s=c.ttr.medians())
        await self.store.put_warm_status(NAMESPACE, self.workload, status)
        await self.tracker.tick()

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        self.cluster = cluster
        if now + 1e-9 >= self.next_plan:
            self.next_plan = now + PLAN_EVERY_S
            self._plan_warm_pool(cluster, now)
        if now + 1e-9 >= self.next_scrape:
            self.next_scrape = now + max(self.cfg.scrape_interval_seconds, dt)
            self.now = now
            self._clock[0] = now
            self.loop.run_until_complete(self._tick(cluster, now))
            decision = self.tracker.decision
            if decision is not None:
                self.last = decision
                self.decisions += 1
                self.reasons[decision.reason] = self.reasons.get(decision.reason, 0) + 1
                if decision.active and cluster.spec == 0:  # StreamIsActive(true): KEDA scales 0 -> 1 now
                    cluster.set_spec(self.keda.push(now, True, 0), now)
        if self.last is None:
            return
        if self.keda.poll_due(now):
            n = self.keda.poll(now, self.last.active, cluster.spec)
            if n != cluster.spec:
                cluster.set_spec(n, now)
        if cluster.spec > 0 and self.hpa.due(now):
            raw = self.hpa.raw_external_average(self.last.metric_value, self.last.metric_target, cluster.spec)
            n = self.hpa.sync(now, cluster.spec, raw)
            if n != cluster.spec:
                cluster.set_spec(n, now)

    def close(self) -> None:
        self.loop.close()


# ---- Prometheus-fed KEDA/HPA baselines --------------------------------------------------------

class PromHpaPolicy(Policy):
    """KEDA Prometheus scaler (or prometheus-adapter) -> HPA, metric read from Prometheus."""

    def __init__(self, name: str, metric: str, target: float, max_replicas: int, *, scrape_s: float = 15.0,
                 behavior: HpaBehavior | None = None, keda: KedaConfig | None = None, use_keda: bool = True,
                 fast_signals: bool = False, activation: tuple[str, ...] | None = None,
                 cond: Conditions | None = None) -> None:
        cond = cond or Conditions()
        self.name = name
        self.metric = metric  # "waiting" | "kv" | "util"
        # What KEDA's IsActive sums (default: the scaling metric; a second trigger may add e.g. "running").
        self.activation = activation or (metric,)
        self.target = target
        self.max_replicas = max_replicas
        self.scrape_s = scrape_s
        self.behavior = behavior or HpaBehavior()
        self.keda = (keda or KedaConfig(max_replicas=max_replicas)) if use_keda else None
        self.prom = PromScrape(self.scrape_s, fast=fast_signals, phase_s=cond.phase("scrape", self.scrape_s))
        self.hpa = Hpa(1, self.max_replicas, self.behavior, phase_s=cond.phase("sync", self.behavior.sync_period_s))
        self.kedal = (Keda(self.keda, phase_s=cond.phase("poll", self.keda.polling_interval_s))
                      if self.keda is not None else None)

    def params(self) -> dict[str, Any]:
        query = {"waiting": "sum(vllm:num_requests_waiting)", "kv": "sum(vllm:kv_cache_usage_perc)",
                 "util": "avg(DCGM_FI_DEV_GPU_UTIL) via prometheus-adapter (Pods metric)"}[self.metric]
        return {"query": query, "target": self.target,
                "metric_type": "AverageValue" if self.metric != "util" else "Utilization (pods average)",
                "prometheus_scrape_s": self.scrape_s, "hpa": self.behavior.to_dict(),
                "keda": self.keda.to_dict() if self.keda else None, "max_replicas": self.max_replicas}

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        self.prom.maybe_scrape(now, cluster.ready_pods())
        if self.kedal is not None and self.kedal.poll_due(now):
            value = sum(self.prom.sum(m) for m in self.activation) + cluster.gateway_n
            n = self.kedal.poll(now, self.kedal.is_active_value(value), cluster.spec)
            if n != cluster.spec:
                cluster.set_spec(n, now)
        if cluster.spec == 0 or not self.hpa.due(now):
            return
        if self.metric == "util":
            avg = self.prom.avg("util")
            raw = cluster.spec if avg is None else self.hpa.raw_utilization(
                avg, self.target, len(self.prom.samples), cluster.spec)
        else:
            raw = self.hpa.raw_external_average(self.prom.sum(self.metric), self.target, cluster.spec)
        n = self.hpa.sync(now, cluster.spec, raw)
        if n != cluster.spec:
            cluster.set_spec(n, now)


# llm-d's KEDA+EPP default: 16 running requests per replica (shared/reference/autoscalers.md, llm-d).
LLMD_RUNNING_PER_REPLICA = 16.0


class LlmdQueueGuardPolicy(Policy):
    """llm-d's recommended path (KEDA Prometheus scaler on the endpoint picker's metrics, the
    "queue-guard" overlay; ``shared/reference/autoscalers.md``, llm-d): a scalingModifiers formula
    ``max(queue/1, running/16)`` where ``queue`` is the gateway's flow-control queue
    (``llm_d_epp_flow_control_queue_size``: the requests the endpoint picker holds while every endpoint
    is saturated, :meth:`benchmarks.sim.cluster.Cluster.saturated`; the engines' own waiting count is
    not part of it) and ``running`` the engines' running requests (``llm_d_epp_request_running``), minus
    the pods still pending (kube-state-metrics), floored at the current replicas while pods are
    pending; External AverageValue target 1 (the formula is a replica count); pollingInterval 15 s,
    HPA scale-up stabilisation 0, scale-down stabilisation 300 s."""

    name = "llm-d-queue-guard"

    def __init__(self, max_replicas: int, *, fast_signals: bool = False, queue_per_replica: float = 1.0,
                 behavior: HpaBehavior | None = None, cond: Conditions | None = None) -> None:
        cond = cond or Conditions()
        self.max_replicas = max_replicas
        self.queue_per_replica = queue_per_replica  # the formula's queue divisor (llm-d's overlay: 1)
        self.prom = PromScrape(15.0, fast=fast_signals, phase_s=cond.phase("scrape", 15.0))
        self.keda_cfg = KedaConfig(polling_interval_s=15.0, cooldown_period_s=300.0, min_replicas=1,
                                   max_replicas=max_replicas)
        self.keda = Keda(self.keda_cfg, phase_s=cond.phase("poll", 15.0))
        self.behavior = replace(behavior or HpaBehavior(), scale_up_stabilization_s=0.0,
                                scale_down_stabilization_s=300.0)
        self.hpa = Hpa(1, max_replicas, self.behavior, phase_s=cond.phase("sync", self.behavior.sync_period_s))
        self.value = 0.0

    def params(self) -> dict[str, Any]:
        return {"formula": f"max(queue/{self.queue_per_replica:g}, running/16) - pending, floored at current "
                           "replicas while pending > 0",
                "queue": "llm_d_epp_flow_control_queue_size (the gateway holds requests while every endpoint "
                         "is saturated)",
                "running": "sum(vllm:num_requests_running)", "target": "AverageValue 1",
                "prometheus_scrape_s": 15.0, "keda": self.keda_cfg.to_dict(), "hpa": self.behavior.to_dict(),
                "max_replicas": self.max_replicas}

    def formula(self, current: int) -> float:
        queue = self.prom.router_queue
        running = self.prom.sum("running")
        want = max(queue / self.queue_per_replica, running / LLMD_RUNNING_PER_REPLICA)
        pending = self.prom.pending
        if pending > 0:
            return max(float(current), want - pending)
        return want

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        self.prom.maybe_scrape(now, cluster.ready_pods(), cluster.gateway_n, cluster.n_starting())
        if self.keda.poll_due(now):
            self.value = self.formula(cluster.spec)
            n = self.keda.poll(now, self.keda.is_active_value(self.value), cluster.spec)
            if n != cluster.spec:
                cluster.set_spec(n, now)
        if cluster.spec == 0 or not self.hpa.due(now):
            return
        raw = self.hpa.raw_external_average(self.value, 1.0, cluster.spec)
        n = self.hpa.sync(now, cluster.spec, raw)
        if n != cluster.spec:
            cluster.set_spec(n, now)


# WVA's saturation-scaling defaults (llm-d workload-variant-autoscaler, deprecated upstream: v0.9.0 is
# its last release; shared/reference/autoscalers.md): a replica is saturated at KV usage 0.8 or 5
# waiting requests; the fleet scales up when the mean spare capacity of the non-saturated replicas
# falls under 0.1 of KV or 3 queue slots; each replica's values are max_over_time over 1 minute.
WVA_KV_THRESHOLD = 0.8
WVA_QUEUE_THRESHOLD = 5.0
WVA_KV_SPARE_TRIGGER = 0.1
WVA_QUEUE_SPARE_TRIGGER = 3.0
WVA_WINDOW_S = 60.0  # max_over_time[1m]
WVA_CYCLE_S = 30.0  # the saturation engine's reconcile interval


class WvaSaturationPolicy(Policy):
    """WVA's saturation analyzer as its users ran it (deprecated upstream at v0.9.0): every 30 s cycle,
    from Prometheus (15 s scrape), each ready replica's KV usage and waiting count are read as
    ``max_over_time[1m]``. Replicas at KV >= 0.8 or queue >= 5 are saturated; the others' mean spare
    capacity (0.8 - KV, 5 - queue) is the fleet's headroom. Scale up by one when every replica is
    saturated or the mean spare falls under 0.1 (KV) or 3 (queue), but never while a replica it asked
    for is still pending (WVA's cascade guard). Scale down by one when nothing is saturated and the
    load spread over N-1 replicas keeps both spares at or above their triggers. The engines' waiting
    counts only: the requests the gateway holds are not seen (llm-d-autoscaling#813). The desired count
    goes to the HPA (AverageValue 1) with a 120 s scale-down stabilisation (WVA's recommended minimum)."""

    name = "wva-saturation"

    def __init__(self, max_replicas: int, *, kv: float = WVA_KV_THRESHOLD, queue: float = WVA_QUEUE_THRESHOLD,
                 cycle_s: float = WVA_CYCLE_S, fast_signals: bool = False, behavior: HpaBehavior | None = None,
                 cond: Conditions | None = None) -> None:
        cond = cond or Conditions()
        self.max_replicas = max_replicas
        self.kv = kv
        self.queue = queue
        self.cycle_s = cycle_s
        self.prom = PromScrape(15.0, fast=fast_signals, phase_s=cond.phase("scrape", 15.0))
        self.next_cycle = cond.phase("cycle", cycle_s)
        self.behavior = replace(behavior or HpaBehavior(), scale_up_stabilization_s=0.0,
                                scale_down_stabilization_s=120.0)
        self.hpa = Hpa(1, max_replicas, self.behavior, phase_s=cond.phase("sync", self.behavior.sync_period_s))
        self.desired: int | None = None
        self.history: list[tuple[float, dict[str, tuple[float, float]]]] = []  # (scrape time, pod -> (kv, queue))

    def params(self) -> dict[str, Any]:
        return {"kv_threshold": self.kv, "queue_threshold": self.queue, "kv_spare_trigger": WVA_KV_SPARE_TRIGGER,
                "queue_spare_trigger": WVA_QUEUE_SPARE_TRIGGER, "window": "max_over_time[1m]",
                "scale_up_while_pending": False, "cycle_s": self.cycle_s, "prometheus_scrape_s": 15.0,
                "hpa": self.behavior.to_dict(), "max_replicas": self.max_replicas,
                "status": "deprecated upstream (v0.9.0 is the last release)"}

    def record(self, now: float) -> None:
        self.history.append((now, {name: (smp["kv"], smp["waiting"])
                                   for name, smp in zip(self.prom.names, self.prom.samples, strict=True)}))
        while self.history and self.history[0][0] <= now - WVA_WINDOW_S - 1e-9:
            self.history.pop(0)

    def windowed(self) -> list[tuple[float, float]]:
        """Each replica of the latest scrape: (max KV, max queue) over the window."""
        if not self.history:
            return []
        latest = self.history[-1][1]
        out = []
        for name in latest:
            vals = [h[name] for _, h in self.history if name in h]
            out.append((max(v[0] for v in vals), max(v[1] for v in vals)))
        return out

    def analyze(self, current: int, pending: int) -> int:
        reps = self.windowed()
        n = len(reps)
        if n == 0:
            return current
        free = [(kv, q) for kv, q in reps if kv < self.kv and q < self.queue]
        saturated = n - len(free)
        spare_kv = sum(self.kv - kv for kv, _ in free) / len(free) if free else 0.0
        spare_q = sum(self.queue - q for _, q in free) / len(free) if free else 0.0
        kv_trig = WVA_KV_SPARE_TRIGGER * self.kv / WVA_KV_THRESHOLD
        q_trig = WVA_QUEUE_SPARE_TRIGGER * self.queue / WVA_QUEUE_THRESHOLD
        if not free or spare_kv < kv_trig or spare_q < q_trig:
            if pending > 0:  # no scale-up while replicas are pending
                return current
            return min(self.max_replicas, current + 1)
        if saturated == 0 and current > 1 and n > 1:
            kv_left = self.kv - sum(kv for kv, _ in reps) / (n - 1)
            q_left = self.queue - sum(q for _, q in reps) / (n - 1)
            if kv_left >= kv_trig and q_left >= q_trig:
                return current - 1
        return current

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        if self.prom.maybe_scrape(now, cluster.ready_pods(), cluster.gateway_n, cluster.n_starting()):
            self.record(now)
        if now + 1e-9 >= self.next_cycle:
            self.next_cycle = now + self.cycle_s
            self.desired = self.analyze(cluster.spec, cluster.n_starting())
        if self.desired is None or not self.hpa.due(now):
            return
        raw = self.hpa.raw_external_average(float(self.desired), 1.0, cluster.spec)
        n = self.hpa.sync(now, cluster.spec, raw)
        if n != cluster.spec:
            cluster.set_spec(n, now)


# KServe's serverless (Knative KPA) path for an LLM: ``scaleMetric: concurrency`` with a per-model
# ``scaleTarget`` (the soft target, autoscaling.knative.dev/target; KPA aims at 70% of it). KServe's KPA
# page (kserve.github.io/website/docs/model-serving/predictive-inference/autoscaling/kpa-autoscaler)
# shows scaleTarget 1 for a one-at-a-time predictor and gives no LLM value; an LLM server batches, so
# the per-model value an operator writes is its batch at the documented running-request target: llm-d's
# 16 running requests per vLLM replica (shared/reference/autoscalers.md), the same for every profile here.
KPA_SCALE_TARGET: dict[str, float] = {"8b-h100": 16.0, "70b-h100-tp4": 16.0, "70b-h100-tp8": 16.0}


def kpa_scale_target(profile: str) -> float:
    return KPA_SCALE_TARGET.get(profile, 16.0)


class KpaPolicy(Policy):
    name = "kpa-concurrency"

    def __init__(self, cfg: KpaConfig, cond: Conditions | None = None) -> None:
        cond = cond or Conditions()
        self.kpa = Kpa(cfg)
        self.kpa.next_tick = cond.phase("cycle", cfg.tick_s)
        self.cfg = cfg
        self.next_sample = cond.phase("scrape", 1.0)

    def params(self) -> dict[str, Any]:
        return {"kpa": self.cfg.to_dict(), "scale_metric": "concurrency",
                "scale_target": self.cfg.container_concurrency,
                "metric": "in-flight requests per pod (queue-proxy), sampled 1/s"}

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        if now + 1e-9 >= self.next_sample:
            self.next_sample = now + 1.0
            conc = sum(p.engine.outstanding for p in cluster.ready_pods()) + cluster.gateway_n
            self.kpa.record(now, float(conc))
        if self.kpa.due(now):
            n = self.kpa.decide(now, cluster.n_ready(), cluster.spec)
            if n != cluster.spec:
                cluster.set_spec(n, now)


# ---- a predictive planner in the style of NVIDIA Dynamo's throughput planner ------------------------

# Dynamo Planner's throughput-based mode (shared/reference/autoscalers.md, "NVIDIA Dynamo Planner"):
# every 180 s it forecasts the next interval's request rate and mean input/output lengths, and sizes
# the workers from profiled throughput at its TTFT/ITL targets (defaults 500 ms / 50 ms).
DYNAMO_INTERVAL_S = 180.0
DYNAMO_ITL_TARGET_S = 0.050
# The forecast: Holt's linear trend (level and trend smoothing) standing in for Dynamo's ARIMA /
# Prophet / Kalman predictors; 0.5 / 0.3 weigh the last interval about as an ARIMA(1,1,0) fit would.
DYNAMO_LEVEL_ALPHA = 0.5
DYNAMO_TREND_BETA = 0.3


def profiled_throughput(engine: EngineProfile, isl: float, osl: float) -> tuple[float, float]:
    """What Dynamo's pre-deployment profiler gives the planner for one replica: prefill tokens/s (an
    empty batch, full chunks) and decode tokens/s at the largest batch whose step meets the ITL target
    at a context of ``isl + osl / 2`` tokens per sequence."""
    prefill = engine.prefill_rate(0.0, 0.0)
    ctx = isl + osl / 2.0
    best = 1.0 / engine.decode_step_s(1.0, ctx)
    lo, hi = 1, engine.max_num_seqs
    while lo <= hi:  # the step time grows with the batch: bisect for the largest batch within the target
        mid = (lo + hi) // 2
        step = engine.decode_step_s(float(mid), mid * ctx)
        if step <= DYNAMO_ITL_TARGET_S and mid * ctx <= engine.kv_capacity_tokens:
            best = mid / step
            lo = mid + 1
        else:
            hi = mid - 1
    return prefill, best


class Holt:
    """Holt's linear-trend forecast of the next value."""

    def __init__(self, alpha: float = DYNAMO_LEVEL_ALPHA, beta: float = DYNAMO_TREND_BETA) -> None:
        self.alpha, self.beta = alpha, beta
        self.level: float | None = None
        self.trend = 0.0

    def observe(self, x: float) -> float:
        if self.level is None:
            self.level = x
        else:
            prev = self.level
            self.level = self.alpha * x + (1 - self.alpha) * (prev + self.trend)
            self.trend = self.beta * (self.level - prev) + (1 - self.beta) * self.trend
        return max(0.0, self.level + self.trend)


class DynamoPlannerPolicy(Policy):
    """A throughput planner in Dynamo's style, for one aggregated pool: every 180 s it reads the last
    interval's arrivals (count, mean ISL and OSL, as its frontend's metrics give them), forecasts the
    next interval (Holt), and sets the replicas to max(prefill need, decode need) from profiled
    throughput (:func:`profiled_throughput`), within [1, maxReplicas]; it skips an adjustment while
    the previous one's replicas are still starting (Dynamo waits for the deployment to be ready) and
    patches the replica count directly (its Kubernetes connector; no HPA)."""

    name = "dynamo-planner"

    def __init__(self, engine: EngineProfile, max_replicas: int, *, interval_s: float = DYNAMO_INTERVAL_S,
                 cond: Conditions | None = None) -> None:
        cond = cond or Conditions()
        self.engine = engine
        self.max_replicas = max_replicas
        self.interval = interval_s
        self.next_at = cond.phase("cycle", interval_s) or interval_s
        self.mark = (0.0, 0, 0.0, 0.0)  # (time, arrivals, input tokens, output tokens) at the last adjustment
        self.rate, self.isl, self.osl = Holt(), Holt(), Holt()
        self.decisions: list[tuple[float, int]] = []

    def params(self) -> dict[str, Any]:
        return {"interval_s": self.interval, "predictor": f"Holt linear trend (alpha {DYNAMO_LEVEL_ALPHA}, beta "
                f"{DYNAMO_TREND_BETA}) in place of Dynamo's ARIMA", "itl_target_s": DYNAMO_ITL_TARGET_S,
                "mode": "throughput (aggregated pool)", "max_replicas": self.max_replicas,
                "adjustments": len(self.decisions)}

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        if now + 1e-9 < self.next_at:
            return
        self.next_at = now + self.interval
        t0, n0, i0, o0 = self.mark
        n, i, o = cluster.arrived_n, cluster.arrived_in, cluster.arrived_out
        self.mark = (now, n, i, o)
        span = now - t0
        if span <= 0:
            return
        count = n - n0
        rate = self.rate.observe(count / span)
        if count > 0:
            isl = self.isl.observe((i - i0) / count)
            osl = self.osl.observe((o - o0) / count)
        else:
            isl = self.isl.level or 0.0
            osl = self.osl.level or 0.0
        if cluster.n_starting() > 0:  # the last adjustment is still coming up
            return
        prefill, decode = profiled_throughput(self.engine, max(isl, 1.0), max(osl, 1.0))
        need = max(rate * isl / prefill, rate * osl / decode)
        want = max(1, min(self.max_replicas, math.ceil(need - 1e-9)))
        self.decisions.append((now, want))
        if want != cluster.spec:
            cluster.set_spec(want, now)


# ---- schedules (static, oracle) ---------------------------------------------------------------

class SchedulePolicy(Policy):
    """Sets spec from a precomputed step function (time -> replicas); pods start per the cluster."""

    def __init__(self, name: str, times: list[float], counts: list[int], *, instant: bool = False,
                 info: dict[str, Any] | None = None) -> None:
        self.name = name
        self.times = times
        self.counts = counts
        self.instant = instant
        self.i = 0
        self.info = info or {}

    def params(self) -> dict[str, Any]:
        return dict(self.info)

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        t = now
        while self.i + 1 < len(self.times) and self.times[self.i + 1] <= t + 1e-9:
            self.i += 1
        want = self.counts[self.i]
        if want != cluster.spec:
            cluster.set_spec(want, now)


# maxReplicas an operator would write per profile (a GPU budget), the same for every reactive policy:
# about twice the largest need the oracle finds on the shipped traces for that profile.
MAX_REPLICAS: dict[str, int] = {"8b-h100": 32, "70b-h100-tp4": 32, "70b-h100-tp8": 16}


def max_replicas_for(profile: str) -> int:
    return MAX_REPLICAS.get(profile, 32)


def model_profile_for(profile: str) -> str | None:
    """``modelProfile`` as the operator of this profile writes it: the model and GPU they deploy, when
    the scaler documents a prior for it (scaler/capacity.py PRIORS: 8b-h100 16k tok/s, 70b-h100-tp4
    7k; the simulated engines prefill 24k and 10.5k), like ``maxReplicas`` a fixed per-profile value."""
    return profile if profile in MODEL_PROFILES else None


def cold_start_for(profile: str) -> float | None:
    """``timeToReadySeconds`` as the operator of this profile writes it: the cold start of one replica
    they know from starting the model once (the startup model's cold total: 510 s for 8B, 905 s for
    70B-TP4), like ``maxReplicas`` a fixed per-profile user value. Only warmscale has such a knob; it
    applies until the warm-pool controller has measured a cold start (docs/benchmarks.md, "A user's
    configuration"). None for a profile the startup model does not know (the key's default then)."""
    return time_to_ready(PROFILES[profile], COLD) if profile in PROFILES else None
