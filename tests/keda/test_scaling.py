"""The real KEDA + the real HPA drive a Deployment through ``warmscale scaler`` (see conftest).

Timings are printed (``[keda-e2e]`` lines) and bounded loosely: they are facts about the control
path (push, KEDA's loops, the HPA sync period of the harness), not benchmarks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection

from tests.keda.conftest import E2E, Workload, report
from warmscale.localcluster.scaling import ScalerProcess, read_hpa


async def settle(e2e: E2E, w: Workload, scaler: ScalerProcess, *, within: float, stable_for: float = 3.0,
                 want: Collection[int] | None = None) -> tuple[int, int]:
    """Wait until the Deployment's replicas equal the scaler's latest decision and both stay put for
    ``stable_for`` seconds, with the decision in ``want`` if given; return (decided, replicas).
    Times out if the Deployment never lands on such a decision.

    ``want`` names the steady decision for the load: a load step is first read as growth (replicas
    coming up absorb the gateway queue, so the served concurrency rises for seconds) and the
    look-ahead may ask for more for a while (7 for a step to 35 in flight), held by the 4 s
    scale-down window; the Deployment lands on that too, and a landing on it is not the one checked."""
    deadline = time.monotonic() + within
    last: tuple[int | None, int | None] = (None, None)
    since = time.monotonic()
    while time.monotonic() < deadline:
        now_pair = (scaler.latest_desired(e2e.namespace, w.name), w.timeline.spec)
        if now_pair != last:
            last, since = now_pair, time.monotonic()
        decided, spec = last
        if decided is not None and decided == spec and time.monotonic() - since >= stable_for:
            if want is None or decided in want:
                return decided, spec
        await asyncio.sleep(0.2)
    latest = scaler.decisions(e2e.namespace, w.name)[-1:]
    why = {k: latest[0].get(k) for k in ("reason", "rules", "ready", "starting")} if latest else None
    raise TimeoutError(f"not settled after {within:.0f}s: decided={last[0]} replicas={last[1]} (want {want}) "
                       f"last decision {why} history={w.timeline.samples[-10:]}")


async def test_push_scales_from_zero_on_queue_onset_then_up_and_back_to_zero(e2e: E2E) -> None:
    """external-push, scale to zero allowed: 0 -> 1 on queue onset (push), 1 -> N under load,
    back to 0 only after the idle window."""
    w = await e2e.workload("llm", 0, ready_delay="2s")
    scaler = e2e.scaler()
    meta = e2e.metadata(w, scaleToZero="true", minReplicas="0", idleWindowSeconds="4")
    await e2e.scale_with(w, scaler, meta, min_replicas=0, max_replicas=8)
    await _wait(lambda: scaler.open_streams().get("StreamIsActive", 0) >= 1, 30, "KEDA's StreamIsActive")
    # A new tracker has not seen the idle window yet, so it starts active (absent history is not
    # idleness) and may activate the target once; after the idle window it is inactive at 0.
    await _wait(lambda: not scaler.decisions(e2e.namespace, w.name)[-1]["active"], 30, "inactive verdict")
    await w.timeline.wait(spec=0, within=30, what="at zero before the load")
    await asyncio.sleep(3)
    assert w.timeline.spec == 0
    blip = w.timeline.specs_since(0.0)

    w.engines.set_concurrency(5)
    await w.timeline.wait(spec=1, within=30, what="0 -> 1 on queue onset")
    await w.timeline.wait(ready=1, within=30, what="first replica Ready")
    onset = w.engines.onset_at
    assert onset is not None
    t_spec = w.timeline.first(onset, spec=1)
    t_ready = w.timeline.first(onset, ready=1)
    assert t_spec is not None and t_ready is not None
    onset_to_replicas, onset_to_ready = t_spec - onset, t_ready - onset
    # Push: KEDA activates on the stream message, not on its next poll.
    assert onset_to_replicas < 10, onset_to_replicas

    # 35 in flight / 10 per replica -> 4 (loads sit mid-band: in-flight counts jitter by a few
    # requests between scrapes, and ceil() at an exact multiple would flip between two counts)
    w.engines.set_concurrency(35)
    decided, spec = await settle(e2e, w, scaler, within=60, want=(4, 5))
    # 35 / 10 -> 4; after the look-ahead's overshoot the policy's scale-down hysteresis may hold
    # ceil(35 / (10 * 0.8)) = 5. Either way the Deployment sits exactly on the decision.
    assert spec == decided and decided in (4, 5), (decided, spec)
    t_quiet = time.monotonic()
    w.engines.set_concurrency(0)
    await w.timeline.wait(spec=0, within=60, what="back to zero when quiet")
    t_zero = w.timeline.first(t_quiet, spec=0)
    assert t_zero is not None
    # Zero only after idleness: the idle window (4 s) must have passed.
    assert t_zero - t_quiet >= 4.0, t_zero - t_quiet
    report("push-from-zero", onset_to_replicas_s=round(onset_to_replicas, 2),
           onset_to_ready_s=round(onset_to_ready, 2), pod_ready_delay_s=2.0,
           quiet_to_zero_s=round(t_zero - t_quiet, 2), replicas=w.timeline.specs_since(onset),
           replicas_before_load=blip)


async def test_scale_down_to_floor_never_zero_when_not_allowed(e2e: E2E) -> None:
    """min 1, scale to zero not allowed: N -> 1 when quiet, and it stays at 1."""
    w = await e2e.workload("llm", 1)
    scaler = e2e.scaler()
    await e2e.scale_with(w, scaler, e2e.metadata(w), min_replicas=1, max_replicas=8)
    w.engines.set_concurrency(25)
    decided, spec = await settle(e2e, w, scaler, within=60, want=(3, 4))
    assert spec == decided and decided in (3, 4), (decided, spec)  # 25 / 10 -> 3 (hysteresis: 4)
    t_quiet = time.monotonic()
    w.engines.set_concurrency(0)
    await w.timeline.wait(spec=1, within=60, what="down to the floor")
    t_floor = w.timeline.first(t_quiet, spec=1)
    assert t_floor is not None
    await asyncio.sleep(8)  # idle window and cooldown long past
    assert w.timeline.spec == 1
    assert 0 not in w.timeline.specs_since(t_quiet)
    report("floor", quiet_to_floor_s=round(t_floor - t_quiet, 2), replicas=w.timeline.specs_since(t_quiet))


async def _land(e2e: E2E, *, tolerance: str | None) -> tuple[ScalerProcess, Workload, float]:
    """10 replicas carrying 95 requests, then a slow ramp to 103: the scaler decides 11, which is
    inside the HPA's default 10% band around 10. Returns (scaler, workload, ramp start)."""
    w = await e2e.workload("llm", 10)
    w.engines.set_concurrency(95)  # before the scaler: its first decision sees a steady load
    await w.timeline.wait(ready=10, within=60, what="10 replicas Ready")
    await _wait(lambda: w.engines.in_engines() >= 90, 30, "95 requests in the engines")
    scaler = e2e.scaler()
    meta = e2e.metadata(w, maxReplicas="16", hpaTolerance="0" if tolerance == "0" else "0.1")
    await e2e.scale_with(w, scaler, meta, min_replicas=1, max_replicas=16, tolerance=tolerance)
    _, spec = await settle(e2e, w, scaler, within=60, want=(10,))
    assert spec == 10
    t_ramp = time.monotonic()
    # 1 request/s: the look-ahead adds slope x 2 s = 2: 105 at most, still 11. (At 2 requests/s the
    # margin to 110 was thin: in one CI run under load the fitted slope reached 12.)
    for c in range(96, 104):
        w.engines.set_concurrency(c)
        await asyncio.sleep(1.0)
    return scaler, w, t_ramp


