"""Where the scaler keeps per-ScaledObject memory: in-process (default) or Redis (``--redis-url``).

Per tracker key the store holds the policy's :class:`~scaler.state.ScalerState`, the latest decision
(a JSON-able dict), and a *compute lease*. Several scaler replicas sharing one Redis each run a loop
per ScaledObject, but only the replica holding the lease (``SET NX PX``, renewed every tick) reads the
signals and decides; the others adopt the stored decision, so every replica answers KEDA alike. A
replica that takes over a lease reloads the state first, so stabilisation windows survive restarts
and failovers. Writes are fenced: a decision is stored only while the writer still holds the lease.

The store also keeps a registry of tracked ScaledObjects (metadata + last time KEDA asked) so that a
restarted scaler resumes its trackers before KEDA's next poll, and the warm-pool controller's
:class:`~scaler.warm_status.WarmStatus` per workload, and the scaler's
:class:`~scaler.bursts.BurstStats` per workload (what ``warmscale.io/standby: auto`` is sized from), and
the hot tier's two records (:mod:`scaler.hot_status`): the waker's ``HotStatus`` and the scaler's
``WakeIntent``, which is also announced on a pub/sub channel (docs/hot-tier.md, "The wake path").

Schema: every record is JSON with a ``version`` where its shape grew (``WarmStatus`` 3,
``BurstStats`` 1, ``HotStatus`` 1, ``WakeIntent`` 1); readers take what they know, ignore unknown keys
and default missing ones, so an older record (or a newer writer's) is read, never rejected.

Every record read is checked first (:func:`decode_record`): a record that is not JSON, not an object, or
holds a number that is not finite or beyond :data:`RECORD_MAX` (anyone with write access to Redis
can write ``1e308``, which overflowed the policy on every tick) is *unknown*, logged once per
record: a state or decision as absent (the tracker continues from a fresh state, holding its count
for one stabilisation window), a warm status or burst statistics as an unreadable store
(:class:`StoreError`: the last known one binds, none known never permits zero), a pdGroup member or
registry entry as missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson

from warmscale.scaler.bursts import BurstStats
from warmscale.scaler.hot_status import HotStatus, WakeIntent
from warmscale.scaler.state import ScalerState
from warmscale.scaler.warm_status import WarmStatus

log = logging.getLogger("warmscale.scaler.store")
T = TypeVar("T")

# State and decisions of a ScaledObject nobody asks about expire after this long (Redis only).
RETENTION_MS = 7 * 24 * 3600 * 1000
# The largest magnitude a stored number may have: 2**53, the largest integer a float holds exactly.
# Times (~1.8e9), counters (tokens served ~1e13 over a long life) and counts are far below it.
RECORD_MAX = float(2**53)
# How deep a record may nest (a state's histograms are 4 levels down).
RECORD_DEPTH = 12
# How many distinct bad records are remembered, so that each is logged once.
BAD_RECORDS_REMEMBERED = 1000


class BadRecord(ValueError):
    """A stored record that is not JSON, not an object, or holds a number out of bounds."""


def _check_value(v: Any, depth: int) -> None:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return
    if isinstance(v, (int, float)):
        if not (math.isfinite(v) and abs(v) <= RECORD_MAX):
            raise BadRecord(f"number out of bounds: {v!r}"[:100])
        return
    if depth >= RECORD_DEPTH:
        raise BadRecord("nested too deep")
    if isinstance(v, dict):
        for x in v.values():
            _check_value(x, depth + 1)
    elif isinstance(v, list):
        for x in v:
            _check_value(x, depth + 1)
    else:
        raise BadRecord(f"unexpected {type(v).__name__}")


class _BadRecordLog:
    """Logs each distinct bad record once (a hostile record is read every tick)."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str, str]] = set()

    def __call__(self, what: str, key: str, raw: Any, error: Exception) -> None:
        digest = hashlib.sha256(raw if isinstance(raw, bytes) else repr(raw).encode()).hexdigest()[:16]
        mark = (what, key, digest)
        if mark in self._seen:
            return
        if len(self._seen) >= BAD_RECORDS_REMEMBERED:
            self._seen.clear()
        self._seen.add(mark)
        log.warning("bad store record: read as unknown", extra={"record": what, "key": key[:300],
                                                                 "error": str(error)[:200]})


