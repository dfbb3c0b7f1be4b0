from datetime import UTC, datetime, timedelta
from typing import Any

from tests.warmpool.helpers import node, pod_spec, workload
from warmscale.warmpool import objects as ob
from warmscale.warmpool.model_uri import CacheKey, parse_model_uri, staged_label_key
from warmscale.warmpool.planning import (
    TimeToReady,
    plan,
    pod_time_to_ready,
    prepull_state,
    scaledobject_action,
    stale_stage_labels,
    warm_state,
)

P = "warmscale.io/"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # a Monday
URI = "hf://org/model@rev1"
KEY = CacheKey(parse_model_uri(URI), "ns")  # the helpers' workloads live in namespace "ns"
LABEL = staged_label_key(KEY)
BASE = {
    P + "enabled": "true",
    P + "standby": "2",
    P + "prestage-nodes": "2",
    P + "model-uri": URI,
    P + "min-ready": "2",
}
FLEET = [node("h3"), node("h1"), node("h2"), node("l4", product="NVIDIA-L4", gpus=4), node("cpu", product=None)]


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def job(wl: Any, nodename: str, cond: str | None = None, at: datetime = NOW) -> dict[str, Any]:
    j: dict[str, Any] = {
        "metadata": {
            "name": ob.stage_job_name(KEY, nodename),
            "labels": ob.labels(wl, "stage"),
            "annotations": {ob.NODE_ANN: nodename},
        },
        "status": {},
    }
    if cond:
        j["status"]["conditions"] = [{"type": cond, "status": "True", "lastTransitionTime": iso(at)}]
    return j


def holder(wl: Any, i: int, nodename: str | None, pin: str = "any", phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": ob.placeholder_name(wl, i),
            "labels": ob.labels(wl, "placeholder"),
            "annotations": {ob.PIN_ANN: pin},
        },
        "spec": {"nodeName": nodename} if nodename else {},
        "status": {"phase": phase},
    }


def labelled(n: dict[str, Any]) -> dict[str, Any]:
    n = dict(n)
    n["metadata"] = dict(n["metadata"], labels={**n["metadata"]["labels"], LABEL: "true"})
    return n


def test_invalid_annotation_changes_nothing() -> None:
    wl = workload({**BASE, P + "standby": "lots"})
    p = plan(wl, FLEET, [holder(wl, 5, "h1")], [job(wl, "h9")], None, NOW)
    assert p.error is not None and p.error.key == P + "standby"
    assert [e.reason for e in p.events] == ["InvalidAnnotation"]
    assert (
        not (
            p.create_stage_jobs
            or p.delete_stage_jobs
            or p.create_placeholders
            or p.delete_placeholders
            or p.create_prepull
            or p.label_nodes
        )
        and p.scaledobject == "none"
    )


def test_disabled_does_nothing() -> None:
    p = plan(workload({P + "enabled": "false"}), FLEET, [], [], None, NOW)
    assert p.config is not None and not p.create_placeholders and not p.create_stage_jobs


def test_fresh_workload_creates_everything_on_matching_nodes() -> None:
    wl = workload(BASE)
    p = plan(wl, FLEET, [], [], None, NOW)
    assert p.matching == ["h1", "h2", "h3"]
    assert p.stage_nodes == ["h1", "h2"]
    assert p.create_stage_jobs == ["h1", "h2"] and p.create_prepull == ["h1", "h2"]
    assert p.create_placeholders == [0, 1] and p.pinned is None  # nothing warm yet
    assert p.floor == 2 and p.scale_replicas_to == 2 and p.scaledobject == "none"
    assert p.status["staged"] == "0/2"


def test_sticky_choice_prefers_staged_then_nodes_with_room() -> None:
    wl = workload(BASE, spec=pod_spec(gpus=8))
    nodes = [node("h1"), node("h2"), labelled(node("h3"))]
    replica = {
        "metadata": {"name": "llm-abc", "labels": {"app": "llm"}},
        "spec": {**pod_spec(gpus=8), "nodeName": "h1"},
        "status": {"phase": "Running"},
    }
    p = plan(wl, nodes, [replica], [], None, NOW)
    assert p.stage_nodes == ["h3", "h2"] and p.staged_nodes == ["h3"] and p.create_stage_jobs == ["h2"]


