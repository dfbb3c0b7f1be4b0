"""Per-ScaledObject trackers: background decisions, answered from memory by the RPCs.

A ScaledObject is tracked from the first RPC that names it, keyed by (namespace, name, metadata):
a change of the trigger metadata is a new tracker (the old one goes idle and is dropped). Each
tracker runs one loop: every ``scrapeIntervalSeconds`` it claims the store's compute lease; the
owner reads a fresh :class:`~signals.model.Snapshot` through the injected :data:`SnapshotReader`,
runs ``observe`` and ``decide`` and stores state + decision; the others adopt the stored decision.
RPCs never compute: they read :attr:`Tracker.decision`. Only the very first RPC of a tracker waits,
at most the scrape timeout, for the first decision; failing that it gets a *hold* answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import orjson

from scaler.config import ScalerConfig, parse_metadata
from scaler.decision_log import DecisionLog
from scaler.metrics import ScalerMetrics
from scaler.observation import Observation, observe
from scaler.policy import Decision, decide
from scaler.state import ScalerState
from scaler.store import Store as StoreProtocol
from scaler.store import StoreError, TrackerRecord
from signals.model import Snapshot

log = logging.getLogger("warmscale.scaler.tracker")

ScaledObjectKey = tuple[str, str]
"""(namespace, name) of a ScaledObject."""

SnapshotReader = Callable[[ScalerConfig, float, ScaledObjectKey], Awaitable[Snapshot]]
"""Reads one fresh snapshot of the ScaledObject's signals at ``now`` (unix seconds); the key says
which ScaledObject asks (pod discovery resolves its target from it).

