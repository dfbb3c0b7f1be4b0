"""Payload budgets (issue 20, item 4): bookkeeping tables, and the real scrape path on loopback --
past a ScaledObject's budget the read is refused for size (never parsed); past the process's, that
replica is unknown for that read and nothing is refused."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.servers import FakeEngine
from warmscale.scaler.cli import SourcesReader
from warmscale.scaler.config import parse_metadata
from warmscale.signals.sources.budget import Budget, BudgetExceeded, Charge, PayloadLimits, SizeRefused, count_series


@pytest.mark.parametrize(("text", "series"), [
    ("a 1\n", 1), ("# TYPE a gauge\na 1\nb 2\n", 2), ("# HELP a x\n# TYPE a gauge\n", 0), ("a 1\nb 2", 2),
    ("", 0), ("\n\n", 2),  # blank lines count: an upper bound
])
def test_count_series(text: str, series: int) -> None:
    assert count_series(text) == series


def test_charge_holds_all_budgets_or_none_and_releases() -> None:
    so = Budget("ScaledObject a/b", 100, 10, "--so-bytes", "--so-series", refuses=True)
    proc = Budget("this scaler", 150, 15, "--p-bytes", "--p-series")
    one, two = Charge([so, proc]), Charge([proc])
    one.add(nbytes=60, nseries=5)
    two.add(nbytes=80)
    with pytest.raises(BudgetExceeded) as err:  # the process budget is full: nothing charged, nothing refused
        one.add(nbytes=20)
    assert err.value.budget is proc and "--p-bytes 150" in str(err.value)
    assert (so.bytes, proc.bytes, so.refused) == (60, 140, None)
    with pytest.raises(BudgetExceeded) as err:  # past the ScaledObject's own: refused
        one.add(nseries=6)
    assert err.value.budget is so and so.refused is not None and "--so-series 10" in so.refused
    assert (so.series, proc.series) == (5, 5)
    one.release()
    two.release()
    assert (so.bytes, so.series, proc.bytes, proc.series) == (0, 0, 0, 0)


def _payload(series: int) -> str:
    head = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
    return head + "".join(f'pad{{i="{i}"}} 1\n' for i in range(series))


async def test_scrape_past_the_scaledobject_budget_is_refused_unparsed(fake_engine: Callable[..., FakeEngine]) -> None:
    big = fake_engine(_payload(5000))
    reader = SourcesReader(limits=PayloadLimits(scaledobject_series=1000))
    cfg = parse_metadata({"endpoints": big.url, "engine": "vllm"})
    try:
        with pytest.raises(SizeRefused, match="--max-scaledobject-series 1000"):
            await reader.read(cfg, time.time(), ("llm", "big"))
        assert reader.parser._executor is None  # never parsed (no worker started)
        assert (reader.budget.bytes, reader.budget.series) == (0, 0)  # all released
    finally:
        await reader.aclose()


async def test_scrape_past_the_process_budget_is_unknown_not_refused(fake_engine: Callable[..., FakeEngine]) -> None:
    engine = fake_engine(_payload(500))
    reader = SourcesReader(limits=PayloadLimits(process_series=100))
    cfg = parse_metadata({"endpoints": engine.url, "engine": "vllm"})
    try:
        snap = await reader.read(cfg, time.time(), ("llm", "a"))
        [r] = snap.replicas
        assert r.signal is None and "--max-series-in-flight 100" in (r.error or "")
        snap = await reader.read(cfg, time.time() + 1, ("llm", "a"))  # read again: not refused
        assert snap.replicas[0].signal is None
    finally:
        await reader.aclose()
