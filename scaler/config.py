"""ScaledObject trigger metadata -> a validated :class:`ScalerConfig` (pure, no I/O).

Every key, its default and meaning is documented in ``docs/metadata.md``; the table below is the
single source of truth for both (``python -m warmscale.scaler.config`` prints it as Markdown).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlparse

from warmscale.scaler.capacity import MODEL_PROFILES
from warmscale.signals.model import ENGINES
from warmscale.signals.redact import redact
from warmscale.signals.selector import parse_selector


class ConfigError(ValueError):
    """Invalid trigger metadata; ``key`` names the offending metadata key."""

    def __init__(self, key: str, message: str) -> None:
        key, message = redact(key[:200]), redact(message)  # the message travels to KEDA's logs
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


# Numbers of the policy that are not metadata keys (issue 22: at most 14 policy keys). Each was a key
# until this release; the key is still accepted, with a warning naming the constant (DEPRECATED_KEYS).
# The values are the former defaults, so a ScaledObject that did not set the key decides as before.
#
# Mean KV-cache usage the KV residency need sizes for (no targetInflightPerReplica): room to admit long
# prompts and their decode growth. Chosen on mooncake_fast25_conversation (8b-h100, 70b-h100-tp4):
# 0.56-0.8 let bursts of 30k-85k-token prompts queue (docs/benchmarks.md).
KV_RESIDENCY_TARGET = 0.5
# KV-cache usage at which the KV need also engages with a targetInflightPerReplica override, and the
# usage it then sizes for: vLLM preempts near full blocks (gpu_memory_utilization 0.9 leaves ~10%
# for fragmentation), so 0.9 is "nearly full" and 0.8 one block-size step below it.
KV_HIGH = 0.9
KV_HOT_TARGET = 0.8
# Waiting requests per ready replica that are ordinary queueing (a continuous-batching engine admits
# a waiting request within a step or two), before a backlog asks for more replicas.
TOLERATED_WAITING_PER_REPLICA = 4.0
# Largest multiplicative step of one decision's proportional needs (KV, TTFT, look-ahead, backlog):
# the HPA's own default scale-up policy (100% per 15 s) doubles at most too.
SCALE_UP_MAX_STEP = 2.0
# Endpoint-picker pool saturation (1.0 = its gating set point) to size for: the picker starts to queue
# at 1.0; 0.8 is the same headroom targetUtilization leaves on learned capacity.
EPP_SATURATION_TARGET = 0.8
# Mean GPU utilisation (DCGM) at or above which a scale-down is held: busy by any reading of
# DCGM_FI_PROF_GR_ENGINE_ACTIVE (a decoding engine reads 0.6-0.95).
DCGM_BUSY_UTILIZATION = 0.9


@dataclass(frozen=True)
class ScalerConfig:
    engine: str = "auto"
    endpoints: tuple[str, ...] = ()
    prometheus_address: str | None = None
    prometheus_selector: str = ""
    series_selector: str = ""
    redis_address: str | None = None
    redis_queue: str | None = None
    redis_queue_type: str = "auto"
    pod_selector: str | None = None
    metrics_port: int | None = None
    metrics_path: str = "/metrics"
    min_replicas: int = 1
    max_replicas: int = 10
    scale_to_zero: bool = False
    target_inflight_per_replica: float | None = None
    target_utilization: float = 0.8
    kv_bound_target: float = KV_RESIDENCY_TARGET
    burst_window_seconds: float = 10.0
    burst_confirm_seconds: float = 30.0
    model_profile: str | None = None
    prefill_tps_prior: float | None = None
    gpu_product: str | None = None
    target_waiting_per_replica: float = TOLERATED_WAITING_PER_REPLICA
    kv_cache_target: float = KV_HOT_TARGET
    kv_cache_high: float = KV_HIGH
    ttft_slo_seconds: float | None = None
    ttft_quantile: float = 0.95
    ttft_window_seconds: float = 60.0
    itl_slo_seconds: float | None = None
    time_to_ready_seconds: float = 120.0
    trend_window_seconds: float = 60.0
    scale_down_stabilization_seconds: float = 300.0
    # 0: a released replica's GPU node stays and costs nothing more (a fixed node pool, the common
    # case); where a cluster autoscaler provisions nodes on demand, its scale-down-unneeded-time.
    node_idle_seconds: float = 0.0
    scale_up_max_step: float = SCALE_UP_MAX_STEP
    idle_window_seconds: float = 60.0
    hold_through_idle: bool = False
    staleness_seconds: float = 30.0
    scrape_interval_seconds: float = 1.0
    scrape_timeout_seconds: float = 2.0
    max_payload_bytes: int = 4 * 1024 * 1024
    hpa_tolerance: float = 0.1
    metric_name: str = "warmscale-desired-replicas"
    epp_address: str | None = None
    epp_pool: str | None = None
    epp_saturation_target: float = EPP_SATURATION_TARGET
    role: str = "both"
    pd_group: str | None = None
    decode_per_prefill_min: float | None = None
    decode_per_prefill_max: float | None = None
    dcgm_endpoints: tuple[str, ...] = ()
    dcgm_busy_utilization: float = DCGM_BUSY_UTILIZATION
    metric_unit: str = "replicas"

    @property
    def read_budget_seconds(self) -> float:
        """How long one decision waits for its sources: the scrape timeout, but at most 0.8 of the
        interval, so that a late replica is unknown for that decision and the decision is on time.
        A late fetch goes on (bounded by the scrape timeout) and serves the next decision."""
        return max(0.05, min(self.scrape_timeout_seconds, 0.8 * self.scrape_interval_seconds))

    @property
    def floor(self) -> int:
        """The smallest replica count the policy may ask for."""
        return 0 if self.scale_to_zero else max(1, self.min_replicas)


def parse_bool(raw: str) -> bool:
    """true/false (also 1/0, yes/no), case-insensitive; anything else is a ValueError."""
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


# ASCII digits only: int()/float() would also take superscripts, other scripts' digits and "1_0".
_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PORT_RE = re.compile(r"[0-9]{1,5}")
# Longest numeric literal accepted (a 10,000-digit integer is not a replica count).
_MAX_NUMBER_CHARS = 64


def _strip(raw: str) -> str:
    return raw.strip(" \t\r\n")


def _parse_int(raw: str) -> int:
    r = _strip(raw)
    if len(r) > _MAX_NUMBER_CHARS or not _INT_RE.fullmatch(r):
        raise ValueError(f"expected an integer of ASCII digits, got {raw[:80]!r}")
    return int(r)


def _parse_float(raw: str) -> float:
    r = _strip(raw)
    if len(r) > _MAX_NUMBER_CHARS or not _FLOAT_RE.fullmatch(r):
        raise ValueError(f"expected a decimal number of ASCII digits, got {raw[:80]!r}")
    v = float(r)
    if not math.isfinite(v):
        raise ValueError(f"expected a finite number, got {raw[:80]!r}")
    return v


def _check_port(port: str, raw: str) -> None:
    if not _PORT_RE.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise ValueError(f"port must be 1-65535 (ASCII digits), got {port[:20]!r} in {redact(raw)[:200]!r}")


def _parse_engine(raw: str) -> str:
    e = raw.strip().lower()
    if e == "trtllm-serve":
        e = "trtllm"
    if e not in ENGINES:
        raise ValueError(f"unknown engine {raw!r}; expected one of {', '.join(ENGINES)}")
    return e


def _parse_url(raw: str, schemes: tuple[str, ...]) -> str:
    r = _strip(raw)
    shown = redact(r)[:200]
    if len(r) > 2048 or not r.isascii() or any(c.isspace() or ord(c) < 32 for c in r):
        raise ValueError(f"expected a {'/'.join(schemes)} URL of at most 2048 printable ASCII characters, "
                         f"got {shown!r}")
    u = urlparse(r)
    if u.scheme not in schemes or not u.netloc:
        raise ValueError(f"expected a {'/'.join(schemes)} URL, got {shown!r}")
    if u.scheme != "unix":
        hostport = u.netloc.rpartition("@")[2]
        host, port = hostport, ""
        if hostport.startswith("["):
            end = hostport.find("]")
            if end < 0:
                raise ValueError(f"unterminated IPv6 address in {shown!r}")
            host, port = hostport[: end + 1], hostport[end + 1:].removeprefix(":")
            if hostport[end + 1:] and not hostport[end + 1:].startswith(":"):
                raise ValueError(f"unexpected text after the IPv6 address in {shown!r}")
        elif ":" in hostport:
            host, port = hostport.rsplit(":", 1)
            if port == "" and hostport.endswith(":"):
                raise ValueError(f"empty port in {shown!r}")
        if not host.strip("[]"):
            raise ValueError(f"expected a host in {shown!r}")
        if port or hostport.endswith(":"):
            _check_port(port, r)
    return r


# Most URLs in ``endpoints``: a static list is for a handful of replicas (podSelector discovers the
# rest). Every URL is scraped every interval, so this also bounds the request rate one ScaledObject
# can aim at other services (256 URLs at the 0.1 s minimum interval; 1,000 drove 3,735 req/s).
MAX_ENDPOINTS = 256


def _parse_endpoints(raw: str) -> tuple[str, ...]:
    items = tuple(p.strip() for p in raw.split(",") if p.strip())
    if not items:
        raise ValueError("expected a comma-separated list of metrics URLs")
    if len(items) > MAX_ENDPOINTS:
        raise ValueError(f"at most {MAX_ENDPOINTS} endpoints, got {len(items)}")
    return tuple(_parse_url(p, ("http", "https")) for p in items)


def _parse_redis_address(raw: str) -> str:
    r = _strip(raw)
    if "://" in r:
        return _parse_url(r, ("redis", "rediss", "unix"))
    host, _, port = r.rpartition(":")
    if not host or not _PORT_RE.fullmatch(port):
        raise ValueError(f"expected host:port or a redis:// URL, got {redact(r)[:200]!r}")
    return _parse_url(f"redis://{r}", ("redis",))


def _parse_metric_unit(raw: str) -> str:
    u = raw.strip().lower()
    if u not in ("replicas", "inflight"):
        raise ValueError(f"expected replicas or inflight, got {raw!r}")
    return u


def _parse_queue_type(raw: str) -> str:
    t = raw.strip().lower()
    if t not in ("auto", "list", "stream"):
        raise ValueError(f"expected auto, list or stream, got {raw!r}")
    return t


def _parse_path(raw: str) -> str:
    if not raw.startswith("/") or len(raw) > 1024 or not raw.isascii() or any(c.isspace() for c in raw):
        raise ValueError(f"expected a path starting with '/' (printable ASCII, at most 1024), got {raw[:80]!r}")
    return raw


@dataclass(frozen=True)
class Range:
    """A finite numeric range; ``lo_open``/``hi_open`` exclude the bound."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, v: object) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below

    def __str__(self) -> str:
        def num(x: float) -> str:
            return f"{x:g}" if isinstance(x, float) and x != int(x) else f"{int(x):,}".replace(",", "_")

        return f"{'(' if self.lo_open else '['}{num(self.lo)}, {num(self.hi)}{')' if self.hi_open else ']'}"


