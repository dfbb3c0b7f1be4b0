"""The version comes from git when a wheel is built (setuptools-scm), and a copy without git metadata
(a source tarball, the image's build context) still builds, as pyproject's fallback version."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FALLBACK = "0.1.0"

pytestmark = pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs a git checkout")


def _wheel(src: Path, out: Path) -> Path:
    pytest.importorskip("setuptools_scm")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(src)], cwd=out, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [whl] = out.glob("warmscale-*.whl")
    return whl


def test_a_fresh_clone_builds_with_its_commit(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    whl = _wheel(clone, tmp_path)
    assert f"+g{head}" in whl.name  # no tag yet: 0.1.1.devN+g<commit>
    text = zipfile.ZipFile(whl).read("warmscale/_version.py").decode()
    assert head in text  # __commit_id__
    names = zipfile.ZipFile(whl).namelist()
    assert "warmscale/benchmarks/__init__.py" in names and "warmscale/version.py" in names


def test_a_tarball_without_git_builds_as_the_fallback(tmp_path: Path) -> None:
    archive = tmp_path / "src.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), "HEAD"], check=True, timeout=120)
    src = tmp_path / "src"
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="tar")
    assert not (src / ".git").exists()
    whl = _wheel(src, tmp_path)
    assert whl.name.startswith(f"warmscale-{FALLBACK}-")
