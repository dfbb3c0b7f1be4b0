"""Volcano gangs against the real Volcano v1.15.1 scheduler and controller-manager (tests/cluster/volcano.py)
on the local control plane with KWOK H100 nodes: a placeholder gang is one PodGroup (minMember = group
size) that Volcano binds all at once or not at all."""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.cluster import lws_standin
from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    NodePoolFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_node_pool,
    volcano_cluster,
    wait_for,
)
from warmscale.localcluster import crds
from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import H100
from warmscale.localcluster.harness import Cluster
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import Controller, Options, install_priority_class, workload_from

pytestmark = [pytest.mark.cluster, pytest.mark.volcano]
P = "warmscale.io/"
MANAGED = f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE}"
G, V, PL = ob.LWS_GROUP, ob.LWS_VERSION, ob.LWS_PLURAL
PG = (ob.PG_GROUP, ob.PG_VERSION)
# Volcano runs a scheduling cycle every second (tests/cluster/volcano.py SCHEDULE_PERIOD): a partial gang
# that stays unbound this long was refused by several cycles, not merely not yet seen.
UNBOUND_FOR_S = 8.0


def volcano_lws(ns: str, name: str, size: int, annotations: dict[str, str]) -> dict[str, Any]:
    """A LeaderWorkerSet with no groups (replicas 0) whose pods Volcano schedules; each pod takes a whole
    8-GPU node of this test's nodes."""
    def tmpl() -> dict[str, Any]:
        spec = w.pod_spec(gpus=8, cpu="4", memory="32Gi", node_selector={"warmscale.io/test": ns})
        return {"metadata": {}, "spec": {**spec, "schedulerName": ob.VOLCANO_SCHEDULER}}

    return {"apiVersion": f"{G}/{V}", "kind": ob.LWS_KIND,
            "metadata": {"name": name, "namespace": ns, "annotations": annotations},
            "spec": {"replicas": 0, "leaderWorkerTemplate": {"size": size, "leaderTemplate": tmpl(),
                                                             "workerTemplate": tmpl()}}}


@pytest.fixture
async def lws_crd(volcano_cluster: Cluster, k8s_admin: client.ApiClient) -> None:
    """The LWS CRD (the harness installs it at start; replacing its 18k lines costs ~10 s) and the
    placeholders' PriorityClass."""
    try:
        await client.ApiextensionsV1Api(k8s_admin).read_custom_resource_definition(f"{PL}.{G}")
    except ApiException as exc:
        if exc.status != 404:
            raise
        await crds.install(k8s_admin, crds.load_crds(crds.lws_crd_dir()))
    await install_priority_class(k8s_admin)


@pytest.fixture
async def warm_pool(k8s_admin: client.ApiClient, k8s_namespace: str) -> AsyncIterator[None]:
    ctl = Controller(k8s_admin, Options(namespace=k8s_namespace, resync_s=2.0, stager_image="warmscale:test",
                                        scaler_address="scaler.test:9090"))
    task = asyncio.create_task(ctl.run())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def placeholders(core: client.CoreV1Api, ns: str) -> list[client.V1Pod]:
    pods = (await core.list_namespaced_pod(ns, label_selector=f"{MANAGED},{ob.ROLE}=placeholder")).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


async def hold_a_gang(api: client.ApiClient, ns: str, make: NodePoolFactory) -> tuple[
        dict[str, Any], set[str], list[client.V1Pod]]:
    """Two H100 nodes and LeaderWorkerSet ``pp`` on Volcano (no groups, a gang of 2 held): (the LWS, its
    nodes, the gang's members once both run)."""
    nodes = set(await make(replace(H100, name="vc", count=2)))
    ann = {P + "enabled": "true", P + "standby": "1", P + "prestage-nodes": "0", P + "autoscale": "false",
           P + "min-ready": "0"}
    obj = await client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, ns, PL,
                                                                           volcano_lws(ns, "pp", 2, ann))
    core = client.CoreV1Api(api)

    async def held() -> list[client.V1Pod]:
        pods = await placeholders(core, ns)
        return pods if len(pods) == 2 and all(p.status.phase == "Running" and p.spec.node_name for p in pods) else []

    return obj, nodes, await wait_for(held, within=45, what="the gang's 2 members Running")


