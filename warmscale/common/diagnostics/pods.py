"""Kubernetes objects (plain dicts as the API returns them) -> detector inputs (pure, no I/O)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from warmscale.common.diagnostics.model import PodRecord, Termination
from warmscale.common.gpu_resources import is_gpu_quota_key, is_gpu_resource
from warmscale.common.quantity import parse_quantity

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
RAY_CLUSTER = "ray.io/cluster"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB = "jobset.sigs.k8s.io/job-index"
JOBSET_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"


def parse_time(raw: Any) -> float | None:
    if isinstance(raw, datetime):
        return raw.timestamp()
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _quantity(raw: Any) -> float:
    """A resource quantity as the API server writes it (``1000`` comes back as ``1k``)."""
    try:
        return parse_quantity(str(raw))
    except ValueError:
        return 0.0


def pod_gpus(pod: Mapping[str, Any]) -> float:
    """GPUs a pod asks for: whole GPUs, time-slices and MIG slices (each slice counts one)."""
    total = 0.0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        total += sum(_quantity(v) for k, v in merged.items() if is_gpu_resource(k))
    return total


def workload_of(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if LWS_NAME in labels:
        return str(labels[LWS_NAME])
    for ref in meta.get("ownerReferences") or []:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ReplicaSet":
            h = labels.get("pod-template-hash")
            if h and name.endswith("-" + h):
                return name[: -len(h) - 1]
            return re.sub(r"-[a-z0-9]{6,10}$", "", name)
        if kind in ("StatefulSet", "Job", "DaemonSet") or name:
            return name
    return str(meta.get("name") or "")


def gang_of(pod: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The multi-pod replica a pod belongs to (LeaderWorkerSet group, Ray cluster, JobSet job)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    if LWS_NAME in labels and LWS_GROUP in labels:
        size = str(ann.get(LWS_SIZE) or labels.get(LWS_SIZE) or "")
        return f"{labels[LWS_NAME]}-{labels[LWS_GROUP]}", int(size) if size.isdigit() else None
    if RAY_CLUSTER in labels:
        return f"ray:{labels[RAY_CLUSTER]}", None
    if JOBSET_NAME in labels:
        return f"{labels[JOBSET_NAME]}-{labels.get(JOBSET_RJOB, '')}-{labels.get(JOBSET_JOB, '0')}", None
    return None, None


def pod_record(pod: Mapping[str, Any]) -> PodRecord:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    created = parse_time(meta.get("creationTimestamp")) or 0.0
    scheduled: float | None = None
    reason = ""
    for cond in status.get("conditions") or []:
        if cond.get("type") != "PodScheduled":
            continue
        if cond.get("status") == "True":
            scheduled = parse_time(cond.get("lastTransitionTime")) or created
        else:
            reason = f"{cond.get('reason') or ''}: {cond.get('message') or ''}".strip(": ")[:200]
    if scheduled is None and (pod.get("spec") or {}).get("nodeName"):
        scheduled = created
    terms = []
    for cs in status.get("containerStatuses") or []:
        last = ((cs.get("lastState") or {}).get("terminated")) or None
        if not last:
            continue
        at = parse_time(last.get("finishedAt")) or parse_time(last.get("startedAt")) or created
        terms.append(Termination(at=at, reason=str(last.get("reason") or ""), exit_code=int(last.get("exitCode") or 0),
                                 message=str(last.get("message") or "")[:500],
                                 restarts=int(cs.get("restartCount") or 1)))
    gang, size = gang_of(pod)
    return PodRecord(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                     workload=workload_of(pod), created_at=created, gpus=pod_gpus(pod), scheduled_at=scheduled,
                     phase=str(status.get("phase") or "Pending"), pending_reason=reason, gang=gang, gang_size=size,
                     terminations=tuple(terms), deleted=bool(meta.get("deletionTimestamp")))


def gpu_quota_namespaces(quotas: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Namespaces with a ResourceQuota that bounds GPUs (``requests.nvidia.com/gpu``,
    ``requests.nvidia.com/mig-1g.10gb`` and the like)."""
    out = set()
    for q in quotas:
        hard = ((q.get("spec") or {}).get("hard")) or {}
        if any(is_gpu_quota_key(k) for k in hard):
            out.add(str((q.get("metadata") or {}).get("namespace") or ""))
    return frozenset(out)
