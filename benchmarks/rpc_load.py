"""RPC load in KEDA's pattern, against a real scaler process, next to PromQL-per-poll on a real Prometheus.

    python -m benchmarks.rpc_load [--sizes 100,1000] [--duration 20] [--warmup 6] [--no-prometheus]

For N ScaledObjects polled at 1 Hz each (random phases), every poll is what KEDA does: ``GetMetrics``
then ``IsActive`` (two unary RPCs on one channel). Latency is measured at the client, per RPC; CPU is
the server process's user+system time over the measured window (1.0 = one core).

The scaler process (``--serve``, started by this script) is the real :class:`ScalerServer` with one
tracker per ScaledObject deciding every second (observe + decide + store), fed by a *synthetic*
snapshot reader: what is measured is the RPC path plus the decision loop, not the scraping of
engines (parsing a real 85 kB vLLM payload costs ~15 ms of CPU; see docs/scaler.md).

The comparison column is the path users run today (KEDA's prometheus scaler): one instant PromQL
query per poll, over HTTP, against a real Prometheus (Debian package) scraping a fake vLLM engine.

Prints a table and writes ``benchmarks/results/rpc_load.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SAMPLES = ROOT.parent / "shared" / "reference" / "metrics-samples"
CLK_TCK = os.sysconf("SC_CLK_TCK")

BENCH_META = {
    "endpoints": "http://engine.bench:8000/metrics",
    "minReplicas": "1",
    "maxReplicas": "50",
    "scrapeIntervalSeconds": "1",
}
PROMQL = 'sum(vllm:num_requests_running{job=~"engines.*"}) + sum(vllm:num_requests_waiting{job=~"engines.*"})'


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its threads) in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def summarize(lat_s: list[float], errors: int, cpu: float, window: float) -> dict[str, Any]:
    ms = [x * 1000 for x in lat_s]
    return {
        "requests": len(ms),
        "errors": errors,
        "rps": round(len(ms) / window, 1),
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3) if ms else None,
        "mean_ms": round(statistics.fmean(ms), 3) if ms else None,
        "server_cpu_cores": round(cpu / window, 3),
    }


# ---------------------------------------------------------------------------------- scaler process


def _synthetic_reader() -> Any:
    from signals.model import ReplicaReading, ReplicaSignal, Snapshot

    async def read(cfg: Any, now: float, scope: Any) -> Snapshot:
        sig = ReplicaSignal("vllm", waiting=2.0, running=20.0, kv_usage=0.4)
        readings = tuple(ReplicaReading(f"r{i}", observed_at=now, signal=sig) for i in range(2))
        return Snapshot(taken_at=now, replicas=readings)

    return read


async def _serve(port: int) -> None:
    from scaler.server import ScalerServer, ServerOptions

    server = ScalerServer(ServerOptions(host="127.0.0.1", grpc_port=port, metrics_port=None,
                                        tracker_idle_seconds=600), _synthetic_reader())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    await stop.wait()
    await server.stop(1.0)


class ScalerProcess:
    def __init__(self, argv: list[str], port: int) -> None:
        self.port = port
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @classmethod
    def synthetic(cls) -> ScalerProcess:
        port = free_port()
        return cls([sys.executable, "-m", "benchmarks.rpc_load", "--serve", str(port)], port)

    async def ready(self, within: float = 20.0) -> None:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"scaler exited with {self.proc.returncode}")
                with contextlib.suppress(grpc.aio.AioRpcError):
                    r = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
                    if r.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError("scaler not serving in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ------------------------------------------------------------------------------------------ load


async def paced_polls(
    loop: asyncio.AbstractEventLoop, t_start: float, t_measure: float, t_end: float
) -> AsyncIterator[bool]:
    """One poll a second from a random phase after ``t_start`` until ``t_end``; yields whether the
    poll falls in the measured window (after ``t_measure``)."""
    t_next = t_start + random.random()
    while True:
        await asyncio.sleep(max(0.0, t_next - loop.time()))
        if t_next >= t_end:
            return
        yield t_next >= t_measure
        t_next += 1.0


async def keda_load(port: int, n: int, warmup: float, duration: float, pid: int) -> dict[str, Any]:
    """N ScaledObjects, each polled at 1 Hz: GetMetrics then IsActive."""
    import grpc

    from proto import externalscaler_pb2 as pb
    from proto import externalscaler_pb2_grpc as pb_grpc

    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ExternalScalerStub(channel)
    refs = [pb.ScaledObjectRef(name=f"so-{n}-{i}", namespace="bench", scalerMetadata=BENCH_META) for i in range(n)]
    reqs = [pb.GetMetricsRequest(scaledObjectRef=r, metricName="warmscale-desired-replicas") for r in refs]
    loop = asyncio.get_running_loop()
    t_start = loop.time() + 0.5
    t_measure = t_start + warmup
    t_end = t_measure + duration
    lat: dict[str, list[float]] = {"GetMetrics": [], "IsActive": []}
    errors = 0

    async def poller(i: int) -> None:
        nonlocal errors
        async for measuring in paced_polls(loop, t_start, t_measure, t_end):
            for method, call, arg in (("GetMetrics", stub.GetMetrics, reqs[i]), ("IsActive", stub.IsActive, refs[i])):
                t0 = time.perf_counter()
                try:
                    await call(arg, timeout=5)
                except grpc.aio.AioRpcError:
                    errors += measuring
                    continue
                if measuring:
                    lat[method].append(time.perf_counter() - t0)

    pollers = [asyncio.create_task(poller(i)) for i in range(n)]
    await asyncio.sleep(max(0.0, t_measure - loop.time()))
    cpu0, ccpu0 = proc_cpu_seconds(pid), time.process_time()
    await asyncio.sleep(max(0.0, t_end - loop.time()))
    cpu1, ccpu1 = proc_cpu_seconds(pid), time.process_time()
    await asyncio.gather(*pollers)
    await channel.close()
    both = lat["GetMetrics"] + lat["IsActive"]
    out = summarize(both, errors, cpu1 - cpu0, duration)
    out["by_method"] = {m: summarize(v, 0, 0.0, duration) | {"server_cpu_cores": None} for m, v in lat.items()}
    out["client_cpu_cores"] = round((ccpu1 - ccpu0) / duration, 3)
    out["polls_per_second"] = n
    return out


async def ghz_load(ghz: str, port: int, n: int, warmup: float, duration: float, pid: int) -> dict[str, Any]:
    """The same load from a Go client (ghz), so that the client's own cost (a Python event loop issuing
    2 RPCs per ScaledObject per second) stays out of the measured latency: GetMetrics and IsActive each
    at n requests/s, cycling over the n ScaledObjects (each polled once a second)."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="rpc-ghz-"))
    refs = [{"name": f"so-{n}-{i}", "namespace": "bench", "scalerMetadata": BENCH_META} for i in range(n)]
    calls = {"GetMetrics": [{"scaledObjectRef": r, "metricName": "warmscale-desired-replicas"} for r in refs],
             "IsActive": refs}
    for method, data in calls.items():
        (tmp / f"{method}.json").write_text(json.dumps(data))

    def argv(method: str, seconds: float) -> list[str]:
        return [ghz, "--insecure", "--proto", str(ROOT / "proto" / "externalscaler.proto"),
                "--call", f"externalscaler.ExternalScaler/{method}", "-D", str(tmp / f"{method}.json"),
                "--rps", str(n), "-z", f"{seconds:g}s", "-c", "50", "--connections", "2", "-O", "json",
                f"127.0.0.1:{port}"]

    async def both(seconds: float) -> list[bytes]:
        procs = [await asyncio.create_subprocess_exec(*argv(m, seconds), stdout=asyncio.subprocess.PIPE,
                                                      stderr=asyncio.subprocess.DEVNULL) for m in calls]
        return [(await p.communicate())[0] for p in procs]

    await both(warmup)
    cpu0 = proc_cpu_seconds(pid)
    outs = await both(duration)
    cpu1 = proc_cpu_seconds(pid)
    lat_ms: dict[str, dict[int, float]] = {}
    count = errors = 0
    rps = slowest = 0.0
    for method, raw in zip(calls, outs, strict=True):
        doc = json.loads(raw)
        rps += float(doc.get("rps", 0.0))
        slowest = max(slowest, float(doc.get("slowest", 0)) / 1e6)
        lat_ms[method] = {int(d["percentage"]): d["latency"] / 1e6 for d in doc.get("latencyDistribution") or []}
        count += int(doc.get("count", 0))
        errors += sum(int(v) for v in (doc.get("errorDistribution") or {}).values())
    return {
        "requests": count,
        "rps": round(rps),
        "errors": errors,
        "max_ms": round(slowest, 2),
        "p50_ms": round(max(m.get(50, 0.0) for m in lat_ms.values()), 3),
        "p90_ms": round(max(m.get(90, 0.0) for m in lat_ms.values()), 3),
        "p99_ms": round(max(m.get(99, 0.0) for m in lat_ms.values()), 3),
        "server_cpu_cores": round((cpu1 - cpu0) / duration, 3),
        "by_method_ms": lat_ms,
        "client": "ghz (Go), 2 processes, 50 workers each",
    }


