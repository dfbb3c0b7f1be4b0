"""The warm-pool controller against the real local control plane (KWOK GPU nodes)."""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    NodePoolFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_node_pool,
    wait_for,
)
from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import H100
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import Controller, Options, install_priority_class
from warmscale.warmpool.kube import LeaderElector
from warmscale.warmpool.model_uri import CacheKey, parse_model_uri, staged_label_key

pytestmark = pytest.mark.cluster
P = "warmscale.io/"
URI = "hf://org/model@rev1"


def label(ns: str, uri: str = URI) -> str:
    """The staged-node label of ``uri`` for a workload in namespace ``ns`` (the cache identity)."""
    return staged_label_key(CacheKey(parse_model_uri(uri), ns))
MANAGED = f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE}"
SENT = {"warmscale.io/enabled": "true"}  # pods with this label are sent to the webhook (its objectSelector)

Starter = Callable[[], Awaitable[Controller]]


@pytest.fixture
async def controller(k8s_admin: client.ApiClient, k8s_namespace: str) -> AsyncIterator[Callable[[], Awaitable[Any]]]:
    """Factory starting an in-process controller scoped to the test namespace; returns (controller, task)."""
    running: list[asyncio.Task[None]] = []
    await install_priority_class(k8s_admin)  # shipped with the install; the controller only reads it

    async def start() -> tuple[Controller, asyncio.Task[None]]:
        ctl = Controller(k8s_admin, Options(namespace=k8s_namespace, resync_s=2.0, stager_image="warmscale:test",
                                            scaler_address="scaler.test:9090"))
        task = asyncio.create_task(ctl.run())
        running.append(task)
        return ctl, task

    yield start
    for t in running:
        t.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    await strip_finalizers(k8s_admin, k8s_namespace)


async def strip_finalizers(api: client.ApiClient, ns: str) -> None:
    """With the controller gone nobody would release the clean-up finalizer: drop it so the namespace goes."""
    apps = client.AppsV1Api(api)
    for d in (await apps.list_namespaced_deployment(ns)).items:
        if ob.FINALIZER in (d.metadata.finalizers or []):
            i = d.metadata.finalizers.index(ob.FINALIZER)
            patch = [{"op": "test", "path": f"/metadata/finalizers/{i}", "value": ob.FINALIZER},
                     {"op": "remove", "path": f"/metadata/finalizers/{i}"}]
            try:
                await apps.patch_namespaced_deployment(d.metadata.name, ns, patch,
                                                       _content_type="application/json-patch+json")
            except ApiException as exc:
                print("strip finalizer failed", exc.status, exc.reason)


def gpu_deployment(ns: str, name: str, replicas: int, annotations: dict[str, str], gpus: int = 8) -> dict[str, Any]:
    d = w.deployment(name, replicas, gpus=gpus, cpu="4", memory="32Gi", node_selector={"warmscale.io/test": ns})
    d["metadata"]["annotations"] = annotations
    tmpl = d["spec"]["template"]["metadata"]
    tmpl["labels"] = {**tmpl["labels"], "warmscale.io/enabled": "true"}  # its pods are sent to the webhook
    return d


async def managed_pods(core: client.CoreV1Api, ns: str, role: str) -> list[client.V1Pod]:
    pods = await core.list_namespaced_pod(ns, label_selector=f"{MANAGED},{ob.ROLE}={role}")
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


async def events(core: client.CoreV1Api, ns: str, reason: str) -> list[client.CoreV1Event]:
    return [e for e in (await core.list_namespaced_event(ns)).items if e.reason == reason]


