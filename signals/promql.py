"""PromQL built per engine, and the decoding of its results (pure, no I/O).

Two queries per poll, whatever the number of replicas:

* :func:`replica_query`: every per-replica signal in one instant query. Each signal is an aggregate
  ``by (pod, instance)`` (``sum`` for counts and counters, ``max`` for KV usage, as in
  ``engine-metrics.md`` section 7), tagged with ``warmscale_signal``/``warmscale_engine`` labels by
  ``label_replace`` and unioned with ``or``. Renamed metrics are alternatives joined with ``or`` (first
  present per replica, so a pod exposing both vLLM KV names is read once). A ``timestamp`` signal
  carries the newest sample time so that a replica Prometheus lost track of goes stale.
* :func:`ttft_window_query`: ``sum by (le)(increase(<ttft>_bucket[w]))`` over the ScaledObject's
  pods plus ``sum(increase(<ttft>_sum[w]))``, decoded by :func:`decode_ttft_window`; the same for the
  inter-token latency (:func:`itl_window_query`) when the ScaledObject sets ``itlSloSeconds``.

The replica is the ``pod`` label, else ``instance``. ``selector`` is extra label matchers
(``namespace="llm",service="vllm"``) added to every selector.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warmscale.signals.engines import tgi
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import ReplicaReading, ReplicaSignal

SIGNAL_LABEL = "warmscale_signal"
ENGINE_LABEL = "warmscale_engine"
PART_LABEL = "warmscale_part"
REPLICA_LABELS = ("pod", "instance")


@dataclass(frozen=True)
class Term:
    """Series whose values are aggregated together: metric names (summed/maxed as one selector) and
    extra matchers such as ``request_type="waiting"``."""

    names: tuple[str, ...]
    matchers: str = ""


@dataclass(frozen=True)
class Ratio:
    used: Term
    capacity: Term


Alt = Term | Ratio  # one alternative of a signal


@dataclass(frozen=True)
class EngineSpec:
    engine: str
    waiting: tuple[Alt, ...]
    running: tuple[Alt, ...]
    kv: tuple[Alt, ...] = ()
    requests: tuple[Alt, ...] = ()
    prompt_tokens: tuple[Alt, ...] = ()
    generation_tokens: tuple[Alt, ...] = ()
    preemptions: tuple[Alt, ...] = ()
    max_running: tuple[Alt, ...] = ()
    asleep: tuple[Alt, ...] = ()  # > 0: an engine of the replica sleeps (vLLM sleep mode)
    ttft: str | None = None  # histogram base name
    ttft_scale: float = 1.0  # bucket bounds -> seconds
    itl: tuple[str, ...] = ()  # inter-token latency histogram base names, renamed ones as alternatives


def _t(*names: str, m: str = "") -> Term:
    return Term(names, m)


SPECS: dict[str, EngineSpec] = {
    "vllm": EngineSpec(
        "vllm",
        waiting=(_t("vllm:num_requests_waiting"),),
        running=(_t("vllm:num_requests_running"),),
        # One max over both KV names (0.9.2-0.10 export both, equal): an engine exporting only the old
        # one is read too, where alternatives joined with ``or`` would drop it beside a newer engine.
        kv=(_t("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),),
        requests=(_t("vllm:request_success_total"),),
        prompt_tokens=(_t("vllm:prompt_tokens_total"),),
        generation_tokens=(_t("vllm:generation_tokens_total"),),
        preemptions=(_t("vllm:num_preemptions_total"),),
        # One-hot over sleep_state: a sleeping engine has weights_offloaded or discard_all at 1.
        asleep=(_t("vllm:engine_sleep_state", m='sleep_state!="awake"'),),
        ttft="vllm:time_to_first_token_seconds",
        itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ),
    "sglang": EngineSpec(
        "sglang",
        waiting=(
            _t(
                "sglang:num_queue_reqs",
                "sglang:num_prefill_prealloc_queue_reqs",
                "sglang:num_prefill_inflight_queue_reqs",
                "sglang:num_decode_prealloc_queue_reqs",
                "sglang:num_decode_transfer_queue_reqs",
            ),
            _t("sglang:num_requests_waiting"),  # SGLang 0.3
        ),
        running=(_t("sglang:num_running_reqs"), _t("sglang:num_requests_running")),
        kv=(
            _t("sglang:token_usage"),
            Ratio(_t("sglang:num_used_tokens"), _t("sglang:max_total_num_tokens")),
        ),
        requests=(_t("sglang:num_requests_total"),),
        prompt_tokens=(_t("sglang:prompt_tokens_total"),),
        generation_tokens=(_t("sglang:generation_tokens_total"),),
        preemptions=(_t("sglang:num_retracted_requests_total"),),
        max_running=(_t("sglang:max_running_requests"),),
        ttft="sglang:time_to_first_token_seconds",
        itl=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    ),
    "tgi": EngineSpec(
        "tgi",
        waiting=(_t("tgi_queue_size"),),
        running=(_t("tgi_batch_current_size"),),
        kv=(Ratio(_t("tgi_batch_current_max_tokens"), _t("tgi_batch_max_total_tokens")),),
        # Successes and the failures after the batch took the request (not validation/overloaded...);
        # the success series carry no ``err`` label (it matches "").
        requests=(_t("tgi_request_success", "tgi_request_failure",
                     m=f'err=~"|{"|".join(tgi.SERVED_FAILURES)}"'),),
        prompt_tokens=(_t("tgi_request_input_length_sum"),),
        generation_tokens=(_t("tgi_request_generated_tokens_sum"),),
        itl=("tgi_request_mean_time_per_token_duration",),
    ),
    "trtllm": EngineSpec(
        "trtllm",
        waiting=(_t("trtllm_num_requests_waiting"),),
        running=(_t("trtllm_num_requests_running"),),
        kv=(
            _t("trtllm_kv_cache_utilization"),
            Ratio(_t("trtllm_kv_cache_used_blocks"), _t("trtllm_kv_cache_max_blocks")),
        ),
        requests=(_t("trtllm_request_success_total"),),
        prompt_tokens=(_t("trtllm_prompt_tokens_total"),),
        generation_tokens=(_t("trtllm_generation_tokens_total"),),
        max_running=(_t("trtllm_max_num_active_requests"),),
        ttft="trtllm_time_to_first_token_seconds",
        itl=("trtllm_time_per_output_token_seconds",),
    ),
    "triton": EngineSpec(
        "triton",
        waiting=(
            _t("nv_trt_llm_request_metrics", m='request_type="waiting"'),
        ),
        running=(_t("nv_trt_llm_request_metrics", m='request_type="scheduled"'),),
        kv=(
            _t("nv_trt_llm_kv_cache_block_metrics", m='kv_cache_block_type="fraction"'),
            Ratio(
                _t("nv_trt_llm_kv_cache_block_metrics", m='kv_cache_block_type="used"'),
                _t("nv_trt_llm_kv_cache_block_metrics", m='kv_cache_block_type="max"'),
            ),
        ),
        requests=(_t("nv_llm_output_token_len_count"),),
        prompt_tokens=(_t("nv_llm_input_token_len_sum"),),
        generation_tokens=(_t("nv_llm_output_token_len_sum"),),
        max_running=(_t("nv_trt_llm_request_metrics", m='request_type="max"'),),
        ttft="nv_inference_first_response_histogram_ms",
        ttft_scale=1e-3,
    ),
    "ray": EngineSpec(
        "ray",
        waiting=(
            _t("ray_serve_deployment_queued_queries", "ray_vllm_num_requests_waiting", "ray_vllm:num_requests_waiting"),
        ),
        running=(
            _t("ray_vllm_num_requests_running", "ray_vllm:num_requests_running"),
            _t("ray_serve_num_ongoing_requests_at_replicas"),
        ),
        kv=(_t("ray_vllm_kv_cache_usage_perc", "ray_vllm:kv_cache_usage_perc", "ray_vllm_gpu_cache_usage_perc",
               "ray_vllm:gpu_cache_usage_perc"),),
        requests=(_t("ray_serve_deployment_request_counter_total"),),
        prompt_tokens=(_t("ray_vllm_prompt_tokens_total"),),
        generation_tokens=(_t("ray_vllm_generation_tokens_total"),),
        preemptions=(_t("ray_vllm_num_preemptions_total"),),
        asleep=(_t("ray_vllm_engine_sleep_state", m='sleep_state!="awake"'),),
        ttft="ray_vllm_time_to_first_token_seconds",
        itl=("ray_vllm_inter_token_latency_seconds", "ray_vllm_time_per_output_token_seconds"),
    ),
}

# signal name -> (aggregation, EngineSpec attribute)
SIGNALS: tuple[tuple[str, str], ...] = (
    ("waiting", "sum"),
    ("running", "sum"),
    ("kv", "max"),
    ("requests", "sum"),
    ("prompt_tokens", "sum"),
    ("generation_tokens", "sum"),
    ("preemptions", "sum"),
    ("max_running", "sum"),
    ("asleep", "max"),
)
_MAX_SIGNALS = frozenset({"kv", "timestamp", "asleep"})


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def selector(term: Term, extra: str = "") -> str:
    """The instant-vector selector of ``term`` with the user's ``extra`` matchers."""
    matchers = [m for m in (term.matchers.strip(), extra.strip().strip(",")) if m]
    if len(term.names) == 1:
        name = term.names[0]
    else:
        name = ""
        alternation = "|".join(_regex_escape(n) for n in term.names)
        matchers.insert(0, f"__name__=~{_quote(alternation)}")
    body = ",".join(matchers)
    return f"{name}{{{body}}}" if body else name


