"""Pod discovery from the Kubernetes API: the scaler's view of a ScaledObject's pods (an I/O edge).

:class:`KubeDiscovery` owns list+watch caches over one ``kubernetes_asyncio`` ApiClient, shared by
every ScaledObject that needs them:

- pods, one cache per (namespace, label selector);
- ScaledObjects (``keda.sh/v1alpha1``), one cache per namespace;
- Deployments / StatefulSets, one cache per (namespace, kind).

:meth:`KubeDiscovery.provider` returns a :class:`PodEndpoints` for one ScaledObject. Its pods are
those of the ``podSelector`` metadata key, else those of the scale target's ``spec.selector``
(the ScaledObject's ``spec.scaleTargetRef``, ``apps/v1 Deployment`` by default). It is an
:class:`~signals.sources.base.EndpointProvider` (metrics URLs of the pods to scrape) and also
counts pods (:meth:`PodEndpoints.counts`):

- *ready*: Ready condition True (and not terminating);
- *starting*: not terminating, not finished, not Ready (Pending pods included: they are replicas
  the HPA already asked for), except pods held at a scheduling gate (Kueue's admission gate while
  the quota is used up): those are *gated*, not counted as coming (:mod:`signals.podstate`);
- *current*: the scale target's ``spec.replicas`` when it can be read;
- *gpu_product*: the GPU product the replicas run on (:mod:`signals.gpus`): the one the target's pod
  template pins, else the GFD label ``nvidia.com/gpu.product`` most of the pods' nodes carry. Nodes
  are read one by one (``get``, cluster-scoped: the scaler's ClusterRole ``warmscale-scaler-nodes``),
  in the background and cached for :data:`NODE_PRODUCT_TTL_S`; a node not read yet, or unreadable
  (no RBAC), is unknown, and counting never waits for it beyond the first read.

Which pods are scraped: Running pods with an IP that are Ready, or that were Ready before (seen by
this cache: an engine that lost readiness under load is still loaded). A pod that has never been
Ready is *starting*: it is counted as capacity in flight, not scraped, because an engine that is
still loading serves no ``/metrics`` yet and an unreachable replica would count as an *unknown*,
loaded one (the policy assumes unknown replicas carry the known ones' load), i.e. twice.
``scrape_unready=True`` scrapes those too.

Errors (no API access, forbidden, ScaledObject or target missing) are raised from
:meth:`PodEndpoints.endpoints` / :meth:`PodEndpoints.counts` as :class:`DiscoveryError`: the
scrape source turns them into a source error, and the caches log each failure once (not on every
retry) and retry with jittered exponential back-off. Watches are resumed from the last resource
version when they expire and re-listed on ``410 Gone``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.signals.gpus import fleet_gpu_product, node_gpu_product, template_gpu_product
from warmscale.signals.podstate import lws_group_counts, pod_state
from warmscale.signals.sources.base import Endpoint

log = logging.getLogger("warmscale.signals.pods")

Obj = dict[str, Any]
UrlFor = Callable[[Obj, "int | None", str], "str | None"]
"""``url_for(pod, metrics_port, metrics_path) -> URL`` (``None``: the pod has no metrics endpoint)."""

KEDA_GROUP, KEDA_VERSION, SCALEDOBJECTS = "keda.sh", "v1alpha1", "scaledobjects"
LWS_GROUP, LWS_VERSION, LWS_KIND = "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"
SUPPORTED_TARGETS = {("apps", "Deployment"): "deployments", ("apps", "StatefulSet"): "statefulsets",
                     (LWS_GROUP, LWS_KIND): "leaderworkersets"}
# Labels the LeaderWorkerSet controller puts on every pod of a group (sigs.k8s.io/lws, v0.10.0).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"  # "0": the leader


# A node's GPU product changes only when the node is re-imaged or replaced (then it has a new name as
# a rule): re-read each node this often. A failed read is retried after NODE_RETRY_S.
NODE_PRODUCT_TTL_S = 600.0
NODE_RETRY_S = 60.0
# Forbidden (no nodes grant: a choice, not a fault): no node is read again for this long, so an
# install without the grant costs one 403 per 10 minutes, not one per node per minute.
NODE_FORBIDDEN_RETRY_S = 600.0


class DiscoveryError(Exception):
    """Pods or the scale target cannot be read (access, missing object, not synced yet)."""


# ------------------------------------------------------------------------------------------ helpers


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """A ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``) as a label selector string."""
    if not selector:
        raise DiscoveryError("the scale target has no spec.selector")
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), sorted(expr.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise DiscoveryError(f"unsupported selector operator {op!r}")
    if not parts:
        raise DiscoveryError("the scale target's selector is empty (would select every pod)")
    return ",".join(parts)


def _port_of(pod: Obj, metrics_port: int | None) -> int | None:
    if metrics_port is not None:
        return metrics_port
    ports = [p for c in (pod.get("spec") or {}).get("containers") or [] for p in c.get("ports") or []]
    for wanted in ("metrics", "http"):
        for p in ports:
            if p.get("name") == wanted and p.get("containerPort"):
                return int(p["containerPort"])
    return int(ports[0]["containerPort"]) if ports and ports[0].get("containerPort") else None


def pod_metrics_url(pod: Obj, metrics_port: int | None, metrics_path: str) -> str | None:
    """``http://<pod IP>:<port><path>``; the port is ``metricsPort``, else the container port named
    ``metrics``, else ``http``, else the first declared one."""
    ip = (pod.get("status") or {}).get("podIP")
    port = _port_of(pod, metrics_port)
    if not ip or port is None:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}{metrics_path}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        text = str(exc.reason or "").strip()
        return f"HTTP {exc.status} {text[:200]}".strip()
    return f"{type(exc).__name__}: {str(exc)[:200]}"


async def read_json(call: Callable[..., Awaitable[Any]], *args: Any, request_timeout: float, **kwargs: Any) -> Obj:
    """One API call's raw JSON body (no model objects); a non-2xx answer is an :class:`ApiException`
    carrying the server's message."""
    resp = await call(*args, _preload_content=False, _request_timeout=request_timeout, **kwargs)
    try:
        body = await resp.read()
        status = int(resp.status)
    finally:
        resp.release()
    if not 200 <= status < 300:
        try:
            message = str(json.loads(body).get("message", ""))
        except ValueError:
            message = body.decode(errors="replace")
        raise ApiException(status=status, reason=message[:300])
    data: Obj = json.loads(body)
    return data


