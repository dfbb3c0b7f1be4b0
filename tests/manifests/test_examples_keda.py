"""Every example directory under manifests/examples/ works as shipped: it renders, applies to the real API
server (KEDA's and the Inference Extension's CRDs installed, server-side apply), and the real KEDA
operator (v2.21.0) accepts each of its ScaledObjects: Ready=True, with an HPA, after calling a real
``warmscale scaler`` over mutual TLS through the install's own ClusterTriggerAuthentication.

One thing is changed on the way, and only in the ScaledObjects: ``scalerAddress``. KEDA runs out of
cluster here and cannot resolve ``warmscale.warmscale.svc``, so it points at the scaler process on
127.0.0.1 instead; ``authenticationRef``, ``enableTLS`` and every other key stay as shipped, so a
missing ``kind: ClusterTriggerAuthentication`` or a bad metadata key fails here. For the examples whose
ScaledObject the controller creates (``warmscale.io/autoscale: "true"``), the test builds it with the
controller's own code (``warmpool.objects.scaled_object``) from the shipped Deployment. Two more cases
hold the ScaledObjects users copy from the docs: the README's "Using the scaler" trigger (as corrected
for mutual TLS) and the migration guide's "After".
"""

from __future__ import annotations

import asyncio
import base64
import copy
import subprocess
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.localcluster import crds, keda, kuberay, kueue, pki
from warmscale.localcluster.harness import Cluster
from warmscale.localcluster.scaling import ScalerProcess, read_hpa, so_condition
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import parse_annotations
from warmscale.warmpool.controller import workload_from

from .helpers import MANIFESTS, kubectl, one, render

pytestmark = [pytest.mark.cluster, pytest.mark.keda, pytest.mark.asyncio(loop_scope="module")]

EXAMPLES = MANIFESTS / "examples"
DIRECTORIES = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
WITH_WORKLOADS = [d for d in DIRECTORIES if d != "common"]  # common: the namespace and the scaler's RoleBinding
READY_WITHIN_S = 120.0  # KEDA retries a failed GetMetricSpec with back-off (~30 s worst seen, docs/keda.md)
# Examples whose ScaledObject KEDA does not accept, with the reason the test expects. None today.
EXPECTED_FAILURES: dict[str, str] = {}
# Examples with no ScaledObject at all, and why: they only have to apply.
NO_SCALED_OBJECT = {"rayservice": "a RayService has no scale subresource: Serve's controller scales it with "
                                  "warmscale.rayserve.policy",
                    "hold-gateway": "the gateway in front of the vllm example's Deployment, whose ScaledObject is "
                                    "the vllm example's (the trigger keys to add are in its kustomization.yaml)"}


