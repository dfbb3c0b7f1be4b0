"""Which GPU product a ScaledObject's replicas run on (signals/gpus.py): tables, no API server."""

from __future__ import annotations

from typing import Any

import pytest

from warmscale.signals.gpus import GPU_PRODUCT_LABEL, fleet_gpu_product, node_gpu_product, template_gpu_product

H100, A100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB", "NVIDIA-L4"


def _affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}}


def _in(*values: str, key: str = GPU_PRODUCT_LABEL) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


@pytest.mark.parametrize(("spec", "want"), [
    (None, None),
    ({}, None),
    ({"nodeSelector": {GPU_PRODUCT_LABEL: H100}}, H100),
    ({"nodeSelector": {"warmscale.io/test": "x"}}, None),
    (_affinity([_in(A100)]), A100),
    (_affinity([_in(A100, H100), _in(A100)]), A100),  # the expressions of a term all hold
    (_affinity([_in(A100)], [_in(A100)]), A100),
    (_affinity([_in(A100, H100)]), None),  # two products allowed: not pinned
    (_affinity([_in(A100)], [_in(H100)]), None),  # either term may place a replica
    (_affinity([_in(A100)], [_in("x", key="zone")]), None),  # a term without the label allows any product
    (_affinity([{"key": GPU_PRODUCT_LABEL, "operator": "NotIn", "values": [L4]}]), None),
    ({"nodeSelector": {GPU_PRODUCT_LABEL: L4}, **_affinity([_in(A100)])}, L4),  # nodeSelector first
])
def test_template_pins_a_product(spec: dict[str, Any] | None, want: str | None) -> None:
    assert template_gpu_product(spec) == want


@pytest.mark.parametrize(("products", "want"), [
    ([], None),
    ([None, None], None),  # pods not scheduled yet, or nodes unlabelled / not read
    ([H100], H100),
    ([H100, A100, H100], H100),  # the product most pods run on
    ([A100, H100], A100),  # a tie: the first by name, stable from tick to tick
    ([None, L4, None], L4),
])
def test_fleet_product_from_the_pods_nodes(products: list[str | None], want: str | None) -> None:
    assert fleet_gpu_product(None, products) == want


def test_template_wins_over_the_nodes() -> None:
    assert fleet_gpu_product({"nodeSelector": {GPU_PRODUCT_LABEL: A100}}, [H100, H100]) == A100


def test_node_label() -> None:
    assert node_gpu_product({"metadata": {"labels": {GPU_PRODUCT_LABEL: H100}}}) == H100
    assert node_gpu_product({"metadata": {"labels": {GPU_PRODUCT_LABEL: ""}}}) is None
    assert node_gpu_product({"metadata": {}}) is None
