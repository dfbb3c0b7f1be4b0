"""MIG slices and time-sliced GPUs as requested resources: matching, placeholders, staging and the
per-product time-to-ready key (pure tables; the cluster test is tests/warmpool/test_mig_cluster.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.warmpool.helpers import GPU_TOL, node, workload
from warmscale.common.diagnostics.pods import gpu_quota_namespaces, pod_gpus
from warmscale.common.gpu_resources import (
    effective_gpu_product,
    is_gpu_quota_key,
    is_gpu_resource,
    mig_profile,
    node_product,
    time_slice_replicas,
)
from warmscale.signals.gpus import fleet_gpu_product, node_gpu_product, template_gpu_product
from warmscale.warmpool import objects as ob
from warmscale.warmpool.matching import fits, free_fit, matching_nodes
from warmscale.warmpool.planning import plan, replica_gpu_product

H100 = "NVIDIA-H100-80GB-HBM3"
MIG1 = "nvidia.com/mig-1g.10gb"
MIG3 = "nvidia.com/mig-3g.40gb"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
P = "warmscale.io/"


def mig_node(name: str, strategy: str = "mixed", **resources: int) -> dict[str, Any]:
    """A GPU Operator MIG node: ``resources`` as ``mig_1g_10gb=7`` (mixed) or ``gpu=7`` (single)."""
    n = node(name, gpus=0)
    alloc = n["status"]["allocatable"]
    alloc.pop("nvidia.com/gpu")
    for key, count in resources.items():
        alloc["nvidia.com/" + key.replace("_", "-", 1).replace("_", ".")] = str(count)
    labels = n["metadata"]["labels"]
    labels["nvidia.com/mig.strategy"] = strategy
    if strategy == "single":
        labels["nvidia.com/gpu.product"] = f"{H100}-MIG-1g.10gb"
    return n


def shared_node(name: str, physical: int = 1, replicas: int = 4) -> dict[str, Any]:
    n = node(name, gpus=physical * replicas)
    n["metadata"]["labels"].update({"nvidia.com/gpu.replicas": str(replicas), "nvidia.com/gpu.count": str(physical)})
    return n


def spec_of(resource: str, count: int = 1, product: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0",
                        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {resource: str(count)}}}],
        "tolerations": [GPU_TOL],
    }
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return spec


def running(spec: dict[str, Any], on: str, name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "other"}}, "spec": {**spec, "nodeName": on},
            "status": {"phase": "Running"}}


@pytest.mark.parametrize(("name", "gpu"), [
    ("nvidia.com/gpu", True), ("nvidia.com/gpu.shared", True), (MIG1, True), (MIG3, True),
    ("amd.com/gpu", True), ("nvidia.com/mig-", False), ("nvidia.com/gpu.product", False), ("cpu", False),
])
def test_gpu_resource_names(name: str, gpu: bool) -> None:
    assert is_gpu_resource(name) is gpu


@pytest.mark.parametrize(("key", "gpu"), [
    ("requests.nvidia.com/gpu", True), ("requests." + MIG1, True), ("limits.nvidia.com/gpu.shared", True),
    ("requests.cpu", False), ("requests.nvidia.com/gpu.product", False), ("pods", False),
])
def test_gpu_quota_keys(key: str, gpu: bool) -> None:
    assert is_gpu_quota_key(key) is gpu


@pytest.mark.parametrize(("labels", "expected"), [
    ({"nvidia.com/gpu.product": H100}, H100),
    ({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.replicas": "1"}, H100),
    ({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.replicas": "4"}, H100 + "-SHARED"),
    ({"nvidia.com/gpu.product": H100 + "-SHARED", "nvidia.com/gpu.replicas": "4"}, H100 + "-SHARED"),
    ({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.replicas": "x"}, H100),  # unparseable: not shared
    ({"nvidia.com/gpu.product": f"{H100}-MIG-1g.10gb", "nvidia.com/mig.strategy": "single"}, f"{H100}-MIG-1g.10gb"),
    ({}, None),
])
def test_node_product(labels: dict[str, str], expected: str | None) -> None:
    assert node_product(labels) == expected
    assert node_gpu_product({"metadata": {"labels": labels}}) == expected


def test_time_slice_replicas() -> None:
    assert time_slice_replicas({"nvidia.com/gpu.replicas": "4"}) == 4
    assert time_slice_replicas({"nvidia.com/gpu.replicas": "0"}) == 1
    assert time_slice_replicas({}) == 1


@pytest.mark.parametrize(("product", "spec", "expected"), [
    (H100, spec_of(MIG1), f"{H100}-MIG-1g.10gb"),  # mixed: the slice's row, spelled as single
    (f"{H100}-MIG-1g.10gb", spec_of("nvidia.com/gpu"), f"{H100}-MIG-1g.10gb"),  # single: the label says it
    (f"{H100}-MIG-3g.40gb", spec_of(MIG3), f"{H100}-MIG-3g.40gb"),  # already a slice: kept
    (H100, spec_of("nvidia.com/gpu"), H100),
    (None, spec_of(MIG1), None),
])
def test_effective_product(product: str | None, spec: dict[str, Any], expected: str | None) -> None:
    assert effective_gpu_product(product, spec) == expected


def test_mig_profile_first_by_name() -> None:
    spec = spec_of(MIG3)
    spec["containers"].append({"name": "b", "resources": {"limits": {MIG1: "1"}}})
    assert mig_profile(spec) == "1g.10gb"
    assert mig_profile(spec_of("nvidia.com/gpu")) is None


def test_scaler_product_of_a_mig_workload() -> None:
    """The scaler's row (template pin or the pods' nodes) is the slice's, not the whole GPU's."""
    assert template_gpu_product(spec_of(MIG1, product=H100)) == f"{H100}-MIG-1g.10gb"
    assert fleet_gpu_product(spec_of(MIG1), [H100, H100, None]) == f"{H100}-MIG-1g.10gb"
    assert fleet_gpu_product(spec_of("nvidia.com/gpu"), [H100 + "-SHARED"]) == H100 + "-SHARED"


def test_warm_pool_time_to_ready_row() -> None:
    """The controller learns a replica's time-to-ready under the key the scaler reads."""
    mixed = mig_node("m1", mig_1g_10gb=7)["metadata"]["labels"]
    assert replica_gpu_product(mixed, spec_of(MIG1)) == f"{H100}-MIG-1g.10gb"
    single = mig_node("s1", strategy="single", gpu=7)["metadata"]["labels"]
    assert replica_gpu_product(single, spec_of("nvidia.com/gpu")) == f"{H100}-MIG-1g.10gb"
    assert replica_gpu_product(shared_node("t1")["metadata"]["labels"], spec_of("nvidia.com/gpu")) == H100 + "-SHARED"
    assert replica_gpu_product({}, spec_of(MIG1)) == ""


