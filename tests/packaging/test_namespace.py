"""The installed distribution holds one import name, ``warmscale``; its subpackages come from the
design's top-level folders (pyproject's package-dir), and a checkout reaches them the same way."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("signals", "scaler", "warmpool", "proto", "benchmarks")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build_dir = REPO / "build"  # setuptools' build directory, in the source tree: leave it as it was
    existed = build_dir.exists()
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(out), str(REPO)], check=True, cwd=out, capture_output=True, timeout=300)
    finally:
        if not existed:
            shutil.rmtree(build_dir, ignore_errors=True)
    [whl] = out.glob("warmscale-*.whl")
    return whl


def test_the_wheel_installs_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"warmscale"}
    for folder in FOLDERS:
        assert f"warmscale/{folder}/__init__.py" in names, folder
    assert "warmscale/proto/externalscaler.proto" in names
    assert any(n.startswith("warmscale/traces/") and n.endswith(".csv") for n in names)


def _run_installed(wheel: Path, tmp_path: Path, probe: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Install the wheel into a private target and run ``probe`` there, isolated from the checkout."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    # -I: isolated (no cwd, no user site); the wheel's target first, then the dependencies we run with.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    code = f"import sys; sys.path[:0] = {[str(target), *deps]!r}\n" + probe
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    return target, proc


def test_the_wheel_imports_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    probe = ("import warmscale.signals.model, warmscale.scaler.policy, warmscale.warmpool.planning, "
             "warmscale.proto.externalscaler_pb2_grpc, warmscale.benchmarks.cli, sys; "
             "import importlib.util as u; "
             "assert all(u.find_spec(n) is None for n in ('signals', 'scaler', 'warmpool', 'benchmarks')); "
             "print(warmscale.signals.model.__file__)")
    target, proc = _run_installed(wheel, tmp_path, probe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(target / "warmscale" / "signals"))


def test_a_checkout_maps_each_folder_into_the_namespace() -> None:
    for folder in FOLDERS:
        link = REPO / "warmscale" / folder
        assert link.is_symlink() and link.resolve() == (REPO / folder).resolve(), folder


def test_python_m_runs_from_a_checkout_without_an_install(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "warmscale.scaler.config"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("| key | kind | default |")


def test_the_wheel_ships_the_local_cluster_harness_without_test_dependencies(wheel: Path, tmp_path: Path) -> None:
    """The demo's cluster mode and the benchmarks import the harness and the loopback servers from the
    package, so the wheel carries them, with the KWOK stages they load; they import with the runtime
    dependencies alone (no pytest, none of the dev or demo extras)."""
    names = zipfile.ZipFile(wheel).namelist()
    assert "warmscale/localcluster/harness.py" in names
    assert "warmscale/localcluster/servers.py" in names
    assert "warmscale/localcluster/kwok-config.yaml" in names
    assert "warmscale/localcluster/stages/pod-ready.yaml" in names
    assert not any(n.startswith("tests/") for n in names)
    blocked = ("pytest", "_pytest", "hypothesis", "matplotlib", "numpy", "tqdm", "tests")
    probe = (f"for m in {blocked!r}: sys.modules[m] = None\n"
             "import pkgutil, importlib, warmscale.localcluster as lc\n"
             "for m in pkgutil.iter_modules(lc.__path__):\n"
             "    if m.name != '__main__': importlib.import_module('warmscale.localcluster.' + m.name)\n"
             "from warmscale.localcluster.harness import STAGES_DIR, KWOK_CONFIG\n"
             "assert KWOK_CONFIG.is_file() and (STAGES_DIR / 'pod-ready.yaml').is_file()\n"
             "import warmscale.demo.cluster, warmscale.benchmarks.cold_vs_warm\n"
             "print(lc.__file__)\n")
    target, proc = _run_installed(wheel, tmp_path, probe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(target / "warmscale" / "localcluster"))
