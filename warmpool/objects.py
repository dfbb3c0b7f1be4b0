"""Manifests of everything the controller creates (pure; plain API dicts).

Every object carries ``app.kubernetes.io/managed-by: warmscale``, a ``warmscale.io/role`` label, the
workload key hash label ``warmscale.io/workload`` and an owner reference to the workload, so the
garbage collector removes it with the workload.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warmscale.warmpool.annotations import WarmConfig
from warmscale.warmpool.cache_roots import system_path_conflict
from warmscale.warmpool.kueue import placeholder_annotations, placeholder_labels
from warmscale.warmpool.matching import replica_requests
from warmscale.warmpool.model_uri import CacheKey
from warmscale.warmpool.raycluster import RAY_GROUP, RAY_VERSION, RAYCLUSTER_KIND

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "warmscale"
ROLE = "warmscale.io/role"
WORKLOAD = "warmscale.io/workload"
MODEL = "warmscale.io/model"
NODE_ANN = "warmscale.io/node"
PIN_ANN = "warmscale.io/pin"
PRIORITY_CLASS = "warmscale-placeholder"
PRIORITY_VALUE = -5
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
PVC_MOUNT_ROOT = "/mnt/warmscale-pvc"
CACHE_MOUNT = "/cache"
PULL_COMMAND = "/.warmscale-prepull-only"
STAGE_CREDENTIALS_SECRET = "warmscale-stage-credentials"


def h(s: str, n: int = 8) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:n]


LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
LWS_KIND = "LeaderWorkerSet"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # set by the LWS controller on every group pod
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"  # "0": the leader
LWS_EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"  # one group per topology domain
GANG_ANN = "warmscale.io/gang"  # on a gang's placeholders: "<gang>/<group size>/<topology key>[ scheduler=volcano]"
GANG_LABEL = "warmscale.io/gang-id"  # the gang's members share it (pod affinity within the topology domain)
# Volcano (volcano.sh, v1.15.1 tested): a workload whose pods name this scheduler gets its gangs as PodGroups
VOLCANO_SCHEDULER = "volcano"  # spec.schedulerName of the pods Volcano schedules (its default --scheduler-name)
PG_GROUP, PG_VERSION, PG_PLURAL, PG_KIND = "scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"
PG_ANN = "scheduling.k8s.io/group-name"  # on a pod: the PodGroup it belongs to (Volcano's KubeGroupNameAnnotationKey)
VOLCANO_QUEUE_ANN = "scheduling.volcano.sh/queue-name"  # on a pod template: the Volcano queue of its pods
PG_ROLE = "placeholder-group"  # warmscale.io/role of the placeholder gangs' PodGroups


@dataclass(frozen=True)
class Workload:
    """A Deployment, StatefulSet, LeaderWorkerSet or RayCluster worker group, reduced to what planning needs.

    A LeaderWorkerSet replica is a *group* of ``group_size`` pods (a leader and ``group_size - 1``
    workers): ``template`` is its worker template, ``leader_template`` its leader template (None: the
    leader uses the worker template) and ``topology_key`` the exclusive-topology key (a group's pods
    share one domain of it, one group per domain; "" for none)."""

    kind: str
    namespace: str
    name: str
    uid: str
    replicas: int
    template: Mapping[str, Any]  # the pod template: {"metadata": ..., "spec": ...}
    annotations: Mapping[str, str]
    selector: Mapping[str, str]  # spec.selector.matchLabels (LWS: the name label of its group pods)
    group_size: int = 1  # pods per replica (LWS spec.leaderWorkerTemplate.size)
    leader_template: Mapping[str, Any] | None = None
    topology_key: str = ""
    queue_name: str = ""  # the Kueue LocalQueue (label kueue.x-k8s.io/queue-name; warmpool.kueue), "" for none
    invalid: str = ""  # why it cannot be planned, naming the key (a RayCluster's worker group); "" if it can

    @property
    def is_gang(self) -> bool:
        """A replica of several pods (its placeholders are held as a gang)."""
        return self.kind == LWS_KIND

    @property
    def volcano(self) -> bool:
        """A gang workload whose pods Volcano schedules (leader or worker template ``schedulerName:
        volcano``): each placeholder gang is one Volcano PodGroup, bound all or nothing by the scheduler."""
        return self.is_gang and any(self.member_spec(m).get("schedulerName") == VOLCANO_SCHEDULER for m in (0, 1))

    @property
    def volcano_queue(self) -> str | None:
        """The Volcano queue the workload's pods name (None: Volcano's default queue)."""
        for m in (0, 1):
            tmpl = self.leader_template if m == 0 and self.leader_template is not None else self.template
            q = ((tmpl.get("metadata") or {}).get("annotations") or {}).get(VOLCANO_QUEUE_ANN)
            if q:
                return str(q)
        return None

    def member_spec(self, member: int) -> Mapping[str, Any]:
        """The pod spec of group member ``member`` (0: the leader)."""
        if member == 0 and self.leader_template is not None:
            return self.leader_template.get("spec") or {}
        return self.pod_spec

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def key_hash(self) -> str:
        return h(self.key)

    @property
    def pod_spec(self) -> Mapping[str, Any]:
        return self.template.get("spec") or {}

    @property
    def api_version(self) -> str:
        if self.kind == LWS_KIND:
            return f"{LWS_GROUP}/{LWS_VERSION}"
        if self.kind == RAYCLUSTER_KIND:
            return f"{RAY_GROUP}/{RAY_VERSION}"
        return "apps/v1"

    def owner_ref(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": False}

    def images(self) -> list[str]:
        """Every image of the pod template (and of the LWS leader template)."""
        seen: list[str] = []
        specs = [self.pod_spec] + ([self.member_spec(0)] if self.leader_template is not None else [])
        for spec in specs:
            for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                img = c.get("image")
                if img and img not in seen:
                    seen.append(img)
        return seen


def _dns_trunc(s: str, n: int) -> str:
    s = re.sub(r"[^a-z0-9-]", "-", s.lower())[:n].strip("-")
    return s or "x"


def labels(wl: Workload, role: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    out = {MANAGED_BY: MANAGED_BY_VALUE, ROLE: role, WORKLOAD: wl.key_hash}
    out.update(extra or {})
    return out


def placeholder_name(wl: Workload, index: int) -> str:
    return f"ws-hold-{_dns_trunc(wl.name, 40)}-{wl.key_hash[:6]}-{index}"


def prepull_name(wl: Workload, node: str) -> str:
    return f"ws-pull-{_dns_trunc(wl.name, 30)}-{h('|'.join(wl.images()), 6)}-{h(node)}"


def stage_job_name(key: CacheKey, node: str) -> str:
    return f"ws-stage-{key.short_hash}-{h(node)}"


def pin_hash(nodes: Sequence[str] | None) -> str:
    return "any" if not nodes else h(",".join(sorted(nodes)), 10)


def _pin_affinity(pod_spec: Mapping[str, Any], nodes: Sequence[str] | None) -> dict[str, Any] | None:
    """The workload's affinity with its required node terms ANDed with ``kubernetes.io/hostname In nodes``."""
    aff = dict(pod_spec.get("affinity") or {})
    if not nodes:
        return aff or None
    na = dict(aff.get("nodeAffinity") or {})
    req = dict(na.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    # matchFields on metadata.name takes a single value, so pin through the hostname label
    pin = {"key": "kubernetes.io/hostname", "operator": "In", "values": sorted(nodes)}
    terms = [dict(t) for t in (req.get("nodeSelectorTerms") or [])] or [{}]
    for t in terms:
        t["matchExpressions"] = [*(t.get("matchExpressions") or []), pin]
    req["nodeSelectorTerms"] = terms
    na["requiredDuringSchedulingIgnoredDuringExecution"] = req
    aff["nodeAffinity"] = na
    return aff


def _on_node(node: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}


def tolerations_for(taints: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Exactly the tolerations a pod pinned to a node with ``taints`` needs to be scheduled and stay there:
    one per NoSchedule/NoExecute taint, matching its key, value and effect (PreferNoSchedule needs none)."""
    out: list[dict[str, Any]] = []
    for t in taints or []:
        effect = t.get("effect")
        if effect not in ("NoSchedule", "NoExecute") or not t.get("key"):
            continue
        tol: dict[str, Any] = {"key": t["key"], "effect": effect}
        if t.get("value"):
            tol.update(operator="Equal", value=t["value"])
        else:
            tol["operator"] = "Exists"
        if tol not in out:
            out.append(tol)
    return out


def node_taints(node: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(((node or {}).get("spec") or {}).get("taints") or [])


# Stager containers: no capability, no privilege escalation, the default seccomp profile, a read-only
# root filesystem; the cache mount is the only writable path (sources are mounted read-only).
STAGER_CONTAINER_SECURITY: dict[str, Any] = {
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
JOB_POD_SECURITY: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
# Stage and evict Jobs run as uid 0 *without any capability*: the kubelet creates a DirectoryOrCreate
# hostPath as root:root 0755, so only its owner can write it (the image's own user, 10001, could not).
# Without CAP_DAC_OVERRIDE/CAP_CHOWN/CAP_FOWNER root can write only what it owns (the cache) and
# nothing on the read-only root filesystem.
JOB_CONTAINER_SECURITY: dict[str, Any] = {**STAGER_CONTAINER_SECURITY, "runAsUser": 0, "runAsGroup": 0,
                                          "runAsNonRoot": False}


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _hold_spec(spec: Mapping[str, Any], pinned: Sequence[str] | None) -> dict[str, Any]:
    """A pause pod requesting what a pod of ``spec`` requests, with its node constraints."""
    req = replica_requests(spec)
    requests = {k: _fmt(v) for k, v in req.items() if v > 0}
    limits = {k: v for k, v in requests.items() if "/" in k}  # extended resources need limits == requests
    pod_spec: dict[str, Any] = {
        "priorityClassName": PRIORITY_CLASS,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [{"name": "hold", "image": PAUSE_IMAGE,
                        "resources": {"requests": requests, **({"limits": limits} if limits else {})}}],
    }
    if spec.get("nodeSelector"):
        pod_spec["nodeSelector"] = dict(spec["nodeSelector"])
    aff = _pin_affinity(spec, pinned)
    if aff:
        pod_spec["affinity"] = aff
    if spec.get("tolerations"):
        pod_spec["tolerations"] = [dict(t) for t in spec["tolerations"]]
    return pod_spec


def placeholder_pod(wl: Workload, index: int, pinned: Sequence[str] | None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": placeholder_name(wl, index), "namespace": wl.namespace,
                     "labels": labels(wl, "placeholder", placeholder_labels(wl.queue_name)),
                     "annotations": {PIN_ANN: pin_hash(pinned), **placeholder_annotations(wl.queue_name)},
                     "ownerReferences": [wl.owner_ref()]},
        "spec": _hold_spec(wl.pod_spec, pinned),
    }


def gang_placeholder_name(wl: Workload, gang: int, member: int) -> str:
    return f"ws-hold-{_dns_trunc(wl.name, 36)}-{wl.key_hash[:6]}-g{gang}-{member}"


def gang_id(wl: Workload, gang: int) -> str:
    return f"{wl.key_hash}-{gang}"


def gang_record(wl: Workload, gang: int) -> str:
    """What a gang was planned for (GANG_ANN): a change of group size, topology key or scheduler (to or
    from Volcano) re-plans it."""
    base = f"{gang}/{wl.group_size}/{wl.topology_key}"
    return f"{base} scheduler={VOLCANO_SCHEDULER}" if wl.volcano else base


def pod_group_name(wl: Workload, gang: int) -> str:
    """The PodGroup of Volcano gang ``gang``; the name carries what it was made for (its ``minMember``), so
    a re-planned gang gets a new PodGroup instead of a stale one of the same name."""
    return f"ws-hold-{_dns_trunc(wl.name, 36)}-{wl.key_hash[:6]}-g{gang}-{h(gang_record(wl, gang), 4)}"


def pod_group(wl: Workload, gang: int) -> dict[str, Any]:
    """The Volcano PodGroup of placeholder gang ``gang``: ``minMember`` = the group size, so the scheduler
    binds all its members at once or none (a partial gang never holds a GPU); ``minResources`` = what
    the members request together (Volcano's enqueue admits it only when that much is idle); the
    placeholders' PriorityClass (the lowest: real replicas preempt it); the queue the workload's pods
    name (the same quota as the replicas it holds room for)."""
    total: dict[str, float] = {}
    for m in range(wl.group_size):
        for k, v in replica_requests(wl.member_spec(m)).items():
            total[k] = total.get(k, 0.0) + v
    spec: dict[str, Any] = {"minMember": wl.group_size, "priorityClassName": PRIORITY_CLASS,
                            "minResources": {k: _fmt(v) for k, v in sorted(total.items()) if v > 0}}
    if wl.volcano_queue:
        spec["queue"] = wl.volcano_queue
    return {
        "apiVersion": f"{PG_GROUP}/{PG_VERSION}", "kind": PG_KIND,
        "metadata": {"name": pod_group_name(wl, gang), "namespace": wl.namespace,
                     "labels": labels(wl, PG_ROLE, {GANG_LABEL: gang_id(wl, gang)}),
                     "annotations": {GANG_ANN: gang_record(wl, gang)},
                     "ownerReferences": [wl.owner_ref()]},
        "spec": spec,
    }


def gang_placeholder_pod(wl: Workload, gang: int, member: int, pinned: Sequence[str] | None,
                         domain: str | None = None) -> dict[str, Any]:
    """Member ``member`` (0: the leader's requests) of placeholder gang ``gang``: one pause pod per group
    member. With an exclusive topology the gang's members share one domain of ``wl.topology_key``
    (``domain``: the one the planner found room in) and no other gang of this workload uses it, as the
    LWS controller places a group's pods."""
    spec = _hold_spec(wl.member_spec(member), pinned)
    gid = gang_id(wl, gang)
    if wl.topology_key:
        aff = dict(spec.get("affinity") or {})
        aff["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {GANG_LABEL: gid}}, "topologyKey": wl.topology_key}]}
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {WORKLOAD: wl.key_hash, ROLE: "placeholder"},
                              "matchExpressions": [{"key": GANG_LABEL, "operator": "NotIn", "values": [gid]}]},
            "topologyKey": wl.topology_key}]}
        if domain is not None:
            na = dict(aff.get("nodeAffinity") or {})
            req = dict(na.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
            terms = [dict(t) for t in (req.get("nodeSelectorTerms") or [])] or [{}]
            for t in terms:
                t["matchExpressions"] = [*(t.get("matchExpressions") or []),
                                         {"key": wl.topology_key, "operator": "In", "values": [domain]}]
            req["nodeSelectorTerms"] = terms
            na["requiredDuringSchedulingIgnoredDuringExecution"] = req
            aff["nodeAffinity"] = na
        spec["affinity"] = aff
    annotations: dict[str, str] = {PIN_ANN: pin_hash(pinned), GANG_ANN: gang_record(wl, gang)}
    if wl.volcano:  # one PodGroup per gang: Volcano binds its members together or not at all
        spec["schedulerName"] = VOLCANO_SCHEDULER
        annotations[PG_ANN] = pod_group_name(wl, gang)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": gang_placeholder_name(wl, gang, member), "namespace": wl.namespace,
                     "labels": labels(wl, "placeholder", {GANG_LABEL: gid, **placeholder_labels(wl.queue_name, gid)}),
                     "annotations": {**annotations, **placeholder_annotations(wl.queue_name, wl.group_size)},
                     "ownerReferences": [wl.owner_ref()]},
        "spec": spec,
    }


