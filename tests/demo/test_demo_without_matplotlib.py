"""Without the ``demo`` extra's matplotlib the demo still runs and prints its table; it writes no PNG
and says so in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from warmscale.cli import main
from warmscale.demo.run import PLOT_HINT


def test_no_matplotlib_no_png_one_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    png = tmp_path / "demo.png"
    rc = main(["demo", "--span", "120", "--speed", "60", "--every", "60", "--plot", str(png),
               "--log-file", str(tmp_path / "demo.log")])
    out = capsys.readouterr()
    assert rc == 0
    assert "today's setup" in out.out and "GPU-seconds" in out.out
    assert not png.exists()
    hints = [line for line in out.err.splitlines() if "matplotlib" in line]
    assert hints == [f"plot: not written ({PLOT_HINT})"]
    assert "pip install 'warmscale[demo]'" in PLOT_HINT
