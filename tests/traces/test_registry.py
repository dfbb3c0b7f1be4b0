"""The traces shipped in the package: found by name from anywhere, with no ``../shared`` around."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from warmscale import traces
from warmscale.traces import TRACES, TraceNotFound, resolve

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No WARMSCALE_SHARED, and the working directory far from the repository (no ../shared)."""
    monkeypatch.delenv("WARMSCALE_SHARED", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_shipped_trace_resolves_by_name_file_and_stem(no_shared: Path) -> None:
    shipped = list(traces.shipped())
    assert {t.name for t in shipped} >= {"azure-code", "azure-conv", "mooncake-conv", "servegen-deepseek-r1"}
    for t in shipped:
        for spec in (t.name, t.file, t.file.removesuffix(".csv"), t.name.upper()):
            p = resolve(spec)
            assert p == traces.PACKAGE_DIR / t.file and p.is_file() and p.stat().st_size > 1000
            assert "shared" not in p.parts
        assert t.source and t.licence


def test_explicit_folder_then_environment_then_package(no_shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dir, flag_dir = no_shared / "env", no_shared / "flag"
    (env_dir / "traces").mkdir(parents=True)
    flag_dir.mkdir()
    (env_dir / "traces" / "azure_llm_2023_code.csv").write_text("timestamp_s,input_tokens,output_tokens\n0,1,1\n")
    (flag_dir / "azure_llm_2023_code.csv").write_text("timestamp_s,input_tokens,output_tokens\n0,2,2\n")
    monkeypatch.setenv("WARMSCALE_SHARED", str(env_dir))
    assert resolve("azure-code") == env_dir / "traces" / "azure_llm_2023_code.csv"
    assert resolve("azure-code", flag_dir) == flag_dir / "azure_llm_2023_code.csv"
    assert resolve("azure-conv", flag_dir) == traces.PACKAGE_DIR / "azure_llm_2023_conv.csv"  # falls through
    assert resolve(str(flag_dir / "azure_llm_2023_code.csv")) == flag_dir / "azure_llm_2023_code.csv"


def test_unknown_and_unshipped_traces_say_where_to_look(no_shared: Path) -> None:
    with pytest.raises(TraceNotFound, match="azure-code"):
        resolve("no-such-trace")
    with pytest.raises(TraceNotFound, match="no such trace file"):
        resolve("missing/file.csv")
    week = TRACES["azure-2024-conv-week"]
    assert not week.shipped
    with pytest.raises(TraceNotFound, match="WARMSCALE_SHARED"):
        resolve(week.name)


def test_package_data_ships_the_traces() -> None:
    """pyproject's package-data carries them (a wheel, not only the editable checkout)."""
    text = (REPO / "pyproject.toml").read_text()
    assert '"warmscale.traces" = ["*.csv", "*.hashes.gz", "README.md"]' in text
    assert (traces.PACKAGE_DIR / "mooncake_fast25_conversation.hashes.gz").is_file()  # Mooncake's block hashes
    readme = (traces.PACKAGE_DIR / "README.md").read_text()
    for t in traces.shipped():
        assert t.file in readme and t.name in readme


def test_bench_trace_runs_a_shipped_trace_by_name_without_shared(no_shared: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(no_shared), "PYTHONPATH": str(REPO)}
    out = no_shared / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "warmscale.benchmarks.cli", "trace", "--trace", "azure-code", "--hours", "0.1",
         "--quiet",
         "--policies", "warmscale,keda-prometheus-queue", "--oracle-iterations", "1", "--no-references",
         "--json", str(out)],
        cwd=no_shared, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["trace"] == "azure_llm_2023_code.csv" and doc["requests"] > 100
    bad = subprocess.run([sys.executable, "-m", "warmscale.benchmarks.cli", "trace", "--trace", "azure-2024-conv-week",
                          "--quiet"], cwd=no_shared, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "WARMSCALE_SHARED" in bad.stderr and "Traceback" not in bad.stderr


def test_no_runtime_module_defaults_to_a_folder_beside_the_repository() -> None:
    """Installed code finds its data in the package; only tests and development tools (proto/generate.py,
    which rewrites the repository's stubs, and the local cluster harness, which runs only from a checkout
    and reads KEDA's CRDs from the reference directory, ``$WARMSCALE_SHARED``) may reach for ``../shared``."""
    import re

    pattern = re.compile(r'/ "shared"|"\.\./shared|parents?\[\d\] / "shared"')
    offenders = []
    for pkg in ("warmscale", "benchmarks", "signals", "scaler", "warmpool"):
        for path in (REPO / pkg).rglob("*.py"):
            if path.is_relative_to(REPO / "warmscale" / "localcluster"):
                continue  # a development tool (above)
            if pattern.search(path.read_text()):
                offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def test_benchmark_samples_ship_in_the_package() -> None:
    from warmscale.benchmarks import engine_farm, rpc_load
    from warmscale.benchmarks.samples import SAMPLES_DIR

    assert rpc_load.SAMPLES == engine_farm.SAMPLES == SAMPLES_DIR
    for name in ("vllm-v1-load.prom", "vllm-idle.prom"):
        assert "vllm:num_requests_waiting" in (SAMPLES_DIR / name).read_text()
