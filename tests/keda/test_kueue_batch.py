"""Offline batch next to online serving under one Kueue quota, with the real KEDA and the real Kueue: a
KEDA ScaledJob drains a Redis list into a LocalQueue at a low WorkloadPriorityClass; it uses the idle
GPUs, and when the online workload's floor (its replica and its warm placeholder) needs them Kueue
preempts the batch Jobs, and every item a preempted worker held goes back to the list.

KWOK pods run no containers: the shipped batch worker (``python -m warmscale.batch.worker``) runs as a
local process for every Running batch pod, and gets SIGTERM when its pod is deleted, as the kubelet
would send it (:class:`BatchWorkers`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes_asyncio import client

from tests.cluster.fixtures import NodePoolFactory, wait_for
from tests.keda.conftest import E2E
from warmscale.batch import keys
from warmscale.localcluster import kueue
from warmscale.localcluster import workloads as w
from warmscale.localcluster.engines import stop_task
from warmscale.localcluster.fleet import H100
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import Controller, Options, install_priority_class
from warmscale.warmpool.kueue import QUEUE_LABEL

ROOT = Path(__file__).resolve().parents[2]
P = "warmscale.io/"
GPUS = 8  # a batch pod and an online replica each take a whole 8-GPU node
ITEMS = ["p0", "p1", "p2", "p3", "p4"]
BATCH_POD_PRIORITY = "warmscale-test-batch"  # below the placeholders' -5 at the scheduler too
BATCH_VALUE = -10


class BatchWorkers:
    """One batch worker process per Running pod of the ScaledJob; SIGTERM when the pod goes away."""

    def __init__(self, api: client.ApiClient, ns: str, redis_url: str, queue: str, logs: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.ns, self.redis_url, self.queue, self.logs = ns, redis_url, queue, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopped: list[str] = []
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> BatchWorkers:
        self.task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            await stop_task(self.task)  # not one cancel(): docs/keda.md, "Stopping the loops"
        for p in self.procs.values():
            p.kill()
            p.wait()

    def _spawn(self, pod: str) -> subprocess.Popen[bytes]:
        with open(self.logs / f"worker-{pod}.log", "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "warmscale.batch.worker", "--redis", self.redis_url, "--queue", self.queue,
                 "--worker-id", pod, "--work-seconds", "600"],
                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT)

    async def _loop(self) -> None:
        while True:
            pods = (await self.core.list_namespaced_pod(self.ns, label_selector="scaledjob.keda.sh/name=batch")).items
            live = {p.metadata.name for p in pods if p.metadata.deletion_timestamp is None
                    and p.status.phase == "Running"}
            for name in sorted(live - set(self.procs)):
                self.procs[name] = self._spawn(name)
            for name in sorted(set(self.procs) - live):
                proc = self.procs.pop(name)
                proc.send_signal(signal.SIGTERM)  # the kubelet's stop of a deleted pod
                await asyncio.to_thread(proc.wait, 15)
                self.stopped.append(name)
            await asyncio.sleep(0.3)


@pytest.fixture
async def batch_priorities(k8s_admin: client.ApiClient, e2e: E2E) -> AsyncIterator[str]:
    """A WorkloadPriorityClass (Kueue) and a PriorityClass (the scheduler) below the placeholders'."""
    custom, sched = client.CustomObjectsApi(k8s_admin), client.SchedulingV1Api(k8s_admin)
    wpc = f"{e2e.namespace}-batch-low"
    await custom.create_cluster_custom_object(*kueue.KUEUE_API, "workloadpriorityclasses", {
        "apiVersion": "/".join(kueue.KUEUE_API), "kind": "WorkloadPriorityClass", "metadata": {"name": wpc},
        "value": BATCH_VALUE, "description": "offline batch: below warm placeholders (-5) and serving (0)"})
    with contextlib.suppress(client.ApiException):
        await sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                           "metadata": {"name": BATCH_POD_PRIORITY}, "value": BATCH_VALUE,
                                           "preemptionPolicy": "Never"})
    yield wpc
    with contextlib.suppress(client.ApiException):
        await custom.delete_cluster_custom_object(*kueue.KUEUE_API, "workloadpriorityclasses", wpc)


def scaled_job(redis_address: str, queue: str, wpc: str, nodes: str) -> dict[str, Any]:
    spec = w.pod_spec(gpus=GPUS, cpu="2", memory="8Gi", restart_policy="Never", priority_class=BATCH_POD_PRIORITY,
                      node_selector={"warmscale.io/test": nodes})
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob",
            "metadata": {"name": "batch", "labels": {QUEUE_LABEL: "batch", "kueue.x-k8s.io/priority-class": wpc}},
            "spec": {"pollingInterval": 1, "maxReplicaCount": 4,
                     "jobTargetRef": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                                      "template": {"metadata": {"annotations": w.sim_annotations(
                                          ready_delay="0s", job_duration="10m")}, "spec": spec}},
                     "triggers": [{"type": "redis", "metadata": {"address": redis_address, "listName": queue,
                                                                  "listLength": "1"}}]}}


