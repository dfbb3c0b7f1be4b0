"""Progress bars: on a terminal only, never under --quiet or in CI (CI=true), never in a pipe."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from warmscale import progress
from warmscale.cli import main


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_when_a_bar_is_drawn() -> None:
    pytest.importorskip("tqdm")
    assert progress.wanted(stream=Tty(), env={})
    assert not progress.wanted(quiet=True, stream=Tty(), env={})
    assert not progress.wanted(stream=Tty(), env={"CI": "true"})
    assert not progress.wanted(stream=io.StringIO(), env={})  # a pipe or a CI log


def test_a_bar_on_a_terminal_shows_an_eta() -> None:
    pytest.importorskip("tqdm")
    out = Tty()
    with progress.bar(10, "work", unit="s", stream=out, env={}) as bar:
        bar.write("a line")
        bar.update(4)
    text = out.getvalue()
    assert "a line" in text and "work" in text and "4/10" in text and "<" in text  # elapsed<remaining


def test_no_bar_in_ci_only_the_lines() -> None:
    out = Tty()
    with progress.bar(10, "work", stream=out, env={"CI": "true"}) as bar:
        bar.write("a line")
        bar.update(4)
    assert out.getvalue() == "a line\n"


def test_bench_trace_in_a_pipe_prints_no_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("numpy")
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.5},200,20\n" for i in range(240)))
    rc = main(["bench", "trace", "--trace", str(trace), "--policies", "warmscale", "--fast-signals", "--jobs", "1",
               "--oracle-iterations", "1", "--json", str(tmp_path / "r.json")])
    assert rc == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "it/s" not in err and "t.csv: 240 requests" in err
    rc = main(["bench", "trace", "--trace", str(trace), "--policies", "warmscale", "--fast-signals", "--jobs", "1",
               "--oracle-iterations", "1", "--json", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 0 and capsys.readouterr().err == ""


def test_the_cluster_build_plans_only_what_is_missing(tmp_path: Path) -> None:
    from warmscale.localcluster.binaries import BUILD_SECONDS, pinned_versions, planned

    everything = planned(["--volcano"], tmp_path)
    assert set(everything) == set(BUILD_SECONDS)
    etcd = everything["etcd"]
    etcd.parent.mkdir(parents=True)
    etcd.write_text("")
    os.chmod(etcd, 0o755)
    assert "etcd" not in planned([], tmp_path)
    assert set(planned(["--keda-only"], tmp_path)) == {"keda-operator", "keda-adapter", "ray-operator"}
    assert pinned_versions()["KEDA_VERSION"] in str(planned(["--keda-only"], tmp_path)["keda-operator"])
    assert set(planned(["--volcano-only"], tmp_path)) == {"vc-scheduler", "vc-controller-manager"}
    assert not {"vc-scheduler", "keda-operator"} & set(planned(["--no-keda"], tmp_path))
