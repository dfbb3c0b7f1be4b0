"""SGLang (``--enable-metrics``), 0.3 and later. ``engine-metrics.md`` section 2.

Scheduler gauges are summed over ``dp_rank`` series (only attention-TP-rank-0 schedulers report);
PD-disaggregation queues add to the queue signal (each server exposes its own role's: prealloc and
inflight on prefill servers, prealloc and transfer on decode servers). The KV-transfer latency is read
from ``sglang:kv_transfer_latency_ms``: a gauge (the latest transfer's, 0 before any) in the releases
that define it so, a histogram (``_sum``/``_count``, in ms) in later ones. KV usage is the max of ``token_usage``, else
``num_used_tokens / max_total_num_tokens``. Retractions are SGLang's preemptions.
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

P = "sglang:"
# Extra queues of prefill/decode roles under PD disaggregation (0 on unified engines).
PD_QUEUES = (
    P + "num_prefill_prealloc_queue_reqs",
    P + "num_prefill_inflight_queue_reqs",
    P + "num_decode_prealloc_queue_reqs",
    P + "num_decode_transfer_queue_reqs",
)


# Waiting and running requests, newest name first: SGLang 0.3 spelled them ``num_requests_waiting`` /
# ``num_requests_running`` (label ``name`` = the model); 0.4 renamed them (label ``model_name``).
# Chosen per series (never both added). 0.3's ``queue_req`` gauge is the same queue again: not read.
WAITING = (P + "num_queue_reqs", P + "num_requests_waiting")
RUNNING = (P + "num_running_reqs", P + "num_requests_running")


def detect(idx: MetricIndex) -> bool:
    return any(n in idx for n in (*WAITING, *RUNNING))


XFER = P + "kv_transfer_latency_ms"


def _transfer(idx: MetricIndex) -> tuple[float | None, float | None, float | None]:
    """(seconds total, transfers total, latest latency in s) of the KV transfers this server reports."""
    count = counter_sum(idx, XFER + "_count")
    total_ms = counter_sum(idx, XFER + "_sum")
    if count is not None and total_ms is not None:
        return total_ms / 1000.0, count, None
    latest = gauge_max(idx, XFER if XFER in idx else None)
    return None, None, (latest / 1000.0 if latest else None)  # 0: no transfer yet (unknown, not instant)


def parse(idx: MetricIndex) -> ReplicaSignal:
    waiting = required(gauge_sum(idx, WAITING), "waiting", WAITING)
    for name in PD_QUEUES:
        waiting += gauge_sum(idx, name) or 0.0
    running = required(gauge_sum(idx, RUNNING), "running", RUNNING)
    kv = gauge_max(idx, P + "token_usage")
    if kv is None:
        kv = ratio(gauge_sum(idx, P + "num_used_tokens"), gauge_sum(idx, P + "max_total_num_tokens"))
    xfer_s, xfers, latest = _transfer(idx)
    return ReplicaSignal(
        engine="sglang",
        waiting=waiting,
        running=running,
        kv_usage=fraction(P + "token_usage", kv),
        ttft=idx.histogram(P + "time_to_first_token_seconds"),
        prompt_tokens_total=counter_sum(idx, P + "prompt_tokens_total", P + "prompt_tokens"),
        generation_tokens_total=counter_sum(idx, P + "generation_tokens_total", P + "generation_tokens"),
        requests_total=counter_sum(idx, P + "num_requests_total", P + "num_requests"),
        preemptions_total=counter_sum(idx, P + "num_retracted_requests_total", P + "num_retracted_requests"),
        max_running=gauge_sum(idx, P + "max_running_requests"),
        # Buckets count tokens (a chunk of k tokens adds k at interval/k), _sum the chunk intervals.
        itl=first_histogram(idx, P + "inter_token_latency_seconds", P + "time_per_output_token_seconds"),
        kv_transfer_seconds_total=xfer_s,
        kv_transfers_total=xfers,
        kv_transfer_latency_s=latest,
    )
