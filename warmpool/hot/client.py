"""Sleep and wake one engine over HTTP, with deadlines, the SGLang idle check and the canary (I/O shell).

Every result carries what it measured (seconds per phase) and why it stopped; nothing here retries:
the controller decides what a failed wake means (a sleeper that fails to wake twice is replaced).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from warmscale.signals.engines import PayloadError, parse_payload
from warmscale.warmpool.hot.canary import CanaryVerdict, canary_request, judge
from warmscale.warmpool.hot.surface import (
    LEVEL_OFFLOAD,
    Call,
    is_sleeping,
    sleep_calls,
    state_call,
    undo_pause,
    wake_calls,
)

# One call's deadline. A vLLM level-1 sleep of an 8B copies its weights to host RAM in about 10 s
# (vllm PR #48337: 10.57 s on an A100); level-1 wakes take 0.3-4 s, a level-2 wake 6.5 s (same PR),
# and /sleep?mode=wait also drains the requests in flight first: a minute bounds all of these with room.
CALL_TIMEOUT_SECONDS = 60.0
# The canary's deadline: a few tokens on a woken engine take milliseconds; seconds mean it is not serving.
CANARY_TIMEOUT_SECONDS = 10.0
# A /metrics read for the idle check.
METRICS_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class SleepResult:
    slept: bool
    why: str
    seconds: float
    # Where it did not sleep: True where the engine is known to serve still (a pause found work in
    # flight and was undone); None where a call failed midway (unknown: the caller asks the engine's
    # state call if it has one, else the state is unknown).
    awake: bool | None = None


@dataclass(frozen=True)
class WakeResult:
    woke: bool  # the wake calls succeeded
    ready: bool  # ... and the canary passed: the engine may be routed to
    why: str
    wake_seconds: float
    canary_seconds: float
    canary: CanaryVerdict | None = None


class EngineSleeper:
    """One engine at ``base_url`` (``http://IP:PORT``) of kind ``engine`` serving ``model``."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, engine: str, model: str) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.engine = engine
        self.model = model
        self.reference: str | None = None  # the canary's answer while awake (recorded once)

    async def _call(self, call: Call, deadline_s: float = CALL_TIMEOUT_SECONDS) -> tuple[int, Any]:
        async with self.session.request(call.method, self.base_url + call.path, params=list(call.query) or None,
                                        json=call.body, timeout=aiohttp.ClientTimeout(total=deadline_s)) as resp:
            text = await resp.text()
            try:
                body: Any = await resp.json(content_type=None) if text else None
            except ValueError:
                body = text
            return resp.status, body

    async def in_flight(self) -> float | None:
        """Requests running or waiting in the engine, from its ``/metrics``; ``None`` if unknown."""
        try:
            async with self.session.get(self.base_url + "/metrics",
                                        timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT_SECONDS)) as resp:
                if resp.status != 200:
                    return None
                sig = parse_payload(await resp.text(), self.engine)
        except (aiohttp.ClientError, TimeoutError, PayloadError):
            return None
        return sig.running + sig.waiting

    async def sleeping(self, recorded: bool | None = None) -> bool | None:
        """Whether the engine sleeps, where it can say (vLLM ``/is_sleeping``); ``None``: unknown. An
        engine without a state call (SGLang) is in the state ``recorded`` (what the waker last drove it
        to, :mod:`.engine_state`) once it answers its ``/metrics`` (it is up), else unknown."""
        call = state_call(self.engine)
        if call is None:
            if recorded is None:
                return None
            return recorded if await self.in_flight() is not None else None
        try:
            status, body = await self._call(call, METRICS_TIMEOUT_SECONDS)
        except (aiohttp.ClientError, TimeoutError):
            return None
        return is_sleeping(self.engine, body) if status == 200 else None

    async def canary(self) -> CanaryVerdict:
        call = Call("POST", "/v1/completions", body=canary_request(self.model))
        try:
            status, body = await self._call(call, CANARY_TIMEOUT_SECONDS)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return CanaryVerdict(False, None, f"the canary failed: {exc!r}")
        if status != 200:
            return CanaryVerdict(False, None, f"the canary got HTTP {status}")
        return judge(body, self.reference)

    async def record_reference(self) -> CanaryVerdict:
        """Run the canary while awake and keep its answer as the reference for later wakes."""
        self.reference = None
        verdict = await self.canary()
        if verdict.ok:
            self.reference = verdict.text
        return verdict

    async def sleep(self, level: int = LEVEL_OFFLOAD) -> SleepResult:
        """Drain and sleep. vLLM drains itself (``mode=wait``); SGLang is paused first and released only
        where it then reports nothing in flight, else resumed (a release in flight kills it)."""
        t0 = time.monotonic()
        try:
            for call in sleep_calls(self.engine, level):
                if call.needs_idle:
                    left = await self.in_flight()
                    if left is None or left > 0:
                        undone = [(await self._call(undo))[0] for undo in undo_pause(self.engine)]
                        why = "in-flight count unknown" if left is None else f"{left:g} requests in flight"
                        return SleepResult(False, f"not released: {why} while paused", time.monotonic() - t0,
                                           awake=True if all(code == 200 for code in undone) else None)
                status, body = await self._call(call)
                if status != 200:
                    return SleepResult(False, f"{call.path} answered HTTP {status}: {str(body)[:200]}",
                                       time.monotonic() - t0)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return SleepResult(False, f"sleep failed: {exc!r}", time.monotonic() - t0)
        return SleepResult(True, "ok", time.monotonic() - t0)

    async def wake(self, level: int = LEVEL_OFFLOAD) -> WakeResult:
        """Wake, then gate readiness on the canary."""
        t0 = time.monotonic()
        try:
            for call in wake_calls(self.engine, level):
                status, body = await self._call(call)
                if status != 200:
                    return WakeResult(False, False, f"{call.path} answered HTTP {status}: {str(body)[:200]}",
                                      time.monotonic() - t0, 0.0)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return WakeResult(False, False, f"wake failed: {exc!r}", time.monotonic() - t0, 0.0)
        t1 = time.monotonic()
        verdict = await self.canary()
        t2 = time.monotonic()
        return WakeResult(True, verdict.ok, verdict.why, t1 - t0, t2 - t1, verdict)
