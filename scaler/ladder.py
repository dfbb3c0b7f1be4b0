"""The warm ladder: what the k-th additional replica takes to become ready (pure).

A ladder is a tuple of steps ``(warm state, count, seconds)``, warmest first: the first ``count``
replicas started now land in that state and take ``seconds``; the last step's count is 0
(unlimited, normally ``cold``). The warm-pool controller publishes what builds it
(:meth:`scaler.warm_status.WarmStatus.ladder`); without a warm pool the ladder is one unlimited
step at ``timeToReadySeconds``. The look-ahead and the burst hold both read it (docs/policy.md).
"""

from __future__ import annotations

Ladder = tuple[tuple[str, int, float], ...]

PLACEHOLDER = "placeholder+staged"
# Placeholders ready whose time-to-ready is not measured yet: warm (they start quickly) but timed,
# and released, like the next colder step until a measurement exists.
PLACEHOLDER_UNMEASURED = "placeholder+staged (unmeasured)"
COLD = "cold"
# Sleepers of the hot tier (docs/hot-tier.md): asleep on a pool GPU, they serve after a wake of
# seconds. Like a placeholder, the capacity they return by costs no idle node (the pool's GPUs are
# charged whether their engines sleep or not).
HOT = "hot"
# Rungs whose return costs no idle node after a release.
_NO_IDLE_NODE = (PLACEHOLDER, HOT)


def single(seconds: float) -> Ladder:
    return (("cold", 0, seconds),)


def step_of(ladder: Ladder, k: int) -> tuple[str, float]:
    """(warm state, seconds) of the k-th additional replica (k >= 1; k <= 0 counts as 1)."""
    if not ladder:
        raise ValueError("empty ladder")
    k = max(1, k)
    seen = 0
    for state, count, seconds in ladder:
        if count <= 0:
            return state, seconds
        seen += count
        if k <= seen:
            return state, seconds
    state, _, seconds = ladder[-1]
    return state, seconds


def warm_steps(ladder: Ladder) -> int:
    """How many additional replicas the warm pool starts without a cold start (the counted steps
    that are not cold)."""
    return sum(count for state, count, _ in ladder if state != COLD and count > 0)


def time_to_ready(ladder: Ladder, k: int) -> float:
    """Seconds until the k-th additional replica started now is ready."""
    return step_of(ladder, k)[1]


def break_even(ladder: Ladder, j: int, node_idle_s: float, min_hold_s: float) -> float:
    """How long the j-th replica above the current need is held after the need last asked for it.

    Ski rental: releasing it saves GPU time only if it stays unneeded longer than the node idles
    after the release (still billed) plus the time-to-ready of the path it would come back by. A
    return through a placeholder costs no idle node (the warm pool holds that capacity anyway).
    ``min_hold_s`` (scaleDownStabilizationSeconds) is the floor."""
    state, seconds = step_of(ladder, j)
    idle = 0.0 if state in _NO_IDLE_NODE else node_idle_s
    return max(min_hold_s, seconds + idle)


def held_count(base: int, peak: int, age: float, ladder: Ladder, node_idle_s: float, min_hold_s: float) -> int:
    """Replicas still held ``age`` seconds after a need of ``peak`` when the need is ``base`` now:
    ``base`` plus the replicas above it whose break-even time has not passed (the warmest-returning
    ones are released first)."""
    if peak <= base:
        return base
    released = 0
    for j in range(1, peak - base + 1):
        if break_even(ladder, j, node_idle_s, min_hold_s) <= age:
            released += 1
        else:
            break  # break-even times do not decrease with j
    return peak - released


def longest_hold(ladder: Ladder, node_idle_s: float, min_hold_s: float) -> float:
    """The longest break-even time on the ladder (how far back the peak memory must reach)."""
    holds = [max(min_hold_s, seconds + (0.0 if state in _NO_IDLE_NODE else node_idle_s))
             for state, _, seconds in ladder]
    return max(holds, default=min_hold_s)


def with_hot(ladder: Ladder, asleep: int, wake_s: float) -> Ladder:
    """``ladder`` with the hot tier's rung first: the next ``asleep`` replicas are sleepers woken in
    ``wake_s`` (measured per model and GPU product); unchanged without sleepers."""
    if asleep <= 0:
        return ladder
    return ((HOT, asleep, wake_s), *ladder)
