"""Step 1, ``need``: the count the capacity model sizes for the demand (pure).

The observation is read once into what one replica serves (:class:`~warmscale.scaler.sizing.Capacity`,
learned online) and what the fleet must carry until the last replica asked for is ready
(:class:`~warmscale.scaler.sizing.Demand`); :func:`~warmscale.scaler.sizing.size` sizes each resource
(concurrency, prefill under the TTFT SLO, decode under the ITL SLO, KV residency) from the two, and the
largest resource is the need (docs/policy.md, "Sizing"). Replicas still starting count as capacity
in the proportional terms, so a scale-up in flight is not asked for again while those replicas warm.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.decide.fleet import Fleet
from warmscale.scaler.decide.trace import Step
from warmscale.scaler.gateway import saturation_rule
from warmscale.scaler.ladder import time_to_ready
from warmscale.scaler.metric_target import inflight_per_replica
from warmscale.scaler.observation import Observation
from warmscale.scaler.roles import ROLE_RULES, ttft_budget
from warmscale.scaler.sizing import (
    LOOK_AHEAD_ROUNDS,
    SCALE_DOWN_HEADROOM,
    Capacity,
    Demand,
    FleetCounts,
    look_ahead,
    size,
)
from warmscale.scaler.state import ScalerState

__all__ = ["LOOK_AHEAD_ROUNDS", "MIN_TTFT_SAMPLES", "SCALE_DOWN_HEADROOM", "Need", "capacity_of", "demand_of",
           "need"]

# Fewer TTFT observations than this in the window say nothing about a quantile.
MIN_TTFT_SAMPLES = 5


@dataclass(frozen=True)
class Need:
    count: int
    reason: str  # the term that sized the largest resource
    rules: dict[str, int]  # every term's count (sizing.TERM_ORDER)
    horizon: float  # the look-ahead: time-to-ready of the last replica the demand asks for
    step: Step
    # False where only the KV residency need asks for more than is ready while the engines have room
    # (nothing waits, KV below the high mark, no preemption): the need is headroom, not load the ready
    # fleet fails to serve now (decide/confirm.py: cold headroom must last).
    pressed: bool = True
    resources: dict[str, int] | None = None  # each resource's count (the largest of its terms)


def capacity_of(obs: Observation, cfg: ScalerConfig, ready: int) -> Capacity:
    """What one replica serves, as the observation learned it (scaler/capacity.py) or the prior."""
    per_replica = inflight_per_replica(cfg, obs.max_seqs)
    return Capacity(
        inflight=per_replica, prefill_tps=obs.prefill_tps, target_utilization=cfg.target_utilization,
        prompt_per_request=obs.prompt_per_request, itl_base_s=obs.itl_base_s, itl_per_seq_s=obs.itl_per_seq_s,
        itl_factor=obs.itl_factor,
        finish_rate=(obs.completion_rate or 0.0) / ready if ready > 0 else None,
        # Not what the engines run now: more running requests would then ask for fewer replicas
        # (more demand, fewer replicas; tests/scaler/test_policy_v2.py).
        engine_held=obs.running_before if obs.running_before is not None else per_replica,
        kv_usage_mean=obs.kv_usage_mean, kv_usage_max=obs.kv_usage_max,
        kv_sized=cfg.target_inflight_per_replica is None and obs.running > 0,
    )


def demand_of(obs: Observation, cfg: ScalerConfig, fleet: Fleet, cap: Capacity) -> Demand:
    """What the fleet must carry until the last replica asked for is ready (docs/policy.md, "Inputs")."""
    ready, provisioned, ttr = fleet.ready, fleet.provisioned, fleet.ttr
    # Known replicas stand for all ready ones (unknown replicas count as loaded as known ones). Awake
    # hot-tier sleepers are ready too; where the waker read their load it is added as it is, else they
    # count as loaded as the known replicas.
    hot_load = obs.hot_load if fleet.hot_awake > 0 else None
    stand_for = fleet.own_ready if hot_load is not None else ready
    per_known = stand_for / obs.known_replicas if obs.known_replicas and stand_for > 0 else 1.0
    running_total = obs.running * per_known + (hot_load or 0.0)
    waiting_total = obs.waiting * per_known + obs.queue
    # Up to TOLERATED_WAITING_PER_REPLICA per ready replica is ordinary queueing; beyond it is a backlog.
    tolerated = cfg.target_waiting_per_replica * ready
    backlog = max(0.0, waiting_total - tolerated)
    now_inflight = running_total + min(waiting_total, tolerated)
    if ready == 0:
        now_inflight += backlog  # nothing serves yet (scale from zero): every waiting request needs a slot
    # Only a sustained trend is extrapolated (observation.py); over a cold start it is bounded by the
    # proportional step bound (SCALE_UP_MAX_STEP), per decision.
    growth = max(0.0, obs.running_slope)
    inflight, horizon = look_ahead(now_inflight, growth, cap.inflight, cfg.scale_up_max_step, ttr, provisioned,
                                   lambda k: time_to_ready(fleet.ladder, k))
    # A backlog that already shrinks adds no TTFT need: it is gone before a new replica serves.
    draining = backlog > 0 and obs.waiting_slope < 0
    prompt_tps = None
    if obs.prompt_rate is not None:
        prompt_tps = obs.prompt_rate + (obs.waiting_prompt_tokens or 0.0) / max(cfg.burst_window_seconds, ttr)
    budget = over = met = None
    if cfg.ttft_slo_seconds is not None:
        budget = ttft_budget(cfg.ttft_slo_seconds, cfg.role, obs.kv_transfer_s, obs.pd_transfer_s)
        window, rec = obs.ttft_window, obs.ttft_recent
        if window is not None and window.count >= MIN_TTFT_SAMPLES:
            q = window.quantile(cfg.ttft_quantile)
            q_recent = rec.quantile(cfg.ttft_quantile) if rec is not None and rec.count > 0 else None
            # The slack is judged on the larger of the window's and its newer part's quantile (the
            # SLO met throughout); the correction on the smaller (only slowness that persists: a burst
            # that is over, its first tokens fast again, leaves no TTFT need behind).
            met = q if rec is None or rec.count == 0 else (None if q is None or q_recent is None else max(q, q_recent))
            if not draining:
                over = None if q is None or q_recent is None else min(q, q_recent)
    kv_warm = obs.kv_usage_max is not None and obs.kv_usage_max >= cfg.kv_cache_target
    return Demand(
        inflight_now=now_inflight, inflight=inflight, horizon=horizon, growth=growth, backlog=backlog,
        waiting=waiting_total, backlog_slope=obs.waiting_slope,
        drain_within=max(ttr, cfg.trend_window_seconds), prompt_tps=prompt_tps,
        prefilled_tps=obs.prompt_rate, ttft_budget=budget,
        ttft_over=over, ttft_met=met,
        saturation_count=saturation_rule(obs.saturation, obs.stale_endpoints, ready, provisioned, cfg),
        kv_hot=obs.kv_usage_max is not None and obs.kv_usage_max >= cfg.kv_cache_high,
        preempting=obs.preemption_rate > 0 and kv_warm,
    )


def need(obs: Observation, state: ScalerState, cfg: ScalerConfig, fleet: Fleet) -> Need:
    """The count the capacity model sizes for the demand (the role's terms only: scaler/roles.py)."""
    ready, provisioned = fleet.ready, fleet.provisioned
    cap = capacity_of(obs, cfg, ready)
    dem = demand_of(obs, cfg, fleet, cap)
    current = obs.current_replicas if obs.current_replicas is not None else state.last_desired
    sz = size(dem, cap, FleetCounts(ready, provisioned, current), step=cfg.scale_up_max_step,
              kv_residency=cfg.kv_bound_target, kv_hot_target=cfg.kv_cache_target,
              ttft_quantile=cfg.ttft_quantile, itl_slo=cfg.itl_slo_seconds,
              allowed=ROLE_RULES.get(cfg.role, ROLE_RULES["both"]))
    rules, reason = sz.terms, sz.term
    beyond = {k for k, v in rules.items() if v > ready}
    pressed = not (beyond == {"kv"} and dem.waiting == 0 and not dem.kv_hot and not dem.preempting)
    inputs = {
        "ready": ready, "starting": fleet.starting, "running": obs.running, "waiting": obs.waiting,
        "queue": obs.queue, "backlog": dem.backlog, "per_replica": cap.inflight, "inflight_ahead": dem.inflight,
        "horizon_s": dem.horizon, "prompt_rate": obs.prompt_rate, "prefill_tps": obs.prefill_tps, "pressed": pressed,
        # The capacity model the counts are sized from (scaler/capacity.py, learned once per replica)
        # and the demand put to it, so that the trace alone says why each resource asks what it asks.
        "model.prefill_tps": obs.prefill_tps, "model.capacity_samples": obs.capacity_samples,
        "model.prompt_per_request": obs.prompt_per_request, "model.itl_base_s": obs.itl_base_s,
        "model.itl_per_seq_s": obs.itl_per_seq_s, "model.itl_factor": obs.itl_factor,
        "model.max_seqs": obs.max_seqs, "model.kv_usage_mean": obs.kv_usage_mean,
        "model.kv_usage_max": obs.kv_usage_max, "model.finish_rate": cap.finish_rate,
        "demand.inflight_now": dem.inflight_now, "demand.growth_per_s": dem.growth,
        "demand.prompt_tps": dem.prompt_tps, "demand.waiting_prompt_tokens": obs.waiting_prompt_tokens,
        "demand.completion_rate": obs.completion_rate, "demand.preemption_rate": obs.preemption_rate,
        "demand.ttft_quantile": dem.ttft_over, "demand.ttft_budget": dem.ttft_budget,
        "sized_by": sz.resource_of(reason),
        **{f"resource.{k}": v for k, v in sz.resources.items()},
        **{f"rule.{k}": v for k, v in rules.items()},
    }
    return Need(count=sz.count, reason=reason, rules=rules, horizon=dem.horizon,
                step=Step("need", None, sz.count, reason, inputs), pressed=pressed, resources=sz.resources)
