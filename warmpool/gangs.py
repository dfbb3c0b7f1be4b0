"""Placeholder gangs for multi-pod replicas (LeaderWorkerSet groups): pure planning, no I/O.

A LeaderWorkerSet replica is a group of ``size`` pods that only serves when every pod runs, so warm
capacity for it is held as a *gang*: one placeholder per member (member 0 with the leader's requests),
all in one domain of the exclusive-topology key when the LWS has one (one gang per domain), and
**all or nothing**:

- a gang is created only when the planner finds room for every member at once (free resources of the
  candidate nodes, pinned to the warm ones, in one free domain); otherwise no member is created and the
  workload gets a ``GangDoesNotFit`` Event saying why;
- a gang that lost a member (preempted by a replica, evicted, failed) or that was planned for another
  group size or topology key is deleted whole and planned again;
- a gang some of whose members stay unscheduled for :data:`PARTIAL_GANG_S` while others hold a node
  is deleted whole (what it holds would serve no group).

A gang counts as ready (one replica's worth of warm capacity) only when all its members run.

For a workload whose pods Volcano schedules (``schedulerName: volcano``) each gang is also one Volcano
**PodGroup** with ``minMember`` = the group size (:func:`warmscale.warmpool.objects.pod_group`): the
planner's check above is then backed by the scheduler's, which binds a gang's members all at once or
none of them. A PodGroup lives as long as its gang is kept or being created; any other PodGroup of the
workload (a released gang, another group size, the workload no longer on Volcano) is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from warmscale.warmpool import objects as ob
from warmscale.warmpool.matching import allocatable, fits, free_resources, replica_requests, resources_fit

Obj = Mapping[str, Any]
# A gang whose members are partly bound this long after creation is not going to complete soon (the
# scheduler retries unschedulable pods at least every 5 minutes, kube-scheduler's
# podMaxInUnschedulablePodsDuration; a bound sibling is capacity held for nothing): released whole.
PARTIAL_GANG_S = 300.0


@dataclass
class GangPlan:
    create: list[tuple[int, int, str | None]] = field(default_factory=list)  # (gang, member, domain)
    delete: list[str] = field(default_factory=list)  # placeholder pod names
    ready: int = 0  # gangs whose members all run
    unfit: str = ""  # why the next wanted gang was not created ("" : every wanted gang exists or fits)
    unfit_gang: int = -1  # its index
    create_groups: list[int] = field(default_factory=list)  # Volcano: gangs whose PodGroup is to be made
    delete_groups: list[str] = field(default_factory=list)  # Volcano: PodGroup names no gang needs


def _meta(o: Obj) -> Mapping[str, Any]:
    return o.get("metadata") or {}


def _labels(o: Obj) -> Mapping[str, str]:
    return _meta(o).get("labels") or {}


def _node(o: Obj) -> str:
    return str((o.get("spec") or {}).get("nodeName") or "")


def _created(o: Obj) -> float | None:
    raw = _meta(o).get("creationTimestamp")
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp() if raw else None


def domain_of(node: Obj, topology_key: str) -> str | None:
    """The node's domain of ``topology_key`` ("" : the whole cluster is one domain; None: unlabelled)."""
    if not topology_key:
        return ""
    value = _labels(node).get(topology_key)
    return str(value) if value else None


def place_gang(wl: ob.Workload, nodes: Sequence[Obj], pods: Sequence[Obj],
               taken_domains: set[str]) -> tuple[str | None, str]:
    """(the domain a whole new gang fits in now, why not): greedy first fit of every member on the
    free resources of ``nodes`` (already filtered to candidates), domain by domain in name order."""
    by_domain: dict[str, list[Obj]] = {}
    unlabelled = 0
    for n in nodes:
        d = domain_of(n, wl.topology_key)
        if d is None:
            unlabelled += 1
            continue
        by_domain.setdefault(d, []).append(n)
    if not by_domain:
        extra = f" (none carries {wl.topology_key})" if unlabelled else ""
        return None, f"no node fits a member{extra}"
    biggest = 0
    for domain in sorted(by_domain):
        if domain in taken_domains and wl.topology_key:
            continue
        members = by_domain[domain]
        placed = _members_placed(wl, members, {ob_name(n): free_resources(n, pods) for n in members})
        ever_placed = _members_placed(wl, members, {ob_name(n): allocatable(n) for n in members})
        biggest = max(biggest, ever_placed)
        if placed == wl.group_size:
            return domain, ""
    where = f"domain of {wl.topology_key}" if wl.topology_key else "the candidate nodes"
    if biggest < wl.group_size:
        return None, (f"a group of {wl.group_size} pods cannot fit in any {where} even on idle nodes "
                      f"(at most {biggest} members fit)")
    return None, f"no free {where} has room for all {wl.group_size} members now"


