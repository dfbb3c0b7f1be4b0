"""Snapshot + memory -> what the policy looks at (pure).

Cumulative engine counters and histograms only mean something as differences, so this step
keeps each replica's previous values in :class:`~scaler.state.ScalerState` and turns them into
windowed quantities: the TTFT distribution of the last ``ttftWindowSeconds``, the preemption rate,
recent activity (for idleness) and the demand trend (for the look-ahead).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeVar

from warmscale.scaler import capacity as cap
from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.context import ScalerContext
from warmscale.scaler.gateway import gateway_view
from warmscale.scaler.state import ReplicaMemory, ScalerState
from warmscale.signals.histogram import Histogram, merge, slide
from warmscale.signals.model import ReplicaSignal, Snapshot

# A rate's span never reaches zero (the metadata range starts at 0.1 s; a config built in code may not).
_MIN_RATE_SPAN_S = 1e-9


@dataclass(frozen=True)
class Observation:
    """Aggregates over the replicas whose signal is known, at ``now``."""

    now: float
    known_replicas: int
    unknown_replicas: int
    waiting: float
    running: float
    queue: float
    queue_unknown: bool
    kv_usage_max: float | None
    kv_usage_mean: float | None
    preemption_rate: float
    ttft_window: Histogram | None
    load: float
    running_slope: float
    waiting_slope: float
    completion_rate: float | None
    idle_for: float
    ready_replicas: int | None
    starting_replicas: int | None
    current_replicas: int | None
    time_to_ready_s: float | None
    warm_floor: int | None = None  # the warm pool's min-ready floor now (None: no warm pool)
    zero_allowed: bool | None = None  # the warm pool's scale-to-zero permission now (None: no warm pool)
    # A replica source saw no replica at all (and the workload was not at zero): their load is unknown.
    absent: bool = False
    queues_known: int = 0
    stale_endpoints: float = 0.0  # endpoints the picker has no fresh metrics for
    saturation: float | None = None  # the picker's saturation of this role's stage
    pd_floor: int | None = None  # the pdGroup's ratio bound for this role (scaler.pdgroup)
    ttr_ladder: tuple[tuple[str, int, float], ...] = ()  # the warm ladder (scaler.ladder); () = time_to_ready_s
    # The hot tier (Snapshot.hot_*): sleepers asleep (None: no hot tier known), awake (ready capacity),
    # and the measured wake time (the ladder's hot rung).
    hot_asleep: int | None = None
    hot_awake: int = 0
    hot_wake_s: float | None = None
    hot_load: float | None = None  # requests in the awake sleepers (None: unknown, never idle)
    hot_waking: int = 0  # wakes in progress
    # Token view (None: no replica exposes prompt tokens). Rates are over burstWindowSeconds, all replicas.
    prompt_rate: float | None = None  # prompt tokens prefilled per second
    waiting_prompt_tokens: float | None = None  # waiting requests x mean prompt tokens per request
    prompt_per_request: float | None = None  # mean prompt tokens per finished request (trend window)
    prefill_tps: float = cap.PRIORS["generic"].prefill_tps  # learned prefill tokens/s of one replica
    max_seqs: float = cap.PRIORS["generic"].max_seqs  # sequences one replica runs at once
    capacity_samples: int = 0  # saturated intervals behind prefill_tps (0: the prior)
    gpu_product: str = ""
    # Inter-token latency (scaler.capacity, "ITL"): the windowed distribution over ttftWindowSeconds
    # (None: no replica exposes one), the learned line itl(b) = itl_base_s + itl_per_seq_s x b of one
    # replica running b sequences, and the correction of that line to the observed quantile (the last
    # observed one while ITL is unknown; 1.0 before any).
    itl_window: Histogram | None = None
    itl_base_s: float = cap.ITL_PRIORS["generic"].base_s
    itl_per_seq_s: float = cap.ITL_PRIORS["generic"].per_seq_s
    itl_factor: float = 1.0
    # dcgm-exporter (secondary, dcgmEndpoints): mean utilisation and framebuffer share of the GPUs
    # DCGM attributes to the ScaledObject's pods (None: not configured, unreadable, or no such GPU).
    gpu_utilization: float | None = None
    gpu_memory_used: float | None = None
    itl_samples: int = 0
    # With itlSloSeconds set: a known replica that exposed an ITL histogram no longer does (or sends a
    # malformed one). Unknown ITL blocks scale-down as an unknown replica does.
    itl_unknown: bool = False
    # Mean KV-transfer time between prefill and decode (P/D connectors) over trendWindowSeconds; None:
    # no replica reports one. pd_transfer_s: what the other role of the pdGroup published.
    kv_transfer_s: float | None = None
    pd_transfer_s: float | None = None
    # First tokens of the newer part of the TTFT window (the last burstWindowSeconds); None when the
    # window is pre-aggregated by the source (no per-scrape deltas to split).
    ttft_recent: Histogram | None = None
    # Mean running requests per known engine at the previous scrape (None: no earlier reading).
    running_before: float | None = None
    # No engine is read directly and the endpoint picker does not report running requests: they are
    # unknown (never 0), as an unknown replica's are.
    running_unknown: bool = False
    # Replicas whose engine sleeps (vLLM sleep mode): not ready, not capacity, not idle (left out of the
    # known replicas and of the ready count; they hold scale-down and scale to zero).
    sleeping_replicas: int = 0

    @property
    def uncertain(self) -> bool:
        """Some of the data is unknown: no scale-down, no zero (partial-data rules)."""
        return (self.unknown_replicas > 0 or self.queue_unknown or self.absent or self.stale_endpoints > 0
                or self.itl_unknown or self.running_unknown or self.sleeping_replicas > 0)

    @property
    def all_unknown(self) -> bool:
        """Nothing is known that could size the workload: hold."""
        return self.known_replicas == 0 and (
            self.unknown_replicas > 0 or self.queue_unknown or (self.absent and self.queues_known == 0)
        )


T = TypeVar("T")


@dataclass(frozen=True)
class _SampleStart:
    """Where a replica's current capacity sample starts (kept in its ReplicaMemory)."""

    at: float
    prompt: float | None
    saturated: bool
    aligned: bool  # started at a scrape where the prompt counter moved
    lead: float | None  # the scrape gap before ``at``: the start's lump completed within it
    prefill: tuple[float, float, float] | None  # prefill seconds, prefills, their prompt tokens at ``at``


