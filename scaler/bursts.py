"""Burst statistics: how the need rises above what was provisioned, for sizing warm capacity (pure).

The scaler records, every decision, the **need** (the policy's count before the burst hold) and the
count it **provisioned** (the decision). A burst at level ``k`` opens when the need rises ``k`` or more
above the least count provisioned over the last warm time-to-ready (``window_s``: what a replica on a
placeholder takes); it lasts while the need stays at or above that level (closing only after it
stayed below for ``CLOSE_GRACE_S``, so one noisy scrape does not split a burst). Per level the most
recent episodes (start, duration) are kept; per level-1 burst also its peak rise and the fleet it
rose from. :func:`burst_stats` turns that memory into the :class:`BurstStats` the scaler publishes
to the store and the warm-pool planner sizes ``warmscale.io/standby: auto`` from
(:func:`warmpool.planning.auto_standby`; the math is in docs/policy.md, "Warm capacity sized from
history").

Measured against *provisioned* capacity, a burst the burst hold still covers (the replicas asked for
in the last one are still there) is no burst: only rises that new replicas must serve count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MAX_LEVEL = 8  # levels tracked: auto never holds more placeholders than this
MAX_EPISODES = 32  # per level, the most recent episodes kept
HISTORY_S = 24 * 3600.0  # episodes older than this drop out
CLOSE_GRACE_S = 30.0  # a burst ends after the need stayed below its level this long
MAX_EPISODE_S = 3600.0  # a "burst" longer than this is a new level of traffic: recorded at this length
BURST_STATS_VERSION = 1


@dataclass(frozen=True)
class OpenBurst:
    start: float
    threshold: int  # the need at or above which the burst lasts (base + level)
    last_above: float  # last time the need was at or above the threshold
    peak: int  # largest rise seen (level 1 only)
    base: int  # the provisioned count it rose from

    def to_list(self) -> list[float]:
        return [self.start, self.threshold, self.last_above, self.peak, self.base]

    @classmethod
    def from_list(cls, v: list[Any]) -> OpenBurst:
        return cls(float(v[0]), int(v[1]), float(v[2]), int(v[3]), int(v[4]))


@dataclass(frozen=True)
class BurstMemory:
    """What the scaler keeps between decisions (in :class:`~scaler.state.ScalerState`)."""

    since: float | None = None  # first decision recorded
    last_at: float | None = None
    # sliding-window minimum of the provisioned count over the last window_s (values increasing)
    provisioned: tuple[tuple[float, int], ...] = ()
    open: dict[int, OpenBurst] = field(default_factory=dict)
    episodes: dict[int, tuple[tuple[float, float], ...]] = field(default_factory=dict)  # level -> (start, s)
    peaks: tuple[tuple[float, int, int], ...] = ()  # level-1 bursts: (start, peak rise, base)

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "last_at": self.last_at,
            "provisioned": [list(p) for p in self.provisioned],
            "open": {str(k): o.to_list() for k, o in self.open.items()},
            "episodes": {str(k): [list(e) for e in v] for k, v in self.episodes.items()},
            "peaks": [list(p) for p in self.peaks],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> BurstMemory:
        if not d:
            return cls()
        return cls(
            since=d.get("since"),
            last_at=d.get("last_at"),
            provisioned=tuple((float(t), int(v)) for t, v in d.get("provisioned", [])),
            open={int(k): OpenBurst.from_list(v) for k, v in dict(d.get("open", {})).items()},
            episodes={int(k): tuple((float(s), float(x)) for s, x in v)
                      for k, v in dict(d.get("episodes", {})).items()},
            peaks=tuple((float(t), int(p), int(b)) for t, p, b in d.get("peaks", [])),
        )


def _close(episodes: dict[int, tuple[tuple[float, float], ...]], k: int, start: float, duration: float,
           now: float) -> None:
    kept = [e for e in episodes.get(k, ()) if e[0] > now - HISTORY_S]
    kept.append((start, max(0.0, duration)))
    episodes[k] = tuple(kept[-MAX_EPISODES:])


def record(mem: BurstMemory, need: int, provisioned: int, window_s: float, now: float) -> BurstMemory:
    """Add one decision: the need before the burst hold and the count provisioned (the decision)."""
    since = mem.since if mem.since is not None else now
    window = [p for p in mem.provisioned if p[0] > now - window_s]
    base = window[0][1] if window else need  # least count provisioned over the last window_s
    rise = need - base
    opened = dict(mem.open)
    episodes = dict(mem.episodes)
    peaks = list(mem.peaks)
    for k in range(1, MAX_LEVEL + 1):
        o = opened.get(k)
        if o is not None:
            if need >= o.threshold:
                o = OpenBurst(o.start, o.threshold, now, max(o.peak, need - o.base), o.base)
            if now - o.last_above >= CLOSE_GRACE_S or now - o.start >= MAX_EPISODE_S:
                dur = min(o.last_above - o.start, MAX_EPISODE_S)
                _close(episodes, k, o.start, dur, now)
                if k == 1:
                    peaks.append((o.start, o.peak, o.base))
                del opened[k]
            else:
                opened[k] = o
        elif rise >= k:
            opened[k] = OpenBurst(now, base + k, now, rise, base)
    peaks = [p for p in peaks if p[0] > now - HISTORY_S][-2 * MAX_EPISODES:]
    # the provisioned count joins the sliding minimum (entries that can no longer be the minimum go)
    kept = [p for p in window if p[1] < provisioned]
    kept.append((now, provisioned))
    return BurstMemory(since=since, last_at=now, provisioned=tuple(kept), open=opened, episodes=episodes,
                       peaks=tuple(peaks))


@dataclass(frozen=True)
class BurstStats:
    """What the scaler publishes per workload (store key ``bursts:<namespace>/<name>``).

    ``episodes[k]``: durations (s) of the recent bursts at level ``k`` (an open one counts with its
    duration so far); ``span_s``: the seconds of observation they come from. ``rise_p95`` and
    ``rise_share_p95``: the 95th percentile, over the recorded bursts, of the peak rise (replicas) and
    of the peak rise over the fleet it rose from. ``window_s``/``cold_s``: the warm and cold
    time-to-ready the scaler used (the planner prefers its own measurements).

    Versioned: readers accept older and newer shapes (unknown keys ignored, missing ones default)."""

    namespace: str
    name: str
    updated_at: float
    version: int = BURST_STATS_VERSION
    window_s: float = 0.0
    cold_s: float = 0.0
    span_s: float = 0.0
    fleet: int = 0
    rise_p95: float = 0.0
    rise_share_p95: float = 0.0
    episodes: dict[int, tuple[float, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "updated_at": self.updated_at,
                "version": self.version, "window_s": self.window_s, "cold_s": self.cold_s, "span_s": self.span_s,
                "fleet": self.fleet, "rise_p95": self.rise_p95, "rise_share_p95": self.rise_share_p95,
                "episodes": {str(k): list(v) for k, v in self.episodes.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BurstStats:
        def num(key: str) -> float:
            v = float(d.get(key, 0.0) or 0.0)
            return v if math.isfinite(v) else 0.0

        return cls(
            namespace=str(d.get("namespace", "")), name=str(d.get("name", "")), updated_at=num("updated_at"),
            version=int(d.get("version", 0) or 0), window_s=num("window_s"), cold_s=num("cold_s"),
            span_s=num("span_s"), fleet=int(d.get("fleet", 0) or 0), rise_p95=num("rise_p95"),
            rise_share_p95=num("rise_share_p95"),
            episodes={int(k): tuple(max(0.0, float(x)) for x in v)
                      for k, v in dict(d.get("episodes") or {}).items() if str(k).isdigit()},
        )


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile (0 for no values)."""
    if not values:
        return 0.0
    xs = sorted(values)
    return float(xs[max(0, math.ceil(0.95 * len(xs)) - 1)])