async def test_invalid_annotation_is_an_event_and_changes_nothing(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any
) -> None:
    ns = k8s_namespace
    await k8s_node_pool(replace(H100, count=1))
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    ann = {P + "enabled": "true", P + "standby": "lots", P + "prestage-nodes": "1", P + "model-uri": URI}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "bad", 1, ann))
    await controller()

    async def invalid_event() -> list[client.CoreV1Event]:
        return await events(core, ns, "InvalidAnnotation")

    [ev] = await wait_for(invalid_event, within=30, what="InvalidAnnotation event")
    assert "warmscale.io/standby" in ev.message and ev.involved_object.name == "bad"
    await asyncio.sleep(3)  # a couple of resyncs
    assert not (await core.list_namespaced_pod(ns, label_selector=MANAGED)).items
    assert not (await client.BatchV1Api(k8s_admin).list_namespaced_job(ns)).items
    dep = await apps.read_namespaced_deployment("bad", ns)
    assert ob.MANAGED_BY not in (dep.metadata.annotations or {}) and P + "status" not in dep.metadata.annotations
    assert dep.spec.replicas == 1


async def test_placeholders_staging_preemption_and_replenishment(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any
) -> None:
    ns = k8s_namespace
    nodes = await k8s_node_pool(replace(H100, count=3))
    core, apps, batch = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin), client.BatchV1Api(k8s_admin)
    ann = {P + "enabled": "true", P + "standby": "2", P + "prestage-nodes": "2", P + "model-uri": URI,
           P + "stage-pod-annotations": json.dumps({"sim.warmscale.io/job-duration": "3s"})}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "llm", 1, ann))

    async def one_ready() -> list[client.V1Pod]:
        pods = (await core.list_namespaced_pod(ns, label_selector="app=llm")).items
        return [p for p in pods if w.is_ready(p)]

    [first] = await wait_for(one_ready, within=30, what="first replica Ready")
    ctl, _ = await controller()

    async def jobs() -> list[client.V1Job]:
        return (await batch.list_namespaced_job(ns, label_selector=MANAGED)).items

    async def both_jobs() -> list[client.V1Job]:  # created one after the other: wait for the second
        js = await jobs()
        return js if len(js) == 2 else []

    created = await wait_for(both_jobs, within=30, what="staging Jobs")
    job_nodes = {j.metadata.annotations[ob.NODE_ANN] for j in created}
    assert first.spec.node_name not in job_nodes and len(job_nodes) == 2  # staged where a replica fits
    # the label never precedes the Job's success
    for n in job_nodes:
        node = await core.read_node(n)
        job = next(j for j in created if j.metadata.annotations[ob.NODE_ANN] == n)
        if label(ns) in (node.metadata.labels or {}):
            assert (await batch.read_namespaced_job(job.metadata.name, ns)).status.succeeded

    async def staged() -> bool:
        labelled = [n for n in nodes if (await core.read_node(n)).metadata.labels.get(label(ns)) == "true"]
        return sorted(labelled) == sorted(job_nodes)

    await wait_for(staged, within=60, what="nodes labelled staged")
    for j in await jobs():
        assert j.status.succeeded == 1

    async def holders_on_staged() -> bool:
        hs = await managed_pods(core, ns, "placeholder")
        return len(hs) == 2 and all(w.is_ready(h) and h.spec.node_name in job_nodes for h in hs)

    await wait_for(holders_on_staged, within=60, what="2 placeholders Ready on the staged nodes")
    holders = await managed_pods(core, ns, "placeholder")
    assert all(h.spec.priority == ob.PRIORITY_VALUE and h.spec.preemption_policy == "Never" for h in holders)
    assert all(h.metadata.owner_references[0].name == "llm" for h in holders)
    old_uids = {h.metadata.uid for h in holders}

    # scale up: no free GPU node is left, so the new replicas preempt the placeholders and land there
    await apps.patch_namespaced_deployment_scale("llm", ns, {"spec": {"replicas": 3}})

    async def three_ready() -> list[client.V1Pod]:
        pods = await one_ready()
        return pods if len(pods) == 3 else []

    pods = await wait_for(three_ready, within=90, what="3 replicas Ready")
    new_nodes = {p.spec.node_name for p in pods} - {first.spec.node_name}
    assert new_nodes == job_nodes

    async def replenished() -> bool:
        hs = await managed_pods(core, ns, "placeholder")
        return len(hs) == 2 and not ({h.metadata.uid for h in hs} & old_uids)

    await wait_for(replenished, within=30, what="placeholders replenished")

    async def measured() -> dict[str, float]:
        t = ctl.ttr.get(f"Deployment/{ns}/llm")
        return t.medians() if t else {}

    m = await wait_for(lambda: _poll(measured, lambda v: "placeholder+staged" in v), within=30,
                       what="time-to-ready measured for placeholder+staged")
    assert m["placeholder+staged"] >= 0
    dep = await apps.read_namespaced_deployment("llm", ns)
    status = json.loads(dep.metadata.annotations[P + "status"])
    assert status["staged"] == "2/2"


