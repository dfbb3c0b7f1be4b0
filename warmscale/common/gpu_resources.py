"""Which requested resources are GPUs, and the GPU product a replica really gets (pure; API JSON dicts).

The NVIDIA GPU Operator offers a GPU three ways (its device plugin and GPU Feature Discovery, GFD):

- whole: ``nvidia.com/gpu``, the node labelled ``nvidia.com/gpu.product`` (e.g. ``NVIDIA-H100-80GB-HBM3``);
- MIG, strategy ``mixed``: one resource per profile, ``nvidia.com/mig-<profile>`` (``mig-1g.10gb``,
  ``mig-3g.40gb``, ...), the product label still the whole GPU's; strategy ``single``: the slices as
  ``nvidia.com/gpu`` and the product label carries the profile (``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb``).
  The node says which with ``nvidia.com/mig.strategy``;
- time-sliced: ``nvidia.com/gpu`` advertised ``nvidia.com/gpu.replicas`` times per physical GPU (or
  renamed ``nvidia.com/gpu.shared``); GFD appends ``-SHARED`` to the product label unless renamed.

A one-slice replica starts and serves nothing like a whole-GPU one, so what is learned per product
(the scaler's capacity, the warm pool's time-to-ready) is keyed by the *effective* product:
:func:`effective_gpu_product` gives the single-strategy spelling for a mixed-strategy slice and the
``-SHARED`` spelling for a time-sliced GPU, so both strategies of one slice share one row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRODUCT_LABEL = "nvidia.com/gpu.product"  # GFD, on every GPU node
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"  # GPU Operator: none | single | mixed
REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GFD: time-slicing replicas per physical GPU (1: not shared)

# Whole devices (and the renamed time-sliced one) of the vendors' device plugins.
NVIDIA_GPU = "nvidia.com/gpu"  # the device plugin's whole-GPU (or time-sliced) resource
WHOLE_GPU_RESOURCES = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared", "amd.com/gpu", "gpu.intel.com/i915"})
MIG_PREFIX = "nvidia.com/mig-"  # mixed strategy: nvidia.com/mig-<g>g.<mem>gb, one resource per profile
MIG_MARK = "-MIG-"  # how GFD's single strategy spells a slice's product: <GPU>-MIG-<profile>
SHARED_SUFFIX = "-SHARED"  # how GFD spells a time-sliced GPU's product
QUOTA_PREFIXES = ("requests.", "limits.")  # a ResourceQuota's keys for extended resources


def is_gpu_resource(name: str) -> bool:
    """A whole GPU, a renamed time-slice or a MIG slice (``nvidia.com/mig-1g.10gb``)."""
    return name in WHOLE_GPU_RESOURCES or (name.startswith(MIG_PREFIX) and len(name) > len(MIG_PREFIX))


def is_gpu_quota_key(key: str) -> bool:
    """A ResourceQuota ``hard`` key that bounds GPUs (``requests.nvidia.com/mig-1g.10gb`` and the like)."""
    for prefix in QUOTA_PREFIXES:
        if key.startswith(prefix):
            return is_gpu_resource(key[len(prefix):])
    return is_gpu_resource(key)


def gpu_requests(requests: Mapping[str, float]) -> dict[str, float]:
    """The GPU resources of a replica's requests (whole GPUs, slices), those above zero."""
    return {k: v for k, v in requests.items() if v > 0 and is_gpu_resource(k)}


def _resource_names(pod_spec: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for c in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        names.update((res.get("limits") or {}).keys())
        names.update((res.get("requests") or {}).keys())
    return names


def mig_profile(pod_spec: Mapping[str, Any] | None) -> str | None:
    """The MIG profile a pod requests under the mixed strategy (``1g.10gb``), else ``None``; of several
    (rare: one pod, two profiles), the first by name, so the choice is stable."""
    profiles = sorted(n[len(MIG_PREFIX):] for n in _resource_names(pod_spec or {}) if is_gpu_resource(n)
                      and n.startswith(MIG_PREFIX))
    return profiles[0] if profiles else None


def time_slice_replicas(labels: Mapping[str, str]) -> int:
    """Replicas per physical GPU a node's labels declare (1: not shared; unparseable: 1)."""
    raw = str(labels.get(REPLICAS_LABEL) or "1").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def node_product(labels: Mapping[str, str]) -> str | None:
    """A node's product as GFD would spell it for a time-sliced GPU (``-SHARED`` appended when the node
    declares more than one replica and the label lacks it); ``None`` when unlabelled."""
    product = str(labels.get(PRODUCT_LABEL) or "")
    if not product:
        return None
    if time_slice_replicas(labels) > 1 and not product.endswith(SHARED_SUFFIX):
        return product + SHARED_SUFFIX
    return product


def effective_gpu_product(product: str | None, pod_spec: Mapping[str, Any] | None) -> str | None:
    """The product a pod of ``pod_spec`` gets on a GPU of ``product``: a mixed-strategy MIG request
    turns ``NVIDIA-H100-80GB-HBM3`` into ``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb`` (the single strategy's
    label, so both strategies share a row); a product already naming a slice is kept."""
    if not product:
        return None
    profile = mig_profile(pod_spec)
    if profile is None or MIG_MARK in product:
        return product
    return f"{product}{MIG_MARK}{profile}"
