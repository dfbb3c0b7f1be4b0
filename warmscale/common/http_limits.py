"""Bounded HTTP(S) listeners for the controller's webhook and metrics ports (shell).

aiohttp's own site holds a connection as long as the client keeps it open: a TLS handshake gets
asyncio's 60 s, a connection that never completes its request aiohttp's keep-alive of an hour, and
nothing caps their number (3,000 slow TLS clients took the controller from 48 to 874 MiB of its 1 GiB).
:class:`BoundedSite` serves an :class:`aiohttp.web.AppRunner` with:

* at most ``max_connections`` open connections (handshakes included): one more is closed at once;
* a TLS handshake deadline (``handshake_timeout_s``);
* a deadline for a request's headers, and for an idle keep-alive connection (``idle_timeout_s``,
  given to aiohttp as its keep-alive timeout, which it also applies from the connection's start);
* a deadline for reading a request's body (``body_timeout_s``, :func:`read_body`).

Every refused or timed-out connection is counted (``warmscale_http_connections_refused_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

log = logging.getLogger("warmscale.warmpool.http")


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-listener bounds. The defaults fit the webhook: the API server calls it with a 3 s timeout
    (``timeoutSeconds`` of the configuration) over a few kept-alive connections per API server."""

    max_connections: int = 256  # a few per API server replica; 256 slow clients cost ~75 MiB (measured 0.29 MiB each)
    handshake_timeout_s: float = 5.0  # a TLS handshake on loopback/cluster network takes milliseconds
    idle_timeout_s: float = 15.0  # headers of a request, or the wait for the next one on a kept-alive connection
    body_timeout_s: float = 5.0  # the API server gives up on the webhook after 3 s anyway
    backlog: int = 128  # listen(2) queue, aiohttp's default


# The metrics port: Prometheus scrapes it with one connection per scrape interval.
METRICS_LIMITS = ConnectionLimits(max_connections=32)


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.refused = Counter("warmscale_http_connections_refused_total",
                               "Connections closed by the listener's bounds (reason: limit, handshake)",
                               ["server", "reason"], registry=self.registry)
        self.open = Gauge("warmscale_http_connections_open", "Open connections (handshakes included)",
                          ["server"], registry=self.registry)


class _Counted(asyncio.Protocol):
    """Delegates to aiohttp's request handler and reports when the connection is gone."""

    def __init__(self, inner: Any, release: Callable[[], None]) -> None:
        self.inner, self.release = inner, release

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.inner.connection_lost(exc)
        finally:
            self.release()


class BoundedSite(web.BaseSite):
    """An aiohttp site with the bounds of :class:`ConnectionLimits` (see the module docstring).

    The runner must be made with ``keepalive_timeout=limits.idle_timeout_s`` (:func:`make_runner`)."""

    __slots__ = (
        "_accept",
        "_active",
        "_bound",
        "_host",
        "_limits",
        "_metrics",
        "_name",
        "_port",
        "_sock",
        "_tasks",
    )

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                 limits: ConnectionLimits = ConnectionLimits(), name: str = "webhook",
                 metrics: HttpMetrics | None = None) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=limits.backlog)
        self._host, self._port, self._bound = host, port, port
        self._limits, self._name = limits, name
        self._metrics = metrics or HttpMetrics()
        self._active = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._accept: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._bound}"

    @property
    def port(self) -> int:
        return self._bound

    @property
    def active(self) -> int:
        """Open connections, handshakes included."""
        return self._active

    async def start(self) -> None:
        await super().start()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.create_server((self._host, self._port), family=family, backlog=self._limits.backlog)
        sock.setblocking(False)
        self._sock, self._bound = sock, int(sock.getsockname()[1])
        self._accept = asyncio.create_task(self._accept_loop(sock), name=f"{self._name}-accept")

    async def stop(self) -> None:
        if self._accept is not None:
            self._accept.cancel()
            await asyncio.gather(self._accept, return_exceptions=True)
            self._accept = None
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        await super().stop()

    def _release(self) -> None:
        self._active -= 1
        self._metrics.open.labels(self._name).set(self._active)

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: back off, keep listening
                log.warning("accept failed", extra={"server": self._name, "error": str(exc)[:200]})
                await asyncio.sleep(0.1)
                continue
            if self._active >= self._limits.max_connections:
                self._metrics.refused.labels(self._name, "limit").inc()
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, no TIME_WAIT
                conn.close()
                continue
            self._active += 1
            self._metrics.open.labels(self._name).set(self._active)
            task = asyncio.create_task(self._start_connection(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_connection(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release()

        proto = _Counted(server(), release)
        kwargs: dict[str, Any] = {}
        if self._ssl_context is not None:
            kwargs = {"ssl": self._ssl_context, "ssl_handshake_timeout": self._limits.handshake_timeout_s}
        try:
            await loop.connect_accepted_socket(lambda: proto, conn, **kwargs)
        except asyncio.CancelledError:
            conn.close()
            release()
            raise
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:  # the handshake failed or timed out
            self._metrics.refused.labels(self._name, "handshake").inc()
            log.debug("handshake failed", extra={"server": self._name, "error": str(exc)[:200]})
            conn.close()
            release()


def make_runner(app: web.Application, limits: ConnectionLimits) -> web.AppRunner:
    """An AppRunner whose connections close after ``idle_timeout_s`` without a complete request."""
    return web.AppRunner(app, access_log=None, keepalive_timeout=limits.idle_timeout_s)


class BodyTooLarge(Exception):
    """The body is over the limit; ``prefix`` holds its first bytes."""

    def __init__(self, prefix: bytes) -> None:
        super().__init__(f"request body over {len(prefix) - 1} bytes")
        self.prefix = prefix


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The request's body, read within ``timeout_s``; raises :class:`BodyTooLarge` past ``limit`` bytes
    (without reading the rest) and TimeoutError when the client is too slow."""
    chunks: list[bytes] = []
    size = 0
    async with asyncio.timeout(timeout_s):
        while size <= limit:
            chunk = await request.content.read(min(65536, limit + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
    raise BodyTooLarge(b"".join(chunks))


async def serve_metrics(registry: CollectorRegistry, host: str, port: int,
                        limits: ConnectionLimits = METRICS_LIMITS,
                        metrics: HttpMetrics | None = None) -> tuple[web.AppRunner, int]:
    """``/metrics`` of ``registry`` and ``/healthz`` over plain HTTP under ``limits``; returns the runner and
    the bound port."""
    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

    async def handler(_request: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", handler)
    app.router.add_get("/", handler)  # prometheus_client's server answered any path with the metrics
    app.router.add_get("/healthz", healthz)  # the Deployment's liveness probe (manifests/base/controller.yaml)
    runner = make_runner(app, limits)
    await runner.setup()
    site = BoundedSite(runner, host, port, limits=limits, name="metrics", metrics=metrics)
    await site.start()
    return runner, site.port