async def test_exact_landing_with_tolerance_zero(e2e: E2E) -> None:
    scaler, w, t_ramp = await _land(e2e, tolerance="0")
    # The landing checked is the first move, 10 -> 11. A later 12 is a second exact landing, not a
    # miss: the engines are scraped one after another, so a request that finishes on one engine and
    # is re-dispatched to another not yet scraped can count twice. In one CI run on a loaded box a
    # decision read more than 110 for 103 in flight and asked for 12, and the scale-down hysteresis
    # (103 / 8 > 12) then keeps 12.
    decided, spec = await settle(e2e, w, scaler, within=60, want=(11, 12), stable_for=5)
    hpa = await read_hpa(e2e.api, e2e.namespace, "llm")
    assert hpa is not None and str(hpa.spec.behavior.scale_up.tolerance) in {"0", "0.0"}
    # 10 -> 11 is inside the default band: with tolerance 0 the HPA moves, and exactly.
    assert spec == decided
    specs = w.timeline.specs_since(t_ramp)
    assert specs[:2] == [10, 11], specs
    assert 11 in [d["desired"] for d in scaler.decisions(e2e.namespace, "llm", limit=200)]
    report("landing-tolerance-0", decided=decided, replicas=w.timeline.specs_since(t_ramp))


async def test_landing_within_band_without_tolerance(e2e: E2E) -> None:
    scaler, w, t_ramp = await _land(e2e, tolerance=None)
    await w.timeline.wait(spec=12, within=60, what="the HPA moving past the band")
    await asyncio.sleep(3)
    # The scaler decided 11 (inside the default 10% band around 10, where the HPA would not move);
    # its metric compensates, so the HPA moves to the smallest count outside the band: 12, within
    # the band of the decision. The policy then keeps 12 (scale-down hysteresis: 103 / 8 > 12).
    seen = [d["desired"] for d in scaler.decisions(e2e.namespace, "llm", limit=200)]
    assert 11 in seen, seen
    specs = w.timeline.specs_since(t_ramp)
    assert specs[:2] == [10, 12], specs
    assert abs(1 - 11 / 12) <= 0.1
    report("landing-default-tolerance", decided=11, replicas=specs)


