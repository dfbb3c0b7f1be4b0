"""The version from git: `warmscale --version` (what the image smoke test runs), `python -m warmscale`,
the startup log line of a long-running process, and :func:`warmscale.version.version_info` (what a
``warmscale_build_info`` metric reads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from warmscale.cli import main
from warmscale.version import VersionInfo, _resolve, commit_of, version_info

REPO = Path(__file__).resolve().parents[2]


def _head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"warmscale {version_info().version}"


def test_python_dash_m() -> None:
    out = subprocess.run([sys.executable, "-m", "warmscale", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("warmscale ")


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs a git checkout")
def test_a_checkout_reports_its_own_commit() -> None:
    pytest.importorskip("setuptools_scm")
    info = _resolve(REPO)
    assert info.source == "git"
    assert info.commit == _head()
    assert info.labels() == {"version": info.version, "commit": info.commit}


def test_commit_from_a_development_version() -> None:
    assert commit_of("0.1.1.dev396+g9ccef39e7.d20261201") == "9ccef39e7"
    assert commit_of("0.1.0") == "unknown"


def test_a_tree_without_git_falls_back(tmp_path: Path) -> None:
    info = _resolve(tmp_path)  # no .git, no pyproject: the build's file or the metadata answers
    assert isinstance(info, VersionInfo) and info.source != "git" and info.version


def test_the_startup_log_line_carries_version_and_commit(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "warmscale", "stage", "--uri", "file:///nonexistent/model",
                           "--cache-root", str(tmp_path), "--log-format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    lines = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    start = next(x for x in lines if x["msg"] == "warmscale starting")
    assert start["command"] == "stage"
    assert start["version"] and start["commit"]
    if (REPO / ".git").exists():
        assert start["commit"] == _head()