The real implementation builds the sources described by the config (endpoints, Prometheus, Redis
queue, pods) and gathers them; tests inject scripted fakes. It may raise; the tracker then keeps
its last decision and counts a scrape error."""

MetaKey = tuple[str, str, tuple[tuple[str, str], ...]]

_DECISION_FIELDS = tuple(f.name for f in fields(Decision))
# How often a tracker refreshes its registry entry (last time KEDA asked) in the store.
REGISTRY_TOUCH_SECONDS = 10.0
# A warm status not republished for this long belongs to a workload the controller no longer manages
# (disabled, deleted, controller gone for good): its floor and windows stop binding.
WARM_BOUNDS_MAX_AGE = 600.0


def tracker_id(namespace: str, name: str, metadata: Mapping[str, str]) -> str:
    """Store key of a tracker: ``namespace/name/<16 hex of sha256(sorted metadata)>``."""
    digest = hashlib.sha256(orjson.dumps(dict(sorted(metadata.items())))).hexdigest()[:16]
    return f"{namespace}/{name}/{digest}"


def decision_to_dict(d: Decision, computed_at: float, by: str) -> dict[str, Any]:
    out = {k: getattr(d, k) for k in _DECISION_FIELDS}
    out["rules"] = dict(d.rules)
    out["computed_at"] = computed_at
    out["by"] = by
    return out


def decision_from_dict(d: Mapping[str, Any]) -> Decision:
    kwargs = {k: d[k] for k in _DECISION_FIELDS if k in d}
    kwargs["rules"] = {str(k): int(v) for k, v in dict(kwargs.get("rules", {})).items()}
    return Decision(**kwargs)


def hold_decision(cfg: ScalerConfig, last_desired: int | None = None) -> Decision:
    """The answer when no decision exists yet: active, never 0 (see docs/scaler.md, "Hold")."""
    desired = last_desired if last_desired else max(1, cfg.min_replicas)
    desired = max(1, min(desired, cfg.max_replicas))
    return Decision(desired=desired, active=True, reason="hold-no-decision", metric_value=float(desired),
                    metric_target=1.0)


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{random.getrandbits(32):08x}"


@dataclass(frozen=True)
class TrackerOptions:
    idle_seconds: float = 600.0
    lease_ttl_factor: float = 3.0  # lease TTL = factor x scrape interval (at least 2 s)
    janitor_seconds: float = 5.0


class Tracker:
    def __init__(self, manager: TrackerManager, namespace: str, name: str, metadata: dict[str, str],
                 cfg: ScalerConfig) -> None:
        self.manager = manager
        self.namespace = namespace
        self.name = name
        self.metadata = metadata
        self.cfg = cfg
        self.id = tracker_id(namespace, name, metadata)
        self.decision: Decision | None = None
        self.decision_at: float | None = None
        self.version = 0
        self.last_asked = time.monotonic()
        self.streams = 0
        self.owner = False
        self._state: ScalerState | None = None
        self._changed = asyncio.Event()
        self._first = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_touch = 0.0
        self._last_error_log = 0.0
        self._last_ok_snapshot: float | None = None
        self._series = _Series(manager.metrics, namespace, name)

    # -- RPC side -------------------------------------------------------------------------------
    def touch(self) -> None:
        self.last_asked = time.monotonic()

    async def current(self) -> Decision:
        """The latest decision; the first call of a new tracker waits for its first computation."""
        d = self.decision
        if d is not None:
            return d
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first.wait(), timeout=self.cfg.read_budget_seconds + 0.5)
        d = self.decision
        if d is not None:
            return d
        last = self._state.last_desired if self._state is not None else None
        return hold_decision(self.cfg, last)

    async def wait_change(self, version: int, max_wait: float) -> None:
        """Return once :attr:`version` moved past ``version`` (or on wake-up, or after ``max_wait`` seconds)."""
        if self.version != version:
            return
        event = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=max_wait)

    def wake(self) -> None:
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    # -- loop -----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"tracker {self.id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.owner:
            with contextlib.suppress(StoreError):
                await self.manager.store.release(self.id, self.manager.instance_id)
            self.owner = False
        self.wake()

    async def _loop(self) -> None:
        interval = self.cfg.scrape_interval_seconds
        first = True
        while True:
            started = time.monotonic()
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("tracker tick failed", extra={"tracker": self.id})
            self._first.set()
            if first:
                first = False
                # Spread the trackers' ticks over the interval (no thundering herd every second).
                await asyncio.sleep(interval * random.random())
                continue
            await asyncio.sleep(max(0.0, started + interval - time.monotonic()))

    def _store_error(self, op: str, exc: Exception) -> None:
        self.manager.metrics.store_errors.labels(op).inc()
        now = time.monotonic()
        if now - self._last_error_log > 10.0:
            self._last_error_log = now
            log.warning("store unavailable; serving the last decision", extra={"tracker": self.id, "op": op,
                                                                                "error": str(exc)})

    async def tick(self) -> None:
        m = self.manager
        now = m.clock()
        await self._touch_registry(now)
        ttl = max(2.0, m.options.lease_ttl_factor * self.cfg.scrape_interval_seconds)
        try:
            claim = await m.store.claim(self.id, m.instance_id, ttl)
        except StoreError as exc:
            self._store_error("claim", exc)
            return
        self.owner = claim.owner
        self._series.leader.set(1 if claim.owner else 0)
        if not claim.owner:
            self._state = None
            if claim.decision is not None:
                self._adopt(decision_from_dict(claim.decision), float(claim.decision.get("computed_at", now)),
                            computed=False)
            return
        if claim.acquired or self._state is None:
            self._state = claim.state if claim.state is not None else ScalerState()

        t0 = time.perf_counter()
        try:
            read = m.reader(self.cfg, now, (self.namespace, self.name))
            # The sources keep to cfg.read_budget_seconds themselves (a late replica is unknown for
            # this decision); this is only a safety net for a reader that does not.
            snapshot = await asyncio.wait_for(read, timeout=self.cfg.read_budget_seconds + 1.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._series.scrape_errors.inc()
            self._log_scrape_error(repr(exc) or type(exc).__name__)
            return
        if snapshot.source_errors:
            self._series.scrape_errors.inc(len(snapshot.source_errors))
        if not snapshot.replicas and not snapshot.queues and snapshot.source_errors:
            # Nothing read at all: unknown, which must never look like "idle".
            self._log_scrape_error("; ".join(snapshot.source_errors))
            return
        self._last_ok_snapshot = now
        snapshot = await self._with_warm_status(snapshot)

        obs, state = observe(snapshot, self._state, self.cfg)
        decision, state = decide(obs, state, self.cfg, snapshot.taken_at)
        m.metrics.compute_seconds.observe(time.perf_counter() - t0)
        try:
            saved = await m.store.save(self.id, m.instance_id, state, decision_to_dict(decision, now, m.instance_id),
                                       ttl)
        except StoreError as exc:
            self._store_error("save", exc)
            saved = True  # keep deciding locally while the store is away; the lease expires meanwhile
        if not saved:  # lost the lease between claim and save: someone else decides now
            self.owner = False
            self._state = None
            return
        self._state = state
        self._observe_metrics(obs, snapshot, now)
        self._adopt(decision, now, computed=True)

    def _log_scrape_error(self, error: str) -> None:
        now = time.monotonic()
        if now - self._last_error_log > 10.0:
            self._last_error_log = now
            log.warning("snapshot failed; keeping the last decision", extra={"tracker": self.id, "error": error})

    async def _touch_registry(self, now: float) -> None:
        if now - self._last_touch < REGISTRY_TOUCH_SECONDS:
            return
        age = time.monotonic() - self.last_asked
        record = TrackerRecord(self.namespace, self.name, self.metadata, last_seen=now - age)
        try:
            await self.manager.store.touch_tracker(self.id, record)
            self._last_touch = now
        except StoreError as exc:
            self._store_error("touch_tracker", exc)

    async def _with_warm_status(self, snapshot: Snapshot) -> Snapshot:
        """Fill the look-ahead (and pod counts the sources could not see) from the warm-pool status
        published under the workload's namespace/name: the ScaledObject's name (the controller names
        the ScaledObjects it creates after the workload), else the scale target's when it is known."""
        names = [self.name]
        if snapshot.target_name and snapshot.target_name != self.name:
            names.append(snapshot.target_name)
        ws = None
        for name in names:
            try:
                ws = await self.manager.store.get_warm_status(self.namespace, name)
            except StoreError as exc:
                self._store_error("get_warm_status", exc)
                return snapshot
            if ws is not None:
                break
        if ws is None:
            return snapshot
        age = snapshot.taken_at - ws.updated_at
        fresh = age <= max(3 * self.cfg.staleness_seconds, 60.0)
        changes: dict[str, Any] = {"time_to_ready_s": ws.expected_time_to_ready(self.cfg.time_to_ready_seconds)}
        # The warm pool's floor and scale-to-zero windows, evaluated at this snapshot's time. They are
        # configuration, so they bind as long as the controller keeps publishing (a status older than
        # WARM_BOUNDS_MAX_AGE belongs to a workload no longer managed: the ScaledObject's bounds apply).
        bounds = ws.bounds(snapshot.taken_at) if age <= WARM_BOUNDS_MAX_AGE else None
        if bounds is not None:
            changes["warm_floor"] = bounds.floor
            changes["zero_allowed"] = bounds.zero_allowed
        if fresh:
            if snapshot.ready_replicas is None:
                changes["ready_replicas"] = ws.ready_replicas
            if snapshot.starting_replicas is None:
                changes["starting_replicas"] = ws.starting_replicas
            if snapshot.current_replicas is None:
                changes["current_replicas"] = ws.spec_replicas
            if snapshot.warm_capacity is None:
                changes["warm_capacity"] = ws.placeholders_ready
        return replace(snapshot, **changes)

    def _observe_metrics(self, obs: Observation, snapshot: Snapshot, now: float) -> None:
        s = self._series
        s.waiting.set(obs.waiting)
        s.running.set(obs.running)
        s.queue.set(obs.queue)
        s.known.set(obs.known_replicas)
        s.unknown.set(obs.unknown_replicas)
        s.kv_usage.set(obs.kv_usage_max if obs.kv_usage_max is not None else math.nan)
        q = obs.ttft_window.quantile(self.cfg.ttft_quantile) if obs.ttft_window is not None else None
        s.ttft.set(q if q is not None else math.nan)
        ages = [r.age(now) for r in snapshot.known]
        s.signal_age.set(max(ages) if ages else math.nan)

    def _adopt(self, decision: Decision, at: float, *, computed: bool) -> None:
        old = self.decision
        self.decision = decision
        self.decision_at = at
        s = self._series
        s.desired.set(decision.desired)
        s.ready.set(decision.ready)
        s.starting.set(decision.starting)
        s.time_to_ready.set(decision.time_to_ready_s)
        s.ttft_slo.set(self.cfg.ttft_slo_seconds if self.cfg.ttft_slo_seconds is not None else math.nan)
        s.active.set(1 if decision.active else 0)
        s.metric_value.set(decision.metric_value)
        s.decision_age.set(at)
        if computed:
            s.decision(decision.reason).inc()
        self.manager.decisions.record(self.id, {
            "ts": at, "namespace": self.namespace, "name": self.name, "desired": decision.desired,
            "active": decision.active, "reason": decision.reason, "metric_value": decision.metric_value,
            "rules": decision.rules, "ready": decision.ready, "starting": decision.starting,
            "time_to_ready_s": decision.time_to_ready_s, "computed_here": computed,
        })
        if old is None or _answer(old) != _answer(decision):
            self.version += 1
            self.wake()


