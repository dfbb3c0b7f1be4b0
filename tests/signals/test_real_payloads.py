"""Real ``/metrics`` captures of running engines (tests/signals/data/real; each file's first line names
its source) through the parsers, against values read off the payloads by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from warmscale.signals.engines import detect_engine, epp, parse_payload

REAL = Path(__file__).parent / "data" / "real"
INF = math.inf


def text(name: str) -> str:
    return (REAL / name).read_text()


def test_every_capture_names_its_source_on_its_first_line() -> None:
    files = sorted(REAL.glob("*.prom"))
    assert len(files) >= 6
    for f in files:
        first = f.read_text().splitlines()[0]
        assert first.startswith("# Real ") and ("@" in first or "https://" in first or "id " in first), f.name


def test_sglang_0_4_under_overload() -> None:
    """sglang docs @40ef116: 162 running, 2,826 queued, token usage 0.28; 11,008 first tokens, 2,513 of
    them within the top bucket (30 s): 77% above it, mean 2,351,897.9 / 11,008 = 213.7 s."""
    sig = parse_payload(text("sglang-0.4-overload.prom"))
    assert (sig.engine, sig.waiting, sig.running, sig.kv_usage) == ("sglang", 2826, 162, 0.28)
    assert (sig.prompt_tokens_total, sig.generation_tokens_total) == (8_128_902, 7_557_572)
    assert sig.requests_total is None and sig.preemptions_total is None  # not exported by this release
    assert sig.ttft is not None and sig.ttft.count == 11008
    assert sig.ttft.sum / sig.ttft.count == pytest.approx(213.65, abs=0.01)
    assert sig.ttft.fraction_above(30.0) == pytest.approx((11008 - 2513) / 11008)
    assert sig.ttft.top_bound() == 30.0
    assert sig.ttft.quantile(0.95) == INF  # above the top bound, not "30 s"
    # p20: rank 2201.6 in (15, 20]: 15 + 5 x (2201.6 - 1970) / (2326 - 1970)
    assert sig.ttft.quantile(0.2) == pytest.approx(15 + 5 * (2201.6 - 1970) / 356)
    assert sig.itl is not None and (sig.itl.count, sig.itl.sum) == (7_400_757, pytest.approx(866964.5791549598))


def test_sglang_0_3_names_and_name_label() -> None:
    """SGLang 0.3: num_requests_running/waiting with a ``name`` label; idle after 2,124 requests."""
    payload = text("sglang-0.3-idle.prom")
    assert detect_engine(payload) == "sglang"
    sig = parse_payload(payload)
    assert (sig.waiting, sig.running, sig.kv_usage, sig.max_running) == (0, 0, 0.01, 4097)
    assert (sig.prompt_tokens_total, sig.generation_tokens_total) == (506_780, 424_549)
    assert sig.ttft is not None and (sig.ttft.count, sig.ttft.sum) == (2124, pytest.approx(656.0780844688416))
    # p95: rank 2017.8 in (0.5, 0.75]: 0.5 + 0.25 x (2017.8 - 1350) / (2124 - 1350)
    assert sig.ttft.quantile(0.95) == pytest.approx(0.5 + 0.25 * 667.8 / 774)
    assert sig.itl is not None and sig.itl.count == 422_425


def test_triton_trtllm_readme_capture() -> None:
    """tensorrtllm_backend README @39ba55a: no request_type="waiting" (pre-0.18): waiting = max(0,
    active 0 - scheduled 1) = 0; running = scheduled = 1; KV = used / max = 1 / 6239; max 512 slots;
    finished = success 0 + failure 0 of the tensorrt_llm model."""
    sig = parse_payload(text("triton-trtllm-23.11-readme.prom"))
    assert (sig.engine, sig.waiting, sig.running, sig.max_running) == ("triton", 0, 1, 512)
    assert sig.kv_usage == pytest.approx(1 / 6239)
    assert sig.requests_total == 0 and sig.ttft is None


def test_vllm_0_30_awake_engine() -> None:
    sig = parse_payload(text("vllm-0.30-awake.prom"))
    assert (sig.engine, sig.waiting, sig.running, sig.kv_usage) == ("vllm", 0, 0, 0.0)
    assert (sig.prompt_tokens_total, sig.generation_tokens_total, sig.requests_total) == (8, 32, 2)  # 5+3, 2x16
    assert sig.sleeping is False


def test_vllm_old_names() -> None:
    """The KV gauge under its pre-0.9.2 name, series without an ``engine`` label."""
    sig = parse_payload(text("vllm-0.7-old-names.prom"))
    assert (sig.engine, sig.waiting, sig.running, sig.kv_usage) == ("vllm", 0, 0, 0.0)
    assert sig.sleeping is None  # no sleep-state family in that release


def test_gaie_1_0_picker_fixtures() -> None:
    """GAIE <= 1.0 golden files: running requests m1 1 + m2 1; no flow control (queue 0); the mean
    engine queue 0.4 of pool p1, but no ready-pod count to multiply it by (engine_waiting unknown)."""
    sig = epp.parse_payload(text("gaie-1.0-fixtures.prom"))
    assert (sig.flavor, sig.queue, sig.running, sig.ready_endpoints) == ("gaie", 0.0, 2.0, None)
    assert sig.engine_waiting is None
    with_ready = text("gaie-1.0-fixtures.prom") + 'inference_pool_ready_pods{name="p1"} 5\n'
    assert epp.parse_payload(with_ready, "p1").engine_waiting == pytest.approx(2.0)  # 0.4 x 5
