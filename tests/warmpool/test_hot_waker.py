"""The waker (warmpool/hot/waker.py) against a real Redis and simulated engines serving the vLLM sleep
surface on 127.0.0.1: intents through pub/sub and through the stored key, the canary gate, failed
wakes, release with drain, and what it never touches. No timed asserts: waits are bounded polls."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web

from tests.servers import RedisServer
from warmscale.scaler.hot_status import WakeIntent
from warmscale.scaler.store import RedisStore
from warmscale.simulation.engine import CANARY_TEXT, EngineProfile, Request, SimulatedEngine
from warmscale.simulation.engine_http import engine_app
from warmscale.warmpool.hot.sleepers import SLEEPER_ROLE, Sleeper, sleeper_from_pod
from warmscale.warmpool.hot.waker import Waker, WakerMetrics
from warmscale.warmpool.objects import MANAGED_BY, MANAGED_BY_VALUE, ROLE

# The simulated engines' measured times compressed 100x (a 2.2 s wake takes 22 ms).
FAST = 100.0
WL = "ns/llama"
# A bounded wait for something the waker does in the background.
WITHIN_S = 10.0


async def until(cond: Callable[[], Any], within: float = WITHIN_S) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


class Rig:
    def __init__(self, store: RedisStore, session: aiohttp.ClientSession) -> None:
        self.store = store
        self.session = session
        self.engines: list[SimulatedEngine] = []
        self.sleepers: list[Sleeper] = []
        self.runners: list[web.AppRunner] = []
        self.events: list[tuple[str, str]] = []
        self.requests: list[str] = []

    async def engine(self, index: int, device: str, *, reference: str | None = CANARY_TEXT) -> SimulatedEngine:
        engine = SimulatedEngine(f"e{index}", EngineProfile())
        engine.sleep_level = 1  # created asleep, as the controller leaves a sleeper
        port = await serve(engine, "vllm", self.runners)
        self.engines.append(engine)
        self.sleepers.append(Sleeper(pod=f"ns/llama-sleeper-{index}", workload=WL, index=index,
                                     base_url=f"http://127.0.0.1:{port}", engine="vllm", model="m", node="n1",
                                     device=device, canary_reference=reference))
        return engine

    def waker(self) -> Waker:
        async def source() -> list[Sleeper]:
            return list(self.sleepers)

        async def event(s: Sleeper, reason: str, message: str) -> None:
            self.events.append((reason, message))

        return Waker(self.store, source, self.session, metrics=WakerMetrics(), events=event,
                     on_request=lambda s, _i, _t: self.requests.append(s.pod))

    async def intent(self, awake: int, at: float | None = None) -> None:
        await self.store.put_wake_intent(WakeIntent("ns", "llama", awake, time.time() if at is None else at, "wake"))

    async def status(self) -> Any:
        return await self.store.get_hot_status("ns", "llama")


async def serve(engine: SimulatedEngine, flavour: str, runners: list[web.AppRunner]) -> int:
    """``engine``'s HTTP surface on 127.0.0.1 (a free port, returned; the runner kept to clean up)."""
    runner = web.AppRunner(engine_app(engine, flavour, time_factor=FAST), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    runners.append(runner)
    return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]


R = TypeVar("R")


@contextlib.asynccontextmanager
async def rig_of(cls: Callable[[RedisStore, aiohttp.ClientSession], R], redis_server: RedisServer) -> AsyncIterator[R]:
    """A rig (``cls(store, session)``, with ``runners``) on a store with a prefix of its own; its engines'
    servers, the session and the store closed after."""
    store = RedisStore(redis_server.url, prefix=f"t{uuid.uuid4().hex[:8]}")
    session = aiohttp.ClientSession()
    r = cls(store, session)
    try:
        yield r
    finally:
        await session.close()
        for runner in r.runners:  # type: ignore[attr-defined]
            await runner.cleanup()
        await store.close()


@pytest.fixture
async def rig(redis_server: RedisServer) -> AsyncIterator[Rig]:
    async with rig_of(Rig, redis_server) as r:
        yield r


async def running(w: Waker) -> asyncio.Task[None]:
    task = asyncio.create_task(w.run())
    await until(lambda: bool(w._workloads))
    await asyncio.sleep(0.05)  # subscribed
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_an_intent_wakes_sleepers_at_once_and_they_count_after_the_canary(rig: Rig) -> None:
    e0 = await rig.engine(0, "gpu-0")
    e1 = await rig.engine(1, "gpu-1")
    await rig.engine(2, "gpu-2")
    task = await running(rig.waker())
    try:
        hs = await rig.status()
        assert (hs.asleep, hs.awake) == (3, 0)  # published before any intent
        await rig.intent(2)
        await until(lambda: e0.awake and e1.awake)
        await until(lambda: rig.requests == ["ns/llama-sleeper-0", "ns/llama-sleeper-1"])
        for _ in range(200):
            hs = await rig.status()
            if hs.awake == 2:
                break
            await asyncio.sleep(0.01)
        assert (hs.asleep, hs.awake, hs.failed) == (1, 2, 0)
        assert hs.awake_pods == ["ns/llama-sleeper-0", "ns/llama-sleeper-1"] and hs.wake_s[""] > 0
    finally:
        await stop(task)


async def test_release_drains_then_sleeps_the_highest_index_first(rig: Rig) -> None:
    e0 = await rig.engine(0, "gpu-0")
    e1 = await rig.engine(1, "gpu-1")
    task = await running(rig.waker())
    try:
        await rig.intent(2)
        await until(lambda: e0.awake and e1.awake)
        await asyncio.sleep(0.1)
        e1.submit(Request(arrived_at=0.0, input_tokens=10, output_tokens=2))
        await rig.intent(1)
        await until(lambda: e1.sleep_level == 1)
        assert e1.in_flight == 0 and e0.awake  # drained before it slept; the lower index stays
        await rig.intent(0)
        await until(lambda: e0.sleep_level == 1)
    finally:
        await stop(task)


