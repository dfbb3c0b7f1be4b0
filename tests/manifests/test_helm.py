"""The Helm chart (charts/warmscale) renders the same objects as the kustomization, and installs.

Helm v4 is built from its Go module by .ci/build-cluster.sh (testbed/helm, pinned in
testbed/versions.env) into ~/.cache/warmscale/bin/helm-<version>/helm; ``$WARMSCALE_HELM`` overrides.
Equivalent means: the same kinds, names and namespaces, and the same objects apart from labels and
annotations (the pod templates' labels apart from the chart's own: instance, managed-by, version,
chart), for a release installed in the kustomization's namespace ``warmscale``. The chart creates no
Namespace object (``helm install -n NS --create-namespace`` does).
Two differences of form are normalised: kustomize's secretGenerator adds a content hash
to the Secret's name (and to its references), and writes ``data`` where the chart writes ``stringData``.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
from typing import Any

import pytest
import yaml

from .helpers import ROOT, RULES, kubectl, render, require_tool

CHART = ROOT / "charts" / "warmscale"
INSTALL_NAMESPACE = "warmscale"  # the kustomization's
# Labels only the chart sets (Helm's conventions); the kustomization's pods carry the others.
CHART_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
                "helm.sh/chart")
Key = tuple[str, str, str]


def helm() -> str:
    from warmscale.localcluster.binaries import Binaries

    version = next(line.split("=", 1)[1].strip() for line in (ROOT / "testbed/versions.env").read_text().splitlines()
                   if line.startswith("HELM_VERSION="))
    pinned = Binaries.expected().kube_apiserver.parent.parent / f"helm-{version}" / "helm"
    found = os.environ.get("WARMSCALE_HELM") or (str(pinned) if os.access(pinned, os.X_OK) else None)
    return require_tool(found, f"helm {version} (bash .ci/build-cluster.sh)")


def helm_run(*args: str, namespace: str = INSTALL_NAMESPACE) -> subprocess.CompletedProcess[str]:
    cmd = [helm(), "template", "warmscale", str(CHART), "--namespace", namespace, "--skip-tests", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def helm_template(*sets: str, namespace: str = INSTALL_NAMESPACE, extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = [a for s in sets for a in ("--set", s)]
    out = helm_run(*args, *extra, namespace=namespace)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


_HASHED = re.compile(r"^(warmscale-redis)-[a-z0-9]{10}$")


def _unhash(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _unhash(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_unhash(v) for v in o]
    if isinstance(o, str) and _HASHED.match(o):
        return _HASHED.sub(r"\1", o)
    return o


def normalise(objs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    out = {}
    for o in objs:
        if o["kind"] == "Namespace":
            continue  # the kustomization creates its namespace; a Helm release is installed into one
        o = _unhash(copy.deepcopy(o))
        meta = o["metadata"]
        for k in ("labels", "annotations"):
            meta.pop(k, None)
        for tmpl in (o.get("spec", {}).get("template", {}),):
            (tmpl.get("metadata") or {}).pop("annotations", None)
            for k in CHART_LABELS:
                ((tmpl.get("metadata") or {}).get("labels") or {}).pop(k, None)
        if o["kind"] == "Secret" and "stringData" in o:
            o.setdefault("data", {}).update({k: base64.b64encode(v.encode()).decode()
                                             for k, v in o.pop("stringData").items()})
        out[(o["kind"], meta.get("namespace", ""), meta["name"])] = o
    return out


def _diff(a: dict[Key, Any], b: dict[Key, Any]) -> str:
    lines = [f"only in kustomize: {k}" for k in sorted(set(a) - set(b))]
    lines += [f"only in the chart: {k}" for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        if a[k] != b[k]:
            lines.append(f"differs: {k}\n  kustomize: {yaml.safe_dump(a[k])[:1500]}\n"
                         f"  chart: {yaml.safe_dump(b[k])[:1500]}")
    return "\n".join(lines)


@pytest.mark.parametrize(("kustomization", "sets"), [
    ("manifests", ()),  # the default values
    ("manifests/overlays/plaintext", ("tls.enabled=false",)),
    ("manifests/overlays/namespaced", ("namespaced.namespace=llm",)),
])
def test_chart_renders_what_the_kustomization_renders(kustomization: str, sets: tuple[str, ...]) -> None:
    want, got = normalise(render(kustomization)), normalise(helm_template(*sets))
    assert want == got, _diff(want, got)


def test_values_reach_the_objects() -> None:
    objs = {(o["kind"], o["metadata"]["name"]): o for o in helm_template(
        "image.repository=registry.example/warmscale", "image.tag=1.2.3", "redis.inCluster=false",
        "redis.url=redis://redis.example:6379/0", "webhook.enabled=false", "scaler.resources.limits.memory=2Gi")}
    ctl = objs[("Deployment", "warmscale-controller")]["spec"]["template"]["spec"]["containers"][0]
    assert ctl["image"] == "registry.example/warmscale:1.2.3"
    assert {e["name"]: e.get("value") for e in ctl["env"]}["WARMSCALE_IMAGE"] == "registry.example/warmscale:1.2.3"
    assert not [a for a in ctl["args"] if a.startswith("--webhook-port")]
    assert "--webhook-configuration=" in ctl["args"]
    assert ("MutatingWebhookConfiguration", "warmscale-webhook") not in objs
    assert ("StatefulSet", "warmscale-redis") not in objs
    assert objs[("Secret", "warmscale-redis")]["stringData"]["url"] == "redis://redis.example:6379/0"
    scaler = objs[("Deployment", "warmscale-scaler")]["spec"]["template"]["spec"]["containers"][0]
    assert scaler["resources"]["limits"]["memory"] == "2Gi"


# ------------------------------------------------------------------------ conventions of the chart

# What a cluster's discovery lists (kinds included): how the chart knows it is rendered against one.
ONLINE = ("--api-versions", "v1/Namespace")
WITH_KEDA = (*ONLINE, "--api-versions", "keda.sh/v1alpha1/ScaledObject",
             "--api-versions", "keda.sh/v1alpha1/ClusterTriggerAuthentication")


def test_lint_strict() -> None:
    out = subprocess.run([helm(), "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for toggles in ("serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboards.enabled=true",
                    "certManager.enabled=true", "tls.enabled=false,webhook.enabled=false"):
        out = subprocess.run([helm(), "lint", "--strict", str(CHART), "--set", toggles],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (toggles, out.stdout + out.stderr)


def test_everything_in_the_release_namespace() -> None:
    objs = helm_template(namespace="other")
    assert not [o for o in objs if o["kind"] == "Namespace"]
    namespaced = [o for o in objs if "namespace" in o["metadata"]]
    # KEDA's client certificate's RBAC goes to KEDA's namespace; everything else to the release's
    assert {o["metadata"]["namespace"] for o in namespaced} == {"other", "keda"}
    assert {(o["kind"], o["metadata"]["name"]) for o in namespaced if o["metadata"]["namespace"] == "keda"} == {
        ("Role", "warmscale-keda-client-cert"), ("RoleBinding", "warmscale-keda-client-cert")}
    text = yaml.safe_dump_all(objs)
    assert "warmscale.warmscale.svc" not in text and "warmscale-redis.warmscale.svc" not in text
    ctl = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "warmscale-controller")
    assert "--scaler-address=warmscale.other.svc:9090" in ctl["spec"]["template"]["spec"]["containers"][0]["args"]
    hook = next(o for o in objs if o["kind"] == "MutatingWebhookConfiguration")
    assert hook["webhooks"][0]["clientConfig"]["service"]["namespace"] == "other"


def test_standard_labels_on_every_object() -> None:
    for o in helm_template():
        labels = o["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", (o["kind"], o["metadata"]["name"])
        assert labels.get("app.kubernetes.io/instance") == "warmscale"
        assert labels.get("helm.sh/chart", "").startswith("warmscale-")
        assert labels.get("app.kubernetes.io/part-of") == "warmscale"
        tmpl = (o.get("spec") or {}).get("template")
        if tmpl:
            assert tmpl["metadata"]["labels"]["app.kubernetes.io/instance"] == "warmscale"


def test_notes_name_the_scaler_address() -> None:
    out = subprocess.run([helm(), "install", "warmscale", str(CHART), "-n", "other", "--dry-run=client"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    notes = out.stdout.split("NOTES:", 1)[1]
    assert "scalerAddress: warmscale.other.svc:9090" in notes
    assert "kind: ClusterTriggerAuthentication" in notes
    assert "helm test warmscale -n other" in notes


def test_fails_clearly_without_kedas_crds() -> None:
    out = helm_run(*ONLINE)
    assert out.returncode != 0
    assert "KEDA's CRDs (keda.sh/v1alpha1 ScaledObject, ClusterTriggerAuthentication) are missing" in out.stderr
    assert helm_run(*WITH_KEDA).returncode == 0
    assert helm_run(*ONLINE, "--set", "keda.requireCRDs=false").returncode == 0
    cm = helm_run(*WITH_KEDA, "--set", "certManager.enabled=true")
    assert cm.returncode != 0 and "cert-manager's CRDs (cert-manager.io/v1) are missing" in cm.stderr


def test_schema_rejects_unknown_and_bad_values() -> None:
    for bad, message in (("namespace=warmscale", "additional properties 'namespace' not allowed"),
                         ("scaler.replicas=0", "scaler/replicas"),
                         ("webhook.failurePolicy=Sometimes", "webhook/failurePolicy"),
                         ("certManager.issuerRef.kind=Issuer", "certManager/issuerRef/kind")):
        out = helm_run("--set", bad)
        assert out.returncode != 0 and message in out.stderr, (bad, out.stderr)


def _leaves(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Paths of values.yaml down to the schema's leaves (free-form maps such as resources are one leaf)."""
    out = []
    for k, v in values.items():
        path = f"{prefix}{k}"
        assert k in schema.get("properties", {}), f"{path} is not in values.schema.json"
        node = schema["properties"][k]
        out += _leaves(v, node, path + ".") if isinstance(v, dict) and "properties" in node else [path]
    return out


