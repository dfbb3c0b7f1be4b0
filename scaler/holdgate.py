"""The hold gateway: scale from zero without a 503 (issue 23, req 3; docs/hot-tier.md, "Scale from zero").

An HTTP front for one workload's OpenAI-style routes (``/v1/completions``, ``/v1/chat/completions``).
A request with a routable backend (scaler/holdroute.py: the workload's own ready replicas, then its
awake, canary-passed sleepers from the hot status in the store) is sent to it at once. A request
without one is **held**:

- a token goes onto the workload's queue, a Redis list the ScaledObject names as ``redisQueue``:
  that is the onset the scaler sees (between ticks, scaler/onset.py), so the scaler wakes a sleeper
  (the wake intent) and KEDA's ``StreamIsActive`` fires;
- the gateway reads the hot status every HOLD_POLL_SECONDS while it holds anything, and sends the
  held requests to the first backend that appears; the token leaves the queue when its request
  leaves the hold (answered, timed out or cancelled);
- the queue key expires HOLD_QUEUE_TTL_SECONDS after the gateway last refreshed it, so a gateway
  that dies with requests held does not leave the scaler seeing demand forever.

A backend that answers 503 (it went to sleep meanwhile: a release raced the request) is skipped
and the request is held again. A streamed answer (``"stream": true``: server-sent events, or any
``text/event-stream`` response) is passed through chunk by chunk as the backend sends it, never
buffered; a 503 before its first byte still holds the request again, and a backend that fails
mid-stream cuts the client's connection there (its bytes are already sent: it cannot be retried).
A request held HOLD_MAX_SECONDS gets 504; beyond HOLD_MAX_REQUESTS held at once, 429 with
Retry-After; never a 503. An unreachable store or Redis is unknown: the held requests stay held (the own
replicas are still routed) and the error is logged; nothing is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web
from redis.exceptions import RedisError

from warmscale.scaler.holdroute import (
    HOLD_FULL_RETRY_AFTER_S,
    HOLD_MAX_BODY_BYTES,
    HOLD_MAX_REQUESTS,
    HOLD_MAX_SECONDS,
    Backends,
    backends,
    pick,
)
from warmscale.scaler.hot_status import HotStatus
from warmscale.scaler.store import Store, StoreError

log = logging.getLogger("warmscale.holdgate")

# The hot status read while requests are held: an awake sleeper is routed within this of being
# published (the waker publishes it the moment its canary passes). 20 Redis GETs/s per gateway, only
# while something is held.
HOLD_POLL_SECONDS = 0.05
# The hot status read while nothing is held (the routing of the next request; a miss only holds it).
IDLE_POLL_SECONDS = 1.0
# The queue key's expiry, refreshed at every poll while requests are held (see the module's docstring).
HOLD_QUEUE_TTL_SECONDS = 10
# Bound on one Redis or store call of the gateway (a hung Redis never stalls the hold loop).
CALL_SECONDS = 1.0
ROUTES = ("/v1/completions", "/v1/chat/completions")
# Request headers passed on to the backend (the body's type, the caller's credentials, what it accepts).
FORWARDED_HEADERS = frozenset({"content-type", "authorization", "accept"})
# The content type of a streamed completion (OpenAI-style server-sent events).
EVENT_STREAM = "text/event-stream"


class HoldGateway:
    def __init__(self, store: Store, queue: aioredis.Redis, queue_key: str, namespace: str, name: str,
                 session: aiohttp.ClientSession, *, own: Callable[[], Sequence[str]] = lambda: (),
                 clock: Callable[[], float] = time.time, max_seconds: float = HOLD_MAX_SECONDS,
                 max_requests: int = HOLD_MAX_REQUESTS) -> None:
        self.store = store
        self.queue = queue
        self.queue_key = queue_key
        self.namespace = namespace
        self.name = name
        self.session = session
        self.own = own  # the workload's own ready replicas (base URLs), e.g. from pod discovery
        self.clock = clock
        self.max_seconds = max_seconds
        self.max_requests = max_requests
        self.held = 0
        self.in_flight: dict[str, int] = {}
        self.answered: dict[int, int] = {}  # by status, for tests and the log
        self._hot: HotStatus | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._skip: set[str] = set()  # backends that answered 503 since the last status read
        self._unreachable: set[str] = set()  # logged once until they answer again
        self.started = False  # the first hot-status read is done (readiness)
        self.draining = False  # SIGTERM: not ready any more; what is held or in flight finishes

    # -- shell ----------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=HOLD_MAX_BODY_BYTES)
        for route in ROUTES:
            app.router.add_post(route, self.handle)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def healthz(self, _request: web.Request) -> web.Response:
        """Alive: the event loop answers (a store or Redis outage is not a reason to restart it)."""
        return web.json_response({"status": "ok", "held": self.held, "in_flight": sum(self.in_flight.values())})

    async def readyz(self, _request: web.Request) -> web.Response:
        """Ready once the first hot status was read (or found unreadable), until SIGTERM (draining)."""
        ready = self.started and not self.draining
        body = {"ready": ready, "draining": self.draining, "held": self.held,
                "backends": len(self.routable().urls)}
        return web.json_response(body, status=200 if ready else 503)

    async def _start(self, _app: web.Application) -> None:
        await self._read_status()
        self.started = True
        self._task = asyncio.create_task(self._poll(), name=f"holdgate {self.namespace}/{self.name}")

    async def _stop(self, _app: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read_status(self) -> None:
        try:
            async with asyncio.timeout(CALL_SECONDS):
                self._hot = await self.store.get_hot_status(self.namespace, self.name)
            self._skip.clear()
        except (StoreError, TimeoutError) as exc:  # unknown: keep the last one (holdroute ages it out)
            log.warning("hot status unreadable", extra={"workload": f"{self.namespace}/{self.name}",
                                                        "error": str(exc)})
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    def notify(self) -> None:
        """The own replicas changed (a discovery calls this): the held requests look for a backend now."""
        self._wake_waiters()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(HOLD_POLL_SECONDS if self.held else IDLE_POLL_SECONDS)
            await self._read_status()
            if self.held:
                await self._redis("refresh", self.queue.expire(self.queue_key, HOLD_QUEUE_TTL_SECONDS))

    async def _redis(self, op: str, aw: Any) -> None:
        try:
            async with asyncio.timeout(CALL_SECONDS):
                await aw
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("gateway queue unavailable", extra={"queue": self.queue_key, "op": op, "error": str(exc)})

    def routable(self) -> Backends:
        b = backends(list(self.own()), self._hot, self.clock())
        return Backends(tuple(u for u in b.urls if u not in self._skip), b.sleepers)

    # -- a request ------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        start = time.monotonic()
        deadline = start + self.max_seconds
        token: str | None = None
        try:
            while True:
                url = pick(self.routable().urls, self.in_flight)
                if url is not None:
                    answer = await self._send(url, request, body)
                    if answer is not None:
                        return answer
                    self._skip.add(url)  # asleep again (503): hold until the next status
                    continue
                if token is None:
                    if self.held >= self.max_requests:
                        retry = {"Retry-After": str(HOLD_FULL_RETRY_AFTER_S)}
                        return self._done(web.Response(status=429, headers=retry,
                                                       text="too many requests held while the workload wakes\n"))
                    token = uuid.uuid4().hex
                    self.held += 1
                    await self._hold(token)
                left = deadline - time.monotonic()
                if left <= 0:
                    return self._done(web.Response(status=504, text=f"no backend within {self.max_seconds:g} s\n"))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
        finally:
            if token is not None:
                self.held -= 1
                await self._redis("release", self.queue.lrem(self.queue_key, 1, token))
                log.info("held request left the hold", extra={
                    "workload": f"{self.namespace}/{self.name}", "path": request.path,
                    "held_s": round(time.monotonic() - start, 3), "held": self.held})

    async def _hold(self, token: str) -> None:
        async def push() -> None:
            async with self.queue.pipeline(transaction=True) as p:
                p.rpush(self.queue_key, token)
                p.expire(self.queue_key, HOLD_QUEUE_TTL_SECONDS)
                await p.execute()

        await self._redis("hold", push())

    async def _send(self, url: str, request: web.Request, body: bytes) -> web.StreamResponse | None:
        """The backend's answer (a stream already sent), or None when it answered 503 or could not be
        reached before its first byte (try another)."""
        self.in_flight[url] = self.in_flight.get(url, 0) + 1
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
            async with self.session.post(url + request.path, data=body, headers=headers) as resp:
                self._unreachable.discard(url)
                if resp.status == 503:
                    await resp.read()
                    return None
                if resp.content_type == EVENT_STREAM:
                    return await self._stream(url, request, resp)
                data = await resp.read()
                return self._done(web.Response(status=resp.status, body=data,
                                               content_type=resp.content_type or "application/json"))
        except (aiohttp.ClientError, OSError) as exc:
            if url not in self._unreachable:  # retried at every status read while held: log it once
                self._unreachable.add(url)
                log.warning("backend unreachable", extra={"backend": url, "error": str(exc)})
            return None
        finally:
            self.in_flight[url] -= 1

    async def _stream(self, url: str, request: web.Request, resp: aiohttp.ClientResponse) -> web.StreamResponse:
        """Pass a streamed answer through chunk by chunk, as the backend sends it."""
        out = web.StreamResponse(status=resp.status, headers={"Content-Type": resp.headers.get(
            "Content-Type", EVENT_STREAM), "Cache-Control": "no-cache"})
        self._done(out)
        try:
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
        except (aiohttp.ClientError, OSError) as exc:
            # The backend or the client went away mid-stream: the bytes sent cannot be taken back (no
            # retry). The client's connection is cut, not ended cleanly, so that it sees a broken
            # stream rather than a short one.
            log.warning("stream ended early", extra={"backend": url, "error": str(exc)})
            if request.transport is not None:
                request.transport.abort()
            return out
        await out.write_eof()
        return out

    def _done(self, resp: web.StreamResponse) -> web.StreamResponse:
        self.answered[resp.status] = self.answered.get(resp.status, 0) + 1
        return resp
