"""A real Prometheus scraping fake engines (every sample payload), queried through PrometheusSource:
the per-replica signals equal what the direct parser reads, TTFT is windowed, and a dead target or a
dead Prometheus gives unknown readings with the error, never zeros."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.servers import FakeEngine, PrometheusServer, free_port, sample
from tests.signals.samples import DCGM_SAMPLE, ENGINE_SAMPLES, Expected
from warmscale.scaler.config import parse_metadata
from warmscale.scaler.sources import build_collector
from warmscale.signals.sources.prometheus import PrometheusSource

pytestmark = pytest.mark.servers

TTFT_BOUNDS = ("0.1", "0.25", "0.5", "1.0", "2.5", "+Inf")


def ttft_payload(counts: tuple[int, ...], total: float) -> str:
    """A minimal vLLM payload whose TTFT histogram has the given cumulative counts."""
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0',
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for le, c in zip(TTFT_BOUNDS, counts, strict=True):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {c}.0')
    lines.append(f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {counts[-1]}.0')
    lines.append(f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {total}')
    return "\n".join(lines) + "\n"


def itl_payload(counts: tuple[int, ...], total: float) -> str:
    """A vLLM 0.11 payload: the ITL histogram under its new and its deprecated name, same values."""
    lines = ttft_payload((0, 0, 0, 0, 0, 0), 0.0).splitlines()
    for name in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"):
        lines.append(f"# TYPE {name} histogram")
        for le, c in zip(ITL_BOUNDS, counts, strict=True):
            lines.append(f'{name}_bucket{{engine="0",le="{le}",model_name="m"}} {c}.0')
        lines.append(f'{name}_count{{engine="0",model_name="m"}} {counts[-1]}.0')
        lines.append(f'{name}_sum{{engine="0",model_name="m"}} {total}')
    return "\n".join(lines) + "\n"


ITL_BOUNDS = ("0.01", "0.025", "0.05", "0.1", "+Inf")
ITL_BEFORE = (1000, 5000, 5000, 5000, 5000)
ITL_AFTER = (1000, 5000, 5000, 5100, 5100)  # 100 new tokens, all in (0.05, 0.1]

BEFORE = (900, 980, 995, 1000, 1000, 1000)
AFTER = (900, 980, 995, 1000, 1100, 1100)  # 100 new observations, all in (1.0, 2.5]


@dataclass
class Fleet:
    prom: PrometheusServer
    engines: dict[str, FakeEngine]  # sample file -> engine
    dcgm: FakeEngine
    ttft: FakeEngine
    flaky: FakeEngine
    itl: FakeEngine

    def selector(self, engine: FakeEngine) -> str:
        return f'instance="{engine.target}"'


@pytest.fixture(scope="module")
def fleet(prometheus_server: Callable[..., PrometheusServer]) -> Iterator[Fleet]:
    engines = {e.file: FakeEngine(e.text()) for e in ENGINE_SAMPLES}
    dcgm = FakeEngine(sample(DCGM_SAMPLE))
    ttft = FakeEngine(ttft_payload(BEFORE, 300.0))
    flaky = FakeEngine(ENGINE_SAMPLES[0].text())
    itl = FakeEngine(itl_payload(ITL_BEFORE, 80.0))
    everyone = [*engines.values(), dcgm, ttft, flaky, itl]
    try:
        prom = prometheus_server([e.target for e in everyone], scrape_interval="1s")
        prom.wait_for("count(up == 1)", lambda r: bool(r) and int(float(r[0]["value"][1])) == len(everyone), 30)
        yield Fleet(prom, engines, dcgm, ttft, flaky, itl)
    finally:
        for e in everyone:
            e.close()


def source(fleet: Fleet, **kw: object) -> PrometheusSource:
    return PrometheusSource(fleet.prom.url, timeout=5.0, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("exp", ENGINE_SAMPLES, ids=[e.file for e in ENGINE_SAMPLES])
async def test_per_engine_signals_match_the_direct_parser(fleet: Fleet, exp: Expected) -> None:
    engine = fleet.engines[exp.file]
    src = source(fleet, engine=exp.engine, selector=fleet.selector(engine))
    res = await src.read(time.time())
    await src.aclose()
    assert res.errors == ()
    (r,) = res.replicas
    assert r.replica == engine.target and r.signal is not None, r.error
    s = r.signal
    assert s.engine == exp.engine
    got = (s.waiting, s.running, s.kv_usage, s.requests_total, s.prompt_tokens_total, s.generation_tokens_total,
           s.preemptions_total, s.max_running)
    want = (exp.waiting, exp.running, exp.kv, exp.requests, exp.prompt_tokens, exp.generation_tokens,
            exp.preemptions, exp.max_running)
    assert got == pytest.approx(want)
    assert time.time() - r.observed_at < 5.0  # the sample's own timestamp


async def test_auto_reads_every_engine_and_ignores_dcgm(fleet: Fleet) -> None:
    src = source(fleet, engine="auto")
    res = await src.read(time.time())
    await src.aclose()
    by_target = {r.replica: r for r in res.replicas}
    assert fleet.dcgm.target not in by_target
    for exp in ENGINE_SAMPLES:
        r = by_target[fleet.engines[exp.file].target]
        assert r.signal is not None, r.error
        assert (r.signal.engine, r.signal.waiting, r.signal.running) == (exp.engine, exp.waiting, exp.running)


async def test_windowed_ttft(fleet: Fleet) -> None:
    sel = fleet.selector(fleet.ttft)
    fleet.prom.wait_for(f"count_over_time(vllm:time_to_first_token_seconds_count{{{sel}}}[1m]) >= 3")
    fleet.ttft.serve(ttft_payload(AFTER, 480.0))
    fleet.prom.wait_for(f"vllm:time_to_first_token_seconds_count{{{sel}}} == 1100")
    src = source(fleet, engine="vllm", selector=sel, ttft_window_seconds=30, replicas=False)
    res = await src.read(time.time())
    await src.aclose()
    assert res.replicas == () and res.errors == ()
    h = res.ttft_window
    assert h is not None and h.is_valid()
    # increase() extrapolates, so the count is about 100, not exactly.
    assert 80 <= h.count <= 200
    below_one = dict(h.buckets)[1.0]
    assert below_one == pytest.approx(0.0, abs=1e-9)
    p50 = h.quantile(0.5)
    assert p50 is not None and 1.0 < p50 <= 2.5  # lifetime p50 would be < 0.1 s


async def test_windowed_itl_reads_one_of_the_renamed_histograms(fleet: Fleet) -> None:
    sel = fleet.selector(fleet.itl)
    fleet.prom.wait_for(f"count_over_time(vllm:inter_token_latency_seconds_count{{{sel}}}[1m]) >= 3")
    fleet.itl.serve(itl_payload(ITL_AFTER, 87.5))
    fleet.prom.wait_for(f"vllm:inter_token_latency_seconds_count{{{sel}}} == 5100")
    src = source(fleet, engine="vllm", selector=sel, itl_window_seconds=30, replicas=False)
    res = await src.read(time.time())
    await src.aclose()
    assert res.errors == ()
    h = res.itl_window
    assert h is not None and h.is_valid()
    assert 80 <= h.count <= 200  # about 100 (increase() extrapolates); 200 would count both names
    p50 = h.quantile(0.5)
    assert p50 is not None and 0.05 < p50 <= 0.1
    # Without itlSloSeconds the collector asks Prometheus no ITL query.
    assert source(fleet, engine="vllm").itl_query is None


async def test_vanished_target_stays_unknown(fleet: Fleet) -> None:
    sel = fleet.selector(fleet.flaky)
    src = PrometheusSource(fleet.prom.url, engine="vllm", selector=sel, timeout=5.0, forget_after_seconds=60)
    first = await src.read(time.time())
    assert [r.known for r in first.replicas] == [True]
    fleet.flaky.refuse()
    fleet.prom.wait_for(f"up{{{sel}}} == 0")
    second = await src.read(time.time())
    await src.aclose()
    (r,) = second.replicas
    assert r.replica == fleet.flaky.target and not r.known and "absent" in (r.error or "")


async def test_collector_with_prometheus_only(fleet: Fleet) -> None:
    cfg = parse_metadata({"prometheusAddress": fleet.prom.url, "prometheusSelector": 'job=~"engines-.*"',
                          "scrapeTimeoutSeconds": "5"})
    collector = build_collector(cfg, session=None)  # type: ignore[arg-type]  # no HTTP source configured
    try:
        snap = await collector.collect()
    finally:
        await collector.aclose()
    assert snap.source_errors == ()
    targets = {r.replica for r in snap.known}
    assert {e.target for e in fleet.engines.values()} <= targets
    assert snap.ttft_window is not None and snap.ttft_window.is_valid()
    assert snap.itl_window is None  # no itlSloSeconds: no ITL query
    cfg = parse_metadata({"prometheusAddress": fleet.prom.url, "prometheusSelector": 'job=~"engines-.*"',
                          "scrapeTimeoutSeconds": "5", "itlSloSeconds": "0.05"})
    collector = build_collector(cfg, session=None)  # type: ignore[arg-type]
    try:
        snap = await collector.collect()
    finally:
        await collector.aclose()
    # The samples are static: a window of the engines' ITL buckets, with nothing new in it.
    assert snap.itl_window is not None and snap.itl_window.is_valid() and snap.itl_window.count >= 0


async def test_unreachable_prometheus_is_a_source_error() -> None:
    src = PrometheusSource(f"http://127.0.0.1:{free_port()}", engine="vllm", timeout=1.0)
    t0 = time.monotonic()
    res = await src.read(time.time())
    await src.aclose()
    assert time.monotonic() - t0 < 3.0
    assert res.replicas == () and res.ttft_window is None
    assert res.errors and "prometheus http://127.0.0.1" in res.errors[0]


async def test_prometheus_down_then_restarted(fleet: Fleet) -> None:
    """Replicas seen before an outage are unknown during it; the TSDB survives the restart."""
    exp = ENGINE_SAMPLES[0]
    sel = fleet.selector(fleet.engines[exp.file])
    history = f"count_over_time(vllm:num_requests_running{{{sel}}}[10m])"
    before = float(fleet.prom.query(history)[0]["value"][1])
    src = source(fleet, engine="vllm", selector=sel)
    try:
        assert [r.known for r in (await src.read(time.time())).replicas] == [True]
        fleet.prom.stop()
        down = await src.read(time.time())
        assert [r.known for r in down.replicas] == [False]
        assert down.errors and down.replicas[0].error == down.errors[0]
        fleet.prom.start()
        assert float(fleet.prom.query(history)[0]["value"][1]) >= before
        up = await src.read(time.time())
        assert [r.known for r in up.replicas] == [True]
    finally:
        await src.aclose()
