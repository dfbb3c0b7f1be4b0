"""Direct scraping of engine ``/metrics`` endpoints with aiohttp (concurrent, timed, size-capped).

A refused, hanging, failing or oversized endpoint, or a payload that doesn't parse, yields an
*unknown* :class:`~signals.model.ReplicaReading` carrying the error, never a zero.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp

from signals.engines import parse_payload
from signals.model import ReplicaReading
from signals.parsing import PayloadError
from signals.sources.base import Endpoint, EndpointProvider, SourceResult

ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
_CHUNK = 64 * 1024
# Parsing a payload of this size or more happens in a worker thread so as not to stall the loop.
_THREAD_PARSE_BYTES = 32 * 1024


class ScrapeError(Exception):
    """The endpoint could not be read (connection, timeout, HTTP status, size cap)."""


async def fetch_payload(session: aiohttp.ClientSession, url: str, *, timeout_s: float, max_bytes: int) -> str:
    """GET ``url`` and return its body; stop reading (and fail) past ``max_bytes``."""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url, headers={"Accept": ACCEPT}, allow_redirects=False) as resp:
                if resp.status != 200:
                    raise ScrapeError(f"HTTP {resp.status} {resp.reason or ''}".strip())
                declared = resp.content_length
                if declared is not None and declared > max_bytes:
                    raise ScrapeError(f"payload of {declared} bytes exceeds the {max_bytes}-byte cap")
                body = bytearray()
                while True:
                    chunk = await resp.content.read(_CHUNK)
                    if not chunk:
                        break
                    body += chunk
                    if len(body) > max_bytes:
                        raise ScrapeError(f"payload exceeds the {max_bytes}-byte cap (aborted reading)")
                charset = resp.charset or "utf-8"
    except TimeoutError:
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except aiohttp.ClientError as exc:
        raise ScrapeError(f"{type(exc).__name__}: {exc}") from None
    except OSError as exc:
        raise ScrapeError(f"{type(exc).__name__}: {exc}") from None
    try:
        return bytes(body).decode(charset)
    except (LookupError, UnicodeDecodeError) as exc:
        raise ScrapeError(f"undecodable payload: {exc}") from None


async def scrape_endpoint(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    now: float,
    *,
    engine: str = "auto",
    timeout_s: float = 2.0,
    max_bytes: int = 4 * 1024 * 1024,
) -> ReplicaReading:
    """Scrape and parse one endpoint into a reading observed at ``now`` (unknown on any failure)."""
    try:
        text = await fetch_payload(session, endpoint.url, timeout_s=timeout_s, max_bytes=max_bytes)
        if len(text) >= _THREAD_PARSE_BYTES:
            signal = await asyncio.to_thread(parse_payload, text, engine, max_bytes=max_bytes)
        else:
            signal = parse_payload(text, engine, max_bytes=max_bytes)
    except ScrapeError as exc:
        return ReplicaReading(endpoint.replica, now, None, f"scrape {endpoint.url}: {exc}")
    except PayloadError as exc:
        return ReplicaReading(endpoint.replica, now, None, f"payload {endpoint.url}: {exc}")
    return ReplicaReading(endpoint.replica, now, signal)


class ScrapeSource:
    """Scrapes every endpoint of ``provider`` concurrently through one shared ``session``."""

    def __init__(
        self,
        provider: EndpointProvider,
        session: aiohttp.ClientSession,
        *,
        engine: str = "auto",
        timeout: float = 2.0,
        max_payload_bytes: int = 4 * 1024 * 1024,
        name: str = "endpoints",
    ) -> None:
        self.name = name
        self._provider = provider
        self._session = session
        self._engine = engine
        self._timeout = timeout
        self._max_bytes = max_payload_bytes

    async def read(self, now: float) -> SourceResult:
        try:
            endpoints: Sequence[Endpoint] = await self._provider.endpoints()
        except Exception as exc:  # discovery failed: no replicas known from this source
            return SourceResult(errors=(f"{self.name}: endpoint discovery failed: {type(exc).__name__}: {exc}",))
        readings = await asyncio.gather(
            *(
                scrape_endpoint(
                    self._session, ep, now, engine=self._engine, timeout_s=self._timeout, max_bytes=self._max_bytes
                )
                for ep in endpoints
            )
        )
        return SourceResult(replicas=tuple(readings))

    async def aclose(self) -> None:
        """The session belongs to the caller."""
