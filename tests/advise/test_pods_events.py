"""Pod objects as the API returns them -> detector inputs, and the controller's Events (pure)."""

from __future__ import annotations

from typing import Any

from warmscale.common.diagnostics.events import workload_events
from warmscale.common.diagnostics.pods import gpu_quota_namespaces, pod_record, workload_of

NOW = 1_800_000_000.0


def iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, labels: dict[str, str] | None = None, scheduled: float | None = None, gpus: int = 1,
        restarts: int = 0, last: dict[str, Any] | None = None, owner: str = "vllm-llama-5d4b8c9f7",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    conds = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(scheduled)}] if scheduled else \
        [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
          "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]
    return {
        "metadata": {"name": name, "namespace": "llm", "creationTimestamp": iso(NOW - 3600),
                     "labels": {"app": "vllm-llama", "pod-template-hash": "5d4b8c9f7", **(labels or {})},
                     "annotations": annotations or {},
                     "ownerReferences": [{"kind": "ReplicaSet", "name": owner}]},
        "spec": {"containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                 **({"nodeName": "gpu-0"} if scheduled else {})},
        "status": {"phase": "Running" if scheduled else "Pending", "conditions": conds,
                   "containerStatuses": [{"name": "vllm", "restartCount": restarts,
                                          **({"lastState": {"terminated": last}} if last else {})}]},
    }


def test_pod_record_reads_scheduling_gpus_owner_and_last_termination() -> None:
    last = {"reason": "OOMKilled", "exitCode": 137, "finishedAt": iso(NOW - 120)}
    r = pod_record(pod("vllm-llama-5d4b8c9f7-abcde", scheduled=NOW - 3500, gpus=2, restarts=3, last=last))
    assert (r.workload, r.gpus, r.scheduled_at, r.phase) == ("vllm-llama", 2.0, NOW - 3500, "Running")
    (t,) = r.terminations
    assert (t.reason, t.exit_code, t.restarts, t.at) == ("OOMKilled", 137, 3, NOW - 120)
    p = pod_record(pod("x"))
    assert p.scheduled_at is None and p.pending_reason.startswith("Unschedulable: 0/4 nodes")


def test_gpu_quantities_as_the_api_server_writes_them() -> None:
    p = pod("x")
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1k"
    assert pod_record(p).gpus == 1000


def test_lws_pods_form_a_gang() -> None:
    lws = {"leaderworkerset.sigs.k8s.io/name": "llama-405b", "leaderworkerset.sigs.k8s.io/group-index": "1"}
    r = pod_record(pod("llama-405b-1-1", labels=lws, annotations={"leaderworkerset.sigs.k8s.io/size": "2"}))
    assert (r.gang, r.gang_size, r.workload) == ("llama-405b-1", 2, "llama-405b")
    assert workload_of({"metadata": {"name": "solo"}}) == "solo"


def test_quota_namespaces() -> None:
    quotas = [{"metadata": {"namespace": "a"}, "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}},
              {"metadata": {"namespace": "b"}, "spec": {"hard": {"pods": "10"}}}]
    assert gpu_quota_namespaces(quotas) == frozenset({"a"})


def test_controller_events_for_repeated_oom_only() -> None:
    sel = {"app": "vllm-llama"}
    last = {"reason": "OOMKilled", "exitCode": 137, "finishedAt": iso(NOW - 120)}
    once = [pod("vllm-llama-5d4b8c9f7-a", scheduled=NOW - 3500, restarts=1, last=last)]
    assert workload_events(once, sel, NOW) == []
    thrice = [pod("vllm-llama-5d4b8c9f7-a", scheduled=NOW - 3500, restarts=3, last=last)]
    ((reason, message),) = workload_events(thrice, sel, NOW)
    assert reason == "NextLayerParallelism"
    assert "3 times in 24 h" in message and "tensor parallelism" in message and "vllm-llama-5d4b8c9f7-a" in message
    assert workload_events(thrice, {"app": "other"}, NOW) == []
    # Stable message: the same pods an hour later give the same Event (the recorder dedupes it).
    assert workload_events(thrice, sel, NOW + 600) == [(reason, message)]
