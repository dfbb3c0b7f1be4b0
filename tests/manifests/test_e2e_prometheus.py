"""End to end on real servers: a real Prometheus scrapes a running ``warmscale scaler`` (driven like KEDA
drives it, reading fake vLLM engines) and a running ``warmscale warmpool`` (on the local cluster, with
the install's own ServiceAccount and RBAC), evaluates the alert rules, and every dashboard query returns
data; every alert expression evaluates and selects series that exist."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.fixtures import NodePoolFactory, wait_for
from tests.servers import FakeEngine, PrometheusServer, RedisServer, free_port
from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import H100
from warmscale.localcluster.harness import Cluster
from warmscale.proto import externalscaler_pb2 as pb
from warmscale.proto import externalscaler_pb2_grpc as pb_grpc

from .helpers import (
    FOREIGN_METRICS,
    ROOT,
    RULES,
    alert_rules,
    concrete,
    dashboard_queries,
    kubectl,
    metric_names,
    render,
)

pytestmark = [pytest.mark.cluster, pytest.mark.servers]

SCALER_JOB, CONTROLLER_JOB = "warmscale-scaler", "warmscale-controller"
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Metrics with series only after a failure repeated (next-layer findings): none in a healthy run.
ONLY_AFTER_FAILURES = frozenset({"warmscale_advice"})


class ScrapingPrometheus(PrometheusServer):
    """The fixture's Prometheus with the production job names and the alert rules loaded."""

    def __init__(self, jobs: dict[str, list[str]]) -> None:
        self.jobs = jobs
        super().__init__([], scrape_interval="1s")

    def _write_config(self, targets: Any) -> None:
        cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": job, "scrape_interval": "1s", "scrape_timeout": "1s",
                                "static_configs": [{"targets": hosts}]} for job, hosts in self.jobs.items()],
        }
        self.config.write_text(json.dumps(cfg, indent=1))

    def api(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]


def vllm_payload(waiting: int, running: int, kv: float, ttft_counts: list[int], finished: int) -> str:
    """A vLLM v1 exposition (the names the scaler's vllm parser reads)."""
    lab = 'engine="0",model_name="llama"'
    lines = [
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} {kv}",
        "# TYPE vllm:num_preemptions_total counter", f"vllm:num_preemptions_total{{{lab}}} 0",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {finished}',
        "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{{{lab}}} {finished * 200}",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    cum = 0
    for le, c in zip((*BUCKETS, "+Inf"), (*ttft_counts, 0), strict=True):
        cum += c
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {cum}')
    lines += [f"vllm:time_to_first_token_seconds_count{{{lab}}} {cum}",
              f"vllm:time_to_first_token_seconds_sum{{{lab}}} {cum * 1.5}"]
    return "\n".join(lines) + "\n"


class Engines:
    """Two fake vLLM replicas: quiet (little load, TTFT under a 0.2 s SLO) until :meth:`ramp`, then a
    load that grows, with TTFT far above the SLO.

    The quiet start is what makes a scale event the dashboards can show. Under policy v2 the count for
    the ramp alone is set at once and never moves: one replica's sequence capacity is learned (the vLLM
    prior, 0.7 x max_num_seqs 1024, so "demand" is 1 for these 24-100 running requests), and the rules
    that do fire (KV, queue, TTFT) are bounded by scaleUpMaxStep x the ready replicas, which a fake
    fleet never changes: the count reaches its bound (6) within the first two decisions, often between
    two Prometheus scrapes, and ``changes(warmscale_desired_replicas[1m])`` stays empty. From quiet
    (2 replicas: the KV-bound need) to the ramp (6) is a real change, seen for many scrapes."""

    def __init__(self, n: int = 2) -> None:
        self.engines = [FakeEngine() for _ in range(n)]
        self.t0 = time.monotonic()
        self.ramp_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def ramp(self) -> None:
        self.ramp_at = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            now, ramp_at = time.monotonic(), self.ramp_at
            served = int(now - self.t0)  # counters only grow, over both phases
            quiet = int((ramp_at if ramp_at is not None else now) - self.t0)
            for i, e in enumerate(self.engines):
                fast = 5 * quiet + i  # TTFT samples under the SLO (all before the ramp)
                if ramp_at is None:
                    e.serve(vllm_payload(waiting=0, running=2, kv=0.2, ttft_counts=[fast, 0, 0, 0, 0, 0, 0],
                                         finished=20 * served))
                    continue
                k = int(now - ramp_at)
                per = 5 * k + i  # growing TTFT samples, mostly between 1 and 2.5 s
                e.serve(vllm_payload(waiting=min(2 * k, 80), running=24 + k, kv=min(0.5 + 0.03 * k, 0.97),
                                     ttft_counts=[fast, 0, 0, 0, per // 4, per, per // 4], finished=20 * served))
            self._stop.wait(0.5)

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self.engines]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for e in self.engines:
            e.close()


def start_process(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "warmscale.cli", "--log-format", "text", *args],
                                stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})})


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"process exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        time.sleep(0.2)
    raise AssertionError(f"{url} not up after {timeout}s:\n{log.read_text()[-3000:]}")