def decode_record(raw: Any, what: str, key: str, build: Callable[[dict[str, Any]], T],
                  bad: Callable[[str, str, Any, Exception], None]) -> T | None:
    """``raw`` (JSON bytes, or an object already decoded) checked and built into a record; None when
    empty. A bad record (not JSON, not an object, a number out of bounds, a shape ``build`` rejects)
    is reported to ``bad`` and raises :class:`BadRecord`."""
    if raw is None or raw == b"" or raw == "":
        return None
    try:
        d = orjson.loads(raw) if isinstance(raw, (bytes, bytearray, memoryview, str)) else raw
        if not isinstance(d, dict):
            raise BadRecord(f"expected an object, got {type(d).__name__}")
        _check_value(d, 0)
        return build(d)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:  # orjson's error is a ValueError
        bad(what, key, raw, exc)
        raise BadRecord(f"{what} {key}: {exc}"[:300]) from None


def _as_dict(d: dict[str, Any]) -> dict[str, Any]:
    return d


@dataclass(frozen=True)
class Claim:
    """Result of one lease attempt.

    ``owner``: this instance computes the key's decision now. ``acquired``: it did not hold the lease
    before, so ``state`` carries the stored state (``None`` if there is none) to continue from.
    When not the owner, ``decision`` is the decision the owner stored last (``None`` if none yet).
    """

    owner: bool
    acquired: bool = False
    state: ScalerState | None = None
    decision: dict[str, Any] | None = None


@dataclass(frozen=True)
class TrackerRecord:
    """A tracked ScaledObject in the registry. ``refused``/``refused_at``: the scaler refused it (its
    payloads went past its memory budget, signals.sources.budget) at that time: a restarted scaler
    does not resume it, and refuses its RPCs until the refusal expires."""

    namespace: str
    name: str
    metadata: dict[str, str] = field(default_factory=dict)
    last_seen: float = 0.0
    refused: str | None = None
    refused_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"namespace": self.namespace, "name": self.name, "metadata": self.metadata,
                             "last_seen": self.last_seen}
        if self.refused is not None:
            d["refused"], d["refused_at"] = self.refused, self.refused_at
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrackerRecord:
        refused = d.get("refused")
        return cls(
            namespace=str(d["namespace"]),
            name=str(d["name"]),
            metadata={str(k): str(v) for k, v in dict(d.get("metadata", {})).items()},
            last_seen=float(d.get("last_seen", 0.0)),
            refused=str(refused)[:1000] if refused is not None else None,
            refused_at=float(d["refused_at"]) if refused is not None and d.get("refused_at") is not None else None,
        )


class StoreError(RuntimeError):
    """The store could not be reached or answered garbage; callers keep their last decision."""


