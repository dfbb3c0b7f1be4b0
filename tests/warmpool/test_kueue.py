"""Warm capacity inside a Kueue queue, in the pure planner (warmpool.kueue): placeholders carry the
workload's queue (a gang is one Kueue pod group), and a ClusterQueue quota smaller than the warm floor
gets an Event naming both numbers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.warmpool.helpers import node, pod_spec
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import workload_from
from warmscale.warmpool.kueue import (
    MANAGED_LABEL,
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_ANN,
    QUEUE_LABEL,
    SUSPENDING_PARENT_ANN,
    QueueQuota,
    nominal_quota,
    quota_below_floor,
)
from warmscale.warmpool.planning import plan

P = "warmscale.io/"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
ANN = {P + "enabled": "true", P + "standby": "2", P + "prestage-nodes": "0", P + "autoscale": "false",
       P + "min-ready": "3"}
FLEET = [node(f"h{i}") for i in range(4)]


def deployment(labels: dict[str, str] | None = None, template_labels: dict[str, str] | None = None,
               gpus: int = 2, annotations: dict[str, str] | None = None) -> ob.Workload:
    return workload_from("Deployment", {
        "metadata": {"name": "llm", "namespace": "ns", "uid": "u", "labels": labels or {},
                     "annotations": annotations or ANN},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "llm"}},
                 "template": {"metadata": {"labels": {"app": "llm", **(template_labels or {})}},
                              "spec": pod_spec(gpus=gpus)}}})


def cq(*flavors: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": list(flavors)}]}}


def flavor(name: str, gpus: str | int | None) -> dict[str, Any]:
    res = [{"name": "cpu", "nominalQuota": "64"}]
    if gpus is not None:
        res.append({"name": "nvidia.com/gpu", "nominalQuota": gpus})
    return {"name": name, "resources": res}


@pytest.mark.parametrize(("labels", "template_labels", "queue"), [
    ({QUEUE_LABEL: "online"}, {}, "online"),
    ({}, {QUEUE_LABEL: "tmpl"}, "tmpl"),
    ({QUEUE_LABEL: "own"}, {QUEUE_LABEL: "tmpl"}, "own"),
    ({}, {}, ""),
])
def test_placeholders_join_the_workloads_queue(labels: dict[str, str], template_labels: dict[str, str],
                                               queue: str) -> None:
    wl = deployment(labels, template_labels)
    assert wl.queue_name == queue
    p = plan(wl, FLEET, [], [], None, NOW)
    assert p.create_placeholders == [0, 1]
    hold = ob.placeholder_pod(wl, 0, p.pinned)
    assert hold["metadata"]["labels"].get(QUEUE_LABEL) == (queue or None)
    # what Kueue's webhook needs to gate a pod whose owner is in a queue (else it leaves it alone)
    assert hold["metadata"]["labels"].get(MANAGED_LABEL) == ("true" if queue else None)
    assert hold["metadata"]["annotations"].get(SUSPENDING_PARENT_ANN) == ("deployment" if queue else None)
    # the placeholder's priority (-5) is below the replicas' (0): Kueue preempts it for a replica
    assert hold["spec"]["priorityClassName"] == ob.PRIORITY_CLASS


def test_a_gang_is_one_kueue_pod_group() -> None:
    obj = {"metadata": {"name": "pp", "namespace": "ns", "uid": "u", "labels": {QUEUE_LABEL: "online"},
                        "annotations": ANN},
           "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": pod_spec()}}}}
    wl = workload_from(ob.LWS_KIND, obj)
    members = [ob.gang_placeholder_pod(wl, 0, m, None) for m in range(3)]
    assert {m["metadata"]["labels"][POD_GROUP_LABEL] for m in members} == {ob.gang_id(wl, 0)}
    assert all(m["metadata"]["annotations"][POD_GROUP_TOTAL_ANN] == "3" for m in members)
    assert all(m["metadata"]["labels"][QUEUE_LABEL] == "online" for m in members)


@pytest.mark.parametrize(("queue", "gpus"), [
    (cq(flavor("h100", 4), flavor("a100", "2")), 6.0),
    (cq(flavor("h100", "1k")), 1000.0),
    (cq(flavor("cpu-only", None)), None),
    ({"spec": {}}, None),
])
def test_nominal_quota_sums_the_flavors(queue: dict[str, Any], gpus: float | None) -> None:
    assert nominal_quota(queue) == gpus


@pytest.mark.parametrize(("gpus", "floor", "per", "named"), [
    (4.0, 3, 2.0, ("nominal quota of 4 nvidia.com/gpu", "warm floor of 3 replicas x 2", "= 6",
                   "at most 2 of the floor")),
    (6.0, 3, 2.0, None),                 # exactly enough
    (None, 1, 1.0, ("nominal quota of 0",)),  # the queue covers no GPUs at all
    (0.0, 0, 2.0, None),                 # no floor: nothing to hold
    (0.0, 2, 0.0, None),                 # a CPU-only workload: GPUs are not the question
])
def test_quota_below_floor(gpus: float | None, floor: int, per: float, named: tuple[str, ...] | None) -> None:
    msg = quota_below_floor(QueueQuota("online", "gpu-cq", gpus), floor, per)
    if named is None:
        assert msg is None
    else:
        assert msg is not None and "gpu-cq" in msg
        for part in named:
            assert part in msg


def test_planner_emits_the_quota_event_naming_both_numbers() -> None:
    wl = deployment({QUEUE_LABEL: "online"})
    p = plan(wl, FLEET, [], [], None, NOW, queue_quota=QueueQuota("online", "gpu-cq", 4.0))
    events = [e for e in p.events if e.reason == "KueueQuotaBelowFloor"]
    assert len(events) == 1 and events[0].type == "Warning"
    assert "4 nvidia.com/gpu" in events[0].message and "3 replicas x 2" in events[0].message
    assert p.create_placeholders == [0, 1]  # a warning, not a refusal: what fits is still held
    ok = plan(wl, FLEET, [], [], None, NOW, queue_quota=QueueQuota("online", "gpu-cq", 6.0))
    assert not [e for e in ok.events if e.reason == "KueueQuotaBelowFloor"]
