"""Endpoint-picker sources: the picker's ``/metrics`` read directly (``eppAddress``), or its series read
back from Prometheus (``prometheusAddress`` + ``eppPool``). Either yields one
:class:`~signals.model.GatewayReading` per read; any failure (refused, timeout, HTTP error, a payload
of no picker, an InferencePool the picker does not report) is an *unknown* reading, never an empty queue.
"""

from __future__ import annotations

import aiohttp

from warmscale.signals.engines import epp
from warmscale.signals.model import GatewayReading
from warmscale.signals.parsing import PayloadError
from warmscale.signals.redact import redact
from warmscale.signals.sources.base import SourceResult
from warmscale.signals.sources.budget import Budget, Charge
from warmscale.signals.sources.prometheus import PrometheusError, query
from warmscale.signals.sources.scrape import ScrapeError, fetch_payload


class EppScrapeSource:
    """GET the picker's metrics URL and parse it for ``pool`` (every pool when ``None``)."""

    def __init__(self, url: str, session: aiohttp.ClientSession, *, pool: str | None = None, timeout: float = 2.0,
                 max_payload_bytes: int = 4 * 1024 * 1024, name: str = "epp", budgets: tuple[Budget, ...] = ()) -> None:
        self.name = name
        self._budgets = budgets
        self.url = url
        self.pool = pool
        self._session = session
        self._timeout = timeout
        self._max_bytes = max_payload_bytes

    @property
    def reading_name(self) -> str:
        return f"epp:{self.pool}" if self.pool else f"epp:{redact(self.url)}"

    async def read(self, now: float) -> SourceResult:
        charge = Charge(self._budgets)  # (bytes and series held until parsed: signals.sources.budget)
        try:
            text = await fetch_payload(self._session, self.url, timeout_s=self._timeout, max_bytes=self._max_bytes,
                                       charge=charge)
            signal = epp.parse_payload(text, self.pool, max_bytes=self._max_bytes)
        except ScrapeError as exc:
            err = f"endpoint picker {redact(self.url)}: {redact(str(exc))}"
        except PayloadError as exc:
            err = f"endpoint picker {redact(self.url)}: payload: {exc}"
        else:
            return SourceResult(gateways=(GatewayReading(self.reading_name, now, signal),))
        finally:
            charge.release()
        return SourceResult(gateways=(GatewayReading(self.reading_name, now, None, err),))

    async def aclose(self) -> None:
        """The session belongs to the caller."""


def picker_query(selector: str = "") -> str:
    """One instant query for every picker series :mod:`signals.engines.epp` reads."""
    names = "|".join(epp.NAMES)
    extra = f",{selector}" if selector.strip() else ""
    return f'{{__name__=~"{names}"{extra}}}'


class EppPrometheusSource:
    """The picker's series of InferencePool ``pool`` from Prometheus (one instant query per read)."""

    def __init__(self, address: str, pool: str, session: aiohttp.ClientSession, *, selector: str = "",
                 timeout: float = 2.0, name: str = "epp-prometheus") -> None:
        self.name = name
        self.address = address
        self.pool = pool
        self.query = picker_query(selector)
        self._session = session
        self._timeout = timeout

    async def read(self, now: float) -> SourceResult:
        name = f"epp:{self.pool}"
        try:
            result = await query(self._session, self.address, self.query, timeout_s=self._timeout)
            signal = epp.parse(epp.index_from_vector(result), self.pool)
        except PrometheusError as exc:
            err = f"endpoint picker via prometheus {redact(self.address)}: {redact(str(exc))}"
        except PayloadError as exc:
            err = f"endpoint picker via prometheus {redact(self.address)}: {exc}"
        else:
            return SourceResult(gateways=(GatewayReading(name, now, signal),))
        return SourceResult(gateways=(GatewayReading(name, now, None, err),))

    async def aclose(self) -> None:
        """The session belongs to the caller."""
