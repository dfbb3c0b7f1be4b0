"""MIG slices and time-sliced GPUs against the real local control plane: KWOK nodes offering the GPU
Operator's resources (``nvidia.com/mig-1g.10gb`` under the mixed strategy; ``nvidia.com/gpu`` per
slice when time-sliced) and labels (``nvidia.com/mig.strategy``, ``nvidia.com/gpu.product``,
``nvidia.com/gpu.replicas``), the real scheduler placing replicas and placeholders."""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import json
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
    wait_for,
)
from tests.warmpool.conftest import placeholders
from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import GPU_RESOURCE, H100, H100_MIG_1G, H100_MIG_3G, L4_SHARED
from warmscale.warmpool import objects as ob

# ~100 s each (KWOK MIG nodes; the KubeRay operator): marker slow, `python3 -m pytest -m slow`
pytestmark = [pytest.mark.cluster, pytest.mark.slow]
P = "warmscale.io/"
MIG1 = "nvidia.com/mig-1g.10gb"
MANAGED = f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE}"
URI = "hf://org/model@rev1"


def sliced_deployment(ns: str, name: str, resource: str, annotations: dict[str, str],
                      selector: dict[str, str] | None = None) -> dict[str, Any]:
    """One replica asking one ``resource`` (a MIG profile, or a time-slice of nvidia.com/gpu)."""
    d = w.deployment(name, 1, gpus=1, cpu="1", memory="4Gi",
                     node_selector={"warmscale.io/test": ns, **(selector or {})})
    d["metadata"]["annotations"] = annotations
    c = d["spec"]["template"]["spec"]["containers"][0]["resources"]
    for part in ("requests", "limits"):
        c[part].pop(GPU_RESOURCE)
        c[part][resource] = "1"
    return d


async def ready_pods(core: client.CoreV1Api, ns: str, app: str) -> list[client.V1Pod]:
    return [p for p in (await core.list_namespaced_pod(ns, label_selector=f"app={app}")).items if w.is_ready(p)]


async def test_mig_slices_are_staged_held_and_measured_per_profile(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, warm_pool: Any,
) -> None:
    """Three mixed-strategy nodes with one 1g.10gb slice each, one with 3g.40gb slices, one whole H100:
    a 1g.10gb workload is staged and held only where its profile is, its scale-up takes the held
    slices, and its time-to-ready is learned as NVIDIA-H100-80GB-HBM3-MIG-1g.10gb."""
    ns = k8s_namespace
    mig1 = await k8s_node_pool(replace(H100_MIG_1G, count=3, extra_resources={GPU_RESOURCE: "0", MIG1: "1"}))
    await k8s_node_pool(replace(H100_MIG_3G, count=1))
    await k8s_node_pool(replace(H100, count=1))
    core, apps, batch = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin), client.BatchV1Api(k8s_admin)
    ann = {P + "enabled": "true", P + "standby": "2", P + "prestage-nodes": "2", P + "model-uri": URI,
           P + "autoscale": "false", P + "stage-pod-annotations": json.dumps({"sim.warmscale.io/job-duration": "1s"})}
    await apps.create_namespaced_deployment(ns, sliced_deployment(ns, "mig", MIG1, ann))
    [first] = await wait_for(lambda: ready_pods(core, ns, "mig"), within=30, what="first replica Ready")
    assert first.spec.node_name in mig1
    ctl = await warm_pool()

    async def held() -> list[client.V1Pod]:
        hs = await placeholders(core, ns)
        return hs if len(hs) == 2 and all(w.is_ready(h) for h in hs) else []

    holders = await wait_for(held, within=60, what="2 placeholders Ready")
    assert {h.spec.node_name for h in holders} == set(mig1) - {first.spec.node_name}
    for h in holders:  # they hold the same slice the replica asks for, and nothing else of the GPU
        res = h.spec.containers[0].resources
        assert res.limits == {MIG1: "1"} and GPU_RESOURCE not in res.requests
    jobs = (await batch.list_namespaced_job(ns, label_selector=MANAGED)).items
    assert jobs and {j.metadata.annotations[ob.NODE_ANN] for j in jobs} <= set(mig1)  # staged only there
    old = {h.metadata.uid for h in holders}

    await apps.patch_namespaced_deployment_scale("mig", ns, {"spec": {"replicas": 3}})

    async def three() -> list[client.V1Pod]:
        pods = await ready_pods(core, ns, "mig")
        return pods if len(pods) == 3 else []

    pods = await wait_for(three, within=90, what="3 replicas Ready on the held slices")
    assert {p.spec.node_name for p in pods} == set(mig1)
    assert not old & {h.metadata.uid for h in await placeholders(core, ns)}  # the held ones were preempted

    async def measured() -> dict[str, dict[str, float]]:
        t = ctl.ttr_gpu.get(f"Deployment/{ns}/mig")
        return t.medians() if t else {}

    rows = await wait_for(measured, within=30, what="time-to-ready measured")
    assert set(rows) == {"NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}


async def test_time_sliced_gpu_holds_slices_and_is_its_own_product(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, warm_pool: Any,
) -> None:
    """One L4 node advertising its GPU 4 times (nvidia.com/gpu.replicas=4): a one-slice workload's
    placeholders fill the node's free slices, a scale-up takes them, and the row is NVIDIA-L4-SHARED."""
    ns = k8s_namespace
    [node] = await k8s_node_pool(replace(L4_SHARED, count=1, gpu_count=1, extra_resources={GPU_RESOURCE: "4"}))
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    ann = {P + "enabled": "true", P + "standby": "3", P + "prestage-nodes": "0", P + "autoscale": "false"}
    await apps.create_namespaced_deployment(ns, sliced_deployment(ns, "ts", GPU_RESOURCE, ann))
    await wait_for(lambda: ready_pods(core, ns, "ts"), within=30, what="first replica Ready")
    ctl = await warm_pool()

    async def held() -> list[client.V1Pod]:
        hs = await placeholders(core, ns)
        return hs if len(hs) == 3 and all(w.is_ready(h) for h in hs) else []

    holders = await wait_for(held, within=60, what="3 placeholders Ready (the node's other 3 slices)")
    assert {h.spec.node_name for h in holders} == {node}
    await apps.patch_namespaced_deployment_scale("ts", ns, {"spec": {"replicas": 4}})

    async def four() -> list[client.V1Pod]:
        pods = await ready_pods(core, ns, "ts")
        return pods if len(pods) == 4 else []

    await wait_for(four, within=90, what="4 replicas Ready on the slices")

    async def measured() -> dict[str, dict[str, float]]:
        t = ctl.ttr_gpu.get(f"Deployment/{ns}/ts")
        return t.medians() if t else {}

    rows = await wait_for(measured, within=30, what="time-to-ready measured")
    assert set(rows) == {"NVIDIA-L4-SHARED"}
