"""KEDA + HPA actuation, emulated against the real gRPC server (time-compressed for the demo).

KEDA part: ``GetMetricSpec`` once, then every ``polling_s`` ``GetMetrics`` followed by ``IsActive``
(KEDA's two RPCs per poll), and an ``external-push`` ``StreamIsActive`` whose ``true`` activates a
target at 0 replicas at once. HPA part: every ``hpa_sync_s`` the External/AverageValue arithmetic of
:func:`scaler.hpa.hpa_replicas` with its tolerance, clamped to [max(min, 1), max].
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import grpc

from proto import externalscaler_pb2 as pb
from proto import externalscaler_pb2_grpc as pb_grpc
from scaler.hpa import hpa_replicas
from warmscale.demo.fleet import Fleet


@dataclass
class KedaHpaEmulator:
    channel: grpc.aio.Channel
    ref: pb.ScaledObjectRef
    fleet: Fleet
    min_replicas: int
    max_replicas: int
    polling_s: float = 2.0
    hpa_sync_s: float = 3.0
    tolerance: float = 0.1
    metric_value: float = 0.0
    target: float = 1.0
    active: bool = True
    scale_events: list[tuple[float, int, int]] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        stub = pb_grpc.ExternalScalerStub(self.channel)
        spec = await stub.GetMetricSpec(self.ref)
        self.target = spec.metricSpecs[0].targetSizeFloat or float(spec.metricSpecs[0].targetSize)
        tasks = [asyncio.create_task(self._poll(stub, stop)), asyncio.create_task(self._hpa(stop)),
                 asyncio.create_task(self._push(stub, stop))]
        await stop.wait()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await t

    async def _poll(self, stub: pb_grpc.ExternalScalerStub, stop: asyncio.Event) -> None:
        name = (await stub.GetMetricSpec(self.ref)).metricSpecs[0].metricName
        while not stop.is_set():
            resp = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=name))
            v = resp.metricValues[0]
            self.metric_value = v.metricValueFloat if v.metricValueFloat > 0 else float(v.metricValue)
            self.active = (await stub.IsActive(self.ref)).result
            await asyncio.sleep(self.polling_s)

    async def _push(self, stub: pb_grpc.ExternalScalerStub, stop: asyncio.Event) -> None:
        async for msg in stub.StreamIsActive(self.ref):
            if msg.result and self.fleet.spec_replicas == 0:
                self._apply(max(self.min_replicas, 1))

    async def _hpa(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(self.hpa_sync_s)
            current = self.fleet.spec_replicas
            if current == 0:
                continue  # KEDA owns 0 <-> 1; the HPA is not running at 0
            want = hpa_replicas(self.metric_value, self.target, current, self.tolerance)
            want = max(max(self.min_replicas, 1), min(self.max_replicas, want))
            if want != current:
                self._apply(want)

    def _apply(self, n: int) -> None:
        now = time.monotonic()
        before = self.fleet.spec_replicas
        self.fleet.scale_to(n, now)
        self.scale_events.append((now, before, n))
