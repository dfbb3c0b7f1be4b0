"""The scaling policy: (observation, state, config, now) -> decision. Pure; the math is in docs/policy.md.

Each rule proposes a total replica count; the largest wins, then bounds, partial-data and
scale-down stabilisation apply. Rules that scale proportionally from load on ready replicas (KV
pressure, TTFT) count replicas that are still starting as capacity, so a scale-up in flight is not
asked for again while those replicas warm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.dcgm_guard import gpu_busy_hold
from warmscale.scaler.gateway import saturation_rule
from warmscale.scaler.hpa import metric_value_for
from warmscale.scaler.ladder import Ladder, held_count, longest_hold, single, time_to_ready, warm_steps
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


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9)


def _starting_estimate(obs: Observation, state: ScalerState, ready: int, ttr: float, now: float) -> int:
    if obs.starting_replicas is not None:
        return obs.starting_replicas
    if state.last_desired is None or state.last_increase_at is None:
        return 0
    if now - state.last_increase_at > ttr:
        return 0
    return max(0, state.last_desired - ready)


def window_max_push(
    recs: tuple[tuple[float, int], ...], now: float, value: int, since: float
) -> tuple[tuple[float, int], ...]:
    """Add (now, value) to a sliding-window maximum and drop what is older than ``since``.

    Only the recommendations that can still be the maximum are kept (values strictly decreasing with
    time), so the first entry is the window's maximum and the state stays a few entries long."""
    kept = [r for r in recs if r[0] > since and r[1] > value]
    kept.append((now, value))
    return tuple(kept)


