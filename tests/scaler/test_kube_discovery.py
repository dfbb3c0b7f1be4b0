"""The scaler's pod discovery against the real local control plane (KWOK GPU pods).

Pods never run: KWOK moves them Pending -> Running (unready, pod IP) -> Ready. The Deployments'
template says ``ready-delay: 1h``, and a test makes one pod Ready by patching its own annotation to
``0s`` (KWOK re-evaluates the stage on update), so "starting" and "ready" are under the test's
control. Pod IPs are not reachable: scrape tests map each pod to a fake engine on 127.0.0.1 through
``KubeDiscovery(url_for=...)``, and every URL is checked to be loopback before it is used.
"""

# ruff: noqa: F811  (fixtures imported from tests.cluster.fixtures are used by name)

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import grpc
import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.fixtures import (  # noqa: F401  (fixtures used by name)
    SaClientFactory,
    k8s_admin,
    k8s_cluster,
    k8s_namespace,
    k8s_sa_client,
    wait_for,
)
from tests.scaler.conftest import ServerFactory
from tests.servers import FakeEngine
from warmscale.localcluster import workloads as w
from warmscale.scaler.cli import SourcesReader
from warmscale.scaler.config import parse_metadata
from warmscale.signals.sources.pods import DiscoveryError, KubeDiscovery, PodCounts, PodEndpoints, selector_string

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "keda.sh", "v1alpha1", "scaledobjects"
Obj = dict[str, Any]


def vllm_payload(running: float, waiting: float, kv: float = 0.3) -> str:
    labels = '{engine="0",model_name="m"}'
    return "".join([
        "# TYPE vllm:num_requests_running gauge\n", f"vllm:num_requests_running{labels} {running}\n",
        "# TYPE vllm:num_requests_waiting gauge\n", f"vllm:num_requests_waiting{labels} {waiting}\n",
        "# TYPE vllm:kv_cache_usage_perc gauge\n", f"vllm:kv_cache_usage_perc{labels} {kv}\n",
    ])


class PodUrls:
    """``url_for`` for tests: pod name -> a local URL; unmapped pods are not scraped. Never returns
    anything but a loopback URL."""

    def __init__(self) -> None:
        self.urls: dict[str, str] = {}
        self.asked: set[str] = set()

    def __call__(self, pod: Obj, port: int | None, path: str) -> str | None:
        name = pod["metadata"]["name"]
        self.asked.add(name)
        url = self.urls.get(name)
        if url is not None:
            assert urlparse(url).hostname == "127.0.0.1", url
        return url


def llm_deployment(name: str, replicas: int) -> Obj:
    dep = w.deployment(name, replicas, annotations=w.sim_annotations(start_delay="0s", ready_delay="1h"), gpus=1)
    dep["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 8000}]
    # Scale-down removes not-ready pods first; make rollouts irrelevant to these tests.
    dep["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return dep


def scaled_object(name: str, target: str, kind: str = "Deployment", metadata: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScaledObject", "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
            "minReplicaCount": 1, "maxReplicaCount": 8,
            "triggers": [{"type": "external", "metadata": {"scalerAddress": "127.0.0.1:1", **(metadata or {})}}],
        },
    }


@pytest.fixture
async def discoveries(k8s_admin: client.ApiClient) -> AsyncIterator[Callable[..., KubeDiscovery]]:
    made: list[KubeDiscovery] = []
    providers: list[PodEndpoints] = []

    def make(api: client.ApiClient | None = None, **kw: Any) -> KubeDiscovery:
        kw.setdefault("url_for", PodUrls())
        kw.setdefault("sync_timeout_s", 5.0)
        d = KubeDiscovery(api or k8s_admin, **kw)
        original = d.provider

        def provider(*a: Any, **k: Any) -> PodEndpoints:
            p = original(*a, **k)
            providers.append(p)
            return p

        d.provider = provider  # type: ignore[method-assign]
        made.append(d)
        return d

    yield make
    for p in providers:
        await p.aclose()
    for d in made:
        await d.aclose()


async def pod_names(core: client.CoreV1Api, ns: str, selector: str) -> list[str]:
    pods = await core.list_namespaced_pod(ns, label_selector=selector)
    return sorted(p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None)


async def make_ready(core: client.CoreV1Api, ns: str, name: str) -> None:
    await core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {w.READY_DELAY: "0s"}}})


