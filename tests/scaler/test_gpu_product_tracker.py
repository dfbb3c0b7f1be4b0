"""The discovered GPU product (Snapshot.gpu_product) picks the warm pool's time-to-ready measured on
that product, through the real tracker (store, warm status, policy); ``gpuProduct`` overrides it."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from tests.scaler.conftest import META, ScriptedReader
from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.store import MemoryStore
from warmscale.scaler.tracker import TrackerManager
from warmscale.scaler.warm_status import WarmStatus
from warmscale.signals.model import Snapshot

A100, H100 = "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3"


class ProductReader(ScriptedReader):
    def __init__(self, product: str | None) -> None:
        super().__init__(load=10.0)
        self.product = product

    async def __call__(self, cfg: ScalerConfig, now: float, scope: tuple[str, str] = ("", "")) -> Snapshot:
        return replace(await super().__call__(cfg, now, scope), gpu_product=self.product)


@pytest.mark.parametrize(("product", "meta", "want"), [
    (None, {}, 500.0),  # unknown product: the medians over every product
    (A100, {}, 300.0),  # discovered from the nodes
    (A100, {"gpuProduct": H100}, 450.0),  # the override wins over discovery
])
async def test_time_to_ready_of_the_discovered_product(product: str | None, meta: dict[str, str],
                                                       want: float) -> None:
    store = MemoryStore()
    await store.put_warm_status("llm", "vllm", WarmStatus(
        "llm", "vllm", updated_at=time.time(), time_to_ready_s={"cold": 500.0},
        time_to_ready_by_gpu={A100: {"cold": 300.0}, H100: {"cold": 450.0}}))
    m = TrackerManager(store, ProductReader(product), ScalerMetrics(), DecisionLog(10), instance_id="t")
    try:
        t: Any = m.get("llm", "vllm", {**META, **meta})
        d = await t.current()
        assert d.reason != "hold-no-decision"
        assert d.time_to_ready_s == want
    finally:
        await m.stop()
