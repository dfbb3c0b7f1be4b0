"""KEDA's CRDs are installed; the ScaledObject schema is enforced server-side."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "keda.sh", "v1alpha1", "scaledobjects"


def scaled_object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScaledObject", "metadata": {"name": name}, "spec": spec}


VALID_SPEC: dict[str, Any] = {
    "scaleTargetRef": {"name": "llm"},
    "pollingInterval": 5,
    "cooldownPeriod": 10,
    "minReplicaCount": 0,
    "maxReplicaCount": 4,
    "triggers": [{"type": "external", "metadata": {"scalerAddress": "127.0.0.1:9000", "metricThreshold": "10"}}],
}


async def test_keda_crds_installed(k8s_admin: client.ApiClient) -> None:
    crds = await client.ApiextensionsV1Api(k8s_admin).list_custom_resource_definition()
    names = {c.metadata.name for c in crds.items}
    assert {
        "scaledobjects.keda.sh",
        "scaledjobs.keda.sh",
        "triggerauthentications.keda.sh",
        "clustertriggerauthentications.keda.sh",
    } <= names


async def test_valid_scaled_object_accepted(k8s_admin: client.ApiClient, k8s_namespace: str) -> None:
    api = client.CustomObjectsApi(k8s_admin)
    await api.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL, scaled_object("ok", VALID_SPEC))
    stored = await api.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL, "ok")
    assert stored["spec"]["triggers"][0]["type"] == "external"


@pytest.mark.parametrize(
    ("case", "spec", "field"),
    [
        ("no-target", {k: v for k, v in VALID_SPEC.items() if k != "scaleTargetRef"}, "scaleTargetRef"),
        ("negative-min", {**VALID_SPEC, "minReplicaCount": -1}, "minReplicaCount"),
        ("trigger-without-type", {**VALID_SPEC, "triggers": [{"metadata": {}}]}, "type"),
    ],
)
async def test_invalid_scaled_object_rejected(
    k8s_admin: client.ApiClient, k8s_namespace: str, case: str, spec: dict[str, Any], field: str
) -> None:
    api = client.CustomObjectsApi(k8s_admin)
    with pytest.raises(ApiException) as info:
        await api.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL, scaled_object(case, spec))
    assert info.value.status == 422
    assert field in str(info.value.body)
