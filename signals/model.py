"""The normalised, engine-independent model of what an inference replica feels.

Every parser in :mod:`signals.engines` turns one ``/metrics`` payload into a :class:`ReplicaSignal`;
every source (direct scrape, Prometheus, Redis gateway queue, pod discovery) produces a
:class:`Snapshot` for one ScaledObject. Nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from warmscale.signals.histogram import Histogram

ENGINES: tuple[str, ...] = ("vllm", "sglang", "tgi", "trtllm", "triton", "ray", "auto")


@dataclass(frozen=True)
class ReplicaSignal:
    """One replica's engine state at ``observed_at`` (unix seconds).

    Gauges are summed across the series of one pod (engines, ranks, models) except KV usage,
    which is the maximum. Counters and the TTFT histogram carry lifetime totals; windows come
    from differences between two observations (see :mod:`scaler.observation`).
    ``None`` means "this engine does not expose it", never zero.
    ``itl`` is the engine's inter-token latency (or time-per-output-token) histogram, in seconds:
    vLLM ``inter_token_latency_seconds`` (older ``time_per_output_token_seconds``), SGLang
    ``inter_token_latency_seconds``, trtllm-serve ``time_per_output_token_seconds``, TGI's per-request
    ``tgi_request_mean_time_per_token_duration``; Triton's TensorRT-LLM backend has none (docs/policy.md).
    """

    engine: str
    waiting: float
    running: float
    kv_usage: float | None = None
    ttft: Histogram | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    requests_total: float | None = None
    preemptions_total: float | None = None
    max_running: float | None = None
    gpu_utilization: float | None = None
    # KV-cache transfers between prefill and decode instances (vLLM NIXL connector: the ``_sum`` and
    # ``_count`` of ``vllm:nixl_xfer_time_seconds``); the mean transfer time is their windowed ratio.
    kv_transfer_seconds_total: float | None = None
    kv_transfers_total: float | None = None
    itl: Histogram | None = None
    # The engine's latest mean KV-transfer latency in seconds, where it exports a gauge instead of
    # counters (SGLang PD: ``sglang:kv_transfer_latency_ms``, on the sending prefill server).
    kv_transfer_latency_s: float | None = None
    # Queue-free prefill-rate signal (vLLM V1, scaler/capacity.py): the ``_sum``/``_count`` of
    # ``vllm:request_prefill_time_seconds`` (seconds each request spent from first scheduled to first
    # token), the ``_sum`` of ``vllm:request_prompt_tokens`` (both recorded when a request finishes:
    # the same requests), and the prompt tokens served from the prefix cache
    # (``vllm:prefix_cache_hits_total``, counted when scheduled), which the engine did not compute.
    prefill_seconds_total: float | None = None
    prefills_total: float | None = None
    prefill_prompt_tokens_total: float | None = None
    prefix_cache_hits_total: float | None = None
    # The engine sleeps (vLLM sleep mode, ``vllm:engine_sleep_state``: weights offloaded or discarded):
    # it serves nothing until woken. ``None``: the engine does not say (it is awake as far as we know).
    sleeping: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in _SCALAR_FIELDS}
        d["ttft"] = self.ttft.to_dict() if self.ttft is not None else None
        d["itl"] = self.itl.to_dict() if self.itl is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplicaSignal:
        kwargs: dict[str, Any] = {k: d.get(k) for k in _SCALAR_FIELDS}
        ttft, itl = d.get("ttft"), d.get("itl")
        return cls(ttft=Histogram.from_dict(ttft) if ttft else None,
                   itl=Histogram.from_dict(itl) if itl else None, **kwargs)


_SCALAR_FIELDS = (
    "engine",
    "waiting",
    "running",
    "kv_usage",
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_total",
    "preemptions_total",
    "max_running",
    "gpu_utilization",
    "kv_transfer_seconds_total",
    "kv_transfers_total",
    "kv_transfer_latency_s",
    "prefill_seconds_total",
    "prefills_total",
    "prefill_prompt_tokens_total",
    "prefix_cache_hits_total",
    "sleeping",
)


@dataclass(frozen=True)
class ReplicaReading:
    """A replica's signal, or why it is unknown. ``signal is None`` means unknown, never idle."""

    replica: str
    observed_at: float
    signal: ReplicaSignal | None = None
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.signal is not None

    def age(self, now: float) -> float:
        return max(0.0, now - self.observed_at)

    def stale(self, now: float, max_age: float) -> ReplicaReading:
        """This reading, marked unknown if it is older than ``max_age`` seconds."""
        if self.signal is not None and self.age(now) > max_age:
            return replace(self, signal=None, error=f"stale: {self.age(now):.1f}s old > {max_age:.1f}s")
        return self


@dataclass(frozen=True)
class QueueReading:
    """Length of a gateway queue (Redis list or stream); ``length is None`` means unknown."""

    name: str
    observed_at: float
    length: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class GatewaySignal:
    """What an endpoint picker (llm-d router / Gateway API Inference Extension EPP) reports for one
    InferencePool. ``None`` means "this picker does not expose it", never zero.

    ``queue``: requests held in the picker's flow control (demand no engine sees yet).
    ``saturation``: pool saturation by stage (``prefill``, ``decode``, ``effective``); 1.0 is the
    picker's gating set point, above it the pool is oversubscribed; an empty pool reads 1.0.
    ``stale_endpoints``: endpoints whose metrics the picker has not refreshed (it scores them saturated).
    ``running``: requests in flight through the picker; ``None`` when it does not say (unknown, never 0).
    ``engine_waiting``: requests waiting inside the pool's engines (the picker's mean engine queue x its
    ready endpoints), for a ScaledObject that reads no engine directly.
    """

    flavor: str
    queue: float
    saturation: dict[str, float] = field(default_factory=dict)
    running: float | None = None
    ready_endpoints: float | None = None
    stale_endpoints: float | None = None
    engine_waiting: float | None = None

    def stage_saturation(self, stage: str) -> float | None:
        """Saturation of ``stage`` (``prefill``/``decode``), else of the whole pool (``effective``)."""
        if stage in self.saturation:
            return self.saturation[stage]
        return self.saturation.get("effective")