def test_every_value_is_in_the_schema_and_used() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    templates = "\n".join(p.read_text() for p in (CHART / "templates").rglob("*") if p.is_file())
    for leaf in _leaves(values, schema):
        parent, _, key = leaf.rpartition(".")
        # used as .Values.<path> or, for the per-component pod settings, through the helpers' .values.<key>
        used = f".Values.{leaf}" in templates or (f".values.{key}" in templates and parent in
                                                  ("scaler", "controller", "redis"))
        assert used, f"{leaf} is not used by any template"


def _by_name(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def test_pod_values_reach_every_component() -> None:
    sets = ["imagePullSecrets[0].name=regcred"]
    for c in ("scaler", "controller", "redis"):
        sets += [f"{c}.nodeSelector.pool=inference", f"{c}.tolerations[0].key=dedicated",
                 f"{c}.tolerations[0].operator=Exists", f"{c}.affinity.nodeAffinity.x=y",
                 f"{c}.priorityClassName=system-cluster-critical", f"{c}.podAnnotations.a=b", f"{c}.podLabels.team=ml"]
    for c in ("scaler", "controller"):
        sets += [f"{c}.extraArgs[0]=--log-level=debug", f"{c}.extraEnv[0].name=EXTRA", f"{c}.extraEnv[0].value=v1"]
    objs = _by_name(helm_template(*sets))
    for kind, name, comp in (("Deployment", "warmscale-scaler", "scaler"),
                             ("Deployment", "warmscale-controller", "controller"),
                             ("StatefulSet", "warmscale-redis", "redis")):
        tmpl = objs[(kind, name)]["spec"]["template"]
        spec = tmpl["spec"]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], name
        assert spec["nodeSelector"] == {"pool": "inference"}
        assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert spec["affinity"] == {"nodeAffinity": {"x": "y"}}
        assert spec["priorityClassName"] == "system-cluster-critical"
        assert tmpl["metadata"]["annotations"] == {"a": "b"}
        assert tmpl["metadata"]["labels"]["team"] == "ml"
        assert tmpl["metadata"]["labels"]["app.kubernetes.io/name"] == name  # the selector's stays
        if comp != "redis":
            container = spec["containers"][0]
            assert container["args"][-1] == "--log-level=debug"
            assert {"name": "EXTRA", "value": "v1"} in container["env"]


