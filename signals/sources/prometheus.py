"""Per-replica signals and a windowed TTFT from a Prometheus server (its HTTP API, with aiohttp).

Two instant queries per read (see :mod:`signals.promql`), asynchronous: no worker thread, so a
hung or trickling Prometheus costs this source one bounded request at a time (``timeout`` is the
total deadline, body included) and nothing of anyone else's. ScaledObjects asking the same query of
the same server share one request (:class:`~signals.sources.shared.SharedReads`).

When Prometheus can't be queried, every replica seen before is reported *unknown* with the error
(never zero), and the failure is a source error. An empty result (targets down, series stale, no
pods) is *absent* data: unknown, never idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

from warmscale.signals import promql
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import ReplicaReading
from warmscale.signals.sources.base import SourceResult
from warmscale.signals.sources.shared import SharedReads

# A query result larger than this is refused (a Prometheus answer for one ScaledObject is a few kB).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class PrometheusError(Exception):
    """The query failed (HTTP, timeout, size, an ``error`` status, an unreadable body)."""


async def query(session: aiohttp.ClientSession, address: str, promql_text: str, *, timeout_s: float,
                max_bytes: int = MAX_RESPONSE_BYTES) -> list[dict[str, Any]]:
    """``GET /api/v1/query``; the ``result`` list. ``timeout_s`` bounds the whole request, body included."""
    timeout = timeout_s
    from warmscale.signals.sources.scrape import ScrapeError, fetch_payload

    url = f"{address.rstrip('/')}/api/v1/query?" + urlencode({"query": promql_text, "timeout": f"{timeout:g}s"})
    try:
        body = await fetch_payload(session, url, timeout_s=timeout, max_bytes=max_bytes, accept="application/json",
                                   ok=(200, 400, 422, 503))
    except ScrapeError as exc:
        raise PrometheusError(str(exc)) from None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PrometheusError(f"unreadable answer: {exc}") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise PrometheusError(f"query failed: {str(err or body[:200])[:300]}")
    data = doc.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise PrometheusError("answer without data.result")
    return result


class PrometheusSource:
    def __init__(
        self,
        address: str,
        *,
        engine: str = "auto",
        selector: str = "",
        ttft_window_seconds: float = 60.0,
        itl_window_seconds: float | None = None,
        timeout: float = 2.0,
        replicas: bool = True,
        forget_after_seconds: float = 30.0,
        session: aiohttp.ClientSession | None = None,
        shared: SharedReads | None = None,
        wait: float | None = None,
        fresh_for: float = 0.0,
        name: str = "prometheus",
    ) -> None:
        self.name = name
        self.address = address
        self.engine = engine
        self._timeout = timeout
        self._wait = min(timeout, wait) if wait is not None else timeout
        self._session = session
        self._owns_session = session is None
        self._shared = shared if shared is not None else SharedReads()
        self._fresh_for = fresh_for
        self._with_replicas = replicas
        self.provides_replicas = replicas
        self.replica_query = promql.replica_query(engine, selector)
        self.ttft_query = promql.ttft_window_query(engine, ttft_window_seconds, selector)
        self._ttft_scale = promql.ttft_scale(engine)
        # The inter-token latency window only when asked for (itlSloSeconds): one more query per poll.
        self.itl_query = (promql.itl_window_query(engine, itl_window_seconds, selector)
                          if itl_window_seconds is not None else None)
        self._forget_after = forget_after_seconds
        self._last_seen: dict[str, float] = {}

    async def _run(self, text: str) -> list[dict[str, Any]]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        session = self._session

        def fetch() -> Awaitable[list[dict[str, Any]]]:
            return query(session, self.address, text, timeout_s=self._timeout)

        result: list[dict[str, Any]] = await self._shared.get(("prometheus", self.address, text, self._timeout), fetch,
                                                              wait=self._wait, fresh_for=self._fresh_for)
        return result

    async def read(self, now: float) -> SourceResult:
        jobs: list[asyncio.Future[list[dict[str, Any]]]] = []
        if self._with_replicas:
            jobs.append(asyncio.ensure_future(self._run(self.replica_query)))
        if self.ttft_query is not None:
            jobs.append(asyncio.ensure_future(self._run(self.ttft_query)))
        if self.itl_query is not None:
            jobs.append(asyncio.ensure_future(self._run(self.itl_query)))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        errors: list[str] = []
        replicas: tuple[ReplicaReading, ...] = ()
        ttft: Histogram | None = None
        i = 0
        if self._with_replicas:
            res = results[i]
            i += 1
            if isinstance(res, BaseException):
                err = self._describe(res)
                errors.append(err)
                replicas = tuple(ReplicaReading(r, now, None, err) for r in self._remembered(now))
            else:
                replicas = self._with_vanished(promql.decode_replicas(res, now), now)
        if self.ttft_query is not None:
            res = results[i]
            i += 1
            if isinstance(res, BaseException):
                if not errors:
                    errors.append(self._describe(res))
            else:
                ttft = promql.decode_ttft_window(res, self._ttft_scale)
        itl: Histogram | None = None
        if self.itl_query is not None:
            res = results[i]
            if isinstance(res, BaseException):
                if not errors:
                    errors.append(self._describe(res))
            else:
                itl = promql.decode_ttft_window(res)
        absent = self._with_replicas and not replicas
        return SourceResult(replicas=replicas, ttft_window=ttft, itl_window=itl, errors=tuple(errors), absent=absent)

    def _remembered(self, now: float) -> list[str]:
        self._last_seen = {r: t for r, t in self._last_seen.items() if now - t <= self._forget_after}
        return sorted(self._last_seen)

    def _with_vanished(self, readings: tuple[ReplicaReading, ...], now: float) -> tuple[ReplicaReading, ...]:
        """A replica that drops out of the results (target down: Prometheus marks its series stale) stays
        *unknown* for ``forget_after_seconds`` instead of silently leaving the sum."""
        present = {r.replica for r in readings}
        for r in present:
            self._last_seen[r] = now
        vanished = tuple(
            ReplicaReading(r, now, None, "absent from Prometheus (target down or series stale)")
            for r in self._remembered(now)
            if r not in present
        )
        return readings + vanished

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"prometheus {self.address}: no answer within {self._wait:g}s"
        return f"prometheus {self.address}: {type(exc).__name__}: {str(exc)[:300]}"

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None
