"""NVIDIA dcgm-exporter: GPU utilisation and memory as an optional *secondary* signal. ``engine-metrics.md`` section 6.

DCGM knows nothing about requests, so it never yields a :class:`~signals.model.ReplicaSignal` on its
own. :func:`gpu_usage` lists every GPU (:class:`~signals.model.GpuReading`: utilisation, framebuffer
memory, and the pod DCGM attributes it to while it is allocated); :func:`attribute` keeps the GPUs of
one ScaledObject's pods, :func:`gpus_by_pod` maps each pod to its GPUs (UUIDs and indices: what the
scaler and, later, a hot tier need to know which GPUs a replica holds), :func:`utilization_by_pod`
averages utilisation per pod. Utilisation is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (0..1) when present,
else ``DCGM_FI_DEV_GPU_UTIL`` / 100. ``FB_USED`` is not a load signal (engines preallocate the KV
cache): it is reported, never acted on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from warmscale.signals.model import GpuReading, ReplicaSignal
from warmscale.signals.parsing import Labels, MetricIndex, parse_text

GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
# Workload labels, most specific first: a ServiceMonitor without honorLabels renames clashing
# labels to exported_*; --use-old-namespace uses pod_name / pod_namespace / container_name.
_POD_KEYS = ("exported_pod", "pod", "pod_name")
_NS_KEYS = ("exported_namespace", "namespace", "pod_namespace")
_CONTAINER_KEYS = ("exported_container", "container", "container_name")

GpuUsage = GpuReading  # the name this module used before the reading moved to signals.model


@dataclass(frozen=True)
class GpuRef:
    """Which GPU: its UUID (unique across nodes), its index on its node, and the node."""

    uuid: str | None
    index: str
    hostname: str | None
    container: str | None = None


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


def _key(labels: Labels) -> tuple[str | None, str | None, str]:
    return (_label_ci(labels, "hostname"), _label_ci(labels, "uuid"), labels.get("gpu", ""))


def _finite(value: float, lo: float, hi: float) -> float | None:
    return value if math.isfinite(value) and lo <= value <= hi else None


def gpu_usage(idx: MetricIndex) -> tuple[GpuReading, ...]:
    """Every GPU in the payload, in the order first seen. A NaN/Inf/out-of-range value is unknown
    (``None``) for that GPU; a GPU without a utilisation field has ``utilization=None``."""
    if GR_ENGINE_ACTIVE in idx:
        util_name, scale = GR_ENGINE_ACTIVE, 1.0
    else:
        util_name, scale = GPU_UTIL, 0.01
    gpus: dict[tuple[str | None, str | None, str], GpuReading] = {}
    for name in (util_name, FB_USED, FB_FREE):
        if name not in idx:
            continue
        for labels, value in idx.series(name):
            key = _key(labels)
            g = gpus.get(key)
            if g is None:
                g = gpus[key] = GpuReading(
                    gpu=labels.get("gpu", ""), uuid=key[1], hostname=key[0], namespace=_first(labels, _NS_KEYS),
                    pod=_first(labels, _POD_KEYS), container=_first(labels, _CONTAINER_KEYS), utilization=None)
            if name == util_name:
                u = _finite(value * scale, 0.0, 1.0 + 1e-6)
                gpus[key] = replace(g, utilization=None if u is None else min(1.0, u))
            elif name == FB_USED:
                gpus[key] = replace(g, fb_used_mib=_finite(value, 0.0, math.inf))
            else:
                gpus[key] = replace(g, fb_free_mib=_finite(value, 0.0, math.inf))
    return tuple(gpus.values())


def attributions(idx: MetricIndex) -> tuple[GpuReading, ...]:
    """One reading per (GPU, pod) DCGM attributes: under time-slicing several pods share a GPU and
    dcgm-exporter repeats the GPU's series once per pod (``gpu_usage`` keeps one per GPU). Read from
    whichever field the payload has; utilisation and memory are not filled in here."""
    seen: dict[tuple[str | None, str | None, str, str | None, str | None], GpuReading] = {}
    for name in (GR_ENGINE_ACTIVE, GPU_UTIL, FB_USED, FB_FREE):
        if name not in idx:
            continue
        for labels, _ in idx.series(name):
            host, uuid, gpu = _key(labels)
            ns, pod = _first(labels, _NS_KEYS), _first(labels, _POD_KEYS)
            seen.setdefault((host, uuid, gpu, ns, pod), GpuReading(
                gpu=gpu, uuid=uuid, hostname=host, namespace=ns, pod=pod,
                container=_first(labels, _CONTAINER_KEYS), utilization=None))
    return tuple(seen.values())


def attribute(gpus: Iterable[GpuReading], namespace: str | None, pods: Iterable[str]) -> tuple[GpuReading, ...]:
    """The GPUs DCGM attributes to ``pods`` of ``namespace``. A reading without a namespace label, or
    ``namespace=None``, matches by pod name alone."""
    wanted = set(pods)
    return tuple(g for g in gpus if g.pod in wanted and (namespace is None or g.namespace in (None, namespace)))


def gpus_by_pod(gpus: Iterable[GpuReading]) -> dict[tuple[str | None, str], tuple[GpuRef, ...]]:
    """(namespace, pod) -> the GPUs allocated to it, by UUID and index (sorted by node and index).
    Unallocated GPUs (no pod label) are left out."""
    acc: dict[tuple[str | None, str], list[GpuRef]] = {}
    for g in gpus:
        if g.pod is not None:
            acc.setdefault((g.namespace, g.pod), []).append(GpuRef(g.uuid, g.gpu, g.hostname, g.container))
    def order(r: GpuRef) -> tuple[str, str, str]:
        return (r.hostname or "", r.index.zfill(4), r.uuid or "")

    return {k: tuple(sorted(v, key=order)) for k, v in acc.items()}


def utilization_by_pod(idx: MetricIndex) -> dict[tuple[str | None, str], float]:
    """Mean utilisation of the GPUs allocated to each (namespace, pod); unallocated GPUs and GPUs
    without a utilisation value are left out."""
    acc: dict[tuple[str | None, str], list[float]] = {}
    for g in gpu_usage(idx):
        if g.pod is not None and g.utilization is not None:
            acc.setdefault((g.namespace, g.pod), []).append(g.utilization)
    return {k: math.fsum(v) / len(v) for k, v in acc.items()}


def parse(text: str) -> dict[tuple[str | None, str], float]:
    return utilization_by_pod(parse_text(text))


_READ = frozenset({GR_ENGINE_ACTIVE, GPU_UTIL, FB_USED, FB_FREE})


def _read_lines(text: str) -> str:
    """Only the samples of the fields read (an exporter reports ~40 per GPU): parsing the rest would
    cost the event loop ~1.3 ms per 32 kB payload for nothing."""
    keep = [ln for ln in text.splitlines() if ln[:1] == "D" and ln.split("{", 1)[0].split(" ", 1)[0] in _READ]
    return "\n".join(keep) + "\n" if keep else ""


def parse_gpus(text: str, *, max_bytes: int | None = None) -> tuple[GpuReading, ...]:
    """Every GPU of one dcgm-exporter payload (the fields read only); raises
    :class:`~signals.parsing.PayloadError` where those do not parse."""
    return gpu_usage(parse_text(_read_lines(text), max_bytes=max_bytes))


def with_gpu_utilization(signal: ReplicaSignal, utilization: float | None) -> ReplicaSignal:
    return replace(signal, gpu_utilization=utilization)
