"""The real Kueue controller (v0.19.2) next to the local control plane.

It runs as a plain process out of cluster (built by ``.ci/build-cluster.sh`` from the
``testbed/kueue`` wrapper module into ``${WARMSCALE_CACHE}/bin/kueue-<version>/kueue``). Nothing of
Kueue is committed: its CRDs (``config/components/crd/bases``) and its webhook configurations
(``config/components/webhook/manifests.yaml``) are read at run time from the same module's directory
in the Go module cache.

- configuration ``config.kueue.x-k8s.io/v1beta2``: integrations ``batch/job`` (KEDA ScaledJobs),
  ``pod``, ``deployment``, ``statefulset`` and ``leaderworkerset.x-k8s.io/leaderworkerset``; leader
  election off; health, metrics and webhook on free loopback ports; the visibility API server off;
- webhooks: Kueue's internal cert management (its CA and leaf in Secret
  ``kueue-system/kueue-webhook-server-cert``, SAN ``kueue-webhook-service.kueue-system.svc``, the name
  the API server checks; the Secret's files copied to ``<state>/kueue/certs``, as a mounted Secret
  volume would have them, which the rotator waits for; the CA injected into the webhook
  configurations and the conversion webhooks of five CRDs, which get the clientConfig Kueue's own
  kustomization patches in). Without it Kueue insists on metrics certificates at the fixed path
  ``/etc/kueue/metrics/certs``. The webhook server listens on loopback, reached through Service
  ``kueue-system/kueue-webhook-service`` of type ExternalName (``localhost``; the API server dials the
  port the webhook configuration names). Only the webhooks
  of the enabled integrations and of Kueue's own kinds are installed (a webhook of a disabled
  integration answers 404, which ``failurePolicy: Fail`` turns into a refused object);
- Kueue manages only namespaces labelled :data:`MANAGED_NAMESPACE_LABEL` (its
  ``managedJobsNamespaceSelector`` and the namespace selector of the workload webhooks), so the rest
  of a shared ``up`` cluster never goes through it.

:func:`start` returns when Kueue's ``/readyz`` answers and a server-side dry run of a ResourceFlavor
passes its webhook; the process joins the cluster's process list (``state.json``), so ``down`` stops
it with the cluster. :func:`stop` removes the webhook configurations first, then the process.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from . import crds, processes
from .binaries import BUILD_SCRIPT, REPO_ROOT, BinariesMissing, cache_root, pinned_versions

if TYPE_CHECKING:
    from .harness import Cluster

log = logging.getLogger(__name__)

MODULE = "sigs.k8s.io/kueue"
WRAPPER = REPO_ROOT / "testbed" / "kueue"
NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"  # Kueue's internal cert management keeps its CA and leaf here
# The CRDs whose conversion webhook Kueue's cert rotator injects its CA into (pkg/util/cert): it needs a
# conversion.webhook.clientConfig on each, as Kueue's own kustomization patches in.
CONVERSION_CRDS = ("localqueues.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io",
                   "cohorts.kueue.x-k8s.io", "multikueueclusters.kueue.x-k8s.io")
PROCESS_NAME = "kueue"
PROCESS_KEY = "kueue"  # its entry in the cluster's state (Cluster.info)
MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"
# Namespaces Kueue manages in the testbed (label value "true"): the tests label theirs.
MANAGED_NAMESPACE_LABEL = "warmscale.io/kueue-testbed"
FRAMEWORKS = ("batch/job", "pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset")
# Webhook paths of those integrations (controller-gen names them /mutate-<group>-<version>-<kind>);
# Kueue's own kinds are those with "kueue-x-k8s-io" in the path.
FRAMEWORK_PATHS = ("-batch-v1-job", "--v1-pod", "-apps-v1-deployment", "-apps-v1-statefulset",
                   "-leaderworkerset-x-k8s-io-v1-leaderworkerset")
KUEUE_API = ("kueue.x-k8s.io", "v1beta2")


def plural(kind: str) -> str:
    """The resource name of a Kueue kind (ClusterQueue -> clusterqueues, WorkloadPriorityClass ->
    workloadpriorityclasses), for deleting the objects an example applied."""
    return kind.lower() + ("es" if kind.endswith("s") else "s")


def version() -> str:
    return pinned_versions()["KUEUE_VERSION"]


def binary(root: Path | None = None) -> Path:
    return (root or cache_root()) / "bin" / f"kueue-{version()}" / "kueue"


def locate(build: bool = False) -> Path:
    """The cached Kueue binary (built first when ``build``); :class:`BinariesMissing` otherwise."""
    path = binary()
    if not os.access(path, os.X_OK) and build:
        from .binaries import run_build_script

        log.info("building Kueue", extra={"script": str(BUILD_SCRIPT)})
        run_build_script(["--kueue-only"])
    if not os.access(path, os.X_OK):
        raise BinariesMissing(f"Kueue binary missing: {path} (build it with: bash "
                              f"{BUILD_SCRIPT.relative_to(REPO_ROOT)} --kueue-only)")
    return path


def module_dir() -> Path:
    """Kueue's module directory in the Go module cache (the version ``testbed/kueue/go.mod`` pins)."""
    return crds.go_module_dir(MODULE, WRAPPER)