def _regex_escape(name: str) -> str:
    out = []
    for ch in name:
        out.append("\\" + ch if ch in r".^$*+?()[]{}|\\" else ch)
    return "".join(out)


def _by() -> str:
    return ", ".join(REPLICA_LABELS)


def _alt_expr(alt: Alt, agg: str, extra: str) -> str:
    if isinstance(alt, Ratio):
        used = f"max by ({_by()}) ({selector(alt.used, extra)})"
        cap = f"max by ({_by()}) ({selector(alt.capacity, extra)})"
        return f"({used} / {cap})"
    return f"{agg} by ({_by()}) ({selector(alt, extra)})"


def _tag(expr: str, signal: str, engine: str) -> str:
    tagged = f'label_replace({expr}, "{SIGNAL_LABEL}", "{signal}", "", "")'
    return f'label_replace({tagged}, "{ENGINE_LABEL}", "{engine}", "", "")'


def _engines(engine: str) -> tuple[EngineSpec, ...]:
    if engine == "auto":
        return tuple(SPECS.values())
    key = "trtllm" if engine == "trtllm-serve" else engine
    if key not in SPECS:
        raise ValueError(f"unknown engine {engine!r}")
    return (SPECS[key],)


def replica_query(engine: str, extra: str = "") -> str:
    """One PromQL expression returning every per-replica signal of ``engine`` (``auto``: all engines)."""
    parts: list[str] = []
    for spec in _engines(engine):
        for signal, agg in SIGNALS:
            alts: tuple[Alt, ...] = getattr(spec, signal)
            if not alts:
                continue
            expr = " or ".join(_alt_expr(a, agg, extra) for a in alts)
            parts.append(_tag(f"({expr})", signal, spec.engine))
        # timestamp() drops the metric name, so apply it to one name at a time (no label-set clashes).
        first = spec.running[0]
        assert isinstance(first, Term)
        stamps = " or ".join(
            f"max by ({_by()}) (timestamp({selector(Term((n,), first.matchers), extra)}))" for n in first.names
        )
        parts.append(_tag(f"({stamps})", "timestamp", spec.engine))
    return "\n or ".join(parts)


