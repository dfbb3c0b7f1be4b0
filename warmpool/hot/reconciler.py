"""The hot pool's controller: creates the sleepers the pool plan keeps and their shared ResourceClaims,
deletes the ones it no longer keeps, replaces the ones that failed to wake twice or whose unknown state
outlived its bound (warmpool/hot/unknown_life.py) (I/O shell;
docs/hot-tier.md, "Placement").

Every ``RESYNC_SECONDS`` it lists the opted-in workloads (``warmscale.io/hot-standby``), the pool
nodes, the DRA ResourceSlices and claims, and warmscale's sleeper pods, and for each (namespace,
pool):

1. the pool's GPUs: the DRA devices its nodes publish that no other claim holds (first-class), else
   the GPUs DCGM reports there (time-sliced fallback), else none: a ``HotPoolNoPlacement`` Event on
   each of its workloads, the tier off, **nothing deleted**;
2. the plan (:func:`~warmscale.warmpool.hot.pool.plan_pool`: budgets, eviction by value per GiB);
3. the claims and sleeper pods it calls for are created; warmscale's sleepers it does not keep are
   deleted (and claims none of its sleepers references any more).

A workload whose hot annotations are invalid gets an Event (``InvalidAnnotation``) and its sleepers
are left as they are; one that removed ``warmscale.io/hot-standby`` loses its sleepers. Only objects
with warmscale's labels are ever deleted (listed by them, checked again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.scaler.bursts import BurstStats
from warmscale.scaler.kube import EventRecorder
from warmscale.signals.engines.dcgm import attributions
from warmscale.signals.parsing import parse_text
from warmscale.warmpool.annotations import AnnotationError
from warmscale.warmpool.controller import workload_from
from warmscale.warmpool.hot.auto_size import HotEvidence, sleepers_wanted
from warmscale.warmpool.hot.config import (
    ENGINE,
    HOT_STANDBY,
    HotConfig,
    PoolNodeConfig,
    parse_hot,
    parse_pool_node,
    placement_off_reason,
    watched_namespaces,
)
from warmscale.warmpool.hot.devices import DcgmAttribution, claim_device, dcgm_attribution, dra_devices
from warmscale.warmpool.hot.pool import Placement, Pool, PoolGPU, SleeperWant, plan_pool
from warmscale.warmpool.hot.sleeper_pods import (
    DEVICE_FROM_DCGM,
    HOT_CLAIM,
    HOT_NODE,
    HOT_TEMPLATE,
    SleeperTarget,
    claim_name,
    shared_claim,
    sleeper_pod,
)
from warmscale.warmpool.hot.sleepers import HOT_DEVICE, HOT_INDEX, HOT_WORKLOAD, SLEEPER_ROLE, SLEEPER_SELECTOR
from warmscale.warmpool.hot.surface import support
from warmscale.warmpool.kube import ignore_status, read_raw
from warmscale.warmpool.objects import MANAGED_BY, MANAGED_BY_VALUE, ROLE, Workload

log = logging.getLogger("warmscale.warmpool.hot.reconciler")

# How often the pool is planned again (sleepers take minutes to start; a burst is served by the waker,
# not by this loop).
RESYNC_SECONDS = 10.0
# A sleeper the plan keeps costs its share of the pool; without recorded bursts every sleeper of an
# explicit count is worth the same per GiB of host RAM it holds.
VALUE_EXPLICIT = 1.0
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
KINDS = (("Deployment", "deployment"), ("StatefulSet", "stateful_set"))

DcgmSource = Callable[[], Awaitable[str | None]]
"""The dcgm-exporter payload(s) of the pool's nodes (Prometheus text), or ``None`` when unavailable."""
FailedSource = Callable[[], Iterable[str]]
"""The sleepers (namespace/pod) that failed to wake twice (the waker's ``failed_pods``)."""
BurstSource = Callable[[str, str], Awaitable[BurstStats | None]]
"""The scaler's burst statistics of a workload (namespace, name) from the store (``get_burst_stats``);
it raises when the store cannot be read."""
UnknownSource = Callable[[], Mapping[str, str]]
"""The sleepers (namespace/pod) whose unknown state outlived its bound, and why (the waker's
``expired_pods``): replaced as the failed ones are."""
BusySource = Callable[[], Iterable[str]]
"""The sleepers (namespace/pod) awake, waking or draining (the waker's ``busy_pods``): never deleted
by a pass; a later pass deletes them once they sleep."""


