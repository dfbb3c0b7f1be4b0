"""One scale-up case on the local cluster, warm pool off (cold) or on (warm), with the replicas'
start-up delays from the startup model; used by ``warmscale bench cold-vs-warm``
(benchmarks/cold_vs_warm.py, which documents the method) and ``warmscale demo --cluster``
(warmscale/demo/cluster.py, which runs a cold and a warm case side by side).

:class:`DelayInjector` watches the case's namespace and gives each bound replica the startup
model's delays for its node's warm state, read from the cluster (placeholder left, image pre-pulled,
weights staged); :class:`KedaActuation` drives the scale-up through the real KEDA (engines on the
pods, a ``warmscale scaler``, a ScaledObject, a load step); :func:`run_case` runs one case.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.warmpool import objects as ob
from warmscale.warmpool.kube import Cache
from warmscale.warmpool.model_uri import CacheKey, parse_model_uri, staged_label_key
from warmscale.warmpool.planning import prepull_state
from warmscale.warmpool.startup_model import StartupProfile, WarmState, ladder

from .workloads import JOB_DURATION, READY_DELAY, START_DELAY

BENCH_LABEL = "warmscale.io/bench"
MODEL_URI = "hf://meta-llama/Llama-3.1-8B-Instruct@0e9e39f249a16976918f6564b8830bc894c89659"
PRE_START_PHASES = ("provision", "image_pull", "weights_download")
P = "warmscale.io/"
MERGE = "application/merge-patch+json"


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
    from .fleet import NodePool

    return NodePool(name=ns, count=count, instance_type="a3-highgpu-1g", cpu="26", memory="234Gi",
                    gpu_product="NVIDIA-H100-80GB-HBM3", gpu_count=1, gpu_memory_mib=81559, gpu_family="hopper",
                    extra_labels={BENCH_LABEL: ns})


def deployment(ns: str, name: str, replicas: int, warm: bool, standby: int,
               metrics_port: int | None = None) -> dict[str, Any]:
    from . import workloads as w

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
        from .engines import PodEngines
        from .scaling import ReplicaTimeline

        self.api, self.run, self.ns, self.name, self.args = api, run, ns, name, args
        self.queue = f"gateway:{ns}:{name}"
        self.engines = PodEngines(api, ns, f"app={name}", ENGINE_PORT, run.redis.url, self.queue)
        self.timeline = ReplicaTimeline(api, ns, name)

    async def start(self, scaler_address: str) -> None:
        from .scaling import create_scaled_object, scaled_object, scaler_metadata

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
        from .scaling import read_hpa

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
    from . import fleet

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
    from .fleet import node_ready

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
