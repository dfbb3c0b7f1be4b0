"""`warmscale bench cold-vs-warm` (``python -m warmscale.benchmarks.cold_vs_warm``): scale an annotated
Deployment from 1 to 8 replicas on the local cluster, warm pool off and on.

Per case, in a fresh namespace on 8 fresh KWOK nodes of one H100 each (``a3-highgpu-1g``-like, so
one replica fills a node and the warm pool must hold whole nodes):

- **cold** (``warmscale.io/enabled: "false"``, no controller): the 7 new replicas land on the 7
  free nodes, which model nodes that do not exist yet: provision + image pull + weights download +
  load + cold engine init + readiness.
- **warm** (the real :class:`warmpool.controller.Controller` running in-process, ``standby: 7``,
  ``prestage-nodes: 7``, an ``hf://`` model URI): staging and placeholders are done *before* the
  scale-up (not measured); the new replicas preempt the placeholders.

Pod start delays: KWOK cannot know where a pod landed, so the replicas' template carries a 1 h
start delay and a helper (:class:`DelayInjector`) watches the namespace; as soon as a replica is
bound it derives the node's warm state *from the cluster* -- capacity held (a placeholder of the
workload left that node during the scale-up, or the scheduler nominated the pod there), image
present (the controller's pre-pull pod on that node finished), weights local (the node carries the
``warmscale.io/staged-<model>`` label; the startup model keeps the compile cache next to the
weights) -- and patches ``sim.warmscale.io/start-delay`` (an absolute time: provision + pull +
download) and ``sim.warmscale.io/ready-delay`` (load + engine init + readiness) with the startup
model's seconds for that state times ``--time-factor`` (default 1/60).

Actuation (``--actuation keda``, the default): the scale-up is not a replica patch. The benchmark
runs its own local cluster with the real KEDA v2.21.0 (operator + metrics adapter) and the HPA
(``--hpa-sync-period``, default 1 s), a ``warmscale scaler`` process, simulated engines listening on
the KWOK pods' IPs (``tests/cluster/engines.py``) and a ScaledObject (``external-push``,
``pollingInterval`` 1 s, ``targetInflightPerReplica`` 10). The initial replica carries 5 requests
in flight; at the scale-up the load steps to 75 (mid-band for 8 replicas), so the scaler decides 8
and KEDA and the HPA move the Deployment. Reported per case: load onset -> ``spec.replicas`` changed
(the actuation loops, wall seconds, counted 1:1 like the other overhead) next to the time-to-Ready.
``--actuation patch`` patches the scale subresource instead (and accepts ``--kubeconfig``).

Reported in model seconds: ``model = injected model seconds + real overhead``, where the real
overhead (scheduling, preemption, watch/patch latency, KWOK) is measured wall time minus the
injected wall time and counted 1:1 (a real cluster pays it in real time). Creation and Ready are
timestamped by this process's watch (sub-second; the API's timestamps have 1 s resolution).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.cliargs import positive_float, positive_int, writable_path
from warmscale.warmpool import objects as ob
from warmscale.warmpool.kube import Cache
from warmscale.warmpool.model_uri import CacheKey, parse_model_uri, staged_label_key
from warmscale.warmpool.planning import prepull_state
from warmscale.warmpool.startup_model import (
    PROFILES,
    SLEEPING,
    SOURCE_DOC,
    VARIANTS,
    StartupProfile,
    WarmState,
    ladder,
    profile,
    time_to_ready,
)

log = logging.getLogger("warmscale.bench.cold_vs_warm")
START_DELAY = "sim.warmscale.io/start-delay"
READY_DELAY = "sim.warmscale.io/ready-delay"
JOB_DURATION = "sim.warmscale.io/job-duration"
BENCH_LABEL = "warmscale.io/bench"
MODEL_URI = "hf://meta-llama/Llama-3.1-8B-Instruct@0e9e39f249a16976918f6564b8830bc894c89659"
PRE_START_PHASES = ("provision", "image_pull", "weights_download")
P = "warmscale.io/"
MERGE = "application/merge-patch+json"
DEFAULT_JSON = "benchmarks/results/cold_vs_warm.json"
DEFAULT_PNG = "benchmarks/results/cold_vs_warm.png"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=os.environ.get("WARMSCALE_KUBECONFIG"),
                        help="admin kubeconfig of a running harness cluster (default: $WARMSCALE_KUBECONFIG; "
                             "otherwise a cluster is started and stopped)")
    parser.add_argument("--profiles", default="8b-h100,8b-h100-fastload",
                        help=f"comma-separated startup profiles/variants (known: "
                             f"{', '.join([*PROFILES, *VARIANTS])}); the first is the reference")
    parser.add_argument("--from-replicas", type=positive_int, default=1, help="replicas before the scale-up")
    parser.add_argument("--to-replicas", type=positive_int, default=8, help="replicas the scale-up asks for")
    parser.add_argument("--time-factor", type=positive_float, default=None,
                        help="wall seconds per model second for the injected delays (default 0.35 with "
                             "--actuation keda, so KEDA's and the HPA's loops stay under 10%% of the warm start; "
                             "1/60 with patch)")
    parser.add_argument("--actuation", choices=("keda", "patch"), default="keda",
                        help="keda: load on the engines -> scaler -> real KEDA + HPA (own cluster); "
                             "patch: patch the Deployment's scale subresource")
    parser.add_argument("--hpa-sync-period", default="1s", help="HPA sync period of the cluster (keda actuation)")
    parser.add_argument("--json", dest="json_out", default=DEFAULT_JSON, type=writable_path,
                        help="where to write the results JSON")
    parser.add_argument("--plot", default=DEFAULT_PNG, type=writable_path, help="PNG path ('' for none)")
    parser.add_argument("--timeout", type=positive_float, default=240.0, help="per-phase wall-clock timeout")


# ---------------------------------------------------------------- pure helpers


def split_delays(prof: StartupProfile, warm: WarmState) -> tuple[float, float]:
    """(seconds before the container starts, seconds from start to Ready) in model time."""
    steps = ladder(prof, warm)
    before = sum(s for name, s in steps if name in PRE_START_PHASES)
    return before, sum(s for _, s in steps) - before


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def summarize(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(statistics.median(values), 1), "max": round(max(values), 1),
            "min": round(min(values), 1), "mean": round(statistics.fmean(values), 1)}


@dataclass
class Replica:
    name: str
    created: float  # wall clock when the watch first saw it
    node: str = ""
    bound: float | None = None
    ready: float | None = None
    state: str = ""
    warm: dict[str, bool] = field(default_factory=dict)
    model_injected_s: float = 0.0
    wall_injected_s: float = 0.0

    def result(self) -> dict[str, Any]:
        assert self.ready is not None
        wall = self.ready - self.created
        overhead = wall - self.wall_injected_s
        return {"pod": self.name, "node": self.node, "warm_state": self.state, **self.warm,
                "model_injected_s": round(self.model_injected_s, 1), "wall_s": round(wall, 3),
                "overhead_wall_s": round(overhead, 3),
                "time_to_ready_model_s": round(self.model_injected_s + max(0.0, overhead), 1)}


# ---------------------------------------------------------------- the delay injector


class DelayInjector:
    """Watches a namespace; gives each bound replica the startup-model delays of its node's warm state."""

    def __init__(self, api: client.ApiClient, ns: str, app: str, prof: StartupProfile, factor: float) -> None:
        self.core: Any = client.CoreV1Api(api)
        self.ns, self.app, self.prof, self.factor = ns, app, prof, factor
        self.measuring = False  # before the scale-up: existing replicas start immediately
        self.replicas: dict[str, Replica] = {}
        self.placeholder_left: dict[str, int] = {}  # node -> placeholders of the workload gone since scale-up
        self.claimed: dict[str, int] = {}
        self.pods = Cache("pods", functools.partial(self.core.list_namespaced_pod, ns), self._on_pod)
        self.nodes = Cache("nodes", self.core.list_node, lambda _t, _o: None)
        self._todo: asyncio.Queue[str] = asyncio.Queue()
        self.errors: list[str] = []

    def _on_pod(self, typ: str, pod: dict[str, Any]) -> None:
        m, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        labels = m.get("labels") or {}
        now = time.time()
        if labels.get(ob.ROLE) == "placeholder" and spec.get("nodeName") and self.measuring and (
                typ == "DELETED" or m.get("deletionTimestamp")):
            uid = str(m.get("uid"))
            if uid not in self.claimed:  # count each placeholder once
                self.claimed[uid] = 1
                node = spec["nodeName"]
                self.placeholder_left[node] = self.placeholder_left.get(node, 0) + 1
        if labels.get("app") != self.app or ob.is_managed(pod) or typ == "DELETED":
            return
        name = str(m.get("name"))
        r = self.replicas.get(name)
        if r is None:
            r = self.replicas[name] = Replica(name=name, created=now)
        if spec.get("nodeName") and r.bound is None:
            r.bound, r.node = now, spec["nodeName"]
            r.warm["nominated"] = st.get("nominatedNodeName") == r.node
            self._todo.put_nowait(name)
        if r.ready is None and any(c.get("type") == "Ready" and c.get("status") == "True"
                                   for c in st.get("conditions") or []):
            r.ready = now

    def warm_state(self, r: Replica) -> WarmState:
        node = (self.nodes.items.get(f"/{r.node}") or {}).get("metadata") or {}
        label = staged_label_key(CacheKey(parse_model_uri(MODEL_URI), self.ns))  # the identity names the namespace
        staged = (node.get("labels") or {}).get(label) == "true"
        pulled = any(
            (p.get("metadata") or {}).get("annotations", {}).get(ob.NODE_ANN) == r.node
            and ((p.get("metadata") or {}).get("labels") or {}).get(ob.ROLE) == "prepull"
            and prepull_state(p) == "pulled" for p in self.pods.items.values())
        held = self.placeholder_left.get(r.node, 0) > 0 or r.warm.get("nominated", False)
        if self.placeholder_left.get(r.node, 0) > 0:
            self.placeholder_left[r.node] -= 1
        return WarmState(capacity_held=held, image_present=pulled, weights_local=staged,
                         compile_cache=staged)

    async def _inject(self) -> None:
        while True:
            name = await self._todo.get()
            r = self.replicas[name]
            try:
                if not self.measuring:
                    body = {"metadata": {"annotations": {START_DELAY: "0s", READY_DELAY: "0s"}}}
                    r.state = "pre-existing"
                else:
                    await asyncio.sleep(0.05)  # let the placeholder's deletion event arrive first
                    warm = self.warm_state(r)
                    before, after = split_delays(self.prof, warm)
                    r.state = warm.label()
                    r.warm.update(capacity_held=warm.capacity_held, image_present=warm.image_present,
                                  weights_local=warm.weights_local)
                    r.model_injected_s = before + after
                    r.wall_injected_s = (before + after) * self.factor
                    assert r.bound is not None
                    body = {"metadata": {"annotations": {
                        START_DELAY: rfc3339(r.bound + before * self.factor),
                        READY_DELAY: f"{after * self.factor:.3f}s"}}}
                await self.core.patch_namespaced_pod(name, self.ns, body, _content_type=MERGE)
            except ApiException as exc:
                self.errors.append(f"{name}: {exc.status} {exc.reason}")

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.pods.run()), asyncio.create_task(self.nodes.run()),
                 asyncio.create_task(self._inject())]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------- one case


