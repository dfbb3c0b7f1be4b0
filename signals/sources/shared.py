"""One read in flight per thing read, shared by every ScaledObject that asks (an I/O-edge helper).

ScaledObjects over the same pods (or the same Prometheus query) ask for the same data; a
:class:`SharedReads` runs one fetch for all of them and hands its result to every caller that asks
while it runs, or within ``fresh_for`` seconds after it finished. A caller waits at most ``wait``
seconds: a late fetch is *not* cancelled (it is bounded by its own total deadline) and its result
serves the next caller, so a slow endpoint costs one fetch at a time, never a pile of them, and
never holds up the caller's decision beyond ``wait``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

# Entries not asked for during this long are dropped (checked at most this often).
_SWEEP_SECONDS = 60.0


@dataclass
class _Entry:
    task: asyncio.Task[Any]
    started: float
    completed: float | None = None
    used: float = 0.0


class SharedReads:
    """Coalesces concurrent and recent reads of the same key (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[Hashable, _Entry] = {}
        self._last_sweep = clock()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[Any]], *, wait: float,
                  fresh_for: float = 0.0) -> Any:
        """The result of ``fetch()`` for ``key``: a finished one younger than ``fresh_for`` seconds,
        the one in flight, or a new one. Raises :class:`TimeoutError` after ``wait`` seconds (the
        fetch goes on) and whatever ``fetch`` raised."""
        now = self._clock()
        self._sweep(now)
        entry = self._entries.get(key)
        if entry is not None and entry.task.done() and (entry.completed is None or now - entry.completed > fresh_for):
            entry = None
        if entry is None:
            entry = _Entry(asyncio.ensure_future(fetch()), started=now)
            self._entries[key] = entry
            entry.task.add_done_callback(functools.partial(self._finished, entry))
        entry.used = now
        if entry.task.done():
            return entry.task.result()
        async with asyncio.timeout(wait):
            return await asyncio.shield(entry.task)

    def _finished(self, entry: _Entry, _task: object = None) -> None:
        entry.completed = self._clock()
        if not entry.task.cancelled():
            entry.task.exception()  # retrieved: a failure nobody waits for any more is not "never retrieved"

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < _SWEEP_SECONDS:
            return
        self._last_sweep = now
        for key, e in list(self._entries.items()):
            if e.task.done() and now - e.used > _SWEEP_SECONDS:
                del self._entries[key]

    async def aclose(self) -> None:
        tasks = [e.task for e in self._entries.values() if not e.task.done()]
        self._entries.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
