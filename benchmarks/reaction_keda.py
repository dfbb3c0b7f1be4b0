"""Reaction through the real KEDA and HPA: load onset -> the Deployment's replicas changed.

Part of ``python -m warmscale.benchmarks.reaction`` (``--no-keda`` leaves it out). On a throw-away local
cluster with the real KEDA v2.21.0 (``warmscale/localcluster``, binaries cached by ``.ci/build-cluster.sh``)
and a ``warmscale scaler`` process, simulated engines listen on the KWOK pods' IPs and a Redis list
is the gateway queue (``warmscale/localcluster/engines.py``). Two paths, each ``trials`` times:

- **0 -> 1** (``external-push``, scale to zero allowed): requests enter the empty gateway queue
  (queue onset) -> the scaler pushes ``IsActive=true`` on KEDA's ``StreamIsActive`` -> KEDA's
  operator scales the Deployment from 0 to 1 (activation does not involve the HPA).
- **1 -> N** (``minReplicaCount`` 1): the in-flight load steps up by 20 (target 10 per replica:
  5 -> 25 -> 45 ..., one step per trial) -> the scaler's decision -> the HPA reads
  ``external.metrics.k8s.io`` through KEDA's metrics adapter and the operator on its next sync ->
  the Deployment's replicas change.

Timestamps: onset = the moment the load generator sends the first new request; replicas = this
process polling the Deployment every 100 ms. KEDA ``pollingInterval`` 1 s; HPA sync period
``--hpa-sync-period`` (default 1 s; Kubernetes' default is 15 s).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

from kubernetes_asyncio import client


async def _trials(run: Any, trials: int) -> dict[str, list[float]]:
    from warmscale.localcluster.engines import PodEngines
    from warmscale.localcluster.scaling import (
        ReplicaTimeline,
        create_scaled_object,
        engine_deployment,
        scaled_object,
        scaler_metadata,
    )

    scaler = run.scaler()
    out: dict[str, list[float]] = {"zero_to_one_s": [], "one_to_n_s": []}
    async with run.admin_client() as api:
        ns = f"reaction-{uuid.uuid4().hex[:5]}"
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        await core.create_namespace({"metadata": {"name": ns}})
        while True:
            try:
                await core.read_namespaced_service_account("default", ns)
                break
            except client.ApiException:
                await asyncio.sleep(0.2)
        opened: list[Any] = []
        try:
            for name, replicas, port in (("zero", 0, 8000), ("one", 1, 8001)):
                await apps.create_namespaced_deployment(ns, engine_deployment(name, replicas, port, ready_delay="1s"))
                queue = f"gateway:{ns}:{name}"
                engines = PodEngines(api, ns, f"app={name}", port, run.redis.url, queue)
                await engines.start()
                timeline = ReplicaTimeline(api, ns, name).start()
                opened += [engines, timeline]
                zero = name == "zero"
                meta = scaler_metadata(name, port, run.redis.url, queue, timeToReadySeconds="1",
                                       scaleDownStabilizationSeconds="1", idleWindowSeconds="1",
                                       **({"scaleToZero": "true", "minReplicas": "0"} if zero else {}))
                meta["maxReplicas"] = "16"
                await create_scaled_object(api, ns, scaled_object(name, scaler.address, meta, max_replicas=16,
                                                                  min_replicas=0 if zero else 1, cooldown=1))
                low, high = (0, 3) if zero else (5, 25)
                engines.set_concurrency(low)
                base = 0 if zero else 1
                await timeline.wait(spec=base, ready=base, within=60, what=f"{name} at rest")
                await asyncio.sleep(3)
                for _ in range(trials):
                    await asyncio.sleep(1.0 + random.random())
                    base = timeline.spec if timeline.spec is not None else base
                    engines.set_concurrency(high)
                    for _ in range(500):  # the load loop sends the first new request within a tick
                        if engines.onset_at is not None:
                            break
                        await asyncio.sleep(0.01)
                    onset = engines.onset_at
                    assert onset is not None
                    deadline = time.monotonic() + 60
                    changed = None
                    while changed is None and time.monotonic() < deadline:
                        changed = next((t for t, s, _ in timeline.samples if t >= onset and s != base), None)
                        await asyncio.sleep(0.05)
                    if changed is None:
                        raise RuntimeError(f"{name}: replicas did not change within 60 s")
                    out["zero_to_one_s" if zero else "one_to_n_s"].append(changed - onset)
                    if zero:
                        engines.set_concurrency(low)
                        await timeline.wait(spec=base, ready=base, within=90, what=f"{name} back at rest")
                    else:  # step up again from here: +20 in flight -> +2 replicas per trial
                        low, high = high, high + 20
                        await _stable(timeline, 2.0, 60)
        finally:
            for o in reversed(opened):
                await o.aclose()
            await core.delete_namespace(ns)
    return out


async def _stable(timeline: Any, quiet: float, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if timeline.samples and time.monotonic() - timeline.samples[-1][0] >= quiet:
            return
        await asyncio.sleep(0.1)


def measure(trials: int, hpa_sync_period: str = "1s") -> dict[str, Any]:
    from warmscale.localcluster.kedarun import KedaRun

    with KedaRun.start(hpa_sync_period=hpa_sync_period) as run:
        result = asyncio.run(_trials(run, trials))
        result["keda"] = run.cluster.info["keda"]["version"]
    result["keda_polling_interval_s"] = 1
    result["hpa_sync_period"] = hpa_sync_period
    return result