def test_monitoring_toggles() -> None:
    assert not [o for o in helm_template() if o["kind"] in ("ServiceMonitor", "PrometheusRule")]
    objs = _by_name(helm_template("serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom",
                                  "prometheusRule.enabled=true", "dashboards.enabled=true", namespace="other"))
    kustomized = _by_name(render("manifests/overlays/prometheus-operator"))
    for name in ("warmscale-scaler", "warmscale-controller"):
        sm = objs[("ServiceMonitor", name)]
        assert sm["metadata"]["labels"]["release"] == "prom"
        assert sm["spec"]["endpoints"][0]["honorLabels"] is True
        assert sm["spec"]["namespaceSelector"] == {"matchNames": ["other"]}
        want = kustomized[("ServiceMonitor", name)]["spec"]
        assert {**sm["spec"], "namespaceSelector": want["namespaceSelector"]} == want
    rule = objs[("PrometheusRule", "warmscale")]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    for r in (r for g in rule["spec"]["groups"] for r in g["rules"]):
        assert r["annotations"]["runbook_url"].endswith("/docs/troubleshooting.md#" + r["alert"].lower())
    for name, file in (("warmscale-dashboard-autoscaling", "warmscale-autoscaling.json"),
                       ("warmscale-dashboard-warm-pool", "warmscale-warm-pool.json")):
        cm = objs[("ConfigMap", name)]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(cm["data"][file]) == json.loads((ROOT / "manifests" / "grafana" / file).read_text())


