"""Touch only what is ours: cache roots under an allow-list, restrictive stage/evict Jobs, the Lease's
namespace (pure parts; the cluster parts are in tests/faults/)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from tests.warmpool.helpers import GPU_TAINT, node, workload
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import parse_annotations
from warmscale.warmpool.cache_roots import cache_root_problem, parse_allow_list, system_path_conflict
from warmscale.warmpool.cli import lease_namespace
from warmscale.warmpool.planning import cleanup_plan, plan

P = "warmscale.io/"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
BASE = {P + "enabled": "true", P + "standby": "1", P + "prestage-nodes": "1", P + "model-uri": "hf://org/m@r"}


@pytest.mark.parametrize("root", ["/", "/etc", "/etc/warmscale", "/proc", "/proc/1", "/sys", "/dev", "/var/lib/kubelet",
                                  "/var/lib/kubelet/pods/x", "/var/lib", "/var", "/usr", "/root", "/run/containerd",
                                  "/var/lib/containerd", "/var/run", "/boot", "/var/lib/../../etc"])
def test_system_paths_refused_whatever_the_allow_list(root: str) -> None:
    assert cache_root_problem(root, ["/"]) is not None
    assert system_path_conflict(root) is not None


@pytest.mark.parametrize(("root", "ok"), [
    ("/var/lib/warmscale", True), ("/var/lib/warmscale/models", True), ("/var/lib/warmscale/a/b", True),
    ("/var/lib/warmscale-other", False), ("/mnt/models", False), ("/tmp/x", False), ("relative", False),
    ("/var/lib/warmscale/../kubelet", False),
])
def test_default_allow_list(root: str, ok: bool) -> None:
    assert (cache_root_problem(root) is None) == ok


def test_custom_allow_list() -> None:
    allow = parse_allow_list("/mnt/models, /var/lib/warmscale")
    assert cache_root_problem("/mnt/models/llm", allow) is None
    assert cache_root_problem("/mnt", allow) is not None
    for bad in ("relative", "/a/../b", ""):
        with pytest.raises(ValueError):
            parse_allow_list(bad)


@pytest.mark.parametrize("root", ["/", "/etc", "/proc", "/var/lib/kubelet", "/mnt/elsewhere"])
def test_plan_refuses_cache_root_with_an_event_and_changes_nothing(root: str) -> None:
    wl = workload({**BASE, P + "cache-root": root})
    p = plan(wl, [node("h1")], [], [], None, NOW)
    assert p.error is not None and p.error.key == P + "cache-root"
    assert [e.reason for e in p.events] == ["CacheRootRefused"] and p.events[0].message.startswith(P + "cache-root")
    assert not (p.create_stage_jobs or p.create_placeholders or p.create_prepull or p.label_nodes
                or p.delete_stage_jobs or p.delete_placeholders) and p.scaledobject == "none"
    # the controller's allow-list can admit a non-system path, never a system one
    p2 = plan(wl, [node("h1")], [], [], None, NOW, allowed_roots=["/mnt", "/"])
    assert (p2.error is None) == (root == "/mnt/elsewhere")


def test_cleanup_never_mounts_a_refused_root() -> None:
    key = "warmscale.io/staged-aaaa"
    n = node("n1", labels={key: "true"})
    n["metadata"]["annotations"] = {key: ob.staged_record("ns", "hf://org/old@r1", "/etc")}  # a forged record
    p = cleanup_plan([n], [], set())
    assert not p.create_evict_jobs and p.unlabel == [("n1", key)] and "/etc" in p.warnings[0]


def test_tolerations_only_for_the_target_node() -> None:
    taints = [GPU_TAINT, {"key": "dedicated", "effect": "NoExecute"},
              {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]
    assert ob.tolerations_for(taints) == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal", "value": "present"},
        {"key": "dedicated", "effect": "NoExecute", "operator": "Exists"}]
    assert ob.tolerations_for([]) == []


def _assert_restrictive(job: dict, writable: str) -> None:
    spec = job["spec"]["template"]["spec"]
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and "hostNetwork" not in spec and "hostPID" not in spec
    assert all(t.get("operator") != "Exists" or t.get("key") for t in spec["tolerations"])  # no tolerate-all
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True and sc["privileged"] is False
        assert sc["runAsUser"] == 0  # the owner of the kubelet-created hostPath, without capabilities
        rw = [m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")]
        assert rw == [writable]


def test_stage_and_evict_jobs_are_restrictive() -> None:
    for uri in ("hf://org/m@r", "file:///models/llama", "pvc://claim/llama"):
        wl = workload({**BASE, P + "model-uri": uri})
        cfg = parse_annotations(wl.annotations)
        job = ob.stage_job(wl, cfg, "h1", "img", taints=[GPU_TAINT])
        _assert_restrictive(job, ob.CACHE_MOUNT)
        assert job["spec"]["template"]["spec"]["tolerations"] == ob.tolerations_for([GPU_TAINT])
    ev = ob.evict_job("ns", "warmscale.io/staged-aaaa", "hf://org/m@r", "/var/lib/warmscale/models", "n1", "img",
                      taints=[])
    _assert_restrictive(ev, ob.CACHE_MOUNT)
    assert ev["spec"]["template"]["spec"]["tolerations"] == []


@pytest.mark.parametrize(("argv", "env", "want"), [
    ({}, {}, "warmscale"),
    ({"namespace": "llm"}, {}, "llm"),
    ({"namespace": "llm"}, {"POD_NAMESPACE": "warmscale"}, "llm"),
    ({}, {"POD_NAMESPACE": "ops"}, "ops"),
    ({"namespace": "llm", "lease_namespace": "ops"}, {}, "ops"),
    ({"namespace": "llm,ops"}, {}, "llm"),
])
def test_lease_namespace(argv: dict[str, str], env: dict[str, str], want: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = argparse.Namespace(namespace=argv.get("namespace"), lease_namespace=argv.get("lease_namespace"))
    assert lease_namespace(args) == want


def test_webhook_mounts_no_refused_cache_root() -> None:
    from warmscale.warmpool.webhook import config_for, review_response

    def wl(root: str) -> dict:
        return {"metadata": {"name": "llm", "annotations": {**BASE, P + "cache-root": root}},
                "spec": {"selector": {"matchLabels": {"app": "llm"}}}}

    pod = {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [{"name": "e", "image": "x"}]}}
    assert config_for(pod, [wl("/var/lib/warmscale/models")]) is not None
    for bad in ("/etc", "/var/lib/kubelet", "/", "/mnt/x"):
        assert config_for(pod, [wl(bad)]) is None
        review = {"request": {"uid": "u", "operation": "CREATE", "kind": {"kind": "Pod"}, "object": pod}}
        assert "patch" not in review_response(review, [wl(bad)], image="img")["response"]
    assert config_for(pod, [wl("/mnt/x")], allowed_roots=["/mnt"]) is not None
