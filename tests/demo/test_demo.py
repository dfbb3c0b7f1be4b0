"""`warmscale demo` end to end, shortened: simulated vLLM engines with real /metrics, the real scaler
over gRPC, the KEDA + HPA emulation, a burst from a real trace."""

from __future__ import annotations

from pathlib import Path

import orjson

from warmscale.cli import main as cli_main
from warmscale.demo.burst import DEFAULT_TRACE, shared_traces_dir


def test_demo_scales_up_for_the_burst_and_writes_its_outputs(tmp_path: Path) -> None:
    out, png = tmp_path / "demo.json", tmp_path / "demo.png"
    rc = cli_main(["--log-level", "warning", "demo", "--quiet", "--span", "90", "--speed", "4", "--lead", "120",
                   "--startup", "3", "--json", str(out), "--plot", str(png)])
    assert rc == 0
    summary = orjson.loads(out.read_bytes())
    assert summary["trace"] == DEFAULT_TRACE and (shared_traces_dir() / DEFAULT_TRACE).exists()
    assert summary["requests"] > 200
    # The burst needs more than the one replica the demo starts with: the scaler asked, KEDA+HPA acted.
    assert summary["max_replicas"] > 1 and summary["scale_events"] >= 1
    assert any(row["desired"] and row["desired"] > 1 for row in summary["timeline"])
    assert 0.0 < summary["slo_attainment"] <= 1.0
    assert png.stat().st_size > 10_000
