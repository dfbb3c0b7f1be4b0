"""The real KEDA (operator + metrics adapter, v2.21.0) next to the local control plane.

Both run as plain processes out of cluster (built by ``.ci/build-cluster.sh`` from the
``testbed/keda`` wrapper module into ``${WARMSCALE_CACHE}/bin/keda-<version>/``):

- the six v2.21.0 CRDs (``$WARMSCALE_SHARED/reference/keda/v2.21.0``; the eventing ones are needed,
  without them the operator exits ~2 min after reporting ready) replace the older ones;
- operator <-> adapter gRPC is mutual TLS: one CA and one leaf (serverAuth + clientAuth, SANs
  localhost, 127.0.0.1 and the in-cluster names) in ``<state>/keda/certs/{ca.crt,tls.crt,tls.key}``;
  the adapter serves the aggregated API with the same leaf;
- aggregated-API routing without kube-proxy: Service ``keda/keda-metrics-apiserver`` of type
  ExternalName (``localhost``) and APIService ``v1beta1.external.metrics.k8s.io`` with the adapter's
  port and the CA as ``caBundle``;
- the HPA controller (``kube-system:horizontal-pod-autoscaler``) may get/list external metrics.

:func:`start` waits until the operator's ``/readyz`` answers and the APIService is Available; the
processes join the cluster's process list (``state.json``), so ``down`` stops them with the cluster.
:func:`stop` stops KEDA alone (APIService removed first: an APIService without a backend breaks
discovery for the garbage collector and namespace deletion).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from . import crds, pki, processes
from .binaries import BUILD_SCRIPT, REPO_ROOT, BinariesMissing, cache_root, pinned_versions

if TYPE_CHECKING:
    from .harness import Cluster

log = logging.getLogger(__name__)

NAMESPACE = "keda"
APISERVICE = "v1beta1.external.metrics.k8s.io"
SERVICE = "keda-metrics-apiserver"
HPA_ROLE = "warmscale-testbed:keda-external-metrics-reader"
PROCESS_NAMES = ("keda-operator", "keda-adapter")
PROCESS_KEY = "keda"  # its entry in the cluster's state (Cluster.info)
CRD_NAMES = (
    "scaledobjects.keda.sh",
    "scaledjobs.keda.sh",
    "triggerauthentications.keda.sh",
    "clustertriggerauthentications.keda.sh",
    "cloudeventsources.eventing.keda.sh",
    "clustercloudeventsources.eventing.keda.sh",
)


def version() -> str:
    return pinned_versions()["KEDA_VERSION"]


@dataclass(frozen=True)
class KedaBinaries:
    operator: Path
    adapter: Path

    @classmethod
    def expected(cls, root: Path | None = None) -> KedaBinaries:
        d = (root or cache_root()) / "bin" / f"keda-{version()}"
        return cls(d / "keda-operator", d / "keda-adapter")

    def missing(self) -> list[Path]:
        return [p for p in (self.operator, self.adapter) if not os.access(p, os.X_OK)]


def locate(build: bool = False) -> KedaBinaries:
    """The cached KEDA binaries (built first when ``build``); :class:`BinariesMissing` otherwise."""
    binaries = KedaBinaries.expected()
    if binaries.missing() and build:
        from .binaries import run_build_script

        log.info("building KEDA (first time ~10 min on 2 cores)", extra={"script": str(BUILD_SCRIPT)})
        run_build_script(["--keda-only"])
    missing = binaries.missing()
    if missing:
        raise BinariesMissing(
            "KEDA binaries missing: " + ", ".join(str(p) for p in missing)
            + f" (build them with: bash {BUILD_SCRIPT.relative_to(REPO_ROOT)}; ~10 min the first time)"
        )
    return binaries


def crd_dir() -> Path:
    return crds.keda_crd_dir() / version()


@dataclass(frozen=True)
class KedaPorts:
    operator_grpc: int
    operator_metrics: int
    operator_health: int
    adapter: int
    adapter_metrics: int

    @classmethod
    def allocate(cls) -> KedaPorts:
        ports: list[int] = []
        while len(ports) < 5:
            p = processes.free_port()
            if p not in ports:
                ports.append(p)
        return cls(*ports)


def make_certs(directory: Path) -> pki.CertPair:
    """``ca.crt``, ``tls.crt``, ``tls.key`` as both KEDA processes load them from ``--cert-dir``."""
    ca = pki.make_ca(directory, "ca", "warmscale-testbed-keda-ca")
    names = tuple(
        f"{base}{suffix}"
        for base in ("keda-operator", "keda-metrics-apiserver")
        for suffix in ("", ".keda", ".keda.svc", ".keda.svc.cluster.local")
    )
    pki.issue_leaf(directory, "tls", ca, "keda", dns=("localhost", *names), ips=("127.0.0.1",))
    return ca


def _env(kubeconfig: Path) -> dict[str, str]:
    return {
        "WATCH_NAMESPACE": "",
        "POD_NAMESPACE": NAMESPACE,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
        "KUBECONFIG": str(kubeconfig),
    }


def operator_args(b: KedaBinaries, kc: Path, certs: Path, ports: KedaPorts) -> list[str]:
    return [
        str(b.operator),
        f"--kubeconfig={kc}",
        f"--cert-dir={certs}",
        f"--metrics-service-bind-address=127.0.0.1:{ports.operator_grpc}",
        f"--metrics-bind-address=127.0.0.1:{ports.operator_metrics}",
        f"--health-probe-bind-address=127.0.0.1:{ports.operator_health}",
        "--leader-elect=false",
        "--enable-cert-rotation=false",
    ]


def adapter_args(b: KedaBinaries, kc: Path, certs: Path, ports: KedaPorts) -> list[str]:
    return [
        str(b.adapter),
        f"--kubeconfig={kc}",
        f"--lister-kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        f"--secure-port={ports.adapter}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={certs}",
        f"--tls-cert-file={certs / 'tls.crt'}",
        f"--tls-private-key-file={certs / 'tls.key'}",
        f"--metrics-service-address=127.0.0.1:{ports.operator_grpc}",
        f"--port={ports.adapter_metrics}",
    ]


def running(cluster: Cluster) -> bool:
    names = {p.name for p in cluster.processes if p.alive()}
    return all(n in names for n in PROCESS_NAMES)


def start(
    cluster: Cluster, *, die_with_parent: bool = False, within: float = 120.0, build: bool = False
) -> dict[str, Any]:
    """Start KEDA next to ``cluster`` (idempotent: returns the running one's info)."""
    from .harness import run_sync

    if running(cluster) and "keda" in cluster.info:
        return dict(cluster.info["keda"])
    if cluster.state_dir is None:
        raise RuntimeError("KEDA needs a cluster with a state directory (started or attached, not kubeconfig-only)")
    binaries = locate(build=build)
    t0 = time.monotonic()
    state = cluster.state_dir / "keda"
    certs = state / "certs"
    make_certs(certs)
    ports = KedaPorts.allocate()
    logs = cluster.state_dir / "logs"
    marks: dict[str, float] = {}
    run_sync(lambda: _install(cluster, ports, certs, within))
    marks["crds_rbac"] = time.monotonic() - t0
    handles: list[processes.ProcessHandle] = []
    try:
        env = _env(cluster.kubeconfig)
        op = processes.start("keda-operator", operator_args(binaries, cluster.kubeconfig, certs, ports), logs,
                             die_with_parent=die_with_parent, env=env)
        handles.append(op)
        ad = processes.start("keda-adapter", adapter_args(binaries, cluster.kubeconfig, certs, ports), logs,
                             die_with_parent=die_with_parent, env=env)
        handles.append(ad)
        cluster.processes.extend(handles)
        cluster.info["keda"] = {"version": version(), "ports": ports.__dict__, "certs": str(certs)}
        cluster._write_state()
        deadline = time.monotonic() + within
        processes.wait_http(op, f"http://127.0.0.1:{ports.operator_health}/readyz", deadline)
        marks["operator_ready"] = time.monotonic() - t0
        run_sync(lambda: _wait_apiservice(cluster, handles, deadline))
        marks["apiservice_available"] = time.monotonic() - t0
    except BaseException:
        for h in reversed(handles):
            h.stop(timeout=3)
        cluster.processes[:] = [p for p in cluster.processes if p not in handles]
        cluster.info.pop("keda", None)
        cluster._write_state()
        raise
    cluster.info["keda"]["startup_marks"] = {k: round(v, 2) for k, v in marks.items()}
    cluster._write_state()
    log.info("KEDA ready", extra={"version": version(), "seconds": round(time.monotonic() - t0, 2)})
    return dict(cluster.info["keda"])


def stop(cluster: Cluster) -> None:
    """Stop KEDA only (the cluster keeps running): APIService first, then the processes."""
    from .harness import run_sync

    if cluster.healthy(within=2):
        run_sync(lambda: _delete_apiservice(cluster))
    for p in reversed(cluster.processes):
        if p.name in PROCESS_NAMES:
            p.stop()
    keep = [p for p in cluster.processes if p.name not in PROCESS_NAMES]
    cluster.processes[:] = keep
    cluster.info.pop("keda", None)
    if cluster.state_dir is not None:
        cluster._write_state()


async def _install(cluster: Cluster, ports: KedaPorts, certs: Path, within: float) -> None:
    ca_bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    async with cluster.admin_client() as api:
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        await _apply(core.create_namespace, None, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": NAMESPACE}})
        await crds.install(api, crds.load_crds(crd_dir()), within)
        await _apply(rbac.create_cluster_role, rbac.replace_cluster_role, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": HPA_ROLE},
            "rules": [{"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list"]}],
        })
        await _apply(rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": HPA_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HPA_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}],
        })
        svc = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost",
                     "ports": [{"name": "https", "port": ports.adapter, "protocol": "TCP"}]},
        }
        try:
            await core.delete_namespaced_service(SERVICE, NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise
        await core.create_namespaced_service(NAMESPACE, svc)
        reg = client.ApiregistrationV1Api(api)
        apiservice = {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1",
                     "service": {"name": SERVICE, "namespace": NAMESPACE, "port": ports.adapter},
                     "caBundle": ca_bundle, "groupPriorityMinimum": 100, "versionPriority": 100},
        }
        await _apply(reg.create_api_service, reg.replace_api_service, apiservice)


