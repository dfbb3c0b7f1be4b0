"""Step ``hot``: how many of the hot tier's sleepers should be awake now (pure; docs/hot-tier.md,
"The wake path").

It runs after the holds and before ``landing`` and never changes the count: the HPA still grows the
scale target through KEDA. A wake bridges (phase 1) the need the scale target's own replicas do not
cover yet, beyond the ready ones and the starting ones that are ready sooner than a sleeper would be;
once the target's own ready replicas cover the count, every awake sleeper is released (phase 2: it
drains and sleeps again). While bridging no sleeper is released early: a sleep costs seconds of GPU
time (about 10 s for an 8B at level 1) and the next wake seconds more. Once the count has not risen
for ``idleWindowSeconds``, the count bridged is the rules' (the need), not one only a hold keeps: a
lull under the burst hold puts the sleepers back to sleep, the next rise wakes them in a wake time.

The awake sleepers are already ready capacity in the fleet (decide/fleet.py) and the asleep ones the
ladder's ``hot`` rung (scaler/ladder.py); without a hot status (no sleepers, or their status unknown)
the step says ``hot: off`` and no intent is published (absent data never sleeps anything).
"""

from __future__ import annotations

from dataclasses import dataclass

from warmscale.scaler.decide.fleet import Fleet
from warmscale.scaler.decide.trace import Inputs, Step
from warmscale.scaler.observation import Observation
from warmscale.scaler.state import ScalerState


@dataclass(frozen=True)
class HotPlan:
    target: int | None  # sleepers that should be awake now; None: no hot tier known (nothing to publish)
    wake: int  # of them, to wake now
    release: int  # awake ones to put back to sleep now
    step: Step


def _starting_soon(fleet: Fleet, state: ScalerState, now: float, wake_s: float) -> int:
    """The starting replicas that are ready before a sleeper woken now would be: all of them where the
    last scale-up plus the target's own time-to-ready falls within the wake time, else none (their
    progress is not known one by one)."""
    if fleet.starting <= 0 or state.last_increase_at is None:
        return 0
    return fleet.starting if state.last_increase_at + fleet.own_ttr <= now + wake_s else 0


def hot(desired: int, active: bool, obs: Observation, state: ScalerState, fleet: Fleet, now: float,
        needed: int | None = None) -> HotPlan:
    """``needed``: the rules' count (the need step's, before confirmation and the holds), given once the
    count has settled (scaler/policy.py). Sleepers bridge the smaller of it and ``desired``: a count
    only a hold keeps (the burst hold, scale-down stabilisation) is kept by the scale target's own
    replicas, not by sleepers held awake through a lull; the next rise of the need wakes them again
    within a wake time."""
    if obs.hot_asleep is None:
        return HotPlan(None, 0, 0, Step("hot", desired, desired, "ok", {"hot": "off"}))
    awake = fleet.hot_awake
    # Wakes in progress are neither capacity yet nor asleep: the target keeps them (a target that
    # dropped below them would have them put back to sleep the moment they are awake).
    on = awake + obs.hot_waking
    own = fleet.own_ready
    wake_s = obs.hot_wake_s if obs.hot_wake_s is not None else 0.0
    soon = _starting_soon(fleet, state, now, wake_s)
    want = (desired if needed is None else min(desired, needed)) if active else 0
    shortfall = max(0, want - own - soon)
    available = on + obs.hot_asleep
    if own >= want:
        target = 0
        what = "release" if on else "none"
        because = f"the scale target's own {own} ready replicas cover {want}"
    else:
        target = min(available, max(shortfall, on))
        what = "wake" if target > on else ("bridge" if target > 0 else "none")
        because = (f"{want} wanted, {own} own ready, {soon} starting sooner than a {wake_s:g} s wake: "
                   f"{shortfall} short, {available} sleepers")
    inputs: Inputs = {"hot": what, "because": because, "wanted": want, "own_ready": own, "starting": fleet.starting,
                      "starting_soon": soon, "awake": awake, "waking": obs.hot_waking,
                      "asleep": obs.hot_asleep, "wake_s": wake_s,
                      "shortfall": shortfall, "target": target}
    # The step never moves the count, so its why is "ok" (the trace's chain); what it decided is "hot".
    return HotPlan(target, max(0, target - on), max(0, on - target), Step("hot", desired, desired, "ok", inputs))
