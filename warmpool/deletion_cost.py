"""Which replica a scale-in removes: ``controller.kubernetes.io/pod-deletion-cost`` by load (pure;
docs/warmpool.md, "Scale-in that never kills a request").

A ReplicaSet scaling in deletes, among its ready pods, the ones with the lowest deletion cost first
(Kubernetes >= 1.22, beta and on by default). The controller sets the cost of each ready pod of a
Deployment it manages to the requests it holds (running + waiting, from its engine's ``/metrics``),
so the least loaded replica goes first and the fewest requests have to drain. A pod whose load is
unknown (no answer, a malformed payload) gets the highest cost: absent data is never "idle", so an
unreachable pod is never chosen as the least loaded. Pods that are not ready are left alone (the
ReplicaSet removes those first whatever their cost), and so is every pod warmscale did not select.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# The annotation is an int32 (kube-controller-manager rejects anything else and treats it as 0).
COST_MAX = 2**31 - 1
# A pod whose load is unknown: kept last (above any load).
COST_UNKNOWN = COST_MAX
# A known load is capped below COST_UNKNOWN so that a pod that answers always goes before one that
# does not (a million requests in flight is far beyond any engine's max_num_seqs).
COST_LOAD_CAP = 1_000_000


@dataclass(frozen=True)
class PodLoad:
    name: str  # the pod's name (its namespace is the workload's)
    ready: bool
    in_flight: float | None  # running + waiting requests; None: unknown
    current: str | None  # the annotation's value now (None: not set)


def cost_of(in_flight: float | None) -> int:
    """The deletion cost of a pod holding ``in_flight`` requests (unknown: the highest)."""
    if in_flight is None or in_flight != in_flight or in_flight < 0:  # NaN or negative: unknown
        return COST_UNKNOWN
    return min(COST_LOAD_CAP, round(in_flight))


def deletion_costs(pods: Sequence[PodLoad]) -> dict[str, str]:
    """The annotation value to write per pod: ready pods whose cost changed (nothing else)."""
    out: dict[str, str] = {}
    for p in pods:
        if not p.ready:
            continue
        want = str(cost_of(p.in_flight))
        if p.current != want:
            out[p.name] = want
    return out


def victims(pods: Sequence[PodLoad], costs: Mapping[str, int], count: int) -> list[str]:
    """The ``count`` ready pods a ReplicaSet removes first by these costs, lowest first (ties here by
    name; the ReplicaSet breaks them by co-location and age): what the annotation makes it do among
    ready pods."""
    ready = [p for p in pods if p.ready]
    return [p.name for p in sorted(ready, key=lambda p: (costs.get(p.name, 0), p.name))][:max(0, count)]
