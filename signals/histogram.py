"""Cumulative Prometheus histograms: deltas between scrapes and quantiles (histogram_quantile)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from operator import add, itemgetter, sub
from typing import Any

_BOUND, _COUNT = itemgetter(0), itemgetter(1)  # of a (bound, cumulative count) bucket


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``buckets`` are (upper bound, cumulative count), ascending, ending
    with ``+Inf`` whose count equals ``count``."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    @classmethod
    def from_buckets(cls, buckets: Iterable[tuple[float, float]], sum_: float, count: float | None = None) -> Histogram:
        merged: dict[float, float] = {}
        for le, c in buckets:
            merged[le] = merged.get(le, 0.0) + c
        ordered = tuple(sorted(merged.items()))
        if not ordered or not math.isinf(ordered[-1][0]):
            total = count if count is not None else (ordered[-1][1] if ordered else 0.0)
            ordered = (*ordered, (math.inf, total))
        total = ordered[-1][1] if count is None else count
        return cls(buckets=ordered, sum=sum_, count=total)

    def is_valid(self) -> bool:
        """Finite, non-negative, monotonic cumulative counts."""
        prev = 0.0
        for _, c in self.buckets:
            if not math.isfinite(c) or c < prev:
                return False
            prev = c
        return math.isfinite(self.sum) and math.isfinite(self.count) and self.count >= 0

    def __add__(self, other: Histogram) -> Histogram:
        # One pass: sum while checking the layouts agree (the common case); else the union of bounds.
        a, b = self.buckets, other.buckets
        if len(a) == len(b):
            summed = []
            for (le, c), (ole, oc) in zip(a, b):  # noqa: B905 - equal lengths checked above
                if le != ole and le is not ole:  # tuple equality semantics (identity first)
                    break
                summed.append((le, c + oc))
            else:
                return Histogram(buckets=tuple(summed), sum=self.sum + other.sum, count=self.count + other.count)
        return _add_mismatched(self, other)

    def bounds(self) -> tuple[float, ...]:
        return tuple(le for le, _ in self.buckets)

    def delta(self, older: Histogram) -> Histogram | None:
        """Observations made between ``older`` and this histogram, or ``None`` after a counter reset
        (the process restarted) or a change of bucket layout."""
        a, b = self.buckets, older.buckets
        if len(a) != len(b) or self.count < older.count:
            return None
        out = []
        for (le, c), (ole, oc) in zip(a, b):  # noqa: B905 - equal lengths checked above
            # A layout change (bounds compared as tuples compare them: identity, then ==) or a reset.
            if (le is not ole and le != ole) or c < oc:
                return None
            out.append((le, c - oc))
        return Histogram(buckets=tuple(out), sum=max(0.0, self.sum - older.sum), count=self.count - older.count)

    def quantile(self, q: float) -> float | None:
        """The q-quantile, interpolated linearly within its bucket as PromQL's histogram_quantile;
        ``None`` without observations.

        A quantile in the +Inf bucket is *above the top finite bound* (:meth:`top_bound`): it returns
        ``math.inf``, never the bound itself (PromQL's answer), nor 0 when no finite bucket exists. Real
        layouts top out at 10 s (vLLM <= 0.6, Ray) or 30 s (SGLang <= 0.4): under an overload most first
        tokens can be slower than that, and a finite answer would hide an SLO breach."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank and c > lower_count:
                if math.isinf(le):
                    return math.inf
                if le <= 0:
                    return le
                return lower_bound + (le - lower_bound) * (rank - lower_count) / (c - lower_count)
            lower_bound, lower_count = (le if not math.isinf(le) else lower_bound), c
        return math.inf

    def top_bound(self) -> float | None:
        """The largest finite bucket bound (what a quantile of ``inf`` is known to exceed); ``None``
        for a histogram with only the +Inf bucket."""
        finite = [le for le, _ in self.buckets if math.isfinite(le)]
        return max(finite) if finite else None

    def fraction_above(self, threshold: float) -> float | None:
        """Share of observations above ``threshold`` (interpolated within its bucket)."""
        if self.count <= 0:
            return None
        lower_bound, lower_count = 0.0, 0.0
        for le, c in self.buckets:
            if math.isinf(le) or le >= threshold:
                if math.isinf(le):
                    below = lower_count
                else:
                    width = le - lower_bound
                    frac = 1.0 if width <= 0 else (threshold - lower_bound) / width
                    below = lower_count + (c - lower_count) * max(0.0, min(1.0, frac))
                return max(0.0, 1.0 - below / self.count)
            lower_bound, lower_count = le, c
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"b": [[_enc(le), c] for le, c in self.buckets], "s": self.sum, "c": self.count}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Histogram:
        return cls(buckets=tuple((_dec(le), float(c)) for le, c in d["b"]), sum=float(d["s"]), count=float(d["c"]))


def _add_mismatched(a: Histogram, b: Histogram) -> Histogram:
    """Sum of two histograms with different layouts, on the union of bounds (step interpolation)."""
    bounds = sorted(set(a.bounds()) | set(b.bounds()))

    def at(h: Histogram, le: float) -> float:
        best = 0.0
        for ble, c in h.buckets:
            if ble <= le:
                best = c
        return best

    return Histogram(
        buckets=tuple((le, at(a, le) + at(b, le)) for le in bounds), sum=a.sum + b.sum, count=a.count + b.count
    )


