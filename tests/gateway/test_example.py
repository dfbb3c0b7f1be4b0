"""The llm-d-style P/D example with an InferencePool renders into consistent objects: the pool selects
both roles, the ScaledObjects read the picker's metrics Service and declare the roles the pods carry."""

from __future__ import annotations

from urllib.parse import urlparse

from tests.manifests.helpers import find, render
from warmscale.scaler.config import parse_metadata
from warmscale.warmpool.annotations import parse_annotations
from warmscale.warmpool.objects import Workload, scaled_object


def test_pd_example_is_consistent() -> None:
    objs = render("manifests/examples/llm-d-pd")
    (pool,) = find(objs, "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    deploys = {d["metadata"]["name"]: d for d in find(objs, "Deployment")}
    services = {s["metadata"]["name"]: s for s in find(objs, "Service")}
    epp_svc = services[pool["spec"]["endpointPickerRef"]["name"]]
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] in {p["port"] for p in epp_svc["spec"]["ports"]}

    roles = {}
    for so in find(objs, "ScaledObject"):
        meta = so["spec"]["triggers"][0]["metadata"]
        cfg = parse_metadata(meta)
        assert cfg.epp_pool == pool["metadata"]["name"] and cfg.pd_group == "llama-pd"
        url = urlparse(meta["eppAddress"])
        assert url.hostname == f"{epp_svc['metadata']['name']}.llm.svc"
        assert url.port in {p["port"] for p in epp_svc["spec"]["ports"] if p["name"] == "metrics"}
        target = deploys[so["spec"]["scaleTargetRef"]["name"]]
        labels = target["spec"]["template"]["metadata"]["labels"]
        # The pool selects the role's pods, and the pods carry the role the ScaledObject declares.
        assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert labels["llm-d.ai/role"] == cfg.role
        warm = parse_annotations(target["metadata"]["annotations"])
        assert (warm.role, warm.pd_group) == (cfg.role, cfg.pd_group)
        assert cfg.scale_to_zero and cfg.floor == 0 == so["spec"]["minReplicaCount"]
        assert cfg.max_replicas == so["spec"]["maxReplicaCount"]
        ports = {p["containerPort"] for p in target["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert pool["spec"]["targetPorts"][0]["number"] in ports
        roles[cfg.role] = cfg
    assert set(roles) == {"prefill", "decode"}
    assert roles["decode"].decode_per_prefill_min == 1 and roles["decode"].decode_per_prefill_max == 3


def test_controller_passes_role_and_group_to_the_scaledobject_it_creates() -> None:
    (deploy,) = [d for d in find(render("manifests/examples/llm-d-pd"), "Deployment")
                 if d["metadata"]["name"] == "llama-pd-decode"]
    cfg = parse_annotations({**deploy["metadata"]["annotations"], "warmscale.io/autoscale": "true"})
    wl = Workload(kind="Deployment", namespace="llm", name="llama-pd-decode", uid="u", replicas=0,
                  template=deploy["spec"]["template"], annotations=deploy["metadata"]["annotations"],
                  selector={"app.kubernetes.io/name": "llama-pd-decode"})
    meta = scaled_object(wl, cfg, 0, "warmscale.warmscale.svc:9090")["spec"]["triggers"][0]["metadata"]
    assert meta["role"] == "decode" and meta["pdGroup"] == "llama-pd"
