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
                         BenchConfig(profile="8b-h100", oracle_iterations=1), lambda m: None)
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
