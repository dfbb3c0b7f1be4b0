"""The hot tier's cluster rig: DRA ResourceSlices for KWOK GPU nodes, simulated engines on the
sleeper pods' IPs, and the controller's hot side (reconciler + waker) in the test process.

- :func:`publish_gpus`: a DeviceClass ``gpu.warmscale.test`` and one ResourceSlice per node with
  ``count`` GPUs (each with a ``uuid`` attribute), so that the real scheduler allocates the shared
  claims the controller creates.
- :class:`SleeperEngines`: for every sleeper pod with an IP, a simulated engine serving the vLLM (or,
  for a pod annotated ``warmscale.io/engine: sglang``, SGLang's) sleep surface
  (``warmscale/simulation/engine_http.py``) on ``<pod IP>:<port>``; it starts awake, as a freshly
  started engine does, and the waker records its canary and puts it to sleep.
- :class:`HotSide`: :class:`~warmscale.warmpool.hot.reconciler.HotReconciler` and
  :class:`~warmscale.warmpool.hot.waker.Waker` with the real Redis, as ``warmscale warmpool`` runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.localcluster.engines import stop_task
from warmscale.scaler.kube import EventRecorder
from warmscale.scaler.store import RedisStore
from warmscale.simulation.engine import EngineProfile, SimulatedEngine
from warmscale.simulation.engine_http import engine_app
from warmscale.warmpool.hot.config import ENGINE
from warmscale.warmpool.hot.kube_source import kube_events, kube_sleepers, kube_states
from warmscale.warmpool.hot.reconciler import HotReconciler
from warmscale.warmpool.hot.sleepers import HOT_PORT, SLEEPER_SELECTOR, Sleeper
from warmscale.warmpool.hot.waker import Waker
from warmscale.warmpool.kube import read_raw

DRIVER = "gpu.warmscale.test"
# The simulated engines' measured 8B times (level-1 wake 2.2 s, sleep 10 s) divided by this.
TIME_FACTOR = 4.0
# How often the rig looks for new sleeper pods to start an engine for.
POLL_S = 0.2


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def resource_slice(node: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                    "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{node}-{i}"}},
                                  "capacity": {"memory": {"value": "80Gi"}}} for i in range(count)]}}


async def publish_gpus(api: client.ApiClient, nodes: list[str], count: int = 2) -> list[str]:
    """The DeviceClass (once) and a slice per node; returns the slice names (to delete)."""
    res: Any = client.ResourceV1Api(api)
    with contextlib.suppress(ApiException):
        await res.create_device_class(device_class())
    names = []
    for n in nodes:
        body = resource_slice(n, count)
        try:
            await res.create_resource_slice(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        names.append(body["metadata"]["name"])
    return names


async def unpublish(api: client.ApiClient, names: list[str]) -> None:
    res: Any = client.ResourceV1Api(api)
    for n in names:
        with contextlib.suppress(ApiException):
            await res.delete_resource_slice(n)


@dataclass
class SleeperEngine:
    pod: str
    ip: str
    engine: SimulatedEngine
    runner: web.AppRunner


@dataclass
class SleeperEngines:
    api: client.ApiClient
    namespace: str
    time_factor: float = TIME_FACTOR
    engines: dict[str, SleeperEngine] = field(default_factory=dict)
    corrupt_next: set[str] = field(default_factory=set)  # pod names whose engine serves wrong output after a wake
    _task: asyncio.Task[None] | None = None

    def start(self) -> SleeperEngines:
        self._task = asyncio.create_task(self._run(), name=f"sleeper-engines-{self.namespace}")
        return self

    async def aclose(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
        for se in list(self.engines.values()):
            await se.runner.cleanup()
        self.engines.clear()

    async def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        while True:
            with contextlib.suppress(ApiException, OSError):
                body = await read_raw(lambda **k: core.list_namespaced_pod(self.namespace, **k,
                                                                            label_selector=SLEEPER_SELECTOR))
                seen = set()
                for p in body.get("items") or []:
                    m, ip = p["metadata"], (p.get("status") or {}).get("podIP")
                    key = f"{m['uid']}"
                    seen.add(key)
                    if ip and key not in self.engines:
                        ann = m.get("annotations") or {}
                        port = int(ann.get(HOT_PORT, "8000"))
                        engine = SimulatedEngine(m["name"], EngineProfile())
                        flavour = "sglang" if ann.get(ENGINE) == "sglang" else "vllm"
                        runner = web.AppRunner(engine_app(engine, flavour, time_factor=self.time_factor),
                                               access_log=None)
                        await runner.setup()
                        await web.TCPSite(runner, ip, port).start()
                        self.engines[key] = SleeperEngine(m["name"], ip, engine, runner)
                    se = self.engines.get(key)
                    if se is not None and se.pod in self.corrupt_next:
                        se.engine.corrupt_after_wake = True
                for key in [k for k in self.engines if k not in seen]:
                    await self.engines.pop(key).runner.cleanup()
            await asyncio.sleep(POLL_S)


@dataclass
class HotSide:
    """The hot tier's controller side (reconciler + waker), in this process, on the real API and Redis."""

    api: client.ApiClient
    namespace: str
    redis_url: str
    wake_requests: list[tuple[float, Sleeper]] = field(default_factory=list)  # (monotonic, sleeper)
    store: RedisStore | None = None
    waker: Waker | None = None
    reconciler: HotReconciler | None = None
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None

    async def start(self) -> HotSide:
        core = client.CoreV1Api(self.api)
        self.store = RedisStore(self.redis_url)
        self._session = aiohttp.ClientSession()
        recorder = EventRecorder(core, every_s=5.0)
        self.reconciler = HotReconciler(self.api, namespace=self.namespace, events=recorder)
        self.waker = Waker(self.store, kube_sleepers(core, self.namespace, self.reconciler.device_of), self._session,
                           events=kube_events(recorder), record=kube_states(core),
                           on_request=lambda s, _i, t: self.wake_requests.append((t, s)))
        self.reconciler.failed, self.reconciler.busy = self.waker.failed_pods, self.waker.busy_pods
        self._tasks = [asyncio.create_task(self.reconciler.run(), name="hot reconciler"),
                       asyncio.create_task(self.waker.run(), name="hot waker")]
        return self

    async def aclose(self) -> None:
        for t in self._tasks:
            await stop_task(t)
        if self._session is not None:
            await self._session.close()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.close()


async def events(api: client.ApiClient, namespace: str, reason: str) -> list[Any]:
    evs = await client.CoreV1Api(api).list_namespaced_event(namespace)
    return [e for e in evs.items if e.reason == reason]


async def until(cond: Any, within: float, what: str, every: float = 0.1) -> Any:
    """Poll ``cond`` (sync or async) until truthy; a TimeoutError naming ``what``."""
    deadline = time.monotonic() + within
    while True:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within:.0f}s")
        await asyncio.sleep(every)
