"""Graceful stop of a ``grpc.aio`` server, shared by the in-process servicer (:mod:`scaler.server`) and
the separate RPC process (:mod:`scaler.rpcfront`), with the health service it needs.

``grpc.aio``'s ``Server.stop`` must be called **once**. Two overlapping calls (say ``stop(grace)``
then ``stop(0)`` to cut the grace short) race inside ``AioServer.shutdown``: when the call that
finishes first has destroyed the core server, the other one's grace timeout still cancels "all calls"
on it, through a NULL pointer, and the process dies of a segmentation fault (seen twice in CI, in a
test stopping a TLS server with grace 0). So the stop here is a single ``stop(grace)``, and nothing
that would hold it for the whole grace period stays open: the push streams end on ``shutting_down``
and a health ``Watch`` ends once it has sent NOT_SERVING (:class:`Health`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

log = logging.getLogger("warmscale.scaler")

# A dispatch queue quiet this long (no unary RPC in flight, none started) has handed every received
# call to a handler, so the stop kills none.
DRAIN_QUIET_SECONDS = 0.1

ServingStatus = int  # health_pb2.HealthCheckResponse.ServingStatus


class Drains(Protocol):
    async def wait_drained(self, quiet: float, within: float) -> Any: ...


class Health(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """``grpc.health.v1``: ``Check`` and ``Watch`` over a status per service name. After
    :meth:`enter_graceful_shutdown` every status is NOT_SERVING for good, and each ``Watch`` stream
    sends that and ends (status OK), so that open watchers do not hold the server's graceful stop."""

    def __init__(self) -> None:
        self._status: dict[str, ServingStatus] = {"": health_pb2.HealthCheckResponse.SERVING}
        self._changed = asyncio.Condition()
        self._shutting_down = False

    async def Check(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext[Any, Any]) -> health_pb2.HealthCheckResponse:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        sent: ServingStatus | None = None
        while True:
            # The lock is never held while a response is written: a watcher that does not read must
            # not block set() or enter_graceful_shutdown().
            async with self._changed:
                status = self._current(request.service)
                while status == sent and not self._shutting_down:
                    await self._changed.wait()
                    status = self._current(request.service)
                last = self._shutting_down
            if status != sent:
                yield health_pb2.HealthCheckResponse(status=status)
                sent = status
            if last:
                return

    def _current(self, service: str) -> ServingStatus:
        unknown: ServingStatus = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        return self._status.get(service, unknown)

    async def set(self, service: str, status: ServingStatus) -> None:
        """Set one service's status (ignored once shutting down)."""
        async with self._changed:
            if not self._shutting_down:
                self._status[service] = status
                self._changed.notify_all()

    async def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING from now on; the watchers are told and their streams end."""
        async with self._changed:
            self._shutting_down = True
            for service in self._status:
                self._status[service] = health_pb2.HealthCheckResponse.NOT_SERVING
            self._changed.notify_all()


async def stop_grpc_server(server: grpc.aio.Server, rpcs: Drains, grace: float, *, bound: float,
                           drain_quiet: float = DRAIN_QUIET_SECONDS) -> None:
    """Stop ``server`` gracefully with one ``stop`` call. The caller has already reported NOT_SERVING
    (:meth:`Health.enter_graceful_shutdown`) and set its push streams ending.

    gRPC core kills the calls it has received but not yet dispatched when the server stops: keep
    dispatching until the queue is quiet and nothing is in flight (within ``grace`` seconds), so that
    every RPC received before SIGTERM is answered. Then ``stop(left)`` refuses new RPCs, lets those in
    flight finish within what is left of the grace period and cancels the rest at its end. ``bound``
    seconds past that, the stop is abandoned (logged) so that shutdown always ends."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    await rpcs.wait_drained(drain_quiet, grace)
    left = max(0.0, deadline - loop.time())
    try:
        await asyncio.wait_for(server.stop(left), timeout=left + bound)
    except TimeoutError:
        log.warning("grpc server stop did not finish; moving on", extra={"grace_seconds": left})


__all__ = ["Health", "stop_grpc_server"]
