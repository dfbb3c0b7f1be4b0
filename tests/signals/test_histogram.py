"""Histogram deltas and quantiles against hand-computed values (PromQL histogram_quantile semantics)."""

from __future__ import annotations

import math
import random

import pytest

from warmscale.signals.engines import parse_payload
from warmscale.signals.histogram import Histogram, WindowSum, merge, slide

INF = math.inf


def h(*buckets: tuple[float, float], s: float = 0.0) -> Histogram:
    return Histogram.from_buckets(buckets, s)


# 40 observations: 10 <= 0.1 s, 20 in (0.1, 0.5], 10 in (0.5, 1], none above.
BASE = h((0.1, 10), (0.5, 30), (1.0, 40), (INF, 40), s=14.0)


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.25, 0.1),  # rank 10: top of the first bucket
        (0.5, 0.3),  # rank 20: 0.1 + 0.4 * (20 - 10) / 20
        (0.75, 0.5),  # rank 30: top of the second bucket
        (0.95, 0.9),  # rank 38: 0.5 + 0.5 * (38 - 30) / 10
        (0.1, 0.04),  # rank 4: 0 + 0.1 * 4 / 10
    ],
)
def test_quantile_interpolates_like_histogram_quantile(q: float, expected: float) -> None:
    assert BASE.quantile(q) == pytest.approx(expected)


def test_quantile_in_inf_bucket_is_above_the_top_bound() -> None:
    """Issue 20 item 13: not the top finite bound (PromQL's answer), nor 0 without a finite bucket."""
    tail = h((0.1, 1), (1.0, 2), (INF, 10))
    assert tail.quantile(0.99) == INF and tail.top_bound() == 1.0
    only_inf = h((INF, 10))
    assert only_inf.quantile(0.5) == INF and only_inf.top_bound() is None
    assert tail.quantile(0.2) == 1.0  # rank 2: still the finite bucket


def test_quantile_without_observations_is_none() -> None:
    assert h((0.1, 0), (INF, 0)).quantile(0.5) is None


def test_delta_between_scrapes() -> None:
    later = h((0.1, 12), (0.5, 32), (1.0, 50), (INF, 52), s=30.0)
    d = later.delta(BASE)
    assert d is not None
    assert d.buckets == ((0.1, 2), (0.5, 2), (1.0, 10), (INF, 12))
    assert (d.count, d.sum) == (12, 16.0)
    # 12 new observations (2 <= 0.1, 8 in (0.5, 1], 2 above 1): the median (rank 6) is in (0.5, 1]:
    # 0.5 + 0.5 * (6 - 2) / 8
    assert d.quantile(0.5) == pytest.approx(0.75)
    # p95: rank 11.4 lands in the +Inf bucket -> above the top bound (1 s)
    assert d.quantile(0.95) == INF
    # share above 0.75 s: below = 2 + 8 * 0.5 = 6 of 12
    assert d.fraction_above(0.75) == pytest.approx(0.5)


def test_delta_after_restart_or_layout_change_is_none() -> None:
    restarted = h((0.1, 1), (0.5, 2), (1.0, 2), (INF, 2))
    assert restarted.delta(BASE) is None
    relaid = h((0.2, 20), (1.0, 45), (INF, 45))
    assert relaid.delta(BASE) is None


def test_no_change_gives_empty_window() -> None:
    d = BASE.delta(BASE)
    assert d is not None and d.count == 0 and d.quantile(0.9) is None


def test_merge_and_fraction_above() -> None:
    m = merge([BASE, BASE])
    assert m is not None and m.count == 80 and m.quantile(0.5) == pytest.approx(0.3)
    assert BASE.fraction_above(0.5) == pytest.approx(0.25)
    assert merge([]) is None


def _vllm(ttft: dict[str, float], count: float, total: float) -> str:
    lines = ["vllm:num_requests_running 0", "vllm:num_requests_waiting 0",
             "# TYPE vllm:time_to_first_token_seconds histogram"]
    for le, c in ttft.items():
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}"}} {c}')
    lines += [f'vllm:time_to_first_token_seconds_count{{engine="0"}} {count}',
              f'vllm:time_to_first_token_seconds_sum{{engine="0"}} {total}']
    return "\n".join(lines) + "\n"


