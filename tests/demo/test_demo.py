"""`warmscale demo` end to end, shortened: one real burst (shipped trace) through today's setup
(Prometheus 15 s -> KEDA Prometheus scaler -> HPA, cold starts) and through warmscale (the real
scaler over gRPC, push activation, warm pool), side by side, on simulated vLLM engines."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from warmscale.cli import main as cli_main
from warmscale.demo.run import DemoOptions, format_summary
from warmscale.traces import PACKAGE_DIR
from warmscale.warmpool.startup_model import PROFILES, time_to_ready_table


def test_demo_replays_one_burst_through_both_fleets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("WARMSCALE_SHARED", raising=False)
    monkeypatch.chdir(tmp_path)  # no ../shared anywhere near: the trace comes from the package
    out, png, logf = tmp_path / "demo.json", tmp_path / "demo.png", tmp_path / "demo.log"
    rc = cli_main(["--log-level", "info", "demo", "--span", "420", "--speed", "30", "--every", "30",
                   "--json", str(out), "--plot", str(png), "--log-file", str(logf)])
    assert rc == 0
    printed = capsys.readouterr().out
    s = orjson.loads(out.read_bytes())
    assert s["trace"] == "azure_llm_2023_code.csv" and (PACKAGE_DIR / s["trace"]).is_file()
    assert s["requests"] > 1000
    today, ws = s["fleets"]["today"], s["fleets"]["warmscale"]
    # Both fleets saw the burst and scaled; only warmscale had warm capacity to start on.
    assert today["scale_events"] >= 1 and ws["scale_events"] >= 1
    assert set(today["starts"]) == {"cold"} and ws["starts"].get("placeholder+staged", 0) >= 1
    for f in (today, ws):
        assert 0.0 <= f["slo_attainment"] <= 1.0 and f["gpu_seconds"] > 0 and f["served"] > 0
    # The point of the demo: warm replicas in 90 s instead of cold ones in 510 s serve the later waves.
    assert ws["slo_attainment"] > today["slo_attainment"] + 0.1
    # Timeline: both fleets in every sample, and the scaler's decisions next to warmscale's.
    tl = s["timeline"]
    assert len(tl) > 50 and all({"today", "warmscale"} <= set(r) for r in tl)
    assert any(r["warmscale"]["target"] and r["warmscale"]["target"] > 1 for r in tl)
    assert any(r["warmscale"]["placeholders"] == 2 for r in tl)
    # The live table and the summary went to stdout, the logs to the file and nowhere else.
    assert "today's setup" in printed and "warmscale" in printed and "GPU-seconds" in printed
    for line in format_summary(s)[2:]:
        assert line in printed
    assert sum(1 for line in printed.splitlines() if line[:5].strip().count(":") == 1) >= 10  # table rows
    assert '{"ts"' not in printed and f"logs      : {logf}" in printed
    assert '"scaler serving"' in logf.read_text()
    assert png.stat().st_size > 20_000


def test_options_follow_the_speed_up() -> None:
    """Every duration of the scaler's metadata is divided by the speed; the startup ladder is the shared one."""
    md = DemoOptions(speed=8.0).metadata()
    assert float(md["scaleDownStabilizationSeconds"]) == 300.0 / 8 and float(md["ttftWindowSeconds"]) == 60.0 / 8
    assert md["ttftSloSeconds"] == "2" and md["hpaTolerance"] == "0"
    ttr = time_to_ready_table(PROFILES["8b-h100"])
    assert ttr["cold"] == 510.0 and ttr["placeholder+staged"] == 90.0


def test_a_trace_that_is_not_there_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["demo", "--trace", str(tmp_path / "nope.csv"), "--plot", "", "--log-file", ""])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nope.csv" in err and "Traceback" not in err


def test_logs_that_cannot_go_to_the_file_go_to_stderr_as_warnings_only(tmp_path: Path) -> None:
    import logging

    from warmscale.demo.run import _logs_to_file

    handler, where = _logs_to_file(str(tmp_path / "missing-dir" / "demo.log"))
    assert handler.level == logging.WARNING and where.startswith("stderr, warnings only")
    handler, where = _logs_to_file(str(tmp_path / "demo.log"))
    assert where == str(tmp_path / "demo.log") and handler.level == logging.NOTSET
    handler.close()
