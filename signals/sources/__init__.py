"""Signal sources (the I/O edge): direct scrapes, Prometheus, a Redis gateway queue, and the collector
that merges them into a :class:`~signals.model.Snapshot` (the scaler builds a ScaledObject's from its
configuration: ``scaler/sources.py``). Pod discovery from the Kubernetes API lives in
:mod:`signals.sources.pods` (``KubeDiscovery``, ``PodEndpoints``), imported from there so that
``kubernetes_asyncio`` is only loaded by processes that use it."""

from warmscale.signals.sources.base import Endpoint, EndpointProvider, Source, SourceResult, StaticEndpoints
from warmscale.signals.sources.collector import SnapshotCollector

__all__ = [
    "Endpoint",
    "EndpointProvider",
    "SnapshotCollector",
    "Source",
    "SourceResult",
    "StaticEndpoints",
]