def node_pool(ns: str, count: int) -> Any:
    from warmscale.localcluster.fleet import NodePool

    return NodePool(name=ns, count=count, instance_type="a3-highgpu-1g", cpu="26", memory="234Gi",
                    gpu_product="NVIDIA-H100-80GB-HBM3", gpu_count=1, gpu_memory_mib=81559, gpu_family="hopper",
                    extra_labels={BENCH_LABEL: ns})


def deployment(ns: str, name: str, replicas: int, warm: bool, standby: int,
               metrics_port: int | None = None) -> dict[str, Any]:
    from warmscale.localcluster import workloads as w

    d = w.deployment(name, replicas, gpus=1, cpu="8", memory="64Gi", node_selector={BENCH_LABEL: ns},
                     annotations={START_DELAY: "1h", READY_DELAY: "0s"})
    if metrics_port is not None:
        d["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": metrics_port}]
    d["metadata"]["annotations"] = {
        P + "enabled": "true" if warm else "false", P + "standby": str(standby),
        P + "prestage-nodes": str(standby), P + "model-uri": MODEL_URI,
        P + "stage-pod-annotations": json.dumps({JOB_DURATION: "1s"}),
    }
    return d


async def _wait(pred: Any, within: float, what: str, interval: float = 0.1) -> Any:
    try:
        async with asyncio.timeout(within):
            while True:
                v = await pred()
                if v:
                    return v
                await asyncio.sleep(interval)
    except TimeoutError:
        raise RuntimeError(f"timed out after {within:.0f}s waiting for {what}") from None


