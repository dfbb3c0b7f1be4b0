"""Validated reads from a :class:`~signals.parsing.MetricIndex`, shared by the engine modules."""

from __future__ import annotations

import math
from collections.abc import Callable

from warmscale.signals.histogram import Histogram
from warmscale.signals.parsing import Labels, MetricIndex, PayloadError

Where = Callable[[Labels], bool] | None

# A KV fraction a hair above 1 is rounding; clamp it. Anything beyond is a broken exporter.
_FRACTION_SLACK = 1e-6


def _check_gauge(name: str, labels: Labels, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        raise PayloadError(f"{name}{{{shown}}} = {value}: a gauge must be finite and non-negative")


def _gauge_values(idx: MetricIndex, name: str | None, where: Where) -> list[float] | None:
    """The values of a gauge's series, checked; ``None`` when absent. NaN/Inf/negative raise
    :class:`PayloadError`."""
    if name is None:
        return None
    got = idx.series(name, where)
    if not got:
        return None
    for labels, v in got:
        _check_gauge(name, labels, v)
    return [v for _, v in got]


def gauge_sum(idx: MetricIndex, name: str | None, where: Where = None) -> float | None:
    """Sum over series of a gauge; ``None`` when absent. NaN/Inf/negative raise :class:`PayloadError`."""
    values = _gauge_values(idx, name, where)
    return math.fsum(values) if values is not None else None


def gauge_max(idx: MetricIndex, name: str | None, where: Where = None) -> float | None:
    """Maximum over series of a gauge; ``None`` when absent."""
    values = _gauge_values(idx, name, where)
    return max(values) if values is not None else None


def gauge_mean(idx: MetricIndex, name: str | None, where: Where = None) -> float | None:
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
    """Sum over series of the first of ``names`` present (aliases are read once, never added).
    A counter with a NaN/Inf/negative series is unusable: ``None``."""
    name = idx.first_present(*names)
    if name is None:
        return None
    got = idx.series(name, where)
    if not got or any(not math.isfinite(v) or v < 0 for _, v in got):
        return None
    return math.fsum(v for _, v in got)


def required(value: float | None, what: str, names: tuple[str, ...]) -> float:
    if value is None:
        raise PayloadError(f"missing required metric for {what}: none of {', '.join(names)} in the payload")
    return value


def first_histogram(idx: MetricIndex, *bases: str, scale: float = 1.0) -> Histogram | None:
    """The histogram of the first of ``bases`` that has buckets (aliases are read once, never merged);
    ``None`` when none is present or its series are invalid."""
    for base in bases:
        if base + "_bucket" in idx:
            return idx.histogram(base, scale=scale)
    return None
