"""Every manifest applies to the local cluster (server-side apply, KEDA CRDs installed), the examples
pass the real ScaledObject schema, and the components' RBAC allows their job and nothing more, checked
with each component's own ServiceAccount token."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.cluster.fixtures import wait_for
from warmscale.localcluster import crds, kuberay, kueue
from warmscale.localcluster.harness import Cluster

from .helpers import INSTALLS, kubectl, render

# One install for the module (applying and deleting it takes a while), on a module-scoped loop.
pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="module")]

INSTALL_NS, EXAMPLE_NS, KEDA_NS = "warmscale", "llm", "keda"
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}  # their CRDs are not in the test cluster


def apply(cluster: Cluster, objs: list[dict[str, Any]], *, dry_run: bool = False) -> str:
    cmd = [kubectl(), "--kubeconfig", str(cluster.kubeconfig), "apply", "--server-side",
           "--field-manager=warmscale-install", "--force-conflicts", "-f", "-"]
    if dry_run:
        cmd.append("--dry-run=server")
    out = subprocess.run(cmd, input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"server-side apply failed:\n{out.stderr}\n{out.stdout}"
    return out.stdout


async def _delete_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        await core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def installed(k8s_cluster: Cluster) -> AsyncIterator[Cluster]:
    """The default install and every example applied; removed afterwards (the PriorityClass stays:
    other suites' controllers use it)."""
    async with k8s_cluster.admin_client() as admin:
        async for cluster in _installed(k8s_cluster, admin):
            yield cluster


@pytest_asyncio.fixture(loop_scope="module")
async def admin(installed: Cluster) -> AsyncIterator[client.ApiClient]:
    async with installed.admin_client() as api:
        yield api


async def _installed(k8s_cluster: Cluster, k8s_admin: client.ApiClient) -> AsyncIterator[Cluster]:
    core = client.CoreV1Api(k8s_admin)
    for ns in (INSTALL_NS, EXAMPLE_NS):  # left over by an interrupted run
        await _delete_namespace(core, ns)
        await wait_for(lambda ns=ns: _gone(core, ns), within=90, what=f"namespace {ns} deleted")
    await ensure_keda_namespace(core)
    apply(k8s_cluster, render("manifests"))
    await kuberay.install_crds(k8s_admin)  # the rayservice example (KubeRay's CRDs, from its module)
    # the vllm-kueue example's queues (Kueue's CRDs, from the module pinned in testbed/kueue)
    await crds.install(k8s_admin, crds.load_crds(await asyncio.to_thread(kueue.crd_dir)))
    apply(k8s_cluster, render("manifests/examples"))
    try:
        yield k8s_cluster
    finally:
        await _delete_namespace(core, EXAMPLE_NS)
        await _delete_namespace(core, INSTALL_NS)
        await uninstall_cluster_objects(k8s_admin)
        await _delete_kueue_cluster_objects(k8s_admin, render("manifests/examples"))


async def _delete_kueue_cluster_objects(api: client.ApiClient, objs: list[dict[str, Any]]) -> None:
    """The vllm-kueue example's cluster-scoped queue objects (ClusterQueue, ResourceFlavor, ...)."""
    custom = client.CustomObjectsApi(api)
    for o in objs:
        if o["apiVersion"] == "/".join(kueue.KUEUE_API) and "namespace" not in o["metadata"]:
            plural = kueue.plural(o["kind"])
            try:
                await custom.delete_cluster_custom_object(*kueue.KUEUE_API, plural, o["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 404:
                    raise


async def ensure_keda_namespace(core: client.CoreV1Api) -> None:
    """KEDA's namespace, as KEDA's own install creates it (a prerequisite of the install)."""
    try:
        await core.create_namespace({"metadata": {"name": KEDA_NS}})
    except ApiException as exc:
        if exc.status != 409:
            raise


async def uninstall_cluster_objects(api: client.ApiClient) -> None:
    """What the install put outside its namespace (KEDA's namespace itself stays)."""
    rbac = client.RbacAuthorizationV1Api(api)
    calls: list[Awaitable[Any]] = []
    for name in ("warmscale-scaler", "warmscale-warmpool", "warmscale-warmpool-webhook"):
        calls += [rbac.delete_cluster_role(name), rbac.delete_cluster_role_binding(name)]
    calls += [rbac.delete_namespaced_role("warmscale-keda-client-cert", KEDA_NS),
              rbac.delete_namespaced_role_binding("warmscale-keda-client-cert", KEDA_NS),
              client.CoreV1Api(api).delete_namespaced_secret("warmscale-keda-client-tls", KEDA_NS),
              client.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration("warmscale-webhook"),
              client.AdmissionregistrationV1Api(api).delete_validating_admission_policy(
                  "warmscale-warmpool-node-writes"),
              client.AdmissionregistrationV1Api(api).delete_validating_admission_policy_binding(
                  "warmscale-warmpool-node-writes"),
              client.CustomObjectsApi(api).delete_cluster_custom_object(
                  "keda.sh", "v1alpha1", "clustertriggerauthentications", "warmscale-mtls")]
    for call in calls:
        try:
            await call
        except ApiException as exc:
            if exc.status != 404:
                raise


async def _gone(core: client.CoreV1Api, ns: str) -> bool:
    try:
        await core.read_namespace(ns)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


async def status(call: Awaitable[Any]) -> int:
    try:
        await call
    except ApiException as exc:
        return int(exc.status)
    return 200


async def can(api: client.ApiClient, verb: str, resource: str, namespace: str | None = None, group: str = "",
              subresource: str | None = None, name: str | None = None) -> bool:
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, group=group, name=name,
                                                        namespace=namespace, subresource=subresource)))
    res = await client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(res.status.allowed)


