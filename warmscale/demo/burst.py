"""A short burst cut from a real per-request trace (``timestamp_s,input_tokens,output_tokens``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TRACE = "azure_llm_2023_conv.csv"


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds since the start of the replay (wall clock, after speed-up)
    input_tokens: int
    output_tokens: int


def shared_traces_dir() -> Path:
    """``../shared/traces`` beside the repository (overridable with WARMSCALE_SHARED)."""
    import os

    root = os.environ.get("WARMSCALE_SHARED")
    if root:
        return Path(root) / "traces"
    return Path(__file__).resolve().parents[3] / "shared" / "traces"


def load_trace(path: Path) -> list[tuple[float, int, int]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "timestamp_s" not in reader.fieldnames:
            raise ValueError(f"{path}: not a per-request trace (timestamp_s,input_tokens,output_tokens)")
        return [(float(r["timestamp_s"]), int(r["input_tokens"]), int(r["output_tokens"])) for r in reader]


def busiest_minute(rows: list[tuple[float, int, int]]) -> float:
    counts: dict[int, int] = {}
    for t, _, _ in rows:
        counts[int(t // 60)] = counts.get(int(t // 60), 0) + 1
    return 60.0 * max(counts, key=lambda m: counts[m])


def burst(rows: list[tuple[float, int, int]], lead_s: float, span_s: float, speed: float) -> list[Arrival]:
    """Arrivals from ``lead_s`` before the busiest minute, ``span_s`` of trace time, ``speed`` x faster."""
    start = max(0.0, busiest_minute(rows) - lead_s)
    return [
        Arrival((t - start) / speed, i, o)
        for t, i, o in rows
        if start <= t < start + span_s
    ]
