"""`warmscale bench fleet`: six models on one cluster, four configurations, one shared hot pool.

Prints a table, writes the JSON (``configurations.<name>.{gpu_hours, slo_attainment: {per_model,
median, min}, wakes, wake_to_first_token_s: {p50, p99}}``, issue 23 requirement 5) and, with
``--plot``, a PNG: per-model attainment and the fleet's GPU-hours per configuration. Method and
figures: docs/benchmarks.md, "Multi-model fleet".
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from warmscale import progress
from warmscale.benchmarks.sim.fleet import (
    CONFIGS,
    FLEET,
    KEDA_ZERO_WAITING_ONLY,
    FleetResult,
    initial_replicas,
    model_work,
    simulate_fleet,
)
from warmscale.benchmarks.sim.hotpool import SLEEP_TIMES, SLEEPERS_PER_GPU
from warmscale.benchmarks.sim.runner import SimSettings
from warmscale.cliargs import UsageError, positive_float, positive_int, writable_path

# Issue 23's goal for the hot pool: per-model median attainment >= 99% at <= 0.5x keda-min1's GPU-hours.
GOAL_MEDIAN_ATTAINMENT = 0.99
GOAL_GPU_RATIO = 0.5
DEFAULT_HOURS = 1.0  # the shipped per-request traces are one hour long


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hours", type=positive_float, default=DEFAULT_HOURS,
                        help="replay the first HOURS of each model's trace (default 1: all of the shipped ones)")
    parser.add_argument("--traces", default=None,
                        help="folder searched first for the traces (else $WARMSCALE_SHARED/traces, then the package)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of the configurations")
    parser.add_argument("--sleep-level", type=int, choices=(1, 2), default=1,
                        help="the sleepers' vLLM sleep level (warmscale.io/sleep-level; default 1)")
    parser.add_argument("--json", default="fleet.json", dest="json_out", type=writable_path,
                        help="where to write the results JSON (default fleet.json)")
    parser.add_argument("--plot", default=None, type=writable_path, help="where to write the PNG plot")
    parser.add_argument("--fast-signals", action="store_true",
                        help="build the scalers' snapshots from the engine objects instead of rendering and parsing "
                             "Prometheus text (faster; equal tick by tick)")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="parallel processes, one configuration each (default 2; results do not depend on it)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def check_configs(spec: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    known = (*CONFIGS, KEDA_ZERO_WAITING_ONLY)
    for n in names:
        if n not in known:
            raise UsageError(f"--configs: unknown configuration {n!r} (known: {', '.join(known)})")
    if not names:
        raise UsageError("--configs: name at least one configuration")
    return names


def _job(args: tuple[str, float | None, str | None, bool, int]) -> FleetResult:
    config, hours, traces, fast, level = args
    return run_config(config, hours, traces, fast, level)[0]


def run_config(config: str, hours: float | None, traces: str | None, fast: bool, level: int = 1,
               faulty_wake: Any = None) -> tuple[FleetResult, Any]:
    """One configuration on the fleet (the arrivals and start fleets are the same for every one)."""
    s = SimSettings(fast_signals=fast)
    works = {m.name: model_work(m, hours, traces, s.dt) for m in FLEET}
    initial = {m.name: initial_replicas(m, works[m.name], s) for m in FLEET}
    return simulate_fleet(config, FLEET, works, initial, s, level=level, faulty_wake=faulty_wake)


def run(args: argparse.Namespace) -> int:
    names = check_configs(args.configs)
    wall0 = time.perf_counter()
    jobs = [(n, args.hours, args.traces, bool(args.fast_signals), args.sleep_level) for n in names]
    results: dict[str, FleetResult] = {}
    with progress.bar(len(jobs), "fleet", unit="configurations", quiet=args.quiet) as bar:
        if args.jobs > 1 and len(jobs) > 1:
            import multiprocessing as mp

            with mp.get_context("fork").Pool(min(args.jobs, len(jobs))) as pool:
                # Longest first: warmscale renders and parses every replica's /metrics every second.
                order = sorted(jobs, key=lambda j: 0 if j[0].startswith("warmscale") else 1)
                for res in pool.imap_unordered(_job, order):
                    results[res.config] = res
                    bar.update(1)
                    bar.set_postfix_str(res.config)
        else:
            for j in jobs:
                res = _job(j)
                results[res.config] = res
                bar.update(1)
                bar.set_postfix_str(res.config)
    doc = build_json({n: results[n] for n in names}, args, time.perf_counter() - wall0)
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(format_table(doc))
    print(f"simulated in {doc['details']['wall_s']:.1f} s; results: {out}")
    if args.plot:
        plot(doc, args.plot)
    return 0


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    v = sorted(xs)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def build_json(results: dict[str, FleetResult], args: argparse.Namespace, wall: float) -> dict[str, Any]:
    configs: dict[str, Any] = {}
    for name, r in results.items():
        att = {m: _num(v["slo_attainment"]) for m, v in r.per_model.items()}
        vals = [v for v in att.values() if v is not None]
        configs[name] = {
            "gpu_hours": _num(r.gpu_hours),
            "slo_attainment": {"per_model": att, "median": _num(statistics.median(vals)) if vals else None,
                               "min": _num(min(vals)) if vals else None},
            "wakes": r.wakes,
            "wake_to_first_token_s": {"p50": _num(_quantile(r.wake_to_first_token_s, 0.5)),
                                      "p99": _num(_quantile(r.wake_to_first_token_s, 0.99))},
        }
    goal: dict[str, Any] = {"median_attainment_at_least": GOAL_MEDIAN_ATTAINMENT,
                            "gpu_hours_vs_keda_min1_at_most": GOAL_GPU_RATIO}
    if "warmscale-hot" in configs and "keda-min1" in configs:
        hot, base = configs["warmscale-hot"], configs["keda-min1"]
        ratio = hot["gpu_hours"] / base["gpu_hours"] if base["gpu_hours"] else None
        goal.update(hot_median_attainment=hot["slo_attainment"]["median"], hot_gpu_hours_ratio=_num(ratio),
                    met=bool(ratio is not None and hot["slo_attainment"]["median"] is not None
                             and hot["slo_attainment"]["median"] >= GOAL_MEDIAN_ATTAINMENT and ratio <= GOAL_GPU_RATIO))
    any_r = next(iter(results.values()))
    return {
        "benchmark": "fleet",
        "models": [{"name": m.name, "trace": m.trace, "rotation": round(m.rotation, 6), "profile": m.profile,
                    "slo_ttft_s": m.slo_ttft} for m in FLEET],
        "configurations": configs,
        "goal": goal,
        # Context; the keys above are the contract.
        "details": {
            "hours": args.hours, "span_s": any_r.span_s, "sleep_level": args.sleep_level,
            "fast_signals": bool(args.fast_signals), "wall_s": round(wall, 2),
            "sleep_times": {p: {"sleep_s": t.sleep_s[args.sleep_level], "wake_s": t.wake_s[args.sleep_level],
                                "host_ram_gib": round(t.host_ram_gib[args.sleep_level], 2), "source": t.source}
                            for p, t in SLEEP_TIMES.items()},
            "sleepers_per_pool_gpu": SLEEPERS_PER_GPU,
            "per_configuration": {
                n: {"deployment_gpu_hours": _num(r.deployment_gpu_hours), "pool_gpus": r.pool_gpus,
                    "failed_wakes": r.failed_wakes, "wall_s": round(r.wall_s, 2), "pool": r.pool,
                    "per_model": {m: {k: (_num(v) if isinstance(v, float) else v) for k, v in d.items()}
                                  for m, d in r.per_model.items()}}
                for n, r in results.items()},
        },
    }


def format_table(doc: dict[str, Any]) -> str:
    confs = doc["configurations"]
    base = confs.get("keda-min1", {}).get("gpu_hours")
    rows = [f"fleet of {len(doc['models'])} models, {doc['details']['hours']:g} h",
            f"{'configuration':16s} {'GPU-h':>8s} {'x min1':>7s} {'median':>8s} {'min':>8s} {'wakes':>6s} "
            f"{'w2ft p50':>9s} {'w2ft p99':>9s}"]
    for name, c in confs.items():
        rel = f"{c['gpu_hours'] / base:7.2f}" if base else f"{'-':>7s}"
        w = c["wake_to_first_token_s"]
        f50 = f"{w['p50']:9.2f}" if w["p50"] is not None else f"{'-':>9s}"
        f99 = f"{w['p99']:9.2f}" if w["p99"] is not None else f"{'-':>9s}"
        a = c["slo_attainment"]
        rows.append(f"{name:16s} {c['gpu_hours']:8.2f} {rel} {a['median'] * 100:7.2f}% {a['min'] * 100:7.2f}% "
                    f"{c['wakes']:6d} {f50} {f99}")
    models = [m["name"] for m in doc["models"]]
    rows.append("per-model attainment: " + "  ".join(models))
    for name, c in confs.items():
        per = c["slo_attainment"]["per_model"]
        rows.append(f"  {name:16s} " + " ".join(f"{per[m] * 100:6.2f}%" for m in models))
    g = doc["goal"]
    if "met" in g:
        rows.append(f"goal (hot median >= {g['median_attainment_at_least'] * 100:g}% at <= "
                    f"{g['gpu_hours_vs_keda_min1_at_most']:g}x keda-min1 GPU-h): "
                    f"median {g['hot_median_attainment'] * 100:.2f}%, {g['hot_gpu_hours_ratio']:.2f}x -> "
                    f"{'met' if g['met'] else 'NOT met'}")
    return "\n".join(rows)


def plot(doc: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    confs = doc["configurations"]
    models = [m["name"] for m in doc["models"]]
    fig, (ax_a, ax_g) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": (2, 1)})
    width = 0.8 / max(1, len(confs))
    for i, (name, c) in enumerate(confs.items()):
        xs = [j + i * width for j in range(len(models))]
        ax_a.bar(xs, [c["slo_attainment"]["per_model"][m] * 100 for m in models], width, label=name)
        ax_g.scatter(c["gpu_hours"], c["slo_attainment"]["median"] * 100, s=30)
        ax_g.annotate(name, (c["gpu_hours"], c["slo_attainment"]["median"] * 100), fontsize=7,
                      xytext=(3, 3), textcoords="offset points")
    ax_a.set_xticks([j + 0.4 - width / 2 for j in range(len(models))], models, fontsize=7, rotation=15)
    ax_a.axhline(99.0, color="grey", ls="--", lw=0.8)
    ax_a.set_ylabel("TTFT within SLO (% of requests)")
    ax_a.legend(fontsize=7)
    ax_g.axhline(99.0, color="grey", ls="--", lw=0.8)
    base = confs.get("keda-min1", {}).get("gpu_hours")
    if base:
        ax_g.axvline(base * GOAL_GPU_RATIO, color="grey", ls=":", lw=0.8)
    ax_g.set_xlabel("fleet GPU-hours (pool GPUs charged in full)")
    ax_g.set_ylabel("median per-model attainment (%)")
    fig.suptitle(f"warmscale bench fleet: {len(models)} models, {doc['details']['hours']:g} h", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=70)
    plt.close(fig)
