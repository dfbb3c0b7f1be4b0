"""Onset between ticks (scaler/onset.py): the pure rules as a table, and the tracker's fast poll of a
cold workload's Redis queue against a real Redis through the production reader (SourcesReader): a
queue's first request ticks the tracker long before its next regular tick; a poll that cannot read
the queue (Redis down) changes nothing; the endpoint picker's flow-control queue likewise."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio as aioredis

from tests.gateway.test_epp_grpc import (
    FakePicker,
    picker,  # noqa: F401  (the loopback picker fixture)
)
from tests.gateway.test_epp_grpc import meta as epp_meta
from tests.scaler.conftest import eventually
from tests.servers import RedisServer
from warmscale.scaler.cli import SourcesReader
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.onset import ONSET_POLL_SECONDS, is_onset, watch_onset
from warmscale.scaler.store import MemoryStore
from warmscale.scaler.tracker import TrackerManager

# A regular tick every 30 s: an activation within ONSET_BOUND_S can only come from the fast poll.
SLOW_INTERVAL_S = "30"
ONSET_BOUND_S = 5.0


@pytest.mark.parametrize(("active", "hot_target", "queues", "interval", "watch"), [
    (False, None, [0.0], 1.0, True),       # at zero, the queue read empty: poll
    (True, 0, [0.0], 1.0, True),           # serving, a hot tier with no sleeper wanted: poll
    (True, None, [0.0], 1.0, False),       # serving without a hot tier: the tick is enough
    (True, 1, [0.0], 1.0, False),          # a sleeper already wanted awake: no onset to catch
    (False, None, [3.0], 1.0, False),      # the queue already holds work: that onset was seen
    (False, None, [None], 1.0, False),     # unknown is not empty
    (False, None, [0.0, None], 1.0, False),
    (False, None, [], 1.0, False),         # no queue at all
    (False, None, [0.0], ONSET_POLL_SECONDS, False),  # the tick is as fast as the poll
])
def test_watch_onset(active: bool, hot_target: int | None, queues: list[float | None], interval: float,
                     watch: bool) -> None:
    assert watch_onset(active=active, hot_target=hot_target, queues_seen=queues, interval_s=interval) is watch


@pytest.mark.parametrize(("polled", "onset"), [(None, False), (0.0, False), (1.0, True), (0.5, True)])
def test_is_onset(polled: float | None, onset: bool) -> None:
    assert is_onset(polled) is onset


def meta(redis: RedisServer, queue: str) -> dict[str, str]:
    return {"redisAddress": redis.address, "redisQueue": queue, "scaleToZero": "true", "minReplicas": "0",
            "idleWindowSeconds": "0", "maxReplicas": "10", "scrapeIntervalSeconds": SLOW_INTERVAL_S}


async def test_a_cold_queues_first_request_ticks_at_once(redis_server: RedisServer) -> None:
    queue = f"onset:{uuid.uuid4().hex[:8]}"
    reader = SourcesReader()
    metrics = ScalerMetrics()
    m = TrackerManager(MemoryStore(), reader, metrics, DecisionLog(50), instance_id="t", onset=reader.onset)
    r = aioredis.from_url(redis_server.url)
    try:
        tracker = m.get("llm", "chat", meta(redis_server, queue))
        d = await tracker.current()
        assert not d.active and d.desired == 0
        await eventually(lambda: _true(tracker._watch))
        t0 = time.monotonic()
        await r.rpush(queue, b"request")

        async def active() -> bool:
            return (await tracker.current()).active

        await eventually(active, within=ONSET_BOUND_S)
        assert time.monotonic() - t0 < ONSET_BOUND_S  # the regular tick would come after up to 30 s
        assert metrics.onset_ticks._value.get() == 1
        assert not tracker._watch  # active now: no more polling
    finally:
        await m.stop()
        await reader.aclose()
        await r.aclose()


async def test_an_unreadable_queue_ticks_nothing_early() -> None:
    own = RedisServer()  # stopped below: not the session's server
    own.start()
    queue = f"onset:{uuid.uuid4().hex[:8]}"
    reader = SourcesReader()
    metrics = ScalerMetrics()
    m = TrackerManager(MemoryStore(), reader, metrics, DecisionLog(50), instance_id="t", onset=reader.onset)
    try:
        tracker = m.get("llm", "chat", meta(own, queue))
        d = await tracker.current()
        assert not d.active
        await eventually(lambda: _true(tracker._watch))
        own.stop()  # every poll now fails: unknown, never an onset (and never "idle" either)
        await asyncio.sleep(10 * ONSET_POLL_SECONDS)
        assert metrics.onset_ticks._value.get() == 0
        assert tracker.decision is d  # no tick happened: the decision is the one made before
    finally:
        await m.stop()
        await reader.aclose()
        own.close()


async def _true(v: bool) -> bool:
    return v


async def test_the_pickers_first_held_request_ticks_at_once(picker: tuple[FakePicker, str]) -> None:  # noqa: F811
    fake, url = picker
    reader = SourcesReader()
    metrics = ScalerMetrics()
    m = TrackerManager(MemoryStore(), reader, metrics, DecisionLog(50), instance_id="t", onset=reader.onset)
    try:
        tracker = m.get("llm", "chat", {**epp_meta(url, SLOW_INTERVAL_S), "scrapeTimeoutSeconds": "1"})
        d = await tracker.current()
        assert not d.active
        await eventually(lambda: _true(tracker._watch))
        fake.queue = 1  # the picker's flow control holds a request

        async def active() -> bool:
            return (await tracker.current()).active

        await eventually(active, within=ONSET_BOUND_S)
        assert metrics.onset_ticks._value.get() == 1
    finally:
        await m.stop()
        await reader.aclose()
