"""How a replica count reaches each demo fleet: today's common setup and warmscale, on one clock.

Both use the trace benchmark's emulation of the HPA controller and of KEDA's own loop
(:mod:`benchmarks.sim.actuation`: the HPA's External/AverageValue arithmetic, stabilisation windows
and rate limits; KEDA's polling and push activation), with their upstream defaults, on the demo's
trace clock, so every interval is scaled by the demo's speed-up like the traffic and the startups.

- :class:`TodaySetup`: Prometheus scrapes every pod's ``/metrics`` every 15 s (through the production
  parsers); the KEDA Prometheus scaler's query is ``sum(vllm:num_requests_waiting)`` with an
  AverageValue threshold of 5 per replica, polled every 30 s for activation; the HPA syncs every
  15 s with its default behaviour (scale-down stabilisation 300 s).
- :class:`WarmscaleActuation`: the real scaler over gRPC as KEDA calls it for an ``external-push``
  trigger: ``StreamIsActive`` activates at once, ``IsActive`` on every 30 s poll, ``GetMetrics`` at
  every HPA sync; the HPA behaviour is what the warm-pool controller writes into the ScaledObject it
  owns (tolerance 0, no HPA stabilisation: the scaler stabilises).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from warmscale.demo.fleet import Fleet
from warmscale.proto import externalscaler_pb2 as pb
from warmscale.proto import externalscaler_pb2_grpc as pb_grpc
from warmscale.simulation.actuation import Hpa, HpaBehavior, Keda, KedaConfig

log = logging.getLogger("warmscale.demo")

PROMETHEUS_SCRAPE_S = 15.0
# Prometheus scrapes half a period after the HPA's syncs (which run at 0, 15, 30 ... s): with both on
# the same instants, whether a sync read the scrape of that instant depended on which coroutine woke
# first (today's row moved 2,283-3,900 GPU-seconds between runs). Half a period apart, every sync reads
# the scrape 7.5 s before it, the mean staleness of independent phases.
PROMETHEUS_PHASE_S = PROMETHEUS_SCRAPE_S / 2
KEDA_POLLING_S = 30.0
KEDA_PROMETHEUS_THRESHOLD = 5.0


class Clock:
    """Trace time: ``speed`` trace seconds per wall-clock second since :meth:`start`."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.t0 = time.monotonic()

    def start(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def wall(self, trace_s: float) -> float:
        return trace_s / self.speed

    async def sleep_until(self, t: float) -> None:
        await asyncio.sleep(max(0.0, (t - self.now()) / self.speed))


async def _cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        try:
            await t
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("demo actuation loop failed")


@dataclass
class TodaySetup:
    """Prometheus (15 s scrape) -> KEDA Prometheus scaler (waiting > 5 per replica, 30 s poll) -> HPA."""

    fleet: Fleet
    clock: Clock
    collector: Any  # signals' SnapshotCollector over the fleet's pods: what Prometheus scrapes
    min_replicas: int
    max_replicas: int
    prom_waiting: float = 0.0  # sum(vllm:num_requests_waiting) as of the last scrape
    hpa_target: int | None = None  # the HPA's last raw recommendation
    keda: Keda = field(init=False)
    hpa: Hpa = field(init=False)

    def __post_init__(self) -> None:
        self.keda = Keda(KedaConfig(polling_interval_s=KEDA_POLLING_S, min_replicas=self.min_replicas,
                                    max_replicas=self.max_replicas))
        self.hpa = Hpa(self.min_replicas, self.max_replicas, HpaBehavior())

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(self._prometheus()), asyncio.create_task(self._control())]
        await stop.wait()
        await _cancel_all(tasks)

    async def _prometheus(self) -> None:
        next_at = PROMETHEUS_PHASE_S
        while True:
            await self.clock.sleep_until(next_at)
            next_at += PROMETHEUS_SCRAPE_S
            snap = await self.collector.collect(time.time())
            # A pod Prometheus could not scrape has no sample: sum() leaves it out.
            self.prom_waiting = sum(r.signal.waiting for r in snap.replicas if r.signal is not None)

    async def _control(self) -> None:
        while True:
            await self.clock.sleep_until(min(self.keda.next_poll, self.hpa.next_sync))
            now = self.clock.now()
            spec = self.fleet.spec_replicas
            if self.keda.poll_due(now):
                n = self.keda.poll(now, self.keda.is_active_value(self.prom_waiting), spec)
                self.fleet.scale_to(n, now)
            spec = self.fleet.spec_replicas
            if spec > 0 and self.hpa.due(now):
                raw = self.hpa.raw_external_average(self.prom_waiting, KEDA_PROMETHEUS_THRESHOLD, spec)
                self.hpa_target = raw
                self.fleet.scale_to(self.hpa.sync(now, spec, raw), now)


