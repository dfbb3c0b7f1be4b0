"""Payload budgets (issue 20, item 4): bookkeeping tables, and the real scrape path on loopback --
a payload past the per-payload series limit is refused for size (never parsed); past the ScaledObject's
or the process's budget, that replica is unknown for that read and nothing is refused."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.servers import FakeEngine
from warmscale.scaler.cli import SourcesReader
from warmscale.scaler.config import parse_metadata
from warmscale.signals.sources.budget import Budget, BudgetExceeded, Charge, LineCounter, PayloadLimits, SizeRefused


@pytest.mark.parametrize(("text", "series"), [
    ("a 1\n", 1), ("# TYPE a gauge\na 1\nb 2\n", 2), ("# HELP a x\n# TYPE a gauge\n", 0), ("a 1\nb 2", 2),
    ("", 0), ("\n\n", 2),  # blank lines count: an upper bound
    ("# TYPE a gauge\na{x=\"#\"} 1\n#c\nb 2\n", 2),
])
def test_line_counter_in_any_chunks(text: str, series: int) -> None:
    data = text.encode()
    for size in range(1, max(2, len(data) + 1)):  # every chunk size: the same count
        counter = LineCounter()
        assert sum(counter.feed(data[i:i + size]) for i in range(0, len(data), size)) == series, size


def test_charge_holds_all_budgets_or_none_and_releases() -> None:
    so = Budget("ScaledObject a/b", 100, 10, "--so-bytes", "--so-series", payload_series=6,
                payload_series_flag="--payload-series")
    proc = Budget("this scaler", 150, 15, "--p-bytes", "--p-series")
    one, two, three = Charge([so, proc]), Charge([proc]), Charge([so, proc])
    one.add(nbytes=60, nseries=5)
    two.add(nbytes=80)
    with pytest.raises(BudgetExceeded) as err:  # the process budget is full: nothing charged, nothing refused
        one.add(nbytes=20)
    assert err.value.budget is proc and "--p-bytes 150" in str(err.value)
    assert (so.bytes, proc.bytes, so.refused) == (60, 140, None)
    three.add(nseries=5)
    with pytest.raises(BudgetExceeded) as err:  # the ScaledObject's payloads together: that read fails
        three.add(nseries=1)
    assert err.value.budget is so and "--so-series 10" in str(err.value) and so.refused is None
    with pytest.raises(BudgetExceeded) as err:  # one payload past the per-payload limit: refused
        one.add(nseries=2)
    assert err.value.budget is so and so.refused is not None and "--payload-series 6" in so.refused
    assert (so.series, proc.series) == (10, 10)
    for c in (one, two, three):
        c.release()
    assert (so.bytes, so.series, proc.bytes, proc.series) == (0, 0, 0, 0)


def _payload(series: int) -> str:
    head = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
    return head + "".join(f'pad{{i="{i}"}} 1\n' for i in range(series))


async def test_a_payload_past_the_series_limit_is_refused_unparsed(fake_engine: Callable[..., FakeEngine]) -> None:
    big = fake_engine(_payload(5000))
    reader = SourcesReader(limits=PayloadLimits(payload_series=1000))
    cfg = parse_metadata({"endpoints": big.url, "engine": "vllm"})
    try:
        with pytest.raises(SizeRefused, match="--max-payload-series 1000"):
            await reader.read(cfg, time.time(), ("llm", "big"))
        assert reader.parser._executor is None  # never parsed (no worker started)
        assert (reader.budget.bytes, reader.budget.series) == (0, 0)  # all released
    finally:
        await reader.aclose()


@pytest.mark.parametrize(("limits", "flag"), [
    (PayloadLimits(process_series=100), "--max-series-in-flight 100"),
    (PayloadLimits(scaledobject_series=100), "--max-scaledobject-series 100"),
    (PayloadLimits(scaledobject_bytes=4096), "--max-scaledobject-payload-bytes 4096"),
])
async def test_scrape_past_a_budget_is_unknown_not_refused(
    fake_engine: Callable[..., FakeEngine], limits: PayloadLimits, flag: str
) -> None:
    engine = fake_engine(_payload(500))
    reader = SourcesReader(limits=limits)
    cfg = parse_metadata({"endpoints": engine.url, "engine": "vllm"})
    try:
        snap = await reader.read(cfg, time.time(), ("llm", "a"))
        [r] = snap.replicas
        assert r.signal is None and flag in (r.error or ""), r.error
        snap = await reader.read(cfg, time.time() + 1, ("llm", "a"))  # read again: not refused
        assert snap.replicas[0].signal is None
        assert (reader.budget.bytes, reader.budget.series) == (0, 0)
    finally:
        await reader.aclose()