def ttft_window_query(engine: str, window_seconds: float, extra: str = "") -> str | None:
    """Windowed TTFT buckets and sum over all matching pods, or ``None`` if the engine has no TTFT.
    ``auto`` covers the engines whose TTFT is in seconds (all but Triton's opt-in ms histogram)."""
    specs = [s for s in _engines(engine) if s.ttft is not None and (engine != "auto" or s.ttft_scale == 1.0)]
    if not specs:
        return None
    w = f"{max(1, round(window_seconds))}s"
    buckets = _t(*(f"{s.ttft}_bucket" for s in specs if s.ttft))
    sums = _t(*(f"{s.ttft}_sum" for s in specs if s.ttft))
    b = f'label_replace(sum by (le) (increase({selector(buckets, extra)}[{w}])), "{PART_LABEL}", "bucket", "", "")'
    s = f'label_replace(sum(increase({selector(sums, extra)}[{w}])), "{PART_LABEL}", "sum", "", "")'
    return f"{b} or {s}"


def itl_window_query(engine: str, window_seconds: float, extra: str = "") -> str | None:
    """Windowed inter-token latency buckets and sum over all matching pods, or ``None`` if the engine
    has no ITL histogram (Triton). Renamed histograms are alternatives joined with ``or`` (first present
    per bucket bound: vLLM 0.11 emits both names, never added). Decoded by :func:`decode_ttft_window`."""
    names = [n for s in _engines(engine) for n in s.itl]
    if not names:
        return None
    w = f"{max(1, round(window_seconds))}s"
    buckets = " or ".join(f"sum by (le) (increase({selector(_t(n + '_bucket'), extra)}[{w}]))" for n in names)
    sums = " or ".join(f"sum(increase({selector(_t(n + '_sum'), extra)}[{w}]))" for n in names)
    b = f'label_replace(({buckets}), "{PART_LABEL}", "bucket", "", "")'
    s = f'label_replace(({sums}), "{PART_LABEL}", "sum", "", "")'
    return f"{b} or {s}"