async def running(core: client.CoreV1Api, ns: str, selector: str, n: int) -> list[str] | None:
    pods = await core.list_namespaced_pod(ns, label_selector=selector)
    names = sorted(p.metadata.name for p in pods.items
                   if p.status.phase == "Running" and p.status.pod_ip and p.metadata.deletion_timestamp is None)
    return names if len(names) == n else None


async def counts_become(provider: PodEndpoints, want: PodCounts, within: float = 30.0) -> PodCounts:
    async def check() -> PodCounts | None:
        try:
            c = await provider.counts()
        except DiscoveryError:  # e.g. an object just created, not seen by the watch yet
            return None
        return c if (c.ready, c.starting, c.current) == (want.ready, want.starting, want.current) else None

    result: PodCounts = await wait_for(check, within=within, what=f"counts {want}", interval=0.1)
    return result


async def scale(apps: client.AppsV1Api, ns: str, name: str, replicas: int) -> None:
    await apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": replicas}})


# ----------------------------------------------------------------------------------------------- tests


async def test_pods_by_selector_counts_starting_and_ready_as_pods_progress(
    k8s_admin: client.ApiClient, k8s_namespace: str, discoveries: Callable[..., KubeDiscovery]
) -> None:
    ns = k8s_namespace
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    custom = client.CustomObjectsApi(k8s_admin)
    await apps.create_namespaced_deployment(ns, w.body(llm_deployment("llm", 2)))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("llm-so", "llm"))
    urls = PodUrls()
    d = discoveries(url_for=urls)
    provider = d.provider(ns, "llm-so", pod_selector="app=llm", metrics_port=8000)

    # Created, not Ready (the template's ready-delay is 1h): two starting, nothing to scrape.
    await counts_become(provider, PodCounts(ready=0, starting=2, current=2))
    names = await wait_for(lambda: running(core, ns, "app=llm", 2), within=30, what="2 pods Running")
    assert await provider.endpoints() == []
    assert not urls.asked  # never-ready pods are not scraped

    # One pod becomes Ready: it is counted ready and scraped (through the local mapping only).
    urls.urls[names[0]] = "http://127.0.0.1:9/metrics"
    await make_ready(core, ns, names[0])
    await counts_become(provider, PodCounts(ready=1, starting=1, current=2))
    eps = await provider.endpoints()
    assert [e.replica for e in eps] == [names[0]] and eps[0].url == "http://127.0.0.1:9/metrics"

    # Scale-up: current follows spec.replicas at once; the new pods are starting.
    await scale(apps, ns, "llm", 4)
    counts = await counts_become(provider, PodCounts(ready=1, starting=3, current=4))
    assert len(counts.pods) == 4
    # Scale-down: the not-ready pods go first; terminating pods are neither ready nor starting.
    await scale(apps, ns, "llm", 1)
    await counts_become(provider, PodCounts(ready=1, starting=0, current=1))
    assert [e.replica for e in await provider.endpoints()] == [names[0]]

    # One shared pods cache per (namespace, selector), whoever asks.
    other = d.provider(ns, "llm-so", pod_selector="app=llm")
    await other.counts()
    pod_caches = [k for k in d.caches() if k[0] == "pods"]
    assert pod_caches == [("pods", ns, "app=llm")] and d.caches()[pod_caches[0]].users == 2