class Keda:
    """KEDA's calls for one ScaledObject: GetMetricSpec, then GetMetrics + IsActive per poll, an open
    StreamIsActive, and one ScaledObject with invalid metadata (INVALID_ARGUMENT)."""

    def __init__(self, address: str, namespace: str, name: str, metadata: dict[str, str]) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.ExternalScalerStub(self.channel)
        self.ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)
        self.bad = pb.ScaledObjectRef(name="broken", namespace=namespace,
                                      scalerMetadata={**metadata, "maxReplicas": "many"})
        self._stop = threading.Event()
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._poll, daemon=True),
                        threading.Thread(target=self._stream, daemon=True)]
        for t in self.threads:
            t.start()

    def _poll(self) -> None:
        spec = self.stub.GetMetricSpec(self.ref, timeout=5)
        metric = spec.metricSpecs[0].metricName
        while not self._stop.is_set():
            try:
                self.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=metric), timeout=5)
                self.stub.IsActive(self.ref, timeout=5)
            except grpc.RpcError as exc:
                if "holding" not in (exc.details() or ""):  # UNAVAILABLE before anything is known: a hold
                    self.errors.append(str(exc.code()))
            with contextlib.suppress(grpc.RpcError):
                self.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=self.bad, metricName=metric), timeout=5)
            self._stop.wait(0.5)

    def _stream(self) -> None:
        with contextlib.suppress(grpc.RpcError):
            for _ in self.stub.StreamIsActive(self.ref):
                if self._stop.is_set():
                    return

    def close(self) -> None:
        self._stop.set()
        self.channel.close()
        for t in self.threads:
            t.join(timeout=5)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="warmscale-e2e-") as d:
        yield Path(d)


@pytest.fixture
def redis(redis_server: RedisServer) -> RedisServer:
    redis_server.flush()
    return redis_server