def ttft_scale(engine: str) -> float:
    return SPECS["triton"].ttft_scale if engine == "triton" else 1.0


def _value(item: Mapping[str, Any]) -> float | None:
    try:
        v = float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v


def decode_ttft_window(result: Iterable[Mapping[str, Any]], scale: float = 1.0) -> Histogram | None:
    """The windowed histogram from :func:`ttft_window_query`'s result; ``None`` without data."""
    buckets: list[tuple[float, float]] = []
    total_sum = 0.0
    for item in result:
        labels = item.get("metric", {})
        v = _value(item)
        if v is None or not math.isfinite(v):
            return None
        part = labels.get(PART_LABEL)
        if part == "sum":
            total_sum = v * scale
        elif part == "bucket" and "le" in labels:
            try:
                le = float(labels["le"])
            except ValueError:
                return None
            buckets.append((le * scale if math.isfinite(le) else le, max(0.0, v)))
    if not buckets:
        return None
    # increase() extrapolates each series separately; restore monotonic cumulative counts.
    buckets.sort()
    running = 0.0
    mono = []
    for le, c in buckets:
        running = max(running, c)
        mono.append((le, running))
    h = Histogram.from_buckets(mono, total_sum)
    return h if h.is_valid() else None


def replica_key(labels: Mapping[str, str]) -> str | None:
    for k in REPLICA_LABELS:
        v = labels.get(k)
        if v:
            return v
    return None


def decode_replicas(result: Iterable[Mapping[str, Any]], now: float) -> tuple[ReplicaReading, ...]:
    """Per-replica readings from :func:`replica_query`'s result, sorted by replica. A replica without
    valid waiting/running values is *unknown* with the reason, never zero. With ``engine: auto`` a pod
    exposing several engines' families is read as the first engine (in :data:`SPECS` order) that has
    both waiting and running for it; engines are never added together."""
    values: dict[str, dict[str, dict[str, float]]] = {}
    bad: dict[tuple[str, str], str] = {}
    for item in result:
        labels: Mapping[str, str] = item.get("metric", {})
        key = replica_key(labels)
        signal = labels.get(SIGNAL_LABEL)
        engine = labels.get(ENGINE_LABEL, "auto")
        v = _value(item)
        if key is None or signal is None:
            continue
        per = values.setdefault(key, {}).setdefault(engine, {})
        if v is None or not math.isfinite(v) or v < 0:
            if signal in ("waiting", "running", "kv"):
                bad.setdefault((key, engine), f"{signal} = {v} in Prometheus (expected finite, non-negative)")
            continue
        if signal in per:
            per[signal] = max(per[signal], v) if signal in _MAX_SIGNALS else per[signal] + v
        else:
            per[signal] = v
    order = {name: i for i, name in enumerate(SPECS)}
    out: list[ReplicaReading] = []
    for key in sorted(values):
        by_engine = values[key]
        ranked = sorted(by_engine, key=lambda e: (not {"waiting", "running"} <= set(by_engine[e]), order.get(e, 99)))
        engine = ranked[0]
        per = by_engine[engine]
        observed = min(per.get("timestamp", now), now)
        if (key, engine) in bad:
            out.append(ReplicaReading(key, observed, None, bad[(key, engine)]))
            continue
        if "waiting" not in per or "running" not in per:
            missing = [s for s in ("waiting", "running") if s not in per]
            out.append(ReplicaReading(key, observed, None, f"Prometheus has no {'/'.join(missing)} series"))
            continue
        kv = per.get("kv")
        if kv is not None and kv > 1.0 + 1e-6:
            out.append(ReplicaReading(key, observed, None, f"kv = {kv} in Prometheus (expected 0..1)"))
            continue
        sig = ReplicaSignal(
            engine=engine,
            waiting=per["waiting"],
            running=per["running"],
            kv_usage=None if kv is None else min(1.0, kv),
            prompt_tokens_total=per.get("prompt_tokens"),
            generation_tokens_total=per.get("generation_tokens"),
            requests_total=per.get("requests"),
            preemptions_total=per.get("preemptions"),
            max_running=per.get("max_running"),
            sleeping=per["asleep"] > 0 if "asleep" in per else None,
        )
        out.append(ReplicaReading(key, observed, sig))
    return tuple(out)


def replica_names(readings: Sequence[ReplicaReading]) -> tuple[str, ...]:
    return tuple(r.replica for r in readings)