async def test_scale_target_ref_resolves_pods_without_pod_selector(
    k8s_admin: client.ApiClient, k8s_namespace: str, discoveries: Callable[..., KubeDiscovery]
) -> None:
    ns = k8s_namespace
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    custom = client.CustomObjectsApi(k8s_admin)
    dep = llm_deployment("gen", 3)
    # A selector with an expression: translated to the API's label selector syntax.
    dep["spec"]["selector"] = {"matchLabels": {"app": "gen"},
                               "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}
    dep["spec"]["template"]["metadata"]["labels"]["tier"] = "gpu"
    await apps.create_namespaced_deployment(ns, w.body(dep))
    # A pod outside the target (another tier) is not counted.
    stray = w.pod("stray", labels={"app": "gen", "tier": "cpu"}, annotations=w.sim_annotations(ready_delay="0s"))
    await core.create_namespaced_pod(ns, w.body(stray))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("gen-so", "gen"))
    d = discoveries()
    provider = d.provider(ns, "gen-so")  # no podSelector: the ScaledObject's scaleTargetRef decides

    await counts_become(provider, PodCounts(ready=0, starting=3, current=3))
    assert ("pods", ns, "app=gen,tier in (gpu)") in d.caches()
    assert provider.target is not None and (provider.target.kind, provider.target.name) == ("Deployment", "gen")
    names = await wait_for(lambda: running(core, ns, "app=gen,tier=gpu", 3), within=30, what="3 pods Running")
    await make_ready(core, ns, names[1])
    await counts_become(provider, PodCounts(ready=1, starting=2, current=3))
    await scale(apps, ns, "gen", 5)
    await counts_become(provider, PodCounts(ready=1, starting=4, current=5))

    # StatefulSet targets too.
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "sts"},
           "spec": {"replicas": 2, "serviceName": "sts", "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "sts"}},
                    "template": {"metadata": {"labels": {"app": "sts"},
                                              "annotations": w.sim_annotations(ready_delay="0s")},
                                 "spec": w.pod_spec(gpus=1)}}}
    await apps.create_namespaced_stateful_set(ns, w.body(sts))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                 scaled_object("sts-so", "sts", kind="StatefulSet"))
    await counts_become(d.provider(ns, "sts-so"), PodCounts(ready=2, starting=0, current=2))

    # What cannot be resolved is a DiscoveryError naming it (never a crash, never zeros).
    with pytest.raises(DiscoveryError, match="not found"):
        await d.provider(ns, "no-such-so").counts()
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("dangling", "nothing"))
    dangling = d.provider(ns, "dangling")

    async def dangling_error() -> str | None:
        try:
            await dangling.counts()
        except DiscoveryError as exc:
            return str(exc) if "nothing" in str(exc) else None
        return None

    assert "Deployment" in await wait_for(dangling_error, within=10, what="dangling target error")
    # ... but with podSelector the pods are still counted (current unknown).
    partial = d.provider(ns, "dangling", pod_selector="app=gen,tier=gpu")
    counts = await partial.counts()
    assert (counts.ready, counts.starting, counts.current) == (1, 4, None)
    assert partial.target_error is not None and "nothing" in partial.target_error


def test_selector_string() -> None:
    assert selector_string({"matchLabels": {"b": "2", "a": "1"}}) == "a=1,b=2"
    sel = {"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["b", "a"]},
                                {"key": "y", "operator": "Exists"}, {"key": "z", "operator": "DoesNotExist"}]}
    assert selector_string(sel) == "x notin (a,b),y,!z"
    with pytest.raises(DiscoveryError):
        selector_string({})


