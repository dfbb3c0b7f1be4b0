"""The warm-pool controller: caches -> pure plan (:mod:`warmpool.planning`) -> idempotent apply.

Level-triggered: any change in a cache (or the resync timer) marks the world dirty and the next
reconcile recomputes every annotated workload's plan from the caches. Creates are idempotent
(deterministic names; 409 AlreadyExists is success), deletes ignore 404, patches are merge patches
(no resourceVersion, so no conflicts) and updates retry conflicts.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from warmscale import buildinfo
from warmscale.common.diagnostics.events import workload_events
from warmscale.scaler.metrics import SO_LABEL
from warmscale.scaler.warm_status import WarmStatus
from warmscale.signals.podstate import is_gated
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import PREFIX, STATUS_KEY, AnnotationError, is_enabled, parse_annotations
from warmscale.warmpool.cache_roots import DEFAULT_ALLOWED, DEFAULT_FILE_SOURCES
from warmscale.warmpool.deletion_cost_writer import PASS_SECONDS as DELETION_COST_PASS_SECONDS
from warmscale.warmpool.deletion_cost_writer import DeletionCostWriter
from warmscale.warmpool.gangs import groups
from warmscale.warmpool.kube import Cache, EventRecorder, MergedCache, ignore_status, wait_event, with_retries
from warmscale.warmpool.kueue import (
    CLUSTER_QUEUES,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUES,
    QueueQuota,
    nominal_quota,
    queue_name,
)
from warmscale.warmpool.model_uri import CacheKey, ModelURIError, parse_model_uri, staged_label_key
from warmscale.warmpool.planning import (
    CleanupPlan,
    Plan,
    StandbyEvidence,
    TimeToReady,
    TimeToReadyByGpu,
    cleanup_plan,
    parse_time,
    plan,
    pod_time_to_ready,
    replica_gpu_product,
    standby_time_to_ready,
    warm_state,
)
from warmscale.warmpool.raycluster import (
    RAY_GROUP,
    RAY_PLURAL,
    RAY_VERSION,
    RAYCLUSTER_KIND,
    group_selector,
    worker_group,
)

log = logging.getLogger("warmscale.warmpool")
KEDA = ("keda.sh", "v1alpha1", "scaledobjects")
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPS_KINDS = ("Deployment", "StatefulSet")  # apps/v1: strategic merge patches; the rest are custom resources
PLACEHOLDER_WINDOW_S = 120.0  # a replica bound to a node this soon after a placeholder left it took its place


class WarmStatusSink(Protocol):
    async def put_warm_status(self, namespace: str, name: str, status: WarmStatus) -> None: ...


class LogSink:
    """Fallback when no store is configured: log what would be published."""

    async def put_warm_status(self, namespace: str, name: str, status: WarmStatus) -> None:
        log.debug("warm status", extra={"workload": f"{namespace}/{name}", **status.to_dict()})


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # The workload's name under the ScaledObject label the scaler and KEDA use: the ScaledObject the
        # controller keeps for a workload has the workload's name.
        lab = ["namespace", SO_LABEL]
        self.warm_capacity = Gauge("warmscale_warm_capacity_replicas", "Replicas' worth of capacity held by ready "
                                   "placeholder pods", lab, registry=self.registry)
        self.staged_nodes = Gauge("warmscale_staged_nodes", "Chosen nodes with the model staged", lab,
                                  registry=self.registry)
        self.prepull_nodes = Gauge("warmscale_prepull_nodes", "Chosen nodes with every image pulled", lab,
                                   registry=self.registry)
        self.prepull_progress = Gauge("warmscale_prepull_progress_ratio", "Pre-pulled / chosen nodes", lab,
                                      registry=self.registry)
        self.floor = Gauge("warmscale_min_ready_floor", "Current warm floor (minReplicaCount)", lab,
                           registry=self.registry)
        self.startup = Histogram("warmscale_startup_seconds", "Replica creation to Ready, by warm state",
                                 [*lab, "warm_state"], registry=self.registry,
                                 buckets=(1, 2, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 900, 1800, 3600))
        self.reconciles = Counter("warmscale_reconcile_total", "Reconciles by result", ["result"],
                                  registry=self.registry)
        self.leader = Gauge("warmscale_leader", "1 while this replica leads", registry=self.registry)
        # the rest of the process on the same registry: webhook reviews and certificate, certificate
        # manager, listener bounds
        from warmscale.common.http_limits import HttpMetrics
        from warmscale.warmpool.certs import CertMetrics
        from warmscale.warmpool.webhook import WebhookMetrics

        self.webhook = WebhookMetrics(self.registry)
        self.certs = CertMetrics(self.registry)
        self.http = HttpMetrics(self.registry)
        self.build_info = buildinfo.register(self.registry, "controller")


@dataclass
class Options:
    namespace: str | None = None  # None: all namespaces; else one namespace or several, comma-separated
    scaler_address: str = "warmscale-scaler.warmscale.svc:9090"
    stager_image: str = "ghcr.io/warmscale/warmscale:latest"
    resync_s: float = 30.0
    debounce_s: float = 0.2
    cache_root_allow: tuple[str, ...] = DEFAULT_ALLOWED  # where workloads' cache roots may lie
    file_source_allow: tuple[str, ...] = DEFAULT_FILE_SOURCES  # where file:// model sources may lie
    trigger_authentication: str = ""  # ClusterTriggerAuthentication of owned ScaledObjects ("" : plaintext)
    watch_timeout_s: int = 300  # a watch is resumed (from its resourceVersion) after this long
    # Set controller.kubernetes.io/pod-deletion-cost on managed Deployments' ready pods by load, every
    # this many seconds (warmpool/deletion_cost_writer.py); 0: never.
    deletion_cost_s: float = DELETION_COST_PASS_SECONDS

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The watched namespaces; () means all."""
        return tuple(n.strip() for n in (self.namespace or "").split(",") if n.strip())


