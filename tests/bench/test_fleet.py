"""`warmscale bench fleet`: the JSON contract, the pool charged in full, no wake routed before its
canary, determinism (short runs; nothing here is timed)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from warmscale.benchmarks import cli
from warmscale.benchmarks.sim.arrivals import Workload
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES
from warmscale.benchmarks.sim.fleet import CONFIGS, FLEET, ModelSpec, simulate_fleet
from warmscale.benchmarks.sim.hotpool import SLEEP_TIMES, canary_s
from warmscale.benchmarks.sim.runner import SimSettings

from .member_spy import first_factors, records, spy

# A short run: the first 3 minutes of every model's trace.
SHORT_HOURS = "0.05"


def _run(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    rc = cli.main(["fleet", "--hours", SHORT_HOURS, "--fast-signals", "--jobs", "1", "--quiet", "--json", str(out),
                   *extra])
    assert rc == 0
    return json.loads(out.read_text())


def test_json_contract_and_determinism(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", "--plot", str(tmp_path / "f.png"))
    assert set(a["configurations"]) == set(CONFIGS)
    models = {m.name for m in FLEET}
    assert len(models) >= 6 and {m.profile for m in FLEET} >= {"8b-h100", "70b-h100-tp4"}
    for c in a["configurations"].values():
        assert set(c) >= {"gpu_hours", "slo_attainment", "wakes", "wake_to_first_token_s"}
        assert c["gpu_hours"] > 0
        att = c["slo_attainment"]
        assert set(att) == {"per_model", "median", "min"} and set(att["per_model"]) == models
        assert all(0.0 <= v <= 1.0 for v in att["per_model"].values())
        assert att["min"] == min(att["per_model"].values()) and att["min"] <= att["median"]
        assert set(c["wake_to_first_token_s"]) == {"p50", "p99"}
    for name in ("keda-min1", "keda-zero", "warmscale-warm"):
        assert a["configurations"][name]["wakes"] == 0
    assert isinstance(a["goal"]["met"], bool)
    assert (tmp_path / "f.png").stat().st_size > 1000
    b = _run(tmp_path, "b")
    assert a["configurations"] == b["configurations"]


def _burst_fleet() -> tuple[tuple[ModelSpec, ...], dict[str, Workload], dict[str, int]]:
    """Two 8B models: light traffic, then a burst at 300 s that one replica cannot take."""
    specs = (ModelSpec("burst-a", "synthetic", 0.0, "8b-h100", 2.0), ModelSpec("burst-b", "synthetic", 0.0,
                                                                                 "8b-h100", 2.0))
    works = {}
    for k, s in enumerate(specs):
        rng = np.random.default_rng(7 + k)
        t = np.sort(np.concatenate([rng.uniform(0, 600, 300), rng.uniform(300 + 30 * k, 330 + 30 * k, 1500)]))
        works[s.name] = Workload(s.name, "requests", t, np.ones(len(t), dtype=np.int64),
                                 rng.integers(500, 3000, len(t)).astype(float),
                                 rng.integers(50, 300, len(t)).astype(float), span_s=600.0)
    return specs, works, {s.name: 1 for s in specs}


def test_pool_gpus_charged_in_full() -> None:
    specs, works, initial = _burst_fleet()
    res, hot = simulate_fleet("warmscale-hot", specs, works, initial, SimSettings(fast_signals=True))
    assert hot is not None and res.wakes > 0
    # Two 8B models, two sleepers per pool GPU: one pool GPU, charged for the whole run asleep or not.
    assert res.pool_gpus == 1
    assert res.gpu_hours == res.deployment_gpu_hours + 1 * 600.0 / 3600.0
    # The fleet's 70B models share a TP-4 group: it counts 4 GPUs.
    from warmscale.benchmarks.sim.hotpool import HotCluster, build_pool
    from warmscale.warmpool.startup_model import PROFILES

    ep = ENGINE_PROFILES["70b-h100-tp4"]
    clusters = [(f"m{i}", "70b-h100-tp4", ep, HotCluster(ep, PROFILES["70b-h100-tp4"])) for i in range(2)]
    assert build_pool(clusters, 1).gpus() == 4


def test_a_wake_is_never_routed_before_its_canary() -> None:
    specs, works, initial = _burst_fleet()
    # The first wake serves wrong output: its canary fails, the sleeper goes back to sleep and the
    # next decision that still wants more than is ready wakes it again.
    res, hot = simulate_fleet("warmscale-hot", specs, works, initial, SimSettings(fast_signals=True),
                              faulty_wake=lambda workload, n: n == 1)
    assert hot is not None and len(hot.history) >= 2
    wake_s = SLEEP_TIMES["8b-h100"].wake_s[1]
    routed_ok = 0
    for _, b in hot.history:
        assert b.serve_at >= b.wake_requested_at + wake_s + canary_s(ENGINE_PROFILES["8b-h100"]) - 1e-9
        if not b.canary_ok:
            assert b.first_routed_at is None  # a failed canary: never routed
        elif b.first_routed_at is not None:
            assert b.first_routed_at >= b.serve_at - 1e-9
            routed_ok += 1
    assert res.failed_wakes == sum(1 for _, b in hot.history if not b.canary_ok) >= 1
    assert routed_ok >= 1
    # At most one engine awake per pool GPU at any time (wake request to the end of its sleep).
    spans = sorted((b.wake_requested_at, b.asleep_at) for _, b in hot.history)
    assert all(b0 >= a1 - 1e-9 for (_, a1), (b0, _) in itertools.pairwise(spans))


def test_keda_zero_keeps_a_serving_fleet_until_its_cooldown() -> None:
    """KEDA's first poll finds no scrape yet: the start fleet is kept for cooldownPeriod (it was serving
    before the trace), and requests running keep it active (the trigger on running requests)."""
    from warmscale.benchmarks.sim.fleet import build_policy

    spec = FLEET[0]
    pol = build_policy("keda-zero", spec, 2, True)
    assert pol.kedal is not None and pol.activation == ("waiting", "running")  # type: ignore[attr-defined]
    assert pol.kedal.poll(0.0, False, 2) == 2
    assert pol.kedal.poll(300.0, False, 2) == 0  # inactive for the cooldown (300 s): to zero


def test_an_unknown_configuration_names_the_flag(capsys: object) -> None:
    assert cli.main(["fleet", "--configs", "keda-min1,keda-two", "--quiet"]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "--configs" in err and "keda-two" in err


def test_members_are_distinct_and_their_conditions_reach_the_simulator(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21, requirement 4, as bench trace: member i rotates every model's trace by a further i/N
    and its seed (seed*1000+i) drives every model's start-up draws and loop phases, the same for every
    configuration of the member (paired); the JSON records each member's figures."""
    from warmscale.benchmarks import fleet
    from warmscale.benchmarks.sim.conditions import Conditions, StartupDraws

    log = tmp_path / "spy.jsonl"
    spy(monkeypatch, log, [(fleet, "simulate_fleet")])
    configs = ("keda-min1", "warmscale-warm")
    doc = _run(tmp_path, "e", "--ensemble", "2", "--seed", "3", "--configs", ",".join(configs))
    seeds = [3000, 3001]
    members = doc["details"]["ensemble_members"]
    assert [(m["kind"], m["fraction"], m["seed"]) for m in members] == [("member", 0.0, 3000), ("member", 0.5, 3001)]
    assert [m["conditions"]["seed"] for m in members] == seeds and doc["details"]["conditions"]["seed"] == 3000
    assert members[0]["configurations"] == doc["configurations"]  # member 0 is the contract's run
    assert set(members[1]["configurations"]) == set(configs)
    ens = doc["ensemble"]
    assert ens["members"] == 2 and set(ens["configurations"]) == set(configs)
    for e in ens["configurations"].values():
        assert e["gpu_hours"]["min"] <= e["gpu_hours"]["median"] <= e["gpu_hours"]["max"]
    runs = records(log, "run")
    assert sorted((r["config"], r["seed"]) for r in runs) == sorted((c, s) for c in configs for s in seeds)
    by_seed = {s: [r["arrivals"] for r in runs if r["seed"] == s] for s in seeds}
    assert all(a == by_seed[s][0] for s in seeds for a in by_seed[s])  # paired: every configuration, one workload
    assert by_seed[3000][0] != by_seed[3001][0] and len(by_seed[3000][0]) == len(FLEET)  # rotated per member
    # every model's cluster draws from its member's stream (made before any replica: the same next factors)
    expected = {first_factors(StartupDraws(s, Conditions(seed=s).sigma)) for s in seeds}
    clusters = records(log, "cluster")
    assert len(clusters) == len(configs) * len(seeds) * len(FLEET)
    assert {tuple(c["factors"]) for c in clusters if c["factors"] is not None} == expected and len(expected) == 2
    assert all(c["factors"] is not None for c in clusters)
    assert {h["phase"] for h in records(log, "hpa")} == {Conditions(seed=s).phase("sync", 15.0) for s in seeds}
    # --exact-startup: the ladder's times, every phase 0
    log.unlink()
    exact = _run(tmp_path, "x", "--exact-startup", "--configs", "keda-min1")
    assert exact["details"]["conditions"]["seed"] is None and "ensemble" not in exact
    assert all(c["factors"] is None for c in records(log, "cluster"))
    assert {h["phase"] for h in records(log, "hpa")} == {0.0}


def test_mooncake_is_replayed_with_prefix_caching(tmp_path: Path) -> None:
    """The fleet's mooncake-conv model carries block ids: prefix caching on by default, as bench trace."""
    on = _run(tmp_path, "on", "--configs", "keda-min1")["details"]["per_configuration"]["keda-min1"]["per_model"]
    assert on["mooncake-8b"]["prefix_cache_hit_rate"] > 0
    assert all("prefix_cache_hit_rate" not in v for m, v in on.items() if m != "mooncake-8b")  # no block ids
    off = _run(tmp_path, "off", "--configs", "keda-min1", "--no-prefix-cache")
    assert "prefix_cache_hit_rate" not in off["details"]["per_configuration"]["keda-min1"]["per_model"]["mooncake-8b"]
    assert off["details"]["prefix_cache"] is False