async def test_without_pod_permissions_the_scaler_keeps_working_from_static_endpoints(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_sa_client: SaClientFactory,
    discoveries: Callable[..., KubeDiscovery], fake_engine: Callable[..., FakeEngine],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ns = k8s_namespace
    apps, custom = client.AppsV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    await apps.create_namespaced_deployment(ns, w.body(llm_deployment("llm", 1)))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("llm-so", "llm"))
    # The ServiceAccount may read the ScaledObject and its target, but not list pods.
    restricted = await k8s_sa_client("no-pods", [
        client.V1PolicyRule(api_groups=["keda.sh"], resources=["scaledobjects"], verbs=["get", "list", "watch"]),
        client.V1PolicyRule(api_groups=["apps"], resources=["deployments"], verbs=["get", "list", "watch"]),
    ])
    engine = fake_engine(vllm_payload(running=3, waiting=1))
    reader = SourcesReader(discovery=discoveries(restricted, sync_timeout_s=3.0))
    try:
        caplog.set_level(logging.INFO, logger="warmscale.signals.pods")
        static = parse_metadata({"endpoints": engine.url, "engine": "vllm"})
        with_pods = parse_metadata({"endpoints": engine.url, "engine": "vllm", "podSelector": "app=llm"})
        for _ in range(6):
            snap = await reader.read(static, 0.0, (ns, "llm-so"))
            assert [r.replica for r in snap.known] == [engine.url]  # the static endpoint still counts
            assert snap.ready_replicas is None and snap.starting_replicas is None
            assert len(snap.source_errors) == 1 and snap.source_errors[0].startswith("kubernetes: pods ")
            assert "403" in snap.source_errors[0]
            snap = await reader.read(with_pods, 0.0, (ns, "llm-so"))
            assert [r.replica for r in snap.known] == [engine.url]
            assert len(snap.source_errors) == 1 and "pods: endpoint discovery failed" in snap.source_errors[0]
            assert "403" in snap.source_errors[0]
            await asyncio.sleep(0.5)
        failures = [r for r in caplog.records if r.getMessage().startswith("kubernetes list failed")]
        assert len(failures) == 1, [r.__dict__.get("cache") for r in failures]  # logged once, retried quietly
        # The ScaledObject and its target were readable: only the pods cache is failing.
        assert failures[0].__dict__["cache"] == f"pods {ns} app=llm"
    finally:
        await reader.aclose()


def scaler_rbac_rules() -> list[client.V1PolicyRule]:
    """The rules of the scaler's ClusterRole in manifests/base/scaler-rbac.yaml."""
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/scaler-rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d.get("kind") == "ClusterRole" and d["metadata"]["name"] == "warmscale-scaler")
    return [client.V1PolicyRule(api_groups=r["apiGroups"], resources=r["resources"], verbs=r["verbs"])
            for r in role["rules"]]


