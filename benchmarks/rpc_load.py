"""RPC load in KEDA's pattern against the real ``warmscale scaler`` process scraping real endpoints.

    python -m warmscale.benchmarks.rpc_load [--configs shared,distinct] [--scaled-objects 1000] [--duration 30]
                                  [--warmup 10] [--prometheus] [--client python|ghz|go] [--repeat N]
                                  [--tick-nice N] [--loop-probe DIR]

For N ScaledObjects polled at 1 Hz each (random phases), every poll is what KEDA does: ``GetMetrics``
then ``IsActive`` (two unary RPCs on one channel). Latency is measured at the client, per RPC; CPU is
the scaler's process tree (its worker processes included), user+system over the measured window
(1.0 = one core).

The scaler is the real CLI (``warmscale scaler --no-kubernetes``, memory store, default 1 s
scraping and timeouts), scraping real HTTP endpoints on loopback served by
:mod:`benchmarks.engine_farm` (one process, one port per endpoint):

- ``shared``: N ScaledObjects over N/10 distinct endpoint sets of 2 replicas each, every endpoint
  serving a realistic ~15 kB vLLM payload (10 ScaledObjects per set: they share one scrape);
- ``distinct``: N ScaledObjects, each with its own endpoint serving a ~1 kB vLLM payload.

Load generators (``--client``): ``python`` (grpc.aio, one channel, one poller per ScaledObject),
``ghz`` (a Go load tool: 2 processes x 50 workers with JSON call data -- about 0.4-0.5 core at
2,000 RPC/s here, and closed-loop: when the server falls behind it sends fewer requests and its
latency stays near workers/rate, hiding the queue) and ``go`` (:file:`benchmarks/kedaload`, built on
first use: KEDA's pattern in Go, one goroutine per ScaledObject, pre-serialized requests, open loop
-- about 0.2-0.3 core, and a late answer delays nobody else's poll). CPU is reported per process of
the scaler (``main``, ``rpc_front``, ``workers``), for the client and for the engine farm; the
1-minute load average before and after each measured window. ``--repeat N`` runs every
configuration N times and prints min / median of p50 and p99.

After each run the scaler's ``/metrics`` is read to check that the decisions came from the engines
(known replicas, decisions by reason, scrape errors). ``--prometheus`` adds the comparison with the
path users run today (KEDA's prometheus scaler): one instant PromQL query per poll against a real
Prometheus (Debian package) scraping a fake vLLM engine.

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

from warmscale.benchmarks import engine_farm
from warmscale.benchmarks.samples import SAMPLES_DIR

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SAMPLES = SAMPLES_DIR  # shipped copies of shared/reference/metrics-samples (benchmarks/samples)
CLK_TCK = os.sysconf("SC_CLK_TCK")

BENCH_META = {"engine": "vllm", "minReplicas": "1", "maxReplicas": "50"}
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


def tree_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds of ``pid`` and of its descendants (worker processes), by pid."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
    tree, frontier = {pid}, [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in tree:
                tree.add(child)
                frontier.append(child)
    out = {}
    for p in tree:
        with contextlib.suppress(OSError):
            out[p] = proc_cpu_seconds(p)
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(v - before.get(p, 0.0) for p, v in after.items())


def role(pid: int, root: int) -> str:
    """Which part of the scaler a process of its tree is: main, rpc_front or workers."""
    if pid == root:
        return "main"
    with contextlib.suppress(OSError):
        if b"warmscale.scaler.rpcfront" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return "rpc_front"
    return "workers"


def cpu_by_role(before: dict[int, float], after: dict[int, float], root: int, window: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for p, v in after.items():
        r = role(p, root)
        out[r] = out.get(r, 0.0) + (v - before.get(p, 0.0)) / window
    return {k: round(v, 3) for k, v in sorted(out.items())}


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished (waited-for) children: the ghz runs."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


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


class ScalerProcess:
    def __init__(self, argv: list[str], port: int, probe: Path | None = None) -> None:
        self.port = port
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if probe is not None:  # benchmarks/loopprobe: times every callback and collection of both processes
            env |= {"PYTHONPATH": f"{LOOP_PROBE}{os.pathsep}{ROOT}", "WARMSCALE_LOOP_PROBE": str(probe)}
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @classmethod
    def cli(cls, metrics_port: int, *extra: str, probe: Path | None = None) -> ScalerProcess:
        """The real ``warmscale scaler`` (no Kubernetes, memory store, every default)."""
        port = free_port()
        return cls([sys.executable, "-m", "warmscale.cli", "--log-level", "warning", "scaler", "--host",
                    "127.0.0.1", "--grpc-port", str(port), "--metrics-port", str(metrics_port), "--no-kubernetes",
                    *extra], port, probe)


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


LOOP_PROBE = ROOT / "benchmarks" / "loopprobe"


def loop_probe_summary(probe: Path, window: tuple[float, float]) -> dict[str, Any]:
    """Per process (``main``, ``front``): the garbage collections in the measured window (count, CPU
    and wall milliseconds by generation) and the callbacks of the whole run that took over 2 ms of CPU."""
    out: dict[str, Any] = {}
    for f in sorted(probe.glob("loop-*.json")):
        doc = json.loads(f.read_text())
        gcs: dict[str, Any] = {}
        for gen in (0, 1, 2):
            xs = [c for c in doc["collections"] if c[1] == gen and window[0] <= c[0] <= window[1]]
            if xs:
                cpu = [c[3] for c in xs]
                gcs[f"gen{gen}"] = {"n": len(xs), "cpu_ms_mean": round(statistics.fmean(cpu), 2),
                                    "cpu_ms_max": round(max(cpu), 2), "cpu_s_sum": round(sum(cpu) / 1e3, 3),
                                    "wall_ms_max": round(max(c[2] for c in xs), 2),
                                    "freed_mean": round(statistics.fmean(c[4] for c in xs))}
        out[doc["role"]] = {"collections_in_window": gcs, "callbacks": doc["counts"],
                            "slow_callbacks_whole_run": doc["slow_callbacks"][:8]}
    return out


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


async def keda_load(port: int, metas: list[dict[str, str]], warmup: float, duration: float,
                    pid: int) -> dict[str, Any]:
    """One ScaledObject per metadata, each polled at 1 Hz: GetMetrics then IsActive."""
    import grpc

    from warmscale.proto import externalscaler_pb2 as pb
    from warmscale.proto import externalscaler_pb2_grpc as pb_grpc

    n = len(metas)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ExternalScalerStub(channel)
    refs = [pb.ScaledObjectRef(name=f"so-{i}", namespace="bench", scalerMetadata=m) for i, m in enumerate(metas)]
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
    cpu0, ccpu0, load0 = tree_cpu_seconds(pid), time.process_time(), os.getloadavg()[0]
    main0 = proc_cpu_seconds(pid)
    await asyncio.sleep(max(0.0, t_end - loop.time()))
    cpu1, ccpu1, load1 = tree_cpu_seconds(pid), time.process_time(), os.getloadavg()[0]
    main1 = proc_cpu_seconds(pid)
    await asyncio.gather(*pollers)
    await channel.close()
    both = lat["GetMetrics"] + lat["IsActive"]
    out = summarize(both, errors, cpu_delta(cpu0, cpu1), duration)
    out["server_main_process_cpu_cores"] = round((main1 - main0) / duration, 3)
    out["server_cpu_cores_by_process"] = cpu_by_role(cpu0, cpu1, pid, duration)
    out["loadavg_1m_before_after"] = [round(load0, 2), round(load1, 2)]
    out["server_processes"] = len(cpu1)
    out["by_method"] = {m: summarize(v, 0, 0.0, duration) | {"server_cpu_cores": None} for m, v in lat.items()}
    out["client_cpu_cores"] = round((ccpu1 - ccpu0) / duration, 3)
    out["polls_per_second"] = n
    return out


async def ghz_load(ghz: str, port: int, metas: list[dict[str, str]], warmup: float, duration: float,
                   pid: int) -> dict[str, Any]:
    """The same load from a Go client (ghz), so that the client's own cost (a Python event loop issuing
    2 RPCs per ScaledObject per second) stays out of the measured latency: GetMetrics and IsActive each
    at n requests/s, cycling over the n ScaledObjects (each polled once a second)."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="rpc-ghz-"))
    n = len(metas)
    refs = [{"name": f"so-{i}", "namespace": "bench", "scalerMetadata": m} for i, m in enumerate(metas)]
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
    cpu0, ghz0, load0 = tree_cpu_seconds(pid), children_cpu_seconds(), os.getloadavg()[0]
    outs = await both(duration)
    cpu1, ghz1, load1 = tree_cpu_seconds(pid), children_cpu_seconds(), os.getloadavg()[0]
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
        "server_cpu_cores": round(cpu_delta(cpu0, cpu1) / duration, 3),
        "server_cpu_cores_by_process": cpu_by_role(cpu0, cpu1, pid, duration),
        "client_cpu_cores": round((ghz1 - ghz0) / duration, 3),
        "loadavg_1m_before_after": [round(load0, 2), round(load1, 2)],
        "by_method_ms": lat_ms,
        "client": "ghz (Go), 2 processes, 50 workers each",
    }