async def _apply(create: Any, replace: Any, body: dict[str, Any]) -> None:
    ns = body["metadata"].get("namespace")
    try:
        await (create(ns, body) if ns else create(body))
    except ApiException as exc:
        if exc.status != 409:
            raise
        if replace is None:
            return
        name = body["metadata"]["name"]
        read = getattr(replace.__self__, replace.__name__.replace("replace_", "read_"))
        current = await (read(name, ns) if ns else read(name))
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}}
        await (replace(name, ns, body) if ns else replace(name, body))


async def apiservice_available(api: client.ApiClient) -> tuple[bool, str]:
    try:
        obj = await client.ApiregistrationV1Api(api).read_api_service(APISERVICE)
    except ApiException as exc:
        return False, f"{exc.status} {exc.reason}"
    for c in (obj.status.conditions if obj.status else None) or []:
        if c.type == "Available":
            return c.status == "True", f"{c.reason}: {c.message or ''}".strip()
    return False, "no Available condition yet"


async def _wait_apiservice(cluster: Cluster, handles: list[processes.ProcessHandle], deadline: float) -> None:
    last = ""
    async with cluster.admin_client() as api:
        while time.monotonic() < deadline:
            for h in handles:
                if not h.alive():
                    raise RuntimeError(f"{h.name} exited during startup:\n{h.log_tail(30)}")
            ok, last = await apiservice_available(api)
            if ok:
                return
            await asyncio.sleep(0.5)
    raise TimeoutError(f"APIService {APISERVICE} not Available: {last}")