def test_cert_manager_option() -> None:
    objs = _by_name(helm_template("certManager.enabled=true", namespace="other"))
    certs = {name: o for (kind, name), o in objs.items() if kind == "Certificate"}
    assert set(certs) == {"warmscale-ca", "warmscale-scaler", "warmscale-keda-client", "warmscale-webhook"}
    assert certs["warmscale-ca"]["metadata"]["namespace"] == "cert-manager" and certs["warmscale-ca"]["spec"]["isCA"]
    assert certs["warmscale-keda-client"]["metadata"]["namespace"] == "keda"
    assert certs["warmscale-keda-client"]["spec"]["secretName"] == "warmscale-keda-client-tls"
    assert certs["warmscale-scaler"]["spec"]["secretName"] == "warmscale-scaler-tls"
    assert "warmscale.other.svc" in certs["warmscale-scaler"]["spec"]["dnsNames"]
    assert certs["warmscale-webhook"]["spec"]["secretName"] == "warmscale-webhook-tls"
    assert {c["spec"]["issuerRef"]["name"] for n, c in certs.items() if n != "warmscale-ca"} == {"warmscale-ca"}
    assert ("ClusterIssuer", "warmscale-ca") in objs and ("ClusterIssuer", "warmscale-selfsigned") in objs
    hook = objs[("MutatingWebhookConfiguration", "warmscale-webhook")]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "other/warmscale-webhook"
    args = objs[("Deployment", "warmscale-controller")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--manage-certs" not in args and "--webhook-configuration=" in args
    # the controller only reads the webhook's Secret: no create, nothing in KEDA's namespace, no caBundle patch
    role = objs[("Role", "warmscale-warmpool-certs")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["warmscale-webhook-tls"],
                              "verbs": ["get"]}]
    assert ("Role", "warmscale-keda-client-cert") not in objs
    assert ("ClusterRole", "warmscale-warmpool-webhook") not in objs
    own = _by_name(helm_template("certManager.enabled=true", "certManager.issuerRef.kind=ClusterIssuer",
                                 "certManager.issuerRef.name=corp-ca"))
    assert ("ClusterIssuer", "warmscale-ca") not in own and ("Certificate", "warmscale-ca") not in own
    assert own[("Certificate", "warmscale-scaler")]["spec"]["issuerRef"]["name"] == "corp-ca"


@pytest.mark.cluster
def test_helm_install_in_another_namespace_then_helm_test(k8s_cluster: Any) -> None:
    """`helm install -n other --create-namespace` on the local cluster (KEDA's CRDs present), `helm test`,
    then `helm uninstall`. The cluster runs KWOK: pods are scheduled and marked Ready/Succeeded without
    running their containers, so `helm test` checks the hook's admission and lifecycle, not the probe."""
    kc = ["--kubeconfig", str(k8s_cluster.kubeconfig)]
    subprocess.run([kubectl(), *kc, "create", "namespace", "keda"], capture_output=True, text=True, timeout=60)
    subprocess.run([kubectl(), *kc, "delete", "-k", str(ROOT / "manifests"), "--ignore-not-found", "--wait=true"],
                   capture_output=True, text=True, timeout=300)
    # rendered against the cluster (its discovery): the CRD checks are live. cert-manager is not installed here.
    dry = subprocess.run([helm(), *kc, "install", "warmscale", str(CHART), "-n", "other", "--dry-run=server",
                          "--set", "certManager.enabled=true"], capture_output=True, text=True, timeout=120)
    assert dry.returncode != 0 and "cert-manager's CRDs (cert-manager.io/v1) are missing" in dry.stderr, dry.stderr
    # the local cluster has no volume provisioner: Redis' PVC would stay Pending, so an external URL
    out = subprocess.run([helm(), *kc, "install", "warmscale", str(CHART), "-n", "other", "--create-namespace",
                          "--set", "redis.inCluster=false", "--set", "redis.url=redis://redis.example:6379/0",
                          "--wait", "--timeout", "180s"], capture_output=True, text=True, timeout=240)
    try:
        assert out.returncode == 0, out.stderr
        assert "scalerAddress: warmscale.other.svc:9090" in out.stdout  # the NOTES
        listed = subprocess.run([kubectl(), *kc, "-n", "other", "get", "deploy,svc,secret,sts", "-o", "name"],
                                capture_output=True, text=True, timeout=60).stdout.split()
        for name in ("deployment.apps/warmscale-scaler", "deployment.apps/warmscale-controller",
                     "service/warmscale", "service/warmscale-webhook", "secret/warmscale-redis"):
            assert name in listed, listed
        tested = subprocess.run([helm(), *kc, "test", "warmscale", "-n", "other", "--timeout", "120s"],
                                capture_output=True, text=True, timeout=180)
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "warmscale-test-health" in tested.stdout and "Succeeded" in tested.stdout, tested.stdout
    finally:
        subprocess.run([helm(), *kc, "uninstall", "warmscale", "-n", "other", "--wait"],
                       capture_output=True, text=True, timeout=300)
        subprocess.run([kubectl(), *kc, "delete", "namespace", "other", "--wait=false"],
                       capture_output=True, text=True, timeout=60)
        from warmscale.warmpool import objects as ob

        subprocess.run([kubectl(), *kc, "create", "-f", "-"], input=yaml.safe_dump(ob.priority_class()),
                       capture_output=True, text=True, timeout=60)


