"""Hugging Face TGI (v2.3.1+/v3 router). ``engine-metrics.md`` section 3.

Counters carry no ``_total``. There is no KV gauge: the running batch's reserved tokens over the
token budget found at warm-up is the KV proxy. There is no TTFT histogram (``ttft`` is ``None``). The
ITL is the per-request mean time per token (``tgi_request_mean_time_per_token_duration``, one
observation per request, the request's prefill included: an upper bound on its inter-token latency).
Finished requests are the successes plus the failures that happened after the batch took the request
(:data:`SERVED_FAILURES`); rejected ones (validation, overloaded...) are not completions.
"""

from __future__ import annotations

from warmscale.signals.engines._common import counter_sum, fraction, gauge_sum, ratio, required
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import MetricIndex, label_is

# ``tgi_request_failure{err=...}`` (router/src/infer/mod.rs ``InferError::error_type``): only these
# failed *after* the batch took the request (they used engine time, as a completion does). The others
# (``validation``, ``overloaded``, ``template_error``, ``tool_error``, ``missing_template_variable``...)
# were refused before any engine work: counting them as completions would inflate the completion
# rate under overload (and shrink the queue rule's scale-up). An unknown ``err`` is not counted.
SERVED_FAILURES = ("generation", "incomplete_generation")
_served = label_is("err", *SERVED_FAILURES)


def detect(idx: MetricIndex) -> bool:
    return "tgi_queue_size" in idx or "tgi_batch_current_size" in idx


def parse(idx: MetricIndex) -> ReplicaSignal:
    waiting = required(gauge_sum(idx, "tgi_queue_size"), "waiting", ("tgi_queue_size",))
    running = required(gauge_sum(idx, "tgi_batch_current_size"), "running", ("tgi_batch_current_size",))
    kv = ratio(gauge_sum(idx, "tgi_batch_current_max_tokens"), gauge_sum(idx, "tgi_batch_max_total_tokens"))
    success = counter_sum(idx, "tgi_request_success", "tgi_request_success_total")
    failure = counter_sum(idx, "tgi_request_failure", "tgi_request_failure_total", where=_served)
    finished = None if success is None else success + (failure or 0.0)
    return ReplicaSignal(
        engine="tgi",
        waiting=waiting,
        running=running,
        kv_usage=fraction("tgi_batch_current_max_tokens/tgi_batch_max_total_tokens", kv),
        ttft=None,
        prompt_tokens_total=counter_sum(idx, "tgi_request_input_length_sum"),
        generation_tokens_total=counter_sum(idx, "tgi_request_generated_tokens_sum"),
        requests_total=finished,
        preemptions_total=None,
        max_running=None,
        itl=idx.histogram("tgi_request_mean_time_per_token_duration"),
    )