@dataclass(frozen=True)
class Key:
    name: str
    field: str
    parse: Callable[[str], Any]
    check: Range | Callable[[Any], bool] | None
    doc: str

    @property
    def range(self) -> Range | None:
        return self.check if isinstance(self.check, Range) else None

    def valid(self, value: Any) -> bool:
        if self.check is None:
            return True
        if isinstance(self.check, Range):
            return value in self.check
        return bool(self.check(value))


def _parse_series_selector(raw: str) -> str:
    parse_selector(raw)  # raises ValueError naming what is wrong
    return raw.strip()


def _parse_profile(raw: str) -> str:
    p = raw.strip().lower()
    if p not in MODEL_PROFILES:
        raise ValueError(f"unknown model profile {raw[:80]!r}; expected one of {', '.join(MODEL_PROFILES)}")
    return p


def _gpu_product(v: str) -> bool:
    return 0 < len(v) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", v) is not None


# Bounds shared by several keys.
_SECONDS_DAY = 86_400.0
MAX_REPLICAS = 10_000
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
# Smallest KV-cache usage a replica count may be sized for: 1% asks for 100x the replicas the usage
# holds; below, the need is a typo (5e-324 overflowed the policy on every tick).
MIN_KV_TARGET = 0.01


KEYS: tuple[Key, ...] = (
    Key("engine", "engine", _parse_engine, None,
        "Engine whose metric names to read: vllm, sglang, tgi, trtllm (trtllm-serve), triton, ray, or auto "
        "(detected from each payload)."),
    Key("endpoints", "endpoints", _parse_endpoints, None,
        f"Comma-separated metrics URLs scraped directly and concurrently (one per replica; at most {MAX_ENDPOINTS}, "
        "podSelector for more)."),
    Key("prometheusAddress", "prometheus_address", lambda r: _parse_url(r, ("http", "https")), None,
        "Prometheus base URL; the scaler queries per-pod aggregates built for the engine."),
    Key("prometheusSelector", "prometheus_selector", str.strip, None,
        'Extra PromQL label matchers added to every query, e.g. `namespace="llm",service="vllm"`.'),
    Key("seriesSelector", "series_selector", _parse_series_selector, None,
        'Label matchers every series of a directly scraped payload (endpoints, podSelector, metricsPort) '
        'must match, e.g. `model_name="llama-8b"`: one model of several served on one node (else their '
        'series add up to one replica). PromQL syntax: `=`, `!=`, `=~`, `!~`; a missing label reads "".'),
    Key("redisAddress", "redis_address", _parse_redis_address, None,
        "Redis holding a gateway queue (host:port or redis:// URL). Needs redisQueue."),
    Key("redisQueue", "redis_queue", str.strip, bool, "Key of the gateway queue (a list or a stream)."),
    Key("redisQueueType", "redis_queue_type", _parse_queue_type, None,
        "list, stream, or auto (asks Redis for the key's type)."),
    Key("podSelector", "pod_selector", str.strip, bool,
        "Label selector of the engine pods to scrape directly (needs API access; see warm-pool docs)."),
    Key("metricsPort", "metrics_port", _parse_int, Range(1, 65535),
        "Port of the pods' metrics endpoint. Without podSelector, the pods of the ScaledObject's "
        "scaleTargetRef are scraped (needs API access; a LeaderWorkerSet: its group leaders)."),
    Key("metricsPath", "metrics_path", _parse_path, None, "Path of the metrics endpoint."),
    Key("minReplicas", "min_replicas", _parse_int, Range(0, MAX_REPLICAS),
        "Lower bound while active (raised to 1 unless scaleToZero is true)."),
    Key("maxReplicas", "max_replicas", _parse_int, Range(1, MAX_REPLICAS), "Upper bound."),
    Key("scaleToZero", "scale_to_zero", parse_bool, None,
        "Allow IsActive=false and a 0 target once every replica is idle. Default false."),
    Key("targetInflightPerReplica", "target_inflight_per_replica", _parse_float, Range(0.01, 1e6),
        "Optional override: running + waiting requests one replica should carry. Unset: the "
        "sequence-, KV- and prefill-bound needs from the learned per-replica capacity size the "
        "workload (docs/policy.md, \"Capacity in tokens\")."),
    Key("targetUtilization", "target_utilization", _parse_float, Range(0.05, 1),
        "Share of one replica's learned capacity (prefill tokens/s, sequences) to size for. The "
        "learned prefill rate is a lower bound (0.83-0.95 of the simulated engines' rate in the trace "
        "benchmark), so 0.8 of it leaves about the headroom 0.7 of the true rate would (docs/policy.md)."),
    Key("burstWindowSeconds", "burst_window_seconds", _parse_float, Range(1, 3600),
        "Window of the arriving prompt tokens/s the prefill-bound need is sized from."),
    Key("burstConfirmSeconds", "burst_confirm_seconds", _parse_float, Range(0, 3600),
        "How long a need beyond what the warm pool starts quickly must last (or have come before within "
        "the burst hold) before replicas slower than twice this are started cold; 0 starts them at once "
        "(docs/policy.md, \"Burst confirmation\")."),
    Key("modelProfile", "model_profile", _parse_profile, None,
        "Prior of the per-replica capacity before anything is measured (scaler/capacity.py PRIORS, "
        "e.g. 8b-h100, 70b-h100-tp4); unset: the engine's generic prior."),
    Key("prefillTpsPrior", "prefill_tps_prior", _parse_float, Range(1, 1e9),
        "Optional: prompt tokens/s one replica prefills, as the capacity prior before anything is measured "
        "(overrides the modelProfile's or engine's prior; e.g. a rate measured with a benchmark). The "
        "scaler learns the real rate from the engines either way (docs/policy.md, \"Capacity in tokens\")."),
    Key("gpuProduct", "gpu_product", str.strip, _gpu_product,
        "GPU product the replicas run on (as the nvidia.com/gpu.product node label); the learned "
        "capacity is kept per product. Unset: the product pod discovery reads from the nodes."),
    Key("ttftSloSeconds", "ttft_slo_seconds", _parse_float, Range(0.001, 3600),
        "TTFT service-level objective in seconds; unset disables the SLO rule."),
    Key("ttftQuantile", "ttft_quantile", _parse_float, Range(0, 1, lo_open=True, hi_open=True),
        "TTFT quantile held to the SLO."),
    Key("ttftWindowSeconds", "ttft_window_seconds", _parse_float, Range(0.1, _SECONDS_DAY),
        "Window of the TTFT distribution (differences of histogram buckets between scrapes)."),
    Key("itlSloSeconds", "itl_slo_seconds", _parse_float, Range(0.0001, 60),
        "Inter-token latency objective in seconds, held at ttftQuantile over ttftWindowSeconds: the "
        "policy asks for the replicas whose running sequences each decode within it (docs/policy.md, "
        "\"ITL model\"); unset disables the ITL rule."),
    Key("timeToReadySeconds", "time_to_ready_seconds", _parse_float, Range(0, _SECONDS_DAY),
        "Expected time-to-ready of a new replica (look-ahead, and the cold step of the burst hold's "
        "break-even time); the warm-pool controller's measured value replaces it when present. Set it to "
        "the cold start you know for your model (e.g. ~510 s for an 8B, ~905 s for a 70B on a new node): "
        "until a cold start is measured, a low value releases held capacity early."),
    Key("trendWindowSeconds", "trend_window_seconds", _parse_float, Range(0.1, _SECONDS_DAY),
        "Window over which the demand trend (slope) is fitted for the look-ahead."),
    Key("scaleDownStabilizationSeconds", "scale_down_stabilization_seconds", _parse_float, Range(0, _SECONDS_DAY),
        "Minimum hold of a recent peak need (the burst hold keeps it for the break-even time of "
        "releasing capacity, at least this long; docs/policy.md)."),
    Key("nodeIdleSeconds", "node_idle_seconds", _parse_float, Range(0, _SECONDS_DAY),
        "How long a released GPU node stays (billed, idle) before the cluster autoscaler removes it; part "
        "of the burst hold's break-even time. 0 (the default): nodes are not provisioned on demand, so a "
        "release idles nothing billed. With a cluster autoscaler, its scale-down-unneeded-time (600 s "
        "by default)."),
    Key("idleWindowSeconds", "idle_window_seconds", _parse_float, Range(0, 7 * _SECONDS_DAY),
        "No requests finished and no tokens generated for this long, before idle counts (scale to zero). "
        "With scaleToZero, a workload fully idle this long goes to zero even while a burst hold is in "
        "force, unless holdThroughIdle is true."),
    Key("holdThroughIdle", "hold_through_idle", parse_bool, None,
        "Keep a burst hold in force through full idleness: no scale to zero until the held peak's "
        "break-even time has passed (docs/policy.md, \"The hold and the idle window\"). Default false."),
    Key("stalenessSeconds", "staleness_seconds", _parse_float, Range(0.1, _SECONDS_DAY),
        "A replica's signal older than this is unknown."),
    Key("scrapeIntervalSeconds", "scrape_interval_seconds", _parse_float, Range(0.1, 3600),
        "How often the scaler reads the sources and recomputes the decision."),
    Key("scrapeTimeoutSeconds", "scrape_timeout_seconds", _parse_float, Range(0.05, 600),
        "Total deadline of one scrape or query (body and parsing included). A decision waits at most "
        "min(this, 0.8 x scrapeIntervalSeconds) for its sources; a replica not read by then is unknown for that "
        "decision."),
    Key("maxPayloadBytes", "max_payload_bytes", _parse_int, Range(1024, MAX_PAYLOAD_BYTES),
        "A metrics payload larger than this is rejected (replica unknown)."),
    Key("hpaTolerance", "hpa_tolerance", _parse_float, Range(0, 1, hi_open=True),
        "The HPA's tolerance (0.1 by default; 0 when the ScaledObject sets behavior.*.tolerance: 0 on "
        "Kubernetes >= 1.33). The reported metric compensates for it."),
    Key("metricUnit", "metric_unit", _parse_metric_unit, None,
        "Unit of the reported metric. replicas: target 1, value ~ the decided count (the spec never "
        "changes). inflight: target = the running + waiting requests one replica is sized for "
        "(targetInflightPerReplica, else targetUtilization x the most sequences one replica runs as the "
        "engines report it (SGLang, TRT-LLM, Triton; else the capacity prior)), value = decided count x "
        "target; the target follows that figure in HPA-safe steps, each pushed to KEDA by StreamMetricSpec "
        "(docs/scaler.md). The HPA lands on the same count either way."),
    Key("metricName", "metric_name", str.strip, bool, "Name of the metric reported to KEDA."),
)

