"""Sources gathered into one :class:`Snapshot` (:class:`SnapshotCollector`). Which sources a
ScaledObject reads is the scaler's choice, from its configuration (``scaler/sources.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from warmscale.signals.histogram import Histogram
from warmscale.signals.model import GatewayReading, GpuReading, QueueReading, ReplicaReading, Snapshot
from warmscale.signals.sources.base import Source, SourceResult


class MissingProviderSource:
    """Stands in for pod discovery when no provider was supplied: reports why, every time."""

    provides_replicas = True

    def __init__(self, message: str, name: str = "pods") -> None:
        self.name = name
        self._message = message

    async def read(self, now: float) -> SourceResult:
        return SourceResult(errors=(f"{self.name}: {self._message}",), absent=True)

    async def aclose(self) -> None:
        return None


class SnapshotCollector:
    """Reads every source concurrently and merges the results into one :class:`Snapshot`.

    Readings older than ``staleness_seconds`` become unknown. A source that raises or overruns
    ``deadline`` seconds becomes a source error and *absent* (when it is a replica source), never a
    zero."""

    def __init__(
        self,
        sources: Sequence[Source],
        *,
        staleness_seconds: float = 30.0,
        deadline: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sources = tuple(sources)
        self.staleness_seconds = staleness_seconds
        self.deadline = deadline
        self._clock = clock

    async def _read(self, source: Source, now: float) -> SourceResult:
        try:
            async with asyncio.timeout(self.deadline):
                return await source.read(now)
        except TimeoutError:
            return SourceResult(errors=(f"{source.name}: no answer within {self.deadline:g}s",),
                                absent=_is_replica_source(source))
        except Exception as exc:
            return SourceResult(errors=(f"{source.name}: {type(exc).__name__}: {exc}",),
                                absent=_is_replica_source(source))

    async def collect(self, now: float | None = None) -> Snapshot:
        taken = self._clock() if now is None else now
        results = await asyncio.gather(*(self._read(s, taken) for s in self.sources))
        read_until = self._clock() if now is None else None
        replicas: list[ReplicaReading] = []
        queues: list[QueueReading] = []
        gateways: list[GatewayReading] = []
        errors: list[str] = []
        absent: list[str] = []
        ttft: Histogram | None = None
        itl: Histogram | None = None
        gpus: list[GpuReading] | None = None
        for source, res in zip(self.sources, results, strict=True):
            if res.gpus is not None:
                gpus = [*(gpus or ()), *res.gpus]
            if res.absent:
                absent.append(source.name)
            replicas.extend(r.stale(taken, self.staleness_seconds) for r in res.replicas)
            queues.extend(res.queues)
            gateways.extend(res.gateways)
            errors.extend(res.errors)
            if ttft is None and res.ttft_window is not None:
                ttft = res.ttft_window
            if itl is None and res.itl_window is not None:
                itl = res.itl_window
        return Snapshot(
            taken_at=taken,
            read_until=read_until,
            replicas=tuple(replicas),
            queues=tuple(queues),
            ttft_window=ttft,
            itl_window=itl,
            gateways=tuple(gateways),
            source_errors=tuple(errors),
            absent=tuple(absent),
            gpus=tuple(gpus) if gpus is not None else None,
        )

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.sources), return_exceptions=True)


def _is_replica_source(source: Source) -> bool:
    return bool(getattr(source, "provides_replicas", False))
