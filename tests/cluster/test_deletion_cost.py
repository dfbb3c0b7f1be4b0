"""Scale-in removes the least loaded replica: the controller's pod-deletion-cost writer against the
real API server and the real ReplicaSet controller (KWOK pods, simulated vLLM engines on their IPs)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import CPU
from warmscale.simulation.engine import EngineProfile, Request, SimulatedEngine
from warmscale.warmpool import rbac
from warmscale.warmpool.controller import workload_from
from warmscale.warmpool.deletion_cost import COST_UNKNOWN, DELETION_COST
from warmscale.warmpool.deletion_cost_writer import DeletionCostWriter

from .fixtures import NodePoolFactory, SaClientFactory, wait_for

pytestmark = pytest.mark.cluster

PORT = 18431  # every KWOK pod has its own loopback IP: one port for all of them
# Large batch, near-instant prefill: every request submitted is running at once and stays so.
ROOMY = EngineProfile(max_num_seqs=512, kv_capacity_tokens=50_000_000, prefill_tps=1e9)


@contextlib.asynccontextmanager
async def engines_holding(loads: dict[str, tuple[str, int]]) -> AsyncIterator[None]:
    """A simulated vLLM engine on each pod's IP holding ``n`` requests (pod -> (ip, n))."""
    runners = []
    try:
        for name, (ip, n) in loads.items():
            engine = SimulatedEngine(name, ROOMY)
            for _ in range(n):
                engine.submit(Request(0.0, 10, 1_000))
            engine.step(0.0)  # admitted: running, never finishing (the engine is not stepped again)

            async def metrics(_: web.Request, engine: SimulatedEngine = engine) -> web.Response:
                return web.Response(body=engine.exposition(), content_type="text/plain", charset="utf-8")

            app = web.Application()
            app.router.add_get("/metrics", metrics)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, ip, PORT).start()
            runners.append(runner)
        yield
    finally:
        for runner in runners:
            await runner.cleanup()


def _pod_rules() -> list[client.V1PolicyRule]:
    """What the controller's generated RBAC grants on pods (warmpool/rbac.py), nothing more."""
    rule = next(r for _, r in rbac.WORKLOAD_RULES if r["resources"] == ["pods"])
    return [client.V1PolicyRule(api_groups=rule["apiGroups"], resources=rule["resources"], verbs=rule["verbs"])]


async def test_the_least_loaded_replica_is_deleted_on_scale_in(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
        k8s_sa_client: SaClientFactory) -> None:
    await k8s_node_pool(replace(CPU, count=2))
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    body = w.deployment("llm", 4, node_selector={"warmscale.io/test": k8s_namespace})
    body["metadata"]["annotations"] = {"warmscale.io/enabled": "true"}
    body["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": PORT}]
    await apps.create_namespaced_deployment(k8s_namespace, w.body(body))

    async def all_ready() -> list[client.V1Pod] | None:
        pods = (await core.list_namespaced_pod(k8s_namespace, label_selector="app=llm")).items
        ready = [p for p in pods if w.is_ready(p) and p.metadata.deletion_timestamp is None and p.status.pod_ip]
        return ready if len(ready) == 4 else None

    pods = sorted(await wait_for(all_ready, within=60, what="4 Ready replicas"), key=lambda p: p.metadata.name)
    names = [p.metadata.name for p in pods]
    # Loads 7, 0, 3 requests; the fourth pod has no engine (its load is unknown: kept, never "idle").
    held = dict(zip(names[:3], (7, 0, 3), strict=True))
    unknown = names[3]
    dep: dict[str, Any] = k8s_admin.sanitize_for_serialization(await apps.read_namespaced_deployment("llm",
                                                                                                     k8s_namespace))
    wl = workload_from("Deployment", dep)
    # The controller's ServiceAccount rights on pods, as generated: patch is among them.
    sa_api = await k8s_sa_client("warmpool", _pod_rules())
    writer = DeletionCostWriter(client.CoreV1Api(sa_api))
    try:
        async with engines_holding({p.metadata.name: (p.status.pod_ip, held[p.metadata.name])
                                    for p in pods if p.metadata.name in held}):
            raw = [k8s_admin.sanitize_for_serialization(p) for p in pods]
            patched = await writer.write(wl, raw, time.time())
            assert patched == {**{n: str(v) for n, v in held.items()}, unknown: str(COST_UNKNOWN)}
            now = {p.metadata.name: (p.metadata.annotations or {}).get(DELETION_COST) for p in
                   (await core.list_namespaced_pod(k8s_namespace, label_selector="app=llm")).items}
            assert now == patched
            # A second pass with the same loads writes nothing.
            raw = [k8s_admin.sanitize_for_serialization(p) for p in
                   (await core.list_namespaced_pod(k8s_namespace, label_selector="app=llm")).items]
            assert await writer.write(wl, raw, time.time()) == {}
    finally:
        await writer.close()

    # Scale in by two: the ReplicaSet removes the two least loaded (0 and 3 requests), not the busy
    # one and not the one whose load is unknown.
    await apps.patch_namespaced_deployment_scale("llm", k8s_namespace, {"spec": {"replicas": 2}})

    async def deleted() -> set[str] | None:
        left = (await core.list_namespaced_pod(k8s_namespace, label_selector="app=llm")).items
        gone = {n for n in names if n not in {p.metadata.name for p in left if p.metadata.deletion_timestamp is None}}
        return gone if len(gone) == 2 else None

    gone = await wait_for(deleted, within=60, what="two replicas removed")
    assert gone == {names[1], names[2]}, f"removed {gone}; loads {held}, unknown {unknown}"