async def _poll(get: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool]) -> Any:
    v = await get()
    return v if ok(v) else None


async def test_staging_jobs_never_duplicated_across_restart(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any
) -> None:
    ns = k8s_namespace
    nodes = await k8s_node_pool(replace(H100, count=2))
    core, apps, batch = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin), client.BatchV1Api(k8s_admin)
    ann = {P + "enabled": "true", P + "prestage-nodes": "2", P + "model-uri": URI,
           P + "stage-pod-annotations": json.dumps({"sim.warmscale.io/job-duration": "6s"})}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "llm", 1, ann))
    _, task = await controller()

    async def two_jobs() -> list[client.V1Job]:
        js = (await batch.list_namespaced_job(ns, label_selector=MANAGED)).items
        return js if len(js) == 2 else []

    before = {j.metadata.name: j.metadata.uid for j in await wait_for(two_jobs, within=30, what="2 Jobs")}
    task.cancel()  # "kill" the controller mid-staging
    with contextlib.suppress(asyncio.CancelledError):
        await task
    for n in nodes:  # nothing is marked staged while the Jobs run
        assert label(ns) not in ((await core.read_node(n)).metadata.labels or {})
    await controller()

    async def labelled() -> bool:
        labels = [(await core.read_node(n)).metadata.labels or {} for n in nodes]
        return all(lab.get(label(ns)) == "true" for lab in labels)

    await wait_for(labelled, within=60, what="nodes labelled after restart")
    after = {j.metadata.name: j.metadata.uid for j in (await batch.list_namespaced_job(ns)).items}
    assert after == before  # same Jobs, none recreated or duplicated


async def test_leader_election_takeover_within_lease(k8s_admin: client.ApiClient, k8s_namespace: str) -> None:
    coord = client.CoordinationV1Api(k8s_admin)
    lease_s = 4.0
    leading: dict[str, float] = {}
    stop_a, stop_b = asyncio.Event(), asyncio.Event()

    def make(identity: str) -> tuple[LeaderElector, Callable[[], Awaitable[None]]]:
        el = LeaderElector(coord, k8s_namespace, "warmpool-test", identity, lease_duration=lease_s,
                           renew_period=1.0, retry_period=0.5)

        async def lead() -> None:
            leading[identity] = time.monotonic()
            await asyncio.Event().wait()

        return el, lead

    a, lead_a = make("a")
    b, lead_b = make("b")
    task_a = asyncio.create_task(a.run(lead_a, stop_a))
    await wait_for(lambda: _poll(lambda: _val(leading), lambda v: "a" in v), within=10, what="a leads")
    task_b = asyncio.create_task(b.run(lead_b, stop_b))
    await asyncio.sleep(2 * lease_s)
    assert "b" not in leading and a.is_leader and not b.is_leader  # one leader while a renews
    # kill a without releasing the lease (a crash): b takes over once the lease expires
    a.release = _noop  # type: ignore[method-assign]
    killed = time.monotonic()
    task_a.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task_a
    await wait_for(lambda: _poll(lambda: _val(leading), lambda v: "b" in v), within=3 * lease_s, what="b leads")
    took = leading["b"] - killed
    assert took <= lease_s + 2.0, took
    lease = await coord.read_namespaced_lease("warmpool-test", k8s_namespace)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions >= 1
    stop_b.set()  # graceful: releases the lease
    await task_b
    lease = await coord.read_namespaced_lease("warmpool-test", k8s_namespace)
    assert not lease.spec.holder_identity


