"""Why the scaler stops its gRPC server with one call (``scaler/shutdown.py``): start a bare
``grpc.aio`` server, answer a health check on every other cycle, then stop it either the way the
scaler once did (``stop(0)`` in a task and ``stop(0)`` awaited, overlapping) or with one ``stop(0)``.
Each mode runs in its own process (a crash kills only that process) for ``--cycles`` cycles,
``--runs`` times. Prints a table and writes JSON.

    python -m warmscale.benchmarks.grpc_stop_race --cycles 2000 --runs 3 --json benchmarks/results/grpc_stop_race.json
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson


async def _cycle(i: int, overlapping: bool) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from warmscale.scaler.shutdown import Health

    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = None
    if i % 2:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    for _ in range(random.randint(0, 3)):
        await asyncio.sleep(0)
    if overlapping:
        stopping = asyncio.create_task(server.stop(0))
        for _ in range(random.randint(0, 3)):
            await asyncio.sleep(0)
        await asyncio.wait_for(server.stop(0), 5)
        await asyncio.wait_for(stopping, 5)
    else:
        await server.stop(0)
    if channel is not None:
        await channel.close()


async def _child(cycles: int, overlapping: bool) -> None:
    for i in range(cycles):
        await _cycle(i, overlapping)


def _run(mode: str, cycles: int) -> dict[str, object]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "warmscale.benchmarks.grpc_stop_race", "--child", mode,
                           "--cycles", str(cycles)], capture_output=True, text=True, check=False)
    rc = proc.returncode
    outcome = "ok" if rc == 0 else (f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}")
    return {"mode": mode, "cycles": cycles, "returncode": rc, "outcome": outcome,
            "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", choices=["overlapping", "single"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        asyncio.run(_child(a.cycles, a.child == "overlapping"))
        return 0
    rows = [_run(mode, a.cycles) for _ in range(a.runs) for mode in ("overlapping", "single")]
    print(f"{'stop':<12} {'cycles':>7} {'outcome':<24} {'s':>6}")
    for r in rows:
        print(f"{r['mode']:<12} {r['cycles']:>7} {r['outcome']:<24} {r['seconds']:>6}")
    if a.json:
        a.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