# ----------------------------------------------------------------------------------- list+watch cache


class ListWatchCache:
    """A list+watch cache of one namespaced resource (raw API JSON keyed by name).

    ``list_fn(*args, **kwargs)`` is a ``kubernetes_asyncio`` list method (it also serves the watch).
    The watch resumes from the last resource version when the server ends it and bookmarks keep
    that version fresh; ``410 Gone`` and any other failure re-list, with jittered exponential
    back-off on errors. A failing list is logged once (and its recovery once)."""

    def __init__(self, what: str, list_fn: Callable[..., Awaitable[Any]], *args: Any,
                 watch_timeout_s: int = 300, request_timeout_s: float = 10.0, max_backoff_s: float = 30.0,
                 **kwargs: Any) -> None:
        self.what = what
        self._list_fn = list_fn
        self._args = args
        self._kwargs = kwargs
        self._watch_timeout = watch_timeout_s
        self._request_timeout = request_timeout_s
        self._max_backoff = max_backoff_s
        self.items: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.error: str | None = None
        self.failing_since: float | None = None
        self.lists = 0
        self.users = 0
        self._changed = asyncio.Event()
        self._waited = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"list+watch {self.what}")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_synced(self, within: float) -> None:
        """Wait for the first list (at most ``within`` s); :class:`DiscoveryError` if there is none."""
        if not self.synced.is_set() and self.error is None and not self._waited:
            # Only the first reader waits: a cache that cannot list must not slow every tick.
            self._waited = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within):
                    await self.synced.wait()
        if not self.synced.is_set():
            raise DiscoveryError(f"{self.what}: {self.error or f'not listed within {within:g}s'}")

    def usable(self, stale_after_s: float) -> dict[str, Obj]:
        """The items, unless listing has been failing for more than ``stale_after_s`` seconds."""
        if not self.synced.is_set():
            raise DiscoveryError(f"{self.what}: {self.error or 'not listed yet'}")
        if self.failing_since is not None and time.monotonic() - self.failing_since > stale_after_s:
            raise DiscoveryError(f"{self.what}: {self.error}")
        return self.items

    async def changed(self, within: float) -> None:
        """Wait for the next change of :attr:`items` (for tests and tools)."""
        event = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await event.wait()

    def _notify(self) -> None:
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    async def _list(self) -> str:
        data = await read_json(self._list_fn, *self._args, request_timeout=self._request_timeout, **self._kwargs)
        self.items = {str((o.get("metadata") or {}).get("name", "")): o for o in data.get("items") or []}
        self.lists += 1
        if self.failing_since is not None:
            log.info("kubernetes list recovered", extra={"cache": self.what})
        self.error = None
        self.failing_since = None
        self.synced.set()
        self._notify()
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    def _failed(self, exc: BaseException) -> None:
        message = _reason(exc)
        if self.failing_since is None or message != self.error:
            log.warning("kubernetes list failed; retrying with back-off",
                        extra={"cache": self.what, "error": message})
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self.error = message

    async def _watch(self, rv: str) -> str:
        timeout = max(1, int(self._watch_timeout * (0.8 + 0.4 * random.random())))
        w = watch.Watch(return_type="object")
        async with w:
            stream = w.stream(self._list_fn, *self._args, resource_version=rv, timeout_seconds=timeout,
                              allow_watch_bookmarks=True, _request_timeout=(10, timeout + 30), **self._kwargs)
            async for ev in stream:
                kind, raw = ev["type"], ev.get("raw_object") or {}
                rv = str((raw.get("metadata") or {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                name = str((raw.get("metadata") or {}).get("name", ""))
                if kind == "DELETED":
                    self.items.pop(name, None)
                else:
                    self.items[name] = raw
                self._notify()
        return rv

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                rv = await self._list()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(exc)
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, self._max_backoff)
                continue
            backoff = 0.5
            try:
                while True:  # the server ends a watch after timeout_seconds: resume from rv
                    rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status != 410:  # 410 Gone: the version is too old, re-list at once
                    log.info("kubernetes watch ended; re-listing", extra={"cache": self.what, "error": _reason(exc)})
                    await asyncio.sleep(0.5 * random.random())
            except Exception as exc:
                log.info("kubernetes watch ended; re-listing", extra={"cache": self.what, "error": _reason(exc)})
                await asyncio.sleep(0.5 * random.random())


# ---------------------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class PodCounts:
    """Replica counts of one ScaledObject as the API server sees them."""

    ready: int
    starting: int
    current: int | None  # the scale target's spec.replicas (None: target not readable)
    pods: tuple[str, ...] = ()  # names of the ready + starting pods
    gpu_product: str | None = None  # the replicas' GPU product (signals.gpus; None: unknown)
    gated: int = 0  # pods held at a scheduling gate (Kueue quota): asked for, not coming (signals.podstate)


@dataclass(frozen=True)
class TargetRef:
    namespace: str
    kind: str
    name: str
    api_version: str = "apps/v1"


class NodeProducts:
    """GPU products of nodes by name, read with ``get`` (one read in flight per node) and cached.

    :meth:`lookup` answers from the cache at once and starts reads for the names it lacks or holds
    too long; only the first lookup of a name waits for its read (at most ``first_wait_s``). A read
    that fails (not found, timeout) leaves the node unknown until :data:`NODE_RETRY_S` later; a
    forbidden one stops every read for :data:`NODE_FORBIDDEN_RETRY_S`; each kind of failure is
    logged once. Nodes not read for two TTLs (gone, or no longer any pod's) are forgotten."""

    def __init__(self, read_node: Callable[..., Awaitable[Any]], *, first_wait_s: float = 1.0,
                 request_timeout_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._read_node = read_node
        self.first_wait_s = first_wait_s
        self._request_timeout = request_timeout_s
        self._clock = clock
        self._known: dict[str, tuple[str | None, float]] = {}  # name -> (product, read at)
        self._failed: dict[str, float] = {}  # name -> failed at
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self.error: str | None = None
        self.reads = 0  # reads that answered
        self.attempts = 0  # reads started
        self._forbidden_at: float | None = None
        self._swept_at = clock()

    def _due(self, name: str, now: float) -> bool:
        if name in self._inflight:
            return False
        if self._forbidden_at is not None and now - self._forbidden_at < NODE_FORBIDDEN_RETRY_S:
            return False
        if name in self._failed:
            return now - self._failed[name] >= NODE_RETRY_S
        known = self._known.get(name)
        return known is None or now - known[1] >= NODE_PRODUCT_TTL_S

    async def _read(self, name: str) -> None:
        self.attempts += 1
        try:
            node = await read_json(self._read_node, name, request_timeout=self._request_timeout)
            self.reads += 1
            self._known[name] = (node_gpu_product(node), self._clock())
            self._failed.pop(name, None)
            if self.error is not None:
                log.info("kubernetes node read recovered", extra={"node": name})
                self.error = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = _reason(exc)
            if message != self.error:
                log.warning("cannot read a node's GPU product; it stays unknown",
                            extra={"node": name, "error": message})
            self.error = message
            self._failed[name] = self._clock()
            if isinstance(exc, ApiException) and exc.status == 403:
                self._forbidden_at = self._clock()
        finally:
            self._inflight.pop(name, None)

    async def lookup(self, names: Sequence[str]) -> dict[str, str | None]:
        """The known product of each name (``None``: unlabelled, or not read yet / unreadable)."""
        now = self._clock()
        if now - self._swept_at >= NODE_PRODUCT_TTL_S:
            self._swept_at = now
            for gone in [n for n, (_, at) in self._known.items() if now - at >= 2 * NODE_PRODUCT_TTL_S]:
                del self._known[gone]
            for gone in [n for n, at in self._failed.items() if now - at >= 2 * NODE_PRODUCT_TTL_S]:
                del self._failed[gone]
        first: list[asyncio.Task[None]] = []
        for name in dict.fromkeys(names):
            if name and self._due(name, now):
                task = self._inflight[name] = asyncio.create_task(self._read(name), name=f"read node {name}")
                if name not in self._known and name not in self._failed:
                    first.append(task)
        if first:
            await asyncio.wait(first, timeout=self.first_wait_s)
        return {n: (self._known.get(n) or (None, 0.0))[0] for n in names}

    async def aclose(self) -> None:
        tasks = list(self._inflight.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class KubeDiscovery:
    """Shared list+watch caches over one ApiClient, and :class:`PodEndpoints` built on them.

    ``url_for`` maps a pod to its metrics URL (default :func:`pod_metrics_url`); tests map pods to
    local servers with it. ``sync_timeout_s``: how long a first read waits for a cache's first
    list. ``stale_after_s``: how long a cache whose re-list keeps failing is still used."""

    def __init__(self, api: client.ApiClient, *, url_for: UrlFor | None = None, sync_timeout_s: float = 1.0,
                 stale_after_s: float = 60.0, scrape_unready: bool = False, watch_timeout_s: int = 300) -> None:
        self.api = api
        self.url_for: UrlFor = url_for or pod_metrics_url
        self.sync_timeout_s = sync_timeout_s
        self.stale_after_s = stale_after_s
        self.scrape_unready = scrape_unready
        self.watch_timeout_s = watch_timeout_s
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._caches: dict[tuple[str, ...], ListWatchCache] = {}
        self._was_ready: dict[str, set[str]] = {}  # per pods cache: uids seen Ready
        self.nodes = NodeProducts(self._core.read_node, first_wait_s=sync_timeout_s)

    # -- shared caches ------------------------------------------------------------------------------
    def _cache(self, key: tuple[str, ...], make: Callable[[], ListWatchCache]) -> ListWatchCache:
        cache = self._caches.get(key)
        if cache is None:
            cache = self._caches[key] = make()
            cache.start()
        cache.users += 1
        return cache

    async def release(self, cache: ListWatchCache) -> None:
        cache.users -= 1
        if cache.users <= 0:
            for key, c in list(self._caches.items()):
                if c is cache:
                    del self._caches[key]
                    self._was_ready.pop(cache.what, None)
            await cache.aclose()

    def pods_cache(self, namespace: str, selector: str) -> ListWatchCache:
        return self._cache(("pods", namespace, selector), lambda: ListWatchCache(
            f"pods {namespace} {selector}", self._core.list_namespaced_pod, namespace, label_selector=selector,
            watch_timeout_s=self.watch_timeout_s))

    def scaledobjects_cache(self, namespace: str) -> ListWatchCache:
        return self._cache(("scaledobjects", namespace), lambda: ListWatchCache(
            f"scaledobjects {namespace}", self._custom.list_namespaced_custom_object, KEDA_GROUP, KEDA_VERSION,
            namespace, SCALEDOBJECTS, watch_timeout_s=self.watch_timeout_s))

    def targets_cache(self, namespace: str, kind: str) -> ListWatchCache:
        if kind == LWS_KIND:
            return self._cache(("targets", namespace, kind), lambda: ListWatchCache(
                f"leaderworkersets {namespace}", self._custom.list_namespaced_custom_object, LWS_GROUP, LWS_VERSION,
                namespace, "leaderworkersets", watch_timeout_s=self.watch_timeout_s))
        list_fn = self._apps.list_namespaced_deployment if kind == "Deployment" else \
            self._apps.list_namespaced_stateful_set
        return self._cache(("targets", namespace, kind), lambda: ListWatchCache(
            f"{SUPPORTED_TARGETS[('apps', kind)]} {namespace}", list_fn, namespace,
            watch_timeout_s=self.watch_timeout_s))

    def caches(self) -> dict[tuple[str, ...], ListWatchCache]:
        return dict(self._caches)

    def provider(self, namespace: str, scaledobject: str, *, pod_selector: str | None = None,
                 metrics_port: int | None = None, metrics_path: str = "/metrics") -> PodEndpoints:
        return PodEndpoints(self, namespace, scaledobject, pod_selector=pod_selector, metrics_port=metrics_port,
                            metrics_path=metrics_path)

    def was_ready(self, cache: ListWatchCache) -> set[str]:
        return self._was_ready.setdefault(cache.what, set())

    async def aclose(self) -> None:
        caches = list(self._caches.values())
        self._caches.clear()
        await asyncio.gather(*(c.aclose() for c in caches), self.nodes.aclose(), return_exceptions=True)


class PodEndpoints:
    """The pods of one ScaledObject: an :class:`~signals.sources.base.EndpointProvider` plus counts.

    Holds references on the shared caches it uses; :meth:`aclose` releases them."""

    def __init__(self, discovery: KubeDiscovery, namespace: str, scaledobject: str, *,
                 pod_selector: str | None = None, metrics_port: int | None = None,
                 metrics_path: str = "/metrics") -> None:
        self.discovery = discovery
        self.namespace = namespace
        self.scaledobject = scaledobject
        self.pod_selector = pod_selector
        self.metrics_port = metrics_port
        self.metrics_path = metrics_path
        self.target: TargetRef | None = None
        self.target_error: str | None = None
        self.template: Obj | None = None  # the scale target's pod template spec (last read)
        self.group_size: int | None = None  # LeaderWorkerSet target: pods per replica (its groups)
        self._held: dict[str, ListWatchCache] = {}  # role -> cache
        self._keys: dict[str, tuple[str, ...]] = {}

    def __repr__(self) -> str:
        return f"PodEndpoints({self.namespace}/{self.scaledobject}, selector={self.pod_selector!r})"

    async def _hold(self, role: str, key: tuple[str, ...], make: Callable[[], ListWatchCache]) -> ListWatchCache:
        if self._keys.get(role) != key:
            old = self._held.pop(role, None)
            self._keys.pop(role, None)
            if old is not None:
                await self.discovery.release(old)
            self._held[role] = make()
            self._keys[role] = key
        cache = self._held[role]
        await cache.wait_synced(self.discovery.sync_timeout_s)
        return cache

    async def _target(self) -> tuple[TargetRef, Obj]:
        """The ScaledObject's scale target and its current object."""
        d = self.discovery
        sos = await self._hold("scaledobjects", ("scaledobjects", self.namespace),
                               lambda: d.scaledobjects_cache(self.namespace))
        so = sos.usable(d.stale_after_s).get(self.scaledobject)
        if so is None:
            raise DiscoveryError(f"scaledobject {self.namespace}/{self.scaledobject} not found")
        ref = (so.get("spec") or {}).get("scaleTargetRef") or {}
        api_version = str(ref.get("apiVersion") or "apps/v1")
        kind = str(ref.get("kind") or "Deployment")
        group = api_version.split("/", 1)[0] if "/" in api_version else ""
        if not ref.get("name"):
            raise DiscoveryError(f"scaledobject {self.namespace}/{self.scaledobject} has no scaleTargetRef.name")
        target = TargetRef(self.namespace, kind, str(ref["name"]), api_version)
        self.target = target
        if (group, kind) not in SUPPORTED_TARGETS:
            raise DiscoveryError(f"scale target kind {api_version} {kind} is not supported "
                                 "(Deployment, StatefulSet, LeaderWorkerSet); set podSelector")
        targets = await self._hold("targets", ("targets", self.namespace, kind),
                                   lambda: d.targets_cache(self.namespace, kind))
        obj = targets.usable(d.stale_after_s).get(target.name)
        if obj is None:
            raise DiscoveryError(f"{kind} {self.namespace}/{target.name} (scale target) not found")
        return target, obj

    async def _pods(self) -> tuple[list[Obj], ListWatchCache, int | None]:
        """The pods, their cache, and the target's spec.replicas (None when not readable)."""
        current: int | None = None
        selector = self.pod_selector
        self.template = None
        self.group_size = None
        try:
            target, obj = await self._target()
            spec = obj.get("spec") or {}
            current = int(spec["replicas"]) if spec.get("replicas") is not None else 1
            if target.kind == LWS_KIND:
                # one replica = one group; the leader's template is the one that serves (its GPU product)
                lwt = spec.get("leaderWorkerTemplate") or {}
                self.group_size = max(1, int(lwt.get("size") or 1))
                self.template = (lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}).get("spec")
                if selector is None:
                    selector = f"{LWS_NAME_LABEL}={target.name}"
            else:
                self.template = (spec.get("template") or {}).get("spec")
            if selector is None:
                selector = selector_string(spec.get("selector"))
            self.target_error = None
        except DiscoveryError as exc:
            self.target_error = str(exc)
            if selector is None:
                raise
        d = self.discovery
        pods = await self._hold("pods", ("pods", self.namespace, selector),
                                lambda: d.pods_cache(self.namespace, selector))
        items = pods.usable(d.stale_after_s)
        return sorted(items.values(), key=lambda p: str(p["metadata"].get("name", ""))), pods, current

    async def counts(self) -> PodCounts:
        """Ready and starting pods, and the target's spec.replicas. Raises :class:`DiscoveryError`."""
        pods, cache, current = await self._pods()
        ready = starting = gated = 0
        names: list[str] = []
        nodes: list[str] = []
        was_ready = self.discovery.was_ready(cache)
        for pod in pods:
            state = pod_state(pod)
            if state == "ready":
                ready += 1
                was_ready.add(str(pod["metadata"].get("uid", "")))
            elif state == "starting":
                starting += 1
            else:
                gated += state == "gated"
                continue
            names.append(str(pod["metadata"].get("name", "")))
            nodes.append(str((pod.get("spec") or {}).get("nodeName") or ""))
        was_ready.intersection_update(str(p["metadata"].get("uid", "")) for p in pods)  # forget deleted pods
        if self.group_size is not None and self.pod_selector is None:
            # a LeaderWorkerSet's replicas are its groups, ready only when all their pods are
            ready, starting = lws_group_counts(pods, self.group_size)
        product = await self._gpu_product(nodes)
        return PodCounts(ready=ready, starting=starting, current=current, pods=tuple(names), gpu_product=product,
                         gated=gated)

    async def _gpu_product(self, nodes: Sequence[str]) -> str | None:
        """The replicas' GPU product: the template's pin needs no node read (signals.gpus)."""
        pinned = template_gpu_product(self.template)
        if pinned is not None:
            return pinned
        scheduled = [n for n in nodes if n]
        known = await self.discovery.nodes.lookup(scheduled) if scheduled else {}
        return fleet_gpu_product(self.template, (known.get(n) for n in scheduled))

    async def endpoints(self) -> Sequence[Endpoint]:
        """Metrics endpoints of the pods to scrape (see the module docstring for which)."""
        pods, cache, _ = await self._pods()
        was_ready = self.discovery.was_ready(cache)
        out: list[Endpoint] = []
        for pod in pods:
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            if self.group_size is not None and self.pod_selector is None and \
                    (meta.get("labels") or {}).get(LWS_WORKER_INDEX) != "0":
                continue  # a group's leader serves the API and its /metrics (podSelector: scrape any pods)
            state = pod_state(pod)
            uid = str(meta.get("uid", ""))
            if state == "ready":
                was_ready.add(uid)
            elif state != "starting" or status.get("phase") != "Running" or not status.get("podIP"):
                continue
            elif not (self.discovery.scrape_unready or uid in was_ready):
                continue
            url = self.discovery.url_for(pod, self.metrics_port, self.metrics_path)
            if url is not None:
                out.append(Endpoint(replica=str(meta.get("name", "")), url=url))
        return out

    async def aclose(self) -> None:
        held, self._held = self._held, {}
        self._keys.clear()
        for cache in held.values():
            await self.discovery.release(cache)
