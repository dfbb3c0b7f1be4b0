"""Issue 10, the warm pool's part of the fault suite, on a private local cluster (real etcd and
apiserver with RBAC and an audit log, KWOK nodes; the apiserver is restarted and etcd compacted, so it
is never the shared session cluster). The controller runs as ``warmscale warmpool`` processes under
its own ServiceAccount with the generated namespaced RBAC and the shipped node-write policy.

- the node-write ValidatingAdmissionPolicy: the controller's ServiceAccount may change only
  ``warmscale.io/staged-*`` labels/annotations of a node;
- every API request the controller makes is granted, and every grant is used (audit log);
- watch 410 Gone (etcd compacted under the watches) and an API server restart, for the controller and
  for the scaler's pod discovery: they re-list and act on later changes; discovery answers the last
  known pods or "unknown" meanwhile, never zero;
- the controller SIGKILLed mid-staging: no node is labelled before its Job succeeded; the restarted
  controller labels them and creates no duplicate Job;
- the leader SIGKILLed mid-reconcile: the other replica takes over; no duplicate placeholder, Job or
  pre-pull pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client.exceptions import ApiException

from tests.faults import warmpool_support as s
from tests.keda.hot_rig import DRIVER, publish_gpus, unpublish
from tests.servers import RedisServer
from warmscale.localcluster import crds, kueue, volcano
from warmscale.localcluster.harness import Cluster
from warmscale.warmpool import objects as ob
from warmscale.warmpool import rbac
from warmscale.warmpool.hot.sleeper_pods import CLAIM_SELECTOR
from warmscale.warmpool.hot.sleepers import SLEEPER_SELECTOR
from warmscale.warmpool.kueue import QUEUE_LABEL
from warmscale.warmpool.model_uri import CacheKey, parse_model_uri, staged_label_key
from warmscale.warmpool.raycluster import RAY_GROUP, RAY_PLURAL, RAY_VERSION, RAYCLUSTER_KIND

pytestmark = pytest.mark.cluster
P = s.P
MERGE = "application/merge-patch+json"
URI = "hf://org/model@rev1"
URI2 = "hf://org/model@rev2"


def label(ns: str, uri: str = URI) -> str:
    """The staged-node label of ``uri`` for a workload in namespace ``ns`` (the cache identity)."""
    return staged_label_key(CacheKey(parse_model_uri(uri), ns))


NODES = [f"kwok-{s.POOL}-{i}" for i in range(3)]
# A hot pool on one of them (docs/hot-tier.md), and a workload's hot standby there.
HOT_NODE_ANN = {"warmscale.io/hot-pool": s.POOL, "warmscale.io/hot-pool-host-ram": "64Gi",
                "warmscale.io/hot-pool-dra-driver": DRIVER}
HOT_ANN = {"warmscale.io/hot-standby": "1", "warmscale.io/engine": "vllm", "warmscale.io/hot-host-ram": "16Gi"}


@pytest.fixture(scope="module")
def fc() -> Iterator[Cluster]:
    # no watch cache: a watch resumed from a compacted resourceVersion gets 410 Gone straight from etcd
    yield from s.private_cluster(extra_apiserver_args=["--watch-cache=false"])


async def _status(call: Any) -> tuple[int, str]:
    try:
        await call
    except ApiException as exc:
        return int(exc.status), str(exc.body or exc.reason)
    return 200, ""


# ------------------------------------------------------------------ node writes: the admission policy


async def test_node_writes_limited_to_own_labels_by_admission_policy(fc: Cluster, tmp_path: Path) -> None:
    async with fc.admin_client() as admin:
        await s.install(admin, "ws-vap")
        kc = await s.sa_kubeconfig(fc, tmp_path / "sa.kubeconfig")
        sa = await kube_config.new_client_from_config(config_file=str(kc))
        core, acore = client.CoreV1Api(sa), client.CoreV1Api(admin)
        node = NODES[0]
        try:
            async def active() -> bool:  # the policy is picked up asynchronously: probe with a dry run
                code, body = await _status(core.patch_node(node, {"metadata": {"labels": {"probe": "x"}}},
                                                           dry_run="All", _content_type=MERGE))
                return code in (403, 422) and "ValidatingAdmissionPolicy" in body

            await s.poll(active, 30, "node-write policy active")
            before = (await acore.read_node(node)).to_dict()
            denied = {
                "another label": {"metadata": {"labels": {"team": "x"}}},
                "another warmscale.io label": {"metadata": {"labels": {"warmscale.io/pool": "other"}}},
                "removing a label": {"metadata": {"labels": {"kubernetes.io/hostname": None}}},
                "another annotation": {"metadata": {"annotations": {"note": "x"}}},
                "a taint": {"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}},
                "removing the GPU taint": {"spec": {"taints": []}},
                "cordoning": {"spec": {"unschedulable": True}},
            }
            for what, patch in denied.items():
                code, body = await _status(core.patch_node(node, patch, _content_type=MERGE))
                assert code in (403, 422) and "ValidatingAdmissionPolicy" in body, (what, code, body[:300])
            after = (await acore.read_node(node)).to_dict()
            assert after["metadata"]["labels"] == before["metadata"]["labels"]
            assert after["spec"] == before["spec"]
            # its own labels and records: allowed, both ways
            own = {"metadata": {"labels": {"warmscale.io/staged-0123456789": "true"},
                                "annotations": {"warmscale.io/staged-0123456789": "{}"}}}
            assert (await _status(core.patch_node(node, own, _content_type=MERGE)))[0] == 200
            gone = {"metadata": {"labels": {"warmscale.io/staged-0123456789": None},
                                 "annotations": {"warmscale.io/staged-0123456789": None}}}
            assert (await _status(core.patch_node(node, gone, _content_type=MERGE)))[0] == 200
            # RBAC: no delete, no status writes
            assert (await _status(core.delete_node(node)))[0] == 403
            assert (await _status(core.patch_node_status(node, {"status": {"capacity": {"x": "1"}}},
                                                         _content_type=MERGE)))[0] == 403
            # the policy binds only the controller: the admin still can
            assert (await _status(acore.patch_node(node, {"metadata": {"labels": {"team": "x"}}},
                                                   _content_type=MERGE)))[0] == 200
            await acore.patch_node(node, {"metadata": {"labels": {"team": None}}}, _content_type=MERGE)
        finally:
            await sa.close()


# ------------------------------------------------------------------ least privilege: the audit log


def _rule_allows(ev: dict[str, Any], namespaces: list[str] | None) -> bool:
    """Whether the generated rules grant ``ev``: namespaced mode (``namespaces``: workload rules there only,
    the Lease in the first) or cluster-wide (None: workload rules anywhere, the Lease in the install
    namespace)."""
    ref = ev.get("objectRef") or {}
    group, res, verb = ref.get("apiGroup", ""), ref.get("resource", ""), ev.get("verb")
    if ref.get("subresource"):
        return False
    rules = [(r, "workload") for _, r in rbac.WORKLOAD_RULES] + [(r, "cluster") for _, r in rbac.CLUSTER_RULES] + [
        (r, "lease") for _, r in rbac.LEASE_RULES]
    for r, where in rules:
        if group not in r["apiGroups"] or res not in r["resources"] or verb not in r["verbs"]:
            continue
        if "resourceNames" in r and ref.get("name") not in r["resourceNames"]:
            continue
        if namespaces is not None and where == "workload" and ref.get("namespace") not in namespaces:
            continue  # namespaced mode: only the watched namespaces
        if namespaces is not None and where == "lease" and ref.get("namespace") != namespaces[0]:
            continue
        if namespaces is None and where == "lease" and ref.get("namespace") != s.INSTALL_NS:
            continue  # cluster-wide: the Lease lives in the install namespace
        return True
    return False


@pytest.mark.parametrize("mode", ["namespaced", "cluster-wide"])
async def test_every_request_granted_and_every_grant_used(fc: Cluster, tmp_path: Path, mode: str,
                                                         redis_server: RedisServer) -> None:
    """With a store (``--redis-url``) and a hot pool (a pool node publishing one DRA GPU, a workload with
    a hot standby in the second namespace), so that the hot tier's grants (``rbac.granted(hot=True)``:
    ResourceClaims, ResourceSlices) are audited with the rest."""
    cluster_wide = mode == "cluster-wide"
    ns = "ws-audit-cw" if cluster_wide else "ws-audit"
    ns_b = ns + "-b"  # namespaced mode watches both (`--namespace ws-audit,ws-audit-b`): a Role in each
    async with fc.admin_client() as admin:
        await s.install(admin, [ns, ns_b], cluster_wide=cluster_wide)
        apps, core = client.AppsV1Api(admin), client.CoreV1Api(admin)
        custom = client.CustomObjectsApi(admin)
        ann = {P + "enabled": "true", P + "autoscale": "true", P + "min-ready": "1", P + "max-replicas": "4",
               P + "standby": "1", P + "prestage-nodes": "1", P + "model-uri": URI, **s.staged("1s")}
        await apps.create_namespaced_deployment(ns, s.gpu_deployment("llm", 1, ann))
        await apps.create_namespaced_stateful_set(ns_b, s.statefulset("sts", 1, {P + "enabled": "true",
                                                                              P + "min-ready": "1"}))
        # in a Kueue queue (its CRDs only, no Kueue controller): the controller reads the LocalQueue and
        # the ClusterQueue's GPU quota (warmpool.kueue)
        await crds.install(admin, crds.load_crds(await asyncio.to_thread(kueue.crd_dir)))
        q = kueue.Queue(ns_b, f"{ns_b}-flavor", f"{ns_b}-cq", "online")
        for plural, body in kueue.queue_objects(q, gpus=8):
            if plural == "localqueues":
                await custom.create_namespaced_custom_object(*kueue.KUEUE_API, ns_b, plural, body)
            else:
                await custom.create_cluster_custom_object(*kueue.KUEUE_API, plural, body)
        await apps.patch_namespaced_stateful_set("sts", ns_b, {"metadata": {"labels": {QUEUE_LABEL: "online"}}})
        # a LeaderWorkerSet (the real CRD; no LWS controller: no pods needed) gets its status annotation
        await custom.create_namespaced_custom_object(ob.LWS_GROUP, ob.LWS_VERSION, ns_b, ob.LWS_PLURAL, {
            "apiVersion": f"{ob.LWS_GROUP}/{ob.LWS_VERSION}", "kind": ob.LWS_KIND,
            "metadata": {"name": "pp", "annotations": {P + "enabled": "true", P + "min-ready": "1"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
                "metadata": {}, "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]}}}}})
        # a LeaderWorkerSet on Volcano (its PodGroup CRD; no Volcano scheduler: the members stay Pending)
        # gets its placeholder gang as one PodGroup, deleted again when the standby goes to 0
        await crds.install(admin, [c for c in crds.load_crds(volcano.crd_dir())
                                   if c["metadata"]["name"] == f"{ob.PG_PLURAL}.{ob.PG_GROUP}"])
        await custom.create_namespaced_custom_object(ob.LWS_GROUP, ob.LWS_VERSION, ns_b, ob.LWS_PLURAL, {
            "apiVersion": f"{ob.LWS_GROUP}/{ob.LWS_VERSION}", "kind": ob.LWS_KIND,
            "metadata": {"name": "vc", "annotations": {P + "enabled": "true", P + "standby": "1"}},
            "spec": {"replicas": 0, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
                "metadata": {}, "spec": {"schedulerName": ob.VOLCANO_SCHEDULER,
                                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                                         "containers": [{"name": "c", "image": "registry.invalid/x"}]}}}}})
        # a RayCluster worker group (KubeRay's CRD from its module; no operator: no pods needed), likewise
        await crds.install(admin, crds.load_crds(crds.kuberay_crd_dir()))
        await custom.create_namespaced_custom_object(RAY_GROUP, RAY_VERSION, ns_b, RAY_PLURAL, {
            "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}", "kind": RAYCLUSTER_KIND,
            "metadata": {"name": "rc", "annotations": {P + "enabled": "true", P + "min-ready": "1"}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                {"name": "head", "image": "registry.invalid/ray"}]}}},
                "workerGroupSpecs": [{"groupName": "llm", "replicas": 1, "minReplicas": 0, "maxReplicas": 2,
                                      "rayStartParams": {}, "template": {"spec": {"containers": [
                                          {"name": "worker", "image": "registry.invalid/ray"}]}}}]}})
        # a cache root on a system path: an Event, nothing created or changed for it
        bad = {P + "enabled": "true", P + "standby": "1", P + "prestage-nodes": "1", P + "model-uri": URI2,
               P + "cache-root": "/var/lib/kubelet"}
        await apps.create_namespaced_deployment(ns, s.gpu_deployment("bad", 0, bad))
        # the hot pool: one GPU published by a DRA ResourceSlice on a pool node; a hot standby in ns_b
        hot_node = NODES[-1]
        slices = await publish_gpus(admin, [hot_node], count=1)
        await core.patch_node(hot_node, {"metadata": {"annotations": HOT_NODE_ANN}})
        await apps.create_namespaced_deployment(ns_b, s.gpu_deployment("hot", 0, {**HOT_ANN, "warmscale.io/hot-pool":
                                                                                  s.POOL}))
        t0 = time.time()
        ctl = s.Controller(await s.sa_kubeconfig(fc, tmp_path / "sa.kubeconfig"),
                           None if cluster_wide else f"{ns},{ns_b}",
                           tmp_path / "ctl.log", f"audit-{mode}", extra=["--redis-url", redis_server.url])
        try:
            async def hot_objects() -> tuple[int, int]:
                claims = await client.ResourceV1Api(admin).list_namespaced_resource_claim(
                    ns_b, label_selector=CLAIM_SELECTOR)
                sleepers = await core.list_namespaced_pod(ns_b, label_selector=SLEEPER_SELECTOR)
                return len(claims.items), len(sleepers.items)

            async def hot_created() -> bool:
                return await hot_objects() == (1, 1)

            async def so() -> Any:
                return await custom.get_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", "llm")

            async def staged_and_held() -> bool:
                labelled = [n for n in NODES if ((await core.read_node(n)).metadata.labels or {}).get(label(ns))]
                return bool(labelled) and len(await s.managed(admin, ns, "placeholder")) == 1

            await s.poll(so, 60, "ScaledObject created")
            await s.poll(staged_and_held, 60, "model staged and a placeholder held")
            # (the hot pool's pass runs meanwhile: polled after the staging, deleted while the rest runs)
            await s.poll(hot_created, 30, "the hot pool's shared claim and sleeper created")
            await apps.patch_namespaced_deployment("hot", ns_b, {"metadata": {"annotations": {
                "warmscale.io/hot-standby": None}}})  # opted out: its sleeper and claim are deleted
            await s.poll(lambda: _has_status(apps, ns, ns_b), 30, "status annotations written")
            await s.poll(lambda: _pod_groups(custom, ns_b, 1), 30, "the Volcano gang's PodGroup created")
            await custom.patch_namespaced_custom_object(ob.LWS_GROUP, ob.LWS_VERSION, ns_b, ob.LWS_PLURAL, "vc", {
                "metadata": {"annotations": {P + "standby": "0"}}}, _content_type=MERGE)
            await s.poll(lambda: _pod_groups(custom, ns_b, 0), 30, "the PodGroup deleted with its gang")
            # what the cluster admitted and ran: the stage Job tolerates its node's taint only, restricted
            job = next(j for j in (await client.BatchV1Api(admin).list_namespaced_job(ns)).items
                       if j.metadata.labels.get("warmscale.io/role") == "stage")
            pod_spec = job.spec.template.spec
            assert [(t.key, t.operator, t.value, t.effect) for t in pod_spec.tolerations] == [
                ("nvidia.com/gpu", "Equal", "present", "NoSchedule")]
            sc = pod_spec.containers[0].security_context
            assert sc.capabilities.drop == ["ALL"] and sc.read_only_root_filesystem
            assert sc.allow_privilege_escalation is False
            assert pod_spec.security_context.seccomp_profile.type == "RuntimeDefault"

            async def refused() -> bool:
                evs = (await core.list_namespaced_event(ns, field_selector="involvedObject.name=bad")).items
                return any(e.reason == "CacheRootRefused" and e.message.startswith(P + "cache-root") for e in evs)

            await s.poll(refused, 30, "CacheRootRefused Event")
            bad_dep = await apps.read_namespaced_deployment("bad", ns)
            assert P + "status" not in (bad_dep.metadata.annotations or {}) and not bad_dep.metadata.finalizers
            bad_hash = s.workload_hash("Deployment", ns, "bad")
            owned = (await core.list_namespaced_pod(ns, label_selector=f"warmscale.io/workload={bad_hash}")).items
            assert not owned
            # floor up (ScaledObject patched), then: no standby (placeholder deleted), no autoscale
            # (ScaledObject deleted), another model (old staging Job deleted, evict Job, node unlabelled)
            await apps.patch_namespaced_deployment("llm", ns, {"metadata": {"annotations": {P + "min-ready": "2"}}})
            await s.poll(lambda: _floor(custom, ns, 2), 30, "ScaledObject floor patched to 2")
            await apps.patch_namespaced_deployment("llm", ns, {"metadata": {"annotations": {
                P + "standby": "0", P + "autoscale": "false", P + "model-uri": URI2}}})

            async def switched() -> bool:
                labs = [(await core.read_node(n)).metadata.labels or {} for n in NODES]
                return not any(lab.get(label(ns)) for lab in labs) and \
                    any(lab.get(label(ns, URI2)) for lab in labs) and not await s.managed(admin, ns, "placeholder")

            await s.poll(switched, 60, "rev1 evicted and unlabelled, rev2 staged, placeholder gone")
            with pytest.raises(ApiException) as gone:
                await so()
            assert gone.value.status == 404
            # delete: the finalizer holds it until rev2 is evicted, then the controller releases it
            await apps.delete_namespaced_deployment("llm", ns)

            async def deleted() -> bool:
                try:
                    await apps.read_namespaced_deployment("llm", ns)
                except ApiException as exc:
                    return exc.status == 404
                return False

            await s.poll(deleted, 60, "Deployment released by the finalizer")

            async def hot_deleted() -> bool:
                return await hot_objects() == (0, 0)

            await s.poll(hot_deleted, 30, "the opted-out sleeper and its claim deleted")
        finally:
            assert ctl.stop() == 0
            await unpublish(admin, slices)
            await core.patch_node(hot_node, {"metadata": {"annotations": {k: None for k in HOT_NODE_ANN}}})
        await asyncio.sleep(1.5)  # the audit backend writes asynchronously
        events = [e for e in fc.audit_events(s.SA_USER) if _ts(e) >= t0]
        assert events, "no audit events of the controller"
        denied = [_brief(e) for e in events if (e.get("responseStatus") or {}).get("code") == 403]
        assert not denied, f"requests the RBAC denied: {denied[:10]}"
        outside = [_brief(e) for e in events if not _rule_allows(e, None if cluster_wide else [ns, ns_b])]
        assert not outside, f"requests outside the granted rules: {outside[:10]}"
        used = {((e["objectRef"].get("apiGroup") or ""), e["objectRef"]["resource"], e["verb"]) for e in events}
        unused = rbac.granted(hot=True) - used
        assert not unused, f"granted but never used: {sorted(unused)}"
        s.record(f"rbac_audit_{mode}", requests=len(events), distinct=sorted("/".join(u) for u in used))
        await s.strip_finalizers(admin, ns)
        if cluster_wide:  # the later tests run with the namespaced grants only
            await client.RbacAuthorizationV1Api(admin).delete_cluster_role_binding(rbac.NAME)


async def _has_status(apps: client.AppsV1Api, ns: str, ns_sts: str) -> bool:
    d = await apps.read_namespaced_deployment("llm", ns)
    st = await apps.read_namespaced_stateful_set("sts", ns_sts)
    lws = await client.CustomObjectsApi(apps.api_client).get_namespaced_custom_object(
        ob.LWS_GROUP, ob.LWS_VERSION, ns_sts, ob.LWS_PLURAL, "pp")
    rc = await client.CustomObjectsApi(apps.api_client).get_namespaced_custom_object(
        RAY_GROUP, RAY_VERSION, ns_sts, RAY_PLURAL, "rc")
    if any(P + "status" not in (o["metadata"].get("annotations") or {}) for o in (lws, rc)):
        return False
    return all(P + "status" in (o.metadata.annotations or {}) for o in (d, st)) and \
        "warmscale.io/cache-cleanup" in (d.metadata.finalizers or [])


async def _pod_groups(custom: client.CustomObjectsApi, ns: str, want: int) -> bool:
    items = (await custom.list_namespaced_custom_object(ob.PG_GROUP, ob.PG_VERSION, ns, ob.PG_PLURAL))["items"]
    return len([g for g in items if not g["metadata"].get("deletionTimestamp")]) == want


async def _floor(custom: client.CustomObjectsApi, ns: str, want: int) -> bool:
    so = await custom.get_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", "llm")
    return bool(so["spec"]["minReplicaCount"] == want)


def _ts(ev: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def _brief(ev: dict[str, Any]) -> str:
    ref = ev.get("objectRef") or {}
    return (f"{ev.get('verb')} {ref.get('apiGroup', '')}/{ref.get('resource')}"
            f"{'/' + ref['subresource'] if ref.get('subresource') else ''} ns={ref.get('namespace')} "
            f"name={ref.get('name')} -> {(ev.get('responseStatus') or {}).get('code')}")


# ------------------------------------------------------------------ watch 410 and API server restart


async def test_watch_410_and_apiserver_restart(fc: Cluster, tmp_path: Path) -> None:
    from warmscale.signals.sources.pods import DiscoveryError, KubeDiscovery

    ns = "ws-restart"
    async with fc.admin_client() as admin:
        await s.install(admin, ns)
        apps, core = client.AppsV1Api(admin), client.CoreV1Api(admin)
        ann = {P + "enabled": "true", P + "standby": "1", P + "scale-to-zero": "allowed", P + "min-ready": "0"}
        await apps.create_namespaced_deployment(ns, s.gpu_deployment("llm", 1, ann))
        ctl = s.Controller(await s.sa_kubeconfig(fc, tmp_path / "sa.kubeconfig"), ns, tmp_path / "ctl.log",
                           "restart", extra=["--watch-timeout", "2"])
        disc_api = await kube_config.new_client_from_config(config_file=str(fc.kubeconfig))
        disc = KubeDiscovery(disc_api, watch_timeout_s=2, stale_after_s=60.0)
        pods = disc.provider(ns, "llm", pod_selector="app=llm")
        try:
            async def placeholders(n: int) -> bool:
                return len(await s.managed(admin, ns, "placeholder")) == n

            async def ready(n: int) -> bool:
                try:
                    return (await pods.counts()).ready == n
                except DiscoveryError:
                    return False

            await s.poll(lambda: placeholders(1), 60, "controller holds 1 placeholder")
            await s.poll(lambda: ready(1), 30, "discovery sees 1 ready pod")

            # 1. 410 Gone: etcd compacted under the open watches; they resume from a compacted version
            cache = disc.caches()[("pods", ns, "app=llm")]
            lists_before = cache.lists
            stop = time.monotonic() + 8
            while time.monotonic() < stop:
                await core.create_namespaced_config_map(ns, {"metadata": {"generateName": "bump-"}})
                fc.etcd_compact()
                await asyncio.sleep(0.5)
            assert cache.lists > lists_before, "pod discovery did not re-list after its version was compacted"
            await s.poll(lambda: _logged_410(ctl), 10, "controller re-listed on 410 Gone")
            await apps.patch_namespaced_deployment_scale("llm", ns, {"spec": {"replicas": 2}})
            t = time.monotonic()
            await s.poll(lambda: ready(2), 30, "discovery sees the scale-up after 410")
            after_410 = time.monotonic() - t

            # 2. API server restart (2 s down, etcd compacted meanwhile): discovery keeps the last known
            # pods (or says unknown), never zero; afterwards both act on new changes
            seen: list[Any] = []

            async def sample(fut: asyncio.Future[Any]) -> Any:
                while not fut.done():
                    try:
                        seen.append((await pods.counts()).ready)
                    except DiscoveryError as exc:
                        seen.append(f"unknown: {str(exc)[:60]}")
                    await asyncio.sleep(0.2)
                return fut.result()

            loop = asyncio.get_running_loop()
            t_stop = time.monotonic()
            await sample(loop.run_in_executor(None, fc.stop_apiserver))
            await sample(asyncio.ensure_future(asyncio.sleep(2.0)))
            await sample(loop.run_in_executor(None, fc.etcd_compact))
            fc.start_apiserver()  # from this (the main) thread: see Cluster.start_apiserver
            await sample(loop.run_in_executor(None, fc.wait_apiserver))
            outage = time.monotonic() - t_stop
            assert 0 not in seen, seen
            up = time.monotonic()
            await apps.patch_namespaced_deployment("llm", ns, {"metadata": {"annotations": {P + "standby": "2"}}})
            await s.poll(lambda: placeholders(2), 60, "controller acts after the restart")
            ctl_recovery = time.monotonic() - up
            await apps.patch_namespaced_deployment_scale("llm", ns, {"spec": {"replicas": 3}})
            await s.poll(lambda: ready(3), 60, "discovery acts after the restart")
            disc_recovery = time.monotonic() - up
            assert ctl.proc.poll() is None, "the controller exited"
            s.record("watch_410", discovery_relists=cache.lists - lists_before, scale_seen_s=round(after_410, 2))
            s.record("apiserver_restart", outage_s=round(outage, 2), discovery_during=sorted({str(x) for x in seen}),
                     controller_recovery_s=round(ctl_recovery, 2), discovery_recovery_s=round(disc_recovery, 2))
        finally:
            await pods.aclose()
            await disc.aclose()
            await disc_api.close()
            ctl.stop()


async def _logged_410(ctl: s.Controller) -> bool:
    return any(r.get("msg") == "cache relist" and r.get("status") == 410 for r in ctl.lines())


# ------------------------------------------------------------------ crash in the middle of staging


async def test_controller_killed_mid_staging_never_labels_early(fc: Cluster, tmp_path: Path) -> None:
    ns = "ws-crash"
    async with fc.admin_client() as admin:
        await s.install(admin, ns)
        apps, core, batch = client.AppsV1Api(admin), client.CoreV1Api(admin), client.BatchV1Api(admin)
        uri = "hf://org/crash@r1"
        key = label(ns, uri)
        ann = {P + "enabled": "true", P + "prestage-nodes": "2", P + "model-uri": uri, P + "min-ready": "0",
               P + "scale-to-zero": "allowed", **s.staged("6s")}
        await apps.create_namespaced_deployment(ns, s.gpu_deployment("llm", 0, ann))
        kc = await s.sa_kubeconfig(fc, tmp_path / "sa.kubeconfig")
        ctl = s.Controller(kc, ns, tmp_path / "ctl1.log", "crash-1")
        observed: dict[str, dict[str, float]] = {"label": {}, "job_done": {}}
        stop_watch = asyncio.Event()

        async def watch_state() -> None:  # when each node was first seen labelled / its Job first seen done
            while not stop_watch.is_set():
                now = time.monotonic()
                jobs = (await batch.list_namespaced_job(ns)).items
                for j in jobs:
                    if j.status.succeeded:
                        observed["job_done"].setdefault(j.metadata.annotations["warmscale.io/node"], now)
                for n in NODES:
                    if ((await core.read_node(n)).metadata.labels or {}).get(key):
                        observed["label"].setdefault(n, now)
                await asyncio.sleep(0.1)

        watcher = asyncio.create_task(watch_state())
        try:
            async def two_jobs() -> list[Any]:
                js = (await batch.list_namespaced_job(ns)).items
                return js if len(js) == 2 else []

            jobs_before = {j.metadata.name: j.metadata.uid for j in await s.poll(two_jobs, 60, "2 staging Jobs")}
            ctl.kill()  # SIGKILL mid-staging
            killed = time.monotonic()
            await s.poll(lambda: _all_done(batch, ns), 30, "Jobs finished while the controller is down")
            await asyncio.sleep(1)
            assert not observed["label"], "a node was labelled while nobody could have seen its Job finish"
            ctl = s.Controller(kc, ns, tmp_path / "ctl2.log", "crash-2")
            restarted = time.monotonic()
            job_nodes = {j.metadata.annotations["warmscale.io/node"] for j in (await two_jobs())}
            await s.poll(lambda: _labelled(core, job_nodes, key), 60, "nodes labelled after the restart")
            await asyncio.sleep(0.3)
            for n in job_nodes:  # never labelled before its Job was seen done
                assert observed["label"][n] >= observed["job_done"][n], observed
            after = {j.metadata.name: j.metadata.uid for j in (await batch.list_namespaced_job(ns)).items}
            assert after == jobs_before, "a staging Job was duplicated or re-created"
            s.record("controller_killed_mid_staging", killed_after_jobs_created=True,
                     labels_before_restart=0, recovery_s=round(max(observed["label"].values()) - restarted, 2),
                     down_s=round(restarted - killed, 2))
        finally:
            stop_watch.set()
            with contextlib.suppress(Exception):
                await watcher
            ctl.stop()
            await s.strip_finalizers(admin, ns)


async def _all_done(batch: client.BatchV1Api, ns: str) -> bool:
    js = (await batch.list_namespaced_job(ns)).items
    return len(js) == 2 and all(j.status.succeeded for j in js)


async def _labelled(core: client.CoreV1Api, nodes: set[str], key: str) -> bool:
    labels = [(await core.read_node(n)).metadata.labels or {} for n in nodes]
    return all(lab.get(key) == "true" for lab in labels)


# ------------------------------------------------------------------ leader fail-over mid-reconcile


async def test_leader_killed_mid_reconcile_no_duplicates(fc: Cluster, tmp_path: Path) -> None:
    ns = "ws-failover"
    async with fc.admin_client() as admin:
        await s.install(admin, ns)
        apps, batch = client.AppsV1Api(admin), client.BatchV1Api(admin)
        custom = client.CustomObjectsApi(admin)
        kc = await s.sa_kubeconfig(fc, tmp_path / "sa.kubeconfig")
        a = s.Controller(kc, ns, tmp_path / "a.log", "replica-a", lease_s=3)
        await s.poll(lambda: _true(a.leads()), 30, "replica a leads")
        b = s.Controller(kc, ns, tmp_path / "b.log", "replica-b", lease_s=3)
        max_seen: dict[str, int] = {"placeholder": 0, "prepull": 0, "jobs": 0}
        names_seen: dict[str, set[str]] = {"placeholder": set(), "prepull": set(), "jobs": set()}
        stop_watch = asyncio.Event()

        async def watch_counts() -> None:
            while not stop_watch.is_set():
                for role in ("placeholder", "prepull"):
                    pods = await s.managed(admin, ns, role)
                    max_seen[role] = max(max_seen[role], len(pods))
                    names_seen[role] |= {p.metadata.name for p in pods}
                js = (await batch.list_namespaced_job(ns)).items
                max_seen["jobs"] = max(max_seen["jobs"], len(js))
                names_seen["jobs"] |= {j.metadata.name for j in js}
                await asyncio.sleep(0.1)

        watcher = asyncio.create_task(watch_counts())
        try:
            await asyncio.sleep(1.0)
            ann = {P + "enabled": "true", P + "standby": "3", P + "prestage-nodes": "2", P + "model-uri": URI,
                   P + "autoscale": "true", P + "max-replicas": "4", **s.staged("2s")}
            await apps.create_namespaced_deployment(ns, s.gpu_deployment("llm", 1, ann))

            async def first_job() -> bool:
                return bool((await batch.list_namespaced_job(ns)).items)

            await s.poll(first_job, 30, "the leader started reconciling", interval=0.02)
            a.kill()  # SIGKILL between its creates: no release of the lease
            killed = time.monotonic()
            await s.poll(lambda: _true(b.leads()), 30, "replica b takes over")
            failover = time.monotonic() - killed

            async def converged() -> bool:
                ph = await s.managed(admin, ns, "placeholder")
                pulls = await s.managed(admin, ns, "prepull")
                js = (await batch.list_namespaced_job(ns)).items
                return len(ph) == 3 and len(pulls) == 2 and len(js) == 2

            await s.poll(converged, 60, "b converged")
            converged_s = time.monotonic() - killed
            await asyncio.sleep(2)  # a few more reconciles of b
            assert max_seen == {"placeholder": 3, "prepull": 2, "jobs": 2}, max_seen
            assert len(names_seen["placeholder"]) == 3 and len(names_seen["prepull"]) == 2, names_seen
            assert len(names_seen["jobs"]) == 2, names_seen
            so = await custom.list_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects")
            assert len(so["items"]) == 1
            s.record("leader_killed_mid_reconcile", failover_s=round(failover, 2), converged_s=round(converged_s, 2),
                     max_placeholders=max_seen["placeholder"], max_jobs=max_seen["jobs"])
        finally:
            stop_watch.set()
            with contextlib.suppress(Exception):
                await watcher
            a.stop()
            b.stop()
            await s.strip_finalizers(admin, ns)


async def _true(v: bool) -> bool:
    return v


# ------------------------------------------------------------------ the Lease's namespace (item 12)


async def test_missing_lease_namespace_fails_fast_and_namespace_mode_leases_there(fc: Cluster, tmp_path: Path) -> None:
    # as the README shows it: an admin kubeconfig, no `warmscale` namespace on this cluster
    async with fc.admin_client() as admin:
        core = client.CoreV1Api(admin)
        with contextlib.suppress(ApiException):
            await core.read_namespace("warmscale-absent")
            pytest.fail("namespace warmscale-absent exists")
        t0 = time.monotonic()
        ctl = s.Controller(fc.kubeconfig, "ws-lease", tmp_path / "absent.log", "absent",
                           extra=["--lease-namespace", "warmscale-absent"])
        code = await asyncio.to_thread(ctl.proc.wait, 60)
        ctl.stop()
        took = time.monotonic() - t0
        text = (tmp_path / "absent.log").read_text()
        assert code == 2 and "warmscale-absent" in text and "--lease-namespace" in text, text[-2000:]
        # --namespace NS without --lease-namespace: the Lease goes to NS (which exists)
        await s.ensure_namespace(admin, "ws-lease")
        ctl = s.Controller(fc.kubeconfig, "ws-lease", tmp_path / "ns.log", "ns-mode")
        try:
            coord = client.CoordinationV1Api(admin)

            async def lease() -> Any:
                return await coord.read_namespaced_lease("warmscale-warmpool", "ws-lease")

            got = await s.poll(lease, 30, "Lease in the watched namespace")
            assert got.spec.holder_identity == "ns-mode"
        finally:
            assert ctl.stop() == 0
        s.record("lease_namespace_missing", exit_code=code, exited_after_s=round(took, 2))
