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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import orjson

from warmscale.scaler.advice import AdviceBook
from warmscale.scaler.bursts import burst_stats, warm_and_cold
from warmscale.scaler.bursts import record as record_burst
from warmscale.scaler.config import ScalerConfig, deprecations, parse_metadata
from warmscale.scaler.context import ScalerContext
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.hot_status import HOT_STATUS_MAX_AGE, HotStatus, WakeIntent
from warmscale.scaler.metric_target import PublishedTarget, retarget, value_for, wanted_target
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.observation import Observation, observe
from warmscale.scaler.onset import ONSET_POLL_SECONDS, is_onset, watch_onset
from warmscale.scaler.pdgroup import Member, peer, ratio_floor
from warmscale.scaler.policy import Decision, decide
from warmscale.scaler.slo_ledger import WINDOWS as SLO_WINDOWS
from warmscale.scaler.slo_ledger import SloLedger, within
from warmscale.scaler.state import ScalerState
from warmscale.scaler.store import Store as StoreProtocol
from warmscale.scaler.store import StoreError, TrackerRecord
from warmscale.scaler.target_guard import TargetGuard
from warmscale.scaler.warm_status import WarmStatus
from warmscale.signals.model import ReplicaReading, Snapshot
from warmscale.signals.redact import redact
from warmscale.signals.sources.budget import SizeRefused

log = logging.getLogger("warmscale.scaler.tracker")

ScaledObjectKey = tuple[str, str]
"""(namespace, name) of a ScaledObject."""

SnapshotReader = Callable[[ScalerConfig, float, ScaledObjectKey], Awaitable[Snapshot]]
"""Reads one fresh snapshot of the ScaledObject's signals at ``now`` (unix seconds); the key says
which ScaledObject asks (pod discovery resolves its target from it).

The real implementation builds the sources described by the config (endpoints, Prometheus, Redis
queue, pods) and gathers them; tests inject scripted fakes. It may raise; the tracker then keeps
its last decision and counts a scrape error."""
OnsetReader = Callable[[ScalerConfig, ScaledObjectKey], Awaitable[float | None]]
"""``await onset(cfg, key)``: the summed length of the ScaledObject's queues, read cheaply between
ticks (scaler/onset.py); None: unknown or not read."""

AwakeReader = Callable[[ScalerConfig, Sequence[str], float], Awaitable[tuple[ReplicaReading, ...]]]
"""``await awake(cfg, urls, now)``: the awake hot-tier sleepers' engines at the base URLs the waker
published (``HotStatus.awake_urls``), one reading each, named by its URL (scaler/sources.py
``read_awake_sleepers``); their first tokens join the workload's TTFT window."""

MetaKey = tuple[str, str, tuple[tuple[str, str], ...]]

# What the store keeps of a decision: the answer and its inputs' summary, not the trace (a trace is
# served by the replica that computed it; scaler replicas behind a lease share only the answer).
_DECISION_FIELDS = tuple(f.name for f in fields(Decision) if f.name != "trace")
# How often a tracker refreshes its registry entry (last time KEDA asked) in the store.
REGISTRY_TOUCH_SECONDS = 10.0
# A warm status not republished for this long belongs to a workload the controller no longer manages
# (disabled, deleted, controller gone for good): its floor and windows stop binding.
WARM_BOUNDS_MAX_AGE = 600.0
# The longest one store call may take before it counts as failed (the store is then "unreachable").
STORE_CALL_SECONDS = 1.0
# A stored decision older than this many scrape intervals is never served (the holder cannot write).
STALE_DECISION_INTERVALS = 2.0
# How often the decider publishes the workload's burst statistics (standby: auto) to the store.
BURST_PUBLISH_SECONDS = 15.0
# The hot tier: a wake intent unchanged is republished this often (the waker reads the stored intents
# too; a fresh ``at`` says the scaler still stands by it).
INTENT_REFRESH_SECONDS = 10.0
# The wake time assumed before the waker measured one: a level-2 wake of an 8B (6.5 s, vllm PR
# #48337), the slowest of the measured wakes in docs/hot-tier.md.
HOT_WAKE_PRIOR_SECONDS = 6.5
T = TypeVar("T")


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


def hold_decision(cfg: ScalerConfig, last_desired: int | None = None, state: ScalerState | None = None) -> Decision:
    """The answer when no decision exists yet: active, never 0, and unsized unless a stored count
    exists, so GetMetrics answers UNAVAILABLE and the HPA keeps what runs (docs/scaler.md, "Hold").
    Its target is the one last published (``state``), else the initial one (scaler.metric_target)."""
    desired = last_desired if last_desired else max(1, cfg.min_replicas)
    desired = max(1, min(desired, cfg.max_replicas))
    target = PublishedTarget.restore(cfg, state.published_target if state is not None else None).target
    return Decision(desired=desired, active=True, reason="hold-no-decision", metric_value=float(desired) * target,
                    metric_target=target, sized=bool(last_desired))


def source_phase(cfg: ScalerConfig) -> float:
    """Where in the interval a tracker ticks, in [0, 1): the same for every ScaledObject reading the
    same sources (they tick together and share one scrape per endpoint), spread by the sources'
    hash across ScaledObjects that read different ones."""
    sources = orjson.dumps([sorted(cfg.endpoints), cfg.prometheus_address, cfg.prometheus_selector, cfg.pod_selector,
                            cfg.metrics_port, cfg.redis_address, cfg.redis_queue, cfg.scrape_interval_seconds])
    return int.from_bytes(hashlib.sha256(sources).digest()[:4], "big") / 2**32


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{random.getrandbits(32):08x}"