@pytest.mark.parametrize("by", ["podSelector", "scaleTargetRef"])
async def test_end_to_end_getmetrics_discounts_starting_pods(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_sa_client: SaClientFactory,
    discoveries: Callable[..., KubeDiscovery], fake_engine: Callable[..., FakeEngine],
    make_server: ServerFactory, clients: Callable[..., Any], by: str,
) -> None:
    """The real ScalerServer + SourcesReader + pod discovery, as the scaler's own ServiceAccount
    (the install's ClusterRole rules): 2 ready pods (scraped from local fake engines) carrying 64
    requests each with 32 per replica as the target, and 2 pods still starting. Demand asks for 4 in
    total, and 4 are already provisioned: GetMetrics answers 4 (not 6, and not 8 as it would if the
    starting pods were scraped as unknown, loaded replicas). The pods are found by ``podSelector``, or
    with ``metricsPort`` alone through the ScaledObject's ``scaleTargetRef``."""
    ns = k8s_namespace
    core, apps = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin)
    custom = client.CustomObjectsApi(k8s_admin)
    metadata = {"engine": "vllm", "podSelector": "app=llm", "metricsPort": "8000", "targetInflightPerReplica": "32",
                "minReplicas": "1", "maxReplicas": "8", "scrapeIntervalSeconds": "0.5", "hpaTolerance": "0"}
    if by == "scaleTargetRef":
        del metadata["podSelector"]
    await apps.create_namespaced_deployment(ns, w.body(llm_deployment("llm", 2)))
    so = scaled_object("llm", "llm", metadata=metadata)
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, so)
    names = await wait_for(lambda: running(core, ns, "app=llm", 2), within=30, what="2 pods Running")
    urls = PodUrls()
    for name in names:
        urls.urls[name] = fake_engine(vllm_payload(running=64, waiting=0)).url
        await make_ready(core, ns, name)
    await scale(apps, ns, "llm", 4)

    scaler_sa = await k8s_sa_client("warmscale-scaler", scaler_rbac_rules())
    discovery = discoveries(scaler_sa, url_for=urls)
    reader = SourcesReader(discovery=discovery)
    server = await make_server(reader, metrics_port=None)
    try:
        probe = discovery.provider(ns, "llm", pod_selector="app=llm")
        await counts_become(probe, PodCounts(ready=2, starting=2, current=4))
        c = clients(server.grpc_port)
        ref = c.pb.ScaledObjectRef(name="llm", namespace=ns, scalerMetadata=metadata)

        async def decided() -> Any:
            try:
                resp = await c.stub.GetMetrics(c.pb.GetMetricsRequest(scaledObjectRef=ref,
                                                                      metricName="warmscale-desired-replicas"))
            except grpc.aio.AioRpcError as exc:  # UNAVAILABLE: a hold before the first decision
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                return None
            tracker = server.manager.get(ns, "llm", metadata)
            d = tracker.decision
            if d is None or d.reason == "hold-no-decision" or (d.ready, d.starting) != (2, 2):
                return None
            return d, resp.metricValues[0].metricValueFloat

        decision, value = await wait_for(decided, within=20, what="a decision with 2 ready + 2 starting")
        assert decision.rules.get("demand") == 4, decision
        assert decision.desired == 4 and value == 4.0, decision
        assert decision.time_to_ready_s == 120.0  # no warm status published: timeToReadySeconds
        assert not (urls.asked - set(names))  # only the ready pods were ever mapped to a URL
    finally:
        await server.stop(0.2)
        await reader.aclose()


async def test_cli_wiring_kubeconfig_and_no_kubernetes(
    k8s_cluster: Any, k8s_admin: client.ApiClient, k8s_namespace: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--kubeconfig FILE`` gives a working discovery; without any configuration there is none; an
    explicit kubeconfig that cannot be loaded stops ``warmscale scaler`` with exit code 2."""
    import argparse

    from warmscale.scaler.cli import configure, make_discovery, serve

    ns = k8s_namespace
    apps, custom = client.AppsV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    await apps.create_namespaced_deployment(ns, w.body(llm_deployment("llm", 2)))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("llm-so", "llm"))
    discovery, api = await make_discovery(str(k8s_cluster.kubeconfig))
    assert isinstance(discovery, KubeDiscovery)
    provider = discovery.provider(ns, "llm-so")
    try:
        await counts_become(provider, PodCounts(ready=0, starting=2, current=2))
    finally:
        await provider.aclose()
        await discovery.aclose()
        await api.close()

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert await make_discovery(None) == (None, None)

    parser = argparse.ArgumentParser()
    configure(parser)
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("not: a kubeconfig\n")
    args = parser.parse_args(["--host", "127.0.0.1", "--grpc-port", "0", "--metrics-port", "-1",
                              "--kubeconfig", str(bad)])
    assert await serve(args) == 2
    assert parser.parse_args(["--no-kubernetes"]).no_kubernetes is True


async def test_watch_expiry_resumes_without_relisting(
    k8s_admin: client.ApiClient, k8s_namespace: str, discoveries: Callable[..., KubeDiscovery]
) -> None:
    """Watches the server ends (here every ~2 s) resume from the last resource version: changes keep
    arriving and the pods are listed once."""
    ns = k8s_namespace
    apps, custom = client.AppsV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    await apps.create_namespaced_deployment(ns, w.body(llm_deployment("llm", 1)))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("llm-so", "llm"))
    d = discoveries(watch_timeout_s=2)
    provider = d.provider(ns, "llm-so", pod_selector="app=llm")
    await counts_become(provider, PodCounts(ready=0, starting=1, current=1))
    for replicas in (2, 3):
        await asyncio.sleep(3.0)  # at least one watch expiry in between
        await scale(apps, ns, "llm", replicas)
        await counts_become(provider, PodCounts(ready=0, starting=replicas, current=replicas), within=10)
    assert d.caches()[("pods", ns, "app=llm")].lists == 1


def scaler_nodes_rules() -> list[client.V1PolicyRule]:
    """The rules of the scaler's nodes ClusterRole in manifests/base/scaler-nodes-rbac.yaml."""
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/scaler-nodes-rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d.get("kind") == "ClusterRole")
    return [client.V1PolicyRule(api_groups=r["apiGroups"], resources=r["resources"], verbs=r["verbs"])
            for r in role["rules"]]


