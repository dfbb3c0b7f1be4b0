"""The trace benchmark's P/D fleet mode: the KV handoff adds to TTFT, the decode instances expose the
NIXL transfer histogram the production parser reads, and the per-role run drives the production
trackers (their pdGroup records in the shared store carry the decode side's transfer time)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from warmscale.benchmarks.sim.arrivals import Workload
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, Engine
from warmscale.benchmarks.sim.exposition import engine_signal, render_vllm
from warmscale.benchmarks.sim.pd import (
    KV_BYTES_PER_TOKEN,
    DecodeEngine,
    PDFleet,
    PerRolePolicy,
    Transfer,
    pd_start,
    simulate_pd,
)
from warmscale.benchmarks.sim.runner import SimSettings
from warmscale.scaler.pdgroup import Member
from warmscale.signals.engines import parse_payload
from warmscale.warmpool.startup_model import PROFILES

from .member_spy import first_factors, records, spy

EP = ENGINE_PROFILES["8b-h100"]
SP = PROFILES["8b-h100"]


def test_transfer_time_from_kv_bytes() -> None:
    x = Transfer(KV_BYTES_PER_TOKEN["8b-h100"], gpus=1, fixed_s=0.005, bandwidth_bps=20e9)
    assert x.seconds(2000) == pytest.approx(0.005 + 2000 * 131_072 / 20e9)  # ~18 ms for a 2k-token prompt
    assert Transfer(327_680.0, gpus=4).seconds(2000) < Transfer(327_680.0, gpus=1).seconds(2000)


def test_one_request_through_the_fleet_pays_prefill_transfer_and_decode() -> None:
    engines: list[Engine] = []
    x = Transfer(131_072.0, fixed_s=0.5, bandwidth_bps=1e18)  # a visible, fixed 0.5 s handoff
    fleet = PDFleet(EP, SP, x, standby=(0, 0), node_idle_s=0.0, engines=engines)
    fleet.pre.start_ready(1, 0.0)
    fleet.dec.start_ready(1, 0.0)
    fleet.dispatch(1.0, 4000, 50, 1)
    for t in np.arange(1.0, 10.0, 0.1):
        fleet.advance(float(t))
    pre = fleet.pre.pods[0].engine
    dec = fleet.dec.pods[0].engine
    assert isinstance(dec, DecodeEngine)
    prefill_ttft = pre.h_ttft.sum  # the prefill instance's own first token (prefill only)
    assert pre.requests_total == 1 and pre.generation_tokens_total == 1
    assert dec.requests_total == 1 and dec.generation_tokens_total == 50
    [(arrival, ttft, n)] = fleet.dec.ttft_sink
    assert arrival == 1.0 and n == 1
    assert ttft == pytest.approx(prefill_ttft + 0.5, abs=0.02)  # + one decode step
    assert (dec.h_xfer.count, dec.h_xfer.sum) == (1, pytest.approx(0.5))
    assert fleet.transfers == 1 and not fleet.busy()


def test_decode_instance_metrics_carry_the_nixl_histogram_through_the_production_parser() -> None:
    e = DecodeEngine(EP, [], 0.0)
    e.h_xfer.observe(0.02, 3)
    text = render_vllm(e)
    assert "vllm:nixl_xfer_time_seconds_bucket" in text
    sig = parse_payload(text, "vllm")
    assert sig.kv_transfers_total == 3 and sig.kv_transfer_seconds_total == pytest.approx(0.06)
    fast = engine_signal(e)  # the fast path builds the same transfer fields
    assert (fast.kv_transfers_total, fast.kv_transfer_seconds_total) == (3, pytest.approx(0.06))
    assert parse_payload(render_vllm(Engine(EP, [], 0.0)), "vllm").kv_transfers_total is None


def _workload(minutes: float, rps: float, inp: int, out: int) -> Workload:
    rng = np.random.default_rng(7)
    t = np.sort(rng.uniform(0.0, minutes * 60.0, int(minutes * 60 * rps)))
    k = len(t)
    return Workload(name="synthetic", kind="requests", t=t, n=np.ones(k, dtype=np.int64),
                    inp=np.full(k, float(inp)), out=np.full(k, float(out)), span_s=minutes * 60.0)


def test_per_role_run_uses_the_production_trackers_and_the_shared_store() -> None:
    work = _workload(4.0, 6.0, 3000, 200)
    pol = PerRolePolicy(8, 2.0, SP, 0, {"scrapeIntervalSeconds": "2"}, {"decode": {"decodePerPrefillMin": "1"}},
                        fast_signals=False)
    s = SimSettings(dt=1.0, slo_ttft=2.0, sample_s=10.0, warmup_s=0.0)
    res = simulate_pd(work, pol, EP, SP, Transfer(131_072.0), pd_start(work, EP), s)
    assert res.result.served == work.requests
    assert res.transfer_mean_s == pytest.approx(0.005 + 3000 * 131_072 / 20e9)
    members = asyncio.new_event_loop().run_until_complete(pol.store.pd_members("bench", "llm"))
    dec = Member.from_dict(members["decode"])
    assert dec.kv_transfer_s == pytest.approx(res.transfer_mean_s, rel=0.05)  # read from rendered /metrics
    pre = Member.from_dict(members["prefill"])
    assert dec.desired >= pre.desired  # decodePerPrefillMin 1 holds through the store
    assert sum(res.reasons["prefill"].values()) > 0 and sum(res.reasons["decode"].values()) > 0


def test_bench_pd_command_prints_the_table_and_writes_json(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from warmscale.benchmarks.cli import main

    trace = tmp_path / "tiny.csv"
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 180, 400))
    trace.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(
        f"{x:.3f},{int(rng.integers(200, 4000))},{int(rng.integers(5, 300))}\n" for x in t))
    out = tmp_path / "pd.json"
    assert main(["pd", "--trace", str(trace), "--json", str(out), "--quiet", "--fast-signals"]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["modes"]) == {"combined", "pd-per-role"} and doc["requests"] == 400
    for m in doc["modes"].values():
        assert 0.0 <= m["slo_attainment"] <= 1.0 and m["gpu_hours"] > 0 and m["served"] == 400
    assert doc["modes"]["pd-per-role"]["kv_transfer_mean_s"] > 0.005
    assert "pd-per-role" in capsys.readouterr().out


def test_bench_trace_pd_flag_is_the_pd_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from warmscale.benchmarks.cli import main

    trace = tmp_path / "tiny.csv"
    trace.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(
        f"{i * 0.5:.3f},1000,50\n" for i in range(120)))
    out = tmp_path / "pd.json"
    assert main(["trace", "--pd", "--trace", str(trace), "--json", str(out), "--quiet", "--fast-signals",
                 "--warmscale-meta", "itlSloSeconds=0.1"]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["modes"]) == {"combined", "pd-per-role"}
    assert doc["details"]["params"]["combined"]["metadata"]["itlSloSeconds"] == "0.1"


def _tiny_trace(path, n: int = 400, span_s: float = 180.0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, span_s, n))
    path.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(
        f"{x:.3f},{int(rng.integers(200, 4000))},{int(rng.integers(5, 300))}\n" for x in t))
    return path


def test_bench_pd_ensemble_members_are_distinct_and_their_conditions_reach_the_simulator(
        tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 21, requirement 4, as bench trace: member i rotates the trace by i/N and its seed
    (seed*1000+i) drives both modes' start-up draws and loop phases; the JSON records each member."""
    import json

    from warmscale.benchmarks import pd_replay
    from warmscale.benchmarks.cli import main
    from warmscale.benchmarks.sim.conditions import Conditions, StartupDraws

    trace = _tiny_trace(tmp_path / "tiny.csv")
    log = tmp_path / "spy.jsonl"
    spy(monkeypatch, log, [(pd_replay, "simulate_pd"), (pd_replay, "simulate_combined")])
    out = tmp_path / "pd.json"
    assert main(["pd", "--trace", str(trace), "--json", str(out), "--quiet", "--fast-signals", "--ensemble", "3",
                 "--jobs", "1", "--seed", "4"]) == 0
    doc = json.loads(out.read_text())
    seeds = [4000, 4001, 4002]
    members = doc["details"]["ensemble_members"]
    assert [m["kind"] for m in members] == ["member"] * 3
    assert [m["fraction"] for m in members] == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert [m["seed"] for m in members] == seeds
    assert [m["conditions"]["seed"] for m in members] == seeds and doc["details"]["conditions"]["seed"] == 4000
    for m in members:
        assert set(m["modes"]) == {"combined", "pd-per-role"}
        assert all(0.0 <= r["slo_attainment"] <= 1.0 and r["gpu_hours"] > 0 for r in m["modes"].values())
    assert members[0]["modes"]["combined"]["gpu_hours"] == doc["modes"]["combined"]["gpu_hours"]  # member 0: the run
    runs = records(log, "run")
    # each mode of each member ran with the member's seed, on the member's own (rotated) arrivals
    assert sorted((r["entry"], r["seed"]) for r in runs) == sorted((m, s) for m in ("simulate_combined", "simulate_pd")
                                                                   for s in seeds)
    by_seed = {r["seed"]: r["arrivals"] for r in runs}
    assert len({str(a) for a in by_seed.values()}) == 3
    assert all(r["arrivals"] == by_seed[r["seed"]] for r in runs)  # paired: both modes, the same arrivals
    # start-up draws: every pool (combined; prefill and decode) draws from its member's stream
    expected = {first_factors(StartupDraws(s, Conditions(seed=s).sigma)) for s in seeds}
    drawn = {tuple(c["factors"]) for c in records(log, "cluster") if c["factors"] is not None}
    assert drawn == expected and len(expected) == 3  # three members, three different streams
    assert all(c["factors"] is not None for c in records(log, "cluster"))
    # phases: every HPA (the combined pool's, each role's) syncs at its member's phase
    phases = {h["phase"] for h in records(log, "hpa")}
    assert phases == {Conditions(seed=s).phase("sync", 15.0) for s in seeds}
    # --exact-startup: the ladder's times, every phase 0
    log.unlink()
    assert main(["pd", "--trace", str(trace), "--json", str(out), "--quiet", "--fast-signals", "--exact-startup"]) == 0
    assert json.loads(out.read_text())["details"]["conditions"]["seed"] is None
    assert all(c["factors"] is None for c in records(log, "cluster"))
    assert {h["phase"] for h in records(log, "hpa")} == {0.0}


