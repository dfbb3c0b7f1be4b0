"""Workloads on the simulated fleet: Deployments, DaemonSets, Jobs, pod deletion."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import A100, CPU, H100, L4

from .fixtures import NodePoolFactory, wait_for

pytestmark = pytest.mark.cluster

H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"


async def test_gpu_deployment_ready_on_matching_nodes_with_start_delay(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory
) -> None:
    h100_nodes = set(await k8s_node_pool(replace(H100, count=2)))
    await k8s_node_pool(replace(A100, count=1))  # GPUs free but wrong product: must stay empty
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    start_delay, ready_delay = 4, 2
    body = w.deployment(
        "llm",
        3,
        gpus=4,
        node_selector={"nvidia.com/gpu.product": H100_PRODUCT, "warmscale.io/test": k8s_namespace},
        annotations=w.sim_annotations(start_delay=f"{start_delay}s", ready_delay=f"{ready_delay}s"),
    )
    created_at = time.monotonic()
    await apps.create_namespaced_deployment(k8s_namespace, w.body(body))

    async def all_ready() -> list[client.V1Pod] | None:
        pods = (await core.list_namespaced_pod(k8s_namespace, label_selector="app=llm")).items
        ready = [p for p in pods if w.is_ready(p) and p.metadata.deletion_timestamp is None]
        return ready if len(ready) == 3 else None

    pods = await wait_for(all_ready, within=60, what="3 Ready replicas")
    elapsed = time.monotonic() - created_at
    assert elapsed >= start_delay + ready_delay - 1, f"ready after {elapsed:.1f}s, delays not respected"
    for pod in pods:
        assert pod.spec.node_name in h100_nodes
        scheduled = w.transition_time(pod, "PodScheduled")
        ready = w.transition_time(pod, "Ready")
        started = pod.status.start_time
        assert scheduled and ready and started
        # Timestamps have 1 s resolution.
        assert (started - scheduled).total_seconds() >= start_delay - 1, pod.metadata.name
        assert (ready - started).total_seconds() >= ready_delay - 1, pod.metadata.name
        assert pod.status.pod_ip, "kwok assigns a pod IP"
    # The Deployment controller folds the pods' Ready into its status on its own sync, a moment after
    # the last pod turns Ready (on a loaded box, seconds): wait for it rather than read it once.
    async def deployment_ready() -> bool:
        status = (await apps.read_namespaced_deployment_status("llm", k8s_namespace)).status
        return status.ready_replicas == 3

    await wait_for(deployment_ready, within=30, what="the Deployment's status counting 3 Ready replicas")


async def test_daemonset_lands_only_on_selected_nodes(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory
) -> None:
    selected = set(await k8s_node_pool(replace(L4, count=2, extra_labels={"warmscale.io/agent": "yes"})))
    await k8s_node_pool(replace(CPU, count=1))
    apps, core = client.AppsV1Api(k8s_admin), client.CoreV1Api(k8s_admin)
    body = w.daemon_set(
        "agent", gpus=0, node_selector={"warmscale.io/agent": "yes", "warmscale.io/test": k8s_namespace}
    )
    body["spec"]["template"]["spec"]["tolerations"] = [w.gpu_toleration()]
    await apps.create_namespaced_daemon_set(k8s_namespace, w.body(body))

    async def settled() -> client.V1DaemonSet | None:
        ds = await apps.read_namespaced_daemon_set_status("agent", k8s_namespace)
        st = ds.status
        ok = st.desired_number_scheduled == 2 and st.number_ready == 2
        return ds if ok else None

    await wait_for(settled, within=60, what="DaemonSet ready on 2 nodes")
    pods = (await core.list_namespaced_pod(k8s_namespace, label_selector="app=agent")).items
    assert {p.spec.node_name for p in pods} == selected
    assert len(pods) == 2


async def test_job_completes_after_annotated_duration(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory
) -> None:
    await k8s_node_pool(replace(CPU, count=1))
    batch = client.BatchV1Api(k8s_admin)
    duration = 3
    body = w.job(
        "warmup",
        2,
        node_selector={"warmscale.io/test": k8s_namespace},
        annotations=w.sim_annotations(job_duration=f"{duration}s"),
    )
    started = time.monotonic()
    await batch.create_namespaced_job(k8s_namespace, w.body(body))

    async def complete() -> bool:
        job = await batch.read_namespaced_job_status("warmup", k8s_namespace)
        conditions = job.status.conditions or []
        if any(c.type == "Failed" and c.status == "True" for c in conditions):
            pytest.fail(f"job failed: {conditions}")
        return any(c.type == "Complete" and c.status == "True" for c in conditions)

    await wait_for(complete, within=60, what="Job Complete")
    assert time.monotonic() - started >= duration - 1
    job = await batch.read_namespaced_job_status("warmup", k8s_namespace)
    assert job.status.succeeded == 2


async def test_pod_deletion_finishes_even_with_finalizer(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory
) -> None:
    await k8s_node_pool(replace(CPU, count=1))
    core = client.CoreV1Api(k8s_admin)
    for name, finalizers in (("plain", None), ("finalized", ["warmscale.io/test-hold"])):
        body = w.pod(name, finalizers=finalizers, node_selector={"warmscale.io/test": k8s_namespace})
        await core.create_namespaced_pod(k8s_namespace, w.body(body))

    async def both_ready() -> bool:
        pods = (await core.list_namespaced_pod(k8s_namespace)).items
        return len(pods) == 2 and all(w.is_ready(p) for p in pods)

    await wait_for(both_ready, within=30, what="pods Ready")
    await asyncio.gather(*(core.delete_namespaced_pod(n, k8s_namespace) for n in ("plain", "finalized")))

    async def gone() -> bool:
        for name in ("plain", "finalized"):
            try:
                await core.read_namespaced_pod(name, k8s_namespace)
                return False
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return True

    await wait_for(gone, within=30, what="pods deleted")