def _members_placed(wl: ob.Workload, nodes: Sequence[Obj], room: dict[str, dict[str, float]]) -> int:
    """How many of the group's members first fit places on ``nodes`` with ``room`` left (consumed)."""
    placed = 0
    for m in range(wl.group_size):
        spec = wl.member_spec(m)
        req = replica_requests(spec)
        for n in nodes:
            left = room[ob_name(n)]
            if fits(spec, n).fits and resources_fit(req, left):
                for k, v in req.items():
                    left[k] = left.get(k, 0.0) - v
                placed += 1
                break
    return placed


def ob_name(o: Obj) -> str:
    return str(_meta(o).get("name", ""))


def plan_gangs(wl: ob.Workload, want: int, cands: Sequence[Obj], pods: Sequence[Obj], pinned: Sequence[str] | None,
               now: float, partial_gang_s: float = PARTIAL_GANG_S, pod_groups: Sequence[Obj] = ()) -> GangPlan:
    """Keep ``want`` placeholder gangs for ``wl`` (``pods``: its namespace's; ``cands``: nodes that fit
    one member; ``pinned``: the warm nodes placeholders are pinned to, None: any candidate;
    ``pod_groups``: the namespace's Volcano PodGroups)."""
    gp = GangPlan()
    mine = wl.key_hash
    holders = [q for q in pods if _labels(q).get(ob.WORKLOAD) == mine and _labels(q).get(ob.ROLE) == "placeholder"
               and not _meta(q).get("deletionTimestamp")]
    pin = ob.pin_hash(pinned)
    gangs: dict[int, list[Obj]] = {}
    for q in holders:
        record = str((_meta(q).get("annotations") or {}).get(ob.GANG_ANN) or "")
        gang_s = record.split("/", 1)[0]
        if not gang_s.isdigit() or record != ob.gang_record(wl, int(gang_s)) or int(gang_s) >= want:
            gp.delete.append(ob_name(q))  # planned for another size/topology, or no longer wanted
            continue
        gangs.setdefault(int(gang_s), []).append(q)
    for gang, members in sorted(gangs.items()):
        names = {ob_name(q) for q in members}
        complete = all(ob.gang_placeholder_name(wl, gang, m) in names for m in range(wl.group_size))
        nodes = [_node(q) for q in members]
        bad = any((q.get("status") or {}).get("phase") in ("Failed", "Succeeded") for q in members)
        off_pin = any(n and pinned is not None and n not in pinned for n in nodes) or any(
            not _node(q) and (_meta(q).get("annotations") or {}).get(ob.PIN_ANN) != pin for q in members)
        oldest = min((t for q in members if (t := _created(q)) is not None), default=now)
        stuck = any(nodes) and not all(nodes) and now - oldest >= partial_gang_s
        if not complete or bad or off_pin or stuck:
            gp.delete += sorted(names)  # all or nothing: what is left of a gang is released whole
            del gangs[gang]
            continue
        if all((q.get("status") or {}).get("phase") == "Running" for q in members):
            gp.ready += 1
    # --- new gangs: only where every member fits now, next to what already runs (our kept gangs too)
    deleting = set(gp.delete)
    live = [q for q in pods if ob_name(q) not in deleting]
    allowed = [n for n in cands if pinned is None or ob_name(n) in pinned]
    by_name = {ob_name(n): n for n in cands}
    taken: set[str] = set()
    for members in gangs.values():
        for q in members:
            d = domain_of(by_name[_node(q)], wl.topology_key) if _node(q) in by_name else None
            ann_domain = _gang_domain(q, wl.topology_key)
            for dom in (d, ann_domain):
                if dom:
                    taken.add(dom)
    for gang in range(want):
        if gang in gangs:
            continue
        domain, why = place_gang(wl, allowed, live, taken)
        if domain is None:
            gp.unfit, gp.unfit_gang = why, gang
            break  # all or nothing: no member of this gang (or of any later one) is created
        if wl.topology_key:
            taken.add(domain)
        for m in range(wl.group_size):
            gp.create.append((gang, m, domain or None))
        # what it will hold counts against the next gang's room (not bound yet: charge the domain's nodes)
        live = [*live, *_virtual_members(wl, allowed, live, domain)]
    _plan_pod_groups(wl, gp, sorted(gangs), pod_groups)
    return gp


