"""Generate warmscale's Grafana dashboards and the PrometheusRule wrapper of its alert rules.

    python3 tools/dashboards.py            # (re)write the files below
    python3 tools/dashboards.py --check    # exit 1 if a committed file differs from what this generates

Outputs
  manifests/grafana/warmscale-autoscaling.json    replicas, signals, staleness, scaler RPC
  manifests/grafana/warmscale-warm-pool.json      warm pool, cold vs warm start-up
  manifests/components/prometheus-operator/prometheusrule.yaml
      the PrometheusRule wrapping manifests/prometheus/warmscale.rules.yaml (the rules are written
      there, by hand, and checked with promtool; this only wraps them)
  manifests/base/controller-rbac.yaml
      a verbatim copy of the warm pool's own manifests/warmpool/rbac.yaml: kustomize cannot load a
      file outside a kustomization's directory, and manifests/warmpool/ has no kustomization.yaml
      to reference as a directory. Once it has one, base/ can list ../warmpool instead.
  manifests/base/controller-admission-policy.yaml
      likewise, a copy of manifests/warmpool/admission-policy.yaml (the node-write policy)
  charts/warmscale/files/warmscale.rules.yaml, charts/warmscale/files/dashboards/*.json
      the chart's copies of the rules and the dashboards (a chart reads files inside itself only)

Dashboards are built with grafana-foundation-sdk (pinned in the dev dependencies: the committed JSON
is what that exact version renders). Every query selects on the template variables ``namespace``
and ``scaledObject``: the scaler's and the controller's series name the ScaledObject with KEDA's label
``scaledObject`` (the controller's carry the workload's name, which the ScaledObject it keeps has).
``tests/manifests`` checks that every
metric named here is exported by ``scaler.metrics`` or ``warmpool.controller`` and that every query
returns data from a real Prometheus scraping the running scaler and controller.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

ROOT = Path(__file__).resolve().parents[1]
GRAFANA_DIR = ROOT / "manifests" / "grafana"
RULES_FILE = ROOT / "manifests" / "prometheus" / "warmscale.rules.yaml"
PROMETHEUS_RULE_FILE = ROOT / "manifests" / "components" / "prometheus-operator" / "prometheusrule.yaml"
WARMPOOL_RBAC = ROOT / "manifests" / "warmpool" / "rbac.yaml"
CONTROLLER_RBAC = ROOT / "manifests" / "base" / "controller-rbac.yaml"
WARMPOOL_POLICY = ROOT / "manifests" / "warmpool" / "admission-policy.yaml"
CONTROLLER_POLICY = ROOT / "manifests" / "base" / "controller-admission-policy.yaml"
CHART_FILES = ROOT / "charts" / "warmscale" / "files"

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
SO = 'namespace=~"$namespace",scaledObject=~"$scaledObject"'
BY_SO = "by (namespace, scaledObject)"
SCALER_JOB = 'job="warmscale-scaler"'
CONTROLLER_JOB = 'job="warmscale-controller"'


@dataclass(frozen=True)
class Q:
    """One query of a panel: PromQL and its legend."""

    expr: str
    legend: str


# ----------------------------------------------------------------------------------------- helpers


def _query(q: Q, ref: str) -> pb.Dataquery:
    return pb.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(ref).range()


def _series(title: str, description: str, queries: list[Q], *, unit: str = "short", width: int = 12,
            height: int = 8, stacked: bool = False, minimum: float | None = 0, maximum: float | None = None,
            thresholds: list[tuple[float, str]] | None = None, draw_bars: bool = False) -> timeseries.Panel:
    p = (timeseries.Panel().title(title).description(description).datasource(DS).unit(unit)
         .span(width).height(height).line_width(1).fill_opacity(10 if not stacked else 40)
         .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                 .placement(cm.LegendPlacement.BOTTOM).show_legend(True).calcs(["lastNotNull", "max"]))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)))
    if minimum is not None:
        p = p.min(minimum)
    if maximum is not None:
        p = p.max(maximum)
    if stacked:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if draw_bars:
        p = p.draw_style(cm.GraphDrawStyle.BARS)
    if thresholds:
        steps = [dm.Threshold(value=None, color="green")] + [dm.Threshold(value=v, color=c) for v, c in thresholds]
        p = (p.thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
             .thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)))
    for i, q in enumerate(queries):
        p = p.with_target(_query(q, chr(ord("A") + i)))
    return p


def _stat(title: str, description: str, q: Q, *, unit: str = "short", width: int = 6, height: int = 4,
          thresholds: list[tuple[float, str]] | None = None) -> stat.Panel:
    steps = [dm.Threshold(value=None, color="green")] + [dm.Threshold(value=v, color=c) for v, c in thresholds or []]
    return (stat.Panel().title(title).description(description).datasource(DS).unit(unit).span(width).height(height)
            .color_mode(cm.BigValueColorMode.BACKGROUND).graph_mode(cm.BigValueGraphMode.AREA)
            .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
            .thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
            .with_target(_query(q, "A")))


def _variables(d: db.Dashboard, source_metric: str, name_label: str) -> db.Dashboard:
    return (d.with_variable(db.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
            .with_variable(db.QueryVariable("namespace").label("Namespace").datasource(DS)
                           .query(f"label_values({source_metric}, namespace)")
                           .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
                           .multi(True).include_all(True).all_value(".*").sort(dm.VariableSort.ALPHABETICAL_ASC))
            .with_variable(db.QueryVariable("scaledObject").label("ScaledObject").datasource(DS)
                           .query(f'label_values({source_metric}{{namespace=~"$namespace"}}, {name_label})')
                           .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
                           .multi(True).include_all(True).all_value(".*").sort(dm.VariableSort.ALPHABETICAL_ASC)))


def _base(title: str, uid: str, description: str) -> db.Dashboard:
    return (db.Dashboard(title).uid(uid).description(description).tags(["warmscale", "keda", "llm"])
            .editable().tooltip(dm.DashboardCursorSync.CROSSHAIR).refresh("30s").time("now-3h", "now")
            .timezone("browser")
            .link(db.DashboardLink("warmscale").type(dm.DashboardLinkType.DASHBOARDS).tags(["warmscale"])
                  .as_dropdown(True).include_vars(True).keep_time(True)))


def scale_events_annotation() -> db.AnnotationQuery:
    """Every change of the desired replica count, as an annotation on every time series panel."""
    return (db.AnnotationQuery().name("Scale events").datasource(DS).enable(True).icon_color("orange")
            .expr(f"changes(warmscale_desired_replicas{{{SO}}}[1m]) > 0"))


# --------------------------------------------------------------------------------------- dashboards


def autoscaling() -> db.Dashboard:
    d = _variables(_base("warmscale / Autoscaling", "warmscale-autoscaling",
                         "What the warmscale scaler sees (engine signals) and decides (replica targets), how "
                         "fresh its signals are, and how its gRPC service to KEDA behaves."),
                   "warmscale_desired_replicas", "scaledObject")
    d = d.annotation(scale_events_annotation())

    d = d.with_row(db.Row("Replicas: desired vs actual vs ready"))
    d = d.with_panel(_series(
        "Desired vs actual vs ready replicas",
        "desired: the replica count the policy decided (what the HPA is driven to). actual: ready + starting "
        "replicas the policy counted (from the API server when the scaler can see the pods). ready: Ready "
        "replicas. warm floor: the warm-pool controller's current min-ready floor (minReplicaCount). Orange "
        "marks: scale events.",
        [Q(f"max {BY_SO} (warmscale_desired_replicas{{{SO}}})", "desired {{namespace}}/{{scaledObject}}"),
         Q(f"max {BY_SO} (warmscale_ready_replicas{{{SO}}} + warmscale_starting_replicas{{{SO}}})",
           "actual {{namespace}}/{{scaledObject}}"),
         Q(f"max {BY_SO} (warmscale_ready_replicas{{{SO}}})", "ready {{namespace}}/{{scaledObject}}"),
         Q(f"max {BY_SO} (warmscale_min_ready_floor{{{SO}}})",
           "warm floor {{namespace}}/{{scaledObject}}")],
        width=16, height=9))
    d = d.with_panel(_series(
        "Decisions by rule",
        "Decisions per second by the rule that set them (demand, queue, kv, ttft, min/max bounds, scale-down "
        "stabilisation, holds on partial or unknown data, idle).",
        [Q(f"sum by (reason) (rate(warmscale_decisions_total{{{SO}}}[$__rate_interval]))", "{{reason}}")],
        unit="ops", width=8, height=9, stacked=True))
    d = d.with_panel(_series(
        "Metric reported to the HPA",
        "GetMetrics value (target 1 per replica); differs from desired only where the HPA's tolerance band is "
        "compensated (docs/policy.md).",
        [Q(f"max {BY_SO} (warmscale_metric_value{{{SO}}})", "{{namespace}}/{{scaledObject}}")], width=12, height=7))
    d = d.with_panel(_series(
        "Active (IsActive)",
        "1 while the scaler answers IsActive true; 0 lets KEDA scale the target to zero after its cooldown.",
        [Q(f"max {BY_SO} (warmscale_active{{{SO}}})", "{{namespace}}/{{scaledObject}}")],
        width=12, height=7, maximum=1))

    d = d.with_row(db.Row("Signals: queue, running, KV cache, TTFT vs SLO"))
    d = d.with_panel(_series(
        "Waiting and running requests",
        "Requests waiting in the engines' queues and running in their batches, summed over replicas with a "
        "fresh signal, plus the gateway queue (Redis) when configured.",
        [Q(f"sum {BY_SO} (warmscale_waiting_requests{{{SO}}})", "waiting {{namespace}}/{{scaledObject}}"),
         Q(f"sum {BY_SO} (warmscale_running_requests{{{SO}}})", "running {{namespace}}/{{scaledObject}}"),
         Q(f"sum {BY_SO} (warmscale_gateway_queue_length{{{SO}}})", "gateway {{namespace}}/{{scaledObject}}")]))
    d = d.with_panel(_series(
        "KV-cache usage (highest replica)",
        "Highest KV-cache usage over the replicas (0..1). The KV residency need sizes mean usage for 0.5; with "
        "targetInflightPerReplica the KV need engages at 0.9 and sizes for 0.8 (scaler/config.py KV_*).",
        [Q(f"max {BY_SO} (warmscale_kv_cache_usage_ratio{{{SO}}})", "{{namespace}}/{{scaledObject}}")],
        unit="percentunit", maximum=1, thresholds=[(0.8, "orange"), (0.9, "red")]))
    d = d.with_panel(_series(
        "TTFT at the SLO quantile",
        "Time to first token at the configured quantile (ttftQuantile) over the scaler's window "
        "(ttftWindowSeconds), from the engines' histograms, against the ScaledObject's ttftSloSeconds.",
        [Q(f"max {BY_SO} (warmscale_ttft_quantile_seconds{{{SO}}})", "{{namespace}}/{{scaledObject}}"),
         Q(f"max {BY_SO} (warmscale_ttft_slo_seconds{{{SO}}})", "SLO {{namespace}}/{{scaledObject}}")],
        unit="s"))
    d = d.with_panel(_series(
        "SLO attainment",
        "Share of requests within the TTFT SLO (ttftSloSeconds) over 5 minutes, 1 hour and 1 day, from the "
        "engines' histograms (warmscale_slo_attainment_ratio{slo=\"ttft\"}; slo=\"itl\" with itlSloSeconds). "
        "Below 0.99 the error budget of a 99% objective burns (alert WarmscaleSLOErrorBudgetBurn).",
        [Q(f'min {BY_SO} (warmscale_slo_attainment_ratio{{{SO},slo="ttft",window="5m"}})',
           "TTFT 5m {{namespace}}/{{scaledObject}}"),
         Q(f'min {BY_SO} (warmscale_slo_attainment_ratio{{{SO},slo="ttft",window="1h"}})',
           "TTFT 1h {{namespace}}/{{scaledObject}}"),
         Q(f'min {BY_SO} (warmscale_slo_attainment_ratio{{{SO},slo="ttft",window="1d"}})',
           "TTFT 1d {{namespace}}/{{scaledObject}}")],
        unit="percentunit", maximum=1, thresholds=[(0.99, "green")]))
    d = d.with_panel(_series(
        "TTFT over the SLO (share of decisions)",
        "Share of decisions the TTFT rule set: the windowed TTFT quantile was above ttftSloSeconds and drove "
        "the replica count. Sustained values mean the SLO is being burnt (alert WarmscaleTTFTSLOBurn).",
        [Q(f'(sum {BY_SO} (rate(warmscale_decisions_total{{{SO},reason="ttft"}}[$__rate_interval])) '
           f"or sum {BY_SO} (rate(warmscale_decisions_total{{{SO}}}[$__rate_interval])) * 0) "
           f"/ sum {BY_SO} (rate(warmscale_decisions_total{{{SO}}}[$__rate_interval]))",
           "{{namespace}}/{{scaledObject}}")],
        unit="percentunit", maximum=1, thresholds=[(0.5, "red")]))

    d = d.with_row(db.Row("Signal staleness"))
    d = d.with_panel(_series(
        "Oldest signal age",
        "Age of the oldest fresh replica signal. Past stalenessSeconds (default 30 s) a replica becomes "
        "unknown; unknown replicas block scale-down and all-unknown holds the last decision.",
        [Q(f"max {BY_SO} (warmscale_signal_age_seconds{{{SO}}})", "{{namespace}}/{{scaledObject}}")],
        unit="s", width=8, thresholds=[(30, "red")]))
    d = d.with_panel(_series(
        "Unknown replicas and scrape errors",
        "Replicas whose signal is unknown (stale, unreachable, unparseable) and snapshot/source errors per second.",
        [Q(f"max {BY_SO} (warmscale_unknown_replicas{{{SO}}})", "unknown {{namespace}}/{{scaledObject}}"),
         Q(f"sum {BY_SO} (rate(warmscale_scrape_errors_total{{{SO}}}[$__rate_interval])) "
           f"or max {BY_SO} (warmscale_unknown_replicas{{{SO}}}) * 0",
           "errors/s {{namespace}}/{{scaledObject}}")], width=8))
    d = d.with_panel(_series(
        "Decision age",
        "Seconds since the latest decision was computed (by whichever scaler replica holds the compute lease).",
        [Q(f"time() - max {BY_SO} (warmscale_decision_timestamp_seconds{{{SO}}})", "{{namespace}}/{{scaledObject}}")],
        unit="s", width=8, thresholds=[(60, "red")]))
    d = d.with_panel(_series(
        "Next-layer advice",
        "Failures that repeated (episodes within 24 h) and the layer they ask for (warmscale_advice; "
        "cold-start-slo: warm pool settings). Empty while nothing repeats. `warmscale advise` shows the evidence "
        "and the other findings (prefill interference, quota contention, partial gangs, engine OOM).",
        [Q(f"max by (namespace, scaledObject, finding) (warmscale_advice{{{SO}}})",
           "{{finding}} {{namespace}}/{{scaledObject}}")], width=24, height=6, draw_bars=True))

    d = d.with_row(db.Row("Scaler RPC latency and errors"))
    d = d.with_panel(_series(
        "RPC latency (p50, p99)",
        "Unary RPC latency of the scaler by method (GetMetricSpec, GetMetrics, IsActive).",
        [Q(f"histogram_quantile(0.99, sum by (method, le) (rate(warmscale_rpc_duration_seconds_bucket{{{SCALER_JOB}}}"
           "[$__rate_interval])))", "p99 {{method}}"),
         Q(f"histogram_quantile(0.5, sum by (method, le) (rate(warmscale_rpc_duration_seconds_bucket{{{SCALER_JOB}}}"
           "[$__rate_interval])))", "p50 {{method}}")], unit="s"))
    d = d.with_panel(_series(
        "RPCs by status code",
        "RPCs per second by method and gRPC status code; anything but OK is an error (INVALID_ARGUMENT: bad "
        "trigger metadata).",
        [Q(f"sum by (method, code) (rate(warmscale_rpc_duration_seconds_count{{{SCALER_JOB}}}[$__rate_interval]))",
           "{{method}} {{code}}")], unit="reqps", stacked=True))
    d = d.with_panel(_series(
        "RPC error ratio",
        "Share of unary RPCs that did not end with OK.",
        [Q(f'(sum(rate(warmscale_rpc_duration_seconds_count{{{SCALER_JOB},code!="OK"}}[$__rate_interval])) '
           f"or vector(0)) / sum(rate(warmscale_rpc_duration_seconds_count{{{SCALER_JOB}}}[$__rate_interval]))",
           "error ratio")], unit="percentunit", width=8, maximum=1, thresholds=[(0.05, "red")]))
    d = d.with_panel(_series(
        "Streams, trackers, instances up",
        "Open push streams (StreamIsActive, StreamMetricSpec), ScaledObjects tracked, scaler instances up.",
        [Q(f"sum by (method) (warmscale_open_streams{{{SCALER_JOB}}})", "streams {{method}}"),
         Q(f"sum(warmscale_trackers{{{SCALER_JOB}}})", "trackers"),
         Q(f"sum(up{{{SCALER_JOB}}})", "instances up")], width=8))
    d = d.with_panel(_series(
        "Decision time (p99) and store errors",
        "Time to read a snapshot and decide (p99), and failed store (Redis) operations per second.",
        [Q(f"histogram_quantile(0.99, sum by (le) (rate(warmscale_decision_seconds_bucket{{{SCALER_JOB}}}"
           "[$__rate_interval])))", "decide p99"),
         Q(f"sum by (op) (rate(warmscale_store_errors_total{{{SCALER_JOB}}}[$__rate_interval])) or vector(0)",
           "store errors/s {{op}}")], unit="s", width=8))
    return d


def warm_pool() -> db.Dashboard:
    d = _variables(_base("warmscale / Warm pool", "warmscale-warm-pool",
                         "Capacity the warm-pool controller holds (placeholders, staged and pre-pulled nodes) and "
                         "what it buys: replica start-up time by warm state."),
                   "warmscale_min_ready_floor", "scaledObject")
    d = d.annotation(scale_events_annotation())

    d = d.with_row(db.Row("Warm pool: placeholders, staged nodes, pre-pull progress"))
    d = d.with_panel(_stat(
        "Controller leader", "Controller replicas that hold the leader Lease (should be exactly 1).",
        Q(f"sum(warmscale_leader{{{CONTROLLER_JOB}}})", "leaders"), thresholds=[(2, "red")]))
    d = d.with_panel(_stat(
        "Warm capacity held", "Replicas' worth of GPU capacity held by ready placeholder pods, all workloads.",
        Q(f"sum(warmscale_warm_capacity_replicas{{{SO}}})", "placeholders")))
    d = d.with_panel(_stat(
        "Staged nodes", "Nodes with the model staged, all workloads.",
        Q(f"sum(warmscale_staged_nodes{{{SO}}})", "staged")))
    d = d.with_panel(_stat(
        "Reconcile errors (1h)", "Failed reconciles of the controller in the last hour.",
        Q(f'sum(increase(warmscale_reconcile_total{{{CONTROLLER_JOB},result="error"}}[1h])) or vector(0)', "errors"),
        thresholds=[(1, "orange"), (10, "red")]))
    d = d.with_panel(_series(
        "Placeholders and warm floor",
        "Ready placeholder pods (replicas' worth of held GPU capacity, warmscale.io/standby) and the current "
        "warm floor (warmscale.io/min-ready, kept as the ScaledObject's minReplicaCount).",
        [Q(f"max {BY_SO} (warmscale_warm_capacity_replicas{{{SO}}})", "placeholders {{namespace}}/{{scaledObject}}"),
         Q(f"max {BY_SO} (warmscale_min_ready_floor{{{SO}}})", "floor {{namespace}}/{{scaledObject}}")]))
    d = d.with_panel(_series(
        "Staged and pre-pulled nodes",
        "Chosen nodes (warmscale.io/prestage-nodes) with the model's weights staged and with every image pulled.",
        [Q(f"max {BY_SO} (warmscale_staged_nodes{{{SO}}})", "staged {{namespace}}/{{scaledObject}}"),
         Q(f"max {BY_SO} (warmscale_prepull_nodes{{{SO}}})", "pre-pulled {{namespace}}/{{scaledObject}}")]))
    d = d.with_panel(_series(
        "Pre-pull progress",
        "Pre-pulled / chosen nodes per workload (1 = every chosen node has every image).",
        [Q(f"max {BY_SO} (warmscale_prepull_progress_ratio{{{SO}}})", "{{namespace}}/{{scaledObject}}")],
        unit="percentunit", maximum=1))
    d = d.with_panel(_series(
        "Reconciles by result",
        "Controller reconciles per second (ok, error).",
        [Q(f"sum by (result) (rate(warmscale_reconcile_total{{{CONTROLLER_JOB}}}[$__rate_interval]))", "{{result}}")],
        unit="ops", stacked=True))

    d = d.with_row(db.Row("Start-up: cold vs warm"))
    d = d.with_panel(_series(
        "Time to Ready by warm state (median, p90)",
        "Replica creation to Ready, measured by the controller, by warm state: placeholder+staged (landed on "
        "held, staged capacity), staged (weights and image local), cold. The scaler uses the warmest available "
        "state's median as its look-ahead.",
        [Q("histogram_quantile(0.5, sum by (warm_state, le) "
           f"(rate(warmscale_startup_seconds_bucket{{{SO}}}[$__range])))", "p50 {{warm_state}}"),
         Q("histogram_quantile(0.9, sum by (warm_state, le) "
           f"(rate(warmscale_startup_seconds_bucket{{{SO}}}[$__range])))", "p90 {{warm_state}}")],
        unit="s", width=12))
    d = d.with_panel(_series(
        "Mean time to Ready by warm state",
        "Average start-up seconds per warm state over the dashboard's time range.",
        [Q(f"sum by (warm_state) (rate(warmscale_startup_seconds_sum{{{SO}}}[$__range])) / "
           f"sum by (warm_state) (rate(warmscale_startup_seconds_count{{{SO}}}[$__range]))", "{{warm_state}}")],
        unit="s", width=6))
    d = d.with_panel(_series(
        "Replica starts by warm state",
        "Replicas that became Ready per warm state in the dashboard's time range.",
        [Q(f"sum by (warm_state) (increase(warmscale_startup_seconds_count{{{SO}}}[$__range]))", "{{warm_state}}")],
        width=6, draw_bars=True))
    return d


DASHBOARDS = {"warmscale-autoscaling.json": autoscaling, "warmscale-warm-pool.json": warm_pool}


# ------------------------------------------------------------------------------------------ output


def _number_panels(model: dict[str, Any]) -> dict[str, Any]:
    """Stable panel ids (1, 2, ...) in layout order and refIds; Grafana needs unique ids."""
    for i, panel in enumerate(model.get("panels", []), start=1):
        panel["id"] = i
    return model


def render_dashboard(name: str) -> str:
    model = json.loads(json.dumps(DASHBOARDS[name]().build(), cls=JSONEncoder))
    model = _number_panels(model)
    return json.dumps(model, indent=2, sort_keys=True) + "\n"


def render_prometheus_rule() -> str:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    obj = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "warmscale",
            "namespace": "warmscale",
            "labels": {"app.kubernetes.io/part-of": "warmscale"},
        },
        "spec": {"groups": groups},
    }
    header = ("# GENERATED by tools/dashboards.py from manifests/prometheus/warmscale.rules.yaml; do not edit.\n"
              "# Regenerate: python3 tools/dashboards.py\n")
    return header + yaml.safe_dump(obj, sort_keys=False, width=120, allow_unicode=True)


def render_controller_rbac() -> str:
    header = ("# GENERATED by tools/dashboards.py: a copy of manifests/warmpool/rbac.yaml (owned by the warm pool);\n"
              "# edit that file and regenerate.\n")
    return header + WARMPOOL_RBAC.read_text()


def render_controller_policy() -> str:
    header = ("# GENERATED by tools/dashboards.py: a copy of manifests/warmpool/admission-policy.yaml (owned by the\n"
              "# warm pool); edit that file and regenerate.\n")
    return header + WARMPOOL_POLICY.read_text()


def outputs() -> dict[Path, str]:
    files = {GRAFANA_DIR / name: render_dashboard(name) for name in DASHBOARDS}
    files[PROMETHEUS_RULE_FILE] = render_prometheus_rule()
    files[CONTROLLER_RBAC] = render_controller_rbac()
    files[CONTROLLER_POLICY] = render_controller_policy()
    files[CHART_FILES / "warmscale.rules.yaml"] = RULES_FILE.read_text()
    for name in DASHBOARDS:
        files[CHART_FILES / "dashboards" / name] = files[GRAFANA_DIR / name]
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args(argv)
    stale = 0
    for path, text in outputs().items():
        rel = path.relative_to(ROOT)
        current = path.read_text() if path.exists() else ""
        if args.check:
            if current != text:
                stale += 1
                sys.stdout.writelines(difflib.unified_diff(
                    current.splitlines(True), text.splitlines(True), f"{rel} (committed)", f"{rel} (generated)", n=1))
        elif current != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {rel}")
    if stale:
        print(f"{stale} generated file(s) out of date; run: python3 tools/dashboards.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