def decide(obs: Observation, state: ScalerState, cfg: ScalerConfig, now: float) -> tuple[Decision, ScalerState]:
    last = state.last_desired
    ladder: Ladder = obs.ttr_ladder or single(
        obs.time_to_ready_s if obs.time_to_ready_s is not None else cfg.time_to_ready_seconds)
    ttr = time_to_ready(ladder, 1)
    if obs.ready_replicas is not None:
        ready = obs.ready_replicas
    elif obs.known_replicas + obs.unknown_replicas > 0:
        ready = obs.known_replicas + obs.unknown_replicas
    else:
        ready = 0
    starting = _starting_estimate(obs, state, ready, ttr, now)
    provisioned = ready + starting
    rules: dict[str, int] = {}
    # The warm pool's schedule binds on top of the ScaledObject's own bounds: its floor raises
    # minReplicas, and zero needs both scaleToZero and the warm pool's permission at this instant.
    min_replicas = max(cfg.min_replicas, obs.warm_floor or 0)
    may_zero = cfg.scale_to_zero and obs.zero_allowed is not False and not obs.warm_floor
    floor = 0 if may_zero else max(1, min_replicas)

    if obs.all_unknown:
        if last is not None:
            desired = max(last, 1 if may_zero else floor)
        else:
            # No decision yet and nothing known: never lower what runs. Where the scale target's
            # replicas are known the count holds them; where not, the count is unsized (see Decision).
            seen = max(obs.current_replicas or 0, provisioned)
            desired = max(seen, 1 if may_zero else floor)
        desired = min(desired, cfg.max_replicas)
        return _finish(desired, True, "signals-unknown", rules, obs, state, cfg, now, ready, starting, ttr, may_zero,
                       sized=last is not None or obs.current_replicas is not None)

    # Known replicas stand for all ready ones (unknown replicas count as loaded as known ones).
    per_known = ready / obs.known_replicas if obs.known_replicas and ready > 0 else 1.0
    running_total = obs.running * per_known
    waiting_total = obs.waiting * per_known + obs.queue
    # Up to targetWaitingPerReplica per ready replica is ordinary queueing; beyond it is a backlog.
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
    # rules' step bound (scaleUpMaxStep) bounds it too, per decision.
    most = max(now_inflight, per_replica) * (cfg.scale_up_max_step - 1.0)

    def ahead(h: float) -> float:
        return now_inflight + min(growth * h, most)

    horizon = ttr
    inflight = ahead(horizon)
    for _ in range(LOOK_AHEAD_ROUNDS):
        if growth <= 0:
            break
        k = max(1, _ceil(inflight / per_replica) - provisioned)
        longer = time_to_ready(ladder, k)
        if longer <= horizon:
            break
        horizon = longer
        inflight = ahead(horizon)
    rules["demand"] = _ceil(inflight / per_replica)
    # Hysteresis: below the current count, step down only to a count that would run at most
    # (1 - SCALE_DOWN_HEADROOM) of the target, so load hovering at a boundary does not flap.
    current = obs.current_replicas if obs.current_replicas is not None else last
    if current is not None and rules["demand"] < current:
        held = _ceil(inflight / (per_replica * (1 - SCALE_DOWN_HEADROOM)))
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
            rules["queue"] = _ceil(min(ready + extra, max(provisioned, 1) * cfg.scale_up_max_step))

    # 1b. Prefill-bound need: the prompt tokens arriving per second (prefilled over the burst window,
    #     plus the waiting requests' prompts, to be taken within that window) over what one replica
    #     prefills at the target utilisation (its learned capacity, scaler.capacity).
    if obs.prompt_rate is not None:
        arriving = obs.prompt_rate + (obs.waiting_prompt_tokens or 0.0) / max(cfg.burst_window_seconds, ttr)
        rules["prefill"] = _ceil(arriving / (cfg.target_utilization * obs.prefill_tps))
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
                          _ceil(max(provisioned, 1) * cfg.scale_up_max_step))
        if n_itl is not None:
            rules["itl"] = n_itl

    # 3. KV pressure: size so that mean KV usage would sit at the target. Preemptions confirm
    #    pressure only while usage is still above the target. Without a targetInflightPerReplica
    #    override the KV-bound need applies at every level (it is what holds decode capacity).
    kv_hot = obs.kv_usage_max is not None and obs.kv_usage_max >= cfg.kv_cache_high
    kv_warm = obs.kv_usage_max is not None and obs.kv_usage_max >= cfg.kv_cache_target
    preempting = obs.preemption_rate > 0 and kv_warm
    #    The KV-bound need also holds while hot: usage crossing kvCacheHigh must not ask for fewer
    #    replicas than the same usage just below it (tests/scaler/test_roles.py, monotonicity).
    if ready > 0 and obs.kv_usage_mean is not None and cfg.target_inflight_per_replica is None and obs.running > 0:
        kv_need = _ceil(ready * obs.kv_usage_mean / cfg.kv_bound_target)
        if kv_need > 1:  # one replica is the floor anyway (and must not block scale to zero)
            rules["kv"] = kv_need
    if ready > 0 and obs.kv_usage_mean is not None and (kv_hot or preempting):
        need = _ceil(ready * obs.kv_usage_mean / cfg.kv_cache_target)
        if preempting:
            need = max(need, ready + 1)
        rules["kv"] = max(rules.get("kv", 0), provisioned, min(need, _ceil(ready * cfg.scale_up_max_step)))

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
                most = _ceil(ready * cfg.scale_up_max_step)
                # The SLO model (scaler/slo.py): the smallest count whose predicted quantile, corrected
                # by the observed one, meets the SLO; proportional where the model cannot say.
                n_slo = None
                if obs.prompt_rate is not None and obs.prompt_per_request:
                    n_slo = slo_count(q, budget, cfg.ttft_quantile, ready, obs.prompt_rate,
                                      obs.prefill_tps, obs.prompt_per_request, most)
                if n_slo is None:
                    n_slo = _ceil(ready * min(q / budget, cfg.scale_up_max_step))
                rules["ttft"] = max(provisioned, n_slo)

    # 5. Endpoint-picker saturation of the stage this ScaledObject serves.
    sat = saturation_rule(obs.saturation, obs.stale_endpoints, ready, provisioned, cfg)
    if sat is not None:
        rules["saturation"] = sat
    rules = select_rules(rules, cfg.role)

    reason = max(rules, key=lambda k: rules[k])
    desired = rules[reason]
    desired, reason, state = _confirm_cold(desired, reason, state, ladder, cfg, now, ready, provisioned)

    # Partial data: unknown replicas block any scale-down.
    if obs.uncertain and last is not None and desired < last:
        desired, reason = last, "partial-data-hold"
    # DCGM, secondary: busy GPUs hold a scale-down below what runs (scaler/dcgm_guard.py).
    desired, reason = gpu_busy_hold(desired, reason, obs, cfg, current)

    # Prefill/decode ratio bound of the pdGroup (raises a lagging role, never lowers one).
    if obs.pd_floor is not None and desired < obs.pd_floor:
        desired, reason = obs.pd_floor, "pd-ratio"

    # Bounds and scale to zero.
    idle = desired == 0 and obs.load == 0 and obs.idle_for >= cfg.idle_window_seconds
    active = True
    if may_zero and idle and not obs.uncertain:
        desired, active, reason = 0, False, "idle"
    else:
        lower = max(1, min_replicas)
        if desired < lower:
            desired, reason = lower, "warm-floor" if lower > max(1, cfg.min_replicas) else "min-replicas"
    if desired > cfg.max_replicas:
        desired, reason = cfg.max_replicas, "max-replicas"

    # Burst hold (ski rental): each replica above today's need is held for the break-even time of
    # releasing it (the node idle time plus the time-to-ready of the ladder step it would come back
    # by), at least scaleDownStabilizationSeconds; the warmest-returning replicas go first.
    window = longest_hold(ladder, cfg.node_idle_seconds, cfg.scale_down_stabilization_seconds)
    past = state.recommendations
    if state.last_decision_at is None and obs.current_replicas:
        # A fresh tracker knows nothing of the recent need: the fleet it finds counts as one (a
        # fleet sized by someone is not released before the break-even time either).
        past = ((now, min(obs.current_replicas, cfg.max_replicas)),)
    recs = window_max_push(past, now, desired, now - window)
    state = replace(state, recommendations=recs)
    if desired > 0:
        base = desired
        for t, v in recs:
            held = held_count(base, v, now - t, ladder, cfg.node_idle_seconds, cfg.scale_down_stabilization_seconds)
            if held > desired:
                desired = held
                # Where the API shows the target's pods (ready and starting are seen, not inferred from
                # the replicas that report): while the rules still want more than is ready the fleet
                # is scaling up, the hold keeps the count asked for and the rule driving the scale-up
                # stays the reason; when they do not but replicas are starting, the burst's peak is
                # held while it arrives.
                seen = obs.starting_replicas is not None
                if not (seen and base > ready):
                    young = now - t < cfg.scale_down_stabilization_seconds and not obs.starting_replicas
                    reason = "scale-down-stabilization" if young else "burst-hold"
    # Lost state (no stored window to stabilise with): hold for one window at what ran before.
    if state.state_lost_at is not None:
        if now - state.state_lost_at < window:
            held = min(max(last or 0, obs.current_replicas or 0), cfg.max_replicas)
            if desired < held:
                desired, active, reason = held, True, "state-lost-hold"
        else:
            state = replace(state, state_lost_at=None)
    return _finish(desired, active, reason, rules, obs, state, cfg, now, ready, starting, ttr, may_zero,
                   horizon=horizon)


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