FLEET = [
    node("whole"),
    mig_node("mixed-1g", mig_1g_10gb=7),
    mig_node("mixed-3g", mig_3g_40gb=2),
    mig_node("mixed-both", mig_1g_10gb=3, mig_3g_40gb=1),
    mig_node("single-1g", strategy="single", gpu=7),
]


def test_matching_by_profile() -> None:
    names = [n["metadata"]["name"] for n in matching_nodes(spec_of(MIG1), FLEET)]
    assert names == ["mixed-1g", "mixed-both"]
    names = [n["metadata"]["name"] for n in matching_nodes(spec_of(MIG3), FLEET)]
    assert names == ["mixed-3g", "mixed-both"]
    # single strategy: slices are nvidia.com/gpu, the product label picks them
    names = [n["metadata"]["name"] for n in matching_nodes(spec_of("nvidia.com/gpu", product=f"{H100}-MIG-1g.10gb"),
                                                           FLEET)]
    assert names == ["single-1g"]
    assert fits(spec_of(MIG1), FLEET[0]).reason == f"allocatable resources ({MIG1})"


def test_free_fit_counts_slices() -> None:
    n = mig_node("mixed-both", mig_1g_10gb=3, mig_3g_40gb=1)
    one = spec_of(MIG1)
    pods = [running(one, "mixed-both", f"p{i}") for i in range(3)]
    assert free_fit(one, n, pods[:2]) and not free_fit(one, n, pods)
    assert free_fit(spec_of(MIG3), n, pods)  # the other profile is still free


def test_time_sliced_node_holds_its_replicas() -> None:
    n = shared_node("t1", physical=1, replicas=4)
    one = spec_of("nvidia.com/gpu")
    pods = [running(one, "t1", f"p{i}") for i in range(4)]
    assert free_fit(one, n, pods[:3]) and not free_fit(one, n, pods)


def test_placeholder_requests_the_same_slice() -> None:
    wl = workload({P + "enabled": "true", P + "standby": "1"}, spec=spec_of(MIG1))
    pod = ob.placeholder_pod(wl, 0, None)
    res = pod["spec"]["containers"][0]["resources"]
    assert res["limits"] == {MIG1: "1"} and res["requests"][MIG1] == "1"
    assert "nvidia.com/gpu" not in res["requests"]


def test_plan_stages_and_holds_only_on_nodes_with_the_profile() -> None:
    annotations = {P + "enabled": "true", P + "standby": "2", P + "prestage-nodes": "2",
                   P + "model-uri": "hf://org/model@rev1", P + "min-ready": "1"}
    p = plan(workload(annotations, spec=spec_of(MIG3)), FLEET, [], [], None, NOW)
    assert p.matching == ["mixed-3g", "mixed-both"]
    assert sorted(p.stage_nodes) == ["mixed-3g", "mixed-both"]
    assert sorted(p.create_prepull) == ["mixed-3g", "mixed-both"]
    assert p.create_placeholders == [0, 1]


def test_advise_counts_slices_as_gpus() -> None:
    pod = {"spec": spec_of(MIG1, count=2)}
    assert pod_gpus(pod) == 2
    quotas = [{"metadata": {"namespace": "a"}, "spec": {"hard": {"requests." + MIG1: "4"}}},
              {"metadata": {"namespace": "b"}, "spec": {"hard": {"requests.cpu": "4"}}}]
    assert gpu_quota_namespaces(quotas) == frozenset({"a"})
