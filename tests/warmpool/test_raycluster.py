"""A RayCluster worker group as a warm-pool target (pure tables; the cluster test with the real KubeRay
operator is tests/warmpool/test_raycluster_cluster.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.warmpool.helpers import node, pod_spec
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import JSON_PATCH, finalizer_patch, workload_from
from warmscale.warmpool.planning import plan
from warmscale.warmpool.raycluster import RAYCLUSTER_KIND, worker_group

P = "warmscale.io/"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
MIG1 = "nvidia.com/mig-1g.10gb"


def group(name: str, spec: dict[str, Any] | None = None, replicas: int = 1, **extra: Any) -> dict[str, Any]:
    return {"groupName": name, "replicas": replicas, "minReplicas": 0, "maxReplicas": 8,
            "template": {"metadata": {"labels": {"team": "llm"}}, "spec": spec or pod_spec(gpus=1)}, **extra}


def raycluster(groups: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": RAYCLUSTER_KIND,
            "metadata": {"name": "rc", "namespace": "ns", "uid": "u1", "annotations": {
                P + "enabled": "true", P + "standby": "2", P + "min-ready": "3", **(annotations or {})}},
            "spec": {"headGroupSpec": {"template": {"spec": pod_spec(gpus=0, product=None)}},
                     "workerGroupSpecs": groups}}


@pytest.mark.parametrize(("groups", "annotations", "name", "problem"), [
    ([group("gpu")], {}, "gpu", ""),
    ([group("cpu"), group("gpu")], {P + "ray-worker-group": "gpu"}, "gpu", ""),
    ([group("cpu"), group("GPU_H100")], {P + "ray-worker-group": "GPU_H100"}, "GPU_H100", ""),
    ([group("cpu"), group("gpu")], {}, "", "warmscale.io/ray-worker-group must name one of the worker groups"),
    ([group("gpu")], {P + "ray-worker-group": "tpu"}, "tpu", "no worker group 'tpu'; the groups are ['gpu']"),
    ([group("gpu", numOfHosts=2)], {}, "gpu", "numOfHosts 2: multi-host groups are not kept warm yet"),
    ([], {}, "", "no workerGroupSpecs"),
])
def test_worker_group(groups: list[dict[str, Any]], annotations: dict[str, str], name: str, problem: str) -> None:
    g = worker_group(raycluster(groups, annotations))
    assert g.name == name
    assert (problem in g.problem) if problem else g.problem == ""


def test_workload_is_the_group() -> None:
    wl = workload_from(RAYCLUSTER_KIND, raycluster([group("cpu", pod_spec(gpus=0, product=None)),
                                                    group("gpu", spec_mig(), replicas=2)],
                                                   {P + "ray-worker-group": "gpu"}))
    assert wl.selector == {"ray.io/cluster": "rc", "ray.io/group": "gpu"} and wl.replicas == 2
    assert wl.pod_spec == spec_mig() and not wl.is_gang and not wl.invalid
    assert wl.owner_ref()["apiVersion"] == "ray.io/v1"
    assert finalizer_patch(RAYCLUSTER_KIND, None)[1] == JSON_PATCH  # a custom resource: no strategic merge


def spec_mig() -> dict[str, Any]:
    spec = pod_spec(gpus=1, product=None)
    spec["containers"][0]["resources"]["limits"] = {MIG1: "1"}
    return spec


FLEET = [node("whole"), node("mig-a", gpus=0, labels={"nvidia.com/mig.strategy": "mixed"}),
         node("mig-b", gpus=0, labels={"nvidia.com/mig.strategy": "mixed"})]
for _n in FLEET[1:]:
    _n["status"]["allocatable"][MIG1] = "7"


def test_plan_holds_and_stages_what_the_group_requests_and_never_touches_replicas() -> None:
    ann = {P + "prestage-nodes": "2", P + "model-uri": "hf://org/model@rev1"}
    wl = workload_from(RAYCLUSTER_KIND, raycluster([group("gpu", spec_mig())], ann))
    p = plan(wl, FLEET, [], [], None, NOW)
    assert p.error is None and p.matching == ["mig-a", "mig-b"]
    assert sorted(p.create_stage_jobs) == ["mig-a", "mig-b"] and sorted(p.create_prepull) == ["mig-a", "mig-b"]
    assert p.create_placeholders == [0, 1]
    hold = ob.placeholder_pod(wl, 0, p.pinned)
    assert hold["spec"]["containers"][0]["resources"]["limits"] == {MIG1: "1"}
    assert hold["metadata"]["ownerReferences"][0]["kind"] == RAYCLUSTER_KIND
    assert p.floor == 3 and wl.replicas == 1 and p.scale_replicas_to is None  # KubeRay's replicas, not ours
    assert p.scaledobject == "none"


@pytest.mark.parametrize(("groups", "annotations", "key"), [
    ([group("gpu")], {P + "autoscale": "true"}, P + "autoscale"),
    ([group("a"), group("b")], {}, P + "ray-worker-group"),
    ([group("gpu")], {P + "ray-worker-group": "tpu"}, P + "ray-worker-group"),
    ([group("gpu")], {P + "ray-worker-group": "gpu group"}, P + "ray-worker-group"),  # not a label value
])
def test_bad_input_is_an_event_naming_the_key_and_changes_nothing(
    groups: list[dict[str, Any]], annotations: dict[str, str], key: str
) -> None:
    p = plan(workload_from(RAYCLUSTER_KIND, raycluster(groups, annotations)), FLEET, [], [], None, NOW)
    assert p.error is not None and p.error.key == key
    assert [e.reason for e in p.events] == ["InvalidAnnotation"] and key in p.events[0].message
    assert not (p.create_placeholders or p.create_prepull or p.create_stage_jobs or p.scale_replicas_to)
