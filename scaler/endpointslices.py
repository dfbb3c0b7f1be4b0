"""The hold gateway's own replicas (``warmscale hold-gateway --service NAME``): the ready endpoints of the
workload's Service, watched through its EndpointSlices (kubernetes-asyncio; RBAC: ``list`` and
``watch`` on ``discovery.k8s.io/endpointslices`` in the workload's namespace, nothing else).

The list+watch is the controller's cache (scaler/kubecache.py): a watch that ends (its timeout, an
expired version, an API outage) is followed by a fresh list, with back-off. While the API cannot be
read, the last endpoints seen stay in use (unknown is not "none": a backend that is really gone
fails its request, which is then held, scaler/holdgate.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from warmscale.scaler.holdroute import endpoint_urls

log = logging.getLogger("warmscale.holdgate.endpoints")

# The label the EndpointSlice controller puts on a Service's slices.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# One watch call's server-side timeout: the watch is re-opened (from the last version) this often.
WATCH_SECONDS = 300


class ServiceEndpoints:
    """The ready endpoints of Service ``namespace/service`` as base URLs (:meth:`urls`), kept up to date
    by :meth:`run`; ``on_change`` is called whenever they change (the gateway routes what it holds)."""

    def __init__(self, api: Any, namespace: str, service: str, port: str | None,
                 on_change: Callable[[], None] = lambda: None) -> None:
        from kubernetes_asyncio import client

        from warmscale.scaler.kubecache import Cache

        self.namespace = namespace
        self.service = service
        self.port = port
        self.on_change = on_change
        self._urls: tuple[str, ...] = ()
        self._cache = Cache("endpointslices", client.DiscoveryV1Api(api).list_namespaced_endpoint_slice,
                            lambda _typ, _obj: self._update(), watch_timeout_s=WATCH_SECONDS,
                            namespace=namespace, label_selector=f"{SERVICE_NAME_LABEL}={service}")

    def urls(self) -> tuple[str, ...]:
        return self._urls

    def _update(self) -> None:
        urls = endpoint_urls(list(self._cache.items.values()), self.port)
        if urls != self._urls:
            log.info("own replicas changed", extra={"service": f"{self.namespace}/{self.service}",
                                                    "backends": list(urls)})
            self._urls = urls
            self.on_change()

    async def run(self) -> None:
        await self._cache.run()
