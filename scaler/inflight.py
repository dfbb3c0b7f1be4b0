"""Unary RPCs in flight, for the drain on SIGTERM: shared by the in-process servicer
(:mod:`scaler.server`) and the separate RPC process (:mod:`scaler.rpcfront`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

Record = Callable[[str, str, float], None]


class UnaryInflight:
    """Counts unary RPCs in their handlers and records each one's method, status code and duration."""

    def __init__(self, record: Record, *, codes: tuple[tuple[type[BaseException], str], ...] = ()) -> None:
        self.count = 0
        self.last_started = 0.0  # monotonic time the latest unary RPC reached its handler
        self._record = record
        self._codes = codes  # exception types answered with a known status before the handler's abort

    async def run(self, method: str, context: grpc.aio.ServicerContext[Any, Any],
                  body: Callable[[], Awaitable[Any]]) -> Any:
        t0 = time.perf_counter()
        code = "OK"
        self.count += 1
        self.last_started = time.monotonic()
        try:
            return await body()
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except Exception as exc:
            known = next((name for kind, name in self._codes if isinstance(exc, kind)), None)
            c = context.code()
            code = known or (c.name if isinstance(c, grpc.StatusCode) else "UNKNOWN")
            raise
        finally:
            self.count -= 1
            self._record(method, code, time.perf_counter() - t0)

    async def wait_drained(self, quiet: float, within: float) -> bool:
        """Wait until no unary RPC is in flight and none has reached a handler for ``quiet`` seconds
        (or ``within`` seconds passed). RPCs gRPC core has received but not yet handed to a handler
        would be killed (CANCELLED) by ``server.stop()``; a quiet dispatch queue means there are none."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            if self.count == 0 and time.monotonic() - self.last_started >= quiet:
                return True
            await asyncio.sleep(min(0.01, quiet / 4))
        return self.count == 0