async def promql_load(url: str, n: int, warmup: float, duration: float, pid: int) -> dict[str, Any]:
    """N ScaledObjects, each polled at 1 Hz by one instant query (KEDA's prometheus scaler)."""
    import aiohttp

    loop = asyncio.get_running_loop()
    t_start = loop.time() + 0.5
    t_measure = t_start + warmup
    t_end = t_measure + duration
    lat: list[float] = []
    errors = 0
    conn = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def poller() -> None:
            nonlocal errors
            async for measuring in paced_polls(loop, t_start, t_measure, t_end):
                t0 = time.perf_counter()
                try:
                    async with session.get(f"{url}/api/v1/query", params={"query": PROMQL},
                                           timeout=aiohttp.ClientTimeout(total=5)) as r:
                        body = await r.json()
                        ok = r.status == 200 and body.get("status") == "success" and body["data"]["result"]
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if measuring:
                    if ok:
                        lat.append(time.perf_counter() - t0)
                    else:
                        errors += 1

        pollers = [asyncio.create_task(poller()) for _ in range(n)]
        await asyncio.sleep(max(0.0, t_measure - loop.time()))
        cpu0 = proc_cpu_seconds(pid)
        await asyncio.sleep(max(0.0, t_end - loop.time()))
        cpu1 = proc_cpu_seconds(pid)
        await asyncio.gather(*pollers)
    out = summarize(lat, errors, cpu1 - cpu0, duration)
    out["polls_per_second"] = n
    return out


