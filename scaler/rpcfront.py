"""KEDA's gRPC service in a process of its own (``warmscale scaler --rpc-process``).

Python's gRPC stack costs about 0.3 ms of CPU per unary RPC; 1,000 ScaledObjects polled at 1 Hz are
2,000 RPCs a second, most of a core. On the event loop that also ticks 1,000 trackers and scrapes
their engines, every answer waits behind that work. With ``--rpc-process`` the RPCs are answered by
a child process that does nothing else: it keeps a *mirror* of what KEDA sees of every decision
(active, metric value and target, metric name), pushed by the scaler process whenever it changes, and
answers from it. The scaler process keeps everything else (trackers, sources, store, leases,
``/metrics``, ``/decisions``).

- First RPC for a ScaledObject (not in the mirror): the front asks the scaler process, which creates
  the tracker (or refuses the metadata: the same ``INVALID_ARGUMENT`` naming the key), waits for its
  first decision like the in-process server (or answers the *hold*) and replies; concurrent first
  RPCs for one ScaledObject share one request.
- Every second the front reports which trackers were asked about (or have an open stream: that
  counts as asking) and its RPC latencies (``warmscale_rpc_duration_seconds``, open streams); the
  scaler process answers with the trackers it no longer has (dropped idle), which the front forgets.
  Mirror entries nobody asked about for half the tracker idle time are forgotten too, so a dropped
  tracker is never answered from a stale entry.
- Health (``grpc.health.v1``) is served by the front. On SIGTERM the scaler process tells the front
  to stop: NOT_SERVING, streams end with OK, every unary RPC already received is answered within
  the grace period, then the front exits and the scaler process stops the rest.
- If the scaler process goes away, the front stops at once (KEDA sees the port close).

Wire between the two: a socket pair, each message a 4-byte big-endian length and a JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import grpc
import orjson

from warmscale.scaler.counts import ceil_count
from warmscale.scaler.hpa import unsized_message
from warmscale.scaler.inflight import UnaryInflight
from warmscale.scaler.streamcap import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT, StreamCap

if TYPE_CHECKING:
    from warmscale.scaler.metrics import ScalerMetrics
    from warmscale.scaler.server_options import ServerOptions
    from warmscale.scaler.tracker import Tracker, TrackerManager

log = logging.getLogger("warmscale.scaler.rpcfront")

MetaKey = tuple[str, str, tuple[tuple[str, str], ...]]
REPORT_SECONDS = 1.0
STREAM_IDLE_WAKE_SECONDS = 5.0


def _frame(msg: dict[str, Any]) -> bytes:
    data = orjson.dumps(msg)
    return len(data).to_bytes(4, "big") + data


async def _read(reader: asyncio.StreamReader) -> dict[str, Any]:
    n = int.from_bytes(await reader.readexactly(4), "big")
    msg: dict[str, Any] = orjson.loads(await reader.readexactly(n))
    return msg


def _answer(tracker: Tracker, d: Any) -> list[Any]:
    return [bool(d.active), float(d.metric_value), float(d.metric_target), int(d.desired), tracker.cfg.metric_name,
            bool(d.sized)]


# ------------------------------------------------------------------------------------- scaler side


def lower_priority(by: int) -> None:
    """Lower this process's CPU priority (nice) by ``by``, every thread of it (on Linux nice is per
    thread; threads and processes started later inherit it). The front, started before, keeps its
    priority: when CPU is short, the scheduler runs KEDA's answers before ticks and scrapes. Best
    effort: a failure is logged, nothing else changes."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
        except OSError as exc:  # a thread that just ended, or no permission
            log.debug("cannot lower the priority of a thread", extra={"tid": tid, "error": str(exc)})


class _Draining(Protocol):
    @property
    def shutting_down(self) -> bool: ...


class FrontHost(Protocol):
    """What the link uses of the scaler server (:class:`scaler.server.ScalerServer`, which starts it)."""

    @property
    def options(self) -> ServerOptions: ...

    @property
    def manager(self) -> TrackerManager: ...

    @property
    def metrics(self) -> ScalerMetrics: ...

    @property
    def service(self) -> _Draining: ...