def prepull_pod(wl: Workload, node: str, deadline_s: int = 7200) -> dict[str, Any]:
    """One pod per node pulling every image of the template; no shell or binary in the image is needed.

    Each container runs a command that does not exist in the image: the kubelet must pull the image
    before it can try to start the container, the start then fails, and the pod ends (Failed or, on
    a simulated node, Succeeded) with every image local. ``containerStatuses[].imageID`` / a
    terminated state tell the controller the pull finished; ErrImagePull/ImagePullBackOff are
    retried by the kubelet with its own back-off until ``activeDeadlineSeconds``.
    """
    spec = wl.pod_spec
    containers = [{"name": f"img-{i}", "image": img, "imagePullPolicy": "IfNotPresent",
                   "command": [PULL_COMMAND],
                   "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}}}
                  for i, img in enumerate(wl.images())]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline_s,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "affinity": _on_node(node),
        "tolerations": [{"operator": "Exists"}],
        "containers": containers,
    }
    if spec.get("imagePullSecrets"):
        pod_spec["imagePullSecrets"] = [dict(s) for s in spec["imagePullSecrets"]]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": prepull_name(wl, node), "namespace": wl.namespace,
                     "labels": labels(wl, "prepull"), "annotations": {NODE_ANN: node},
                     "ownerReferences": [wl.owner_ref()]},
        "spec": pod_spec,
    }


