"""End to end with the real KEDA: every test here carries the ``keda`` and ``cluster`` markers.

The control path is real throughout: KEDA operator + metrics adapter (v2.21.0, out of cluster), the
HPA in the controller-manager, ``warmscale scaler`` as a process, KWOK pods whose IPs are loopback
addresses with a simulated engine listening on each (``warmscale/localcluster/engines.py``), a Redis list as
the gateway queue. Only the load is synthetic.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from warmscale.localcluster.engines import PodEngines
from warmscale.localcluster.harness import Cluster
from warmscale.localcluster.processes import free_port
from warmscale.localcluster.scaling import (
    ReplicaTimeline,
    ScalerProcess,
    create_scaled_object,
    engine_deployment,
    scaled_object,
    scaler_metadata,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/keda/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.keda)
            item.add_marker(pytest.mark.cluster)


def report(name: str, **figures: Any) -> None:
    """Print measured figures (``pytest -s`` shows them); appended as JSON lines to
    ``$WARMSCALE_KEDA_REPORT`` when set. Never asserted on tightly: timings vary with machine load."""
    line = json.dumps({"test": name, **figures})
    print(f"\n[keda-e2e] {line}")
    path = os.environ.get("WARMSCALE_KEDA_REPORT")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")


@dataclass
class Workload:
    name: str
    port: int
    engines: PodEngines
    timeline: ReplicaTimeline
    queue: str


@dataclass
class E2E:
    cluster: Cluster
    api: client.ApiClient
    namespace: str
    redis_address: str
    redis_url: str
    logs: Path
    scalers: list[ScalerProcess] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)

    def scaler(self, *extra: str, grpc_port: int | None = None, start: bool = True) -> ScalerProcess:
        s = ScalerProcess(self.cluster.kubeconfig, self.logs / f"scaler-{len(self.scalers)}.log",
                          extra_args=list(extra), grpc_port=grpc_port)
        self.scalers.append(s)
        return s.start() if start else s

    async def workload(self, name: str, replicas: int, *, ready_delay: str = "1s") -> Workload:
        port = 8000 + len(self.workloads)
        await client.AppsV1Api(self.api).create_namespaced_deployment(
            self.namespace, engine_deployment(name, replicas, port, ready_delay=ready_delay))
        queue = f"gateway:{self.namespace}:{name}"
        engines = PodEngines(self.api, self.namespace, f"app={name}", port, self.redis_url, queue)
        await engines.start()
        timeline = ReplicaTimeline(self.api, self.namespace, name).start()
        w = Workload(name, port, engines, timeline, queue)
        self.workloads.append(w)
        return w

    def metadata(self, w: Workload, **overrides: str) -> dict[str, str]:
        return scaler_metadata(w.name, w.port, self.redis_address, w.queue, **overrides)

    async def scale_with(self, w: Workload, scaler: ScalerProcess | str, metadata: dict[str, str],
                         **so_kwargs: Any) -> dict[str, Any]:
        address = scaler if isinstance(scaler, str) else scaler.address
        body = scaled_object(w.name, address, metadata, **so_kwargs)
        await create_scaled_object(self.api, self.namespace, body)
        return body

    async def aclose(self) -> None:
        for w in self.workloads:
            await w.timeline.aclose()
            await w.engines.aclose()
        for s in self.scalers:
            s.stop()


@pytest.fixture
async def e2e(keda_cluster: Cluster, k8s_admin: client.ApiClient, redis_server: Any,
              tmp_path: Path) -> AsyncIterator[E2E]:
    core = client.CoreV1Api(k8s_admin)
    ns = f"k-{uuid.uuid4().hex[:8]}"
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    from tests.cluster.fixtures import _sa_exists, wait_for

    await wait_for(lambda: _sa_exists(core, ns, "default"), within=30, what=f"default SA in {ns}")
    env = E2E(keda_cluster, k8s_admin, ns, redis_server.url, redis_server.url, tmp_path)
    try:
        yield env
    finally:
        await env.aclose()
        # ScaledObjects first (KEDA removes its finalizer and the HPA), then the namespace.
        with contextlib.suppress(Exception):
            await client.CustomObjectsApi(k8s_admin).delete_collection_namespaced_custom_object(
                "keda.sh", "v1alpha1", ns, "scaledobjects")
        with contextlib.suppress(Exception):
            await core.delete_namespace(ns)


@pytest.fixture
def reserved_port() -> int:
    return free_port()
