"""The scaling policy: (observation, state, config, now) -> decision. Pure; the math is in docs/policy.md.

:func:`decide` runs the pipeline of steps in ``scaler/decide/`` in order, each a pure function that
appends what it did to :attr:`Decision.trace`:

1. ``need`` (decide/need.py, scaler/sizing.py): one capacity model sizes each resource for the demand;
   the largest resource is the need.
2. ``confirm`` (decide/confirm.py): cold capacity only for a need that lasts or recurs.
3. ``partial-data``, ``gpu-busy``, ``pd-ratio`` (decide/guards.py): unknown replicas block a
   scale-down, and so do busy GPUs (DCGM); the prefill/decode ratio raises a lagging role.
4. ``bounds`` (decide/bounds.py): scale to zero where allowed, min/max replicas, the warm floor.
5. ``hold``, ``state-lost`` (decide/hold.py): the burst hold and the lost-state hold.
6. ``hot`` (decide/hot.py): how many hot-tier sleepers should be awake now (never changes the count).
7. ``landing`` (decide/landing.py): the metric value that lands the HPA on the count.

``Decision.reason`` names the last step that set the count; the trace says how each step moved it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.decide.bounds import bounds
from warmscale.scaler.decide.confirm import confirm
from warmscale.scaler.decide.fleet import Fleet, fleet_of
from warmscale.scaler.decide.guards import gpu_busy, partial_data, pd_ratio
from warmscale.scaler.decide.hold import burst_hold, hold_in_force, lost_state_hold, window_max_push
from warmscale.scaler.decide.hot import hot
from warmscale.scaler.decide.landing import METRIC_TARGET, landing
from warmscale.scaler.decide.need import MIN_TTFT_SAMPLES, SCALE_DOWN_HEADROOM, need
from warmscale.scaler.decide.trace import Step
from warmscale.scaler.observation import Observation
from warmscale.scaler.state import ScalerState

__all__ = ["MIN_TTFT_SAMPLES", "SCALE_DOWN_HEADROOM", "Decision", "Step", "decide", "window_max_push"]


@dataclass(frozen=True)
class Decision:
    desired: int
    active: bool
    reason: str
    metric_value: float
    metric_target: float
    rules: dict[str, int] = field(default_factory=dict)
    ready: int = 0
    starting: int = 0
    time_to_ready_s: float = 0.0
    prefill_tps: float = 0.0  # learned prefill tokens/s of one replica (scaler.capacity)
    capacity_samples: int = 0  # saturated intervals behind it (0: still the prior)
    horizon_s: float = 0.0  # the demand rule's look-ahead: time-to-ready of the last replica it asks for
    itl_base_s: float = 0.0  # learned ITL line of one replica: base + per_seq x running sequences
    itl_per_seq_s: float = 0.0
    # False where the count has no basis (no decision yet, nothing known, the scale target's replicas
    # unknown): GetMetrics then answers UNAVAILABLE, so the HPA keeps whatever runs (it does not act
    # on a failed metric, whatever its stabilisation), instead of being told a floor that may be lower.
    sized: bool = True
    # dcgm-exporter's view of the ScaledObject's GPUs (dcgmEndpoints; None: not read): shown in the
    # decision log; busy GPUs hold a scale-down ("gpu-busy-hold").
    gpu_utilization: float | None = None
    gpu_memory_used: float | None = None
    # The hot tier (decide/hot.py): sleepers that should be awake now (None: no hot tier known, no
    # intent), how many of them to wake now and how many awake ones to release.
    hot_target: int | None = None
    hot_wake: int = 0
    hot_release: int = 0
    # Every step's (step, before, after, why, inputs), in order (scaler/decide/trace.py).
    trace: tuple[Step, ...] = ()


def decide(obs: Observation, state: ScalerState, cfg: ScalerConfig, now: float) -> tuple[Decision, ScalerState]:
    last = state.last_desired
    fleet = fleet_of(obs, state, cfg, now)
    if obs.all_unknown:
        return _unknown(obs, state, cfg, now, fleet)

    n = need(obs, state, cfg, fleet)
    trace = [n.step]
    desired, reason = n.count, n.reason
    before = desired
    desired, reason, state, inputs = confirm(desired, reason, state, fleet.ladder, cfg, now, fleet.ready,
                                             fleet.provisioned, unserved=n.pressed)
    trace.append(Step("confirm", before, desired, reason if desired != before else "ok", inputs))
    desired, reason, step = partial_data(desired, reason, obs, state)
    trace.append(step)
    desired, reason, step = gpu_busy(desired, reason, obs, state, cfg)
    trace.append(step)
    desired, reason, step = pd_ratio(desired, reason, obs)
    trace.append(step)
    holding = cfg.hold_through_idle and hold_in_force(state, cfg, now, fleet)
    desired, active, reason, step = bounds(desired, reason, obs, cfg, fleet, holding)
    trace.append(step)
    holdable = inputs.get("holdable")
    desired, reason, state, step = burst_hold(desired, reason, obs, state, cfg, now, fleet,
                                              peak=None if holdable is None else int(holdable))
    trace.append(step)
    desired, active, reason, state, step = lost_state_hold(desired, active, reason, obs, state, cfg, now, fleet,
                                                           last)
    trace.append(step)
    # Sleepers bridge the rules' count (at least the floor) once the count has not risen for
    # idleWindowSeconds (a lull, not a dip within a wave: a sleeper put back to sleep mid-wave is gone
    # for its sleep time); before, or with no rise on record, the count.
    settled = state.last_increase_at is not None and now - state.last_increase_at >= cfg.idle_window_seconds
    plan = hot(desired, active, obs, state, fleet, now, needed=max(n.count, fleet.floor) if settled else None)
    trace.append(plan.step)
    decision, state = _land(desired, active, reason, n.rules, obs, state, cfg, now, fleet, trace, horizon=n.horizon)
    return replace(decision, hot_target=plan.target, hot_wake=plan.wake, hot_release=plan.release), state


def _unknown(obs: Observation, state: ScalerState, cfg: ScalerConfig, now: float,
             fleet: Fleet) -> tuple[Decision, ScalerState]:
    """Nothing known: never lower what runs (absent data is unknown, never idle)."""
    last = state.last_desired
    if last is not None:
        desired = max(last, 1 if fleet.may_zero else fleet.floor)
    else:
        # No decision yet and nothing known: never lower what runs. Where the scale target's
        # replicas are known the count holds them; where not, the count is unsized (see Decision).
        seen = max(obs.current_replicas or 0, fleet.provisioned)
        desired = max(seen, 1 if fleet.may_zero else fleet.floor)
    desired = min(desired, cfg.max_replicas)
    step = Step("need", None, desired, "signals-unknown",
                {"last_desired": last, "current": obs.current_replicas, "provisioned": fleet.provisioned,
                 "unknown_replicas": obs.unknown_replicas})
    return _land(desired, True, "signals-unknown", {}, obs, state, cfg, now, fleet, [step],
                 sized=last is not None or obs.current_replicas is not None)


def _land(desired: int, active: bool, reason: str, rules: dict[str, int], obs: Observation, state: ScalerState,
          cfg: ScalerConfig, now: float, fleet: Fleet, trace: list[Step], *, horizon: float = 0.0,
          sized: bool = True) -> tuple[Decision, ScalerState]:
    value, active, new_state, step = landing(desired, active, obs, state, cfg, now, fleet.may_zero, sized)
    trace.append(step)
    decision = Decision(
        desired=desired,
        active=active,
        reason=reason,
        metric_value=value,
        metric_target=METRIC_TARGET,
        rules=rules,
        ready=fleet.ready,
        starting=fleet.starting,
        time_to_ready_s=fleet.ttr,
        prefill_tps=obs.prefill_tps,
        capacity_samples=obs.capacity_samples,
        horizon_s=horizon,
        itl_base_s=obs.itl_base_s,
        itl_per_seq_s=obs.itl_per_seq_s,
        sized=sized,
        gpu_utilization=obs.gpu_utilization,
        gpu_memory_used=obs.gpu_memory_used,
        trace=tuple(trace),
    )
    return decision, new_state