def test_hold_gateways() -> None:
    """holdGateways: per entry a gateway in the release namespace whose arguments the real command line
    parses, with the install's Redis; the Role in the workload's namespace has exactly the generator's
    rules (warmpool/rbac.py HOLD_GATEWAY_RULES) and binds the release's ServiceAccount; none without a
    service, nothing at all by default."""
    from warmscale.cli import build_parser
    from warmscale.scaler.holdgate_cli import QUEUE_KEY_TEMPLATE
    from warmscale.warmpool import rbac

    assert not [o for o in helm_template() if "hold-gateway" in o["metadata"]["name"]]
    objs = _by_name(helm_template(
        "holdGateways[0].workload=vllm-llama", "holdGateways[0].namespace=llm", "holdGateways[0].service=vllm-llama",
        "holdGateways[0].servicePort=http", "holdGateways[0].extraArgs[0]=--hold-max-seconds=300",
        "holdGateways[1].workload=chat", "holdGateways[1].namespace=team-b", namespace="other"))
    name = "warmscale-hold-gateway-vllm-llama"
    deploy = objs[("Deployment", name)]
    assert deploy["metadata"]["namespace"] == "other"
    pod = deploy["spec"]["template"]["spec"]
    (c,) = pod["containers"]

    def parse(argv: list[str]) -> Any:  # the kubelet expands $(WARMSCALE_REDIS_URL) from the Secret
        return build_parser().parse_args([a.replace("$(WARMSCALE_REDIS_URL)", "redis://r:6379/0") for a in argv])

    args = parse(c["args"])
    assert args.redis_url == "redis://r:6379/0"
    assert (args.command, args.namespace, args.workload, args.service, args.service_port) == (
        "hold-gateway", "llm", "vllm-llama", "vllm-llama", "http")
    assert args.hold_max_seconds == 300
    assert args.queue_key == QUEUE_KEY_TEMPLATE.format(namespace="llm", workload="vllm-llama")
    assert {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"]} == {
        "WARMSCALE_REDIS_URL": "warmscale-redis"}
    assert pod["serviceAccountName"] == "warmscale-hold-gateway"
    assert pod["terminationGracePeriodSeconds"] > args.drain_delay_seconds + args.grace_seconds
    role = objs[("Role", name)]
    assert role["metadata"]["namespace"] == "llm"
    assert role["rules"] == [r for _, r in rbac.HOLD_GATEWAY_RULES]
    binding = objs[("RoleBinding", name)]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "warmscale-hold-gateway", "namespace": "other"}]
    assert objs[("Service", name)]["spec"]["ports"][0]["targetPort"] == "http"
    # Without a service: no Role, no API token in the pod.
    assert ("Role", "warmscale-hold-gateway-chat") not in objs
    chat = objs[("Deployment", "warmscale-hold-gateway-chat")]["spec"]["template"]["spec"]
    assert chat["automountServiceAccountToken"] is False
    assert parse(chat["containers"][0]["args"]).service is None
    for bad, message in (("holdGateways[0].workload=Bad_Name", "holdGateways/0/workload"),
                         ("holdGateways[0].colour=red", "additional properties 'colour' not allowed")):
        out = helm_run("--set", "holdGateways[0].namespace=llm", "--set", bad)
        assert out.returncode != 0 and message in out.stderr, (bad, out.stderr)
