"""Issue 10, item 4: Redis faults against two real `warmscale scaler` processes sharing one real
redis-server, scraping a loopback vLLM engine.

- SIGSTOP / SIGKILL of Redis: both replicas keep deciding locally (a spike is followed within a few
  intervals); after SIGCONT / restart they rejoin (one lease holder) without the answer dropping.
- Redis out of memory (writes fail): the follower never serves the holder's stale decision.
- FLUSHALL: a count held up by the scale-down window is not released early.
- Store-fed inputs: the warm floor is kept while Redis is down; unknown (Redis down from the start)
  -> zero refused.

Short windows through metadata. The recovery times printed here are the ones in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from tests.faults.scalerproc import Engine, ScalerProcess, start_scalers, until
from tests.servers import FakeEngine, RedisServer, running_redis
from warmscale.scaler.warm_status import WarmStatus

pytestmark = pytest.mark.servers

# Decide every 0.5 s; 10 in-flight per replica; exact HPA landing; short windows.
META = {
    "scrapeIntervalSeconds": "0.5",
    "scrapeTimeoutSeconds": "0.4",
    "targetInflightPerReplica": "10",
    "maxReplicas": "20",
    "hpaTolerance": "0",
    "timeToReadySeconds": "1",
    "trendWindowSeconds": "2",
}


@pytest.fixture
def redis_fresh() -> Iterator[RedisServer]:
    """A private redis-server (these tests stop, kill, fill and flush it)."""
    with running_redis() as server:
        try:
            yield server
        finally:
            if server.proc is not None and server.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    server.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def engine(fake_engine: Callable[..., FakeEngine]) -> Engine:
    return Engine(fake_engine())


def _ref(p: ScalerProcess, engine: Engine, **extra: str) -> Any:
    return p.client.ref(name="chat", namespace="llm", metadata={**META, "endpoints": engine.url, **extra})


async def _both(procs: list[ScalerProcess], engine: Engine, pred: Callable[[int], bool], **extra: str) -> bool:
    vals = [await p.desired(_ref(p, engine, **extra)) for p in procs]
    return all(pred(v) for v in vals)


def _degraded(p: ScalerProcess) -> float:
    return p.metric("warmscale_store_degraded", namespace="llm", scaledObject="chat") or 0.0


def _holders(procs: list[ScalerProcess]) -> float:
    return sum(p.metric("warmscale_lease_held", namespace="llm", scaledObject="chat") or 0.0 for p in procs)


async def _watch_min(procs: list[ScalerProcess], engine: Engine, seconds: float, **extra: str) -> int:
    """The lowest answer any replica gives over ``seconds`` (polled every 0.1 s)."""
    low = 10**9
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for p in procs:
            low = min(low, await p.desired(_ref(p, engine, **extra)))
        await asyncio.sleep(0.1)
    return low


async def _recover(procs: list[ScalerProcess], engine: Engine, watch: float) -> tuple[int, float]:
    """(lowest answer over ``watch`` seconds, seconds until no replica is degraded), measured together."""
    t0 = time.monotonic()

    async def rejoined() -> float:
        await until(lambda: asyncio.sleep(0, all(_degraded(p) == 0 for p in procs)), within=10, every=0.05)
        return time.monotonic() - t0

    low, took = await asyncio.gather(_watch_min(procs, engine, watch), rejoined())
    return low, took


async def test_sigstop_and_sigkill_of_redis_every_replica_decides_locally_then_rejoins(
    tmp_path: Path, redis_fresh: RedisServer, engine: Engine
) -> None:
    engine.set(running=32)  # -> 4 replicas
    procs = await start_scalers(tmp_path, 2, "--redis-url", redis_fresh.url)
    try:
        await until(lambda: _both(procs, engine, lambda v: v == 4), within=10)
        assert _holders(procs) == 1

        # SIGSTOP: connections hang. A spike must still be followed by both replicas.
        assert redis_fresh.proc is not None
        redis_fresh.proc.send_signal(signal.SIGSTOP)
        engine.set(running=150)  # -> 15
        took = await until(lambda: _both(procs, engine, lambda v: v == 15), within=8)
        print(f"\nSIGSTOP: spike followed by both replicas after {took:.2f}s")
        assert all(_degraded(p) == 1 for p in procs)

        # SIGCONT: both rejoin (exactly one holder), and no answer drops on the way.
        redis_fresh.proc.send_signal(signal.SIGCONT)
        low, rejoin = await _recover(procs, engine, 3.0)
        await until(lambda: asyncio.sleep(0, _holders(procs) == 1), within=5)
        print(f"SIGCONT: rejoined after {rejoin:.2f}s; lowest answer meanwhile {low}")
        assert low >= 15

        # SIGKILL: connection refused. Spike again; then restart Redis (AOF) and rejoin.
        redis_fresh.proc.kill()
        redis_fresh.proc.wait()
        engine.set(running=200)  # -> 20
        took = await until(lambda: _both(procs, engine, lambda v: v == 20), within=8)
        print(f"SIGKILL: spike followed by both replicas after {took:.2f}s")
        redis_fresh.start()
        low, rejoin = await _recover(procs, engine, 3.0)
        print(f"restart: rejoined after {rejoin:.2f}s; lowest answer meanwhile {low}")
        assert low >= 20
        await until(lambda: asyncio.sleep(0, _holders(procs) == 1), within=5)
        assert await _both(procs, engine, lambda v: v == 20)
    finally:
        await asyncio.gather(*(p.close() for p in procs))


async def test_redis_out_of_memory_follower_never_serves_a_stale_decision(
    tmp_path: Path, redis_fresh: RedisServer, engine: Engine
) -> None:
    engine.set(running=32)
    procs = await start_scalers(tmp_path, 2, "--redis-url", redis_fresh.url)
    r = redis.Redis(port=redis_fresh.port)
    try:
        await until(lambda: _both(procs, engine, lambda v: v == 4), within=10)
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", "1")  # every write is refused from now on
        engine.set(running=120)  # -> 12
        took = await until(lambda: _both(procs, engine, lambda v: v == 12), within=6)
        print(f"\nOOM: spike followed by both replicas after {took:.2f}s (stale decision never served)")
        # Once followed, no replica goes back to the stale stored 4.
        assert await _watch_min(procs, engine, 2.0) == 12
        r.config_set("maxmemory", "0")
        t0 = time.monotonic()
        await until(lambda: asyncio.sleep(0, all(_degraded(p) == 0 for p in procs)), within=10)
        print(f"OOM over: shared decisions again after {time.monotonic() - t0:.2f}s")
        assert await _both(procs, engine, lambda v: v == 12)
    finally:
        r.close()
        await asyncio.gather(*(p.close() for p in procs))


async def test_flushall_does_not_release_a_held_scale_down(
    tmp_path: Path, redis_fresh: RedisServer, engine: Engine
) -> None:
    extra = {"scaleDownStabilizationSeconds": "8", "nodeIdleSeconds": "0"}
    engine.set(running=150)  # -> 15
    procs = await start_scalers(tmp_path, 2, "--redis-url", redis_fresh.url)
    try:
        await until(lambda: _both(procs, engine, lambda v: v == 15, **extra), within=10)
        engine.set(running=5)  # -> 1, held at 15 by the 8 s window
        dropped = time.monotonic()
        await asyncio.sleep(1.0)
        redis_fresh.flush()
        low = await _watch_min(procs, engine, 5.0, **extra)
        assert low == 15, "a FLUSHALL released the scale-down window early"
        took = await until(lambda: _both(procs, engine, lambda v: v == 1, **extra), within=15)
        released = time.monotonic() - dropped
        print(f"\nFLUSHALL: held at 15 through the window; released {released:.1f}s after the drop (window 8 s)")
        assert released >= 7.5
        del took
    finally:
        await asyncio.gather(*(p.close() for p in procs))


async def test_store_fed_inputs_kept_while_redis_is_down_and_zero_refused_while_unknown(
    tmp_path: Path, redis_fresh: RedisServer, engine: Engine
) -> None:
    zero = {"scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "0"}
    engine.set(running=0)
    r = redis.Redis(port=redis_fresh.port)
    status = WarmStatus("llm", "chat", updated_at=time.time(), min_ready_floor=2, min_ready="2",
                        scale_to_zero="allowed", time_to_ready_s={"cold": 1.0})
    r.set("warmscale:warm:llm/chat", orjson.dumps(status.to_dict()))
    r.close()
    [a] = await start_scalers(tmp_path, 1, "--redis-url", redis_fresh.url, names=["a"])
    late: ScalerProcess | None = None
    try:
        # The warm floor (2) holds an idle workload that may otherwise scale to zero.
        await until(lambda: _both([a], engine, lambda v: v == 2, **zero), within=10)
        assert await a.active(_ref(a, engine, **zero))
        assert redis_fresh.proc is not None
        redis_fresh.proc.kill()
        redis_fresh.proc.wait()
        assert await _watch_min([a], engine, 3.0, **zero) == 2, "the last known warm floor was dropped"
        assert await a.active(_ref(a, engine, **zero))

        # A replica started while Redis is down has never seen the floor or the windows: no zero.
        [late] = await start_scalers(tmp_path, 1, "--redis-url", redis_fresh.url, names=["late"])
        ref = _ref(late, engine, **zero)
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            assert await late.active(ref), "zero while the store-fed inputs are unknown"
            assert await late.desired(ref) >= 1
            await asyncio.sleep(0.2)
        assert {d["active"] for d in late.decisions()["decisions"]} == {True}
    finally:
        await asyncio.gather(*(p.close() for p in [a, *([late] if late else [])]))
