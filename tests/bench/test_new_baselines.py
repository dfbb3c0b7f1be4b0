"""The baselines as their users run them (issue 21, requirement 2): llm-d's queue guard on the
gateway's flow-control queue, WVA's saturation triggers, KServe's per-model KPA target and a
Dynamo-style throughput planner; the gateway that holds requests while every endpoint is saturated."""

from __future__ import annotations

from warmscale.benchmarks.sim.cluster import GATEWAY_QUEUE_DEPTH, Cluster
from warmscale.benchmarks.sim.conditions import Conditions
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, Request
from warmscale.benchmarks.sim.policies import (
    DynamoPlannerPolicy,
    Holt,
    LlmdQueueGuardPolicy,
    WvaSaturationPolicy,
    kpa_scale_target,
    profiled_throughput,
)
from warmscale.benchmarks.sim.runner import TUNING, reactive_policy
from warmscale.warmpool.startup_model import PROFILES

ENGINE = ENGINE_PROFILES["8b-h100"]


def _samples(pol, rows, router=0.0, pending=0):  # type: ignore[no-untyped-def]
    pol.prom.samples = [{"waiting": w, "running": r, "kv": kv, "util": 0.0} for w, r, kv in rows]
    pol.prom.names = [f"pod-{i}" for i in range(len(rows))]
    pol.prom.router_queue = router
    pol.prom.pending = pending


def test_queue_guard_reads_the_gateways_flow_control_queue() -> None:
    pol = LlmdQueueGuardPolicy(32)
    _samples(pol, [(0, 16, 0.1), (0, 16, 0.1)])
    assert pol.formula(current=2) == 2.0  # running/16
    _samples(pol, [(3, 16, 0.1), (2, 16, 0.1)], router=4)
    assert pol.formula(current=2) == 4.0  # queue/1: the gateway's held requests only, not the engines' waiting
    _samples(pol, [(30, 16, 0.1), (20, 16, 0.1)], router=0)
    assert pol.formula(current=2) == 2.0  # engines' queues alone do not count
    _samples(pol, [(3, 16, 0.1), (2, 16, 0.1)], router=9, pending=5)
    assert pol.formula(current=3) == 4.0  # pending pods discounted, floored at the current replicas
    assert pol.formula(current=6) == 6.0


def _wva(pol: WvaSaturationPolicy, rows, t: float) -> None:  # type: ignore[no-untyped-def]
    _samples(pol, rows)
    pol.record(t)


def test_wva_scales_up_on_spare_capacity_under_its_triggers() -> None:
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(0, 10, 0.75), (0, 10, 0.75)], 0.0)
    assert pol.analyze(current=2, pending=0) == 3  # mean KV spare 0.05 < 0.1 (no replica saturated yet)
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(3, 10, 0.2), (3, 10, 0.2)], 0.0)
    assert pol.analyze(current=2, pending=0) == 3  # mean queue spare 2 < 3
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(1, 10, 0.5), (1, 10, 0.5)], 0.0)
    assert pol.analyze(current=2, pending=0) == 2  # spare 0.3 and 4: hold (1.0 KV over 1 replica would saturate)
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(20, 5, 0.9)] * 10, 0.0)
    assert pol.analyze(current=10, pending=0) == 10  # capped at maxReplicas


def test_wva_does_not_scale_up_while_replicas_are_pending() -> None:
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(9, 10, 0.9), (9, 10, 0.9)], 0.0)
    assert pol.analyze(current=3, pending=1) == 3
    assert pol.analyze(current=3, pending=0) == 4


def test_wva_reads_each_replica_as_max_over_one_minute() -> None:
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(0, 10, 0.78), (0, 10, 0.1)], 0.0)  # a peak on pod-0
    _wva(pol, [(0, 10, 0.1), (0, 10, 0.1)], 30.0)
    assert pol.windowed() == [(0.78, 0.0), (0.1, 0.0)]
    assert pol.analyze(current=2, pending=0) == 2  # the peak still counts: no scale-down
    _wva(pol, [(0, 10, 0.1), (0, 10, 0.1)], 61.0)  # the peak left the window
    assert pol.windowed() == [(0.1, 0.0), (0.1, 0.0)]
    assert pol.analyze(current=2, pending=0) == 1


