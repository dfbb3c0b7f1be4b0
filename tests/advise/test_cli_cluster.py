"""`warmscale advise` against the real local control plane, as a read-only user: GPU pods of two
quota-less namespaces pending together, a namespace with a GPU quota, partly scheduled multi-pod
replicas (LeaderWorkerSet labels). The CLI runs as a process with a kubeconfig holding a
ServiceAccount token allowed to list pods and ResourceQuotas, nothing else."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import ignore_not_found, wait_for
from warmscale.localcluster.harness import Cluster
from warmscale.localcluster.workloads import pod

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
LWS = "leaderworkerset.sigs.k8s.io"


@pytest.fixture
async def namespaces(k8s_admin: client.ApiClient) -> AsyncIterator[list[str]]:
    core = client.CoreV1Api(k8s_admin)
    names = [f"adv-{c}-{uuid.uuid4().hex[:6]}" for c in "abq"]
    for n in names:
        await core.create_namespace({"metadata": {"name": n, "labels": {"warmscale.io/test": "true"}}})
    try:
        yield names
    finally:
        for n in names:
            await ignore_not_found(core.delete_namespace(n))


@pytest.fixture
async def reader_kubeconfig(k8s_cluster: Cluster, k8s_admin: client.ApiClient, k8s_namespace: str,
                            tmp_path: Path) -> AsyncIterator[Path]:
    """A kubeconfig for a ServiceAccount that may list pods and ResourceQuotas cluster-wide, only."""
    core, rbac = client.CoreV1Api(k8s_admin), client.RbacAuthorizationV1Api(k8s_admin)
    name = f"advisor-{uuid.uuid4().hex[:6]}"
    await core.create_namespaced_service_account(k8s_namespace, {"metadata": {"name": name}})
    await rbac.create_cluster_role({"metadata": {"name": name}, "rules": [
        {"apiGroups": [""], "resources": ["pods", "resourcequotas"], "verbs": ["list"]}]})
    await rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": k8s_namespace}]})
    token = await k8s_cluster.mint_token(k8s_namespace, name)
    path = k8s_cluster.write_token_kubeconfig(tmp_path / "advisor.kubeconfig", token, user=name)
    auth = client.AuthorizationV1Api(k8s_admin)

    async def effective() -> bool:
        review = {"spec": {"user": f"system:serviceaccount:{k8s_namespace}:{name}",
                           "resourceAttributes": {"verb": "list", "resource": "resourcequotas"}}}
        res = await auth.create_subject_access_review(review)
        return bool(res.status.allowed)
    await wait_for(effective, within=15, what="advisor ClusterRoleBinding effective")
    try:
        yield path
    finally:
        for call in (rbac.delete_cluster_role_binding(name), rbac.delete_cluster_role(name)):
            await ignore_not_found(call)


def advise(kubeconfig_path: Path, *extra: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "warmscale.cli", "--log-level", "warning", "advise", "--kubeconfig",
         str(kubeconfig_path), "--json", "--pending-threshold", "1s", "--gang-threshold", "1s", *extra],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


async def test_advise_cli_finds_quota_contention_and_partial_gangs(
    k8s_admin: client.ApiClient, namespaces: list[str], reader_kubeconfig: Path,
) -> None:
    core = client.CoreV1Api(k8s_admin)
    ns_a, ns_b, ns_q = namespaces
    await core.create_namespaced_resource_quota(ns_q, {"metadata": {"name": "gpus"},
                                                       "spec": {"hard": {"requests.nvidia.com/gpu": "100000"}}})
    # Three GPU pods per namespace that no node can hold (pending together, no quota in a and b).
    for ns in namespaces:
        for i in range(3):
            await core.create_namespaced_pod(ns, pod(f"train-{i}", labels={"app": "train"}, gpus=1000))
    # Three two-pod replicas (LeaderWorkerSet groups) in a: the leader fits a GPU node, the worker does not.
    for g in range(3):
        labels = {f"{LWS}/name": "llama-405b", f"{LWS}/group-index": str(g)}
        ann = {f"{LWS}/size": "2"}
        await core.create_namespaced_pod(ns_a, pod(f"llama-405b-{g}", labels=labels, annotations=ann, gpus=1))
        await core.create_namespaced_pod(ns_a, pod(f"llama-405b-{g}-1", labels=labels, annotations=ann, gpus=1000))

    async def scheduled_or_refused() -> bool:
        pods = (await core.list_namespaced_pod(ns_a)).items
        return len(pods) == 9 and all(any(c.type == "PodScheduled" for c in (p.status.conditions or []))
                                      for p in pods)
    await wait_for(scheduled_or_refused, within=60, what="the scheduler decided every pod")
    await asyncio.sleep(1.5)  # past the 1 s thresholds

    doc = advise(reader_kubeconfig)
    mine = [f for f in doc["findings"] if f["namespace"] in namespaces]
    kinds = {(f["finding"], f["namespace"]) for f in mine}
    assert ("quota-contention", ns_a) in kinds and ("quota-contention", ns_b) in kinds, doc
    assert ("quota-contention", ns_q) not in kinds  # it has a GPU quota
    gang = next(f for f in mine if f["finding"] == "partial-gang")
    assert gang["namespace"] == ns_a and gang["workload"] == "llama-405b" and gang["episodes"] == 3
    assert "1/2 pods scheduled" in gang["evidence"][0]["evidence"]
    assert "gang admission" in gang["next_layer"]
    quota = next(f for f in mine if f["finding"] == "quota-contention" and f["namespace"] == ns_b)
    assert quota["episodes"] >= 3 and "quotas" in quota["next_layer"]
    assert any("no --prometheus" in n for n in doc["notes"])

    # Silent below the repetition count, and scoped by --namespace.
    doc = advise(reader_kubeconfig, "--min-episodes", "4")
    assert not [f for f in doc["findings"] if f["namespace"] in namespaces and f["finding"] == "partial-gang"]
    doc = advise(reader_kubeconfig, "--namespace", ns_b)
    assert {f["namespace"] for f in doc["findings"]} <= {ns_b}