def _apply(cluster: Cluster, objs: list[dict[str, Any]]) -> None:
    out = subprocess.run([kubectl(), "--kubeconfig", str(cluster.kubeconfig), "apply", "--server-side",
                          "--field-manager=warmscale-examples", "--force-conflicts", "-f", "-"],
                         input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"server-side apply failed:\n{out.stderr}\n{out.stdout}"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class Setup:
    def __init__(self, cluster: Cluster, api: client.ApiClient, scaler: ScalerProcess) -> None:
        self.cluster, self.api, self.scaler = cluster, api, scaler


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def setup(keda_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Setup]:
    """The install's ClusterTriggerAuthentication with KEDA's client certificate in KEDA's namespace (as
    the controller writes it), a scaler serving the matching certificate, and the common example."""
    logs = tmp_path_factory.mktemp("examples-keda")
    ca = pki.make_ca(logs, "ca", "warmscale-examples-ca")
    server = pki.issue_leaf(logs, "server", ca, "warmscale", dns=("localhost",), ips=("127.0.0.1",), client=False)
    keda_client = pki.issue_leaf(logs, "keda-client", ca, "keda-operator", server=False)
    scaler = ScalerProcess(keda_cluster.kubeconfig, logs / "scaler.log", extra_args=[
        "--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.cert)]).start()
    cta = one(render("manifests"), "ClusterTriggerAuthentication", "warmscale-mtls")
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "warmscale-keda-client-tls", "namespace": keda.NAMESPACE},
              "data": {"ca.crt": _b64(ca.cert), "tls.crt": _b64(keda_client.cert), "tls.key": _b64(keda_client.key)}}
    _apply(keda_cluster, [secret, cta, *render("manifests/examples/common")])
    async with keda_cluster.admin_client() as api:
        # the LeaderWorkerSet CRD (vllm-lws): KEDA scales it through the scale subresource the API server
        # serves from the CRD alone
        await crds.install(api, crds.load_crds(crds.lws_crd_dir()))
        # Kueue's CRDs (vllm-kueue: its queues), from the Kueue module pinned in testbed/kueue
        await crds.install(api, crds.load_crds(await asyncio.to_thread(kueue.crd_dir)))
        await kuberay.install_crds(api)  # the rayservice example (no ScaledObject: Serve scales it)
        try:
            yield Setup(keda_cluster, api, scaler)
        finally:
            scaler.stop()
            custom = client.CustomObjectsApi(api)
            for d in [*WITH_WORKLOADS, README, MIGRATION]:
                for o in _objects(d, scaler.address):
                    await _delete(api, custom, o)


def _owned_scaled_objects(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ScaledObjects the controller creates for the directory's autoscaled workloads (its own code)."""
    out = []
    for o in objs:
        if o["kind"] not in ("Deployment", "StatefulSet"):
            continue
        cfg = parse_annotations(o["metadata"].get("annotations") or {})
        if not cfg.autoscale:
            continue
        wl = workload_from(o["kind"], o)
        floor, _ = cfg.floor_at(datetime.now(UTC))
        so = ob.scaled_object(wl, cfg, floor, "warmscale.warmscale.svc:9090", trigger_authentication="warmscale-mtls")
        so["metadata"].pop("ownerReferences")  # the Deployment's uid is the API server's, not known here
        out.append(so)
    return out


# The README's "Using the scaler" trigger as it should read under the default (mutual TLS) install, on a
# Deployment of its own: the snippet handed over for README.md, checked here like the examples.
README_TRIGGER = yaml.safe_load("""
type: external-push
authenticationRef:
  name: warmscale-mtls
  kind: ClusterTriggerAuthentication
metadata:
  scalerAddress: warmscale.warmscale.svc:9090
  enableTLS: "true"
  engine: vllm
  prometheusAddress: http://prometheus.monitoring:9090
  prometheusSelector: 'namespace="llm",pod=~"llama-.*"'
  maxReplicas: "8"
  ttftSloSeconds: "0.5"
""")
README = "readme-snippet"
MIGRATION = "migration-guide"  # docs/migrate-from-keda-prometheus.md, its "After" ScaledObject


def _migration_scaled_object() -> dict[str, Any]:
    text = (MANIFESTS.parent / "docs" / "migrate-from-keda-prometheus.md").read_text()
    after = text.split("## After", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    so: dict[str, Any] = yaml.safe_load(after)
    return so


def _snippet_objects(name: str, so: dict[str, Any]) -> list[dict[str, Any]]:
    """A Deployment of its own (two ScaledObjects cannot share a target) and the snippet's ScaledObject on it."""
    labels = {"app.kubernetes.io/name": name}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "llm"},
              "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                  "metadata": {"labels": labels},
                  "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]}}}}
    so = copy.deepcopy(so)
    so["metadata"] = {"name": name, "namespace": "llm"}
    so["spec"]["scaleTargetRef"] = {"name": name}
    return [deploy, so]


def _readme_objects() -> list[dict[str, Any]]:
    return _snippet_objects("readme-llama", {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "spec": {
        "minReplicaCount": 1, "maxReplicaCount": 8, "triggers": [README_TRIGGER]}})


def _objects(directory: str, scaler_address: str) -> list[dict[str, Any]]:
    if directory == README:
        objs = _readme_objects()
    elif directory == MIGRATION:
        objs = _snippet_objects("migrate-llama", _migration_scaled_object())
    else:
        objs = render(f"manifests/examples/{directory}")
    objs += _owned_scaled_objects(objs)
    for o in objs:
        if o["kind"] == "ScaledObject":
            for t in o["spec"]["triggers"]:
                assert t["metadata"]["scalerAddress"] == "warmscale.warmscale.svc:9090", (directory, t)
                t["metadata"]["scalerAddress"] = scaler_address
    return objs


async def _delete(api: client.ApiClient, custom: client.CustomObjectsApi, o: dict[str, Any]) -> None:
    m = o["metadata"]
    try:
        if o["kind"] == "ScaledObject":
            await custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", m["namespace"], "scaledobjects",
                                                         m["name"])
        elif o["kind"] == "Deployment":
            await client.AppsV1Api(api).delete_namespaced_deployment(m["name"], m["namespace"])
        elif o["kind"] == "ScaledJob":
            await custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", m["namespace"], "scaledjobs",
                                                         m["name"])
        elif o["apiVersion"] == "/".join(kueue.KUEUE_API):
            plural = kueue.plural(o["kind"])
            if "namespace" in m:
                await custom.delete_namespaced_custom_object(*kueue.KUEUE_API, m["namespace"], plural, m["name"])
            else:
                await custom.delete_cluster_custom_object(*kueue.KUEUE_API, plural, m["name"])
        elif o["kind"] == "PriorityClass":
            await client.SchedulingV1Api(api).delete_priority_class(m["name"])
        elif o["kind"] == "RayService":
            await custom.delete_namespaced_custom_object("ray.io", "v1", m["namespace"], "rayservices", m["name"])
        elif o["kind"] == ob.LWS_KIND:
            await custom.delete_namespaced_custom_object(ob.LWS_GROUP, ob.LWS_VERSION, m["namespace"], ob.LWS_PLURAL,
                                                         m["name"])
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.mark.parametrize("directory", [*WITH_WORKLOADS, README, MIGRATION])
async def test_example_applies_and_keda_accepts_its_scaled_objects(setup: Setup, directory: str) -> None:
    objs = _objects(directory, setup.scaler.address)
    scaled = [o for o in objs if o["kind"] == "ScaledObject"]
    if directory in NO_SCALED_OBJECT:
        assert not scaled, directory
        _apply(setup.cluster, objs)
        return
    assert scaled, f"{directory}: no ScaledObject, shipped or controller-made"
    _apply(setup.cluster, objs)
    custom = client.CustomObjectsApi(setup.api)
    pending = {o["metadata"]["name"]: o["metadata"]["namespace"] for o in scaled}
    last: dict[str, Any] = {}
    deadline = time.monotonic() + READY_WITHIN_S
    while pending and time.monotonic() < deadline:
        for name, ns in list(pending.items()):
            obj = await custom.get_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", name)
            ready = so_condition(obj, "Ready")
            last[name] = ready
            if ready and ready.get("status") == "True" and await read_hpa(setup.api, ns, name) is not None:
                del pending[name]
        if pending:
            await asyncio.sleep(1.0)
    if directory in EXPECTED_FAILURES:
        reason = EXPECTED_FAILURES[directory]
        assert pending and all(reason in str(last.get(n)) for n in pending), (directory, last)
        return
    assert not pending, (f"{directory}: KEDA did not accept {sorted(pending)} within {READY_WITHIN_S:.0f} s; "
                         f"Ready: {last}\nscaler log:\n{setup.scaler.log_tail()}")