@dataclass
class PassResult:
    """What one pass did (tests and logs)."""

    created: list[str] = field(default_factory=list)  # kind/namespace/name
    deleted: list[str] = field(default_factory=list)
    # Sleepers that failed to wake twice, or stayed unknown past the bound, deleted for a new pod.
    replaced: list[str] = field(default_factory=list)
    off: dict[str, str] = field(default_factory=dict)  # workload -> why the tier is off for it


def _is_ours(obj: Mapping[str, Any], role: str) -> bool:
    lab = (obj.get("metadata") or {}).get("labels") or {}
    return lab.get(MANAGED_BY) == MANAGED_BY_VALUE and lab.get(ROLE) == role


def _involved(wl: Workload) -> dict[str, Any]:
    return {"apiVersion": wl.api_version, "kind": wl.kind, "name": wl.name, "namespace": wl.namespace, "uid": wl.uid}


class HotReconciler:
    def __init__(self, api: client.ApiClient, *, namespace: str | Sequence[str] | None = None,
                 events: EventRecorder | None = None,
                 dcgm: DcgmSource | None = None, failed: FailedSource | None = None,
                 busy: BusySource | None = None, bursts: BurstSource | None = None,
                 unknown: UnknownSource | None = None) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.resource: Any = client.ResourceV1Api(api)
        # The watched namespaces (one, several: `--namespace a,b`), or () for all.
        self.namespaces = watched_namespaces(namespace)
        self.events = events or EventRecorder(self.core)
        self.dcgm = dcgm
        self.failed = failed
        self.busy = busy
        self.unknown = unknown
        self.bursts = bursts
        self._auto_last: dict[str, int] = {}  # `hot-standby: auto`: the size chosen before, per workload
        self._attribution = DcgmAttribution((), {})

    async def _want(self, wl: Workload, cfg: HotConfig, pool_gpus: int, pool_workloads: int) -> SleeperWant:
        """The sleepers a workload asks for: its count, or with ``auto`` the size its recorded bursts
        justify against its share of the pool (warmpool/hot/auto_size.py); an unreadable store keeps the
        last size. The kept sleeper's value per GiB orders the pool's evictions."""
        key = f"{wl.namespace}/{wl.name}"
        value = VALUE_EXPLICIT
        count = cfg.count
        if cfg.auto:
            ev = HotEvidence(last=self._auto_last.get(key), pool_gpus=pool_gpus, pool_sleepers=pool_workloads)
            if self.bursts is not None:
                try:
                    ev = replace(ev, bursts=await self.bursts(wl.namespace, wl.name))
                except Exception as exc:  # a store outage: unknown, the last size is kept
                    log.warning("burst statistics unreadable", extra={"workload": key, "error": str(exc)})
                    ev = replace(ev, readable=False)
            size = sleepers_wanted(cfg, ev, fleet=wl.replicas)
            self._auto_last[key] = count = size.count
            value = size.value or VALUE_EXPLICIT
        return SleeperWant(key, count, cfg.host_ram_gib, value / max(cfg.host_ram_gib, 1.0))

    def device_of(self, namespace: str, pod: str) -> str | None:
        """DCGM's attribution of a time-sliced sleeper (for the waker's sleeper source)."""
        return self._attribution.device_of(namespace, pod)

    async def run(self) -> None:
        while True:
            try:
                res = await self.reconcile()
                if res.created or res.deleted or res.replaced:
                    log.info("hot pool changed", extra={"objects_created": res.created,
                                                        "objects_deleted": res.deleted, "replaced": res.replaced})
            except Exception as exc:  # an API outage: change nothing, try again next pass
                log.warning("hot pool pass failed; changing nothing", extra={"error": repr(exc)})
            await asyncio.sleep(RESYNC_SECONDS)

    # -- reading --------------------------------------------------------------------------------
    async def _list(self, cluster_call: Any, ns_call: Any, **kw: Any) -> list[dict[str, Any]]:
        """Every namespace's items (cluster-wide), or those of each watched namespace, as one list: a
        pass plans the watched namespaces together (one host-RAM budget per node across them)."""
        if not self.namespaces:
            return list((await read_raw(lambda **k: cluster_call(**k, **kw))).get("items") or [])
        out: list[dict[str, Any]] = []
        for ns in self.namespaces:
            body = await read_raw(lambda ns=ns, **k: ns_call(ns, **k, **kw))
            out += list(body.get("items") or [])
        return out

    async def _workloads(self) -> list[Workload]:
        out: list[Workload] = []
        for kind, snake in KINDS:
            items = await self._list(getattr(self.apps, f"list_{snake}_for_all_namespaces"),
                                     getattr(self.apps, f"list_namespaced_{snake}"))
            out += [workload_from(kind, o) for o in items
                    if HOT_STANDBY in ((o.get("metadata") or {}).get("annotations") or {})]
        return out

    async def _pool_nodes(self) -> tuple[dict[str, dict[str, PoolNodeConfig]], dict[str, str]]:
        """pool -> node -> its config; node -> its GPU product."""
        body = await read_raw(self.core.list_node)
        pools: dict[str, dict[str, PoolNodeConfig]] = {}
        products: dict[str, str] = {}
        for n in body.get("items") or []:
            meta = n.get("metadata") or {}
            try:
                cfg = parse_pool_node(meta.get("annotations") or {})
            except AnnotationError as exc:
                log.warning("pool node annotation invalid; node left out", extra={"node": meta.get("name"),
                                                                                   "error": str(exc)})
                continue
            if cfg is not None:
                pools.setdefault(cfg.pool, {})[str(meta.get("name"))] = cfg
                products[str(meta.get("name"))] = str((meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, ""))
        return pools, products

    async def _slices(self) -> list[dict[str, Any]]:
        try:
            return list((await read_raw(self.resource.list_resource_slice)).get("items") or [])
        except ApiException as exc:
            if exc.status in (403, 404):  # no DRA in this cluster (or not granted): the fallback decides
                return []
            raise

    async def _claims(self) -> list[dict[str, Any]]:
        """Every claim (cluster-wide mode) or the watched namespaces': a device another claim holds is no
        pool GPU (one in a namespace not watched is not seen: the scheduler then leaves that sleeper
        pending, as in one watched namespace)."""
        try:
            return await self._list(self.resource.list_resource_claim_for_all_namespaces,
                                    self.resource.list_namespaced_resource_claim)
        except ApiException as exc:
            if exc.status in (403, 404):
                return []
            raise

    async def _dcgm(self, nodes: Iterable[str]) -> DcgmAttribution:
        if self.dcgm is None:
            return DcgmAttribution((), {})
        try:
            text = await self.dcgm()
        except Exception as exc:
            log.warning("DCGM unreadable; no time-sliced attribution", extra={"error": repr(exc)})
            text = None
        if not text:
            return DcgmAttribution((), {})
        return dcgm_attribution(attributions(parse_text(text)), nodes)

    # -- the pass -------------------------------------------------------------------------------
    async def reconcile(self) -> PassResult:
        res = PassResult()
        wls = await self._workloads()
        pods = [p for p in await self._list(self.core.list_pod_for_all_namespaces, self.core.list_namespaced_pod,
                                            label_selector=SLEEPER_SELECTOR) if _is_ours(p, SLEEPER_ROLE)]
        by_wl: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            by_wl.setdefault(str(((p.get("metadata") or {}).get("annotations") or {}).get(HOT_WORKLOAD)), []).append(p)
        pools, products = await self._pool_nodes()
        all_pool_nodes = [n for nodes in pools.values() for n in nodes]
        slices = await self._slices() if pools else []
        claims = await self._claims() if pools else []
        self._attribution = await self._dcgm(all_pool_nodes)

        keep: set[str] = set()  # pods (namespace/name) left as they are, whatever the plan says
        wanted: dict[str, dict[str, Any]] = {}  # pod key -> manifest the plan calls for
        wanted_claims: dict[str, dict[str, Any]] = {}
        groups: dict[tuple[str, str], list[tuple[Workload, HotConfig]]] = {}
        for wl in wls:
            key = f"{wl.namespace}/{wl.name}"
            try:
                cfg = parse_hot(wl.annotations)
            except AnnotationError as exc:
                engine = str(wl.annotations.get(ENGINE, "")).strip().lower()
                sup = support(engine)
                # An engine without an HTTP sleep (or unknown) gets its own reason; any other key, the usual one.
                reason = sup.reason if exc.key == ENGINE and engine and not sup.supported else "InvalidAnnotation"
                await self.events.emit(_involved(wl), "Warning", reason, str(exc))
                res.off[key] = str(exc)
                keep |= {_pod_key(p) for p in by_wl.get(key, [])}
                continue
            if cfg is not None and cfg.count > 0:
                groups.setdefault((wl.namespace, cfg.pool), []).append((wl, cfg))

        # Devices held by claims that are not this namespace's claim of that device.
        held: dict[str, str] = {}  # device -> namespace/claim holding it
        for c in claims:
            dev = claim_device(c)
            if dev is not None:
                m = c.get("metadata") or {}
                held[dev] = f"{m.get('namespace')}/{m.get('name')}"
        ram_used: dict[str, float] = {}
        for (ns, pool), members in sorted(groups.items()):
            nodes = pools.get(pool, {})
            cfg_any = next(iter(nodes.values()), None)
            devices = [d for d in dra_devices(slices, nodes, cfg_any.dra_driver if cfg_any else None)
                       if held.get(d.device) in (None, f"{ns}/{claim_name(pool, d.device)}")]
            gpus: list[PoolGPU] = [d.gpu() for d in devices]
            dra = bool(gpus)
            if not dra:
                gpus = [g for g in self._attribution.gpus if g.node in nodes]
            why = ("no node carries the annotation warmscale.io/hot-pool: " + pool) if not nodes else \
                placement_off_reason(dra, bool(gpus))
            if why is not None:
                for wl, _ in members:
                    await self.events.emit(_involved(wl), "Warning", "HotPoolNoPlacement", f"pool {pool}: {why}")
                    res.off[f"{wl.namespace}/{wl.name}"] = why
                    keep |= {_pod_key(p) for p in by_wl.get(f"{wl.namespace}/{wl.name}", [])}
                continue
            pool_obj = Pool(pool, tuple(gpus), {n: c.host_ram_gib - ram_used.get(n, 0.0) for n, c in nodes.items()},
                            awake_per_gpu=min(c.awake_per_gpu for c in nodes.values()))
            wants = [await self._want(wl, cfg, len(gpus), len(members)) for wl, cfg in members]
            current = [_placement(p, self.device_of) for wl, _ in members
                       for p in by_wl.get(f"{wl.namespace}/{wl.name}", [])]
            plan = plan_pool(pool_obj, wants, [c for c in current if c is not None])
            by_dev = {d.device: d for d in devices}
            cfgs = {f"{wl.namespace}/{wl.name}": (wl, cfg) for wl, cfg in members}
            for wkey, index, why_out in plan.left_out:
                wl, _ = cfgs[wkey]
                await self.events.emit(_involved(wl), "Warning", "HotSleeperLeftOut", f"sleeper {index}: {why_out}")
            for pl in plan.placements:
                wl, cfg = cfgs[pl.workload]
                ram_used[pl.node] = ram_used.get(pl.node, 0.0) + cfg.host_ram_gib
                claim = ""
                if dra:
                    dev = by_dev[pl.device]
                    body = shared_claim(ns, pool, dev, nodes[dev.node].device_class)
                    claim = body["metadata"]["name"]
                    wanted_claims[f"{ns}/{claim}"] = body
                    held[dev.device] = f"{ns}/{claim}"
                manifest = sleeper_pod(wl, cfg, SleeperTarget(pl, claim, products.get(pl.node, "")))
                wanted[f"{wl.namespace}/{manifest['metadata']['name']}"] = manifest

        await self._replace_failed(pods, wls, res)
        await self._apply(pods, claims, wanted, wanted_claims, keep, res)
        return res

    async def _replace_failed(self, pods: list[dict[str, Any]], wls: list[Workload], res: PassResult) -> None:
        failed = set(self.failed() if self.failed is not None else ())
        unknown = dict(self.unknown() if self.unknown is not None else {})
        busy = set(self.busy() if self.busy is not None else ())  # (never one of these: it may be serving)
        owners = {f"{wl.namespace}/{wl.name}": wl for wl in wls}
        for p in pods:
            key = _pod_key(p)
            if key in busy or (key not in failed and key not in unknown):
                continue
            ns, name = key.split("/", 1)
            why = "failed to wake twice" if key in failed else unknown[key]
            await ignore_status(self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0), 404)
            res.replaced.append(key)
            wl = owners.get(str(((p.get("metadata") or {}).get("annotations") or {}).get(HOT_WORKLOAD)))
            log.warning("replacing a sleeper", extra={"pod": key, "why": why})
            if wl is not None:
                await self.events.emit(_involved(wl), "Warning", "HotSleeperReplaced",
                                       f"sleeper {name}: {why}; deleted, a new pod replaces it")

    async def _apply(self, pods: list[dict[str, Any]], claims: list[dict[str, Any]], wanted: dict[str, dict[str, Any]],
                     wanted_claims: dict[str, dict[str, Any]], keep: set[str], res: PassResult) -> None:
        have_claims = {f"{(c.get('metadata') or {}).get('namespace')}/{(c.get('metadata') or {}).get('name')}"
                       for c in claims}
        for key, body in sorted(wanted_claims.items()):
            if key not in have_claims:
                await ignore_status(self.resource.create_namespaced_resource_claim(key.split("/", 1)[0], body), 409)
                res.created.append(f"ResourceClaim/{key}")
        have = {_pod_key(p): p for p in pods}
        busy = set(self.busy() if self.busy is not None else ())
        for key, body in sorted(wanted.items()):
            old = have.get(key)
            if old is not None and key not in busy and (_placed_on(old) != _placed_on(body)
                                                        or _template_of(old) != _template_of(body)):
                # Re-placed by the plan (evicted for a more valuable sleeper, or its GPU gone), or made from
                # an older pod template: a new pod. Never while it is awake or waking (it may be serving).
                await ignore_status(self.core.delete_namespaced_pod(key.split("/", 1)[1], key.split("/", 1)[0],
                                                                    grace_period_seconds=0), 404)
                res.deleted.append(f"Pod/{key}")
                continue  # created at the next pass, once the old one is gone
            if old is None and key not in res.replaced:
                await ignore_status(self.core.create_namespaced_pod(key.split("/", 1)[0], body), 409)
                res.created.append(f"Pod/{key}")
        for key, p in have.items():
            if key in wanted or key in keep or key in res.replaced or key in busy or not _is_ours(p, SLEEPER_ROLE):
                continue
            ns, name = key.split("/", 1)
            await ignore_status(self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0), 404)
            res.deleted.append(f"Pod/{key}")
        # Claims none of the kept sleepers references any more (never one warmscale did not create).
        kept = [(k, have[k]) for k in keep | busy if k in have]
        used = {f"{k.split('/', 1)[0]}/{_claim_of(p)}" for k, p in [*wanted.items(), *kept]}
        for c in claims:
            m = c.get("metadata") or {}
            key = f"{m.get('namespace')}/{m.get('name')}"
            if _is_ours(c, "hot-claim") and key not in used and key not in wanted_claims:
                await ignore_status(self.resource.delete_namespaced_resource_claim(m["name"], m["namespace"]), 404)
                res.deleted.append(f"ResourceClaim/{key}")