KEDALOAD_DIR = ROOT / "benchmarks" / "kedaload"


def kedaload_binary() -> str:
    """benchmarks/kedaload built once into the warmscale cache (Go >= 1.26; modules from the Go proxy)."""
    cache = Path(os.environ.get("WARMSCALE_CACHE", Path.home() / ".cache" / "warmscale")) / "bin"
    out = cache / "kedaload"
    sources = [KEDALOAD_DIR / n for n in ("main.go", "go.mod", "go.sum")]
    if out.exists() and out.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return str(out)
    go = shutil.which("go")
    if go is None:
        raise SystemExit("--client go needs the Go toolchain (>= 1.26) to build benchmarks/kedaload")
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    print("building benchmarks/kedaload ...", file=sys.stderr)
    subprocess.run(["nice", "-n", "10", go, "build", "-trimpath", "-o", str(out), "."], cwd=KEDALOAD_DIR, env=env,
                   check=True)
    return str(out)


async def go_load(binary: str, port: int, metas: list[dict[str, str]], warmup: float, duration: float,
                  pid: int) -> dict[str, Any]:
    """KEDA's pattern from benchmarks/kedaload (Go): per ScaledObject a goroutine polling at 1 Hz from a
    random phase, GetMetrics then IsActive over one connection, requests pre-serialized -- the lightest
    client we have, so that the load generator takes as little as possible of the CPU the scaler is
    measured with (and, unlike a worker pool, a slow answer never hides the next poll's wait)."""
    import tempfile

    from warmscale.proto import externalscaler_pb2 as pb

    tmp = Path(tempfile.mkdtemp(prefix="rpc-go-"))
    blob = bytearray()
    for i, m in enumerate(metas):
        ref = pb.ScaledObjectRef(name=f"so-{i}", namespace="bench", scalerMetadata=m)
        for msg in (pb.GetMetricsRequest(scaledObjectRef=ref, metricName="warmscale-desired-replicas"), ref):
            data = msg.SerializeToString()
            blob += len(data).to_bytes(4, "big") + data
    (tmp / "requests.bin").write_bytes(bytes(blob))
    proc = await asyncio.create_subprocess_exec(
        binary, "-addr", f"127.0.0.1:{port}", "-requests", str(tmp / "requests.bin"), "-warmup", f"{warmup:g}s",
        "-duration", f"{duration:g}s", "-out", str(tmp / "out.json"))
    await asyncio.sleep(0.2 + warmup)
    cpu0, load0 = tree_cpu_seconds(pid), os.getloadavg()[0]
    await asyncio.sleep(duration)
    cpu1, load1 = tree_cpu_seconds(pid), os.getloadavg()[0]
    if await proc.wait() != 0:
        raise RuntimeError(f"kedaload exited with {proc.returncode}")
    doc = json.loads((tmp / "out.json").read_text())
    shutil.rmtree(tmp, ignore_errors=True)
    lat = {m: [x / 1000 for x in doc.get(m) or []] for m in ("GetMetrics", "IsActive")}
    out = summarize(lat["GetMetrics"] + lat["IsActive"], int(doc["errors"]), cpu_delta(cpu0, cpu1), duration)
    out["server_cpu_cores_by_process"] = cpu_by_role(cpu0, cpu1, pid, duration)
    out["client_cpu_cores"] = round(float(doc["client_cpu_seconds"]) / duration, 3)
    out["loadavg_1m_before_after"] = [round(load0, 2), round(load1, 2)]
    out["by_method"] = {m: summarize(v, 0, 0.0, duration) | {"server_cpu_cores": None} for m, v in lat.items()}
    out["error_samples"] = doc.get("error_samples") or []
    out["polls_per_second"] = len(metas)
    return out


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
    from warmscale.localcluster.servers import FakeEngine, PrometheusServer

    engine = FakeEngine((SAMPLES / "vllm-v1-load.prom").read_text())
    prom = PrometheusServer([engine.target], scrape_interval="1s")
    prom.start()
    prom.wait_for(PROMQL)
    return engine, prom


