"""The installed thing runs: one ``kubectl apply --server-side -k manifests/`` on the local cluster, then
the scaler and the controller run as processes with the install's own arguments, ServiceAccount tokens
and RBAC (KWOK runs no containers), and an annotated workload gets staged nodes, placeholders, a floor
that binds and mutated pods; KEDA's side is played by this test over mutual TLS with the client
certificate the controller issued.

What is emulated, and why: the kubelet (the scaler's Secret volume is written to a directory by the
test; the webhook reads its Secret through the API anyway), and the Service in front of the webhook
(without kube-proxy the API server cannot reach a process through a ClusterIP: the webhook
configuration's clientConfig is switched to ``https://127.0.0.1:PORT/mutate``, and the controller
adds 127.0.0.1 to its certificate with ``--webhook-cert-hosts``). Everything else is the install.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.cluster.fixtures import NodePoolFactory, wait_for
from tests.servers import RedisServer, free_port, running_redis
from warmscale.localcluster.fleet import H100
from warmscale.localcluster.harness import Cluster
from warmscale.warmpool.annotations import parse_annotations
from warmscale.warmpool.model_uri import staged_label_key

from .helpers import ROOT, kubectl, one, render
from .test_cluster import (
    EXAMPLE_NS,
    INSTALL_NS,
    KEDA_NS,
    _delete_namespace,
    _gone,
    ensure_keda_namespace,
    uninstall_cluster_objects,
)

pytestmark = pytest.mark.cluster
P = "warmscale.io/"
SHARED = ROOT.parent / "shared" / "reference"


def _args(deploy: dict[str, Any], env: dict[str, str], replace_flags: dict[str, str]) -> list[str]:
    """The container's args as the kubelet would expand them ($(VAR)), with some flags replaced."""
    out = []
    for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"]:
        for k, v in env.items():
            a = a.replace(f"$({k})", v)
        flag = a.split("=", 1)[0]
        if flag in replace_flags:
            a = f"{flag}={replace_flags[flag]}"
        out.append(a)
    return out


