"""A RayCluster worker group kept warm, against the real local control plane and the real KubeRay
operator v1.5.0 (built from its Go module: warmscale/localcluster/kuberay.py), KWOK running the pods it makes."""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    NodePoolFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_node_pool,
    wait_for,
)
from tests.warmpool.conftest import placeholders
from warmscale.localcluster import kuberay
from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import CPU, GPU_RESOURCE, H100, H100_MIG_1G
from warmscale.localcluster.harness import Cluster
from warmscale.warmpool import objects as ob
from warmscale.warmpool.raycluster import RAY_GROUP, RAY_PLURAL, RAY_VERSION, RAYCLUSTER_KIND

# ~100 s each (KWOK MIG nodes; the KubeRay operator): marker slow, `python3 -m pytest -m slow`
pytestmark = [pytest.mark.cluster, pytest.mark.slow]
P = "warmscale.io/"
MIG1 = "nvidia.com/mig-1g.10gb"
MANAGED = f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE}"


@pytest.fixture
async def operator(k8s_cluster: Cluster, k8s_admin: client.ApiClient, k8s_namespace: str,
                   tmp_path: Path) -> AsyncIterator[Any]:
    if not kuberay.available():
        if os.environ.get("CI") == "true":
            pytest.fail(f"the KubeRay operator is not built ({kuberay.binary()}): {kuberay.BUILD_HINT}")
        pytest.skip(f"the KubeRay operator is not built: {kuberay.BUILD_HINT}")
    await kuberay.install_crds(k8s_admin)
    async with kuberay.running(k8s_cluster.kubeconfig, k8s_namespace, tmp_path) as handle:
        yield handle


def raycluster(ns: str, workers: int, annotations: dict[str, str]) -> dict[str, Any]:
    """A head (CPU) and two worker groups: ``cpu`` and ``llm`` (one MIG 1g.10gb slice per worker)."""
    def spec(resource: str | None) -> dict[str, Any]:
        s = w.pod_spec(gpus=1 if resource else 0, cpu="1", memory="2Gi", node_selector={"warmscale.io/test": ns})
        if resource:
            for part in ("requests", "limits"):
                s["containers"][0]["resources"][part].pop(GPU_RESOURCE)
                s["containers"][0]["resources"][part][resource] = "1"
        return s

    def group(name: str, replicas: int, resource: str | None) -> dict[str, Any]:
        return {"groupName": name, "replicas": replicas, "minReplicas": 0, "maxReplicas": 8, "rayStartParams": {},
                "template": {"metadata": {"annotations": w.sim_annotations(ready_delay="1s")},
                             "spec": spec(resource)}}

    return {"apiVersion": f"{RAY_GROUP}/{RAY_VERSION}", "kind": RAYCLUSTER_KIND,
            "metadata": {"name": "rc", "annotations": annotations},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": spec(None)}},
                     "workerGroupSpecs": [group("cpu", 1, None), group("llm", workers, MIG1)]}}


async def ready_workers(core: client.CoreV1Api, ns: str, group: str) -> list[client.V1Pod]:
    pods = (await core.list_namespaced_pod(ns, label_selector=f"ray.io/cluster=rc,ray.io/group={group}")).items
    return [p for p in pods if p.metadata.deletion_timestamp is None and w.is_ready(p)]