async def test_a_stored_intent_missed_on_the_channel_is_acted_on_at_the_next_pass(rig: Rig) -> None:
    e0 = await rig.engine(0, "gpu-0")
    await rig.intent(1)  # before the waker listens
    w = rig.waker()
    await w.resync()
    await until(lambda: e0.awake)
    await w.close()


async def test_absent_or_stale_intents_wake_and_sleep_nothing(rig: Rig) -> None:
    e0 = await rig.engine(0, "gpu-0")
    w = rig.waker()
    await w.resync()  # no intent stored: unknown
    await rig.intent(1, at=time.time() - 3600)  # stale: unknown too
    await w.resync()
    await asyncio.sleep(0.2)
    assert e0.sleep_level == 1 and rig.requests == []
    await w.close()


async def test_a_sleeper_that_fails_to_wake_twice_is_reported_never_routed_and_replaced(rig: Rig) -> None:
    bad = await rig.engine(0, "gpu-0", reference="something else")  # its canary never matches
    good = await rig.engine(1, "gpu-1")
    w = rig.waker()
    task = await running(w)
    try:
        await rig.intent(1)
        await until(lambda: good.awake and w.status(WL).awake == 1)
        await until(lambda: any(r == "HotSleeperWakeFailed" for r, _ in rig.events))
        assert rig.requests.count("ns/llama-sleeper-0") == 2
        hs = w.status(WL)
        assert hs.failed == 1 and hs.awake_pods == ["ns/llama-sleeper-1"]
        assert bad.sleep_level == 1  # put back to sleep after each failed wake: not serving
        await rig.intent(2)
        await asyncio.sleep(0.2)
        assert rig.requests.count("ns/llama-sleeper-0") == 2  # never woken again
    finally:
        await stop(task)


async def test_one_awake_engine_per_gpu_across_workloads(rig: Rig) -> None:
    e0 = await rig.engine(0, "gpu-0")
    e1 = await rig.engine(1, "gpu-0")  # (two of one workload on a GPU: the planner never does this)
    w = rig.waker()
    await w.resync()
    await rig.intent(2)
    await w.resync()
    await until(lambda: e0.awake)
    await asyncio.sleep(0.2)
    assert e1.sleep_level == 1
    await w.close()


def pod(labels: dict[str, str], **ann: str) -> dict[str, Any]:
    annotations = {"warmscale.io/hot-workload": WL, "warmscale.io/hot-device": "gpu-0",
                   "warmscale.io/hot-model": "m", "warmscale.io/engine": "vllm", **ann}
    return {"metadata": {"namespace": "ns", "name": "p", "labels": labels, "annotations": annotations},
            "spec": {"nodeName": "n1"}, "status": {"podIP": "10.0.0.7"}}


OURS = {MANAGED_BY: MANAGED_BY_VALUE, ROLE: SLEEPER_ROLE}


@pytest.mark.parametrize(("labels", "ann", "ok"), [
    (OURS, {}, True),
    ({}, {}, False),  # not created by warmscale: never a sleeper, whatever it says
    ({MANAGED_BY: MANAGED_BY_VALUE, ROLE: "placeholder"}, {}, False),
    ({ROLE: SLEEPER_ROLE}, {}, False),
    (OURS, {"warmscale.io/engine": "tgi"}, False),  # no HTTP sleep
    (OURS, {"warmscale.io/hot-port": "x"}, False),
    (OURS, {"warmscale.io/sleep-level": "3"}, False),
])
def test_only_the_controllers_sleeper_pods_are_sleepers(labels: dict[str, str], ann: dict[str, str],
                                                         ok: bool) -> None:
    s = sleeper_from_pod(pod(labels, **ann))
    assert (s is not None) is ok
    if s is not None:
        assert (s.pod, s.workload, s.base_url, s.device) == ("ns/p", WL, "http://10.0.0.7:8000", "gpu-0")


async def test_a_sleeper_found_awake_is_routed_only_after_its_canary(rig: Rig) -> None:
    good = await rig.engine(0, "gpu-0")
    bad = await rig.engine(1, "gpu-1", reference="something else")
    good.sleep_level = bad.sleep_level = 0  # awake when found (new, or woken before a restart)
    await rig.intent(2)  # the scaler asked for them (then went quiet): whatever it wants now is unknown
    w = rig.waker()
    await w.resync()
    await until(lambda: w.status(WL).awake == 1 and bad.sleep_level == 1)
    assert w.status(WL).awake_pods == ["ns/llama-sleeper-0"]  # the failing one is asleep, never routed
    assert good.awake  # an intent was stored: the awake one is not put to sleep without a newer one
    await rig.intent(0)
    await w.resync()
    await until(lambda: good.sleep_level == 1)
    await w.close()


async def test_a_fresh_sleeper_no_intent_ever_asked_for_is_put_to_sleep_once_its_canary_is_recorded(rig: Rig) -> None:
    """A new engine starts awake; with no wake intent ever stored for its workload nothing can be
    counting on it, and awake it would hold its shared GPU (another model's sleeper could not wake)."""
    fresh = await rig.engine(0, "gpu-0", reference=None)
    fresh.sleep_level = 0
    w = rig.waker()
    await w.resync()
    await until(lambda: w.status(WL).asleep == 1)
    assert fresh.sleep_level == 1 and w.status(WL).awake == 0
    await w.close()
