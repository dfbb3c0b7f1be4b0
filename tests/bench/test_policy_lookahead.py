"""Policy fix found by the trace replay: the look-ahead extrapolated the demand trend (a slope fitted
over trendWindowSeconds, 60 s by default) over the whole time-to-ready. With the warm pool used
up, that is the cold start (510 s for 8B, 905 s for 70B): a start-up ramp or a burst of a few
requests then asked for maxReplicas. The slope was then extrapolated at most over its fit window;
since issue 12 the horizon is the warm ladder's time-to-ready again (not capped by the window) and
one decision extrapolates at most (scaleUpMaxStep - 1) x today's load instead."""

from __future__ import annotations

from warmscale.scaler.config import parse_metadata
from warmscale.scaler.observation import observe
from warmscale.scaler.policy import decide
from warmscale.scaler.state import ScalerState
from warmscale.signals.model import ReplicaReading, ReplicaSignal, Snapshot

META = {"endpoints": "http://e:8000/metrics", "maxReplicas": "20", "targetInflightPerReplica": "32",
        "trendWindowSeconds": "60"}


def _run(loads: list[float], ttr: float, step: float = 5.0) -> dict[str, int]:
    cfg = parse_metadata(META)
    state = ScalerState()
    rules: dict[str, int] = {}
    for i, load in enumerate(loads):
        now = i * step
        sig = ReplicaSignal(engine="vllm", waiting=0.0, running=load, kv_usage=0.1, requests_total=float(i))
        snap = Snapshot(taken_at=now, replicas=(ReplicaReading("a", now, sig),), ready_replicas=1,
                        starting_replicas=0, time_to_ready_s=ttr, current_replicas=1)
        obs, state = observe(snap, state, cfg)
        d, state = decide(obs, state, cfg, now)
        rules = d.rules
    return rules


def test_a_ramp_over_one_minute_is_not_extrapolated_over_a_cold_start() -> None:
    # 0 -> 12 in-flight requests within a minute (slope 0.2/s), then a 510 s cold start ahead.
    loads = [min(12.0, 1.0 * i) for i in range(13)]
    rules = _run(loads, ttr=510.0)
    # Before the fix: 12 + 0.2 x 510 = 114 in flight -> 4 replicas. Now: 12 + min(0.2 x 510, 1 x 32) = 44 -> 2.
    assert rules["demand"] == 2


def test_look_ahead_still_covers_growth_within_the_window() -> None:
    loads = [5.0 * i for i in range(13)]  # +1/s, load 60
    rules = _run(loads, ttr=30.0)
    assert rules["demand"] == 3  # (60 + 1 x 30) / 32 -> 3