def test_windowed_quantile_from_two_parsed_scrapes() -> None:
    """Lifetime buckets say 'fast'; the last window (all new observations at 1-2.5 s) says 'slow'."""
    first = parse_payload(_vllm({"0.25": 900, "1.0": 990, "2.5": 1000, "+Inf": 1000}, 1000, 200.0))
    second = parse_payload(_vllm({"0.25": 900, "1.0": 990, "2.5": 1020, "+Inf": 1020}, 1020, 236.0))
    assert first.ttft is not None and second.ttft is not None
    assert second.ttft.quantile(0.95) == pytest.approx(0.25 + 0.75 * (969 - 900) / 90)
    window = second.ttft.delta(first.ttft)
    assert window is not None and window.count == 20
    assert window.quantile(0.5) == pytest.approx(1.0 + 1.5 * 10 / 20)
    assert window.sum == pytest.approx(36.0)


def _folded(hs: list[Histogram]) -> Histogram | None:
    """merge as first written: h1 + h2 + ... one addition at a time."""
    out: Histogram | None = None
    for x in hs:
        out = x if out is None else out + x
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_merge_equals_the_pairwise_fold_exactly(seed: int) -> None:
    import random

    rng = random.Random(seed)
    layouts = [(0.1, 0.5, 1.0, INF), (0.1, 0.25, 0.5, 1.0, INF), (0.5, 1.0, INF)]
    for trial in range(200):
        mixed = trial % 4 == 0  # one in four windows mixes layouts (the union-of-bounds path)
        hs = []
        for _ in range(rng.randint(1, 40)):
            bounds = rng.choice(layouts) if mixed else layouts[0]
            cum, buckets = 0.0, []
            for le in bounds:
                cum += rng.random() * 10.0  # fractional counts: summation order shows in the last bits
                buckets.append((le, cum))
            hs.append(Histogram.from_buckets(buckets, rng.random() * 50.0))
        assert merge(hs) == _folded(hs)
        assert merge(iter(hs)) == _folded(hs)  # a generator, as the scaler passes
    assert merge([BASE]) is BASE


_SLIDE_BOUNDS = (0.05, 0.1, 0.5, 1.0, 5.0, math.inf)


def _delta(rng: random.Random, *, fractional: bool = False, bounds: tuple[float, ...] = _SLIDE_BOUNDS) -> Histogram:
    counts, c = [], 0.0
    for _ in bounds:
        c += rng.randint(0, 4) + (0.5 if fractional else 0.0)
        counts.append(c)
    return Histogram(buckets=tuple(zip(bounds, counts, strict=True)), sum=rng.random() * c, count=c)


@pytest.mark.parametrize("seed", range(40))
def test_a_carried_window_is_the_merge_of_its_entries_exactly(seed: int) -> None:
    """slide() carries the window's counts from one decision to the next; at every step its window is
    merge() of the kept entries, field for field (an odd entry -- fractional counts, another layout --
    drops the carry and the window is merged afresh; the clock may even step back)."""
    rng = random.Random(seed)
    window_s = rng.choice([3.0, 10.0, 60.0])
    previous: tuple[tuple[float, Histogram], ...] = ()
    carry: WindowSum | None = None
    now, carried = 0.0, 0
    for _ in range(120):
        now += rng.choice([1.0, 1.0, 0.5, 7.0, -2.0])
        new = []
        for _ in range(rng.choice([0, 1, 1, 2])):
            odd = rng.random()
            h = (_delta(rng, fractional=True) if odd < 0.01 else
                 _delta(rng, bounds=(0.1, 1.0, math.inf)) if odd < 0.02 else _delta(rng))
            new.append((now, h))
        since = now - window_s
        kept = tuple(e for e in (*previous, *new) if e[0] >= since)
        carried += carry is not None and carry.of is previous
        window, carry = slide(carry, previous, kept, expired=(h for t, h in previous if t < since),
                              added=(h for t, h in new if t >= since))
        assert window == merge(h for _, h in kept)
        previous = kept
    assert carried >= 10  # the carry was used, not only rebuilt


def test_a_carry_of_another_window_is_not_used() -> None:
    rng = random.Random(0)
    a, b = (1.0, _delta(rng)), (2.0, _delta(rng))
    _, carry = slide(None, (), (a,), expired=(), added=(a[1],))
    assert carry is not None
    other = (a,)  # equal, but not the window the carry is of
    window, _ = slide(carry, other, (a, b), expired=(), added=(b[1],))
    assert window == merge([a[1], b[1]])
    stale = WindowSum(of=other, bounds=carry.bounds, counts=tuple(0.0 for _ in carry.counts))
    window, _ = slide(stale, (a,), (a, b), expired=(), added=(b[1],))
    assert window == merge([a[1], b[1]])