async def _val(v: Any) -> Any:
    return v


async def _noop() -> None:
    return None


async def test_scaledobject_created_and_floor_kept(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any
) -> None:
    ns = k8s_namespace
    await k8s_node_pool(replace(H100, count=1))
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    custom = client.CustomObjectsApi(k8s_admin)
    ann = {P + "enabled": "true", P + "autoscale": "true", P + "min-ready": "2", P + "max-replicas": "6"}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "llm", 1, ann, gpus=1))
    user_so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "mine"},
               "spec": {"scaleTargetRef": {"name": "mine"}, "minReplicaCount": 0,
                        "triggers": [{"type": "external", "metadata": {"scalerAddress": "x:1"}}]}}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "mine", 1, {P + "enabled": "true",
                                                                                 P + "autoscale": "true"}, gpus=1))
    await custom.create_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", user_so)
    await controller()

    async def get_so(name: str = "llm") -> dict[str, Any] | None:
        try:
            return dict(await custom.get_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    so = await wait_for(get_so, within=30, what="ScaledObject created")
    assert so["spec"]["minReplicaCount"] == 2 and so["spec"]["maxReplicaCount"] == 6
    assert so["spec"]["triggers"][0]["type"] == "external-push"
    assert so["spec"]["triggers"][0]["metadata"]["scalerAddress"] == "scaler.test:9090"
    assert so["metadata"]["labels"][ob.MANAGED_BY] == "warmscale"
    assert so["metadata"]["ownerReferences"][0]["name"] == "llm"
    # someone lowers the floor: the controller puts it back
    await custom.patch_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", "llm",
                                                {"spec": {"minReplicaCount": 0}},
                                                _content_type="application/merge-patch+json")
    await wait_for(lambda: _poll(get_so, lambda v: v["spec"]["minReplicaCount"] == 2), within=30,
                   what="floor restored")
    # floor 0 where scale-to-zero is not allowed: raised to 1, with an Event
    await apps.patch_namespaced_deployment("llm", ns, {"metadata": {"annotations": {P + "min-ready": "0"}}})
    await wait_for(lambda: _poll(get_so, lambda v: v["spec"]["minReplicaCount"] == 1), within=30,
                   what="floor 0 raised to 1")
    assert await events(core, ns, "ScaleToZeroRefused")
    # the user's own ScaledObject is never overwritten
    await wait_for(lambda: events(core, ns, "ScaledObjectNotOwned"), within=30, what="not-owned event")
    mine = await get_so("mine")
    assert mine is not None and mine["spec"]["minReplicaCount"] == 0 and ob.MANAGED_BY not in (
        mine["metadata"].get("labels") or {})


