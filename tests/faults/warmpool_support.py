"""Support for the warm-pool fault tests: a private local cluster (its apiserver gets restarted, so it
is never the shared session cluster), the controller as a real process under its own ServiceAccount
with the generated RBAC, and measurement records."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.cluster.fixtures import _skip_allowed, worker_pod_cidr
from tests.servers import stop_process
from warmscale.localcluster import workloads as w
from warmscale.localcluster.binaries import BinariesMissing
from warmscale.localcluster.fleet import H100
from warmscale.localcluster.harness import Cluster, ClusterConfig
from warmscale.warmpool import rbac

ROOT = Path(__file__).resolve().parents[2]
P = "warmscale.io/"
INSTALL_NS = rbac.INSTALL_NAMESPACE
SA = rbac.NAME
SA_USER = rbac.service_account_user(INSTALL_NS, SA)
POOL = "fault-h100"
APPLY = "application/apply-patch+yaml"
RECORDS: dict[str, Any] = {}


def private_cluster(extra_apiserver_args: list[str] | None = None) -> Iterator[Cluster]:
    """A small cluster of its own (3 one-pool H100 nodes, audit log on), stopped afterwards."""
    try:
        cluster = Cluster.start(ClusterConfig(pools=[replace(H100, name=POOL, count=3)], die_with_parent=True,
                                              pod_cidr=worker_pod_cidr(),
                                              audit=True, startup_timeout=240,
                                              extra_apiserver_args=list(extra_apiserver_args or [])))
    except BinariesMissing as exc:
        if _skip_allowed():
            pytest.skip(str(exc))
        pytest.fail(f"{exc}. Set WARMSCALE_ALLOW_SKIP_CLUSTER=1 to skip outside CI.", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
        out = os.environ.get("WARMSCALE_FAULTS_REPORT")
        if out and RECORDS:
            path = Path(out)
            old = json.loads(path.read_text()) if path.exists() else {}
            path.write_text(json.dumps({**old, **RECORDS}, indent=2, sort_keys=True))


def record(name: str, **values: Any) -> None:
    RECORDS[name] = values
    print(f"[faults] {name}: {json.dumps(values, sort_keys=True)}")


async def poll(pred: Callable[[], Awaitable[Any]], within: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + within
    while True:
        try:
            v = await pred()
        except ApiException as exc:
            if exc.status not in (404, 409, 500, 503, 504):
                raise
            v = None
        except (TimeoutError, OSError):
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within:.0f}s waiting for {what}", pytrace=False)
        await asyncio.sleep(interval)


async def apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    """Server-side apply of the kinds the RBAC and policy generators produce."""
    kind, meta = obj["kind"], obj["metadata"]
    name, ns = meta["name"], meta.get("namespace")
    core, rb = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    adm = client.AdmissionregistrationV1Api(api)
    kw = {"field_manager": "faults", "force": True, "_content_type": APPLY}
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "ServiceAccount": lambda: core.patch_namespaced_service_account(name, ns, obj, **kw),
        "ClusterRole": lambda: rb.patch_cluster_role(name, obj, **kw),
        "ClusterRoleBinding": lambda: rb.patch_cluster_role_binding(name, obj, **kw),
        "Role": lambda: rb.patch_namespaced_role(name, ns, obj, **kw),
        "RoleBinding": lambda: rb.patch_namespaced_role_binding(name, ns, obj, **kw),
        "ValidatingAdmissionPolicy": lambda: adm.patch_validating_admission_policy(name, obj, **kw),
        "ValidatingAdmissionPolicyBinding": lambda: adm.patch_validating_admission_policy_binding(name, obj, **kw),
    }
    await calls[kind]()


async def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise


async def install(api: client.ApiClient, namespace: str | list[str], cluster_wide: bool = False) -> None:
    """What an install gives the controller: the generated RBAC - namespaced for ``namespace`` (one or
    several), or the cluster-wide one (SA in ``warmscale``) -, the shipped node-write policy and the
    shipped PriorityClass."""
    from warmscale.warmpool.controller import install_priority_class

    namespaces = [namespace] if isinstance(namespace, str) else list(namespace)
    await ensure_namespace(api, INSTALL_NS)
    for ns in namespaces:
        await ensure_namespace(api, ns)
    for obj in (rbac.render([], INSTALL_NS) if cluster_wide else rbac.render(namespaces, INSTALL_NS)):
        await apply(api, obj)
    import yaml

    for obj in yaml.safe_load_all((ROOT / "manifests/warmpool/admission-policy.yaml").read_text()):
        if obj:
            await apply(api, obj)
    await install_priority_class(api)


async def sa_kubeconfig(cluster: Cluster, path: Path) -> Path:
    token = await cluster.mint_token(INSTALL_NS, SA, expiration_seconds=3600)
    return cluster.write_token_kubeconfig(path, token, user=SA)


class Controller:
    """``warmscale warmpool`` as a process."""

    def __init__(self, kubeconfig: Path, namespace: str | None, log_path: Path, identity: str,
                 lease_s: float = 4.0, extra: list[str] | None = None) -> None:
        self.log_path = log_path
        self.identity = identity
        scope = ["--namespace", namespace] if namespace else []  # None: every namespace
        argv = [sys.executable, "-m", "warmscale.cli", "--log-format", "json", "warmpool",
                "--kubeconfig", str(kubeconfig), *scope, "--metrics-port", "0",
                "--resync", "2", "--stager-image", "warmscale:test", "--identity", identity,
                "--lease-duration", str(lease_s), "--renew-period", "1", *(extra or [])]
        self.out = log_path.open("ab")
        env = {k: v for k, v in os.environ.items() if k != "POD_NAMESPACE"}
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=self.out, stderr=subprocess.STDOUT,
                                     env={**env, "PYTHONUNBUFFERED": "1"})

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"message": line})
        return out

    def logged(self, text: str) -> bool:
        return any(text in json.dumps(rec) for rec in self.lines())

    def leads(self) -> bool:
        return any(r.get("msg") == "became leader" for r in self.lines())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        stop_process(self.proc, 20)
        self.out.close()
        return int(self.proc.returncode)


def gpu_deployment(name: str, replicas: int, annotations: dict[str, str], gpus: int = 1) -> dict[str, Any]:
    d = w.deployment(name, replicas, gpus=gpus, cpu="1", memory="1Gi", node_selector={"warmscale.io/pool": POOL})
    d["metadata"]["annotations"] = annotations
    return d


def statefulset(name: str, replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
    d = gpu_deployment(name, replicas, annotations)
    d["kind"] = "StatefulSet"
    d["spec"]["serviceName"] = name
    return d


def staged(seconds: str = "1s") -> dict[str, str]:
    return {P + "stage-pod-annotations": json.dumps({w.JOB_DURATION: seconds})}


async def managed(api: client.ApiClient, ns: str, role: str) -> list[client.V1Pod]:
    pods = await client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"app.kubernetes.io/managed-by=warmscale,warmscale.io/role={role}")
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


async def strip_finalizers(api: client.ApiClient, ns: str) -> None:
    apps = client.AppsV1Api(api)
    for lst in (apps.list_namespaced_deployment, apps.list_namespaced_stateful_set):
        for d in (await lst(ns)).items:
            if d.metadata.finalizers:
                patch = {"metadata": {"finalizers": None}}
                fn = apps.patch_namespaced_deployment if d.kind in (None, "Deployment") and \
                    lst == apps.list_namespaced_deployment else apps.patch_namespaced_stateful_set
                try:
                    await fn(d.metadata.name, ns, patch, _content_type="application/merge-patch+json")
                except ApiException:
                    pass


def workload_hash(kind: str, namespace: str, name: str) -> str:
    from warmscale.warmpool import objects as ob

    return ob.h(f"{kind}/{namespace}/{name}")