def _pod_key(p: Mapping[str, Any]) -> str:
    m = p.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


def _template_of(p: Mapping[str, Any]) -> str:
    return str(((p.get("metadata") or {}).get("annotations") or {}).get(HOT_TEMPLATE, ""))


def _claim_of(p: Mapping[str, Any]) -> str:
    return str(((p.get("metadata") or {}).get("annotations") or {}).get(HOT_CLAIM, ""))


def _placed_on(p: Mapping[str, Any]) -> tuple[str, str, str]:
    ann = (p.get("metadata") or {}).get("annotations") or {}
    return str(ann.get(HOT_DEVICE, "")), str(ann.get(HOT_CLAIM, "")), str(ann.get(HOT_NODE, ""))


def _placement(p: Mapping[str, Any], device_of: Callable[[str, str], str | None]) -> Placement | None:
    """The plan's view of an existing sleeper (the GPU it holds; a time-sliced one's as DCGM sees it),
    for a plan without churn."""
    m = p.get("metadata") or {}
    ann = m.get("annotations") or {}
    device = str(ann.get(HOT_DEVICE, ""))
    if device == DEVICE_FROM_DCGM:
        device = device_of(str(m.get("namespace")), str(m.get("name"))) or ""
    try:
        return Placement(str(ann[HOT_WORKLOAD]), int(ann[HOT_INDEX]), str(ann.get(HOT_NODE, "")), device)
    except (KeyError, ValueError):
        return None