def _learn_sample(est: cap.Estimate, prev: ReplicaMemory, sig: ReplicaSignal, now_t: tuple[float, float, float] | None,
                  span_s: float, saturated: bool) -> cap.Estimate:
    """Fold one counter-step-to-counter-step sample into the estimate (scaler.capacity); ``now_t`` is
    the replica's :func:`_prefill_totals`."""
    assert sig.prompt_tokens_total is not None and prev.sample_prompt is not None
    tokens = sig.prompt_tokens_total - prev.sample_prompt
    if saturated:
        est = cap.learn(est, tokens, span_s, True)
    elif span_s >= cap.SERVED_MIN_SECONDS:
        # What was served: the first counted prompt may have started right after the lump that
        # opened the sample, up to ``lead`` before its scrape; over the longest span it may have taken.
        est = cap.learn(est, tokens, span_s + (prev.sample_lead or 0.0), False)
    # The prefill-time floor over this sample's finished requests, while the engine has never counted a
    # prefix-cache hit (their prompts were computed whole); with hits only the lifetime floor applies.
    then_t = prev.sample_prefill
    if now_t is not None and then_t is not None and sig.prefix_cache_hits_total == 0.0 \
            and all(a >= b for a, b in zip(now_t, then_t, strict=True)):
        floor = cap.prefill_floor(now_t[2] - then_t[2], 0.0, now_t[0] - then_t[0], now_t[1] - then_t[1])
        if floor is not None:
            est = cap.raise_to(est, floor)
    return est


def _prefill_bound(sig: ReplicaSignal, prev: ReplicaMemory | None, cfg: ScalerConfig) -> bool:
    """Requests wait for prefill at this scrape: some wait, the KV cache is below ``KV_HIGH`` (a
    full cache admits no prompt however fast the engine prefills: the prompt counter then measures
    how fast decodes free blocks) and no request was preempted since the last scrape (a preempted
    request's prompt is recomputed and not counted again: the counter understates the work)."""
    if sig.waiting <= 0:
        return False
    if sig.kv_usage is not None and sig.kv_usage >= cfg.kv_cache_high:
        return False
    return not (prev is not None and _increased(sig.preemptions_total, prev.preemptions_total))


def _prefill_totals(sig: ReplicaSignal) -> tuple[float, float, float] | None:
    if sig.prefill_seconds_total is None or sig.prefills_total is None or sig.prefill_prompt_tokens_total is None:
        return None
    return sig.prefill_seconds_total, sig.prefills_total, sig.prefill_prompt_tokens_total


