"""Per-role sizing of disaggregated serving (pure policy, injected clock): prefill from arriving prompt
tokens/s, backlog and TTFT less the KV handoff; decode from KV usage and running sequences; properties
per role (more demand never fewer replicas, unknown data never lowers the count)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.scaler.test_policy import pinned, unpinned
from warmscale.scaler.config import ScalerConfig, parse_metadata
from warmscale.scaler.context import ScalerContext
from warmscale.scaler.observation import observe
from warmscale.scaler.policy import Decision, decide
from warmscale.scaler.roles import ROLE_RULES, select_rules, transfer_seconds, ttft_budget
from warmscale.scaler.state import ScalerState
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import ReplicaReading, ReplicaSignal, Snapshot

BASE = {"endpoints": "http://e:8000/metrics", "engine": "vllm", "maxReplicas": "64"}
ROLE = {"prefill": {"role": "prefill", "pdGroup": "g"}, "decode": {"role": "decode", "pdGroup": "g"}, "both": {}}
TTFT_BOUNDS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 5.0, float("inf"))


def cfg(role: str, **meta: str) -> ScalerConfig:
    return pinned(parse_metadata({**BASE, **ROLE[role], **unpinned(meta)}), meta)


def ttft_at(seconds: float, count: float) -> Histogram:
    """``count`` first tokens, all in the bucket that holds ``seconds``."""
    return Histogram.from_buckets([(le, count if le >= seconds else 0.0) for le in TTFT_BOUNDS], sum_=0.0,
                                  count=count)


@dataclass
class Engine:
    """One replica's cumulative counters, advanced by rates over the injected clock."""

    name: str
    prompt: float = 0.0
    requests: float = 0.0
    ttft_n: float = 0.0
    xfer_s: float = 0.0
    xfers: float = 0.0

    def read(self, *, waiting: float = 0, running: float = 0, kv: float = 0.1, ttft_s: float | None = None,
             xfer: bool = False, latest_xfer_s: float | None = None) -> ReplicaSignal:
        return ReplicaSignal(engine="vllm", waiting=waiting, running=running, kv_usage=kv,
                             prompt_tokens_total=self.prompt, requests_total=self.requests,
                             generation_tokens_total=self.requests * 100,
                             ttft=ttft_at(ttft_s, self.ttft_n) if ttft_s is not None else None,
                             kv_transfer_seconds_total=self.xfer_s if xfer else None,
                             kv_transfers_total=self.xfers if xfer else None,
                             kv_transfer_latency_s=latest_xfer_s)


@dataclass
class Fleet:
    """``n`` replicas of one role, each prefilling ``tps`` prompt tokens/s of ``per_request``-token
    prompts, read every ``dt`` seconds on an injected clock."""

    cfg: ScalerConfig
    n: int
    now: float = 1_000.0
    state: ScalerState = field(default_factory=ScalerState)
    engines: list[Engine] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.engines = [Engine(f"r{i}") for i in range(self.n)]

    def step(self, dt: float = 1.0, *, tps: float = 0.0, per_request: float = 1000.0, xfer_s: float | None = None,
             unknown: int = 0, pd_transfer_s: float | None = None, **read: object) -> Decision:
        self.now += dt
        readings = []
        for i, e in enumerate(self.engines):
            e.prompt += tps * dt
            e.requests += tps * dt / per_request
            e.ttft_n += tps * dt / per_request
            if xfer_s is not None:
                e.xfers += tps * dt / per_request
                e.xfer_s += xfer_s * tps * dt / per_request
            if i < unknown:
                readings.append(ReplicaReading(e.name, self.now, error="connection refused"))
            else:
                sig = e.read(xfer=xfer_s is not None, **read)  # type: ignore[arg-type]
                readings.append(ReplicaReading(e.name, self.now, sig))
        snap = Snapshot(taken_at=self.now, replicas=tuple(readings), ready_replicas=self.n, current_replicas=self.n,
                        starting_replicas=0)
        obs, self.state = observe(snap, self.state, self.cfg, ScalerContext(pd_transfer_s=pd_transfer_s))
        d, self.state = decide(obs, self.state, self.cfg, self.now)
        return d


def run(role: str, n: int, steps: int = 40, meta: dict[str, str] | None = None, **step: object) -> Decision:
    fleet = Fleet(cfg(role, **(meta or {})), n)
    d = None
    for _ in range(steps):
        d = fleet.step(**step)  # type: ignore[arg-type]
    assert d is not None
    return d


