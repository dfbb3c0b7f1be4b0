"""``warmscale_slo_attainment_ratio`` from a running in-process scaler whose engines report TTFT."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import ClientSession
from prometheus_client.parser import text_string_to_metric_families

from tests.scaler.conftest import META
from warmscale.scaler.config import ScalerConfig
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import ReplicaReading, ReplicaSignal, Snapshot


class TtftReader:
    """One replica whose cumulative TTFT histogram gains 9 first tokens under 1 s and 1 over 4 s per read."""

    def __init__(self) -> None:
        self.reads = 0

    async def __call__(self, cfg: ScalerConfig, now: float, scope: tuple[str, str] = ("", "")) -> Snapshot:
        self.reads += 1
        n = float(self.reads)
        ttft = Histogram.from_buckets([(0.5, 5 * n), (1.0, 9 * n), (4.0, 9 * n), (float("inf"), 10 * n)],
                                      sum_=0.0, count=10 * n)
        sig = ReplicaSignal(engine="vllm", waiting=0.0, running=5.0, ttft=ttft, requests_total=10 * n)
        return Snapshot(taken_at=now, replicas=(ReplicaReading("r0", observed_at=now, signal=sig),))


async def test_slo_attainment_is_exported_per_window(make_server: Any, clients: Any) -> None:
    server = await make_server(TtftReader())
    c = clients(server.grpc_port)
    await c.poll(c.ref(name="chat", namespace="llm", metadata={**META, "ttftSloSeconds": "2"}))
    await asyncio.sleep(1.0)
    async with ClientSession() as http, http.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as r:
        text = await r.text()
    samples = {(s.labels["slo"], s.labels["window"]): s.value
               for f in text_string_to_metric_families(text) if f.name == "warmscale_slo_attainment_ratio"
               for s in f.samples}
    assert set(samples) == {("ttft", "5m"), ("ttft", "1h"), ("ttft", "1d")}  # no ITL SLO set: no itl series
    for value in samples.values():
        assert abs(value - 0.9) < 1e-9  # 9 of every 10 first tokens within 2 s
