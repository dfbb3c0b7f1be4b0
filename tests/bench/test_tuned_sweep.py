"""The ``-tuned`` rows' sweep (issue 21, budget): the default row is not simulated twice, and a sweep is
cached per workload, member conditions and start fleet like the references, with the same rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from warmscale.benchmarks.sim import runner
from warmscale.benchmarks.sim.arrivals import Workload
from warmscale.benchmarks.sim.conditions import Conditions
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES
from warmscale.benchmarks.sim.runner import BenchConfig, PolicyResult, SimSettings, reactive_policy, run_all, tuned
from warmscale.warmpool.startup_model import COLD, PROFILES, time_to_ready

PROFILE = "8b-h100"
ENGINE, STARTUP = ENGINE_PROFILES[PROFILE], PROFILES[PROFILE]
NAME = "keda-prometheus-queue"


def _workload() -> Workload:
    """20 minutes: 3 req/s and a burst that needs more replicas."""
    rng = np.random.default_rng(2)
    t = np.sort(np.concatenate([rng.uniform(0, 1200, 3600), rng.uniform(500, 560, 1200)]))
    n = len(t)
    return Workload(name="synthetic", kind="requests", t=t, n=np.ones(n, dtype=np.int64),
                    inp=rng.integers(200, 4000, n).astype(np.float64),
                    out=rng.integers(5, 200, n).astype(np.float64), span_s=float(t[-1]))


def _settings() -> SimSettings:
    return SimSettings(dt=1.0, slo_ttft=2.0, fast_signals=True, conditions=Conditions(seed=7),
                       warmup_s=time_to_ready(STARTUP, COLD))


def _same(a: PolicyResult, b: PolicyResult) -> None:
    assert a.name == b.name
    assert a.summary() == b.summary()
    assert (a.slo_attainment_warm, a.gpu_hours_warm, a.starts, a.timeline) == (
        b.slo_attainment_warm, b.gpu_hours_warm, b.starts, b.timeline)
    assert a.params == b.params


@pytest.fixture()
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the policies the runner simulates."""
    names: list[str] = []
    real = runner.simulate

    def simulate(work, policy, *args, **kwargs):  # type: ignore[no-untyped-def]
        names.append(policy.name)
        return real(work, policy, *args, **kwargs)

    monkeypatch.setattr(runner, "simulate", simulate)
    return names


def test_the_sweep_reuses_the_default_row_and_a_cached_sweep_simulates_only_its_pick(
        tmp_path: Path, counted: list[str]) -> None:
    work, s = _workload(), _settings()
    bc = BenchConfig(profile=PROFILE, policies=(NAME,), tuned=True, cache_dir=None)
    max_r = runner.max_replicas_for(PROFILE)
    default = runner.simulate(work, reactive_policy(NAME, None, max_r, True, cond=s.conditions, profile=PROFILE),
                              ENGINE, STARTUP, 2, s)
    plain = tuned(f"{NAME}-tuned", work, ENGINE, STARTUP, s, bc, 2)  # no default row, no cache: every value
    assert len(counted) == 1 + len(runner.TUNING[NAME])
    counted.clear()
    cached_bc = replace(bc, cache_dir=tmp_path)
    first = tuned(f"{NAME}-tuned", work, ENGINE, STARTUP, s, cached_bc, 2, default_row=default)
    assert len(counted) == len(runner.TUNING[NAME]) - 1  # the default value is the default row
    _same(first, plain)
    counted.clear()
    again = tuned(f"{NAME}-tuned", work, ENGINE, STARTUP, s, cached_bc, 2, default_row=default)
    assert len(counted) == (0 if plain.params["tuned_value"] == runner.TUNING[NAME][0] else 1)
    _same(again, plain)
    counted.clear()
    # Another member's conditions or another start fleet: another sweep.
    other = tuned(f"{NAME}-tuned", work, ENGINE, STARTUP, replace(s, conditions=Conditions(seed=8)), cached_bc, 2)
    assert len(counted) == len(runner.TUNING[NAME])
    assert other.params["sweep"] != plain.params["sweep"]


def test_in_processes_the_default_row_comes_with_its_sweep() -> None:
    """``--jobs 2``: the ``-tuned`` task simulates its default row once and returns both rows, the same
    as one after the other."""
    work = _workload()
    bc = BenchConfig(profile=PROFILE, policies=(NAME, "warmscale"), tuned=True, references=False,
                     oracle_iterations=1)
    seq, _ = run_all(work, ENGINE, STARTUP, _settings(), replace(bc, jobs=1), log=lambda m: None)
    par, _ = run_all(work, ENGINE, STARTUP, _settings(), replace(bc, jobs=2), log=lambda m: None)
    assert set(seq) == set(par) == {NAME, f"{NAME}-tuned", "warmscale"}
    for name in seq:
        _same(seq[name], par[name])
