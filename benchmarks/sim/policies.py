"""The autoscaling policies compared by the trace replay, each with its actuation path.

``warmscale`` runs the production pure code path: per-pod engine signals -> :class:`Snapshot` ->
:func:`scaler.observation.observe` -> :func:`scaler.policy.decide` -> KEDA (push activation) ->
HPA (External AverageValue, ``metric_value`` compensating the tolerance) -> Deployment; its warm
pool holds ``standby`` placeholders on staged nodes, and the scaler's look-ahead is the
:class:`scaler.warm_status.WarmStatus` the warm-pool controller would publish.
"""

from __future__ import annotations

import math
from typing import Any

from benchmarks.sim.actuation import Hpa, HpaBehavior, Keda, KedaConfig, Kpa, KpaConfig, PrometheusScrape
from benchmarks.sim.cluster import Cluster
from scaler.config import ScalerConfig, parse_metadata
from scaler.observation import observe
from scaler.policy import Decision, decide
from scaler.state import ScalerState
from scaler.warm_status import WarmStatus
from signals.model import QueueReading, ReplicaReading, ReplicaSignal, Snapshot
from warmpool.startup_model import StartupProfile, time_to_ready_table


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


# ---- warmscale ---------------------------------------------------------------------------------

def warmscale_metadata(max_replicas: int, slo_ttft: float, overrides: dict[str, str] | None = None) -> dict[str, str]:
    md = {
        "endpoints": "http://simulated-engine:8000/metrics",  # the simulator stands in for scraping
        "engine": "vllm",
        "minReplicas": "1",
        "maxReplicas": str(max_replicas),
        "ttftSloSeconds": f"{slo_ttft:g}",
        "ttftQuantile": "0.95",
        "ttftWindowSeconds": "60",
        "targetInflightPerReplica": "32",
        "targetWaitingPerReplica": "4",
        "scaleDownStabilizationSeconds": "600",
        "scrapeIntervalSeconds": "5",
    }
    md.update(overrides or {})
    return md


class WarmscalePolicy(Policy):
    name = "warmscale"

    def __init__(self, metadata: dict[str, str], startup: StartupProfile, standby: int,
                 hpa_behavior: HpaBehavior, keda: KedaConfig) -> None:
        self.metadata = metadata
        self.cfg: ScalerConfig = parse_metadata(metadata)
        self.sp = startup
        self.standby = standby
        self.state = ScalerState()
        self.last: Decision | None = None
        self.hpa = Hpa(keda.min_replicas, self.cfg.max_replicas, hpa_behavior)
        self.keda = Keda(keda)
        self.keda_cfg = keda
        self.next_scrape = 0.0
        self.ttr_table = time_to_ready_table(startup)
        self.decisions = 0
        self.reasons: dict[str, int] = {}

    def params(self) -> dict[str, Any]:
        return {"metadata": self.metadata, "standby_placeholders": self.standby,
                "hpa": self.hpa.b.to_dict(), "keda": self.keda_cfg.to_dict(), "trigger": "external-push"}

    def _snapshot(self, cluster: Cluster, now: float) -> Snapshot:
        readings = []
        for pod in cluster.ready_pods():
            e = pod.engine
            sig = ReplicaSignal(
                engine="vllm",
                waiting=float(e.waiting_n),
                running=float(e.running_n),
                kv_usage=e.kv_usage(),
                ttft=e.ttft_histogram(),
                prompt_tokens_total=e.prompt_tokens_total,
                generation_tokens_total=e.generation_tokens_total,
                requests_total=e.requests_total,
                preemptions_total=e.preemptions_total,
                max_running=float(e.p.max_num_seqs),
            )
            readings.append(ReplicaReading(replica=pod.name, observed_at=now, signal=sig))
        status = WarmStatus(
            namespace="bench", name="llm", updated_at=now,
            placeholders_ready=cluster.placeholders_ready(now), staged_nodes=cluster.placeholders_ready(now),
            ready_replicas=cluster.n_ready(), starting_replicas=cluster.n_starting(), spec_replicas=cluster.spec,
            time_to_ready_s={"placeholder+staged": self.ttr_table["placeholder+staged"],
                             "staged": self.ttr_table["staged"], "cold": self.ttr_table["cold"]},
        )
        queues = (QueueReading(name="gateway", observed_at=now, length=float(cluster.gateway_n)),)
        return Snapshot(
            taken_at=now,
            replicas=tuple(readings),
            queues=queues,
            ready_replicas=cluster.n_ready(),
            starting_replicas=cluster.n_starting(),
            time_to_ready_s=status.expected_time_to_ready(self.cfg.time_to_ready_seconds),
            warm_capacity=status.placeholders_ready,
            current_replicas=cluster.spec,
        )

    def control(self, cluster: Cluster, now: float, dt: float) -> None:
        if now + 1e-9 >= self.next_scrape:
            self.next_scrape = now + max(self.cfg.scrape_interval_seconds, dt)
            snap = self._snapshot(cluster, now)
            obs, self.state = observe(snap, self.state, self.cfg)
            decision, self.state = decide(obs, self.state, self.cfg, now)
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


# ---- Prometheus-fed KEDA/HPA baselines --------------------------------------------------------

class PromHpaPolicy(Policy):
    """KEDA Prometheus scaler (or prometheus-adapter) -> HPA, metric read from Prometheus."""

    def __init__(self, name: str, metric: str, target: float, max_replicas: int, *, scrape_s: float = 15.0,
                 behavior: HpaBehavior | None = None, keda: KedaConfig | None = None, use_keda: bool = True) -> None:
        self.name = name
        self.metric = metric  # "waiting" | "kv" | "util"
        self.target = target
        self.max_replicas = max_replicas
        self.scrape_s = scrape_s
        self.behavior = behavior or HpaBehavior()
        self.keda = (keda or KedaConfig(max_replicas=max_replicas)) if use_keda else None
        self.prom = PrometheusScrape(self.scrape_s)
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
            value = self.prom.sum(self.metric) + cluster.gateway_n
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


def default_max_replicas(peak: int) -> int:
    return max(peak + 4, math.ceil(peak * 2))
