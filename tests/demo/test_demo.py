"""`warmscale demo` end to end, shortened: one real burst (shipped trace) through today's setup
(Prometheus 15 s -> KEDA Prometheus scaler -> HPA, cold starts) and through warmscale (the real
scaler over gRPC, push activation, warm pool), side by side, on simulated vLLM engines."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from warmscale.cli import main as cli_main
from warmscale.demo.actuation import PROMETHEUS_SCRAPE_S, Clock, TodaySetup
from warmscale.demo.run import DemoOptions, format_summary
from warmscale.simulation.actuation import Hpa, HpaBehavior
from warmscale.simulation.profiles import ENGINE_PROFILES
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
    today, ws, hot, fixed = (s["fleets"][k] for k in ("today", "warmscale", "hot", "fixed"))
    # The engines are the trace benchmark's calibrated 8b-h100 profile (one source of truth).
    assert s["engine_prefill_tps"] == ENGINE_PROFILES["8b-h100"].prefill_tps == 37_000.0
    assert s["engine_max_num_seqs"] == ENGINE_PROFILES["8b-h100"].max_num_seqs == 1024
    # The fleets saw the burst and scaled; only warmscale's had warm capacity to start on.
    assert today["scale_events"] >= 1 and ws["scale_events"] >= 1 and hot["scale_events"] >= 1
    assert set(today["starts"]) == {"cold"} and ws["starts"].get("placeholder+staged", 0) >= 1
    for f in (today, ws, hot, fixed):
        assert 0.0 <= f["slo_attainment"] <= 1.0 and f["gpu_seconds"] > 0 and f["served"] > 0
    # The point of the demo: warm replicas are ready in 90 s, cold ones in 510 s.
    assert ws["first_added_ready_s"] < today["first_added_ready_s"]
    # The hot pool: the waker woke sleepers at the onset and they served the first wave, which no
    # replica can start in time for; its row pays its share of the pool on top of its Deployment.
    hp = s["hot_pool"]
    assert hp["wake_requests"] >= 1 and hp["awake_gpu_seconds"] > 0
    assert hot["slo_attainment"] > ws["slo_attainment"]
    assert hp["charged_gpu_seconds"] == pytest.approx(
        hp["awake_gpu_seconds"] + (hp["pool_gpu_seconds"] - hp["awake_gpu_seconds"]) * hp["share"], abs=1.0)
    assert hot["gpu_seconds"] == pytest.approx(hp["deployment_gpu_seconds"] + hp["charged_gpu_seconds"], abs=1.0)
    assert hp["share"] == 0.5 and len(hp["placements"]) == 6  # 3 sleepers of its own, 3 of idle models, 3 GPUs
    # The fixed fleet costs no more than warmscale, and one replica more would.
    n = fixed["replicas"]
    assert fixed["gpu_seconds"] <= ws["gpu_seconds"] < (n + 1) * s["trace_seconds"] + 1.0
    # Timeline: the live fleets in every sample, and the scalers' decisions next to warmscale's.
    tl = s["timeline"]
    assert len(tl) > 50 and all({"today", "warmscale", "hot"} <= set(r) for r in tl)
    assert any(r["hot"]["sleepers_routed"] >= 1 for r in tl)
    assert any(r["warmscale"]["target"] and r["warmscale"]["target"] > 1 for r in tl)
    assert any(r["warmscale"]["placeholders"] == 2 for r in tl)
    # The live table and the summary went to stdout, the logs to the file and nowhere else.
    assert "today's setup" in printed and "warmscale" in printed and "GPU-seconds" in printed
    assert "warmscale + hot pool" in printed and "fixed fleet of" in printed
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
    # The burst window is the newer part of the TTFT window and the prefill rule's prompt window: at the
    # production 10 s it spanned 80 trace seconds, more than the 60-s TTFT window it is part of.
    assert float(md["burstWindowSeconds"]) == 10.0 / 8 < float(md["ttftWindowSeconds"])
    # The capacity prior is a rate: the modelProfile's documented prefill prior, per wall second.
    assert md["modelProfile"] == "8b-h100" and float(md["prefillTpsPrior"]) == 16_000.0 * 8
    assert float(DemoOptions(speed=30.0).metadata()["prefillTpsPrior"]) == 16_000.0 * 30
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


def test_the_fixed_fleet_is_the_largest_within_warmscales_gpu_seconds() -> None:
    from warmscale.demo.fixed import equal_cost_replicas

    assert equal_cost_replicas(2_882.0, 1, 661.0) == 4  # 4.36 fleets' worth
    assert equal_cost_replicas(2_644.0, 1, 661.0) == 4  # exactly 4
    assert equal_cost_replicas(100.0, 1, 661.0) == 1  # never below one replica
    assert equal_cost_replicas(8_000.0, 4, 500.0) == 4  # 4 GPUs per replica


def test_the_demo_engine_is_the_bench_profile() -> None:
    """One source of truth: the demo's simulated engine takes every constant from the bench's profile."""
    from warmscale.benchmarks.sim.engine import ENGINE_PROFILES as BENCH
    from warmscale.simulation.engine import EngineProfile

    for name, p in BENCH.items():
        e = EngineProfile.of(name)
        assert (e.prefill_tps, e.max_num_seqs, e.kv_capacity_tokens) == (p.prefill_tps, p.max_num_seqs,
                                                                         int(p.kv_capacity_tokens))
        # The decode step is the bench's roofline with one token per sequence.
        for batch, kv in ((1, 2_000), (256, 200_000), (1024, 400_000)):
            assert e.decode_step_s(batch, kv) == pytest.approx(p.decode_step_s(batch, kv))
    assert EngineProfile() == EngineProfile.of("8b-h100")


def test_the_demo_pool_holds_its_sleepers_for_every_profile_with_measured_sleep_times() -> None:
    """The demo's pool (warmscale.demo.hot) as the product's planner places it: every sleeper placed,
    at most SLEEPERS_PER_GPU per pool GPU, the demo model's own sleepers each on its own GPU (so all
    may be awake at once); a profile without measured sleep and wake times gets no hot row."""
    from collections import Counter

    from warmscale.demo.hot import HOT_SLEEPERS, IDLE_MODELS, NAME, hot_wake_s, pool_plan
    from warmscale.simulation.hotpool import SLEEP_TIMES, SLEEPERS_PER_GPU

    for profile in SLEEP_TIMES:
        _, plan = pool_plan(profile, ENGINE_PROFILES[profile].gpus_per_replica)
        assert not plan.left_out and len(plan.placements) == HOT_SLEEPERS + IDLE_MODELS
        assert max(Counter(p.device for p in plan.placements).values()) <= SLEEPERS_PER_GPU
        own = [p.device for p in plan.placements if p.workload.endswith(f"/{NAME}")]
        assert len(own) == len(set(own)) == HOT_SLEEPERS
        assert hot_wake_s(profile) == SLEEP_TIMES[profile].wake_s[1]
    assert hot_wake_s("70b-h100-tp8") is None


async def test_todays_scrape_is_half_a_period_off_the_hpa_sync() -> None:
    """Today's HPA syncs at 0, 15, 30 ... s; Prometheus scrapes between them, so which scrape a sync
    reads never depends on which coroutine wakes first at a shared instant (the demo's today row moved
    2,283-3,900 GPU-seconds between runs when both ran at 45 s)."""
    clock = Clock(speed=100.0)  # 15 trace seconds = 150 ms here
    at: list[float] = []

    class Collector:
        async def collect(self, _now: float) -> Any:
            at.append(clock.now())
            return SimpleNamespace(replicas=())

    today = TodaySetup(fleet=None, clock=clock, collector=Collector(), min_replicas=1, max_replicas=2)  # type: ignore[arg-type]
    clock.start()
    task = asyncio.create_task(today._prometheus())
    await clock.sleep_until(4 * PROMETHEUS_SCRAPE_S)
    task.cancel()
    syncs = Hpa(1, 2, HpaBehavior()).b.sync_period_s
    assert syncs == PROMETHEUS_SCRAPE_S and len(at) >= 3
    for t in at:  # a quarter period or more from every sync instant
        assert PROMETHEUS_SCRAPE_S / 4 <= t % syncs <= 3 * PROMETHEUS_SCRAPE_S / 4, at
