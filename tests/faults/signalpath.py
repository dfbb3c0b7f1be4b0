"""Helpers of the signal-path fault tests: the real scaler CLI process, a KEDA-like client, and hostile
loopback engines (hang, trickle) that the ordinary fake engine cannot play."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.servers import SAMPLES_DIR, free_port
from warmscale.proto import externalscaler_pb2 as pb
from warmscale.proto import externalscaler_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[2]


def vllm_payload(running: float, waiting: float = 0.0, requests: float = 100.0, *, duplicate: bool = False) -> str:
    """A small valid vLLM payload; ``duplicate`` repeats the running series (a broken exporter)."""
    run = f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}'
    lines = [
        "# TYPE vllm:num_requests_running gauge", run,
        "# TYPE vllm:num_requests_waiting gauge", f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}',
        "# TYPE vllm:kv_cache_usage_perc gauge", 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3',
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} {requests}',
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {requests * 100}',
    ]  # fmt: skip
    if duplicate:
        lines.append(run)
    return "\n".join(lines) + "\n"


def large_vllm_payload(running: float) -> str:
    """The real 85 kB vLLM sample with its running gauge set to ``running`` (>= 32 kB: parsed off-loop)."""
    text = (SAMPLES_DIR / "vllm-v1-load.prom").read_text()
    return re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", rf"\g<1> {running}", text, flags=re.M)


class Hostile:
    """A loopback HTTP server on its own thread that accepts every request and then either never answers
    (``hang``) or answers 200 and trickles one byte of body every ``every`` seconds forever (``trickle``)."""

    def __init__(self, mode: str = "trickle", every: float = 0.2) -> None:
        self.mode, self.every = mode, every
        self.port = free_port()
        self.hits = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"hostile-{self.port}")
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hits += 1
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            if self.mode == "trickle":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                             b"Content-Length: 100000000\r\n\r\n")
                while True:
                    writer.write(b"#")
                    await writer.drain()
                    await asyncio.sleep(self.every)
            await asyncio.sleep(3600)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        me = asyncio.current_task()
        for t in [t for t in asyncio.all_tasks() if t is not me]:
            t.cancel()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


class ScalerCLI:
    """``warmscale scaler`` as a child process (no Kubernetes, memory store) and a KEDA-like client."""

    def __init__(self, log_path: Path, *extra: str) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self._log = log_path.open("wb")
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "warmscale.cli", "--log-format", "json", "scaler", "--host", "127.0.0.1",
             "--grpc-port", str(self.port), "--metrics-port", str(self.metrics_port), "--no-kubernetes",
             "--grace-seconds", "1", *extra],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self._log,
        )
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    async def ready(self, within: float = 30.0) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            with contextlib.suppress(grpc.aio.AioRpcError):
                r = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            await asyncio.sleep(0.1)
        raise TimeoutError("scaler not serving")

    async def poll(self, name: str, meta: Mapping[str, str]) -> tuple[float | None, bool]:
        """KEDA's poll: GetMetrics then IsActive -> (metricValueFloat, active); the value is None where
        GetMetrics answers UNAVAILABLE (a hold with no count: the HPA keeps what runs)."""
        ref = pb.ScaledObjectRef(name=name, namespace="faults", scalerMetadata=dict(meta))
        value: float | None = None
        try:
            m = await self.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="x"), timeout=5)
            value = m.metricValues[0].metricValueFloat
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        a = await self.stub.IsActive(ref, timeout=5)
        return value, a.result

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
            return await r.text()

    async def gauge(self, metric: str, name: str) -> float | None:
        text = await self.metrics()
        m = re.search(rf'^{metric}\{{namespace="faults",scaledObject="{name}"\}} (\S+)$', text, re.M)
        return float(m.group(1)) if m else None

    async def decisions(self, name: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.metrics_port}/decisions?namespace=faults&name={name}"
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            doc = await r.json()
        return list(doc["decisions"] if isinstance(doc, dict) else doc)

    async def close(self) -> None:
        await self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


async def until(check: Callable[[], Awaitable[bool]], within: float, every: float = 0.2) -> float:
    """Seconds until ``check()`` holds; raises after ``within`` seconds."""
    t0 = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - t0
        if time.monotonic() - t0 > within:
            raise TimeoutError(f"condition not met within {within}s")
        await asyncio.sleep(every)
