"""Scale from zero without a 503 (issue 23, req 3), end to end on loopback with real servers: a real
Redis (the gateway's queue and the store), the scaler's trackers with the production reader
(scaler/cli.py SourcesReader, its fast onset poll), the waker (warmpool/hot/waker.py) with one
simulated vLLM sleeper (warmscale/simulation/engine_http.py), and the hold gateway
(scaler/holdgate.py) in front. The sleeping engine itself answers 503; through the gateway every
request is held, the sleeper is woken, and the requests are answered by it once its canary passed.
A wake whose canary fails is never routed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from tests.scaler.conftest import eventually
from tests.servers import RedisServer
from warmscale.scaler.cli import SourcesReader
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.holdgate import HoldGateway
from warmscale.scaler.holdroute import Backends, backends, endpoint_urls, pick
from warmscale.scaler.hot_status import HOT_STATUS_MAX_AGE, HotStatus
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.store import RedisStore
from warmscale.scaler.tracker import TrackerManager
from warmscale.simulation.engine import CANARY_TEXT, EngineProfile, SimulatedEngine
from warmscale.simulation.engine_http import engine_app
from warmscale.warmpool.hot.sleepers import Sleeper
from warmscale.warmpool.hot.waker import Waker

NS, NAME = "llm", "chat"
# The simulated 8B's measured times (level-1 wake 2.2 s, sleep 10 s) divided by this.
TIME_FACTOR = 4.0
# Bound on every wait here (a wake takes 0.55 s; a failed canary, a sleep and a second wake ~4 s).
WAIT_S = 30.0


@pytest.mark.parametrize(("own", "hot", "now", "want"), [
    ([], None, 100.0, Backends((), 0)),
    (["http://a"], None, 100.0, Backends(("http://a",), 0)),
    ([], HotStatus(NS, NAME, 100.0, awake=1, awake_urls=["http://s"]), 101.0, Backends(("http://s",), 1)),
    # A stale status is unknown: its sleepers are not routed.
    ([], HotStatus(NS, NAME, 100.0, awake=1, awake_urls=["http://s"]), 101.0 + HOT_STATUS_MAX_AGE, Backends((), 0)),
    (["http://a"], HotStatus(NS, NAME, 100.0, awake=2, awake_urls=["http://a", "http://s"]), 100.0,
     Backends(("http://a", "http://s"), 1)),
])
def test_backends(own: list[str], hot: HotStatus | None, now: float, want: Backends) -> None:
    assert backends(own, hot, now) == want


@pytest.mark.parametrize(("urls", "in_flight", "want"), [
    ([], {}, None),
    (["a", "s"], {}, "a"),
    (["a", "s"], {"a": 2, "s": 1}, "s"),
    (["a", "s"], {"a": 1, "s": 1}, "a"),
])
def test_pick(urls: list[str], in_flight: dict[str, int], want: str | None) -> None:
    assert pick(urls, in_flight) == want


def _slice(ports: list[dict[str, object]], *endpoints: dict[str, object]) -> dict[str, object]:
    return {"ports": ports, "endpoints": list(endpoints)}


HTTP = [{"name": "http", "port": 8000}]


@pytest.mark.parametrize(("slices", "port", "want"), [
    ([], None, ()),
    # Ready, and absent "ready" (the API's rule: ready); not ready (starting, terminating) left out.
    ([_slice(HTTP, {"addresses": ["10.0.0.2"], "conditions": {"ready": True}}, {"addresses": ["10.0.0.1"]},
             {"addresses": ["10.0.0.3"], "conditions": {"ready": False, "terminating": True}})],
     None, ("http://10.0.0.1:8000", "http://10.0.0.2:8000")),
    # The port by name or number; a slice without it contributes nothing.
    ([_slice([{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}], {"addresses": ["10.0.0.1"]}),
      _slice([{"name": "metrics", "port": 9000}], {"addresses": ["10.0.0.9"]})],
     "http", ("http://10.0.0.1:8000",)),
    ([_slice(HTTP, {"addresses": ["10.0.0.1"]})], "8000", ("http://10.0.0.1:8000",)),
    ([_slice(HTTP, {"addresses": ["fd00::1"]})], None, ("http://[fd00::1]:8000",)),
    # Two slices, one endpoint in both (a move between slices): once.
    ([_slice(HTTP, {"addresses": ["10.0.0.1"]}), _slice(HTTP, {"addresses": ["10.0.0.1"]})], None,
     ("http://10.0.0.1:8000",)),
    ([_slice([], {"addresses": ["10.0.0.1"]}), {"endpoints": None, "ports": None}], None, ()),
])
def test_endpoint_urls(slices: list[dict[str, object]], port: str | None, want: tuple[str, ...]) -> None:
    assert endpoint_urls(slices, port) == want


@dataclass
class Rig:
    gateway: HoldGateway
    url: str
    engine: SimulatedEngine
    engine_url: str
    session: aiohttp.ClientSession
    manager: TrackerManager
    queue: str
    waker: Waker


@pytest.fixture
async def rig(redis_server: RedisServer) -> AsyncIterator[Rig]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    queue = f"{prefix}:gateway:{NAME}"
    store = RedisStore(redis_server.url, prefix=prefix)
    r = aioredis.from_url(redis_server.url)
    session = aiohttp.ClientSession()
    engine = SimulatedEngine("sleeper-0", EngineProfile())
    engine.sleep_level = 1
    runners: list[web.AppRunner] = []

    async def serve(app: web.Application) -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    engine_url = await serve(engine_app(engine, "vllm", time_factor=TIME_FACTOR))
    sleeper = Sleeper(pod=f"{NS}/{NAME}-sleeper-0", workload=f"{NS}/{NAME}", index=0, base_url=engine_url,
                      engine="vllm", model="m", node="n1", device="gpu-0", canary_reference=CANARY_TEXT)

    async def source() -> list[Sleeper]:
        return [sleeper]

    waker = Waker(store, source, session)
    waking = asyncio.create_task(waker.run())
    reader = SourcesReader()
    manager = TrackerManager(store, reader, ScalerMetrics(), DecisionLog(50), instance_id="t", onset=reader.onset)
    # The default scrape interval (1 s): the onset is seen by the fast poll of the gateway's queue.
    manager.get(NS, NAME, {"redisAddress": redis_server.address, "redisQueue": queue, "scaleToZero": "true",
                           "minReplicas": "0", "idleWindowSeconds": "0", "maxReplicas": "10"})
    gateway = HoldGateway(store, r, queue, NS, NAME, session)
    url = await serve(gateway.app())
    try:
        async def published() -> bool:
            hs = await store.get_hot_status(NS, NAME)
            return hs is not None and hs.asleep == 1
        await eventually(published, within=WAIT_S)
        yield Rig(gateway, url, engine, engine_url, session, manager, queue, waker)
    finally:
        await manager.stop()
        waking.cancel()
        await asyncio.gather(waking, return_exceptions=True)
        for runner in reversed(runners):
            await runner.cleanup()
        await reader.aclose()
        await session.close()
        await store.close()
        await r.aclose()


async def complete(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.post(url + "/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 4},
                            timeout=aiohttp.ClientTimeout(total=WAIT_S)) as resp:
        if resp.status != 200:
            return resp.status, await resp.text()
        return 200, str((await resp.json())["choices"][0]["text"])


async def test_scale_from_zero_holds_and_routes_to_the_woken_sleeper(rig: Rig) -> None:
    # Without the gateway the sleeping engine answers 503 (what AIBrix's first request gets).
    assert (await complete(rig.session, rig.engine_url))[0] == 503
    answers = await asyncio.gather(*(complete(rig.session, rig.url) for _ in range(3)))
    assert answers == [(200, CANARY_TEXT)] * 3
    assert rig.engine.sleep_level == 0  # woken for them
    assert rig.gateway.answered == {200: 3}  # no 503, no 504: all held, then routed
    assert rig.gateway.held == 0
    r = rig.gateway.queue
    assert await r.llen(rig.queue) == 0  # every token left the queue with its request


async def test_a_wake_whose_canary_fails_is_never_routed(rig: Rig) -> None:
    rig.engine.corrupt_after_wake = True  # the next wake serves wrong output (vllm#16234)
    status, text = await complete(rig.session, rig.url)
    # The wrong output never reached the client: the waker's canary caught it, slept the engine and
    # woke it again; the request waited in the gateway until the good wake.
    assert (status, text) == (200, CANARY_TEXT)
    assert rig.gateway.answered == {200: 1}
    wakes = rig.waker.metrics.wakes
    assert wakes.labels(f"{NS}/{NAME}", "failed")._value.get() == 1
    assert wakes.labels(f"{NS}/{NAME}", "ready")._value.get() == 1


async def test_a_held_request_is_queued_for_the_scaler_and_bounded(redis_server: RedisServer) -> None:
    """Without any backend: the held request's token is on the queue (the onset the scaler reads)
    with an expiry (a dead gateway leaves no demand behind); past the hold bound it gets 504, past
    the held-request bound 429 + Retry-After; never 503, and the token leaves the queue."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    queue = f"{prefix}:gateway:{NAME}"
    store = RedisStore(redis_server.url, prefix=prefix)
    r = aioredis.from_url(redis_server.url)
    session = aiohttp.ClientSession()
    gateway = HoldGateway(store, r, queue, NS, NAME, session, max_seconds=1.0, max_requests=1)
    runner = web.AppRunner(gateway.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        first = asyncio.create_task(complete(session, url))

        async def queued() -> bool:
            return await r.llen(queue) == 1
        await eventually(queued)
        assert 0 < await r.ttl(queue) <= 10
        status, _ = await complete(session, url)  # the one held already fills the bound
        assert status == 429
        assert (await first)[0] == 504
        assert gateway.answered == {429: 1, 504: 1}
        assert await r.llen(queue) == 0
    finally:
        await runner.cleanup()
        await session.close()
        await store.close()
        await r.aclose()
