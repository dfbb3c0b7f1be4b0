"""One capacity model, one sizing: replicas per resource from what one replica serves (pure).

The need step (decide/need.py) reads the observation once into two values and hands them here:

- :class:`Capacity`, what **one replica** serves, learned online (scaler/capacity.py, kept in the
  observation): the sequences it runs at the utilisation target, its prefill tokens/s, the decode ITL
  line (base + per sequence, and the observed tail over the line), its KV residency and the rate it
  finishes requests;
- :class:`Demand`, what the fleet must carry **until the last replica asked for is ready**: the
  requests in flight with the look-ahead's growth, the backlog beyond ordinary queueing and how fast
  it changes, the prompt tokens arriving (the waiting prompts included), the endpoint picker's
  saturation, and the TTFT quantile observed against the SLO.

:func:`size` divides each resource's demand by one replica's capacity of it:

==============  ===============================================================  =======================
resource        sized from                                                       terms (``Need.rules``)
==============  ===============================================================  =======================
``concurrency``  in-flight with look-ahead / sequences per replica; the backlog's   ``demand``, ``queue``,
                 drain / one replica's finishing rate; the picker's saturation      ``saturation``
``prefill``      arriving prompt tokens / prefill tokens/s under the TTFT SLO's     ``prefill``, ``ttft``
                 queueing model (scaler/slo.py); the observed quantile corrects
                 that model (``ttft``: the count the corrected model needs)
``decode``       in-flight sequences under the ITL line, corrected to its tail      ``itl``
``kv``           KV residency at its target                                        ``kv``
==============  ===============================================================  =======================

The largest resource is the need. Backlog, arrivals, the gateway queue (in the waiting count) and
the look-ahead are demand inputs; the observed TTFT quantile is a correction of the prefill model,
not a count of its own: without a prompt rate the model cannot say, and the correction scales the
ready replicas by quantile / budget (docs/policy.md, "Sizing"). The terms keep the names the rules
had (traces, dashboards and tests read them); each is the part of one resource's sizing it names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from warmscale.scaler.counts import ceil_count
from warmscale.scaler.slo import itl_count, prefill_slo_count, slo_count

# Scale down only to a count that would carry at most this share less than the in-flight target.
SCALE_DOWN_HEADROOM = 0.2
# Rounds of the look-ahead fixed point (the ladder has at most a few steps).
LOOK_AHEAD_ROUNDS = 4

# The resources, in the order their terms are listed (a tie between terms goes to the first).
RESOURCE_TERMS: dict[str, tuple[str, ...]] = {
    "concurrency": ("demand", "queue", "saturation"),
    "prefill": ("prefill", "ttft"),
    "decode": ("itl",),
    "kv": ("kv",),
}
# The terms in the order the need step reports them (and breaks a tie by).
TERM_ORDER = ("demand", "queue", "prefill", "itl", "kv", "ttft", "saturation")


@dataclass(frozen=True)
class Capacity:
    """What one replica serves (learned online; the priors until measured)."""

    inflight: float  # requests one replica is sized for (targetInflightPerReplica, else util x sequences)
    prefill_tps: float  # prompt tokens/s one replica prefills (learned, at full use)
    target_utilization: float  # the share of prefill_tps and of the sequences a replica is run at
    prompt_per_request: float | None  # mean prompt tokens of a finished request (the SLO model's p)
    itl_base_s: float  # the ITL line: a decode step takes base + per_seq x running sequences
    itl_per_seq_s: float
    itl_factor: float  # the observed ITL quantile over the line's mean (the line's correction)
    finish_rate: float | None  # requests/s one ready replica finishes now (None: nothing finished)
    engine_held: float  # requests one engine held at the scrape before (the drain's fallback rate)
    kv_usage_mean: float | None
    kv_usage_max: float | None
    kv_sized: bool  # KV residency sizes the fleet (no in-flight override, something running)


@dataclass(frozen=True)
class Demand:
    """What the fleet must carry until the last replica asked for is ready."""

    inflight_now: float  # running + ordinary waiting (+ the backlog where nothing serves yet)
    inflight: float  # the same at the look-ahead horizon (the growth of a sustained trend added)
    horizon: float  # time-to-ready of the last replica the look-ahead asks for
    growth: float  # sustained growth of the running requests per second (0 without a trend)
    backlog: float  # waiting requests (gateway queue included) beyond ordinary queueing
    waiting: float  # every waiting request, gateway queue included
    backlog_slope: float  # the backlog's sustained change per second (< 0: draining)
    drain_within: float  # the backlog is to be gone within this (max of time-to-ready, trend window)
    prompt_tps: float | None  # prompt tokens/s arriving (waiting prompts spread over the window)
    # prompt tokens/s prefilled over the burst window: the load the observed TTFT quantile was
    # measured under, so the rate the correction fits the model at (the waiting prompts are in it)
    prefilled_tps: float | None
    ttft_budget: float | None  # the TTFT SLO this role may use (None: no SLO)
    ttft_over: float | None  # the persisting observed quantile (the smaller of window, recent part)
    ttft_met: float | None  # the observed quantile the slack is judged on (the larger of the two)
    saturation_count: int | None  # the picker's saturation of this stage, as a count (gateway.py)
    kv_hot: bool  # KV usage at the high mark
    preempting: bool  # preemptions while KV is above its target


@dataclass(frozen=True)
class FleetCounts:
    """The counts sizing needs of the fleet (decide/fleet.py holds the rest)."""

    ready: int
    provisioned: int
    current: int | None  # what the scale target runs (the hysteresis' reference)


@dataclass(frozen=True)
class Sizing:
    terms: dict[str, int]  # each term's count, in TERM_ORDER, the role's terms only
    resources: dict[str, int]  # each resource's count: the largest of its terms
    term: str  # the term that sized the largest resource (the need's reason)

    @property
    def count(self) -> int:
        return self.terms[self.term]

    def resource_of(self, term: str) -> str:
        return next(r for r, ts in RESOURCE_TERMS.items() if term in ts)


def look_ahead(inflight_now: float, growth: float, per_replica: float, most_step: float, ttr: float,
               provisioned: int, time_to_ready: Callable[[int], float]) -> tuple[float, float]:
    """The in-flight demand when the last replica asked for is ready, and that horizon: a fixed point
    (more demand, more replicas, a colder k-th one on the warm ladder, a longer horizon). The growth
    over the horizon is bounded by the step bound (``most_step`` x today's load or one replica)."""
    most = max(inflight_now, per_replica) * (most_step - 1.0)

    def ahead(h: float) -> float:
        return inflight_now + min(growth * h, most)

    horizon = ttr
    inflight = ahead(horizon)
    for _ in range(LOOK_AHEAD_ROUNDS):
        if growth <= 0:
            break
        k = max(1, ceil_count(inflight / per_replica) - provisioned)
        longer = time_to_ready(k)
        if longer <= horizon:
            break
        horizon = longer
        inflight = ahead(horizon)
    return inflight, horizon


def size(demand: Demand, cap: Capacity, fleet: FleetCounts, *, step: float, kv_residency: float, kv_hot_target: float,
         ttft_quantile: float, itl_slo: float | None, allowed: frozenset[str] = frozenset(TERM_ORDER)) -> Sizing:
    """Each resource's count from demand over one replica's capacity (the table in the module's
    docstring). ``step`` bounds a proportional step up (SCALE_UP_MAX_STEP); ``allowed`` are the
    terms the role is sized by (scaler/roles.py ``ROLE_RULES``)."""
    ready, provisioned = fleet.ready, fleet.provisioned
    terms: dict[str, int] = {}

    # concurrency: the in-flight demand over the requests one replica is sized for; below what runs,
    # only down to a count that would run at most (1 - SCALE_DOWN_HEADROOM) of it (no flapping at a
    # boundary).
    terms["demand"] = ceil_count(demand.inflight / cap.inflight)
    if fleet.current is not None and terms["demand"] < fleet.current:
        held = ceil_count(demand.inflight / (cap.inflight * (1 - SCALE_DOWN_HEADROOM)))
        terms["demand"] = min(fleet.current, held)
    # concurrency, the backlog's drain: stop it growing and drain it within ``drain_within``, at the
    # rate one ready replica finishes requests; nothing finished yet: at what one engine held.
    if ready > 0 and demand.backlog > 0:
        if cap.finish_rate is not None and cap.finish_rate > 0:
            extra = (demand.backlog_slope + demand.backlog / demand.drain_within) / cap.finish_rate
        else:
            extra = demand.backlog / max(1.0, cap.engine_held)
        if extra > 0:  # capped before rounding: a vanishing finishing rate makes ``extra`` infinite
            terms["queue"] = ceil_count(min(ready + extra, max(provisioned, 1) * step))

    # prefill: the arriving prompt tokens over one replica's prefill at the utilisation target, relaxed
    # to the SLO model's count while the observed quantile meets the SLO.
    if demand.prompt_tps is not None:
        terms["prefill"] = ceil_count(demand.prompt_tps / (cap.target_utilization * cap.prefill_tps))
        slack = _slo_slack(demand, cap, terms["prefill"], ttft_quantile)
        if slack is not None:
            terms["prefill"] = slack

    # decode: the in-flight sequences under the ITL SLO, by the line corrected to its observed tail.
    if itl_slo is not None:
        n_itl = itl_count(demand.inflight, itl_slo, cap.itl_base_s, cap.itl_per_seq_s, cap.itl_factor,
                          ceil_count(max(provisioned, 1) * step))
        if n_itl is not None:
            terms["itl"] = n_itl

    # kv: residency at its target; at the high mark (or preempting) at the hot target, one more
    # replica while preempting, a proportional step at most.
    if ready > 0 and cap.kv_usage_mean is not None and cap.kv_sized:
        kv_need = ceil_count(ready * cap.kv_usage_mean / kv_residency)
        if kv_need > 1:  # one replica is the floor anyway (and must not block scale to zero)
            terms["kv"] = kv_need
    if ready > 0 and cap.kv_usage_mean is not None and (demand.kv_hot or demand.preempting):
        hot = ceil_count(ready * cap.kv_usage_mean / kv_hot_target)
        if demand.preempting:
            hot = max(hot, ready + 1)
        terms["kv"] = max(terms.get("kv", 0), provisioned, min(hot, ceil_count(ready * step)))

    # prefill, the observed quantile's correction: the count at which the model, corrected by what is
    # observed, meets the budget; without a prompt rate, the ready replicas scaled by quantile/budget.
    q, budget = demand.ttft_over, demand.ttft_budget
    if ready > 0 and q is not None and budget is not None and q > budget:
        if budget <= 0:
            terms["ttft"] = provisioned  # the handoff alone exceeds the SLO: no prefill replica helps
        else:
            most = ceil_count(ready * step)
            n_slo = None
            if demand.prefilled_tps is not None and cap.prompt_per_request:
                n_slo = slo_count(q, budget, ttft_quantile, ready, demand.prefilled_tps, cap.prefill_tps,
                                  cap.prompt_per_request, most)
            if n_slo is None:
                n_slo = ceil_count(ready * min(q / budget, step))
            terms["ttft"] = max(provisioned, n_slo)

    # concurrency, the picker's saturation of this stage.
    if demand.saturation_count is not None:
        terms["saturation"] = demand.saturation_count

    terms = {t: terms[t] for t in TERM_ORDER if t in terms and t in allowed}
    resources = {r: max(terms[t] for t in ts if t in terms) for r, ts in RESOURCE_TERMS.items()
                 if any(t in terms for t in ts)}
    return Sizing(terms=terms, resources=resources, term=max(terms, key=lambda t: terms[t]))


def _slo_slack(demand: Demand, cap: Capacity, n_util: int, ttft_quantile: float) -> int | None:
    """The prefill count lowered to the SLO model's (docs/policy.md, "SLO slack"), or ``None`` where it
    stands: no SLO or prompt size, too few first tokens, or the observed quantile over the budget."""
    if demand.ttft_budget is None or n_util <= 1 or not cap.prompt_per_request or demand.prompt_tps is None:
        return None
    if demand.ttft_met is None or demand.ttft_met > demand.ttft_budget:
        return None
    n_slo = prefill_slo_count(demand.prompt_tps, cap.prefill_tps, cap.prompt_per_request, demand.ttft_budget,
                              ttft_quantile, n_util)
    return None if n_slo is None else min(n_util, n_slo)
