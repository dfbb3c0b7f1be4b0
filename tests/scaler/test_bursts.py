"""Burst statistics (scaler/bursts.py): table tests with an injected clock."""

from __future__ import annotations

import pytest

from warmscale.scaler.bursts import (
    CLOSE_GRACE_S,
    WARM_PRIOR_SHARE,
    BurstMemory,
    BurstStats,
    burst_stats,
    p95,
    record,
    warm_and_cold,
)
from warmscale.scaler.state import ScalerState


def replay(series: list[tuple[float, int, int]], window_s: float = 90.0) -> BurstMemory:
    """(time, need, provisioned) per decision -> the memory."""
    mem = BurstMemory()
    for t, need, prov in series:
        mem = record(mem, need, prov, window_s, t)
    return mem


def steps(*segments: tuple[float, int, int], dt: float = 1.0, start: float = 0.0) -> list[tuple[float, int, int]]:
    """Piecewise-constant (duration, need, provisioned) segments sampled every dt."""
    out, t = [], start
    for dur, need, prov in segments:
        end = t + dur
        while t < end - 1e-9:
            out.append((t, need, prov))
            t += dt
    return out


def test_flat_need_has_no_burst() -> None:
    mem = replay(steps((600, 2, 2)))
    st = burst_stats(mem, 600, namespace="n", name="w", window_s=90, cold_s=510, fleet=2)
    assert st.episodes == {} and st.rise_p95 == 0 and st.span_s == pytest.approx(600)


def test_a_burst_opens_per_level_and_lasts_while_the_need_stays_up() -> None:
    # need 2 -> 5 for 300 s (the scaler provisions 5 a tick later), back to 2
    mem = replay(steps((300, 2, 2), (300, 5, 5), (300, 2, 5)))
    st = burst_stats(mem, 900, namespace="n", name="w", window_s=90, cold_s=510, fleet=5)
    assert sorted(st.episodes) == [1, 2, 3]
    for k in (1, 2, 3):
        assert st.episodes[k] == (pytest.approx(299),)
    assert st.rise_p95 == 3 and st.rise_share_p95 == pytest.approx(1.5)  # 3 over a fleet of 2


def test_a_rise_the_burst_hold_still_covers_is_no_burst() -> None:
    # the scaler still holds 5 (burst hold) when the need comes back to 5: nothing new to start
    mem = replay(steps((100, 2, 2), (100, 5, 5), (300, 2, 5), (100, 5, 5), (60, 2, 5)))
    st = burst_stats(mem, 660, namespace="n", name="w", window_s=90, cold_s=510, fleet=5)
    assert [len(v) for v in st.episodes.values()] == [1, 1, 1]


def test_a_short_dip_does_not_split_a_burst_but_a_long_one_does() -> None:
    dip = CLOSE_GRACE_S / 2
    one = replay(steps((100, 1, 1), (100, 2, 2), (dip, 1, 2), (100, 2, 2), (100, 1, 1)))
    assert len(burst_stats(one, 500, namespace="n", name="w", window_s=90, cold_s=510, fleet=1).episodes[1]) == 1
    # after a long gap with provisioned back at 1 the next rise is a second burst
    two = replay(steps((100, 1, 1), (100, 2, 2), (200, 1, 1), (100, 2, 2), (100, 1, 1)))
    assert len(burst_stats(two, 600, namespace="n", name="w", window_s=90, cold_s=510, fleet=1).episodes[1]) == 2


def test_a_ramp_the_look_ahead_provisioned_early_is_no_burst_but_a_followed_one_is() -> None:
    # +1 every 120 s. Provisioned one step ahead (the look-ahead): the need never rises above it.
    ahead, followed, t = [], [], 0.0
    for level in range(1, 6):
        for _ in range(120):
            ahead.append((t, level, level + 1))
            followed.append((t, level, level))
            t += 1
    kw = {"namespace": "n", "name": "w", "window_s": 60.0, "cold_s": 510.0, "fleet": 5}
    assert burst_stats(replay(ahead), t, **kw).episodes == {}  # type: ignore[arg-type]
    # followed only when it is there: one level-1 burst from the first step on (the need never
    # falls back below it), lasting the rest of the ramp
    assert burst_stats(replay(followed), t, **kw).episodes == {1: (479.0,)}  # type: ignore[arg-type]


def test_open_burst_counts_with_its_duration_so_far() -> None:
    mem = replay(steps((100, 1, 1), (200, 3, 3)))
    st = burst_stats(mem, 300, namespace="n", name="w", window_s=90, cold_s=510, fleet=3)
    assert st.episodes[1] == (pytest.approx(199),) and st.rise_p95 == 2


def test_memory_round_trips_through_the_state_and_old_states_read() -> None:
    mem = replay(steps((100, 1, 1), (200, 3, 3), (100, 1, 3)))
    state = ScalerState(bursts=mem)
    assert ScalerState.from_dict(state.to_dict()) == state
    old = state.to_dict()
    del old["bursts"]  # a state stored before burst memory existed
    assert ScalerState.from_dict(old).bursts == BurstMemory()


def test_stats_round_trip_and_old_or_newer_shapes() -> None:
    st = BurstStats("n", "w", 5.0, window_s=90, cold_s=510, span_s=3600, fleet=3, rise_p95=2, rise_share_p95=1.0,
                    episodes={1: (300.0, 120.0), 2: (300.0,)})
    assert BurstStats.from_dict(st.to_dict()) == st
    minimal = BurstStats.from_dict({"namespace": "n", "name": "w", "updated_at": 1})
    assert minimal.version == 0 and minimal.episodes == {} and minimal.span_s == 0
    newer = {**st.to_dict(), "version": 9, "something_new": [1, 2], "episodes": {"1": [10], "x": [5]}}
    assert BurstStats.from_dict(newer).episodes == {1: (10.0,)}


def test_helpers() -> None:
    assert p95([]) == 0 and p95([1, 2, 3]) == 3 and p95([float(i) for i in range(1, 101)]) == 95
    # unmeasured warm start: the prior share of the cold one (no placeholder held yet to measure it)
    assert warm_and_cold({}, 120) == (pytest.approx(120 * WARM_PRIOR_SHARE), 120)
    assert warm_and_cold({"cold": 510}, 120) == (pytest.approx(510 * WARM_PRIOR_SHARE), 510)
    assert warm_and_cold({"placeholder+staged": 90, "cold": 510}, 120) == (90, 510)
    assert warm_and_cold({"staged": 185}, 120) == (185, 185)
