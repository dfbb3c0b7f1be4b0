"""The KEDA external scaler gRPC server (grpc.aio) and the process around it.

RPCs answer from the trackers' latest decisions (see :mod:`scaler.tracker`):

- ``IsActive`` / ``StreamIsActive``: ``decision.active`` (the stream sends the current value on open
  and every change, woken by the tracker when a new decision differs).
- ``GetMetricSpec`` / ``StreamMetricSpec``: one spec, ``metricName`` = the ``metricName`` key,
  ``targetSizeFloat`` = ``decision.metric_target`` (1.0 with ``metricUnit: replicas``; the published
  per-replica target with ``inflight``, :mod:`scaler.metric_target`) and ``targetSize`` its ceiling.
  The stream sends the spec on open and again whenever the target changes.
- ``GetMetrics``: ``metricValueFloat`` = ``decision.metric_value`` (chosen so that the HPA's
  ``ceil(value / target)`` lands on the decided count), ``metricValue`` = its ceiling; ``UNAVAILABLE``
  while the count has no basis yet (``Decision.sized``: no decision and nothing known), so the HPA
  keeps what runs.

Invalid metadata -> ``INVALID_ARGUMENT`` naming the key. The standard health service reports
SERVING until shutdown begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from warmscale.proto import externalscaler_pb2 as pb
from warmscale.proto import externalscaler_pb2_grpc as pb_grpc
from warmscale.scaler.clock import SteadyClock
from warmscale.scaler.config import ConfigError
from warmscale.scaler.counts import ceil_count
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.hpa import unsized_message
from warmscale.scaler.inflight import UnaryInflight
from warmscale.scaler.metrics import BearerToken, ScalerMetrics, start_http
from warmscale.scaler.policy import Decision
from warmscale.scaler.server_options import SERVICE_NAME, SHUTDOWN_STEP_SECONDS, ServerOptions
from warmscale.scaler.shutdown import Health, stop_grpc_server
from warmscale.scaler.store import MemoryStore, Store, open_store
from warmscale.scaler.streamcap import StreamCap
from warmscale.scaler.target_guard import TargetGuard
from warmscale.scaler.targets import invalid_ref
from warmscale.scaler.tls import server_credentials
from warmscale.scaler.tracker import (
    RefusalHook,
    SnapshotReader,
    Tracker,
    TrackerLimit,
    TrackerManager,
    TrackerOptions,
)

log = logging.getLogger("warmscale.scaler.server")

# Streams re-check shutdown and refresh their tracker's "asked" time at least this often.
STREAM_IDLE_WAKE_SECONDS = 5.0


def _spec(tracker: Tracker, d: Decision) -> pb.GetMetricSpecResponse:
    target = d.metric_target
    return pb.GetMetricSpecResponse(metricSpecs=[
        pb.MetricSpec(metricName=tracker.cfg.metric_name, targetSize=max(1, math.ceil(target)), targetSizeFloat=target)
    ])


class ExternalScalerService:
    """Implements ``externalscaler.ExternalScaler`` (both KEDA v2.20 and main protos)."""

    def __init__(self, manager: TrackerManager, metrics: ScalerMetrics, *, stream_metric_spec: bool = True,
                 streams: StreamCap | None = None) -> None:
        self.manager = manager
        self.metrics = metrics
        self.stream_metric_spec = stream_metric_spec
        self.stream_cap = streams if streams is not None else StreamCap()
        self.shutting_down = False
        self.rpcs = UnaryInflight(
            lambda method, code, seconds: metrics.rpc_seconds.labels(method, code).observe(seconds),
            codes=((ConfigError, "INVALID_ARGUMENT"),))

    async def wait_drained(self, quiet: float, within: float) -> bool:
        return await self.rpcs.wait_drained(quiet, within)

    async def _tracker(self, ref: pb.ScaledObjectRef, context: grpc.aio.ServicerContext[Any, Any]) -> Tracker:
        bad = invalid_ref(ref.namespace, ref.name)
        if bad is not None:
            await self._abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                              f"invalid scaledObjectRef {bad[0]!r}: {bad[1]}")
        try:
            return await self.manager.admit(ref.namespace, ref.name, ref.scalerMetadata)
        except ConfigError as exc:
            await self._abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                              f"invalid scaler metadata {exc.key!r}: {exc.message}")
        except TrackerLimit as exc:
            await self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))

    @staticmethod
    async def _abort(context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, msg: str) -> NoReturn:
        await context.abort(code, msg)
        raise AssertionError("unreachable")  # abort raises

    async def _unary(self, method: str, context: grpc.aio.ServicerContext[Any, Any],
                     body: Callable[[], Awaitable[Any]]) -> Any:
        return await self.rpcs.run(method, context, body)

    async def IsActive(self, request: pb.ScaledObjectRef,
                       context: grpc.aio.ServicerContext[Any, Any]) -> pb.IsActiveResponse:
        async def body() -> pb.IsActiveResponse:
            d = await (await self._tracker(request, context)).current()
            return pb.IsActiveResponse(result=d.active)

        result: pb.IsActiveResponse = await self._unary("IsActive", context, body)
        return result

    async def GetMetricSpec(self, request: pb.ScaledObjectRef,
                            context: grpc.aio.ServicerContext[Any, Any]) -> pb.GetMetricSpecResponse:
        async def body() -> pb.GetMetricSpecResponse:
            tracker = await self._tracker(request, context)
            return _spec(tracker, await tracker.current())

        result: pb.GetMetricSpecResponse = await self._unary("GetMetricSpec", context, body)
        return result

    async def GetMetrics(self, request: pb.GetMetricsRequest,
                         context: grpc.aio.ServicerContext[Any, Any]) -> pb.GetMetricsResponse:
        async def body() -> pb.GetMetricsResponse:
            tracker = await self._tracker(request.scaledObjectRef, context)
            d = await tracker.current()
            if not d.sized:
                await self._abort(context, grpc.StatusCode.UNAVAILABLE, unsized_message(request.scaledObjectRef))
            value = d.metric_value
            return pb.GetMetricsResponse(metricValues=[
                pb.MetricValue(metricName=tracker.cfg.metric_name, metricValue=ceil_count(value),
                               metricValueFloat=value)
            ])

        result: pb.GetMetricsResponse = await self._unary("GetMetrics", context, body)
        return result

    async def _stream(self, method: str, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext[Any, Any],
                      render: Callable[[Tracker, Decision], Any]) -> None:
        tracker = await self._tracker(request, context)
        refused = self.stream_cap.enter(tracker.id, f"ScaledObject {tracker.namespace}/{tracker.name}")
        if refused is not None:
            await self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
        gauge = self.metrics.streams.labels(method)
        gauge.inc()
        tracker.streams += 1
        spec = int(method == "StreamMetricSpec")
        tracker.spec_streams += spec
        try:
            last: Any = None
            while not self.shutting_down and self.manager.has(tracker):
                version = tracker.version
                msg = render(tracker, await tracker.current())
                if msg != last:
                    await context.write(msg)
                    last = msg
                tracker.touch()
                if self.shutting_down:
                    break
                await tracker.wait_change(version, STREAM_IDLE_WAKE_SECONDS)
        finally:
            self.stream_cap.leave(tracker.id)
            tracker.streams -= 1
            tracker.spec_streams -= spec
            tracker.touch()
            gauge.dec()
        refused = self.manager.refusal(request.namespace, request.name, request.scalerMetadata)
        if refused is not None:  # the ScaledObject was refused for size while the stream was open
            await self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
        # Returning ends the stream with OK: a clean end resets KEDA's reconnect back-off.

    async def StreamIsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await self._stream("StreamIsActive", request, context, lambda _t, d: pb.IsActiveResponse(result=d.active))

    async def StreamMetricSpec(self, request: pb.ScaledObjectRef,
                               context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if not self.stream_metric_spec:
            # As a scaler without the RPC answers: KEDA then polls GetMetricSpec (--no-stream-metric-spec).
            await self._abort(context, grpc.StatusCode.UNIMPLEMENTED, "StreamMetricSpec is switched off")
        await self._stream("StreamMetricSpec", request, context, _spec)


class ScalerServer:
    """gRPC server + health + metrics HTTP + trackers, with graceful start/stop."""

    def __init__(self, options: ServerOptions, reader: SnapshotReader, *, store: Store | None = None,
                 clock: Callable[[], float] | None = None, guard: TargetGuard | None = None,
                 on_refused: RefusalHook | None = None) -> None:
        self.options = options
        self.metrics = ScalerMetrics()
        self.decisions = DecisionLog(options.decision_log_size)
        self.store: Store = store if store is not None else open_store(options.redis_url)
        self._owns_store = store is None
        self.manager = TrackerManager(
            self.store, reader, self.metrics, self.decisions,
            options=TrackerOptions(idle_seconds=options.tracker_idle_seconds, max_trackers=options.max_trackers,
                                   max_trackers_per_namespace=options.max_trackers_per_namespace),
            # Decisions are timed on a clock that does not jump with the wall clock (``clock``: the wall
            # clock it follows, time.time by default): scaler/clock.py.
            instance_id=options.instance_id, clock=SteadyClock(wall=clock), guard=guard,
            # The reader's cheap read of the queues between ticks, where it has one (scaler/onset.py).
            onset=getattr(reader, "onset", None),
            # Its read of the awake hot-tier sleepers' engines (their TTFT), where it has one.
            awake=getattr(reader, "awake_sleepers", None),
        )
        self.manager.on_refused = on_refused  # the Event on a ScaledObject refused for size
        self.service = ExternalScalerService(
            self.manager, self.metrics, stream_metric_spec=options.stream_metric_spec,
            streams=StreamCap(options.max_streams, options.max_streams_per_scaledobject))
        self.health = Health()
        self._server: grpc.aio.Server | None = None
        self._http: Any = None
        self.grpc_port = 0
        self.metrics_port = 0
        self._stopped = asyncio.Event()
        self._front: Any = None

    @property
    def memory_store(self) -> bool:
        return isinstance(self.store, MemoryStore)

    async def start(self) -> None:
        o = self.options
        if o.rpc_process:
            await self._start_with_front()
            return
        server = grpc.aio.server(options=[
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ])
        pb_grpc.add_ExternalScalerServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        address = f"{o.host}:{o.grpc_port}" if ":" not in o.host else f"[{o.host}]:{o.grpc_port}"
        if o.tls_cert or o.tls_key or o.tls_client_ca:
            if not (o.tls_cert and o.tls_key):
                raise ValueError("--tls-cert and --tls-key go together (--tls-client-ca needs both)")
            port = server.add_secure_port(address, server_credentials(o.tls_cert, o.tls_key, o.tls_client_ca))
        else:
            port = server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"cannot bind gRPC on {address}")
        self.grpc_port = port
        await self.manager.start()
        await server.start()
        self._server = server
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self._serve_http(rpc_process=False)

    async def _start_with_front(self) -> None:
        from warmscale.scaler.rpcfront import FrontLink

        await self.manager.start()
        self._front = FrontLink(self)
        self.grpc_port = await self._front.start()
        await self._serve_http(rpc_process=True)

    async def _serve_http(self, *, rpc_process: bool) -> None:
        """``/metrics``, ``/decisions`` and health over HTTP (when a port is set); logs what serves."""
        o = self.options
        if o.metrics_port is not None:
            token = BearerToken(o.metrics_token_file) if o.metrics_token_file else None
            self._http, self.metrics_port = await start_http(
                o.metrics_host or o.host, o.metrics_port, self.metrics, self.decisions,
                healthy=lambda: not self.service.shutting_down,
                extra=lambda: {"instance": self.manager.instance_id, "trackers": len(self.manager)},
                token=token,
            )
        log.info("scaler serving", extra={
            "grpc_port": self.grpc_port, "metrics_port": self.metrics_port, "tls": bool(o.tls_cert),
            "mtls": bool(o.tls_client_ca), "store": "memory" if self.memory_store else "redis",
            "instance": self.manager.instance_id, "rpc_process": rpc_process,
            "metrics_host": o.metrics_host or o.host, "metrics_token": bool(o.metrics_token_file),
        })

    async def stop(self, grace: float | None = None) -> None:
        """Graceful: report NOT_SERVING, end the streams cleanly, refuse new RPCs, let in-flight
        unary RPCs finish within ``grace`` seconds, then stop trackers and close the store."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.options.grace_seconds if grace is None else grace
        log.info("scaler shutting down", extra={"grace_seconds": grace})
        self.service.shutting_down = True
        await self.health.enter_graceful_shutdown()
        self.manager.wake_all()
        await asyncio.sleep(0)
        if self._front is not None:
            await self._front.stop(grace)
        if self._server is not None:
            await stop_grpc_server(self._server, self.service, grace, bound=SHUTDOWN_STEP_SECONDS)
        await self._bounded("trackers", self.manager.stop())
        if self._http is not None:
            await self._bounded("metrics http", self._http.cleanup())
        if self._owns_store:
            await self._bounded("store", self.store.close())
        log.info("scaler stopped")

    async def _bounded(self, step: str, aw: Awaitable[Any]) -> None:
        """One shutdown step, bounded: a step that does not finish in time is cancelled and logged, so
        that SIGTERM always ends the process within the grace period plus a few seconds."""
        try:
            await asyncio.wait_for(aw, timeout=SHUTDOWN_STEP_SECONDS)
        except TimeoutError:
            stuck = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
            where = []
            for t in stuck[:5]:
                frames = t.get_stack(limit=3)
                where.append(f"{t.get_name()}: " + " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in frames))
            log.warning("shutdown step did not finish; moving on",
                        extra={"step": step, "seconds": SHUTDOWN_STEP_SECONDS, "tasks": where})

    async def wait_closed(self) -> None:
        if self._server is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._server.wait_for_termination()
