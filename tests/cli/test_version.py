"""`warmscale --version` (what the image smoke test runs) and `python -m warmscale`."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

from warmscale.cli import main


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"warmscale {version('warmscale')}"


def test_python_dash_m() -> None:
    out = subprocess.run([sys.executable, "-m", "warmscale", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("warmscale ")
