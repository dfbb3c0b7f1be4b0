"""Step 5, ``hold``: what is released when the need falls (pure; docs/policy.md, "Burst hold").

- ``burst-hold`` (ski rental): each replica above today's need is held for the break-even time of
  releasing it (the node idle time plus the time-to-ready of the ladder step it would come back by),
  at least ``scaleDownStabilizationSeconds``; the warmest-returning replicas go first.
- ``state-lost``: a tracker without a stored window to stabilise with holds what ran before for one
  window.
"""

from __future__ import annotations

from dataclasses import replace

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.decide.fleet import Fleet
from warmscale.scaler.decide.trace import Step
from warmscale.scaler.ladder import held_count, longest_hold
from warmscale.scaler.observation import Observation
from warmscale.scaler.state import ScalerState


def window_max_push(
    recs: tuple[tuple[float, int], ...], now: float, value: int, since: float
) -> tuple[tuple[float, int], ...]:
    """Add (now, value) to a sliding-window maximum and drop what is older than ``since``.

    Only the recommendations that can still be the maximum are kept (values strictly decreasing with
    time), so the first entry is the window's maximum and the state stays a few entries long."""
    kept = [r for r in recs if r[0] > since and r[1] > value]
    kept.append((now, value))
    return tuple(kept)


def hold_in_force(state: ScalerState, cfg: ScalerConfig, now: float, fleet: Fleet) -> bool:
    """Whether a recent peak still holds a replica (its break-even time has not passed)."""
    return any(held_count(0, v, now - t, fleet.ladder, cfg.node_idle_seconds, cfg.scale_down_stabilization_seconds) > 0
               for t, v in state.recommendations if v > 0)


def burst_hold(desired: int, reason: str, obs: Observation, state: ScalerState, cfg: ScalerConfig, now: float,
               fleet: Fleet, peak: int | None = None) -> tuple[int, str, ScalerState, Step]:
    """The burst hold; ``peak`` (at most ``desired``) is what this decision adds to the held peaks
    where the confirm step says less is worth holding (headroom that did not last); None: ``desired``."""
    before = desired
    ladder = fleet.ladder
    window = longest_hold(ladder, cfg.node_idle_seconds, cfg.scale_down_stabilization_seconds)
    past = state.recommendations
    if state.last_decision_at is None and obs.current_replicas:
        # A fresh tracker knows nothing of the recent need: the fleet it finds counts as one (a
        # fleet sized by someone is not released before the break-even time either).
        past = ((now, min(obs.current_replicas, cfg.max_replicas)),)
    recorded = desired if peak is None else min(desired, peak)
    recs = window_max_push(past, now, recorded, now - window)
    state = replace(state, recommendations=recs)
    held_from: float | None = None
    if desired > 0:
        base = desired
        for t, v in recs:
            held = held_count(base, v, now - t, ladder, cfg.node_idle_seconds, cfg.scale_down_stabilization_seconds)
            if held > desired:
                desired = held
                held_from = t
                # Where the API shows the target's pods (ready and starting are seen, not inferred from
                # the replicas that report): while the rules still want more than is ready the fleet
                # is scaling up, the hold keeps the count asked for and the rule driving the scale-up
                # stays the reason; when they do not but replicas are starting, the burst's peak is
                # held while it arrives.
                seen = obs.starting_replicas is not None
                if not (seen and base > fleet.ready):
                    young = now - t < cfg.scale_down_stabilization_seconds and not obs.starting_replicas
                    reason = "scale-down-stabilization" if young else "burst-hold"
    step = Step("hold", before, desired, reason if desired != before else "ok",
                {"hold_window_s": window, "node_idle_s": cfg.node_idle_seconds,
                 "stabilization_s": cfg.scale_down_stabilization_seconds, "peak": recs[0][1],
                 "peak_age_s": now - recs[0][0], "recorded": recorded,
                 "hold_left_s": max(0.0, window - (now - recs[0][0])),
                 "held_since_s": None if held_from is None else now - held_from})
    return desired, reason, state, step


def lost_state_hold(desired: int, active: bool, reason: str, obs: Observation, state: ScalerState,
                    cfg: ScalerConfig, now: float, fleet: Fleet,
                    last: int | None) -> tuple[int, bool, str, ScalerState, Step]:
    before = desired
    window = longest_hold(fleet.ladder, cfg.node_idle_seconds, cfg.scale_down_stabilization_seconds)
    lost_at = state.state_lost_at
    if lost_at is not None:
        if now - lost_at < window:
            held = min(max(last or 0, obs.current_replicas or 0), cfg.max_replicas)
            if desired < held:
                desired, active, reason = held, True, "state-lost-hold"
        else:
            state = replace(state, state_lost_at=None)
    step = Step("state-lost", before, desired, reason if desired != before else "ok",
                {"state_lost_s": None if lost_at is None else now - lost_at, "last_desired": last})
    return desired, active, reason, state, step
