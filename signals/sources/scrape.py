"""Direct scraping of engine ``/metrics`` endpoints with aiohttp (concurrent, timed, size-capped).

A refused, hanging, trickling, failing or oversized endpoint, or a payload that doesn't parse (a
duplicated series included), yields an *unknown* :class:`~signals.model.ReplicaReading` carrying the
error, never a zero. Every replica is bounded on its own: connect, headers, body and parsing share one
total deadline (``timeout``), and the source waits at most ``wait`` seconds for any replica, so one
hung replica is unknown for that decision while the others are read on time (see
:mod:`signals.sources.shared`: the late fetch goes on and serves the next decision).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import aiohttp

from warmscale.signals.engines import parse_payload
from warmscale.signals.model import ReplicaReading, ReplicaSignal
from warmscale.signals.parsing import PayloadError
from warmscale.signals.sources.base import Endpoint, EndpointProvider, SourceResult
from warmscale.signals.sources.budget import Budget, BudgetExceeded, Charge, LineCounter
from warmscale.signals.sources.shared import SharedReads

ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
_CHUNK = 64 * 1024

ParseFn = Callable[[str, str, int, str], Awaitable[ReplicaSignal]]
"""``await parse(text, engine, max_bytes, selector)``: parse one payload, keeping the series that match
``selector`` (``seriesSelector``; "" keeps all), inline or in a worker process
(:class:`signals.sources.parsepool.ParsePool`); raises :class:`~signals.parsing.PayloadError`."""


async def parse_inline(text: str, engine: str, max_bytes: int, selector: str = "") -> ReplicaSignal:
    return parse_payload(text, engine, max_bytes=max_bytes, selector=selector)


class ScrapeError(Exception):
    """The endpoint could not be read (connection, timeout, HTTP status, size cap)."""


async def fetch_payload(session: aiohttp.ClientSession, url: str, *, timeout_s: float, max_bytes: int,
                        accept: str = ACCEPT, ok: tuple[int, ...] = (200,), charge: Charge | None = None) -> str:
    """GET ``url`` and return its body; stop reading (and fail) past ``max_bytes``. ``timeout_s`` is
    the total deadline: connection, headers and the whole body (a trickling one too). With a
    ``charge`` (:mod:`signals.sources.budget`), every chunk is held against its budgets first: past
    one, reading stops and fails (the caller releases the charge)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url, headers={"Accept": accept}, allow_redirects=False) as resp:
                if resp.status not in ok:
                    raise ScrapeError(f"HTTP {resp.status} {resp.reason or ''}".strip())
                declared = resp.content_length
                if declared is not None and declared > max_bytes:
                    raise ScrapeError(f"payload of {declared} bytes exceeds the {max_bytes}-byte cap")
                body = bytearray()
                lines = LineCounter()
                while True:
                    chunk = await resp.content.read(_CHUNK)
                    if not chunk:
                        break
                    if charge is not None:
                        # (charged as it arrives: about what the text holds once decoded)
                        charge.add(nbytes=len(chunk), nseries=lines.feed(chunk))
                    body += chunk
                    if len(body) > max_bytes:
                        raise ScrapeError(f"payload exceeds the {max_bytes}-byte cap (aborted reading)")
                charset = resp.charset or "utf-8"
    except TimeoutError:
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except BudgetExceeded as exc:
        raise ScrapeError(f"{exc} (aborted reading)") from None
    except aiohttp.ClientError as exc:
        raise ScrapeError(f"{type(exc).__name__}: {exc}") from None
    except OSError as exc:
        raise ScrapeError(f"{type(exc).__name__}: {exc}") from None
    try:
        return body.decode(charset)  # (no intermediate bytes copy of a large body)
    except (LookupError, UnicodeDecodeError) as exc:
        raise ScrapeError(f"undecodable payload: {exc}") from None