class Store(Protocol):
    async def claim(self, key: str, owner: str, ttl_s: float) -> Claim: ...

    async def release(self, key: str, owner: str) -> None: ...

    async def save(self, key: str, owner: str, state: ScalerState, decision: dict[str, Any], ttl_s: float) -> bool:
        """Store state and decision if ``owner`` still holds the lease (renewing it); False otherwise."""
        ...

    async def load_state(self, key: str) -> ScalerState | None: ...

    async def load_decision(self, key: str) -> dict[str, Any] | None: ...

    async def touch_tracker(self, key: str, record: TrackerRecord) -> None: ...

    async def trackers(self) -> dict[str, TrackerRecord]: ...

    async def forget_tracker(self, key: str) -> None: ...

    async def put_warm_status(self, namespace: str, name: str, status: WarmStatus) -> None: ...

    async def get_warm_status(self, namespace: str, name: str) -> WarmStatus | None: ...

    async def put_burst_stats(self, namespace: str, name: str, stats: BurstStats) -> None: ...

    async def get_burst_stats(self, namespace: str, name: str) -> BurstStats | None: ...

    async def put_pd_member(self, namespace: str, group: str, member: dict[str, Any]) -> None:
        """Publish one role's latest decision and bounds in a pdGroup (``member["role"]`` names it)."""
        ...

    async def pd_members(self, namespace: str, group: str) -> dict[str, dict[str, Any]]: ...

    async def put_hot_status(self, status: HotStatus) -> None: ...

    async def get_hot_status(self, namespace: str, name: str) -> HotStatus | None: ...

    async def put_wake_intent(self, intent: WakeIntent) -> None:
        """Store the workload's wake intent and announce it to the wakers at once."""
        ...

    async def get_wake_intent(self, namespace: str, name: str) -> WakeIntent | None: ...

    def wake_intents(self) -> AsyncIterator[WakeIntent]:
        """Every intent announced from now on, as it is announced (the waker's fast path; it reads the
        stored intents too, so one missed while it was away is not lost)."""
        ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