async def assert_none_bound(core: client.CoreV1Api, ns: str, what: str) -> None:
    """No placeholder of ``ns`` is bound to a node during :data:`UNBOUND_FOR_S` (several Volcano cycles)."""
    t_end = time.monotonic() + UNBOUND_FOR_S
    while time.monotonic() < t_end:
        bound = [p.metadata.name for p in await placeholders(core, ns) if p.spec.node_name]
        assert not bound, f"{what}: {bound}"
        await asyncio.sleep(0.5)


def scheduled_at(pod: client.V1Pod) -> datetime:
    cond = next(c for c in pod.status.conditions or [] if c.type == "PodScheduled" and c.status == "True")
    return cond.last_transition_time


async def test_partial_gang_never_holds_a_gpu_and_a_gang_that_fits_binds_whole(
    lws_crd: None, k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
) -> None:
    ns = k8s_namespace
    core, custom = client.CoreV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    await k8s_node_pool(replace(H100, name="vc", count=2))  # room for 2 of the gang's 3 members
    obj = await custom.create_namespaced_custom_object(G, V, ns, PL, volcano_lws(ns, "gang3", 3, {}))
    wl = workload_from(ob.LWS_KIND, obj)
    assert wl.volcano and wl.group_size == 3
    # the objects the controller makes for gang 0 (it plans only gangs that fit; a node can still be taken
    # between its plan and the binding: this is that case, made on purpose)
    pg = ob.pod_group(wl, 0)
    await custom.create_namespaced_custom_object(*PG, ns, ob.PG_PLURAL, pg)
    for m in range(3):
        await core.create_namespaced_pod(ns, ob.gang_placeholder_pod(wl, 0, m, None))

    async def refused() -> bool:
        got = await custom.get_namespaced_custom_object(*PG, ns, ob.PG_PLURAL, pg["metadata"]["name"])
        return any(c.get("type") == "Unschedulable" for c in (got.get("status") or {}).get("conditions") or [])

    await wait_for(refused, within=30, what="Volcano marks the 3-member gang Unschedulable")
    await assert_none_bound(core, ns, "a partial gang holds nodes")

    third = await k8s_node_pool(replace(H100, name="vc3", count=1))

    async def all_bound() -> list[client.V1Pod]:
        pods = await placeholders(core, ns)
        return pods if len(pods) == 3 and all(p.spec.node_name for p in pods) else []

    pods = await wait_for(all_bound, within=30, what="the whole gang bound once a third node exists")
    assert len({p.spec.node_name for p in pods}) == 3 and third[0] in {p.spec.node_name for p in pods}
    times = [scheduled_at(p) for p in pods]
    assert (max(times) - min(times)).total_seconds() <= 1.0, f"bound at {times}: not in one cycle"