# (case, role, replicas, step arguments, metadata, expected desired, expected reason)
# vLLM's prior prefill capacity is 8,000 tok/s per replica, at targetUtilization 0.8 = 6,400 tok/s.
TABLE = [
    ("prefill: arriving prompt tokens/s", "prefill", 2, {"tps": 8_000.0}, {}, 3, "prefill"),
    ("decode: prompt tokens/s do not size decode", "decode", 2, {"tps": 8_000.0}, {}, 2, "scale-down-stabilization"),
    ("both: prompt tokens/s size the combined pool", "both", 2, {"tps": 8_000.0}, {}, 3, "prefill"),
    ("decode: KV usage (kvBoundTarget 0.5)", "decode", 4, {"kv": 0.6, "running": 40}, {}, 5, "kv"),
    ("prefill: KV usage does not size prefill", "prefill", 4, {"kv": 0.6, "running": 40}, {}, 4,
     "scale-down-stabilization"),
    ("decode: running sequences (targetInflightPerReplica)", "decode", 2, {"running": 100, "kv": 0.2},
     {"targetInflightPerReplica": "32"}, 7, "demand"),
]


@pytest.mark.parametrize(("case", "role", "n", "step", "meta", "desired", "reason"), TABLE,
                         ids=[t[0] for t in TABLE])
def test_role_sizing(case: str, role: str, n: int, step: dict[str, object], meta: dict[str, str], desired: int,
                     reason: str) -> None:
    d = run(role, n, meta=meta, **step)
    assert (d.desired, d.reason) == (desired, reason), d.rules


