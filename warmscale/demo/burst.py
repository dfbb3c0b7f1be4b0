"""A burst cut from a real per-request trace (``timestamp_s,input_tokens,output_tokens``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from warmscale.traces import loader

# The Azure coding trace (shipped in the package): on/off bursts, twelve of its 57 minutes idle.
DEFAULT_TRACE = "azure-code"


@dataclass(frozen=True)
class Arrival:
    at: float  # trace seconds since the start of the replayed window
    input_tokens: int
    output_tokens: int
    hashes: tuple[int, ...] | None = None  # the prompt's block ids when the trace has them (prefix caching)
    hash_tokens: int = 0


def load_trace(path: Path) -> list[tuple[float, int, int]]:
    """The requests of a per-request trace, checked (:func:`warmscale.traces.loader.read_requests`)."""
    if loader.detect_kind(path) != "requests":
        raise loader.TraceError(path, "the demo replays a per-request trace (timestamp_s,input_tokens,"
                                "output_tokens), not a rate curve", line=1, column=1)
    return loader.read_requests(path)


def busiest_minute(rows: list[tuple[float, int, int]]) -> float:
    counts: dict[int, int] = {}
    for t, _, _ in rows:
        counts[int(t // 60)] = counts.get(int(t // 60), 0) + 1
    return 60.0 * max(counts, key=lambda m: counts[m])


def window_start(rows: list[tuple[float, int, int]], lead_s: float) -> float:
    """``lead_s`` before the start of the busiest minute."""
    return max(0.0, busiest_minute(rows) - lead_s)


def burst(rows: list[tuple[float, int, int]], lead_s: float, span_s: float,
          hashes: loader.BlockHashes | None = None) -> list[Arrival]:
    """Arrivals from ``lead_s`` before the busiest minute, ``span_s`` of trace time (with their
    block ids when ``hashes``, row for row)."""
    start = window_start(rows, lead_s)
    if hashes is None:
        return [Arrival(t - start, i, o) for t, i, o in rows if start <= t < start + span_s]
    return [Arrival(t - start, i, o, ids, hashes.block_tokens)
            for (t, i, o), ids in zip(rows, hashes.ids, strict=True) if start <= t < start + span_s]
