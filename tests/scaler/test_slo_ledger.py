"""SLO attainment windows (pure, injected clock)."""

from __future__ import annotations

import pytest

from warmscale.scaler.slo_ledger import SloLedger, within
from warmscale.signals.histogram import Histogram


def hist(counts: dict[float, float]) -> Histogram:
    cum, out = 0.0, []
    for le in (0.5, 1.0, 2.0, 4.0, float("inf")):
        cum += counts.get(le, 0.0)
        out.append((le, cum))
    return Histogram.from_buckets(out, sum_=0.0, count=cum)


def test_within_interpolates_and_counts_the_inf_bucket_outside() -> None:
    assert within(hist({0.5: 8, 1.0: 2}), 1.0) == (10.0, 10.0)
    ok, total = within(hist({1.0: 10, 2.0: 10}), 1.5)  # half of the (1, 2] bucket
    assert total == 20.0 and ok == pytest.approx(15.0)
    assert within(hist({float("inf"): 5}), 30.0) == (0.0, 5.0)


def test_windows_roll_and_say_unknown_when_empty() -> None:
    led = SloLedger()
    assert led.ratio(0.0, "5m") is None
    led = led.add(1000.0, 90.0, 100.0)
    led = led.add(1100.0, 0.0, 100.0)  # a bad minute
    assert led.ratio(1100.0, "5m") == pytest.approx(0.45)
    # 6 minutes later the 5-minute window has forgotten both; the hour and the day have not
    assert led.ratio(1460.0, "5m") is None
    assert led.ratio(1460.0, "1h") == pytest.approx(0.45)
    led = led.add(1460.0, 100.0, 100.0)
    assert led.ratio(1460.0, "5m") == pytest.approx(1.0) and led.ratio(1460.0, "1d") == pytest.approx(190 / 300)


def test_a_day_costs_a_few_hundred_cells() -> None:
    led = SloLedger()
    for t in range(0, 2 * 86400, 5):
        led = led.add(float(t), 1.0, 1.0)
    assert [len(r) for r in led.rings] <= [31, 61, 289]
    with pytest.raises(KeyError):
        led.ratio(0.0, "1w")
