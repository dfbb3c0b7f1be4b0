"""The waker: reads the scaler's wake intents and wakes or sleeps the workloads' sleepers (I/O shell;
docs/hot-tier.md, "The wake path").

- **Fast path**: subscribed to the store's wake channel (Redis pub/sub), an intent is acted on as it
  arrives: onset -> wake request is the scaler's decision plus one publish, not an HPA sync.
- **Level, not edge**: an intent says how many sleepers should be awake. Every ``RESYNC_SECONDS`` the
  waker rereads the stored intents of the workloads it has sleepers for (one missed while it was
  disconnected is not lost) and republishes the hot status. An absent or stale intent is unknown:
  nothing is woken or slept for it; an unreachable store changes nothing either.
- **Wake**: :func:`~warmscale.warmpool.hot.pool.choose_wakes` picks sleepers on GPUs with room for one
  more awake engine; each is woken with :class:`~warmscale.warmpool.hot.client.EngineSleeper` and counts
  as awake (published, so the scaler counts it and a gateway may route to it) only once its canary
  passed. A sleeper that fails to wake twice is marked failed: reported (metric, log, Event hook) and
  never woken or routed again; the next sleeper covers the shortfall at once.
- **Release**: awake sleepers beyond the intent drain and sleep (vLLM ``mode=wait``; SGLang is released
  only with nothing in flight), the highest index first; a sleep that cannot drain keeps it awake
  and is retried at the next pass.
- **An engine without a state call** (SGLang): its state is what the waker last drove it to, recorded
  on its pod (:mod:`~warmscale.warmpool.hot.engine_state`, through ``record``): ``changing`` before
  each sleep or wake (no record, no call), ``asleep``/``awake`` once it is known. Unknown (no record,
  a call failed midway) is neither counted, woken nor slept.
- Only :class:`~warmscale.warmpool.hot.sleepers.Sleeper` s read from pods with the controller's sleeper
  labels are ever called (:func:`~warmscale.warmpool.hot.sleepers.sleeper_from_pod`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from warmscale.scaler.hot_status import HotStatus, WakeIntent
from warmscale.scaler.store import Store, StoreError
from warmscale.warmpool.hot import unknown_life
from warmscale.warmpool.hot.client import EngineSleeper, SleepResult, WakeResult
from warmscale.warmpool.hot.engine_state import ASLEEP, AWAKE, CHANGING
from warmscale.warmpool.hot.pool import Placement, PoolPlan, choose_wakes
from warmscale.warmpool.hot.sleepers import Sleeper
from warmscale.warmpool.hot.surface import state_call
from warmscale.warmpool.hot.unknown_life import UnknownLife

log = logging.getLogger("warmscale.warmpool.hot.waker")

# How often stored intents are reread and the hot status republished (the scaler treats a status
# older than scaler.hot_status.HOT_STATUS_MAX_AGE, 30 s, as unknown: several passes fit in it).
RESYNC_SECONDS = 5.0
# An intent the scaler has not refreshed for this long is unknown (the scaler refreshes an unchanged
# intent every 10 s, scaler.tracker.INTENT_REFRESH_SECONDS): it wakes and sleeps nothing.
INTENT_MAX_AGE = 30.0
# Failed wakes after which a sleeper is reported and never woken or routed again (issue 23).
WAKE_FAILURES_MAX = 2
# Awake engines one pool GPU holds, where the pool declares nothing else (docs/hot-tier.md).
AWAKE_PER_GPU = 1
# Wake times kept per GPU product for the published median.
WAKE_SAMPLES = 32
# After a lost subscription, wait this long before subscribing again (the resync pass keeps working).
RESUBSCRIBE_SECONDS = 1.0
# Wake durations (request -> canary passed): level-1 wakes take 0.3-4 s, level 2 about 6.5 s.
WAKE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 60.0)
# Intent (scaler decision) -> wake request, seconds: the goal is <= 0.3 s from the onset.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0)

SleeperSource = Callable[[], Awaitable[Sequence[Sleeper]]]
"""Lists the sleepers there are now (from the pods with the controller's sleeper labels)."""
EventHook = Callable[[Sleeper, str, str], Awaitable[None]]
"""(sleeper, reason, message): an Event on the sleeper's workload (the controller's EventRecorder)."""
StateHook = Callable[[Sleeper, str], Awaitable[None]]
"""(sleeper, state): record on the sleeper's pod the state (engine_state AWAKE, ASLEEP, CHANGING) the
waker drives an engine without a state call to; raises where it could not."""
RequestHook = Callable[[Sleeper, WakeIntent, float], None]
"""Called as a wake request goes out (sleeper, the intent, time.monotonic()); benchmarks time it."""


class WakerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.wakes = Counter("warmscale_hot_wakes", "Wake requests sent to sleepers, by workload and result "
                             "(ready: the canary passed)", ["workload", "result"], registry=r)
        self.sleeps = Counter("warmscale_hot_sleeps", "Sleeps (drain first) sent to awake sleepers, by result",
                              ["workload", "result"], registry=r)
        self.failed = Gauge("warmscale_hot_sleepers_failed", "Sleepers that failed to wake twice (never routed)",
                            ["workload"], registry=r)
        self.awake = Gauge("warmscale_hot_sleepers_awake", "Sleepers awake with a passing canary", ["workload"],
                           registry=r)
        self.wake_seconds = Histogram("warmscale_hot_wake_seconds", "Wake request -> canary passed, seconds",
                                      buckets=WAKE_BUCKETS, registry=r)
        self.intent_lag = Histogram("warmscale_hot_intent_to_wake_seconds",
                                    "The scaler's wake intent -> the wake request sent, seconds",
                                    buckets=LAG_BUCKETS, registry=r)


@dataclass
class _Tracked:
    sleeper: Sleeper
    client: EngineSleeper
    asleep: bool | None  # None: unknown (neither counted nor woken)
    awake: bool = False  # awake and the canary passed
    op: str = ""  # "wake" or "sleep" while one is in flight
    failures: int = 0
    failed: bool = False
    # Its state could not be recorded before a sleep or wake: left as it is until the next pass.
    hold: bool = False
    known_once: bool = False  # its state was known in this container incarnation (it is not starting)
    unknown: UnknownLife | None = None  # since its state became unknown (unknown_life.py)
    expired: str = ""  # why its unknown state outlived its bound: the controller replaces it


@dataclass
class _Workload:
    sleepers: dict[str, _Tracked] = field(default_factory=dict)  # pod -> state
    intent: WakeIntent | None = None
    # Publishes one at a time, each computed just before it is written: a slower one computed earlier
    # never overwrites a newer status (a wake's "awake" would otherwise wait for the next pass).
    publishing: asyncio.Lock = field(default_factory=asyncio.Lock)


class Waker:
    def __init__(self, store: Store, source: SleeperSource, session: aiohttp.ClientSession, *,
                 metrics: WakerMetrics | None = None, events: EventHook | None = None,
                 on_request: RequestHook | None = None, clock: Callable[[], float] = time.time,
                 awake_per_gpu: int = AWAKE_PER_GPU, record: StateHook | None = None) -> None:
        self.store = store
        self.source = source
        self.session = session
        self.metrics = metrics or WakerMetrics()
        self.events = events
        self.on_request = on_request
        self.record = record
        self.clock = clock
        self.awake_per_gpu = awake_per_gpu
        self._workloads: dict[str, _Workload] = {}
        self._wake_s: dict[str, list[float]] = {}  # gpu product -> recent wake durations
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the loops ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Listen and resync until cancelled (subscribed first, so that no intent falls between the
        first read of the stored ones and the subscription)."""
        listen = asyncio.create_task(self._listen(), name="waker listen")
        try:
            while True:
                await self.resync()
                await asyncio.sleep(RESYNC_SECONDS)
        finally:
            listen.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listen
            await self.close()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _listen(self) -> None:
        while True:
            try:
                async for intent in self.store.wake_intents():
                    self.receive(intent)
            except StoreError as exc:
                log.warning("wake channel lost; resubscribing", extra={"error": str(exc)})
            await asyncio.sleep(RESUBSCRIBE_SECONDS)

    async def resync(self) -> None:
        """Reread the sleepers and the stored intents, act on them, republish the hot status."""
        await self._refresh_sleepers()
        for key in list(self._workloads):
            ns, name = key.split("/", 1)
            try:
                intent = await self.store.get_wake_intent(ns, name)
            except StoreError as exc:
                log.warning("cannot read the wake intent; changing nothing", extra={"workload": key,
                                                                                     "error": str(exc)})
                intent = None
            if intent is not None:
                self.receive(intent)
            await self.publish(key)

    async def _refresh_sleepers(self) -> None:
        try:
            found = list(await self.source())
        except Exception as exc:  # an API outage: keep the sleepers known, change nothing
            log.warning("cannot list the sleepers; keeping the known ones", extra={"error": repr(exc)})
            return
        seen: dict[str, set[str]] = {}
        new: list[tuple[_Workload, Sleeper, EngineSleeper]] = []
        repairs: list[tuple[_Tracked, str]] = []
        carried: dict[str, _Tracked] = {}  # unknown ones asked again: what was seen of them before
        for s in found:
            seen.setdefault(s.workload, set()).add(s.pod)
            wl = self._workloads.setdefault(s.workload, _Workload())
            known = wl.sleepers.get(s.pod)
            if known is not None:
                known.hold = False
            if known is not None and not known.op and (_restarted(known.sleeper, s) or _unknown(known)):
                # Its container restarted (a new engine, awake), or its state is still unknown: asked
                # again, as a sleeper seen for the first time (an unknown SGLang one: its record reread).
                if not _restarted(known.sleeper, s):
                    carried[s.pod] = known  # the same engine: its unknown life goes on
                del wl.sleepers[s.pod]
            elif known is not None and not known.op and known.asleep is not None \
                    and s.recorded is not known.asleep and state_call(s.engine) is None:
                # What this waker knows differs from the pod's record (a record that failed after a
                # sleep or wake): written again, so that a restart reads the state, not "changing".
                repairs.append((known, ASLEEP if known.asleep else AWAKE))
            if s.pod not in wl.sleepers:
                client = EngineSleeper(self.session, s.base_url, s.engine, s.model)
                client.reference = s.canary_reference if known is None else known.client.reference
                new.append((wl, s, client))
        # A new sleeper's state, asked of all at once (one hung engine delays none of the others); an
        # unknown state (no answer; SGLang: no record for this incarnation) is neither counted nor woken.
        states = await asyncio.gather(*(client.sleeping(s.recorded) for _, s, client in new))
        await asyncio.gather(*(self._repair(t, state) for t, state in repairs))
        unknown: list[_Tracked] = []
        for (wl, s, client), sleeping in zip(new, states, strict=True):
            before = carried.get(s.pod)
            t = wl.sleepers[s.pod] = _Tracked(s, client, asleep=sleeping, known_once=sleeping is not None or (
                before is not None and before.known_once))
            if sleeping is None:
                t.unknown, t.expired = (before.unknown, before.expired) if before is not None else (None, "")
                unknown.append(t)
            if sleeping is False:
                # Found awake (a new sleeper, or one woken before a restart): routed only after its canary.
                self._start(s.workload, t, "wake", self._settle(s.workload, t))
        await self._age_unknown(unknown)
        for key, wl in self._workloads.items():
            for pod in [p for p in wl.sleepers if p not in seen.get(key, set())]:
                del wl.sleepers[pod]  # the pod is gone (deleted or replaced)

    async def _age_unknown(self, unknown: Sequence[_Tracked]) -> None:
        """Read the requests in flight on each sleeper whose state is unknown (all at once) and age its
        unknown life (unknown_life.py): one past its bound is listed for the controller to replace."""
        loads = await asyncio.gather(*(t.client.in_flight() for t in unknown))
        now = self.clock()
        for t, load in zip(unknown, loads, strict=True):
            t.unknown = unknown_life.seen(t.unknown, now, load, answered_before=t.known_once)
            why = unknown_life.expired(t.unknown, now)
            if why is not None and not t.expired:
                log.error("a sleeper's unknown state outlived its bound; the controller replaces it",
                          extra={"workload": t.sleeper.workload, "pod": t.sleeper.pod, "why": why})
            t.expired = why or ""

    # -- intents --------------------------------------------------------------------------------
    def receive(self, intent: WakeIntent) -> None:
        """Act on an intent (a newer one replaces the one kept; an older one is ignored)."""
        key = f"{intent.namespace}/{intent.name}"
        wl = self._workloads.get(key)
        if wl is None:
            return  # no sleepers of that workload here
        if wl.intent is not None and intent.at < wl.intent.at:
            return
        wl.intent = intent
        self._apply(key)

    def _apply(self, key: str) -> None:
        """Start the wakes or sleeps the workload's intent calls for (no awaiting: tasks)."""
        wl = self._workloads[key]
        intent = wl.intent
        if intent is None or self.clock() - intent.at > INTENT_MAX_AGE:
            return  # unknown: wake and sleep nothing
        states = list(wl.sleepers.values())
        awake = [t for t in states if t.awake and not t.op]
        waking = [t for t in states if t.op == "wake"]
        have = len(awake) + len(waking)
        if intent.awake > have:
            for t in self._choose(key, intent.awake - have):
                self._start(key, t, "wake", self._wake(key, t, intent))
        elif intent.awake < len(awake):
            # Held ones (a sleep that found work, a state it could not record) wait for the next pass.
            victims = sorted(awake, key=lambda t: -t.sleeper.index)[:len(awake) - intent.awake]
            for t in [t for t in victims if not t.hold]:
                self._start(key, t, "sleep", self._sleep(key, t))

    def _choose(self, key: str, count: int) -> list[_Tracked]:
        wl = self._workloads[key]
        eligible = {t.sleeper.index: t for t in wl.sleepers.values()
                    if t.asleep is True and not t.op and not t.failed and not t.hold}
        plan = PoolPlan(tuple(Placement(key, t.sleeper.index, t.sleeper.node, t.sleeper.device)
                              for t in eligible.values()))
        on_gpu: dict[str, int] = {}
        for other in self._workloads.values():
            for t in other.sleepers.values():
                # Awake, waking, still draining, or unknown (it may be awake): its engine holds the GPU.
                if t.awake or t.op or _unknown(t):
                    on_gpu[t.sleeper.device] = on_gpu.get(t.sleeper.device, 0) + 1
        return [eligible[p.index] for p in choose_wakes(plan, key, count, on_gpu, self.awake_per_gpu)]

    def _start(self, key: str, t: _Tracked, op: str, work: Awaitable[None]) -> None:
        t.op = op

        async def run() -> None:
            try:
                await work
            finally:
                t.op = ""
                self._apply(key)  # the intent may want more (a failed wake) or less by now
                await self.publish(key)

        task = asyncio.create_task(run(), name=f"hot {t.sleeper.pod}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _mark(self, t: _Tracked, state: str) -> bool:
        """Record ``state`` on the pod of a sleeper whose engine has no state call (SGLang); False where
        the record could not be written. Nothing to record for an engine that can be asked (vLLM), or
        without a hook (the state is then known only to this process)."""
        if self.record is None or state_call(t.sleeper.engine) is not None:
            return True
        try:
            await self.record(t.sleeper, state)
        except Exception as exc:  # an API outage or a pod replaced meanwhile
            log.warning("cannot record the sleeper's state", extra={"pod": t.sleeper.pod, "state": state,
                                                                     "error": repr(exc)})
            return False
        return True

    async def _repair(self, t: _Tracked, state: str) -> None:
        if not t.op:  # a sleep or wake started meanwhile records its own
            await self._mark(t, state)

    async def _wake(self, key: str, t: _Tracked, intent: WakeIntent) -> None:
        if not await self._mark(t, CHANGING):
            t.hold = True  # unrecorded, a wake could leave a state no restart could know: not sent
            return
        t.asleep = False
        now = time.monotonic()
        self.metrics.intent_lag.observe(max(0.0, self.clock() - intent.at))
        if self.on_request is not None:
            self.on_request(t.sleeper, intent, now)
        log.info("waking a sleeper", extra={"workload": key, "pod": t.sleeper.pod, "intent_awake": intent.awake,
                                            "hot": intent.reason})
        result: WakeResult = await t.client.wake(t.sleeper.level)
        seconds = time.monotonic() - now
        if result.ready:
            t.awake, t.failures = True, 0
            await self._mark(t, AWAKE)
            self.metrics.wakes.labels(key, "ready").inc()
            self.metrics.wake_seconds.observe(seconds)
            samples = self._wake_s.setdefault(t.sleeper.gpu_product, [])
            samples.append(seconds)
            del samples[:-WAKE_SAMPLES]
            log.info("sleeper awake", extra={"workload": key, "pod": t.sleeper.pod, "seconds": round(seconds, 3),
                                             "wake_s": round(result.wake_seconds, 3),
                                             "canary_s": round(result.canary_seconds, 3)})
            return
        log.warning("wake failed", extra={"workload": key, "pod": t.sleeper.pod, "why": result.why,
                                          "failures": t.failures + 1})
        await self._wake_failed(key, t, result.why)

    async def _wake_failed(self, key: str, t: _Tracked, why: str) -> None:
        """Count a failed wake (or canary), put the engine back to sleep, and after WAKE_FAILURES_MAX
        mark the sleeper failed and report it."""
        t.failures += 1
        self.metrics.wakes.labels(key, "failed").inc()
        # A wake that failed may have left the engine half awake: it is not routed either way; try to
        # put it back to sleep so its GPU is free for the next sleeper.
        with contextlib.suppress(Exception):
            if await self._mark(t, CHANGING):  # (a found-awake one's canary failed: nothing recorded yet)
                await self._after_sleep(t, await t.client.sleep(t.sleeper.level), routable=False)
        if t.failures < WAKE_FAILURES_MAX:
            return
        t.failed = True
        self.metrics.failed.labels(key).set(sum(1 for x in self._workloads[key].sleepers.values() if x.failed))
        msg = (f"sleeper {t.sleeper.pod} failed to wake {t.failures} times ({why}); it is not routed and not woken "
               "again until it is replaced")
        log.error("sleeper failed to wake twice", extra={"workload": key, "pod": t.sleeper.pod, "why": why})
        if self.events is not None:
            with contextlib.suppress(Exception):
                await self.events(t.sleeper, "HotSleeperWakeFailed", msg)

    async def _settle(self, key: str, t: _Tracked) -> None:
        """A sleeper found awake counts as awake once its canary passes (recorded as the reference when
        none is known); the intent then keeps it or puts it to sleep. A failing canary puts it to sleep
        and counts as a failed wake."""
        verdict = await (t.client.canary() if t.client.reference is not None else t.client.record_reference())
        if verdict.ok:
            t.awake = True
            if await self._never_wanted(key):
                # A fresh engine starts awake; no scaler ever asked for this workload's sleepers, so
                # none can be bridging: put it to sleep, or it holds its shared GPU for nothing.
                log.info("a sleeper found awake that no intent ever asked for; putting it to sleep",
                         extra={"workload": key, "pod": t.sleeper.pod})
                await self._sleep(key, t)
            return
        log.warning("a sleeper found awake fails its canary; putting it to sleep",
                    extra={"workload": key, "pod": t.sleeper.pod, "why": verdict.why})
        await self._wake_failed(key, t, verdict.why)

    async def _never_wanted(self, key: str) -> bool:
        """No wake intent was ever stored for the workload (the key is written by the scaler and never
        expires): nothing can be counting on its sleepers. A store error or a stale intent is unknown:
        not this."""
        ns, name = key.split("/", 1)
        try:
            return await self.store.get_wake_intent(ns, name) is None
        except StoreError:
            return False

    async def _sleep(self, key: str, t: _Tracked) -> None:
        if t.client.reference is None:
            await t.client.record_reference()  # awake: the answer later wakes must repeat
        if not await self._mark(t, CHANGING):
            t.hold = True  # unrecorded, a sleep could leave a state no restart could know: kept awake
            return
        t.awake = False  # no longer routed from the moment it drains
        await self.publish(key)
        result = await t.client.sleep(t.sleeper.level)
        await self._after_sleep(t, result, routable=True)
        if result.slept:
            self.metrics.sleeps.labels(key, "slept").inc()
            log.info("sleeper asleep again", extra={"workload": key, "pod": t.sleeper.pod,
                                                    "seconds": round(result.seconds, 3)})
            return
        # Could not drain (SGLang with work in flight: still awake and serving) or failed midway (its
        # state asked where it can be, else unknown: neither counted nor woken nor slept). Tried again
        # at the next pass, not at once (SGLang's pause and continue would repeat while it is busy).
        t.hold = True
        self.metrics.sleeps.labels(key, "kept").inc()
        log.warning("sleeper not put to sleep", extra={"workload": key, "pod": t.sleeper.pod, "why": result.why,
                                                       "awake": t.awake, "state_known": t.asleep is not None})

    async def _after_sleep(self, t: _Tracked, result: SleepResult, *, routable: bool) -> None:
        """The state a sleep left (``t.asleep``, ``t.awake``), recorded where it is known; an engine kept
        awake is routed again only if ``routable`` (its canary passed)."""
        if result.slept:
            t.asleep, t.awake = True, False
            await self._mark(t, ASLEEP)
            return
        awake = result.awake
        if awake is None:
            sleeping = await t.client.sleeping()  # None for SGLang: the record says "changing", unknown
            awake = None if sleeping is None else not sleeping
        if awake is None:
            t.asleep, t.awake = None, False
            return
        t.asleep, t.awake = not awake, awake and routable
        await self._mark(t, AWAKE if awake else ASLEEP)

    def unknown_pods(self) -> list[str]:
        """The sleepers (namespace/pod) whose state is unknown: neither counted, woken nor slept."""
        return sorted(t.sleeper.pod for wl in self._workloads.values() for t in wl.sleepers.values() if _unknown(t))

    def expired_pods(self) -> dict[str, str]:
        """The sleepers (namespace/pod) whose unknown state outlived its bound, and why (unknown_life.py):
        the controller replaces them (a new pod, an Event). None of them may be serving."""
        return {t.sleeper.pod: t.expired for wl in self._workloads.values() for t in wl.sleepers.values()
                if t.expired and _unknown(t)}

    def failed_pods(self) -> list[str]:
        """The sleepers (namespace/pod) that failed to wake WAKE_FAILURES_MAX times: the controller
        replaces them (a new pod)."""
        return sorted(t.sleeper.pod for wl in self._workloads.values() for t in wl.sleepers.values() if t.failed)

    def busy_pods(self) -> list[str]:
        """The sleepers (namespace/pod) awake, waking or draining: the controller deletes none of them
        (one may be serving a request)."""
        return sorted(t.sleeper.pod for wl in self._workloads.values() for t in wl.sleepers.values()
                      if t.awake or t.op)

    # -- status ---------------------------------------------------------------------------------
    def status(self, key: str) -> HotStatus:
        ns, name = key.split("/", 1)
        states = list(self._workloads[key].sleepers.values())
        awake = [t for t in states if t.awake]
        wake_s = {gpu: statistics.median(xs) for gpu, xs in self._wake_s.items() if xs}
        return HotStatus(
            namespace=ns, name=name, updated_at=self.clock(),
            asleep=sum(1 for t in states if t.asleep is True and not t.op and not t.failed),
            awake=len(awake), waking=sum(1 for t in states if t.op == "wake"),
            failed=sum(1 for t in states if t.failed), wake_s=wake_s, awake_pods=sorted(t.sleeper.pod for t in awake),
            awake_urls=sorted(t.sleeper.base_url for t in awake))

    async def publish(self, key: str) -> None:
        wl = self._workloads[key]
        async with wl.publishing:
            awake = [t for t in wl.sleepers.values() if t.awake]
            loads = await asyncio.gather(*(t.client.in_flight() for t in awake))
            # The load read, but the counts as they are now (a wake may have finished meanwhile).
            load = None if any(x is None for x in loads) else float(sum(x for x in loads if x is not None))
            hs = self.status(key)
            if hs.awake != len(awake):
                load = None  # read for other sleepers than are awake now: unknown
            hs = replace(hs, awake_load=load)
            self.metrics.awake.labels(key).set(hs.awake)
            try:
                await self.store.put_hot_status(hs)
            except StoreError as exc:
                log.warning("cannot publish the hot status", extra={"workload": key, "error": str(exc)})


def _restarted(old: Sleeper, new: Sleeper) -> bool:
    """The pod's engine container restarted since the sleeper was first seen (a new engine)."""
    return old.restarts is not None and new.restarts is not None and new.restarts != old.restarts


def _unknown(t: _Tracked) -> bool:
    return t.asleep is None and not t.awake and not t.op and not t.failed
