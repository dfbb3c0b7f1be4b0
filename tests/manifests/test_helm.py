"""The Helm chart (charts/warmscale) renders the same objects as the kustomization, and installs.

Helm v4 is built from its Go module by .ci/build-cluster.sh (testbed/helm, pinned in
testbed/versions.env) into ~/.cache/warmscale/bin/helm-<version>/helm; ``$WARMSCALE_HELM`` overrides.
Equivalent means: the same kinds, names and namespaces, and the same objects apart from labels and
annotations (the pod templates' labels apart from the chart's own: instance, managed-by, version,
chart), for a release installed in the kustomization's namespace ``warmscale``. The chart creates no
Namespace object (``helm install -n NS --create-namespace`` does). Two differences of form are normalised: kustomize's secretGenerator adds a content hash
to the Secret's name (and to its references), and writes ``data`` where the chart writes ``stringData``.
"""

from __future__ import annotations

import base64
import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import ROOT, kubectl, render, require_tool

CHART = ROOT / "charts" / "warmscale"
INSTALL_NAMESPACE = "warmscale"  # the kustomization's
# Labels only the chart sets (Helm's conventions); the kustomization's pods carry the others.
CHART_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
                "helm.sh/chart")
Key = tuple[str, str, str]


def helm() -> str:
    from tests.cluster.binaries import Binaries

    version = next(line.split("=", 1)[1].strip() for line in (ROOT / "testbed/versions.env").read_text().splitlines()
                   if line.startswith("HELM_VERSION="))
    pinned = Binaries.expected().kube_apiserver.parent.parent / f"helm-{version}" / "helm"
    found = os.environ.get("WARMSCALE_HELM") or (str(pinned) if os.access(pinned, os.X_OK) else None)
    return require_tool(found, f"helm {version} (bash .ci/build-cluster.sh)")


def helm_template(*sets: str) -> list[dict[str, Any]]:
    cmd = [helm(), "template", "warmscale", str(CHART), "--namespace", INSTALL_NAMESPACE]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
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


@pytest.mark.cluster
def test_chart_installs(k8s_cluster: Any, tmp_path: Path) -> None:
    """`helm install` on the local cluster (KEDA's CRDs and namespace present), then `helm uninstall`."""
    kc = ["--kubeconfig", str(k8s_cluster.kubeconfig)]
    subprocess.run([kubectl(), *kc, "create", "namespace", "keda"], capture_output=True, text=True, timeout=60)
    # as on an empty cluster: what other suites (or a kustomize install) left would not belong to the release
    subprocess.run([kubectl(), *kc, "delete", "-k", str(ROOT / "manifests"), "--ignore-not-found", "--wait=true"],
                   capture_output=True, text=True, timeout=300)
    out = subprocess.run([helm(), *kc, "install", "warmscale", str(CHART), "--namespace", "default"],
                         capture_output=True, text=True, timeout=300)
    try:
        assert out.returncode == 0, out.stderr
        listed = subprocess.run([kubectl(), *kc, "-n", "warmscale", "get", "deploy,svc,secret", "-o", "name"],
                                capture_output=True, text=True, timeout=60).stdout.split()
        for name in ("deployment.apps/warmscale-scaler", "deployment.apps/warmscale-controller",
                     "service/warmscale-webhook", "secret/warmscale-redis"):
            assert name in listed, listed
        hook = subprocess.run([kubectl(), *kc, "get", "mutatingwebhookconfiguration", "warmscale-webhook", "-o",
                               "name"], capture_output=True, text=True, timeout=60)
        assert hook.returncode == 0
    finally:
        subprocess.run([helm(), *kc, "uninstall", "warmscale", "--namespace", "default", "--wait"],
                       capture_output=True, text=True, timeout=300)
        # other suites expect the placeholders' PriorityClass (the uninstall removed it)
        from warmscale.warmpool import objects as ob

        subprocess.run([kubectl(), *kc, "create", "-f", "-"], input=yaml.safe_dump(ob.priority_class()),
                       capture_output=True, text=True, timeout=60)
