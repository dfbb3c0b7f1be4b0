"""benchmarks/loopprobe (``rpc_load --loop-probe``): a process started with it records its slow
callbacks and its garbage collections, and rpc_load summarises the collections of a window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from warmscale.benchmarks.rpc_load import LOOP_PROBE, ROOT, loop_probe_summary

SCRIPT = """
import asyncio, gc, sys, time
sys.argv[1:] = ["warmscale.scaler.rpcfront"]  # the role the probe reads from the command line
async def main():
    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: sum(i * i for i in range(300_000)))  # a callback holding the loop
    await asyncio.sleep(0.05)
    gc.collect(0)
asyncio.run(main())
"""


def test_the_probe_records_slow_callbacks_and_collections(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{LOOP_PROBE}{os.pathsep}{ROOT}", "WARMSCALE_LOOP_PROBE": str(tmp_path)}
    t0 = time.time()
    subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, timeout=60)
    files = list(tmp_path.glob("loop-front-*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["counts"]["callbacks"] > 0
    assert any(c["max_cpu_ms"] > 2 for c in doc["slow_callbacks"])
    summary = loop_probe_summary(tmp_path, (t0, time.time() + 1))
    assert summary["front"]["collections_in_window"]["gen0"]["n"] >= 1


def test_without_the_variable_nothing_is_recorded(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{LOOP_PROBE}{os.pathsep}{ROOT}"}
    env.pop("WARMSCALE_LOOP_PROBE", None)
    subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, timeout=60)
    assert not list(tmp_path.iterdir())
