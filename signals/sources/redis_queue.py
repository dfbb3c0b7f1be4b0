"""Length of a gateway queue held in Redis: ``LLEN`` for a list, ``XLEN`` for a stream, ``TYPE`` first
when the type is ``auto``. A missing key is an empty queue (Redis deletes empty lists); an
unreachable server or an unexpected type is *unknown*, never zero."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from signals.model import QueueReading
from signals.sources.base import SourceResult


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisQueueSource:
    def __init__(
        self,
        address: str,
        queue: str,
        queue_type: str = "auto",
        *,
        timeout: float = 2.0,
        client: aioredis.Redis | None = None,
        name: str = "redis",
    ) -> None:
        if queue_type not in ("auto", "list", "stream"):
            raise ValueError(f"queue_type must be auto, list or stream, not {queue_type!r}")
        self.name = name
        self.queue = queue
        self.queue_type = queue_type
        self._timeout = timeout
        self._owns_client = client is None
        self._client: aioredis.Redis = client or aioredis.Redis.from_url(
            address,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
        )

    async def length(self) -> float:
        """The queue length; raises on any Redis problem or an unsupported key type."""
        kind = self.queue_type
        if kind == "auto":
            kind = _text(await self._client.type(self.queue))
        if kind == "none":
            return 0.0
        if kind == "list":
            return float(await self._client.llen(self.queue))
        if kind == "stream":
            return float(await self._client.xlen(self.queue))
        raise TypeError(f"key {self.queue!r} is a Redis {kind}, not a list or stream")

    async def read(self, now: float) -> SourceResult:
        try:
            async with asyncio.timeout(self._timeout):
                n = await self.length()
        except TimeoutError:
            err = f"redis queue {self.queue!r}: timed out after {self._timeout:g}s"
        except (RedisError, OSError, TypeError) as exc:
            err = f"redis queue {self.queue!r}: {type(exc).__name__}: {exc}"
        else:
            return SourceResult(queues=(QueueReading(self.queue, now, n),))
        return SourceResult(queues=(QueueReading(self.queue, now, None, err),))

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
