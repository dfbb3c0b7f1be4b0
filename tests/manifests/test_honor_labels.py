"""A real Prometheus scraping the scaler's and the controller's metrics the way the Prometheus Operator
scrapes them through the committed ServiceMonitors: the target carries the operator's target labels
(``namespace`` = the install's namespace, ``service``, ``pod``, ``endpoint``), the endpoint's
``relabelings`` set ``job``, and ``honor_labels`` is the endpoint's ``honorLabels``. Every series keeps
the workload's ``namespace`` and KEDA's ``scaledObject`` label (no ``exported_namespace``), both
components name the ScaledObject alike, and the dashboards' variables and the alert rules find them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.servers import PrometheusServer, free_port
from warmscale.scaler.metrics import SO_LABEL, ScalerMetrics
from warmscale.warmpool.controller import Metrics as ControllerMetrics

from .helpers import MANIFESTS, RULES, concrete, dashboards

pytestmark = pytest.mark.servers

SERVICE_MONITORS = MANIFESTS / "components" / "prometheus-operator" / "servicemonitor.yaml"
INSTALL_NAMESPACE = "warmscale"  # the ServiceMonitors' (and the Services') namespace
WORKLOAD_NAMESPACE, SCALED_OBJECT = "llm", "llama"
SCRAPE_WAIT_S = 30.0  # first scrape at 1 s intervals; generous for a loaded 2-core machine


def _serve(registry: CollectorRegistry) -> tuple[WSGIServer, int]:
    from prometheus_client import start_http_server

    port = free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    return server, port


def operator_scrape_config(monitor: dict[str, Any], target: str) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates for the monitor's first endpoint (static target)."""
    ep = monitor["spec"]["endpoints"][0]
    name = monitor["metadata"]["name"]
    return {
        "job_name": f"serviceMonitor/{monitor['metadata']['namespace']}/{name}/0",
        "honor_labels": bool(ep.get("honorLabels", False)),  # the operator's default: false
        "metrics_path": ep.get("path", "/metrics"),
        "scrape_interval": "1s", "scrape_timeout": "1s",
        "static_configs": [{"targets": [target], "labels": {
            "namespace": monitor["metadata"]["namespace"], "service": name, "pod": f"{name}-0",
            "endpoint": ep["port"], "job": name}}],
        "relabel_configs": [{"target_label": r["targetLabel"], "replacement": r["replacement"]}
                            for r in ep.get("relabelings", [])],
    }


class OperatorPrometheus(PrometheusServer):
    def __init__(self, scrape_configs: list[dict[str, Any]]) -> None:
        self.scrape_configs = scrape_configs
        super().__init__([], scrape_interval="1s")

    def _write_config(self, targets: Any) -> None:
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": [str(RULES)],
               "scrape_configs": self.scrape_configs}
        self.config.write_text(json.dumps(cfg, indent=1))


@pytest.fixture
def scraped() -> Iterator[OperatorPrometheus]:
    scaler, controller = ScalerMetrics(), ControllerMetrics()
    so = (WORKLOAD_NAMESPACE, SCALED_OBJECT)
    scaler.desired.labels(*so).set(3)
    scaler.known.labels(*so).set(0)
    scaler.unknown.labels(*so).set(2)  # so that WarmscaleSignalsLost/Stale select a series
    controller.floor.labels(*so).set(1)
    controller.warm_capacity.labels(*so).set(1)
    servers = [_serve(scaler.registry), _serve(controller.registry)]
    monitors = {m["metadata"]["name"]: m for m in yaml.safe_load_all(SERVICE_MONITORS.read_text()) if m}
    prom = OperatorPrometheus([
        operator_scrape_config(monitors["warmscale-scaler"], f"127.0.0.1:{servers[0][1]}"),
        operator_scrape_config(monitors["warmscale-controller"], f"127.0.0.1:{servers[1][1]}")])
    try:
        prom.start()
        prom.wait_for("count(up == 1) == 2", timeout=SCRAPE_WAIT_S)
        prom.wait_for("warmscale_min_ready_floor", timeout=SCRAPE_WAIT_S)
        yield prom
    finally:
        prom.close()
        for server, _ in servers:
            server.shutdown()
            server.server_close()


def test_series_keep_the_workload_namespace(scraped: OperatorPrometheus) -> None:
    renamed = scraped.query('{exported_namespace!=""}')
    assert not renamed, f"honorLabels missing: the series' namespace became exported_namespace: {renamed[:3]}"
    for metric, job in (("warmscale_desired_replicas", "warmscale-scaler"),
                        ("warmscale_min_ready_floor", "warmscale-controller")):
        got = scraped.query(f'{metric}{{namespace="{WORKLOAD_NAMESPACE}",{SO_LABEL}="{SCALED_OBJECT}"}}')
        assert [r["metric"]["job"] for r in got] == [job], (metric, got)


def test_build_info_from_both_components(scraped: OperatorPrometheus) -> None:
    got = scraped.query("warmscale_build_info")
    by_component = {r["metric"]["component"]: r["metric"] for r in got}
    assert set(by_component) == {"scaler", "controller"}, got
    for m in by_component.values():
        assert m["version"] and m["commit"], m
        assert m["namespace"] == INSTALL_NAMESPACE  # no label of its own: the target's stays


def test_dashboard_variables_list_the_scaled_object(scraped: OperatorPrometheus) -> None:
    """Each dashboard's ScaledObject variable lists the ScaledObject from its source metric."""
    for name, d in dashboards().items():
        variables = {v["name"]: v for v in d["templating"]["list"] if v.get("type") == "query"}
        assert set(variables) == {"namespace", SO_LABEL}, (name, set(variables))
        query = variables[SO_LABEL]["query"]
        assert query.rstrip(")").endswith(f", {SO_LABEL}"), (name, query)  # the label it lists
        selector = concrete(query[len("label_values("):query.rindex(",")], namespace=WORKLOAD_NAMESPACE)
        got = {r["metric"].get(SO_LABEL) for r in scraped.query(selector)}
        assert got == {SCALED_OBJECT}, (name, selector, got)


def test_alerts_fire_on_the_workload_namespace(scraped: OperatorPrometheus) -> None:
    deadline = time.monotonic() + SCRAPE_WAIT_S
    pending: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        pending = [a for a in scraped.query("ALERTS") if a["metric"]["alertname"] == "WarmscaleSignalsLost"]
        if pending:
            break
        time.sleep(0.5)
    assert pending, "WarmscaleSignalsLost never went pending"
    labels = pending[0]["metric"]
    assert (labels["namespace"], labels[SO_LABEL]) == (WORKLOAD_NAMESPACE, SCALED_OBJECT), labels
