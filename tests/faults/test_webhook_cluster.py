"""Issue 20, items 8, 12 and 26 against the real local control plane.

- 8: the webhook in the Secret-served mode the manifests ship (``--webhook-tls-secret``) applies
  ``--cache-root-allow``.
- 12: the namespaced install's caBundle is set by ``warmscale ca-bundle`` (an administrator), not by the
  controller, which is granted nothing on the cluster-scoped webhook configuration.
- 26: without the install's PriorityClass, a workload that wants placeholders gets a Warning Event.
"""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
import base64
import json
import socket
import ssl
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    NodePoolFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_node_pool,
    wait_for,
)
from tests.warmpool.test_cluster import controller, events, gpu_deployment, strip_finalizers  # noqa: F401
from warmscale.localcluster.fleet import H100
from warmscale.warmpool import objects as ob
from warmscale.warmpool.certs import CertManager, CertSpec

pytestmark = pytest.mark.cluster
P = "warmscale.io/"
URI = "hf://org/model@rev1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _apply_policy(adm: Any, objs: list[dict[str, Any]]) -> None:
    policy, binding = objs
    await adm.create_validating_admission_policy(policy)
    await adm.create_validating_admission_policy_binding(binding)


async def test_shipped_webhook_mode_applies_the_cache_root_allow_list(k8s_admin: Any, k8s_namespace: str) -> None:
    """With ``--cache-root-allow /mnt/models`` the Secret-served webhook mounted /var/lib/warmscale/models
    and refused /mnt/models/llm (the allow-list was not passed in that mode)."""
    import argparse

    from warmscale.warmpool.cli import configure, run_webhook

    ns = k8s_namespace
    spec = CertSpec(namespace=ns, keda_namespace="", extra_webhook_names=("127.0.0.1",))
    await CertManager(k8s_admin, spec, webhook_configuration=None).sync()
    ca = base64.b64decode((await client.CoreV1Api(k8s_admin).read_namespaced_secret(
        "warmscale-webhook-tls", ns)).data["ca.crt"])
    apps = client.AppsV1Api(k8s_admin)
    for name, root in (("allowed", "/mnt/models/llm"), ("default-root", None)):
        ann = {P + "enabled": "true", P + "model-uri": URI, P + "prestage-nodes": "0"}
        if root:
            ann[P + "cache-root"] = root
        await apps.create_namespaced_deployment(ns, {
            "metadata": {"name": name, "annotations": ann},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "engine", "image": "vllm"}]}}}})
    port = _free_port()
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--webhook-port", str(port), "--webhook-address", "127.0.0.1",
                              "--webhook-tls-secret", "warmscale-webhook-tls", "--cert-namespace", ns,
                              "--cache-root-allow", "/mnt/models", "--stager-image", "warmscale:test"])
    stop = asyncio.Event()
    task = asyncio.create_task(run_webhook(args, k8s_admin, stop))
    ctx = ssl.create_default_context(cadata=ca.decode())

    async def review(app: str) -> list[dict[str, Any]] | None:
        body = {"request": {"uid": app, "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": ns,
                            "object": {"metadata": {"labels": {"app": app}},
                                       "spec": {"containers": [{"name": "engine", "image": "vllm"}]}}}}
        try:
            async with aiohttp.ClientSession() as http, http.post(f"https://127.0.0.1:{port}/mutate", json=body,
                                                                   ssl=ctx) as resp:
                out = (await resp.json())["response"]
        except aiohttp.ClientConnectionError:
            return None
        return json.loads(base64.b64decode(out["patch"])) if "patch" in out else []

    try:
        ops = await wait_for(lambda: review("allowed"), within=30, what="the webhook serving")
        volumes = next(o["value"] for o in ops if o["path"] == "/spec/volumes")
        assert {"name": "warmscale-model-cache", "hostPath": {"path": "/mnt/models/llm",
                                                              "type": "DirectoryOrCreate"}} in volumes
        assert await review("default-root") == []  # /var/lib/warmscale/models is outside the allow-list
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)