def test_pd_prefill_instances_cache_prefixes_of_a_trace_with_block_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """mooncake-conv carries block ids: prefix caching is on by default (the combined replicas and the
    prefill instances hit), off with --no-prefix-cache, as in bench trace."""
    import json

    from warmscale.benchmarks.cli import main

    out = tmp_path / "pd.json"
    args = ["pd", "--trace", "mooncake-conv", "--hours", "0.03", "--json", str(out), "--quiet", "--fast-signals",
            "--slo-ttft", "10"]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    rates = doc["details"]["prefix_cache"]["hit_rate"]
    assert rates["combined"] > 0 and rates["pd-per-role"] > 0
    slower = doc["modes"]["pd-per-role"]
    assert main([*args, "--no-prefix-cache"]) == 0
    off = json.loads(out.read_text())
    assert "prefix_cache" not in off["details"]
    assert off["modes"]["pd-per-role"]["ttft_p50_s"] != slower["ttft_p50_s"]  # the hits changed the prefill work


def test_the_pd_fleets_pools_share_the_members_start_up_stream() -> None:
    from warmscale.benchmarks.sim.conditions import StartupDraws
    from warmscale.warmpool.startup_model import COLD, time_to_ready

    draws = StartupDraws(7, 0.27)
    expect = StartupDraws(7, 0.27)
    fleet = PDFleet(EP, SP, Transfer(131_072.0), standby=(0, 0), node_idle_s=0.0, engines=[], draws=draws)
    fleet.pre.set_spec(1, 0.0)
    fleet.dec.set_spec(1, 0.0)
    ladder = time_to_ready(SP, COLD)
    assert fleet.pre.pods[0].ready_at == pytest.approx(ladder * expect.factor())
    assert fleet.dec.pods[0].ready_at == pytest.approx(ladder * expect.factor())  # the stream's next draw
    assert fleet.pre.pods[0].ready_at != fleet.dec.pods[0].ready_at