def crd_dir(module: Path | None = None) -> Path:
    return (module or module_dir()) / "config" / "components" / "crd" / "bases"


@dataclass(frozen=True)
class KueuePorts:
    webhook: int
    metrics: int
    health: int

    @classmethod
    def allocate(cls) -> KueuePorts:
        ports: list[int] = []
        while len(ports) < 3:
            p = processes.free_port()
            if p not in ports:
                ports.append(p)
        return cls(*ports)


def configuration(ports: KueuePorts, certs: Path) -> dict[str, Any]:
    """Kueue's ``--config`` (config.kueue.x-k8s.io/v1beta2)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"port": ports.webhook, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE, "webhookSecretName": SECRET},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def webhook_configurations(module: Path, port: int) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfiguration, kept to the enabled integrations and Kueue's own
    kinds, pointed at :data:`SERVICE` on ``port`` (Kueue's cert rotator fills in the CA)."""
    docs = list(yaml.safe_load_all((module / "config" / "components" / "webhook" / "manifests.yaml").read_text()))
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in ("MutatingWebhookConfiguration",
                                                                "ValidatingWebhookConfiguration"):
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"].get("path", "")
            own = "kueue-x-k8s-io" in path
            if not own and not any(path.endswith(p) for p in FRAMEWORK_PATHS):
                continue
            hook["clientConfig"] = {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": port}}
            if not own:
                hook["namespaceSelector"] = {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}
            hook["timeoutSeconds"] = 10
            kept.append(hook)
        mutating = doc["kind"] == "MutatingWebhookConfiguration"
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": doc["kind"],
                    "metadata": {"name": MUTATING if mutating else VALIDATING}, "webhooks": kept})
    return out


def crds_for(module: Path, port: int) -> list[dict[str, Any]]:
    """Kueue's CRDs; those of :data:`CONVERSION_CRDS` with their conversion webhook on :data:`SERVICE`."""
    out = crds.load_crds(crd_dir(module))
    for crd in out:
        if crd["metadata"]["name"] in CONVERSION_CRDS:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": "/convert",
                                             "port": port}}}}
    return out


def running(cluster: Cluster) -> bool:
    return any(p.name == PROCESS_NAME and p.alive() for p in cluster.processes)


def start(cluster: Cluster, *, die_with_parent: bool = False, within: float = 120.0,
          build: bool = False) -> dict[str, Any]:
    """Start Kueue next to ``cluster`` (idempotent: returns the running one's info)."""
    from .harness import run_sync

    if running(cluster) and "kueue" in cluster.info:
        return dict(cluster.info["kueue"])
    if cluster.state_dir is None:
        raise RuntimeError("Kueue needs a cluster with a state directory (started or attached, not kubeconfig-only)")
    path = locate(build=build)
    t0 = time.monotonic()
    state = cluster.state_dir / "kueue"
    certs = state / "certs"  # Kueue's cert rotator writes the webhook's leaf here
    certs.mkdir(parents=True, exist_ok=True)
    ports = KueuePorts.allocate()
    config = state / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(ports, certs), sort_keys=False))
    module = module_dir()
    marks: dict[str, float] = {}
    run_sync(lambda: _install(cluster, module, ports, within))
    marks["crds_webhooks"] = time.monotonic() - t0
    handle = processes.start(PROCESS_NAME, [str(path), f"--config={config}", f"--kubeconfig={cluster.kubeconfig}"],
                             cluster.state_dir / "logs", die_with_parent=die_with_parent)
    cluster.processes.append(handle)
    cluster.info["kueue"] = {"version": version(), "ports": ports.__dict__, "certs": str(certs),
                             "managed_namespace_label": MANAGED_NAMESPACE_LABEL}
    cluster._write_state()
    try:
        deadline = time.monotonic() + within
        run_sync(lambda: _mount_certs(cluster, handle, certs, deadline))
        marks["certs"] = time.monotonic() - t0
        processes.wait_http(handle, f"http://127.0.0.1:{ports.health}/readyz", deadline)
        marks["ready"] = time.monotonic() - t0
        run_sync(lambda: _wait_webhook(cluster, handle, deadline))
        marks["webhook"] = time.monotonic() - t0
    except BaseException:
        stop(cluster)
        raise
    cluster.info["kueue"]["startup_marks"] = {k: round(v, 2) for k, v in marks.items()}
    cluster._write_state()
    log.info("Kueue ready", extra={"version": version(), "seconds": round(time.monotonic() - t0, 2)})
    return dict(cluster.info["kueue"])


