"""Step 2, ``confirm``: cold capacity only for a need that lasts or recurs (pure; docs/policy.md,
"Burst confirmation")."""

from __future__ import annotations

import math
from dataclasses import replace

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.ladder import Ladder, longest_hold, warm_steps
from warmscale.scaler.state import ScalerState

# The needs' window is this many burstConfirmSeconds: a need that lasted burstConfirmSeconds is the
# median of a window twice as long (it filled at least half of it).
CONFIRM_SPAN_FACTOR = 2.0


def confirm(desired: int, reason: str, state: ScalerState, ladder: Ladder, cfg: ScalerConfig, now: float,
            ready: int, provisioned: int,
            unserved: bool = True) -> tuple[int, str, ScalerState, dict[str, float | int | None]]:
    """Cold capacity only for a need that lasts or recurs (docs/policy.md, "Burst confirmation").

    A replica that takes long to become ready serves only demand still there when it is ready; a
    burst of seconds asks for it in vain (it comes after the burst and is then held for its break-even
    time). So the rules' need beyond what starts quickly (ready + starting + the ladder's warm steps)
    is granted, when the cold step takes longer than ``W = 2 x burstConfirmSeconds``, only up to the
    larger of the need's median over ``W`` (it lasted ``burstConfirmSeconds``) and its largest value in
    an earlier episode (ended more than ``trendWindowSeconds`` ago) within the longest burst hold (a
    burst of this size came before). Warm steps serve any burst; scale from zero is never held back.

    ``unserved``: the need is load the ready fleet does not serve now, not headroom (decide/need.py
    ``pressed``: false where only the KV residency need asks for more while nothing waits and the
    engines have room). Only then does a replica with no warm step start at once as the warm path's
    stand-in. Cold headroom must last, and its recurrence does not confirm it (it was served before
    with nothing waiting); for headroom the inputs say ``holdable``, the part of it that lasted, which
    is all the hold keeps: docs/policy.md, "Burst confirmation", the light load."""
    span = CONFIRM_SPAN_FACTOR * cfg.burst_confirm_seconds
    if span <= 0:
        return desired, reason, state, {"burst_confirm_s": cfg.burst_confirm_seconds}
    needs = (*(x for x in state.needs if x[0] > now - span), (now, desired))
    width = cfg.burst_window_seconds
    bucket = math.floor(now / width) * width
    memory = longest_hold(ladder, cfg.node_idle_seconds, cfg.scale_down_stabilization_seconds)
    peaks = [x for x in state.need_peaks if x[0] >= now - memory]
    recurrent = max((v for t, v in peaks if t + width <= now - cfg.trend_window_seconds), default=0)
    if peaks and peaks[-1][0] == bucket:
        peaks[-1] = (bucket, max(peaks[-1][1], desired))
    else:
        peaks.append((bucket, desired))
    state = replace(state, needs=needs, need_peaks=tuple(peaks))
    # Without a warm step one replica may still start at once: the warm path's stand-in, so a new
    # burst is never left to the ready fleet alone (standby: auto holds no placeholder where bursts
    # are shorter than a warm start; docs/benchmarks.md).
    # One stand-in, not one per decision: a replica already starting as the stand-in (or for any other
    # reason) is not extended by another while no warm step exists.
    steps = warm_steps(ladder)
    quick = provisioned + steps if steps > 0 else max(provisioned, ready + 1) if unserved else provisioned
    inputs: dict[str, float | int | None] = {"burst_confirm_s": cfg.burst_confirm_seconds, "quick": quick,
                                             "unserved": int(unserved),
                                             "recurrent": recurrent, "cold_ttr_s": ladder[-1][2]}
    if ready == 0 or ladder[-1][2] <= span:
        return desired, reason, state, inputs
    values = sorted(v for _, v in needs)
    # A need can have lasted burstConfirmSeconds only where the needs seen reach back that far: a
    # tracker that just started (a new ScaledObject, a restart without a store) has seen seconds of
    # the burst, and the median of those is the burst itself.
    lasted = values[(len(values) - 1) // 2] if now - needs[0][0] >= cfg.burst_confirm_seconds else 0
    if not unserved:
        # Headroom the hold may keep: only what lasted. A release below it would be started again
        # cold only once it lasted (below), so a peak of headroom that did not last is no reason to
        # hold a replica for its break-even time (decide/hold.py ``peak``).
        inputs["holdable"] = min(desired, lasted)
    if desired <= quick:
        return desired, reason, state, inputs
    # Headroom that came before was served with nothing waiting: its recurrence is no reason to start
    # cold capacity for it (only a need that lasted is).
    confirmed = max(lasted, recurrent) if unserved else lasted
    inputs.update(lasted=lasted, confirmed=confirmed)
    if confirmed >= desired:
        return desired, reason, state, inputs
    return max(quick, confirmed), "burst-unconfirmed", state, inputs
