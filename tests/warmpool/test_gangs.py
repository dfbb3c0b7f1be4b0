"""LeaderWorkerSet groups in the pure planner: placeholder gangs (one per member, one topology domain,
all or nothing), stage nodes for every node a group would use, group readiness."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.warmpool.helpers import node, pod_spec
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import workload_from
from warmscale.warmpool.gangs import PARTIAL_GANG_S, groups
from warmscale.warmpool.planning import plan

P = "warmscale.io/"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
RACK = "example.com/rack"
ANN = {P + "enabled": "true", P + "standby": "2", P + "prestage-nodes": "0", P + "autoscale": "false",
       P + "min-ready": "1"}


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def lws(annotations: dict[str, str], size: int = 2, topology: str | None = RACK, gpus: int = 8,
        replicas: int = 1) -> ob.Workload:
    ann = dict(annotations)
    if topology:
        ann[ob.LWS_EXCLUSIVE_TOPOLOGY] = topology
    obj = {"metadata": {"name": "pp", "namespace": "ns", "uid": "u", "annotations": ann},
           "spec": {"replicas": replicas, "leaderWorkerTemplate": {
               "size": size,
               "leaderTemplate": {"metadata": {}, "spec": pod_spec(gpus=gpus, cpu="16")},
               "workerTemplate": {"metadata": {}, "spec": pod_spec(gpus=gpus)}}}}
    return workload_from(ob.LWS_KIND, obj)


def racked(name: str, rack: str | None, gpus: int = 8) -> dict[str, Any]:
    return node(name, gpus=gpus, labels={RACK: rack} if rack else {})


RACKS = [racked("a1", "a"), racked("a2", "a"), racked("b1", "b"), racked("b2", "b"), racked("c1", "c")]


def member(wl: ob.Workload, gang: int, m: int, nodename: str | None, phase: str = "Running",
           size: int | None = None, created: datetime = NOW) -> dict[str, Any]:
    w = replace(wl, group_size=size) if size else wl
    pod = ob.gang_placeholder_pod(w, gang, m, None)
    pod["metadata"]["creationTimestamp"] = iso(created)
    pod["spec"] = {**pod["spec"], **({"nodeName": nodename} if nodename else {})}
    pod["status"] = {"phase": phase}
    return pod


def engine_pod(group: int, worker: int, nodename: str, ready: bool = True, gpus: int = 8) -> dict[str, Any]:
    cond = [{"type": "Ready", "status": "True", "lastTransitionTime": iso(NOW)}] if ready else []
    return {"metadata": {"name": f"pp-{group}-{worker}", "namespace": "ns", "uid": f"u{group}{worker}",
                         "creationTimestamp": iso(NOW - timedelta(seconds=60 + worker)),
                         "labels": {ob.LWS_NAME_LABEL: "pp", ob.LWS_GROUP_INDEX: str(group),
                                    ob.LWS_WORKER_INDEX: str(worker)}},
            "spec": {**pod_spec(gpus=gpus), "nodeName": nodename},
            "status": {"phase": "Running", "conditions": cond}}


def test_workload_from_lws_reads_groups() -> None:
    wl = lws(ANN, size=4)
    assert (wl.kind, wl.api_version, wl.replicas, wl.group_size, wl.topology_key) == (
        "LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", 1, 4, RACK)
    assert wl.selector == {ob.LWS_NAME_LABEL: "pp"} and wl.is_gang
    assert wl.member_spec(0)["containers"][0]["resources"]["requests"]["cpu"] == "16"  # the leader's
    assert wl.member_spec(1)["containers"][0]["resources"]["requests"]["cpu"] == "8"


def test_fresh_gangs_one_per_free_rack_every_member() -> None:
    wl = lws(ANN)
    p = plan(wl, RACKS, [], [], None, NOW)
    # rack c has one node: a 2-node group cannot fit there; gangs go to racks a and b, whole
    assert p.create_gang_members == [(0, 0, "a"), (0, 1, "a"), (1, 0, "b"), (1, 1, "b")]
    assert not p.create_placeholders and not p.events
    pod = ob.gang_placeholder_pod(wl, 0, 1, None, "a")
    aff = pod["spec"]["affinity"]
    assert aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == RACK
    assert aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == RACK
    terms = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all({"key": RACK, "operator": "In", "values": ["a"]} in t["matchExpressions"] for t in terms)
    assert pod["metadata"]["annotations"][ob.GANG_ANN] == "0/2/" + RACK
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_gang_that_cannot_fit_anywhere_gets_an_event_and_no_member() -> None:
    wl = lws({**ANN, P + "standby": "1"}, size=3)  # no rack has 3 nodes
    p = plan(wl, RACKS, [], [], None, NOW)
    assert p.create_gang_members == [] and p.create_placeholders == []
    (ev,) = p.events
    assert ev.reason == "GangDoesNotFit" and "cannot fit" in ev.message and "3 pods" in ev.message
    # a third gang finds no third rack with two nodes: the first two are made, the third not at all
    p3 = plan(lws({**ANN, P + "standby": "3"}), RACKS, [], [], None, NOW)
    assert [g for g, _, _ in p3.create_gang_members] == [0, 0, 1, 1]
    assert [e.reason for e in p3.events] == ["GangDoesNotFit"] and "gang 2" in p3.events[0].message


def test_busy_rack_is_skipped_and_room_is_counted_per_member() -> None:
    wl = lws({**ANN, P + "standby": "1"})
    busy = [engine_pod(0, 0, "a1")]  # a running group pod takes all 8 GPUs of a1
    p = plan(wl, RACKS, busy, [], None, NOW)
    assert p.create_gang_members == [(0, 0, "b"), (0, 1, "b")]
    # no topology key: any two nodes with room; two members may share a 16-GPU node
    flat = lws({**ANN, P + "standby": "1"}, topology=None, gpus=4)
    p2 = plan(flat, [node("big", gpus=8)], [], [], None, NOW)
    assert p2.create_gang_members == [(0, 0, None), (0, 1, None)]
    p3 = plan(flat, [node("big", gpus=4)], [], [], None, NOW)
    assert p3.create_gang_members == [] and "cannot fit" in p3.events[0].message


def test_gang_that_lost_a_member_is_released_whole() -> None:
    wl = lws({**ANN, P + "standby": "1"})
    kept = plan(wl, RACKS, [member(wl, 0, 0, "a1"), member(wl, 0, 1, "a2")], [], None, NOW)
    assert kept.placeholders_ready == 1 and not kept.delete_placeholders and not kept.create_gang_members
    # member 1 was preempted by a group pod: member 0 alone would hold a GPU no group can use
    p = plan(wl, RACKS, [member(wl, 0, 0, "a1"), engine_pod(1, 0, "a2")], [], None, NOW)
    assert p.delete_placeholders == [ob.gang_placeholder_name(wl, 0, 0)] and p.placeholders_ready == 0
    assert p.create_gang_members == [(0, 0, "b"), (0, 1, "b")]  # rack a has room for one member only


def test_partly_bound_gang_is_released_after_the_grace() -> None:
    wl = lws({**ANN, P + "standby": "1"})
    young = [member(wl, 0, 0, "a1", created=NOW), member(wl, 0, 1, None, "Pending", created=NOW)]
    assert not plan(wl, RACKS, young, [], None, NOW).delete_placeholders
    old = NOW - timedelta(seconds=PARTIAL_GANG_S)
    stuck = [member(wl, 0, 0, "a1", created=old), member(wl, 0, 1, None, "Pending", created=old)]
    p = plan(wl, RACKS, stuck, [], None, NOW)
    assert sorted(p.delete_placeholders) == sorted(ob.gang_placeholder_name(wl, 0, m) for m in (0, 1))


def test_group_size_change_replans_the_gangs() -> None:
    wl = lws({**ANN, P + "standby": "1"}, size=2)
    was3 = [member(wl, 0, m, n, size=3) for m, n in enumerate(["a1", "a2", "b1"])]
    p = plan(wl, RACKS, was3, [], None, NOW)
    assert sorted(p.delete_placeholders) == sorted(ob.gang_placeholder_name(wl, 0, m) for m in range(3))
    assert len(p.create_gang_members) == 2  # planned again for 2 members


def test_stage_nodes_cover_every_node_a_group_uses_rack_by_rack() -> None:
    wl = lws({**ANN, P + "prestage-nodes": "2", P + "standby": "0"})
    p = plan(wl, RACKS, [], [], None, NOW)
    assert p.stage_nodes == ["a1", "a2", "b1", "b2"]  # 2 groups x 2 nodes, whole racks
    assert sorted(p.create_prepull) == ["a1", "a2", "b1", "b2"]


def test_group_ready_only_when_all_pods_are() -> None:
    wl = lws(ANN)
    pods = [engine_pod(0, 0, "a1"), engine_pod(0, 1, "a2"), engine_pod(1, 0, "b1"),
            engine_pod(1, 1, "b2", ready=False), engine_pod(2, 0, "c1")]
    gs = {g.index: g for g in groups(wl, pods)}
    assert gs["0"].ready_s == 61.0  # from the first pod's creation to the last Ready
    assert gs["1"].ready_s is None and gs["2"].ready_s is None  # a worker not Ready; a worker missing
    assert gs["0"].leader is not None and gs["0"].leader["metadata"]["name"] == "pp-0-0"


def test_owned_scaled_object_targets_the_lws_and_lets_the_scaler_find_its_groups() -> None:
    from warmscale.warmpool.annotations import parse_annotations

    wl = lws({**ANN, P + "autoscale": "true"})
    cfg = parse_annotations(wl.annotations)
    so = ob.scaled_object(wl, cfg, 1, "scaler:9090")
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                            "kind": "LeaderWorkerSet", "name": "pp"}
    # no port declared: the leaders by podSelector
    meta = so["spec"]["triggers"][0]["metadata"]
    assert meta["podSelector"] == f"{ob.LWS_NAME_LABEL}=pp,{ob.LWS_WORKER_INDEX}=0"
    wl.member_spec(0)["containers"][0]["ports"] = [{"name": "http", "containerPort": 8000}]
    meta = ob.scaled_object(wl, cfg, 1, "scaler:9090")["spec"]["triggers"][0]["metadata"]
    assert meta["metricsPort"] == "8000"
    assert "podSelector" not in meta  # the target's groups (ready only when whole), leaders scraped


# ---------------------------------------------------------------- Volcano: one PodGroup per gang


def volcano_lws(annotations: dict[str, str], size: int = 2, queue: str | None = None) -> ob.Workload:
    wl = lws(annotations, size=size)
    tmpl = {"metadata": {"annotations": {ob.VOLCANO_QUEUE_ANN: queue} if queue else {}},
            "spec": {**wl.pod_spec, "schedulerName": "volcano"}}
    return replace(wl, template=tmpl, leader_template={**(wl.leader_template or {}), "spec": {
        **wl.member_spec(0), "schedulerName": "volcano"}})


def pod_groups(wl: ob.Workload, *gangs: int) -> list[dict[str, Any]]:
    return [ob.pod_group(wl, g) for g in gangs]


def test_volcano_gang_is_one_pod_group_with_min_member_the_group_size() -> None:
    wl = volcano_lws({**ANN, P + "standby": "2"}, size=2, queue="inference")
    assert wl.volcano and not lws(ANN).volcano
    p = plan(wl, RACKS, [], [], None, NOW)
    assert p.create_pod_groups == [0, 1] and len(p.create_gang_members) == 4 and not p.delete_pod_groups
    pg = ob.pod_group(wl, 0)
    assert pg["kind"] == "PodGroup" and pg["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    # all or nothing by the scheduler: 2 members; as much as both request; lowest priority; the pods' queue
    assert pg["spec"] == {"minMember": 2, "priorityClassName": ob.PRIORITY_CLASS, "queue": "inference",
                          "minResources": {"cpu": "24", "memory": str(2 * 64 * 2**30), "nvidia.com/gpu": "16"}}
    assert pg["metadata"]["ownerReferences"] == [wl.owner_ref()]
    assert pg["metadata"]["labels"][ob.ROLE] == ob.PG_ROLE and pg["metadata"]["labels"][ob.WORKLOAD] == wl.key_hash
    pod = ob.gang_placeholder_pod(wl, 0, 1, None, "a")
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"][ob.PG_ANN] == pg["metadata"]["name"]
    assert pod["spec"]["priorityClassName"] == ob.PRIORITY_CLASS
    # not on Volcano: no PodGroup, no scheduler name
    plain = ob.gang_placeholder_pod(lws(ANN), 0, 1, None, "a")
    assert "schedulerName" not in plain["spec"] and ob.PG_ANN not in plain["metadata"]["annotations"]
    assert not plan(lws(ANN), RACKS, [], [], None, NOW).create_pod_groups


def test_volcano_pod_groups_follow_their_gangs() -> None:
    wl = volcano_lws({**ANN, P + "standby": "1"})
    held = [member(wl, 0, 0, "a1"), member(wl, 0, 1, "a2")]
    kept = plan(wl, RACKS, held, [], None, NOW, pod_groups=pod_groups(wl, 0))
    assert not kept.create_pod_groups and not kept.delete_pod_groups and kept.placeholders_ready == 1
    # a kept gang whose PodGroup went away gets it back
    assert plan(wl, RACKS, held, [], None, NOW).create_pod_groups == [0]
    # standby 1 -> 0: the gang's members and its PodGroup go
    none = plan(replace(wl, annotations={**wl.annotations, P + "standby": "0"}), RACKS, held, [], None, NOW,
                pod_groups=pod_groups(wl, 0))
    assert none.delete_pod_groups == [ob.pod_group_name(wl, 0)] and len(none.delete_placeholders) == 2
    # a group size change: a new PodGroup (another name, minMember 3), the old one deleted
    wl3 = replace(wl, group_size=3)
    nodes = [*RACKS, racked("a3", "a")]
    p = plan(wl3, nodes, held, [], None, NOW, pod_groups=pod_groups(wl, 0))
    assert ob.pod_group_name(wl3, 0) != ob.pod_group_name(wl, 0)
    assert p.delete_pod_groups == [ob.pod_group_name(wl, 0)] and p.create_pod_groups == [0]
    assert ob.pod_group(wl3, 0)["spec"]["minMember"] == 3
    # the workload leaves Volcano: its gangs are re-planned without PodGroups, which are deleted
    off = replace(wl, template={"metadata": {}, "spec": {**wl.pod_spec, "schedulerName": "default-scheduler"}},
                  leader_template=None)
    p_off = plan(off, RACKS, held, [], None, NOW, pod_groups=pod_groups(wl, 0))
    assert p_off.delete_pod_groups == [ob.pod_group_name(wl, 0)] and not p_off.create_pod_groups
    assert sorted(p_off.delete_placeholders) == sorted(ob.gang_placeholder_name(wl, 0, m) for m in (0, 1))
    # only what is ours: another workload's PodGroup (or a user's) is never touched
    other = volcano_lws(ANN)
    other = replace(other, name="other")
    assert not plan(wl, RACKS, held, [], None, NOW, pod_groups=[*pod_groups(wl, 0), ob.pod_group(other, 0), {
        "metadata": {"name": "users", "namespace": "ns", "labels": {}}}]).delete_pod_groups
