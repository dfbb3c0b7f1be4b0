"""The demo's event loop: one real burst through two fleets side by side, a live table, a summary, a plot.

Everything runs on the trace clock (:class:`~warmscale.demo.actuation.Clock`, ``speed`` trace
seconds per wall second): arrivals, the engines, Prometheus/KEDA/HPA, the startup ladder, and the
scaler's own windows (its trigger metadata is the production default divided by ``speed``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import grpc
import orjson
from aiohttp import web

from warmscale.demo.actuation import (
    KEDA_POLLING_S,
    KEDA_PROMETHEUS_THRESHOLD,
    PROMETHEUS_SCRAPE_S,
    Clock,
    TodaySetup,
    WarmscaleActuation,
)
from warmscale.demo.burst import DEFAULT_TRACE, Arrival, burst, load_trace, window_start
from warmscale.demo.fixed import equal_cost_replicas, replay_fixed
from warmscale.demo.fleet import Fleet
from warmscale.demo.hot import HOT_SLEEPERS, IDLE_MODELS, POOL_GPUS, HotPoolDemo, hot_wake_s
from warmscale.demo.hot import NAME as HOT_NAME
from warmscale.proto import externalscaler_pb2 as pb
from warmscale.scaler.capacity import prior_for
from warmscale.scaler.config import ScalerConfig, parse_metadata
from warmscale.scaler.server import ScalerServer
from warmscale.scaler.server_options import ServerOptions
from warmscale.scaler.sources import build_collector, read_awake_sleepers
from warmscale.scaler.warm_status import WarmStatus
from warmscale.signals.model import ReplicaReading, Snapshot
from warmscale.signals.sources import Endpoint
from warmscale.simulation.engine import EngineProfile, Request
from warmscale.traces import block_hashes, resolve
from warmscale.warmpool.startup_model import PROFILES, StartupProfile, time_to_ready_table

TICK_S = 0.02  # wall seconds per loop turn
SAMPLE_S = 5.0  # trace seconds between timeline samples (JSON, plot)
TTFT_WINDOW_S = 20.0  # trace seconds of first tokens behind each row's p95 TTFT
FLEETS = ("today", "warmscale", "hot")  # the fleets run live, side by side
ROWS = ("today", "fixed", "warmscale", "hot")  # the summary's rows ("fixed" is replayed after the run)
LABELS = {"today": "today's setup", "fixed": "fixed fleet", "warmscale": "warmscale",
          "hot": "warmscale + hot pool"}
LABEL_W = 21


class DemoError(RuntimeError):
    """The demo could not run as set up (the message says why)."""


@dataclass(frozen=True)
class DemoOptions:
    trace: str = DEFAULT_TRACE
    traces_dir: str | None = None
    speed: float = 8.0
    span: float = 660.0
    lead: float = 20.0
    profile: str = "8b-h100"
    standby: int = 2
    initial: int = 1
    max_replicas: int = 8
    slo_ttft: float = 2.0
    every: float = 20.0
    drain: float = 60.0
    plot: str = "warmscale-demo.png"
    json: str | None = None
    log_file: str = "warmscale-demo.log"
    quiet: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoOptions:
        return cls(trace=args.trace, traces_dir=args.traces, speed=args.speed, span=args.span, lead=args.lead,
                   profile=args.profile, standby=args.standby, initial=args.initial,
                   max_replicas=args.max_replicas, slo_ttft=args.slo_ttft, every=args.every, drain=args.drain,
                   plot=args.plot, json=args.json, log_file=args.log_file, quiet=args.quiet)

    def metadata(self) -> dict[str, str]:
        """The trigger metadata of warmscale's ScaledObject: production defaults, every duration / speed,
        and the capacity prior (a rate: tokens per wall second) times speed."""
        s = self.speed
        return {
            "engine": "vllm",
            "podSelector": "app=vllm-demo",
            # The model and GPU the operator deploys (as the trace benchmark writes it); its documented
            # prefill prior (scaler/capacity.py PRIORS) in tokens per wall second: the engines run s x faster.
            "modelProfile": self.profile,
            "prefillTpsPrior": f"{prior_for('vllm', self.profile).prefill_tps * s:g}",
            "minReplicas": str(self.initial),
            "maxReplicas": str(self.max_replicas),
            "ttftSloSeconds": f"{self.slo_ttft:g}",  # TTFT itself is measured in trace seconds
            "hpaTolerance": "0",  # as in the ScaledObject the warm-pool controller writes
            "ttftWindowSeconds": f"{60.0 / s:g}",
            "trendWindowSeconds": f"{60.0 / s:g}",
            "timeToReadySeconds": f"{120.0 / s:g}",
            "burstWindowSeconds": f"{max(10.0 / s, 1.0):g}",  # the key's floor is 1 s
            "burstConfirmSeconds": f"{30.0 / s:g}",
            "scaleDownStabilizationSeconds": f"{300.0 / s:g}",
            "nodeIdleSeconds": f"{600.0 / s:g}",
            "idleWindowSeconds": f"{60.0 / s:g}",
            "stalenessSeconds": f"{30.0 / s:g}",
            "scrapeIntervalSeconds": f"{max(1.0 / s, 0.1):g}",  # the scaler's floor is 0.1 s
            "scrapeTimeoutSeconds": "1",
        }


class FleetEndpoints:
    """Pod discovery for one fleet: its replicas that are up."""

    def __init__(self, fleet: Fleet, clock: Clock) -> None:
        self.fleet = fleet
        self.clock = clock

    async def endpoints(self) -> Sequence[Endpoint]:
        return [Endpoint(replica=url.rsplit("/", 2)[-2], url=url) for url in self.fleet.endpoints(self.clock.now())]


class DemoReader:
    """The demo's snapshot reader (``read``: each fleet's replicas, as pod discovery would list them)
    and, as the production reader (scaler/cli.py), ``awake_sleepers``: the awake hot-tier sleepers at
    the URLs the waker published (scaler/sources.py ``read_awake_sleepers``), read by the tracker."""

    def __init__(self, read: Callable[[ScalerConfig, float, tuple[str, str]], Awaitable[Snapshot]],
                 session: aiohttp.ClientSession) -> None:
        self._read = read
        self._session = session

    async def __call__(self, cfg: ScalerConfig, now: float, scope: tuple[str, str]) -> Snapshot:
        return await self._read(cfg, now, scope)

    async def awake_sleepers(self, cfg: ScalerConfig, urls: Sequence[str], now: float) -> tuple[ReplicaReading, ...]:
        return await read_awake_sleepers(self._session, cfg, urls, now)


def _p(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _mmss(t: float) -> str:
    return f"{int(t // 60)}:{int(t % 60):02d}"


@dataclass
class FleetStats:
    ttfts: list[float] = field(default_factory=list)
    recent: list[tuple[float, float]] = field(default_factory=list)

    def add(self, now: float, values: list[float]) -> None:
        self.ttfts.extend(values)
        self.recent.extend((now, v) for v in values)

    def p95_recent(self, now: float) -> float | None:
        self.recent = [(t, v) for t, v in self.recent if t > now - TTFT_WINDOW_S]
        return _p([v for _, v in self.recent], 0.95)


class CountingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _logs_to_file(path: str) -> tuple[logging.Handler, str]:
    """A handler that keeps log records out of the table: JSON lines into ``path``, or, when that
    file cannot be written, only warnings to stderr. Returns it and where the logs go."""
    from warmscale.logs import JsonFormatter

    try:
        handler: logging.Handler = logging.FileHandler(path, mode="w", encoding="utf-8")
        where = path
    except OSError as exc:
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        where = f"stderr, warnings only ({path}: {exc.strerror})"
    handler.setFormatter(JsonFormatter())
    return handler, where


async def run_demo(opts: DemoOptions, out: TextIO | None = None) -> dict[str, Any]:
    """Run the demo; while it runs, log records go to ``opts.log_file`` (see :func:`_logs_to_file`)."""
    root = logging.getLogger()
    saved = list(root.handlers)
    counter = CountingHandler()
    where = "stderr"
    if opts.log_file:
        handler, where = _logs_to_file(opts.log_file)
        root.handlers[:] = [handler, counter]
    try:
        return await _run_demo(opts, out or sys.stdout, where, counter)
    finally:
        for h in root.handlers:
            if h not in saved:
                h.close()
        root.handlers[:] = saved


async def _run_demo(opts: DemoOptions, out: TextIO, logs_to: str, counter: CountingHandler) -> dict[str, Any]:
    say = (lambda *a: None) if opts.quiet else (lambda *a: print(*a, file=out, flush=True))
    parse_metadata(opts.metadata())  # a bad option combination fails here, naming the key
    trace_path = resolve(opts.trace, opts.traces_dir)
    rows = load_trace(trace_path)
    arrivals = burst(rows, opts.lead, opts.span, block_hashes(trace_path, rows))
    t_start = window_start(rows, opts.lead)
    startup: StartupProfile = PROFILES[opts.profile]
    engine = EngineProfile.of(opts.profile)  # the trace benchmark's calibrated engine profile
    ttr = time_to_ready_table(startup)
    clock = Clock(opts.speed)
    # The hot pool's row needs the profile's measured sleep and wake times (warmscale/simulation/hotpool.py).
    live = FLEETS if hot_wake_s(opts.profile) is not None else tuple(n for n in FLEETS if n != "hot")
    fleets = {"today": Fleet("today", startup, engine),
              "warmscale": Fleet("warmscale", startup, engine, standby=opts.standby),
              "hot": Fleet("hot", startup, engine, standby=opts.standby)}
    fleets = {n: f for n, f in fleets.items() if n in live}
    hot_fleet = fleets.get("hot")
    hot = HotPoolDemo(hot_fleet, clock, opts.profile, startup.gpus_per_replica) if hot_fleet is not None else None

    say(f"warmscale demo: {len(arrivals):,} requests of {trace_path.name}, its busiest burst (trace "
        f"{_mmss(t_start)}-{_mmss(t_start + opts.span)}),")
    say(f"  replayed {opts.speed:g}x faster (traffic, engines, control loops, start-ups); TTFT SLO {opts.slo_ttft:g} s")
    say(f"  every fleet: simulated vLLM, {opts.profile} engine profile ({engine.prefill_tps / 1000:.0f}k prefill "
        f"tokens/s, {engine.max_num_seqs:,} sequences), {startup.gpus_per_replica} GPU per replica, {startup.name} "
        f"startup ladder,")
    say(f"              {opts.initial} replica at first, max {opts.max_replicas}")
    say(f"  today     : Prometheus scrape {PROMETHEUS_SCRAPE_S:g} s -> KEDA Prometheus scaler (waiting requests, "
        f"threshold {KEDA_PROMETHEUS_THRESHOLD:g},")
    say(f"              polling {KEDA_POLLING_S:g} s) -> HPA; every new replica starts cold: "
        f"{ttr['cold']:.0f} s to ready")
    scrape_s = float(opts.metadata()["scrapeIntervalSeconds"]) * opts.speed
    say(f"  warmscale : its scaler reads the engines every {scrape_s:g} s, push activation, its policy; warm pool")
    say(f"              of {opts.standby} placeholders: {ttr['placeholder+staged']:.0f} s to ready on a placeholder, "
        f"{ttr['cold']:.0f} s cold")
    if "hot" in live:
        say(f"  + hot pool: the same, plus {HOT_SLEEPERS} sleeping engines (vLLM level 1, wake "
            f"{hot_wake_s(opts.profile) or 0:g} s + canary) on a pool of {POOL_GPUS * startup.gpus_per_replica} GPUs")
        say(f"              shared with {IDLE_MODELS} other models idle during the burst; the waker wakes them on "
            "the scaler's intent")
    else:
        say(f"  + hot pool: not shown (no measured sleep and wake times for {opts.profile})")
    say("  fixed     : after the run, a fixed fleet costing no more GPU-seconds than warmscale, on the same requests")
    say(f"  logs      : {logs_to}")
    say("  table     : replicas = ready+starting, warm = warm placeholders, hot = sleepers awake, ! = p95 TTFT")
    say("              over the SLO; the scaler's reason (the rule that set its count), its look-ahead (time-to-")
    say("              ready of the last replica it asks for) and the prompt tokens/s one replica prefills, as")
    say("              it learned them")
    say("")
    today_title, ws_title, hot_title = " today's setup ", " warmscale ", " + hot pool "
    hot_head = ("", "") if "hot" not in live else (
        f"   {hot_title:-^30}", f"   {'replicas':>8} {'hot':>3} {'queue':>6} {'p95 TTFT':>10}")
    say(f"{'':12}  {today_title:-^26}   {ws_title:-^78}{hot_head[0]}")
    say(f"{'time':>5} {'req/s':>6}  {'replicas':>8} {'queue':>6} {'p95 TTFT':>10}   {'replicas':>8} {'warm':>4} "
        f"{'queue':>6} {'p95 TTFT':>10}  {'reason':<24} {'ahead':>5} {'tok/s':>6}{hot_head[1]}")

    runners: list[web.AppRunner] = []
    for fleet in fleets.values():
        runner = web.AppRunner(fleet.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        fleet.base_url = f"http://127.0.0.1:{port}"
        runners.append(runner)
        fleet.start_ready(opts.initial, 0.0)

    session = aiohttp.ClientSession()
    collectors: dict[Any, Any] = {}
    ws_fleet, today_fleet = fleets["warmscale"], fleets["today"]
    # Each ScaledObject's pods: warmscale's fleet, and the fleet with a hot pool.
    scaled = {"vllm-demo": ws_fleet, **({HOT_NAME: hot_fleet} if hot_fleet is not None else {})}
    discovery = {name: FleetEndpoints(f, clock) for name, f in scaled.items()}

    async def read(cfg: ScalerConfig, now: float, scope: tuple[str, str]) -> Snapshot:
        name = scope[1]
        if (cfg, name) not in collectors:
            collectors[(cfg, name)] = build_collector(cfg, session=session, pod_endpoints=discovery[name])
        snap: Snapshot = await collectors[(cfg, name)].collect(now)
        f = scaled[name]
        ready, starting = f.counts(clock.now())
        return replace(snap, ready_replicas=ready, starting_replicas=starting, current_replicas=f.spec_replicas)

    # The scaler's reader, with the production read of the awake sleepers the waker publishes in the
    # hot status (their first tokens join the hot row's TTFT window, as in `warmscale scaler`).
    reader = DemoReader(read, session)

    prom_cfg = parse_metadata({"engine": "vllm", "podSelector": "app=today", "scrapeTimeoutSeconds": "1",
                               "stalenessSeconds": f"{PROMETHEUS_SCRAPE_S * 2 / opts.speed:g}"})
    prometheus = build_collector(prom_cfg, session=session, pod_endpoints=FleetEndpoints(today_fleet, clock))
    collectors["prometheus"] = prometheus

    server = ScalerServer(ServerOptions(host="127.0.0.1", grpc_port=0, metrics_port=None), reader)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    ref = pb.ScaledObjectRef(name="vllm-demo", namespace="demo", scalerMetadata=opts.metadata())
    hot_ref = pb.ScaledObjectRef(name=HOT_NAME, namespace="demo", scalerMetadata=opts.metadata())
    if hot is not None:
        await hot.start(server.store, session)
    stop = asyncio.Event()
    clock.start()
    today = TodaySetup(today_fleet, clock, prometheus, min_replicas=opts.initial, max_replicas=opts.max_replicas)
    ws = WarmscaleActuation(channel, ref, ws_fleet, clock, min_replicas=opts.initial, max_replicas=opts.max_replicas)
    actuators = [today.run(stop), ws.run(stop)]
    if hot_fleet is not None:
        actuators.append(WarmscaleActuation(channel, hot_ref, hot_fleet, clock, min_replicas=opts.initial,
                                            max_replicas=opts.max_replicas).run(stop))

    async def warm_pool_status() -> None:
        """What the warm-pool controller publishes: warm capacity and time-to-ready (wall seconds)."""
        while True:
            now = clock.now()
            for name, f in scaled.items():
                ready, starting = f.counts(now)
                held = f.placeholders_ready(now)
                await server.store.put_warm_status("demo", name, WarmStatus(
                    namespace="demo", name=name, updated_at=time.time(), placeholders_ready=held,
                    staged_nodes=held, ready_replicas=ready, starting_replicas=starting,
                    spec_replicas=f.spec_replicas, min_ready_floor=opts.initial,
                    time_to_ready_s={k: v / opts.speed for k, v in ttr.items() if k in ("placeholder+staged", "cold")}))
            await asyncio.sleep(clock.wall(5.0))

    tasks = [*(asyncio.create_task(a) for a in actuators), asyncio.create_task(warm_pool_status())]

    stats = {name: FleetStats() for name in live}
    timeline: list[dict[str, Any]] = []
    arrived_at: list[float] = []
    end_at = opts.span + opts.drain
    i = 0
    next_row = 0.0
    next_sample = 0.0
    wall0 = time.monotonic()
    try:
        while True:
            now = clock.now()
            if hot is not None:
                await hot.refresh(server.store, now)
            while i < len(arrivals) and arrivals[i].at <= now:
                a: Arrival = arrivals[i]
                arrived_at.append(a.at)
                for fleet in fleets.values():
                    fleet.submit(Request(a.at, a.input_tokens, a.output_tokens, hashes=a.hashes,
                                         hash_tokens=a.hash_tokens), now)
                i += 1
            for name, fleet in fleets.items():
                fleet.step(now)
                stats[name].add(now, fleet.take_ttfts())
            if now >= next_sample or now >= next_row:
                row = _row(now, fleets, stats, arrived_at)
                trackers = {t.name: t for t in server.manager.trackers()}
                for fname, tname in (("warmscale", "vllm-demo"), ("hot", HOT_NAME)):
                    if fname not in fleets:
                        continue
                    decision = await trackers[tname].current() if tname in trackers else None
                    r = row[fname]
                    r["target"] = decision.desired if decision else None
                    r["reason"] = decision.reason if decision else ""
                    # The learned per-replica prefill capacity, in trace seconds (the demo runs `speed` x
                    # faster), the look-ahead horizon (trace seconds), and the decode tokens/s of one
                    # replica running its max_num_seqs by the learned ITL line (ITL is in trace seconds).
                    r["prefill_tps"] = round(decision.prefill_tps / opts.speed) if decision else None
                    r["ahead_s"] = (round(decision.horizon_s * opts.speed, 1)
                                    if decision and decision.horizon_s > 0 else None)
                    r["decode_tps"] = _decode_tps(decision, engine.max_num_seqs)
                    r["hot_target"] = decision.hot_target if decision else None
                row["today"]["target"] = today.hpa_target
                if now >= next_sample:
                    next_sample += SAMPLE_S
                    timeline.append(row)
                if now >= next_row:
                    next_row += opts.every
                    say(_format_row(row, opts.slo_ttft))
            for t in tasks:
                if t.done():  # an actuator or the warm-pool status loop died: say why, do not go on
                    raise DemoError(f"a control loop stopped: {t.exception()!r}")
            if hot is not None and hot.task is not None and hot.task.done():
                raise DemoError(f"the waker stopped: {hot.task.exception()!r}")
            drained = all(f.queue() == 0 and f.running() == 0 for f in fleets.values())
            if now >= end_at or (now >= opts.span and drained):
                break
            await asyncio.sleep(TICK_S)
    finally:
        stop.set()  # the actuators stop their own loops
        tasks[-1].cancel()
        for t in tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await t
        if hot is not None:
            await hot.stop()
        await channel.close()
        await server.stop(grace=1.0)
        for c in collectors.values():
            await c.aclose()
        await session.close()
        for runner in runners:
            await runner.cleanup()

    ended = clock.now()
    ws_gpu_s = ws_fleet.gpu_seconds
    n_fixed = equal_cost_replicas(ws_gpu_s, startup.gpus_per_replica, ended)
    fixed_fleet, fixed_ttfts = await asyncio.to_thread(replay_fixed, arrivals, startup, engine, n_fixed, ended,
                                                       TICK_S * opts.speed)
    runs = {name: FleetRun(fleets[name], stats[name].ttfts, fleets[name].gpu_seconds) for name in live}
    runs["fixed"] = FleetRun(fixed_fleet, fixed_ttfts, fixed_fleet.gpu_seconds)
    if hot is not None:
        # The hot pool's row pays its share of the pool (warmscale.demo.hot: its awake GPU-seconds, plus
        # its share by sleepers of the rest) on top of its Deployment's GPUs.
        runs["hot"].gpu_seconds += hot.charge(ended)
    summary = _summary(opts, trace_path, arrivals, runs, timeline, ended, time.monotonic() - wall0)
    summary["window_start_s"] = t_start
    summary["fleets"]["fixed"]["replicas"] = n_fixed
    if hot is not None and hot_fleet is not None:
        summary["hot_pool"] = _hot_summary(hot, hot_fleet, ended)
    say("")
    for line in format_summary(summary):
        say(line)
    if counter.count and opts.log_file:
        say(f"{counter.count} warnings or errors were logged: see {logs_to}")
    if opts.json:
        await asyncio.to_thread(Path(opts.json).write_bytes, orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    if opts.plot and plotting_available():
        await asyncio.to_thread(plot, summary, Path(opts.plot))
        say(f"plot: {opts.plot}")
    elif opts.plot:
        print(f"plot: not written ({PLOT_HINT})", file=sys.stderr)
    return summary


def _hot_summary(hot: HotPoolDemo, fleet: Fleet, ended: float) -> dict[str, Any]:
    """The hot pool's size and what its row is charged (warmscale.demo.hot)."""
    return {"pool_gpus": POOL_GPUS * hot.gpus_per_replica, "sleepers": HOT_SLEEPERS, "idle_models": IDLE_MODELS,
            "pool_gpu_seconds": round(hot.pool_gpu_seconds(ended), 1), "share": round(hot.share(), 3),
            "awake_gpu_seconds": round(hot.engaged_gpu_s, 1), "charged_gpu_seconds": round(hot.charge(ended), 1),
            "wake_requests": hot.wake_requests, "deployment_gpu_seconds": round(fleet.gpu_seconds, 1),
            "placements": [[p.workload, p.device] for p in (hot.plan.placements if hot.plan else ())]}


