"""The kustomize install, its overlays and the examples render and say what docs/install.md says."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scaler.config import KEDA_KEYS, parse_metadata
from warmpool import objects as ob
from warmpool.annotations import parse_annotations

from .helpers import ENGINES, EXTRAS, INSTALLS, ROOT, find, one, render


@pytest.mark.parametrize("path", INSTALLS + EXTRAS + [f"manifests/examples/{e}" for e in ENGINES])
def test_renders(path: str) -> None:
    objs = render(path)
    assert objs, f"{path} rendered nothing"
    for o in objs:
        assert o.get("apiVersion") and o.get("kind") and o["metadata"].get("name"), o


def _container(deploy: dict[str, Any]) -> dict[str, Any]:
    containers = deploy["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_default_install() -> None:
    objs = render("manifests")
    assert one(objs, "Namespace", "warmscale")
    namespaced = [o for o in objs if o["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding",
                                                       "PriorityClass", "ValidatingAdmissionPolicy",
                                                       "ValidatingAdmissionPolicyBinding"}]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"warmscale"}

    scaler = one(objs, "Deployment", "warmscale-scaler")
    assert scaler["spec"]["replicas"] == 2
    args = _container(scaler)["args"]
    assert "scaler" in args and "--redis-url=$(WARMSCALE_REDIS_URL)" in args
    assert "--grpc-port=9090" in args and "--metrics-port=9091" in args
    svc = one(objs, "Service", "warmscale")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"grpc": 9090, "metrics": 9091}

    ctl = one(objs, "Deployment", "warmscale-controller")
    cargs = _container(ctl)["args"]
    assert "warmpool" in cargs and ctl["spec"]["replicas"] == 2
    assert "--redis-address=$(WARMSCALE_REDIS_URL)" in cargs
    assert "--scaler-address=warmscale.warmscale.svc:9090" in cargs
    cenv = {e["name"]: e.get("value") for e in _container(ctl)["env"]}
    assert cenv["WARMSCALE_IMAGE"] == _container(ctl)["image"], "staging Jobs run the controller's image"

    # Both read the Redis URL from the Secret the in-cluster Redis component generates.
    secret = find(objs, "Secret")[0]
    for d in (scaler, ctl):
        env = {e["name"]: e for e in _container(d)["env"]}
        assert env["WARMSCALE_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]

    redis = one(objs, "StatefulSet", "warmscale-redis")
    rargs = _container(redis)["args"]
    assert rargs[rargs.index("--appendonly") + 1] == "yes"
    assert redis["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]

    for d in (scaler, ctl, redis):
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        c = _container(d)["securityContext"]
        assert c["allowPrivilegeEscalation"] is False and c["readOnlyRootFilesystem"] is True
        assert c["capabilities"]["drop"] == ["ALL"]


def test_priority_class_matches_the_controller() -> None:
    pc = one(render("manifests"), "PriorityClass", ob.PRIORITY_CLASS)
    want = ob.priority_class()
    assert pc["value"] == want["value"] == -5
    assert pc["preemptionPolicy"] == want["preemptionPolicy"] == "Never"
    assert pc["globalDefault"] is False


def test_external_redis_has_no_redis_server() -> None:
    objs = render("manifests/overlays/external-redis")
    assert not find(objs, "StatefulSet") and not find(objs, "PersistentVolumeClaim")
    assert find(objs, "Secret")[0]["metadata"]["name"].startswith("warmscale-redis")


def test_tls_overlay() -> None:
    objs = render("manifests/overlays/tls")
    scaler = one(objs, "Deployment", "warmscale-scaler")
    c = _container(scaler)
    flags = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in c["args"] if a.startswith("--tls")}
    assert set(flags) == {"--tls-cert", "--tls-key", "--tls-client-ca"}
    mount = next(m for m in c["volumeMounts"] if m["name"] == "tls")
    assert all(v.startswith(mount["mountPath"] + "/") for v in flags.values())
    vol = next(v for v in scaler["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert vol["secret"]["secretName"] == "warmscale-scaler-tls"
    # The kubelet's gRPC probe cannot speak TLS.
    assert "grpc" not in c["readinessProbe"] and c["readinessProbe"]["httpGet"]["path"] == "/healthz"


def test_prometheus_operator_objects_only_in_their_overlay() -> None:
    for path in INSTALLS:
        kinds = {o["kind"] for o in render(path)}
        has = {"ServiceMonitor", "PrometheusRule"} & kinds
        assert has == ({"ServiceMonitor", "PrometheusRule"} if path.endswith("prometheus-operator") else set()), path
    objs = render("manifests/overlays/prometheus-operator")
    jobs = {sm["metadata"]["name"]: sm["spec"]["endpoints"][0]["relabelings"][0]["replacement"]
            for sm in find(objs, "ServiceMonitor")}
    assert jobs == {"warmscale-scaler": "warmscale-scaler", "warmscale-controller": "warmscale-controller"}
    # Each ServiceMonitor selects a Service that exposes a port named metrics.
    for sm in find(objs, "ServiceMonitor"):
        sel = sm["spec"]["selector"]["matchLabels"]
        svcs = [s for s in find(objs, "Service") if sel.items() <= s["metadata"]["labels"].items()]
        assert svcs and all(any(p["name"] == "metrics" for p in s["spec"]["ports"]) for s in svcs)


def test_scaler_rbac_is_read_only() -> None:
    role = one(render("manifests"), "ClusterRole", "warmscale-scaler")
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {("", "pods"), ("apps", "deployments"), ("apps", "statefulsets"), ("keda.sh", "scaledobjects")}
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"} for rule in role["rules"])


def test_no_rbac_grants_secrets_or_wildcards() -> None:
    for o in render("manifests") + render("manifests/examples"):
        if o["kind"] in {"Role", "ClusterRole"}:
            for rule in o["rules"]:
                assert "secrets" not in rule["resources"] and "*" not in rule["resources"], o["metadata"]["name"]
                assert "*" not in rule["verbs"] and "*" not in rule["apiGroups"], o["metadata"]["name"]


# ---------------------------------------------------------------------------------------- examples


@pytest.mark.parametrize("engine", ENGINES)
def test_example(engine: str) -> None:
    objs = render(f"manifests/examples/{engine}")
    (deploy,) = find(objs, "Deployment")
    (so,) = find(objs, "ScaledObject")
    pod = deploy["spec"]["template"]["spec"]
    c = _container(deploy)

    # GPUs: requested (limits == requests for extended resources), tolerated, product selected.
    gpus = c["resources"]["limits"]["nvidia.com/gpu"]
    assert int(gpus) >= 1 and c["resources"]["requests"]["nvidia.com/gpu"] == gpus
    assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in pod["tolerations"])
    assert pod["nodeSelector"]["nvidia.com/gpu.product"]

    # Probes fit for long loads: 30+ minutes before the startup probe gives up.
    sp = c["startupProbe"]
    assert sp["failureThreshold"] * sp["periodSeconds"] >= 30 * 60
    assert c["readinessProbe"]["periodSeconds"] <= 10 and "livenessProbe" in c

    # Annotations are valid warm-pool configuration.
    cfg = parse_annotations(deploy["metadata"]["annotations"])
    assert cfg.enabled and cfg.model_uri is not None

    # The ScaledObject targets the Deployment and pushes from the scaler with valid metadata.
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deploy["metadata"]["name"]}
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "external-push"
    meta = trigger["metadata"]
    assert meta["scalerAddress"] == "warmscale.warmscale.svc:9090"
    scaler_cfg = parse_metadata(meta)
    assert scaler_cfg.max_replicas == spec["maxReplicaCount"]
    assert scaler_cfg.floor == max(spec["minReplicaCount"], 0 if scaler_cfg.scale_to_zero else 1)
    assert set(meta) - KEDA_KEYS, "no scaler keys"
    # Pod selection matches the Deployment's pods; the port is one the engine listens on.
    sel = dict(kv.split("=", 1) for kv in meta["podSelector"].split(","))
    assert sel.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert int(meta["metricsPort"]) in {p["containerPort"] for p in c["ports"]}

    # HPA behaviour: tolerance 0 both ways together with hpaTolerance "0" (docs/policy.md).
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["tolerance"] == behavior["scaleDown"]["tolerance"] == "0"
    assert scaler_cfg.hpa_tolerance == 0.0
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0

    # Mutual TLS with KEDA's parameters.
    assert meta["enableTLS"] == "true" and trigger["authenticationRef"]["name"] == "warmscale-mtls"


def test_trigger_authentication_is_mutual_tls() -> None:
    objs = render("manifests/examples")
    ta = one(objs, "TriggerAuthentication", "warmscale-mtls")
    params = {r["parameter"] for r in ta["spec"]["secretTargetRef"]}
    assert params == {"caCert", "tlsClientCert", "tlsClientKey"}
    rb = one(objs, "RoleBinding", "warmscale-scaler")
    assert rb["roleRef"]["name"] == "warmscale-scaler"
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "warmscale-scaler", "namespace": "warmscale"}]
    for so in find(objs, "ScaledObject"):
        assert so["metadata"]["namespace"] == ta["metadata"]["namespace"]


# -------------------------------------------------------------------------------------- Dockerfile


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\w+))?", text, re.M)
    assert len(froms) >= 2, "multi-stage"
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, re.M)
    assert base and re.fullmatch(r"python:3\.1[1-9][\w.-]*-slim-\w+(@sha256:[0-9a-f]{64})?", base.group(1))
    assert re.search(r"^USER\s+10001", text, re.M), "runs as the uid the manifests expect"
    assert re.search(r'^ENTRYPOINT \["warmscale"\]', text, re.M)
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignore and "tests" in ignore
    # The manifests run the image as that user.
    for d in find(render("manifests"), "Deployment"):
        assert d["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
