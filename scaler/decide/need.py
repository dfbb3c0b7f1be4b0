"""Step 1, ``need``: the rules' replica counts from the observation; the largest is the need (pure).

Each rule proposes a total count (docs/policy.md, rules 1-5): demand with look-ahead, backlog,
prefill-bound, ITL SLO, KV pressure, TTFT SLO and endpoint-picker saturation. Rules that scale
proportionally from load on ready replicas count replicas still starting as capacity, so a scale-up
in flight is not asked for again while those replicas warm.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.counts import ceil_count
from warmscale.scaler.decide.fleet import Fleet
from warmscale.scaler.decide.trace import Step
from warmscale.scaler.gateway import saturation_rule
from warmscale.scaler.ladder import time_to_ready
from warmscale.scaler.metric_target import inflight_per_replica
from warmscale.scaler.observation import Observation
from warmscale.scaler.roles import select_rules, ttft_budget
from warmscale.scaler.slo import itl_count, prefill_slo_count, slo_count
from warmscale.scaler.state import ScalerState

# Fewer TTFT observations than this in the window say nothing about a quantile.
MIN_TTFT_SAMPLES = 5
# Scale down only to a count that would carry at most this share less than the in-flight target.
SCALE_DOWN_HEADROOM = 0.2
# Rounds of the look-ahead fixed point (the ladder has at most a few steps).
LOOK_AHEAD_ROUNDS = 4


@dataclass(frozen=True)
class Need:
    count: int
    reason: str  # the rule that proposed the largest count
    rules: dict[str, int]
    horizon: float  # the demand rule's look-ahead: time-to-ready of the last replica it asks for
    step: Step
    # False where only the KV residency need asks for more than is ready while the engines have room
    # (nothing waits, KV below the high mark, no preemption): the need is headroom, not load the ready
    # fleet fails to serve now (decide/confirm.py: cold headroom must last).
    pressed: bool = True


def need(obs: Observation, state: ScalerState, cfg: ScalerConfig, fleet: Fleet) -> Need:
    """The rules' counts and the largest of them (the role's rules only: scaler/roles.py)."""
    last = state.last_desired
    ladder, ttr, ready, provisioned = fleet.ladder, fleet.ttr, fleet.ready, fleet.provisioned
    rules: dict[str, int] = {}
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

    # 1. Demand: the concurrency the replicas serve, plus ordinary queueing, plus the growth of the
    #    served concurrency expected before the last replica asked for is ready: the horizon is the
    #    warm ladder's time-to-ready of the k-th additional replica (a fixed point: more demand, more
    #    replicas, a colder k-th one, a longer horizon). Only a sustained trend is extrapolated.
    now_inflight = running_total + min(waiting_total, tolerated)
    if ready == 0:
        now_inflight += backlog  # nothing serves yet (scale from zero): every waiting request needs a slot
    # Concurrency one replica is sized for: the override, else the learned sequence capacity.
    per_replica = inflight_per_replica(cfg, obs.max_seqs)
    growth = max(0.0, obs.running_slope)
    # A trend extrapolated over a cold start can ask for many times today's load; the proportional
    # rules' step bound (SCALE_UP_MAX_STEP) bounds it too, per decision.
    most = max(now_inflight, per_replica) * (cfg.scale_up_max_step - 1.0)

    def ahead(h: float) -> float:
        return now_inflight + min(growth * h, most)

    horizon = ttr
    inflight = ahead(horizon)
    for _ in range(LOOK_AHEAD_ROUNDS):
        if growth <= 0:
            break
        k = max(1, ceil_count(inflight / per_replica) - provisioned)
        longer = time_to_ready(ladder, k)
        if longer <= horizon:
            break
        horizon = longer
        inflight = ahead(horizon)
    rules["demand"] = ceil_count(inflight / per_replica)
    # Hysteresis: below the current count, step down only to a count that would run at most
    # (1 - SCALE_DOWN_HEADROOM) of the target, so load hovering at a boundary does not flap.
    current = obs.current_replicas if obs.current_replicas is not None else last
    if current is not None and rules["demand"] < current:
        held = ceil_count(inflight / (per_replica * (1 - SCALE_DOWN_HEADROOM)))
        rules["demand"] = min(current, held)

    # 2. Backlog: the engines are full (below the in-flight target: KV- or prefill-bound). Add the
    #    capacity that stops the backlog growing (its sustained slope) and drains it within
    #    max(time-to-ready, trend window), at the rate one ready replica finishes requests now. A
    #    backlog that already shrinks that fast adds nothing: it is gone before a new replica serves.
    draining = backlog > 0 and obs.waiting_slope < 0
    if ready > 0 and backlog > 0:
        per_replica_rate = (obs.completion_rate or 0.0) / ready
        if per_replica_rate > 0:
            # A backlog already shrinking faster than that needs nothing more (excess <= 0).
            excess = obs.waiting_slope + backlog / max(ttr, cfg.trend_window_seconds)
            extra = excess / per_replica_rate
        else:
            # Nothing finished yet: size by what one engine held at the scrape before (else the
            # in-flight target). Not by what they run now: more running requests would then ask
            # for fewer replicas (more demand, fewer replicas; tests/scaler/test_policy_v2.py).
            engine_held = obs.running_before if obs.running_before is not None else per_replica
            extra = backlog / max(1.0, engine_held)
        if extra > 0:
            # Capped before rounding: a vanishing completion rate makes ``extra`` infinite.
            rules["queue"] = ceil_count(min(ready + extra, max(provisioned, 1) * cfg.scale_up_max_step))

    # 1b. Prefill-bound need: the prompt tokens arriving per second (prefilled over the burst window,
    #     plus the waiting requests' prompts, to be taken within that window) over what one replica
    #     prefills at the target utilisation (its learned capacity, scaler.capacity).
    if obs.prompt_rate is not None:
        arriving = obs.prompt_rate + (obs.waiting_prompt_tokens or 0.0) / max(cfg.burst_window_seconds, ttr)
        rules["prefill"] = ceil_count(arriving / (cfg.target_utilization * obs.prefill_tps))
        # SLO slack: with a TTFT SLO that the replicas meet now, fewer replicas than the utilisation
        # target asks for suffice when the SLO model predicts they still meet it (short prompts against
        # a loose SLO run a replica hotter). Unknown TTFT, or TTFT over the SLO: the target stands.
        slack = _prefill_slo_slack(obs, cfg, rules["prefill"], arriving)
        if slack is not None:
            rules["prefill"] = slack

    # 1c. ITL SLO (decode-bound need): the smallest count at which each replica's share of the demand's
    #     sequences (look-ahead included) decodes within itlSloSeconds, by the learned ITL line of one
    #     replica corrected to the observed quantile (scaler/slo.py itl_count; docs/policy.md "ITL model").
    if cfg.itl_slo_seconds is not None:
        n_itl = itl_count(inflight, cfg.itl_slo_seconds, obs.itl_base_s, obs.itl_per_seq_s, obs.itl_factor,
                          ceil_count(max(provisioned, 1) * cfg.scale_up_max_step))
        if n_itl is not None:
            rules["itl"] = n_itl

    # 3. KV pressure: size so that mean KV usage would sit at the target. Preemptions confirm
    #    pressure only while usage is still above the target. Without a targetInflightPerReplica
    #    override the KV-bound need applies at every level (it is what holds decode capacity).
    kv_hot = obs.kv_usage_max is not None and obs.kv_usage_max >= cfg.kv_cache_high
    kv_warm = obs.kv_usage_max is not None and obs.kv_usage_max >= cfg.kv_cache_target
    preempting = obs.preemption_rate > 0 and kv_warm
    #    The KV-bound need also holds while hot: usage crossing KV_HIGH must not ask for fewer
    #    replicas than the same usage just below it (tests/scaler/test_roles.py, monotonicity).
    if ready > 0 and obs.kv_usage_mean is not None and cfg.target_inflight_per_replica is None and obs.running > 0:
        kv_need = ceil_count(ready * obs.kv_usage_mean / cfg.kv_bound_target)
        if kv_need > 1:  # one replica is the floor anyway (and must not block scale to zero)
            rules["kv"] = kv_need
    if ready > 0 and obs.kv_usage_mean is not None and (kv_hot or preempting):
        need = ceil_count(ready * obs.kv_usage_mean / cfg.kv_cache_target)
        if preempting:
            need = max(need, ready + 1)
        rules["kv"] = max(rules.get("kv", 0), provisioned, min(need, ceil_count(ready * cfg.scale_up_max_step)))

    # 4. TTFT SLO: the windowed quantile against the SLO scales the ready replicas proportionally,
    #    unless the slowness is a backlog that drains by itself before new replicas would be ready.
    #    The prefill role's budget is the SLO less the KV handoff to decode that follows it (scaler/roles.py).
    if cfg.ttft_slo_seconds is not None and ready > 0 and obs.ttft_window is not None and not draining:
        budget = ttft_budget(cfg.ttft_slo_seconds, cfg.role, obs.kv_transfer_s, obs.pd_transfer_s)
        if obs.ttft_window.count >= MIN_TTFT_SAMPLES:
            q = obs.ttft_window.quantile(cfg.ttft_quantile)
            # Only slowness that persists counts: the quantile over the window and over its newer
            # burstWindowSeconds, the smaller of the two; no first token in the newer part, nothing.
            # A burst that is over (its first tokens fast again) leaves no TTFT need behind.
            rec = obs.ttft_recent
            q_recent = rec.quantile(cfg.ttft_quantile) if rec is not None and rec.count > 0 else None
            q = None if q is None or q_recent is None else min(q, q_recent)
            if q is not None and q > budget and budget <= 0:
                rules["ttft"] = provisioned  # the handoff alone exceeds the SLO: no prefill replica helps
            elif q is not None and q > budget:
                most = ceil_count(ready * cfg.scale_up_max_step)
                # The SLO model (scaler/slo.py): the smallest count whose predicted quantile, corrected
                # by the observed one, meets the SLO; proportional where the model cannot say.
                n_slo = None
                if obs.prompt_rate is not None and obs.prompt_per_request:
                    n_slo = slo_count(q, budget, cfg.ttft_quantile, ready, obs.prompt_rate,
                                      obs.prefill_tps, obs.prompt_per_request, most)
                if n_slo is None:
                    n_slo = ceil_count(ready * min(q / budget, cfg.scale_up_max_step))
                rules["ttft"] = max(provisioned, n_slo)

    # 5. Endpoint-picker saturation of the stage this ScaledObject serves.
    sat = saturation_rule(obs.saturation, obs.stale_endpoints, ready, provisioned, cfg)
    if sat is not None:
        rules["saturation"] = sat
    rules = select_rules(rules, cfg.role)

    reason = max(rules, key=lambda k: rules[k])
    beyond = {k for k, v in rules.items() if v > ready}
    pressed = not (beyond == {"kv"} and waiting_total == 0 and not kv_hot and not preempting)
    inputs = {
        "ready": ready, "starting": fleet.starting, "running": obs.running, "waiting": obs.waiting,
        "queue": obs.queue, "backlog": backlog, "per_replica": per_replica, "inflight_ahead": inflight,
        "horizon_s": horizon, "prompt_rate": obs.prompt_rate, "prefill_tps": obs.prefill_tps, "pressed": pressed,
        # The capacity model the counts are sized from (scaler/capacity.py, learned once per replica)
        # and the demand put to it, so that the trace alone says why each resource asks what it asks.
        "model.prefill_tps": obs.prefill_tps, "model.capacity_samples": obs.capacity_samples,
        "model.prompt_per_request": obs.prompt_per_request, "model.itl_base_s": obs.itl_base_s,
        "model.itl_per_seq_s": obs.itl_per_seq_s, "model.itl_factor": obs.itl_factor,
        "model.max_seqs": obs.max_seqs, "model.kv_usage_mean": obs.kv_usage_mean,
        "model.kv_usage_max": obs.kv_usage_max,
        "demand.inflight_now": now_inflight, "demand.growth_per_s": growth,
        "demand.waiting_prompt_tokens": obs.waiting_prompt_tokens, "demand.completion_rate": obs.completion_rate,
        "demand.preemption_rate": obs.preemption_rate,
        **{f"rule.{k}": v for k, v in rules.items()},
    }
    return Need(count=rules[reason], reason=reason, rules=rules, horizon=horizon,
                step=Step("need", None, rules[reason], reason, inputs), pressed=pressed)


def _prefill_slo_slack(obs: Observation, cfg: ScalerConfig, n_util: int, arriving: float) -> int | None:
    """The prefill-bound need lowered to the SLO model's count (docs/policy.md, rule 0 "SLO slack"),
    or ``None`` where it stands: no TTFT SLO, no prompt size, too few first tokens in the window, or
    the observed quantile (window and its newer part, the larger) already over the budget."""
    if cfg.ttft_slo_seconds is None or n_util <= 1 or not obs.prompt_per_request:
        return None
    window = obs.ttft_window
    if window is None or window.count < MIN_TTFT_SAMPLES:
        return None
    budget = ttft_budget(cfg.ttft_slo_seconds, cfg.role, obs.kv_transfer_s, obs.pd_transfer_s)
    observed = window.quantile(cfg.ttft_quantile)
    rec = obs.ttft_recent
    if rec is not None and rec.count > 0:
        recent = rec.quantile(cfg.ttft_quantile)
        observed = None if observed is None or recent is None else max(observed, recent)
    if observed is None or observed > budget:
        return None
    n_slo = prefill_slo_count(arriving, obs.prefill_tps, obs.prompt_per_request, budget, cfg.ttft_quantile,
                              n_util)
    return None if n_slo is None else min(n_util, n_slo)