def _plan_pod_groups(wl: ob.Workload, gp: GangPlan, kept: Sequence[int], pod_groups: Sequence[Obj]) -> None:
    """Volcano: one PodGroup per kept or new gang; every other PodGroup of ``wl`` is deleted."""
    mine = {ob_name(g) for g in pod_groups if _labels(g).get(ob.WORKLOAD) == wl.key_hash
            and _labels(g).get(ob.ROLE) == ob.PG_ROLE and not _meta(g).get("deletionTimestamp")}
    needed = sorted({*kept, *(gang for gang, _, _ in gp.create)}) if wl.volcano else []
    wanted = {ob.pod_group_name(wl, gang) for gang in needed}
    gp.create_groups = [gang for gang in needed if ob.pod_group_name(wl, gang) not in mine]
    gp.delete_groups = sorted(mine - wanted)


def _gang_domain(q: Obj, topology_key: str) -> str | None:
    """The domain a pending gang member was pinned to (its node affinity), if any."""
    if not topology_key:
        return None
    terms = (((((q.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for t in terms:
        for e in t.get("matchExpressions") or []:
            if e.get("key") == topology_key and e.get("operator") == "In" and len(e.get("values") or []) == 1:
                return str(e["values"][0])
    return None


def _virtual_members(wl: ob.Workload, nodes: Sequence[Obj], pods: Sequence[Obj], domain: str) -> list[Obj]:
    """The members of a gang just planned in ``domain``, as pods bound where first fit put them."""
    out: list[Obj] = []
    members = [n for n in nodes if domain_of(n, wl.topology_key) == domain]
    for m in range(wl.group_size):
        spec = wl.member_spec(m)
        for n in members:
            if fits(spec, n).fits and resources_fit(replica_requests(spec), free_resources(n, [*pods, *out])):
                out.append({"metadata": {"name": f"planned-{m}"}, "spec": {**spec, "nodeName": ob_name(n)},
                            "status": {"phase": "Pending"}})
                break
    return out


# ---------------------------------------------------------------- groups of a LeaderWorkerSet


@dataclass(frozen=True)
class Group:
    """One replica of a gang workload: its pods (by worker index) and whether it serves."""

    index: str
    leader: Obj | None
    pods: int
    ready_s: float | None  # creation of the first pod to the last pod Ready; None: not every pod Ready


def groups(wl: ob.Workload, pods: Sequence[Obj]) -> list[Group]:
    """The groups of ``wl`` among ``pods`` (terminating and finished pods left out). A group is ready
    only when all ``group_size`` pods are Ready."""
    from warmscale.warmpool.planning import parse_time, pod_time_to_ready

    by_group: dict[str, list[Obj]] = {}
    for q in pods:
        labels = _labels(q)
        if ob.is_managed(q) or any(labels.get(k) != v for k, v in wl.selector.items()):
            continue
        if _meta(q).get("deletionTimestamp") or (q.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        by_group.setdefault(str(labels.get(ob.LWS_GROUP_INDEX, "")), []).append(q)
    out: list[Group] = []
    for index, members in sorted(by_group.items()):
        leader = next((q for q in members if _labels(q).get(ob.LWS_WORKER_INDEX) == "0"), None)
        created = [parse_time(_meta(q).get("creationTimestamp")) for q in members]
        secs = [pod_time_to_ready(q) for q in members]
        ready_s: float | None = None
        if len(members) >= wl.group_size and all(s is not None for s in secs) and all(c is not None for c in created):
            ready_at = max(c + s for c, s in zip(created, secs, strict=True) if c is not None and s is not None)
            ready_s = max(0.0, ready_at - min(c for c in created if c is not None))
        out.append(Group(index=index, leader=leader, pods=len(members), ready_s=ready_s))
    return out
