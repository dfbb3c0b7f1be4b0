"""The demo's event loop: traffic, engines, the real scaler, KEDA+HPA emulation, progress, plot."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
from aiohttp import web

from proto import externalscaler_pb2 as pb
from scaler.config import ScalerConfig
from scaler.server import ScalerServer, ServerOptions
from signals.model import Snapshot
from signals.sources import Endpoint, build_collector
from warmscale.demo.actuation import KedaHpaEmulator
from warmscale.demo.burst import DEFAULT_TRACE, Arrival, burst, load_trace, shared_traces_dir
from warmscale.demo.engine import Request
from warmscale.demo.fleet import Fleet

TICK_S = 0.05


@dataclass(frozen=True)
class DemoOptions:
    trace: Path
    speed: float = 2.5
    span: float = 220.0
    lead: float = 120.0
    startup: float = 8.0
    max_replicas: int = 8
    slo_ttft: float = 1.0
    plot: str = "warmscale-demo.png"
    json: str | None = None
    quiet: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoOptions:
        trace = Path(args.trace) if args.trace else shared_traces_dir() / DEFAULT_TRACE
        return cls(trace=trace, speed=args.speed, span=args.span, lead=args.lead, startup=args.startup,
                   max_replicas=args.max_replicas, slo_ttft=args.slo_ttft, plot=args.plot, json=args.json,
                   quiet=args.quiet)

    def metadata(self) -> dict[str, str]:
        """The ScaledObject trigger metadata the demo's KEDA emulation sends."""
        return {
            "engine": "vllm",
            "podSelector": "app=vllm-demo",
            "minReplicas": "1",
            "maxReplicas": str(self.max_replicas),
            "targetInflightPerReplica": "12",
            "targetWaitingPerReplica": "2",
            "ttftSloSeconds": str(self.slo_ttft),
            "ttftWindowSeconds": "10",
            "timeToReadySeconds": str(self.startup),
            "trendWindowSeconds": "10",
            "scaleDownStabilizationSeconds": "20",
            "scrapeIntervalSeconds": "0.5",
            "scrapeTimeoutSeconds": "1",
            "stalenessSeconds": "5",
        }