def install_rbac(cluster: Cluster) -> None:
    """The install's namespace, ServiceAccounts, RBAC and PriorityClass (not its Deployments)."""
    kinds = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "PriorityClass"}
    objs = [o for o in render("manifests") if o["kind"] in kinds]
    out = subprocess.run([kubectl(), "--kubeconfig", str(cluster.kubeconfig), "apply", "--server-side",
                          "--field-manager=warmscale-install", "--force-conflicts", "-f", "-"],
                         input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


async def test_dashboards_and_alerts_against_real_prometheus(
    k8s_cluster: Cluster, k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
    redis: RedisServer, workdir: Path, prometheus_server: Callable[..., PrometheusServer],
) -> None:
    ns = k8s_namespace
    await k8s_node_pool(replace(H100, count=2))
    core = client.CoreV1Api(k8s_admin)

    async def install_namespace_usable() -> bool:  # another suite may be deleting it
        try:
            return (await core.read_namespace("warmscale")).status.phase != "Terminating"
        except client.exceptions.ApiException as exc:
            return exc.status == 404

    await wait_for(install_namespace_usable, within=120, what="namespace warmscale not terminating")
    install_rbac(k8s_cluster)
    # The controller runs with the install's ServiceAccount token (its RBAC must be enough).
    token = await k8s_cluster.mint_token("warmscale", "warmscale-warmpool")
    kubeconfig = k8s_cluster.write_token_kubeconfig(workdir / "controller.kubeconfig", token)

    engines = Engines()
    grpc_port, scaler_metrics, controller_metrics = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    keda: Keda | None = None
    prom: ScrapingPrometheus | None = None
    try:
        scaler_log, controller_log = workdir / "scaler.log", workdir / "controller.log"
        scaler = start_process(["scaler", "--host", "127.0.0.1", "--grpc-port", str(grpc_port),
                                "--metrics-port", str(scaler_metrics), "--redis-url", redis.url], scaler_log)
        procs.append(scaler)
        controller = start_process(
            ["warmpool", "--kubeconfig", str(kubeconfig), "--namespace", ns, "--metrics-port", str(controller_metrics),
             "--metrics-address", "127.0.0.1", "--lease-namespace", "warmscale", "--lease-name", "warmscale-warmpool",
             "--redis-address", redis.url, "--resync", "2", "--scaler-address", f"127.0.0.1:{grpc_port}"],
            controller_log)
        procs.append(controller)
        wait_http(f"http://127.0.0.1:{scaler_metrics}/healthz", scaler, scaler_log)
        wait_http(f"http://127.0.0.1:{controller_metrics}/metrics", controller, controller_log)

        prom = ScrapingPrometheus({SCALER_JOB: [f"127.0.0.1:{scaler_metrics}"],
                                   CONTROLLER_JOB: [f"127.0.0.1:{controller_metrics}"]})
        prom.start()

        # An annotated GPU Deployment the controller keeps warm (created once the controller leads,
        # so it measures its replicas' start-up).
        await wait_for(lambda: _leader(controller_metrics), within=60, what="controller leads")
        deploy = w.deployment("llama", 2, gpus=1, cpu="4", memory="32Gi", node_selector={"warmscale.io/test": ns})
        deploy["metadata"]["annotations"] = {"warmscale.io/enabled": "true", "warmscale.io/min-ready": "2",
                                             "warmscale.io/standby": "1", "warmscale.io/prestage-nodes": "1"}
        await client.AppsV1Api(k8s_admin).create_namespaced_deployment(ns, deploy)

        # A third replica whose endpoint refuses connections: scrape errors and an unknown replica.
        dead = f"http://127.0.0.1:{free_port()}/metrics"
        keda = Keda(f"127.0.0.1:{grpc_port}", ns, "llama", {
            "endpoints": ",".join([*engines.urls, dead]), "engine": "vllm", "maxReplicas": "8", "ttftSloSeconds": "0.2",
            "ttftWindowSeconds": "10", "scrapeIntervalSeconds": "0.5", "trendWindowSeconds": "10",
            "scaleDownStabilizationSeconds": "5", "nodeIdleSeconds": "0", "hpaTolerance": "0",
            "burstConfirmSeconds": "0"})
        # The quiet count is scraped before the load ramps up: a scale event the dashboards show.
        quiet = f'warmscale_desired_replicas{{namespace="{ns}",scaledObject="llama"}}'

        async def quiet_count_scraped() -> bool:
            return bool(await asyncio.to_thread(lambda: prom.api("query", query=quiet)["result"]))

        await wait_for(quiet_count_scraped, within=30, what="the quiet count in Prometheus")
        engines.ramp()

        # Every dashboard query returns data (polling while the run produces it). Panels of series that
        # exist only once a failure has repeated (no finding in a healthy run) are not waited for: their
        # family must still be scraped, so the query names a real metric.
        def after_failures(expr: str) -> bool:
            names = metric_names(expr)
            return bool(names) and names <= ONLY_AFTER_FAILURES

        queries = list(dashboard_queries())
        pending = {where: expr for where, expr in queries if not after_failures(expr)}
        deadline = time.monotonic() + 90
        while pending and time.monotonic() < deadline:
            for where, expr in list(pending.items()):
                q = concrete(expr, namespace=ns, scaledObject="llama").replace("[1h]", "[5m]")
                if prom.api("query", query=q)["result"]:
                    del pending[where]
            await asyncio.sleep(1)
        for where, expr in queries:
            if after_failures(expr) and not all(_exists(prom, n) for n in metric_names(expr)):
                pending[where] = expr
        assert not pending, "dashboard queries without data:\n" + "\n".join(f"{k}: {v}" for k, v in pending.items())
        assert not keda.errors, keda.errors[:5]

        # Every alert expression: Prometheus loaded and evaluates the rules without error, and every
        # metric an expression selects exists in this data (no misspelt or missing series).
        groups = prom.api("rules")["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        assert set(loaded) == {r["alert"] for r in alert_rules()}
        for r in alert_rules():
            prom.api("query", query=r["expr"])  # parses and evaluates
            for name in metric_names(r["expr"]) - FOREIGN_METRICS:  # this Prometheus scrapes warmscale only
                assert _exists(prom, name), f"{r['alert']}: {name} neither has series nor was scraped"
        await_health = time.monotonic() + 10
        while time.monotonic() < await_health:
            loaded = {r["name"]: r for g in prom.api("rules")["groups"] for r in g["rules"]}
            if all(r.get("health") == "ok" for r in loaded.values()):
                break
            await asyncio.sleep(0.5)
        bad = {n: (r.get("health"), r.get("lastError")) for n, r in loaded.items() if r.get("health") != "ok"}
        assert not bad, bad
        # The alerts match the real label sets: the dead endpoint makes the stale-signal alert pending
        # for exactly this ScaledObject.
        def stale_alert() -> bool:
            return any(a["labels"]["alertname"] == "WarmscaleSignalsStale" and a["labels"].get("scaledObject") ==
                       "llama" and a["labels"].get("namespace") == ns for a in prom.api("alerts")["alerts"])

        async def stale_alert_async() -> bool:
            return await asyncio.to_thread(stale_alert)

        await wait_for(stale_alert_async, within=30, what="WarmscaleSignalsStale pending for the ScaledObject")
    finally:
        if keda is not None:
            keda.close()
        for p in procs:
            stop_process(p)
        engines.close()
        if prom is not None:
            prom.close()


def _exists(prom: ScrapingPrometheus, name: str) -> bool:
    """Series of ``name`` exist, or its family was scraped (HELP/TYPE) without samples yet (a labelled
    counter that only counts errors)."""
    if prom.api("query", query=f"count({name})")["result"]:
        return True
    metadata = prom.api("metadata")
    family = name
    for suffix in ("_bucket", "_count", "_sum"):
        family = family.removesuffix(suffix)
    return name in metadata or family in metadata or family.removesuffix("_total") in metadata


async def _leader(port: int) -> bool:
    return await asyncio.to_thread(_leader_sync, port)


def _leader_sync(port: int) -> bool:
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            return any(line.startswith("warmscale_leader ") and line.split()[1] == "1.0"
                       for line in r.read().decode().splitlines())
    return False