class _Series:
    """A tracker's labelled metric children, resolved once (``labels()`` is not free)."""

    def __init__(self, m: ScalerMetrics, namespace: str, name: str) -> None:
        labels = (namespace, name)
        self._m = m
        self._labels = labels
        for attr in ScalerMetrics.PER_SO:
            setattr(self, attr, getattr(m, attr).labels(*labels))
        self._reasons: dict[str, Any] = {}

    def decision(self, reason: str) -> Any:
        child = self._reasons.get(reason)
        if child is None:
            child = self._reasons[reason] = self._m.decisions.labels(*self._labels, reason)
        return child

    waiting: Any
    running: Any
    queue: Any
    kv_usage: Any
    ttft: Any
    ttft_slo: Any
    ready: Any
    starting: Any
    time_to_ready: Any
    known: Any
    unknown: Any
    signal_age: Any
    scrape_errors: Any
    desired: Any
    active: Any
    metric_value: Any
    decision_age: Any
    leader: Any


def _answer(d: Decision) -> tuple[bool, float, float, int]:
    """What KEDA sees of a decision (a change of it wakes the streams)."""
    return (d.active, d.metric_value, d.metric_target, d.desired)


class TrackerManager:
    """All trackers of one scaler instance, the idle janitor and resumption from the registry."""

    def __init__(
        self,
        store: StoreProtocol,
        reader: SnapshotReader,
        metrics: ScalerMetrics,
        decisions: DecisionLog,
        *,
        options: TrackerOptions | None = None,
        instance_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.reader = reader
        self.metrics = metrics
        self.decisions = decisions
        self.options = options or TrackerOptions()
        self.instance_id = instance_id or default_instance_id()
        self.clock = clock
        self._trackers: dict[MetaKey, Tracker] = {}
        self._janitor: asyncio.Task[None] | None = None
        self.closing = False

    def __len__(self) -> int:
        return len(self._trackers)

    def trackers(self) -> list[Tracker]:
        return list(self._trackers.values())

    def get(self, namespace: str, name: str, metadata: Mapping[str, str]) -> Tracker:
        """The tracker of this ScaledObject (created and started on first sight).

        Raises :class:`~scaler.config.ConfigError` for invalid metadata (nothing is tracked then)."""
        key: MetaKey = (namespace, name, tuple(sorted(metadata.items())))
        tracker = self._trackers.get(key)
        if tracker is None:
            tracker = self._create(namespace, name, dict(key[2]))
            self._trackers[key] = tracker
            self.metrics.trackers.set(len(self._trackers))
        tracker.last_asked = time.monotonic()
        return tracker

    def _create(self, namespace: str, name: str, metadata: dict[str, str]) -> Tracker:
        cfg = parse_metadata(metadata)
        tracker = Tracker(self, namespace, name, metadata, cfg)
        tracker.start()
        log.info("tracking scaledobject", extra={"tracker": tracker.id, "namespace": namespace, "scaledobject": name})
        return tracker

    async def start(self) -> None:
        await self.resume()
        self._janitor = asyncio.create_task(self._janitor_loop(), name="tracker janitor")

    async def resume(self) -> int:
        """Start trackers the registry knows were asked about recently (by any instance)."""
        try:
            records = await self.store.trackers()
        except StoreError as exc:
            self.metrics.store_errors.labels("trackers").inc()
            log.warning("cannot read the tracker registry", extra={"error": str(exc)})
            return 0
        now = self.clock()
        resumed = 0
        for tid, rec in records.items():
            age = now - rec.last_seen
            if age > self.options.idle_seconds:
                with contextlib.suppress(StoreError):
                    await self.store.forget_tracker(tid)
                continue
            try:
                tracker = self.get(rec.namespace, rec.name, rec.metadata)
            except ValueError:
                continue
            tracker.last_asked = time.monotonic() - max(0.0, age)
            resumed += 1
        if resumed:
            log.info("resumed trackers from the store", extra={"count": resumed})
        return resumed

    async def _janitor_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self.options.janitor_seconds, self.options.idle_seconds / 2))
            await self.drop_idle()

    async def drop_idle(self) -> int:
        cutoff = time.monotonic() - self.options.idle_seconds
        idle = [(k, t) for k, t in self._trackers.items() if t.last_asked < cutoff and t.streams == 0]
        for key, tracker in idle:
            del self._trackers[key]
            await tracker.stop()
            if not any((t.namespace, t.name) == (tracker.namespace, tracker.name) for t in self._trackers.values()):
                # (a newer tracker of the same ScaledObject, after a metadata change, keeps the series)
                self.metrics.forget(tracker.namespace, tracker.name)
            self.decisions.forget(tracker.id)
            log.info("dropped idle tracker", extra={"tracker": tracker.id})
        self.metrics.trackers.set(len(self._trackers))
        return len(idle)

    def wake_all(self) -> None:
        for t in self._trackers.values():
            t.wake()

    async def stop(self) -> None:
        self.closing = True
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
            self._janitor = None
        trackers = list(self._trackers.values())
        self._trackers.clear()
        await asyncio.gather(*(t.stop() for t in trackers), return_exceptions=True)
        self.metrics.trackers.set(0)