async def test_install_and_examples_apply(admin: client.ApiClient) -> None:
    k8s_admin = admin
    apps = client.AppsV1Api(k8s_admin)
    core = client.CoreV1Api(k8s_admin)
    custom = client.CustomObjectsApi(k8s_admin)
    scaler = await apps.read_namespaced_deployment("warmscale-scaler", INSTALL_NS)
    assert scaler.spec.replicas == 2
    pc = await client.SchedulingV1Api(k8s_admin).read_priority_class("warmscale-placeholder")
    assert pc.value == -5 and pc.preemption_policy == "Never"
    # The ScaledObjects passed KEDA's CRD schema and kept every field (nothing pruned).
    for so in [o for o in render("manifests/examples") if o["kind"] == "ScaledObject"]:
        stored = await custom.get_namespaced_custom_object("keda.sh", "v1alpha1", EXAMPLE_NS, "scaledobjects",
                                                           so["metadata"]["name"])
        assert stored["spec"] == so["spec"]
    ta = await custom.get_cluster_custom_object("keda.sh", "v1alpha1", "clustertriggerauthentications",
                                                "warmscale-mtls")
    assert len(ta["spec"]["secretTargetRef"]) == 3
    hook = await client.AdmissionregistrationV1Api(k8s_admin).read_mutating_webhook_configuration("warmscale-webhook")
    assert hook.webhooks[0].failure_policy == "Ignore"

    # The pod security admission of the namespace (restricted) admits the install's pods.
    async def pods_created() -> bool:
        pods = await core.list_namespaced_pod(INSTALL_NS)
        names = [p.metadata.name for p in pods.items]
        return sum(n.startswith("warmscale-scaler-") for n in names) == 2 and \
            sum(n.startswith("warmscale-controller-") for n in names) == 2 and "warmscale-redis-0" in names
    await wait_for(pods_created, within=60, what="scaler, controller and redis pods admitted")


async def test_overlays_apply(installed: Cluster) -> None:
    for path in INSTALLS[1:]:
        objs = [o for o in render(path) if o["kind"] not in OPERATOR_KINDS]
        apply(installed, objs, dry_run=True)


async def test_scaler_rbac_with_its_token(installed: Cluster) -> None:
    token = await installed.mint_token(INSTALL_NS, "warmscale-scaler")
    api = installed.token_client(token)
    try:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        custom = client.CustomObjectsApi(api)
        # Its job, in a namespace it watches.
        assert await status(core.list_namespaced_pod(EXAMPLE_NS)) == 200
        assert await status(apps.read_namespaced_deployment("vllm-llama", EXAMPLE_NS)) == 200
        assert await status(apps.list_namespaced_stateful_set(EXAMPLE_NS)) == 200
        assert await status(custom.get_namespaced_custom_object("keda.sh", "v1alpha1", EXAMPLE_NS, "scaledobjects",
                                                                "vllm-llama")) == 200
        for verb in ("watch", "list", "get"):
            assert await can(api, verb, "pods", EXAMPLE_NS)
        # Cluster-wide only: get on nodes (their GPU product label), not list or watch.
        assert await status(core.read_node("no-such-node")) == 404
        assert await can(api, "get", "nodes")
        assert not await can(api, "list", "nodes") and not await can(api, "watch", "nodes")
        # Nothing more: no writes, no Secrets, no other namespaces, nothing else cluster-wide.
        assert await status(core.list_namespaced_secret(EXAMPLE_NS)) == 403
        assert await status(core.list_namespaced_pod("default")) == 403
        assert await status(core.list_pod_for_all_namespaces()) == 403
        assert await status(core.list_node()) == 403
        assert await status(apps.patch_namespaced_deployment(
            "vllm-llama", EXAMPLE_NS, {"metadata": {"labels": {"x": "y"}}})) == 403
        assert await status(core.delete_namespaced_pod("nope", EXAMPLE_NS)) == 403
        assert not await can(api, "update", "scaledobjects", EXAMPLE_NS, group="keda.sh")
        assert not await can(api, "create", "leases", INSTALL_NS, group="coordination.k8s.io")
        assert not await can(api, "get", "configmaps", EXAMPLE_NS)
        # Its one write: an Event on a ScaledObject it refuses for size (docs/scaler.md, "Memory bounds").
        assert await can(api, "create", "events", EXAMPLE_NS)
        assert not await can(api, "update", "events", EXAMPLE_NS) and not await can(api, "delete", "events", EXAMPLE_NS)
        assert not await can(api, "create", "events", "default")
    finally:
        await api.close()


