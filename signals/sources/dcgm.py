"""NVIDIA dcgm-exporter endpoints as a source of GPU readings (the ``dcgmEndpoints`` key; an I/O edge).

Every exporter is read concurrently (one read in flight per URL for the whole process through
:class:`~signals.sources.shared.SharedReads`: every ScaledObject on a node's GPUs reads the same
exporter), bounded like the engine scrapes (total deadline, payload cap, ``wait``). The result is
every GPU the exporters report (:attr:`SourceResult.gpus`); the scaler keeps the ones DCGM attributes
to the ScaledObject's pods (:func:`signals.engines.dcgm.attribute`).

DCGM is secondary: it is not a replica source, so an unreadable exporter is a source error and leaves
the GPUs unknown (``gpus=None`` when no exporter answered) but never marks replicas absent or unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp

from warmscale.signals.engines.dcgm import parse_gpus
from warmscale.signals.model import GpuReading
from warmscale.signals.parsing import PayloadError
from warmscale.signals.sources.base import SourceResult
from warmscale.signals.sources.scrape import ScrapeError, fetch_payload
from warmscale.signals.sources.shared import SharedReads


class DcgmSource:
    """Reads ``urls`` (dcgm-exporter ``/metrics``) into GPU readings; see the module docstring."""

    provides_replicas = False

    def __init__(self, urls: Sequence[str], session: aiohttp.ClientSession, *, timeout: float = 2.0,
                 max_payload_bytes: int = 4 * 1024 * 1024, wait: float | None = None,
                 shared: SharedReads | None = None, fresh_for: float = 0.0, name: str = "dcgm") -> None:
        self.name = name
        self._urls = tuple(urls)
        self._session = session
        self._timeout = timeout
        self._wait = min(timeout, wait) if wait is not None else timeout
        self._max_bytes = max_payload_bytes
        self._shared = shared if shared is not None else SharedReads()
        self._fresh_for = fresh_for

    async def _fetch(self, url: str) -> tuple[GpuReading, ...]:
        text = await fetch_payload(self._session, url, timeout_s=self._timeout, max_bytes=self._max_bytes)
        return parse_gpus(text, max_bytes=self._max_bytes)

    async def _one(self, url: str) -> tuple[GpuReading, ...] | str:
        key = ("dcgm", url, self._max_bytes, self._timeout)
        try:
            gpus: tuple[GpuReading, ...] = await self._shared.get(
                key, lambda: self._fetch(url), wait=self._wait, fresh_for=self._fresh_for)
        except TimeoutError:
            return f"{self.name} {url}: no answer within {self._wait:g}s"
        except ScrapeError as exc:
            return f"{self.name} {url}: {exc}"
        except PayloadError as exc:
            return f"{self.name} {url}: payload: {exc}"
        return gpus

    async def read(self, now: float) -> SourceResult:
        results = await asyncio.gather(*(self._one(u) for u in self._urls))
        errors = tuple(r for r in results if isinstance(r, str))
        answered = [r for r in results if not isinstance(r, str)]
        gpus = tuple(g for r in answered for g in r) if answered else None
        return SourceResult(errors=errors, gpus=gpus)

    async def aclose(self) -> None:
        return None