def stop(cluster: Cluster) -> None:
    """Stop Kueue only (the cluster keeps running): webhook configurations first, then the process."""
    from .harness import run_sync

    if cluster.healthy(within=2):
        run_sync(lambda: _delete_webhooks(cluster))
    for p in cluster.processes:
        if p.name == PROCESS_NAME:
            p.stop()
    cluster.processes[:] = [p for p in cluster.processes if p.name != PROCESS_NAME]
    cluster.info.pop("kueue", None)
    if cluster.state_dir is not None:
        cluster._write_state()


def status(cluster: Cluster) -> dict[str, Any] | None:
    """Kueue's part of ``python -m tests.cluster status`` (None when Kueue was not started)."""
    info = cluster.info.get("kueue")
    if info is None:
        return None
    ready = False
    health = (info.get("ports") or {}).get("health")
    if health and running(cluster):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as resp:
                ready = resp.status == 200
        except (urllib.error.URLError, OSError):
            pass
    return {"version": info.get("version"), "ports": info.get("ports"), "startup_marks": info.get("startup_marks"),
            "healthy": ready}


async def _mount_certs(cluster: Cluster, handle: processes.ProcessHandle, certs: Path, deadline: float) -> None:
    """What the kubelet does in cluster: Kueue's cert rotator writes its leaf into the Secret and waits until
    the Secret's files appear in ``certDir`` (a mounted Secret volume); out of cluster we write them."""
    async with cluster.admin_client() as api:
        core = client.CoreV1Api(api)
        while time.monotonic() < deadline:
            if not handle.alive():
                raise RuntimeError(f"kueue exited during startup:\n{handle.log_tail(30)}")
            data = (await core.read_namespaced_secret(SECRET, NAMESPACE)).data or {}
            if all(data.get(k) for k in ("ca.crt", "tls.crt", "tls.key")):
                for name in ("ca.crt", "tls.crt", "tls.key"):
                    tmp = certs / f".{name}.tmp"
                    tmp.write_bytes(base64.b64decode(data[name]))
                    tmp.replace(certs / name)
                return
            await asyncio.sleep(0.5)
    raise TimeoutError(f"Kueue's cert rotator wrote no certificate into Secret {NAMESPACE}/{SECRET}")


async def _wait_webhook(cluster: Cluster, handle: processes.ProcessHandle, deadline: float) -> None:
    """A server-side dry run of a ResourceFlavor goes through Kueue's webhooks: it passes once they serve."""
    body = {"apiVersion": "/".join(KUEUE_API), "kind": "ResourceFlavor", "metadata": {"name": "warmscale-probe"}}
    last = ""
    async with cluster.admin_client() as api:
        custom = client.CustomObjectsApi(api)
        while time.monotonic() < deadline:
            if not handle.alive():
                raise RuntimeError(f"kueue exited during startup:\n{handle.log_tail(30)}")
            try:
                await custom.create_cluster_custom_object(*KUEUE_API, "resourceflavors", body, dry_run="All")
                return
            except ApiException as exc:
                if exc.status == 409:
                    return
                last = f"{exc.status}: {exc.body}"
            await asyncio.sleep(0.5)
    raise TimeoutError(f"Kueue's webhooks do not serve yet: {last}\n{handle.log_tail(30)}")


