"""What one pod is to the replica count (signals.podstate): a pod held at a scheduling gate (Kueue's
admission gate while the ClusterQueue's quota is used up) is not a replica coming."""

from __future__ import annotations

from typing import Any

import pytest

from warmscale.signals.podstate import LWS_GROUP_INDEX, is_gated, lws_group_counts, pod_state

KUEUE_GATE = [{"name": "kueue.x-k8s.io/admission"}]
GATED_COND = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
READY = [{"type": "Ready", "status": "True"}]


def pod(phase: str | None = "Pending", *, gates: list[dict[str, str]] | None = None, node: str | None = None,
        conditions: list[dict[str, str]] | None = None, deleting: bool = False,
        group: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "labels": {LWS_GROUP_INDEX: group} if group is not None else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {}
    if gates:
        spec["schedulingGates"] = gates
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": conditions or []}}


@pytest.mark.parametrize(("p", "state"), [
    (pod("Running", node="n", conditions=READY), "ready"),
    (pod("Running", node="n"), "starting"),                     # loading: coming
    (pod("Pending", node="n"), "starting"),                     # bound, pulling its image: coming
    (pod("Pending"), "starting"),                               # not scheduled yet: coming
    (pod("Pending", conditions=UNSCHEDULABLE), "starting"),     # no node fits now (an autoscaler may add one)
    (pod("Pending", gates=KUEUE_GATE), "gated"),                # over the Kueue quota: not coming
    (pod("Pending", gates=KUEUE_GATE, conditions=GATED_COND), "gated"),
    (pod("Pending", conditions=GATED_COND), "gated"),           # the scheduler's word alone
    (pod(None, gates=KUEUE_GATE), "gated"),                     # no status yet (just created)
    (pod("Pending", gates=KUEUE_GATE, deleting=True), "terminating"),
    (pod("Succeeded"), "finished"),
    (pod("Failed", gates=KUEUE_GATE), "finished"),
])
def test_pod_state(p: dict[str, Any], state: str) -> None:
    assert pod_state(p) == state
    if state in ("ready", "starting", "gated"):
        assert is_gated(p) == (state == "gated")


@pytest.mark.parametrize(("pods", "size", "counts"), [
    ([pod("Running", node="n", conditions=READY, group="0"), pod("Running", node="m", conditions=READY, group="0")],
     2, (1, 0)),
    ([pod("Running", node="n", conditions=READY, group="0"), pod("Pending", node="m", group="0")], 2, (0, 1)),
    # one member gated: the group is held, not coming (a group is all or nothing)
    ([pod("Running", node="n", conditions=READY, group="1"), pod("Pending", gates=KUEUE_GATE, group="1")], 2, (0, 0)),
    ([pod("Pending", gates=KUEUE_GATE, group="2"), pod("Pending", gates=KUEUE_GATE, group="2"),
      pod("Pending", group="3")], 2, (0, 1)),
])
def test_lws_group_counts(pods: list[dict[str, Any]], size: int, counts: tuple[int, int]) -> None:
    assert lws_group_counts(pods, size) == counts