def online(nodes: str) -> dict[str, Any]:
    dep = w.deployment("llm", 1, annotations=w.sim_annotations(ready_delay="1s"), gpus=GPUS, cpu="4", memory="16Gi",
                       node_selector={"warmscale.io/test": nodes})
    dep["metadata"]["labels"][QUEUE_LABEL] = "online"
    dep["metadata"]["annotations"] = {P + "enabled": "true", P + "standby": "1", P + "autoscale": "false",
                                      P + "prestage-nodes": "0", P + "min-ready": "1"}
    return dep


def accounted(r: redis.Redis, queue: str) -> list[str]:
    """Every item wherever it is: waiting, in a worker's hands, done."""
    held = [i for k in r.scan_iter(match=f"{queue}{keys.PROCESSING}*") for i in r.lrange(k, 0, -1)]
    return sorted([*r.lrange(queue, 0, -1), *held, *r.lrange(keys.done(queue), 0, -1)])


async def test_batch_uses_idle_gpus_and_a_preempted_item_returns_to_the_list(
    kueue_cluster: Any, e2e: E2E, k8s_admin: client.ApiClient, k8s_namespace: str, k8s_node_pool: NodePoolFactory,
    batch_priorities: str,
) -> None:
    api, ns = e2e.api, e2e.namespace
    nodes = k8s_namespace  # the node pool's label value (warmscale.io/test)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    await k8s_node_pool(replace(H100, count=2))
    q = await kueue.create_queue(api, ns, 2 * GPUS)  # LocalQueue "online"
    try:
        await custom.create_namespaced_custom_object(*kueue.KUEUE_API, ns, "localqueues", {
            "apiVersion": "/".join(kueue.KUEUE_API), "kind": "LocalQueue", "metadata": {"name": "batch"},
            "spec": {"clusterQueue": q.cluster_queue}})
        r = redis.Redis.from_url(e2e.redis_url, decode_responses=True)
        items = f"batch:{ns}"
        r.lpush(items, *ITEMS)
        host, port = e2e.redis_address.removeprefix("redis://").split(":")
        await custom.create_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledjobs",
                                                     scaled_job(f"{host}:{port}", items, batch_priorities, nodes))
        async with BatchWorkers(api, ns, e2e.redis_url, items, e2e.logs) as workers:
            # idle GPUs: the quota admits 2 batch Jobs, their workers take an item each
            async def two_in_hand() -> bool:
                held = [k for k in r.scan_iter(match=f"{items}{keys.PROCESSING}*") if r.llen(k)]
                return len(held) == 2

            await wait_for(two_in_hand, within=90, what="2 batch Jobs admitted, 2 items in the workers' hands")
            assert accounted(r, items) == ITEMS

            # the online floor arrives: its replica (priority 0) and its placeholder (-5) preempt the batch (-10)
            await install_priority_class(k8s_admin)
            ctl = Controller(k8s_admin, Options(namespace=ns, resync_s=1.0, stager_image="warmscale:test",
                                                scaler_address="scaler.test:9090"))
            task = asyncio.create_task(ctl.run())
            try:
                await client.AppsV1Api(api).create_namespaced_deployment(ns, online(nodes))

                async def floor_held() -> bool:
                    wls = await kueue.workloads_by_pod(api, ns)
                    ours = [p for p in (await core.list_namespaced_pod(ns)).items
                            if p.metadata.deletion_timestamp is None and p.status.phase == "Running"
                            and (p.metadata.labels.get("app") == "llm"
                                 or p.metadata.labels.get(ob.ROLE) == "placeholder")]
                    return len(ours) == 2 and all(kueue.admitted(wls.get(p.metadata.name, {})) for p in ours)

                await wait_for(floor_held, within=120, what="the online replica and its placeholder admitted")

                async def batch_stopped() -> bool:
                    return len(workers.stopped) == 2 and not workers.procs and r.llen(items) == len(ITEMS)

                await wait_for(batch_stopped, within=60, what="both batch workers stopped, their items back")
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            # nothing lost, nothing done twice; the preempted items are the next ones taken
            assert accounted(r, items) == ITEMS and r.llen(keys.done(items)) == 0
            batch = await core.list_namespaced_pod(ns, label_selector="scaledjob.keda.sh/name=batch")
            running = [p for p in batch.items if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]
            assert not running, "a batch pod runs on capacity held for the online floor"
    finally:
        with contextlib.suppress(client.ApiException):
            await custom.delete_collection_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledjobs")
        await kueue.delete_queue(api, q)
