"""The real KEDA + the real HPA drive a Deployment through ``warmscale scaler`` (see conftest).

Timings are printed (``[keda-e2e]`` lines) and bounded loosely: they are facts about the control
path (push, KEDA's loops, the HPA sync period of the harness), not benchmarks.
"""

from __future__ import annotations

import asyncio
import time

from tests.cluster.scaling import ReplicaTimeline, ScalerProcess, read_hpa
from tests.keda.conftest import E2E, Workload, report


async def settle(e2e: E2E, w: Workload, scaler: ScalerProcess, *, within: float, stable_for: float = 3.0,
                 want: int | None = None) -> tuple[int, int]:
    """Wait until the scaler's latest decision and the Deployment's replicas both stay put for
    ``stable_for`` seconds (and the decision is ``want`` if given); return (decided, replicas)."""
    deadline = time.monotonic() + within
    last: tuple[int | None, int | None] = (None, None)
    since = time.monotonic()
    while time.monotonic() < deadline:
        now_pair = (scaler.latest_desired(e2e.namespace, w.name), w.timeline.spec)
        if now_pair != last:
            last, since = now_pair, time.monotonic()
        decided, spec = last
        if decided is not None and spec is not None and time.monotonic() - since >= stable_for:
            if want is None or decided == want:
                return decided, spec
        await asyncio.sleep(0.2)
    raise TimeoutError(f"not settled after {within:.0f}s: decided={last[0]} replicas={last[1]} "
                       f"history={w.timeline.samples[-10:]}")


async def test_push_scales_from_zero_on_queue_onset_then_up_and_back_to_zero(e2e: E2E) -> None:
    """external-push, scale to zero allowed: 0 -> 1 on queue onset (push), 1 -> N under load,
    back to 0 only after the idle window."""
    w = await e2e.workload("llm", 0, ready_delay="2s")
    scaler = e2e.scaler()
    meta = e2e.metadata(w, scaleToZero="true", minReplicas="0", idleWindowSeconds="4")
    await e2e.scale_with(w, scaler, meta, min_replicas=0, max_replicas=8)
    # Idle: nothing scales up without load (KEDA has connected: its push stream is open).
    await _wait(lambda: scaler.open_streams().get("StreamIsActive", 0) >= 1, 30, "KEDA's StreamIsActive")
    await asyncio.sleep(3)
    assert w.timeline.spec == 0

    w.engines.set_concurrency(5)
    await w.timeline.wait(spec=1, within=30, what="0 -> 1 on queue onset")
    await w.timeline.wait(ready=1, within=30, what="first replica Ready")
    onset = w.engines.onset_at
    assert onset is not None
    t_spec = w.timeline.first(onset, spec=1)
    t_ready = w.engines.first_ready_at
    assert t_spec is not None and t_ready is not None
    onset_to_replicas, onset_to_ready = t_spec - onset, t_ready - onset
    # Push: KEDA activates on the stream message, not on its next poll.
    assert onset_to_replicas < 10, onset_to_replicas

    w.engines.set_concurrency(40)  # 40 in flight / 10 per replica
    decided, spec = await settle(e2e, w, scaler, within=60, want=4)
    assert spec == decided == 4
    t_quiet = time.monotonic()
    w.engines.set_concurrency(0)
    await w.timeline.wait(spec=0, within=60, what="back to zero when quiet")
    t_zero = w.timeline.first(t_quiet, spec=0)
    assert t_zero is not None
    # Zero only after idleness: the idle window (4 s) must have passed.
    assert t_zero - t_quiet >= 4.0, t_zero - t_quiet
    report("push-from-zero", onset_to_replicas_s=round(onset_to_replicas, 2),
           onset_to_ready_s=round(onset_to_ready, 2), pod_ready_delay_s=2.0,
           quiet_to_zero_s=round(t_zero - t_quiet, 2), replicas=w.timeline.specs_since(onset))


async def test_scale_down_to_floor_never_zero_when_not_allowed(e2e: E2E) -> None:
    """min 1, scale to zero not allowed: N -> 1 when quiet, and it stays at 1."""
    w = await e2e.workload("llm", 1)
    scaler = e2e.scaler()
    await e2e.scale_with(w, scaler, e2e.metadata(w), min_replicas=1, max_replicas=8)
    w.engines.set_concurrency(30)
    decided, spec = await settle(e2e, w, scaler, within=60, want=3)
    assert spec == decided == 3
    t_quiet = time.monotonic()
    w.engines.set_concurrency(0)
    await w.timeline.wait(spec=1, within=60, what="down to the floor")
    t_floor = w.timeline.first(t_quiet, spec=1)
    assert t_floor is not None
    await asyncio.sleep(8)  # idle window and cooldown long past
    assert w.timeline.spec == 1
    assert 0 not in w.timeline.specs_since(t_quiet)
    report("floor", quiet_to_floor_s=round(t_floor - t_quiet, 2), replicas=w.timeline.specs_since(t_quiet))


async def _land(e2e: E2E, *, tolerance: str | None) -> tuple[int, int, int]:
    """10 replicas, then a load asking for 11 (inside the HPA's default 10% band)."""
    w = await e2e.workload("llm", 1)
    scaler = e2e.scaler()
    meta = e2e.metadata(w, maxReplicas="16", hpaTolerance="0" if tolerance == "0" else "0.1")
    await e2e.scale_with(w, scaler, meta, min_replicas=1, max_replicas=16, tolerance=tolerance)
    w.engines.set_concurrency(100)
    _, spec1 = await settle(e2e, w, scaler, within=90, want=10)
    w.engines.set_concurrency(110)
    decided, spec = await settle(e2e, w, scaler, within=90, want=11, stable_for=5)
    return spec1, decided, spec


async def test_exact_landing_with_tolerance_zero(e2e: E2E) -> None:
    start, decided, spec = await _land(e2e, tolerance="0")
    hpa = await read_hpa(e2e.api, e2e.namespace, "llm")
    assert hpa is not None and str(hpa.spec.behavior.scale_up.tolerance) in {"0", "0.0"}
    assert start == 10
    assert spec == decided == 11  # 10 -> 11 is inside the default band: only tolerance 0 moves exactly
    report("landing-tolerance-0", decided=decided, replicas=spec)


async def test_landing_within_band_without_tolerance(e2e: E2E) -> None:
    start, decided, spec = await _land(e2e, tolerance=None)
    assert start == 10
    # The scaler compensates for the 10% band by reporting a value just outside it: the HPA moves,
    # and lands within the band of the decided count (at the smallest count outside it: 12).
    assert spec >= decided == 11
    assert abs(1 - decided / spec) <= 0.1 + 1e-9, (decided, spec)
    report("landing-default-tolerance", decided=decided, replicas=spec)


async def _wait(pred: object, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if pred():  # type: ignore[operator]
                return
        except OSError:
            pass
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


__all__ = ["ReplicaTimeline", "settle"]