@dataclass
class WarmscaleActuation:
    """KEDA (external-push trigger) + HPA against the real scaler over gRPC."""

    channel: grpc.aio.Channel
    ref: pb.ScaledObjectRef
    fleet: Fleet
    clock: Clock
    min_replicas: int
    max_replicas: int
    metric_value: float = 0.0
    target: float = 1.0
    keda: Keda = field(init=False)
    hpa: Hpa = field(init=False)

    def __post_init__(self) -> None:
        self.keda = Keda(KedaConfig(polling_interval_s=KEDA_POLLING_S, min_replicas=self.min_replicas,
                                    max_replicas=self.max_replicas))
        self.hpa = Hpa(self.min_replicas, self.max_replicas,
                       HpaBehavior(tolerance=0.0, scale_down_stabilization_s=0.0))

    async def run(self, stop: asyncio.Event) -> None:
        stub = pb_grpc.ExternalScalerStub(self.channel)
        spec = (await stub.GetMetricSpec(self.ref)).metricSpecs[0]
        self.target = spec.targetSizeFloat or float(spec.targetSize)
        tasks = [asyncio.create_task(self._push(stub)), asyncio.create_task(self._poll(stub)),
                 asyncio.create_task(self._hpa(stub, spec.metricName))]
        await stop.wait()
        await _cancel_all(tasks)

    async def _push(self, stub: pb_grpc.ExternalScalerStub) -> None:
        async for msg in stub.StreamIsActive(self.ref):
            now = self.clock.now()
            self.fleet.scale_to(self.keda.push(now, msg.result, self.fleet.spec_replicas), now)

    async def _poll(self, stub: pb_grpc.ExternalScalerStub) -> None:
        while True:
            await self.clock.sleep_until(self.keda.next_poll)
            try:
                active = (await stub.IsActive(self.ref)).result
            except grpc.aio.AioRpcError as exc:  # KEDA logs it and tries again at the next poll
                log.warning("IsActive failed", extra={"code": str(exc.code())})
                self.keda.next_poll = self.clock.now() + self.keda.cfg.polling_interval_s
                continue
            now = self.clock.now()
            self.fleet.scale_to(self.keda.poll(now, active, self.fleet.spec_replicas), now)

    async def _hpa(self, stub: pb_grpc.ExternalScalerStub, metric_name: str) -> None:
        while True:
            await self.clock.sleep_until(self.hpa.next_sync)
            try:
                resp = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=metric_name))
            except grpc.aio.AioRpcError as exc:  # the HPA keeps the replicas and tries at the next sync
                log.warning("GetMetrics failed", extra={"code": str(exc.code())})
                self.hpa.next_sync = self.clock.now() + self.hpa.b.sync_period_s
                continue
            v = resp.metricValues[0]
            self.metric_value = v.metricValueFloat if v.metricValueFloat > 0 else float(v.metricValue)
            now = self.clock.now()
            spec = self.fleet.spec_replicas
            if spec == 0:
                self.hpa.next_sync = now + self.hpa.b.sync_period_s
                continue  # KEDA owns 0 <-> 1; the HPA is not running at 0
            raw = self.hpa.raw_external_average(self.metric_value, self.target, spec)
            self.fleet.scale_to(self.hpa.sync(now, spec, raw), now)
