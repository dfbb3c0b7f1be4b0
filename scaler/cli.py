"""``warmscale scaler``: the KEDA external scaler process.

    warmscale scaler --host 0.0.0.0 --grpc-port 9090 --metrics-port 8080 [--redis-url redis://...]
                     [--tls-cert cert.pem --tls-key key.pem [--tls-client-ca ca.pem]]
                     [--tracker-idle-seconds 600] [--grace-seconds 10]

SIGTERM/SIGINT trigger a graceful shutdown (see :meth:`scaler.server.ScalerServer.stop`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
from typing import Any

from scaler.config import ScalerConfig
from signals.model import Snapshot

log = logging.getLogger("warmscale.scaler")


class SourcesReader:
    """The production :data:`~scaler.tracker.SnapshotReader`: ``signals.sources`` collectors, one per
    distinct ScalerConfig (they keep connections), sharing one aiohttp session; collectors unused for
    ``evict_after`` seconds are closed."""

    def __init__(self, evict_after: float = 300.0) -> None:
        self._session: Any = None
        self._collectors: dict[ScalerConfig, tuple[Any, float]] = {}
        self._evict_after = evict_after
        self._last_sweep = time.monotonic()

    async def __call__(self, cfg: ScalerConfig, now: float) -> Snapshot:
        import aiohttp

        from signals.sources import build_collector

        if self._session is None:
            self._session = aiohttp.ClientSession()
        entry = self._collectors.get(cfg)
        collector = entry[0] if entry is not None else build_collector(cfg, session=self._session)
        self._collectors[cfg] = (collector, time.monotonic())
        await self._sweep()
        snapshot: Snapshot = await collector.collect(now)
        return snapshot

    async def _sweep(self) -> None:
        mono = time.monotonic()
        if mono - self._last_sweep < 60.0:
            return
        self._last_sweep = mono
        for cfg, (collector, used) in list(self._collectors.items()):
            if mono - used > self._evict_after:
                del self._collectors[cfg]
                with contextlib.suppress(Exception):
                    await collector.aclose()

    async def aclose(self) -> None:
        for collector, _ in self._collectors.values():
            with contextlib.suppress(Exception):
                await collector.aclose()
        self._collectors.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (gRPC and metrics)")
    parser.add_argument("--grpc-port", type=int, default=9090, help="KEDA external scaler gRPC port")
    parser.add_argument("--metrics-port", type=int, default=8080,
                        help="HTTP port for /metrics, /decisions and /healthz (-1 disables)")
    parser.add_argument("--redis-url", default=None,
                        help="share state, decisions and compute leases through Redis (default: in-memory)")
    parser.add_argument("--tls-cert", default=None, help="server certificate chain (PEM)")
    parser.add_argument("--tls-key", default=None, help="server private key (PEM)")
    parser.add_argument("--tls-client-ca", default=None,
                        help="CA bundle (PEM) for client certificates; makes client certificates mandatory (mTLS)")
    parser.add_argument("--tracker-idle-seconds", type=float, default=600.0,
                        help="drop a ScaledObject's tracker when KEDA has not asked about it for this long")
    parser.add_argument("--grace-seconds", type=float, default=10.0,
                        help="on SIGTERM, how long in-flight RPCs may take before they are cancelled")
    parser.add_argument("--instance-id", default=None, help="lease owner id (default: hostname-pid-random)")


async def serve(args: argparse.Namespace) -> int:
    from scaler.server import ScalerServer, ServerOptions

    options = ServerOptions(
        host=args.host,
        grpc_port=args.grpc_port,
        metrics_port=None if args.metrics_port is not None and args.metrics_port < 0 else args.metrics_port,
        redis_url=args.redis_url,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        tracker_idle_seconds=args.tracker_idle_seconds,
        grace_seconds=args.grace_seconds,
        instance_id=args.instance_id,
    )
    # The wiring point of the real signals: every tracker reads its snapshots through this reader.
    reader = SourcesReader()
    server = ScalerServer(options, reader)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except (OSError, ValueError) as exc:
        log.error("cannot start the scaler", extra={"error": str(exc)})
        await server.stop(0)
        await reader.aclose()
        return 2
    await stop.wait()
    await server.stop()
    await reader.aclose()
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(serve(args))
