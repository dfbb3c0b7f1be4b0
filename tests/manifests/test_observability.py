"""Dashboards and alert rules: generated files are current, promtool accepts and unit-tests the rules,
and every metric they name is one the project exports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest
import yaml

from .helpers import (
    PROMETHEUS_SYNTHETIC,
    PROMTOOL,
    ROOT,
    RULE_TESTS,
    RULES,
    alert_rules,
    dashboard_queries,
    dashboards,
    exported_metrics,
    metric_names,
    render,
    require_tool,
    rule_queries,
)


def _generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk", reason="dev dependency grafana-foundation-sdk not installed")
    spec = importlib.util.spec_from_file_location("warmscale_tools_dashboards", ROOT / "tools" / "dashboards.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_generated_files_are_current() -> None:
    gen = _generator()
    for path, text in gen.outputs().items():
        assert path.exists(), f"{path} missing; run python3 tools/dashboards.py"
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale; run python3 tools/dashboards.py"


def test_prometheus_rule_wraps_the_rule_file() -> None:
    (pr,) = [o for o in render("manifests/overlays/prometheus-operator") if o["kind"] == "PrometheusRule"]
    assert pr["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    assert pr["metadata"]["namespace"] == "warmscale"


def test_dashboard_rows() -> None:
    rows = {name: [p["title"] for p in d["panels"] if p["type"] == "row"] for name, d in dashboards().items()}
    flat = " | ".join(t for ts in rows.values() for t in ts).lower()
    for topic in ("desired vs actual vs ready", "queue", "kv cache", "ttft vs slo", "placeholders", "staged nodes",
                  "pre-pull", "cold vs warm", "rpc latency and errors", "staleness"):
        assert topic in flat, f"no dashboard row about {topic!r}: {rows}"
    for name, d in dashboards().items():
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), name
        assert any(a.get("name") == "Scale events" for a in d["annotations"]["list"]), name
        for p in d["panels"]:
            if p["type"] != "row":
                assert p["datasource"]["uid"] == "${datasource}" and p.get("targets"), p["title"]


def test_promtool_check_rules() -> None:
    promtool = require_tool(PROMTOOL, "promtool")
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in out.stdout


def test_promtool_test_rules() -> None:
    promtool = require_tool(PROMTOOL, "promtool")
    out = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], capture_output=True, text=True, timeout=120,
                         cwd=RULE_TESTS.parent)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_unit_test() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {c["alertname"] for t in tests for c in t.get("alert_rule_test", []) if c.get("exp_alerts")}
    alerts = {r["alert"] for r in alert_rules() if "alert" in r}
    assert alerts - fired == set(), "alerts without a unit test that fires them"
    for r in alert_rules():
        assert r["labels"]["severity"] in {"warning", "critical"} and r["annotations"]["summary"], r["alert"]


def test_metric_lexer() -> None:
    q = ('(sum by (namespace) (rate(warmscale_decisions_total{reason="ttft",namespace=~"$namespace"}'
         '[$__rate_interval])) or vector(0)) / on (namespace) group_left max(up{job="x"} offset 5m) '
         '> 0.5 and histogram_quantile(0.99, sum by (le) (rate(warmscale_rpc_duration_seconds_bucket[5m]))) '
         '+ label_replace(warmscale_known_replicas, "x", "$1", "scaledObject", "(.*)") - time()')
    assert metric_names(q) == {"warmscale_decisions_total", "up", "warmscale_rpc_duration_seconds_bucket",
                               "warmscale_known_replicas"}


def test_every_referenced_metric_is_exported() -> None:
    exported = exported_metrics()
    assert "warmscale_desired_replicas" in exported and "warmscale_startup_seconds_bucket" in exported
    unknown: list[str] = []
    used: set[str] = set()
    for where, expr in [*dashboard_queries(), *rule_queries()]:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        used |= names
        unknown += [f"{where}: {n}" for n in sorted(names - exported.keys() - PROMETHEUS_SYNTHETIC)]
    assert not unknown, "metrics the project does not export:\n" + "\n".join(unknown)
    # And the dashboards cover both components.
    assert {"warmscale.scaler.metrics", "warmscale.warmpool.controller"} <= {exported[n] for n in used if n in exported}


def test_unknown_metric_is_caught() -> None:
    names = metric_names('sum(rate(warmscale_no_such_metric_total{namespace="x"}[5m]))')
    assert names - exported_metrics().keys() == {"warmscale_no_such_metric_total"}


def test_every_alert_has_a_runbook_in_troubleshooting() -> None:
    """Each alert's runbook_url is the troubleshooting page's section of that alert (GitHub's anchor of
    a "### <AlertName>" heading is the name in lower case)."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    headings = {line[4:].strip() for line in page.splitlines() if line.startswith("### ")}
    for rule in alert_rules():
        name = rule["alert"]
        url = rule["annotations"].get("runbook_url", "")
        assert url == f"https://github.com/warmscale/warmscale/blob/main/docs/troubleshooting.md#{name.lower()}", name
        assert name in headings, f"docs/troubleshooting.md has no section '### {name}'"
