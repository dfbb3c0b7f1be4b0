"""Engine parsers: one ``/metrics`` payload -> one :class:`~signals.model.ReplicaSignal` (pure, no I/O).

>>> sig = parse_payload(text)              # engine detected from the payload
>>> sig = parse_payload(text, "vllm")      # or named (``trtllm-serve`` is an alias of ``trtllm``)

Every failure (garbage, truncated, NaN/Inf/negative gauges, no waiting/running series, a payload of
another engine) raises :class:`~signals.parsing.PayloadError`.
"""

from __future__ import annotations

from collections.abc import Callable

from warmscale.signals.engines import dcgm, ray, sglang, tgi, triton, trtllm, vllm
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import MetricIndex, PayloadError, parse_text
from warmscale.signals.selector import matches, parse_selector

__all__ = ["DETECTORS", "PARSERS", "PayloadError", "detect_engine", "is_itl_histogram", "is_ttft_histogram",
           "parse_index", "parse_payload"]

PARSERS: dict[str, Callable[[MetricIndex], ReplicaSignal]] = {
    "vllm": vllm.parse,
    "sglang": sglang.parse,
    "tgi": tgi.parse,
    "trtllm": trtllm.parse,
    "triton": triton.parse,
    "ray": ray.parse,
}

# Detection order matters only for payloads mixing engines (e.g. Dynamo passing vllm:* through);
# Ray first because its re-exported vLLM names are prefixed, DCGM last (secondary signal only).
DETECTORS: tuple[tuple[str, Callable[[MetricIndex], bool]], ...] = (
    ("ray", ray.detect),
    ("vllm", vllm.detect),
    ("sglang", sglang.detect),
    ("tgi", tgi.detect),
    ("triton", triton.detect),
    ("trtllm", trtllm.detect),
    ("dcgm", dcgm.detect),
)

_ALIASES = {"trtllm-serve": "trtllm"}


def detect_engine(payload: str | MetricIndex) -> str | None:
    """The engine a payload comes from (``vllm``, ``sglang``, ``tgi``, ``triton``, ``trtllm``, ``ray``,
    or ``dcgm`` for a GPU exporter), ``None`` if unrecognised."""
    idx = parse_text(payload) if isinstance(payload, str) else payload
    for name, test in DETECTORS:
        if test(idx):
            return name
    return None


def parse_index(idx: MetricIndex, engine: str = "auto") -> ReplicaSignal:
    eng = _ALIASES.get(engine, engine)
    if eng == "auto":
        found = detect_engine(idx)
        if found is None:
            raise PayloadError("unrecognised payload: no known engine metrics (vllm, sglang, tgi, triton, "
                               "trtllm, ray)")
        eng = found
    if eng == "dcgm":
        raise PayloadError("a DCGM exporter payload carries GPU metrics only, no request signal; "
                           "use signals.engines.dcgm as a secondary source")
    parser = PARSERS.get(eng)
    if parser is None:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(PARSERS)} or auto")
    return parser(idx)


def is_ttft_histogram(base: str) -> bool:
    """The histograms whose buckets the engine parsers read (TTFT, and Triton's first-response)."""
    return base.endswith("time_to_first_token_seconds") or base == "nv_inference_first_response_histogram_ms"


def is_itl_histogram(base: str) -> bool:
    """The inter-token latency / time-per-output-token histograms the engine parsers read."""
    if base.endswith("request_time_per_output_token_seconds"):  # vLLM's per-request TPOT: not read
        return False
    return base.endswith(("inter_token_latency_seconds", "time_per_output_token_seconds")) \
        or base == "tgi_request_mean_time_per_token_duration"


def _keep_buckets(base: str) -> bool:
    return is_ttft_histogram(base) or is_itl_histogram(base)


def parse_payload(text: str, engine: str = "auto", *, max_bytes: int | None = None,
                  selector: str = "") -> ReplicaSignal:
    """Parse one exposition payload into a :class:`ReplicaSignal`; raises :class:`PayloadError`.

    ``selector`` (PromQL label matchers, :mod:`signals.selector`; the ``seriesSelector`` metadata key)
    keeps only the series that match: one model of several a node serves. An invalid selector, or
    one that no series matches, raises :class:`PayloadError`."""
    idx = parse_text(text, max_bytes=max_bytes, keep_buckets=_keep_buckets)
    if selector.strip():
        try:
            matchers = parse_selector(selector)
        except ValueError as exc:
            raise PayloadError(f"seriesSelector: {exc}") from None
        idx = idx.select(lambda labels: matches(labels, matchers))
        if not idx.samples:
            raise PayloadError(f"no series in the payload matches seriesSelector {selector.strip()[:200]!r}")
    return parse_index(idx, engine)
