"""TensorRT-LLM's ``trtllm-serve`` (``/prometheus/metrics``). ``engine-metrics.md`` section 4c.

2026 builds prefix everything with ``trtllm_`` and expose the iteration gauges (with
``enable_iter_perf_stats``); builds from 2025 expose only five unprefixed request families and no
queue gauges, so they fail with a :class:`~signals.parsing.PayloadError` (missing metrics).
"""

from __future__ import annotations

from warmscale.signals.engines._common import (
    counter_sum,
    first_histogram,
    fraction,
    gauge_max,
    gauge_sum,
    ratio,
    required,
)
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import MetricIndex

P = "trtllm_"


def detect(idx: MetricIndex) -> bool:
    return idx.has_prefix(P)


def parse(idx: MetricIndex) -> ReplicaSignal:
    waiting = required(gauge_sum(idx, P + "num_requests_waiting"), "waiting", (P + "num_requests_waiting",))
    running = required(gauge_sum(idx, P + "num_requests_running"), "running", (P + "num_requests_running",))
    kv = gauge_max(idx, P + "kv_cache_utilization")
    if kv is None:
        kv = ratio(gauge_sum(idx, P + "kv_cache_used_blocks"), gauge_sum(idx, P + "kv_cache_max_blocks"))
    ttft_base = P + "time_to_first_token_seconds"
    if ttft_base + "_bucket" not in idx:
        ttft_base = "time_to_first_token_seconds"  # pre-2026 unprefixed family
    return ReplicaSignal(
        engine="trtllm",
        waiting=waiting,
        running=running,
        kv_usage=fraction(P + "kv_cache_utilization", kv),
        ttft=idx.histogram(ttft_base),
        prompt_tokens_total=counter_sum(idx, P + "prompt_tokens_total", P + "prompt_tokens"),
        generation_tokens_total=counter_sum(idx, P + "generation_tokens_total", P + "generation_tokens"),
        requests_total=counter_sum(
            idx, P + "request_success_total", P + "request_success", "request_success_total"
        ),
        preemptions_total=None,
        max_running=gauge_sum(idx, P + "max_num_active_requests"),
        itl=first_histogram(idx, P + "time_per_output_token_seconds", "time_per_output_token_seconds"),
    )