@pytest.fixture
async def grant_nodes(k8s_admin: client.ApiClient, k8s_namespace: str) -> AsyncIterator[Callable[..., Any]]:
    """``await grant(sa_name)``: the install's nodes ClusterRole bound to a ServiceAccount of the test's
    namespace (a ClusterRoleBinding: nodes are cluster-scoped), deleted afterwards."""
    rbac = client.RbacAuthorizationV1Api(k8s_admin)
    made: list[str] = []

    async def grant(sa: str) -> None:
        name = f"{k8s_namespace}-{sa}-nodes"
        await rbac.create_cluster_role(client.V1ClusterRole(metadata=client.V1ObjectMeta(name=name),
                                                            rules=scaler_nodes_rules()))
        made.append(name)
        await rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=sa, namespace=k8s_namespace)]))

    yield grant
    for name in made:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                await delete(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


def gpu_deployment(name: str, replicas: int, node_selector: dict[str, str]) -> Obj:
    dep = w.deployment(name, replicas, annotations=w.sim_annotations(start_delay="0s", ready_delay="0s"), gpus=1,
                       node_selector=node_selector)
    dep["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 8000}]
    return dep


async def test_gpu_product_from_the_pods_nodes_as_the_scaler(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_sa_client: SaClientFactory,
    k8s_node_pool: Any, grant_nodes: Callable[..., Any], discoveries: Callable[..., KubeDiscovery],
) -> None:
    """KWOK nodes labelled like GFD (H100 and A100 pools of this test). The scaler's ServiceAccount,
    with the install's rules (namespaced reads + the nodes ClusterRole), finds the product of the
    nodes its pods run on (the template selects the test's H100 nodes by pool, not by product), and
    SourcesReader puts it in the snapshot. A template that pins the product needs no node read."""
    from dataclasses import replace as dc_replace

    from warmscale.localcluster.fleet import A100, H100, POOL_LABEL

    ns = k8s_namespace
    apps, custom = client.AppsV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    h100 = dc_replace(H100, name="gh100", count=2)
    await k8s_node_pool(h100)
    await k8s_node_pool(dc_replace(A100, name="ga100", count=1))
    on_h100 = {POOL_LABEL: f"{ns}-gh100"}
    await apps.create_namespaced_deployment(ns, w.body(gpu_deployment("llm", 2, on_h100)))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("llm", "llm"))
    await apps.create_namespaced_deployment(ns, w.body(gpu_deployment(
        "pinned", 1, {"nvidia.com/gpu.product": A100.gpu_product or "", "warmscale.io/test": ns})))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("pinned", "pinned"))

    scaler_sa = await k8s_sa_client("warmscale-scaler", scaler_rbac_rules())
    await grant_nodes("warmscale-scaler")
    discovery = discoveries(scaler_sa)

    async def product(so: str) -> str | None:
        try:
            c = await discovery.provider(ns, so).counts()
        except DiscoveryError:
            return None
        return c.gpu_product if c.ready == 2 or so == "pinned" else None

    assert await wait_for(lambda: product("llm"), within=30, what="the H100 product") == H100.gpu_product
    reads = discovery.nodes.reads
    assert 1 <= reads <= 2  # each node of the pods read once (cached), never a list
    assert await product("llm") == H100.gpu_product and discovery.nodes.reads == reads
    assert await wait_for(lambda: product("pinned"), within=30, what="the pinned product") == A100.gpu_product
    assert discovery.nodes.reads == reads  # pinned by the template: no node read

    reader = SourcesReader(discovery=discovery)
    try:
        cfg = parse_metadata({"engine": "vllm", "endpoints": "http://127.0.0.1:1/metrics"})
        snap = await reader.read(cfg, 0.0, (ns, "llm"))
        assert snap.gpu_product == H100.gpu_product
    finally:
        await reader.aclose()


