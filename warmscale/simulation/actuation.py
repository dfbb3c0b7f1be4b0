"""How a desired replica count reaches the Deployment in a cluster: HPA, KEDA, Knative KPA.

(What Prometheus holds for the Prometheus-fed policies is :class:`benchmarks.sim.exposition.PromScrape`.)

Parameters default to the upstream defaults listed in ``shared/reference/autoscalers.md`` (b); the
HPA's replica arithmetic for an External AverageValue metric is the scaler's own
:func:`scaler.hpa.hpa_replicas`, so the benchmark and the production metric compensation agree.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from warmscale.scaler.hpa import hpa_replicas


@dataclass(frozen=True)
class HpaBehavior:
    """``spec.behavior`` of an HPA (Kubernetes defaults)."""

    sync_period_s: float = 15.0
    tolerance: float = 0.1
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    scale_up_percent: float = 100.0
    scale_up_pods: int = 4
    scale_up_period_s: float = 15.0
    scale_down_percent: float = 100.0
    scale_down_period_s: float = 15.0
    # > 0: one ``Pods`` scale-down policy of this many pods per period instead of the percent one
    # (warmscale's shipped examples: 1 pod per 60 s).
    scale_down_pods: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Hpa:
    """The HPA controller loop for one target: raw recommendation -> stabilisation -> rate limits -> bounds."""

    def __init__(self, min_replicas: int, max_replicas: int, behavior: HpaBehavior | None = None,
                 phase_s: float = 0.0) -> None:
        self.min = min_replicas
        self.max = max_replicas
        self.b = behavior or HpaBehavior()
        self.next_sync = phase_s
        self.recs: deque[tuple[float, int]] = deque()
        self.events: deque[tuple[float, int]] = deque()  # (time, replica change) for rate limits

    def due(self, now: float) -> bool:
        return now + 1e-9 >= self.next_sync

    def raw_external_average(self, value: float, target: float, current: int) -> int:
        """External metric, AverageValue target (what KEDA creates): the scaler's hpa_replicas."""
        return hpa_replicas(value, target, current, self.b.tolerance)

    def raw_utilization(self, avg_util: float, target_util: float, ready: int, current: int) -> int:
        """Pods/Resource metric with an average-utilisation target: ratio over the ready pods."""
        if ready <= 0:
            return current
        ratio = avg_util / target_util
        if abs(1.0 - ratio) <= self.b.tolerance:
            return current
        return math.ceil(ratio * ready - 1e-9)

    def sync(self, now: float, current: int, raw: int) -> int:
        """One sync at ``now`` with the raw recommendation ``raw``; returns the new replica count."""
        self.next_sync = now + self.b.sync_period_s
        b = self.b
        self.recs.append((now, raw))
        horizon = max(b.scale_up_stabilization_s, b.scale_down_stabilization_s)
        while self.recs and self.recs[0][0] < now - horizon - 1e-9:
            self.recs.popleft()
        up_rec = raw
        down_rec = raw
        for t, v in self.recs:
            if t > now - b.scale_up_stabilization_s - 1e-9:
                up_rec = min(up_rec, v)
            if t > now - b.scale_down_stabilization_s - 1e-9:
                down_rec = max(down_rec, v)
        desired = current
        if desired < up_rec:
            desired = up_rec
        if desired > down_rec:
            desired = down_rec
        desired = self._rate_limit(now, current, desired)
        desired = max(self.min, min(self.max, desired))
        if desired != current:
            self.events.append((now, desired - current))
        return desired

    def _rate_limit(self, now: float, current: int, desired: int) -> int:
        b = self.b
        period = max(b.scale_up_period_s, b.scale_down_period_s)
        while self.events and self.events[0][0] < now - period - 1e-9:
            self.events.popleft()
        if desired > current:
            added = sum(d for t, d in self.events if d > 0 and t > now - b.scale_up_period_s)
            base = current - added  # replicas at the start of the period
            limit = max(math.ceil(base * (1 + b.scale_up_percent / 100.0)), base + b.scale_up_pods)
            return max(current, min(desired, limit))
        if desired < current:
            removed = -sum(d for t, d in self.events if d < 0 and t > now - b.scale_down_period_s)
            base = current + removed
            limit = (base - b.scale_down_pods if b.scale_down_pods > 0
                     else math.floor(base * (1 - b.scale_down_percent / 100.0)))
            return min(current, max(desired, limit))
        return desired


