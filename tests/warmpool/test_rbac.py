"""The shipped RBAC and node-write policy are what ``warmpool.rbac`` generates (pure; the cluster proof and
the audit of every request are in tests/faults/test_rbac_audit.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from warmscale.warmpool import rbac

ROOT = Path(__file__).resolve().parents[2]


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_shipped_files_are_generated() -> None:
    assert docs(ROOT / "manifests/warmpool/rbac.yaml") == rbac.render()
    assert docs(ROOT / "manifests/warmpool/admission-policy.yaml") == rbac.node_write_policy()
    assert docs(ROOT / "manifests/overlays/namespaced/rbac-namespaced.yaml") == rbac.render(
        ["llm"], service_account=False)
    # the base install carries verbatim copies (tools/dashboards.py)
    assert docs(ROOT / "manifests/base/controller-rbac.yaml") == rbac.render()
    assert docs(ROOT / "manifests/base/controller-admission-policy.yaml") == rbac.node_write_policy()
    assert docs(ROOT / "manifests/examples/hold-gateway/rbac.yaml") == rbac.hold_gateway("llm")


def test_least_privilege_shape() -> None:
    objs = rbac.render()
    rules = [r for o in objs if o["kind"] in ("ClusterRole", "Role") for r in o["rules"]]
    for r in rules:
        assert "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r["apiGroups"]
    assert ("scheduling.k8s.io", "priorityclasses", "create") not in rbac.granted()
    pcs = [r for r in rules if "priorityclasses" in r["resources"]]
    assert pcs == [{"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"],
                    "resourceNames": ["warmscale-placeholder"], "verbs": ["get"]}]
    assert not any("secrets" in r["resources"] or "nodes/status" in r["resources"] for r in rules)


def test_namespaced_mode_has_no_cluster_wide_workload_access() -> None:
    objs = rbac.render(["a", "b"])
    cluster = [o for o in objs if o["kind"] == "ClusterRole"]
    assert len(cluster) == 1
    # cluster-scoped by nature only (a Kueue ClusterQueue is; the workloads' LocalQueues are in the Roles)
    assert {res for r in cluster[0]["rules"] for res in r["resources"]} == {
        "nodes", "priorityclasses", "resourceslices", "clusterqueues"}
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "Role"}
    assert roles == {("a", "warmscale-warmpool"), ("b", "warmscale-warmpool"), ("a", "warmscale-warmpool-leader")}
    bindings = [o for o in objs if o["kind"] == "RoleBinding"]
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": "warmscale-warmpool", "namespace": "warmscale"}]
               for b in bindings)


def test_cli_prints_the_generated_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    from warmscale.cli import main

    assert main(["rbac", "--namespace", "llm", "--no-service-account"]) == 0
    out = capsys.readouterr().out
    assert out == (ROOT / "manifests/overlays/namespaced/rbac-namespaced.yaml").read_text()


def test_namespaced_overlay_renders() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "manifests/overlays/namespaced")], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    objs = [d for d in yaml.safe_load_all(out) if d]
    names = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}
    assert ("ClusterRole", None, "warmscale-warmpool") not in names
    assert ("ClusterRoleBinding", None, "warmscale-warmpool") not in names
    assert ("Role", "llm", "warmscale-warmpool") in names and ("Role", "llm", "warmscale-warmpool-leader") in names
    assert ("ValidatingAdmissionPolicy", None, "warmscale-warmpool-node-writes") in names
    ctl = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "warmscale-controller")
    args = ctl["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=llm" in args
    # no cluster-wide lever on the webhook: no grant on its configuration, and the controller leaves the
    # caBundle alone (the last --webhook-configuration wins); `warmscale ca-bundle` sets it (issue 20 item 12)
    hooks = [r for o in objs if o["kind"] == "ClusterRole" for r in o["rules"]
             if "mutatingwebhookconfigurations" in r["resources"]]
    assert hooks == [] and ("ClusterRoleBinding", None, "warmscale-warmpool-webhook") not in names
    assert [a for a in args if a.startswith("--webhook-configuration")][-1] == "--webhook-configuration="
