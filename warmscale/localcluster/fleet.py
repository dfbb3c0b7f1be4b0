"""Simulated node fleet: KWOK-managed nodes with GPU Feature Discovery style labels.

Every node carries ``type=kwok`` (the label selector kwok manages) and
``warmscale.io/pool=<pool>``. GPU nodes get the ``nvidia.com/gpu.*`` labels,
``nvidia.com/gpu`` capacity and the ``nvidia.com/gpu=present:NoSchedule`` taint. MIG and time-sliced
pools (``H100_MIG_1G``, ``H100_MIG_3G``, ``L4_SHARED``) carry the GPU Operator's labels
(``nvidia.com/mig.strategy``, ``nvidia.com/gpu.replicas``) and its resources (``nvidia.com/mig-<profile>``
under the mixed strategy; ``nvidia.com/gpu`` counted per slice when time-sliced) via ``extra_resources``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

KWOK_LABEL = "type"
KWOK_LABEL_VALUE = "kwok"
POOL_LABEL = "warmscale.io/pool"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodePool:
    """A homogeneous group of fake nodes."""

    name: str
    count: int
    instance_type: str
    cpu: str
    memory: str
    gpu_product: str | None = None
    gpu_count: int = 0
    gpu_memory_mib: int = 0
    gpu_family: str | None = None
    pods: int = 110
    zone: str = "sim-a"
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    # Set after the GPUs: MIG profiles (nvidia.com/mig-1g.10gb: "7"), or nvidia.com/gpu overridden ("0"
    # when a mixed-strategy node's GPUs are all partitioned; N x replicas when time-sliced).
    extra_resources: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0

    def node_name(self, index: int) -> str:
        return f"kwok-{self.name}-{index}"

    def labels(self, node_name: str) -> dict[str, str]:
        labels = {
            KWOK_LABEL: KWOK_LABEL_VALUE,
            POOL_LABEL: self.name,
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            # Set up front, so the node lifecycle controller has no labels to reconcile.
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": self.instance_type,
            "topology.kubernetes.io/zone": self.zone,
        }
        if self.has_gpu:
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": self.gpu_product or "NVIDIA-Unknown",
                    "nvidia.com/gpu.count": str(self.gpu_count),
                    "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
                }
            )
            if self.gpu_family:
                labels["nvidia.com/gpu.family"] = self.gpu_family
        labels.update(self.extra_labels)
        return labels

    def manifest(self, index: int) -> dict[str, Any]:
        """The Node object (status included: kwok keeps the given capacity)."""
        name = self.node_name(index)
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.has_gpu:
            resources[GPU_RESOURCE] = str(self.gpu_count)
        resources.update(self.extra_resources)
        spec: dict[str, Any] = {}
        if self.has_gpu:
            spec["taints"] = [dict(GPU_TAINT)]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": self.labels(name),
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            },
            "spec": spec,
            "status": {"capacity": dict(resources), "allocatable": dict(resources)},
        }

    def manifests(self) -> list[dict[str, Any]]:
        return [self.manifest(i) for i in range(self.count)]


H100 = NodePool(
    name="h100",
    count=2,
    instance_type="p5.48xlarge",
    cpu="192",
    memory="2048Gi",
    gpu_product="NVIDIA-H100-80GB-HBM3",
    gpu_count=8,
    gpu_memory_mib=81559,
    gpu_family="hopper",
)
A100 = NodePool(
    name="a100",
    count=2,
    instance_type="p4d.24xlarge",
    cpu="96",
    memory="1152Gi",
    gpu_product="NVIDIA-A100-SXM4-40GB",
    gpu_count=8,
    gpu_memory_mib=40960,
    gpu_family="ampere",
)
L4 = NodePool(
    name="l4",
    count=2,
    instance_type="g6.12xlarge",
    cpu="48",
    memory="192Gi",
    gpu_product="NVIDIA-L4",
    gpu_count=4,
    gpu_memory_mib=23034,
    gpu_family="ada-lovelace",
)
# MIG, mixed strategy (GPU Operator): one H100 partitioned into 7 1g.10gb slices, or 2 3g.40gb;
# GFD keeps the whole GPU's product label and the device plugin reports no whole GPU.
H100_MIG_1G = replace(H100, name="h100-mig1g", gpu_count=1, extra_labels={"nvidia.com/mig.strategy": "mixed"},
                      extra_resources={GPU_RESOURCE: "0", "nvidia.com/mig-1g.10gb": "7"})
H100_MIG_3G = replace(H100, name="h100-mig3g", gpu_count=1, extra_labels={"nvidia.com/mig.strategy": "mixed"},
                      extra_resources={GPU_RESOURCE: "0", "nvidia.com/mig-3g.40gb": "2"})
# Time-slicing: 4 L4s advertised 4 times each; GFD appends -SHARED to the product.
L4_SHARED = replace(L4, name="l4-shared", gpu_product="NVIDIA-L4-SHARED",
                    extra_labels={"nvidia.com/gpu.replicas": "4"}, extra_resources={GPU_RESOURCE: "16"})
CPU = NodePool(name="cpu", count=2, instance_type="m7i.4xlarge", cpu="16", memory="64Gi")

DEFAULT_POOLS: tuple[NodePool, ...] = (H100, A100, L4, CPU)


def default_fleet(per_pool: int = 2, overrides: Mapping[str, int] | None = None) -> list[NodePool]:
    """The default mix with ``per_pool`` nodes each; ``overrides`` sets pool sizes by name."""
    overrides = dict(overrides or {})
    unknown = set(overrides) - {p.name for p in DEFAULT_POOLS}
    if unknown:
        raise ValueError(f"unknown pool(s): {sorted(unknown)}; known: {[p.name for p in DEFAULT_POOLS]}")
    pools = [replace(p, count=overrides.get(p.name, per_pool)) for p in DEFAULT_POOLS]
    return [p for p in pools if p.count > 0]


def gpu_fleet(count: int, pool: NodePool = H100) -> list[NodePool]:
    """A single GPU pool of ``count`` nodes (scale tests)."""
    return [replace(pool, count=count)]


async def create_nodes(api: client.ApiClient, pools: Iterable[NodePool], concurrency: int = 16) -> int:
    """Create the nodes of ``pools`` (existing ones are left alone); return how many were created."""
    core = client.CoreV1Api(api)
    manifests = [m for pool in pools for m in pool.manifests()]
    semaphore = asyncio.Semaphore(concurrency)
    created = 0

    async def create(body: dict[str, Any]) -> None:
        nonlocal created
        async with semaphore:
            try:
                await core.create_node(cast(Any, body))
                created += 1
            except ApiException as exc:
                if exc.status != 409:
                    raise

    await asyncio.gather(*(create(m) for m in manifests))
    log.info("created nodes", extra={"nodes_created": created, "requested": len(manifests)})
    return created


async def wait_nodes_ready(api: client.ApiClient, expected: int, within: float = 120.0) -> None:
    """Wait until ``expected`` kwok nodes report Ready=True and carry no ``node.kubernetes.io/*`` taint."""
    core = client.CoreV1Api(api)
    not_ready: list[client.V1Node] = []
    ready = 0
    try:
        async with asyncio.timeout(within):
            while True:
                nodes = await core.list_node(label_selector=f"{KWOK_LABEL}={KWOK_LABEL_VALUE}")
                not_ready = [n for n in nodes.items if not node_ready(n)]
                ready = len(nodes.items) - len(not_ready)
                if ready >= expected:
                    return
                await asyncio.sleep(0.5)
    except TimeoutError:
        detail = ""
        if not_ready:
            n = not_ready[0]
            conditions = [(c.type, c.status) for c in (n.status.conditions or [])]
            taints = [t.key for t in (n.spec.taints or [])]
            detail = f"; e.g. {n.metadata.name}: conditions={conditions} taints={taints}"
        raise TimeoutError(f"only {ready}/{expected} kwok nodes Ready after {within:.0f}s{detail}") from None


def node_ready(node: client.V1Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    if not any(c.type == "Ready" and c.status == "True" for c in conditions):
        return False
    taints = (node.spec.taints if node.spec else None) or []
    return not any(t.key.startswith("node.kubernetes.io/") for t in taints)