class FrontLink:
    """The scaler process's side: spawns the front, serves its requests, pushes decision changes."""

    def __init__(self, server: FrontHost) -> None:
        self.server = server
        self.proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_tid: dict[int, Tracker] = {}
        self._tid_of: dict[str, int] = {}
        self._next_tid = 1
        self._stopped = asyncio.Event()

    async def start(self) -> int:
        """Spawn the front; returns the gRPC port it bound."""
        o = self.server.options
        ours, theirs = socket.socketpair()
        options = {"host": o.host, "grpc_port": o.grpc_port, "tls_cert": o.tls_cert, "tls_key": o.tls_key,
                   "tls_client_ca": o.tls_client_ca, "idle_seconds": o.tracker_idle_seconds,
                   "stream_metric_spec": o.stream_metric_spec, "max_streams": o.max_streams,
                   "max_streams_per_scaledobject": o.max_streams_per_scaledobject,
                   "log_level": logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()}
        self.proc = subprocess.Popen(  # noqa: ASYNC220  (a quick spawn, once)
            [sys.executable, "-m", "warmscale.scaler.rpcfront", "--fd", str(theirs.fileno()), "--options",
             orjson.dumps(options).decode()],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
        )
        theirs.close()
        reader, self._writer = await asyncio.open_connection(sock=ours)
        try:
            first = await asyncio.wait_for(_read(reader), timeout=60)
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            self._kill()
            raise OSError(f"the RPC front process did not start: {exc!r}") from None
        if first.get("t") != "ready":
            self._kill()
            raise OSError(f"the RPC front process failed: {first.get('error')}")
        self.server.manager.on_change = self._publish
        self._reader_task = asyncio.create_task(self._serve(reader), name="rpc front link")
        if o.tick_nice > 0:
            lower_priority(o.tick_nice)
        return int(first["port"])

    def _send(self, msg: dict[str, Any]) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(_frame(msg))

    def _tid(self, tracker: Tracker) -> int:
        tid = self._tid_of.get(tracker.id)
        if tid is None or self._by_tid.get(tid) is not tracker:
            tid = self._next_tid
            self._next_tid += 1
            self._tid_of[tracker.id] = tid
            self._by_tid[tid] = tracker
        return tid

    def _publish(self, tracker: Tracker) -> None:
        tid = self._tid_of.get(tracker.id)
        if tid is not None and self._by_tid.get(tid) is tracker and tracker.decision is not None:
            self._send({"t": "ans", "tid": tid, "a": _answer(tracker, tracker.decision), "v": tracker.version})

    async def _serve(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                msg = await _read(reader)
                kind = msg.get("t")
                if kind == "get":
                    task = asyncio.create_task(self._get(msg))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif kind == "touch":
                    self._touch(msg.get("tids") or [], set(msg.get("spec") or []))
                elif kind == "stats":
                    self._stats(msg)
                elif kind == "stopped":
                    self._stopped.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            self._stopped.set()
            if not self.server.service.shutting_down:
                log.error("the RPC front process went away")

    async def _get(self, msg: dict[str, Any]) -> None:
        from warmscale.scaler.config import ConfigError
        from warmscale.scaler.targets import invalid_ref
        from warmscale.scaler.tracker import TrackerLimit

        rid = msg["id"]
        bad = invalid_ref(msg["ns"], msg["name"])
        if bad is not None:
            self._send({"t": "err", "id": rid, "code": "INVALID_ARGUMENT",
                        "msg": f"invalid scaledObjectRef {bad[0]!r}: {bad[1]}"})
            return
        try:
            tracker = await self.server.manager.admit(msg["ns"], msg["name"], dict(msg["meta"]))
        except ConfigError as exc:
            self._send({"t": "err", "id": rid, "code": "INVALID_ARGUMENT",
                        "msg": f"invalid scaler metadata {exc.key!r}: {exc.message}"})
            return
        except TrackerLimit as exc:
            self._send({"t": "err", "id": rid, "code": "RESOURCE_EXHAUSTED", "msg": str(exc)})
            return
        except Exception as exc:
            log.exception("cannot track the ScaledObject", extra={"namespace": msg["ns"], "scaledobject": msg["name"]})
            self._send({"t": "err", "id": rid, "code": "INTERNAL", "msg": f"{type(exc).__name__}: {exc}"})
            return
        d = await tracker.current()
        tid = self._tid(tracker)
        self._send({"t": "got", "id": rid, "tid": tid, "a": _answer(tracker, d),
                    "v": tracker.version if tracker.decision is not None else -1})

    def _touch(self, tids: list[int], spec: set[int] | None = None) -> None:
        for tid, tracker in self._by_tid.items():  # StreamMetricSpec streams open in the front, per tracker
            tracker.spec_streams = int(tid in (spec or ()))
        gone = []
        for tid in tids:
            t = self._by_tid.get(tid)
            if t is None or not self.server.manager.has(t):
                gone.append(tid)
                if t is not None:
                    self._by_tid.pop(tid, None)
                    if self._tid_of.get(t.id) == tid:
                        del self._tid_of[t.id]
            else:
                t.touch()
        if gone:
            self._send({"t": "gone", "tids": gone})

    def _stats(self, msg: dict[str, Any]) -> None:
        m = self.server.metrics
        # ~2,000 observations a second at 1,000 ScaledObjects: one labels() lookup per (method, code),
        # not per observation (3.5 -> 1.1 us each, on the scaler process's event loop).
        children: dict[tuple[str, str], Any] = {}
        for method, code, seconds in msg.get("rpc") or []:
            child = children.get((method, code))
            if child is None:
                child = children[(method, code)] = m.rpc_seconds.labels(method, code)
            child.observe(seconds)
        for method, n in (msg.get("streams") or {}).items():
            m.streams.labels(method).set(n)

    async def stop(self, grace: float) -> None:
        """Stop the front gracefully (it answers what it received within ``grace``) and wait for it."""
        self._send({"t": "stop", "grace": grace})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), timeout=grace + 5.0)
        if self.proc is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout=5.0)
            except TimeoutError:
                self._kill()
        self.server.manager.on_change = None
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
        for t in list(self._tasks):
            t.cancel()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# -------------------------------------------------------------------------------------- front side


