"""The demo's cost baseline: a fixed fleet, ready from the start, as large as warmscale's GPU-seconds buy.

A fixed fleet needs no control loop, so it is replayed after the live run, on the same arrivals,
engines and router (:class:`warmscale.demo.fleet.Fleet`), stepped on the trace clock at the live
loop's step (no waiting: it takes a fraction of a second). Its size is the largest that costs no more
GPU-seconds than warmscale did over the same trace time (:func:`equal_cost_replicas`).
"""

from __future__ import annotations

from collections.abc import Sequence

from warmscale.demo.burst import Arrival
from warmscale.demo.fleet import Fleet
from warmscale.simulation.engine import EngineProfile, Request
from warmscale.warmpool.startup_model import StartupProfile


def equal_cost_replicas(gpu_seconds: float, gpus_per_replica: int, trace_seconds: float) -> int:
    """Replicas a fixed fleet may hold for ``trace_seconds`` within ``gpu_seconds`` (at least 1)."""
    if trace_seconds <= 0:
        return 1
    return max(1, int(gpu_seconds // (gpus_per_replica * trace_seconds)))


def replay_fixed(arrivals: Sequence[Arrival], startup: StartupProfile, profile: EngineProfile, replicas: int,
                 end_at: float, step_s: float) -> tuple[Fleet, list[float]]:
    """``replicas`` ready from t = 0 until ``end_at`` (trace seconds), stepped every ``step_s``: the
    fleet (its GPU-seconds) and every first token's TTFT."""
    fleet = Fleet("fixed", startup, profile)
    fleet.start_ready(replicas, 0.0)
    ttfts: list[float] = []
    i, now = 0, 0.0
    while True:
        while i < len(arrivals) and arrivals[i].at <= now:
            a = arrivals[i]
            fleet.submit(Request(a.at, a.input_tokens, a.output_tokens, hashes=a.hashes,
                                 hash_tokens=a.hash_tokens), now)
            i += 1
        fleet.step(now)
        ttfts.extend(fleet.take_ttfts())
        if now >= end_at:
            return fleet, ttfts
        now = min(end_at, now + step_s)
