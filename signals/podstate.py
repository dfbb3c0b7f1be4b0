"""What one pod is to the replica count: ready, starting, held at a scheduling gate, or gone (pure).

A pod held at a scheduling gate (``spec.schedulingGates`` non-empty, e.g. Kueue's
``kueue.x-k8s.io/admission`` while its ClusterQueue has no quota left) is *gated*: the HPA asked for it,
but nothing will start it until the gate is lifted, which may be never. It is not capacity in flight,
so the policy does not count it as *starting* (a scale-up beyond a Kueue quota would otherwise be
counted as coming, and the demand it was for never asked for again once quota frees).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Obj = dict[str, Any]

# Labels the LeaderWorkerSet controller puts on every pod of a group (sigs.k8s.io/lws, v0.10.0).
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
# The PodScheduled condition's reason while a pod waits at a scheduling gate (Kubernetes >= 1.27).
SCHEDULING_GATED_REASON = "SchedulingGated"


def _condition(pod: Obj, kind: str) -> Obj | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_gated(pod: Obj) -> bool:
    """Not scheduled and held at a scheduling gate (its own ``schedulingGates``, or the scheduler says so)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or status.get("phase") not in (None, "", "Pending"):
        return False
    if spec.get("schedulingGates"):
        return True
    cond = _condition(pod, "PodScheduled")
    return cond is not None and cond.get("status") == "False" and cond.get("reason") == SCHEDULING_GATED_REASON


def pod_state(pod: Obj) -> str:
    """``ready``, ``starting``, ``gated``, ``terminating`` or ``finished``."""
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    if meta.get("deletionTimestamp"):
        return "terminating"
    if phase in ("Succeeded", "Failed"):
        return "finished"
    ready = _condition(pod, "Ready")
    if phase == "Running" and ready is not None and ready.get("status") == "True":
        return "ready"
    if is_gated(pod):
        return "gated"
    return "starting"


def lws_group_counts(pods: Sequence[Obj], size: int) -> tuple[int, int]:
    """(ready, starting) groups of a LeaderWorkerSet among its pods: a group is ready only when all its
    ``size`` pods are Ready; a group with any live pod that is not is starting, unless one of its pods
    is held at a scheduling gate (a group is all or nothing: one gated member holds the whole group)."""
    by_group: dict[str, list[str]] = {}
    for pod in pods:
        state = pod_state(pod)
        if state in ("ready", "starting", "gated"):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            by_group.setdefault(str(labels.get(LWS_GROUP_INDEX, "")), []).append(state)
    ready = sum(1 for states in by_group.values() if len(states) >= size and all(s == "ready" for s in states))
    starting = sum(1 for states in by_group.values()
                   if "gated" not in states and not (len(states) >= size and all(s == "ready" for s in states)))
    return ready, starting