@dataclass(frozen=True)
class KedaConfig:
    """ScaledObject knobs (KEDA defaults: pollingInterval 30 s, cooldownPeriod 300 s, min 0)."""

    polling_interval_s: float = 30.0
    cooldown_period_s: float = 300.0
    min_replicas: int = 1
    max_replicas: int = 100
    activation_threshold: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Keda:
    """KEDA's own loop: 0 <-> 1 (activation on poll or push, cooldown to zero); the HPA does 1 <-> N."""

    def __init__(self, cfg: KedaConfig, phase_s: float = 0.0) -> None:
        self.cfg = cfg
        self.next_poll = phase_s
        self.last_active_at: float | None = None

    def poll_due(self, now: float) -> bool:
        return now + 1e-9 >= self.next_poll

    def poll(self, now: float, active: bool, current: int) -> int:
        """A polling cycle with the trigger's IsActive; returns the replica count KEDA sets (or ``current``)."""
        self.next_poll = now + self.cfg.polling_interval_s
        return self._apply(now, active, current)

    def push(self, now: float, active: bool, current: int) -> int:
        """An ``external-push`` StreamIsActive message: only ``True`` acts (inactive pushes are ignored)."""
        if not active:
            return current
        return self._apply(now, True, current)

    def _apply(self, now: float, active: bool, current: int) -> int:
        if active:
            self.last_active_at = now
            if current == 0:
                return max(self.cfg.min_replicas, 1)
            return current
        if self.cfg.min_replicas >= 1 or current == 0:
            return max(current, self.cfg.min_replicas)
        since = self.last_active_at
        if since is None or now - since >= self.cfg.cooldown_period_s:
            return 0
        return current

    def is_active_value(self, value: float) -> bool:
        return value > self.cfg.activation_threshold


@dataclass(frozen=True)
class KpaConfig:
    """Knative KPA defaults (config-autoscaler): 2 s tick, 60 s stable / 6 s panic window, panic at
    200% of target, target 70% of the concurrency soft limit 100, scale-down rate 2x, up rate 1000x."""

    tick_s: float = 2.0
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0
    container_concurrency: float = 100.0
    target_utilization: float = 0.7
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    min_replicas: int = 1
    max_replicas: int = 100

    @property
    def target(self) -> float:
        return self.container_concurrency * self.target_utilization

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Kpa:
    """Knative's concurrency autoscaler: averages per-second concurrency over a stable and a panic
    window; panics (and never scales down) when the panic window asks for >= 2x the ready pods."""

    def __init__(self, cfg: KpaConfig) -> None:
        self.cfg = cfg
        self.samples: deque[tuple[float, float]] = deque()
        self.next_tick = 0.0
        self.panic_until: float | None = None
        self.max_panic = 0

    def record(self, now: float, concurrency: float) -> None:
        self.samples.append((now, concurrency))
        while self.samples and self.samples[0][0] < now - self.cfg.stable_window_s - 1e-9:
            self.samples.popleft()

    def due(self, now: float) -> bool:
        return now + 1e-9 >= self.next_tick

    def decide(self, now: float, ready: int, current: int) -> int:
        c = self.cfg
        self.next_tick = now + c.tick_s
        if not self.samples:
            return current
        stable = [v for t, v in self.samples]
        panic = [v for t, v in self.samples if t > now - c.panic_window_s - 1e-9]
        stable_avg = sum(stable) / len(stable)
        panic_avg = sum(panic) / len(panic) if panic else stable_avg
        want_stable = math.ceil(stable_avg / c.target - 1e-9)
        want_panic = math.ceil(panic_avg / c.target - 1e-9)
        base = max(ready, 1)
        if want_panic / base >= c.panic_threshold:
            if self.panic_until is None:
                self.max_panic = 0
            self.panic_until = now + c.stable_window_s
        elif self.panic_until is not None and now >= self.panic_until:
            self.panic_until = None
        if self.panic_until is not None:
            self.max_panic = max(self.max_panic, want_panic, current)
            desired = self.max_panic
        else:
            desired = want_stable
        desired = min(desired, math.ceil(base * c.max_scale_up_rate))
        desired = max(desired, math.floor(base / c.max_scale_down_rate))
        return max(c.min_replicas, min(c.max_replicas, desired))
