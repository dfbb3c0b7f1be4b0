"""The hot pool's controller against the real API server and scheduler (KWOK GPU nodes with DRA
ResourceSlices): shared claims allocated by the real scheduler, sleepers of two models on one GPU,
bad input as Events with nothing deleted, and only warmscale's sleepers ever deleted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import NodePoolFactory, wait_for
from tests.keda.hot_rig import DRIVER, HotSide, SleeperEngines, events, publish_gpus, unpublish
from tests.servers import RedisServer
from warmscale.localcluster.engines import stop_task
from warmscale.localcluster.fleet import H100
from warmscale.localcluster.scaling import engine_deployment
from warmscale.scaler.hot_status import WakeIntent
from warmscale.scaler.kube import EventRecorder
from warmscale.warmpool.hot.engine_state import HOT_STATE
from warmscale.warmpool.hot.kube_source import kube_sleepers, kube_states
from warmscale.warmpool.hot.reconciler import HotReconciler
from warmscale.warmpool.hot.sleeper_pods import CLAIM_SELECTOR
from warmscale.warmpool.hot.sleepers import SLEEPER_SELECTOR
from warmscale.warmpool.hot.waker import Waker

pytestmark = pytest.mark.cluster


def hot_deployment(name: str, port: int, pool: str, engine: str = "vllm", standby: str = "1") -> dict[str, Any]:
    d = engine_deployment(name, 0, port)
    d["metadata"]["annotations"] = {"warmscale.io/hot-standby": standby, "warmscale.io/hot-pool": pool,
                                    "warmscale.io/engine": engine, "warmscale.io/hot-host-ram": "16Gi"}
    d["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    return d


async def pool_nodes(api: client.ApiClient, make: NodePoolFactory, pool: str, count: int = 1) -> list[str]:
    nodes = await make(replace(H100, name=f"{pool}", count=count))
    core = client.CoreV1Api(api)
    for n in nodes:
        await core.patch_node(n, {"metadata": {"annotations": {
            "warmscale.io/hot-pool": pool, "warmscale.io/hot-pool-host-ram": "64Gi",
            "warmscale.io/hot-pool-dra-driver": DRIVER}}})
    return nodes


async def sleeper_pods(core: client.CoreV1Api, ns: str) -> list[Any]:
    return list((await core.list_namespaced_pod(ns, label_selector=SLEEPER_SELECTOR)).items)


async def test_two_models_sleep_on_one_gpu_through_one_shared_claim_the_scheduler_allocates(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory) -> None:
    ns = k8s_namespace
    pool = f"p{ns[-6:]}"
    nodes = await pool_nodes(k8s_admin, k8s_node_pool, pool)
    slices = await publish_gpus(k8s_admin, nodes, count=1)
    apps, core, res = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin), client.ResourceV1Api(k8s_admin)
    try:
        for i, name in enumerate(("llama", "qwen")):
            await apps.create_namespaced_deployment(ns, hot_deployment(name, 8100 + i, pool))
        await apps.create_namespaced_deployment(ns, hot_deployment("tgi", 8102, pool, engine="tgi"))
        await apps.create_namespaced_deployment(ns, hot_deployment("mystery", 8103, pool, engine="mystery"))
        rec = HotReconciler(k8s_admin, namespace=ns, events=EventRecorder(core))
        first = await rec.reconcile()
        assert sorted(k.split("/")[0] for k in first.created) == ["Pod", "Pod", "ResourceClaim"], first
        assert f"{ns}/tgi" in first.off and f"{ns}/mystery" in first.off

        async def both_running() -> list[Any] | None:
            pods = await sleeper_pods(core, ns)
            return pods if len(pods) == 2 and all(p.spec.node_name and p.status.phase == "Running"
                                                  for p in pods) else None

        pods = await wait_for(both_running, within=30, what="both sleepers scheduled and running")
        assert {p.spec.node_name for p in pods} == {nodes[0]}
        claims = (await res.list_namespaced_resource_claim(ns, label_selector=CLAIM_SELECTOR)).items
        assert len(claims) == 1
        claim = claims[0]
        # The real scheduler allocated the one GPU to the shared claim and reserved it for both models.
        assert [r.device for r in claim.status.allocation.devices.results] == ["gpu-0"]
        assert {r.name for r in claim.status.reserved_for} == {p.metadata.name for p in pods}
        assert all("app" not in (p.metadata.labels or {}) for p in pods)  # never the workloads' selector
        tgi = await events(k8s_admin, ns, "HotStandbyUnsupported")
        assert tgi and "TGI has no sleep mode" in tgi[0].message and tgi[0].involved_object.name == "tgi"
        unknown = await events(k8s_admin, ns, "HotStandbyUnknownEngine")
        assert unknown and unknown[0].involved_object.name == "mystery" and "'mystery'" in unknown[0].message

        # A second pass changes nothing (no churn).
        again = await rec.reconcile()
        assert again.created == [] and again.deleted == [], again

        # Opting out removes that workload's sleeper (warmscale's, by its labels); the claim stays for the other.
        await apps.patch_namespaced_deployment("qwen", ns, {"metadata": {"annotations": {
            "warmscale.io/hot-standby": None}}})
        out = await rec.reconcile()
        assert [d for d in out.deleted if d.startswith("Pod/")] and not [d for d in out.deleted if "Claim" in d], out
    finally:
        await unpublish(k8s_admin, slices)


async def test_a_pool_without_dra_or_dcgm_gets_an_event_and_nothing_is_deleted(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory) -> None:
    ns = k8s_namespace
    pool = f"n{ns[-6:]}"
    nodes = await pool_nodes(k8s_admin, k8s_node_pool, pool)  # no ResourceSlices, no DCGM
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    await apps.create_namespaced_deployment(ns, hot_deployment("llama", 8100, pool))
    # A pod that looks like a sleeper of that workload but that warmscale did not create.
    foreign = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "foreign", "labels": {"warmscale.io/role": "hot-sleeper"},
        "annotations": {"warmscale.io/hot-workload": f"{ns}/llama", "warmscale.io/hot-index": "0"}},
        "spec": {"nodeName": nodes[0], "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "vllm:test"}]}}
    await core.create_namespaced_pod(ns, foreign)
    rec = HotReconciler(k8s_admin, namespace=ns, events=EventRecorder(core))
    out = await rec.reconcile()
    assert out.created == [] and out.deleted == [], out
    evs = await events(k8s_admin, ns, "HotPoolNoPlacement")
    assert evs and "no DRA ResourceSlices and no DCGM pod attribution" in evs[0].message
    assert (await core.read_namespaced_pod("foreign", ns)).metadata.deletion_timestamp is None


async def test_a_time_sliced_pool_places_by_node_and_reads_each_sleepers_gpu_from_dcgm(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory) -> None:
    """No ResourceSlices, but dcgm-exporter reports the pool node's GPUs: the sleeper is pinned to the
    node, and its GPU is the one DCGM attributes it to (unknown until then: no sleeper for the waker)."""
    from warmscale.warmpool.hot.kube_source import kube_sleepers

    ns = k8s_namespace
    pool = f"t{ns[-6:]}"
    nodes = await pool_nodes(k8s_admin, k8s_node_pool, pool)
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    await apps.create_namespaced_deployment(ns, hot_deployment("llama", 8100, pool))
    attributed: dict[str, str] = {}

    async def dcgm() -> str:
        lines = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}",Hostname="{nodes[0]}"'
                 + (f',namespace="{ns}",pod="{attributed[f"GPU-{i}"]}"' if f"GPU-{i}" in attributed else "") + "} 0"
                 for i in range(2)]
        return "\n".join(lines) + "\n"

    rec = HotReconciler(k8s_admin, namespace=ns, events=EventRecorder(core), dcgm=dcgm)
    out = await rec.reconcile()
    assert [c for c in out.created if c.startswith("Pod/")] and not [c for c in out.created if "Claim" in c], out
    pods = await wait_for(lambda: _running(core, ns), within=30, what="the sleeper running")
    pod = pods[0]
    assert pod.spec.node_name == nodes[0] and pod.spec.resource_claims is None
    assert pod.metadata.annotations["warmscale.io/hot-device"] == "dcgm"
    source = kube_sleepers(core, ns, rec.device_of)
    assert await source() == []  # not attributed yet: never woken
    attributed["GPU-1"] = pod.metadata.name
    again = await rec.reconcile()
    assert again.created == [] and again.deleted == [], again
    [s] = await source()
    assert s.device == "dcgm/GPU-1" and s.node == nodes[0]


async def _running(core: client.CoreV1Api, ns: str) -> list[Any] | None:
    pods = await sleeper_pods(core, ns)
    return pods if pods and all(p.status.phase == "Running" and p.status.pod_ip for p in pods) else None


async def test_a_sleeper_is_recreated_from_a_changed_template_and_never_deleted_while_awake(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory) -> None:
    ns = k8s_namespace
    pool = f"r{ns[-6:]}"
    nodes = await pool_nodes(k8s_admin, k8s_node_pool, pool)
    slices = await publish_gpus(k8s_admin, nodes, count=1)
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    busy: set[str] = set()
    try:
        await apps.create_namespaced_deployment(ns, hot_deployment("llama", 8100, pool))
        rec = HotReconciler(k8s_admin, namespace=ns, events=EventRecorder(core), busy=lambda: busy)
        await rec.reconcile()
        [pod] = await wait_for(lambda: _running(core, ns), within=30, what="the sleeper running")
        key = f"{ns}/{pod.metadata.name}"
        patch = {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}
        await apps.patch_namespaced_deployment("llama", ns, patch)
        busy.add(key)  # awake (serving, perhaps): kept although its template is old
        assert (await rec.reconcile()).deleted == []
        busy.clear()
        assert (await rec.reconcile()).deleted == [f"Pod/{key}"]

        async def recreated() -> bool:
            pods = await sleeper_pods(core, ns)
            if not pods:
                await rec.reconcile()  # the next pass creates it once the old one is gone
                return False
            return pods[0].metadata.uid != pod.metadata.uid and pods[0].metadata.annotations.get("rev") == "2"
        await wait_for(recreated, within=30, what="the sleeper made from the new template")
        [new] = await sleeper_pods(core, ns)
        busy.add(f"{ns}/{new.metadata.name}")
        await apps.patch_namespaced_deployment("llama", ns, {"metadata": {"annotations": {
            "warmscale.io/hot-standby": None}}})
        assert (await rec.reconcile()).deleted == []  # opted out, but awake: deleted once it sleeps
        busy.clear()
        last = await rec.reconcile()
        # The pod, and its claim with it (no sleeper of this namespace references it any more).
        assert last.deleted[0] == f"Pod/{ns}/{new.metadata.name}" and last.deleted[1].startswith("ResourceClaim/")
    finally:
        await unpublish(k8s_admin, slices)


async def test_an_sglang_sleeper_is_counted_asleep_woken_and_counted_awake_from_the_state_on_its_pod(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
        redis_server: RedisServer) -> None:
    """SGLang cannot be asked whether it sleeps: the waker records on the pod the state it drove the
    engine to (warmscale.io/hot-state), and a restarted waker reads it back. Before that record, the
    sleeper the controller created for an SGLang workload was never counted (nor slept: it held its GPU)."""
    ns = k8s_namespace
    pool = f"s{ns[-6:]}"
    nodes = await pool_nodes(k8s_admin, k8s_node_pool, pool)
    slices = await publish_gpus(k8s_admin, nodes, count=1)
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    await apps.create_namespaced_deployment(ns, hot_deployment("sgl", 8110, pool, engine="sglang"))
    engines = SleeperEngines(k8s_admin, ns).start()
    hot = await HotSide(k8s_admin, ns, redis_server.url).start()
    assert hot.store is not None and hot.waker is not None
    store = hot.store

    async def state() -> str | None:
        pods = await sleeper_pods(core, ns)
        return (pods[0].metadata.annotations or {}).get(HOT_STATE) if len(pods) == 1 else None

    async def counted(asleep: int, awake: int) -> bool:
        hs = await store.get_hot_status(ns, "sgl")
        return hs is not None and (hs.asleep, hs.awake) == (asleep, awake)

    try:
        # Created awake@0; its canary recorded, put to sleep (no intent ever asked for it), counted asleep.
        await wait_for(lambda: _is(state, "asleep@0"), within=60, what="the SGLang sleeper recorded asleep")
        await wait_for(lambda: counted(1, 0), within=15, what="the SGLang sleeper counted asleep")
        [se] = engines.engines.values()
        assert se.engine.sleep_level == 1 and not se.engine.dead

        # A restarted waker: the state is read back from the pod, counted at once, nothing sent to change it.
        await stop_task(hot._tasks[1])
        assert hot._session is not None
        again = Waker(store, kube_sleepers(core, ns), hot._session, record=kube_states(core))
        await again.resync()
        assert again.status(f"{ns}/sgl").asleep == 1 and se.engine.sleep_level == 1

        # Woken: counted awake once its canary passed, and recorded awake.
        await store.put_wake_intent(WakeIntent(ns, "sgl", 1, time.time(), "wake"))
        task = asyncio.create_task(again.run())
        try:
            await wait_for(lambda: counted(0, 1), within=20, what="the SGLang sleeper counted awake")
            assert se.engine.awake and await state() == "awake@0"
            hs = await store.get_hot_status(ns, "sgl")
            assert hs is not None and hs.awake_urls == [f"http://{se.ip}:8110"]
            # Released: drains, sleeps, recorded asleep again.
            await store.put_wake_intent(WakeIntent(ns, "sgl", 0, time.time(), "release"))
            await wait_for(lambda: _is(state, "asleep@0"), within=30, what="the SGLang sleeper asleep again")
            await wait_for(lambda: counted(1, 0), within=15, what="counted asleep again")
        finally:
            await stop_task(task)
    finally:
        await hot.aclose()
        await engines.aclose()
        await unpublish(k8s_admin, slices)


async def _is(read: Any, want: str) -> bool:
    return bool(await read() == want)


async def test_several_watched_namespaces_share_the_pool_one_gpu_each_planned_in_one_pass(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory) -> None:
    """`--namespace a,b`: the pool's controller lists each watched namespace (never cluster-wide: its
    namespaced RBAC would deny it) and plans them in one pass; a GPU's claim belongs to one namespace,
    so the second namespace gets the GPU the first does not hold. Before, several namespaces turned
    the hot pool off (its cluster-wide lists were denied)."""
    ns = k8s_namespace
    ns2 = f"{ns}-b"
    pool = f"m{ns[-6:]}"
    core, apps, res = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin), client.ResourceV1Api(k8s_admin)
    await core.create_namespace({"metadata": {"name": ns2}})
    nodes = await pool_nodes(k8s_admin, k8s_node_pool, pool)
    slices = await publish_gpus(k8s_admin, nodes, count=2)
    try:
        for n in (ns, ns2):
            await apps.create_namespaced_deployment(n, hot_deployment("llama", 8100, pool))
        rec = HotReconciler(k8s_admin, namespace=f"{ns},{ns2}", events=EventRecorder(core))
        first = await rec.reconcile()
        made = sorted(tuple(c.split("/")[:2]) for c in first.created)
        assert made == sorted([("Pod", ns), ("Pod", ns2), ("ResourceClaim", ns), ("ResourceClaim", ns2)]), first

        async def running() -> list[Any] | None:
            pods = [*await sleeper_pods(core, ns), *await sleeper_pods(core, ns2)]
            return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None

        await wait_for(running, within=30, what="a sleeper in each namespace scheduled and running")
        allocated = []
        for n in (ns, ns2):
            [claim] = (await res.list_namespaced_resource_claim(n, label_selector=CLAIM_SELECTOR)).items
            allocated += [r.device for r in claim.status.allocation.devices.results]
        assert sorted(allocated) == ["gpu-0", "gpu-1"]  # one GPU each, allocated by the real scheduler
        again = await rec.reconcile()
        assert again.created == [] and again.deleted == [], again
        # The waker's source lists both namespaces too.
        found = await kube_sleepers(core, f"{ns},{ns2}")()
        assert sorted(s.workload for s in found) == sorted([f"{ns}/llama", f"{ns2}/llama"])
    finally:
        await unpublish(k8s_admin, slices)
        await core.delete_namespace(ns2)



async def test_a_sleeper_whose_unknown_state_outlived_its_bound_is_replaced_with_an_event_never_while_busy(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory) -> None:
    """The waker lists a sleeper whose unknown state outlived its bound (warmpool/hot/unknown_life.py,
    ``expired_pods``): the controller deletes it and creates a new pod, with a HotSleeperReplaced Event
    saying why; not while the waker counts it busy; and no pod warmscale did not create."""
    ns = k8s_namespace
    pool = f"u{ns[-6:]}"
    nodes = await pool_nodes(k8s_admin, k8s_node_pool, pool)
    slices = await publish_gpus(k8s_admin, nodes, count=1)
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    expired: dict[str, str] = {}
    busy: set[str] = set()
    try:
        await apps.create_namespaced_deployment(ns, hot_deployment("llama", 8100, pool))
        rec = HotReconciler(k8s_admin, namespace=ns, events=EventRecorder(core), busy=lambda: busy,
                            unknown=lambda: expired)
        await rec.reconcile()
        [pod] = await wait_for(lambda: _running(core, ns), within=30, what="the sleeper running")
        key = f"{ns}/{pod.metadata.name}"
        # A pod with the same name pattern that warmscale did not create is never touched.
        stranger = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranger", "labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}],
                             "tolerations": [{"operator": "Exists"}]}}
        await core.create_namespaced_pod(ns, stranger)
        expired.update({key: "its state has been unknown for 121 s (over 120 s) with nothing in flight",
                        f"{ns}/stranger": "unknown"})
        busy.add(key)  # the waker counts it busy (it may be serving): kept
        assert (await rec.reconcile()).replaced == []
        busy.clear()
        assert (await rec.reconcile()).replaced == [key]

        async def recreated() -> bool:
            pods = await sleeper_pods(core, ns)
            if not pods:
                await rec.reconcile()  # the next pass creates it once the old one is gone
                return False
            return pods[0].metadata.uid != pod.metadata.uid
        expired.clear()  # the new pod is a new sleeper (the waker's life of the old one ended with it)
        await wait_for(recreated, within=30, what="a new sleeper pod")
        [ev] = await events(k8s_admin, ns, "HotSleeperReplaced")
        assert "unknown for 121 s" in ev.message and pod.metadata.name in ev.message
        assert (await core.read_namespaced_pod("stranger", ns)).metadata.name == "stranger"
    finally:
        await unpublish(k8s_admin, slices)
