"""The real KEDA and the HPA scale a LeaderWorkerSet through its scale subresource (served by the API
server from the real v0.10.0 CRD alone; the group pods come from the test-only LWS stand-in, which
also publishes ``status.hpaPodSelector``, the selector the HPA requires)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes_asyncio import client

from tests.cluster import lws_standin
from tests.cluster.fixtures import wait_for
from tests.keda.conftest import E2E
from warmscale.localcluster import crds
from warmscale.localcluster import workloads as w
from warmscale.warmpool import objects as ob

G, V, PL = ob.LWS_GROUP, ob.LWS_VERSION, ob.LWS_PLURAL


def daily(t: datetime) -> str:
    return f"{t.minute} {t.hour} * * *"


async def test_keda_scales_a_leaderworkerset_by_groups(e2e: E2E) -> None:
    api, ns = e2e.api, e2e.namespace
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    await crds.install(api, crds.load_crds(crds.lws_crd_dir()))
    tmpl = {"metadata": {"annotations": w.sim_annotations(ready_delay="1s")}, "spec": w.pod_spec()}
    lws = {"apiVersion": f"{G}/{V}", "kind": ob.LWS_KIND, "metadata": {"name": "pp"},
           "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": tmpl}}}
    await custom.create_namespaced_custom_object(G, V, ns, PL, lws)
    now = datetime.now(UTC)
    # a cron window around now (daily, so it holds across midnight too): KEDA asks for 3 replicas
    so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "pp"},
          "spec": {"scaleTargetRef": {"apiVersion": f"{G}/{V}", "kind": ob.LWS_KIND, "name": "pp"},
                   "pollingInterval": 1, "minReplicaCount": 1, "maxReplicaCount": 3,
                   "triggers": [{"type": "cron", "metadata": {
                       "timezone": "UTC", "start": daily(now - timedelta(minutes=5)),
                       "end": daily(now + timedelta(minutes=30)), "desiredReplicas": "3"}}]}}
    async with lws_standin.running(api, ns):
        await custom.create_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", so)

        async def three_groups() -> bool:
            obj = await custom.get_namespaced_custom_object(G, V, ns, PL, "pp")
            pods = (await core.list_namespaced_pod(ns, label_selector=f"{ob.LWS_NAME_LABEL}=pp")).items
            ready = [p for p in pods if w.is_ready(p)]
            return obj["spec"]["replicas"] == 3 and len(ready) == 6 and (obj.get("status") or {}).get(
                "readyReplicas") == 3

        await wait_for(three_groups, within=120, what="KEDA/HPA scaled the LeaderWorkerSet to 3 ready groups")
        hpa = await client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("keda-hpa-pp", ns)
        assert hpa.spec.scale_target_ref.kind == ob.LWS_KIND and hpa.status.desired_replicas == 3
