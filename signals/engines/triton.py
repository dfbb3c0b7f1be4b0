"""Triton Inference Server with the TensorRT-LLM backend. ``engine-metrics.md`` section 4a-4b.

Queue = ``nv_trt_llm_request_metrics{request_type="waiting"}`` (v0.18+), else ``active - scheduled``;
running = ``scheduled``. ``nv_inference_pending_request_count`` stays ~0 for the decoupled
``tensorrt_llm`` model and is deliberately *not* added. KV = ``kv_cache_block_type="fraction"``
(v0.18+), else ``used / max``. TTFT only from the opt-in ``nv_inference_first_response_histogram_ms``
(converted to seconds). There is no inter-token latency histogram (``itl`` is ``None``).
"""

from __future__ import annotations

from warmscale.signals.engines._common import counter_sum, fraction, gauge_max, gauge_mean, gauge_sum, ratio, required
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import MetricIndex, label_is

REQ = "nv_trt_llm_request_metrics"
KV = "nv_trt_llm_kv_cache_block_metrics"


def detect(idx: MetricIndex) -> bool:
    return REQ in idx or KV in idx


def parse(idx: MetricIndex) -> ReplicaSignal:
    scheduled = gauge_sum(idx, REQ, label_is("request_type", "scheduled"))
    running = required(scheduled, "running", (f'{REQ}{{request_type="scheduled"}}',))
    waiting = gauge_sum(idx, REQ, label_is("request_type", "waiting"))
    if waiting is None:
        active = gauge_sum(idx, REQ, label_is("request_type", "active"))
        waiting = None if active is None else max(0.0, active - running)
    waiting = required(waiting, "waiting", (f'{REQ}{{request_type="waiting"}}', f'{REQ}{{request_type="active"}}'))
    kv = gauge_max(idx, KV, label_is("kv_cache_block_type", "fraction"))
    if kv is None:
        kv = ratio(
            gauge_sum(idx, KV, label_is("kv_cache_block_type", "used")),
            gauge_sum(idx, KV, label_is("kv_cache_block_type", "max")),
        )
    # Finished requests of the TRT-LLM model(s): one output-length observation per request (v0.16+),
    # else Triton's success+failure counters of the models that carry nv_trt_llm_* series.
    finished = counter_sum(idx, "nv_llm_output_token_len_count")
    if finished is None:
        models = {lbl.get("model") for lbl, _ in idx.series(REQ)}
        in_models = label_is("model", *(m for m in models if m))
        ok = counter_sum(idx, "nv_inference_request_success", "nv_inference_request_success_total", where=in_models)
        bad = counter_sum(idx, "nv_inference_request_failure", "nv_inference_request_failure_total", where=in_models)
        finished = None if ok is None else ok + (bad or 0.0)
    gpu = gauge_mean(idx, "nv_gpu_utilization")
    return ReplicaSignal(
        engine="triton",
        waiting=waiting,
        running=running,
        kv_usage=fraction(KV, kv),
        ttft=idx.histogram("nv_inference_first_response_histogram_ms", scale=1e-3),
        prompt_tokens_total=counter_sum(idx, "nv_llm_input_token_len_sum"),
        generation_tokens_total=counter_sum(idx, "nv_llm_output_token_len_sum"),
        requests_total=finished,
        preemptions_total=None,
        max_running=gauge_sum(idx, REQ, label_is("request_type", "max")),
        gpu_utilization=fraction("nv_gpu_utilization", gpu),
    )
