"""A KubeRay RayCluster worker group as a warm-pool target (pure; objects are API JSON dicts).

KubeRay's RayCluster, RayService and RayJob have no scale subresource, so KEDA cannot scale them (Ray
Serve replicas are scaled by the Serve controller, with :mod:`warmscale.rayserve.policy`, and worker
pods by the Ray autoscaler). What the warm pool does for a RayCluster annotated
``warmscale.io/enabled: "true"`` is the capacity side, for one worker group:

- the group is ``warmscale.io/ray-worker-group`` (its ``groupName``), or the only group there is;
- one replica = one worker pod of the group (``workerGroupSpecs[].template``: its resources, node
  selector, affinity and tolerations), counted by KubeRay's labels ``ray.io/cluster`` and
  ``ray.io/group``;
- images are pre-pulled, weights staged and placeholders held as for a Deployment, matching that
  template (a MIG slice or a whole GPU alike);
- no ScaledObject and no floor raise: ``warmscale.io/autoscale: "true"`` is refused with an Event,
  and the group's ``minReplicas`` stays KubeRay's and the Ray autoscaler's to change.

A multi-host group (``numOfHosts`` > 1, one replica = several pods) is refused with an Event: its pods
would have to be held as a gang, which is not done for RayClusters yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RAY_GROUP, RAY_VERSION, RAY_PLURAL = "ray.io", "v1", "rayclusters"
RAYCLUSTER_KIND = "RayCluster"
RAY_CLUSTER_LABEL = "ray.io/cluster"  # set by KubeRay on every pod of the cluster
RAY_GROUP_LABEL = "ray.io/group"  # the worker group's groupName ("headgroup" on the head)
GROUP_ANNOTATION = "warmscale.io/ray-worker-group"


@dataclass(frozen=True)
class WorkerGroup:
    name: str
    template: Mapping[str, Any]
    replicas: int
    problem: str = ""  # why the group cannot be a target ("" when it can)


def worker_group(raycluster: Mapping[str, Any]) -> WorkerGroup:
    """The target worker group of a RayCluster (see the module docstring); ``problem`` names the key."""
    spec = raycluster.get("spec") or {}
    groups = [g for g in spec.get("workerGroupSpecs") or [] if isinstance(g, Mapping)]
    names = [str(g.get("groupName") or "") for g in groups]
    wanted = str(((raycluster.get("metadata") or {}).get("annotations") or {}).get(GROUP_ANNOTATION) or "").strip()
    if not groups:
        return WorkerGroup("", {}, 0, "the RayCluster has no workerGroupSpecs: nothing to keep warm")
    if not wanted and len(groups) > 1:
        return WorkerGroup("", {}, 0, f"{GROUP_ANNOTATION} must name one of the worker groups {names}")
    if wanted and wanted not in names:
        return WorkerGroup(wanted, {}, 0, f"{GROUP_ANNOTATION}: no worker group {wanted!r}; the groups are {names}")
    g = groups[names.index(wanted)] if wanted else groups[0]
    name = str(g.get("groupName") or "")
    hosts = int(g.get("numOfHosts") or 1)
    replicas = g.get("replicas") if g.get("replicas") is not None else g.get("minReplicas")
    group = WorkerGroup(name, g.get("template") or {}, int(replicas or 0))
    if hosts > 1:
        return WorkerGroup(name, group.template, group.replicas,
                           f"worker group {name!r} has numOfHosts {hosts}: multi-host groups are not kept warm yet")
    return group


def group_selector(cluster_name: str, group_name: str) -> dict[str, str]:
    """KubeRay's labels on the group's worker pods."""
    return {RAY_CLUSTER_LABEL: cluster_name, RAY_GROUP_LABEL: group_name}