# Overall deadline of one `warmscale stage` (lock wait + download + verification). A Job's own
# activeDeadlineSeconds (3 h) is the outer bound; the engine's init container has none (the kubelet never
# times init containers out), so the stager's own deadline is what ends a trickling download there.
STAGE_DEADLINE_S = 2 * 3600


def stager_args(cfg: WarmConfig, cache_mount: str, namespace: str, *, ensure: bool = False) -> list[str]:
    """``warmscale stage`` for ``cfg``'s model (read in ``namespace``) into the cache mounted at ``cache_mount``."""
    uri = cfg.model_uri
    assert uri is not None
    args = ["warmscale", "--log-format", "json", "stage", "--uri", uri.canonical, "--cache-root", cache_mount,
            "--namespace", namespace, "--budget", str(cfg.cache_budget), "--pvc-root", PVC_MOUNT_ROOT,
            "--deadline", str(STAGE_DEADLINE_S)]
    if cfg.model_size is not None:
        args += ["--size", str(cfg.model_size)]
    if cfg.model_sha256:
        args += ["--sha256", cfg.model_sha256]
    if ensure:
        args.append("--ensure")
    return args


def stager_volumes(cfg: WarmConfig, cache_name: str, source_name: str,
                   cache_mount: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes) a stager container needs: the node-local cache root as a hostPath, and a
    local source (pvc:// claim read-only, file:// host directory read-only).

    Never a system path: the planner and the webhook refuse such a workload before (an Event, nothing
    mounted); this raises ValueError should a caller skip that check."""
    uri = cfg.model_uri
    assert uri is not None
    for what, path in (("cache root", cfg.cache_root), ("file:// source", uri.path if uri.scheme == "file" else "")):
        if path and (s := system_path_conflict(path)) is not None:
            raise ValueError(f"refusing to mount the {what} {path}: a system path or overlapping one ({s})")
    mounts: list[dict[str, Any]] = [{"name": cache_name, "mountPath": cache_mount}]
    volumes: list[dict[str, Any]] = [
        {"name": cache_name, "hostPath": {"path": cfg.cache_root, "type": "DirectoryOrCreate"}}]
    if uri.scheme == "pvc":
        mounts.append({"name": source_name, "mountPath": f"{PVC_MOUNT_ROOT}/{uri.location}", "readOnly": True})
        volumes.append({"name": source_name, "persistentVolumeClaim": {"claimName": uri.location,
                                                                       "readOnly": True}})
    if uri.scheme == "file":
        mounts.append({"name": source_name, "mountPath": uri.path, "readOnly": True})
        volumes.append({"name": source_name, "hostPath": {"path": uri.path}})
    return mounts, volumes


def stage_job(wl: Workload, cfg: WarmConfig, node: str, image: str, taints: Sequence[Mapping[str, Any]] = (),
              deadline_s: int = 3 * 3600, backoff_limit: int = 6) -> dict[str, Any]:
    """A Job on ``node`` (whose ``taints`` it tolerates, nothing more) running ``warmscale stage`` into the
    hostPath cache root, under a restrictive securityContext (see :data:`JOB_CONTAINER_SECURITY`)."""
    uri = cfg.model_uri
    assert uri is not None
    key = cfg.cache_key(wl.namespace)
    args = stager_args(cfg, CACHE_MOUNT, wl.namespace)
    mounts, volumes = stager_volumes(cfg, "cache", "source", CACHE_MOUNT)
    lab = labels(wl, "stage", {MODEL: key.short_hash})
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "affinity": _on_node(node),
        "tolerations": tolerations_for(taints),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": dict(JOB_POD_SECURITY),
        "containers": [{
            "name": "stage", "image": image, "command": args,
            "envFrom": [{"secretRef": {"name": STAGE_CREDENTIALS_SECRET, "optional": True}}],
            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
            "securityContext": dict(JOB_CONTAINER_SECURITY),
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": stage_job_name(key, node), "namespace": wl.namespace, "labels": lab,
                     "annotations": {NODE_ANN: node, "warmscale.io/model-uri": uri.canonical},
                     "ownerReferences": [wl.owner_ref()]},
        "spec": {
            "backoffLimit": backoff_limit,
            "activeDeadlineSeconds": deadline_s,
            "template": {"metadata": {"labels": lab, "annotations": dict(cfg.stage_pod_annotations)},
                         "spec": pod_spec},
        },
    }


def priority_class() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS, "labels": {MANAGED_BY: MANAGED_BY_VALUE}},
        "value": PRIORITY_VALUE,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "warmscale placeholder pods: hold GPU capacity, preempted by real replicas, never preempt "
                       "(above the cluster autoscaler's -10 expendable cutoff, so it still provisions for them)",
    }


def leader_port(wl: Workload) -> int | None:
    """The port the group leader's engine serves on: named ``metrics``, else ``http``, else the first."""
    containers = wl.member_spec(0).get("containers") or []
    ports = [p for c in containers for p in c.get("ports") or [] if p.get("containerPort")]
    for wanted in ("metrics", "http"):
        for p in ports:
            if p.get("name") == wanted:
                return int(p["containerPort"])
    return int(ports[0]["containerPort"]) if ports else None


def _pod_source(wl: Workload) -> dict[str, str]:
    """How the scaler finds the replicas to scrape and count. A LeaderWorkerSet: ``metricsPort`` only, so
    that the scaler resolves the groups from the scale target (a replica is ready only when its whole
    group is; the leaders are scraped); without a port, the leaders by ``podSelector`` (then counted
    one per group, ready when the leader is)."""
    if wl.is_gang:
        port = leader_port(wl)
        if port is not None:
            return {"metricsPort": str(port)}
        return {"podSelector": f"{LWS_NAME_LABEL}={wl.name},{LWS_WORKER_INDEX}=0"}
    return {"podSelector": ",".join(f"{k}={v}" for k, v in sorted(wl.selector.items()))}


def scaled_object(wl: Workload, cfg: WarmConfig, floor: int, scaler_address: str,
                  trigger_authentication: str = "") -> dict[str, Any]:
    """The owned ScaledObject; ``trigger_authentication`` names the install's ClusterTriggerAuthentication
    (KEDA's client certificate and the CA: mutual TLS to the scaler)."""
    metadata: dict[str, str] = {
        **_pod_source(wl),
        "minReplicas": str(floor),
        "maxReplicas": str(cfg.max_replicas),
        "scaleToZero": "true" if cfg.scale_to_zero.mode != "never" else "false",
        "hpaTolerance": "0",
    }
    if cfg.ttft_slo_seconds is not None:
        metadata["ttftSloSeconds"] = f"{cfg.ttft_slo_seconds:g}"
    if cfg.role != "both":
        metadata["role"] = cfg.role
    if cfg.pd_group is not None:
        metadata["pdGroup"] = cfg.pd_group
    metadata.update(cfg.trigger_metadata)
    metadata["scalerAddress"] = cfg.scaler_address or scaler_address
    trigger: dict[str, Any] = {"type": "external-push", "metadata": metadata}
    if trigger_authentication:
        metadata.setdefault("enableTLS", "true")
        trigger["authenticationRef"] = {"name": trigger_authentication, "kind": "ClusterTriggerAuthentication"}
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": wl.name, "namespace": wl.namespace, "labels": labels(wl, "scaledobject"),
                     "ownerReferences": [wl.owner_ref()]},
        "spec": {
            "scaleTargetRef": {"apiVersion": wl.api_version, "kind": wl.kind, "name": wl.name},
            "minReplicaCount": floor,
            "maxReplicaCount": cfg.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                # tolerance 0 on both sides: the scaler's metric already carries the hysteresis
                # (hpaTolerance=0 tells it so); scale-up is immediate, scale-down stabilised by the scaler.
                "scaleUp": {"stabilizationWindowSeconds": 0, "tolerance": "0"},
                "scaleDown": {"stabilizationWindowSeconds": 0, "tolerance": "0"},
            }}},
            "triggers": [trigger],
        },
    }


