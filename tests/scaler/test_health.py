"""The health servicer (scaler/shutdown.py): Watch streams follow the status, never hold its lock
while a response is out, and end after NOT_SERVING once shutting down."""

from __future__ import annotations

import asyncio

from grpc_health.v1 import health_pb2

from warmscale.scaler.shutdown import Health

S = health_pb2.HealthCheckResponse


async def test_watch_follows_status_and_ends_after_shutdown() -> None:
    h = Health()
    await h.set("externalscaler.ExternalScaler", S.SERVING)
    watch = h.Watch(health_pb2.HealthCheckRequest(service=""), None)
    assert (await watch.__anext__()).status == S.SERVING
    # The watcher has not asked for its next response: set() and the shutdown must not wait for it.
    await asyncio.wait_for(h.set("", S.NOT_SERVING), 1)
    await asyncio.wait_for(h.enter_graceful_shutdown(), 1)
    assert [r.status async for r in watch] == [S.NOT_SERVING]
    await h.set("", S.SERVING)  # ignored once shutting down
    assert h._current("") == S.NOT_SERVING == h._current("externalscaler.ExternalScaler")


async def test_watch_of_an_unknown_service_then_its_registration() -> None:
    h = Health()
    watch = h.Watch(health_pb2.HealthCheckRequest(service="other"), None)
    assert (await watch.__anext__()).status == S.SERVICE_UNKNOWN
    nxt = asyncio.ensure_future(watch.__anext__())
    await asyncio.sleep(0.01)
    assert not nxt.done()  # nothing changed: nothing sent
    await h.set("other", S.SERVING)
    assert (await asyncio.wait_for(nxt, 1)).status == S.SERVING
    await h.enter_graceful_shutdown()
    assert [r.status async for r in watch] == [S.NOT_SERVING]


async def test_watch_started_after_shutdown_sends_not_serving_and_ends() -> None:
    h = Health()
    await h.enter_graceful_shutdown()
    assert [r.status async for r in h.Watch(health_pb2.HealthCheckRequest(service=""), None)] == [S.NOT_SERVING]