async def test_cache_cleanup_on_model_change_and_delete(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any
) -> None:
    ns = k8s_namespace
    nodes = await k8s_node_pool(replace(H100, count=2))
    core, apps, batch = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin), client.BatchV1Api(k8s_admin)
    uri2 = "hf://org/model@rev2"
    label2 = label(ns, uri2)
    ann = {P + "enabled": "true", P + "prestage-nodes": "2", P + "model-uri": URI,
           P + "stage-pod-annotations": json.dumps({"sim.warmscale.io/job-duration": "1s"})}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "llm", 0, ann))
    await controller()

    async def labelled(key: str, present: bool = True) -> bool:
        labs = [(await core.read_node(n)).metadata.labels or {} for n in nodes]
        return all((lab.get(key) == "true") == present for lab in labs)

    await wait_for(lambda: labelled(label(ns)), within=60, what="rev1 staged on both nodes")
    dep = await apps.read_namespaced_deployment("llm", ns)
    assert ob.FINALIZER in (dep.metadata.finalizers or [])
    rec = json.loads((await core.read_node(nodes[0])).metadata.annotations[label(ns)])
    assert rec == {"ns": ns, "uri": URI, "root": "/var/lib/warmscale/models", "layout": "3"}

    seen: dict[str, list[str]] = {}

    async def evict_jobs_seen() -> bool:  # evict Jobs are deleted once they succeeded: poll fast
        for j in (await batch.list_namespaced_job(ns, label_selector=f"{ob.ROLE}=evict")).items:
            seen[j.metadata.annotations[ob.NODE_ANN]] = j.spec.template.spec.containers[0].command
        return False

    async def until(pred: Callable[[], Awaitable[bool]]) -> bool:
        await evict_jobs_seen()
        return await pred()

    # model change: rev2 staged, rev1 evicted on both nodes and its labels/records removed
    await apps.patch_namespaced_deployment("llm", ns, {"metadata": {"annotations": {P + "model-uri": uri2}}})
    await wait_for(lambda: until(lambda: labelled(label2)), within=60, what="rev2 staged", interval=0.1)
    await wait_for(lambda: until(lambda: labelled(label(ns), present=False)), within=60, what="rev1 labels removed",
                   interval=0.1)
    assert sorted(seen) == sorted(nodes)
    assert all("--evict" in cmd and URI in cmd for cmd in seen.values())
    for n in nodes:
        assert label(ns) not in ((await core.read_node(n)).metadata.annotations or {})

    # delete: the finalizer holds the Deployment until rev2 is evicted and unlabelled everywhere
    seen.clear()
    await apps.delete_namespaced_deployment("llm", ns)
    dep = await apps.read_namespaced_deployment("llm", ns)
    assert dep.metadata.deletion_timestamp is not None

    async def gone() -> bool:
        await evict_jobs_seen()
        try:
            await apps.read_namespaced_deployment("llm", ns)
            return False
        except ApiException as exc:
            return exc.status == 404

    await wait_for(gone, within=60, what="Deployment deleted after clean-up", interval=0.1)
    assert await labelled(label2, present=False)
    assert sorted(seen) == sorted(nodes) and all(uri2 in cmd for cmd in seen.values())
    await asyncio.sleep(1)
    assert not (await batch.list_namespaced_job(ns, label_selector=f"{ob.ROLE}=evict")).items


