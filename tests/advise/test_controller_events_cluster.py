"""The warm-pool controller emits the next-layer Event on a workload it manages, against the real local
control plane: an engine pod whose container was OOM-killed three times (status written through the
API, as the kubelet would) gets `NextLayerParallelism` on its Deployment, and only then."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import wait_for
from warmscale.localcluster import workloads as w
from warmscale.warmpool.controller import Controller, Options, install_priority_class

pytestmark = pytest.mark.cluster


@pytest.fixture
async def controller(k8s_admin: client.ApiClient, k8s_namespace: str) -> AsyncIterator[Controller]:
    await install_priority_class(k8s_admin)
    ctl = Controller(k8s_admin, Options(namespace=k8s_namespace, resync_s=1.0, stager_image="warmscale:test",
                                        scaler_address="scaler.test:9090"))
    task = asyncio.create_task(ctl.run())
    try:
        yield ctl
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def oom_status(restarts: int) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"containerStatuses": [{
        "name": "main", "image": w.IMAGE, "imageID": "", "ready": False, "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "startedAt": now, "finishedAt": now}},
    }]}}


async def test_repeated_oom_is_a_next_layer_event_on_the_workload(
    k8s_admin: client.ApiClient, k8s_namespace: str, controller: Controller,
) -> None:
    ns = k8s_namespace
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    dep = w.deployment("llama", 1, gpus=1, node_selector={"warmscale.io/test": f"none-{ns}"})  # never scheduled
    dep["metadata"]["annotations"] = {"warmscale.io/enabled": "true"}
    await apps.create_namespaced_deployment(ns, dep)

    async def the_pod() -> str | None:
        pods = (await core.list_namespaced_pod(ns)).items
        return pods[0].metadata.name if pods else None
    name = await wait_for(the_pod, within=30, what="the Deployment's pod")

    async def advice_events() -> list[client.CoreV1Event]:
        return [e for e in (await core.list_namespaced_event(ns)).items if e.reason == "NextLayerParallelism"]

    await core.patch_namespaced_pod_status(name, ns, oom_status(2))
    await asyncio.sleep(3)  # a few reconciles: twice is not a pattern
    assert await advice_events() == []

    await core.patch_namespaced_pod_status(name, ns, oom_status(3))
    (ev,) = await wait_for(advice_events, within=30, what="NextLayerParallelism event")
    assert ev.type == "Warning" and ev.involved_object.kind == "Deployment" and ev.involved_object.name == "llama"
    assert "3 times in 24 h" in ev.message and "tensor parallelism" in ev.message and name in ev.message
    await asyncio.sleep(3)
    assert len(await advice_events()) == 1  # not repeated while nothing new happens