def _prefill_floor(sig: ReplicaSignal) -> float | None:
    """The replica's lifetime prefill-time floor (scaler.capacity.prefill_floor), else None."""
    totals = _prefill_totals(sig)
    if totals is None or sig.prefix_cache_hits_total is None:
        return None  # no prefill time, per-request prompt tokens or prefix-cache hits: no floor
    return cap.prefill_floor(totals[2], sig.prefix_cache_hits_total, totals[0], totals[1])


def _prune(samples: tuple[tuple[float, T], ...], since: float) -> tuple[tuple[float, T], ...]:
    return tuple(s for s in samples if s[0] >= since)


def _increased(new: float | None, old: float | None) -> bool:
    return new is not None and old is not None and new > old


def slope(samples: tuple[tuple[float, float], ...]) -> float:
    """Least-squares slope (per second) of (time, value) samples; 0 with fewer than 3 or no spread."""
    if len(samples) < 3:
        return 0.0
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var <= 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in samples) / var


def _halves_slope(samples: tuple[tuple[float, float], ...]) -> float:
    """Slope between the medians of the older and the newer half of the samples (robust to spikes)."""
    if len(samples) < 4:
        return 0.0
    mid = len(samples) // 2
    old, new = samples[:mid], samples[mid:]
    dt = sum(t for t, _ in new) / len(new) - sum(t for t, _ in old) / len(old)
    if dt <= 0:
        return 0.0
    return (_median([v for _, v in new]) - _median([v for _, v in old])) / dt


def _median(values: list[float]) -> float:
    values.sort()
    n = len(values)
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2.0


