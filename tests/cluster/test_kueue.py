"""Warm capacity inside a Kueue queue, with the real Kueue controller (v0.19.2) on the local control
plane: the warm pool's placeholders are admitted against the workload's ClusterQueue, a scale-up's
replica takes a placeholder's quota (Kueue preempts the placeholder, priority -5 < 0), a replica
beyond the quota stays at Kueue's scheduling gate and the scaler does not count it as coming, and a
quota smaller than the floor gets an Event naming both numbers. Skips (with the reason) when the Kueue
binary is not built (``.ci/build-cluster.sh --kueue-only``)."""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    NodePoolFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_node_pool,
    kueue_cluster,
    wait_for,
)
from warmscale.localcluster import kueue
from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import H100
from warmscale.signals.sources.pods import KubeDiscovery, PodCounts
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import Controller, Options, install_priority_class
from warmscale.warmpool.kueue import QUEUE_LABEL

pytestmark = pytest.mark.cluster
P = "warmscale.io/"
GATE = "kueue.x-k8s.io/admission"
GPUS = 8  # one replica takes a whole 8-GPU node
PLACEHOLDERS = f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE},{ob.ROLE}=placeholder"


@pytest.fixture
async def queue(kueue_cluster: Any, k8s_admin: client.ApiClient,
                k8s_namespace: str) -> AsyncIterator[Callable[[int], Awaitable[kueue.Queue]]]:
    made: list[kueue.Queue] = []

    async def make(gpus: int) -> kueue.Queue:
        q = await kueue.create_queue(k8s_admin, k8s_namespace, gpus)
        made.append(q)
        return q

    yield make
    for q in made:
        await kueue.delete_queue(k8s_admin, q)


@pytest.fixture
async def warm_pool(k8s_admin: client.ApiClient, k8s_namespace: str) -> AsyncIterator[Callable[[], None]]:
    running: list[asyncio.Task[None]] = []
    await install_priority_class(k8s_admin)

    def start() -> None:
        ctl = Controller(k8s_admin, Options(namespace=k8s_namespace, resync_s=1.0, stager_image="warmscale:test",
                                            scaler_address="scaler.test:9090"))
        running.append(asyncio.create_task(ctl.run()))

    yield start
    for t in running:
        t.cancel()
    await asyncio.gather(*running, return_exceptions=True)


def inference(ns: str, replicas: int, min_ready: int, standby: int) -> dict[str, Any]:
    dep = w.deployment("llm", replicas, annotations=w.sim_annotations(ready_delay="1s"), gpus=GPUS, cpu="4",
                       memory="16Gi", node_selector={"warmscale.io/test": ns})
    dep["metadata"]["labels"][QUEUE_LABEL] = "online"  # Kueue's deployment integration copies it to the pods
    dep["metadata"]["annotations"] = {P + "enabled": "true", P + "standby": str(standby), P + "autoscale": "false",
                                      P + "prestage-nodes": "0", P + "min-ready": str(min_ready)}
    return dep


async def pods(core: client.CoreV1Api, ns: str, selector: str) -> list[client.V1Pod]:
    return [p for p in (await core.list_namespaced_pod(ns, label_selector=selector)).items
            if p.metadata.deletion_timestamp is None]


def gated(p: client.V1Pod) -> bool:
    return any(g.name == GATE for g in (p.spec.scheduling_gates or []))


