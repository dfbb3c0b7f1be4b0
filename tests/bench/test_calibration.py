"""The 8b-h100 engine profile against the published H100 measurements (docs/benchmarks.md), and the
calibration's client replay (rate inf, Poisson rate, closed loop at a concurrency limit)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warmscale.benchmarks.calibrate import Case, replay, run_cases, schedule
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES

P = ENGINE_PROFILES["8b-h100"]


def test_within_15_percent_of_each_target_but_the_stated_misses() -> None:
    """The targets are the vLLM V1 runs on a named H100 (benchcompare, vLLM 0.8.3): at least two rates
    within +-15% on both mean TTFT and output throughput; the V0 (Lambda) and unknown-GPU (PR #18566)
    runs are references whose errors are stated, not constraints."""
    rows = run_cases(P)
    ok = [r for r in rows if r["target"] and r["stated_error"] is None]
    assert len(ok) >= 2
    assert all(r["case"].startswith("benchcompare-h100") for r in ok)
    assert {r["case"] for r in rows if not r["target"]} == {"lambda-h100-llama3-8b-10",
                                                              "vllm-pr18566-llama31-8b-1000"}
    for r in rows:
        if r["stated_error"] is not None:
            continue
        for key, err in r["error"].items():
            assert abs(err) <= 0.15, (r["case"], key, err)


def test_a_stated_miss_is_a_miss_and_does_not_grow() -> None:
    """A stated miss still misses, its error has not grown, and the error stated (in the case and in
    docs/benchmarks.md) is the one measured: a change that moves it must restate it."""
    misses = [r for r in run_cases(P) if r["stated_error"] is not None]
    assert misses
    for r in misses:
        assert not r["within_15pct"], (r["case"], "meets +-15% now: make it a regular case")
        for key, err in r["error"].items():
            stated = r["stated_error"][key]
            assert abs(err) <= abs(stated) * 1.01 + 0.005, (r["case"], key, err, stated)
            assert err == pytest.approx(stated, rel=0.02, abs=0.005), (r["case"], key, err, stated)


def test_a_mixed_step_is_bounded_by_compute_or_memory_not_their_sum() -> None:
    """The roofline step: a big prefill chunk is compute-bound (the weights are read once while it
    computes), a small decode batch memory-bound."""
    overhead = P.step_fixed_s + P.step_per_seq_s
    assert P.step_s(1, 8192, 0) == pytest.approx(overhead + 8192 / P.prefill_tps)
    assert P.step_s(1, 1, 1000) == pytest.approx(overhead + P.step_weights_s + 1000 * P.step_per_kv_token_s)
    assert P.step_s(1, 8192, 1000) < (overhead + 8192 / P.prefill_tps + P.step_weights_s
                                      + 1000 * P.step_per_kv_token_s)


def _case(n: int, inp: int = 500, out: int = 100, **kw: object) -> Case:
    return Case(name="t", source="test", inputs=(inp,) * n, outputs=(out,) * n, ttft_mean_s=1.0,
                output_tps=1.0, **kw)  # type: ignore[arg-type]


def test_a_concurrency_limit_above_the_request_count_is_the_burst() -> None:
    burst = replay(_case(20), P)
    limited = replay(_case(20, max_concurrency=20), P)
    assert limited == burst
    assert burst["peak_in_flight"] == 20


def test_closed_loop_at_one_serves_requests_one_after_another() -> None:
    one = replay(_case(1), P)
    three = replay(_case(3, max_concurrency=1), P)
    assert three["peak_in_flight"] == 1
    assert three["ttft_mean_s"] == pytest.approx(one["ttft_mean_s"], rel=1e-9)
    assert three["duration_s"] == pytest.approx(3 * one["duration_s"], rel=1e-9)


def test_closed_loop_holds_the_limit_and_sends_on_each_finish() -> None:
    got = replay(_case(40, max_concurrency=4), P)
    assert got["peak_in_flight"] == 4
    # Four at a time, ten rounds: slower than the burst of 40, faster than one at a time.
    assert replay(_case(40), P)["duration_s"] < got["duration_s"] < replay(_case(40, max_concurrency=1), P)[
        "duration_s"]


def test_poisson_schedule_is_seeded_and_at_the_rate() -> None:
    c = _case(2000, request_rate=5.0, seed=7)
    t = schedule(c)
    assert t == schedule(c) and t != schedule(replace(c, seed=8))
    assert t[0] == 0.0 and t == sorted(t)
    assert (len(t) - 1) / t[-1] == pytest.approx(5.0, rel=0.06)


def test_a_slow_poisson_client_sees_the_unloaded_ttft() -> None:
    one = replay(_case(1), P)
    slow = replay(_case(5, request_rate=0.01, seed=1), P)  # ~100 s apart, each done in ~1 s
    assert slow["peak_in_flight"] == 1
    assert slow["ttft_mean_s"] == pytest.approx(one["ttft_mean_s"], rel=1e-9)
