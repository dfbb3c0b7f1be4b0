"""A TEST-ONLY STAND-IN for the LeaderWorkerSet controller (sigs.k8s.io/lws v0.10.0). Not the product.

Why: the Go module proxy here does not serve ``sigs.k8s.io/lws``, so the real controller cannot be
built. The real CRD is installed (``testbed/lws``, :func:`warmscale.localcluster.crds.lws_crd_dir`), so the API
server itself serves LeaderWorkerSets and their scale subresource (KEDA and the HPA scale them through
it); only the pods of the groups and the status need a controller, and this stand-in does the little
of that the tests rely on, the way LWS documents it:

- per group ``g < spec.replicas``: a leader pod ``<name>-<g>`` (the leader template, else the worker
  template) and workers ``<name>-<g>-<w>`` for ``w`` in ``1..size-1`` (the worker template), created
  at once (LWS ``startupPolicy: LeaderCreated``);
- labels ``leaderworkerset.sigs.k8s.io/name``, ``.../group-index``, ``.../worker-index``,
  ``.../group-key`` plus the template's own (e.g. ``role: leader`` / ``role: worker``, as vLLM's LWS
  example sets them), the env LWS injects (``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``,
  ``LWS_WORKER_INDEX``);
- the annotation ``leaderworkerset.sigs.k8s.io/exclusive-topology: <key>`` gives each pod the affinity
  LWS gives it: its group's pods in one domain of ``<key>`` (pod affinity on the group key) and no
  other group there (pod anti-affinity);
- groups ``>= spec.replicas`` are deleted (scale down deletes a leader and its workers); a group whose
  pods were made for another size is recreated (LWS would roll it);
- status: ``replicas`` (groups with pods), ``readyReplicas`` (groups whose pods are all Ready),
  ``hpaPodSelector`` (the leaders), through the status subresource.

Not done (the real controller does): rolling updates, startupPolicy LeaderReady, restart of a whole
group when one pod fails, subgroups, Services, gang scheduling with Volcano.

Swapping in the real controller is one line: the ``lws_controller`` fixture in
``tests/warmpool/test_lws_cluster.py`` starts ``LwsStandIn``; start the real controller there instead
(e.g. a ``warmscale/localcluster`` process like ``keda.start``) and the tests are unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL, KIND = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"
PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME, GROUP_INDEX, WORKER_INDEX, GROUP_KEY = (PREFIX + "name", PREFIX + "group-index", PREFIX + "worker-index",
                                              PREFIX + "group-key")
GROUP_SIZE_ANN = PREFIX + "size"  # on the pods: the size they were made for
EXCLUSIVE = PREFIX + "exclusive-topology"
POLL_S = 0.5  # test-only: a poll instead of watches keeps the stand-in small


def group_key(namespace: str, name: str, group: int) -> str:
    return hashlib.sha256(f"{namespace}/{name}/{group}".encode()).hexdigest()[:40]


def _ready(pod: dict[str, Any]) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def group_pod(lws: dict[str, Any], group: int, worker: int) -> dict[str, Any]:
    """The pod LWS would create for ``worker`` (0: the leader) of ``group``."""
    m, spec = lws["metadata"], lws.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate") or {}
    size = int(lwt.get("size") or 1)
    tmpl = (lwt.get("leaderTemplate") if worker == 0 else None) or lwt.get("workerTemplate") or {}
    name, ns = m["name"], m["namespace"]
    key = group_key(ns, name, group)
    pod_name = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
    tm = tmpl.get("metadata") or {}
    labels = {**(tm.get("labels") or {}), NAME: name, GROUP_INDEX: str(group), WORKER_INDEX: str(worker),
              GROUP_KEY: key}
    pod_spec = dict(tmpl.get("spec") or {})
    env = [{"name": "LWS_LEADER_ADDRESS", "value": f"{name}-{group}.{name}.{ns}"},
           {"name": "LWS_GROUP_SIZE", "value": str(size)}, {"name": "LWS_WORKER_INDEX", "value": str(worker)}]
    pod_spec["containers"] = [{**c, "env": [*(c.get("env") or []), *env]} for c in pod_spec.get("containers") or []]
    topology = ((m.get("annotations") or {}).get(EXCLUSIVE) or "").strip()
    if topology:
        aff = dict(pod_spec.get("affinity") or {})
        aff["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": GROUP_KEY, "operator": "In", "values": [key]}]},
            "topologyKey": topology}]}
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": GROUP_KEY, "operator": "Exists"},
                                                   {"key": GROUP_KEY, "operator": "NotIn", "values": [key]}]},
            "topologyKey": topology}]}
        pod_spec["affinity"] = aff
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
                         "annotations": {**(tm.get("annotations") or {}), GROUP_SIZE_ANN: str(size)},
                         "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name,
                                              "uid": m["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": pod_spec}


class LwsStandIn:
    """Reconciles the LeaderWorkerSets of one namespace (see the module docstring: a stand-in)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.reconciles = 0

    async def reconcile(self) -> None:
        ns = self.namespace
        sets = (await self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)).get("items") or []
        pods = (await self.core.list_namespaced_pod(ns, label_selector=NAME, _preload_content=False))
        items = (await pods.json()).get("items") or []
        for lws in sets:
            await self._one(lws, [p for p in items if p["metadata"]["labels"].get(NAME) == lws["metadata"]["name"]])
        self.reconciles += 1

    async def _one(self, lws: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        m, spec = lws["metadata"], lws.get("spec") or {}
        ns, name = m["namespace"], m["name"]
        replicas = int(spec.get("replicas") if spec.get("replicas") is not None else 1)
        size = int((spec.get("leaderWorkerTemplate") or {}).get("size") or 1)
        by_group: dict[int, dict[int, dict[str, Any]]] = {}
        for p in pods:
            if p["metadata"].get("deletionTimestamp"):
                continue
            labels = p["metadata"]["labels"]
            by_group.setdefault(int(labels[GROUP_INDEX]), {})[int(labels[WORKER_INDEX])] = p
        for g, members in by_group.items():
            stale = g >= replicas or any((p["metadata"].get("annotations") or {}).get(GROUP_SIZE_ANN) != str(size)
                                         for p in members.values())
            if stale:
                for p in members.values():
                    with contextlib.suppress(ApiException):
                        await self.core.delete_namespaced_pod(p["metadata"]["name"], ns, grace_period_seconds=0)
                members.clear()
        for g in range(replicas):
            for w in range(size):
                if w not in by_group.get(g, {}):
                    try:
                        await self.core.create_namespaced_pod(ns, group_pod(lws, g, w))
                    except ApiException as exc:
                        if exc.status != 409:
                            raise
        groups = {g: ms for g, ms in by_group.items() if ms and g < replicas}
        ready = sum(1 for ms in groups.values() if len(ms) == size and all(_ready(p) for p in ms.values()))
        status = {"replicas": len(groups), "readyReplicas": ready, "updatedReplicas": len(groups),
                  "hpaPodSelector": f"{NAME}={name},{WORKER_INDEX}=0"}
        if {k: (lws.get("status") or {}).get(k) for k in status} != status:
            await self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, name,
                                                                    {"status": status},
                                                                    _content_type="application/merge-patch+json")

    async def run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a test-only loop: log and retry
                log.warning("lws stand-in reconcile failed: %s", str(exc)[:300])
            await asyncio.sleep(POLL_S)


@contextlib.asynccontextmanager
async def running(api: client.ApiClient, namespace: str) -> AsyncIterator[LwsStandIn]:
    """The stand-in reconciling ``namespace`` until the block ends."""
    standin = LwsStandIn(api, namespace)
    task = asyncio.create_task(standin.run(), name=f"lws-standin-{namespace}")
    try:
        yield standin
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
