"""End to end on small synthetic traces: JSON shape, determinism, the real policy code path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from warmscale.benchmarks import cli
from warmscale.benchmarks.sim.arrivals import load_trace
from warmscale.benchmarks.sim.runner import CLAIRVOYANT, POLICY_NAMES, REFERENCE_ROWS, TUNED_SUFFIX, TUNING

KEYS = {"slo_attainment", "gpu_hours", "ttft_p50_s", "ttft_p99_s", "cold_starts", "max_replicas",
        "slo_attainment_warm", "x_clairvoyant_best", "x_bound"}
# --tuned is on by default (issue 21, requirement 2): a <name>-tuned row per reactive baseline.
ROWS = set(POLICY_NAMES) | set(REFERENCE_ROWS) | {n + TUNED_SUFFIX for n in TUNING}


def _requests_csv(path: Path, seed: int = 3) -> Path:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 1200, 2400))
    t[1200:1500] = np.sort(rng.uniform(600, 630, 300))  # a burst
    t.sort()
    rows = ["timestamp_s,input_tokens,output_tokens,extra"]
    rows += [f"{x:.3f},{int(rng.integers(100, 3000))},{int(rng.integers(5, 300))},z" for x in t]
    path.write_text("\n".join(rows) + "\n")
    return path


def _run(tmp_path: Path, trace: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    rc = cli.main(["trace", "--trace", str(trace), "--json", str(out), "--quiet", "--oracle-iterations", "1",
                   "--reference-cache", str(tmp_path / "refcache"), "--search-evals", "8", *extra])
    assert rc == 0
    return json.loads(out.read_text())


def test_json_shape_and_determinism(tmp_path: Path) -> None:
    trace = _requests_csv(tmp_path / "t.csv")
    a = _run(tmp_path, trace, "a", "--plot", str(tmp_path / "p.png"), "--fast-signals")
    assert set(a) >= {"trace", "profile", "slo_ttft_s", "requests", "policies", "references"}
    assert a["requests"] == 2400 and a["profile"] == "8b-h100" and a["slo_ttft_s"] == 2.0
    assert set(a["policies"]) == ROWS
    refs = a["references"]
    assert set(refs) >= {"bound_gpu_hours", "clairvoyant_best_gpu_hours", "static_best"}
    assert set(refs["static_best"]) == {"replicas", "gpu_hours"}
    for p in a["policies"].values():
        assert set(p) == KEYS
        assert 0.0 <= p["slo_attainment"] <= 1.0 and p["gpu_hours"] > 0
        assert p["x_clairvoyant_best"] == pytest.approx(p["gpu_hours"] / refs["clairvoyant_best_gpu_hours"], rel=1e-5)
        assert p["x_bound"] == pytest.approx(p["gpu_hours"] / refs["bound_gpu_hours"], rel=1e-5)
    pol = a["policies"]
    assert pol["clairvoyant-best"]["x_clairvoyant_best"] == 1.0
    assert pol["clairvoyant-best"]["gpu_hours"] <= pol["clairvoyant-heuristic"]["gpu_hours"] + 1e-9
    assert pol["static-best"]["gpu_hours"] == refs["static_best"]["gpu_hours"]
    assert pol["oracle-instant"]["gpu_hours"] <= pol["clairvoyant-heuristic"]["gpu_hours"] + 1e-9
    assert set(a["warmup_excluded"]) == ROWS
    for w in a["warmup_excluded"].values():
        assert set(w) == {"slo_attainment", "gpu_hours"}
    start = a["details"]["oracle"]["initial_replicas"]
    assert all(p["params"]["initial_replicas"] == start for p in a["details"]["per_policy"].values())
    assert (tmp_path / "p.png").stat().st_size > 1000
    b = _run(tmp_path, trace, "b", "--fast-signals")
    assert a["policies"] == b["policies"]
    assert "ensemble" not in a


STAT = {"min", "median", "max"}


def test_ensemble_json_contract_and_determinism_per_seed(tmp_path: Path) -> None:
    trace = _requests_csv(tmp_path / "t.csv")
    # "oracle": v2's name of clairvoyant-heuristic, still accepted
    args = ("--ensemble", "3", "--fast-signals", "--tuned", "--policies",
            "warmscale,hpa-gpu-util,static-peak-clairvoyant,oracle")
    a = _run(tmp_path, trace, "e1", *args)
    ens = a["ensemble"]
    assert set(ens) == {"members", "policies", "paired"} and ens["members"] == 3
    names = {"warmscale", "hpa-gpu-util", "hpa-gpu-util-tuned", "static-peak-clairvoyant", "clairvoyant-heuristic",
             *REFERENCE_ROWS}
    assert set(ens["policies"]) == names
    stats = ("slo_attainment", "slo_attainment_warm", "x_clairvoyant_best_warm", "x_bound", "gpu_x_oracle",
             "gpu_x_oracle_warm")
    for p in ens["policies"].values():
        assert set(p) == {*stats, "dominated_by"}
        for k in stats:
            assert set(p[k]) == STAT and p[k]["min"] <= p[k]["median"] <= p[k]["max"]
        assert isinstance(p["dominated_by"], list)
        assert not set(p["dominated_by"]) & set(CLAIRVOYANT)
    assert ens["policies"]["clairvoyant-heuristic"]["gpu_x_oracle"] == {"min": 1.0, "median": 1.0, "max": 1.0}
    assert ens["policies"]["clairvoyant-best"]["x_clairvoyant_best_warm"] == {"min": 1.0, "median": 1.0, "max": 1.0}
    # paired: warmscale against every baseline that does not know the future, static-best included
    assert set(ens["paired"]) == {"hpa-gpu-util", "hpa-gpu-util-tuned", "static-best"}
    for p in ens["paired"].values():
        assert set(p) == {"median_diff_slo", "ci95_slo", "median_diff_gpu", "ci95_gpu"}
        assert p["ci95_slo"][0] <= p["median_diff_slo"] <= p["ci95_slo"][1]
        assert p["ci95_gpu"][0] <= p["median_diff_gpu"] <= p["ci95_gpu"][1]
    members = a["details"]["ensemble_members"]
    assert [m["kind"] for m in members] == ["member"] * 3  # distinct: rotation and seed each
    assert len({m["fraction"] for m in members}) == len({m["seed"] for m in members}) == 3
    # the unperturbed member is today's single run
    single = _run(tmp_path, trace, "s", *args[2:])
    assert single["policies"] == a["policies"]
    # determinism per seed: same seed same numbers, another seed other jitter
    assert _run(tmp_path, trace, "e2", *args)["ensemble"] == ens
    c = _run(tmp_path, trace, "e3", *args, "--seed", "9")
    assert c["details"]["ensemble_members"][1]["seed"] != a["details"]["ensemble_members"][1]["seed"]
    assert c["details"]["conditions"]["seed"] == 9000  # member 0's start-up draws and phases follow --seed
    exact = _run(tmp_path, trace, "x1", *args[2:], "--exact-startup")
    assert exact["details"]["conditions"]["seed"] is None
    assert _run(tmp_path, trace, "x2", *args[2:], "--exact-startup", "--seed", "9")["policies"] == exact["policies"]


def test_rate_curve_arrivals_are_seeded_poisson(tmp_path: Path) -> None:
    tokens = _requests_csv(tmp_path / "tok.csv")
    curve = tmp_path / "curve.csv"
    curve.write_text("bucket_start_s,bucket_end_s,rate_rps,active_clients\n0,600,2.0,3\n600,1200,10.0,3\n")
    w1 = load_trace(curve, dt=5.0, seed=7, tokens_from=tokens)
    w2 = load_trace(curve, dt=5.0, seed=7, tokens_from=tokens)
    w3 = load_trace(curve, dt=5.0, seed=8, tokens_from=tokens)
    assert np.array_equal(w1.n, w2.n) and np.array_equal(w1.inp, w2.inp)
    assert not np.array_equal(w1.n, w3.n)
    first = w1.n[w1.t < 600].sum()
    second = w1.n[w1.t >= 600].sum()
    assert abs(first - 1200) < 200 and abs(second - 6000) < 400
    counts = tmp_path / "counts.csv"
    counts.write_text("bucket_start_s,bucket_end_s,requests\n0,5,10\n5,15,20\n")
    assert abs(load_trace(counts, dt=5.0, seed=1, tokens_from=tokens).requests - 30) < 20


def test_warmscale_runs_the_production_policy(tmp_path: Path, monkeypatch) -> None:
    from warmscale.scaler import policy as policy_module

    calls = {"n": 0}
    real = policy_module.decide

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr("warmscale.scaler.tracker.decide", counting)
    trace = _requests_csv(tmp_path / "t.csv")
    # --jobs 1: the policies in this process, where the counter is (with --jobs 2 they run in forked children)
    doc = _run(tmp_path, trace, "w", "--policies", "warmscale,clairvoyant-heuristic,oracle-instant", "--jobs", "1",
               "--no-references")
    assert calls["n"] > 100
    assert set(doc["policies"]) == {"warmscale", "clairvoyant-heuristic", "oracle-instant"}
    assert doc["references"] is None
