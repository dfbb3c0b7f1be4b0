"""The default simulated fleet looks like GPU Feature Discovery labelled nodes."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from warmscale.localcluster.fleet import GPU_RESOURCE, KWOK_LABEL, KWOK_LABEL_VALUE, POOL_LABEL, node_ready

pytestmark = pytest.mark.cluster


async def test_default_fleet_nodes(k8s_admin: client.ApiClient) -> None:
    nodes = (
        await client.CoreV1Api(k8s_admin).list_node(
            label_selector=f"{KWOK_LABEL}={KWOK_LABEL_VALUE},!warmscale.io/test"
        )
    ).items
    gpu = [n for n in nodes if n.metadata.labels.get("nvidia.com/gpu.present") == "true"]
    cpu = [n for n in nodes if n.metadata.labels.get(POOL_LABEL) == "cpu"]
    assert gpu and cpu, "default fleet has GPU and CPU-only pools"
    products = {n.metadata.labels["nvidia.com/gpu.product"] for n in gpu}
    assert "NVIDIA-H100-80GB-HBM3" in products and len(products) >= 2
    for node in gpu:
        labels = node.metadata.labels
        assert node_ready(node), node.metadata.name
        assert node.status.capacity[GPU_RESOURCE] == labels["nvidia.com/gpu.count"]
        assert node.status.allocatable[GPU_RESOURCE] == labels["nvidia.com/gpu.count"]
        assert int(labels["nvidia.com/gpu.memory"]) > 0
        assert labels["node.kubernetes.io/instance-type"]
        assert any(
            t.key == GPU_RESOURCE and t.value == "present" and t.effect == "NoSchedule" for t in node.spec.taints or []
        )
    for node in cpu:
        assert node_ready(node)
        assert GPU_RESOURCE not in node.status.capacity
        assert not [t for t in node.spec.taints or [] if t.key == GPU_RESOURCE]
        assert node.metadata.labels["node.kubernetes.io/instance-type"]


async def test_version_is_stamped(k8s_admin: client.ApiClient) -> None:
    version = await client.VersionApi(k8s_admin).get_code()
    assert version.git_version.startswith("v1.37.")
    assert (version.major, version.minor) == ("1", "37")