class FleetEndpoints:
    """The demo's pod discovery: the fleet's replicas that are up."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    async def endpoints(self) -> Sequence[Endpoint]:
        now = time.monotonic()
        return [Endpoint(replica=url.rsplit("/", 2)[-2], url=url) for url in self.fleet.endpoints(now)]


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def run_demo(opts: DemoOptions) -> dict[str, Any]:
    arrivals = burst(load_trace(opts.trace), opts.lead, opts.span, opts.speed)
    fleet = Fleet(startup_s=opts.startup)
    runner = web.AppRunner(fleet.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fleet.base_url = f"http://127.0.0.1:{port}"
    fleet.scale_to(1, time.monotonic(), startup_s=0.0)

    session = aiohttp.ClientSession()
    discovery = FleetEndpoints(fleet)
    collectors: dict[ScalerConfig, Any] = {}

    async def reader(cfg: ScalerConfig, now: float, scope: tuple[str, str]) -> Snapshot:
        if cfg not in collectors:
            collectors[cfg] = build_collector(cfg, session=session, pod_endpoints=discovery)
        snap: Snapshot = await collectors[cfg].collect(now)
        ready, starting = fleet.counts(time.monotonic())
        return replace(snap, ready_replicas=ready, starting_replicas=starting, current_replicas=fleet.spec_replicas)

    server = ScalerServer(ServerOptions(host="127.0.0.1", grpc_port=0, metrics_port=None), reader)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    ref = pb.ScaledObjectRef(name="vllm-demo", namespace="demo", scalerMetadata=opts.metadata())
    keda = KedaHpaEmulator(channel, ref, fleet, min_replicas=1, max_replicas=opts.max_replicas)
    stop = asyncio.Event()
    keda_task = asyncio.create_task(keda.run(stop))

    timeline: list[dict[str, Any]] = []
    ttfts: list[float] = []
    recent: list[tuple[float, float]] = []
    start = time.monotonic()
    end_at = (arrivals[-1].at if arrivals else 0.0) + 2.0
    i = 0
    next_report = 0.0
    out = sys.stdout
    if not opts.quiet:
        print(f"warmscale demo: {len(arrivals)} requests from {opts.trace.name} ({opts.span:.0f} s of trace at "
              f"{opts.speed:g}x), replicas start in {opts.startup:g} s, TTFT SLO {opts.slo_ttft:g} s", file=out)
        print(f"{'t':>5}  {'ready':>5} {'start':>5} {'target':>6}  {'queue':>5} {'run':>4}  "
              f"{'p95 TTFT 10s':>12}  {'reason':<24}", file=out)
    try:
        while True:
            now = time.monotonic()
            t = now - start
            while i < len(arrivals) and arrivals[i].at <= t:
                a: Arrival = arrivals[i]
                fleet.submit(Request(start + a.at, a.input_tokens, a.output_tokens))
                i += 1
            fleet.step(now)
            for v in fleet.take_ttfts():
                ttfts.append(v)
                recent.append((t, v))
            if t >= next_report:
                next_report += 1.0
                recent = [(ts, v) for ts, v in recent if ts > t - 10.0]
                p95 = _p([v for _, v in recent], 0.95)
                ready, starting = fleet.counts(now)
                trackers = server.manager.trackers()
                decision = await trackers[0].current() if trackers else None
                row = {"t": round(t, 1), "ready": ready, "starting": starting,
                       "desired": decision.desired if decision else None,
                       "queue": fleet.queue(), "running": fleet.running(), "ttft_p95": p95,
                       "reason": decision.reason if decision else ""}
                timeline.append(row)
                if not opts.quiet and int(t) % 2 == 0:
                    shown = f"{p95:8.2f} s" if p95 is not None else "       -  "
                    flag = " !" if p95 is not None and p95 > opts.slo_ttft else "  "
                    print(f"{t:5.0f}  {ready:5d} {starting:5d} {row['desired'] or 0:6d}  {row['queue']:5d} "
                          f"{row['running']:4d}  {shown}{flag}  {row['reason']:<24}", file=out, flush=True)
            if t > end_at and fleet.queue() == 0 and fleet.running() == 0:
                break
            if t > end_at + 15:  # keep the demo short: stop draining after 15 s
                break
            await asyncio.sleep(TICK_S)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await keda_task
        await channel.close()
        await server.stop(grace=1.0)
        for c in collectors.values():
            await c.aclose()
        await session.close()
        await runner.cleanup()

    met = sum(1 for v in ttfts if v <= opts.slo_ttft)
    summary: dict[str, Any] = {
        "trace": opts.trace.name,
        "requests": len(ttfts),
        "slo_ttft_s": opts.slo_ttft,
        "slo_attainment": met / len(ttfts) if ttfts else 0.0,
        "ttft_p50_s": _p(ttfts, 0.5),
        "ttft_p99_s": _p(ttfts, 0.99),
        "max_replicas": max((r["ready"] + r["starting"] for r in timeline), default=0),
        "replica_seconds": sum(r["ready"] + r["starting"] for r in timeline),
        "scale_events": len(keda.scale_events),
        "timeline": timeline,
    }
    if not opts.quiet:
        attained = 100 * summary["slo_attainment"]
        print(f"\n{summary['requests']} requests, TTFT <= {opts.slo_ttft:g} s for {attained:.1f}%"
              f" (p50 {summary['ttft_p50_s'] or 0:.2f} s, p99 {summary['ttft_p99_s'] or 0:.2f} s), "
              f"{summary['scale_events']} scale events, up to {summary['max_replicas']} replicas", file=out)
    if opts.json:
        await asyncio.to_thread(Path(opts.json).write_bytes, orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    if opts.plot:
        await asyncio.to_thread(plot, summary, opts, Path(opts.plot))
        if not opts.quiet:
            print(f"plot: {opts.plot}", file=out)
    return summary


def plot(summary: dict[str, Any], opts: DemoOptions, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = summary["timeline"]
    t = [r["t"] for r in tl]
    fig, (a1, a2, a3) = plt.subplots(3, 1, sharex=True, figsize=(9, 7))
    a1.step(t, [r["ready"] for r in tl], where="post", label="ready")
    a1.step(t, [r["ready"] + r["starting"] for r in tl], where="post", label="ready + starting", linestyle="--")
    a1.step(t, [r["desired"] or 0 for r in tl], where="post", label="scaler target", alpha=0.7)
    a1.set_ylabel("replicas")
    a1.legend(loc="upper left")
    a2.plot(t, [r["queue"] for r in tl], label="waiting")
    a2.plot(t, [r["running"] for r in tl], label="running")
    a2.set_ylabel("requests")
    a2.legend(loc="upper left")
    a3.plot(t, [r["ttft_p95"] if r["ttft_p95"] is not None else float("nan") for r in tl], label="p95 TTFT (10 s)")
    a3.axhline(opts.slo_ttft, color="red", linestyle=":", label="SLO")
    a3.set_ylabel("seconds")
    a3.set_xlabel("demo time (s)")
    a3.legend(loc="upper left")
    fig.suptitle(f"warmscale demo: {summary['trace']}, SLO attainment {100 * summary['slo_attainment']:.1f}%")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
