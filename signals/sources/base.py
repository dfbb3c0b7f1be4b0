"""What every signal source returns, and the endpoint-provider seam for pod discovery."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from warmscale.signals.histogram import Histogram
from warmscale.signals.model import GatewayReading, GpuReading, QueueReading, ReplicaReading


@dataclass(frozen=True)
class SourceResult:
    """One source's contribution to a :class:`~signals.model.Snapshot`. ``errors`` are whole-source
    failures (Prometheus unreachable, pod discovery failed); per-replica and per-queue failures are
    unknown readings that carry their own error. ``absent``: a replica source that saw no replica at
    all (no endpoint, no pod, an empty Prometheus result, or a failure with nothing to report): the
    replicas' load is unknown, never zero (see :attr:`signals.model.Snapshot.absent`). ``gpus``:
    dcgm-exporter readings (``None``: this source reads no GPUs, or none answered)."""

    replicas: tuple[ReplicaReading, ...] = ()
    queues: tuple[QueueReading, ...] = ()
    ttft_window: Histogram | None = None
    itl_window: Histogram | None = None
    errors: tuple[str, ...] = ()
    absent: bool = False
    gateways: tuple[GatewayReading, ...] = ()
    gpus: tuple[GpuReading, ...] | None = None


@runtime_checkable
class Source(Protocol):
    name: str

    async def read(self, now: float) -> SourceResult:
        """Read the source; must not raise for I/O or payload problems (report them instead)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Endpoint:
    """A metrics URL and the replica it belongs to (a pod name when discovered)."""

    replica: str
    url: str


@runtime_checkable
class EndpointProvider(Protocol):
    """Where the scrape source finds its targets: the configured list, or pods discovered by label
    selector (``http://<pod IP>:<metricsPort><metricsPath>``). May raise; the source reports it."""

    async def endpoints(self) -> Sequence[Endpoint]: ...


class StaticEndpoints:
    """The ``endpoints`` metadata: each URL is its own replica."""

    def __init__(self, urls: Sequence[str]) -> None:
        self._endpoints = tuple(Endpoint(replica=u, url=u) for u in urls)

    async def endpoints(self) -> Sequence[Endpoint]:
        return self._endpoints