def test_job_lifecycle_label_only_after_success() -> None:
    wl = workload(BASE)
    running = plan(wl, FLEET, [], [job(wl, "h1"), job(wl, "h2")], None, NOW)
    assert running.create_stage_jobs == [] and running.label_nodes == [] and running.staged_nodes == []
    done = plan(
        wl, FLEET, [], [job(wl, "h1", "Complete"), job(wl, "h2", "Failed", NOW - timedelta(seconds=10))], None, NOW
    )
    assert done.label_nodes == ["h1"] and done.staged_nodes == ["h1"]
    assert done.delete_stage_jobs == [] and "StagingFailed" in [e.reason for e in done.events]
    later = plan(
        wl, FLEET, [], [job(wl, "h1", "Complete"), job(wl, "h2", "Failed", NOW - timedelta(hours=1))], None, NOW
    )
    assert later.delete_stage_jobs == [ob.stage_job_name(KEY, "h2")]


def test_repeated_plans_are_idempotent() -> None:
    wl = workload(BASE)
    nodes = [labelled(node("h1")), labelled(node("h2")), node("h3")]
    pin = ob.pin_hash(["h1", "h2"])
    pods = [holder(wl, 0, "h1", pin), holder(wl, 1, "h2", pin)]
    pulls = [
        {
            "metadata": {"name": ob.prepull_name(wl, n), "labels": ob.labels(wl, "prepull")},
            "spec": {"containers": [{}]},
            "status": {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]},
        }
        for n in ("h1", "h2")
    ]
    jobs = [job(wl, "h1", "Complete"), job(wl, "h2", "Complete")]
    p = plan(wl, nodes, pods + pulls, jobs, None, NOW)
    assert p.pinned == ["h1", "h2"] and p.placeholders_ready == 2
    assert not (
        p.create_placeholders
        or p.delete_placeholders
        or p.create_stage_jobs
        or p.label_nodes
        or p.create_prepull
        or p.delete_prepull
        or p.delete_stage_jobs
    )
    assert p.prepulled_nodes == ["h1", "h2"] and p.status["placeholders"] == "2/2"


def test_placeholders_replenished_and_moved_to_warm_nodes() -> None:
    wl = workload(BASE)
    nodes = [labelled(node("h1")), labelled(node("h2")), node("h3")]
    jobs = [job(wl, "h1", "Complete"), job(wl, "h2", "Complete")]
    # placeholder 0 was preempted (gone), placeholder 1 sits on a cold node, an extra index 7 exists
    p = plan(wl, nodes, [holder(wl, 1, "h3"), holder(wl, 7, "h1")], jobs, None, NOW)
    assert p.create_placeholders == [0]
    assert sorted(p.delete_placeholders) == sorted([ob.placeholder_name(wl, 1), ob.placeholder_name(wl, 7)])
    # a pending placeholder created for the current pin is kept; one with an old pin is replaced
    pin = ob.pin_hash(["h1", "h2"])
    p2 = plan(wl, nodes, [holder(wl, 0, None, pin, "Pending"), holder(wl, 1, None, "any", "Pending")], jobs, None, NOW)
    assert p2.delete_placeholders == [ob.placeholder_name(wl, 1)] and p2.create_placeholders == []


def test_terminating_placeholder_waits() -> None:
    wl = workload(BASE)
    h = holder(wl, 0, "h1")
    h["metadata"]["deletionTimestamp"] = iso(NOW)
    p = plan(wl, FLEET, [h], [], None, NOW)
    assert p.create_placeholders == [1] and not p.delete_placeholders


def test_model_change_deletes_old_jobs() -> None:
    wl = workload(BASE)
    old = job(wl, "h1", "Complete")
    old["metadata"]["name"] = "ws-stage-0000000000-deadbeef"
    p = plan(wl, FLEET, [], [old], None, NOW)
    assert p.delete_stage_jobs == ["ws-stage-0000000000-deadbeef"]


