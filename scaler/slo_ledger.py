"""SLO attainment over fixed windows: the share of requests within the TTFT (or ITL) SLO (pure).

The scaler already reads each replica's TTFT and ITL histograms; each decision adds the
observations that arrived since the last one (``count within the SLO``, ``count``) to a ledger that
keeps them in cells, coarser for longer windows, so a day costs a few hundred numbers per
ScaledObject. ``ratio(window)`` is the share within the SLO over the cells that window covers:
exact to one cell (10 s for 5 min, 1 min for 1 h, 5 min for 1 day). ``None``: no request in it.
Within a bucket the SLO is interpolated linearly (``Histogram.fraction_above``); with a quantile
above the top bucket, everything there counts as outside.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warmscale.signals.histogram import Histogram

# (label, window seconds, cell seconds): each window kept in at most 300 cells.
WINDOWS: tuple[tuple[str, float, float], ...] = (("5m", 300.0, 10.0), ("1h", 3600.0, 60.0), ("1d", 86400.0, 300.0))
Cells = tuple[tuple[float, float, float], ...]  # (cell start, within, total), oldest first


def within(h: Histogram, slo_s: float) -> tuple[float, float]:
    """(observations within ``slo_s``, observations) of one histogram (a delta between scrapes)."""
    if h.count <= 0:
        return 0.0, 0.0
    above = h.fraction_above(slo_s)
    return (h.count * (1.0 - above) if above is not None else 0.0), h.count


@dataclass(frozen=True)
class SloLedger:
    rings: tuple[Cells, ...] = ((), (), ())  # one per WINDOWS entry

    def add(self, now: float, ok: float, total: float) -> SloLedger:
        if total <= 0:
            return self
        rings = []
        for (_, span, cell), ring in zip(WINDOWS, self.rings, strict=True):
            start = now - now % cell
            kept = [c for c in ring if c[0] > now - span - cell]
            if kept and kept[-1][0] == start:
                s, w, t = kept[-1]
                kept[-1] = (s, w + ok, t + total)
            else:
                kept.append((start, ok, total))
            rings.append(tuple(kept))
        return replace(self, rings=tuple(rings))

    def ratio(self, now: float, label: str) -> float | None:
        for (name, span, _), ring in zip(WINDOWS, self.rings, strict=True):
            if name == label:
                cells = [c for c in ring if c[0] > now - span]
                total = sum(c[2] for c in cells)
                return None if total <= 0 else min(1.0, sum(c[1] for c in cells) / total)
        raise KeyError(label)
