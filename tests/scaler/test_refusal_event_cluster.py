# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)
"""The Event on a ScaledObject refused for size (issue 20, item 4), against a real API server, as the
scaler's own ServiceAccount (the install's ClusterRole rules: ``create`` on events is the one write)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    SaClientFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_sa_client,
    wait_for,
)
from tests.scaler.conftest import ServerFactory, status_of
from tests.scaler.test_kube_discovery import GROUP, PLURAL, VERSION, scaled_object, scaler_rbac_rules
from tests.servers import FakeEngine
from warmscale.scaler.cli import SourcesReader
from warmscale.scaler.kube import ScaledObjectEvents
from warmscale.signals.sources.budget import PayloadLimits

pytestmark = pytest.mark.cluster


async def test_a_refused_scaledobject_gets_a_warning_event(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_sa_client: SaClientFactory,
    fake_engine: Callable[..., FakeEngine], make_server: ServerFactory, clients: Callable[..., Any],
) -> None:
    ns = k8s_namespace
    hostile = fake_engine("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
                          + "".join(f'pad{{i="{i}"}} 1\n' for i in range(3000)))
    metadata = {"engine": "vllm", "endpoints": hostile.url, "scrapeIntervalSeconds": "0.5"}
    so = await client.CustomObjectsApi(k8s_admin).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, scaled_object("big", "llm", metadata=metadata))
    scaler_sa = await k8s_sa_client("warmscale-scaler", scaler_rbac_rules())
    reader = SourcesReader(limits=PayloadLimits(payload_series=1000))
    server = await make_server(reader, metrics_port=None)
    server.manager.on_refused = ScaledObjectEvents(scaler_sa)
    try:
        c = clients(server.grpc_port)
        ref = c.pb.ScaledObjectRef(name="big", namespace=ns, scalerMetadata=metadata)

        async def refused() -> bool:
            code, msg = await status_of(c.stub.IsActive(ref))
            return code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-payload-series 1000" in msg

        await wait_for(refused, within=10, what="RESOURCE_EXHAUSTED")
        core = client.CoreV1Api(k8s_admin)

        async def event() -> Any:
            events = await core.list_namespaced_event(ns, field_selector="involvedObject.name=big")
            return next((e for e in events.items if e.reason == ScaledObjectEvents.REASON), None)

        ev = await wait_for(event, within=10, what="the ScaledObjectRefused Event")
        assert ev.type == "Warning" and "--max-payload-series 1000" in ev.message
        assert ev.involved_object.kind == "ScaledObject" and ev.involved_object.uid == so["metadata"]["uid"]
    finally:
        await server.stop(0.2)
        await reader.aclose()


async def test_a_change_of_the_count_is_a_normal_event_rate_limited(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_sa_client: SaClientFactory,
    make_server: ServerFactory, clients: Callable[..., Any],
) -> None:
    """The deciding scaler posts ``ScalingDecision`` on the ScaledObject when its count changes, with the
    steps that moved it, as its own ServiceAccount; a second change within the interval posts nothing."""
    from tests.scaler.conftest import META, ScriptedReader

    ns = k8s_namespace
    so = await client.CustomObjectsApi(k8s_admin).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, scaled_object("chat", "llm", metadata=META))
    scaler_sa = await k8s_sa_client("warmscale-scaler", scaler_rbac_rules())
    reader = ScriptedReader(load=10.0, replicas=1)
    server = await make_server(reader, metrics_port=None)
    events = ScaledObjectEvents(scaler_sa)
    server.manager.on_decision = events.decision
    core = client.CoreV1Api(k8s_admin)

    async def decision_events() -> list[Any]:
        listed = await core.list_namespaced_event(ns, field_selector="involvedObject.name=chat")
        return [e for e in listed.items if e.reason == ScaledObjectEvents.DECISION_REASON]

    try:
        c = clients(server.grpc_port)
        await c.poll(c.ref(name="chat", namespace=ns))
        reader.set(100.0)  # 100 in flight / 32 per replica: 4

        async def first() -> Any:
            found = await decision_events()
            return found or None

        [ev] = await wait_for(first, within=15, what="the ScalingDecision Event")
        assert ev.type == "Normal" and "desired replicas 1 -> 4 (demand)" in ev.message, ev.message
        assert "need: None -> 4 (demand)" in ev.message
        assert ev.involved_object.kind == "ScaledObject" and ev.involved_object.uid == so["metadata"]["uid"]
        reader.set(250.0)  # another change at once: rate-limited, no second Event
        async def second() -> bool:
            return _desired(server, ns) == 8

        await wait_for(second, within=15, what="the second change")
        assert len(await decision_events()) == 1
    finally:
        await server.stop(0.2)


def _desired(server: Any, namespace: str) -> int | None:
    for t in server.manager.trackers():
        if t.namespace == namespace and t.decision is not None:
            return int(t.decision.desired)
    return None