class MemoryStore:
    """In-process store. Shared by several in-process servers it behaves like Redis (leases included)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._states: dict[str, ScalerState] = {}  # immutable values: kept as they are
        self._decisions: dict[str, dict[str, Any]] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._trackers: dict[str, TrackerRecord] = {}
        self._warm: dict[tuple[str, str], dict[str, Any]] = {}
        self._pd: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._bursts: dict[tuple[str, str], dict[str, Any]] = {}
        self._bad = _BadRecordLog()
        self._hot: dict[tuple[str, str], dict[str, Any]] = {}
        self._intents: dict[tuple[str, str], dict[str, Any]] = {}
        self._listeners: list[asyncio.Queue[dict[str, Any]]] = []

    def _holder(self, key: str) -> str | None:
        lease = self._leases.get(key)
        if lease is None or lease[1] <= self._clock():
            return None
        return lease[0]

    async def claim(self, key: str, owner: str, ttl_s: float) -> Claim:
        holder = self._holder(key)
        if holder is None:
            self._leases[key] = (owner, self._clock() + ttl_s)
            return Claim(owner=True, acquired=True, state=await self.load_state(key))
        if holder == owner:
            self._leases[key] = (owner, self._clock() + ttl_s)
            return Claim(owner=True)
        return Claim(owner=False, decision=await self.load_decision(key))

    async def release(self, key: str, owner: str) -> None:
        if self._holder(key) == owner:
            del self._leases[key]

    async def save(self, key: str, owner: str, state: ScalerState, decision: dict[str, Any], ttl_s: float) -> bool:
        if self._holder(key) != owner:
            return False
        self._leases[key] = (owner, self._clock() + ttl_s)
        self._states[key] = state
        self._decisions[key] = decision
        return True

    async def load_state(self, key: str) -> ScalerState | None:
        return self._states.get(key)

    async def load_decision(self, key: str) -> dict[str, Any] | None:
        d = self._decisions.get(key)
        return dict(d) if d is not None else None

    async def touch_tracker(self, key: str, record: TrackerRecord) -> None:
        self._trackers[key] = record

    async def trackers(self) -> dict[str, TrackerRecord]:
        return dict(self._trackers)

    async def forget_tracker(self, key: str) -> None:
        self._trackers.pop(key, None)

    async def put_warm_status(self, namespace: str, name: str, status: WarmStatus) -> None:
        self._warm[(namespace, name)] = status.to_dict()

    async def get_warm_status(self, namespace: str, name: str) -> WarmStatus | None:
        return _unreadable_is_error(self._warm.get((namespace, name)), "warm status", f"{namespace}/{name}",
                                    WarmStatus.from_dict, self._bad)

    async def put_burst_stats(self, namespace: str, name: str, stats: BurstStats) -> None:
        self._bursts[(namespace, name)] = stats.to_dict()

    async def get_burst_stats(self, namespace: str, name: str) -> BurstStats | None:
        return _unreadable_is_error(self._bursts.get((namespace, name)), "burst stats", f"{namespace}/{name}",
                                    BurstStats.from_dict, self._bad)

    async def put_pd_member(self, namespace: str, group: str, member: dict[str, Any]) -> None:
        self._pd.setdefault((namespace, group), {})[str(member["role"])] = dict(member)

    async def pd_members(self, namespace: str, group: str) -> dict[str, dict[str, Any]]:
        return _members(self._pd.get((namespace, group), {}).items(), f"{namespace}/{group}", self._bad)

    async def put_hot_status(self, status: HotStatus) -> None:
        self._hot[(status.namespace, status.name)] = status.to_dict()

    async def get_hot_status(self, namespace: str, name: str) -> HotStatus | None:
        d = self._hot.get((namespace, name))
        return HotStatus.from_dict(d) if d is not None else None

    async def put_wake_intent(self, intent: WakeIntent) -> None:
        d = intent.to_dict()
        self._intents[(intent.namespace, intent.name)] = d
        for q in self._listeners:
            q.put_nowait(dict(d))

    async def get_wake_intent(self, namespace: str, name: str) -> WakeIntent | None:
        d = self._intents.get((namespace, name))
        return WakeIntent.from_dict(d) if d is not None else None

    async def wake_intents(self) -> AsyncIterator[WakeIntent]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._listeners.append(q)
        try:
            while True:
                yield WakeIntent.from_dict(await q.get())
        finally:
            self._listeners.remove(q)

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None


def _unreadable_is_error(raw: Any, what: str, key: str, build: Callable[[dict[str, Any]], T],
                         bad: Callable[[str, str, Any, Exception], None]) -> T | None:
    """A record whose absence means "none" (warm status, burst statistics): a bad one is a store
    failure (:class:`StoreError`), so that the last known one binds and unknown never permits zero."""
    try:
        return decode_record(raw, what, key, build, bad)
    except BadRecord as exc:
        raise StoreError(f"unreadable record: {exc}") from None


def _unknown_is_absent(raw: Any, what: str, key: str, build: Callable[[dict[str, Any]], T],
                       bad: Callable[[str, str, Any, Exception], None]) -> T | None:
    """A record whose absence the reader handles as lost (state, decision): a bad one is absent."""
    try:
        return decode_record(raw, what, key, build, bad)
    except BadRecord:
        return None


def _members(items: Any, key: str, bad: Callable[[str, str, Any, Exception], None]) -> dict[str, dict[str, Any]]:
    """pdGroup members by role; a bad one is missing."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in items:
        role = k.decode() if isinstance(k, bytes) else str(k)
        member = _unknown_is_absent(v, "pd member", f"{key}/{role}", _as_dict, bad)
        if member is not None:
            out[role] = dict(member)
    return out


