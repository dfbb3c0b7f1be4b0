"""The production signal path of the trace replay: rendered metrics parse back to the engine's values,
and ``--fast-signals`` builds the same snapshots, tick by tick, on a shipped 1-hour trace."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from warmscale.benchmarks.sim.arrivals import load_trace
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, Engine, Request
from warmscale.benchmarks.sim.exposition import PromScrape, engine_signal, render_vllm
from warmscale.benchmarks.sim.policies import PromHpaPolicy, WarmscalePolicy, warmscale_metadata
from warmscale.benchmarks.sim.runner import SimSettings, simulate
from warmscale.signals.engines import parse_payload
from warmscale.signals.parsing import parse_text
from warmscale.simulation.actuation import HpaBehavior, KedaConfig
from warmscale.traces import resolve
from warmscale.warmpool.startup_model import PROFILES

TRACE = resolve("azure_llm_2023_code.csv")


def _busy_engine() -> Engine:
    e = Engine(ENGINE_PROFILES["8b-h100"], [])
    rng = random.Random(2)
    t = 0.0
    for _ in range(500):
        t += rng.expovariate(12.0)
        e.advance_to(t)
        e.enqueue(Request(t, rng.randint(50, 6000), rng.randint(1, 600)), t)
    e.sync(t)
    return e


def test_rendered_metrics_parse_to_the_engine_values() -> None:
    e = _busy_engine()
    assert e.waiting_n > 0 and e.running_n > 0 and e.h_ttft.count > 0
    text = render_vllm(e)
    sig = parse_payload(text, "auto")
    assert sig == engine_signal(e)
    assert (sig.waiting, sig.running) == (e.waiting_n, e.running_n)
    assert sig.kv_usage == pytest.approx(1 - e.free_blocks / e.total_blocks)
    idx = parse_text(text)
    assert idx.types["vllm:iteration_tokens_total"] == "histogram"
    it = idx.histogram("vllm:iteration_tokens_total")
    assert it is not None and it.count == e.steps_total and it.sum == pytest.approx(e.h_iter.sum)
    pre = idx.histogram("vllm:request_prefill_time_seconds")
    assert pre is not None and pre.count == e.h_ttft.count
    assert idx.total("vllm:request_success_total") == e.requests_total
    assert idx.total("vllm:num_preemptions_total") == e.preemptions_total
    assert idx.histogram("vllm:inter_token_latency_seconds") is not None


def _run_warmscale(fast: bool, hours: float) -> tuple[list, object]:
    work = load_trace(TRACE, dt=1.0, seed=1)
    keep = work.t < hours * 3600
    work.t, work.n, work.inp, work.out = work.t[keep], work.n[keep], work.inp[keep], work.out[keep]
    work.span_s = min(work.span_s, hours * 3600)
    md = warmscale_metadata(32, 2.0)
    pol = WarmscalePolicy(md, PROFILES["8b-h100"], 1, HpaBehavior(scale_down_stabilization_s=0.0, scale_up_pods=32),
                          KedaConfig(min_replicas=1, max_replicas=32), fast_signals=fast)
    pol.snapshots = []
    res = simulate(work, pol, ENGINE_PROFILES["8b-h100"], PROFILES["8b-h100"], 4, SimSettings(warmup_s=510.0))
    return pol.snapshots, res


@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
@pytest.mark.large
@pytest.mark.timeout(1800)
def test_fast_signals_equal_parsed_snapshots_tick_by_tick_on_a_shipped_hour() -> None:
    slow, r1 = _run_warmscale(False, 1.0)
    fast, r2 = _run_warmscale(True, 1.0)
    assert len(slow) == len(fast) > 3000
    for a, b in zip(slow, fast, strict=True):
        assert a == b
    assert r1.summary() == r2.summary()


@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
def test_fast_signals_equal_parsed_snapshots_first_minutes() -> None:
    slow, _ = _run_warmscale(False, 0.1)
    fast, _ = _run_warmscale(True, 0.1)
    assert len(slow) == len(fast) > 300
    assert slow == fast


@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
def test_prometheus_fed_baselines_read_the_same_values() -> None:
    work = load_trace(TRACE, dt=1.0, seed=1)
    keep = work.t < 900
    work.t, work.n, work.inp, work.out = work.t[keep], work.n[keep], work.inp[keep], work.out[keep]
    work.span_s = 900.0
    out = []
    for fast in (False, True):
        seen: list[list[dict[str, float]]] = []
        pol = PromHpaPolicy("hpa-gpu-util", "util", 0.8, 32, use_keda=False, fast_signals=fast)
        orig = PromScrape.maybe_scrape

        def spy(self, *a, _seen=seen, _orig=orig, **kw):  # type: ignore[no-untyped-def]
            did = _orig(self, *a, **kw)
            if did:
                _seen.append([dict(x) for x in self.samples])
            return did

        PromScrape.maybe_scrape = spy  # type: ignore[method-assign]
        try:
            res = simulate(work, pol, ENGINE_PROFILES["8b-h100"], PROFILES["8b-h100"], 2, SimSettings())
        finally:
            PromScrape.maybe_scrape = orig  # type: ignore[method-assign]
        out.append((seen, res.summary()))
    (s1, r1), (s2, r2) = out
    assert len(s1) == len(s2) > 50 and r1 == r2
    for a, b in zip(s1, s2, strict=True):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert x.keys() == y.keys()
            for k in x:
                assert math.isclose(x[k], y[k], rel_tol=1e-12, abs_tol=1e-12), (k, x[k], y[k])


def test_trace_file_is_shipped() -> None:
    assert Path(TRACE).name == "azure_llm_2023_code.csv"