async def test_controller_rbac_with_its_token(installed: Cluster) -> None:
    token = await installed.mint_token(INSTALL_NS, "warmscale-warmpool")
    api = installed.token_client(token)
    try:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        batch, coord = client.BatchV1Api(api), client.CoordinationV1Api(api)
        custom = client.CustomObjectsApi(api)
        # Watch workloads and nodes everywhere; status annotation on a workload.
        assert await status(apps.list_deployment_for_all_namespaces()) == 200
        assert await status(apps.list_stateful_set_for_all_namespaces()) == 200
        assert await status(core.list_node()) == 200
        assert await status(apps.patch_namespaced_deployment(
            "vllm-llama", EXAMPLE_NS, {"metadata": {"annotations": {"warmscale.io/status": "{}"}}})) == 200
        # Placeholder / pre-pull pods and staging Jobs in the workload's namespace.
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rbac-probe"},
               "spec": {"priorityClassName": "warmscale-placeholder",
                        "containers": [{"name": "hold", "image": "registry.k8s.io/pause:3.10"}]}}
        assert await status(core.create_namespaced_pod(EXAMPLE_NS, pod)) == 200
        assert await status(core.delete_namespaced_pod("rbac-probe", EXAMPLE_NS)) == 200
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rbac-probe"},
               "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                   {"name": "stage", "image": "warmscale:0.1.0", "command": ["true"]}]}}}}
        assert await status(batch.create_namespaced_job(EXAMPLE_NS, job)) == 200
        assert await status(batch.delete_namespaced_job("rbac-probe", EXAMPLE_NS)) == 200
        # Owned ScaledObjects, Events, its leader Lease.
        assert await status(custom.get_namespaced_custom_object(
            "keda.sh", "v1alpha1", EXAMPLE_NS, "scaledobjects", "vllm-llama")) == 200
        for verb in ("create", "patch", "delete"):
            assert await can(api, verb, "scaledobjects", EXAMPLE_NS, group="keda.sh")
        assert await can(api, "create", "events", EXAMPLE_NS)
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "rbac-probe"},
                 "spec": {"holderIdentity": "x", "leaseDurationSeconds": 15}}
        assert await status(coord.create_namespaced_lease(INSTALL_NS, lease)) == 200
        assert await can(api, "update", "leases", INSTALL_NS, group="coordination.k8s.io", name="warmscale-warmpool")
        assert not await can(api, "update", "leases", INSTALL_NS, group="coordination.k8s.io", name="kube-scheduler")
        assert await can(api, "patch", "nodes")
        # Its certificate Secrets by name (create only in its own and KEDA's namespace), the webhook's caBundle.
        for ns, name in ((INSTALL_NS, "warmscale-ca"), (INSTALL_NS, "warmscale-webhook-tls"),
                         (INSTALL_NS, "warmscale-scaler-tls"), (KEDA_NS, "warmscale-keda-client-tls")):
            for verb in ("get", "update"):
                assert await can(api, verb, "secrets", ns, name=name)
            assert await can(api, "create", "secrets", ns)
        assert not await can(api, "get", "secrets", INSTALL_NS, name="warmscale-redis")
        assert not await can(api, "get", "secrets", KEDA_NS, name="keda-operator-certs")
        assert not await can(api, "create", "secrets", EXAMPLE_NS)
        assert await can(api, "patch", "mutatingwebhookconfigurations", group="admissionregistration.k8s.io",
                         name="warmscale-webhook")
        assert not await can(api, "patch", "mutatingwebhookconfigurations", group="admissionregistration.k8s.io",
                             name="other")
        # Nothing more.
        assert await status(core.list_namespaced_secret(EXAMPLE_NS)) == 403
        assert await status(core.list_namespaced_secret(INSTALL_NS)) == 403
        assert await status(core.list_secret_for_all_namespaces()) == 403
        assert await status(coord.create_namespaced_lease(EXAMPLE_NS, lease)) == 403
        assert await status(core.list_namespaced_config_map(INSTALL_NS)) == 403
        assert not await can(api, "delete", "nodes")
        assert not await can(api, "create", "deployments", EXAMPLE_NS, group="apps")
        assert not await can(api, "delete", "deployments", EXAMPLE_NS, group="apps")
        assert not await can(api, "create", "pods", EXAMPLE_NS, subresource="exec")
        assert not await can(api, "create", "clusterrolebindings", group="rbac.authorization.k8s.io")
        assert not await can(api, "delete", "priorityclasses", group="scheduling.k8s.io")
    finally:
        await api.close()
