"""The endpoint picker's signals in the pure policy (injected clock): the gateway queue is demand,
stale endpoints never count as idle, saturation sizes the stage a role serves."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from warmscale.scaler.config import ConfigError, ScalerConfig, parse_metadata
from warmscale.scaler.observation import observe
from warmscale.scaler.policy import Decision, decide
from warmscale.scaler.state import ScalerState
from warmscale.signals.model import GatewayReading, GatewaySignal, ReplicaReading, ReplicaSignal, Snapshot

EPP = {"eppAddress": "http://epp.test:9090/metrics", "eppPool": "qwen-chat", "targetInflightPerReplica": "32"}
ZERO = {**EPP, "scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "0", "maxReplicas": "8"}


def picker(queue: float = 0, *, sat: dict[str, float] | None = None, running: float | None = 0.0,
           ready: float | None = 0, stale: float | None = 0) -> GatewaySignal:
    return GatewaySignal(flavor="llm-d", queue=queue, saturation=sat or {"effective": 1.0}, running=running,
                         ready_endpoints=ready, stale_endpoints=stale)


@dataclass
class Run:
    cfg: ScalerConfig
    now: float = 1_000.0
    state: ScalerState = field(default_factory=ScalerState)

    def step(self, sig: GatewaySignal | None, *, replicas: tuple[ReplicaReading, ...] = (), dt: float = 1.0,
             ready: int | None = None) -> Decision:
        self.now += dt
        reading = GatewayReading("epp:qwen-chat", self.now, sig, None if sig else "connection refused")
        snap = Snapshot(taken_at=self.now, replicas=replicas, gateways=(reading,), ready_replicas=ready)
        obs, self.state = observe(snap, self.state, self.cfg)
        decision, self.state = decide(obs, self.state, self.cfg, self.now)
        return decision


def test_gateway_queue_activates_from_zero_without_pods_or_redis() -> None:
    run = Run(parse_metadata(ZERO))
    d = run.step(picker(0))
    assert (d.desired, d.active, d.reason) == (0, False, "idle")
    d = run.step(picker(3))  # three requests held by the picker, no pod, no engine signal
    assert d.active and d.desired == 1 and d.reason == "demand"
    d = run.step(picker(100))
    assert d.desired == 4  # ceil(100 / 32): every held request needs a slot when nothing serves


def test_unknown_picker_is_never_idle() -> None:
    run = Run(parse_metadata(ZERO))
    run.step(picker(0))
    d = run.step(None)
    assert d.active and d.desired >= 1 and d.reason == "signals-unknown"


@pytest.mark.parametrize("stale", [1, 2])
def test_stale_endpoints_never_count_as_idle_nor_allow_scale_down(stale: float) -> None:
    run = Run(parse_metadata(ZERO))
    d = run.step(picker(0, stale=stale, ready=3, sat={"effective": 0.2}))
    assert d.active and d.desired >= 1 and d.reason != "idle"
    run2 = Run(parse_metadata({**EPP, "maxReplicas": "8", "scaleDownStabilizationSeconds": "0", "nodeIdleSeconds": "0",
                               "timeToReadySeconds": "0"}))
    run2.step(picker(0, running=150, ready=5, sat={"effective": 0.7}))
    d = run2.step(picker(0, running=10, ready=5, stale=stale, sat={"effective": 0.3}))
    assert d.desired == 5 and d.reason == "partial-data-hold"
    d = run2.step(picker(0, running=10, ready=5, stale=0, sat={"effective": 0.3}))
    assert d.desired < 5  # fresh metrics again: scale-down proceeds


def test_stale_driven_saturation_does_not_scale_up() -> None:
    # One decision of a fresh tracker: no burst confirmation (it needs burstConfirmSeconds of history).
    cfg = parse_metadata({**EPP, "maxReplicas": "16", "burstConfirmSeconds": "0"})
    d = Run(cfg).step(picker(0, running=20, ready=4, stale=2, sat={"effective": 1.6}))
    assert "saturation" not in d.rules  # fail-closed scoring of stale endpoints is not load
    d = Run(cfg).step(picker(0, running=20, ready=4, stale=0, sat={"effective": 1.6}))
    assert d.rules["saturation"] == 8 and d.desired == 8  # 4 x 1.6 / 0.8


@pytest.mark.parametrize(("role", "expected"), [("prefill", 6), ("decode", 1), ("both", 6)])
def test_role_reads_its_stage_saturation(role: str, expected: int) -> None:
    meta = {**EPP, "maxReplicas": "16", "role": role, "burstConfirmSeconds": "0"}  # one fresh decision
    if role != "both":
        meta["pdGroup"] = "llama-pd"
    sig = picker(0, running=10, ready=3, sat={"prefill": 1.6, "decode": 0.5, "effective": 1.6})
    d = Run(parse_metadata(meta)).step(sig)
    assert d.desired == expected


def test_role_selects_rules() -> None:
    hot = ReplicaReading("r0", 0.0, ReplicaSignal(engine="vllm", waiting=0, running=4, kv_usage=0.99))
    base = {"endpoints": "http://e.test/metrics", "maxReplicas": "8"}
    d_decode = Run(parse_metadata({**base, "role": "decode", "pdGroup": "g"})).step(None, replicas=(hot,), ready=2)
    d_prefill = Run(parse_metadata({**base, "role": "prefill", "pdGroup": "g"})).step(None, replicas=(hot,), ready=2)
    assert "kv" in d_decode.rules and "kv" not in d_prefill.rules


@pytest.mark.parametrize(("meta", "key"), [
    ({"eppPool": "p", "redisAddress": "r:6379", "redisQueue": "q"}, "eppPool"),
    ({**EPP, "eppSaturationTarget": "0"}, "eppSaturationTarget"),
    ({**EPP, "eppSaturationTarget": "nan"}, "eppSaturationTarget"),
    ({**EPP, "eppPool": "Not_A_Name"}, "eppPool"),
    ({**EPP, "eppAddress": "ftp://x"}, "eppAddress"),
    ({**EPP, "role": "encode"}, "role"),
    ({**EPP, "pdGroup": "g"}, "role"),
    ({**EPP, "role": "decode", "decodePerPrefillMin": "2"}, "decodePerPrefillMin"),
    ({**EPP, "role": "decode", "pdGroup": "g", "decodePerPrefillMin": "3", "decodePerPrefillMax": "2"},
     "decodePerPrefillMin"),
    ({**EPP, "role": "decode", "pdGroup": "g", "decodePerPrefillMax": "65"}, "decodePerPrefillMax"),
    ({**EPP, "role": "decode", "pdGroup": "g", "decodePerPrefillMax": "inf"}, "decodePerPrefillMax"),
])
def test_bad_metadata_names_the_key(meta: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_metadata(meta)
    assert err.value.key == key


def test_epp_alone_is_a_signal_source() -> None:
    cfg = parse_metadata({"eppAddress": "http://epp.test:9090/metrics"})
    assert cfg.epp_pool is None and cfg.role == "both"
    cfg = parse_metadata({"prometheusAddress": "http://prom.test:9090", "eppPool": "p"})
    assert cfg.epp_address is None and cfg.epp_pool == "p"
