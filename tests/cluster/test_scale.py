"""1,000 KWOK GPU nodes: startup time and memory (marked large, not in the default run)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from warmscale.localcluster import workloads as w
from warmscale.localcluster.fleet import gpu_fleet
from warmscale.localcluster.harness import Cluster, ClusterConfig

from .fixtures import wait_for

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.cluster, pytest.mark.large]

NODES = 1000


@pytest.mark.timeout(1200)
async def test_thousand_gpu_nodes(tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    t0 = time.monotonic()
    cluster = Cluster.start(
        ClusterConfig(pools=gpu_fleet(NODES), state_dir=tmp_path / "cluster", die_with_parent=True, startup_timeout=900)
    )
    try:
        startup = time.monotonic() - t0
        async with cluster.admin_client() as api:
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            nodes = await core.list_node(label_selector="type=kwok")
            assert len(nodes.items) == NODES
            # The scheduler works at this size: 50 one-GPU replicas become Ready.
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="scale")))
            await wait_for(lambda: _has_default_sa(core), within=60, what="default SA")
            t1 = time.monotonic()
            await apps.create_namespaced_deployment("scale", w.body(w.deployment("llm", 50, gpus=1)))

            async def ready() -> bool:
                d = await apps.read_namespaced_deployment_status("llm", "scale")
                return d.status.ready_replicas == 50

            await wait_for(ready, within=300, what="50 replicas Ready")
            rollout = time.monotonic() - t1
        memory = {k: round(v / 2**20) for k, v in cluster.memory_bytes().items()}
        cpu = cluster.cpu_usage(seconds=15)
        report = {
            "nodes": NODES,
            "startup_seconds": round(startup, 1),
            "startup_marks": cluster.info.get("startup_marks"),
            "rollout_50_replicas_seconds": round(rollout, 1),
            "rss_mib": memory,
            "rss_total_mib": sum(memory.values()),
            "idle_cpu_cores": cpu,
            "idle_cpu_total_cores": round(sum(cpu.values()), 2),
        }
        for key, value in report.items():
            record_property(key, value)
        print("\nscale report:", json.dumps(report))
        log.info("scale report", extra=report)
    finally:
        cluster.stop()


async def _has_default_sa(core: client.CoreV1Api) -> bool:
    sas = await core.list_namespaced_service_account("scale")
    return any(sa.metadata.name == "default" for sa in sas.items)
