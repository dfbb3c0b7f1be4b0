"""warmscale_build_info: the version and commit of warmscale.version (git in a checkout), or the image's
$WARMSCALE_COMMIT."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from warmscale import buildinfo
from warmscale.version import VersionInfo, version_info

ROOT = Path(__file__).resolve().parents[2]


def test_commit_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(buildinfo.COMMIT_ENV, "abc1234")
    assert buildinfo.commit(VersionInfo("0.2.0+g9999999", "9999999", "build")) == "abc1234"


def test_commit_from_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(buildinfo.COMMIT_ENV, raising=False)
    assert buildinfo.commit(VersionInfo("0.2.0.dev3+g1a2b3c4.d20261201", "1a2b3c4", "build")) == "1a2b3c4"


def test_commit_from_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(buildinfo.COMMIT_ENV, raising=False)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0 or version_info().source != "git":
        pytest.skip("not a git checkout with setuptools-scm")
    assert buildinfo.commit() == head.stdout.strip()


def test_gauge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(buildinfo.COMMIT_ENV, "abc1234")
    registry = CollectorRegistry()
    buildinfo.register(registry, "scaler")
    labels = {"version": version_info().version, "commit": "abc1234", "component": "scaler"}
    assert registry.get_sample_value("warmscale_build_info", labels) == 1.0