def burst_stats(mem: BurstMemory, now: float, *, namespace: str, name: str, window_s: float, cold_s: float,
                fleet: int) -> BurstStats:
    """The published statistics of ``mem`` at ``now``."""
    span = 0.0 if mem.since is None else min(HISTORY_S, max(0.0, now - mem.since))
    eps: dict[int, tuple[float, ...]] = {}
    for k in range(1, MAX_LEVEL + 1):
        ds = [d for s, d in mem.episodes.get(k, ()) if s > now - HISTORY_S]
        o = mem.open.get(k)
        if o is not None:
            ds.append(min(MAX_EPISODE_S, max(0.0, o.last_above - o.start)))
        if ds:
            eps[k] = tuple(round(d, 3) for d in ds[-MAX_EPISODES:])
    peaks = [(p, b) for s, p, b in mem.peaks if s > now - HISTORY_S]
    o1 = mem.open.get(1)
    if o1 is not None:
        peaks.append((o1.peak, o1.base))
    return BurstStats(namespace=namespace, name=name, updated_at=now, window_s=window_s, cold_s=cold_s,
                      span_s=round(span, 3), fleet=fleet, rise_p95=p95([float(p) for p, _ in peaks]),
                      rise_share_p95=round(p95([p / max(1, b) for p, b in peaks]), 6), episodes=eps)


# A warm start's share of a cold one until a warm start was measured (none is before a placeholder was
# ever held): the startup model's placeholder+staged over cold, 90/510 s (8B) and 185/905 s (70B), from
# shared/reference/coldstart-and-warm-pools.md (warmpool/startup_model.py).
WARM_PRIOR_SHARE = 0.2


def warm_and_cold(medians: dict[str, float], fallback: float) -> tuple[float, float]:
    """(warm, cold) time-to-ready from measured medians per warm state: cold a replica from scratch
    (``fallback`` where unmeasured), warm a replica on a placeholder, else on a staged node, else
    WARM_PRIOR_SHARE of cold (unmeasured: without it no placeholder would ever be held to measure one)."""
    cold = medians.get("cold") or fallback
    warm = medians.get("placeholder+staged") or medians.get("staged") or WARM_PRIOR_SHARE * cold
    return warm, max(warm, cold)