# ------------------------------------------------------------------------------------------- main


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'path':<44}{'SOs':>6}{'endpoints':>10}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
            f"{'errors':>8}{'CPU cores':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['path']:<44}{r['scaled_objects']:>6}{r.get('endpoints', '-'):>10}{r['rps']:>8}"
                     f"{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}{r['max_ms'] or 0:>9.2f}{r['errors']:>8}"
                     f"{r['server_cpu_cores']:>11.3f}")
    return "\n".join(lines)


CONFIGS = {
    "shared": "N ScaledObjects over N/10 endpoint sets x 2 replicas, ~15 kB vLLM payload each",
    "distinct": "N ScaledObjects, each its own endpoint, ~1 kB vLLM payload",
}


class EngineFarm:
    """:mod:`benchmarks.engine_farm` as a child process."""

    def __init__(self, count: int, payload: str) -> None:
        import tempfile

        self.ports_file = Path(tempfile.mkdtemp(prefix="rpc-farm-")) / "ports"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "warmscale.benchmarks.engine_farm", "--count", str(count),
                                      "--payload", payload, "--ports-file", str(self.ports_file)], cwd=ROOT, env=env)

    def ports(self, within: float = 60.0) -> list[int]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine farm exited with {self.proc.returncode}")
            if self.ports_file.exists():
                text = self.ports_file.read_text()
                if text.endswith("\n"):
                    return [int(x) for x in text.split()]
            time.sleep(0.1)
        raise RuntimeError("engine farm not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def scaled_objects(config: str, n: int) -> tuple[str, int, list[dict[str, str]]]:
    """(payload kind, endpoint count, metadata per ScaledObject) of a configuration."""
    if config == "shared":
        sets = max(1, n // 10)
        return "realistic", 2 * sets, [{"set": str(i % sets)} for i in range(n)]
    return "small", n, [{"set": str(i)} for i in range(n)]


def with_endpoints(shape: list[dict[str, str]], ports: list[int], per_set: int) -> list[dict[str, str]]:
    out = []
    for m in shape:
        s = int(m["set"])
        urls = [f"http://127.0.0.1:{ports[s * per_set + k]}/metrics" for k in range(per_set)]
        out.append({**BENCH_META, "endpoints": ",".join(urls)})
    return out


async def scaler_view(metrics_port: int) -> dict[str, Any]:
    """What the scaler's /metrics says about its decisions (were they made from engine data?)."""
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{metrics_port}/metrics") as r:
        text = await r.text()
    known = unknown = trackers = errors = 0.0
    reasons: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "warmscale_known_replicas":
                known += smp.value
            elif smp.name == "warmscale_unknown_replicas":
                unknown += smp.value
            elif smp.name == "warmscale_trackers":
                trackers = smp.value
            elif smp.name == "warmscale_scrape_errors_total":
                errors += smp.value
            elif smp.name == "warmscale_decisions_total":
                reasons[smp.labels["reason"]] = reasons.get(smp.labels["reason"], 0.0) + smp.value
    return {"trackers": trackers, "known_replicas": known, "unknown_replicas": unknown,
            "scrape_errors_total": errors, "decisions_by_reason": reasons}


async def run_config(config: str, n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    kind, count, shape = scaled_objects(config, n)
    per_set = 2 if config == "shared" else 1
    farm = EngineFarm(count, kind)
    rows: list[dict[str, Any]] = []
    try:
        metas = with_endpoints(shape, await asyncio.to_thread(farm.ports), per_set)
        metrics_port = free_port()
        extra = ["--rpc-process" if args.rpc_process else "--no-rpc-process"]
        if args.tick_nice is not None:
            extra += ["--tick-nice", str(args.tick_nice)]
        probe = None
        if args.loop_probe is not None:
            probe = args.loop_probe / f"{config}-{time.strftime('%H%M%S')}"
            probe.mkdir(parents=True, exist_ok=True)
        scaler = ScalerProcess.cli(metrics_port, *extra, probe=probe)
        try:
            await scaler.ready()
            farm0 = proc_cpu_seconds(farm.proc.pid)
            t_load = time.time()  # the measured window starts ~warmup later (kedaload and the Python client)
            if args.client == "ghz":
                await keda_load(scaler.port, metas, 0.0, 3.0, scaler.proc.pid)  # creates the trackers
                r = await ghz_load(args.ghz, scaler.port, metas, args.warmup, args.duration, scaler.proc.pid)
                r["client"] = "ghz (Go), 2 processes x 50 workers, 2 connections"
            elif args.client == "go":
                r = await go_load(args.kedaload, scaler.port, metas, args.warmup, args.duration, scaler.proc.pid)
                r["client"] = "benchmarks/kedaload (Go): one goroutine per ScaledObject, one connection, raw bytes"
            else:
                r = await keda_load(scaler.port, metas, args.warmup, args.duration, scaler.proc.pid)
                r["client"] = "Python grpc.aio, one channel, one poller per ScaledObject"
            r["engine_farm_cpu_cores"] = round((proc_cpu_seconds(farm.proc.pid) - farm0)
                                               / (args.warmup + args.duration), 3)
            r["scaler_view"] = await scaler_view(metrics_port)
            if probe is not None:
                await asyncio.sleep(2.5)  # the probe writes every 2 s
                start = t_load + 0.5 + args.warmup
                r["loop_probe"] = loop_probe_summary(probe, (start, start + args.duration))
                print(f"  loop probe ({probe}): {json.dumps(r['loop_probe'])[:1500]}", file=sys.stderr)
            path = (f"warmscale{' --rpc-process' if args.rpc_process else ''}, {config}"
                    f"{'' if args.client == 'python' else ', ' + args.client}")
            rows.append({"path": path, "config": config, "rpc_process": args.rpc_process, "tick_nice": args.tick_nice,
                         "config_description": CONFIGS[config], "scaled_objects": n, "endpoints": count,
                         "payload_bytes": len(engine_farm.payload(kind)), **r})
            print(f"  {config} n={n}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, "
                  f"CPU {r['server_cpu_cores']} cores {r.get('server_cpu_cores_by_process')}, client "
                  f"{r.get('client_cpu_cores')}, farm {r['engine_farm_cpu_cores']}, load "
                  f"{r.get('loadavg_1m_before_after')}, errors {r['errors']}, view {r['scaler_view']}",
                  file=sys.stderr)
        finally:
            scaler.stop()
    finally:
        farm.stop()
    return rows


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    for rep in range(args.repeat):
        for config in args.configs.split(","):
            for row in await run_config(config, args.scaled_objects, args):
                rows.append({**row, "run": rep + 1})
    if args.prometheus:
        engine, prom = start_prometheus()
        try:
            n = args.scaled_objects
            r = await promql_load(prom.url, n, args.warmup, args.duration, prom.proc.pid)
            rows.append({"path": "Prometheus (1 PromQL query/poll)", "scaled_objects": n, **r})
        finally:
            prom.close()
            engine.close()
    return {
        "benchmark": "rpc_load",
        "command": "python -m warmscale.benchmarks.rpc_load " + " ".join(sys.argv[1:]),
        "rpc_process": args.rpc_process,
        "pattern": "per ScaledObject at 1 Hz: GetMetrics then IsActive (KEDA's poll); latency per RPC at the client",
        "server": "real `warmscale scaler --no-kubernetes` process (memory store, default 1 s scraping), "
                  "scraping benchmarks.engine_farm endpoints on loopback; CPU = the scaler's process tree",
        "configs": CONFIGS,
        "goal": "p99 <= 50 ms at 1,000 ScaledObjects in both configurations (issue 10 item 13)",
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine(),
                 "loadavg_before": [round(x, 2) for x in load_before],
                 "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                 "note": "shared machine: other processes' load (loadavg) inflates the tail latencies; the "
                         "load generator (Python gRPC client) and the engine farm share the same 2 cores"},
        "rows": rows,
        "summary": repeat_summary(rows),
    }


def repeat_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per configuration over the repeated runs: min and median of p50 / p99, and the load averages."""
    out: dict[str, dict[str, Any]] = {}
    for path in dict.fromkeys(r["path"] for r in rows if "config" in r):
        rs = [r for r in rows if r["path"] == path]
        out[path] = {"runs": len(rs)}
        for q in ("p50_ms", "p99_ms"):
            out[path][f"{q}_min"] = min(r[q] for r in rs)
            out[path][f"{q}_median"] = round(statistics.median(r[q] for r in rs), 3)
        out[path]["loadavg_1m_at_start"] = [r.get("loadavg_1m_before_after", [None])[0] for r in rs]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="shared,distinct", help="comma-separated: shared, distinct")
    ap.add_argument("--scaled-objects", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=30.0, help="measured seconds per configuration")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of load before measuring")
    ap.add_argument("--prometheus", action="store_true", help="also measure 1 PromQL query per poll")
    ap.add_argument("--rpc-process", action=argparse.BooleanOptionalAction, default=True,
                    help="run the scaler with --rpc-process (default) or answer RPCs on its main event loop")
    ap.add_argument("--ghz", default=shutil.which("ghz") or str(Path.home() / "go" / "bin" / "ghz"),
                    help="path of ghz, a Go gRPC load tool (go install github.com/bojand/ghz/cmd/ghz@v0.120.0)")
    ap.add_argument("--client", choices=["python", "ghz", "go"], default="python",
                    help="the load generator: a Python grpc.aio client (KEDA's pattern: one channel, GetMetrics "
                         "then IsActive per poll), ghz (a Go load tool, 2 x 50 workers, JSON call data) or go "
                         "(benchmarks/kedaload: KEDA's pattern in Go with pre-serialized requests, the least CPU)")
    ap.add_argument("--repeat", type=int, default=1, help="run every configuration this many times (min/median)")
    ap.add_argument("--tick-nice", type=int, default=None,
                    help="passed to the scaler (default: the scaler's default, 10; 0 = no priority split)")
    ap.add_argument("--loop-probe", type=Path, default=None, metavar="DIR",
                    help="time every event-loop callback and garbage collection of the scaler's two processes "
                         "in thread CPU time (benchmarks/loopprobe); files in DIR, a summary per run in the JSON")
    ap.add_argument("--output", type=Path, default=RESULTS / "rpc_load.json")
    args = ap.parse_args(argv)
    if args.ghz and not os.access(args.ghz, os.X_OK):
        args.ghz = None
    if args.client == "ghz" and not args.ghz:
        ap.error("--client ghz: ghz not found (go install github.com/bojand/ghz/cmd/ghz@v0.120.0)")
    if args.client == "go":
        args.kedaload = kedaload_binary()
    result = asyncio.run(run(args))
    print(table(result["rows"]))
    for path, sm in result["summary"].items():
        if sm["runs"] > 1:
            print(f"{path}: {sm['runs']} runs, p50 min/median {sm['p50_ms_min']}/{sm['p50_ms_median']} ms, "
                  f"p99 min/median {sm['p99_ms_min']}/{sm['p99_ms_median']} ms, load at start "
                  f"{sm['loadavg_1m_at_start']}")
    print(f"host: {result['host']['cpus']} CPUs, loadavg before/after {result['host']['loadavg_before'][0]} / "
          f"{result['host']['loadavg_after'][0]}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
