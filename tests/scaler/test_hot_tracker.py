"""The tracker's side of the wake path against a real Redis: the waker's hot status counts, the hot
step's target goes out as a wake intent at once (stored and announced), and absent or stale hot
status publishes nothing (absent data never sleeps anything)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from tests.scaler.conftest import META, ScriptedReader, eventually
from tests.servers import FakeEngine, RedisServer
from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.hot_status import HOT_STATUS_MAX_AGE, HotStatus, WakeIntent
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.store import RedisStore
from warmscale.scaler.tracker import TrackerManager
from warmscale.signals.model import ReplicaReading


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    s = RedisStore(redis_server.url, prefix=f"t{uuid.uuid4().hex[:8]}")
    yield s
    await s.close()


def manager(store: RedisStore, reader: ScriptedReader) -> TrackerManager:
    return TrackerManager(store, reader, ScalerMetrics(), DecisionLog(50), instance_id="t")


async def test_a_shortfall_is_published_as_a_wake_intent_at_once(store: RedisStore) -> None:
    await store.put_hot_status(HotStatus("llm", "chat", time.time(), asleep=2, wake_s={"": 2.2}))
    heard: list[WakeIntent] = []

    async def listen() -> None:
        async for intent in store.wake_intents():
            heard.append(intent)

    listener = asyncio.create_task(listen())
    await asyncio.sleep(0.1)  # subscribed
    m = manager(store, ScriptedReader(load=64.0))  # 2 replicas' worth on 1 ready: 1 short
    try:
        d = await m.get("llm", "chat", META).current()
        assert d.desired == 2 and (d.hot_target, d.hot_wake) == (1, 1)
        hot = next(s for s in d.trace if s.step == "hot")
        assert hot.inputs["hot"] == "wake" and hot.inputs["own_ready"] == 1
        assert d.time_to_ready_s == 2.2  # the hot rung is the next replica's time

        async def stored() -> bool:
            i = await store.get_wake_intent("llm", "chat")
            return i is not None and i.awake == 1 and i.reason == "wake" and i.by == "t"

        await eventually(stored)

        async def announced() -> bool:
            return any(i.awake == 1 and i.name == "chat" for i in heard)

        await eventually(announced)
        # Unchanged: not announced again on every tick (only refreshed every INTENT_REFRESH_SECONDS).
        n = len(heard)
        await asyncio.sleep(0.5)
        assert len(heard) == n
    finally:
        await m.stop()
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener


@pytest.mark.parametrize("age", [None, HOT_STATUS_MAX_AGE + 5.0])
async def test_absent_or_stale_hot_status_publishes_no_intent(store: RedisStore, age: float | None) -> None:
    if age is not None:
        await store.put_hot_status(HotStatus("llm", "chat", time.time() - age, asleep=2, awake=1))
    m = manager(store, ScriptedReader(load=64.0))
    try:
        d = await m.get("llm", "chat", META).current()
        assert d.hot_target is None and d.ready == 1  # the stale awake sleeper is not counted either
        await asyncio.sleep(0.3)
        assert await store.get_wake_intent("llm", "chat") is None
    finally:
        await m.stop()


@pytest.mark.parametrize(("hot_load", "desired"), [
    (30.0, 3),   # 64 on the own replica + 30 read in the sleeper: 94 / 32 per replica
    (None, 4),   # the sleeper's load unknown: it counts as loaded as the own replica (2 x 64)
])
async def test_awake_sleepers_count_as_ready_capacity(store: RedisStore, hot_load: float | None,
                                                      desired: int) -> None:
    await store.put_hot_status(HotStatus("llm", "chat", time.time(), asleep=2, awake=1, wake_s={"": 2.2},
                                         awake_load=hot_load))
    m = manager(store, ScriptedReader(load=64.0))
    try:
        d = await m.get("llm", "chat", META).current()
        # 2 ready (1 own + 1 awake sleeper); the shortfall beyond the own replica is bridged by sleepers.
        assert d.ready == 2 and d.desired == desired
        assert (d.hot_target, d.hot_wake, d.hot_release) == (desired - 1, desired - 2, 0)
    finally:
        await m.stop()


def _vllm_exposition(slow_first_tokens: int) -> str:
    """A vLLM exposition whose TTFT histogram holds ``slow_first_tokens`` first tokens of about 1 s."""
    lab = 'engine="0",model_name="llama"'
    lines = [f"vllm:num_requests_running{{{lab}}} 0", f"vllm:num_requests_waiting{{{lab}}} 0",
             "# TYPE vllm:time_to_first_token_seconds histogram"]
    for le in ("0.1", "0.5"):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} 0')
    for le in ("2.5", "+Inf"):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {slow_first_tokens}')
    lines += [f"vllm:time_to_first_token_seconds_count{{{lab}}} {slow_first_tokens}",
              f"vllm:time_to_first_token_seconds_sum{{{lab}}} {slow_first_tokens * 1.0}"]
    return "\n".join(lines) + "\n"


async def test_the_awake_sleepers_slow_first_tokens_are_read_and_scale_the_workload(
        store: RedisStore, fake_engine: Callable[..., FakeEngine]) -> None:
    """The scaler reads the awake sleepers at the URLs the waker publishes (``awake_urls``), as
    production's reader does (scaler/sources.py read_awake_sleepers): a sleeper serving slow first
    tokens raises the count by the TTFT rule, though the own replica reports none."""
    import aiohttp

    from warmscale.scaler.sources import read_awake_sleepers

    sleeper = fake_engine(_vllm_exposition(0))
    url = f"http://{sleeper.target}"
    session = aiohttp.ClientSession()

    async def awake(cfg: ScalerConfig, urls: Sequence[str], now: float) -> tuple[ReplicaReading, ...]:
        return await read_awake_sleepers(session, cfg, urls, now)

    meta = {**META, "ttftSloSeconds": "0.5", "targetInflightPerReplica": "1000"}
    m = TrackerManager(store, ScriptedReader(load=5.0), ScalerMetrics(), DecisionLog(50), instance_id="t",
                       awake=awake)

    async def publish() -> None:
        await store.put_hot_status(HotStatus("llm", "chat", time.time(), asleep=1, awake=1, wake_s={"": 2.2},
                                             awake_load=0.0, awake_urls=[url], awake_pods=["llm/s-0"]))

    try:
        await publish()
        t = m.get("llm", "chat", meta)
        assert (await t.current()).rules.get("ttft") is None
        await asyncio.sleep(0.3)  # the sleeper read at least once (the baseline)
        sleeper.serve(_vllm_exposition(40))

        async def ttft_rule() -> bool:
            await publish()
            return (await t.current()).rules.get("ttft") is not None

        await eventually(ttft_rule)
        assert sleeper.hits >= 2
    finally:
        await m.stop()
        await session.close()
