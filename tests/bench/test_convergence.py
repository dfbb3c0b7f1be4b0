"""Converged time: halving the control step changes no policy's result materially (issue 11, item 2).

Engines run in continuous time (event-driven segments) and requests reach them at their arrival
times, so the step only paces the control loops; this shows it on a shipped 1-hour trace."""

from __future__ import annotations

import pytest

from warmscale.benchmarks.sim.arrivals import load_trace
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES
from warmscale.benchmarks.sim.runner import BenchConfig, SimSettings, run_all
from warmscale.traces import resolve
from warmscale.warmpool.startup_model import PROFILES

TRACE = resolve("azure_llm_2023_code.csv")


def _run(dt: float, hours: float | None) -> dict:
    work = load_trace(TRACE, dt=1.0, seed=1)
    if hours is not None:
        keep = work.t < hours * 3600
        work.t, work.n, work.inp, work.out = work.t[keep], work.n[keep], work.inp[keep], work.out[keep]
        work.span_s = min(work.span_s, hours * 3600)
    s = SimSettings(dt=dt, fast_signals=True)
    results, _ = run_all(work, ENGINE_PROFILES["8b-h100"], PROFILES["8b-h100"], s,
                         BenchConfig(profile="8b-h100", oracle_iterations=1, references=False), lambda m: None)
    return results


def _check(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for name in a:
        assert abs(a[name].slo_attainment - b[name].slo_attainment) <= 0.005, name
        assert abs(a[name].gpu_hours / b[name].gpu_hours - 1.0) <= 0.02, name


@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
@pytest.mark.large
def test_halving_the_step_on_a_shipped_hour() -> None:
    _check(_run(1.0, None), _run(0.5, None))


@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
def test_halving_the_step_on_the_first_quarter_hour() -> None:
    _check(_run(1.0, 0.25), _run(0.5, 0.25))


RATE = resolve("servegen_reason_deepseek-r1_rate_600s.csv")


def _rate_run(tmp_path, tick: str) -> dict:
    import json

    from warmscale.benchmarks import cli

    out = tmp_path / f"r1_{tick}.json"
    rc = cli.main(["trace", "--trace", str(RATE), "--profile", "70b-h100-tp4", "--hours", "1", "--tick", tick,
                   "--fast-signals", "--no-references", "--no-tuned", "--exact-startup", "--oracle-iterations", "1",
                   "--quiet", "--json", str(out), "--policies",
                   "warmscale,keda-prometheus-queue,hpa-gpu-util,llm-d-queue-guard,wva-saturation,kpa-concurrency,"
                   "dynamo-planner,clairvoyant-heuristic"])
    assert rc == 0
    return json.loads(out.read_text())


@pytest.mark.skipif(not RATE.exists(), reason="trace not present")
def test_halving_the_tick_on_a_rate_curve_moves_no_policy(tmp_path) -> None:
    """Issue 21, requirement 4: the rate curve's arrival bin no longer follows the tick (it drew another
    Poisson sample: 10.9% of GPU-hours on the DeepSeek-R1 day's first 4 h). Every policy within 1 point
    of attainment and 2% of GPU-hours; the arrivals themselves are the same. Every baseline of issue 21
    (the gateway's flow control re-checks on its own 0.1 s grid). With exact start-ups: with the
    per-replica draws on, keda-prometheus-queue moved 1.2 points on this hour (19% attainment, 280 s
    TTFT p99: an overloaded fleet), a sensitivity not yet explained (docs/benchmarks.md)."""
    a, b = _rate_run(tmp_path, "1"), _rate_run(tmp_path, "0.5")
    assert a["requests"] == b["requests"] and a["details"]["rate_bin_s"] == b["details"]["rate_bin_s"] == 1.0
    assert b["details"]["tick_s"] == 0.5
    for name, p in a["policies"].items():
        q = b["policies"][name]
        assert abs(p["slo_attainment"] - q["slo_attainment"]) <= 0.01, name
        assert abs(q["gpu_hours"] / p["gpu_hours"] - 1.0) <= 0.02, name
