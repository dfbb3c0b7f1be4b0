"""PromQL construction per engine and decoding of query results (pure)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from warmscale.signals import promql

ENGINES = ["vllm", "sglang", "tgi", "trtllm", "triton", "ray"]


@pytest.mark.parametrize(
    ("engine", "fragments"),
    [
        ("vllm", ["sum by (pod, instance) (vllm:num_requests_waiting{",
                  # both KV names under one max: an engine with only the old name is read (issue 20)
                  'max by (pod, instance) ({__name__=~"vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc",ns})']),
        ("sglang", ['__name__=~"sglang:num_queue_reqs|sglang:num_prefill_prealloc_queue_reqs|',
                    "(max by (pod, instance) (sglang:num_used_tokens{ns}) / max by (pod, instance) "
                    "(sglang:max_total_num_tokens{ns}))"]),
        ("tgi", ["tgi_queue_size{ns}",
                 '{__name__=~"tgi_request_success|tgi_request_failure",err=~"|generation|incomplete_generation",ns}']),
        ("trtllm", ["trtllm_num_requests_waiting{ns}", "trtllm_kv_cache_utilization{ns}"]),
        ("triton", ['nv_trt_llm_request_metrics{request_type="waiting",ns}',
                    'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",ns}']),
        ("ray", ['__name__=~"ray_serve_deployment_queued_queries|ray_vllm_num_requests_waiting|ray_vllm:num_',
                 "ray_serve_num_ongoing_requests_at_replicas{ns}"]),
    ],
)  # fmt: skip
def test_replica_query_per_engine(engine: str, fragments: list[str]) -> None:
    q = promql.replica_query(engine, "ns")
    for f in fragments:
        assert f in q, f
    assert f'"{promql.SIGNAL_LABEL}", "waiting"' in q
    assert f'"{promql.ENGINE_LABEL}", "{engine}"' in q
    assert "timestamp(" in q


def test_selector_composition_and_escaping() -> None:
    t = promql.Term(("a:b",), 'x="1"')
    assert promql.selector(t) == 'a:b{x="1"}'
    assert promql.selector(t, 'namespace="llm",') == 'a:b{x="1",namespace="llm"}'
    assert promql.selector(promql.Term(("a",))) == "a"
    multi = promql.selector(promql.Term(("a.b", "c")), 'n="x"')
    assert multi == '{__name__=~"a\\\\.b|c",n="x"}'


def test_auto_covers_every_engine_and_trtllm_serve_alias() -> None:
    q = promql.replica_query("auto")
    for e in ENGINES:
        assert f'"{promql.ENGINE_LABEL}", "{e}"' in q
    assert promql.replica_query("trtllm-serve") == promql.replica_query("trtllm")
    with pytest.raises(ValueError):
        promql.replica_query("llamacpp")


def test_ttft_window_query() -> None:
    q = promql.ttft_window_query("vllm", 60, 'namespace="llm"')
    assert q is not None
    assert 'sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{namespace="llm"}[60s]))' in q
    assert 'sum(increase(vllm:time_to_first_token_seconds_sum{namespace="llm"}[60s]))' in q
    assert promql.ttft_window_query("tgi", 60) is None
    auto = promql.ttft_window_query("auto", 30.4)
    assert auto is not None and "[30s]" in auto and "nv_inference_first_response" not in auto
    assert promql.ttft_scale("triton") == 1e-3 and promql.ttft_scale("vllm") == 1.0


def test_itl_window_query() -> None:
    q = promql.itl_window_query("vllm", 60, 'namespace="llm"')
    assert q is not None
    # The 0.11 rename: both names are alternatives (or), never added.
    assert ('sum by (le) (increase(vllm:inter_token_latency_seconds_bucket{namespace="llm"}[60s])) or '
            'sum by (le) (increase(vllm:time_per_output_token_seconds_bucket{namespace="llm"}[60s]))') in q
    assert 'sum(increase(vllm:inter_token_latency_seconds_sum{namespace="llm"}[60s]))' in q
    assert promql.itl_window_query("triton", 60) is None  # the TRT-LLM backend has no ITL histogram
    tgi = promql.itl_window_query("tgi", 60)
    assert tgi is not None and "tgi_request_mean_time_per_token_duration_bucket" in tgi
    auto = promql.itl_window_query("auto", 30.4)
    assert auto is not None and "[30s]" in auto and "sglang:inter_token_latency_seconds_bucket" in auto


def item(value: float | str, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1000.0, str(value)]}


def sig(
    name: str, value: float | str, replica: str = "pod-a", engine: str = "vllm", key: str = "pod"
) -> dict[str, Any]:
    return item(value, **{key: replica, promql.SIGNAL_LABEL: name, promql.ENGINE_LABEL: engine})


def test_decode_replicas() -> None:
    result = [
        sig("waiting", 3), sig("running", 10), sig("kv", 0.5), sig("requests", 100), sig("timestamp", 990.0),
        sig("waiting", 1, "pod-b"), sig("running", 2, "pod-b"),
        sig("waiting", 2, "10.0.0.9:8000", key="instance"), sig("running", 4, "10.0.0.9:8000", key="instance"),
    ]  # fmt: skip
    readings = {r.replica: r for r in promql.decode_replicas(result, now=1000.0)}
    a = readings["pod-a"]
    assert a.signal is not None and a.observed_at == 990.0
    assert (a.signal.waiting, a.signal.running, a.signal.kv_usage, a.signal.requests_total) == (3, 10, 0.5, 100)
    assert readings["pod-b"].observed_at == 1000.0
    assert readings["10.0.0.9:8000"].signal is not None


def test_decode_unknown_never_zero() -> None:
    result = [
        sig("waiting", 3, "only-waiting"),
        sig("waiting", "NaN", "nan"), sig("running", 1, "nan"),
        sig("waiting", 0, "kv-broken"), sig("running", 0, "kv-broken"), sig("kv", 3.0, "kv-broken"),
    ]  # fmt: skip
    readings = {r.replica: r for r in promql.decode_replicas(result, now=1000.0)}
    assert all(not r.known for r in readings.values())
    assert "running" in (readings["only-waiting"].error or "")
    assert "waiting = nan" in (readings["nan"].error or "")
    assert "kv" in (readings["kv-broken"].error or "")


def test_decode_auto_picks_one_engine_per_pod() -> None:
    result = [
        sig("waiting", 5, engine="vllm"), sig("running", 7, engine="vllm"),
        sig("waiting", 50, engine="sglang"),  # incomplete: never added to vLLM's count
    ]  # fmt: skip
    (r,) = promql.decode_replicas(result, now=1.0)
    assert r.signal is not None and (r.signal.engine, r.signal.waiting, r.signal.running) == ("vllm", 5, 7)


def test_decode_sums_duplicate_replica_series_and_maxes_kv() -> None:
    result = [
        sig("waiting", 1), sig("waiting", 2), sig("running", 3), sig("running", 4), sig("kv", 0.2), sig("kv", 0.7)
    ]
    (r,) = promql.decode_replicas(result, now=1.0)
    assert r.signal is not None and (r.signal.waiting, r.signal.running, r.signal.kv_usage) == (3, 7, 0.7)


def part(p: str, value: float | str, le: str | None = None) -> dict[str, Any]:
    labels = {promql.PART_LABEL: p}
    if le is not None:
        labels["le"] = le
    return item(value, **labels)


def test_decode_ttft_window() -> None:
    res = [part("bucket", 2.0, "0.5"), part("bucket", 10.2, "+Inf"), part("bucket", 9.9, "1"), part("sum", 7.5)]
    h = promql.decode_ttft_window(res)
    assert h is not None
    assert h.buckets == ((0.5, 2.0), (1.0, 9.9), (math.inf, 10.2))
    assert h.sum == 7.5 and h.count == 10.2
    assert h.quantile(0.5) == pytest.approx(0.5 + 0.5 * (5.1 - 2) / 7.9)
    # extrapolated increase() may break monotonicity slightly: repaired
    h2 = promql.decode_ttft_window([part("bucket", 3.0, "0.5"), part("bucket", 2.9, "1"), part("bucket", 3, "+Inf")])
    assert h2 is not None and h2.buckets[1][1] == 3.0
    assert promql.decode_ttft_window([]) is None
    ms = promql.decode_ttft_window([part("bucket", 1, "500"), part("bucket", 2, "+Inf"), part("sum", 900)], 1e-3)
    assert ms is not None and ms.buckets[0] == (0.5, 1) and ms.sum == pytest.approx(0.9)