ENGINE_PORT = 8000
PER_REPLICA = 10  # targetInflightPerReplica (keda actuation); loads are (n - 0.5) x this, mid-band


class KedaActuation:
    """The scale-up through the real KEDA: engines on the pods, a scaler, a ScaledObject, load."""

    def __init__(self, api: client.ApiClient, run: Any, ns: str, name: str, args: argparse.Namespace) -> None:
        from warmscale.localcluster.engines import PodEngines
        from warmscale.localcluster.scaling import ReplicaTimeline

        self.api, self.run, self.ns, self.name, self.args = api, run, ns, name, args
        self.queue = f"gateway:{ns}:{name}"
        self.engines = PodEngines(api, ns, f"app={name}", ENGINE_PORT, run.redis.url, self.queue)
        self.timeline = ReplicaTimeline(api, ns, name)

    async def start(self, scaler_address: str) -> None:
        from warmscale.localcluster.scaling import create_scaled_object, scaled_object, scaler_metadata

        await self.engines.start()
        self.timeline.start()
        a = self.args
        meta = scaler_metadata(self.name, ENGINE_PORT, self.run.redis.url, self.queue,
                               targetInflightPerReplica=str(PER_REPLICA), maxReplicas=str(a.to_replicas),
                               minReplicas=str(a.from_replicas), scaleDownStabilizationSeconds="600")
        await create_scaled_object(self.api, self.ns, scaled_object(
            self.name, scaler_address, meta, min_replicas=a.from_replicas, max_replicas=a.to_replicas))
        self.engines.set_concurrency(PER_REPLICA * a.from_replicas - PER_REPLICA // 2)

    async def wait_steady(self) -> None:
        from warmscale.localcluster.scaling import read_hpa

        async def steady() -> bool:
            hpa = await read_hpa(self.api, self.ns, self.name)
            conds = (hpa.status.conditions if hpa is not None and hpa.status else None) or []
            active = any(c.type == "ScalingActive" and c.status == "True" for c in conds)
            return active and self.timeline.spec == self.args.from_replicas and bool(self.engines.ready_engines())

        await _wait(steady, self.args.timeout, "HPA active on the initial load")
        await asyncio.sleep(2.0)

    async def scale_up(self) -> float:
        """Step the load; return the wall time (time.time()) of the onset."""
        self.engines.set_concurrency(PER_REPLICA * self.args.to_replicas - PER_REPLICA // 2)
        await _wait(lambda: _true(self.engines.onset_at is not None), 10, "load onset", interval=0.005)
        assert self.engines.onset_at is not None
        return time.time() - (time.monotonic() - self.engines.onset_at)

    def actuation(self) -> dict[str, Any]:
        onset = self.engines.onset_at
        assert onset is not None
        first = next((t for t, s, _ in self.timeline.samples if t >= onset and s > self.args.from_replicas), None)
        full = next((t for t, s, _ in self.timeline.samples if t >= onset and s >= self.args.to_replicas), None)
        return {"onset_to_replicas_changed_wall_s": round(first - onset, 3) if first else None,
                "onset_to_replicas_target_wall_s": round(full - onset, 3) if full else None,
                "replicas_seen": self.timeline.specs_since(onset)}

    async def aclose(self) -> None:
        await self.timeline.aclose()
        await self.engines.aclose()


async def _true(v: bool) -> bool:
    return v


@dataclass
class CaseHooks:
    """For callers that run cases side by side (``warmscale demo --cluster``)."""

    on_actuation: Any = None  # called with the KedaActuation once it runs
    before_scale_up: Any = None  # awaited right before the load step / patch


async def run_case(api: client.ApiClient, prof: StartupProfile, warm: bool, args: argparse.Namespace,
                   keda_run: Any = None, scaler_address: str | None = None,
                   hooks: CaseHooks | None = None) -> dict[str, Any]:
    from warmscale.localcluster import fleet

    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    ns = f"cvw-{'warm' if warm else 'cold'}-{uuid.uuid4().hex[:5]}"
    name, n_nodes, standby = "llm", args.to_replicas, args.to_replicas - args.from_replicas
    await core.create_namespace({"metadata": {"name": ns}})
    pool = node_pool(ns, n_nodes)
    nodes = [pool.node_name(i) for i in range(n_nodes)]
    inj = DelayInjector(api, ns, name, prof, args.time_factor)
    inj_task = asyncio.create_task(inj.run())
    ctl_task: asyncio.Task[None] | None = None
    ctl: Any = None
    act: KedaActuation | None = None
    t_setup = time.monotonic()
    try:
        await fleet.create_nodes(api, [pool])
        await _wait(lambda: _all_ready_nodes(core, nodes), args.timeout, "bench nodes Ready")
        port = ENGINE_PORT if keda_run is not None else None
        await apps.create_namespaced_deployment(ns, deployment(ns, name, args.from_replicas, warm, standby, port))
        await _wait(lambda: _ready_count(inj, args.from_replicas), args.timeout, "initial replicas Ready")
        if keda_run is not None:
            assert scaler_address is not None
            await _wait(lambda: _sa(core, ns), args.timeout, "default ServiceAccount")
            act = KedaActuation(api, keda_run, ns, name, args)
            await act.start(scaler_address)
            if hooks is not None and hooks.on_actuation is not None:
                hooks.on_actuation(act)
        if warm:
            from warmscale.warmpool.controller import Controller, Options, install_priority_class

            await install_priority_class(api)  # part of the install; the controller only reads it
            ctl = Controller(api, Options(namespace=ns, resync_s=2.0, stager_image="warmscale:bench"))
            ctl_task = asyncio.create_task(ctl.run())

            async def pool_warm() -> bool:
                d = await apps.read_namespaced_deployment(name, ns)
                st = json.loads((d.metadata.annotations or {}).get(P + "status", "{}"))
                return bool(st.get("staged") == f"{standby}/{standby}"
                            and st.get("placeholders") == f"{standby}/{standby}"
                            and st.get("prepulled") == f"{standby}/{standby}")

            await _wait(pool_warm, args.timeout, "warm pool staged, pre-pulled and held")
        if act is not None:
            await act.wait_steady()
        setup_s = time.monotonic() - t_setup
        if hooks is not None and hooks.before_scale_up is not None:
            await hooks.before_scale_up()
        inj.measuring = True
        if act is not None:
            t0 = await act.scale_up()
        else:
            t0 = time.time()
            await apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": args.to_replicas}})
        await _wait(lambda: _ready_count(inj, args.to_replicas), args.timeout, f"{args.to_replicas} replicas Ready")
        wall = time.time() - t0
        new = [r.result() for r in inj.replicas.values() if r.state != "pre-existing" and r.ready is not None]
        new.sort(key=lambda x: x["time_to_ready_model_s"])
        out: dict[str, Any] = {
            "case": "warm" if warm else "cold", "profile": prof.name, "namespace": ns,
            "warm_pool": {"enabled": warm, "standby": standby if warm else 0, "prestage_nodes": standby if warm else 0},
            "replicas": new,
            "time_to_ready_model_s": summarize([x["time_to_ready_model_s"] for x in new]),
            "overhead_wall_s": summarize([x["overhead_wall_s"] for x in new]),
            "states": sorted({x["warm_state"] for x in new}),
            "setup_wall_s": round(setup_s, 1), "scale_up_wall_s": round(wall, 2),
            "injector_errors": inj.errors,
            "actuation": act.actuation() if act is not None else {"kind": "patch"},
        }
        if act is not None:
            out["actuation"]["kind"] = "keda"
            ttr = [x["time_to_ready_model_s"] * args.time_factor for x in new]
            out["actuation"]["warm_or_cold_start_wall_s_p50"] = round(statistics.median(ttr), 3) if ttr else None
        if ctl is not None:
            t = ctl.ttr.get(f"Deployment/{ns}/{name}")
            out["controller_measured_wall_s"] = t.medians() if t else {}
        return out
    finally:
        if act is not None:
            await act.aclose()
        if ctl_task is not None:
            ctl_task.cancel()
            await asyncio.gather(ctl_task, return_exceptions=True)
        inj_task.cancel()
        await asyncio.gather(inj_task, return_exceptions=True)
        await _cleanup(core, ns, nodes, apps)


async def _sa(core: Any, ns: str) -> bool:
    try:
        await core.read_namespaced_service_account("default", ns)
        return True
    except ApiException:
        return False


async def _all_ready_nodes(core: Any, names: list[str]) -> bool:
    from warmscale.localcluster.fleet import node_ready

    for n in names:
        try:
            if not node_ready(await core.read_node(n)):
                return False
        except ApiException:
            return False
    return True


async def _ready_count(inj: DelayInjector, n: int) -> bool:
    return sum(1 for r in inj.replicas.values() if r.ready is not None) >= n


async def _cleanup(core: Any, ns: str, nodes: list[str], apps: Any = None) -> None:
    if apps is not None:  # the controller is stopped: release its cache clean-up finalizer ourselves
        with contextlib.suppress(ApiException):
            for d in (await apps.list_namespaced_deployment(ns)).items:
                if ob.FINALIZER in (d.metadata.finalizers or []):
                    i = d.metadata.finalizers.index(ob.FINALIZER)
                    await apps.patch_namespaced_deployment(d.metadata.name, ns, [
                        {"op": "test", "path": f"/metadata/finalizers/{i}", "value": ob.FINALIZER},
                        {"op": "remove", "path": f"/metadata/finalizers/{i}"}],
                        _content_type="application/json-patch+json")
    with contextlib.suppress(ApiException):
        await core.delete_namespace(ns)
    for n in nodes:
        with contextlib.suppress(ApiException):
            pods = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={n}")
            for p in pods.items:
                with contextlib.suppress(ApiException):
                    await core.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            await core.delete_node(n)


# ---------------------------------------------------------------- report


def report(cases: list[dict[str, Any]], profiles: list[StartupProfile], factor: float) -> dict[str, Any]:
    by = {(c["profile"], c["case"]): c for c in cases}
    rows = []
    for prof in profiles:
        cold, warm = by.get((prof.name, "cold")), by.get((prof.name, "warm"))
        if not cold or not warm:
            continue
        cp50, wp50 = cold["time_to_ready_model_s"]["p50"], warm["time_to_ready_model_s"]["p50"]
        cmax, wmax = cold["time_to_ready_model_s"]["max"], warm["time_to_ready_model_s"]["max"]
        rows.append({
            "profile": prof.name, "cold_p50_s": cp50, "cold_max_s": cmax, "warm_p50_s": wp50, "warm_max_s": wmax,
            "warm_over_cold_p50": round(wp50 / cp50, 4), "warm_over_cold_max": round(wmax / cmax, 4),
            "goal_10pct_met": wmax / cmax <= 0.10 and wp50 / cp50 <= 0.10,
            "model_only": {"cold_s": time_to_ready(prof, WarmState()),
                           "placeholder_staged_s": time_to_ready(prof, WarmState(True, True, True, True)),
                           "sleeping_s": time_to_ready(prof, SLEEPING)},
        })
    return {
        "benchmark": "cold_vs_warm", "time_factor": factor,
        "units": "model seconds (injected startup-model delay + measured real orchestration overhead at 1:1)",
        "startup_model": {p.name: {"phases_s": {k: v for k, v in asdict(p).items() if k.endswith("_s")},
                                   "sources": dict(p.sources)} for p in profiles},
        "source_doc": SOURCE_DOC,
        "summary": rows, "cases": cases,
    }


def table(result: dict[str, Any]) -> str:
    lines = ["| profile | cold p50 s | cold max s | warm p50 s | warm max s | warm/cold p50 | warm/cold max | <=10% |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["summary"]:
        lines.append(f"| {r['profile']} | {r['cold_p50_s']:.1f} | {r['cold_max_s']:.1f} | {r['warm_p50_s']:.1f} | "
                     f"{r['warm_max_s']:.1f} | {100 * r['warm_over_cold_p50']:.1f}% | "
                     f"{100 * r['warm_over_cold_max']:.1f}% | {'yes' if r['goal_10pct_met'] else 'no'} |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(cases))
    for i, c in enumerate(cases):
        vals = [x["time_to_ready_model_s"] for x in c["replicas"]]
        xs = [j + i * width for j in range(len(vals))]
        lab = f"{c['profile']} {c['case']} (p50 {c['time_to_ready_model_s']['p50']:.0f} s)"
        ax.bar(xs, vals, width=width, label=lab)
    ax.set_xlabel("new replica (sorted by time-to-Ready)")
    ax.set_ylabel("time-to-Ready, model seconds")
    ax.set_title(f"Scale 1 -> 8 replicas: warm pool off (cold) vs on (warm); time factor {result['time_factor']:.4g}")
    ax.set_ylim(0, 1.3 * max(x["time_to_ready_model_s"] for c in cases for x in c["replicas"]))
    ax.legend(fontsize=8, ncol=2, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- entry points


async def _bench(args: argparse.Namespace, kubeconfig: Path, keda_run: Any = None) -> dict[str, Any]:
    from warmscale.warmpool.cli import make_api_client

    profiles = [profile(n.strip()) for n in args.profiles.split(",") if n.strip()]
    api = await make_api_client(str(kubeconfig))
    cases = []
    try:
        for prof in profiles:
            for warm in (False, True):
                log.info("case", extra={"profile": prof.name, "warm": warm})
                scaler = keda_run.scaler() if keda_run is not None else None
                try:
                    c = await run_case(api, prof, warm, args, keda_run, scaler.address if scaler else None)
                finally:
                    if scaler is not None:
                        scaler.stop()
                print(f"  {prof.name:18s} {c['case']:4s} p50 {c['time_to_ready_model_s']['p50']:6.1f} s  "
                      f"max {c['time_to_ready_model_s']['max']:6.1f} s  states {c['states']}  "
                      f"(scale-up {c['scale_up_wall_s']:.1f} s wall; onset -> replicas changed "
                      f"{c['actuation'].get('onset_to_replicas_changed_wall_s', '-')} s wall)", file=sys.stderr)
                cases.append(c)
    finally:
        await api.close()
    out = report(cases, profiles, args.time_factor)
    if keda_run is not None:
        out["actuation"] = {"kind": "real KEDA v2.21.0 + HPA", "keda_polling_interval_s": 1,
                            "hpa_sync_period": args.hpa_sync_period,
                            "per_case": {f"{c['profile']}/{c['case']}": c["actuation"] for c in cases}}
    return out


def run(args: argparse.Namespace) -> int:
    from warmscale.localcluster import Cluster, ClusterConfig
    from warmscale.localcluster.fleet import CPU

    if args.time_factor is None:
        args.time_factor = 0.35 if args.actuation == "keda" else 1 / 60
    cluster = None
    if args.actuation == "keda":
        from warmscale.localcluster.binaries import BinariesMissing
        from warmscale.localcluster.kedarun import KedaRun

        print("starting a local cluster with the real KEDA (tests/cluster harness)...", file=sys.stderr)
        try:
            with KedaRun.start(hpa_sync_period=args.hpa_sync_period, pools=[replace(CPU, count=1)]) as keda_run:
                result = asyncio.run(_bench(args, keda_run.cluster.kubeconfig, keda_run))
        except BinariesMissing as exc:
            print(f"error: {exc}\n(or run with --actuation patch)", file=sys.stderr)
            return 2
    else:
        if args.kubeconfig:
            kubeconfig = Path(args.kubeconfig)
        else:
            print("starting a local cluster (tests/cluster harness)...", file=sys.stderr)
            cluster = Cluster.start(ClusterConfig(pools=[replace(CPU, count=1)], die_with_parent=True))
            kubeconfig = cluster.kubeconfig
        try:
            result = asyncio.run(_bench(args, kubeconfig))
        finally:
            if cluster is not None:
                cluster.stop()
    result["command"] = "python -m warmscale.benchmarks.cold_vs_warm " + " ".join(sys.argv[1:])
    print(table(result))
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json_out}", file=sys.stderr)
    if args.plot:
        plot(result, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    failed = [c for c in result["cases"] if c["injector_errors"]]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warmscale.benchmarks.cold_vs_warm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    logging.basicConfig(level=logging.WARNING)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