async def scrape_endpoint(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    now: float,
    *,
    budgets: Sequence[Budget] = (),
    engine: str = "auto",
    timeout_s: float = 2.0,
    max_bytes: int = 4 * 1024 * 1024,
    parse: ParseFn | None = None,
    selector: str = "",
) -> ReplicaReading:
    """Scrape and parse one endpoint into a reading observed at ``now`` (unknown on any failure).
    ``timeout_s`` bounds the whole: connection, body (a trickling one too) and parsing. The payload's
    bytes and series are held against ``budgets`` until its parse ended; past one, it is not parsed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    charge = Charge(budgets)
    try:
        text = await fetch_payload(session, endpoint.url, timeout_s=timeout_s, max_bytes=max_bytes, charge=charge)
        try:
            async with asyncio.timeout_at(deadline):
                signal = await (parse or parse_inline)(text, engine, max_bytes, selector)
        except TimeoutError:
            raise ScrapeError(f"timed out after {timeout_s:g}s (parsing)") from None
    except ScrapeError as exc:
        return ReplicaReading(endpoint.replica, now, None, f"scrape {endpoint.url}: {exc}")
    except PayloadError as exc:
        return ReplicaReading(endpoint.replica, now, None, f"payload {endpoint.url}: {exc}")
    finally:
        charge.release()
    return ReplicaReading(endpoint.replica, now, signal)


class ScrapeSource:
    """Scrapes every endpoint of ``provider`` concurrently through one shared ``session``.

    ``timeout`` bounds each replica's fetch and parse; ``wait`` (default ``timeout``) is how long
    :meth:`read` waits for any replica before reporting it unknown for this read. With a ``shared``
    :class:`SharedReads` (one per process), ScaledObjects scraping the same URL share one fetch,
    and a result younger than ``fresh_for`` seconds is reused."""

    provides_replicas = True

    def __init__(
        self,
        provider: EndpointProvider,
        session: aiohttp.ClientSession,
        *,
        engine: str = "auto",
        timeout: float = 2.0,
        max_payload_bytes: int = 4 * 1024 * 1024,
        budgets: Sequence[Budget] = (),
        name: str = "endpoints",
        wait: float | None = None,
        shared: SharedReads | None = None,
        fresh_for: float = 0.0,
        parse: ParseFn | None = None,
        selector: str = "",
    ) -> None:
        self.name = name
        self._selector = selector
        self._provider = provider
        self._session = session
        self._engine = engine
        self._timeout = timeout
        self._wait = min(timeout, wait) if wait is not None else timeout
        self._max_bytes = max_payload_bytes
        self._shared = shared if shared is not None else SharedReads()
        self._fresh_for = fresh_for
        self._parse = parse
        self._budgets = tuple(budgets)  # payload memory held while read and parsed (signals.sources.budget)

    async def _one(self, ep: Endpoint, now: float) -> ReplicaReading:
        key = ("scrape", ep.url, self._engine, self._max_bytes, self._timeout, self._selector)

        def fetch() -> Awaitable[ReplicaReading]:
            return scrape_endpoint(self._session, ep, now, engine=self._engine, timeout_s=self._timeout,
                                   max_bytes=self._max_bytes, parse=self._parse, selector=self._selector,
                                   budgets=self._budgets)

        try:
            reading: ReplicaReading = await self._shared.get(key, fetch, wait=self._wait, fresh_for=self._fresh_for)
        except TimeoutError:
            return ReplicaReading(ep.replica, now, None,
                                  f"scrape {ep.url}: no answer within {self._wait:g}s (unknown for this decision)")
        return reading if reading.replica == ep.replica else replace(reading, replica=ep.replica)

    async def read(self, now: float) -> SourceResult:
        try:
            endpoints: Sequence[Endpoint] = await self._provider.endpoints()
        except Exception as exc:  # discovery failed: no replicas known from this source
            return SourceResult(errors=(f"{self.name}: endpoint discovery failed: {type(exc).__name__}: {exc}",),
                                absent=True)
        readings = await asyncio.gather(*(self._one(ep, now) for ep in endpoints))
        return SourceResult(replicas=tuple(readings), absent=not readings)

    async def aclose(self) -> None:
        """The session belongs to the caller."""
