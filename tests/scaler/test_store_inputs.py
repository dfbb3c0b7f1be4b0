"""The lost-state hold: after the stored state is lost, no scale-down (nor zero) for one window."""

from __future__ import annotations

from warmscale.scaler.config import parse_metadata
from warmscale.scaler.observation import observe
from warmscale.scaler.policy import decide
from warmscale.scaler.state import ScalerState
from warmscale.signals.model import ReplicaReading, ReplicaSignal, Snapshot

CFG = parse_metadata({"endpoints": "http://e:1/m", "scaleToZero": "true", "minReplicas": "0",
                      "idleWindowSeconds": "0", "targetInflightPerReplica": "10",
                      "scaleDownStabilizationSeconds": "60", "nodeIdleSeconds": "0", "timeToReadySeconds": "1"})


def _snap(now: float, running: float, current: int | None = None) -> Snapshot:
    sig = ReplicaSignal(engine="vllm", waiting=0.0, running=running)
    return Snapshot(taken_at=now, replicas=(ReplicaReading("r", now, sig),), current_replicas=current)


def test_lost_state_holds_for_one_window_then_releases() -> None:
    state = ScalerState(last_desired=5, state_lost_at=100.0)
    for now, want in [(101.0, 5), (159.0, 5), (161.0, 1)]:
        obs, state = observe(_snap(now, 5.0), state, CFG)
        d, state = decide(obs, state, CFG, now)
        assert d.desired == want, now
    assert state.state_lost_at is None


def test_lost_state_hold_uses_the_current_count_and_refuses_zero() -> None:
    state = ScalerState(state_lost_at=100.0)
    obs, state = observe(_snap(101.0, 0.0, current=3), state, CFG)
    d, _ = decide(obs, state, CFG, 101.0)
    assert (d.desired, d.active, d.reason) == (3, True, "state-lost-hold")


def test_state_lost_at_roundtrips() -> None:
    s = ScalerState(last_desired=2, state_lost_at=5.0)
    assert ScalerState.from_dict(s.to_dict()) == s
