"""HPA arithmetic and behaviour, KEDA activation and cooldown, Knative KPA panic mode."""

from __future__ import annotations

from warmscale.scaler.hpa import hpa_replicas, metric_value_for
from warmscale.simulation.actuation import Hpa, HpaBehavior, Keda, KedaConfig, Kpa, KpaConfig


def test_hpa_tolerance_band() -> None:
    assert hpa_replicas(10.5, 1.0, 10, 0.1) == 10  # ratio 1.05: inside +-10%, no change
    assert hpa_replicas(11.5, 1.0, 10, 0.1) == 12  # ratio 1.15: ceil(11.5)
    assert hpa_replicas(9.2, 1.0, 10, 0.1) == 10
    assert hpa_replicas(8.5, 1.0, 10, 0.1) == 9


def test_warmscale_metric_lands_the_hpa_on_the_desired_count() -> None:
    for current in range(1, 30):
        for desired in range(1, 40):
            value = metric_value_for(desired, current, 1.0, 0.1)
            got = hpa_replicas(value, 1.0, current, 0.1)
            if desired > current:
                assert got >= desired  # a scale-up inside the band overshoots a little
            elif desired < current:
                assert got <= current and got >= desired
            else:
                assert got == current


def test_hpa_scale_up_rate_limit_default_policies() -> None:
    hpa = Hpa(1, 100)
    assert hpa.sync(0.0, 2, 20) == 6  # max(100% -> 4, +4 pods -> 6)
    assert hpa.sync(15.0, 6, 20) == 12  # next period: max(12, 10)


def test_hpa_scale_down_stabilisation_keeps_the_window_max() -> None:
    hpa = Hpa(1, 100)
    assert hpa.sync(0.0, 8, 8) == 8
    assert hpa.sync(15.0, 8, 2) == 8  # 8 was recommended within 300 s
    assert hpa.sync(299.0, 8, 2) == 8
    assert hpa.sync(301.0, 8, 2) == 2


def test_hpa_bounds_and_utilisation_metric() -> None:
    hpa = Hpa(2, 5, HpaBehavior(scale_down_stabilization_s=0))
    assert hpa.raw_utilization(0.95, 0.8, 4, 4) == 5  # ceil(4 x 1.1875)
    assert hpa.raw_utilization(0.85, 0.8, 4, 4) == 4  # within tolerance
    assert hpa.sync(0.0, 4, 9) == 5  # maxReplicas
    assert hpa.sync(15.0, 5, 0) == 2  # minReplicas


def test_hpa_sync_period() -> None:
    hpa = Hpa(1, 10, phase_s=3.0)
    assert not hpa.due(2.0) and hpa.due(3.0)
    hpa.sync(3.0, 1, 1)
    assert not hpa.due(17.9) and hpa.due(18.0)


def test_keda_push_activation_is_immediate_and_inactive_pushes_are_ignored() -> None:
    keda = Keda(KedaConfig(min_replicas=0))
    assert keda.push(5.0, True, 0) == 1
    assert keda.push(6.0, False, 1) == 1


def test_keda_cooldown_to_zero_only_after_the_period() -> None:
    keda = Keda(KedaConfig(min_replicas=0, cooldown_period_s=300.0, polling_interval_s=30.0))
    assert keda.poll(0.0, True, 3) == 3
    assert not keda.poll_due(29.0) and keda.poll_due(30.0)
    assert keda.poll(30.0, False, 3) == 3
    assert keda.poll(299.0, False, 3) == 3
    assert keda.poll(300.0, False, 3) == 0
    assert keda.poll(330.0, True, 0) == 1  # activation on a poll


def test_keda_never_scales_to_zero_with_min_replicas() -> None:
    keda = Keda(KedaConfig(min_replicas=1))
    assert keda.poll(1000.0, False, 2) == 2


def test_keda_activation_threshold_is_strict() -> None:
    keda = Keda(KedaConfig(activation_threshold=5.0))
    assert not keda.is_active_value(5.0)
    assert keda.is_active_value(5.01)


def test_kpa_panics_on_a_burst_and_does_not_scale_down_while_panicking() -> None:
    kpa = Kpa(KpaConfig(max_replicas=50))
    for t in range(60):
        kpa.record(float(t), 70.0)
    assert kpa.decide(60.0, 1, 1) == 1  # 70 / (0.7 x 100) = 1
    for t in range(60, 66):
        kpa.record(float(t), 700.0)
    n = kpa.decide(66.0, 1, 1)
    assert n == 10  # panic window average 700 -> 10 pods (>= 2x ready)
    for t in range(66, 100):
        kpa.record(float(t), 0.0)
    assert kpa.decide(100.0, 10, 10) == 10  # still panicking: hold
    for t in range(100, 200):
        kpa.record(float(t), 0.0)
    assert kpa.decide(200.0, 10, 10) == 5  # panic over; scale-down rate 2x per decision