async def _wait(pred: object, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if pred():  # type: ignore[operator]
                return
        except (OSError, IndexError, KeyError):
            pass
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")



async def test_an_explicit_idle_window_releases_a_held_burst_through_keda(e2e: E2E) -> None:
    """The burst hold (here nodeIdleSeconds 600 + timeToReadySeconds 120: 720 s) does not outlast a
    user's explicit idleWindowSeconds: once every replica has been fully idle that long the scaler is
    inactive at 0 and KEDA scales the Deployment to zero after its cooldownPeriod (docs/policy.md,
    "The hold and the idle window")."""
    w = await e2e.workload("llm", 1)
    scaler = e2e.scaler()
    meta = e2e.metadata(w, scaleToZero="true", minReplicas="0", idleWindowSeconds="5",
                        nodeIdleSeconds="600", timeToReadySeconds="120", burstConfirmSeconds="0")
    await e2e.scale_with(w, scaler, meta, min_replicas=0, max_replicas=8, cooldown=10)
    w.engines.set_concurrency(55)
    await w.timeline.wait(spec=6, within=90, what="the burst's 6 replicas")
    t_quiet = time.monotonic()
    w.engines.set_concurrency(0)
    await w.timeline.wait(spec=0, within=90, what="zero after the idle window and the cooldown")
    t_zero = w.timeline.first(t_quiet, spec=0)
    assert t_zero is not None
    held = [d for d in scaler.decisions(e2e.namespace, w.name) if d.get("reason") == "burst-hold"]
    idle = [d for d in scaler.decisions(e2e.namespace, w.name) if d.get("reason") == "idle"]
    assert idle, "no idle decision"
    report("idle-window-releases-hold", quiet_to_zero_s=round(t_zero - t_quiet, 2), burst_hold_decisions=len(held),
           replicas=w.timeline.specs_since(t_quiet))
    # idle window (5 s after the last request finished) + cooldown (10 s) + KEDA's loops, far below 720 s
    assert t_zero - t_quiet < 60, t_zero - t_quiet
