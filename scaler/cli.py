"""``warmscale scaler``: the KEDA external scaler process.

    warmscale scaler --host 0.0.0.0 --grpc-port 9090 --metrics-port 9091 [--redis-url redis://...]
                     [--tls-cert cert.pem --tls-key key.pem [--tls-client-ca ca.pem]]
                     [--tracker-idle-seconds 600] [--grace-seconds 10]
                     [--max-trackers 4000] [--max-trackers-per-namespace 2000] [--allow-targets CIDRS,HOSTS]
                     [--metrics-host ADDR] [--metrics-token-file FILE] [--max-streams 8000]
                     [--max-payload-series 100000] [--parse-worker-memory-bytes N] (and the budgets: --help)
                     [--kubeconfig FILE | --no-kubernetes]

SIGTERM/SIGINT trigger a graceful shutdown (see :meth:`scaler.server.ScalerServer.stop`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from warmscale.cliargs import non_negative_float, non_negative_int, port, positive_float, positive_int, readable_file
from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.streamcap import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT
from warmscale.scaler.tracker import ScaledObjectKey
from warmscale.signals.model import ReplicaReading, Snapshot
from warmscale.signals.sources.budget import DEFAULT_WORKER_MEMORY_BYTES, Budget, PayloadLimits, SizeRefused

log = logging.getLogger("warmscale.scaler")
# The port every manifest and the chart scrape (manifests/base, charts/warmscale).
METRICS_PORT = 9091


"""(namespace, ScaledObject name)."""


class SourcesReader:
    """The production :data:`~scaler.tracker.SnapshotReader`: ``signals.sources`` collectors, one per
    distinct ScalerConfig (per ScaledObject and config with Kubernetes), sharing one aiohttp session;
    collectors unused for ``evict_after`` seconds are closed.

    With ``discovery`` (a :class:`signals.sources.pods.KubeDiscovery`), every ScaledObject gets a
    :class:`~signals.sources.pods.PodEndpoints`: it serves ``podSelector`` (pods scraped directly) and
    fills the snapshot's ready/starting/current replica counts (pods of ``podSelector``, else of the
    ScaledObject's ``scaleTargetRef``), whatever the signal sources are, and the replicas' GPU product
    (:mod:`signals.gpus`; ``gpuProduct`` overrides it). A discovery failure is a
    source error; the other sources keep working."""

    def __init__(self, evict_after: float = 300.0, *, discovery: Any = None, parse_workers: int | None = None,
                 guard: Any = None, limits: PayloadLimits | None = None,
                 parse_worker_memory: int | None = DEFAULT_WORKER_MEMORY_BYTES) -> None:
        from warmscale.signals.sources.parsepool import ParsePool
        from warmscale.signals.sources.shared import SharedReads

        self._session: Any = None
        # One read in flight per URL / query for the whole process (ScaledObjects over the same pods
        # share it), and payload parsing in worker processes: no source of one ScaledObject can
        # hold a thread, a connection slot or the event loop that another one needs.
        self.shared = SharedReads()
        self.parser = ParsePool(parse_workers, memory_bytes=parse_worker_memory)
        # Payload memory (signals.sources.budget): one budget for the process, one per collector (per
        # ScaledObject with Kubernetes; per distinct config without). A payload past the per-payload
        # series limit refuses the ScaledObject (SizeRefused from read()); past a budget's sums, that
        # replica is unknown for that read.
        self.limits = limits if limits is not None else PayloadLimits()
        self.budget = self.limits.process_budget()
        self._collectors: dict[tuple[ScaledObjectKey | None, ScalerConfig], tuple[Any, Any, float]] = {}
        self._budgets: dict[tuple[ScaledObjectKey | None, ScalerConfig], Budget] = {}
        self._evict_after = evict_after
        self._last_sweep = time.monotonic()
        self.discovery = discovery
        # --allow-targets (a scaler.target_guard.TargetGuard): every connection of the session and of
        # the Redis queue sources is checked.
        self.guard = guard

    async def __call__(self, cfg: ScalerConfig, now: float, scope: ScaledObjectKey) -> Snapshot:
        return await self.read(cfg, now, scope)

    async def read(self, cfg: ScalerConfig, now: float, scope: ScaledObjectKey | None = None) -> Snapshot:
        """One snapshot for ``cfg``; ``scope`` (namespace, ScaledObject) enables pod discovery."""
        import aiohttp

        from warmscale.scaler.sources import build_collector

        who = f"ScaledObject {scope[0]}/{scope[1]}" if scope is not None else "the ScaledObject"  # (its budget)
        if self._session is None:
            # No connection cap: a hung endpoint holds one connection (one read in flight per URL),
            # never a slot that the other ScaledObjects' scrapes wait for.
            factory = self.guard.socket_factory if self.guard is not None else None
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                limit=0, ttl_dns_cache=30, socket_factory=factory))
        if self.guard is not None:
            await self.guard.refresh_hosts()
        namespace = scope[0] if scope is not None else None
        if self.discovery is None:
            scope = None
        key = (scope, cfg)
        entry = self._collectors.get(key)
        if entry is not None:
            collector, provider = entry[0], entry[1]
            budget = self._budgets[key]
        else:
            provider = None
            if scope is not None:
                provider = self.discovery.provider(scope[0], scope[1], pod_selector=cfg.pod_selector,
                                                   metrics_port=cfg.metrics_port, metrics_path=cfg.metrics_path)
            budget = self._budgets[key] = self.limits.scaledobject_budget(who)
            collector = build_collector(cfg, session=self._session, pod_endpoints=provider, shared=self.shared,
                                        parse=self.parser.parse,
                                        allows=self.guard.allows if self.guard is not None else None,
                                        budgets=(budget, self.budget))
        self._collectors[key] = (collector, provider, time.monotonic())
        await self._sweep()
        snapshot: Snapshot = await collector.collect(now)
        if budget.refused is not None:
            # Read no more for it: the tracker refuses the ScaledObject (scaler.tracker, SizeRefused).
            self._collectors.pop(key, None)
            self._budgets.pop(key, None)
            await self._close(collector, provider)
            raise SizeRefused(budget.refused)
        if provider is not None:
            snapshot = await self._with_counts(snapshot, provider, cfg)
        return with_attributed_gpus(snapshot, namespace)

    async def awake_sleepers(self, cfg: ScalerConfig, urls: Sequence[str], now: float) -> tuple[ReplicaReading, ...]:
        """The awake hot-tier sleepers at ``urls`` (the hot status's ``awake_urls``), read through this
        reader's session, parser and ``--allow-targets`` like the replicas (scaler/sources.py)."""
        from warmscale.scaler.sources import read_awake_sleepers

        if self._session is None:  # the first tick makes it; a read before then has nothing to read with
            return ()
        if self.guard is not None:
            await self.guard.refresh_hosts()
        return await read_awake_sleepers(self._session, cfg, urls, now, parse=self.parser.parse, budgets=(self.budget,))

    async def onset(self, cfg: ScalerConfig, scope: ScaledObjectKey) -> float | None:
        """The summed length of ``cfg``'s Redis queues and of its endpoint picker's flow-control queue
        (``eppAddress``), from the sources of its collector (their own connections; ``--allow-targets``
        checked as for a tick): the cheap onset read between ticks (scaler/onset.py). None: no collector
        yet (the first tick makes it), no queue, or any read failed (unknown)."""
        from warmscale.signals.sources.gateway import EppScrapeSource
        from warmscale.signals.sources.redis_queue import RedisQueueSource

        entry = self._collectors.get((scope if self.discovery is not None else None, cfg))
        if entry is None:
            return None
        queues = [s for s in entry[0].sources if isinstance(s, RedisQueueSource)]
        pickers = [s for s in entry[0].sources if isinstance(s, EppScrapeSource)]
        if not queues and not pickers:
            return None
        total = 0.0
        try:
            async with asyncio.timeout(cfg.scrape_timeout_seconds):
                for q in queues:
                    total += await q.length()
                for p in pickers:  # the picker's flow-control queue: its held requests
                    for g in (await p.read(time.time())).gateways:
                        if g.signal is None:
                            return None
                        total += g.signal.queue
        except Exception:  # unknown: no onset (a Redis restart, a timeout, a wrong key type, a bad payload)
            return None
        return total

    @staticmethod
    async def _with_counts(snapshot: Snapshot, provider: Any, cfg: ScalerConfig) -> Snapshot:
        from warmscale.signals.sources.pods import DiscoveryError

        try:
            counts = await provider.counts()
        except DiscoveryError as exc:
            if cfg.pod_selector or cfg.metrics_port:  # the pods source already reported the same failure
                return snapshot
            return replace(snapshot, source_errors=(*snapshot.source_errors, f"kubernetes: {exc}"))
        target = provider.target.name if getattr(provider, "target", None) is not None else None
        return replace(snapshot, ready_replicas=counts.ready, starting_replicas=counts.starting,
                       current_replicas=counts.current if counts.current is not None else snapshot.current_replicas,
                       target_name=target, gpu_product=counts.gpu_product or snapshot.gpu_product,
                       pods=counts.pods)

    async def _sweep(self) -> None:
        mono = time.monotonic()
        if mono - self._last_sweep < 60.0:
            return
        self._last_sweep = mono
        for key, (collector, provider, used) in list(self._collectors.items()):
            if mono - used > self._evict_after:
                del self._collectors[key]
                self._budgets.pop(key, None)
                await self._close(collector, provider)

    @staticmethod
    async def _close(collector: Any, provider: Any) -> None:
        with contextlib.suppress(Exception):
            await collector.aclose()
        if provider is not None:
            with contextlib.suppress(Exception):
                await provider.aclose()

    async def aclose(self) -> None:
        for collector, provider, _ in self._collectors.values():
            await self._close(collector, provider)
        self._collectors.clear()
        self._budgets.clear()
        await self.shared.aclose()
        self.parser.close()
        if self._session is not None:
            await self._session.close()
            self._session = None


def with_attributed_gpus(snapshot: Snapshot, namespace: str | None) -> Snapshot:
    """Narrow the dcgm-exporter readings to the GPUs DCGM attributes to this ScaledObject's pods
    (the API's pods, else the replicas' names as the sources report them: pod names for Prometheus
    and pod discovery). Neither known: the GPUs are unknown (``None``)."""
    from warmscale.signals.engines.dcgm import attribute

    if snapshot.gpus is None:
        return snapshot
    pods = snapshot.pods if snapshot.pods is not None else tuple(r.replica for r in snapshot.replicas)
    if snapshot.pods is None and not pods:
        return replace(snapshot, gpus=None)
    return replace(snapshot, gpus=attribute(snapshot.gpus, namespace, pods))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (gRPC and metrics)")
    parser.add_argument("--grpc-port", type=port(), default=9090,
                        help="KEDA external scaler gRPC port (0: any free port)")
    parser.add_argument("--metrics-port", type=port(off=-1), default=METRICS_PORT,
                        help="HTTP port for /metrics, /decisions and /healthz (-1 disables)")
    parser.add_argument("--metrics-host", default=None,
                        help="address the HTTP endpoint (/metrics, /decisions, /healthz) listens on (default: --host); "
                             "they list every tracked namespace and ScaledObject")
    parser.add_argument("--metrics-token-file", default=None,
                        help="require 'Authorization: Bearer <token>' on /metrics and /decisions, the token being "
                             "this file's content (re-read when it changes; /healthz stays open)")
    parser.add_argument("--redis-url", default=None,
                        help="share state, decisions and compute leases through Redis (default: in-memory)")
    parser.add_argument("--tls-cert", default=None, type=readable_file, help="server certificate chain (PEM)")
    parser.add_argument("--tls-key", default=None, type=readable_file, help="server private key (PEM)")
    parser.add_argument("--tls-client-ca", default=None, type=readable_file,
                        help="CA bundle (PEM) for client certificates; makes client certificates mandatory (mTLS)")
    parser.add_argument("--tracker-idle-seconds", type=positive_float, default=600.0,
                        help="drop a ScaledObject's tracker when KEDA has not asked about it for this long")
    parser.add_argument("--grace-seconds", type=non_negative_float, default=10.0,
                        help="on SIGTERM, how long in-flight RPCs may take before they are cancelled")
    parser.add_argument("--instance-id", default=None, help="lease owner id (default: hostname-pid-random)")
    parser.add_argument("--kubeconfig", default=None, type=readable_file,
                        help="Kubernetes API access for pod discovery (default: in-cluster, then $KUBECONFIG or "
                             "~/.kube/config, else none)")
    parser.add_argument("--max-trackers", type=positive_int, default=4000,
                        help="most ScaledObjects (trackers) this scaler tracks; new ones beyond get RESOURCE_EXHAUSTED")
    parser.add_argument("--max-trackers-per-namespace", type=positive_int, default=2000,
                        help="most trackers per namespace; new ones beyond get RESOURCE_EXHAUSTED")
    parser.add_argument("--max-streams", type=positive_int, default=DEFAULT_MAX_STREAMS,
                        help="most open StreamIsActive/StreamMetricSpec streams; new ones beyond get "
                             "RESOURCE_EXHAUSTED (KEDA opens one per method per ScaledObject)")
    parser.add_argument("--max-streams-per-scaledobject", type=positive_int,
                        default=DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT,
                        help="most open streams per ScaledObject (and trigger metadata); new ones beyond get "
                             "RESOURCE_EXHAUSTED")
    parser.add_argument("--max-payload-series", type=positive_int, default=PayloadLimits.payload_series,
                        help="most series one metrics payload may have (counted as it is read, before parsing); "
                             "a ScaledObject reading a larger one is refused: RESOURCE_EXHAUSTED and an Event")
    parser.add_argument("--max-scaledobject-payload-bytes", type=positive_int, default=PayloadLimits.scaledobject_bytes,
                        help="most payload bytes one ScaledObject's scrapes hold at once (read, then parsed); "
                             "beyond, a read fails (that replica unknown for that decision)")
    parser.add_argument("--max-scaledobject-series", type=positive_int, default=PayloadLimits.scaledobject_series,
                        help="most series one ScaledObject's payloads hold at once; beyond, a read fails "
                             "(that replica unknown for that decision)")
    parser.add_argument("--max-payload-bytes-in-flight", type=positive_int, default=PayloadLimits.process_bytes,
                        help="most payload bytes all scrapes of this scaler hold at once; beyond, a read fails "
                             "(that replica unknown for that decision)")
    parser.add_argument("--max-series-in-flight", type=positive_int, default=PayloadLimits.process_series,
                        help="most series all payloads of this scaler hold at once; beyond, a read fails "
                             "(that replica unknown for that decision)")
    parser.add_argument("--parse-worker-memory-bytes", type=non_negative_int, default=DEFAULT_WORKER_MEMORY_BYTES,
                        help="address-space cap of each payload parse worker (RLIMIT_AS; 0: none); a payload "
                             "needing more is unparseable (that replica unknown)")
    parser.add_argument("--allow-targets", default=None,
                        help="comma-separated CIDRs, addresses and host names the scaler may connect to "
                             "(endpoints, pods, Prometheus, Redis queues), checked on resolved addresses; "
                             "anything else is INVALID_ARGUMENT; the word 'private' stands for the pod/service "
                             "ranges (RFC 1918, 100.64.0.0/10, fc00::/7; the shipped install's value) "
                             "(default: no restriction)")
    parser.add_argument("--rpc-process", action=argparse.BooleanOptionalAction, default=True,
                        help="answer KEDA's gRPC from a process of its own, from a mirror of the decisions "
                             "(default; RPCs never wait behind ticks and scrapes). --no-rpc-process: one process")
    parser.add_argument("--tick-nice", type=int, default=10, choices=range(20), metavar="0-19",
                        help="with --rpc-process: the scaler process (ticks, scrapes, store, /metrics) lowers its "
                             "CPU priority by this nice value once the RPC front runs, so that when the container "
                             "is short of CPU KEDA's RPCs are answered first (0: the same priority)")
    parser.add_argument("--no-stream-metric-spec", action="store_true",
                        help="answer StreamMetricSpec with UNIMPLEMENTED, so KEDA polls GetMetricSpec instead "
                             "(for comparisons; the stream saves KEDA one GetMetricSpec call per poll)")
    parser.add_argument("--no-kubernetes", action="store_true",
                        help="never use the Kubernetes API (podSelector then reports a source error)")


async def serve(args: argparse.Namespace) -> int:
    from warmscale.scaler.server import ScalerServer
    from warmscale.scaler.server_options import ServerOptions

    options = ServerOptions(
        host=args.host,
        grpc_port=args.grpc_port,
        metrics_port=None if args.metrics_port is not None and args.metrics_port < 0 else args.metrics_port,
        metrics_host=getattr(args, "metrics_host", None),
        metrics_token_file=getattr(args, "metrics_token_file", None),
        redis_url=args.redis_url,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        tracker_idle_seconds=args.tracker_idle_seconds,
        grace_seconds=args.grace_seconds,
        instance_id=args.instance_id,
        max_trackers=args.max_trackers,
        max_trackers_per_namespace=args.max_trackers_per_namespace,
        rpc_process=bool(getattr(args, "rpc_process", True)),
        tick_nice=int(getattr(args, "tick_nice", 10)),
        stream_metric_spec=not getattr(args, "no_stream_metric_spec", False),
        max_streams=int(getattr(args, "max_streams", DEFAULT_MAX_STREAMS)),
        max_streams_per_scaledobject=int(getattr(args, "max_streams_per_scaledobject",
                                                 DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT)),
    )
    from warmscale.scaler.target_guard import TargetGuard

    try:
        guard = TargetGuard.from_flag(args.allow_targets)
    except ValueError as exc:
        log.error("cannot start the scaler", extra={"error": str(exc)})
        print(f"warmscale scaler: {exc}", file=sys.stderr)  # the message names the flag
        return 2
    sizes = ("max_payload_series", "max_scaledobject_payload_bytes", "max_scaledobject_series",
             "max_payload_bytes_in_flight", "max_series_in_flight")
    bad = next((n for n in sizes if getattr(args, n) < 1), None)
    if bad is not None or args.parse_worker_memory_bytes < 0:
        flag = "--" + (bad or "parse_worker_memory_bytes").replace("_", "-")
        log.error("cannot start the scaler", extra={"error": f"{flag} must be positive"})
        return 2
    if options.max_streams < 1 or options.max_streams_per_scaledobject < 1:
        log.error("cannot start the scaler", extra={"error": "--max-streams* must be at least 1"})
        return 2
    discovery, api = None, None
    if not getattr(args, "no_kubernetes", False):
        try:
            discovery, api = await make_discovery(getattr(args, "kubeconfig", None))
        except Exception as exc:
            log.error("cannot load the kubeconfig", extra={"kubeconfig": args.kubeconfig, "error": str(exc)})
            return 2
    limits = PayloadLimits(payload_series=args.max_payload_series,
                           scaledobject_bytes=args.max_scaledobject_payload_bytes,
                           scaledobject_series=args.max_scaledobject_series,
                           process_bytes=args.max_payload_bytes_in_flight, process_series=args.max_series_in_flight)
    # The wiring point of the real signals: every tracker reads its snapshots through this reader.
    reader = SourcesReader(discovery=discovery, guard=guard, limits=limits,
                           parse_worker_memory=args.parse_worker_memory_bytes or None)
    events = None
    if api is not None:
        from warmscale.scaler.kube import ScaledObjectEvents

        events = ScaledObjectEvents(api)
    server = ScalerServer(options, reader, guard=guard, on_refused=events)
    if events is not None:
        server.manager.on_decision = events.decision
    from warmscale.scaler import gctune

    gctune.tune()  # start-up is done: see scaler/gctune.py
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except (OSError, ValueError) as exc:
        log.error("cannot start the scaler", extra={"error": str(exc)})
        await server.stop(0)
        await _close_reader(reader, discovery, api)
        return 2
    await stop.wait()
    await server.stop()
    await _close_reader(reader, discovery, api)
    return 0


async def make_discovery(kubeconfig: str | None) -> tuple[Any, Any]:
    """``(KubeDiscovery, ApiClient)``, or ``(None, None)`` without API configuration."""
    from warmscale.scaler.kube import load_api_client

    loaded = await load_api_client(kubeconfig)
    if loaded is None:
        log.info("no Kubernetes API configuration: pod discovery off (static endpoints, Prometheus, Redis)")
        return None, None
    api, source = loaded
    from warmscale.signals.sources.pods import KubeDiscovery

    log.info("Kubernetes pod discovery on", extra={"config": source})
    return KubeDiscovery(api), api


async def _close_reader(reader: SourcesReader, discovery: Any, api: Any) -> None:
    await reader.aclose()
    if discovery is not None:
        await discovery.aclose()
    if api is not None:
        await api.close()


def run(args: argparse.Namespace) -> int:
    rc = asyncio.run(serve(args))
    # Everything the scaler opened is closed by now. The interpreter's own teardown (gRPC core's
    # poller and completion queues, module finalisation) takes another 0.5-1.2 s on this kind of
    # machine: skip it, so the process exits right after its last RPC (a rolling update waits on it).
    logging.shutdown()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(rc)
