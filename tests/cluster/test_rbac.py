"""A restricted ServiceAccount (TokenRequest token) gets exactly what its Role allows."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .fixtures import SaClientFactory

pytestmark = pytest.mark.cluster


async def _status_of(call: object) -> int:
    try:
        await call  # type: ignore[misc]
    except ApiException as exc:
        return int(exc.status)
    return 200


async def test_restricted_service_account(k8s_sa_client: SaClientFactory, k8s_namespace: str) -> None:
    rules = [
        client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"]),
        client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["create", "get"]),
    ]
    api = await k8s_sa_client("reader", rules)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="allowed"), data={"k": "v"})

    # Allowed by the Role.
    assert await _status_of(core.list_namespaced_pod(k8s_namespace)) == 200
    assert await _status_of(core.create_namespaced_config_map(k8s_namespace, cm)) == 200
    assert await _status_of(core.read_namespaced_config_map("allowed", k8s_namespace)) == 200
    # Denied: other verbs, other resources, other namespaces, cluster scope.
    assert await _status_of(core.delete_namespaced_config_map("allowed", k8s_namespace)) == 403
    assert await _status_of(core.list_namespaced_secret(k8s_namespace)) == 403
    assert await _status_of(core.list_namespaced_pod("default")) == 403
    assert await _status_of(core.list_node()) == 403
    assert await _status_of(apps.list_namespaced_deployment(k8s_namespace)) == 403


async def test_token_identifies_the_service_account(k8s_sa_client: SaClientFactory, k8s_namespace: str) -> None:
    api = await k8s_sa_client("whoami", [])
    review = await client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
    )
    assert review.status.user_info.username == f"system:serviceaccount:{k8s_namespace}:whoami"