async def test_placeholders_are_admitted_and_a_replica_beyond_quota_is_not_counted_as_coming(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, queue: Any,
    warm_pool: Callable[[], None],
) -> None:
    ns = k8s_namespace
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    await k8s_node_pool(replace(H100, count=2))  # the quota admits 2 replicas' worth, as many as there are nodes
    q = await queue(2 * GPUS)
    await apps.create_namespaced_deployment(ns, inference(ns, replicas=1, min_ready=1, standby=1))
    warm_pool()

    async def replica_and_placeholder_admitted() -> str | None:
        wls = await kueue.workloads_by_pod(k8s_admin, ns)
        holds = await pods(core, ns, PLACEHOLDERS)
        replicas = [p for p in await pods(core, ns, "app=llm") if w.is_ready(p)]
        if len(holds) != 1 or len(replicas) != 1 or holds[0].status.phase != "Running":
            return None
        both = [kueue.admitted(wls.get(p.metadata.name, {})) for p in (*holds, *replicas)]
        return holds[0].spec.node_name if both == [q.cluster_queue] * 2 else None

    held_node = await wait_for(replica_and_placeholder_admitted, within=90,
                               what="the replica and its placeholder admitted by the ClusterQueue")
    hold = (await pods(core, ns, PLACEHOLDERS))[0]
    assert hold.metadata.labels[QUEUE_LABEL] == "online" and hold.spec.priority_class_name == ob.PRIORITY_CLASS

    # 1 -> 3: the 2nd replica takes the placeholder's quota (and its node); the 3rd is over the quota
    await apps.patch_namespaced_deployment_scale("llm", ns, {"spec": {"replicas": 3}})

    async def two_ready_one_gated() -> list[client.V1Pod] | None:
        ps = await pods(core, ns, "app=llm")
        ready = [p for p in ps if w.is_ready(p)]
        held = [p for p in ps if gated(p)]
        return ready if len(ready) == 2 and len(held) == 1 and len(ps) == 3 else None

    ready = await wait_for(two_ready_one_gated, within=90, what="2 replicas Ready and 1 at Kueue's gate")
    assert held_node in {p.spec.node_name for p in ready}  # the warm node went to the scale-up
    holds = await pods(core, ns, PLACEHOLDERS)
    assert all(gated(h) for h in holds), "a placeholder holds quota the replicas need"

    # what the scaler sees: the gated replica is neither ready nor starting
    so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "llm"},
          "spec": {"scaleTargetRef": {"name": "llm"}, "triggers": [{"type": "external", "metadata": {}}]}}
    await client.CustomObjectsApi(k8s_admin).create_namespaced_custom_object("keda.sh", "v1alpha1", ns,
                                                                            "scaledobjects", so)
    d = KubeDiscovery(k8s_admin, sync_timeout_s=5.0)
    provider = d.provider(ns, "llm")
    try:
        async def counts() -> PodCounts | None:
            c = await provider.counts()
            return c if (c.ready, c.starting, c.gated, c.current) == (2, 0, 1, 3) else None

        await wait_for(counts, within=30, what="scaler counts: 2 ready, 0 starting, 1 gated")
        await asyncio.sleep(3)  # still gated: Kueue never admits it within the quota
        c = await provider.counts()
        assert (c.ready, c.starting, c.gated) == (2, 0, 1)
    finally:
        await provider.aclose()
        await d.aclose()


async def test_a_quota_smaller_than_the_floor_gets_an_event_naming_both_numbers(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, queue: Any,
    warm_pool: Callable[[], None],
) -> None:
    ns = k8s_namespace
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    await k8s_node_pool(replace(H100, count=1))
    q = await queue(GPUS)  # one replica's worth, the floor asks for 3
    await apps.create_namespaced_deployment(ns, inference(ns, replicas=1, min_ready=3, standby=0))
    warm_pool()

    async def event() -> client.CoreV1Event | None:
        evs = [e for e in (await core.list_namespaced_event(ns)).items if e.reason == "KueueQuotaBelowFloor"]
        return evs[0] if evs else None

    ev = await wait_for(event, within=60, what="a KueueQuotaBelowFloor Event")
    assert ev.type == "Warning" and ev.involved_object.kind == "Deployment" and ev.involved_object.name == "llm"
    assert q.cluster_queue in ev.message
    assert f"nominal quota of {GPUS} nvidia.com/gpu" in ev.message and f"3 replicas x {GPUS}" in ev.message
