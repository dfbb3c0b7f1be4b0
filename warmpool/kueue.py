"""Warm capacity inside a Kueue queue (pure): placeholders admitted against the workload's ClusterQueue.

A workload opts into Kueue with the label ``kueue.x-k8s.io/queue-name: <LocalQueue>`` (on the
Deployment/StatefulSet/LeaderWorkerSet or on its pod template). Its placeholders carry the same label
(and the marks Kueue's webhooks put on a queued workload's pods, :data:`MANAGED_LABEL`,
:data:`SUSPENDING_PARENT_ANN`), so Kueue gates each one until its ClusterQueue admits it: the quota a
placeholder holds is quota of the same queue, and when a replica of the workload arrives (priority
above the placeholders' -5) Kueue preempts a placeholder within the ClusterQueue and admits the
replica into the quota it held. Without them the placeholders would hold nodes that the queue's quota
never counted (admitted nowhere, and a replica could be over quota while its warm node sits idle).

A gang's placeholders (a LeaderWorkerSet group) are one Kueue pod group (``pod-group-name`` = the
gang id, ``pod-group-total-count`` = the group size): admitted all or nothing, like the group.

:func:`quota_below_floor` is the bad-input rule: a ClusterQueue whose nominal quota of the GPU resource
is smaller than what the warm floor needs gets a Warning Event naming both numbers (the floor's
replicas could never all be admitted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warmscale.common.gpu_resources import NVIDIA_GPU as GPU
from warmscale.common.quantity import parse_quantity

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# What Kueue's Deployment webhook puts on a queued Deployment's pod template (v0.19): its pod webhook
# then gates the pod as one Workload of its own, although an owner (the Deployment) is in a queue. A
# placeholder is owned by the workload too, so it needs both, or Kueue leaves it alone (not gated, its
# quota never counted). "deployment" for every kind: the pod reconciler then admits each placeholder
# alone (the StatefulSet and LWS reconcilers would take it for one of their own pods).
MANAGED_LABEL = "kueue.x-k8s.io/managed"
SUSPENDING_PARENT_ANN = "kueue.x-k8s.io/pod-suspending-parent"
SUSPENDING_PARENT = "deployment"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_ANN = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
LOCAL_QUEUES, CLUSTER_QUEUES = "localqueues", "clusterqueues"


def queue_name(workload_labels: Mapping[str, str] | None, template: Mapping[str, Any]) -> str:
    """The LocalQueue a workload is submitted to ("" for none): its own label, else its pod template's."""
    own = (workload_labels or {}).get(QUEUE_LABEL)
    if own:
        return str(own)
    return str((((template.get("metadata") or {}).get("labels")) or {}).get(QUEUE_LABEL) or "")


def placeholder_labels(queue: str, gang_id: str | None = None) -> dict[str, str]:
    """Labels that put a placeholder into ``queue`` (and, for a gang member, into its pod group)."""
    if not queue:
        return {}
    out = {QUEUE_LABEL: queue, MANAGED_LABEL: "true"}
    if gang_id is not None:
        out[POD_GROUP_LABEL] = gang_id
    return out


def placeholder_annotations(queue: str, group_size: int | None = None) -> dict[str, str]:
    """Kueue's suspending-parent mark, and a gang member's pod-group size (Kueue admits a pod group once all
    its members exist)."""
    if not queue:
        return {}
    out = {SUSPENDING_PARENT_ANN: SUSPENDING_PARENT}
    if group_size is not None:
        out[POD_GROUP_TOTAL_ANN] = str(group_size)
    return out


@dataclass(frozen=True)
class QueueQuota:
    """What the controller read of the workload's queue: the LocalQueue, its ClusterQueue and the
    ClusterQueue's nominal quota of :data:`GPU` summed over its flavors (None: it covers no GPUs)."""

    local_queue: str
    cluster_queue: str
    gpus: float | None


def nominal_quota(cluster_queue: Mapping[str, Any], resource: str = GPU) -> float | None:
    """The sum of ``nominalQuota`` of ``resource`` over every resource group and flavor (None: not covered)."""
    total: float | None = None
    for group in ((cluster_queue.get("spec") or {}).get("resourceGroups") or []):
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == resource and res.get("nominalQuota") is not None:
                    total = (total or 0.0) + parse_quantity(res["nominalQuota"])
    return total


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def quota_below_floor(quota: QueueQuota, floor: int, gpus_per_replica: float) -> str | None:
    """The Event message when the floor needs more GPUs than the ClusterQueue's nominal quota, else None."""
    if floor <= 0 or gpus_per_replica <= 0:
        return None
    need = floor * gpus_per_replica
    have = quota.gpus or 0.0
    if have >= need:
        return None
    return (f"Kueue ClusterQueue {quota.cluster_queue} (LocalQueue {quota.local_queue}) has a nominal quota of "
            f"{_fmt(have)} {GPU}, smaller than the warm floor of {floor} replicas x {_fmt(gpus_per_replica)} "
            f"{GPU} = {_fmt(need)}: at most {int(have // gpus_per_replica)} of the floor's replicas can be admitted")
