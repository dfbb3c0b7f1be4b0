"""The Prometheus-backed picker source (``prometheusAddress`` + ``eppPool``): a real Prometheus scrapes
a fake picker serving the llm-d router sample; the source reads the same signal the direct parser
reads, and a dead picker target or a dead Prometheus is unknown, never an empty queue."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from tests.servers import FakeEngine, PrometheusServer, free_port
from warmscale.signals.engines import epp
from warmscale.signals.sources.gateway import EppPrometheusSource

pytestmark = pytest.mark.servers

DATA = Path(__file__).parents[1] / "signals" / "data" / "epp"


async def test_prometheus_backed_picker_reads_like_the_direct_parser(
    prometheus_server: Callable[..., PrometheusServer],
) -> None:
    text = (DATA / "llm-d-router-pd.prom").read_text()
    picker = FakeEngine(text)
    prom = prometheus_server([picker.target])
    prom.wait_for('llm_d_epp_flow_control_queue_size{inference_pool="llama-pd"}')
    session = aiohttp.ClientSession()
    source = EppPrometheusSource(prom.url, "llama-pd", session, selector=f'instance="{picker.target}"', timeout=3.0)
    try:
        res = await source.read(time.time())
        (reading,) = res.gateways
        assert reading.signal == epp.parse_payload(text, "llama-pd")
        assert reading.signal.queue == 12 and reading.signal.saturation["prefill"] == pytest.approx(1.18)

        sel = f'instance="{picker.target}"'
        wrong = EppPrometheusSource(prom.url, "no-such-pool", session, selector=sel, timeout=3.0)
        (r2,) = (await wrong.read(time.time())).gateways
        assert r2.signal is None and "no-such-pool" in (r2.error or "")
        await wrong.aclose()

        dead = EppPrometheusSource(f"http://127.0.0.1:{free_port()}", "llama-pd", session, timeout=1.0)
        (r3,) = (await dead.read(time.time())).gateways
        assert r3.signal is None and r3.error
        await dead.aclose()
    finally:
        await source.aclose()
        await session.close()
        picker.close()
