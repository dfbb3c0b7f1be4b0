"""The sources a ScaledObject's configuration names, built and gathered into a collector.

>>> async with aiohttp.ClientSession() as session:
...     collector = build_collector(cfg, session=session)
...     snapshot = await collector.collect()
...     await collector.aclose()

Replica sources: the ``endpoints`` list, pods found by ``podSelector`` or, with ``metricsPort`` alone,
the scale target's pods (through an :class:`~signals.sources.base.EndpointProvider` the caller
supplies: :class:`signals.sources.pods.PodEndpoints` in the scaler), and Prometheus; besides them the
gateway queue, the endpoint picker and dcgm-exporter (GPU readings, :mod:`signals.sources.dcgm`). When
a direct source (endpoints or pods) is configured, Prometheus only supplies the windowed TTFT, so that
no replica is counted twice. (Here, not in ``signals/``: the configuration is the scaler's.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import aiohttp

from warmscale.scaler.config import ScalerConfig
from warmscale.signals.model import ReplicaReading
from warmscale.signals.sources.base import Endpoint, EndpointProvider, Source, StaticEndpoints
from warmscale.signals.sources.budget import Budget
from warmscale.signals.sources.collector import MissingProviderSource, SnapshotCollector
from warmscale.signals.sources.dcgm import DcgmSource
from warmscale.signals.sources.gateway import EppPrometheusSource, EppScrapeSource
from warmscale.signals.sources.prometheus import PrometheusSource
from warmscale.signals.sources.redis_queue import Allows, RedisQueueSource
from warmscale.signals.sources.scrape import ParseFn, ScrapeSource, scrape_endpoint
from warmscale.signals.sources.shared import SharedReads


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


async def read_awake_sleepers(session: aiohttp.ClientSession, cfg: ScalerConfig, urls: Sequence[str], now: float, *,
                              parse: ParseFn | None = None, budgets: tuple[Budget, ...] = ()
                              ) -> tuple[ReplicaReading, ...]:
    """The awake hot-tier sleepers' engines, read as the scale target's replicas are: each base URL the
    waker published in the hot status (``awake_urls``) plus ``metricsPath``, concurrently, each within
    the decision's read budget (a sleeper that does not answer is unknown for this decision, never
    idle). Each reading is named by its base URL."""
    async def one(url: str) -> ReplicaReading:
        ep = Endpoint(replica=url, url=url.rstrip("/") + cfg.metrics_path)
        return await scrape_endpoint(session, ep, now, engine=cfg.engine, timeout_s=cfg.read_budget_seconds,
                                     max_bytes=cfg.max_payload_bytes, parse=parse, budgets=budgets)

    return tuple(await asyncio.gather(*(one(u) for u in urls)))
