"""Validated reads from a :class:`~signals.parsing.MetricIndex`, shared by the engine modules."""

from __future__ import annotations

import math
from collections.abc import Callable

from warmscale.signals.histogram import Histogram, merge
from warmscale.signals.parsing import Labels, MetricIndex, PayloadError

Where = Callable[[Labels], bool] | None

# A KV fraction a hair above 1 is rounding; clamp it. Anything beyond is a broken exporter.
_FRACTION_SLACK = 1e-6


def _check_gauge(name: str, labels: Labels, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        raise PayloadError(f"{name}{{{shown}}} = {value}: a gauge must be finite and non-negative")


Names = str | tuple[str, ...] | None


def _label_key(labels: Labels, drop: str | None = None) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in labels.items() if k != drop)


def aliased_series(idx: MetricIndex, names: tuple[str, ...], where: Where = None,
                   drop: str | None = None) -> list[tuple[str, Labels, float]]:
    """(name, labels, value) of each series of the first of ``names`` (a metric and its former
    spellings, newest first) that carries the series' label set (``drop`` ignored, e.g. ``le``).

    The choice is made per series, not per payload: an engine exporting both spellings (vLLM
    0.9.2-0.10) is read once, yet on a node running several engines (Ray Serve LLM) one that exports
    only the old name is read too, instead of being dropped because another exports the new one."""
    seen: set[frozenset[tuple[str, str]]] = set()
    out: list[tuple[str, Labels, float]] = []
    for name in names:
        fresh = set()
        for labels, v in idx.series(name, where):
            key = _label_key(labels, drop)
            if key not in seen:
                fresh.add(key)
                out.append((name, labels, v))
        seen |= fresh
    return out


def _gauge_values(idx: MetricIndex, name: Names, where: Where) -> list[float] | None:
    """The values of a gauge's series (of the first spelling per series, for a tuple of names:
    :func:`aliased_series`), checked; ``None`` when absent. NaN/Inf/negative raise :class:`PayloadError`."""
    if name is None:
        return None
    got = aliased_series(idx, (name,) if isinstance(name, str) else name, where)
    if not got:
        return None
    for n, labels, v in got:
        _check_gauge(n, labels, v)
    return [v for _, _, v in got]


def gauge_sum(idx: MetricIndex, name: Names, where: Where = None) -> float | None:
    """Sum over series of a gauge; ``None`` when absent. NaN/Inf/negative raise :class:`PayloadError`."""
    values = _gauge_values(idx, name, where)
    return math.fsum(values) if values is not None else None


def gauge_max(idx: MetricIndex, name: Names, where: Where = None) -> float | None:
    """Maximum over series of a gauge; ``None`` when absent."""
    values = _gauge_values(idx, name, where)
    return max(values) if values is not None else None


def gauge_mean(idx: MetricIndex, name: Names, where: Where = None) -> float | None:
    """Mean over series of a gauge; ``None`` when absent."""
    values = _gauge_values(idx, name, where)
    return math.fsum(values) / len(values) if values is not None else None


def fraction(name: str, value: float | None) -> float | None:
    """A 0..1 usage; above 1 (beyond rounding) raises :class:`PayloadError`."""
    if value is None:
        return None
    if value > 1.0 + _FRACTION_SLACK:
        raise PayloadError(f"{name} = {value}: expected a fraction in 0..1")
    return min(1.0, value)


def ratio(used: float | None, capacity: float | None) -> float | None:
    if used is None or capacity is None or capacity <= 0:
        return None
    return used / capacity


def counter_sum(idx: MetricIndex, *names: str, where: Where = None) -> float | None:
    """Sum over series of the first of ``names`` present *per series* (:func:`aliased_series`: aliases
    are read once, never added). A counter with a NaN/Inf/negative series is unusable: ``None``."""
    got = aliased_series(idx, names, where)
    if not got or any(not math.isfinite(v) or v < 0 for _, _, v in got):
        return None
    return math.fsum(v for _, _, v in got)


def required(value: float | None, what: str, names: tuple[str, ...]) -> float:
    if value is None:
        raise PayloadError(f"missing required metric for {what}: none of {', '.join(names)} in the payload")
    return value


def first_histogram(idx: MetricIndex, *bases: str, scale: float = 1.0) -> Histogram | None:
    """The histogram of the first of ``bases`` that has buckets, chosen per series as
    :func:`aliased_series` (aliases are read once, never merged); ``None`` when none is present or
    any chosen series is invalid."""
    chosen: dict[str, set[frozenset[tuple[str, str]]]] = {}
    for name, labels, _ in aliased_series(idx, tuple(b + "_bucket" for b in bases), drop="le"):
        chosen.setdefault(name[: -len("_bucket")], set()).add(_label_key(labels, "le"))
    parts: list[Histogram] = []
    for base, keys in chosen.items():
        def mine(labels: Labels, keys: set[frozenset[tuple[str, str]]] = keys) -> bool:
            return _label_key(labels, "le") in keys
        h = idx.histogram(base, mine, scale=scale)
        if h is None:
            return None
        parts.append(h)
    return merge(parts)