ROLES = ("both", "prefill", "decode")


def _parse_role(raw: str) -> str:
    r = raw.strip().lower()
    if r not in ROLES:
        raise ValueError(f"expected one of {', '.join(ROLES)}, got {raw!r}")
    return r


def _dns_label(v: str) -> bool:
    """A Kubernetes object name (DNS subdomain, at most 253 characters)."""
    return 0 < len(v) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", v) is not None


KEYS = (
    *KEYS,
    Key("eppAddress", "epp_address", lambda r: _parse_url(r, ("http", "https")), None,
        "URL of an endpoint picker's metrics (llm-d router or Gateway API Inference Extension EPP, e.g. "
        "`http://llama-epp.llm:9090/metrics`). Its flow-control queue counts as demand (scale from zero "
        "without pods or Redis), its pool saturation sizes the pool, stale endpoints hold scale-down."),
    Key("eppPool", "epp_pool", str.strip, _dns_label,
        "InferencePool whose picker series are read (`inference_pool`/`name` labels). With "
        "prometheusAddress and no eppAddress, the picker's series are read from Prometheus."),
    Key("role", "role", _parse_role, None,
        "prefill, decode or both: which signals size this ScaledObject (disaggregated serving). prefill: "
        "arriving prompt tokens/s, backlog, TTFT within the SLO less the KV handoff to decode, the picker's "
        "prefill saturation; decode: KV usage, running sequences, ITL, the picker's decode saturation "
        "(docs/pd.md)."),
    Key("pdGroup", "pd_group", str.strip, _dns_label,
        "Name shared by the prefill and the decode ScaledObject of one disaggregated deployment (same "
        "namespace); the ratio bounds hold between them through the store."),
    Key("decodePerPrefillMin", "decode_per_prefill_min", _parse_float, Range(0, 64, lo_open=True),
        "Lower bound of decode replicas per prefill replica in the pdGroup; raises decode."),
    Key("decodePerPrefillMax", "decode_per_prefill_max", _parse_float, Range(0, 64, lo_open=True),
        "Upper bound of decode replicas per prefill replica in the pdGroup; raises prefill."),
    Key("dcgmEndpoints", "dcgm_endpoints", _parse_endpoints, None,
        "Comma-separated NVIDIA dcgm-exporter metrics URLs (e.g. each node's `:9400/metrics`, or a "
        "Service in front of them). The GPUs DCGM attributes to the ScaledObject's pods (its pod and "
        "namespace labels; the pods as pod discovery or the replica sources name them) are a secondary "
        "signal: while their mean utilisation is at or above DCGM_BUSY_UTILIZATION (0.9) the decision does not go "
        "below the current count. It only holds what runs (never more, and never less than the engine "
        "signals ask for); unreadable exporters change nothing (docs/scaler.md, DCGM)."),
)

