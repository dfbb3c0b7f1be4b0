"""benchmarks/decide_replay: the recorded inputs of a replay through two versions of decide."""

from __future__ import annotations

import gzip
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from warmscale.benchmarks import decide_replay
from warmscale.scaler.decide import need as need_module
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


def test_the_old_decide_runs_the_old_pipeline_steps_and_this_process_keeps_the_new() -> None:
    rev = "5818623"  # the last revision before need.py was restructured into scaler/sizing.py
    if subprocess.run(["git", "-C", str(decide_replay.REPO), "cat-file", "-e", f"{rev}^{{commit}}"],
                      capture_output=True).returncode != 0:
        pytest.skip(f"revision {rev} not in this clone")
    old = decide_replay.decide_at(rev)
    old_need = old.__globals__["need"]
    assert old_need.__code__.co_filename != need_module.need.__code__.co_filename
    assert "size" not in old_need.__globals__  # the old need step, which had its rules inline
    assert sys.modules["warmscale.scaler.decide.need"] is need_module