async def _delete_apiservice(cluster: Cluster) -> None:
    async with cluster.admin_client() as api:
        try:
            await client.ApiregistrationV1Api(api).delete_api_service(APISERVICE)
        except ApiException as exc:
            if exc.status != 404:
                raise


def status(cluster: Cluster) -> dict[str, Any] | None:
    """KEDA's part of ``python -m tests.cluster status`` (None when KEDA was not started)."""
    from .harness import run_sync

    info = cluster.info.get("keda")
    if info is None:
        return None
    procs = {p.name: p for p in cluster.processes if p.name in PROCESS_NAMES}
    out: dict[str, Any] = {"version": info.get("version"), "ports": info.get("ports"),
                           "startup_marks": info.get("startup_marks")}
    health = info.get("ports", {}).get("operator_health")
    out["operator_ready"] = False
    if health and procs.get("keda-operator") and procs["keda-operator"].alive():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as resp:
                out["operator_ready"] = resp.status == 200
        except (urllib.error.URLError, OSError):
            pass

    async def check() -> tuple[bool, str]:
        async with cluster.admin_client() as api:
            return await apiservice_available(api)

    try:
        out["apiservice_available"], out["apiservice_message"] = run_sync(check)
    except (OSError, ApiException, ssl.SSLError) as exc:
        out["apiservice_available"], out["apiservice_message"] = False, str(exc)
    out["healthy"] = bool(out["operator_ready"] and out["apiservice_available"])
    return out
