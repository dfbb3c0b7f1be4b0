"""The kustomize install, its overlays and the examples render and say what docs/install.md says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from warmscale.scaler.config import KEDA_KEYS, parse_metadata
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import parse_annotations

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
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                      "MutatingWebhookConfiguration", "ClusterTriggerAuthentication",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    namespaced = [o for o in objs if o["kind"] not in cluster_scoped]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"warmscale", "keda"}
    # in KEDA's namespace only the permission to write KEDA's client certificate Secret
    assert {(o["kind"], o["metadata"]["name"]) for o in namespaced if o["metadata"]["namespace"] == "keda"} == {
        ("Role", "warmscale-keda-client-cert"), ("RoleBinding", "warmscale-keda-client-cert")}

    scaler = one(objs, "Deployment", "warmscale-scaler")
    assert scaler["spec"]["replicas"] == 2
    args = _container(scaler)["args"]
    assert "scaler" in args and "--redis-url=$(WARMSCALE_REDIS_URL)" in args
    assert "--grpc-port=9090" in args and "--metrics-port=9091" in args
    # HA: two replicas, and a disruption budget keeps one serving (docs/keda.md, scaler unreachable).
    pdb = one(objs, "PodDisruptionBudget", "warmscale-scaler")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= scaler["spec"]["template"]["metadata"]["labels"].items()
    svc = one(objs, "Service", "warmscale")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"grpc": 9090, "metrics": 9091}

    ctl = one(objs, "Deployment", "warmscale-controller")
    cargs = _container(ctl)["args"]
    assert "warmpool" in cargs and ctl["spec"]["replicas"] == 2
    assert "--redis-address=$(WARMSCALE_REDIS_URL)" in cargs
    assert "--scaler-address=warmscale.warmscale.svc:9090" in cargs
    for flag in ("--webhook-port=9443", "--webhook-tls-secret=warmscale-webhook-tls", "--manage-certs",
                 "--keda-namespace=keda", "--webhook-configuration=warmscale-webhook",
                 "--trigger-authentication=warmscale-mtls"):
        assert flag in cargs, flag
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


def test_webhook_and_mutual_tls_are_the_default() -> None:
    objs = render("manifests")
    hook = one(objs, "MutatingWebhookConfiguration", "warmscale-webhook")
    [wh] = hook["webhooks"]
    assert wh["failurePolicy"] == "Ignore" and "caBundle" not in wh["clientConfig"]  # the controller owns it
    assert wh["clientConfig"]["service"] == {"namespace": "warmscale", "name": "warmscale-webhook", "port": 443,
                                             "path": "/mutate"}
    exprs = {e["key"]: (e["operator"], e["values"]) for e in wh["objectSelector"]["matchExpressions"]}
    assert exprs == {"warmscale.io/enabled": ("In", ["true"]), "app.kubernetes.io/managed-by": ("NotIn", ["warmscale"])}
    svc = one(objs, "Service", "warmscale-webhook")
    ctl = one(objs, "Deployment", "warmscale-controller")
    assert svc["spec"]["selector"].items() <= ctl["spec"]["template"]["metadata"]["labels"].items()
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in _container(ctl)["ports"]
    # the code's configuration (used on the local cluster) selects the same pods
    from warmscale.warmpool.webhook import webhook_configuration

    code = webhook_configuration("x", b"ca", url="https://127.0.0.1/mutate")["webhooks"][0]
    assert code["objectSelector"] == wh["objectSelector"] and code["name"] == wh["name"]
    cta = one(objs, "ClusterTriggerAuthentication", "warmscale-mtls")
    assert {(r["parameter"], r["name"], r["key"]) for r in cta["spec"]["secretTargetRef"]} == {
        ("caCert", "warmscale-keda-client-tls", "ca.crt"), ("tlsClientCert", "warmscale-keda-client-tls", "tls.crt"),
        ("tlsClientKey", "warmscale-keda-client-tls", "tls.key")}
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
    assert scaler["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001  # reads the 0440 files


def test_plaintext_overlay() -> None:
    objs = render("manifests/overlays/plaintext")
    scaler = one(objs, "Deployment", "warmscale-scaler")
    c = _container(scaler)
    assert not [a for a in c["args"] if a.startswith("--tls")] and "grpc" in c["readinessProbe"]
    assert all(v["name"] != "tls" for v in scaler["spec"]["template"]["spec"]["volumes"])
    assert not find(objs, "ClusterTriggerAuthentication")
    assert not [o for o in objs if o["metadata"].get("namespace") == "keda"]
    cargs = _container(one(objs, "Deployment", "warmscale-controller"))["args"]
    assert cargs[-2:] == ["--trigger-authentication=", "--keda-namespace="]  # the last value wins
    assert one(objs, "MutatingWebhookConfiguration", "warmscale-webhook")  # the webhook stays


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
    assert granted == {("", "pods"), ("apps", "deployments"), ("apps", "statefulsets"), ("keda.sh", "scaledobjects"),
                       ("leaderworkerset.x-k8s.io", "leaderworkersets"), ("", "events")}
    for rule in role["rules"]:  # read-only, but for the Events on a ScaledObject (refused, decisions)
        allowed = {"create"} if rule["resources"] == ["events"] else {"get", "list", "watch"}
        assert set(rule["verbs"]) <= allowed, rule
    # The one cluster-wide grant: get on nodes (their GPU product label), bound to the scaler only.
    objs = render("manifests")
    nodes = one(objs, "ClusterRole", "warmscale-scaler-nodes")
    assert nodes["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = one(objs, "ClusterRoleBinding", "warmscale-scaler-nodes")
    assert binding["roleRef"]["name"] == "warmscale-scaler-nodes"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "warmscale-scaler", "namespace": "warmscale"}]


def test_no_rbac_grants_secrets_or_wildcards() -> None:
    """Secrets only for the controller's certificates: by name in the install's and KEDA's namespaces
    (create, which cannot be limited by name, only there); never cluster-wide, never in workload
    namespaces, never list/watch."""
    secret_rules: dict[str, list[dict[str, Any]]] = {}
    for o in render("manifests") + render("manifests/examples"):
        if o["kind"] in {"Role", "ClusterRole"}:
            for rule in o["rules"]:
                assert "*" not in rule["resources"], o["metadata"]["name"]
                assert "*" not in rule["verbs"] and "*" not in rule["apiGroups"], o["metadata"]["name"]
                if "secrets" in rule["resources"]:
                    assert o["kind"] == "Role", o["metadata"]["name"]
                    secret_rules.setdefault(o["metadata"]["namespace"], []).append(rule)
    assert set(secret_rules) == {"warmscale", "keda"}
    for rules in secret_rules.values():
        for rule in rules:
            assert set(rule["verbs"]) in ({"create"}, {"get", "update"})
            assert set(rule["verbs"]) == {"create"} or rule.get("resourceNames")


# ---------------------------------------------------------------------------------------- examples


OWNED = {"sglang", "trtllm-triton"}  # the controller creates their ScaledObjects; the others are hand-written


@pytest.mark.parametrize("engine", ENGINES)
def test_example(engine: str) -> None:
    from datetime import UTC, datetime

    from warmscale.warmpool.controller import workload_from

    objs = render(f"manifests/examples/{engine}")
    (deploy,) = find(objs, "Deployment")
    cfg = parse_annotations(deploy["metadata"]["annotations"])
    if engine in OWNED:
        assert cfg.autoscale and not find(objs, "ScaledObject")
        # what the controller creates, with the install's flags
        floor, _ = cfg.floor_at(datetime.now(UTC))
        so = ob.scaled_object(workload_from("Deployment", deploy), cfg, floor, "warmscale.warmscale.svc:9090",
                              "warmscale-mtls")
    else:
        assert not cfg.autoscale
        (so,) = find(objs, "ScaledObject")
    pod = deploy["spec"]["template"]["spec"]
    c = _container(deploy)
    # The engine loads the staged copy: $(WARMSCALE_MODEL_PATH), set by the webhook (the template's
    # value is the fallback without it); the pods are sent to the webhook; no cache mount of its own.
    assert any("$(WARMSCALE_MODEL_PATH)" in a for a in c["args"])
    assert "WARMSCALE_MODEL_PATH" in {e["name"] for e in c["env"]}
    assert deploy["spec"]["template"]["metadata"]["labels"]["warmscale.io/enabled"] == "true"
    assert all(m["mountPath"] != cfg.cache_root for m in c.get("volumeMounts") or [])

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

    # Mutual TLS through the install's ClusterTriggerAuthentication.
    assert meta["enableTLS"] == "true"
    assert trigger["authenticationRef"] == {"name": "warmscale-mtls", "kind": "ClusterTriggerAuthentication"}


EXAMPLE_DIRS = sorted(p.name for p in (ROOT / "manifests" / "examples").iterdir() if p.is_dir())
# Signals that exist while a workload has no replica: only they can wake it from zero.
WAKE_SOURCES = ("redisQueue", "eppAddress", "eppPool")
# Engines that export no TTFT histogram: ttftSloSeconds could never act on them.
NO_TTFT_HISTOGRAM = {"tgi"}


def test_every_example_directory_is_listed_and_renders() -> None:
    listed = yaml.safe_load((ROOT / "manifests" / "examples" / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == EXAMPLE_DIRS
    for d in EXAMPLE_DIRS:
        assert render(f"manifests/examples/{d}"), d


@pytest.mark.parametrize("directory", [d for d in EXAMPLE_DIRS if d != "common"])
def test_example_works_as_shipped(directory: str) -> None:
    """What made examples fail once installed: each trigger names the install's ClusterTriggerAuthentication
    by kind, sets no SLO its engine cannot measure, scales to zero only with a wake source; each annotated
    workload loads the staged copy; no weights source the image cannot fetch."""
    objs = render(f"manifests/examples/{directory}")
    for so in find(objs, "ScaledObject"):
        for t in so["spec"]["triggers"]:
            assert t["authenticationRef"] == {"name": "warmscale-mtls", "kind": "ClusterTriggerAuthentication"}, \
                so["metadata"]["name"]
            meta = t["metadata"]
            assert meta.get("enableTLS") == "true"
            if meta.get("engine") in NO_TTFT_HISTOGRAM:
                assert "ttftSloSeconds" not in meta, f"{so['metadata']['name']}: {meta['engine']} has no TTFT data"
            if meta.get("scaleToZero") == "true":
                assert any(k in meta for k in WAKE_SOURCES), f"{so['metadata']['name']}: zero with no wake source"
            else:
                assert so["spec"]["minReplicaCount"] >= 1
    lws = [(o, [t for t in (o["spec"]["leaderWorkerTemplate"].get("leaderTemplate"),
                            o["spec"]["leaderWorkerTemplate"]["workerTemplate"]) if t])
           for o in find(objs, ob.LWS_KIND)]
    for wl, templates in [(o, [o["spec"]["template"]]) for o in find(objs, "Deployment") + find(objs, "StatefulSet")] \
            + lws:
        cfg = parse_annotations(wl["metadata"].get("annotations"))
        if not cfg.enabled or cfg.model_uri is None:
            continue
        name = wl["metadata"]["name"]
        for tmpl in templates:  # a LeaderWorkerSet: its leader and its workers alike
            assert tmpl["metadata"]["labels"].get("warmscale.io/enabled") == "true", name
            (c,) = tmpl["spec"]["containers"]
            assert "WARMSCALE_MODEL_PATH" in {e["name"] for e in c.get("env") or []}, name
            assert all(m["mountPath"] != cfg.cache_root for m in c.get("volumeMounts") or []), name
        c = templates[0]["spec"]["containers"][0]  # the pod that starts the engine (an LWS: the leader)
        assert any("$(WARMSCALE_MODEL_PATH)" in a for a in c.get("args") or []), f"{name} ignores the staged copy"
        if cfg.model_uri.scheme == "s3":
            deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
            assert any(d.startswith("boto3") for d in deps), f"{name}: s3:// needs boto3, which the image lacks"


def test_lws_example_scales_groups_of_its_leaderworkerset() -> None:
    """manifests/examples/vllm-lws: a 2-node pipeline-parallel vLLM replica as one LeaderWorkerSet group,
    KEDA scaling the LeaderWorkerSet (its scale subresource counts groups), the scaler finding the groups
    from the target (leaders scraped), and a warm pool holding one gang of 2 placeholders per rack."""
    from datetime import UTC, datetime

    from tests.warmpool.helpers import node
    from warmscale.warmpool.controller import workload_from
    from warmscale.warmpool.planning import plan

    objs = render("manifests/examples/vllm-lws")
    (lws,) = find(objs, ob.LWS_KIND)
    (so,) = find(objs, "ScaledObject")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": ob.LWS_KIND,
                                            "name": lws["metadata"]["name"]}
    (trigger,) = so["spec"]["triggers"]
    meta = trigger["metadata"]
    assert "podSelector" not in meta  # the target decides: its groups, their leaders scraped
    scaler_cfg = parse_metadata(meta)
    assert scaler_cfg.max_replicas == so["spec"]["maxReplicaCount"]
    (leader,) = lwt["leaderTemplate"]["spec"]["containers"]
    assert int(meta["metricsPort"]) in {p["containerPort"] for p in leader["ports"]}
    assert lwt["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"
    assert lwt["workerTemplate"]["metadata"]["labels"]["role"] == "worker"
    args = " ".join(leader["args"])
    assert "--pipeline-parallel-size=$(LWS_GROUP_SIZE)" in args and "--tensor-parallel-size=8" in args
    wl = workload_from(ob.LWS_KIND, lws)
    cfg = parse_annotations(lws["metadata"]["annotations"])
    assert wl.group_size == lwt["size"] == 2 and wl.topology_key == "nvidia.com/gpu.clique"
    assert cfg.enabled and cfg.model_uri is not None and not cfg.autoscale
    # what the planner makes of it on two 2-node cliques of H100 nodes: stage 2 x 2 nodes, one whole gang
    clique = wl.topology_key
    nodes = [node(f"{d}{i}", labels={clique: d}) for d in ("x", "y") for i in (1, 2)]
    p = plan(wl, nodes, [], [], None, datetime.now(UTC))
    assert p.error is None and sorted(p.stage_nodes) == ["x1", "x2", "y1", "y2"]
    assert not p.events or all(e.reason != "GangDoesNotFit" for e in p.events)


def test_examples_namespace_needs_no_secret() -> None:
    objs = render("manifests/examples")
    assert not find(objs, "Secret") and not find(objs, "TriggerAuthentication")
    rb = one(objs, "RoleBinding", "warmscale-scaler")
    assert rb["roleRef"]["name"] == "warmscale-scaler"
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "warmscale-scaler", "namespace": "warmscale"}]


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


def test_no_example_or_chart_uses_a_removed_metadata_key() -> None:
    """The examples and the chart show only keys the scaler reads (removed keys: scaler/config.py)."""
    from warmscale.scaler.config import DEPRECATED_KEYS

    root = Path(__file__).parents[2]
    texts = {p: p.read_text() for d in ("manifests/examples", "charts") for p in (root / d).rglob("*")
             if p.is_file() and p.suffix in (".yaml", ".yml", ".tpl", ".txt")}
    used = sorted(f"{p.relative_to(root)}: {k.name}" for p, t in texts.items() for k, _ in DEPRECATED_KEYS
                  if re.search(rf"\b{k.name}\b", t))
    assert not used