@dataclass
class FleetRun:
    """One summary row's fleet, the TTFTs it served, and the GPU-seconds it is charged."""

    fleet: Fleet
    ttfts: list[float]
    gpu_seconds: float


def _row(now: float, fleets: dict[str, Fleet], stats: dict[str, FleetStats], arrived_at: list[float]) -> dict[str, Any]:
    rate = sum(1 for t in arrived_at[-2000:] if t > now - 10.0) / 10.0
    row: dict[str, Any] = {"t": round(now, 1), "arrivals_per_s": rate}
    for name, fleet in fleets.items():
        ready, starting = fleet.counts(now)
        row[name] = {"ready": ready, "starting": starting, "placeholders": fleet.placeholders_ready(now),
                     "queue": fleet.queue(), "running": fleet.running(), "ttft_p95": stats[name].p95_recent(now),
                     "sleepers_routed": len(fleet.routed)}
    return row


def _format_row(row: dict[str, Any], slo: float) -> str:
    def cells(d: dict[str, Any]) -> tuple[str, str, str]:
        reps = f"{d['ready']}" + (f"+{d['starting']}" if d["starting"] else "")
        p95 = d["ttft_p95"]
        ttft = "-" if p95 is None else f"{p95:.1f} s" + ("!" if p95 > slo else " ")
        return reps, f"{d['queue']}", ttft

    tr, tq, tt = cells(row["today"])
    wr, wq, wt = cells(row["warmscale"])
    hr, hq, ht = cells(row["hot"]) if "hot" in row else ("", "", "")
    w = row["warmscale"]
    ahead = w.get("ahead_s")
    tps = w.get("prefill_tps")
    return (f"{_mmss(row['t']):>5} {row['arrivals_per_s']:6.1f}  {tr:>8} {tq:>6} {tt:>10}   {wr:>8} "
            f"{w['placeholders']:>4} {wq:>6} {wt:>10}  {w.get('reason') or '':<24} "
            f"{'-' if ahead is None else format(ahead, '.0f') + ' s':>5} "
            f"{'-' if not tps else format(tps / 1000, '.1f') + 'k':>6}   {hr:>8} "
            f"{row['hot']['sleepers_routed'] if 'hot' in row else '':>3} "
            f"{hq:>6} {ht:>10}").rstrip()