def start_prometheus() -> tuple[Any, Any]:
    """A fake vLLM engine (load sample) and a real Prometheus scraping it every second."""
    sys.path.insert(0, str(ROOT))
    from tests.servers import FakeEngine, PrometheusServer

    engine = FakeEngine((SAMPLES / "vllm-v1-load.prom").read_text())
    prom = PrometheusServer([engine.target], scrape_interval="1s")
    prom.start()
    prom.wait_for(PROMQL)
    return engine, prom


# ------------------------------------------------------------------------------------------- main


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'path':<34}{'SOs':>6}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}{'CPU cores':>11}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['path']:<34}{r['scaled_objects']:>6}{r['rps']:>8}{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}"
                     f"{r['max_ms'] or 0:>9.2f}{r['errors']:>8}{r['server_cpu_cores']:>11.3f}")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    scaler = ScalerProcess.synthetic()
    try:
        await scaler.ready()
        for n in sizes:
            r = await keda_load(scaler.port, n, args.warmup, args.duration, scaler.proc.pid)
            rows.append({"path": "warmscale gRPC (GetMetrics+IsActive)", "scaled_objects": n, **r})
            print(f"  warmscale n={n}: p99 {r['p99_ms']} ms", file=sys.stderr)
            if args.ghz:
                r = await ghz_load(args.ghz, scaler.port, n, args.warmup, args.duration, scaler.proc.pid)
                rows.append({"path": "warmscale gRPC, Go client (ghz)", "scaled_objects": n, **r})
                print(f"  warmscale (ghz) n={n}: p99 {r['p99_ms']} ms", file=sys.stderr)
    finally:
        scaler.stop()
    if not args.no_prometheus:
        engine, prom = start_prometheus()
        try:
            for n in sizes:
                r = await promql_load(prom.url, n, args.warmup, args.duration, prom.proc.pid)
                rows.append({"path": "Prometheus (1 PromQL query/poll)", "scaled_objects": n, **r})
                print(f"  prometheus n={n}: p99 {r['p99_ms']} ms", file=sys.stderr)
        finally:
            prom.close()
            engine.close()
    return {
        "benchmark": "rpc_load",
        "command": "python -m benchmarks.rpc_load " + " ".join(sys.argv[1:]),
        "pattern": "per ScaledObject at 1 Hz: GetMetrics then IsActive (KEDA's poll); latency per RPC at the client",
        "server": "real ScalerServer process, one tracker per ScaledObject, synthetic snapshot reader, memory store",
        "prometheus_query": PROMQL,
        "goal": "p99 <= 5 ms at 1,000 ScaledObjects",
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine(),
                 "loadavg_before": [round(x, 2) for x in load_before],
                 "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                 "note": "shared machine: other processes' load (loadavg) inflates the tail latencies"},
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--duration", type=float, default=20.0, help="measured seconds per size")
    ap.add_argument("--warmup", type=float, default=6.0, help="seconds of load before measuring")
    ap.add_argument("--no-prometheus", action="store_true")
    ap.add_argument("--ghz", default=shutil.which("ghz") or str(Path.home() / "go" / "bin" / "ghz"),
                    help="also load the scaler from ghz, a Go gRPC load tool (go install "
                    "github.com/bojand/ghz/cmd/ghz@v0.120.0); skipped when not found")
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ghz and not os.access(args.ghz, os.X_OK):
        args.ghz = None
    if args.serve:
        asyncio.run(_serve(args.serve))
        return 0
    result = asyncio.run(run(args))
    print(table(result["rows"]))
    print(f"host: {result['host']['cpus']} CPUs, loadavg before/after {result['host']['loadavg_before'][0]} / "
          f"{result['host']['loadavg_after'][0]}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "rpc_load.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
