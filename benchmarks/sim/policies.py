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
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from warmscale.benchmarks.sim.cluster import Cluster
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
                 initial_replicas: int = 1) -> None:
        self.metadata = metadata
        self.cfg: ScalerConfig = parse_metadata(metadata)
        self.sp = startup
        self.standby_override = standby
        self.warm_workload = bench_workload(standby, initial_replicas, workload)
        self.next_plan = PLAN_EVERY_S
        self.standby_last: int | None = None
        self.plans: list[tuple[float, int, int]] = []  # (time, planned, placeholders held after applying)
        self.plan_inputs: list[tuple[ob.Workload, list[dict[str, Any]], StandbyEvidence]] | None = None  # tests
        # the size at t = 0: no burst statistics yet (auto: 0), else the override
        self.standby = self.plan_at(0.0, [], StandbyEvidence()).standby
        self.last: Decision | None = None
        self.hpa = Hpa(keda.min_replicas, self.cfg.max_replicas, hpa_behavior)
        self.keda = Keda(keda)
        self.keda_cfg = keda
        self.next_scrape = 0.0
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
                 fast_signals: bool = False, activation: tuple[str, ...] | None = None) -> None:
        self.name = name
        self.metric = metric  # "waiting" | "kv" | "util"
        # What KEDA's IsActive sums (default: the scaling metric; a second trigger may add e.g. "running").
        self.activation = activation or (metric,)
        self.target = target
        self.max_replicas = max_replicas
        self.scrape_s = scrape_s
        self.behavior = behavior or HpaBehavior()
        self.keda = (keda or KedaConfig(max_replicas=max_replicas)) if use_keda else None
        self.prom = PromScrape(self.scrape_s, fast=fast_signals)
        self.hpa = Hpa(1, self.max_replicas, self.behavior)
        self.kedal = Keda(self.keda) if self.keda is not None else None

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


class LlmdQueueGuardPolicy(Policy):
    """llm-d's recommended path (KEDA Prometheus scaler on the endpoint picker's metrics, the
    "queue-guard" overlay; ``shared/reference/autoscalers.md``, llm-d): a scalingModifiers formula
    ``max(queue/1, running/16)`` where ``queue`` counts requests waiting anywhere (engines + held by
    the router), minus the pods still pending (kube-state-metrics), floored at the current replicas
    while pods are pending; External AverageValue target 1 (the formula is a replica count);
    pollingInterval 15 s, HPA scale-up stabilisation 0, scale-down stabilisation 300 s."""

    name = "llm-d-queue-guard"

    def __init__(self, max_replicas: int, *, fast_signals: bool = False, queue_per_replica: float = 1.0) -> None:
        self.max_replicas = max_replicas
        self.queue_per_replica = queue_per_replica  # the formula's queue divisor (llm-d's overlay: 1)
        self.prom = PromScrape(15.0, fast=fast_signals)
        self.keda_cfg = KedaConfig(polling_interval_s=15.0, cooldown_period_s=300.0, min_replicas=1,
                                   max_replicas=max_replicas)
        self.keda = Keda(self.keda_cfg)
        self.behavior = HpaBehavior(scale_up_stabilization_s=0.0, scale_down_stabilization_s=300.0)
        self.hpa = Hpa(1, max_replicas, self.behavior)
        self.value = 0.0

    def params(self) -> dict[str, Any]:
        return {"formula": f"max(queue/{self.queue_per_replica:g}, running/16) - pending, floored at current "
                           "replicas while pending > 0",
                "queue": "sum(vllm:num_requests_waiting) + llm_d_epp_flow_control_queue_size",
                "running": "sum(vllm:num_requests_running)", "target": "AverageValue 1",
                "prometheus_scrape_s": 15.0, "keda": self.keda_cfg.to_dict(), "hpa": self.behavior.to_dict(),
                "max_replicas": self.max_replicas}

    def formula(self, current: int) -> float:
        queue = self.prom.sum("waiting") + self.prom.router_queue
        running = self.prom.sum("running")
        want = max(queue / self.queue_per_replica, running / 16.0)
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


class WvaSaturationPolicy(Policy):
    """A WVA-style saturation analyzer (llm-d workload-variant-autoscaler, ``autoscalers.md``): every
    30 s cycle, from Prometheus (15 s scrape), the fleet is saturated when the mean KV usage per
    replica reaches 0.8 or the mean queue per replica reaches 5: +1 replica. It scales down by 1 only
    if the load spread over N-1 replicas stays under both thresholds. The desired count goes to the HPA
    (AverageValue 1) with a 120 s scale-down stabilisation (WVA's recommended minimum)."""

    name = "wva-saturation"

    def __init__(self, max_replicas: int, *, kv: float = 0.8, queue: float = 5.0, cycle_s: float = 30.0,
                 fast_signals: bool = False) -> None:
        self.max_replicas = max_replicas
        self.kv = kv
        self.queue = queue
        self.cycle_s = cycle_s
        self.prom = PromScrape(15.0, fast=fast_signals)
        self.next_cycle = 0.0
        self.behavior = HpaBehavior(scale_up_stabilization_s=0.0, scale_down_stabilization_s=120.0)
        self.hpa = Hpa(1, max_replicas, self.behavior)
        self.desired: int | None = None

    def params(self) -> dict[str, Any]:
        return {"kv_threshold": self.kv, "queue_threshold": self.queue, "cycle_s": self.cycle_s,
                "prometheus_scrape_s": 15.0, "hpa": self.behavior.to_dict(), "max_replicas": self.max_replicas}

    def analyze(self, current: int) -> int:
        n = len(self.prom.samples)
        if n == 0:
            return current
        kv = self.prom.sum("kv")
        q = self.prom.sum("waiting") + self.prom.router_queue
        if kv / n >= self.kv or q / n >= self.queue:
            return min(self.max_replicas, current + 1)
        if current > 1 and n > 1 and kv / (n - 1) < self.kv and q / (n - 1) < self.queue:
            return current - 1
        return current

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        self.prom.maybe_scrape(now, cluster.ready_pods(), cluster.gateway_n, cluster.n_starting())
        if now + 1e-9 >= self.next_cycle:
            self.next_cycle = now + self.cycle_s
            self.desired = self.analyze(cluster.spec)
        if self.desired is None or not self.hpa.due(now):
            return
        raw = self.hpa.raw_external_average(float(self.desired), 1.0, cluster.spec)
        n = self.hpa.sync(now, cluster.spec, raw)
        if n != cluster.spec:
            cluster.set_spec(n, now)


class KpaPolicy(Policy):
    name = "kpa-concurrency"

    def __init__(self, cfg: KpaConfig) -> None:
        self.kpa = Kpa(cfg)
        self.cfg = cfg
        self.next_sample = 0.0

    def params(self) -> dict[str, Any]:
        return {"kpa": self.cfg.to_dict(), "metric": "in-flight requests per pod (queue-proxy), sampled 1/s"}

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        if now + 1e-9 >= self.next_sample:
            self.next_sample = now + 1.0
            conc = sum(p.engine.outstanding for p in cluster.ready_pods()) + cluster.gateway_n
            self.kpa.record(now, float(conc))
        if self.kpa.due(now):
            n = self.kpa.decide(now, cluster.n_ready(), cluster.spec)
            if n != cluster.spec:
                cluster.set_spec(n, now)


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
