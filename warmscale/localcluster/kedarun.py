"""A throw-away real-KEDA environment for benchmarks and the cluster demo.

    with KedaRun.start(hpa_sync_period="1s") as run:     # cluster + KEDA + Redis, all stopped at exit
        async with run.admin_client() as api: ...
        scaler = run.scaler()                            # `warmscale scaler` process
        ...

Starts its own cluster (``ClusterConfig(keda=True)``, die-with-parent) with the HPA sync period
asked for, and a Redis server (the gateway queue). Needs the cached binaries (``.ci/build-cluster.sh``;
``build=True`` builds what is missing first, printing the build's progress).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .fleet import CPU, NodePool
from .harness import Cluster, ClusterConfig
from .scaling import ScalerProcess


@dataclass
class KedaRun:
    cluster: Cluster
    redis: Any
    logs: Path
    scalers: list[ScalerProcess] = field(default_factory=list)

    @classmethod
    @contextmanager
    def start(cls, *, hpa_sync_period: str = "1s", pools: list[NodePool] | None = None,
              build: bool = False) -> Iterator[KedaRun]:
        from .servers import RedisServer

        cluster = Cluster.start(ClusterConfig(
            pools=pools if pools is not None else [replace(CPU, count=2)], die_with_parent=True,
            keda=True, hpa_sync_period=hpa_sync_period, build_missing=build))
        redis = RedisServer()
        logs = Path(tempfile.mkdtemp(prefix="warmscale-kedarun-"))
        run = cls(cluster, redis, logs)
        try:
            redis.start()
            yield run
        finally:
            for s in run.scalers:
                s.stop()
            redis.close()
            cluster.stop()
            shutil.rmtree(logs, ignore_errors=True)

    def admin_client(self) -> Any:
        return self.cluster.admin_client()

    def scaler(self, *extra: str) -> ScalerProcess:
        s = ScalerProcess(self.cluster.kubeconfig, self.logs / f"scaler-{len(self.scalers)}.log",
                          extra_args=list(extra))
        self.scalers.append(s)
        return s.start()