def is_managed(obj: Mapping[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == MANAGED_BY_VALUE


# ---------------------------------------------------------------- cache clean-up

FINALIZER = "warmscale.io/cache-cleanup"
STAGED_PREFIX = "warmscale.io/staged-"  # node label (=true) and node annotation (JSON record) share the key


RECORD_LAYOUT = "3"  # records of cache entries named by CacheKey; older records (no "layout") name URI-only entries


def staged_record(namespace: str, uri_canonical: str, cache_root: str, sha256: str | None = None) -> str:
    """Node annotation written with the staged label: what a clean-up Job needs once the workload is gone
    (the cache identity: the namespace, or the content digest)."""
    rec = {"ns": namespace, "uri": uri_canonical, "root": cache_root, "layout": RECORD_LAYOUT}
    if sha256:
        rec["sha256"] = sha256
    return json.dumps(rec, sort_keys=True, separators=(",", ":"))


def evict_job_name(label_key: str, node: str) -> str:
    return f"ws-evict-{label_key.removeprefix(STAGED_PREFIX)[:12]}-{h(node)}"


def evict_job(namespace: str, label_key: str, uri_canonical: str, cache_root: str, node: str, image: str,
              ttl_s: int = 3600, taints: Sequence[Mapping[str, Any]] = (), pinned: str = "") -> dict[str, Any]:
    """A Job on ``node`` running ``warmscale stage --evict``. Not owned by the workload: it must outlive it.

    ``pinned``: the record's identity beyond the namespace: "" (namespace-keyed), a SHA-256 (digest-keyed),
    or "legacy" (a record of an earlier controller: the entry keyed by the URI alone)."""
    lab = {MANAGED_BY: MANAGED_BY_VALUE, ROLE: "evict", MODEL: label_key.removeprefix(STAGED_PREFIX)[:63]}
    args = ["warmscale", "--log-format", "json", "stage", "--evict", "--uri", uri_canonical,
            "--cache-root", CACHE_MOUNT, "--namespace", namespace]
    if pinned == "legacy":
        args.append("--legacy-entry")
    elif pinned:
        args += ["--sha256", pinned]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": evict_job_name(label_key, node), "namespace": namespace, "labels": lab,
                     "annotations": {NODE_ANN: node, "warmscale.io/model-uri": uri_canonical,
                                     "warmscale.io/label-key": label_key}},
        "spec": {
            "backoffLimit": 3,
            "activeDeadlineSeconds": 900,
            "ttlSecondsAfterFinished": ttl_s,
            "template": {"metadata": {"labels": lab}, "spec": {
                "restartPolicy": "Never",
                "affinity": _on_node(node),
                "tolerations": tolerations_for(taints),
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": dict(JOB_POD_SECURITY),
                "containers": [{"name": "evict", "image": image, "command": args,
                                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                                "securityContext": dict(JOB_CONTAINER_SECURITY),
                                "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT}]}],
                "volumes": [{"name": "cache", "hostPath": {"path": cache_root, "type": "DirectoryOrCreate"}}],
            }},
        },
    }