def priority_class_refused(exc: ApiException) -> bool:
    """The API server refused a pod because its PriorityClass does not exist (403, admission plugin Priority)."""
    return exc.status == 403 and "no PriorityClass with name" in str(exc.body or "")


async def install_priority_class(api: client.ApiClient) -> None:
    """Create the placeholders' PriorityClass as the install does (admin credentials: tests, benchmarks)."""
    sched: Any = client.SchedulingV1Api(api)
    await ignore_status(sched.create_priority_class(ob.priority_class()), 409)


def workload_from(kind: str, o: Mapping[str, Any]) -> ob.Workload:
    m, spec = o.get("metadata") or {}, o.get("spec") or {}
    if kind == ob.LWS_KIND:
        # one replica = one group: spec.replicas counts groups of leaderWorkerTemplate.size pods
        lwt = spec.get("leaderWorkerTemplate") or {}
        annotations = m.get("annotations") or {}
        return ob.Workload(
            kind=kind, namespace=m.get("namespace", ""), name=m.get("name", ""), uid=m.get("uid", ""),
            replicas=int(spec["replicas"]) if spec.get("replicas") is not None else 1,
            template=lwt.get("workerTemplate") or {}, annotations=annotations,
            selector={ob.LWS_NAME_LABEL: m.get("name", "")},
            group_size=max(1, int(lwt.get("size") or 1)), leader_template=lwt.get("leaderTemplate"),
            topology_key=str(annotations.get(ob.LWS_EXCLUSIVE_TOPOLOGY) or "").strip(),
            queue_name=queue_name(m.get("labels"), lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}),
        )
    if kind == RAYCLUSTER_KIND:
        # one replica = one worker pod of the target group (warmpool.raycluster)
        g = worker_group(o)
        return ob.Workload(
            kind=kind, namespace=m.get("namespace", ""), name=m.get("name", ""), uid=m.get("uid", ""),
            replicas=g.replicas, template=g.template, annotations=m.get("annotations") or {},
            selector=group_selector(m.get("name", ""), g.name) if g.name else {}, invalid=g.problem,
        )
    return ob.Workload(
        kind=kind, namespace=m.get("namespace", ""), name=m.get("name", ""), uid=m.get("uid", ""),
        replicas=int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1),
        template=spec.get("template") or {}, annotations=m.get("annotations") or {},
        selector=(spec.get("selector") or {}).get("matchLabels") or {},
        queue_name=queue_name(m.get("labels"), spec.get("template") or {}),
    )


def finalizer_patch(kind: str, finalizers: list[str] | None) -> tuple[Any, str]:
    """(body, content type) adding the clean-up finalizer: a strategic merge for apps/v1 kinds; a JSON
    patch for a custom resource (no strategic merge there, and a merge patch would replace the list)."""
    if kind in APPS_KINDS:
        return {"metadata": {"finalizers": [ob.FINALIZER]}}, STRATEGIC
    if finalizers:
        return [{"op": "add", "path": "/metadata/finalizers/-", "value": ob.FINALIZER}], JSON_PATCH
    return [{"op": "add", "path": "/metadata/finalizers", "value": [ob.FINALIZER]}], JSON_PATCH


