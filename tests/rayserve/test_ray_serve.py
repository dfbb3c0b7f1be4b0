"""The policy inside a real Ray Serve on CPU: Ray's own Serve controller instantiates
``warmscale.rayserve.policy:WarmscalePolicy`` from a deployment's ``autoscaling_config`` and calls it
every control-loop tick; the replica counts come from the real `warmscale scaler` process reading a
loopback vLLM ``/metrics``. Needs the ``rayserve`` extra; ``pytest -m ray tests/rayserve`` (not in the
default run: Ray's start takes tens of seconds)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.scalerproc import ROOT, Engine, start_scalers
from tests.rayserve.test_policy import META
from tests.servers import FakeEngine, free_port

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
APP, DEPLOYMENT = "toy", "Toy"
STALE_S = 3.0  # the policy's stale_s here: short, so the test sees the scaler's absence count as missing
# Ray's object store floor (it refuses less than ~75 MiB); the toy deployment stores nothing.
OBJECT_STORE_BYTES = 100 * 2**20


@pytest.fixture
def ray_local() -> Iterator[Any]:
    """A local Ray (2 CPUs, no dashboard) with this checkout importable by its workers and Serve's controller."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES,
             runtime_env={"env_vars": env}, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
        yield serve
    finally:
        serve.shutdown()
        ray.shutdown()


def running_replicas() -> int:
    app = serve.status().applications.get(APP)
    if app is None or DEPLOYMENT not in app.deployments:
        return 0
    return int(app.deployments[DEPLOYMENT].replica_states.get("RUNNING", 0))


async def settle(want: int, within: float) -> float:
    t0 = time.monotonic()
    while (n := await asyncio.to_thread(running_replicas)) != want:
        if time.monotonic() - t0 > within:
            raise TimeoutError(f"{n} running replicas, not {want}, after {within}s")
        await asyncio.sleep(0.5)
    return time.monotonic() - t0


async def test_serve_controller_scales_by_the_scaler_and_keeps_the_count_without_it(
    tmp_path: Path, fake_engine: Callable[..., FakeEngine], ray_local: Any
) -> None:
    engine = Engine(fake_engine())
    engine.set(running=10)  # 1 replica's worth at 32 per replica
    [p] = await start_scalers(tmp_path, 1, names=["rayserve"])
    # A CPU toy replica is ready in seconds: the scaler holds a peak for its time-to-ready (the default
    # 120 s) and its scale-down stabilization (300 s), both cut short here so the test sees 3 -> 2.
    meta = {**META, "endpoints": engine.url, "scaleDownStabilizationSeconds": "1", "timeToReadySeconds": "2"}
    kwargs = {"scaler": f"127.0.0.1:{p.grpc_port}", "name": "toy", "namespace": "ray", "metadata": meta,
              "poll_s": 0.5, "stale_s": STALE_S}

    @serve.deployment(name=DEPLOYMENT, ray_actor_options={"num_cpus": 0}, autoscaling_config={
        "min_replicas": 1, "max_replicas": 4, "initial_replicas": 1,
        # Serve wraps a custom policy in its own delays (30 s up, 600 s down by default); the scaler
        # already holds and stabilizes, so the shipped example sets both to 0, as here.
        "upscale_delay_s": 0, "downscale_delay_s": 0,
        "policy": {"policy_function": "warmscale.rayserve.policy:WarmscalePolicy", "policy_kwargs": kwargs}})
    class Toy:
        def __call__(self, _request: Any) -> str:
            return "ok"

    try:
        t0 = time.monotonic()
        await asyncio.to_thread(serve.run, Toy.bind(), name=APP, route_prefix="/toy")
        deployed = time.monotonic() - t0
        await settle(1, within=60)
        engine.set(running=96)  # 3 replicas' worth
        up = await settle(3, within=120)
        print(f"\nray serve: deployed in {deployed:.1f}s; 1 -> 3 replicas in {up:.1f}s")
        engine.set(running=40)  # 2 replicas' worth: the scaler decides 2, Serve follows
        down = await settle(2, within=120)
        print(f"ray serve: 3 -> 2 replicas in {down:.1f}s")
        await p.close()  # the scaler is gone: its last answer goes stale, the count stays
        await asyncio.sleep(STALE_S + 5.0)
        assert await asyncio.to_thread(running_replicas) == 2
        status = await asyncio.to_thread(serve.status)
        assert status.applications[APP].deployments[DEPLOYMENT].status == "HEALTHY"
    finally:
        await p.close()