def test_prepull_states() -> None:
    def pod(phase: str, statuses: list[dict[str, Any]], n: int = 2) -> dict[str, Any]:
        return {"spec": {"containers": [{}] * n}, "status": {"phase": phase, "containerStatuses": statuses}}

    assert prepull_state(pod("Pending", [])) == "pulling"
    assert (
        prepull_state(pod("Pending", [{"imageID": "sha256:1"}, {"state": {"waiting": {"reason": "ErrImagePull"}}}]))
        == "pulling"
    )
    assert (
        prepull_state(pod("Failed", [{"imageID": "sha256:1"}, {"state": {"terminated": {"reason": "StartError"}}}]))
        == "pulled"
    )
    assert prepull_state(pod("Failed", [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}, {}])) == "failed"


def test_floor_schedule_and_scale_to_zero_refusal() -> None:
    ann = {**BASE, P + "min-ready": "mon-fri 09:00-17:00=3; default=0", P + "autoscale": "true"}
    wl = workload(ann)
    p = plan(wl, FLEET, [], [], None, NOW)
    assert p.floor == 3 and p.scaledobject == "create"
    assert p.scaledobject_body is not None and p.scaledobject_body["spec"]["minReplicaCount"] == 3
    night = plan(wl, FLEET, [], [], None, NOW.replace(hour=22))
    assert night.floor == 1 and night.floor_raised and "ScaleToZeroRefused" in [e.reason for e in night.events]
    allowed = plan(workload({**ann, P + "scale-to-zero": "allowed"}), FLEET, [], [], None, NOW.replace(hour=22))
    assert allowed.floor == 0 and not allowed.floor_raised


def test_scaledobject_ownership() -> None:
    wl = workload({**BASE, P + "autoscale": "true"})
    desired = plan(wl, FLEET, [], [], None, NOW).scaledobject_body
    assert desired is not None
    trig = desired["spec"]["triggers"][0]
    assert trig["type"] == "external-push" and trig["metadata"]["podSelector"] == "app=llm"
    assert desired["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}
    assert scaledobject_action(desired, desired) == ("none", None)
    drifted = {**desired, "spec": {**desired["spec"], "minReplicaCount": 0}}
    action, patch = scaledobject_action(drifted, desired)
    assert action == "patch" and patch is not None and patch["spec"]["minReplicaCount"] == 2
    user = {"metadata": {"name": "llm", "labels": {}}, "spec": {"minReplicaCount": 0}}
    p = plan(wl, FLEET, [], [], user, NOW)
    assert p.scaledobject == "foreign" and "ScaledObjectNotOwned" in [e.reason for e in p.events]
    assert p.scale_replicas_to is None
    assert scaledobject_action(desired, None) == ("delete", None)  # autoscale turned off: remove ours


def test_time_to_ready_tracking() -> None:
    pod = {
        "metadata": {"creationTimestamp": "2026-01-05T12:00:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-05T12:01:30Z"}]},
    }
    assert pod_time_to_ready(pod) == 90.0
    assert pod_time_to_ready({"metadata": {}, "status": {}}) is None
    assert warm_state(True, True) == "placeholder+staged" and warm_state(True, False) == "staged"
    assert warm_state(False, True) == "cold"
    t = TimeToReady(window=3)
    for i, v in enumerate([10.0, 20.0, 30.0, 40.0]):
        t.observe(f"u{i}", "cold", v)
    assert not t.observe("u0", "cold", 1000.0)
    assert t.medians() == {"cold": 30.0}


def test_stale_stage_labels() -> None:
    n = node("h1", labels={LABEL: "true", "warmscale.io/staged-0123456789": "true"})
    assert stale_stage_labels([n], {LABEL}) == {"h1": ["warmscale.io/staged-0123456789"]}


