"""The waker's Kubernetes side against the real local API server (KWOK nodes): only pods with the
controller's sleeper labels are sleepers, and a failed sleeper's Event lands on its pod."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import NodePoolFactory, wait_for  # (the fixtures come from tests/conftest.py)
from warmscale.localcluster.fleet import H100
from warmscale.warmpool.hot.kube_source import kube_events, kube_sleepers
from warmscale.warmpool.hot.sleepers import SLEEPER_ROLE
from warmscale.warmpool.kube import EventRecorder
from warmscale.warmpool.objects import MANAGED_BY, MANAGED_BY_VALUE, ROLE

pytestmark = pytest.mark.cluster


def pod(name: str, node: str, labels: dict[str, str], ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": {
                "warmscale.io/hot-workload": f"{ns}/llama", "warmscale.io/hot-device": "gpu-0",
                "warmscale.io/hot-index": "0", "warmscale.io/hot-model": "m", "warmscale.io/engine": "vllm"}},
            "spec": {"nodeName": node, "containers": [{"name": "engine", "image": "vllm:test"}],
                     "tolerations": [{"operator": "Exists"}]}}


async def test_only_the_controllers_sleeper_pods_are_listed_and_events_land_on_them(
        k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory) -> None:
    ns = k8s_namespace
    node = (await k8s_node_pool(replace(H100, count=1)))[0]
    core = client.CoreV1Api(k8s_admin)
    ours = {MANAGED_BY: MANAGED_BY_VALUE, ROLE: SLEEPER_ROLE}
    await core.create_namespaced_pod(ns, pod("sleeper-0", node, ours, ns))
    await core.create_namespaced_pod(ns, pod("foreign", node, {}, ns))  # same annotations, not ours
    await core.create_namespaced_pod(ns, pod("placeholder", node, {**ours, ROLE: "placeholder"}, ns))
    source = kube_sleepers(core, ns)

    async def listed() -> Any:
        found = await source()
        return found if found else None

    found = await wait_for(listed, within=30, what="the sleeper pod running with an IP")
    assert [s.pod for s in found] == [f"{ns}/sleeper-0"] and found[0].uid and found[0].base_url.endswith(":8000")

    await kube_events(EventRecorder(core))(found[0], "HotSleeperWakeFailed", "failed to wake twice")

    async def recorded() -> bool:
        events = await core.list_namespaced_event(ns)
        return any(e.reason == "HotSleeperWakeFailed" and e.involved_object.name == "sleeper-0"
                   and e.involved_object.uid == found[0].uid for e in events.items)

    await wait_for(recorded, within=10, what="the Event on the sleeper pod")
