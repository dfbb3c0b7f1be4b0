"""Tiny builders of API dicts for the pure tests."""

from __future__ import annotations

from typing import Any

from warmscale.warmpool.objects import Workload

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def node(
    name: str,
    product: str | None = "NVIDIA-H100-80GB-HBM3",
    gpus: int = 8,
    cpu: str = "192",
    memory: str = "2048Gi",
    ready: bool = True,
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    lab = {"kubernetes.io/hostname": name}
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if product:
        lab["nvidia.com/gpu.product"] = product
        alloc["nvidia.com/gpu"] = str(gpus)
    lab.update(labels or {})
    return {
        "metadata": {"name": name, "labels": lab},
        "spec": {
            "taints": taints if taints is not None else ([GPU_TAINT] if product else []),
            **({"unschedulable": True} if unschedulable else {}),
        },
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pod_spec(
    gpus: int = 1,
    cpu: str = "8",
    memory: str = "64Gi",
    product: str | None = "NVIDIA-H100-80GB-HBM3",
    tolerate: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "engine",
                "image": "vllm/vllm-openai:v0.11.0",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    if tolerate:
        spec["tolerations"] = [GPU_TOL]
    spec.update(extra)
    return spec


def workload(
    annotations: dict[str, str],
    spec: dict[str, Any] | None = None,
    replicas: int = 1,
    name: str = "llm",
    namespace: str = "ns",
) -> Workload:
    return Workload(
        kind="Deployment",
        namespace=namespace,
        name=name,
        uid="uid-1",
        replicas=replicas,
        template={"metadata": {"labels": {"app": name}}, "spec": spec or pod_spec()},
        annotations=annotations,
        selector={"app": name},
    )