def _decode_tps(decision: Any, seqs: int) -> float | None:
    """Tokens/s one replica decodes running ``seqs`` sequences, by the scaler's learned ITL line."""
    if decision is None:
        return None
    step = decision.itl_base_s + decision.itl_per_seq_s * seqs
    return round(seqs / step) if step > 0 else None


def _summary(opts: DemoOptions, trace_path: Path, arrivals: list[Arrival], runs: dict[str, FleetRun],
             timeline: list[dict[str, Any]], ended: float, wall: float) -> dict[str, Any]:
    n = len(arrivals)
    profile = runs["warmscale"].fleet.profile
    out: dict[str, Any] = {
        "trace": trace_path.name,
        "window_start_s": None,
        "span_s": opts.span,
        "speed": opts.speed,
        "profile": opts.profile,
        "requests": n,
        "slo_ttft_s": opts.slo_ttft,
        "standby": opts.standby,
        "trace_seconds": round(ended, 1),
        # What one simulated replica really does (the scaler's learned values are compared to it): its
        # prefill rate, and its decode tokens/s at max_num_seqs with a full KV cache.
        "engine_prefill_tps": profile.prefill_tps,
        "engine_max_num_seqs": profile.max_num_seqs,
        "engine_decode_tps": round(profile.max_num_seqs
                                   / profile.decode_step_s(profile.max_num_seqs, profile.kv_capacity_tokens)),
        "wall_seconds": round(wall, 1),
        "fleets": {},
        "timeline": timeline,
    }
    for name in ROWS:
        if name not in runs:
            continue
        run = runs[name]
        fleet, ttfts = run.fleet, run.ttfts
        met = sum(1 for v in ttfts if v <= opts.slo_ttft)
        out["fleets"][name] = {
            "slo_attainment": met / n if n else 0.0,  # requests without a first token count as misses
            "served": len(ttfts),
            "gpu_seconds": round(run.gpu_seconds, 1),
            "ttft_p50_s": _p(ttfts, 0.5),
            "ttft_p99_s": _p(ttfts, 0.99),
            "starts": dict(fleet.starts),
            "scale_events": len(fleet.scale_events),
            "first_scale_up_s": next((t for t, a, b in fleet.scale_events if b > a), None),
            "first_added_ready_s": min((r.ready_at for r in fleet.added), default=None),
            "max_replicas": (max((r[name]["ready"] + r[name]["starting"] for r in timeline), default=0)
                             if name != "fixed" else len(fleet.replicas)),
        }
    return out


