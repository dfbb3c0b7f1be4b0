"""Length of a gateway queue held in Redis: ``LLEN`` for a list, ``XLEN`` for a stream, ``TYPE`` first
when the type is ``auto``. A missing key is an empty queue (Redis deletes empty lists); an
unreachable server or an unexpected type is *unknown*, never zero.

With ``allows`` (``--allow-targets``), every connection the client makes -- the first one and every
reconnect after a dropped connection, a Redis restart or a DNS change -- resolves the host itself and
dials only resolved addresses the check allows (as the HTTP scrapes do through their socket factory);
none allowed -> the connection fails (``... is outside --allow-targets``) and the queue is unknown."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, ConnectionPool, SSLConnection, parse_url
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from warmscale.signals.model import QueueReading
from warmscale.signals.sources.base import SourceResult

Allows = Callable[[str], bool]
"""Whether an IP address (text) may be dialled."""
Resolve = Callable[[str, int], Awaitable[list[str]]]
"""Addresses (text) of a host name, in the order to try them."""


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def resolve_host(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[str] = []
    for fam, _, _, _, sockaddr in infos:
        if fam in (socket.AF_INET, socket.AF_INET6) and str(sockaddr[0]) not in out:
            out.append(str(sockaddr[0]))
    return out


class _CheckedMixin:
    """Resolves the host on every connect and dials only allowed addresses (TLS still verifies the
    host name: ``server_hostname`` stays the configured host)."""

    host: str
    port: int

    def __init__(self, *, allows: Allows, resolve: Resolve = resolve_host, **kwargs: Any) -> None:
        self._allows = allows
        self._resolve = resolve
        self._dial: str | None = None
        super().__init__(**kwargs)

    async def _connect(self) -> None:
        addresses = await self._resolve(self.host, self.port)
        allowed = [a for a in addresses if self._allows(a)]
        if not allowed:
            shown = ", ".join(addresses) or "no address"
            raise OSError(errno.EACCES, f"{self.host} resolves to {shown}, outside --allow-targets")
        last: OSError | None = None
        for address in allowed:
            self._dial = address
            try:
                await super()._connect()  # type: ignore[misc]
                return
            except OSError as exc:
                last = exc
            finally:
                self._dial = None
        assert last is not None
        raise last

    def _connection_arguments(self) -> Mapping[str, Any]:
        kwargs = dict(super()._connection_arguments())  # type: ignore[misc]
        if self._dial is not None:
            kwargs["host"] = self._dial
            if kwargs.get("ssl") is not None:
                kwargs["server_hostname"] = self.host
        return kwargs


class CheckedConnection(_CheckedMixin, Connection):
    pass


class CheckedSSLConnection(_CheckedMixin, SSLConnection):
    pass


def checked_pool(address: str, allows: Allows, resolve: Resolve = resolve_host, **kwargs: Any) -> ConnectionPool:
    """A connection pool for ``address`` whose every connection is checked with ``allows``; a
    ``unix://`` address cannot be checked and is refused."""
    options: dict[str, Any] = dict(parse_url(address))
    cls = options.pop("connection_class", Connection)
    if cls is SSLConnection:
        checked: type[Connection] = CheckedSSLConnection
    elif cls is Connection:
        checked = CheckedConnection
    else:
        raise ValueError("only redis:// and rediss:// addresses can be checked against --allow-targets")
    return ConnectionPool(connection_class=checked, allows=allows, resolve=resolve, **{**kwargs, **options})


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
        allows: Allows | None = None,
        resolve: Resolve = resolve_host,
    ) -> None:
        if queue_type not in ("auto", "list", "stream"):
            raise ValueError(f"queue_type must be auto, list or stream, not {queue_type!r}")
        self.name = name
        self.queue = queue
        self.queue_type = queue_type
        self._timeout = timeout
        self._owns_client = client is None
        options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                                   "retry": Retry(NoBackoff(), 1)}
        if client is not None:
            self._client = client
        elif allows is not None:
            self._client = aioredis.Redis.from_pool(checked_pool(address, allows, resolve, **options))
        else:
            self._client = aioredis.Redis.from_url(address, **options)
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