async def test_gpu_product_unknown_without_the_nodes_grant(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_sa_client: SaClientFactory, k8s_node_pool: Any,
    discoveries: Callable[..., KubeDiscovery], caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the nodes ClusterRole the product is unknown (None): the counts still work, the
    forbidden read is logged once, not on every tick, and no node is read again for
    NODE_FORBIDDEN_RETRY_S (one 403, not one per node per minute)."""
    from dataclasses import replace as dc_replace

    from warmscale.localcluster.fleet import H100, POOL_LABEL

    ns = k8s_namespace
    apps, custom = client.AppsV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    await k8s_node_pool(dc_replace(H100, name="nh100", count=1))
    await apps.create_namespaced_deployment(ns, w.body(gpu_deployment("llm", 1, {POOL_LABEL: f"{ns}-nh100"})))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("llm", "llm"))
    discovery = discoveries(await k8s_sa_client("warmscale-scaler", scaler_rbac_rules()))
    provider = discovery.provider(ns, "llm")
    caplog.set_level(logging.WARNING, logger="warmscale.signals.pods")
    counts = await counts_become(provider, PodCounts(ready=1, starting=0, current=1))
    assert counts.gpu_product is None
    for _ in range(3):
        assert (await provider.counts()).gpu_product is None
    assert discovery.nodes.error is not None and "403" in discovery.nodes.error
    assert discovery.nodes.attempts == 1 and discovery.nodes.reads == 0
    assert (await discovery.nodes.lookup(["another-node"])) == {"another-node": None}
    assert discovery.nodes.attempts == 1
    warned = [r for r in caplog.records if r.getMessage().startswith("cannot read a node's GPU product")]
    assert len(warned) == 1


async def test_dcgm_gpus_attributed_to_the_discovered_pods(
    k8s_admin: client.ApiClient, k8s_namespace: str, discoveries: Callable[..., KubeDiscovery],
    fake_engine: Callable[..., FakeEngine],
) -> None:
    """A dcgm-exporter (a local server) reports GPUs of the ScaledObject's two pods (found through its
    scaleTargetRef), of another pod in the namespace, of a same-named pod elsewhere, and an idle one:
    the snapshot keeps the first three GPUs, and the pod -> GPU map names them by UUID and index."""
    from warmscale.signals.engines.dcgm import gpus_by_pod

    ns = k8s_namespace
    core, apps, custom = client.CoreV1Api(k8s_admin), client.AppsV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    await apps.create_namespaced_deployment(ns, w.body(llm_deployment("llm", 2)))
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, scaled_object("llm", "llm"))
    a, b = await wait_for(lambda: running(core, ns, "app=llm", 2), within=30, what="2 pods Running")

    def line(gpu: int, namespace: str | None = None, pod: str | None = None, util: float = 90.0) -> str:
        owner = f',container="engine",namespace="{namespace}",pod="{pod}"' if pod else ""
        return f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{gpu}",Hostname="node-1"{owner}}} {util}\n'

    exporter = fake_engine("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + line(0, ns, a) + line(1, ns, a) + line(2, ns, b)
                           + line(3, ns, "someone-else") + line(4, "elsewhere", a) + line(5, util=0.0))
    engine = fake_engine(vllm_payload(running=1, waiting=0))
    reader = SourcesReader(discovery=discoveries())
    try:
        cfg = parse_metadata({"engine": "vllm", "endpoints": engine.url, "dcgmEndpoints": exporter.url})

        async def attributed() -> Any:
            snap = await reader.read(cfg, 0.0, (ns, "llm"))
            return snap if snap.pods is not None and len(snap.pods) == 2 else None

        snap = await wait_for(attributed, within=20, what="the pods counted")
        assert snap.gpus is not None and sorted(g.gpu for g in snap.gpus) == ["0", "1", "2"]
        by_pod = gpus_by_pod(snap.gpus)
        assert [(r.index, r.uuid) for r in by_pod[(ns, a)]] == [("0", "GPU-0"), ("1", "GPU-1")]
        assert [r.index for r in by_pod[(ns, b)]] == ["2"]
    finally:
        await reader.aclose()


async def test_leaderworkerset_target_counts_groups_and_scrapes_leaders(
    k8s_admin: client.ApiClient, k8s_namespace: str, k8s_sa_client: SaClientFactory,
    discoveries: Callable[..., KubeDiscovery],
) -> None:
    """A ScaledObject targeting a LeaderWorkerSet (the real CRD; group pods from the test-only LWS
    stand-in), read as the scaler's ServiceAccount: a replica is a group, ready only when all its pods
    are; only the leaders are scraped."""
    from tests.cluster import lws_standin
    from warmscale.localcluster import crds

    ns = k8s_namespace
    core, custom = client.CoreV1Api(k8s_admin), client.CustomObjectsApi(k8s_admin)
    await crds.install(k8s_admin, crds.load_crds(crds.lws_crd_dir()))
    tmpl = {"metadata": {"annotations": w.sim_annotations(ready_delay="1h")}, "spec": w.pod_spec()}
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "pp"},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": tmpl}}}
    await custom.create_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", ns, "leaderworkersets", lws)
    so = scaled_object("pp-so", "pp", kind="LeaderWorkerSet")
    so["spec"]["scaleTargetRef"]["apiVersion"] = "leaderworkerset.x-k8s.io/v1"
    await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, so)
    api = await k8s_sa_client("scaler", scaler_rbac_rules())
    urls = PodUrls()
    d = discoveries(api, url_for=urls)
    provider = d.provider(ns, "pp-so")
    async with lws_standin.running(k8s_admin, ns):
        await counts_become(provider, PodCounts(ready=0, starting=2, current=2))
        sel = "leaderworkerset.sigs.k8s.io/name=pp"
        names = await wait_for(lambda: running(core, ns, sel, 6), within=30, what="6 group pods Running")
        assert names == ["pp-0", "pp-0-1", "pp-0-2", "pp-1", "pp-1-1", "pp-1-2"]
        for n in ("pp-0", "pp-0-1", "pp-0-2", "pp-1", "pp-1-1"):  # group 1's last worker stays unready
            await make_ready(core, ns, n)
        counts = await counts_become(provider, PodCounts(ready=1, starting=1, current=2))
        assert len(counts.pods) == 6
        for n in names:
            urls.urls[n] = f"http://127.0.0.1:1/{n}"
        async def leaders() -> list[str] | None:
            # the watch cache may see pp-1's Ready a moment after the counts were reached
            found = sorted(e.replica for e in await provider.endpoints())
            return found if found == ["pp-0", "pp-1"] else None

        # the leaders only (pp-1 is Ready: scraped, though its group is not ready)
        scraped = await wait_for(leaders, within=15, what="both leaders scraped")
        assert scraped == ["pp-0", "pp-1"]