def format_summary(summary: dict[str, Any]) -> list[str]:
    slo = summary["slo_ttft_s"]
    def mmss(t: float | None) -> str:
        if t is None:
            return "-"
        return _mmss(t) if t <= summary["trace_seconds"] else f"after {_mmss(summary['trace_seconds'])}"

    lines = [f"{summary['requests']:,} requests in {summary['trace_seconds'] / 60:.1f} min of trace time "
             f"({summary['wall_seconds']:.0f} s here):",
             f"{'':{LABEL_W}} {'TTFT <= ' + format(slo, 'g') + ' s':>12} {'GPU-seconds':>11} {'TTFT p50':>8} "
             f"{'TTFT p99':>8} {'scaled up':>9} {'new replica ready':>17}  starts"]
    fleets = summary["fleets"]
    for name in ROWS:
        if name not in fleets:
            continue
        f = fleets[name]
        kinds = (("placeholder+staged", "warm"), ("cold", "cold"))
        starts = ", ".join(f"{f['starts'][k]} {short}" for k, short in kinds if f["starts"].get(k)) or "none"
        label = LABELS[name] + (f" of {f['replicas']}" if name == "fixed" and "replicas" in f else "")
        if name == "hot" and summary.get("hot_pool"):
            starts += f", {summary['hot_pool']['wake_requests']} wakes"
        lines.append(f"{label:{LABEL_W}} {100 * f['slo_attainment']:11.1f}% {f['gpu_seconds']:11,.0f} "
                     f"{f['ttft_p50_s'] or 0:7.2f}s {f['ttft_p99_s'] or 0:7.1f}s {mmss(f['first_scale_up_s']):>9} "
                     f"{mmss(f['first_added_ready_s']):>17}  {starts}")
    t = fleets["today"]
    for name in ("warmscale", "hot"):
        if name not in fleets:
            continue
        w = fleets[name]
        dg = w["gpu_seconds"] - t["gpu_seconds"]
        pct = 100 * dg / t["gpu_seconds"] if t["gpu_seconds"] else 0
        lines.append(f"{LABELS[name]}: {100 * (w['slo_attainment'] - t['slo_attainment']):+.1f} points of SLO "
                     f"attainment for {dg:+,.0f} GPU-seconds ({pct:+.0f}%) "
                     "against today's setup, " + ("placeholders included" if name == "warmscale" else
                                                  "placeholders and its share of the hot pool included"))
    hp = summary.get("hot_pool")
    if hp:
        lines.append(f"hot pool: {hp['pool_gpus']} GPUs x {summary['trace_seconds']:,.0f} s = "
                     f"{hp['pool_gpu_seconds']:,.0f} GPU-seconds, shared by {hp['sleepers']} sleepers of this model "
                     f"and "
                     f"{hp['idle_models']} of other models idle during the burst; charged here: its "
                     f"{hp['awake_gpu_seconds']:,.0f} awake GPU-seconds + {100 * hp['share']:.0f}% of the rest = "
                     f"{hp['charged_gpu_seconds']:,.0f}")
    return lines