def test_manifests() -> None:
    wl = workload(BASE)
    from warmscale.warmpool.annotations import parse_annotations

    cfg = parse_annotations(BASE)
    ph = ob.placeholder_pod(wl, 0, ["h1", "h2"])
    assert ph["metadata"]["labels"][ob.MANAGED_BY] == "warmscale"
    assert ph["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    res = ph["spec"]["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "8", "memory": str(64 * 2**30), "nvidia.com/gpu": "1"}
    assert res["limits"] == {"nvidia.com/gpu": "1"}
    assert ph["spec"]["priorityClassName"] == ob.PRIORITY_CLASS and ph["spec"]["tolerations"]
    term = ph["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h1", "h2"]}]}]
    pc = ob.priority_class()
    assert -10 < pc["value"] < 0 and pc["preemptionPolicy"] == "Never"
    job_ = ob.stage_job(wl, cfg, "h1", "warmscale:dev")
    cmd = job_["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:2] == ["warmscale", "--log-format"] and "stage" in cmd and URI in cmd
    assert job_["metadata"]["name"] == ob.stage_job_name(KEY, "h1")
    spec = {
        **wl.pod_spec,
        "imagePullSecrets": [{"name": "regcred"}],
        "initContainers": [{"name": "i", "image": "busybox"}],
    }
    wl2 = workload(BASE, spec=spec)
    pull = ob.prepull_pod(wl2, "h1")
    assert [c["image"] for c in pull["spec"]["containers"]] == ["busybox", "vllm/vllm-openai:v0.11.0"]
    assert pull["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert all(c["command"] == [ob.PULL_COMMAND] for c in pull["spec"]["containers"])


# ---------------------------------------------------------------- cache clean-up


def _staged_node(name: str, key: str, ns: str | None = "ns") -> dict[str, Any]:
    from warmscale.warmpool.objects import staged_record

    n = node(name, labels={key: "true"})
    if ns is not None:
        n["metadata"]["annotations"] = {key: staged_record(ns, "hf://org/old@r1", "/var/lib/warmscale/models")}
    return n


def _job(ns: str, name: str, cond: str | None) -> dict[str, Any]:
    st = {"conditions": [{"type": cond, "status": "True"}]} if cond else {}
    return {"metadata": {"namespace": ns, "name": name}, "status": st}


def test_cleanup_plan_evicts_then_unlabels() -> None:
    from warmscale.warmpool.objects import evict_job_name
    from warmscale.warmpool.planning import cleanup_plan

    old, new = "warmscale.io/staged-aaaa", "warmscale.io/staged-bbbb"
    nodes = [_staged_node("n1", old), _staged_node("n2", new), _staged_node("n3", old, ns=None)]
    p = cleanup_plan(nodes, [], {new})
    assert p.create_evict_jobs == [("ns", old, "hf://org/old@r1", "/var/lib/warmscale/models", "n1", "")]
    assert p.unlabel == [("n3", old)]  # no record: only the label goes
    assert p.pending_namespaces == {"ns"}
    jn = evict_job_name(old, "n1")
    running = cleanup_plan(nodes, [_job("ns", jn, None)], {new})
    assert not running.create_evict_jobs and ("n1", old) not in running.unlabel
    done = cleanup_plan(nodes, [_job("ns", jn, "Complete")], {new})
    assert ("n1", old) in done.unlabel and ("ns", jn) in done.delete_jobs and not done.warnings
    failed = cleanup_plan(nodes, [_job("ns", jn, "Failed")], {new})
    assert ("n1", old) in failed.unlabel and failed.warnings
    # the model came back: its evict Job goes, nothing is unlabelled
    back = cleanup_plan(nodes, [_job("ns", jn, None)], {old, new})
    assert back.delete_jobs == [("ns", jn)] and not back.unlabel and not back.pending_namespaces
    # a namespace-scoped controller leaves other namespaces' caches and unrecorded labels alone
    scoped = cleanup_plan(nodes, [], {new}, scope="other")
    assert not scoped.create_evict_jobs and not scoped.unlabel


def test_evict_job_is_unowned_and_pinned() -> None:
    from warmscale.warmpool.objects import evict_job

    j = evict_job("ns", "warmscale.io/staged-aaaa", "hf://org/old@r1", "/var/lib/warmscale/models", "n1", "img")
    assert "ownerReferences" not in j["metadata"]
    spec = j["spec"]["template"]["spec"]
    assert "--evict" in spec["containers"][0]["command"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchFields"][0]["values"] == ["n1"]
    assert spec["volumes"][0]["hostPath"]["path"] == "/var/lib/warmscale/models"
