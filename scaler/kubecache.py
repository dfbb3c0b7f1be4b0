"""A list+watch cache of one Kubernetes resource (kubernetes-asyncio), shared by the warm-pool
controller (warmpool/kube.py re-exports it) and the hold gateway's own replicas
(scaler/endpointslices.py). Only imported where the process talks to the API server."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("warmscale.kubecache")
Obj = dict[str, Any]


async def read_raw(call: Callable[..., Awaitable[Any]], *args: Any) -> Obj:
    """GET returning raw JSON; non-2xx raises ApiException (``_preload_content=False`` does not)."""
    resp = await call(*args, _preload_content=False)
    body = await resp.read()
    if not 200 <= resp.status < 300:
        raise ApiException(status=resp.status, reason=body.decode(errors="replace")[:300])
    return dict(json.loads(body))


class Cache:
    """A list+watch cache of one resource (raw API JSON, keyed by namespace/name).

    ``optional``: the resource may not be served (a CRD not installed: 404) or not granted (403); the
    cache then counts as synced and empty, and keeps re-listing with back-off, so installing the CRD
    later is picked up without a restart."""

    def __init__(self, name: str, list_fn: Callable[..., Awaitable[Any]], on_change: Callable[[str, Obj], None],
                 watch_timeout_s: int = 300, optional: bool = False, **list_kwargs: Any) -> None:
        self.name = name
        self.optional = optional
        self.watch_timeout_s = watch_timeout_s
        self.lists = 0
        self.list_fn = list_fn
        self.list_kwargs = list_kwargs
        self.on_change = on_change
        self.items: dict[str, Obj] = {}
        self.synced = asyncio.Event()

    @staticmethod
    def key(o: Obj) -> str:
        m = o.get("metadata") or {}
        return f"{m.get('namespace', '')}/{m.get('name', '')}"

    async def _list(self) -> str:
        data = await read_raw(functools.partial(self.list_fn, **self.list_kwargs))
        self.items = {self.key(o): o for o in data.get("items") or []}
        self.lists += 1
        self.synced.set()
        self.on_change("SYNC", {})
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    async def run(self) -> None:
        backoff = 0.5
        while True:
            try:
                rv = await self._list()
                backoff = 0.5
                while True:
                    w = watch.Watch()
                    async with w:
                        async for ev in w.stream(self.list_fn, resource_version=rv,
                                                 timeout_seconds=self.watch_timeout_s,
                                                 allow_watch_bookmarks=True, **self.list_kwargs):
                            typ, raw = ev["type"], ev.get("raw_object") or {}
                            if typ == "ERROR":
                                raise ApiException(status=int(raw.get("code", 500)), reason=raw.get("reason"))
                            rv = str((raw.get("metadata") or {}).get("resourceVersion", rv))
                            if typ == "BOOKMARK":
                                continue
                            k = self.key(raw)
                            if typ == "DELETED":
                                self.items.pop(k, None)
                            else:
                                self.items[k] = raw
                            self.on_change(typ, raw)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # 410 Gone (version compacted), API server restart, ...: list afresh
                status = getattr(exc, "status", None)
                if self.optional and status in (403, 404) and not self.items:
                    if not self.synced.is_set():
                        log.info("optional resource not served or not granted: empty", extra={
                            "cache": self.name, "status": status})
                    self.synced.set()
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                log.info("cache relist", extra={"cache": self.name, "status": status, "error": str(exc)[:200]})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
