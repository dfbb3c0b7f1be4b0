"""The two baselines added in v2: llm-d's queue-guard formula and the WVA-style saturation analyzer."""

from __future__ import annotations

from warmscale.benchmarks.sim.policies import LlmdQueueGuardPolicy, WvaSaturationPolicy


def _samples(pol, rows, router=0.0, pending=0):  # type: ignore[no-untyped-def]
    pol.prom.samples = [{"waiting": w, "running": r, "kv": kv, "util": 0.0} for w, r, kv in rows]
    pol.prom.router_queue = router
    pol.prom.pending = pending


def test_queue_guard_formula() -> None:
    pol = LlmdQueueGuardPolicy(32)
    _samples(pol, [(0, 16, 0.1), (0, 16, 0.1)])
    assert pol.formula(current=2) == 2.0  # running/16
    _samples(pol, [(3, 16, 0.1), (2, 16, 0.1)], router=4)
    assert pol.formula(current=2) == 9.0  # queue/1: engines' waiting + the router's held requests
    _samples(pol, [(3, 16, 0.1), (2, 16, 0.1)], router=4, pending=5)
    assert pol.formula(current=3) == 4.0  # pending pods discounted, floored at the current replicas
    assert pol.formula(current=6) == 6.0


def test_wva_saturation_steps_one_replica_and_scales_down_only_if_n_minus_1_fit() -> None:
    pol = WvaSaturationPolicy(10)
    _samples(pol, [(0, 10, 0.85), (0, 10, 0.79)])
    assert pol.analyze(current=2) == 3  # mean KV 0.82 >= 0.8: +1
    _samples(pol, [(6, 10, 0.2), (5, 10, 0.2)])
    assert pol.analyze(current=2) == 3  # mean queue 5.5 >= 5: +1
    _samples(pol, [(0, 5, 0.3), (0, 5, 0.3), (0, 5, 0.3)])
    assert pol.analyze(current=3) == 2  # 0.9 of KV over 2 replicas = 0.45 < 0.8 and no queue
    _samples(pol, [(0, 5, 0.6), (0, 5, 0.6)])
    assert pol.analyze(current=2) == 2  # 1.2 over 1 replica would saturate: hold
    _samples(pol, [(20, 5, 0.9)] * 10)
    assert pol.analyze(current=10) == 10  # capped at maxReplicas