@dataclass(frozen=True)
class TrackerOptions:
    idle_seconds: float = 600.0
    lease_ttl_factor: float = 3.0  # lease TTL = factor x scrape interval (at least 2 s)
    janitor_seconds: float = 5.0
    store_retry_seconds: float = 1.0  # degraded mode: how often the store is probed
    max_trackers: int = 4000
    max_trackers_per_namespace: int = 2000
    # A ScaledObject refused for size (its payloads past its memory budget) is refused this long, then
    # read again on the next RPC (a metadata change is a new ScaledObject: read at once).
    refused_seconds: float = 600.0


class TrackerLimit(Exception):
    """A new tracker beyond ``--max-trackers`` / ``--max-trackers-per-namespace`` (RESOURCE_EXHAUSTED)."""


class TrackerRefused(TrackerLimit):
    """A ScaledObject refused for size (RESOURCE_EXHAUSTED naming the limit), until the refusal expires."""


RefusalHook = Callable[[str, str, str], Awaitable[None]]
# (namespace, name, message) -> whether an Event was posted (the hook rate-limits).
DecisionHook = Callable[[str, str, str], Awaitable[bool]]
"""``await hook(namespace, name, message)`` when a ScaledObject is refused (the Event on it)."""


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
        # Open StreamMetricSpec streams for this tracker (here, or in the RPC front): the published
        # target moves only while KEDA listens for it (scaler.metric_target).
        self.spec_streams = 0
        self.owner = False
        self._state: ScalerState | None = None
        self._changed = asyncio.Event()
        self._first = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_touch = 0.0
        self._last_error_log = 0.0
        self._last_ok_snapshot: float | None = None
        self._pd_members: dict[str, Member] = {}
        self._pd_read_at: float | None = None  # when the store last answered the pdGroup read
        self._last_computed: float | None = None
        self._created = time.monotonic()
        # Degraded mode (store unreachable, not writable, or stale): decide locally, probe the store.
        self.local = False
        self._stopping = False
        self._probe: asyncio.Task[Any] | None = None
        self._probe_at = 0.0
        # Last known warm-pool status (None with _warm_known: there is none); _warm_fresh: the last
        # read of the store succeeded.
        self._warm: WarmStatus | None = None
        self._warm_known = False
        self._warm_fresh = False
        self._series = _Series(manager.metrics, namespace, name)
        self._slo: dict[str, SloLedger] = {}  # per SLO (ttft, itl), since this tracker started
        self._bursts_published = -math.inf
        self._bad_decision_logged = False
        self._hot: HotStatus | None = None  # the waker's last status read (kept while fresh)
        self._intent_sent: tuple[int, float] | None = None  # (target, when) last published
        # Onset between ticks (scaler/onset.py): whether the last decision asks for the fast poll of
        # the queues, and the event that starts the next tick at once.
        self._watch = False
        self._armed = asyncio.Event()  # set when _watch becomes true (the poll sleeps on it otherwise)
        self._tick_now = asyncio.Event()
        self._onset_task: asyncio.Task[None] | None = None

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
        return hold_decision(self.cfg, last, self._state)

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
        if self._onset_task is None and self.manager.onset is not None and (self.cfg.redis_queue or
                                                                             self.cfg.epp_address):
            self._onset_task = asyncio.create_task(self._onset_loop(), name=f"onset {self.id}")

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        onset, self._onset_task = self._onset_task, None
        for t in (task, self._probe, onset):
            if t is not None:
                await _cancel(t)
        self._probe = None
        if self.owner:
            with contextlib.suppress(StoreError):
                await self._store_op(self.manager.store.release(self.id, self.manager.instance_id))
            self.owner = False
        self.wake()

    async def _loop(self) -> None:
        interval = self.cfg.scrape_interval_seconds
        first = True
        while not self._stopping:
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
                wait = interval * source_phase(self.cfg)
            else:
                wait = max(0.0, started + interval - time.monotonic())
            with contextlib.suppress(TimeoutError):  # the next tick, or at once on an onset
                await asyncio.wait_for(self._tick_now.wait(), wait)

    async def _onset_loop(self) -> None:
        """While the last decision asks for it (scaler/onset.py ``watch_onset``), read the queues every
        ONSET_POLL_SECONDS and start the next tick at once on the first non-empty read. A failed or
        late read is unknown: no early tick, nothing else changes."""
        read = self.manager.onset
        assert read is not None
        key = (self.namespace, self.name)
        while not self._stopping:
            if not self._watch:  # a warm workload costs no poll, not even a timer
                self._armed.clear()
                await self._armed.wait()
                continue
            await asyncio.sleep(ONSET_POLL_SECONDS)
            if not self._watch:
                continue
            try:
                async with asyncio.timeout(self.cfg.read_budget_seconds):
                    polled = await read(self.cfg, key)
            except asyncio.CancelledError:
                raise
            except Exception:
                polled = None
            if self._watch and is_onset(polled):
                self._watch = False
                self.manager.metrics.onset_ticks.inc()
                self._tick_now.set()

    def _store_error(self, op: str, exc: Exception) -> None:
        self.manager.metrics.store_errors.labels(op).inc()
        now = time.monotonic()
        if now - self._last_error_log > 10.0:
            self._last_error_log = now
            log.warning("store unavailable; deciding locally", extra={"tracker": self.id, "op": op,
                                                                     "error": redact(str(exc))})

    async def _store_op(self, aw: Awaitable[T]) -> T:
        """One store call, bounded: a store that does not answer (SIGSTOP, partition) is an error
        after STORE_CALL_SECONDS, never a stalled tick."""
        try:
            async with asyncio.timeout(STORE_CALL_SECONDS):
                return await aw
        except TimeoutError:
            raise StoreError(f"no answer within {STORE_CALL_SECONDS:g}s") from None

    def _ttl(self) -> float:
        return max(2.0, self.manager.options.lease_ttl_factor * self.cfg.scrape_interval_seconds)

    def _stale_after(self) -> float:
        """A stored decision older than this is never served (two intervals)."""
        return STALE_DECISION_INTERVALS * self.cfg.scrape_interval_seconds

    def _go_local(self, why: str, op: str, exc: Exception | None) -> None:
        """Degraded mode: the store is unreachable, not writable, or serves a stale decision. Decide
        from this replica's own signals and state; probe the store in the background."""
        if exc is not None:
            self._store_error(op, exc)
        if self.local:
            return
        self.local = True
        self._probe_at = time.monotonic() + self.manager.options.store_retry_seconds
        self._series.degraded.set(1)
        log.warning("store degraded: deciding locally", extra={
            "tracker": self.id, "why": why, "error": redact(str(exc)) if exc is not None else None})

    def _leave_local(self) -> None:
        if not self.local:
            return
        self.local = False
        self._series.degraded.set(0)
        log.info("store back: shared decisions resume", extra={"tracker": self.id, "owner": self.owner})

    def _set_owner(self, owner: bool) -> None:
        self.owner = owner
        self._series.leader.set(1 if owner else 0)

    def _continue_from(self, stored: ScalerState | None, now: float) -> ScalerState:
        """The state to decide from: the stored one, unless this replica holds a newer one (it decided
        locally while the store was away); with neither, a fresh state -- which after a decision was
        already served means the state was lost: hold (no scale-down) for one stabilisation window."""
        local = self._state
        if stored is not None and (local is None or (local.last_decision_at or 0.0) <= (stored.last_decision_at
                                                                                         or 0.0)):
            return stored
        if local is not None:
            return local
        served = self.decision
        if served is not None:
            log.warning("stored state lost; holding (no scale-down) for one stabilisation window",
                        extra={"tracker": self.id, "desired": served.desired})
            return ScalerState(last_desired=served.desired, state_lost_at=now)
        return ScalerState()

    def _adopt_stored(self, stored: dict[str, Any] | None, now: float) -> bool:
        """Adopt the holder's stored decision if it is fresh; False if there is none or it is stale."""
        if stored is None:
            return False
        try:
            at = float(stored.get("computed_at", 0.0))
            decision = decision_from_dict(stored)
            sane = (0 <= decision.desired <= self.cfg.max_replicas and math.isfinite(decision.metric_value)
                    and math.isfinite(decision.metric_target) and decision.metric_target > 0)
        except (TypeError, ValueError, KeyError, AttributeError):
            sane = False
        if not sane:  # a corrupt or forged record: unknown (the store logged it if it was not even JSON)
            if not self._bad_decision_logged:
                self._bad_decision_logged = True
                log.warning("stored decision out of bounds: read as unknown", extra={"tracker": self.id})
            return False
        if now - at > self._stale_after():
            return False
        self._adopt(decision, at, computed=False)
        return True

    async def tick(self) -> None:
        m = self.manager
        self._watch = False  # until this tick's own decision says otherwise
        self._tick_now.clear()
        now = m.clock()
        ttl = self._ttl()
        if self.local:
            await self._compute(now, ttl, save=False)
            await self._probe_store(now, ttl)
            return
        await self._touch_registry(now)
        try:
            claim = await self._store_op(m.store.claim(self.id, m.instance_id, ttl))
        except StoreError as exc:
            self._go_local("store unreachable", "claim", exc)
            await self._compute(now, ttl, save=False)
            return
        self._set_owner(claim.owner)
        if not claim.owner:
            if self._adopt_stored(claim.decision, now):
                self._state = None
                return
            first_due = self._stale_after() + self.cfg.scrape_timeout_seconds
            if claim.decision is None and time.monotonic() - self._created < first_due:
                return  # a new holder's first decision is on its way
            self._go_local("the stored decision is stale (the holder cannot write)", "stale", None)
            stored = None
            with contextlib.suppress(StoreError):
                stored = await self._store_op(m.store.load_state(self.id))
            self._state = self._continue_from(stored, now)
            await self._compute(now, ttl, save=False)
            return
        if claim.acquired or self._state is None:
            self._state = self._continue_from(claim.state, now)
        await self._compute(now, ttl, save=True)

    async def _probe_store(self, now: float, ttl: float) -> None:
        """In degraded mode: claim in the background (never delaying a decision); act on the answer
        at the next tick -- rejoin as holder (storing the local state) or follower (fresh decision)."""
        probe = self._probe
        if probe is None:
            if time.monotonic() >= self._probe_at:
                m = self.manager
                self._probe = asyncio.create_task(self._store_op(m.store.claim(self.id, m.instance_id, ttl)))
            return
        if not probe.done():
            return
        self._probe = None
        self._probe_at = time.monotonic() + self.manager.options.store_retry_seconds
        try:
            claim = probe.result()
        except Exception as exc:
            self._store_error("claim", exc)
            return
        self._set_owner(claim.owner)
        if not claim.owner:
            if self._adopt_stored(claim.decision, now):
                self._state = None
                self._leave_local()
            return
        self._state = self._continue_from(claim.state if claim.acquired else None, now)
        if self.decision is not None and self._last_computed is not None:
            m = self.manager
            try:
                saved = await self._store_op(m.store.save(
                    self.id, m.instance_id, self._state, decision_to_dict(self.decision, self._last_computed,
                                                                          m.instance_id), ttl))
            except StoreError as exc:
                self._store_error("save", exc)
                return  # still not writable: stay local
            if not saved:
                self._set_owner(False)
                return
        self._leave_local()

    async def _compute(self, now: float, ttl: float, *, save: bool) -> None:
        """Read a snapshot, decide from ``self._state``, store (``save``: as the lease holder), adopt."""
        if self._state is None:
            self._state = self._continue_from(None, now)
        # The awake sleepers the last hot status lists are read alongside the target's replicas.
        awake = self._read_awake(now)
        try:
            await self._compute_read(now, ttl, save=save, awake=awake)
        finally:
            if awake is not None and not awake.done():
                awake.cancel()
            elif awake is not None and not awake.cancelled():
                awake.exception()  # retrieved (a decision that returned early did not look at it)

    async def _compute_read(self, now: float, ttl: float, *, save: bool,
                            awake: asyncio.Task[tuple[ReplicaReading, ...]] | None) -> None:
        m = self.manager
        t0 = time.perf_counter()
        try:
            read = m.reader(self.cfg, now, (self.namespace, self.name))
            # The sources keep to cfg.read_budget_seconds themselves (a late replica is unknown for
            # this decision); this is only a safety net for a reader that does not.
            snapshot = await asyncio.wait_for(read, timeout=self.cfg.read_budget_seconds + 1.0)
        except asyncio.CancelledError:
            raise
        except SizeRefused as exc:
            self.manager.refuse(self, str(exc))
            return
        except Exception as exc:
            self._series.scrape_errors.inc()
            self._log_scrape_error(repr(exc) or type(exc).__name__)
            return
        if snapshot.source_errors:
            self._series.scrape_errors.inc(len(snapshot.source_errors))
        if not snapshot.replicas and not snapshot.queues and not snapshot.gateways and snapshot.source_errors:
            # Nothing read at all: unknown, which must never look like "idle".
            self._log_scrape_error("; ".join(snapshot.source_errors))
            return
        self._last_ok_snapshot = now
        snapshot, ctx = await self._with_warm_status(snapshot)
        snapshot = await self._with_hot_status(snapshot)
        snapshot = await self._with_awake_readings(snapshot, awake)
        ctx = await self._with_pd_group(snapshot, ctx)

        assert self._state is not None  # set by _compute
        obs, state = observe(snapshot, self._state, self.cfg, ctx)
        self._account_slo(state, snapshot.taken_at)
        decision, state = decide(obs, state, self.cfg, snapshot.taken_at)
        decision, state = self._in_units(decision, obs, state, snapshot.taken_at)
        state = self._record_bursts(state, decision, snapshot)
        decided = m.clock()  # the stored decision's age (for followers) counts from here, not from the read
        m.metrics.compute_seconds.observe(time.perf_counter() - t0)
        if save:
            try:
                saved = await self._store_op(m.store.save(
                    self.id, m.instance_id, state, decision_to_dict(decision, decided, m.instance_id), ttl))
            except StoreError as exc:
                # Not writable (OOM, read-only replica, gone): keep deciding locally; the lease expires.
                self._go_local("store not writable", "save", exc)
                saved = True
            if not saved:  # lost the lease between claim and save: someone else decides now
                self._set_owner(False)
                self._state = None
                return
        self._state = state
        self._last_computed = now
        self._observe_metrics(obs, snapshot, now)
        self._adopt(decision, now, computed=True)
        self._watch = watch_onset(active=decision.active, hot_target=decision.hot_target,
                                  queues_seen=[*(q.length for q in snapshot.queues),
                                               *(g.signal.queue if g.signal is not None else None
                                                 for g in snapshot.gateways)],
                                  interval_s=self.cfg.scrape_interval_seconds)
        if self._watch:
            self._armed.set()
        await self._publish_intent(decision, now)
        q = obs.ttft_window.quantile(self.cfg.ttft_quantile) if obs.ttft_window is not None else None
        m.advice.record(self.namespace, self.name, now, desired=decision.desired, ready=decision.ready, ttft_s=q,
                        slo_s=self.cfg.ttft_slo_seconds, time_to_ready_s=decision.time_to_ready_s)
        await self._publish_pd(decision, now, obs.kv_transfer_s)
        await self._publish_bursts(state, decision, snapshot, now)

    def _in_units(self, decision: Decision, obs: Observation, state: ScalerState,
                  now: float) -> tuple[Decision, ScalerState]:
        """metricUnit inflight: the published target moves toward the wanted one in HPA-safe steps, only
        while KEDA has a StreamMetricSpec stream open to this process (else the HPA could not follow),
        and the value lands the decided count under it (scaler.metric_target); replicas: unchanged."""
        cfg = self.cfg
        if cfg.metric_unit == "replicas":
            return decision, state
        pub = PublishedTarget.restore(cfg, state.published_target)
        before = self._state.last_desired if self._state is not None else None
        current = obs.current_replicas if obs.current_replicas is not None else before
        if self.spec_streams > 0:  # KEDA < 2.21, or a stream on another replica: the HPA could not follow
            pub = retarget(pub, wanted_target(cfg, obs.max_seqs), decision.desired, current, cfg.hpa_tolerance,
                           now)
        if pub.changed_at == now:
            log.info("metric target changed", extra={"namespace": self.namespace, "scaledobject": self.name,
                                                     "target": pub.target, "previous": pub.previous})
        value = value_for(pub, decision.desired, current, cfg.hpa_tolerance, now)
        return (replace(decision, metric_target=pub.target, metric_value=value),
                replace(state, published_target=pub.stored()))

    def _warm_times(self, snapshot: Snapshot) -> tuple[float, float]:
        """(warm, cold) time-to-ready: the warm pool's measured medians for this GPU product, else
        ``timeToReadySeconds``."""
        ws = self._warm
        medians = ws.for_gpu(self.cfg.gpu_product or snapshot.gpu_product).time_to_ready_s if ws is not None else {}
        return warm_and_cold(medians, self.cfg.time_to_ready_seconds)

    def _record_bursts(self, state: ScalerState, decision: Decision, snapshot: Snapshot) -> ScalerState:
        """Add this decision's need (the burst hold's input, pushed by ``decide`` at this instant) and
        the count provisioned to the burst memory (scaler.bursts, pure)."""
        recs = state.recommendations
        if not recs or recs[-1][0] != snapshot.taken_at:
            return state  # no need computed now (all signals unknown): nothing to learn
        warm, _ = self._warm_times(snapshot)
        return replace(state, bursts=record_burst(state.bursts, recs[-1][1], decision.desired, warm,
                                                  snapshot.taken_at))

    async def _publish_bursts(self, state: ScalerState, decision: Decision, snapshot: Snapshot, now: float) -> None:
        """Publish the burst statistics for the warm-pool planner (standby: auto) under the workload's
        name, every BURST_PUBLISH_SECONDS; not while the store is away (the planner keeps its last size)."""
        if self.local or now - self._bursts_published < BURST_PUBLISH_SECONDS or state.bursts.since is None:
            return
        warm, cold = self._warm_times(snapshot)
        name = snapshot.target_name or self.name
        stats = burst_stats(state.bursts, snapshot.taken_at, namespace=self.namespace, name=name, window_s=warm,
                            cold_s=cold, fleet=decision.desired)
        try:
            await self._store_op(self.manager.store.put_burst_stats(self.namespace, name, stats))
            self._bursts_published = now
        except StoreError as exc:
            self._store_error("put_burst_stats", exc)

    async def _with_hot_status(self, snapshot: Snapshot) -> Snapshot:
        """The hot tier's sleepers from the waker's status (scaler.hot_status) under the workload's name;
        the last one read while the store is away, and none once it is older than HOT_STATUS_MAX_AGE
        (unknown: neither counted nor woken)."""
        # (Not read when the warm status read of this tick failed: the store is away, and a second
        # timeout would delay the decision once more.)
        if not self.local and self._warm_fresh:
            name = snapshot.target_name or self.name
            try:
                self._hot = await self._store_op(self.manager.store.get_hot_status(self.namespace, name))
            except StoreError as exc:
                self._store_error("get_hot_status", exc)
        hs = self._hot
        if hs is None or snapshot.taken_at - hs.updated_at > HOT_STATUS_MAX_AGE:
            return snapshot
        wake_s = hs.wake_seconds(self.cfg.gpu_product or snapshot.gpu_product, HOT_WAKE_PRIOR_SECONDS)
        return replace(snapshot, hot_asleep=hs.asleep, hot_awake=hs.awake, hot_wake_s=wake_s, hot_load=hs.awake_load,
                       hot_waking=hs.waking)

    def _fresh_hot(self, at: float) -> HotStatus | None:
        hs = self._hot
        return hs if hs is not None and at - hs.updated_at <= HOT_STATUS_MAX_AGE else None

    def _read_awake(self, now: float) -> asyncio.Task[tuple[ReplicaReading, ...]] | None:
        """The read of the awake sleepers of the last fresh hot status, started (None: none to read)."""
        hs = self._fresh_hot(now)
        if self.manager.awake is None or hs is None or not hs.awake_urls:
            return None
        return asyncio.ensure_future(self.manager.awake(self.cfg, tuple(hs.awake_urls), now))

    async def _with_awake_readings(self, snapshot: Snapshot,
                                   awake: asyncio.Task[tuple[ReplicaReading, ...]] | None) -> Snapshot:
        """The awake sleepers' readings (``Snapshot.hot_replicas``) of those the hot status just read
        still lists as awake; none while it is unknown. A read that fails leaves them out (unknown:
        their TTFT is missing from this decision, nothing else changes)."""
        if awake is None:
            return snapshot
        try:
            readings = await asyncio.wait_for(awake, timeout=self.cfg.read_budget_seconds + 1.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("cannot read the awake sleepers", extra={"tracker": self.id, "error": repr(exc)})
            return snapshot
        hs = self._fresh_hot(snapshot.taken_at)
        still = set(hs.awake_urls) if hs is not None else set()
        return replace(snapshot, hot_replicas=tuple(r for r in readings if r.replica in still))

    async def _publish_intent(self, decision: Decision, now: float) -> None:
        """The hot step's target as the workload's wake intent, at once when it changes (the waker
        listens), else every INTENT_REFRESH_SECONDS; nothing without a hot tier known."""
        target = decision.hot_target
        if target is None or self.local:
            return
        sent = self._intent_sent
        if sent is not None and sent[0] == target and now - sent[1] < INTENT_REFRESH_SECONDS:
            return
        hot_step = next((st for st in decision.trace if st.step == "hot"), None)
        why = str(hot_step.inputs.get("hot", "")) if hot_step is not None else ""
        name = self._hot.name if self._hot is not None else self.name
        intent = WakeIntent(self.namespace, name, target, now, why, self.manager.instance_id)
        try:
            await self._store_op(self.manager.store.put_wake_intent(intent))
            self._intent_sent = (target, now)
        except StoreError as exc:
            self._store_error("put_wake_intent", exc)
            return
        if sent is None or sent[0] != target:
            log.info("wake intent", extra={"tracker": self.id, "awake": target, "hot": why,
                                           "wake": decision.hot_wake, "release": decision.hot_release})

    async def _with_pd_group(self, snapshot: Snapshot, ctx: ScalerContext) -> ScalerContext:
        """The pdGroup's ratio floor for this role and the other role's transfer time, from its record
        in the store (the last record read while the store is unreachable)."""
        group = self.cfg.pd_group
        if group is None:
            return ctx
        try:
            raw = await self._store_op(self.manager.store.pd_members(self.namespace, group))
            self._pd_members = {r: Member.from_dict(d) for r, d in raw.items() if isinstance(d, dict) and "role" in d}
            self._pd_read_at = snapshot.taken_at
        except (StoreError, KeyError, TypeError, ValueError) as exc:
            self._store_error("pd_members", exc)  # keep the last known members (and bounds)
        # Freshness as of the last read that succeeded: while the store is down the last known peer and
        # bounds hold (an unreachable store says nothing about the peer being gone).
        at = snapshot.taken_at if self._pd_read_at is None else min(snapshot.taken_at, self._pd_read_at)
        floor, _ = ratio_floor(self.cfg, self._pd_members, at)
        other = peer(self.cfg, self._pd_members, at)
        xfer = other.kv_transfer_s if other is not None else None
        if floor is None and xfer is None:
            return ctx
        return replace(ctx, pd_floor=floor, pd_transfer_s=xfer)

    async def _publish_pd(self, decision: Decision, now: float, kv_transfer_s: float | None) -> None:
        group = self.cfg.pd_group
        if group is None:
            return
        me = Member(self.cfg.role, decision.desired, now, self.cfg.decode_per_prefill_min,
                    self.cfg.decode_per_prefill_max, kv_transfer_s)
        try:
            await self._store_op(self.manager.store.put_pd_member(self.namespace, group, me.to_dict()))
        except StoreError as exc:
            self._store_error("put_pd_member", exc)

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
            await self._store_op(self.manager.store.touch_tracker(self.id, record))
            self._last_touch = now
        except StoreError as exc:
            self._store_error("touch_tracker", exc)

    async def _with_warm_status(self, snapshot: Snapshot) -> tuple[Snapshot, ScalerContext]:
        """Fill the look-ahead (and pod counts the sources could not see) from the warm-pool status
        published under the workload's namespace/name: the ScaledObject's name (the controller names
        the ScaledObjects it creates after the workload), else the scale target's when it is known;
        and the warm pool's ladder and bounds, the scaler's own inputs, in a :class:`ScalerContext`.
        While the store is away (degraded mode, or a failed read) the last known status is used."""
        if not self.local:
            names = [self.name]
            if snapshot.target_name and snapshot.target_name != self.name:
                names.append(snapshot.target_name)
            try:
                ws = None
                for name in names:
                    ws = await self._store_op(self.manager.store.get_warm_status(self.namespace, name))
                    if ws is not None:
                        break
                self._warm, self._warm_known, self._warm_fresh = ws, True, True
            except StoreError as exc:
                self._warm_fresh = False
                self._store_error("get_warm_status", exc)
        else:
            self._warm_fresh = False
        ws = self._warm
        if ws is None:
            if not self._warm_known:
                # The store never answered: the warm pool's floor and scale-to-zero windows are
                # unknown, and unknown never permits zero.
                return snapshot, ScalerContext(zero_allowed=False)
            return snapshot, ScalerContext()
        age = snapshot.taken_at - ws.updated_at
        fresh = age <= max(3 * self.cfg.staleness_seconds, 60.0)
        ws_gpu = ws.for_gpu(self.cfg.gpu_product or snapshot.gpu_product)
        changes: dict[str, Any] = {"time_to_ready_s": ws_gpu.expected_time_to_ready(self.cfg.time_to_ready_seconds)}
        ctx = ScalerContext(ttr_ladder=ws_gpu.ladder(self.cfg.time_to_ready_seconds))
        # The warm pool's floor and scale-to-zero windows, evaluated at this snapshot's time. They are
        # configuration, so they bind as long as the controller keeps publishing (a status older than
        # WARM_BOUNDS_MAX_AGE belongs to a workload no longer managed: the ScaledObject's bounds apply).
        # While the store is away the last known status binds whatever its age (it cannot be renewed).
        bounds = ws.bounds(snapshot.taken_at) if age <= WARM_BOUNDS_MAX_AGE or not self._warm_fresh else None
        if bounds is not None:
            ctx = replace(ctx, warm_floor=bounds.floor, zero_allowed=bounds.zero_allowed)
        if fresh:
            if snapshot.ready_replicas is None:
                changes["ready_replicas"] = ws.ready_replicas
            if snapshot.starting_replicas is None:
                changes["starting_replicas"] = ws.starting_replicas
            if snapshot.current_replicas is None:
                changes["current_replicas"] = ws.spec_replicas
            if snapshot.warm_capacity is None:
                changes["warm_capacity"] = ws.placeholders_ready
        return replace(snapshot, **changes), ctx

    def _account_slo(self, state: ScalerState, now: float) -> None:
        """Add this decision's new first tokens and inter-token latencies to the SLO ledgers and export
        the windows (docs/policy.md, "SLO attainment")."""
        for slo, limit, new in (
            ("ttft", self.cfg.ttft_slo_seconds, [h for t, h in state.ttft_deltas if t == now]),
            ("itl", self.cfg.itl_slo_seconds, [h for t, h, _ in state.itl_deltas if t == now]),
        ):
            if limit is None:
                continue
            ledger = self._slo.get(slo, SloLedger())
            for h in new:
                ledger = ledger.add(now, *within(h, limit))
            self._slo[slo] = ledger
            for label, _, _ in SLO_WINDOWS:
                r = ledger.ratio(now, label)
                self._series.slo(slo, label).set(r if r is not None else math.nan)

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
        qi = obs.itl_window.quantile(self.cfg.ttft_quantile) if obs.itl_window is not None else None
        s.itl.set(qi if qi is not None else math.nan)
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
        s.itl_slo.set(self.cfg.itl_slo_seconds if self.cfg.itl_slo_seconds is not None else math.nan)
        s.active.set(1 if decision.active else 0)
        s.metric_value.set(decision.metric_value)
        s.decision_age.set(at)
        if computed:
            s.decision(decision.reason).inc()
        trace = [step.as_dict() for step in decision.trace]
        self.manager.decisions.record(self.id, {
            "ts": at, "namespace": self.namespace, "name": self.name, "desired": decision.desired,
            "active": decision.active, "reason": decision.reason, "metric_value": decision.metric_value,
            "rules": decision.rules, "ready": decision.ready, "starting": decision.starting,
            "time_to_ready_s": decision.time_to_ready_s, "computed_here": computed,
            "gpu_utilization": decision.gpu_utilization, "gpu_memory_used": decision.gpu_memory_used,
            # Only the replica that computed a decision has its trace (the store keeps the answer).
            "trace": trace,
        })
        if old is None or old.desired != decision.desired:
            # One line per change of the desired count, with every step that moved it (docs/policy.md).
            steps = [f"{t['step']}: {t['before']} -> {t['after']} ({t['why']})" for t in trace
                     if t["before"] != t["after"]]
            log.info("desired replicas changed", extra={
                "tracker": self.id, "from": None if old is None else old.desired, "to": decision.desired,
                "reason": decision.reason, "active": decision.active, "computed_here": computed, "steps": steps})
            if computed and old is not None:
                self.manager.decision_event(self, f"desired replicas {old.desired} -> {decision.desired} "
                                                  f"({decision.reason}): " + "; ".join(steps))
        if old is None or _answer(old) != _answer(decision):
            self.version += 1
            self.wake()
            if self.manager.on_change is not None:
                self.manager.on_change(self)


async def _cancel(task: asyncio.Task[Any], within: float = 2.0) -> None:
    """Cancel ``task`` and wait for it to end. A cancellation can be lost when it races a timeout
    inside the task (asyncio.timeout on Python 3.11 may turn it into a TimeoutError that a tick
    handles): cancel again until the task is done, for at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while not task.done() and time.monotonic() < deadline:
        task.cancel()
        await asyncio.wait({task}, timeout=0.05)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: not "never retrieved"


class _Series:
    """A tracker's labelled metric children, resolved once (``labels()`` is not free)."""

    def __init__(self, m: ScalerMetrics, namespace: str, name: str) -> None:
        labels = (redact(namespace), redact(name))
        self._m = m
        self._labels = labels
        for attr in ScalerMetrics.PER_SO:
            setattr(self, attr, getattr(m, attr).labels(*labels))
        self._reasons: dict[str, Any] = {}

    def slo(self, slo: str, window: str) -> Any:
        return self._m.slo_attainment.labels(*self._labels, slo, window)

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
    itl: Any
    itl_slo: Any
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
    degraded: Any


def _key_of(tracker: Tracker) -> MetaKey:
    return (tracker.namespace, tracker.name, tuple(sorted(tracker.metadata.items())))


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
        guard: TargetGuard | None = None,
        onset: OnsetReader | None = None,
        awake: AwakeReader | None = None,
    ) -> None:
        self.store = store
        self.reader = reader
        self.awake = awake  # reads the awake sleepers' engines (their TTFT); None: not read
        self.onset = onset  # the cheap read of the queues between ticks (scaler/onset.py); None: no fast poll
        self.metrics = metrics
        self.decisions = decisions
        self.advice = AdviceBook(metrics.advice)
        self.options = options or TrackerOptions()
        self.instance_id = instance_id or default_instance_id()
        self.clock = clock
        self._trackers: dict[MetaKey, Tracker] = {}
        self._per_namespace: dict[str, int] = {}
        # ScaledObjects refused for size: message and the monotonic time the refusal ends.
        self._refused: dict[MetaKey, tuple[str, float]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.on_refused: RefusalHook | None = None
        # A Normal Event on the ScaledObject when the count it asks for changes (the deciding replica
        # only; rate-limited by the hook: scaler/kube.py ScaledObjectEvents).
        self.on_decision: DecisionHook | None = None
        self.guard = guard
        self._janitor: asyncio.Task[None] | None = None
        self.closing = False
        # Called with a tracker whenever what KEDA sees of its decision changes (the RPC front process).
        self.on_change: Callable[[Tracker], None] | None = None

    def __len__(self) -> int:
        return len(self._trackers)

    def has(self, tracker: Tracker) -> bool:
        """Whether ``tracker`` is still tracked (not dropped as idle, not replaced, not refused)."""
        return self._trackers.get(_key_of(tracker)) is tracker

    def refusal(self, namespace: str, name: str, metadata: Mapping[str, str]) -> str | None:
        """Why this ScaledObject is refused (RESOURCE_EXHAUSTED), or None."""
        key: MetaKey = (namespace, name, tuple(sorted(metadata.items())))
        refused = self._refused.get(key)
        if refused is None:
            return None
        left = refused[1] - time.monotonic()
        if left <= 0:
            del self._refused[key]
            return None
        return (f"{refused[0]}; refused for size, read again in {left:.0f} s or at once after a change of its "
                f"metadata (lower maxPayloadBytes, fewer endpoints) or of the scaler's limits")

    def refuse(self, tracker: Tracker, message: str) -> None:
        """Stop tracking ``tracker``'s ScaledObject for size: its RPCs get RESOURCE_EXHAUSTED for
        ``refused_seconds``; the registry records the refusal (a restarted scaler does not resume it);
        an Event goes on the ScaledObject (``on_refused``)."""
        key = _key_of(tracker)
        self._refused[key] = (message, time.monotonic() + self.options.refused_seconds)
        tracker._stopping = True
        if self._trackers.get(key) is tracker:
            self._forget(key)
        self.metrics.trackers.set(len(self._trackers))
        log.warning("scaledobject refused for size", extra={"tracker": tracker.id, "namespace": tracker.namespace,
                                                             "scaledobject": tracker.name, "error": redact(message)})
        task = asyncio.create_task(self._after_refusal(tracker, message), name=f"refuse {tracker.id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _after_refusal(self, tracker: Tracker, message: str) -> None:
        await tracker.stop()
        self._drop_series(tracker)
        now = self.clock()
        record = TrackerRecord(tracker.namespace, tracker.name, tracker.metadata, last_seen=now, refused=message,
                               refused_at=now)
        try:
            await tracker._store_op(self.store.touch_tracker(tracker.id, record))
        except StoreError as exc:
            self.metrics.store_errors.labels("touch_tracker").inc()
            log.warning("refusal not recorded in the registry", extra={"tracker": tracker.id, "error": str(exc)})
        if self.on_refused is not None:
            try:
                await self.on_refused(tracker.namespace, tracker.name, message)
            except Exception as exc:  # an Event is best effort; the RPCs carry the refusal
                log.warning("refusal event not recorded", extra={"tracker": tracker.id, "error": redact(str(exc))})

    def decision_event(self, tracker: Tracker, message: str) -> None:
        """Post the change of ``tracker``'s count as an Event, in the background (best effort)."""
        hook = self.on_decision
        if hook is None:
            return

        async def post() -> None:
            try:
                await hook(tracker.namespace, tracker.name, message)
            except Exception as exc:  # an Event is best effort; the log line and /decisions carry the change
                log.warning("decision event not recorded", extra={"tracker": tracker.id, "error": redact(str(exc))})

        task = asyncio.get_running_loop().create_task(post())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def trackers(self) -> list[Tracker]:
        return list(self._trackers.values())

    def get(self, namespace: str, name: str, metadata: Mapping[str, str]) -> Tracker:
        """The tracker of this ScaledObject (created and started on first sight).

        Raises :class:`~scaler.config.ConfigError` for invalid metadata and :class:`TrackerLimit`
        beyond the caps (nothing is tracked then)."""
        key: MetaKey = (namespace, name, tuple(sorted(metadata.items())))
        tracker = self._trackers.get(key)
        if tracker is None:
            tracker = self._create(key, parse_metadata(metadata))
        tracker.last_asked = time.monotonic()
        return tracker

    async def admit(self, namespace: str, name: str, metadata: Mapping[str, str]) -> Tracker:
        """:meth:`get`, and for a new tracker the ``--allow-targets`` check of its targets first
        (resolved addresses; :class:`~scaler.config.ConfigError` naming the key when outside)."""
        key: MetaKey = (namespace, name, tuple(sorted(metadata.items())))
        tracker = self._trackers.get(key)
        if tracker is None:
            cfg = parse_metadata(metadata)
            refused = self.refusal(namespace, name, metadata)
            if refused is not None:
                raise TrackerRefused(refused)
            self._check_caps(namespace)
            if self.guard is not None:
                await self.guard.check_config(cfg)
            tracker = self._trackers.get(key)  # another RPC may have created it meanwhile
            if tracker is None:
                tracker = self._create(key, cfg)
        tracker.last_asked = time.monotonic()
        return tracker

    def _check_caps(self, namespace: str) -> None:
        o = self.options
        if len(self._trackers) >= o.max_trackers:
            raise TrackerLimit(f"this scaler tracks {len(self._trackers)} ScaledObjects, the most allowed "
                               f"(--max-trackers {o.max_trackers})")
        in_ns = self._per_namespace.get(namespace, 0)
        if in_ns >= o.max_trackers_per_namespace:
            raise TrackerLimit(f"this scaler tracks {in_ns} ScaledObjects in namespace {namespace!r}, the most "
                               f"allowed (--max-trackers-per-namespace {o.max_trackers_per_namespace})")

    def _create(self, key: MetaKey, cfg: ScalerConfig) -> Tracker:
        namespace, name = key[0], key[1]
        self._check_caps(namespace)
        tracker = Tracker(self, namespace, name, dict(key[2]), cfg)
        self._trackers[key] = tracker
        self._per_namespace[namespace] = self._per_namespace.get(namespace, 0) + 1
        self.metrics.trackers.set(len(self._trackers))
        tracker.start()
        log.info("tracking scaledobject", extra={"tracker": tracker.id, "namespace": namespace, "scaledobject": name})
        for old, replacement in deprecations(tracker.metadata):
            log.warning("removed metadata key ignored", extra={"tracker": tracker.id, "key": old,
                                                                "replaced_by": replacement})
        return tracker

    def _forget(self, key: MetaKey) -> None:
        if self._trackers.pop(key, None) is None:
            return
        left = self._per_namespace.get(key[0], 1) - 1
        if left > 0:
            self._per_namespace[key[0]] = left
        else:
            self._per_namespace.pop(key[0], None)

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
            if rec.refused is not None and rec.refused_at is not None:
                left = self.options.refused_seconds - (now - rec.refused_at)
                if left > 0:  # refused for size: not resumed, and its RPCs refused until the refusal ends
                    key: MetaKey = (rec.namespace, rec.name, tuple(sorted(rec.metadata.items())))
                    self._refused[key] = (rec.refused, time.monotonic() + min(left, self.options.refused_seconds))
                    log.info("not resuming a tracker refused for size", extra={"tracker": tid})
                    continue
            age = now - rec.last_seen
            if age > self.options.idle_seconds:
                with contextlib.suppress(StoreError):
                    await self.store.forget_tracker(tid)
                continue
            try:
                tracker = await self.admit(rec.namespace, rec.name, rec.metadata)
            except (ValueError, TrackerLimit) as exc:
                log.warning("not resuming a tracker", extra={"tracker": tid, "error": str(exc)})
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
            self._forget(key)
            await tracker.stop()
            self._drop_series(tracker)
            log.info("dropped idle tracker", extra={"tracker": tracker.id})
        self.metrics.trackers.set(len(self._trackers))
        return len(idle)

    def _drop_series(self, tracker: Tracker) -> None:
        """Forget a dropped tracker's metric series, advice and decisions."""
        if not any((t.namespace, t.name) == (tracker.namespace, tracker.name) for t in self._trackers.values()):
            # (a newer tracker of the same ScaledObject, after a metadata change, keeps the series)
            self.metrics.forget(tracker.namespace, tracker.name)
            self.advice.forget(tracker.namespace, tracker.name)
        self.decisions.forget(tracker.id)

    def wake_all(self) -> None:
        for t in self._trackers.values():
            t.wake()

    async def stop(self) -> None:
        self.closing = True
        if self._janitor is not None:
            # (drop_idle releases ownership in Redis: a cancellation landing there can be lost)
            await _cancel(self._janitor)
            self._janitor = None
        trackers = list(self._trackers.values())
        self._trackers.clear()
        self._per_namespace.clear()
        await asyncio.gather(*(t.stop() for t in trackers), *self._background, return_exceptions=True)
        self.metrics.trackers.set(0)