# Keys removed from the policy (issue 22: at most 14 policy keys). Still accepted: a malformed value
# is INVALID_ARGUMENT as before, a valid one is ignored (the named constant applies) and the tracker
# logs a warning with the replacement below (:func:`deprecations`). None of them has a remaining key
# of the same meaning, so none is mapped onto one.
DEPRECATED_KEYS: tuple[tuple[Key, str], ...] = (
    (Key("kvBoundTarget", "kv_bound_target", _parse_float, Range(MIN_KV_TARGET, 1),
         "Mean KV-cache usage the KV-bound need sizes for when no targetInflightPerReplica is set: room "
         "left to admit long prompts and their decode growth (0.5 measured on Mooncake; 0.56-0.8 let "
         "bursts of 30k-85k-token prompts queue, docs/benchmarks.md)."),
     f"no key: the KV residency need sizes for {KV_RESIDENCY_TARGET:g} mean KV usage (KV_RESIDENCY_TARGET);"
     " targetUtilization sets the headroom on prefill and sequences"),
    (Key("targetWaitingPerReplica", "target_waiting_per_replica", _parse_float, Range(0, 1e6),
         "Queued requests per replica tolerated before the queue alone asks for more replicas."),
     f"no key: {TOLERATED_WAITING_PER_REPLICA:g} waiting requests per replica are ordinary queueing"
     " (TOLERATED_WAITING_PER_REPLICA);"
     " ttftSloSeconds bounds the wait"),
    (Key("kvCacheTarget", "kv_cache_target", _parse_float, Range(MIN_KV_TARGET, 1),
         "KV-cache usage (0..1) to size for when usage runs high."),
     f"no key: with targetInflightPerReplica, KV usage at {KV_HIGH:g} sizes for {KV_HOT_TARGET:g}"
     " (KV_HIGH, KV_HOT_TARGET);"
     " without it the KV residency need applies"),
    (Key("kvCacheHigh", "kv_cache_high", _parse_float, Range(0, 1, lo_open=True),
         "KV-cache usage above which the KV rule engages (also engages on preemptions)."),
     f"no key: the KV need engages at {KV_HIGH:g} usage or on preemptions (KV_HIGH)"),
    (Key("scaleUpMaxStep", "scale_up_max_step", _parse_float, Range(1, 100),
         "Largest multiplicative step of the proportional (KV, TTFT) rules per decision."),
     f"no key: one decision at most multiplies the replicas by {SCALE_UP_MAX_STEP:g}"
     " (SCALE_UP_MAX_STEP, the HPA's default scale-up policy);"
     " maxReplicas bounds the total"),
    (Key("eppSaturationTarget", "epp_saturation_target", _parse_float, Range(0.1, 2),
         "Picker pool saturation (1.0 = its gating set point) to size for when saturation runs above it "
         ""),
     f"no key: the picker's saturation is sized for {EPP_SATURATION_TARGET:g} (EPP_SATURATION_TARGET)"),
    (Key("dcgmBusyUtilization", "dcgm_busy_utilization", _parse_float, Range(0.05, 1),
         "Mean GPU utilisation (DCGM_FI_PROF_GR_ENGINE_ACTIVE, else DCGM_FI_DEV_GPU_UTIL / 100) of the "
         "ScaledObject's GPUs at or above which a scale-down is held (dcgmEndpoints). GPU_UTIL reads near "
         "1 at light load: with it alone, 1 holds only fully busy GPUs."),
     f"no key: GPUs at or above {DCGM_BUSY_UTILIZATION:g} mean utilisation hold a scale-down (DCGM_BUSY_UTILIZATION)"),
)

