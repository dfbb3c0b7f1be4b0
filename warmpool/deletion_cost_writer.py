"""Writes ``controller.kubernetes.io/pod-deletion-cost`` on the ready pods of the Deployments the
controller manages, by their load, so a scale-in removes the least loaded replica (I/O shell; the
ranking is :mod:`warmscale.warmpool.deletion_cost`; docs/warmpool.md, "Scale-in that never kills a
request").

Every :data:`PASS_SECONDS` the controller runs one pass over its enabled Deployments: each ready pod the
Deployment's selector matches (never one warmscale created, never one of another owner kind) is
scraped once through the scaler's own scrape path (:func:`warmscale.signals.sources.scrape.scrape_endpoint`:
bounded time and bytes, the engine's parser), and only the pods whose cost changed are patched. One
slow pod delays no other (the scrapes run concurrently, each bounded). StatefulSets and
LeaderWorkerSets are left alone: they remove the highest ordinal whatever the annotation says.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.signals.sources.base import Endpoint
from warmscale.signals.sources.pods import pod_metrics_url, pod_state
from warmscale.signals.sources.scrape import scrape_endpoint
from warmscale.warmpool import objects as ob
from warmscale.warmpool.deletion_cost import DELETION_COST, PodLoad, deletion_costs

log = logging.getLogger("warmscale.warmpool.deletion_cost")

# How often the costs are refreshed: a scale-in follows the HPA's sync (15 s) and its scale-down
# stabilisation (minutes), so a cost a few seconds old still names the least loaded replica.
PASS_SECONDS = 10.0
# One pod's scrape: connection, body and parse (the scaler's default scrapeTimeoutSeconds).
SCRAPE_TIMEOUT_SECONDS = 2.0
# The metrics path of every supported engine (vLLM, SGLang, TGI, TensorRT-LLM serve).
METRICS_PATH = "/metrics"
# A JSON merge patch: only the one annotation is written, the pod's others are kept.
MERGE = "application/merge-patch+json"


def _owned_by_replicaset(pod: dict[str, Any]) -> bool:
    return any(o.get("kind") == "ReplicaSet" for o in (pod.get("metadata") or {}).get("ownerReferences") or [])


def workload_pods(wl: ob.Workload, pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Deployment's own pods: its namespace, its selector, a ReplicaSet's, not warmscale's."""
    if wl.kind != "Deployment" or not wl.selector:
        return []
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        labels = meta.get("labels") or {}
        if (meta.get("namespace") == wl.namespace and not ob.is_managed(p) and _owned_by_replicaset(p)
                and all(labels.get(k) == v for k, v in wl.selector.items())):
            out.append(p)
    return out


class DeletionCostWriter:
    def __init__(self, core: Any, session: aiohttp.ClientSession | None = None) -> None:
        self.core = core  # CoreV1Api
        self._session = session
        self.patched = 0  # pods patched so far (tests and logs read it)

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _load(self, pod: dict[str, Any], now: float) -> float | None:
        url = pod_metrics_url(pod, None, METRICS_PATH)
        if url is None:
            return None
        name = str((pod.get("metadata") or {}).get("name"))
        reading = await scrape_endpoint(self.session(), Endpoint(name, url), now, timeout_s=SCRAPE_TIMEOUT_SECONDS)
        sig = reading.signal
        return None if sig is None else float(sig.running + sig.waiting)

    async def loads(self, pods: list[dict[str, Any]], now: float) -> list[PodLoad]:
        ready = [pod_state(p) == "ready" for p in pods]
        found = await asyncio.gather(*(self._load(p, now) if r else _none() for p, r in zip(pods, ready, strict=True)))
        return [PodLoad(str((p.get("metadata") or {}).get("name")), r, load,
                        ((p.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST))
                for p, r, load in zip(pods, ready, found, strict=True)]

    async def write(self, wl: ob.Workload, pods: Iterable[dict[str, Any]], now: float) -> dict[str, str]:
        """One pass for one workload: the costs patched (pod -> value)."""
        own = workload_pods(wl, pods)
        if not own:
            return {}
        patches = deletion_costs(await self.loads(own, now))
        for name, value in patches.items():
            body = {"metadata": {"annotations": {DELETION_COST: value}}}
            try:
                await self.core.patch_namespaced_pod(name, wl.namespace, body, _content_type=MERGE)
                self.patched += 1
            except ApiException as exc:
                if exc.status == 404:  # deleted meanwhile
                    continue
                log.warning("cannot set the pod's deletion cost", extra={"workload": wl.key, "pod": name,
                                                                         "status": exc.status})
        return patches


async def _none() -> None:
    return None