class _Refused(Exception):
    def __init__(self, code: str, msg: str) -> None:
        super().__init__(msg)
        self.code, self.msg = code, msg


@dataclass
class _Entry:
    tid: int
    key: MetaKey
    answer: list[Any]
    version: int
    asked: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def update(self, answer: list[Any], version: int) -> None:
        self.answer, self.version = answer, version
        old, self.changed = self.changed, asyncio.Event()
        old.set()


class FrontService:
    """``externalscaler.ExternalScaler`` answered from the mirror."""

    def __init__(self, writer: asyncio.StreamWriter, idle_seconds: float, *, stream_metric_spec: bool = True,
                 streams: StreamCap | None = None) -> None:
        from warmscale.proto import externalscaler_pb2 as pb

        self.stream_metric_spec = stream_metric_spec
        self.stream_cap = streams if streams is not None else StreamCap()
        self.pb = pb
        self._writer = writer
        self.idle_seconds = idle_seconds
        self.mirror: dict[MetaKey, _Entry] = {}
        self.by_tid: dict[int, _Entry] = {}
        self._pending: dict[MetaKey, asyncio.Future[_Entry]] = {}
        self._requests: dict[int, tuple[MetaKey, asyncio.Future[_Entry]]] = {}
        self._next_id = 1
        self.asked: set[int] = set()
        self.streams: dict[int, int] = {}
        self.spec_streams: dict[int, int] = {}  # open StreamMetricSpec streams per tracker
        self.open_streams = {"StreamIsActive": 0, "StreamMetricSpec": 0}
        self.observations: list[tuple[str, str, float]] = []
        self.shutting_down = False
        self.rpcs = UnaryInflight(lambda method, code, seconds: self.observations.append((method, code, seconds)))

    def send(self, msg: dict[str, Any]) -> None:
        if not self._writer.is_closing():
            self._writer.write(_frame(msg))

    # -- messages from the scaler process
    def on_message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("t")
        if kind == "ans":
            e = self.by_tid.get(msg["tid"])
            if e is not None:
                e.update(msg["a"], msg["v"])
        elif kind in ("got", "err"):
            pending = self._requests.pop(msg["id"], None)
            if pending is None:
                return
            key, fut = pending
            self._pending.pop(key, None)
            if fut.done():
                return
            if kind == "err":
                fut.set_exception(_Refused(msg["code"], msg["msg"]))
                return
            e = self.by_tid.get(msg["tid"])
            if e is None or e.key != key:
                e = _Entry(msg["tid"], key, msg["a"], msg["v"])
                self.by_tid[e.tid] = e
            elif msg["v"] >= e.version:
                e.update(msg["a"], msg["v"])
            self.mirror[key] = e
            fut.set_result(e)
        elif kind == "gone":
            for tid in msg["tids"]:
                self._forget(tid)

    def _forget(self, tid: int) -> None:
        e = self.by_tid.pop(tid, None)
        if e is not None and self.mirror.get(e.key) is e:
            del self.mirror[e.key]
        if e is not None:
            e.update(e.answer, e.version)  # wakes its streams: they ask again

    def report(self) -> None:
        now = time.monotonic()
        tids = self.asked | {t for t, n in self.streams.items() if n > 0}
        self.asked = set()
        for t in tids:
            e = self.by_tid.get(t)
            if e is not None:
                e.asked = now
        for e in list(self.by_tid.values()):  # not asked for a while: ask the scaler process again next time
            if now - e.asked > self.idle_seconds / 2 and not self.streams.get(e.tid):
                self._forget(e.tid)
        obs, self.observations = self.observations, []
        self.send({"t": "touch", "tids": sorted(tids),
                   "spec": sorted(t for t, n in self.spec_streams.items() if n > 0)})
        self.send({"t": "stats", "rpc": obs, "streams": self.open_streams})

    # -- RPCs
    async def _entry(self, ref: Any, context: grpc.aio.ServicerContext[Any, Any]) -> _Entry:
        key: MetaKey = (ref.namespace, ref.name, tuple(sorted(ref.scalerMetadata.items())))
        e = self.mirror.get(key)
        if e is None:
            fut = self._pending.get(key)
            if fut is None:
                fut = asyncio.get_running_loop().create_future()
                self._pending[key] = fut
                rid = self._next_id
                self._next_id += 1
                self._requests[rid] = (key, fut)
                self.send({"t": "get", "id": rid, "ns": key[0], "name": key[1], "meta": dict(key[2])})
            try:
                e = await asyncio.shield(fut)
            except _Refused as exc:
                await self._abort(context, getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL), exc.msg)
        e.asked = time.monotonic()
        self.asked.add(e.tid)
        return e

    @staticmethod
    async def _abort(context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, msg: str) -> NoReturn:
        await context.abort(code, msg)
        raise AssertionError("unreachable")

    async def _unary(self, method: str, context: grpc.aio.ServicerContext[Any, Any],
                     body: Callable[[], Awaitable[Any]]) -> Any:
        return await self.rpcs.run(method, context, body)

    def _spec(self, e: _Entry) -> Any:
        pb = self.pb
        target = e.answer[2]
        return pb.GetMetricSpecResponse(metricSpecs=[
            pb.MetricSpec(metricName=e.answer[4], targetSize=max(1, math.ceil(target)), targetSizeFloat=target)])

    async def IsActive(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async def body() -> Any:
            e = await self._entry(request, context)
            return self.pb.IsActiveResponse(result=e.answer[0])

        return await self._unary("IsActive", context, body)

    async def GetMetricSpec(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async def body() -> Any:
            return self._spec(await self._entry(request, context))

        return await self._unary("GetMetricSpec", context, body)

    async def GetMetrics(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async def body() -> Any:
            e = await self._entry(request.scaledObjectRef, context)
            if not e.answer[5]:
                await self._abort(context, grpc.StatusCode.UNAVAILABLE, unsized_message(request.scaledObjectRef))
            value = e.answer[1]
            return self.pb.GetMetricsResponse(metricValues=[self.pb.MetricValue(
                metricName=e.answer[4], metricValue=ceil_count(value), metricValueFloat=value)])

        return await self._unary("GetMetrics", context, body)

    async def _stream(self, method: str, request: Any, context: grpc.aio.ServicerContext[Any, Any],
                      render: Callable[[_Entry], Any]) -> None:
        e = await self._entry(request, context)
        key = e.key
        refused = self.stream_cap.enter(key, f"ScaledObject {key[0]}/{key[1]}")
        if refused is not None:
            await self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
        gone = False
        self.streams[e.tid] = self.streams.get(e.tid, 0) + 1
        spec = int(method == "StreamMetricSpec")
        self.spec_streams[e.tid] = self.spec_streams.get(e.tid, 0) + spec
        self.open_streams[method] += 1
        try:
            last: Any = None
            while not self.shutting_down:
                event = e.changed
                msg = render(e)
                if msg != last:
                    await context.write(msg)
                    last = msg
                if self.shutting_down:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=STREAM_IDLE_WAKE_SECONDS)
                if e.tid not in self.by_tid:
                    gone = True  # the scaler process dropped the tracker (refused for size)
                    break
                e = self.by_tid[e.tid]
        finally:
            self.stream_cap.leave(key)
            self.streams[e.tid] -= 1
            self.spec_streams[e.tid] = self.spec_streams.get(e.tid, 0) - spec
            self.open_streams[method] -= 1
        if gone:
            # Ask again: a refused ScaledObject's RESOURCE_EXHAUSTED ends the stream; else it ends OK.
            await self._entry(request, context)

    async def StreamIsActive(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await self._stream("StreamIsActive", request, context, lambda e: self.pb.IsActiveResponse(result=e.answer[0]))

    async def StreamMetricSpec(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if not self.stream_metric_spec:  # --no-stream-metric-spec: KEDA then polls GetMetricSpec
            await self._abort(context, grpc.StatusCode.UNIMPLEMENTED, "StreamMetricSpec is switched off")
        await self._stream("StreamMetricSpec", request, context, self._spec)

    def wake_all(self) -> None:
        for e in self.by_tid.values():
            e.update(e.answer, e.version)

    async def wait_drained(self, quiet: float, within: float) -> None:
        await self.rpcs.wait_drained(quiet, within)


async def front_main(fd: int, options: dict[str, Any]) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from warmscale.proto import externalscaler_pb2_grpc as pb_grpc
    from warmscale.scaler.server_options import SERVICE_NAME, SHUTDOWN_STEP_SECONDS
    from warmscale.scaler.shutdown import Health, stop_grpc_server

    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_connection(sock=sock)
    service = FrontService(writer, float(options.get("idle_seconds") or 600.0),
                           stream_metric_spec=bool(options.get("stream_metric_spec", True)),
                           streams=StreamCap(int(options.get("max_streams") or DEFAULT_MAX_STREAMS),
                                             int(options.get("max_streams_per_scaledobject")
                                                 or DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT)))
    health = Health()
    server = grpc.aio.server(options=[
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ])
    pb_grpc.add_ExternalScalerServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    host, port = options["host"], options["grpc_port"]
    address = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    try:
        if options.get("tls_cert") or options.get("tls_key") or options.get("tls_client_ca"):
            from warmscale.scaler.tls import server_credentials

            if not (options.get("tls_cert") and options.get("tls_key")):
                raise ValueError("--tls-cert and --tls-key go together (--tls-client-ca needs both)")
            bound = server.add_secure_port(address, server_credentials(options["tls_cert"], options["tls_key"],
                                                                      options.get("tls_client_ca")))
        else:
            bound = server.add_insecure_port(address)
        if bound == 0:
            raise OSError(f"cannot bind gRPC on {address}")
        await server.start()
    except Exception as exc:
        writer.write(_frame({"t": "fail", "error": str(exc)}))
        await writer.drain()
        return 2
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    await health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
    writer.write(_frame({"t": "ready", "port": bound}))
    stop: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def pump() -> None:
        try:
            while True:
                msg = await _read(reader)
                if msg.get("t") == "stop":
                    if not stop.done():
                        stop.set_result(float(msg.get("grace") or 0.0))
                else:
                    service.on_message(msg)
        except (asyncio.IncompleteReadError, ConnectionError):
            if not stop.done():
                stop.set_result(0.0)  # the scaler process is gone

    async def reports() -> None:
        while True:
            await asyncio.sleep(REPORT_SECONDS)
            service.report()

    from warmscale.scaler import gctune

    gctune.tune(gctune.FRONT_YOUNG_THRESHOLD)
    tasks = [asyncio.create_task(pump()), asyncio.create_task(reports())]
    grace = await stop
    service.shutting_down = True
    await health.enter_graceful_shutdown()
    service.wake_all()
    await stop_grpc_server(server, service, grace, bound=SHUTDOWN_STEP_SECONDS)
    service.report()
    writer.write(_frame({"t": "stopped"}))
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.drain(), timeout=1.0)
    for t in tasks:
        t.cancel()
    writer.close()
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description="the warmscale RPC front process (started by `warmscale scaler`)")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--options", required=True)
    args = ap.parse_args()
    options = orjson.loads(args.options)
    from warmscale.logs import setup_logging

    setup_logging(str(options.get("log_level") or "info"), json=True)
    # The scaler process handles SIGTERM/SIGINT and tells the front when to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    raise SystemExit(asyncio.run(front_main(args.fd, options)))


if __name__ == "__main__":
    main()