def merge(histograms: Iterable[Histogram]) -> Histogram | None:
    """The sum of ``histograms`` (``None`` for none): ``h1 + h2 + ...`` folded left to right. When every
    layout is the first's (the usual case: one engine's buckets) the counts are summed column by
    column in that same order, without the intermediate histograms: the same floats, several times
    faster on the scaler's windows of a few hundred deltas."""
    hs = list(histograms)
    if not hs:
        return None
    first = hs[0]
    if len(hs) == 1:
        return first
    rows = [h.buckets for h in hs]
    width = len(first.buckets)
    for row in rows:
        if len(row) != width:
            return _fold(hs)
    n = len(hs)
    bounds = [le for le, _ in first.buckets]
    # Per bucket, every histogram's bound: equal to the first's as ``+`` compares them (identity, then ==).
    for le, column in zip(bounds, zip(*[map(_BOUND, row) for row in rows], strict=True), strict=True):
        if column.count(le) != n:
            return _fold(hs)
    counts = [reduce(add, column) for column in zip(*[map(_COUNT, row) for row in rows], strict=True)]
    return Histogram(buckets=tuple(zip(bounds, counts, strict=True)), sum=reduce(add, [h.sum for h in hs]),
                     count=reduce(add, [h.count for h in hs]))


def _fold(histograms: list[Histogram]) -> Histogram:
    out = histograms[0]
    for h in histograms[1:]:
        out = out + h
    return out


def _enc(le: float) -> float | str:
    return "+Inf" if math.isinf(le) else le


def _dec(le: float | str) -> float:
    return math.inf if le == "+Inf" else float(le)


# Whole-number counts up to this are summed and differenced exactly in binary64 (every integer up to
# 2**53 is representable, and two counts up to 2**52 sum to at most 2**53); above it a sum could round.
_EXACT_COUNT_MAX = float(2**52)


@dataclass(frozen=True)
class WindowSum:
    """The bucket counts of a sliding window of histograms with one layout, carried from one decision
    to the next: the next window is these counts minus the entries that expired plus the new ones,
    instead of a merge of every entry again (the TTFT window holds a minute of entries; this is the
    scaler's largest per-decision cost otherwise).

    Exact, not approximate: deltas of cumulative counters are whole numbers, and whole numbers below
    ``_EXACT_COUNT_MAX`` add and subtract without rounding in any order, so the counts are the ones
    :func:`merge` folds. An entry with a fractional count, another layout or an oversized count cannot
    be carried: :func:`slide` then merges afresh and carries nothing."""

    of: tuple[Any, ...]  # the window (its entries, in order) these are the counts of; compared by identity
    bounds: tuple[float, ...]
    counts: tuple[float, ...]


def _carriable(h: Histogram, bounds: tuple[float, ...]) -> bool:
    return (len(h.buckets) == len(bounds) and tuple(map(_BOUND, h.buckets)) == bounds
            and all(c.is_integer() and 0.0 <= c <= _EXACT_COUNT_MAX for c in map(_COUNT, h.buckets)))


def slide(carry: WindowSum | None, previous: tuple[tuple[float, Histogram], ...],
          kept: tuple[tuple[float, Histogram], ...], expired: Iterable[Histogram],
          added: Iterable[Histogram]) -> tuple[Histogram | None, WindowSum | None]:
    """``merge`` of ``kept``'s histograms, and the carry for the next window.

    ``previous`` is the last window (``carry`` is used only if it is of exactly that tuple); ``kept``
    is ``previous`` without ``expired`` plus ``added``, in that order. The ``sum`` and ``count`` fields
    are folded over ``kept`` as :func:`merge` folds them (a sum of seconds is no whole number)."""
    if not kept:
        return None, None
    hs = [h for _, h in kept]
    counts: list[float] | None = None
    bounds: tuple[float, ...] = ()
    if carry is not None and carry.of is previous:
        bounds = carry.bounds
        counts = list(carry.counts)
        for h in expired:  # carried entries: checked when they were added
            counts = list(map(sub, counts, map(_COUNT, h.buckets)))
        for h in added:
            if not _carriable(h, bounds):
                counts = None
                break
            counts = list(map(add, counts, map(_COUNT, h.buckets)))
        if counts is not None and max(counts) > _EXACT_COUNT_MAX:
            counts = None
    if counts is None:
        window = merge(hs)
        assert window is not None
        bounds = window.bounds()
        if not all(_carriable(h, bounds) for h in hs):
            return window, None
        return window, WindowSum(of=kept, bounds=bounds, counts=tuple(map(_COUNT, window.buckets)))
    window = Histogram(buckets=tuple(zip(bounds, counts, strict=True)), sum=reduce(add, [h.sum for h in hs]),
                       count=reduce(add, [h.count for h in hs]))
    return window, WindowSum(of=kept, bounds=bounds, counts=tuple(counts))