@dataclass(frozen=True)
class GatewayReading:
    """One endpoint picker's signal for an InferencePool, or why it is unknown (never idle)."""

    name: str
    observed_at: float
    signal: GatewaySignal | None = None
    error: str | None = None


@dataclass(frozen=True)
class GpuReading:
    """One GPU as NVIDIA dcgm-exporter reports it (:mod:`signals.engines.dcgm`).

    ``gpu`` is its index on the node, ``uuid`` its UUID; ``namespace``/``pod``/``container`` are
    DCGM's pod attribution (present only while the GPU is allocated to a pod). ``utilization`` is
    the busy share 0..1 (``None`` when the exporter has no utilisation field for it);
    ``fb_used_mib``/``fb_free_mib`` the framebuffer memory."""

    gpu: str
    uuid: str | None
    hostname: str | None
    namespace: str | None
    pod: str | None
    utilization: float | None
    container: str | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None

    @property
    def memory_used(self) -> float | None:
        """Framebuffer share in use 0..1 (``None`` unless both used and free are known)."""
        if self.fb_used_mib is None or self.fb_free_mib is None or self.fb_used_mib + self.fb_free_mib <= 0:
            return None
        return self.fb_used_mib / (self.fb_used_mib + self.fb_free_mib)


@dataclass(frozen=True)
class Snapshot:
    """Everything the sources saw for one ScaledObject at ``taken_at``.

    ``ready_replicas``/``starting_replicas`` come from the API server when the scaler can see the
    target's pods (``None`` otherwise; the policy then estimates them from its own history).
    ``current_replicas`` is the scale target's spec.replicas (what the HPA sees as current), and
    ``target_name`` the target's name when the scaler resolved it (the warm status is kept under it).
    ``time_to_ready_s`` is the measured look-ahead published by the warm-pool controller (its bounds
    and ladder, and the pdGroup's inputs, are the scaler's: ``scaler.context.ScalerContext``).
    ``ttft_window`` is a TTFT distribution a source already windowed (Prometheus ``increase``);
    without it the scaler differences each replica's cumulative histogram between scrapes.
    ``absent`` names the replica sources that saw no replica at all this time (no endpoint or pod
    to scrape, an empty Prometheus result, a failed discovery): absent data is unknown, never idle,
    unless the workload was scaled to zero (then there is nothing to see).
    ``gateways`` are endpoint-picker readings (flow-control queue, saturation, stale endpoints).
    ``read_until`` is when the last source answered (``None``: at ``taken_at``); the data may be that
    much younger than ``taken_at``, so idle evidence starts no earlier than it.
    ``gpus`` are dcgm-exporter readings: every GPU the exporters report as the collector gathers them,
    narrowed by the scaler to the GPUs DCGM attributes to the ScaledObject's pods (``None``: no DCGM
    source, or nothing to attribute them by: unknown, which never changes a decision).
    ``pods`` names the ScaledObject's ready and starting pods where the API shows them.
    """

    taken_at: float
    replicas: tuple[ReplicaReading, ...] = ()
    queues: tuple[QueueReading, ...] = ()
    ready_replicas: int | None = None
    starting_replicas: int | None = None
    time_to_ready_s: float | None = None
    warm_capacity: int | None = None
    current_replicas: int | None = None
    ttft_window: Histogram | None = None
    itl_window: Histogram | None = None  # a pre-windowed inter-token latency distribution (as ttft_window)
    gpu_product: str | None = None  # GPU product of the target's nodes (GFD label), when discovered
    target_name: str | None = None
    gateways: tuple[GatewayReading, ...] = ()
    source_errors: tuple[str, ...] = field(default_factory=tuple)
    absent: tuple[str, ...] = ()
    read_until: float | None = None
    gpus: tuple[GpuReading, ...] | None = None
    pods: tuple[str, ...] | None = None
    # The hot tier (scaler.hot_status), from the waker's status in the store: sleepers asleep and
    # available (None: no hot tier, or its status unknown), sleepers awake and routed, and the measured
    # wake time on this GPU product.
    hot_asleep: int | None = None
    hot_awake: int = 0
    hot_wake_s: float | None = None
    hot_load: float | None = None  # requests in the awake sleepers (None: unknown)
    hot_waking: int = 0  # wakes in progress (not capacity yet, but no longer asleep)
    # The awake sleepers' own readings: the scaler scrapes the hot status's ``awake_urls`` as it does
    # its replicas (scaler/tracker.py). Only their first tokens are used (they join the TTFT window);
    # their load is ``hot_load``, their count ``hot_awake``.
    hot_replicas: tuple[ReplicaReading, ...] = ()

    @property
    def known(self) -> tuple[ReplicaReading, ...]:
        return tuple(r for r in self.replicas if r.signal is not None)

    @property
    def unknown(self) -> tuple[ReplicaReading, ...]:
        return tuple(r for r in self.replicas if r.signal is None)


def finite_or_none(value: float | None, *, lo: float | None = None, hi: float | None = None) -> float | None:
    """``value`` if it is a finite number within [lo, hi], else ``None``."""
    if value is None or not math.isfinite(value):
        return None
    if lo is not None and value < lo:
        return None
    if hi is not None and value > hi:
        return None
    return value
