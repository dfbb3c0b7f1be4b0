"""Policy v2 rules (issue 12): the warm ladder, the burst hold, and properties of the whole policy."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.scaler.test_policy import Run, cfg, replica, unknown
from warmscale.scaler.ladder import (
    PLACEHOLDER_UNMEASURED,
    break_even,
    held_count,
    longest_hold,
    time_to_ready,
    warm_steps,
)
from warmscale.scaler.policy import Decision
from warmscale.scaler.warm_status import WarmStatus
from warmscale.signals.model import QueueReading

TTR = {"placeholder+staged": 90.0, "staged": 200.0, "cold": 510.0}

# (placeholders ready, staged nodes, k) -> seconds for the k-th additional replica
LADDER = [
    (0, 0, 1, 510.0),
    (1, 1, 1, 90.0),
    (1, 1, 2, 510.0),  # one placeholder does not make the second replica warm (issue 12)
    (3, 3, 3, 90.0),
    (3, 3, 4, 510.0),
    (1, 3, 2, 200.0),  # staged nodes without a placeholder come next
    (1, 3, 3, 200.0),
    (1, 3, 4, 510.0),
    (0, 2, 1, 200.0),
    (0, 2, 3, 510.0),
]


@pytest.mark.parametrize(("placeholders", "staged", "k", "seconds"), LADDER)
def test_kth_replica_time_to_ready(placeholders: int, staged: int, k: int, seconds: float) -> None:
    ws = WarmStatus("ns", "w", 0.0, placeholders_ready=placeholders, staged_nodes=staged, time_to_ready_s=TTR)
    assert ws.expected_time_to_ready(120.0, k) == seconds


def test_ladder_without_measurements_falls_back() -> None:
    """Unmeasured placeholders stay a warm step (two replicas start without a cold start) timed like
    the cold step, and are released like it (no shortcut in the break-even time before a measurement)."""
    ws = WarmStatus("ns", "w", 0.0, placeholders_ready=2)
    assert ws.ladder(120.0) == ((PLACEHOLDER_UNMEASURED, 2, 120.0), ("cold", 0, 120.0))
    assert ws.expected_time_to_ready(120.0) == 120.0
    assert warm_steps(ws.ladder(120.0)) == 2
    assert break_even(ws.ladder(120.0), 1, 600.0, 60.0) == 720.0
    measured_cold = WarmStatus("ns", "w", 0.0, placeholders_ready=2, time_to_ready_s={"cold": 510.0})
    assert measured_cold.ladder(120.0)[0][2] == 510.0
    assert warm_steps(WarmStatus("ns", "w", 0.0).ladder(120.0)) == 0


# (ladder, j, node idle, min hold) -> break-even seconds
BREAK_EVEN = [
    ((("cold", 0, 510.0),), 1, 600.0, 300.0, 1110.0),
    ((("cold", 0, 10.0),), 1, 0.0, 300.0, 300.0),  # the minimum hold binds
    ((("placeholder+staged", 1, 90.0), ("cold", 0, 510.0)), 1, 600.0, 60.0, 90.0),  # no idle node
    ((("placeholder+staged", 1, 90.0), ("cold", 0, 510.0)), 2, 600.0, 60.0, 1110.0),
    ((("staged", 1, 200.0), ("cold", 0, 510.0)), 1, 600.0, 60.0, 800.0),
]


@pytest.mark.parametrize(("ladder", "j", "idle", "min_hold", "seconds"), BREAK_EVEN)
def test_break_even(ladder: tuple[tuple[str, int, float], ...], j: int, idle: float, min_hold: float,
                    seconds: float) -> None:
    assert break_even(ladder, j, idle, min_hold) == seconds


def test_held_count_and_longest_hold() -> None:
    ladder = (("placeholder+staged", 2, 90.0), ("cold", 0, 510.0))
    assert held_count(1, 6, 89.0, ladder, 600.0, 60.0) == 6
    assert held_count(1, 6, 90.0, ladder, 600.0, 60.0) == 4
    assert held_count(1, 6, 1110.0, ladder, 600.0, 60.0) == 1
    assert held_count(5, 3, 0.0, ladder, 600.0, 60.0) == 5
    assert longest_hold(ladder, 600.0, 60.0) == 1110.0
    assert time_to_ready(ladder, 0) == 90.0


# ---- properties -------------------------------------------------------------------------------

loads = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 200), st.floats(0.0, 1.0)), min_size=1, max_size=4)


def _desired(meta: dict[str, str], history: list[list[tuple[int, int, float]]]) -> int:
    run = Run(cfg(**meta))
    d = None
    for step in history:
        d = run.step([replica(f"r{i}", running=r, waiting=w, kv=kv) for i, (r, w, kv) in enumerate(step)], dt=5)
    assert d is not None
    return d.desired


META = {"maxReplicas": "200", "targetInflightPerReplica": "16", "ttftSloSeconds": "1"}


@settings(max_examples=60, deadline=None)
@given(history=st.lists(loads, min_size=1, max_size=5), extra_running=st.integers(0, 300),
       extra_waiting=st.integers(0, 300))
def test_more_demand_never_yields_fewer_replicas(history: list[list[tuple[int, int, float]]], extra_running: int,
                                                 extra_waiting: int) -> None:
    """More waiting requests never yield fewer replicas; more running ones neither, with or without a
    backlog (the backlog is sized by what an engine held at the scrape before, not by today's count)."""
    more = [list(step) for step in history]
    r, w, kv = more[-1][0]
    more[-1][0] = (r, w + extra_waiting, kv)
    assert _desired(META, more) >= _desired(META, history)
    busier = [list(step) for step in history]
    r, w, kv = busier[-1][0]
    busier[-1][0] = (r + extra_running, w, kv)
    assert _desired(META, busier) >= _desired(META, history)


@settings(max_examples=60, deadline=None)
@given(history=st.lists(loads, min_size=2, max_size=5), hide=st.integers(0, 3))
def test_unknown_data_never_lowers_the_count(history: list[list[tuple[int, int, float]]], hide: int) -> None:
    run = Run(cfg(**META))
    last = None
    for step in history[:-1]:
        last = run.step([replica(f"r{i}", running=r, waiting=w, kv=kv) for i, (r, w, kv) in enumerate(step)], dt=5)
    assert last is not None
    final = history[-1]
    readings = [unknown(f"r{i}") if i == hide % len(final) else replica(f"r{i}", running=r, waiting=w, kv=kv)
                for i, (r, w, kv) in enumerate(final)]
    d = run.step(readings, dt=400)  # long enough for every hold to have expired on known data
    assert d.desired >= last.desired


# ---- capacity in tokens ------------------------------------------------------------------------

from warmscale.scaler.capacity import PRIORS, Estimate, learn, prior_for  # noqa: E402
from warmscale.signals.model import ReplicaReading, ReplicaSignal  # noqa: E402


def engine(name: str, prompt_total: float, waiting: float = 0, running: float = 0, requests: float = 0,
           kv: float | None = 0.1) -> ReplicaReading:
    sig = ReplicaSignal(engine="vllm", waiting=waiting, running=running, kv_usage=kv, prompt_tokens_total=prompt_total,
                        requests_total=requests, generation_tokens_total=requests * 100)
    return ReplicaReading(replica=name, observed_at=0.0, signal=sig)


@pytest.mark.parametrize(("true_tps", "prior"), [(24_000.0, "generic"), (5_000.0, "8b-h100"), (16_000.0, "8b-h100")])
def test_capacity_estimate_converges_on_a_saturated_engines_counters(true_tps: float, prior: str) -> None:
    """A simulated engine prefills ``true_tps`` while requests wait: the estimate converges on it."""
    meta = {"maxReplicas": "50"} if prior == "generic" else {"maxReplicas": "50", "modelProfile": prior}
    run = Run(cfg(**meta))
    total = 0.0
    d = run.step([engine("a", total, waiting=10, running=8)], dt=1)
    for _ in range(200):
        total += true_tps * 1.0
        d = run.step([engine("a", total, waiting=10, running=8)], dt=1)
    assert run.state.capacity[""].prefill_tps == pytest.approx(true_tps, rel=0.02)
    assert run.state.capacity[""].samples == 99  # one per 2 s; the first (not started at a counter step) skipped
    assert d.rules["prefill"] >= 2  # prefill-bound: the waiting prompts are more than one replica takes


def test_a_burst_shorter_than_a_served_sample_after_idle_scrapes_teaches_the_prefill_rate() -> None:
    """A queue that forms after idle scrapes and lasts less than SERVED_MIN_SECONDS (the demo's first
    wave: ~4.5 s of saturation at 8x) is a saturated sample from its first step: before, the sample
    that started at the idle scrape stayed unsaturated and the estimate stayed at the prior."""
    from warmscale.scaler.capacity import SERVED_MIN_SECONDS

    true_tps = 37_000.0
    run = Run(cfg(maxReplicas="50", modelProfile="8b-h100"))
    total = 0.0
    for _ in range(3):  # idle: the counter steps (a request now and then), nothing waits
        total += 2_000.0
        run.step([engine("a", total, waiting=0, running=1)], dt=1)
    for _ in range(int(SERVED_MIN_SECONDS) - 2):  # the burst: requests wait at every scrape
        total += true_tps * 1.0
        run.step([engine("a", total, waiting=50, running=8)], dt=1)
    est = run.state.capacity[""]
    assert est.samples >= 2
    assert est.prefill_tps > PRIORS["8b-h100"].prefill_tps * 1.3


def test_capacity_is_kept_per_gpu_product_and_survives_json() -> None:
    from warmscale.scaler.state import ScalerState

    run = Run(cfg(gpuProduct="NVIDIA-H100-80GB-HBM3"))
    run.step([engine("a", 0.0, waiting=5)])
    run.step([engine("a", 9_000.0, waiting=5)])
    assert set(run.state.capacity) == {"NVIDIA-H100-80GB-HBM3"}
    again = ScalerState.from_dict(run.state.to_dict())
    assert again.capacity == run.state.capacity


def test_discovered_gpu_product_keys_the_capacity_and_the_override_wins() -> None:
    """The product pod discovery puts in the snapshot (Snapshot.gpu_product, from the nodes' GFD label)
    keys the learned capacity without a gpuProduct key; gpuProduct, when set, wins over it."""
    found = "NVIDIA-A100-SXM4-40GB"
    run = Run(cfg())
    run.step([engine("a", 0.0, waiting=5)], gpu_product=found)
    run.step([engine("a", 9_000.0, waiting=5)], gpu_product=found)
    assert set(run.state.capacity) == {found}
    pinned = Run(cfg(gpuProduct="NVIDIA-H100-80GB-HBM3"))
    pinned.step([engine("a", 0.0, waiting=5)], gpu_product=found)
    pinned.step([engine("a", 9_000.0, waiting=5)], gpu_product=found)
    assert set(pinned.state.capacity) == {"NVIDIA-H100-80GB-HBM3"}


# Lumpy counters: an engine prefilling ``rate`` tok/s counts a prompt's tokens when its prefill completes,
# every ``step_s`` (0.8-s steps of a 70B) or once per long prompt; scrapes every second.
def _lumpy_run(rate: float, step_s: float, seconds: int, waiting: float, floor: bool = False,
               scrape_s: float = 1.0) -> Estimate:
    run = Run(cfg(maxReplicas="50", modelProfile="70b-h100-tp4"))
    t = 0.0
    for _ in range(int(seconds / scrape_s)):
        done = math.floor(t / step_s)  # steps completed by t
        prompt = done * step_s * rate
        sig = ReplicaSignal(engine="vllm", waiting=waiting, running=4, kv_usage=0.1, prompt_tokens_total=prompt,
                            requests_total=float(done), generation_tokens_total=float(done) * 10,
                            prefill_seconds_total=done * step_s * 2.0 if floor else None,  # 2 prefills share a step
                            prefills_total=float(done * 2) if floor else None,
                            prefill_prompt_tokens_total=prompt if floor else None,
                            prefix_cache_hits_total=0.0 if floor else None)
        run.step([ReplicaReading(replica="a", observed_at=0.0, signal=sig)], dt=scrape_s)
        t += scrape_s
    return run.state.capacity[""]


@pytest.mark.parametrize("step_s", [0.8, 1.7, 3.3, 0.37])
@pytest.mark.parametrize("waiting", [10.0, 0.0])
def test_lumpy_counters_converge_to_the_engines_rate_not_above(step_s: float, waiting: float) -> None:
    """A 12k tok/s engine (above the 7k prior) whose counter moves in lumps: saturated, the estimate
    converges on 12k; unsaturated ("served"), it is raised to at most 12k (the lead gap makes it a
    lower bound). Per-scrape samples took the busiest interval (two lumps in one second: 19.2k at 0.8 s)."""
    est = _lumpy_run(12_000.0, step_s, 600, waiting)
    assert est.prefill_tps <= 12_000.0 * 1.02
    assert est.prefill_tps >= 12_000.0 * (0.97 if waiting else 0.85)


def test_the_prefill_time_floor_needs_no_queue() -> None:
    """No request ever waits: the prefill-time floor (two prefills sharing each step: half the rate)
    lifts the prior; it never exceeds the engine's rate. Absent histograms: today's behaviour."""
    with_floor = _lumpy_run(30_000.0, 0.8, 120, 0.0, floor=True)
    assert 14_000.0 <= with_floor.prefill_tps <= 30_000.0
    # without the floor the served samples raise it too (they are lower bounds as well)
    without = _lumpy_run(30_000.0, 0.8, 120, 0.0)
    assert without.prefill_tps <= 30_000.0
    # cached prompt tokens were not computed: the floor subtracts every prefix-cache hit
    from warmscale.scaler.observation import _prefill_floor

    sig = ReplicaSignal(engine="vllm", waiting=0, running=1, prefill_prompt_tokens_total=100_000.0,
                        prefix_cache_hits_total=60_000.0, prefill_seconds_total=4.0, prefills_total=50.0)
    assert _prefill_floor(sig) == 10_000.0
    assert _prefill_floor(ReplicaSignal(engine="vllm", waiting=0, running=1, prefill_prompt_tokens_total=1e5,
                                        prefill_seconds_total=4.0, prefills_total=50.0)) is None  # hits unknown


@pytest.mark.parametrize(("hits", "expected"), [(0.0, 20_000.0), (1.0, 4e6 / 500)])
def test_the_windowed_prefill_floor_needs_an_engine_without_prefix_hits(hits: float, expected: float) -> None:
    """First 100 s: prefills overlap (4 share each second: 5k tok/s by the floor); then alone (20k).
    Each sample's own window bounds the rate (20k) while no prefix-cache hit was ever counted; with
    hits only the lifetime ratio may be used (it subtracts every hit, here 1 token: 4M / 500 s = 8k at
    the end, below what the served samples show)."""
    run = Run(cfg(maxReplicas="50", modelProfile="70b-h100-tp4"))
    prompt = secs = n = 0.0
    for i in range(200):
        heavy = i < 100
        prompt += 20_000.0  # 20k prompt tokens prefilled per second, counted at once
        secs += 4.0 if heavy else 1.0
        n += 4.0 if heavy else 1.0
        sig = ReplicaSignal(engine="vllm", waiting=0, running=4, kv_usage=0.1, prompt_tokens_total=prompt,
                            requests_total=n, generation_tokens_total=n * 10, prefill_seconds_total=secs,
                            prefills_total=n, prefill_prompt_tokens_total=prompt, prefix_cache_hits_total=hits)
        run.step([ReplicaReading(replica="a", observed_at=0.0, signal=sig)], dt=1)
    # the served samples (prompt over 10 s + the 1-s gap) reach 18.2k; the floor is what lifts it further
    assert run.state.capacity[""].prefill_tps == pytest.approx(max(expected, 20_000.0 * 10 / 11), rel=0.01)


def test_prefill_floor_table() -> None:
    from warmscale.scaler.capacity import prefill_floor

    assert prefill_floor(20_000.0, 0.0, 2.0, 10.0) == 10_000.0
    assert prefill_floor(20_000.0, 15_000.0, 2.0, 10.0) == 2_500.0  # prefix-cache hits were not computed
    assert prefill_floor(20_000.0, 0.0, 2.0, 3.0) is None  # too few prefills
    assert prefill_floor(20_000.0, 0.0, 0.0, 10.0) is None
    assert prefill_floor(1_000.0, 2_000.0, 2.0, 10.0) is None


def test_learn_table() -> None:
    e = Estimate(10_000.0)
    assert learn(e, 500.0, 0.1, True) == e  # too short an interval
    assert learn(e, 12_000.0, 1.0, False).prefill_tps == 12_000.0  # served more than thought: raised
    assert learn(e, 2_000.0, 1.0, False) == e  # not saturated: a low rate says nothing about capacity
    assert learn(e, 14_000.0, 1.0, True).prefill_tps == pytest.approx((10_000 * 3 + 14_000) / 4)
    assert prior_for("vllm", "70b-h100-tp4") == PRIORS["70b-h100-tp4"]
    assert prior_for("tgi", None) == PRIORS["tgi"]
    assert prior_for("ray", None) == PRIORS["generic"]


@pytest.mark.parametrize(("prompt_tps", "expected"), [(1_000.0, 1), (20_000.0, 2), (40_000.0, 4), (1_000_000.0, 6)])
def test_the_same_queue_with_more_prompt_tokens_asks_for_more_replicas(prompt_tps: float, expected: int) -> None:
    """Four replicas, the same requests in flight, 1k to 1M prompt tokens/s: different decisions (issue 12).
    Capacity: the 8b-h100 prior, 16k tok/s at 80% (targetUtilization) -> 12.8k tok/s per replica; a replica seen serving
    more (250k tok/s each at 1M) over a 10-s sample raises its estimate to that, conservatively timed
    (the sample's 10 s plus the 1-s scrape gap before it: 227k): 1M / (0.8 x 227k) -> 6."""
    run = Run(cfg(modelProfile="8b-h100", maxReplicas="90", burstWindowSeconds="10", nodeIdleSeconds="0",
                  timeToReadySeconds="0", scaleDownStabilizationSeconds="0"))
    total = 0.0
    d = None
    for _ in range(22):
        d = run.step([engine(f"r{i}", total / 4, running=20) for i in range(4)], dt=1, ready_replicas=4,
                     starting_replicas=0, current_replicas=4)
        total += prompt_tps
    assert d is not None
    assert d.desired == expected


# ---- SLO model ---------------------------------------------------------------------------------

from warmscale.scaler.slo import slo_count, wait_quantile  # noqa: E402


def test_wait_quantile_table() -> None:
    # 1 replica, 10k tok/s capacity, 1k tokens per request: mu = 10 req/s.
    assert wait_quantile(1, 400.0, 10_000.0, 1_000.0, 0.95) == 0.0  # rho 0.04 <= 1 - 0.95: no wait at p95
    assert wait_quantile(1, 20_000.0, 10_000.0, 1_000.0, 0.95) == float("inf")  # overloaded
    w8 = wait_quantile(1, 8_000.0, 10_000.0, 1_000.0, 0.95)
    assert w8 == pytest.approx(__import__("math").log(0.8 / 0.05) / (10 - 8))
    assert wait_quantile(2, 8_000.0, 10_000.0, 1_000.0, 0.95) < w8  # more replicas, shorter wait


@pytest.mark.parametrize(("observed", "ready", "expected"), [
    (1.5, 1, 2),  # queueing at 1 replica (rho 0.8): 2 replicas bring the wait under the SLO
    (6.0, 1, 7),  # observed 6 s: the modelled wait is scaled by (6 - 0.1) / 1.39 = 4.3 for every count
])
def test_slo_count_table(observed: float, ready: int, expected: int) -> None:
    assert slo_count(observed, 0.5, 0.95, ready, 8_000.0, 10_000.0, 1_000.0, most=8) == expected


def test_slo_count_is_capped() -> None:
    assert slo_count(6.0, 0.5, 0.95, 1, 8_000.0, 10_000.0, 1_000.0, most=5) == 5


def test_slo_count_does_not_chase_what_more_replicas_cannot_fix() -> None:
    # A 30k-token prompt alone takes 3 s to prefill at 10k tok/s: an SLO of 2 s is out of reach.
    assert slo_count(5.0, 2.0, 0.95, 3, 60_000.0, 10_000.0, 30_000.0, most=6) == 3
    # No queueing in the model at the current count: the model cannot say (the proportional rule decides).
    assert slo_count(5.0, 2.0, 0.95, 3, 100.0, 10_000.0, 1_000.0, most=6) is None


def test_capacity_samples_span_short_scrape_intervals() -> None:
    """Scrapes every 0.125 s (the demo's speed-up): samples accumulate until they span 0.5 s."""
    run = Run(cfg(maxReplicas="50", scrapeIntervalSeconds="0.125"))
    total = 0.0
    for _ in range(800):
        run.step([engine("a", total, waiting=10, running=8)], dt=0.125)
        total += 30_000.0 * 0.125
    est = run.state.capacity[""]
    assert est.prefill_tps == pytest.approx(30_000.0, rel=0.02) and est.samples >= 45


def test_a_hold_while_scaling_up_names_the_rule_not_the_stabilisation() -> None:
    """The count asked for is held while its replicas start, even if the rules momentarily want fewer;
    while they still want more than is ready the fleet is scaling up, and the reason says which rule
    drives it (the demo showed "scale-down-stabilization" there). When the rules want no more than is
    ready while replicas are seen starting, the burst's peak is held while it arrives ("burst-hold").
    Once the count is ready, a hold of it is the stabilisation again."""
    run = Run(cfg(targetInflightPerReplica="10", scaleDownStabilizationSeconds="300", timeToReadySeconds="300",
                  nodeIdleSeconds="0", burstConfirmSeconds="0"))
    assert run.step([replica("a", running=50)], ready_replicas=1, starting_replicas=0).desired == 5
    d = run.step([replica("a", running=30)], dt=5, ready_replicas=1, starting_replicas=4)
    assert (d.desired, d.reason) == (5, "demand")
    d = run.step([replica("a", running=8)], dt=5, ready_replicas=1, starting_replicas=4)
    assert (d.desired, d.reason) == (5, "burst-hold")
    ready = [replica(n, running=6) for n in "abcde"]
    d = run.step(ready, dt=5, ready_replicas=5, starting_replicas=0)
    assert (d.desired, d.reason) == (5, "scale-down-stabilization")


# ---- the backlog rule is monotone in demand ----------------------------------------------------

# (running per engine at the decision) -> queue need. Two engines held 20 each at the scrape before and
# now hold 40 (target 64, 2 tolerated per replica): 20 + 20 waiting on each is a backlog of 36 beyond the 4
# tolerated, sized by what one engine held before (20): 2 + 36/20 -> 4, whatever they run now. Sizing by the
# engines' running count *now* would ask for fewer replicas as more requests run (4 at 20, 3 at 40).
@pytest.mark.parametrize("running_now", [20, 30, 40, 64])
def test_more_running_under_backlog_never_asks_for_fewer(running_now: int) -> None:
    run = Run(cfg(targetInflightPerReplica="64", targetWaitingPerReplica="2", maxReplicas="50"))
    run.step([replica("a", running=20), replica("b", running=20)], ready_replicas=2, starting_replicas=0)
    d = run.step([replica("a", running=running_now, waiting=20), replica("b", running=running_now, waiting=20)],
                 ready_replicas=2, starting_replicas=0)
    assert d.rules["queue"] == 4


def test_backlog_before_any_earlier_reading_is_sized_by_the_target() -> None:
    """No earlier scrape says what one engine holds: the backlog is sized by the in-flight target
    (36 beyond ordinary queueing / 64 -> one more replica), the same for any running count."""
    for running_now in (2, 20, 40):
        d = Run(cfg(targetInflightPerReplica="64", targetWaitingPerReplica="2")).step(
            [replica("a", running=running_now, waiting=20), replica("b", running=running_now, waiting=20)])
        assert d.rules["queue"] == 3


# ---- TTFT: only slowness that persists ---------------------------------------------------------

from tests.scaler.test_policy import ttft  # noqa: E402


def test_ttft_rule_ends_with_the_burst_that_caused_it() -> None:
    """20 slow first tokens (1 s against an SLO of 0.5 s) ask for more; 15 s later the window (60 s)
    still holds them (p95 slow), but the first tokens of the last burstWindowSeconds (10 s) are fast:
    the slowness is over, the rule asks nothing (a past burst is the burst hold's business)."""
    run = Run(cfg(ttftSloSeconds="0.5", targetInflightPerReplica="1000"))
    run.step([replica("a", running=5, hist=ttft({}))])
    assert run.step([replica("a", running=5, hist=ttft({1.0: 20}))]).rules.get("ttft") == 2
    d = run.step([replica("a", running=5, hist=ttft({1.0: 20, 0.1: 5}))], dt=15)
    assert d.rules.get("ttft") is None
    # Slow again in the newer part: the rule is back, sized by the smaller quantile.
    d = run.step([replica("a", running=5, hist=ttft({1.0: 30, 0.1: 5}))], dt=1)
    assert d.rules.get("ttft") == 2


def test_ttft_rule_without_recent_first_tokens_asks_nothing() -> None:
    run = Run(cfg(ttftSloSeconds="0.5", targetInflightPerReplica="1000"))
    run.step([replica("a", running=5, hist=ttft({}))])
    assert run.step([replica("a", running=5, hist=ttft({1.0: 20}))]).rules.get("ttft") == 2
    d = run.step([replica("a", running=5, hist=ttft({1.0: 20}))], dt=11)  # no first token since
    assert d.rules.get("ttft") is None


# ---- burst confirmation: cold capacity for needs that last or recur -----------------------------

COLD_ONLY = (("cold", 0, 510.0),)
ONE_PLACEHOLDER = (("placeholder+staged", 1, 90.0), ("cold", 0, 510.0))
BURSTY = {"targetInflightPerReplica": "10", "maxReplicas": "50", "scaleUpMaxStep": "4"}


def _calm(run: Run, seconds: int, ladder: tuple[tuple[str, int, float], ...]) -> None:
    for _ in range(seconds):
        run.step([replica("a", running=10), replica("b", running=10)], ttr_ladder=ladder,
                 ready_replicas=2, starting_replicas=0)


def _burst(run: Run, ladder: tuple[tuple[str, int, float], ...], dt: float = 1.0) -> Decision:
    return run.step([replica("a", running=30), replica("b", running=30)], dt=dt, ttr_ladder=ladder,
                    ready_replicas=2, starting_replicas=0)


# (ladder, expected desired at the burst's first second): 60 running ask for 6; 2 are ready
CONFIRM = [
    (COLD_ONLY, 3),  # nothing warm: one replica starts at once (the warm path's stand-in), no more
    (ONE_PLACEHOLDER, 3),  # the warm pool's placeholder serves it
    ((("cold", 0, 60.0),), 6),  # starts within the trend window: nothing to confirm
]


@pytest.mark.parametrize(("ladder", "desired"), CONFIRM)
def test_a_new_burst_takes_the_warm_path_only(ladder: tuple[tuple[str, int, float], ...], desired: int) -> None:
    run = Run(cfg(**BURSTY))
    _calm(run, 30, ladder)
    d = _burst(run, ladder)
    assert d.rules["demand"] == 6
    assert d.desired == desired
    assert d.reason == ("burst-unconfirmed" if desired < 6 else "demand")


def _burst_seen(run: Run, ladder: tuple[tuple[str, int, float], ...], starting: int) -> Decision:
    """The burst of _burst while the API shows ``starting`` replicas starting."""
    return run.step([replica("a", running=30), replica("b", running=30)], ttr_ladder=ladder,
                    ready_replicas=2, starting_replicas=starting)


# (starting replicas seen, ladder) -> desired on the burst's second second: the stand-in is one replica
# over the ready ones, not one more per decision on top of the one already starting.
STAND_IN = [
    (0, COLD_ONLY, 3),
    (1, COLD_ONLY, 3),  # the stand-in is starting: no second stand-in (was 4)
    (2, COLD_ONLY, 4),  # replicas started for another reason stay counted (never below what is provisioned)
    (1, ONE_PLACEHOLDER, 4),  # a real warm step still adds to what starts
]


@pytest.mark.parametrize(("starting", "ladder", "desired"), STAND_IN)
def test_one_stand_in_not_one_per_decision(starting: int, ladder: tuple[tuple[str, int, float], ...],
                                           desired: int) -> None:
    run = Run(cfg(**BURSTY))
    _calm(run, 30, ladder)
    assert _burst_seen(run, ladder, 0).desired == 3
    assert _burst_seen(run, ladder, starting).desired == desired


def test_a_need_that_lasts_half_the_trend_window_is_confirmed() -> None:
    run = Run(cfg(**BURSTY))
    _calm(run, 30, COLD_ONLY)
    seen = [_burst(run, COLD_ONLY).desired for _ in range(40)]
    assert seen[0] == 3 and seen[-1] == 6
    assert seen.index(6) <= 31  # the median of the trend window (60 s) turns after half of it


def test_a_burst_that_recurs_within_the_hold_is_confirmed_at_once() -> None:
    """The first burst (5 s) starts nothing cold; one of the same size 200 s later (another episode,
    within the longest hold of 1,110 s) gets its cold replicas at once."""
    run = Run(cfg(**BURSTY))
    _calm(run, 30, COLD_ONLY)
    assert [_burst(run, COLD_ONLY).desired for _ in range(5)] == [3] * 5
    _calm(run, 200, COLD_ONLY)
    d = _burst(run, COLD_ONLY)
    assert (d.desired, d.reason) == (6, "demand")


# (seconds of needs seen before the burst) -> desired in the burst's first 40 s: 2 ready, 60 running ask
# for 6, the warm path's stand-in gives 3 at once. A need is confirmed (it lasted burstConfirmSeconds,
# 30 s) only where the needs seen reach back 30 s: a tracker that just started sees the burst alone,
# and the median of what it saw is the burst itself.
@pytest.mark.parametrize(("calm", "first_six"), [
    (0, 30),  # a fresh tracker in a burst: confirmed once it has seen 30 s of it (it was at once)
    (30, 30),  # 30 s calm before it: the median over the 60 s turns after half of it (as before)
])
def test_a_fresh_tracker_confirms_a_burst_only_once_it_lasted(calm: int, first_six: int) -> None:
    run = Run(cfg(**BURSTY))
    _calm(run, calm, COLD_ONLY)
    seen = [_burst(run, COLD_ONLY).desired for _ in range(40)]
    assert seen[0] == 3 and seen[-1] == 6
    assert seen.index(6) == first_six


def test_scale_from_zero_is_not_held_back() -> None:
    run = Run(cfg(targetInflightPerReplica="10", maxReplicas="50", minReplicas="0", scaleToZero="true"))
    d = run.step([], ttr_ladder=COLD_ONLY, ready_replicas=0, starting_replicas=0,
                 queues=(QueueReading("q", 0.0, length=50),))
    assert d.desired == 5


# ---- SLO slack: the prefill-bound need at the SLO model's count ----------------------------------

from warmscale.scaler.slo import PREFILL_MAX_UTILIZATION, prefill_slo_count  # noqa: E402


def _prefill_run(prompt_tps: float, per_request: float, ttft_counts: dict[float, int], seconds: int = 20,
                 **meta: str) -> Decision:
    """One replica (8b-h100 prior: 16k prompt tokens/s; 0.8 x 16k = 12.8k at the target utilisation),
    ``prompt_tps`` arriving in requests of ``per_request`` tokens, each second ``ttft_counts`` first
    tokens (bucket -> count), decisions every second on an injected clock."""
    run = Run(cfg(modelProfile="8b-h100", maxReplicas="10", burstWindowSeconds="10", **meta))
    total = requests = 0.0
    counts: dict[float, int] = {}
    d = None
    for _ in range(seconds):
        sig = ReplicaSignal(engine="vllm", waiting=0, running=20, kv_usage=0.1, prompt_tokens_total=total,
                            requests_total=requests, generation_tokens_total=requests * 100, ttft=ttft(counts))
        d = run.step([ReplicaReading(replica="a", observed_at=0.0, signal=sig)], ready_replicas=1,
                     starting_replicas=0, current_replicas=1)
        total += prompt_tps
        requests += prompt_tps / per_request
        for le, c in ttft_counts.items():
            counts[le] = counts.get(le, 0) + c
    assert d is not None
    return d


# (case, prompt tokens/s, tokens per request, first tokens per second, metadata) -> prefill need.
# 13.5k tok/s is 0.84 of the prior's 16k: the utilisation target (0.8) asks for 2. The SLO model with
# 1,400-token prompts: mu = 11.4 req/s, lam = 9.6, p95 wait ln(0.84 / 0.05) / 1.79 = 1.58 s, plus the
# prompt's own 0.09 s = 1.67 s: one replica meets a 2-s SLO.
SLACK = [
    ("short prompts, a 2-s SLO met: one replica", 13_500.0, 1_400.0, {0.5: 10}, {"ttftSloSeconds": "2"}, 1),
    ("no TTFT SLO: the utilisation target", 13_500.0, 1_400.0, {0.5: 10}, {}, 2),
    ("a 1-s SLO: the model's 1.67 s misses it", 13_500.0, 1_400.0, {0.5: 10}, {"ttftSloSeconds": "1"}, 2),
    ("observed TTFT over the SLO: the target stands", 13_500.0, 1_400.0, {2.5: 10}, {"ttftSloSeconds": "2"}, 2),
    ("too few first tokens to say: the target stands", 13_500.0, 1_400.0, {}, {"ttftSloSeconds": "2"}, 2),
    # 4,000-token prompts: mu = 4, lam = 3.4, p95 wait 2.83 / 0.63 = 4.5 s: two replicas
    ("long prompts: the model asks for 2", 13_500.0, 4_000.0, {0.5: 10}, {"ttftSloSeconds": "2"}, 2),
    # 15.5k tok/s = 0.97 of 16k: above PREFILL_MAX_UTILIZATION (0.95) whatever the SLO says
    ("above the utilisation ceiling: 2", 15_500.0, 100.0, {0.1: 10}, {"ttftSloSeconds": "10"}, 2),
]


@pytest.mark.parametrize(("prompt_tps", "per_request", "first_tokens", "meta", "expected"),
                         [c[1:] for c in SLACK], ids=[c[0] for c in SLACK])
def test_prefill_need_at_the_slo_models_count(prompt_tps: float, per_request: float, first_tokens: dict[float, int],
                                              meta: dict[str, str], expected: int) -> None:
    d = _prefill_run(prompt_tps, per_request, first_tokens, **meta)
    assert d.rules["prefill"] == expected


def test_prefill_slo_count_table() -> None:
    # 10k tok/s capacity, 1k-token prompts (mu = 10 req/s), SLO 2 s at p95
    assert prefill_slo_count(8_000.0, 10_000.0, 1_000.0, 2.0, 0.95, 4) == 1  # rho 0.8: 0.1 + 1.39 s
    assert prefill_slo_count(9_000.0, 10_000.0, 1_000.0, 2.0, 0.95, 4) == 2  # rho 0.9: 0.1 + 2.89 s at 1
    assert prefill_slo_count(30_000.0, 10_000.0, 1_000.0, 2.0, 0.95, 4) == 4  # 3 would run at 1.0
    assert prefill_slo_count(30_000.0, 10_000.0, 1_000.0, 2.0, 0.95, 3) is None  # no count up to 3 meets it
    assert prefill_slo_count(8_000.0, 10_000.0, 25_000.0, 2.0, 0.95, 4) is None  # a prompt alone takes 2.5 s
    # Never above PREFILL_MAX_UTILIZATION, even where the SLO is loose: 9.6k of 10k (0.96) asks for 2
    assert prefill_slo_count(9_600.0, 10_000.0, 10.0, 100.0, 0.95, 4) == 2
    assert PREFILL_MAX_UTILIZATION == 0.95


@settings(max_examples=200, deadline=None)
@given(p=st.floats(0.0, 200_000.0), more=st.floats(0.0, 100_000.0), per_request=st.floats(10.0, 50_000.0),
       slo=st.floats(0.1, 30.0))
def test_prefill_slo_count_never_falls_with_more_prompt_tokens(p: float, more: float, per_request: float,
                                                               slo: float) -> None:
    """More prompt tokens per second never yield a smaller count (None = the model cannot say: the
    utilisation target's count, at least as large)."""
    low = prefill_slo_count(p, 20_000.0, per_request, slo, 0.95, 50)
    high = prefill_slo_count(p + more, 20_000.0, per_request, slo, 0.95, 50)
    assert high is None or (low is not None and high >= low)


@settings(max_examples=40, deadline=None)
@given(p=st.floats(1_000.0, 40_000.0), more=st.floats(0.0, 20_000.0),
       per_request=st.sampled_from([200.0, 1_400.0, 6_000.0]), fast=st.booleans())
def test_more_prompt_tokens_never_ask_for_fewer_replicas(p: float, more: float, per_request: float, fast: bool) -> None:
    """The whole policy with a TTFT SLO and the slack rule: more prompt tokens/s never fewer replicas."""
    first = {0.25: 10} if fast else {2.5: 10}
    low = _prefill_run(p, per_request, first, ttftSloSeconds="2").desired
    high = _prefill_run(p + more, per_request, first, ttftSloSeconds="2").desired
    assert high >= low
