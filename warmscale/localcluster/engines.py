"""Simulated inference engines bound to KWOK pods, and a gateway that drives load into them.

KWOK pods get IPs from a loopback range (``ClusterConfig.pod_cidr``, 127.X.0.0/16), so for every
pod of a selector that has an IP, :class:`PodEngines` starts a :class:`SimulatedEngine` (vLLM
metric names, a small continuous-batching model) listening on ``<pod IP>:<port>``. Anything that
discovers the pods through the API (the scaler's ``podSelector``) scrapes them there for real.

The gateway is a Redis list (the scaler's ``redisQueue`` source): a closed-loop client keeps
``concurrency`` requests outstanding; requests wait in Redis until a *Ready* pod's engine takes them
(the engine with the fewest in flight, while its own waiting queue is below ``max_engine_waiting``).
With no ready pod the queue grows: that is what a scale from zero sees. Pods that go away lose
their requests (the client re-sends them).

Nothing here is timed against an assert: it records timestamps (``onset_at``, first pod Ready,
replicas seen) for the tests and benchmarks to report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client

from warmscale.simulation.engine import EngineProfile, Request, SimulatedEngine
from warmscale.warmpool.kube import cancel_and_wait

log = logging.getLogger(__name__)


async def stop_task(task: asyncio.Task[Any], within: float = 10.0) -> None:
    """Cancel a background loop and wait for it to end, for at most ``within`` seconds.

    One ``cancel()`` is not enough on Python 3.11: ``asyncio.wait_for`` drops a cancellation that
    arrives in the loop iteration its inner future completes (fixed in 3.12), and redis-py sends
    every command through ``wait_for`` (its socket timeout). The cancelled loop then runs on
    ("cancelling" forever) and a bare ``await task`` never returns: that was the 300 s teardown
    timeout of the real-KEDA tests. So cancel again until it is done
    (:func:`warmpool.kube.cancel_and_wait`); a task still running after ``within`` is left behind
    with a warning rather than hanging the caller."""
    try:
        async with asyncio.timeout(within):
            await cancel_and_wait(task, every=0.05)
    except TimeoutError:
        log.warning("background task did not stop", extra={"task": task.get_name(), "within_s": within})
        return
    if not task.cancelled() and task.exception() is not None:
        log.warning("background task failed", extra={"task": task.get_name(), "error": repr(task.exception())})

# Large batch and KV and a near-instant prefill, so that in-flight == running: no engine-side
# queueing (the demo engine admits a request only once the previous prefill is done), hence no
# transient backlog that the scaler's queue rule would answer.
ROOMY = EngineProfile(max_num_seqs=512, kv_capacity_tokens=50_000_000, prefill_tps=1e9)


@dataclass
class PodEngine:
    pod: str
    ip: str
    engine: SimulatedEngine
    runner: web.AppRunner
    ready: bool = False
    started_at: float = 0.0
    ready_at: float | None = None


def _ready(pod: Any) -> bool:
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == "Ready":
            return bool(c.status == "True")
    return False


@dataclass
class PodEngines:
    """Engines for the pods of ``selector`` in ``namespace``; load through a Redis gateway queue."""

    api: client.ApiClient
    namespace: str
    selector: str
    port: int
    redis_url: str
    queue_key: str
    profile: EngineProfile = ROOMY
    input_tokens: int = 200
    output_tokens: int = 300  # ~5 s per request: a steady in-flight count with little churn
    max_engine_waiting: int = 4
    tick_s: float = 0.1
    engines: dict[str, PodEngine] = field(default_factory=dict)
    concurrency: int = 0
    onset_at: float | None = None
    first_ready_at: float | None = None
    completed: int = 0
    _task: asyncio.Task[None] | None = None
    _redis: Any = None
    _seq: int = 0
    _closing: bool = False

    async def start(self) -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.from_url(self.redis_url)
        await self._redis.delete(self.queue_key)
        self._task = asyncio.create_task(self._run(), name=f"pod-engines-{self.namespace}")

    async def aclose(self) -> None:
        """Stop the loop, the engines and the gateway queue; bounded (a few seconds at most)."""
        self._closing = True  # the loop ends after this tick even if every cancellation were lost
        if self._task is not None:
            await stop_task(self._task)
        for pe in list(self.engines.values()):
            await pe.runner.cleanup()
        self.engines.clear()
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.delete(self.queue_key)
            await self._redis.aclose()

    def set_concurrency(self, n: int) -> None:
        """Keep ``n`` requests outstanding (queued in the gateway or in an engine) from now on.
        An increase re-arms ``onset_at``: it is stamped when the first of the added requests is sent."""
        if n > self.concurrency:
            self.onset_at = None
        self.concurrency = n

    # ----------------------------------------------------------------- views

    def ready_engines(self) -> list[PodEngine]:
        return [pe for pe in self.engines.values() if pe.ready]

    def in_engines(self) -> int:
        return sum(pe.engine.in_flight for pe in self.engines.values())

    async def queued(self) -> int:
        return int(await self._redis.llen(self.queue_key))

    # ----------------------------------------------------------------- loop

    async def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self._closing:
            t0 = time.monotonic()
            try:
                pods = await core.list_namespaced_pod(self.namespace, label_selector=self.selector)
                await self._reconcile(pods.items)
                await self._load()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive a transient API or Redis error
                log.warning("pod engines tick failed", extra={"error": repr(exc)})
            await asyncio.sleep(max(0.0, self.tick_s - (time.monotonic() - t0)))

    async def _reconcile(self, pods: list[Any]) -> None:
        now = time.monotonic()
        seen: set[str] = set()
        for pod in pods:
            name = pod.metadata.name
            ip = pod.status.pod_ip if pod.status else None
            if pod.metadata.deletion_timestamp is not None or not ip:
                continue
            seen.add(name)
            pe = self.engines.get(name)
            if pe is None or pe.ip != ip:
                if pe is not None:
                    await pe.runner.cleanup()
                pe = await self._serve(name, ip, now)
                self.engines[name] = pe
            ready = _ready(pod)
            if ready and not pe.ready:
                pe.ready_at = now
                if self.first_ready_at is None:
                    self.first_ready_at = now
            pe.ready = ready
        for name in [n for n in self.engines if n not in seen]:
            pe = self.engines.pop(name)
            await pe.runner.cleanup()

    async def _serve(self, name: str, ip: str, now: float) -> PodEngine:
        engine = SimulatedEngine(name, self.profile)
        engine.step(time.monotonic())

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=engine.exposition(), content_type="text/plain", charset="utf-8")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        # A pod that goes away closes at once (the scaler keeps keep-alive connections open; the
        # default 60 s shutdown timeout would stall every scale-down and teardown).
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        await web.TCPSite(runner, ip, self.port).start()
        log.debug("engine listening", extra={"pod": name, "address": f"{ip}:{self.port}"})
        return PodEngine(name, ip, engine, runner, started_at=now)

    async def _load(self) -> None:
        now = time.monotonic()
        for pe in self.engines.values():
            before = len(pe.engine.running) + len(pe.engine.waiting)
            pe.engine.step(now)
            self.completed += max(0, before - pe.engine.in_flight)
        queued = await self.queued()
        outstanding = queued + self.in_engines()
        if outstanding < self.concurrency:
            new = self.concurrency - outstanding
            items = []
            for _ in range(new):
                self._seq += 1
                items.append(json.dumps({"id": self._seq, "in": self.input_tokens, "out": self.output_tokens}))
            await self._redis.rpush(self.queue_key, *items)
            if self.onset_at is None:
                self.onset_at = time.monotonic()
            queued += new
        ready = self.ready_engines()
        if queued <= 0 or not ready:
            return
        room = sum(max(0, self.max_engine_waiting - len(pe.engine.waiting)) for pe in ready)
        # Requests are admitted at once (roomy engines), so the room is refilled every step; one
        # LPOP with a count keeps the tick short.
        raw = await self._redis.lpop(self.queue_key, min(queued, max(room, 1) * 64))
        for item in raw or []:
            target = min(ready, key=lambda pe: pe.engine.in_flight)
            body = json.loads(item)
            target.engine.submit(Request(time.monotonic(), int(body["in"]), int(body["out"])))
            target.engine.step(time.monotonic())