# KEYS: lease, state, decision. ARGV: owner, ttl_ms.
# Returns {2, state} when newly acquired, {1} when renewed, {0, decision} when held by another.
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  return {2, redis.call('GET', KEYS[2])}
elseif holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {0, redis.call('GET', KEYS[3])}
"""

# KEYS: lease, state, decision. ARGV: owner, state json, decision json, retention_ms, lease ttl_ms.
_SAVE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisStore:
    """Redis-backed store (redis.asyncio). Every failure surfaces as :class:`StoreError`."""

    def __init__(self, url: str, prefix: str = "warmscale", timeout_s: float = 1.0) -> None:
        import redis.asyncio as aioredis  # imported lazily: the in-memory default needs no Redis

        self._url = url
        self._p = prefix
        self._redis: Any = aioredis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            health_check_interval=10,
        )
        self._bad = _BadRecordLog()
        self._claim = self._redis.register_script(_CLAIM)
        self._save = self._redis.register_script(_SAVE)
        self._release = self._redis.register_script(_RELEASE)

    def _keys(self, key: str) -> list[str]:
        return [f"{self._p}:lease:{key}", f"{self._p}:state:{key}", f"{self._p}:decision:{key}"]

    @property
    def _registry(self) -> str:
        return f"{self._p}:trackers"

    def _warm_key(self, namespace: str, name: str) -> str:
        return f"{self._p}:warm:{namespace}/{name}"

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except Exception as exc:  # redis.ConnectionError, TimeoutError, ResponseError, OSError...
            raise StoreError(f"redis {what}: {type(exc).__name__}: {exc}") from exc

    async def claim(self, key: str, owner: str, ttl_s: float) -> Claim:
        res = await self._call("claim", self._claim(keys=self._keys(key), args=[owner, max(1, int(ttl_s * 1000))]))
        status = int(res[0])
        payload = res[1] if len(res) > 1 else None
        if status == 2:
            state = _unknown_is_absent(payload, "state", key, ScalerState.from_dict, self._bad)
            return Claim(owner=True, acquired=True, state=state)
        if status == 1:
            return Claim(owner=True)
        return Claim(owner=False, decision=_unknown_is_absent(payload, "decision", key, _as_dict, self._bad))

    async def release(self, key: str, owner: str) -> None:
        await self._call("release", self._release(keys=self._keys(key)[:1], args=[owner]))

    async def save(self, key: str, owner: str, state: ScalerState, decision: dict[str, Any], ttl_s: float) -> bool:
        args: list[bytes | str | int] = [
            owner, orjson.dumps(state.to_dict()), orjson.dumps(decision), RETENTION_MS, max(1, int(ttl_s * 1000))
        ]
        res = await self._call("save", self._save(keys=self._keys(key), args=args))
        return int(res) == 1

    async def load_state(self, key: str) -> ScalerState | None:
        raw = await self._call("load_state", self._redis.get(self._keys(key)[1]))
        return _unknown_is_absent(raw, "state", key, ScalerState.from_dict, self._bad)

    async def load_decision(self, key: str) -> dict[str, Any] | None:
        raw = await self._call("load_decision", self._redis.get(self._keys(key)[2]))
        return _unknown_is_absent(raw, "decision", key, _as_dict, self._bad)

    async def touch_tracker(self, key: str, record: TrackerRecord) -> None:
        await self._call("touch_tracker", self._redis.hset(self._registry, key, orjson.dumps(record.to_dict())))

    async def trackers(self) -> dict[str, TrackerRecord]:
        raw = await self._call("trackers", self._redis.hgetall(self._registry))
        out: dict[str, TrackerRecord] = {}
        for k, v in raw.items():
            tid = k.decode() if isinstance(k, bytes) else str(k)
            rec = _unknown_is_absent(v, "registry entry", tid, TrackerRecord.from_dict, self._bad)
            if rec is not None:
                out[tid] = rec
        return out

    async def forget_tracker(self, key: str) -> None:
        await self._call("forget_tracker", self._redis.hdel(self._registry, key))

    async def put_warm_status(self, namespace: str, name: str, status: WarmStatus) -> None:
        raw = orjson.dumps(status.to_dict())
        await self._call("put_warm_status", self._redis.set(self._warm_key(namespace, name), raw))

    async def get_warm_status(self, namespace: str, name: str) -> WarmStatus | None:
        raw = await self._call("get_warm_status", self._redis.get(self._warm_key(namespace, name)))
        return _unreadable_is_error(raw, "warm status", f"{namespace}/{name}", WarmStatus.from_dict, self._bad)

    def _bursts_key(self, namespace: str, name: str) -> str:
        return f"{self._p}:bursts:{namespace}/{name}"

    async def put_burst_stats(self, namespace: str, name: str, stats: BurstStats) -> None:
        raw = orjson.dumps(stats.to_dict())
        await self._call("put_burst_stats", self._redis.set(self._bursts_key(namespace, name), raw, px=RETENTION_MS))

    async def get_burst_stats(self, namespace: str, name: str) -> BurstStats | None:
        raw = await self._call("get_burst_stats", self._redis.get(self._bursts_key(namespace, name)))
        return _unreadable_is_error(raw, "burst stats", f"{namespace}/{name}", BurstStats.from_dict, self._bad)

    def _pd_key(self, namespace: str, group: str) -> str:
        return f"{self._p}:pd:{namespace}/{group}"

    async def put_pd_member(self, namespace: str, group: str, member: dict[str, Any]) -> None:
        key = self._pd_key(namespace, group)
        await self._call("put_pd_member", self._redis.hset(key, str(member["role"]), orjson.dumps(member)))
        await self._call("put_pd_member", self._redis.pexpire(key, RETENTION_MS))

    async def pd_members(self, namespace: str, group: str) -> dict[str, dict[str, Any]]:
        raw = await self._call("pd_members", self._redis.hgetall(self._pd_key(namespace, group)))
        return _members(raw.items(), f"{namespace}/{group}", self._bad)

    def _hot_key(self, namespace: str, name: str) -> str:
        return f"{self._p}:hot:{namespace}/{name}"

    def _intent_key(self, namespace: str, name: str) -> str:
        return f"{self._p}:wake:{namespace}/{name}"

    @property
    def wake_channel(self) -> str:
        """The pub/sub channel every intent is announced on (its JSON, as stored)."""
        return f"{self._p}:wake"

    async def put_hot_status(self, status: HotStatus) -> None:
        raw = orjson.dumps(status.to_dict())
        await self._call("put_hot_status", self._redis.set(self._hot_key(status.namespace, status.name), raw,
                                                           px=RETENTION_MS))

    async def get_hot_status(self, namespace: str, name: str) -> HotStatus | None:
        raw = await self._call("get_hot_status", self._redis.get(self._hot_key(namespace, name)))
        return _unreadable_is_error(raw, "hot status", f"{namespace}/{name}", HotStatus.from_dict, self._bad)

    async def put_wake_intent(self, intent: WakeIntent) -> None:
        raw = orjson.dumps(intent.to_dict())
        # One round trip: the stored intent (for a waker that was away) and the announcement (for the
        # ones listening now), in a transaction so a listener never reads an older stored intent.
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(self._intent_key(intent.namespace, intent.name), raw, px=RETENTION_MS)
        pipe.publish(self.wake_channel, raw)
        await self._call("put_wake_intent", pipe.execute())

    async def get_wake_intent(self, namespace: str, name: str) -> WakeIntent | None:
        raw = await self._call("get_wake_intent", self._redis.get(self._intent_key(namespace, name)))
        return _unreadable_is_error(raw, "wake intent", f"{namespace}/{name}", WakeIntent.from_dict, self._bad)

    async def wake_intents(self) -> AsyncIterator[WakeIntent]:
        """Subscribed to :attr:`wake_channel`; raises :class:`StoreError` when the connection is lost
        (the caller resubscribes and rereads the stored intents). Unreadable messages are skipped."""
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await self._call("subscribe", pubsub.subscribe(self.wake_channel))
            while True:
                msg = await self._call("listen", pubsub.get_message(timeout=None))
                if msg is None or msg.get("type") != "message":
                    continue
                try:
                    yield WakeIntent.from_dict(orjson.loads(msg["data"]))
                except (ValueError, KeyError, TypeError):
                    continue
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except Exception:
            return False

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except Exception:
            return None


def open_store(url: str | None) -> Store:
    """``None`` -> :class:`MemoryStore`; a ``redis://``/``rediss://``/``unix://`` URL -> :class:`RedisStore`."""
    if not url:
        return MemoryStore()
    return RedisStore(url)