async def test_webhook_prefers_staged_node(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any, tmp_path: Any
) -> None:
    import socket

    from warmscale.warmpool.webhook import WorkloadLister, self_signed, serve, webhook_configuration

    ns = k8s_namespace
    nodes = await k8s_node_pool(replace(H100, count=3))
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    adm = client.AdmissionregistrationV1Api(k8s_admin)
    ann = {P + "enabled": "true", P + "prestage-nodes": "1", P + "model-uri": URI, P + "min-ready": "0",
           P + "scale-to-zero": "allowed",  # else the controller raises 0 replicas to 1 before the webhook is up
           P + "stage-pod-annotations": json.dumps({"sim.warmscale.io/job-duration": "1s"})}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "llm", 0, ann))
    await controller()

    async def staged_nodes() -> list[str]:
        return [n for n in nodes if ((await core.read_node(n)).metadata.labels or {}).get(label(ns)) == "true"]

    [staged] = await wait_for(staged_nodes, within=60, what="model staged on one node")
    template_before = (await apps.read_namespaced_deployment("llm", ns)).spec.template.to_dict()

    cert, key, ca = self_signed(["127.0.0.1"], tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = await serve(WorkloadLister(k8s_admin, ttl_s=0.5), port, str(cert), str(key), host="127.0.0.1",
                         image="warmscale:test")
    name = f"warmscale-test-{ns}"
    cfg = webhook_configuration(name, ca, url=f"https://127.0.0.1:{port}/mutate", namespace_selector={
        "matchLabels": {"kubernetes.io/metadata.name": ns}})
    await adm.create_mutating_webhook_configuration(cfg)
    try:
        async def active() -> bool:  # the apiserver picks up webhook configurations asynchronously: probe
            probe = await core.create_namespaced_pod(ns, w.pod("probe", labels={"app": "llm", **SENT}), dry_run="All")
            return probe.spec.affinity is not None

        await wait_for(active, within=30, what="webhook active (dry-run pod mutated)")
        for _ in range(3):  # 3 free identical nodes: without the preference each try lands there 1 time in 3
            await apps.patch_namespaced_deployment_scale("llm", ns, {"spec": {"replicas": 1}})

            async def bound() -> list[client.V1Pod]:
                pods = (await core.list_namespaced_pod(ns, label_selector="app=llm")).items
                return [p for p in pods if p.spec.node_name and p.metadata.deletion_timestamp is None]

            [p] = await wait_for(bound, within=30, what="replica scheduled")
            assert p.spec.node_name == staged
            pref = p.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
            assert pref[0].weight == 100 and pref[0].preference.match_expressions[0].key == label(ns)
            await apps.patch_namespaced_deployment_scale("llm", ns, {"spec": {"replicas": 0}})

            async def none_left() -> bool:
                return not (await core.list_namespaced_pod(ns, label_selector="app=llm")).items

            await wait_for(none_left, within=30, what="replica gone")
        dep = await apps.read_namespaced_deployment("llm", ns)
        assert dep.spec.template.to_dict() == template_before  # the pod template is never rewritten
        # a pod of no enabled workload is admitted unchanged
        plain = w.pod("plain", labels={"app": "other", "warmscale.io/enabled": "true"})
        created = await core.create_namespaced_pod(ns, plain)
        assert created.spec.affinity is None
    finally:
        await adm.delete_mutating_webhook_configuration(name)
        await runner.cleanup()


async def test_engine_pod_is_mutated_and_its_init_container_ensures_the_copy(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, tmp_path: Any
) -> None:
    """A replica created by the Deployment controller through the real API server carries the cache
    volume, WARMSCALE_MODEL_PATH (replacing the template's fallback) and the init container. KWOK runs no
    containers, so the init container's exact command (taken from the admitted pod) runs here as a
    process: on the unstaged cache it stages the copy at WARMSCALE_MODEL_PATH; run again (ready) it
    returns at once. A file:// source keeps it offline; its path and the cache root are the same on the
    host and in the pod (the webhook mounts both at their host paths)."""
    import os
    import socket
    import sys

    from warmscale.warmpool.webhook import (
        ENSURE_CONTAINER,
        MODEL_PATH_ENV,
        WorkloadLister,
        self_signed,
        serve,
        webhook_configuration,
    )

    ns = k8s_namespace
    await k8s_node_pool(replace(H100, count=1))
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    adm = client.AdmissionregistrationV1Api(k8s_admin)
    src, cache = tmp_path / "weights", tmp_path / "cache"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}')
    (src / "model.safetensors").write_bytes(os.urandom(1 << 20))
    uri = f"file://{src}"
    ann = {P + "enabled": "true", P + "model-uri": uri, P + "cache-root": str(cache), P + "min-ready": "1"}
    dep = gpu_deployment(ns, "engine", 0, ann)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"] = ["--model=$(WARMSCALE_MODEL_PATH)"]
    c["env"] = [{"name": MODEL_PATH_ENV, "value": "org/model"}]  # the fallback without the webhook
    await apps.create_namespaced_deployment(ns, dep)

    cert, key, ca = self_signed(["127.0.0.1"], tmp_path / "tls")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = await serve(WorkloadLister(k8s_admin, ttl_s=0.5), port, str(cert), str(key), host="127.0.0.1",
                         image="warmscale:test", allowed_roots=[str(cache)],  # the cache root is a tmp dir
                         file_sources=[str(src)])  # and so is the file:// source (never inside a cache root)
    name = f"warmscale-engine-{ns}"
    await adm.create_mutating_webhook_configuration(webhook_configuration(
        name, ca, url=f"https://127.0.0.1:{port}/mutate",
        namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": ns}}))
    try:
        async def active() -> bool:
            probe = w.pod("probe", labels={"app": "engine", **SENT})
            probe = await core.create_namespaced_pod(ns, probe, dry_run="All")
            return bool(probe.spec.init_containers)

        await wait_for(active, within=30, what="webhook active (dry-run pod mutated)")
        await apps.patch_namespaced_deployment_scale("engine", ns, {"spec": {"replicas": 1}})

        async def replica() -> list[dict[str, Any]]:
            pods = (await core.list_namespaced_pod(ns, label_selector="app=engine")).items
            return [k8s_admin.sanitize_for_serialization(p) for p in pods]

        [pod] = await wait_for(replica, within=30, what="replica created")
    finally:
        await adm.delete_mutating_webhook_configuration(name)
        await runner.cleanup()
    spec = pod["spec"]
    [init] = spec["initContainers"]
    assert init["name"] == ENSURE_CONTAINER and init["image"] == "warmscale:test"
    engine = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in engine["env"]}
    model_path = env[MODEL_PATH_ENV]
    from warmscale.warmpool.model_uri import cache_dir

    assert model_path == cache_dir(str(cache), CacheKey(parse_model_uri(uri), ns)) + "/data"
    assert {"name": "warmscale-model-cache", "mountPath": str(cache), "readOnly": True} in engine["volumeMounts"]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["warmscale-model-cache"]["hostPath"] == {"path": str(cache), "type": "DirectoryOrCreate"}
    assert vols["warmscale-model-source"]["hostPath"]["path"] == str(src)
    assert engine["args"] == ["--model=$(WARMSCALE_MODEL_PATH)"]  # the kubelet expands it from env

    # the init container as a process: `warmscale ...` is this package's CLI
    cmd = [sys.executable, "-m", "warmscale", *init["command"][1:]]

    async def run() -> tuple[int, str, float]:
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return int(proc.returncode or 0), out.decode(), time.monotonic() - t0

    code, out, t_stage = await run()
    assert code == 0, out
    assert (Path(model_path) / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert _staged_log(out)["already"] is False
    code, out, t_ready = await run()
    assert code == 0 and _staged_log(out)["already"] is True, out
    print(f"ensure: unstaged {t_stage:.2f}s, ready {t_ready:.2f}s")


def _staged_log(out: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    [rec] = [r for r in lines if r.get("msg") == "staged"]
    return rec


async def test_zero_refused_outside_a_window_is_an_event(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any
) -> None:
    """A hand-written ScaledObject may allow zero; the warm pool's window does not allow it now: the
    controller says so with an Event (and publishes the schedule the scaler binds, tests/scaler/
    test_warm_bounds.py)."""
    ns = k8s_namespace
    await k8s_node_pool(replace(H100, count=1))
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    now = time.gmtime()
    other_day = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")[(now.tm_wday + 3) % 7]
    ann = {P + "enabled": "true", P + "min-ready": "0", P + "scale-to-zero": f"allowed: {other_day} 00:00-24:00"}
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "tgi", 1, ann))
    await controller()

    async def refused() -> list[client.CoreV1Event]:
        return await events(core, ns, "ScaleToZeroRefused")

    [ev] = await wait_for(refused, within=30, what="ScaleToZeroRefused event")
    assert ev.involved_object.name == "tgi" and "scaler refuses zero" in ev.message
