"""Prefill/decode engine metrics: vLLM's NIXL KV connector and SGLang PD, parsed from realistic
samples (tests/signals/data/pd/README.md names the source of every name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmscale.signals.engines import parse_payload

PD = Path(__file__).parent / "data" / "pd"


def _read(name: str, engine: str):  # type: ignore[no-untyped-def]
    return parse_payload((PD / name).read_text(), engine)


def test_vllm_nixl_decode_instance_reports_the_transfers() -> None:
    sig = _read("vllm-nixl-decode.prom", "vllm")
    assert (sig.waiting, sig.running, sig.kv_usage) == (4, 57, pytest.approx(0.4637))
    assert sig.kv_transfers_total == 1240 and sig.kv_transfer_seconds_total == pytest.approx(60.14)
    assert sig.kv_transfer_seconds_total / sig.kv_transfers_total == pytest.approx(0.0485, abs=1e-4)
    assert sig.requests_total == 1141 + 83 and sig.ttft is not None and sig.ttft.count == 1219


def test_vllm_nixl_prefill_instance_has_empty_transfer_histograms() -> None:
    sig = _read("vllm-nixl-prefill.prom", "vllm")
    assert (sig.waiting, sig.running) == (11, 3)
    assert sig.kv_transfers_total == 0 and sig.kv_transfer_seconds_total == 0  # known zero: no transfer here
    assert sig.prompt_tokens_total == pytest.approx(5.39001e6)


def test_sglang_pd_prefill_reports_its_queues_and_the_latest_transfer() -> None:
    sig = _read("sglang-pd-prefill.prom", "sglang")
    assert sig.waiting == 9 + 6 + 14  # queue + prealloc (bootstrap) + inflight (transferring to decode)
    assert sig.kv_transfer_latency_s == pytest.approx(0.0587)
    assert sig.kv_transfers_total is None  # a gauge, not counters


def test_sglang_pd_decode_reports_its_queues_and_no_transfer_latency() -> None:
    sig = _read("sglang-pd-decode.prom", "sglang")
    assert sig.waiting == 0 + 3 + 11 and sig.running == 391
    assert sig.kv_transfer_latency_s is None  # 0 on the receiver: unknown, not an instant transfer
    assert sig.kv_usage == pytest.approx(0.6696)


def test_sglang_histogram_transfer_latency_reads_sum_and_count_in_ms() -> None:
    base = ('sglang:num_running_reqs{engine_type="prefill",tp_rank="0"} 1\n'
            'sglang:num_queue_reqs{engine_type="prefill",tp_rank="0"} 0\n')
    hist = ('# TYPE sglang:kv_transfer_latency_ms histogram\n'
            'sglang:kv_transfer_latency_ms_bucket{engine_type="prefill",le="50.0",tp_rank="0"} 30\n'
            'sglang:kv_transfer_latency_ms_bucket{engine_type="prefill",le="+Inf",tp_rank="0"} 40\n'
            'sglang:kv_transfer_latency_ms_sum{engine_type="prefill",tp_rank="0"} 2200\n'
            'sglang:kv_transfer_latency_ms_count{engine_type="prefill",tp_rank="0"} 40\n')
    sig = parse_payload(base + hist, "sglang")
    assert sig.kv_transfer_seconds_total == pytest.approx(2.2) and sig.kv_transfers_total == 40
    assert sig.kv_transfer_latency_s is None


def test_signal_round_trips_the_transfer_fields() -> None:
    from warmscale.signals.model import ReplicaSignal

    sig = _read("sglang-pd-prefill.prom", "sglang")
    assert ReplicaSignal.from_dict(sig.to_dict()) == sig
