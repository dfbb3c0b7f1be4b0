"""A low-priority placeholder holding a node's GPUs is preempted by a normal pod."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import H100

from .fixtures import NodePoolFactory, wait_for

pytestmark = pytest.mark.cluster


async def test_placeholder_is_preempted_by_normal_pod(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory
) -> None:
    [node] = await k8s_node_pool(replace(H100, count=1))
    core = client.CoreV1Api(k8s_admin)
    scheduling = client.SchedulingV1Api(k8s_admin)
    priority_class = f"{k8s_namespace}-placeholder"
    await scheduling.create_priority_class(
        client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=priority_class),
            value=-5,
            preemption_policy="Never",
            global_default=False,
            description="warm-pool placeholder: yields its GPUs to any normal pod",
        )
    )
    selector = {"warmscale.io/test": k8s_namespace}
    try:
        await core.create_namespaced_pod(
            k8s_namespace,
            w.body(w.pod("placeholder", gpus=8, node_selector=selector, priority_class=priority_class)),
        )

        async def placeholder_ready() -> bool:
            return w.is_ready(await core.read_namespaced_pod("placeholder", k8s_namespace))

        await wait_for(placeholder_ready, within=30, what="placeholder Ready")
        placeholder = await core.read_namespaced_pod("placeholder", k8s_namespace)
        assert placeholder.spec.node_name == node
        assert placeholder.spec.priority == -5

        await core.create_namespaced_pod(k8s_namespace, w.body(w.pod("model", gpus=8, node_selector=selector)))

        async def placeholder_gone() -> bool:
            try:
                await core.read_namespaced_pod("placeholder", k8s_namespace)
                return False
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise

        await wait_for(placeholder_gone, within=60, what="placeholder preempted and deleted")

        async def model_ready() -> client.V1Pod | None:
            pod = await core.read_namespaced_pod("model", k8s_namespace)
            return pod if w.is_ready(pod) else None

        model = await wait_for(model_ready, within=60, what="normal pod Ready")
        assert model.spec.node_name == node

        # The scheduler records the Event through its own asynchronous broadcaster: wait for it.
        async def preempted_event() -> bool:
            events = await core.list_namespaced_event(k8s_namespace, field_selector="reason=Preempted")
            return any(e.involved_object.name == "placeholder" for e in events.items)

        await wait_for(preempted_event, within=30, what="the scheduler's Preempted Event for the placeholder")
    finally:
        await scheduling.delete_priority_class(priority_class)
