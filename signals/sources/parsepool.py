"""Parsing of large ``/metrics`` payloads in worker processes (an I/O-edge helper).

Parsing is CPU work (prometheus_client's text parser: milliseconds for a realistic vLLM payload);
done on the event loop it would delay the RPCs answered there, and done in the default thread pool
it would share that pool with anything else. A :class:`ParsePool` owns its own process pool
(``spawn``: no fork of a process that runs gRPC), created on first use; payloads below
``inline_below`` bytes are parsed inline (cheaper than the round trip). A worker that dies is
replaced; the payload it was parsing is reported unparseable (that replica unknown for that read).

Each worker's address space is capped (``memory_bytes``, ``RLIMIT_AS``): a payload that would need
more raises ``MemoryError`` in the worker -- that payload unparseable, the worker kept -- instead of
growing until the container is killed (a 50 MiB / 1M-series payload took a worker to 1.2 GiB).
What reaches the workers is bounded before that by :mod:`signals.sources.budget`.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from warmscale.signals.engines import parse_payload
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import PayloadError
from warmscale.signals.sources.budget import DEFAULT_WORKER_MEMORY_BYTES


def _parse(text: str, engine: str, max_bytes: int, selector: str) -> ReplicaSignal:
    return parse_payload(text, engine, max_bytes=max_bytes, selector=selector)


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _limit_memory(max_bytes: int) -> None:
    """Worker initializer: cap this process's address space (best effort: a lower hard limit wins)."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = max_bytes if hard == resource.RLIM_INFINITY else min(max_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class ParsePool:
    def __init__(self, workers: int | None = None, *, inline_below: int = 32 * 1024,
                 memory_bytes: int | None = DEFAULT_WORKER_MEMORY_BYTES) -> None:
        self.workers = workers or default_workers()
        self.inline_below = inline_below
        self.memory_bytes = memory_bytes  # None: no cap
        self._executor: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            context = multiprocessing.get_context("spawn")
            if self.memory_bytes:
                self._executor = ProcessPoolExecutor(max_workers=self.workers, mp_context=context,
                                                     initializer=_limit_memory, initargs=(self.memory_bytes,))
            else:
                self._executor = ProcessPoolExecutor(max_workers=self.workers, mp_context=context)
        return self._executor

    async def parse(self, text: str, engine: str, max_bytes: int, selector: str = "") -> ReplicaSignal:
        if len(text) < self.inline_below:
            return parse_payload(text, engine, max_bytes=max_bytes, selector=selector)
        pool = self._pool()
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, _parse, text, engine, max_bytes, selector)
        except BrokenProcessPool as exc:
            if self._executor is pool:
                self._executor = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise PayloadError(f"parser worker failed: {exc}") from None
        except MemoryError:
            raise PayloadError(f"parsing needs more than the parse worker's {self.memory_bytes:,} bytes "
                               "(--parse-worker-memory-bytes)") from None

    def close(self) -> None:
        pool, self._executor = self._executor, None
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.shutdown(wait=False, cancel_futures=True)
