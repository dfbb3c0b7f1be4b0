"""``warmscale.io/hot-standby: "auto"``: how many sleepers a workload keeps in its hot pool (pure;
docs/hot-tier.md, "Sizing auto").

Sized like the warm pool's ``standby: auto`` (warmpool/planning.py ``auto_standby``), from the same
burst statistics the scaler publishes (scaler/bursts.py ``BurstStats``): the bursts' rise above the
fleet they rose from, and per level ``k`` (the k-th replica the burst needed beyond the provisioned
ones) how long each burst lasted.

A sleeper at level ``k`` makes that replica ready after the wake time ``Th`` (a few seconds) instead
of the time the workload would wait without it, ``Tn``: the warm pool's placeholder time where the
workload keeps placeholders, else a cold start. Over a burst lasting ``D`` it saves
``min(D, Tn) - min(D, Th)`` replica-seconds of missing capacity. Summed over the recorded bursts at
its level, priced by MISS_WEIGHT (a replica-second missed is worth 20 GPU-seconds: the miss budget of
the default TTFT quantile, as for ``standby: auto``) and divided by the evidence span (at least
MIN_EVIDENCE_S), that is what the sleeper is worth per second. It costs its **share of the pool**:
the pool's GPUs are charged in full, asleep or not, and split among the sleepers they hold
(``pool_gpus / pool_sleepers``, at most 1 GPU), so a sleeper is cheap only where the GPU is shared.
Level by level from the first, a sleeper is kept while its worth reaches its share.

Absent data never shrinks the tier: with the store unreadable the last size is kept; without burst
statistics yet the workload keeps AUTO_PRIOR_SLEEPERS (scale from zero without a cold start, which
the first burst then measures). The count is capped by MAX_SLEEPERS (warmpool/hot/config.py) and by
the burst levels tracked (scaler/bursts.py MAX_LEVEL).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from warmscale.scaler.bursts import MAX_LEVEL, BurstStats, warm_and_cold
from warmscale.warmpool.hot.config import MAX_SLEEPERS, HotConfig
from warmscale.warmpool.planning import MIN_EVIDENCE_S, MISS_WEIGHT

# Without burst statistics yet, `auto` keeps one sleeper: the first request after an idle spell is
# served after a wake (seconds) instead of a cold start (minutes), and that burst is then recorded.
AUTO_PRIOR_SLEEPERS = 1
# A sleeper's wake time until the waker measured one: a level-2 wake of an 8B (6.5 s, vllm PR #48337),
# the slowest measured (scaler/tracker.py HOT_WAKE_PRIOR_SECONDS uses the same figure).
WAKE_PRIOR_S = 6.5


@dataclass(frozen=True)
class HotEvidence:
    """What ``hot-standby: auto`` is sized from (gathered by the reconciler, pure data).

    ``bursts``: the scaler's published statistics (None: none yet); ``readable``: False when the store
    could not be read; ``last``: the size chosen before; ``time_to_ready``: the warm pool's measured
    medians per warm state (``cold``, ``staged``, ``placeholder+staged``); ``warm_standby``: whether the
    workload keeps warm-pool placeholders (then a replica without a sleeper waits the placeholder
    time, not a cold start); ``wake_s``: the measured wake time (None: WAKE_PRIOR_S);
    ``pool_gpus``/``pool_sleepers``: the pool's GPUs and the sleepers they hold (0: this one alone)."""

    bursts: BurstStats | None = None
    readable: bool = True
    last: int | None = None
    time_to_ready: Mapping[str, float] = field(default_factory=dict)
    warm_standby: bool = False
    wake_s: float | None = None
    pool_gpus: int = 1
    pool_sleepers: int = 0


@dataclass(frozen=True)
class HotSize:
    count: int  # sleepers to keep
    why: str
    # What the last kept sleeper is worth per second held (MISS_WEIGHT-priced replica-seconds saved):
    # the eviction order of warmpool/hot/pool.py divides it by the host RAM it holds. 0: not known.
    value: float = 0.0


def pool_share(pool_gpus: int, pool_sleepers: int) -> float:
    """GPU-seconds per second one sleeper costs: the pool's GPUs (charged in full) split among the
    sleepers they hold, at most one whole GPU."""
    if pool_gpus <= 0:
        return 1.0
    return min(1.0, pool_gpus / max(1, pool_sleepers))


def auto_hot_standby(ev: HotEvidence, fleet: int, cap: int = MAX_SLEEPERS) -> HotSize:
    """The sleepers ``hot-standby: auto`` keeps for a workload whose fleet is ``fleet`` replicas now."""
    if not ev.readable:
        if ev.last is None:
            return HotSize(AUTO_PRIOR_SLEEPERS, f"store unreadable, no size chosen before: {AUTO_PRIOR_SLEEPERS}")
        return HotSize(ev.last, "store unreadable: last size kept")
    st = ev.bursts
    if st is None:
        return HotSize(min(cap, AUTO_PRIOR_SLEEPERS), "no burst statistics published yet: "
                       f"{AUTO_PRIOR_SLEEPERS} sleeper (scale from zero by a wake)")
    medians = {"cold": st.cold_s} if st.cold_s > 0 else {}
    medians.update(ev.time_to_ready)
    tw, tc = warm_and_cold(medians, 0.0)
    without = tw if ev.warm_standby else tc
    th = ev.wake_s if ev.wake_s is not None and ev.wake_s >= 0 else WAKE_PRIOR_S
    if without <= 0:
        return HotSize(min(cap, AUTO_PRIOR_SLEEPERS), "no time-to-ready known yet: "
                       f"{AUTO_PRIOR_SLEEPERS} sleeper")
    if without <= th:
        return HotSize(0, f"a wake ({th:g} s) is not faster than a {'warm' if ev.warm_standby else 'cold'} "
                       f"start ({without:.0f} s)")
    size = min(cap, MAX_LEVEL, math.ceil(st.rise_share_p95 * max(1, fleet) - 1e-9))
    if size <= 0:
        return HotSize(0, "no burst rose above the provisioned capacity")
    share = pool_share(ev.pool_gpus, ev.pool_sleepers)
    span = max(st.span_s, MIN_EVIDENCE_S)
    n, kept_value = 0, 0.0
    why = ""
    for k in range(1, size + 1):
        saved = sum(min(d, without) - min(d, th) for d in st.episodes.get(k, ()))
        value = MISS_WEIGHT * saved / span
        if value < share:
            why = (f"sleeper {k} would save {value:.3f} GPU-s per s held, less than its pool share {share:.2f} "
                   f"(bursts at that level in {span:.0f} s, wake {th:g} s vs {without:.0f} s without)")
            break
        n, kept_value = k, value
    if n == size:
        why = (f"p95 burst rise {st.rise_share_p95:.2f} of the fleet ({fleet}); every level pays its pool share "
               f"{share:.2f}")
    return HotSize(n, why, kept_value)


def sleepers_wanted(cfg: HotConfig, ev: HotEvidence | None, fleet: int) -> HotSize:
    """What a workload's ``hot-standby`` asks for: its fixed count, or with ``auto`` the size above
    (``ev`` None: no evidence gathered, the prior), at most ``cfg.count``."""
    if not cfg.auto:
        return HotSize(cfg.count, f"hot-standby: {cfg.count}")
    return auto_hot_standby(ev if ev is not None else HotEvidence(), fleet, cap=cfg.count)