def _confirm_cold(desired: int, reason: str, state: ScalerState, ladder: Ladder, cfg: ScalerConfig, now: float,
                  ready: int, provisioned: int) -> tuple[int, str, ScalerState]:
    """Cold capacity only for a need that lasts or recurs (docs/policy.md, "Burst confirmation").

    A replica that takes long to become ready serves only demand still there when it is ready; a
    burst of seconds asks for it in vain (it comes after the burst and is then held for its break-even
    time). So the rules' need beyond what starts quickly (ready + starting + the ladder's warm steps)
    is granted, when the cold step takes longer than ``W = 2 x burstConfirmSeconds``, only up to the
    larger of the need's median over ``W`` (it lasted ``burstConfirmSeconds``) and its largest value in
    an earlier episode (ended more than ``trendWindowSeconds`` ago) within the longest burst hold (a
    burst of this size came before). Warm steps serve any burst; scale from zero is never held back."""
    span = 2.0 * cfg.burst_confirm_seconds
    if span <= 0:
        return desired, reason, state
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
    quick = provisioned + steps if steps > 0 else max(provisioned, ready + 1)
    if ready == 0 or desired <= quick or ladder[-1][2] <= span:
        return desired, reason, state
    values = sorted(v for _, v in needs)
    # A need can have lasted burstConfirmSeconds only where the needs seen reach back that far: a
    # tracker that just started (a new ScaledObject, a restart without a store) has seen seconds of
    # the burst, and the median of those is the burst itself.
    lasted = values[(len(values) - 1) // 2] if now - needs[0][0] >= cfg.burst_confirm_seconds else 0
    confirmed = max(lasted, recurrent)
    if confirmed >= desired:
        return desired, reason, state
    return max(quick, confirmed), "burst-unconfirmed", state


def _finish(
    desired: int,
    active: bool,
    reason: str,
    rules: dict[str, int],
    obs: Observation,
    state: ScalerState,
    cfg: ScalerConfig,
    now: float,
    ready: int,
    starting: int,
    ttr: float,
    may_zero: bool,
    *,
    horizon: float = 0.0,
    sized: bool = True,
) -> tuple[Decision, ScalerState]:
    current = obs.current_replicas if obs.current_replicas is not None else state.last_desired
    target = 1.0
    value = metric_value_for(desired, current, target, cfg.hpa_tolerance)
    if not may_zero:
        active = True
    increased = state.last_desired is not None and desired > state.last_desired
    new_state = replace(
        state,
        last_desired=desired if sized else state.last_desired,  # an unsized count is no basis to hold
        last_decision_at=now,
        last_increase_at=now if increased else state.last_increase_at,
    )
    decision = Decision(
        desired=desired,
        active=active,
        reason=reason,
        metric_value=value,
        metric_target=target,
        rules=rules,
        ready=ready,
        starting=starting,
        time_to_ready_s=ttr,
        prefill_tps=obs.prefill_tps,
        capacity_samples=obs.capacity_samples,
        horizon_s=horizon,
        itl_base_s=obs.itl_base_s,
        itl_per_seq_s=obs.itl_per_seq_s,
        sized=sized,
        gpu_utilization=obs.gpu_utilization,
        gpu_memory_used=obs.gpu_memory_used,
    )
    return decision, new_state
