"""Endpoint pickers: the llm-d router's EPP and the Gateway API Inference Extension's EPP (pure, no I/O).

One picker ``/metrics`` payload (or the same series read back from Prometheus) -> one
:class:`~signals.model.GatewaySignal` for an InferencePool. Names, newest first (a payload carrying
both spellings, as the llm-d router does while it keeps the deprecated copies, is read once):

- flow-control queue: ``llm_d_epp_flow_control_queue_size``, ``inference_extension_flow_control_queue_size``
  (labels ``fairness_id, priority, inference_pool, model_name, target_model_name``), summed;
- pool saturation: ``llm_d_epp_flow_control_pool_saturation``, ``inference_extension_flow_control_pool_saturation``
  (``inference_pool`` and, since the llm-d router, ``stage`` = ``prefill``/``decode``/``effective``); a
  series without ``stage`` is the pool's ``effective`` value;
- stale endpoints: ``llm_d_epp_flow_control_stale_endpoints`` (``detector``), the maximum;
- running requests: ``llm_d_epp_request_running``, ``inference_objective_running_requests``, summed (these
  carry no pool label: one picker serves one pool);
- running requests: also ``inference_model_running_requests`` (GAIE <= 1.0, ``model_name``);
- ready endpoints: ``llm_d_epp_ready_endpoints``, ``inference_pool_ready_pods`` (``name`` = the pool);
- requests waiting in the engines: ``inference_pool_average_queue_size`` (``name``) x ready endpoints.

Samples and their provenance: ``tests/signals/data/epp/README.md``.
"""

from __future__ import annotations

from warmscale.signals.engines._common import Where, gauge_max, gauge_sum
from warmscale.signals.model import GatewaySignal
from warmscale.signals.parsing import Labels, MetricIndex, PayloadError, parse_text

QUEUE = ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size")
SATURATION = ("llm_d_epp_flow_control_pool_saturation", "inference_extension_flow_control_pool_saturation")
STALE = ("llm_d_epp_flow_control_stale_endpoints",)
# GAIE <= 1.0 (before InferenceModel became InferenceObjective) named it ``inference_model_running_requests``.
RUNNING = ("llm_d_epp_request_running", "inference_objective_running_requests", "inference_model_running_requests")
READY = ("llm_d_epp_ready_endpoints", "inference_pool_ready_pods")
# The mean engine queue over the pool's ready endpoints (``name`` = the pool): requests waiting inside
# the engines, which a gateway-only ScaledObject (no engine read directly) sees nowhere else.
POOL_QUEUE = ("inference_pool_average_queue_size",)
INFO = ("llm_d_epp_info", "inference_extension_info")
STAGES = ("prefill", "decode", "effective")

# Every metric name read here (the Prometheus-backed source asks for exactly these).
NAMES: tuple[str, ...] = (*QUEUE, *SATURATION, *STALE, *RUNNING, *READY, *POOL_QUEUE, *INFO)


def detect(idx: MetricIndex) -> bool:
    """A payload of an endpoint picker: any of its flow-control, pool, request or build-info families
    (GAIE 1.0 has no flow control: its running requests and pool gauges identify it)."""
    return any(n in idx for n in (*QUEUE, *SATURATION, *READY, *RUNNING, *POOL_QUEUE, *INFO))


def _pool_where(label: str, pool: str | None) -> Where:
    if pool is None:
        return None

    def where(labels: Labels) -> bool:
        return labels.get(label) == pool

    return where


def _pools_seen(idx: MetricIndex, name: str | None, label: str) -> set[str]:
    if name is None:
        return set()
    return {labels.get(label, "") for labels, _ in idx.series(name)}


def parse(idx: MetricIndex, pool: str | None = None) -> GatewaySignal:
    """The picker's signal for InferencePool ``pool`` (every pool in the payload when ``None``).

    Raises :class:`PayloadError` for a payload of no picker, invalid gauges, or a named pool the
    picker does not report while it reports others (a typo must not read as an empty queue)."""
    if not detect(idx):
        raise PayloadError("not an endpoint-picker payload: none of " + ", ".join(QUEUE + SATURATION + READY + RUNNING))
    queue_name = idx.first_present(*QUEUE)
    sat_name = idx.first_present(*SATURATION)
    ready_name = idx.first_present(*READY)
    if pool is not None:
        seen = _pools_seen(idx, sat_name, "inference_pool") | _pools_seen(idx, queue_name, "inference_pool")
        seen |= _pools_seen(idx, ready_name, "name") | _pools_seen(idx, idx.first_present(*POOL_QUEUE), "name")
        if seen and pool not in seen:
            raise PayloadError(
                f"InferencePool {pool!r} not in the picker's metrics (it reports {', '.join(sorted(seen))})")
    in_pool = _pool_where("inference_pool", pool)

    # A queue family with no series yet (nothing was ever held) is an empty queue.
    queue = gauge_sum(idx, queue_name, in_pool) or 0.0

    saturation: dict[str, float] = {}
    if sat_name is not None:
        stages = {labels.get("stage") or "effective" for labels, _ in idx.series(sat_name, in_pool)}
        for stage in sorted(stages & set(STAGES)):
            checked = gauge_max(idx, sat_name, _stage_where(pool, stage))
            if checked is not None:
                saturation[stage] = checked
    if "effective" not in saturation and saturation:
        saturation["effective"] = max(saturation.values())

    ready = gauge_max(idx, ready_name, _pool_where("name", pool))
    mean_queue = gauge_sum(idx, idx.first_present(*POOL_QUEUE), _pool_where("name", pool))
    return GatewaySignal(
        flavor="llm-d" if idx.has_prefix("llm_d_epp_") else "gaie",
        queue=queue,
        saturation=saturation,
        running=gauge_sum(idx, idx.first_present(*RUNNING)),
        ready_endpoints=ready,
        stale_endpoints=gauge_max(idx, idx.first_present(*STALE)),
        engine_waiting=mean_queue * ready if mean_queue is not None and ready is not None else None,
    )


def _stage_where(pool: str | None, stage: str) -> Where:
    def where(labels: Labels) -> bool:
        if pool is not None and labels.get("inference_pool") != pool:
            return False
        return (labels.get("stage") or "effective") == stage

    return where


def parse_payload(text: str, pool: str | None = None, *, max_bytes: int | None = None) -> GatewaySignal:
    """Parse one picker exposition payload; raises :class:`PayloadError`."""
    return parse(parse_text(text, max_bytes=max_bytes, keep_buckets=lambda _: False), pool)


def index_from_vector(result: list[dict[str, object]]) -> MetricIndex:
    """A Prometheus instant-vector result (``[{"metric": {...}, "value": [t, "v"]}]``) as a
    :class:`MetricIndex`, so that the Prometheus-backed source reads the picker with :func:`parse`.
    Prometheus' own labels (``job``, ``instance``...) are kept; a non-numeric value raises PayloadError."""
    samples: dict[str, list[tuple[Labels, float]]] = {}
    for item in result:
        metric = item.get("metric")
        value = item.get("value")
        if not isinstance(metric, dict) or not isinstance(value, (list, tuple)) or len(value) != 2:
            raise PayloadError("malformed Prometheus vector sample")
        labels = {str(k): str(v) for k, v in metric.items()}
        name = labels.pop("__name__", None)
        if name is None:
            raise PayloadError("Prometheus sample without __name__")
        try:
            v = float(str(value[1]))
        except ValueError:
            raise PayloadError(f"{name}: non-numeric value {value[1]!r}") from None
        samples.setdefault(name, []).append((labels, v))
    return MetricIndex(samples={k: tuple(v) for k, v in samples.items()})
