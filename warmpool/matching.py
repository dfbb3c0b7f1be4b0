"""Which nodes fit one replica of a workload (pure; objects are API JSON dicts, camelCase).

A node fits when it satisfies the pod template's ``nodeSelector``, its required node affinity
(``matchExpressions`` with In/NotIn/Exists/DoesNotExist/Gt/Lt and ``matchFields`` on
``metadata.name``), its tolerations cover every NoSchedule/NoExecute taint, it is schedulable and
Ready, and its allocatable resources (GPUs, CPU, memory; the GPU product comes in through the
selector/affinity on ``nvidia.com/gpu.product``) hold one replica's requests. ``free_fit`` also
subtracts what the node's running pods request.

GPUs are matched by resource name, whatever the sharing mode (:mod:`warmscale.common.gpu_resources`):
a MIG slice under the mixed strategy (``nvidia.com/mig-1g.10gb``) fits only a node offering that
profile; a time-sliced node's ``nvidia.com/gpu`` counts its slices (``nvidia.com/gpu.replicas`` per
GPU), as the scheduler counts them. Placeholders request what the replica requests, so they hold
the same slices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warmscale.common.quantity import parse_quantity

Obj = Mapping[str, Any]


def _meta(o: Obj) -> Mapping[str, Any]:
    return o.get("metadata") or {}


def _labels(o: Obj) -> Mapping[str, str]:
    return _meta(o).get("labels") or {}


def replica_requests(pod_spec: Obj) -> dict[str, float]:
    """Effective requests of one pod: max(sum of containers, each init container), per resource.

    Extended resources (GPUs) may be given as limits only; then the limit is the request.
    """

    def one(c: Obj) -> dict[str, float]:
        res = c.get("resources") or {}
        out = {k: parse_quantity(v) for k, v in (res.get("limits") or {}).items() if "/" in k}
        out.update({k: parse_quantity(v) for k, v in (res.get("requests") or {}).items()})
        return out

    total: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        for k, v in one(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in pod_spec.get("initContainers") or []:
        for k, v in one(c).items():
            total[k] = max(total.get(k, 0.0), v)
    for k, v in (pod_spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0.0) + parse_quantity(v)
    return total


def _expr_matches(expr: Obj, value: str | None) -> bool:
    op, vals = expr.get("operator"), list(expr.get("values") or [])
    if op == "In":
        return value is not None and value in vals
    if op == "NotIn":
        return value is None or value not in vals
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            a, b = int(value or ""), int(vals[0])
        except (ValueError, IndexError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term_matches(term: Obj, node: Obj) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing
    labels = _labels(node)
    if not all(_expr_matches(e, labels.get(e.get("key", ""))) for e in exprs):
        return False
    name = _meta(node).get("name")
    return all(e.get("key") == "metadata.name" and _expr_matches(e, name) for e in fields)


def selector_matches(pod_spec: Obj, node: Obj) -> bool:
    labels = _labels(node)
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms is not None:
        return any(_term_matches(t, node) for t in terms)
    return True


def _tolerates(tol: Obj, taint: Obj) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if not tol.get("key"):
        return tol.get("operator") == "Exists"
    if tol["key"] != taint.get("key"):
        return False
    if tol.get("operator", "Equal") == "Exists":
        return True
    return (tol.get("value") or "") == (taint.get("value") or "")


def untolerated_taints(pod_spec: Obj, node: Obj) -> list[Obj]:
    tols = pod_spec.get("tolerations") or []
    taints = ((node.get("spec") or {}).get("taints")) or []
    return [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")
            and not any(_tolerates(tol, t) for tol in tols)]


def node_ready(node: Obj) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def allocatable(node: Obj) -> dict[str, float]:
    return {k: parse_quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}


def short_resources(req: Mapping[str, float], avail: Mapping[str, float]) -> list[str]:
    """The requested resources ``avail`` does not hold, by name."""
    return sorted(k for k, v in req.items()
                  if v > 0 and k not in ("ephemeral-storage",) and avail.get(k, 0.0) + 1e-9 < v)


def resources_fit(req: Mapping[str, float], avail: Mapping[str, float]) -> bool:
    return not short_resources(req, avail)


@dataclass(frozen=True)
class FitResult:
    fits: bool
    reason: str = ""


def fits(pod_spec: Obj, node: Obj, require_ready: bool = True) -> FitResult:
    """Could one replica ever run on ``node`` (ignoring what else runs there)?"""
    if require_ready and not node_ready(node):
        return FitResult(False, "node not ready or unschedulable")
    if not selector_matches(pod_spec, node):
        return FitResult(False, "node selector / required affinity")
    bad = untolerated_taints(pod_spec, node)
    if bad:
        return FitResult(False, f"taint {bad[0].get('key')}={bad[0].get('value', '')}:{bad[0].get('effect')}")
    short = short_resources(replica_requests(pod_spec), allocatable(node))
    if short:
        return FitResult(False, f"allocatable resources ({', '.join(short)})")
    return FitResult(True)


def matching_nodes(pod_spec: Obj, nodes: Iterable[Obj]) -> list[Obj]:
    """Nodes that fit one replica, sorted by name (deterministic)."""
    out = [n for n in nodes if fits(pod_spec, n).fits]
    return sorted(out, key=lambda n: _meta(n).get("name", ""))


def pod_is_active(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not _meta(pod).get("deletionTimestamp")


def free_resources(node: Obj, pods: Iterable[Obj]) -> dict[str, float]:
    """Allocatable minus the requests of the active pods bound to the node."""
    name = _meta(node).get("name")
    free = allocatable(node)
    for p in pods:
        spec = p.get("spec") or {}
        if spec.get("nodeName") != name or not pod_is_active(p):
            continue
        for k, v in replica_requests(spec).items():
            free[k] = free.get(k, 0.0) - v
    return free


def free_fit(pod_spec: Obj, node: Obj, pods: Iterable[Obj]) -> bool:
    """Does one more replica fit on the node right now?"""
    return fits(pod_spec, node).fits and resources_fit(replica_requests(pod_spec), free_resources(node, pods))
