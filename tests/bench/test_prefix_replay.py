"""Prefix caching end to end: a trace without block hashes replays exactly as before the cache
existed (a golden taken at the commit before it), the loader keeps the ids with their rows, and the
shipped Mooncake trace gets its hashes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from warmscale.benchmarks import cli
from warmscale.benchmarks.sim.arrivals import load_trace, rotated
from warmscale.traces import resolve

GOLDEN = Path(__file__).with_name("data") / "no_hashes_golden.json"
# The golden's run (made with these arguments at 23d4a04, before the prefix cache).
ARGS = ("--slo-ttft", "2", "--no-references", "--no-tuned", "--jobs", "1", "--quiet",
        "--policies", "warmscale,never-scale,keda-prometheus-queue,llm-d-queue-guard")


def _trace(path: Path, seed: int = 5) -> Path:
    """3,100 requests in 10 min with a burst at 300-330 s: enough load to start and stop replicas."""
    rng = np.random.default_rng(seed)
    t = np.sort(np.concatenate([rng.uniform(0, 600, 2500), rng.uniform(300, 330, 600)]))
    rows = ["timestamp_s,input_tokens,output_tokens"]
    rows += [f"{x:.3f},{int(rng.integers(100, 8000))},{int(rng.integers(5, 300))}" for x in t]
    path.write_text("\n".join(rows) + "\n")
    return path


def _run(tmp_path: Path, trace: Path, name: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    assert cli.main(["trace", "--trace", str(trace), "--json", str(out), *ARGS, *extra]) == 0
    return json.loads(out.read_text())


def _figures(doc: dict[str, Any]) -> dict[str, Any]:
    per = {n: {k: v for k, v in p.items() if k != "wall_s"} for n, p in doc["details"]["per_policy"].items()}
    return {"requests": doc["requests"], "policies": doc["policies"], "warmup_excluded": doc["warmup_excluded"],
            "per_policy": per}


def _sidecar(trace: Path, ids: list[str], block_tokens: int = 512) -> None:
    with gzip.open(trace.with_name(trace.stem + ".hashes.gz"), "wt") as f:
        f.write(f"# block_tokens={block_tokens}\n" + "\n".join(ids) + "\n")


def _unique_ids(trace: Path, block_tokens: int = 512) -> list[str]:
    out, nxt = [], 0
    for line in trace.read_text().splitlines()[1:]:
        blocks = -(-int(line.split(",")[1]) // block_tokens)
        out.append(f"{nxt}-{nxt + blocks - 1}" if blocks > 1 else str(nxt))
        nxt += blocks
    return out


def test_a_trace_without_hashes_replays_as_before(tmp_path: Path) -> None:
    doc = _run(tmp_path, _trace(tmp_path / "small.csv"), "plain")
    assert "prefix_cache" not in doc["details"]
    assert _figures(doc) == json.loads(GOLDEN.read_text())


def test_hashes_without_shared_prefixes_change_nothing_and_off_is_the_old_run(tmp_path: Path) -> None:
    plain_dir, hashed_dir = tmp_path / "plain", tmp_path / "hashed"
    plain_dir.mkdir()
    hashed_dir.mkdir()
    plain = _trace(plain_dir / "small.csv")
    hashed = _trace(hashed_dir / "small.csv")
    _sidecar(hashed, _unique_ids(hashed))
    on = _run(hashed_dir, hashed, "on")
    assert on["details"]["prefix_cache"]["hit_rate"] == {n: 0.0 for n in on["policies"]}
    assert _figures(on) == json.loads(GOLDEN.read_text())
    off = _run(hashed_dir, hashed, "off", "--no-prefix-cache")
    base = _run(plain_dir, plain, "base")
    for doc in (off, base):
        for p in doc["details"]["per_policy"].values():
            p.pop("wall_s")
        doc["details"].pop("wall_s")
    assert off == base


def test_the_loader_keeps_each_rows_ids_when_it_sorts_and_rotates(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp_s,input_tokens,output_tokens\n5,1100,1\n0,600,2\n2,10,3\n")
    _sidecar(trace, ["1 2-3", "1 4", "9"])
    w = load_trace(trace, dt=1.0, seed=1)
    assert w.hash_tokens == 512
    assert w.inp.tolist() == [600, 10, 1100]
    assert [tuple(x) for x in w.hashes] == [(1, 4), (9,), (1, 2, 3)]  # type: ignore[union-attr]
    # The third prompt reuses block 1 of the first; 9 is new; the first has nothing before it.
    assert w.compute_floor().tolist() == [600, 10, 1100 - 512]
    r = rotated(w, 1.0)
    assert {(int(a), tuple(h)) for a, h in zip(r.inp, r.hashes, strict=True)} == {  # type: ignore[arg-type]
        (600, (1, 4)), (10, (9,)), (1100, (1, 2, 3))}
    w.keep(w.t < 3)
    assert [tuple(x) for x in w.hashes] == [(1, 4), (9,)]  # type: ignore[union-attr]
    assert load_trace(trace, dt=1.0, seed=1, prefix_cache=False).hashes is None


def test_the_shipped_mooncake_trace_has_its_hashes() -> None:
    w = load_trace(resolve("mooncake-conv"), dt=1.0, seed=1)
    assert w.hashes is not None and w.hash_tokens == 512 and len(w.hashes) == 12031
    # Every prompt's first block is the same (a shared system prompt); an infinite shared cache would
    # save about 37% of the prompt tokens.
    assert {h[0] for h in w.hashes} == {0}
    saved = 1.0 - float(w.compute_floor().sum()) / float(w.inp.sum())
    assert saved == pytest.approx(0.373, abs=0.001)