# Keys KEDA itself reads from an external trigger's metadata; accepted and ignored.
KEDA_KEYS = frozenset({"scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsClientCert", "tlsClientKey"})
_BY_NAME = {k.name: k for k in KEYS}
_DEPRECATED = {k.name: (k, why) for k, why in DEPRECATED_KEYS}


def parse_metadata(metadata: Mapping[str, str]) -> ScalerConfig:
    """Validate trigger metadata. Raises :class:`ConfigError` naming the first bad key."""
    values: dict[str, Any] = {}
    for name in sorted(metadata):
        raw = metadata[name]
        if name in KEDA_KEYS:
            continue
        if name.endswith("FromEnv") and (name[: -len("FromEnv")] in _BY_NAME or name[: -len("FromEnv")] in _DEPRECATED):
            continue  # KEDA resolves these into the base key
        key = _BY_NAME.get(name)
        deprecated = _DEPRECATED.get(name)
        if key is None and deprecated is not None:
            key = deprecated[0]
        if key is None:
            raise ConfigError(name, "unknown metadata key")
        try:
            value = key.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(name, str(exc)) from None
        if not key.valid(value):
            rng = f" {key.range}" if key.range is not None else ""
            raise ConfigError(name, f"value {redact(raw)[:80]!r} is out of range{rng}")
        if deprecated is None:
            values[key.field] = value
    cfg = ScalerConfig(**values)
    _check_consistency(cfg)
    return cfg


