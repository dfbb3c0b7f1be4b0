"""benchmarks/decide_replay: the recorded inputs of a replay through two versions of decide."""

from __future__ import annotations

import gzip
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

from warmscale.benchmarks import decide_replay
from warmscale.scaler.policy import decide


def test_record_then_compare_explains_every_difference(tmp_path: Path) -> None:
    out = tmp_path / "r.pkl.gz"
    assert decide_replay.record(out, ["--trace", "azure-code", "--hours", "0.05", "--fast-signals"]) == 0
    with gzip.open(out, "rb") as f:
        inputs = pickle.load(f)["inputs"]
    assert len(inputs) > 100
    same = decide_replay.compare(inputs, decide, decide)
    assert same["differ"] == 0 and same["decisions"] == len(inputs)

    def one_more(obs: Any, state: Any, cfg: Any, now: float) -> tuple[Any, Any]:
        d, s = decide(obs, state, cfg, now)
        return replace(d, desired=d.desired + 1, reason="test"), s

    diff = decide_replay.compare(inputs, decide, one_more)
    assert diff["differ"] == len(inputs)
    assert all(" -> test " in k for k in diff["by_change"]), diff["by_change"]


def test_the_decide_of_this_checkout_at_head_is_loadable() -> None:
    old = decide_replay.decide_at("HEAD")
    assert callable(old)