def sustained_slope(samples: tuple[tuple[float, float], ...]) -> float:
    """A trend that holds over the whole window *and* over its newer half, measured between medians
    of half-windows: the one of the two slopes nearer zero, or 0 when they disagree in sign. A ramp
    keeps its slope; a spike, or a step that is over, gives (nearly) 0, so the look-ahead does not
    extrapolate it."""
    whole = _halves_slope(samples)
    recent = _halves_slope(samples[len(samples) // 2 :])
    if whole * recent <= 0:
        return 0.0
    return min(whole, recent, key=abs)


def established_slope(samples: tuple[tuple[float, float], ...], window: float) -> float:
    """:func:`sustained_slope`, once the samples span at least half of ``window`` (else 0): a trend
    seen for a few seconds (a tracker that just started, traffic that just began) is no evidence of
    one that lasts, and the look-ahead extrapolates it over a time-to-ready of minutes."""
    if not samples or samples[-1][0] - samples[0][0] < 0.5 * window:
        return 0.0
    return sustained_slope(samples)


def _growth_or_recent_decline(samples: tuple[tuple[float, float], ...]) -> float:
    """Sustained growth if there is any, else how fast the newer half declines (0 if it does not)."""
    growth = sustained_slope(samples)
    if growth > 0:
        return growth
    return min(0.0, _halves_slope(samples[len(samples) // 2 :]))


def idle_gap_seconds(cfg: ScalerConfig) -> float:
    """Decisions further apart than this leave a hole in the idle evidence (the tracker could not read
    its sources, the lease moved, the process restarted): the idle window starts again."""
    return max(3.0 * cfg.scrape_interval_seconds, cfg.scrape_interval_seconds + 2.0)


# The memory key prefix of an awake sleeper's reading (not a pod of the scale target).
HOT_REPLICA = "hot:"


def _hot_ttfts(snapshot: Snapshot, memory: dict[str, ReplicaMemory], fresh_ttft: list[Histogram]) -> None:
    """The awake sleepers' first tokens since their last reading join the TTFT window (a woken sleeper
    serves the workload's requests: the SLO is theirs too). Only the TTFT: their load is the waker's
    ``hot_load``. A sleeper whose reading failed keeps its last one (differenced when it is back); one
    no longer awake is forgotten (its next wake starts from a new reading)."""
    for reading in snapshot.hot_replicas:
        sig = reading.signal
        if sig is None:
            continue
        key = HOT_REPLICA + reading.replica
        prev = memory.get(key)
        if prev is not None and sig.ttft is not None and prev.ttft is not None:
            d = sig.ttft.delta(prev.ttft)
            if d is not None and d.count > 0:
                fresh_ttft.append(d)
        memory[key] = ReplicaMemory(observed_at=reading.observed_at, ttft=sig.ttft)


def _without_sleeping(snapshot: Snapshot) -> tuple[Snapshot, int]:
    """The snapshot without the replicas whose engine sleeps, and how many they were. Until the hot tier
    exists, a sleeping replica is not ready: its zero load is no capacity and no idle evidence (issue 20
    item 17). The API server's ready count, which includes it, is lowered by as many."""
    asleep = {r.replica for r in snapshot.replicas if r.signal is not None and r.signal.sleeping}
    if not asleep:
        return snapshot, 0
    ready = snapshot.ready_replicas
    return replace(snapshot, replicas=tuple(r for r in snapshot.replicas if r.replica not in asleep),
                   ready_replicas=max(0, ready - len(asleep)) if ready is not None else None), len(asleep)


def observe(snapshot: Snapshot, state: ScalerState, cfg: ScalerConfig,
            ctx: ScalerContext = ScalerContext()) -> tuple[Observation, ScalerState]:
    """Turn a snapshot, with the scaler's own inputs for it (``ctx``: warm pool, pdGroup), into an
    observation and the state to keep.

    Idleness (``idle_for``, for scale to zero) is measured from the engines' own data only: a
    decision with any unknown replica, unknown gateway queue or absent replica source, or one that
    follows a hole in the decisions (:func:`idle_gap_seconds`), restarts the idle window. Replicas
    missing from a snapshot are *absent*, unknown, unless the workload was scaled to zero (the last
    decision was 0: no replica is there to report)."""
    now = snapshot.taken_at
    snapshot, sleeping = _without_sleeping(snapshot)
    known = snapshot.known
    memory = dict(state.replicas)
    ttft_deltas = list(state.ttft_deltas)
    fresh_ttft: list[Histogram] = []  # this decision's per-replica TTFT deltas (one window entry: below)
    preemptions = list(state.preemption_events)
    activity = False
    completed = 0.0
    completion_counted = False
    prompt_tokens = 0.0
    prompt_counted = False
    xfer_s, xfer_n = 0.0, 0.0
    xfer_counted = False
    gpu = cfg.gpu_product or snapshot.gpu_product or ""
    prior = cap.prior_for(cfg.engine, cfg.model_profile, cfg.prefill_tps_prior)
    estimate = state.capacity.get(gpu) or cap.start(prior)
    # The decision sizes this snapshot's demand by the capacity learned before it, raised by the
    # replicas' lifetime prefill-time floors: an interval sample of this snapshot then never raises the
    # capacity its own prompt tokens are divided by (more prompt tokens never ask for fewer replicas).
    sizing = estimate
    itl_prior = cap.itl_prior_for(cfg.engine, cfg.model_profile)
    itl_est = state.itl_capacity.get(gpu) or cap.ItlEstimate()
    itl_now: list[tuple[Histogram, float]] = []  # this decision's per-replica ITL deltas and batches
    itl_lost = False

    held_before: list[float] = []  # running requests per engine at the previous scrape
    for reading in known:
        sig = reading.signal
        assert sig is not None
        prev = memory.get(reading.replica)
        if prev is not None and prev.running is not None:
            held_before.append(prev.running)
        if prev is not None:
            if sig.ttft is not None and prev.ttft is not None:
                d = sig.ttft.delta(prev.ttft)
                if d is not None and d.count > 0:
                    fresh_ttft.append(d)
            if sig.itl is None and prev.itl is not None:
                itl_lost = True
            if sig.itl is not None and prev.itl is not None and prev.running is not None:
                d = sig.itl.delta(prev.itl)
                batch = (sig.running + prev.running) / 2.0
                if d is not None and d.count > 0 and batch > 0:
                    itl_now.append((d, batch))
                    itl_est = cap.learn_itl(itl_est, batch, d.sum / d.count)
            if _increased(sig.preemptions_total, prev.preemptions_total):
                assert sig.preemptions_total is not None and prev.preemptions_total is not None
                preemptions.append((now, sig.preemptions_total - prev.preemptions_total))
            if sig.requests_total is not None and prev.requests_total is not None:
                completion_counted = True
                if sig.requests_total >= prev.requests_total:  # a decrease is a counter reset
                    completed += sig.requests_total - prev.requests_total
            if sig.prompt_tokens_total is not None and prev.prompt_tokens_total is not None:
                prompt_counted = True
                if sig.prompt_tokens_total >= prev.prompt_tokens_total:  # a decrease is a counter reset
                    prompt_tokens += sig.prompt_tokens_total - prev.prompt_tokens_total
            if sig.kv_transfers_total is not None and prev.kv_transfers_total is not None \
                    and sig.kv_transfer_seconds_total is not None and prev.kv_transfer_seconds_total is not None:
                xfer_counted = True
                if sig.kv_transfers_total >= prev.kv_transfers_total \
                        and sig.kv_transfer_seconds_total >= prev.kv_transfer_seconds_total:  # else a reset
                    xfer_n += sig.kv_transfers_total - prev.kv_transfers_total
                    xfer_s += sig.kv_transfer_seconds_total - prev.kv_transfer_seconds_total
            if _increased(sig.requests_total, prev.requests_total) or _increased(
                sig.generation_tokens_total, prev.generation_tokens_total
            ):
                activity = True
        # Capacity sample (scaler.capacity): from one step of the prompt counter to a later one, at
        # least SATURATED_MIN_SECONDS when requests waited at every scrape of it, else
        # SERVED_MIN_SECONDS; one that did not start at a step (the first, after a reset) is skipped.
        seen_at, p_now = reading.observed_at, sig.prompt_tokens_total
        stepped = prev is not None and p_now is not None and prev.prompt_tokens_total is not None \
            and p_now > prev.prompt_tokens_total
        totals = _prefill_totals(sig)
        bound = _prefill_bound(sig, prev, cfg)
        start = _SampleStart(seen_at, p_now, bound, stepped,
                             seen_at - prev.observed_at if prev is not None else None, totals)
        if prev is not None and prev.sample_at is not None and prev.sample_prompt is not None \
                and p_now is not None and p_now >= prev.sample_prompt:
            span_s = seen_at - prev.sample_at
            saturated = prev.sample_saturated and bound
            if stepped and span_s >= (cap.SATURATED_MIN_SECONDS if saturated else cap.SERVED_MIN_SECONDS):
                if prev.sample_aligned:
                    estimate = _learn_sample(estimate, prev, sig, totals, span_s, saturated)
            elif stepped and bound and not saturated:
                # A queue formed within an unsaturated sample too short to be a served one: a saturated
                # sample starts at this step (the fresh ``start``), else a burst shorter than
                # SERVED_MIN_SECONDS that begins after an idle scrape never teaches the prefill rate.
                pass
            else:
                start = _SampleStart(prev.sample_at, prev.sample_prompt, saturated, prev.sample_aligned,
                                     prev.sample_lead, prev.sample_prefill)
        floor = _prefill_floor(sig)
        if floor is not None:
            estimate = cap.raise_to(estimate, floor)
            sizing = cap.raise_to(sizing, floor)  # lifetime totals: known now, no interval of this snapshot
        memory[reading.replica] = ReplicaMemory(
            observed_at=reading.observed_at,
            sample_at=start.at,
            sample_prompt=start.prompt,
            sample_saturated=start.saturated,
            sample_aligned=start.aligned,
            sample_lead=start.lead,
            sample_prefill=start.prefill,
            ttft=sig.ttft,
            requests_total=sig.requests_total,
            generation_tokens_total=sig.generation_tokens_total,
            preemptions_total=sig.preemptions_total,
            prompt_tokens_total=sig.prompt_tokens_total,
            waiting=sig.waiting,
            # A histogram that went missing is remembered: unknown until it is back (then differenced).
            itl=sig.itl if sig.itl is not None or prev is None else prev.itl,
            running=sig.running,
            kv_transfer_seconds_total=sig.kv_transfer_seconds_total,
            kv_transfers_total=sig.kv_transfers_total,
        )
    _hot_ttfts(snapshot, memory, fresh_ttft)
    if fresh_ttft:
        # One entry per decision, the sum of its replicas' deltas: the window sums a decision's entries
        # anyway, so its counts (whole numbers, summed exactly in any order) and every quantile are the
        # same, while the window to merge and the state to store shrink by the replica count.
        merged_ttft = merge(fresh_ttft)
        assert merged_ttft is not None
        ttft_deltas.append((now, merged_ttft))
    present = {r.replica for r in snapshot.replicas} | {HOT_REPLICA + r.replica for r in snapshot.hot_replicas}
    memory = {k: v for k, v in memory.items() if k in present}

    if snapshot.ttft_window is not None:
        ttft_deltas.append((now, snapshot.ttft_window))
    ttft_since = now - cfg.ttft_window_seconds
    ttft_kept = _prune(tuple(ttft_deltas), ttft_since)
    previous = state.ttft_deltas
    window, ttft_sum = slide(state.ttft_sum, previous, ttft_kept,
                             expired=(h for t, h in previous if t < ttft_since),
                             added=(h for t, h in ttft_deltas[len(previous):] if t >= ttft_since))
    recent_since = now - cfg.burst_window_seconds
    recent: Histogram | None = merge(h for t, h in ttft_kept if t > recent_since)
    if snapshot.ttft_window is not None:
        recent = None  # set to the window below: a pre-aggregated window cannot be split
        # A pre-windowed distribution replaces the sum of pre-windowed samples (no double counting).
        ttft_kept = ((now, snapshot.ttft_window),)
        window = snapshot.ttft_window
        ttft_sum = None
        recent = window

    itl_window, itl_kept, itl_factor = _itl_view(snapshot, state, cfg, itl_now, itl_est, itl_prior)
    itl_base, itl_slope = cap.itl_line(itl_est, itl_prior)

    waiting = sum(r.signal.waiting for r in known if r.signal is not None)
    running = sum(r.signal.running for r in known if r.signal is not None)
    queue_lengths = [q.length for q in snapshot.queues if q.length is not None]
    gw = gateway_view(snapshot, cfg)
    queue_unknown = any(q.length is None for q in snapshot.queues) or gw.unknown
    queue = float(sum(queue_lengths)) + gw.queue  # the endpoint picker's flow-control queue is demand
    at_zero = state.last_desired == 0
    gateway_only = not known and not snapshot.replicas and bool(snapshot.gateways) and not sleeping
    if gateway_only and gw.running is not None:
        running = gw.running  # no engine read directly: the picker's in-flight requests
    if gateway_only and gw.engine_waiting is not None:
        waiting = gw.engine_waiting  # ... and the requests waiting in the engines it reports
    # A picker that does not say what runs leaves it unknown (never 0), unless nothing can run: the
    # workload is at zero, or no endpoint is ready (the picker's or the API server's count is 0).
    nothing_ready = snapshot.ready_replicas == 0 or gw.ready_endpoints == 0
    running_unknown = gateway_only and gw.running is None and not gw.unknown and not at_zero and not nothing_ready
    ready_replicas = snapshot.ready_replicas if snapshot.ready_replicas is not None else gw.ready_endpoints
    kvs = [r.signal.kv_usage for r in known if r.signal is not None and r.signal.kv_usage is not None]

    n_known, n_unknown = len(known), len(snapshot.replicas) - len(known)
    absent = not at_zero and (bool(snapshot.absent)
                              or (not snapshot.replicas and not snapshot.queues and not snapshot.gateways))
    gap = state.last_decision_at is not None and now - state.last_decision_at > idle_gap_seconds(cfg)
    # Ready pods the sources did not report at all (the API counts them): their load is unknown too.
    unseen = snapshot.ready_replicas is not None and snapshot.ready_replicas > len(snapshot.replicas) > 0
    itl_unknown = itl_lost and cfg.itl_slo_seconds is not None
    uncertain = (n_unknown > 0 or queue_unknown or absent or gap or unseen or gw.stale_endpoints > 0 or itl_unknown
                 or running_unknown or sleeping > 0)
    # Unknown replicas are assumed as loaded as the known ones (never idle).
    scale = (n_known + n_unknown) / n_known if n_known else 1.0
    load = (waiting + running) * scale + queue
    if load > 0:
        activity = True
    trend_since = now - cfg.trend_window_seconds
    running_samples = _prune((*state.running_samples, (now, running * scale)), trend_since)
    waiting_samples = _prune((*state.waiting_samples, (now, waiting * scale + queue)), trend_since)
    completions = state.completions
    if completion_counted:
        completions = (*completions, (now, completed * scale))
    completions = _prune(completions, trend_since)
    completion_rate = _rate(completions)
    prompt_samples = state.prompt_samples
    if prompt_counted:
        finished = completed * scale if completion_counted else 0.0
        prompt_samples = (*prompt_samples, (now, prompt_tokens * scale, finished))
    prompt_samples = _prune3(prompt_samples, trend_since)
    prompt_rate, per_request = _prompt_view(prompt_samples, now - cfg.burst_window_seconds)
    transfer_samples = state.transfer_samples
    if xfer_counted:
        transfer_samples = (*transfer_samples, (now, xfer_s, xfer_n))
    transfer_samples = _prune3(transfer_samples, trend_since)
    latest = [r.signal.kv_transfer_latency_s for r in known
              if r.signal is not None and r.signal.kv_transfer_latency_s is not None]
    kv_transfer_s = _transfer_mean(transfer_samples, latest)
    maxes = [r.signal.max_running for r in known if r.signal is not None and r.signal.max_running]

    preemption_kept = _prune(tuple(preemptions), now - cfg.ttft_window_seconds)
    span = max(cfg.ttft_window_seconds, _MIN_RATE_SPAN_S)
    # Unknown is never idle: only a decision on complete data extends the idle evidence.
    # An uncertain decision clears the evidence (None): the window starts at the next complete one.
    # Activity and fresh idle evidence are stamped when the data was read (``read_until``), which can be
    # later than ``now`` when sources were slow: the idle window never counts time before its data.
    read_at = max(now, snapshot.read_until) if snapshot.read_until is not None else now
    reset_idle = activity or uncertain
    last_activity: float | None
    if activity:
        last_activity = read_at
    elif uncertain:
        last_activity = None
    else:
        last_activity = state.last_activity_at if state.last_activity_at is not None else read_at

    obs = Observation(
        now=now,
        known_replicas=n_known,
        unknown_replicas=n_unknown,
        waiting=waiting,
        running=running,
        queue=queue,
        queue_unknown=queue_unknown,
        kv_usage_max=max(kvs) if kvs else None,
        kv_usage_mean=sum(kvs) / len(kvs) if kvs else None,
        preemption_rate=sum(v for _, v in preemption_kept) / span,
        ttft_window=window,
        load=load,
        running_slope=established_slope(running_samples, cfg.trend_window_seconds),
        waiting_slope=_growth_or_recent_decline(waiting_samples),
        completion_rate=completion_rate,
        idle_for=max(0.0, now - last_activity) if not reset_idle and last_activity is not None else 0.0,
        ready_replicas=ready_replicas,
        starting_replicas=snapshot.starting_replicas,
        current_replicas=snapshot.current_replicas,
        time_to_ready_s=snapshot.time_to_ready_s,
        ttr_ladder=ctx.ttr_ladder,
        hot_asleep=snapshot.hot_asleep,
        hot_awake=snapshot.hot_awake,
        hot_wake_s=snapshot.hot_wake_s,
        hot_load=snapshot.hot_load,
        hot_waking=snapshot.hot_waking,
        prompt_rate=prompt_rate,
        waiting_prompt_tokens=(waiting * scale + queue) * per_request if per_request is not None else None,
        prompt_per_request=per_request,
        prefill_tps=sizing.prefill_tps,
        max_seqs=min(maxes) if maxes else prior.max_seqs,
        capacity_samples=sizing.samples,
        gpu_product=gpu,
        itl_window=itl_window,
        itl_base_s=itl_base,
        itl_per_seq_s=itl_slope,
        itl_factor=itl_factor if itl_factor is not None else 1.0,
        itl_samples=itl_est.samples,
        itl_unknown=itl_unknown,
        kv_transfer_s=kv_transfer_s,
        pd_transfer_s=ctx.pd_transfer_s,
        ttft_recent=recent,
        running_before=sum(held_before) / len(held_before) if held_before else None,
        running_unknown=running_unknown,
        sleeping_replicas=sleeping,
        warm_floor=ctx.warm_floor,
        pd_floor=ctx.pd_floor,
        gpu_utilization=_mean(g.utilization for g in snapshot.gpus or ()),
        gpu_memory_used=_mean(g.memory_used for g in snapshot.gpus or ()),
        zero_allowed=ctx.zero_allowed,
        absent=absent,
        queues_known=len(queue_lengths) + sum(1 for g in snapshot.gateways if g.signal is not None),
        stale_endpoints=gw.stale_endpoints,
        saturation=gw.saturation,
    )
    new_state = replace(
        state,
        replicas=memory,
        ttft_deltas=ttft_kept,
        ttft_sum=ttft_sum,
        running_samples=running_samples,
        waiting_samples=waiting_samples,
        completions=completions,
        prompt_samples=prompt_samples,
        transfer_samples=transfer_samples,
        capacity={**state.capacity, gpu: estimate},
        itl_deltas=itl_kept,
        itl_capacity={**state.itl_capacity, gpu: itl_est},
        itl_factor=itl_factor,
        preemption_events=preemption_kept,
        last_activity_at=last_activity,
    )
    return obs, new_state


# Fewer inter-token latencies than this in the window say nothing about a quantile.
MIN_ITL_SAMPLES = 5
# Bounds of the correction of the ITL line to the observed quantile: below, bucket interpolation
# artefacts; above, no more information (scaler.slo.ITL_TAIL_MAX already keeps the rule out there).
ITL_FACTOR_BOUNDS = (0.5, 1000.0)


def _itl_view(snapshot: Snapshot, state: ScalerState, cfg: ScalerConfig, fresh: list[tuple[Histogram, float]],
              est: cap.ItlEstimate, prior: cap.ItlPrior,
              ) -> tuple[Histogram | None, tuple[tuple[float, Histogram, float], ...], float | None]:
    """The windowed ITL distribution, the deltas to keep, and the line's correction factor: the
    observed quantile over the line's ITL at the window's mean batch (weighted by tokens). Without an
    observed quantile the last factor stands (unknown ITL never makes the prediction better)."""
    now = snapshot.taken_at
    if cfg.itl_slo_seconds is None:  # no ITL objective: the line is learned, no window is kept
        return None, (), state.itl_factor
    kept = list(state.itl_deltas)
    if fresh:
        merged = merge(h for h, _ in fresh)
        assert merged is not None
        batch = sum(h.count * b for h, b in fresh) / sum(h.count for h, _ in fresh)
        kept.append((now, merged, batch))
    if snapshot.itl_window is not None and snapshot.itl_window.count > 0:
        # A pre-windowed distribution replaces the sum of pre-windowed samples (no double counting); its
        # batch is the running sequences per known replica now.
        known = snapshot.known
        runs = [r.signal.running for r in known if r.signal is not None]
        kept = [(now, snapshot.itl_window, sum(runs) / len(runs) if runs else 0.0)]
    window_kept = tuple(k for k in kept if k[0] >= now - cfg.ttft_window_seconds)
    window = merge(h for _, h, _ in window_kept)
    factor = state.itl_factor
    if window is not None and window.count >= MIN_ITL_SAMPLES:
        q = window.quantile(cfg.ttft_quantile)
        batch = sum(h.count * b for _, h, b in window_kept) / window.count
        base, slope = cap.itl_line(est, prior)
        modelled = base + slope * batch
        if q is not None and q > 0 and batch > 0 and modelled > 0:
            lo, hi = ITL_FACTOR_BOUNDS
            factor = min(hi, max(lo, q / modelled))
    return window, window_kept, factor


def _prune3(samples: tuple[tuple[float, float, float], ...], since: float) -> tuple[tuple[float, float, float], ...]:
    return tuple(s for s in samples if s[0] >= since)


def _prompt_view(samples: tuple[tuple[float, float, float], ...], since: float) -> tuple[float | None, float | None]:
    """(prompt tokens/s since ``since``, mean prompt tokens per finished request over all samples).
    Each sample counts what happened since the decision before it, so the oldest sample in the
    span lies outside it."""
    if len(samples) < 2:
        return None, None
    recent = [s for s in samples if s[0] >= since]
    rate = None
    if len(recent) >= 2 and recent[-1][0] > recent[0][0]:
        rate = sum(s[1] for s in recent[1:]) / (recent[-1][0] - recent[0][0])
    elif recent:  # one decision in the window: the span back to the sample before it
        older = [s for s in samples if s[0] < since]
        if older and recent[-1][0] > older[-1][0]:
            rate = recent[-1][1] / (recent[-1][0] - older[-1][0])
    tokens = sum(s[1] for s in samples[1:])
    requests = sum(s[2] for s in samples[1:])
    return rate, (tokens / requests if requests > 0 else None)


def _transfer_mean(samples: tuple[tuple[float, float, float], ...], latest: list[float]) -> float | None:
    """Mean KV-transfer time: the connector counters' seconds per transfer over the window (each sample
    counts what happened since the decision before it, so the oldest lies outside), else the mean of the
    engines' latest-transfer gauges; ``None`` when neither says anything."""
    count = sum(s[2] for s in samples[1:])
    if count > 0:
        return sum(s[1] for s in samples[1:]) / count
    if latest:
        return sum(latest) / len(latest)
    return None


def _rate(samples: tuple[tuple[float, float], ...]) -> float | None:
    """Requests finished per second, or ``None`` with fewer than two samples. Each sample counts the
    requests finished since the scrape before it, so the oldest sample's count lies outside the span."""
    if len(samples) < 2:
        return None
    span = samples[-1][0] - samples[0][0]
    if span <= 0:
        return None
    return sum(v for _, v in samples[1:]) / span


def _mean(values: Iterable[float | None]) -> float | None:
    """Mean of the known values (``None`` when there is none)."""
    known = [v for v in values if v is not None]
    return math.fsum(known) / len(known) if known else None