class Controller:
    def __init__(self, api: client.ApiClient, opts: Options, sink: WarmStatusSink | None = None,
                 metrics: Metrics | None = None) -> None:
        self.api = api
        self.opts = opts
        self.sink = sink or LogSink()
        self.metrics = metrics or Metrics()
        self.core: Any = client.CoreV1Api(api)
        self.apps: Any = client.AppsV1Api(api)
        self.batch: Any = client.BatchV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.events = EventRecorder(self.core)
        self.deletion_costs = DeletionCostWriter(self.core)
        self._dirty = asyncio.Event()
        self.ttr: dict[str, TimeToReady] = {}
        self.ttr_gpu: dict[str, TimeToReadyByGpu] = {}
        self.standby_last: dict[str, int] = {}  # standby: auto -> the size chosen last, per workload
        self.placeholder_left: dict[str, float] = {}  # node -> when a placeholder left it
        self.preemptors: set[str] = set()  # pod uids the scheduler nominated (they preempted)
        self.reconcile_count = 0
        self.priority_class_ok = True
        namespaces = opts.namespaces
        wt = opts.watch_timeout_s
        self.caches: list[Cache] = []

        def cache(name: str, namespaced: Any, cluster_wide: Any, on_change: Any, **kw: Any) -> Any:
            """All namespaces: one cluster-wide cache; else one per watched namespace, seen as one."""
            if not namespaces:
                parts = [Cache(name, cluster_wide, on_change, watch_timeout_s=wt, **kw)]
            else:
                parts = [Cache(f"{name} {ns}", functools.partial(namespaced, ns), on_change, watch_timeout_s=wt, **kw)
                         for ns in namespaces]
            self.caches += parts
            return parts[0] if len(parts) == 1 else MergedCache(name, parts)

        self.deployments = cache("deployments", self.apps.list_namespaced_deployment,
                                 self.apps.list_deployment_for_all_namespaces, self._changed)
        self.statefulsets = cache("statefulsets", self.apps.list_namespaced_stateful_set,
                                  self.apps.list_stateful_set_for_all_namespaces, self._changed)
        # LeaderWorkerSets: optional (the CRD may not be installed; then there are none)
        self.lws = cache("leaderworkersets",
                         functools.partial(self.custom.list_namespaced_custom_object, ob.LWS_GROUP, ob.LWS_VERSION,
                                           plural=ob.LWS_PLURAL),
                         functools.partial(self.custom.list_cluster_custom_object, ob.LWS_GROUP, ob.LWS_VERSION,
                                           ob.LWS_PLURAL), self._changed, optional=True)
        # Volcano PodGroups of placeholder gangs: optional (no Volcano CRDs: there are none)
        self.pod_groups = cache("podgroups",
                                functools.partial(self.custom.list_namespaced_custom_object, ob.PG_GROUP, ob.PG_VERSION,
                                                  plural=ob.PG_PLURAL),
                                functools.partial(self.custom.list_cluster_custom_object, ob.PG_GROUP, ob.PG_VERSION,
                                                  ob.PG_PLURAL), self._changed, optional=True,
                                label_selector=f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE},{ob.ROLE}={ob.PG_ROLE}")
        # RayClusters (a worker group as the target): optional too (KubeRay's CRD may not be installed)
        self.rayclusters = cache("rayclusters",
                                 functools.partial(self.custom.list_namespaced_custom_object, RAY_GROUP, RAY_VERSION,
                                                   plural=RAY_PLURAL),
                                 functools.partial(self.custom.list_cluster_custom_object, RAY_GROUP, RAY_VERSION,
                                                   RAY_PLURAL), self._changed, optional=True)
        self.nodes = Cache("nodes", self.core.list_node, self._changed, watch_timeout_s=wt)
        self.caches.append(self.nodes)
        self.pods = cache("pods", self.core.list_namespaced_pod, self.core.list_pod_for_all_namespaces,
                          self._pod_changed)
        self.jobs = cache("jobs", self.batch.list_namespaced_job, self.batch.list_job_for_all_namespaces,
                          self._changed, label_selector=f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE}")

    # ------------------------------------------------------------ events from caches

    def _changed(self, _typ: str, _obj: dict[str, Any]) -> None:
        self._dirty.set()

    def _pod_changed(self, typ: str, pod: dict[str, Any]) -> None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if labels.get(ob.ROLE) == "placeholder" and spec.get("nodeName") and (
                typ == "DELETED" or (pod.get("metadata") or {}).get("deletionTimestamp")):
            self.placeholder_left[spec["nodeName"]] = time.time()
        if status.get("nominatedNodeName"):
            self.preemptors.add(str((pod.get("metadata") or {}).get("uid")))
        self._dirty.set()

    # ------------------------------------------------------------ main loop

    async def run(self) -> None:
        await self.check_priority_class()
        tasks = [asyncio.create_task(c.run(), name=f"cache-{c.name}") for c in self.caches]
        try:
            await asyncio.gather(*(c.synced.wait() for c in self.caches))
            log.info("caches synced")
            if self.opts.deletion_cost_s > 0:
                tasks.append(asyncio.create_task(self._deletion_cost_loop(), name="deletion-cost"))
            while True:
                await wait_event(self._dirty, self.opts.resync_s)  # never swallows a cancellation
                await asyncio.sleep(self.opts.debounce_s)
                self._dirty.clear()
                await self.reconcile_all()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.deletion_costs.close()

    async def write_deletion_costs(self) -> None:
        """One pass: the deletion cost of every enabled Deployment's ready pods, by load."""
        pods = list(self.pods.items.values())
        for wl in self.workloads():
            try:
                parse_annotations(wl.annotations)
            except AnnotationError:
                continue  # invalid annotations change nothing (reconcile puts the Event on it)
            await self.deletion_costs.write(wl, pods, time.time())

    async def _deletion_cost_loop(self) -> None:
        while True:
            try:
                await self.write_deletion_costs()
            except (ApiException, OSError) as exc:  # the API server away: the next pass tries again
                log.warning("deletion cost pass failed", extra={"error": repr(exc)})
            await asyncio.sleep(self.opts.deletion_cost_s)

    async def check_priority_class(self) -> bool:
        """The placeholders' PriorityClass is shipped with the install (the controller may only read it).

        Missing: placeholders are not created (a Warning Event on each workload that wants them) and the
        check is repeated every reconcile until it appears."""
        sched: Any = client.SchedulingV1Api(self.api)
        try:
            await sched.read_priority_class(ob.PRIORITY_CLASS)
        except ApiException as exc:
            if exc.status != 404:
                raise
            if self.priority_class_ok:  # once, not every reconcile
                log.error("PriorityClass missing: placeholders are not created until it exists (it is part of "
                          "the install: manifests/base/priorityclass.yaml)", extra={"priorityclass": ob.PRIORITY_CLASS})
            self.priority_class_ok = False
            return False
        if not self.priority_class_ok:
            log.info("PriorityClass found: placeholders are created", extra={"priorityclass": ob.PRIORITY_CLASS})
        self.priority_class_ok = True
        return True

    def _kinds(self) -> tuple[tuple[str, Any], ...]:
        return (("Deployment", self.deployments), ("StatefulSet", self.statefulsets), (ob.LWS_KIND, self.lws),
                (RAYCLUSTER_KIND, self.rayclusters))

    def raw_workloads(self) -> list[tuple[str, dict[str, Any]]]:
        return [(kind, o) for kind, cache in self._kinds() for o in cache.items.values()]

    def workloads(self) -> list[ob.Workload]:
        """Enabled workloads that are not being deleted (those only get their clean-up finished)."""
        out = []
        for kind, o in self.raw_workloads():
            m = o.get("metadata") or {}
            if is_enabled(m.get("annotations")) and not m.get("deletionTimestamp"):
                out.append(workload_from(kind, o))
        return out

    def _raw(self, wl: ob.Workload) -> dict[str, Any]:
        cache = dict(self._kinds())[wl.kind]
        return cache.items.get(f"{wl.namespace}/{wl.name}") or {}

    def _patcher(self, kind: str) -> Any:
        """``patch(name, namespace, body, _content_type=...)`` for the workload kind."""
        if kind == ob.LWS_KIND:
            return lambda name, ns, body, **kw: self.custom.patch_namespaced_custom_object(
                ob.LWS_GROUP, ob.LWS_VERSION, ns, ob.LWS_PLURAL, name, body, **kw)
        if kind == RAYCLUSTER_KIND:
            return lambda name, ns, body, **kw: self.custom.patch_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, ns, RAY_PLURAL, name, body, **kw)
        return self.apps.patch_namespaced_deployment if kind == "Deployment" \
            else self.apps.patch_namespaced_stateful_set

    async def reconcile_all(self) -> None:
        self.reconcile_count += 1
        if not self.priority_class_ok:
            await self.check_priority_class()
        for wl in self.workloads():
            try:
                await self.reconcile(wl)
                self.metrics.reconciles.labels("ok").inc()
            except Exception:
                self.metrics.reconciles.labels("error").inc()
                log.exception("reconcile failed", extra={"workload": wl.key})
                self._dirty.set()
        try:
            await self.cleanup()
        except Exception:
            self.metrics.reconciles.labels("error").inc()
            log.exception("cache clean-up failed")
            self._dirty.set()

    # ------------------------------------------------------------ cache clean-up and the finalizer

    def active_stage_keys(self) -> set[str] | None:
        """Staged-label keys some enabled, non-deleting workload in scope uses; None when unknown (an
        enabled workload whose model-uri cannot be parsed: nothing is cleaned until it is fixed)."""
        keys: set[str] = set()
        for wl in self.workloads():
            try:
                cfg = parse_annotations(wl.annotations)
                if cfg.model_uri is not None:
                    keys.add(staged_label_key(cfg.cache_key(wl.namespace)))
                continue
            except AnnotationError:
                pass
            raw = wl.annotations.get("warmscale.io/model-uri")
            if raw:
                try:
                    uri = parse_model_uri(raw.split()[0].split(";")[0])
                except (ModelURIError, ValueError):
                    return None
                # invalid annotations: keep both identities the workload may have staged under
                keys.add(staged_label_key(CacheKey(uri, wl.namespace)))
                sha = (wl.annotations.get("warmscale.io/model-sha256") or "").strip().lower()
                if sha:
                    keys.add(staged_label_key(CacheKey(uri, wl.namespace, sha)))
        return keys

    async def cleanup(self) -> CleanupPlan | None:
        active = self.active_stage_keys()
        if active is None:
            return None
        jobs = [j for j in self.jobs.items.values() if ((j.get("metadata") or {}).get("labels") or {}).get(ob.ROLE)
                == "evict"]
        cp = cleanup_plan(list(self.nodes.items.values()), jobs, active, scope=set(self.opts.namespaces) or None,
                          allowed_roots=self.opts.cache_root_allow)
        for ns, key, uri, root, node, pinned in cp.create_evict_jobs:
            job = ob.evict_job(ns, key, uri, root, node, self.opts.stager_image,
                               taints=ob.node_taints(self.nodes.items.get(f"/{node}")), pinned=pinned)
            try:
                await ignore_status(self.batch.create_namespaced_job(ns, job), 409)
            except ApiException as exc:
                if exc.status not in (403, 404):  # 403: namespace terminating, 404: namespace gone
                    raise
                log.warning("cannot run the evict Job; dropping the label (LRU reclaims the disk)",
                            extra={"node": node, "namespace": ns, "status": exc.status})
                cp.unlabel.append((node, key))
        for node, key in cp.unlabel:
            body = {"metadata": {"labels": {key: None}, "annotations": {key: None}}}
            await ignore_status(with_retries("unlabel node", functools.partial(
                self.core.patch_node, node, body, _content_type=MERGE)), 404)
            log.info("stale staged label removed", extra={"node": node, "label": key})
        for ns, name in cp.delete_jobs:
            await ignore_status(self.batch.delete_namespaced_job(name, ns, propagation_policy="Background"), 404)
        for w in cp.warnings:
            log.warning(w)
        for kind, o in self.raw_workloads():
            m = o.get("metadata") or {}
            fins = list(m.get("finalizers") or [])
            if ob.FINALIZER not in fins:
                continue
            done_with = m.get("deletionTimestamp") or not is_enabled(m.get("annotations"))
            if not done_with or m.get("namespace") in cp.pending_namespaces:
                continue
            i = fins.index(ob.FINALIZER)
            patch = [{"op": "test", "path": f"/metadata/finalizers/{i}", "value": ob.FINALIZER},
                     {"op": "remove", "path": f"/metadata/finalizers/{i}"}]
            try:
                await ignore_status(self._patcher(kind)(m.get("name"), m.get("namespace"), patch,
                                                        _content_type=JSON_PATCH), 404)
            except ApiException as exc:
                if exc.status not in (409, 422):  # the list changed under us: next reconcile
                    raise
                self._dirty.set()
            log.info("finalizer removed", extra={"workload": f"{kind}/{m.get('namespace')}/{m.get('name')}"})
        return cp

    async def _get_scaledobject(self, wl: ob.Workload) -> dict[str, Any] | None:
        try:
            return dict(await self.custom.get_namespaced_custom_object(KEDA[0], KEDA[1], wl.namespace, KEDA[2],
                                                                       wl.name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def _priority_class_missing(self, inv: dict[str, Any]) -> None:
        await self.events.emit(inv, "Warning", "PriorityClassMissing",
                               f"PriorityClass {ob.PRIORITY_CLASS} does not exist (part of the install): "
                               "placeholders not created")

    def _involved(self, wl: ob.Workload) -> dict[str, Any]:
        return {"apiVersion": wl.api_version, "kind": wl.kind, "name": wl.name, "namespace": wl.namespace,
                "uid": wl.uid}

    async def reconcile(self, wl: ob.Workload, now: datetime | None = None) -> Plan:
        now = now or datetime.now(UTC)
        nodes = list(self.nodes.items.values())
        pods = [p for p in self.pods.items.values() if (p.get("metadata") or {}).get("namespace") == wl.namespace]
        jobs = [j for j in self.jobs.items.values() if (j.get("metadata") or {}).get("namespace") == wl.namespace]
        groups = [g for g in self.pod_groups.items.values()
                  if (g.get("metadata") or {}).get("namespace") == wl.namespace]
        so = await self._get_scaledobject(wl) if wl.name else None
        p = plan(wl, nodes, pods, jobs, so, now, scaler_address=self.opts.scaler_address,
                 allowed_roots=self.opts.cache_root_allow, file_sources=self.opts.file_source_allow,
                 trigger_authentication=self.opts.trigger_authentication,
                 standby=await self._standby_evidence(wl), pod_groups=groups,
                 queue_quota=await self._queue_quota(wl))
        if p.config is not None and p.config.enabled and p.config.standby_auto:
            self.standby_last[wl.key] = p.standby
        inv = self._involved(wl)
        for ev in p.events:
            await self.events.emit(inv, ev.type, ev.reason, ev.message)
        if p.error is not None or p.config is None or not p.config.enabled:
            return p  # invalid annotations change nothing
        cfg = p.config
        ns = wl.namespace

        fins = (self._raw(wl).get("metadata") or {}).get("finalizers")
        if cfg.model_uri is not None and cfg.prestage_nodes > 0 and ob.FINALIZER not in (fins or []):
            # before anything is staged: the caches must be cleaned up when the workload goes away
            fin_body, fin_type = finalizer_patch(wl.kind, fins)
            await with_retries("add finalizer", lambda: self._patcher(wl.kind)(
                wl.name, ns, fin_body, _content_type=fin_type))
        for node in p.label_nodes:  # only after the staging Job succeeded
            assert cfg.model_uri is not None
            key = staged_label_key(cfg.cache_key(ns))
            body = {"metadata": {"labels": {key: "true"}, "annotations": {
                key: ob.staged_record(ns, cfg.model_uri.canonical, cfg.cache_root, cfg.model_sha256)}}}
            await with_retries("label node", functools.partial(self.core.patch_node, node, body,
                                                                     _content_type=MERGE))
            await self.events.emit(inv, "Normal", "Staged", f"{cfg.model_uri} staged on node {node}")
        for node in p.create_stage_jobs:
            job = ob.stage_job(wl, cfg, node, self.opts.stager_image,
                               taints=ob.node_taints(self.nodes.items.get(f"/{node}")))
            await ignore_status(self.batch.create_namespaced_job(ns, job), 409)
        for name in p.delete_stage_jobs:
            await ignore_status(self.batch.delete_namespaced_job(name, ns, propagation_policy="Background"), 404)
        for node in p.create_prepull:
            await ignore_status(self.core.create_namespaced_pod(ns, ob.prepull_pod(wl, node)), 409)
        for name in p.delete_prepull:
            await ignore_status(self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0), 404)
        for name in p.delete_placeholders:
            await ignore_status(self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0), 404)
        for name in p.delete_pod_groups:
            await ignore_status(self.custom.delete_namespaced_custom_object(
                ob.PG_GROUP, ob.PG_VERSION, ns, ob.PG_PLURAL, name), 404)
        for gang in p.create_pod_groups:  # a Volcano gang's PodGroup before its members
            await ignore_status(self.custom.create_namespaced_custom_object(
                ob.PG_GROUP, ob.PG_VERSION, ns, ob.PG_PLURAL, ob.pod_group(wl, gang)), 409)
        holds = [ob.placeholder_pod(wl, i, p.pinned) for i in p.create_placeholders] + [
            ob.gang_placeholder_pod(wl, g, m, p.pinned, domain) for g, m, domain in p.create_gang_members]
        if holds and not self.priority_class_ok:
            await self._priority_class_missing(inv)
        else:
            for hold in holds:
                try:
                    await ignore_status(self.core.create_namespaced_pod(ns, hold), 409)
                except ApiException as exc:
                    if not priority_class_refused(exc):
                        raise
                    # removed since the last check: the same as missing at the start, not a reconcile error
                    log.error("PriorityClass missing: placeholders are not created until it exists",
                              extra={"priorityclass": ob.PRIORITY_CLASS})
                    self.priority_class_ok = False
                    await self._priority_class_missing(inv)
                    break

        if p.scaledobject == "create" and p.scaledobject_body is not None:
            await ignore_status(self.custom.create_namespaced_custom_object(
                KEDA[0], KEDA[1], ns, KEDA[2], p.scaledobject_body), 409)
            await self.events.emit(inv, "Normal", "ScaledObjectCreated", f"created ScaledObject {wl.name}")
        elif p.scaledobject == "patch" and p.scaledobject_body is not None:
            body = p.scaledobject_body
            await with_retries("patch scaledobject", lambda: self.custom.patch_namespaced_custom_object(
                KEDA[0], KEDA[1], ns, KEDA[2], wl.name, body, _content_type=MERGE))
        elif p.scaledobject == "delete":
            await ignore_status(
                self.custom.delete_namespaced_custom_object(KEDA[0], KEDA[1], ns, KEDA[2], wl.name), 404)
        if p.scale_replicas_to is not None:
            scale = {"spec": {"replicas": p.scale_replicas_to}}
            patch = self._patcher(wl.kind)
            await with_retries("raise replicas to floor", lambda: patch(wl.name, ns, scale, _content_type=MERGE))

        await self._write_status(wl, p)
        await self._measure_and_publish(wl, p, pods, now)
        own = [pod for pod in pods if not ob.is_managed(pod)]
        for reason, message in workload_events(own, wl.selector, now.timestamp()):
            await self.events.emit(inv, "Warning", reason, message)
        return p

    async def _queue_quota(self, wl: ob.Workload) -> QueueQuota | None:
        """The workload's Kueue LocalQueue -> ClusterQueue -> nominal GPU quota (None: not in a queue, or
        unreadable: Kueue not installed, no RBAC, the queue missing - then nothing is checked)."""
        if not wl.queue_name:
            return None
        try:
            lq = await self.custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, wl.namespace, LOCAL_QUEUES, wl.queue_name)
            cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
            if not cq_name:
                return None
            cq = await self.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, CLUSTER_QUEUES, cq_name)
        except ApiException as exc:
            log.debug("kueue queue not readable", extra={"workload": wl.key, "queue": wl.queue_name,
                                                       "status": exc.status})
            return None
        try:
            gpus = nominal_quota(cq)
        except ValueError:
            return None  # a quantity Kueue's own validation would refuse: not ours to judge
        return QueueQuota(local_queue=wl.queue_name, cluster_queue=cq_name, gpus=gpus)

    async def _write_status(self, wl: ob.Workload, p: Plan) -> None:
        text = p.status_json()
        if wl.annotations.get(STATUS_KEY) == text:
            return
        body = {"metadata": {"annotations": {STATUS_KEY: text}}}
        patch = self._patcher(wl.kind)
        await ignore_status(patch(wl.name, wl.namespace, body, _content_type=MERGE), 404)

    async def _standby_evidence(self, wl: ob.Workload) -> StandbyEvidence | None:
        """What ``standby: auto`` is sized from: the scaler's burst statistics in the store (unreadable:
        the last size is kept), the size chosen before (after a fail-over: the last published status's)
        and the measured time-to-ready."""
        try:
            cfg = parse_annotations(wl.annotations)
        except AnnotationError:
            return None
        if not cfg.enabled or not cfg.standby_auto:
            return None
        if wl.key not in self.ttr:
            await self._seed_time_to_ready(wl)
        ttr = standby_time_to_ready(self.ttr[wl.key].medians() if wl.key in self.ttr else {},
                                    self.ttr_gpu[wl.key].medians() if wl.key in self.ttr_gpu else {})
        get = getattr(self.sink, "get_burst_stats", None)
        if get is None:
            return StandbyEvidence(last=self.standby_last.get(wl.key), time_to_ready=ttr)
        try:
            bursts = await get(wl.namespace, wl.name)
        except Exception as exc:
            log.warning("reading burst statistics failed; standby keeps its last size",
                        extra={"workload": wl.key, "error": str(exc)[:200]})
            return StandbyEvidence(readable=False, last=self.standby_last.get(wl.key), time_to_ready=ttr)
        return StandbyEvidence(bursts=bursts, last=self.standby_last.get(wl.key), time_to_ready=ttr)

    async def _seed_time_to_ready(self, wl: ob.Workload) -> None:
        """Fail-over: a new leader starts from the medians the previous one published to the store
        (when the sink can read them back); an unreachable store just starts empty."""
        get = getattr(self.sink, "get_warm_status", None)
        if get is None:
            return
        try:
            last = await get(wl.namespace, wl.name)
        except Exception as exc:
            log.warning("reading the last warm status failed", extra={"workload": wl.key, "error": str(exc)[:200]})
            return
        if isinstance(last, WarmStatus):
            if last.standby_auto and wl.key not in self.standby_last:
                self.standby_last[wl.key] = last.standby_size
            self.ttr.setdefault(wl.key, TimeToReady()).seed(last.time_to_ready_s)
            self.ttr_gpu.setdefault(wl.key, TimeToReadyByGpu()).seed(last.time_to_ready_by_gpu)

    async def _measure_and_publish(self, wl: ob.Workload, p: Plan, pods: list[dict[str, Any]], now: datetime) -> None:
        cfg = p.config
        assert cfg is not None
        nodes = self.nodes.items
        label = staged_label_key(cfg.cache_key(wl.namespace)) if cfg.model_uri else None
        prepulled = set(p.prepulled_nodes)
        if wl.key not in self.ttr:
            await self._seed_time_to_ready(wl)
        ttr = self.ttr.setdefault(wl.key, TimeToReady())
        ttr_gpu = self.ttr_gpu.setdefault(wl.key, TimeToReadyByGpu())
        ready = starting = 0
        # (pod identifying the replica, seconds to ready or None); a LeaderWorkerSet replica is a group,
        # ready only when all its pods are, identified by its leader
        replicas: list[tuple[dict[str, Any], float | None]] = []
        if wl.is_gang:
            replicas = [(g.leader or {}, g.ready_s) for g in groups(wl, pods)]
        else:
            for pod in pods:
                m = pod.get("metadata") or {}
                labels = m.get("labels") or {}
                if ob.is_managed(pod) or not wl.selector or any(labels.get(k) != v for k, v in wl.selector.items()):
                    continue
                if m.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                if is_gated(pod):
                    continue  # held at a scheduling gate (Kueue quota): asked for, not starting
                replicas.append((pod, pod_time_to_ready(pod)))
        for pod, secs in replicas:
            m = pod.get("metadata") or {}
            if secs is None:
                starting += 1
                continue
            ready += 1
            if not m:
                continue  # a group without its leader: counted, not measured
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            node_labels = ((nodes.get(f"/{node}") or {}).get("metadata") or {}).get("labels") or {}
            staged = node_labels.get(label) == "true" if label else node in prepulled
            created = parse_time(m.get("creationTimestamp")) or 0.0
            left = self.placeholder_left.get(node)
            took = str(m.get("uid")) in self.preemptors or (
                left is not None and created - 5.0 <= left <= created + PLACEHOLDER_WINDOW_S)
            state = warm_state(staged, took)
            if ttr.observe(str(m.get("uid")), state, secs):
                self.metrics.startup.labels(wl.namespace, wl.name, state).observe(secs)
            ttr_gpu.observe(replica_gpu_product(node_labels, pod.get("spec")), str(m.get("uid")), state, secs)
        lab = (wl.namespace, wl.name)
        self.metrics.warm_capacity.labels(*lab).set(p.placeholders_ready)
        self.metrics.staged_nodes.labels(*lab).set(len(p.staged_nodes))
        self.metrics.prepull_nodes.labels(*lab).set(len(p.prepulled_nodes))
        self.metrics.prepull_progress.labels(*lab).set(
            len(p.prepulled_nodes) / len(p.stage_nodes) if p.stage_nodes else 0.0)
        self.metrics.floor.labels(*lab).set(p.floor)
        status = WarmStatus(
            namespace=wl.namespace, name=wl.name, updated_at=now.timestamp(),
            placeholders_ready=p.placeholders_ready,
            staged_nodes=len(p.staged_nodes) if label else len(p.prepulled_nodes),
            ready_replicas=ready, starting_replicas=starting, spec_replicas=wl.replicas,
            min_ready_floor=p.floor, time_to_ready_s=ttr.medians(), time_to_ready_by_gpu=ttr_gpu.medians(),
            # the schedule itself, which the scaler evaluates at its own clock (floors bind at a window's
            # start, not at this controller's next reconcile)
            min_ready=wl.annotations.get(PREFIX + "min-ready", "0").strip(),
            scale_to_zero=wl.annotations.get(PREFIX + "scale-to-zero", "never").strip(),
            standby_auto=cfg.standby_auto, standby_size=p.standby,
        )
        try:
            await self.sink.put_warm_status(wl.namespace, wl.name, status)
        except Exception as exc:
            log.warning("publishing warm status failed", extra={"workload": wl.key, "error": str(exc)[:200]})


def validate_only(annotations: Mapping[str, str]) -> str | None:
    """The error a workload's annotations would produce (for `kubectl`-less checks in tests/docs)."""
    try:
        parse_annotations(annotations)
    except ValueError as exc:
        return str(exc)
    return None


def dumps(o: Any) -> str:
    return json.dumps(o, sort_keys=True)