@contextlib.asynccontextmanager
async def process(args: list[str], log: Path, env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("wb") as fh:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "warmscale", *args, stdout=fh,
                                                    stderr=subprocess.STDOUT, env={**os.environ, **env})
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 20)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _secret(core: client.CoreV1Api, ns: str, name: str) -> dict[str, bytes] | None:
    try:
        s = await core.read_namespaced_secret(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return {k: base64.b64decode(v) for k, v in (s.data or {}).items()}


@pytest.fixture
def redis(tmp_path: Path) -> Any:
    with running_redis() as server:
        yield server


async def test_default_install_runs_and_the_warm_pool_reaches_the_engine(
    k8s_cluster: Cluster, k8s_admin: client.ApiClient, k8s_node_pool: NodePoolFactory, redis: RedisServer,
    fake_engine: Any, tmp_path: Path,
) -> None:
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    adm = client.AdmissionregistrationV1Api(k8s_admin)
    for ns in (INSTALL_NS, EXAMPLE_NS):  # left over by an interrupted run
        await _delete_namespace(core, ns)
        await wait_for(lambda ns=ns: _gone(core, ns), within=90, what=f"namespace {ns} deleted")
    await ensure_keda_namespace(core)  # KEDA's namespace (KEDA is a prerequisite)
    kc = [kubectl(), "--kubeconfig", str(k8s_cluster.kubeconfig)]
    # as on an empty cluster: what other suites (or an earlier install) left would have other field managers
    await asyncio.to_thread(_run, [*kc, "delete", "-k", str(ROOT / "manifests"), "--ignore-not-found", "--wait=true"])
    try:
        # --- 1. the one command of docs/install.md
        out = await asyncio.to_thread(_run, [*kc, "apply", "--server-side", "-k", str(ROOT / "manifests")])
        assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/warmscale-webhook serverside-applied" in out
        show = _Shower(kc)  # the commands of docs/install.md and what they print (pytest -s)
        show.text("kubectl apply --server-side -k manifests/", out)
        # the vLLM example (hand-written ScaledObject), with a floor schedule that covers now and staging
        # Jobs that KWOK completes in a second
        await k8s_node_pool(replace(H100, count=3))
        ex = [o for o in render("manifests/examples/common") + render("manifests/examples/vllm")]
        dep = one(ex, "Deployment", "vllm-llama")
        dep["metadata"]["annotations"].update({
            P + "min-ready": "tz=Europe/Berlin; * 00:00-24:00=2; default=1",
            P + "stage-pod-annotations": json.dumps({"sim.warmscale.io/job-duration": "1s"})})
        so = one(ex, "ScaledObject", "vllm-llama")
        assert so["spec"]["minReplicaCount"] == 1  # the floor must bind through the scaler, not the SO
        import yaml

        await asyncio.to_thread(_run, [*kc, "apply", "--server-side", "-f", "-"], yaml.safe_dump_all(ex))
        cfg = parse_annotations(dep["metadata"]["annotations"])
        assert cfg.model_uri is not None
        label = staged_label_key(cfg.cache_key(EXAMPLE_NS))

        # --- 2. the controller and the scaler as processes, with the install's args and SA tokens
        objs = render("manifests")
        ctl_dep, scaler_dep = one(objs, "Deployment", "warmscale-controller"), one(objs, "Deployment",
                                                                                     "warmscale-scaler")
        ctl_kc = k8s_cluster.write_token_kubeconfig(
            tmp_path / "controller.kubeconfig", await k8s_cluster.mint_token(INSTALL_NS, "warmscale-warmpool"))
        scaler_kc = k8s_cluster.write_token_kubeconfig(
            tmp_path / "scaler.kubeconfig", await k8s_cluster.mint_token(INSTALL_NS, "warmscale-scaler"))
        env = {"WARMSCALE_REDIS_URL": redis.url, "POD_NAME": "warmscale-controller-0", "POD_NAMESPACE": INSTALL_NS}
        webhook_port, ctl_metrics = free_port(), free_port()
        ctl_args = _args(ctl_dep, env, {"--webhook-port": str(webhook_port), "--metrics-port": str(ctl_metrics)})
        ctl_args += [f"--kubeconfig={ctl_kc}", "--webhook-address=127.0.0.1", "--metrics-address=127.0.0.1",
                     "--webhook-cert-hosts=127.0.0.1", "--resync=2"]
        ctl_env = {"POD_NAMESPACE": INSTALL_NS, "WARMSCALE_IMAGE": "warmscale:0.1.0"}
        async with process(ctl_args, tmp_path / "controller.log", ctl_env):
            # the certificates: CA, webhook, scaler, KEDA's client certificate in KEDA's namespace
            async def certs() -> dict[str, dict[str, bytes]] | None:
                got = {n: await _secret(core, ns, n) for ns, n in (
                    (INSTALL_NS, "warmscale-ca"), (INSTALL_NS, "warmscale-webhook-tls"),
                    (INSTALL_NS, "warmscale-scaler-tls"), (KEDA_NS, "warmscale-keda-client-tls"))}
                return got if all(got.values()) else None  # type: ignore[return-value]

            secrets = await wait_for(certs, within=60, what="certificate Secrets written by the controller")

            async def ca_bundle() -> bool:
                hook = await adm.read_mutating_webhook_configuration("warmscale-webhook")
                bundle = hook.webhooks[0].client_config.ca_bundle
                return bool(bundle) and base64.b64decode(bundle) == secrets["warmscale-ca"]["ca.crt"]

            await wait_for(ca_bundle, within=30, what="caBundle patched by the controller")
            await show("kubectl -n warmscale get secrets")
            await show("kubectl -n keda get secret warmscale-keda-client-tls")
            await show("kubectl -n warmscale get lease warmscale-warmpool "
                       "-o jsonpath='{.spec.holderIdentity}{\"\\n\"}'")
            await show("kubectl get mutatingwebhookconfiguration warmscale-webhook "
                       "-o jsonpath='{.webhooks[0].clientConfig.caBundle}' | base64 -d | openssl x509 -noout -subject")
            await show("kubectl -n warmscale get secret warmscale-scaler-tls -o jsonpath='{.data.tls\\.crt}' "
                       "| base64 -d | openssl x509 -noout -subject -issuer -enddate -ext subjectAltName")
            await show("kubectl -n keda get secret warmscale-keda-client-tls -o jsonpath='{.data.tls\\.crt}' "
                       "| base64 -d | openssl x509 -noout -subject -enddate -ext extendedKeyUsage")
            # the Service in front of the webhook, emulated (see the module docstring)
            await adm.patch_mutating_webhook_configuration("warmscale-webhook", [
                {"op": "remove", "path": "/webhooks/0/clientConfig/service"},
                {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": f"https://127.0.0.1:{webhook_port}/mutate"}],
                _content_type="application/json-patch+json")
            tls_dir = tmp_path / "scaler-tls"  # the kubelet's Secret volume, emulated
            tls_dir.mkdir()
            for k, v in secrets["warmscale-scaler-tls"].items():
                (tls_dir / k).write_bytes(v)
            grpc_port, scaler_metrics = free_port(), free_port()
            s_args = [a.replace("/etc/warmscale/tls", str(tls_dir)) for a in _args(
                scaler_dep, env, {"--host": "127.0.0.1", "--grpc-port": str(grpc_port),
                                  "--metrics-port": str(scaler_metrics),
                                  # the emulated pods' engines listen on loopback, next to the scaler
                                  "--allow-targets": "private,127.0.0.0/8"})]
            s_args.append(f"--kubeconfig={scaler_kc}")
            async with process(s_args, tmp_path / "scaler.log", {"POD_NAMESPACE": INSTALL_NS}):
                # --- 3. staged nodes and placeholders
                async def staged() -> list[str]:  # any matching node (the harness's own H100s too)
                    listed = await core.list_node(label_selector=f"{label}=true")
                    return [n.metadata.name for n in listed.items]

                staged_nodes = await wait_for(lambda: _at_least(staged, 2), within=90, what="2 staged nodes")

                async def placeholders() -> list[Any]:
                    pods = await core.list_namespaced_pod(EXAMPLE_NS, label_selector=f"{P}role=placeholder")
                    return [p for p in pods.items if p.status.phase == "Running"]

                # The example's standby is "auto": with no burst statistics yet it holds none; a fixed
                # count (what an operator writes to always keep one) holds that many.
                async def auto_status() -> dict[str, Any] | None:
                    d = await apps.read_namespaced_deployment("vllm-llama", EXAMPLE_NS)
                    st = json.loads((d.metadata.annotations or {}).get(f"{P}status") or "{}")
                    return st if st.get("standby") == "auto" else None

                assert (await wait_for(auto_status, within=60, what="standby auto status"))["placeholders"] == "0/0"
                await apps.patch_namespaced_deployment("vllm-llama", EXAMPLE_NS,
                                                       {"metadata": {"annotations": {f"{P}standby": "1"}}})
                await wait_for(placeholders, within=60, what="placeholder running")
                await show("kubectl -n llm get deploy vllm-llama "
                           "-o jsonpath='{.metadata.annotations.warmscale\\.io/status}{\"\\n\"}'")
                await show(f"kubectl get nodes -l {label}=true")
                await show("kubectl -n llm get pods -l warmscale.io/role=placeholder -o wide")

                # --- 4. mutated pods: a replica created now goes through the webhook
                async def mutated() -> bool:
                    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "labels": dict(
                        dep["spec"]["template"]["metadata"]["labels"])}, "spec": dep["spec"]["template"]["spec"]}
                    p = await core.create_namespaced_pod(EXAMPLE_NS, probe, dry_run="All")
                    return bool(p.spec.init_containers)

                await wait_for(mutated, within=60, what="webhook mutating (dry-run)")
                await apps.patch_namespaced_deployment_scale("vllm-llama", EXAMPLE_NS, {"spec": {"replicas": 3}})

                async def new_replicas() -> list[Any]:
                    sel = "app.kubernetes.io/name=vllm-llama"
                    pods = await core.list_namespaced_pod(EXAMPLE_NS, label_selector=sel)
                    return [p for p in pods.items if p.spec.init_containers]

                replicas = await wait_for(new_replicas, within=60, what="mutated replicas")
                await show("kubectl -n llm get pods -l app.kubernetes.io/name=vllm-llama -o jsonpath='{range .items[*]}"
                           "{.metadata.name}{\" init=\"}{.spec.initContainers[0].name}{\" \"}"
                           "{.spec.containers[0].env[?(@.name==\"WARMSCALE_MODEL_PATH\")].value}{\"\\n\"}{end}'")
                pod = replicas[0]
                assert pod.spec.init_containers[0].name == "warmscale-ensure-model"
                assert "--ensure" in pod.spec.init_containers[0].command
                env_vars = {e.name: e.value for e in pod.spec.containers[0].env}
                from warmscale.warmpool.model_uri import cache_dir

                want = cache_dir(cfg.cache_root, cfg.cache_key(EXAMPLE_NS)) + "/data"
                assert env_vars["WARMSCALE_MODEL_PATH"] == want
                pref = pod.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
                assert any(t.preference.match_expressions[0].key == label for t in pref)

                async def on_staged() -> bool:
                    p = await core.read_namespaced_pod(pod.metadata.name, EXAMPLE_NS)
                    return bool(p.spec.node_name) and p.spec.node_name in staged_nodes

                await wait_for(on_staged, within=60, what="mutated replica on a staged node")
                await apps.patch_namespaced_deployment_scale("vllm-llama", EXAMPLE_NS, {"spec": {"replicas": 1}})

                # --- 5. the floor binds: KEDA (this test) asks over mutual TLS with its client certificate
                from warmscale.proto import externalscaler_pb2 as pb
                from warmscale.proto import externalscaler_pb2_grpc as pbg

                keda = secrets["warmscale-keda-client-tls"]
                creds = grpc.ssl_channel_credentials(root_certificates=keda["ca.crt"], private_key=keda["tls.key"],
                                                     certificate_chain=keda["tls.crt"])
                [trigger] = so["spec"]["triggers"]
                assert trigger["authenticationRef"]["kind"] == "ClusterTriggerAuthentication"
                ref = pb.ScaledObjectRef(name="vllm-llama", namespace=EXAMPLE_NS, scalerMetadata=trigger["metadata"])
                async with grpc.aio.secure_channel(f"127.0.0.1:{grpc_port}", creds, options=[
                        ("grpc.ssl_target_name_override", "warmscale.warmscale.svc")]) as ch:
                    stub = pbg.ExternalScalerStub(ch)

                    async def desired() -> float | None:
                        try:  # the process may still be starting
                            m = await stub.GetMetrics(pb.GetMetricsRequest(
                                scaledObjectRef=ref, metricName="warmscale-desired-replicas"), timeout=5)
                        except grpc.aio.AioRpcError as exc:
                            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                                raise
                            return None
                        v = m.metricValues[0].metricValueFloat
                        return v if v >= 2 else None

                    value = await wait_for(desired, within=60, what="the scaler asks for the floor (2)")
                    assert value == 2.0  # KWOK engines serve no /metrics: unknown, the floor held, not 1
                    # the same ScaledObject reading an engine that reports no load at all (vLLM idle
                    # metrics from a local server): the floor binds as the reason, not as a hold
                    idle = fake_engine((SHARED / "metrics-samples" / "vllm-idle.prom").read_text())
                    meta = {k: v for k, v in trigger["metadata"].items() if k not in ("podSelector", "metricsPort")}
                    ref = pb.ScaledObjectRef(name="vllm-llama", namespace=EXAMPLE_NS,
                                             scalerMetadata={**meta, "endpoints": idle.url})
                    assert await wait_for(desired, within=60, what="the floor with zero load") == 2.0

                    async def warm_floor() -> bool:
                        await desired()  # KEDA keeps asking
                        async with aiohttp.ClientSession() as http, http.get(
                                f"http://127.0.0.1:{scaler_metrics}/decisions?namespace={EXAMPLE_NS}") as r:
                            got = (await r.json())["decisions"]
                        return any(d["reason"] == "warm-floor" and d["desired"] == 2 for d in got)

                    await wait_for(warm_floor, within=30, interval=1.0, what="decision reason warm-floor")
                    # without the client certificate: refused
                    async with grpc.aio.secure_channel(f"127.0.0.1:{grpc_port}", grpc.ssl_channel_credentials(
                            root_certificates=keda["ca.crt"]), options=[
                            ("grpc.ssl_target_name_override", "warmscale.warmscale.svc")]) as anon:
                        with pytest.raises(grpc.aio.AioRpcError):
                            await pbg.ExternalScalerStub(anon).IsActive(ref, timeout=3)
                async with aiohttp.ClientSession() as http, http.get(
                        f"http://127.0.0.1:{scaler_metrics}/decisions?namespace={EXAMPLE_NS}") as r:
                    body = await r.json()
                got = {(d["desired"], d["reason"]) for d in body["decisions"]}
                assert (2, "warm-floor") in got and (2, "signals-unknown") in got, json.dumps(body)
                await show(f"curl -s 'http://127.0.0.1:{scaler_metrics}/decisions?namespace=llm' | "
                           "jq -c '.decisions[] | {name, desired, reason}'")
    finally:
        _print_tracebacks(tmp_path)
        for cmd in (["-n", EXAMPLE_NS, "get", "deploy,jobs,pods", "-o", "wide"],
                    ["-n", EXAMPLE_NS, "get", "events", "--sort-by=.lastTimestamp"],
                    ["-n", EXAMPLE_NS, "get", "deploy", "vllm-llama", "-o", "jsonpath={.metadata.annotations}"]):
            out = await asyncio.to_thread(subprocess.run, [*kc, *cmd], capture_output=True, text=True, timeout=60)
            print(f"$ kubectl {' '.join(cmd)}\n{out.stdout}{out.stderr}")
        await _delete_namespace(core, EXAMPLE_NS)
        await _delete_namespace(core, INSTALL_NS)
        await uninstall_cluster_objects(k8s_admin)
        await _strip_finalizers(apps)
        from warmscale.warmpool.controller import install_priority_class

        await install_priority_class(k8s_admin)  # as other suites expect the cluster (it was deleted above)


class _Shower:
    """Run a documented shell command with the test cluster's kubeconfig and print it with its output."""

    def __init__(self, kc: list[str]) -> None:
        self.env = {**os.environ, "KUBECONFIG": kc[2], "PATH": f"{Path(kc[0]).parent}:{os.environ['PATH']}"}

    def text(self, cmd: str, out: str) -> None:
        print(f"\n$ {cmd}\n{out.rstrip()}")

    async def __call__(self, cmd: str) -> None:
        out = await asyncio.to_thread(subprocess.run, ["bash", "-c", cmd], capture_output=True, text=True,
                                      timeout=60, env=self.env)
        self.text(cmd, out.stdout + out.stderr)


def _run(cmd: list[str], stdin: str | None = None) -> str:
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _print_tracebacks(d: Path) -> None:
    for log in d.glob("*.log"):
        text = log.read_text(errors="replace")
        if "Traceback" in text or "error" in text:
            print(f"--- {log.name}\n{text[-6000:]}")


async def _at_least(f: Any, n: int) -> list[str] | None:
    got = await f()
    return got if len(got) >= n else None


async def _strip_finalizers(apps: client.AppsV1Api) -> None:
    with contextlib.suppress(ApiException):
        for d in (await apps.list_namespaced_deployment(EXAMPLE_NS)).items:
            if d.metadata.finalizers:
                await apps.patch_namespaced_deployment(d.metadata.name, EXAMPLE_NS, {"metadata": {"finalizers": None}})
