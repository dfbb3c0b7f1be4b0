"""``warmscale hold-gateway --service`` against the real local API server: the gateway (a subprocess) runs
under a ServiceAccount that has exactly the generated Role (warmpool/rbac.py, ``warmscale rbac
--hold-gateway NS``: list and watch EndpointSlices), watches the workload Service's EndpointSlices and
keeps the ready endpoints as its own replicas: one appears within a watch event, leaves when it is no
longer ready. Before any endpoint is ready a request is held (its token on the queue)."""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
)
from tests.gateway.test_hold_gateway_cli import (  # noqa: F401  (fixtures used by name)
    NAME,
    WAIT_S,
    Gateway,
    complete,
    gateways,
    prefix,
    queued,
    session,
)
from tests.scaler.conftest import eventually
from tests.servers import RedisServer
from warmscale.localcluster.harness import Cluster
from warmscale.warmpool import rbac

pytestmark = pytest.mark.cluster
SERVICE = "chat-engines"


# A pod address (KWOK pods never run; the gateway is never asked to send anything to it here: the
# API refuses loopback addresses in EndpointSlices, and routing is tested with --backend).
ADDRESS, PORT = "10.244.0.7", 8000


def endpoint_slice(ready: bool) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{SERVICE}-a", "labels": {"kubernetes.io/service-name": SERVICE}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": PORT, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ADDRESS], "conditions": {"ready": ready}}]}


@pytest.fixture
async def gateway_kubeconfig(k8s_cluster: Cluster, k8s_admin: client.ApiClient, k8s_namespace: str,
                             tmp_path: Path) -> AsyncIterator[Path]:
    core, auth = client.CoreV1Api(k8s_admin), client.RbacAuthorizationV1Api(k8s_admin)
    for obj in rbac.hold_gateway(k8s_namespace):
        if obj["kind"] == "ServiceAccount":
            await core.create_namespaced_service_account(k8s_namespace, obj)
        elif obj["kind"] == "Role":
            await auth.create_namespaced_role(k8s_namespace, obj)
        else:
            await auth.create_namespaced_role_binding(k8s_namespace, obj)
    token = await k8s_cluster.mint_token(k8s_namespace, rbac.HOLD_GATEWAY_NAME)
    yield k8s_cluster.write_token_kubeconfig(tmp_path / "gateway.kubeconfig", token, user=rbac.HOLD_GATEWAY_NAME)


async def test_watches_the_services_ready_endpoints_under_the_generated_role(
        tmp_path: Path, redis_server: RedisServer, prefix: str, session: aiohttp.ClientSession,
        gateways: list[Gateway], k8s_admin: client.ApiClient, k8s_namespace: str,
        gateway_kubeconfig: Path) -> None:
    g = Gateway(tmp_path, redis_server, prefix, "--service", SERVICE, "--service-port", "http",
                "--kubeconfig", str(gateway_kubeconfig), "--hold-max-seconds", "1", namespace=k8s_namespace)
    gateways.append(g)
    await g.wait_ready(session)
    discovery = client.DiscoveryV1Api(k8s_admin)

    async def backends(n: int) -> bool:
        async with session.get(g.url + "/readyz") as r:
            return int((await r.json())["backends"]) == n

    # No endpoint yet: a request is held (its token on the queue), then gets 504 at the hold bound
    # (before the endpoint appears: nothing is sent to a pod address from here).
    request = asyncio.create_task(complete(session, g.url))
    await queued(redis_server, g.queue_key, 1)
    assert (await request)[0] == 504
    await discovery.create_namespaced_endpoint_slice(k8s_namespace, endpoint_slice(ready=True))
    took = await eventually(lambda: backends(1), within=WAIT_S)
    assert took < 2.0  # the watch, not a re-list (RETRY_SECONDS) or a poll
    assert f'"backends":["http://{ADDRESS}:{PORT}"]' in g.log()

    # Its only endpoint no longer ready (terminating): gone from the backends.
    await discovery.patch_namespaced_endpoint_slice(f"{SERVICE}-a", k8s_namespace, endpoint_slice(ready=False))
    await eventually(lambda: backends(0), within=WAIT_S)
    await discovery.delete_namespaced_endpoint_slice(f"{SERVICE}-a", k8s_namespace)
    await discovery.create_namespaced_endpoint_slice(k8s_namespace, endpoint_slice(ready=True))
    await eventually(lambda: backends(1), within=WAIT_S)
    # Every call the gateway made was allowed by the generated Role (list, then watch).
    assert "service endpoints unreadable" not in g.log(), g.log()[-2000:]
    assert NAME in g.log()