def test_prefill_backlog_joins_the_arriving_tokens_at_the_learned_capacity() -> None:
    """Requests wait at every scrape: the replicas are prefill-bound at what they serve (2,000 tok/s
    each), the capacity estimate learns it, and the waiting prompts (80 x 1,000 tokens, taken within
    the 10 s burst window) join the 4,000 tok/s arriving."""
    # (burstConfirmSeconds 0: the prefill need itself, not how long it must last before cold starts;
    # timeToReadySeconds 5: a new replica is ready within the burst window, so the waiting prompts are
    # taken within it, not over the time-to-ready: tests/scaler/test_capacity_decode_heavy.py)
    d = run("prefill", 2, meta={"burstWindowSeconds": "10", "burstConfirmSeconds": "0", "timeToReadySeconds": "5"},
            tps=2_000.0, waiting=40, running=4)
    assert d.capacity_samples > 0 and d.prefill_tps < 3_000.0
    u = ScalerConfig().target_utilization
    assert d.reason == "prefill" and d.desired == -(-(4_000.0 + 80_000.0 / 10) // (u * d.prefill_tps))
    assert "prefill" not in run("decode", 2, meta={"burstWindowSeconds": "10"}, tps=2_000.0, waiting=40,
                                running=4).rules


SLO = {"ttftSloSeconds": "1.5", "ttftQuantile": "0.9"}


def test_kv_handoff_from_the_decode_member_tightens_the_prefill_ttft_budget() -> None:
    # Prefill replicas see 1.25 s TTFT (prefill wait + prompt): within a 1.5 s SLO on their own ...
    alone = run("prefill", 2, meta=SLO, tps=4_000.0, ttft_s=1.25)
    assert "ttft" not in alone.rules
    # ... but a 0.5 s KV transfer to decode follows: the prefill stage has 1.0 s, and it scales.
    after = run("prefill", 2, meta=SLO, tps=4_000.0, ttft_s=1.25, pd_transfer_s=0.5)
    assert after.rules["ttft"] > 2 and after.desired >= after.rules["ttft"]
    # The decode role's sizing ignores TTFT whatever the handoff.
    assert "ttft" not in run("decode", 2, meta=SLO, tps=4_000.0, ttft_s=1.25, pd_transfer_s=0.5).rules


def test_own_replicas_transfer_counters_count_too() -> None:
    own = run("prefill", 2, meta=SLO, tps=4_000.0, ttft_s=1.25, xfer_s=0.5)
    assert own.rules["ttft"] > 2
    latest = run("prefill", 2, meta=SLO, tps=4_000.0, ttft_s=1.25, latest_xfer_s=0.5)  # SGLang's gauge
    assert latest.rules["ttft"] == own.rules["ttft"]


def test_a_handoff_longer_than_the_slo_holds_instead_of_chasing() -> None:
    d = run("prefill", 3, meta=SLO, tps=4_000.0, ttft_s=1.25, pd_transfer_s=2.0)
    assert d.rules["ttft"] == 3  # ready + starting: more prefill replicas cannot shorten a transfer


def test_transfer_mean_is_windowed_from_the_connector_counters() -> None:
    fleet = Fleet(cfg("decode"), 2)
    for _ in range(5):
        fleet.step(tps=2_000.0, xfer_s=0.04)
    snap = Snapshot(taken_at=fleet.now + 1, replicas=tuple(
        ReplicaReading(e.name, fleet.now + 1, e.read(xfer=True)) for e in fleet.engines))
    obs, _ = observe(snap, fleet.state, fleet.cfg)
    assert obs.kv_transfer_s == pytest.approx(0.04)


@pytest.mark.parametrize(("role", "own", "peer", "seconds"), [
    ("prefill", None, None, 0.0), ("prefill", 0.05, None, 0.05), ("prefill", None, 0.2, 0.2),
    ("prefill", 0.05, 0.2, 0.2), ("decode", 0.05, 0.2, 0.0), ("both", 0.3, None, 0.0), ("prefill", 0.0, -1.0, 0.0),
])
def test_transfer_seconds(role: str, own: float | None, peer: float | None, seconds: float) -> None:
    assert transfer_seconds(role, own, peer) == seconds
    assert ttft_budget(1.0, role, own, peer) == pytest.approx(1.0 - seconds)


def test_role_rule_sets() -> None:
    rules = {"demand": 1, "prefill": 2, "queue": 3, "kv": 4, "ttft": 5, "itl": 6, "saturation": 7}
    assert set(select_rules(rules, "prefill")) == {"demand", "prefill", "queue", "ttft", "saturation"}
    assert set(select_rules(rules, "decode")) == {"demand", "kv", "itl", "saturation"}
    assert select_rules(rules, "both") == rules
    assert ROLE_RULES["prefill"] | ROLE_RULES["decode"] == ROLE_RULES["both"]


# ---- properties, per role ---------------------------------------------------------------------------

step_st = st.tuples(st.floats(0.0, 40_000.0), st.integers(0, 200), st.integers(0, 400), st.floats(0.0, 0.95))


def _final(role: str, history: list[tuple[float, int, int, float]], n: int = 3, unknown: int = 0) -> Decision:
    fleet = Fleet(cfg(role, ttftSloSeconds="1", targetWaitingPerReplica="4"), n)
    d = None
    for i, (tps, waiting, running, kv) in enumerate(history):
        last = i == len(history) - 1
        d = fleet.step(5.0, tps=tps, waiting=waiting, running=running, kv=kv, unknown=unknown if last else 0)
    assert d is not None
    return d


@settings(max_examples=40, deadline=None)
@given(role=st.sampled_from(["prefill", "decode"]), history=st.lists(step_st, min_size=1, max_size=4),
       more_tps=st.floats(0.0, 40_000.0), more_running=st.integers(0, 300), more_kv=st.floats(0.0, 0.3))
def test_more_demand_never_yields_fewer_replicas_per_role(role: str, history: list[tuple[float, int, int, float]],
                                                           more_tps: float, more_running: int, more_kv: float) -> None:
    """More prompt tokens/s (prefill), more running sequences or KV usage (decode) in the last reading
    never yield fewer replicas. Waiting stays within ordinary queueing, as in the v2 property."""
    calm = [(tps, min(w, 4), r, kv) for tps, w, r, kv in history]
    tps, w, r, kv = calm[-1]
    busier = [*calm[:-1], (tps + more_tps, w, r + more_running, min(0.99, kv + more_kv))]
    assert _final(role, busier).desired >= _final(role, calm).desired


@settings(max_examples=40, deadline=None)
@given(role=st.sampled_from(["prefill", "decode"]), history=st.lists(step_st, min_size=2, max_size=4),
       hide=st.integers(1, 2))
def test_unknown_data_never_lowers_the_count_per_role(role: str, history: list[tuple[float, int, int, float]],
                                                       hide: int) -> None:
    fleet = Fleet(cfg(role, ttftSloSeconds="1"), 3)
    last = None
    for tps, waiting, running, kv in history[:-1]:
        last = fleet.step(5.0, tps=tps, waiting=waiting, running=running, kv=kv)
    assert last is not None
    tps, waiting, running, kv = history[-1]
    d = fleet.step(400.0, tps=tps, waiting=waiting, running=running, kv=kv, unknown=hide)
    assert d.desired >= last.desired
