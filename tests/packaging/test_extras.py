"""The image and a plain `pip install` carry only what the scaler, the controller and the stager use;
the demo's plot and the benchmarks (matplotlib, numpy, tqdm) are the ``demo`` extra, and without it
every command still starts (the benchmarks say how to get them)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRA_ONLY = ("matplotlib", "numpy", "tqdm")


def _names(reqs: list[str]) -> set[str]:
    return {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in reqs}


def test_the_plotting_stack_is_an_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not _names(project["dependencies"]) & set(EXTRA_ONLY)
    assert set(EXTRA_ONLY) <= _names(project["optional-dependencies"]["demo"])


def test_every_command_starts_without_the_extra() -> None:
    code = ("import sys\n"
            f"for m in {EXTRA_ONLY!r}: sys.modules[m] = None\n"
            "from warmscale.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "try:\n    main(['bench', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "print('rc', main(['bench', 'trace']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "trace               replay a trace" in proc.stdout and "(unavailable: " in proc.stdout
    assert "warmscale bench: trace is not available in this installation (pip install 'warmscale[demo]')" \
        in proc.stderr
    assert proc.stdout.endswith("rc 2\n")