async def test_controller_holds_a_volcano_gang_as_one_pod_group_and_cleans_up_with_the_workload(
    lws_crd: None, k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
    warm_pool: None,
) -> None:
    ns = k8s_namespace
    core, custom = client.CoreV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    obj, _, pods = await hold_a_gang(k8s_admin, ns, k8s_node_pool)
    wl = workload_from(ob.LWS_KIND, obj)
    groups = (await custom.list_namespaced_custom_object(*PG, ns, ob.PG_PLURAL))["items"]
    assert [g["metadata"]["name"] for g in groups] == [ob.pod_group_name(wl, 0)]
    (group,) = groups
    assert group["spec"]["minMember"] == 2 and group["spec"]["priorityClassName"] == ob.PRIORITY_CLASS
    assert group["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert all(p.spec.scheduler_name == ob.VOLCANO_SCHEDULER for p in pods)
    assert {p.metadata.annotations[ob.PG_ANN] for p in pods} == {group["metadata"]["name"]}
    assert len({p.spec.node_name for p in pods}) == 2

    async def counted() -> bool:
        got = await custom.get_namespaced_custom_object(G, V, ns, PL, "pp")
        return json.loads((got["metadata"].get("annotations") or {}).get(P + "status", "{}")).get(
            "placeholders") == "1/1"

    await wait_for(counted, within=30, what="status: 1/1 gang ready")

    # the workload goes: its PodGroup and placeholders go with it (owner references)
    await custom.delete_namespaced_custom_object(G, V, ns, PL, "pp")

    async def gone() -> bool:
        left = (await custom.list_namespaced_custom_object(*PG, ns, ob.PG_PLURAL))["items"]
        return not left and not await placeholders(core, ns)

    await wait_for(gone, within=45, what="PodGroup and placeholders deleted with the LeaderWorkerSet")
    with pytest.raises(ApiException) as exc:
        await custom.get_namespaced_custom_object(G, V, ns, PL, "pp")
    assert exc.value.status == 404


async def test_a_group_preempts_a_held_gang_as_a_unit(
    lws_crd: None, k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
    warm_pool: None,
) -> None:
    ns = k8s_namespace
    core, custom = client.CoreV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    _, nodes, members = await hold_a_gang(k8s_admin, ns, k8s_node_pool)  # room for one group of 2 only
    gang = {p.metadata.uid for p in members}
    # one group (2 pods, default priority, schedulerName volcano) from the LWS stand-in: it needs both nodes
    async with lws_standin.running(k8s_admin, ns):
        await custom.patch_namespaced_custom_object(G, V, ns, PL, "pp", {"spec": {"replicas": 1}},
                                                    _content_type="application/merge-patch+json")

        async def group_running() -> list[client.V1Pod]:
            pods = (await core.list_namespaced_pod(ns, label_selector=f"{ob.LWS_NAME_LABEL}=pp")).items
            live = [p for p in pods if p.metadata.deletion_timestamp is None]
            return live if len(live) == 2 and all(p.status.phase == "Running" for p in live) else []

        group = await wait_for(group_running, within=60, what="the group Running in the gang's place")
        assert {p.spec.node_name for p in group} == nodes
        # the whole gang went (Volcano preempted its members; the controller releases what is left of a
        # gang); the gang planned again meanwhile (same names, same PodGroup) stays unbound: no room for it
        async def released() -> bool:
            return not gang & {p.metadata.uid for p in await placeholders(core, ns)}

        await wait_for(released, within=30, what="the old gang's members gone")
        await assert_none_bound(core, ns, "a placeholder holds a node the group needs")
        assert {p.spec.node_name for p in await group_running()} == nodes


async def test_one_preempted_member_releases_the_whole_gang(
    lws_crd: None, k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
    warm_pool: None,
) -> None:
    ns = k8s_namespace
    core = client.CoreV1Api(k8s_admin)
    _, _, members = await hold_a_gang(k8s_admin, ns, k8s_node_pool)
    gang = {p.metadata.uid for p in members}
    # a one-node replica (default priority) takes one member's node: Volcano preempts that member only
    solo = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo", "namespace": ns},
            "spec": {**w.pod_spec(gpus=8, cpu="4", memory="32Gi", node_selector={"warmscale.io/test": ns}),
                     "schedulerName": ob.VOLCANO_SCHEDULER}}
    await core.create_namespaced_pod(ns, solo)

    async def solo_running() -> bool:
        return (await core.read_namespaced_pod("solo", ns)).status.phase == "Running"

    await wait_for(solo_running, within=45, what="the one-node replica Running")

    async def released() -> bool:  # the member Volcano left is released too: half a gang serves nobody
        return not gang & {p.metadata.uid for p in await placeholders(core, ns)}

    await wait_for(released, within=30, what="the surviving member released with its gang")
