"""The hold gateway's own replicas (``warmscale hold-gateway --service NAME``): the ready endpoints of the
workload's Service, watched through its EndpointSlices (kubernetes-asyncio; RBAC: ``list`` and
``watch`` on ``discovery.k8s.io/endpointslices`` in the workload's namespace, nothing else).

A list, then a watch from its resourceVersion; a watch that ends (its timeout, an expired version,
an API outage) is followed by a fresh list after RETRY_SECONDS at most. While the API cannot be
read, the last endpoints seen stay in use (unknown is not "none": a backend that is really gone
fails its request, which is then held, scaler/holdgate.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from warmscale.scaler.holdroute import endpoint_urls

log = logging.getLogger("warmscale.holdgate.endpoints")

# The label the EndpointSlice controller puts on a Service's slices.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# One watch call's server-side timeout: the watch is re-opened (from the last version) this often.
WATCH_SECONDS = 300
# Wait before listing again after a failed list or watch (an API outage is not a busy loop).
RETRY_SECONDS = 2.0


class ServiceEndpoints:
    """The ready endpoints of Service ``namespace/service`` as base URLs (:meth:`urls`), kept up to date
    by :meth:`run`; ``on_change`` is called whenever they change (the gateway routes what it holds)."""

    def __init__(self, api: Any, namespace: str, service: str, port: str | None,
                 on_change: Callable[[], None] = lambda: None) -> None:
        from kubernetes_asyncio import client

        self.api = api
        self.discovery = client.DiscoveryV1Api(api)
        self.namespace = namespace
        self.service = service
        self.port = port
        self.on_change = on_change
        self._slices: dict[str, dict[str, Any]] = {}
        self._urls: tuple[str, ...] = ()

    def urls(self) -> tuple[str, ...]:
        return self._urls

    def _update(self) -> None:
        urls = endpoint_urls(list(self._slices.values()), self.port)
        if urls != self._urls:
            log.info("own replicas changed", extra={"service": f"{self.namespace}/{self.service}",
                                                    "backends": list(urls)})
            self._urls = urls
            self.on_change()

    async def run(self) -> None:
        from kubernetes_asyncio import watch

        selector = f"{SERVICE_NAME_LABEL}={self.service}"
        while True:
            try:
                listed = await self.discovery.list_namespaced_endpoint_slice(self.namespace, label_selector=selector)
                self._slices = {s.metadata.name: self.api.sanitize_for_serialization(s) for s in listed.items}
                self._update()
                w = watch.Watch()
                async with w.stream(self.discovery.list_namespaced_endpoint_slice, self.namespace,
                                    label_selector=selector, resource_version=listed.metadata.resource_version,
                                    timeout_seconds=WATCH_SECONDS) as stream:
                    async for event in stream:
                        kind, obj = event["type"], event["object"]
                        if kind == "ERROR":  # an expired resourceVersion: list again
                            break
                        name = obj.metadata.name
                        if kind == "DELETED":
                            self._slices.pop(name, None)
                        else:
                            self._slices[name] = self.api.sanitize_for_serialization(obj)
                        self._update()
                continue  # the watch's timeout: list again at once
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an API outage or a denied call: keep the last endpoints
                log.warning("service endpoints unreadable", extra={"service": f"{self.namespace}/{self.service}",
                                                                   "error": str(exc)})
            await asyncio.sleep(RETRY_SECONDS)
