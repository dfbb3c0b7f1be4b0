"""warmscale_build_info's commit: the image's $WARMSCALE_COMMIT, else the version's +g<hash>, else the
checkout's HEAD (a worktree's too), else "unknown"."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from warmscale import buildinfo

ROOT = Path(__file__).resolve().parents[2]


def test_commit_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(buildinfo.COMMIT_ENV, "abc1234")
    assert buildinfo.commit("0.2.0+g9999999") == "abc1234"


def test_commit_from_a_setuptools_scm_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(buildinfo.COMMIT_ENV, raising=False)
    assert buildinfo.commit("0.2.0.dev3+g1a2b3c4.d20261201") == "1a2b3c4"


def test_commit_from_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(buildinfo.COMMIT_ENV, raising=False)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert buildinfo.commit("0.1.0") == head.stdout.strip()


def test_no_git_is_unknown(tmp_path: Path) -> None:
    assert buildinfo._checkout_commit(tmp_path) is None


def test_gauge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(buildinfo.COMMIT_ENV, "abc1234")
    registry = CollectorRegistry()
    buildinfo.register(registry, "scaler")
    labels = {"version": buildinfo.version(), "commit": "abc1234", "component": "scaler"}
    assert registry.get_sample_value("warmscale_build_info", labels) == 1.0
