"""standby: auto through the controller on the real local control plane, with a real Redis store:
placeholders follow the scaler's burst statistics, keep their size while the store is unreadable, and
go when the bursts no longer pay."""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    NodePoolFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_node_pool,
    wait_for,
)
from tests.warmpool.test_cluster import gpu_deployment, managed_pods, strip_finalizers
from warmscale.localcluster.fleet import H100
from warmscale.scaler.bursts import BurstStats
from warmscale.scaler.store import RedisStore
from warmscale.scaler.warm_status import WarmStatus
from warmscale.warmpool.controller import Controller, Options, install_priority_class

pytestmark = pytest.mark.cluster
P = "warmscale.io/"


def stats(ns: str, episodes: dict[int, tuple[float, ...]], share: float, span: float) -> BurstStats:
    return BurstStats(ns, "llm", 0.0, window_s=90.0, cold_s=510.0, span_s=span, fleet=1,
                      rise_p95=float(max(episodes, default=0)), rise_share_p95=share, episodes=episodes)


async def test_auto_standby_follows_bursts_and_keeps_its_size_while_the_store_is_down(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory, redis_server: Any
) -> None:
    ns = k8s_namespace
    await k8s_node_pool(replace(H100, count=3))
    await install_priority_class(k8s_admin)
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    store = RedisStore(redis_server.url, prefix=f"t{uuid.uuid4().hex[:8]}")
    # an hour with 10-minute bursts of +2 replicas on a fleet of 1: two placeholders pay
    await store.put_burst_stats(ns, "llm", stats(ns, {1: (600.0,) * 4, 2: (600.0,) * 4}, 2.0, 3600.0))
    # time-to-ready measured before (the controller seeds its medians from the store, per GPU product
    # too): KWOK's own replicas are ready within a second, which alone would make a warm start worth
    # nothing (the seed keeps the median at (510 + 0) / 2)
    measured = {"placeholder+staged": 90.0, "cold": 510.0}
    await store.put_warm_status(ns, "llm", WarmStatus(ns, "llm", 0.0, time_to_ready_s=measured,
                                                      time_to_ready_by_gpu={H100.gpu_product: measured}))
    await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "llm", 1, {P + "enabled": "true"}))
    ctl = Controller(k8s_admin, Options(namespace=ns, resync_s=1.0, stager_image="warmscale:test",
                                        scaler_address="scaler.test:9090"), sink=store)
    task = asyncio.create_task(ctl.run())
    down = RedisStore("redis://127.0.0.1:1", timeout_s=0.2)
    try:
        async def holders(n: int) -> bool:
            return len(await managed_pods(core, ns, "placeholder")) == n

        await wait_for(lambda: holders(2), within=30, what="2 placeholders from the burst statistics")

        async def published() -> bool:
            ws = await store.get_warm_status(ns, "llm")
            return ws is not None and ws.standby_auto and ws.standby_size == 2

        await wait_for(published, within=15, what="standby size in the published warm status")
        dep = await apps.read_namespaced_deployment("llm", ns)
        status = json.loads(dep.metadata.annotations[P + "status"])
        assert status["standby"] == "auto" and status["placeholders"].endswith("/2")

        # the store becomes unreadable while the bursts fade: the last size stays
        ctl.sink = down  # first (and a reconcile in flight ends): none may read the quiet statistics yet
        n = ctl.reconcile_count
        await wait_for(lambda: _after(ctl, n + 2), within=20, what="reconciles with the store down")
        await store.put_burst_stats(ns, "llm", stats(ns, {1: (120.0,)}, 1.0, 6 * 3600.0))
        n = ctl.reconcile_count
        await wait_for(lambda: _after(ctl, n + 3), within=20, what="three more reconciles with the store down")
        assert ctl.standby_last[f"Deployment/{ns}/llm"] == 2
        assert len(await managed_pods(core, ns, "placeholder")) == 2

        # the store is back: the quiet statistics are read and the placeholders go
        ctl.sink = store
        await wait_for(lambda: holders(0), within=30, what="placeholders removed once bursts stop paying")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await store.close()
        await down.close()
        await strip_finalizers(k8s_admin, ns)


async def _after(ctl: Controller, count: int) -> bool:
    return ctl.reconcile_count >= count