async def test_worker_group_is_held_and_its_scale_up_lands_on_the_held_slices(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, operator: Any, warm_pool: Any,
) -> None:
    """Three MIG nodes with one 1g.10gb slice each, a whole-GPU node and a CPU node: the ``llm`` group's
    placeholders (owned by the RayCluster) hold the two free slices; when KubeRay scales the group 1 -> 3
    its new workers preempt them and land there. KubeRay's replicas are never touched by warmscale."""
    ns = k8s_namespace
    mig = await k8s_node_pool(replace(H100_MIG_1G, count=3, extra_resources={GPU_RESOURCE: "0", MIG1: "1"}))
    await k8s_node_pool(replace(H100, count=1))
    await k8s_node_pool(replace(CPU, count=1))
    core, custom = client.CoreV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    ann = {P + "enabled": "true", P + "ray-worker-group": "llm", P + "standby": "2", P + "min-ready": "3",
           P + "prestage-nodes": "0"}
    await custom.create_namespaced_custom_object(RAY_GROUP, RAY_VERSION, ns, RAY_PLURAL, raycluster(ns, 1, ann))
    [first] = await wait_for(lambda: ready_workers(core, ns, "llm"), within=90, what="KubeRay's first llm worker")
    assert first.spec.node_name in mig
    ctl = await warm_pool()

    async def held() -> list[client.V1Pod]:
        hs = await placeholders(core, ns)
        return hs if len(hs) == 2 and all(w.is_ready(h) for h in hs) else []

    holders = await wait_for(held, within=60, what="2 placeholders Ready")
    assert {h.spec.node_name for h in holders} == set(mig) - {first.spec.node_name}
    assert all(h.metadata.owner_references[0].kind == RAYCLUSTER_KIND for h in holders)
    assert all(h.spec.containers[0].resources.limits == {MIG1: "1"} for h in holders)

    async def status() -> dict[str, Any]:
        rc = await custom.get_namespaced_custom_object(RAY_GROUP, RAY_VERSION, ns, RAY_PLURAL, "rc")
        st = json.loads((rc["metadata"].get("annotations") or {}).get(P + "status", "{}"))
        return st if st.get("placeholders") == "2/2" else {}

    st = await wait_for(status, within=30, what="status annotation on the RayCluster")
    assert st["floor"] == 3 and st["matchingNodes"] == 3
    rc = await custom.get_namespaced_custom_object(RAY_GROUP, RAY_VERSION, ns, RAY_PLURAL, "rc")
    assert rc["spec"]["workerGroupSpecs"][1]["replicas"] == 1  # the floor is not forced onto KubeRay's replicas
    old = {h.metadata.uid for h in holders}

    # the Ray autoscaler (or a person) scales the group: KubeRay creates the workers
    patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas", "value": 3}]
    await custom.patch_namespaced_custom_object(RAY_GROUP, RAY_VERSION, ns, RAY_PLURAL, "rc", patch,
                                                _content_type="application/json-patch+json")

    async def three() -> list[client.V1Pod]:
        pods = await ready_workers(core, ns, "llm")
        return pods if len(pods) == 3 else []

    pods = await wait_for(three, within=120, what="3 llm workers Ready on the held slices")
    assert {p.spec.node_name for p in pods} == set(mig)
    assert not old & {h.metadata.uid for h in await placeholders(core, ns)}
    assert f"RayCluster/{ns}/rc" in ctl.ttr


async def test_a_bad_worker_group_is_an_event_and_nothing_is_created(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, operator: Any, warm_pool: Any,
) -> None:
    ns = k8s_namespace
    await k8s_node_pool(replace(H100_MIG_1G, count=1))
    await k8s_node_pool(replace(CPU, count=1))
    core, custom = client.CoreV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    ann = {P + "enabled": "true", P + "ray-worker-group": "gpu", P + "standby": "1"}
    await custom.create_namespaced_custom_object(RAY_GROUP, RAY_VERSION, ns, RAY_PLURAL, raycluster(ns, 1, ann))
    await warm_pool()

    async def event() -> list[client.CoreV1Event]:
        return [e for e in (await core.list_namespaced_event(ns)).items if e.reason == "InvalidAnnotation"]

    [ev, *_] = await wait_for(event, within=30, what="InvalidAnnotation Event")
    assert ev.involved_object.kind == RAYCLUSTER_KIND and "ray-worker-group" in ev.message and "'llm'" in ev.message
    await asyncio.sleep(3)
    assert not await placeholders(core, ns)
