"""The real `warmscale scaler` CLI as a subprocess, and a loopback vLLM engine whose load a test sets.

Used by the scaler's fault tests (Redis faults, intake caps and allow-lists, shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.scaler.conftest import Client, make_client
from tests.servers import FakeEngine, free_port, stop_process

ROOT = Path(__file__).resolve().parents[2]


def vllm_payload(running: float, waiting: float = 0.0, requests_total: float = 0.0) -> str:
    """A small vLLM v1 ``/metrics`` payload."""
    lab = 'engine="0",model_name="m"'
    return "\n".join([
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} 0.1",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {requests_total}',
        "",
    ])


class Engine:
    """A FakeEngine serving :func:`vllm_payload` with a settable load."""

    def __init__(self, fake: FakeEngine) -> None:
        self.fake = fake
        self.set(0.0)

    def set(self, running: float, waiting: float = 0.0, requests_total: float = 0.0) -> None:
        self.fake.serve(vllm_payload(running, waiting, requests_total))

    @property
    def url(self) -> str:
        return self.fake.url


class ScalerProcess:
    """``python -m warmscale.cli scaler ...`` on free loopback ports, JSON logs to a file."""

    def __init__(self, tmp: Path, *args: str, name: str = "scaler", grace: float = 5.0) -> None:
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        self.log_path = tmp / f"{name}.log"
        self._log = self.log_path.open("wb")
        cmd = [sys.executable, "-m", "warmscale.cli", "--log-format", "json", "--log-level", "info", "scaler",
               "--host", "127.0.0.1", "--grpc-port", str(self.grpc_port), "--metrics-port", str(self.metrics_port),
               "--grace-seconds", str(grace), "--no-kubernetes", "--instance-id", name, *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self._log)
        self.client: Client = make_client(self.grpc_port)

    async def wait_serving(self, within: float = 30.0) -> None:
        health = health_pb2_grpc.HealthStub(self.client.channel)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"scaler exited {self.proc.returncode}: {self.log()[-3000:]}")
            with contextlib.suppress(grpc.aio.AioRpcError):
                r = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"scaler not serving within {within}s: {self.log()[-3000:]}")

    async def desired(self, ref: Any) -> int:
        """What KEDA would land on: GetMetrics' metricValue (ceil of the float; hpaTolerance 0)."""
        m = await self.client.stub.GetMetrics(
            self.client.pb.GetMetricsRequest(scaledObjectRef=ref, metricName="warmscale-desired-replicas"),
            timeout=5)
        return int(m.metricValues[0].metricValue)

    async def active(self, ref: Any) -> bool:
        return bool((await self.client.stub.IsActive(ref, timeout=5)).result)

    def http(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5) as r:
            body: bytes = r.read()
            return body

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample of ``/metrics`` (the first whose labels include ``labels``)."""
        text = self.http("/metrics").decode()
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            m = re.match(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
        return None

    def decisions(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.http("/decisions"))
        return body

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def sigterm(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.channel.close()
        await asyncio.to_thread(stop_process, self.proc, 15)
        self._log.close()


async def start_scalers(tmp: Path, n: int, *args: str, names: Sequence[str] | None = None) -> list[ScalerProcess]:
    procs = [ScalerProcess(tmp, *args, name=(names[i] if names else f"scaler-{i}")) for i in range(n)]
    await asyncio.gather(*(p.wait_serving() for p in procs))
    return procs


async def until(check: Callable[[], Awaitable[bool]], within: float, every: float = 0.1) -> float:
    """Poll ``check`` until it holds; returns the seconds it took (raises TimeoutError)."""
    t0 = time.monotonic()
    while True:
        with contextlib.suppress(grpc.aio.AioRpcError):
            if await check():
                return time.monotonic() - t0
        if time.monotonic() - t0 > within:
            raise TimeoutError(f"condition not met within {within}s")
        await asyncio.sleep(every)