def test_wva_scales_down_only_if_n_minus_1_keep_the_spare_triggers() -> None:
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(0, 5, 0.2), (0, 5, 0.2), (0, 5, 0.2)], 0.0)
    assert pol.analyze(current=3, pending=0) == 2  # 0.6 over 2 = 0.3: spare 0.5 >= 0.1, queue spare 5 >= 3
    pol = WvaSaturationPolicy(10)
    _wva(pol, [(0, 5, 0.36), (0, 5, 0.36)], 0.0)
    assert pol.analyze(current=2, pending=0) == 2  # 0.72 over 1 leaves spare 0.08 < 0.1: hold


def _cluster(n: int) -> Cluster:
    c = Cluster(ENGINE, PROFILES["8b-h100"])
    c.start_ready(n, 0.0)
    return c


def test_the_gateway_holds_requests_while_every_endpoint_is_saturated() -> None:
    c = _cluster(1)
    pod = c.ready[0]
    # Fill the one engine's waiting queue: max_num_seqs running, then GATEWAY_QUEUE_DEPTH waiting.
    for _ in range(ENGINE.max_num_seqs + GATEWAY_QUEUE_DEPTH):
        c.dispatch(Request(0.0, 2000, 50))
    assert pod.engine.waiting_n >= GATEWAY_QUEUE_DEPTH or pod.engine.kv_usage() >= 0.8
    held_before = c.gateway_n
    c.dispatch(Request(0.0, 100, 10))
    assert c.gateway_n == held_before + 1  # saturated: the gateway holds it (its flow-control queue)
    c.start_ready(0, 0.0)
    # Without flow control the same request goes to the engine at once.
    d = Cluster(ENGINE, PROFILES["8b-h100"], flow_control=False)
    d.start_ready(1, 0.0)
    for _ in range(ENGINE.max_num_seqs + GATEWAY_QUEUE_DEPTH + 1):
        d.dispatch(Request(0.0, 2000, 50))
    assert d.gateway_n == 0


def test_held_requests_go_out_once_an_endpoint_is_no_longer_saturated() -> None:
    c = _cluster(1)
    for _ in range(ENGINE.max_num_seqs + 3 * GATEWAY_QUEUE_DEPTH):
        c.dispatch(Request(0.0, 2000, 20))
    assert c.gateway_n > 0
    for t in range(1, 601):  # control ticks of 1 s; every request finishes in well under 10 minutes
        c.advance(float(t))
    assert c.gateway_n == 0 and c.waiting_total() == 0


def test_kpa_runs_with_the_per_model_scale_target() -> None:
    pol = reactive_policy("kpa-concurrency", None, 32, True, profile="8b-h100")
    assert pol.cfg.container_concurrency == kpa_scale_target("8b-h100") == TUNING["kpa-concurrency"][0] == 16.0
    assert pol.params()["scale_metric"] == "concurrency"


def test_dynamo_profiled_throughput_meets_its_itl_target() -> None:
    prefill, decode = profiled_throughput(ENGINE, 1000.0, 200.0)
    assert prefill > 10_000  # the chunked prefill rate of an idle engine
    batch_tokens = decode * 0.050  # tokens per 50 ms step at most
    assert ENGINE.decode_step_s(batch_tokens, batch_tokens * 1100.0) <= 0.050 + 1e-3


def test_holt_forecasts_a_trend() -> None:
    h = Holt()
    for x in range(10, 130, 10):
        f = h.observe(float(x))
    assert f > 120.0  # extrapolates the rise
    for _ in range(20):
        f = h.observe(50.0)
    assert abs(f - 50.0) < 1.0  # and settles on a level


def test_dynamo_planner_sizes_every_180_s_from_the_forecast() -> None:
    c = _cluster(1)
    pol = DynamoPlannerPolicy(ENGINE, 32, cond=Conditions())
    assert pol.next_at == 180.0
    pol.control(c, 1.0, 1.0)
    assert not pol.decisions
    # 180 s of 20 requests/s of 2000 prompt tokens: 40k prefill tokens/s need several replicas.
    c.arrived_n, c.arrived_in, c.arrived_out = 3600, 3600 * 2000.0, 3600 * 100.0
    pol.control(c, 180.0, 1.0)
    assert pol.decisions and pol.decisions[0][1] >= 2
    assert c.spec == pol.decisions[0][1]
    pol.control(c, 200.0, 1.0)  # not before the next interval
    assert len(pol.decisions) == 1
    pol.control(c, 360.0, 1.0)  # replicas still starting: no adjustment
    assert len(pol.decisions) == 1
