"""Which GPU product a ScaledObject's replicas run on, from what the API server shows. Pure.

GPU Feature Discovery (GFD, part of the NVIDIA GPU operator) labels each GPU node with
``nvidia.com/gpu.product`` (e.g. ``NVIDIA-H100-80GB-HBM3``). The scaler keeps its learned capacity
and the warm pool's measured time-to-ready per product, so it needs the product of the replicas:

1. the scale target's pod template, when it pins one (``nodeSelector``, or a required node affinity
   whose every term allows exactly one product): that is where new replicas land;
2. else the product most of the target's pods run on (the labels of their nodes; ties: the first
   by name, so the choice is stable); nodes without the label are not counted;
3. else ``None`` (unknown: the per-product tables use their "" entry, as before discovery).

The product is the *effective* one (:mod:`warmscale.common.gpu_resources`): a template requesting a
MIG slice under the mixed strategy (``nvidia.com/mig-1g.10gb``) runs on ``<GPU>-MIG-1g.10gb``, and a
time-sliced node's GPU is ``<GPU>-SHARED``, so a slice never shares a row with a whole GPU.

The ``gpuProduct`` metadata key overrides all of this (the scaler reads ``cfg.gpu_product`` first).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from warmscale.common.gpu_resources import PRODUCT_LABEL, effective_gpu_product, node_product

# Set by GPU Feature Discovery on every GPU node (the same label the warm-pool controller reads).
GPU_PRODUCT_LABEL = PRODUCT_LABEL


def _affinity_products(pod_spec: Mapping[str, Any]) -> set[str] | None:
    """The products a required node affinity allows (``None``: it does not constrain the label)."""
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    allowed: set[str] = set()
    for term in terms:
        values = [set(e.get("values") or []) for e in term.get("matchExpressions") or []
                  if e.get("key") == GPU_PRODUCT_LABEL and e.get("operator") == "In"]
        if not values:
            return None  # a term without the label: this term allows any product
        term_allows = set.intersection(*values)
        allowed |= term_allows
    return allowed if terms else None


def template_gpu_product(pod_spec: Mapping[str, Any] | None) -> str | None:
    """The one product a pod template pins (``nodeSelector`` or required affinity), else ``None``."""
    if not pod_spec:
        return None
    selected = (pod_spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
    if selected:
        return effective_gpu_product(str(selected), pod_spec)
    allowed = _affinity_products(pod_spec)
    if allowed is not None and len(allowed) == 1:
        return effective_gpu_product(next(iter(allowed)), pod_spec)
    return None


def node_gpu_product(node: Mapping[str, Any]) -> str | None:
    """A node's GFD product label, ``-SHARED`` when time-sliced (``None`` when unlabelled or empty)."""
    return node_product((node.get("metadata") or {}).get("labels") or {})


def fleet_gpu_product(pod_spec: Mapping[str, Any] | None, pod_products: Iterable[str | None]) -> str | None:
    """The product of a ScaledObject's replicas: the template's, else the pods' nodes' most common
    (ties: first by name), else ``None``. ``pod_products`` holds one entry per pod (``None``: the
    pod is not scheduled yet, or its node is unlabelled or not read yet)."""
    pinned = template_gpu_product(pod_spec)
    if pinned is not None:
        return pinned
    counts = Counter(p for p in pod_products if p)
    if not counts:
        return None
    return effective_gpu_product(min(counts, key=lambda p: (-counts[p], p)), pod_spec)