PLOT_HINT = "matplotlib is not installed: pip install 'warmscale[demo]' for the PNG"


def plotting_available() -> bool:
    """Whether the plot's library is installed (the ``demo`` extra); without it the demo runs and
    prints its table, and writes no PNG."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # a module set to None in sys.modules (how a test removes it)
        return False


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = summary["timeline"]
    t = [r["t"] / 60 for r in tl]
    colors = {"today": "tab:red", "warmscale": "tab:blue", "hot": "tab:cyan", "fixed": "tab:gray"}
    fig, (a1, ar, a2, a3, a4) = plt.subplots(5, 1, sharex=True, figsize=(10, 12),
                                             gridspec_kw={"height_ratios": [3, 1.6, 2, 2.4, 2]})
    a0 = a1.twinx()
    a0.fill_between(t, [r["arrivals_per_s"] for r in tl], step="post", color="grey", alpha=0.2, lw=0)
    a0.set_ylabel("arrivals / s (grey)")
    live = [n for n in FLEETS if n in summary["fleets"]]
    for name in live:
        c = colors[name]
        f = summary["fleets"][name]
        label = f"{LABELS[name]}: {100 * f['slo_attainment']:.1f}% in SLO, {f['gpu_seconds']:,.0f} GPU-s"
        a1.step(t, [r[name]["ready"] for r in tl], where="post", color=c, label=f"{LABELS[name]} ready")
        a1.step(t, [r[name]["ready"] + r[name]["starting"] for r in tl], where="post", color=c, ls="--", lw=1,
                label=f"{LABELS[name]} ready + starting")
        a2.plot(t, [r[name]["queue"] for r in tl], color=c, label=LABELS[name])
        a3.plot(t, [r[name]["ttft_p95"] if r[name]["ttft_p95"] is not None else float("nan") for r in tl],
                color=c, label=label)
    a1.step(t, [r["warmscale"]["placeholders"] for r in tl], where="post", color=colors["warmscale"], ls=":",
            lw=1, label="warmscale warm placeholders")
    if tl and "hot" in tl[0]:
        a1.step(t, [r["hot"]["ready"] + r["hot"]["sleepers_routed"] for r in tl], where="post", color=colors["hot"],
                lw=2, alpha=0.6, label=f"{LABELS['hot']}: ready + woken sleepers")
    fx = summary["fleets"].get("fixed")
    if fx:
        a1.axhline(fx["replicas"], color=colors["fixed"], ls="-.", lw=1,
                   label=f"{LABELS['fixed']} of {fx['replicas']} (replayed): {100 * fx['slo_attainment']:.1f}% in SLO, "
                         f"{fx['gpu_seconds']:,.0f} GPU-s")
    a1.set_ylabel("replicas")
    top = max((r[n]["ready"] + r[n]["starting"] for r in tl for n in live), default=1)
    a1.set_ylim(0, top * 1.7 + 1)  # room for the legend above the lines
    a0.set_ylim(0, max((r["arrivals_per_s"] for r in tl), default=1.0) * 1.7 + 1)
    a1.set_zorder(a0.get_zorder() + 1)
    a1.patch.set_visible(False)
    a1.legend(loc="upper left", fontsize=7, ncol=3)
    _plot_reasons(ar, tl, colors["warmscale"])
    a2.set_ylabel("requests waiting")
    a2.legend(loc="upper right", fontsize=8)
    a3.axhline(summary["slo_ttft_s"], color="black", ls=":", lw=1, label="SLO")
    a3.set_yscale("log")
    a3.set_ylabel(f"p95 TTFT, last {TTFT_WINDOW_S:g} s (s)")
    a3.legend(loc="upper right", fontsize=8)
    _plot_capacity(a4, tl, summary)
    a4.set_xlabel("trace time (min)")
    fig.suptitle(f"warmscale demo: {summary['trace']}, {summary['requests']:,} requests, {summary['profile']} "
                 f"startup ladder, replayed {summary['speed']:g}x", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_reasons(ax: Any, tl: list[dict[str, Any]], color: str) -> None:
    """The scaler's reason over time: one row per reason, a bar where it set the count; the look-ahead
    horizon (the time-to-ready of the last replica asked for, from the warm ladder) on the right axis."""
    t = [r["t"] / 60 for r in tl]
    reasons = [r["warmscale"].get("reason") or "" for r in tl]
    names = sorted({x for x in reasons if x})
    for i, name in enumerate(names):
        spans = []
        for j, x in enumerate(reasons):
            if x == name:
                end = t[j + 1] if j + 1 < len(t) else t[j] + SAMPLE_S / 60
                spans.append((t[j], end - t[j]))
        ax.broken_barh(spans, (i - 0.35, 0.7), color=color, alpha=0.7, lw=0)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_ylim(-0.6, max(len(names), 1) - 0.4)
    ax.set_ylabel("scaler's reason", fontsize=8)
    ah = ax.twinx()
    ah.step(t, [r["warmscale"].get("ahead_s") if r["warmscale"].get("ahead_s") is not None else float("nan")
                for r in tl], where="post", color="tab:green", lw=1)
    ah.set_ylabel("look-ahead (s, green)", fontsize=8)
    ah.set_ylim(bottom=0)


def _plot_capacity(ax: Any, tl: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """What the scaler learned one replica does, in tokens/s, against what the simulated engine does."""
    t = [r["t"] / 60 for r in tl]

    def series(key: str) -> list[float]:
        return [r["warmscale"].get(key) / 1000 if r["warmscale"].get(key) else float("nan") for r in tl]

    ax.step(t, series("prefill_tps"), where="post", color="tab:purple", label="learned prefill tok/s per replica")
    ax.step(t, series("decode_tps"), where="post", color="tab:orange",
            label="learned decode tok/s per replica at max_num_seqs (ITL line)")
    if summary.get("engine_prefill_tps"):
        ax.axhline(summary["engine_prefill_tps"] / 1000, color="tab:purple", ls=":", lw=1,
                   label="simulated engine: prefill")
    if summary.get("engine_decode_tps"):
        ax.axhline(summary["engine_decode_tps"] / 1000, color="tab:orange", ls=":", lw=1,
                   label="simulated engine: decode")
    ax.set_ylabel("k tokens / s")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=7, ncol=2)
