"""Per-replica signals and a windowed TTFT from a Prometheus server (prometheus-api-client).

prometheus-api-client is synchronous (requests), so each query runs in a worker thread. Two queries
per read (see :mod:`signals.promql`). When Prometheus can't be queried, every replica seen before is
reported *unknown* with the error (never zero), and the failure is a source error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from signals import promql
from signals.histogram import Histogram
from signals.model import ReplicaReading
from signals.sources.base import SourceResult

QueryFn = Callable[[str, float], list[dict[str, Any]]]


def connect(address: str, timeout: float) -> PrometheusConnect:
    """A client that fails fast (no retries) so a dead server costs one timeout, not a backoff series."""
    return PrometheusConnect(url=address.rstrip("/"), disable_ssl=False, retry=Retry(total=0), timeout=timeout)


class PrometheusSource:
    def __init__(
        self,
        address: str,
        *,
        engine: str = "auto",
        selector: str = "",
        ttft_window_seconds: float = 60.0,
        timeout: float = 2.0,
        replicas: bool = True,
        forget_after_seconds: float = 30.0,
        client: PrometheusConnect | None = None,
        name: str = "prometheus",
    ) -> None:
        self.name = name
        self.address = address
        self.engine = engine
        self._timeout = timeout
        self._client = client or connect(address, timeout)
        self._with_replicas = replicas
        self.replica_query = promql.replica_query(engine, selector)
        self.ttft_query = promql.ttft_window_query(engine, ttft_window_seconds, selector)
        self._ttft_scale = promql.ttft_scale(engine)
        self._forget_after = forget_after_seconds
        self._last_seen: dict[str, float] = {}

    def _query(self, query: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._client.custom_query(
            query, params={"timeout": f"{self._timeout:g}s"}, timeout=self._timeout
        )
        return result

    async def _run(self, query: str) -> list[dict[str, Any]]:
        async with asyncio.timeout(self._timeout + 0.5):
            return await asyncio.to_thread(self._query, query)

    async def read(self, now: float) -> SourceResult:
        jobs: list[asyncio.Future[list[dict[str, Any]]]] = []
        if self._with_replicas:
            jobs.append(asyncio.ensure_future(self._run(self.replica_query)))
        if self.ttft_query is not None:
            jobs.append(asyncio.ensure_future(self._run(self.ttft_query)))
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
            if isinstance(res, BaseException):
                if not errors:
                    errors.append(self._describe(res))
            else:
                ttft = promql.decode_ttft_window(res, self._ttft_scale)
        return SourceResult(replicas=replicas, ttft_window=ttft, errors=tuple(errors))

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
            return f"prometheus {self.address}: timed out after {self._timeout:g}s"
        return f"prometheus {self.address}: {type(exc).__name__}: {str(exc)[:300]}"

    async def aclose(self) -> None:
        session = getattr(self._client, "_session", None)
        if session is not None:
            await asyncio.to_thread(session.close)