async def _install(cluster: Cluster, module: Path, ports: KueuePorts, within: float) -> None:
    async with cluster.admin_client() as api:
        core = client.CoreV1Api(api)
        try:
            await core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        await crds.install(api, crds_for(module, ports.webhook), within)
        try:
            await core.create_namespaced_secret(NAMESPACE, {"apiVersion": "v1", "kind": "Secret",
                                                            "metadata": {"name": SECRET, "namespace": NAMESPACE}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        try:
            await core.delete_namespaced_service(SERVICE, NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise
        await core.create_namespaced_service(NAMESPACE, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost",
                     "ports": [{"name": "https", "port": ports.webhook, "protocol": "TCP"}]}})
        adm = client.AdmissionregistrationV1Api(api)
        await _delete_webhooks_with(adm)
        for body in webhook_configurations(module, ports.webhook):
            if body["kind"] == "MutatingWebhookConfiguration":
                await adm.create_mutating_webhook_configuration(body)
            else:
                await adm.create_validating_webhook_configuration(body)


async def _delete_webhooks_with(adm: client.AdmissionregistrationV1Api) -> None:
    for call, name in ((adm.delete_mutating_webhook_configuration, MUTATING),
                       (adm.delete_validating_webhook_configuration, VALIDATING)):
        try:
            await call(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


async def _delete_webhooks(cluster: Cluster) -> None:
    async with cluster.admin_client() as api:
        await _delete_webhooks_with(client.AdmissionregistrationV1Api(api))


# ----- test objects: a queue for one namespace -----------------------------------------------------


@dataclass(frozen=True)
class Queue:
    """A ResourceFlavor, a ClusterQueue (cluster-scoped: named after the namespace) and a LocalQueue."""

    namespace: str
    flavor: str
    cluster_queue: str
    local_queue: str


def queue_objects(q: Queue, gpus: int, *, cpu: str = "1000", memory: str = "10Ti") -> list[tuple[str, dict[str, Any]]]:
    """(plural, body) of the queue: GPU quota ``gpus``; preemption of lower priorities within the queue."""
    api_version = "/".join(KUEUE_API)
    return [
        ("resourceflavors", {"apiVersion": api_version, "kind": "ResourceFlavor", "metadata": {"name": q.flavor}}),
        ("clusterqueues", {
            "apiVersion": api_version, "kind": "ClusterQueue", "metadata": {"name": q.cluster_queue},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": q.namespace}},
                     "queueingStrategy": "BestEffortFIFO",
                     "preemption": {"withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                         "flavors": [{"name": q.flavor, "resources": [
                                             {"name": "cpu", "nominalQuota": cpu},
                                             {"name": "memory", "nominalQuota": memory},
                                             {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}),
        ("localqueues", {"apiVersion": api_version, "kind": "LocalQueue",
                         "metadata": {"name": q.local_queue, "namespace": q.namespace},
                         "spec": {"clusterQueue": q.cluster_queue}}),
    ]


async def create_queue(api: client.ApiClient, namespace: str, gpus: int, local_queue: str = "online") -> Queue:
    """Label ``namespace`` for Kueue (:data:`MANAGED_NAMESPACE_LABEL`) and create its queue."""
    q = Queue(namespace, f"{namespace}-flavor", f"{namespace}-cq", local_queue)
    await client.CoreV1Api(api).patch_namespace(
        namespace, {"metadata": {"labels": {MANAGED_NAMESPACE_LABEL: "true"}}})
    custom = client.CustomObjectsApi(api)
    for plural, body in queue_objects(q, gpus):
        if plural == "localqueues":
            await custom.create_namespaced_custom_object(*KUEUE_API, namespace, plural, body)
        else:
            await custom.create_cluster_custom_object(*KUEUE_API, plural, body)
    return q


async def delete_queue(api: client.ApiClient, q: Queue) -> None:
    """The cluster-scoped parts (the namespace's deletion takes the LocalQueue)."""
    custom = client.CustomObjectsApi(api)
    for plural, name in (("clusterqueues", q.cluster_queue), ("resourceflavors", q.flavor)):
        try:
            await custom.delete_cluster_custom_object(*KUEUE_API, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


async def workloads_by_pod(api: client.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    """Kueue Workloads of single pods in ``namespace``: pod name -> Workload."""
    wls = await client.CustomObjectsApi(api).list_namespaced_custom_object(*KUEUE_API, namespace, "workloads")
    out: dict[str, dict[str, Any]] = {}
    for wl in wls.get("items") or []:
        for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "Pod":
                out[ref["name"]] = wl
    return out


def admitted(workload: dict[str, Any]) -> str | None:
    """The ClusterQueue that admitted ``workload`` (None: not admitted)."""
    status = workload.get("status") or {}
    if not any(c.get("type") == "Admitted" and c.get("status") == "True" for c in status.get("conditions") or []):
        return None
    return str((status.get("admission") or {}).get("clusterQueue") or "") or None
