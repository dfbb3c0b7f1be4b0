"""The 8b-h100 engine profile against the published H100 measurements (docs/benchmarks.md)."""

from __future__ import annotations

from benchmarks.calibrate import run_cases
from benchmarks.sim.engine import ENGINE_PROFILES


def test_within_15_percent_of_each_published_measurement() -> None:
    rows = run_cases(ENGINE_PROFILES["8b-h100"])
    assert len(rows) >= 2
    for r in rows:
        for key, err in r["error"].items():
            assert abs(err) <= 0.15, (r["case"], key, err)
