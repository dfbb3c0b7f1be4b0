"""Shared helpers of the manifest tests: rendering kustomizations, the PromQL of dashboards and rules,
and the metric names the project exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
GRAFANA = MANIFESTS / "grafana"
RULES = MANIFESTS / "prometheus" / "warmscale.rules.yaml"
RULE_TESTS = MANIFESTS / "prometheus" / "tests" / "warmscale.rules.test.yaml"
PROMTOOL = os.environ.get("WARMSCALE_PROMTOOL", "/usr/bin/promtool")

# Kustomization roots a user applies; every one must render.
INSTALLS = ["manifests", "manifests/overlays/in-cluster-redis", "manifests/overlays/external-redis",
            "manifests/overlays/plaintext", "manifests/overlays/prometheus-operator", "manifests/overlays/namespaced"]
EXTRAS = ["manifests/examples", "manifests/grafana", "manifests/prometheus"]
ENGINES = ["vllm", "sglang", "trtllm-triton", "tgi"]

# Series Prometheus adds itself for every target.
# Metrics of other components an alert reads (not scraped by a Prometheus that scrapes only warmscale).
FOREIGN_METRICS = {
    "apiserver_admission_webhook_fail_open_count",  # the API server's (WarmscaleWebhookFailingOpen; >= 1.24)
}
PROMETHEUS_SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                        "scrape_samples_post_metric_relabeling", "scrape_series_added", *FOREIGN_METRICS}


def require_tool(path: str | None, what: str) -> str:
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    msg = f"{what} not found ({path}); see docs/install.md"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def kubectl() -> str:
    from warmscale.localcluster.binaries import Binaries

    pinned = Binaries.expected().kube_apiserver.parent / "kubectl"  # built by .ci/build-cluster.sh
    found = os.environ.get("WARMSCALE_KUBECTL") or (str(pinned) if os.access(pinned, os.X_OK) else None)
    return require_tool(found or shutil.which("kubectl"), "kubectl")


@cache
def _render(path: str) -> str:
    out = subprocess.run([kubectl(), "kustomize", str(ROOT / path)], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {path} failed:\n{out.stderr}")
    return out.stdout


def render(path: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize <path>`` renders."""
    return [d for d in yaml.safe_load_all(_render(path)) if d]


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


# ------------------------------------------------------------------------------------------ PromQL


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(GRAFANA.glob("*.json"))}


def dashboard_queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target, annotation and query variable of every dashboard."""
    for name, d in dashboards().items():
        for panel in d.get("panels", []):
            for t in panel.get("targets", []) or []:
                yield f"{name}: panel {panel['title']!r} {t.get('refId')}", t["expr"]
        for a in d.get("annotations", {}).get("list", []):
            if a.get("expr"):
                yield f"{name}: annotation {a['name']!r}", a["expr"]
        for v in d.get("templating", {}).get("list", []):
            if v.get("type") == "query":
                m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", str(v["query"]))
                assert m, f"{name}: variable {v['name']} is not label_values(...)"
                yield f"{name}: variable {v['name']!r}", m.group(1)


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"]]


def rule_queries() -> Iterator[tuple[str, str]]:
    for r in alert_rules():
        yield f"rule {r.get('alert') or r.get('record')}", r["expr"]


GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "${__range}": "1h"}


def concrete(expr: str, **variables: str) -> str:
    """A dashboard query with Grafana's variables replaced (template variables match anything)."""
    for k, v in GRAFANA_VARS.items():
        expr = expr.replace(k, v)
    for k, v in variables.items():
        expr = expr.replace(f"${k}", v)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "atan2", "start", "end"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (a small lexer, enough for the project's queries)."""
    s = concrete(expr)
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', s)  # strings
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\[\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", s):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def exported_metrics() -> dict[str, str]:
    """Every sample name the scaler and the warm-pool controller can export -> its module."""
    from warmscale.scaler.metrics import ScalerMetrics
    from warmscale.warmpool.controller import Metrics as WarmpoolMetrics

    out: dict[str, str] = {}
    for module, registry in (("warmscale.scaler.metrics", ScalerMetrics().registry),
                             ("warmscale.warmpool.controller", WarmpoolMetrics().registry)):
        for family in registry.collect():
            kind, name = family.type, family.name
            if kind == "counter":
                names = [name + "_total", name + "_created"]
            elif kind == "histogram":
                names = [name + "_bucket", name + "_count", name + "_sum", name + "_created"]
            elif kind == "summary":
                names = [name, name + "_count", name + "_sum", name + "_created"]
            else:
                names = [name]
            for n in names:
                out[n] = module
    return out
