"""vLLM (V1 and V0; current and legacy ``gpu_*`` names). ``engine-metrics.md`` section 1.

Queue and running counts are summed over ``engine`` (data-parallel) series; KV usage is the maximum
of ``kv_cache_usage_perc``, falling back to the legacy ``gpu_cache_usage_perc`` for the series (engines)
that lack the current name (0.9.2-0.10 emit both: never combine them; several engines of different
releases in one payload each read their own). Counters and histograms with former names are chosen
the same way, per series. With a KV-transfer connector (P/D
disaggregation, NIXL) the transfer-time histogram's ``_sum``/``_count`` are read as counters. Inter-token
latency is ``inter_token_latency_seconds``, else the older ``time_per_output_token_seconds``.
"""

from __future__ import annotations

import math

from warmscale.signals.engines._common import counter_sum, first_histogram, fraction, gauge_max, gauge_sum, required
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import MetricIndex, PayloadError

PREFIX = "vllm:"
AWAKE = "awake"  # the ``sleep_state`` of an engine that serves


def detect(idx: MetricIndex) -> bool:
    return f"{PREFIX}num_requests_running" in idx or f"{PREFIX}num_requests_waiting" in idx


def read(idx: MetricIndex, prefix: str = PREFIX, engine: str = "vllm") -> ReplicaSignal:
    """Read vLLM's series named ``prefix + x`` (``ray_vllm_`` when re-exported through Ray)."""
    p = prefix
    waiting_name, running_name = p + "num_requests_waiting", p + "num_requests_running"
    waiting = required(gauge_sum(idx, waiting_name if waiting_name in idx else None), "waiting", (waiting_name,))
    running = required(gauge_sum(idx, running_name if running_name in idx else None), "running", (running_name,))
    # The current KV name, else the legacy one, chosen per engine series (a Ray node can run engines
    # of several vLLM releases side by side).
    kv = fraction(p + "kv_cache_usage_perc", gauge_max(idx, (p + "kv_cache_usage_perc", p + "gpu_cache_usage_perc")))
    ttft = idx.histogram(p + "time_to_first_token_seconds")
    return ReplicaSignal(
        engine=engine,
        waiting=waiting,
        running=running,
        kv_usage=kv,
        ttft=ttft,
        prompt_tokens_total=counter_sum(idx, p + "prompt_tokens_total", p + "prompt_tokens"),
        generation_tokens_total=counter_sum(idx, p + "generation_tokens_total", p + "generation_tokens"),
        requests_total=counter_sum(idx, p + "request_success_total", p + "request_success"),
        preemptions_total=counter_sum(idx, p + "num_preemptions_total", p + "num_preemptions"),
        max_running=None,  # vLLM doesn't expose max_num_seqs (cache_config_info lacks it)
        # P/D with the NIXL KV connector (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py).
        kv_transfer_seconds_total=counter_sum(idx, p + "nixl_xfer_time_seconds_sum"),
        kv_transfers_total=counter_sum(idx, p + "nixl_xfer_time_seconds_count"),
        # ITL: the 0.11+ name, else the one it renamed (0.11 emits both: never merge them).
        itl=first_histogram(idx, p + "inter_token_latency_seconds", p + "time_per_output_token_seconds"),
        # V1's per-request prefill time and prefix-cache hits (in tokens; 0.9.2-0.10 also emit the
        # legacy ``gpu_`` name: read once), for the queue-free capacity floor (scaler/capacity.py).
        prefill_seconds_total=counter_sum(idx, p + "request_prefill_time_seconds_sum"),
        prefills_total=counter_sum(idx, p + "request_prefill_time_seconds_count"),
        prefill_prompt_tokens_total=counter_sum(idx, p + "request_prompt_tokens_sum"),
        prefix_cache_hits_total=counter_sum(idx, p + "prefix_cache_hits_total", p + "prefix_cache_hits",
                                            p + "gpu_prefix_cache_hits_total", p + "gpu_prefix_cache_hits"),
        sleeping=_sleeping(idx, p + "engine_sleep_state"),
    )


def _sleeping(idx: MetricIndex, name: str) -> bool | None:
    """Whether an engine of the replica sleeps: ``engine_sleep_state`` is one-hot per engine over
    ``sleep_state`` = ``awake`` / ``weights_offloaded`` (sleep level 1) / ``discard_all`` (level 2).
    A sleeping engine serves nothing, and the replica is not ready while any engine sleeps. ``None``
    without the family (releases before sleep-state metrics); a NaN/Inf/negative value raises."""
    values = idx.series(name)
    if not values:
        return None
    asleep = False
    for labels, v in values:
        if not math.isfinite(v) or v < 0:
            raise PayloadError(f"{name}{{sleep_state={labels.get('sleep_state')!r}}} = {v}: expected 0 or 1")
        awake_series = labels.get("sleep_state", "") == AWAKE
        if (awake_series and v == 0) or (not awake_series and v > 0):  # vLLM: "awake = 0 means sleeping"
            asleep = True
    return asleep


def parse(idx: MetricIndex) -> ReplicaSignal:
    return read(idx)
