"""NVIDIA dcgm-exporter: GPU utilisation as an optional *secondary* signal. ``engine-metrics.md`` section 6.

DCGM knows nothing about requests, so it never yields a :class:`~signals.model.ReplicaSignal` on its
own; :func:`gpu_usage` lists per-GPU utilisation with the pod the GPU is allocated to, and
:func:`utilization_by_pod` averages it per pod, to be joined to engine replicas on namespace/pod
(:func:`with_gpu_utilization`). Utilisation is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (0..1) when present,
else ``DCGM_FI_DEV_GPU_UTIL`` / 100. ``FB_USED`` is not a load signal (engines preallocate the KV cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import Labels, MetricIndex, parse_text

GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# Workload labels, most specific first: a ServiceMonitor without honorLabels renames clashing
# labels to exported_*; --use-old-namespace uses pod_name / pod_namespace.
_POD_KEYS = ("exported_pod", "pod", "pod_name")
_NS_KEYS = ("exported_namespace", "namespace", "pod_namespace")


@dataclass(frozen=True)
class GpuUsage:
    gpu: str
    uuid: str | None
    hostname: str | None
    namespace: str | None
    pod: str | None
    utilization: float


def detect(idx: MetricIndex) -> bool:
    return idx.has_prefix("DCGM_FI_")


def _first(labels: Labels, keys: tuple[str, ...]) -> str | None:
    for k in keys:
        v = labels.get(k)
        if v:
            return v
    return None


def _label_ci(labels: Labels, key: str) -> str | None:
    low = key.lower()
    for k, v in labels.items():
        if k.lower() == low:
            return v
    return None


def gpu_usage(idx: MetricIndex) -> tuple[GpuUsage, ...]:
    """Per-GPU utilisation (0..1); series with NaN/Inf/out-of-range values are skipped."""
    if GR_ENGINE_ACTIVE in idx:
        name, scale = GR_ENGINE_ACTIVE, 1.0
    elif GPU_UTIL in idx:
        name, scale = GPU_UTIL, 0.01
    else:
        return ()
    out = []
    for labels, value in idx.series(name):
        u = value * scale
        if not math.isfinite(u) or u < 0 or u > 1.0 + 1e-6:
            continue
        out.append(
            GpuUsage(
                gpu=labels.get("gpu", ""),
                uuid=_label_ci(labels, "uuid"),
                hostname=_label_ci(labels, "hostname"),
                namespace=_first(labels, _NS_KEYS),
                pod=_first(labels, _POD_KEYS),
                utilization=min(1.0, u),
            )
        )
    return tuple(out)


def utilization_by_pod(idx: MetricIndex) -> dict[tuple[str | None, str], float]:
    """Mean utilisation of the GPUs allocated to each (namespace, pod); unallocated GPUs are left out."""
    acc: dict[tuple[str | None, str], list[float]] = {}
    for g in gpu_usage(idx):
        if g.pod is not None:
            acc.setdefault((g.namespace, g.pod), []).append(g.utilization)
    return {k: math.fsum(v) / len(v) for k, v in acc.items()}


def parse(text: str) -> dict[tuple[str | None, str], float]:
    return utilization_by_pod(parse_text(text))


def with_gpu_utilization(signal: ReplicaSignal, utilization: float | None) -> ReplicaSignal:
    return replace(signal, gpu_utilization=utilization)
