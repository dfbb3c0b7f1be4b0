"""`warmscale advise`'s Prometheus edge: a real Prometheus scrapes a fake exporter of the scaler's own
series going through three cold scale-ups that miss the TTFT SLO; the range queries read back into
samples on which the cold-start finding speaks (thresholds scaled down to seconds)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.servers import FakeEngine, PrometheusServer
from warmscale.advise.collect import read_prometheus
from warmscale.common.diagnostics.detect import advise
from warmscale.common.diagnostics.model import COLD_START, Policy, Signals

pytestmark = pytest.mark.servers


def payload(desired: int, ready: int, ttft: float) -> str:
    labels = 'namespace="llm",scaledObject="vllm-llama"'
    return (f"warmscale_desired_replicas{{{labels}}} {desired}\n"
            f"warmscale_ready_replicas{{{labels}}} {ready}\n"
            f"warmscale_ttft_quantile_seconds{{{labels}}} {ttft}\n"
            f"warmscale_ttft_slo_seconds{{{labels}}} 0.5\n"
            f"warmscale_time_to_ready_seconds{{{labels}}} 3\n"
            'vllm:num_requests_running{namespace="llm",pod="vllm-llama-0"} 12\n')


async def test_cold_starts_read_back_from_prometheus(prometheus_server: Callable[..., PrometheusServer]) -> None:
    exporter = FakeEngine(payload(2, 2, 0.2))
    prom = prometheus_server([exporter.target])
    try:
        prom.wait_for('warmscale_desired_replicas{scaledObject="vllm-llama"}')
        start = time.time()
        for _ in range(3):
            exporter.serve(payload(6, 2, 2.0))  # scale-up, capacity still cold, TTFT over the SLO
            await asyncio.sleep(3.5)
            exporter.serve(payload(6, 6, 0.3))
            await asyncio.sleep(2.0)
            exporter.serve(payload(2, 2, 0.2))
            await asyncio.sleep(2.0)
        end = time.time() + 1.0
        scale, latency, load = await read_prometheus(prom.url, start, end, [], None, step=1.0)
        assert scale and {(s.namespace, s.workload) for s in scale} == {("llm", "vllm-llama")}
        assert any(s.desired == 6 and s.ready == 2 and s.ttft_s == 2.0 for s in scale)
        assert load and load[0].pod == "vllm-llama-0" and load[0].running == 12
        assert latency == []  # no ITL series exported: nothing, not zeros
        policy = replace(Policy(), cold_start_min_s=2.0)
        (f,) = advise(Signals(scale=tuple(scale)), policy, end)
        assert f.kind == COLD_START and len(f.episodes) == 3
        assert all(e.data["time_to_ready_s"] == 3.0 for e in f.episodes)
    finally:
        exporter.close()
