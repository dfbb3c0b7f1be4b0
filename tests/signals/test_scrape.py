"""Direct scraping against real HTTP servers (fake engines): every failure is an unknown reading with
the error, never a zero; and the collector built from trigger metadata."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence

import aiohttp
import pytest

from tests.servers import FakeEngine, free_port
from tests.signals.samples import ENGINE_SAMPLES
from warmscale.scaler.config import parse_metadata
from warmscale.scaler.sources import build_collector, build_sources
from warmscale.signals.model import ReplicaReading, ReplicaSignal
from warmscale.signals.sources import (
    Endpoint,
    SnapshotCollector,
    SourceResult,
    StaticEndpoints,
)
from warmscale.signals.sources.scrape import ScrapeSource, scrape_endpoint

Factory = Callable[..., FakeEngine]
V1 = ENGINE_SAMPLES[0].text()
CAP = 256 * 1024


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def scrape(session: aiohttp.ClientSession, url: str, wait: float = 0.5, cap: int = CAP) -> ReplicaReading:
    return await scrape_endpoint(session, Endpoint(url, url), 100.0, timeout_s=wait, max_bytes=cap)


@pytest.mark.parametrize("exp", ENGINE_SAMPLES, ids=[e.file for e in ENGINE_SAMPLES])
async def test_scrape_every_sample(session: aiohttp.ClientSession, fake_engine: Factory, exp: object) -> None:
    from tests.signals.samples import Expected

    assert isinstance(exp, Expected)
    engine = fake_engine(exp.text())
    r = await scrape(session, engine.url)
    assert r.known and r.signal is not None, r.error
    assert (r.signal.engine, r.signal.waiting, r.signal.running) == (exp.engine, exp.waiting, exp.running)
    assert r.observed_at == 100.0


async def test_hanging_endpoint_times_out_unknown(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    engine = fake_engine(V1).hang()
    t0 = time.monotonic()
    r = await scrape(session, engine.url, wait=0.3)
    assert time.monotonic() - t0 < 2.0
    assert not r.known and "timed out" in (r.error or "")


async def test_refused_endpoint_unknown(session: aiohttp.ClientSession) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    r = await scrape(session, url)
    assert not r.known and r.signal is None
    assert "ClientConnectorError" in (r.error or "") or "Connect" in (r.error or "")


async def test_engine_that_stops_listening_then_recovers(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    engine = fake_engine(V1)
    assert (await scrape(session, engine.url)).known
    engine.refuse()
    assert not (await scrape(session, engine.url)).known
    engine.serve()
    assert (await scrape(session, engine.url)).known


async def test_garbage_unknown(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    r = await scrape(session, fake_engine().garbage().url)
    assert not r.known and (r.error or "").startswith("payload ")


async def test_http_error_unknown(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    r = await scrape(session, fake_engine(V1).fail(503).url)
    assert not r.known and "HTTP 503" in (r.error or "")


async def test_huge_streamed_body_is_cut_off(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    engine = fake_engine().huge(50 * CAP)
    t0 = time.monotonic()
    r = await scrape(session, engine.url, wait=5.0)
    assert time.monotonic() - t0 < 3.0
    assert not r.known and "cap" in (r.error or "")


async def test_declared_length_over_cap_is_refused(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    r = await scrape(session, fake_engine(V1).url, cap=8 * 1024)
    assert not r.known and "exceeds the 8192-byte cap" in (r.error or "")


async def test_truncated_and_nan_payloads_unknown(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    truncated = await scrape(session, fake_engine(V1[:5000]).url)
    assert not truncated.known and "truncated" in (truncated.error or "")
    nan = V1.replace('vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0',
                     'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} NaN')
    assert nan != V1
    r = await scrape(session, fake_engine(nan).url)
    assert not r.known and "NaN" in (r.error or "").replace("nan", "NaN")


async def test_endpoints_are_scraped_concurrently(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    hanging = [fake_engine(V1).hang() for _ in range(5)]
    good = [fake_engine(V1) for _ in range(3)]
    src = ScrapeSource(StaticEndpoints([e.url for e in hanging + good]), session, timeout=0.5)
    t0 = time.monotonic()
    res = await src.read(7.0)
    assert time.monotonic() - t0 < 1.5
    assert [r.known for r in res.replicas] == [False] * 5 + [True] * 3
    assert [r.replica for r in res.replicas] == [e.url for e in hanging + good]


class BrokenProvider:
    async def endpoints(self) -> Sequence[Endpoint]:
        raise RuntimeError("API server unreachable")


class ListProvider:
    def __init__(self, eps: Sequence[Endpoint]) -> None:
        self.eps = eps

    async def endpoints(self) -> Sequence[Endpoint]:
        return self.eps


async def test_provider_failure_is_a_source_error(session: aiohttp.ClientSession) -> None:
    res = await ScrapeSource(BrokenProvider(), session, name="pods").read(1.0)
    assert res.replicas == () and "API server unreachable" in res.errors[0]


# ------------------------------------------------------------------------------------------ collector


async def test_collector_from_metadata(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    a, b = fake_engine(V1), fake_engine(V1).hang()
    cfg = parse_metadata({"endpoints": f"{a.url},{b.url}", "scrapeTimeoutSeconds": "0.3", "engine": "vllm"})
    collector = build_collector(cfg, session=session)
    try:
        snap = await collector.collect(now=50.0)
    finally:
        await collector.aclose()
    assert snap.taken_at == 50.0
    assert [r.known for r in snap.replicas] == [True, False]
    assert snap.known[0].signal is not None and snap.known[0].signal.running == 44
    assert snap.queues == () and snap.source_errors == () and snap.ttft_window is None


async def test_pod_selector_uses_the_supplied_provider(session: aiohttp.ClientSession, fake_engine: Factory) -> None:
    engine = fake_engine(V1)
    cfg = parse_metadata({"podSelector": "app=vllm", "metricsPort": "8000"})
    missing = build_collector(cfg, session=session)
    snap = await missing.collect(now=1.0)
    assert snap.replicas == () and "pod discovery" in snap.source_errors[0]
    provided = build_collector(cfg, session=session, pod_endpoints=ListProvider([Endpoint("vllm-0", engine.url)]))
    snap = await provided.collect(now=1.0)
    assert [(r.replica, r.known) for r in snap.replicas] == [("vllm-0", True)]


def test_direct_sources_demote_prometheus_to_ttft_only() -> None:
    cfg = parse_metadata({"endpoints": "http://a:8000/metrics", "prometheusAddress": "http://prom:9090"})
    sources = build_sources(cfg, session=None)  # type: ignore[arg-type]  # not used until read()
    names = [s.name for s in sources]
    assert names == ["endpoints", "prometheus"]
    assert sources[1]._with_replicas is False
    only_prom = build_sources(parse_metadata({"prometheusAddress": "http://prom:9090"}), session=None)  # type: ignore[arg-type]
    assert only_prom[0]._with_replicas is True


class StaticSource:
    def __init__(self, result: SourceResult | None = None, exc: Exception | None = None, name: str = "s") -> None:
        self.name = name
        self._result = result or SourceResult()
        self._exc = exc

    async def read(self, now: float) -> SourceResult:
        if self._exc is not None:
            raise self._exc
        return self._result

    async def aclose(self) -> None:
        return None


async def test_collector_staleness_and_source_failures() -> None:
    fresh = ReplicaReading("a", 95.0, ReplicaSignal("vllm", 1, 2))
    old = ReplicaReading("b", 10.0, ReplicaSignal("vllm", 1, 2))
    collector = SnapshotCollector(
        [StaticSource(SourceResult(replicas=(fresh, old))), StaticSource(exc=RuntimeError("boom"), name="bad")],
        staleness_seconds=30.0,
        clock=lambda: 100.0,
    )
    snap = await collector.collect()
    assert snap.taken_at == 100.0
    assert [r.known for r in snap.replicas] == [True, False]
    assert "stale" in (snap.replicas[1].error or "")
    assert snap.source_errors == ("bad: RuntimeError: boom",)


async def test_collector_deadline() -> None:
    import asyncio

    class Slow(StaticSource):
        async def read(self, now: float) -> SourceResult:
            await asyncio.sleep(10)
            return SourceResult()

    snap = await SnapshotCollector([Slow(name="slow")], deadline=0.2).collect(now=1.0)
    assert snap.source_errors == ("slow: no answer within 0.2s",)
