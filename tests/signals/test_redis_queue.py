"""Gateway queue length from a real redis-server (list, stream, auto, missing key, wrong type,
unreachable, restart)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from tests.servers import RedisServer, free_port
from warmscale.scaler.config import parse_metadata
from warmscale.scaler.sources import build_collector
from warmscale.signals.sources.redis_queue import RedisQueueSource

pytestmark = pytest.mark.servers


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_server.url)
    yield c
    await c.aclose()


def key(kind: str) -> str:
    return f"warmscale-test:{kind}:{uuid.uuid4().hex[:8]}"


async def read(url: str, queue: str, queue_type: str = "auto") -> tuple[float | None, str | None]:
    src = RedisQueueSource(url, queue, queue_type, timeout=1.0)
    try:
        res = await src.read(42.0)
    finally:
        await src.aclose()
    (q,) = res.queues
    assert q.name == queue and q.observed_at == 42.0
    return q.length, q.error


@pytest.mark.parametrize("queue_type", ["list", "auto"])
async def test_list(redis_server: RedisServer, client: aioredis.Redis, queue_type: str) -> None:
    k = key("list")
    await client.rpush(k, *[f"req-{i}" for i in range(7)])
    assert await read(redis_server.url, k, queue_type) == (7.0, None)


@pytest.mark.parametrize("queue_type", ["stream", "auto"])
async def test_stream(redis_server: RedisServer, client: aioredis.Redis, queue_type: str) -> None:
    k = key("stream")
    for i in range(4):
        await client.xadd(k, {"prompt": f"p{i}"})
    assert await read(redis_server.url, k, queue_type) == (4.0, None)


async def test_missing_key_is_an_empty_queue(redis_server: RedisServer) -> None:
    assert await read(redis_server.url, key("none")) == (0.0, None)


async def test_unsupported_type_is_unknown(redis_server: RedisServer, client: aioredis.Redis) -> None:
    k = key("hash")
    await client.hset(k, "a", "1")
    length, error = await read(redis_server.url, k)
    assert length is None and "hash" in (error or "")


async def test_declared_type_mismatch_is_unknown(redis_server: RedisServer, client: aioredis.Redis) -> None:
    k = key("stream")
    await client.xadd(k, {"x": "1"})
    length, error = await read(redis_server.url, k, "list")
    assert length is None and "WRONGTYPE" in (error or "")


async def test_unreachable_is_unknown_never_zero() -> None:
    length, error = await read(f"redis://127.0.0.1:{free_port()}", "q")
    assert length is None and error and "ConnectionError" in error


async def test_survives_a_server_restart(redis_server: RedisServer, client: aioredis.Redis) -> None:
    k = key("list")
    await client.rpush(k, "a", "b")
    src = RedisQueueSource(redis_server.url, k, timeout=1.0)
    try:
        assert (await src.read(1.0)).queues[0].length == 2
        redis_server.restart()  # AOF keeps the queue
        for _ in range(3):  # the pooled connection died with the old process; a later read reconnects
            q = (await src.read(2.0)).queues[0]
            if q.length is not None:
                break
        assert q.length == 2
    finally:
        await src.aclose()


async def test_collector_reads_the_gateway_queue(redis_server: RedisServer, client: aioredis.Redis) -> None:
    k = key("list")
    await client.rpush(k, "a", "b", "c")
    cfg = parse_metadata({"redisAddress": redis_server.address, "redisQueue": k})
    collector = build_collector(cfg, session=None)  # type: ignore[arg-type]  # no HTTP source configured
    try:
        snap = await collector.collect(now=5.0)
    finally:
        await collector.aclose()
    assert [(q.name, q.length) for q in snap.queues] == [(k, 3.0)]
    assert snap.replicas == () and snap.source_errors == ()


def test_checked_connections_refuse_unix_sockets_and_keep_the_tls_host_name() -> None:
    from redis.asyncio.connection import SSLConnection

    from warmscale.signals.sources.redis_queue import CheckedSSLConnection, checked_pool

    with pytest.raises(ValueError, match="allow-targets"):
        checked_pool("unix:///tmp/redis.sock", lambda _: True)
    pool = checked_pool("rediss://cache.example:6380/2", lambda _: True)
    assert pool.connection_class is CheckedSSLConnection and issubclass(CheckedSSLConnection, SSLConnection)
    conn = pool.make_connection()
    assert isinstance(conn, CheckedSSLConnection)
    conn._dial = "127.0.0.1"  # what _connect sets while dialling one checked address
    args = conn._connection_arguments()
    assert args["host"] == "127.0.0.1" and args["server_hostname"] == "cache.example" and args["port"] == 6380