async def test_namespaced_install_sets_the_ca_bundle_without_the_controller(k8s_cluster: Any, k8s_admin: Any,
                                                                            k8s_namespace: str) -> None:
    """The namespaced overlay granted the controller ``patch`` on the whole MutatingWebhookConfiguration.

    Admission policies cannot narrow it (the API server exempts webhook configurations from them: a
    ValidatingAdmissionPolicy allowing only caBundle changes let a namespaceSelector change through), so the
    namespaced install grants nothing on it (tests/warmpool/test_rbac.py) and ``warmscale ca-bundle``, run
    by an administrator, copies the controller's CA bundle in."""
    import argparse

    from warmscale.warmpool.cabundle import configure, copy_bundle
    from warmscale.warmpool.webhook import webhook_configuration

    ns = k8s_namespace
    name = f"warmscale-webhook-{ns}"
    adm = client.AdmissionregistrationV1Api(k8s_admin)
    cfg = webhook_configuration(name, b"", service=(ns, "warmscale-webhook", 443),
                                namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": ns}})
    del cfg["webhooks"][0]["clientConfig"]["caBundle"]
    await adm.create_mutating_webhook_configuration(cfg)
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--kubeconfig", str(k8s_cluster.kubeconfig), "--cert-namespace", ns,
                              "--webhook-configuration", name, "--wait", "0"])
    try:
        assert await copy_bundle(args) == 1  # no CA yet: a clear error, nothing changed
        # the controller (here: its certificate manager, told to leave the configuration alone) writes the CA
        await CertManager(k8s_admin, CertSpec(namespace=ns, keda_namespace=""), webhook_configuration=None).sync()
        assert (await adm.read_mutating_webhook_configuration(name)).webhooks[0].client_config.ca_bundle is None
        assert await copy_bundle(args) == 0
        bundle = base64.b64decode((await client.CoreV1Api(k8s_admin).read_namespaced_secret(
            "warmscale-ca", ns)).data["ca.crt"])
        hook = await adm.read_mutating_webhook_configuration(name)
        assert base64.b64decode(hook.webhooks[0].client_config.ca_bundle) == bundle
        assert await copy_bundle(args) == 0  # idempotent
    finally:
        await adm.delete_mutating_webhook_configuration(name)


@pytest.mark.parametrize("removed", ["before the start", "while running"])
async def test_missing_priority_class_is_an_event_on_the_workload(
    k8s_admin: Any, k8s_namespace: str, k8s_node_pool: NodePoolFactory, controller: Any, removed: str
) -> None:
    """The controller logged an error and created no placeholders; the workload got no Event. Removed
    while the controller runs, every placeholder creation failed (a reconcile error each pass) instead."""
    from warmscale.warmpool.controller import install_priority_class

    ns = k8s_namespace
    sched = client.SchedulingV1Api(k8s_admin)
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    try:
        await k8s_node_pool(replace(H100, count=1))
        standby = "0" if removed == "while running" else "1"
        ann = {P + "enabled": "true", P + "standby": standby, P + "model-uri": URI, P + "prestage-nodes": "0"}
        if removed == "before the start":
            await sched.delete_priority_class(ob.PRIORITY_CLASS)
        await apps.create_namespaced_deployment(ns, gpu_deployment(ns, "llm", 1, ann))
        ctl, _task = await controller()
        if removed == "while running":
            async def reconciled() -> bool:
                return ctl.reconcile_count > 1

            await wait_for(reconciled, within=30, what="the controller reconciling")
            await sched.delete_priority_class(ob.PRIORITY_CLASS)
            await apps.patch_namespaced_deployment("llm", ns, {"metadata": {"annotations": {P + "standby": "1"}}})

        async def missing() -> list[Any]:
            return await events(core, ns, "PriorityClassMissing")

        [ev] = await wait_for(missing, within=30, what="PriorityClassMissing event")
        assert ev.involved_object.name == "llm" and ev.type == "Warning" and ob.PRIORITY_CLASS in ev.message
        pods = await core.list_namespaced_pod(ns, label_selector=f"{ob.ROLE}=placeholder")
        assert not pods.items
        errors = ctl.metrics.reconciles.labels("error")._value.get()
        await asyncio.sleep(5)  # a couple of resyncs: not an error each pass
        assert ctl.metrics.reconciles.labels("error")._value.get() == errors
    finally:
        await install_priority_class(k8s_admin)
