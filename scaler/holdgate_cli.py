"""``warmscale hold-gateway``: the hold gateway (scaler/holdgate.py) as a process, one per workload.

    warmscale hold-gateway --namespace NS --workload NAME --redis-url redis://... \\
        [--queue-key KEY] [--queue-url redis://...] [--store-prefix warmscale] \\
        [--backend URL ...] [--service NAME [--service-port NAME|NUMBER] [--kubeconfig FILE]] \\
        [--host 0.0.0.0] [--port 8080] [--hold-max-seconds 600] [--hold-max-requests 1000] \\
        [--drain-delay-seconds 2] [--grace-seconds 60]

It serves ``/v1/completions`` and ``/v1/chat/completions`` (streamed answers passed through as they
come), ``/healthz`` (alive) and ``/readyz`` (ready after the first hot-status read, 503 once it drains).
The workload's own ready replicas are the ``--backend`` URLs plus, with ``--service``, the ready
endpoints of that Service's EndpointSlices (scaler/endpointslices.py); its awake sleepers come from
the hot status in the store (``--redis-url``, the same Redis and prefix as the scaler and the
controller).

SIGTERM/SIGINT: ``/readyz`` turns 503 at once; ``--drain-delay-seconds`` later (the Service stops
sending it new requests) the listener closes, the requests held or in flight get up to
``--grace-seconds`` to finish, then the rest are cancelled and the process exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from typing import Any
from urllib.parse import urlsplit

from warmscale.cliargs import UsageError, non_negative_float, port, positive_float, positive_int, readable_file
from warmscale.scaler.holdroute import HOLD_MAX_REQUESTS, HOLD_MAX_SECONDS

log = logging.getLogger("warmscale.holdgate")

# The gateway's HTTP port (an OpenAI-style front; the engines' own 8000 stays free on a shared node).
DEFAULT_PORT = 8080
# The queue key when none is given: the ScaledObject's ``redisQueue`` must name the same one.
QUEUE_KEY_TEMPLATE = "warmscale:hold:{namespace}:{workload}"
# After SIGTERM, before the listener closes: the time the endpoints controller and kube-proxy take to
# stop sending new connections to a pod that is not ready (a couple of seconds on a quiet cluster).
DEFAULT_DRAIN_DELAY_S = 2.0
# After the listener closes: how long held and in-flight requests (streams too) may still take. Below
# the manifest's terminationGracePeriodSeconds (90) minus the drain delay.
DEFAULT_GRACE_S = 60.0
# Connecting to a backend (a reachable pod accepts within milliseconds; an unreachable one is skipped
# and the request held). Reading has no bound of its own: a stream lasts as long as its generation.
CONNECT_SECONDS = 5.0


def redis_url(text: str) -> str:
    if urlsplit(text).scheme not in ("redis", "rediss", "unix"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Redis URL (redis://HOST:PORT[/DB], rediss://, unix://)")
    return text


def backend_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) base URL (http://HOST:PORT)")
    if parts.path.strip("/") or parts.query:
        raise argparse.ArgumentTypeError(f"{text!r}: give the base URL only (the request's path is appended)")
    return text.rstrip("/")


def dns_label(text: str) -> str:
    """A Kubernetes object name (namespace, workload, Service): lowercase RFC 1123."""
    ok = 0 < len(text) <= 253 and text[0].isalnum() and text[-1].isalnum() and all(
        c.islower() or c.isdigit() or c in "-." for c in text)
    if not ok:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes name (lowercase letters, digits, '-', '.')")
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", required=True, type=dns_label, help="the workload's namespace")
    parser.add_argument("--workload", required=True, type=dns_label,
                        help="the workload's name (its hot status in the store: warmscale:hot:NS/NAME)")
    parser.add_argument("--redis-url", required=True, type=redis_url,
                        help="the store the scaler and the controller share (hot status); also the queue's "
                             "Redis unless --queue-url")
    parser.add_argument("--store-prefix", default="warmscale", help="the store's key prefix (the scaler's)")
    parser.add_argument("--queue-url", default=None, type=redis_url,
                        help="the Redis of the queue the ScaledObject names as redisAddress (default: --redis-url)")
    parser.add_argument("--queue-key", default=None,
                        help="the list the ScaledObject names as redisQueue: a token per held request "
                             f"(default: {QUEUE_KEY_TEMPLATE.format(namespace='NS', workload='NAME')})")
    parser.add_argument("--backend", action="append", default=[], type=backend_url, metavar="URL",
                        help="an own replica's base URL, always routed (repeat the flag for several)")
    parser.add_argument("--service", default=None, type=dns_label,
                        help="watch this Service's EndpointSlices for the own ready replicas (Kubernetes API: "
                             "list, watch endpointslices in --namespace)")
    parser.add_argument("--service-port", default=None, metavar="NAME|NUMBER",
                        help="with --service: the port's name or number (default: the slices' first port)")
    parser.add_argument("--kubeconfig", default=None, type=readable_file,
                        help="with --service: Kubernetes API access (default: in-cluster, then $KUBECONFIG or "
                             "~/.kube/config)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=port(), default=DEFAULT_PORT, help="HTTP port (0: any free port)")
    parser.add_argument("--hold-max-seconds", type=positive_float, default=HOLD_MAX_SECONDS,
                        help="a request held this long without a backend gets 504")
    parser.add_argument("--hold-max-requests", type=positive_int, default=HOLD_MAX_REQUESTS,
                        help="requests held at once; one more gets 429 + Retry-After")
    parser.add_argument("--drain-delay-seconds", type=non_negative_float, default=DEFAULT_DRAIN_DELAY_S,
                        help="on SIGTERM, how long /readyz reports 503 before the listener closes")
    parser.add_argument("--grace-seconds", type=non_negative_float, default=DEFAULT_GRACE_S,
                        help="on SIGTERM, once the listener closed, how long held and in-flight requests may "
                             "still take before they are cancelled")


async def serve(args: argparse.Namespace) -> int:
    import aiohttp
    import redis.asyncio as aioredis
    from aiohttp import web

    from warmscale.scaler.holdgate import CALL_SECONDS, HoldGateway
    from warmscale.scaler.store import RedisStore

    if (args.service_port is not None or args.kubeconfig is not None) and args.service is None:
        flag = "--service-port" if args.service_port is not None else "--kubeconfig"
        raise UsageError(f"{flag} needs --service")
    workload = f"{args.namespace}/{args.workload}"
    queue_key = args.queue_key or QUEUE_KEY_TEMPLATE.format(namespace=args.namespace, workload=args.workload)
    static: tuple[str, ...] = tuple(dict.fromkeys(args.backend))
    endpoints: Any = None
    api: Any = None
    if args.service is not None:
        from warmscale.scaler.kube import load_api_client

        try:
            loaded = await load_api_client(args.kubeconfig)
        except Exception as exc:
            raise UsageError(f"--kubeconfig {args.kubeconfig}: {exc}") from None
        if loaded is None:
            raise UsageError("--service needs the Kubernetes API: none configured (in-cluster, $KUBECONFIG, "
                             "~/.kube/config or --kubeconfig)")
        api = loaded[0]

    store = RedisStore(args.redis_url, prefix=args.store_prefix)
    queue = aioredis.from_url(args.queue_url or args.redis_url, socket_timeout=CALL_SECONDS,
                              socket_connect_timeout=CALL_SECONDS)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS),
                                    connector=aiohttp.TCPConnector(limit=0))

    def own() -> tuple[str, ...]:
        found = endpoints.urls() if endpoints is not None else ()
        return (*static, *(u for u in found if u not in static))

    gateway = HoldGateway(store, queue, queue_key, args.namespace, args.workload, session, own=own,
                          max_seconds=args.hold_max_seconds, max_requests=args.hold_max_requests)
    watching: asyncio.Task[None] | None = None
    if api is not None:
        from warmscale.scaler.endpointslices import ServiceEndpoints

        endpoints = ServiceEndpoints(api, args.namespace, args.service, args.service_port, on_change=gateway.notify)
        watching = asyncio.create_task(endpoints.run(), name=f"endpointslices {args.namespace}/{args.service}")
    # handler_cancellation: a client that gives up takes its request out of the hold (and its token off
    # the queue) at once, not at --hold-max-seconds.
    runner = web.AppRunner(gateway.app(), access_log=None, shutdown_timeout=args.grace_seconds,
                           handler_cancellation=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    rc = 0
    try:
        await runner.setup()
        site = web.TCPSite(runner, args.host, args.port)
        try:
            await site.start()
        except OSError as exc:
            log.error("cannot listen", extra={"host": args.host, "port": args.port, "error": str(exc)})
            rc = 2
        else:
            bound = [s.getsockname()[:2] for s in (site._server.sockets if site._server else ())]  # type: ignore[attr-defined]
            log.info("hold gateway listening", extra={
                "workload": workload, "listen": [f"{h}:{p}" for h, p in bound], "queue": queue_key,
                "backends": list(static), "service": args.service, "hold_max_seconds": args.hold_max_seconds,
                "hold_max_requests": args.hold_max_requests})
            await stop.wait()
            gateway.draining = True
            log.info("draining", extra={"workload": workload, "held": gateway.held,
                                        "in_flight": sum(gateway.in_flight.values()),
                                        "drain_delay_s": args.drain_delay_seconds, "grace_s": args.grace_seconds})
            await asyncio.sleep(args.drain_delay_seconds)
    finally:
        await runner.cleanup()  # closes the listener, waits up to the grace for the handlers
        log.info("hold gateway stopped", extra={"workload": workload, "answered": gateway.answered})
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        await session.close()
        await store.close()
        await queue.aclose()
        if api is not None:
            await api.close()
    return rc


def run(args: argparse.Namespace) -> int:
    return asyncio.run(serve(args))
