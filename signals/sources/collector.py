"""Sources built from a :class:`~scaler.config.ScalerConfig`, gathered into one :class:`Snapshot`.

>>> async with aiohttp.ClientSession() as session:
...     collector = build_collector(cfg, session=session)
...     snapshot = await collector.collect()
...     await collector.aclose()

Replica sources: the ``endpoints`` list, pods found by ``podSelector`` or, with ``metricsPort`` alone,
the scale target's pods (through an :class:`~signals.sources.base.EndpointProvider` the caller
supplies: :class:`signals.sources.pods.PodEndpoints` in the scaler), and Prometheus; besides them the
gateway queue, the endpoint picker and dcgm-exporter (GPU readings, :mod:`signals.sources.dcgm`). When a direct
source (endpoints or pods) is configured, Prometheus only supplies the windowed TTFT, so that no
replica is counted twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import aiohttp

from warmscale.scaler.config import ScalerConfig
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import GatewayReading, GpuReading, QueueReading, ReplicaReading, Snapshot
from warmscale.signals.sources.base import EndpointProvider, Source, SourceResult, StaticEndpoints
from warmscale.signals.sources.budget import Budget
from warmscale.signals.sources.dcgm import DcgmSource
from warmscale.signals.sources.gateway import EppPrometheusSource, EppScrapeSource
from warmscale.signals.sources.prometheus import PrometheusSource
from warmscale.signals.sources.redis_queue import Allows, RedisQueueSource
from warmscale.signals.sources.scrape import ParseFn, ScrapeSource
from warmscale.signals.sources.shared import SharedReads


class MissingProviderSource:
    """Stands in for pod discovery when no provider was supplied: reports why, every time."""

    provides_replicas = True

    def __init__(self, message: str, name: str = "pods") -> None:
        self.name = name
        self._message = message

    async def read(self, now: float) -> SourceResult:
        return SourceResult(errors=(f"{self.name}: {self._message}",), absent=True)

    async def aclose(self) -> None:
        return None


def build_sources(
    cfg: ScalerConfig,
    *,
    session: aiohttp.ClientSession,
    pod_endpoints: EndpointProvider | None = None,
    shared: SharedReads | None = None,
    parse: ParseFn | None = None,
    allows: Allows | None = None,
    budgets: tuple[Budget, ...] = (),
) -> list[Source]:
    """The sources ``cfg`` asks for. ``pod_endpoints`` serves ``podSelector`` (pod discovery);
    ``shared`` (one per process) lets ScaledObjects reading the same URL or query share one read;
    ``parse`` parses payloads (default: inline); ``allows`` (``--allow-targets``) checks every
    address a Redis queue connection dials (the HTTP sources are checked by ``session``'s connector);
    ``budgets`` bound the payload memory the scrapes hold (:mod:`signals.sources.budget`).
    Each source waits at most ``cfg.read_budget_seconds`` for any of its reads (a late one is unknown
    for that decision)."""
    sources: list[Source] = []
    wait = cfg.read_budget_seconds
    # ScaledObjects over the same pods ticking within half an interval of each other share a scrape.
    fresh_for = cfg.scrape_interval_seconds / 2 if shared is not None else 0.0

    def scrape(provider: EndpointProvider, name: str) -> ScrapeSource:
        return ScrapeSource(
            provider,
            session,
            engine=cfg.engine,
            timeout=cfg.scrape_timeout_seconds,
            max_payload_bytes=cfg.max_payload_bytes,
            budgets=budgets,
            name=name,
            wait=wait,
            shared=shared,
            fresh_for=fresh_for,
            parse=parse,
            selector=cfg.series_selector,
        )

    direct = False
    if cfg.endpoints:
        sources.append(scrape(StaticEndpoints(cfg.endpoints), "endpoints"))
        direct = True
    if cfg.pod_selector or cfg.metrics_port:
        if pod_endpoints is None:
            what = f"podSelector {cfg.pod_selector!r}" if cfg.pod_selector else "metricsPort (the scale target's pods)"
            sources.append(MissingProviderSource(f"{what} needs pod discovery, "
                                                 "which is not available in this process"))
        else:
            sources.append(scrape(pod_endpoints, "pods"))
        direct = True
    if cfg.prometheus_address:
        sources.append(
            PrometheusSource(
                cfg.prometheus_address,
                engine=cfg.engine,
                selector=cfg.prometheus_selector,
                ttft_window_seconds=cfg.ttft_window_seconds,
                itl_window_seconds=cfg.ttft_window_seconds if cfg.itl_slo_seconds is not None else None,
                timeout=cfg.scrape_timeout_seconds,
                # With eppPool read from Prometheus the picker stands for the pool (no engine replicas).
                replicas=not direct and not (cfg.epp_pool and not cfg.epp_address),
                forget_after_seconds=cfg.staleness_seconds,
                session=session,
                shared=shared,
                wait=wait,
                fresh_for=fresh_for,
            )
        )
    if cfg.epp_address:
        sources.append(EppScrapeSource(cfg.epp_address, session, pool=cfg.epp_pool, timeout=cfg.scrape_timeout_seconds,
                                       max_payload_bytes=cfg.max_payload_bytes, budgets=budgets))
    elif cfg.epp_pool and cfg.prometheus_address:
        sources.append(EppPrometheusSource(cfg.prometheus_address, cfg.epp_pool, session,
                                           selector=cfg.prometheus_selector, timeout=cfg.scrape_timeout_seconds))
    if cfg.dcgm_endpoints:
        sources.append(DcgmSource(cfg.dcgm_endpoints, session, timeout=cfg.scrape_timeout_seconds,
                                  max_payload_bytes=cfg.max_payload_bytes, wait=wait, shared=shared,
                                  fresh_for=fresh_for))
    if cfg.redis_address and cfg.redis_queue:
        sources.append(
            RedisQueueSource(
                cfg.redis_address, cfg.redis_queue, cfg.redis_queue_type, timeout=cfg.scrape_timeout_seconds,
                allows=allows,
            )
        )
    return sources


class SnapshotCollector:
    """Reads every source concurrently and merges the results into one :class:`Snapshot`.

    Readings older than ``staleness_seconds`` become unknown. A source that raises or overruns
    ``deadline`` seconds becomes a source error and *absent* (when it is a replica source), never a
    zero."""

    def __init__(
        self,
        sources: Sequence[Source],
        *,
        staleness_seconds: float = 30.0,
        deadline: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sources = tuple(sources)
        self.staleness_seconds = staleness_seconds
        self.deadline = deadline
        self._clock = clock

    async def _read(self, source: Source, now: float) -> SourceResult:
        try:
            async with asyncio.timeout(self.deadline):
                return await source.read(now)
        except TimeoutError:
            return SourceResult(errors=(f"{source.name}: no answer within {self.deadline:g}s",),
                                absent=_is_replica_source(source))
        except Exception as exc:
            return SourceResult(errors=(f"{source.name}: {type(exc).__name__}: {exc}",),
                                absent=_is_replica_source(source))

    async def collect(self, now: float | None = None) -> Snapshot:
        taken = self._clock() if now is None else now
        results = await asyncio.gather(*(self._read(s, taken) for s in self.sources))
        read_until = self._clock() if now is None else None
        replicas: list[ReplicaReading] = []
        queues: list[QueueReading] = []
        gateways: list[GatewayReading] = []
        errors: list[str] = []
        absent: list[str] = []
        ttft: Histogram | None = None
        itl: Histogram | None = None
        gpus: list[GpuReading] | None = None
        for source, res in zip(self.sources, results, strict=True):
            if res.gpus is not None:
                gpus = [*(gpus or ()), *res.gpus]
            if res.absent:
                absent.append(source.name)
            replicas.extend(r.stale(taken, self.staleness_seconds) for r in res.replicas)
            queues.extend(res.queues)
            gateways.extend(res.gateways)
            errors.extend(res.errors)
            if ttft is None and res.ttft_window is not None:
                ttft = res.ttft_window
            if itl is None and res.itl_window is not None:
                itl = res.itl_window
        return Snapshot(
            taken_at=taken,
            read_until=read_until,
            replicas=tuple(replicas),
            queues=tuple(queues),
            ttft_window=ttft,
            itl_window=itl,
            gateways=tuple(gateways),
            source_errors=tuple(errors),
            absent=tuple(absent),
            gpus=tuple(gpus) if gpus is not None else None,
        )

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.sources), return_exceptions=True)


def build_collector(
    cfg: ScalerConfig,
    *,
    session: aiohttp.ClientSession,
    pod_endpoints: EndpointProvider | None = None,
    clock: Callable[[], float] = time.time,
    shared: SharedReads | None = None,
    parse: ParseFn | None = None,
    allows: Allows | None = None,
    budgets: tuple[Budget, ...] = (),
) -> SnapshotCollector:
    """Sources for ``cfg`` behind a collector with ``cfg``'s staleness. The collector's deadline is a
    safety net a little past ``cfg.read_budget_seconds`` (each source keeps to the budget itself)."""
    return SnapshotCollector(
        build_sources(cfg, session=session, pod_endpoints=pod_endpoints, shared=shared, parse=parse, allows=allows,
                      budgets=budgets),
        staleness_seconds=cfg.staleness_seconds,
        deadline=cfg.read_budget_seconds + 0.5,
        clock=clock,
    )


def _is_replica_source(source: Source) -> bool:
    return bool(getattr(source, "provides_replicas", False))