def _check_consistency(cfg: ScalerConfig) -> None:
    if cfg.max_replicas < cfg.floor:
        raise ConfigError("maxReplicas", f"{cfg.max_replicas} is below minReplicas {cfg.min_replicas}")
    if (cfg.redis_address is None) != (cfg.redis_queue is None):
        missing = "redisQueue" if cfg.redis_queue is None else "redisAddress"
        raise ConfigError(missing, "redisAddress and redisQueue go together")
    if not (cfg.endpoints or cfg.prometheus_address or cfg.redis_address or cfg.pod_selector or cfg.metrics_port
            or cfg.epp_address):
        raise ConfigError(
            "endpoints",
            "no signal source: set endpoints, prometheusAddress, redisAddress, podSelector, metricsPort or eppAddress",
        )
    if cfg.series_selector and not (cfg.endpoints or cfg.pod_selector or cfg.metrics_port):
        raise ConfigError("seriesSelector", "applies to a direct scrape (endpoints, podSelector or metricsPort); "
                          "on the Prometheus path use prometheusSelector")
    if cfg.epp_pool is not None and not (cfg.epp_address or cfg.prometheus_address):
        raise ConfigError("eppPool", "needs eppAddress or prometheusAddress")
    _check_pd(cfg)


def deprecations(metadata: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(key, what replaces it) for every removed key in ``metadata``, in key order (the tracker logs
    them as warnings; ``warmscale validate`` reports them)."""
    return tuple((name, _DEPRECATED[name][1]) for name in sorted(metadata) if name in _DEPRECATED)


def _check_pd(cfg: ScalerConfig) -> None:
    bounds = cfg.decode_per_prefill_min is not None or cfg.decode_per_prefill_max is not None
    if cfg.pd_group is not None and cfg.role == "both":
        raise ConfigError("role", "pdGroup needs role prefill or decode")
    if bounds and cfg.pd_group is None:
        key = "decodePerPrefillMin" if cfg.decode_per_prefill_min is not None else "decodePerPrefillMax"
        raise ConfigError(key, "a decode/prefill ratio bound needs pdGroup")
    lo, hi = cfg.decode_per_prefill_min, cfg.decode_per_prefill_max
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError("decodePerPrefillMin", f"{lo:g} exceeds decodePerPrefillMax {hi:g}")


# The keys that tune the policy (docs/policy.md), each with its unit. Every other key says where the
# signals come from and how they are read (source, signal), what the deployment is (deployment) or
# how the answer reaches the HPA (hpa): the policy does not size by them.
POLICY_KEYS: dict[str, str] = {
    "minReplicas": "replicas", "maxReplicas": "replicas", "scaleToZero": "bool",
    "targetInflightPerReplica": "requests per replica", "targetUtilization": "share of learned capacity",
    "ttftSloSeconds": "s", "ttftQuantile": "quantile (0..1)", "itlSloSeconds": "s",
    "timeToReadySeconds": "s", "burstConfirmSeconds": "s", "scaleDownStabilizationSeconds": "s",
    "nodeIdleSeconds": "s", "idleWindowSeconds": "s", "holdThroughIdle": "bool",
}
# At most this many policy keys (issue 22): tests/scaler/test_config.py holds it.
MAX_POLICY_KEYS = 14
_KINDS: dict[str, str] = {
    **dict.fromkeys(("engine", "endpoints", "prometheusAddress", "prometheusSelector", "seriesSelector",
                     "redisAddress", "redisQueue", "redisQueueType", "podSelector", "metricsPort", "metricsPath",
                     "maxPayloadBytes", "eppAddress", "eppPool", "dcgmEndpoints"), "source"),
    **dict.fromkeys(("stalenessSeconds", "scrapeIntervalSeconds", "scrapeTimeoutSeconds", "burstWindowSeconds",
                     "ttftWindowSeconds", "trendWindowSeconds"), "signal"),
    **dict.fromkeys(("modelProfile", "prefillTpsPrior", "gpuProduct", "role", "pdGroup", "decodePerPrefillMin",
                     "decodePerPrefillMax"), "deployment"),
    **dict.fromkeys(("hpaTolerance", "metricUnit", "metricName"), "hpa"),
    **dict.fromkeys(POLICY_KEYS, "policy"),
}


def kind_of(name: str) -> str:
    """policy, source, signal, deployment or hpa (a key of :data:`KEYS`)."""
    return _KINDS[name]


def _shown(d: object) -> str:
    return "(none)" if d in (None, (), "") else str(d).lower() if isinstance(d, bool) else str(d)


def defaults_table() -> str:
    """Markdown tables: every metadata key with its kind, default and range; the removed keys."""
    defaults = {f.name: f.default for f in fields(ScalerConfig)}
    rows = ["| key | kind | default | range | meaning |", "|---|---|---|---|---|"]
    for k in KEYS:
        rng = f"`{k.range}`" if k.range is not None else ""
        kind = kind_of(k.name)
        unit = f" ({POLICY_KEYS[k.name]})" if kind == "policy" else ""
        rows.append(f"| `{k.name}` | {kind}{unit} | `{_shown(defaults[k.field])}` | {rng} | {k.doc} |")
    rows += ["", "Removed keys: still accepted (a malformed value is still INVALID_ARGUMENT), ignored, and "
             "logged with a warning saying what replaces them.", "",
             "| removed key | was (default) | replaced by |", "|---|---|---|"]
    for k, why in DEPRECATED_KEYS:
        rows.append(f"| `{k.name}` | `{_shown(defaults[k.field])}`: {k.doc} | {why} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(defaults_table())
