"""Endpoint-picker payloads (llm-d router, Gateway API Inference Extension EPP) -> GatewaySignal.

The samples in tests/signals/data/epp/ follow the pickers' source (see the README there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmscale.signals.engines import detect_engine, epp
from warmscale.signals.parsing import PayloadError

DATA = Path(__file__).parent / "data" / "epp"


def sample(name: str) -> str:
    return (DATA / name).read_text()


def test_every_epp_sample_is_tested() -> None:
    tested = {"llm-d-router-pd.prom", "llm-d-router-empty.prom", "llm-d-router-stale.prom", "gaie-v1.5.0.prom"}
    assert {p.name for p in DATA.glob("*.prom")} == tested


def test_llm_d_router_pd_pool_reads_new_names_once_with_stages() -> None:
    sig = epp.parse_payload(sample("llm-d-router-pd.prom"), "llama-pd")
    assert sig.flavor == "llm-d"
    assert sig.queue == 12  # 9 + 3 + 0 over fairness ids; the deprecated copy is not added
    assert sig.saturation == {"prefill": pytest.approx(1.18), "decode": pytest.approx(0.72),
                              "effective": pytest.approx(1.18)}
    assert sig.stage_saturation("decode") == pytest.approx(0.72)
    assert sig.running == 184  # 148 + 36, llm_d_epp_request_running only
    assert sig.ready_endpoints == 6
    assert sig.stale_endpoints == 0


def test_empty_pool_holds_the_queue_and_reads_saturated() -> None:
    sig = epp.parse_payload(sample("llm-d-router-empty.prom"), "qwen-chat")
    assert sig.queue == 3
    assert sig.ready_endpoints == 0
    assert sig.saturation == {"effective": 1.0}
    # Per-stage series are deleted when a stage has no endpoints: a role falls back to effective.
    assert sig.stage_saturation("prefill") == 1.0
    assert sig.running is None


def test_stale_endpoints_are_reported() -> None:
    sig = epp.parse_payload(sample("llm-d-router-stale.prom"))
    assert sig.stale_endpoints == 2 and sig.queue == 0 and sig.running == 0


def test_gaie_v1_5_has_no_stage_and_no_stale_gauge() -> None:
    sig = epp.parse_payload(sample("gaie-v1.5.0.prom"), "vllm-llama3-8b-instruct")
    assert sig.flavor == "gaie"
    assert sig.queue == 6
    assert sig.saturation == {"effective": pytest.approx(0.93)}
    assert sig.stage_saturation("decode") == pytest.approx(0.93)
    assert sig.running == 58
    assert sig.ready_endpoints == 3
    assert sig.stale_endpoints is None  # not exposed: unknown, not zero


def test_pool_filter_and_unknown_pool() -> None:
    text = sample("llm-d-router-pd.prom").replace('inference_pool="llama-pd"', 'inference_pool="other"', 1)
    assert epp.parse_payload(text, "llama-pd").queue == 3  # the first series now belongs to "other"
    assert epp.parse_payload(text).queue == 12
    with pytest.raises(PayloadError, match="'typo' not in the picker's metrics"):
        epp.parse_payload(text, "typo")


@pytest.mark.parametrize("bad", ["nan", "-1", "+Inf"])
def test_invalid_gauges_make_the_picker_unknown(bad: str) -> None:
    text = sample("llm-d-router-empty.prom").replace(
        'target_model_name="Qwen/Qwen3-8B"} 3', f'target_model_name="Qwen/Qwen3-8B"}} {bad}', 1)
    with pytest.raises(PayloadError):
        epp.parse_payload(text, "qwen-chat")


def test_engine_payloads_and_garbage_are_not_pickers() -> None:
    vllm = (Path(__file__).parents[2] / ".." / "shared" / "reference" / "metrics-samples").resolve()
    for p in sorted(vllm.glob("*.prom"))[:3]:
        with pytest.raises(PayloadError, match="not an endpoint-picker payload"):
            epp.parse_payload(p.read_text())
    with pytest.raises(PayloadError):
        epp.parse_payload("llm_d_epp_flow_control_queue_size{inference_pool=\"p\"} 1")  # truncated (no LF)


def test_pickers_are_not_mistaken_for_engines() -> None:
    for name in ("llm-d-router-pd.prom", "gaie-v1.5.0.prom"):
        assert detect_engine(sample(name)) is None


def test_prometheus_vector_reads_like_the_payload() -> None:
    vector = [
        {"metric": {"__name__": "llm_d_epp_flow_control_queue_size", "inference_pool": "p", "job": "epp",
                    "fairness_id": "default", "priority": "0"}, "value": [1.0, "4"]},
        {"metric": {"__name__": "inference_extension_flow_control_queue_size", "inference_pool": "p"},
         "value": [1.0, "4"]},
        {"metric": {"__name__": "llm_d_epp_flow_control_pool_saturation", "inference_pool": "p",
                    "stage": "decode"}, "value": [1.0, "0.5"]},
        {"metric": {"__name__": "llm_d_epp_ready_endpoints", "name": "p"}, "value": [1.0, "2"]},
    ]
    sig = epp.parse(epp.index_from_vector(vector), "p")
    assert sig.queue == 4 and sig.ready_endpoints == 2
    assert sig.saturation == {"decode": 0.5, "effective": 0.5}
    with pytest.raises(PayloadError):
        epp.index_from_vector([{"metric": {"__name__": "x"}, "value": [1.0, "abc"]}])


def test_vllm_nixl_kv_transfer_counters() -> None:
    """vLLM's NIXL KV connector (P/D): ``vllm:nixl_xfer_time_seconds`` (vllm-project/vllm,
    vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py, NixlPromMetrics)."""
    from warmscale.signals.engines import parse_payload

    base = ('vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n')
    nixl = ('# TYPE vllm:nixl_xfer_time_seconds histogram\n'
            'vllm:nixl_xfer_time_seconds_bucket{engine="0",le="0.005",model_name="m"} 10.0\n'
            'vllm:nixl_xfer_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 40.0\n'
            'vllm:nixl_xfer_time_seconds_sum{engine="0",model_name="m"} 0.62\n'
            'vllm:nixl_xfer_time_seconds_count{engine="0",model_name="m"} 40.0\n')
    sig = parse_payload(base + nixl, "vllm")
    assert sig.kv_transfer_seconds_total == pytest.approx(0.62) and sig.kv_transfers_total == 40
    assert parse_payload(base, "vllm").kv_transfers_total is None  # no connector: unknown, not zero
