"""`warmscale bench fleet`: six models on one cluster, four configurations, one shared hot pool.

Prints a table, writes the JSON (``configurations.<name>.{gpu_hours, slo_attainment: {per_model,
median, min}, wakes, wake_to_first_token_s: {p50, p99}}``, issue 23 requirement 5) and, with
``--plot``, a PNG: per-model attainment and the fleet's GPU-hours per configuration. Method and
figures: docs/benchmarks.md, "Multi-model fleet".

Members as in ``bench trace`` (:func:`~benchmarks.sim.arrivals.distinct_members`, the conditions via
:func:`benchmarks.trace_replay.member_conditions`): member i rotates every model's trace by a further
i/N of its length and has its own seed for the replicas' start-up draws and the loops' phases, the
same for every configuration of the member. A single run is member 0 (``--seed``; ``--exact-startup``:
the ladder's exact start-ups, phases 0). ``--ensemble N`` adds min/median/max per configuration
(``ensemble``) and each member's figures (``details.ensemble_members``); the contract's keys are member 0's.
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
from warmscale.benchmarks.sim.arrivals import distinct_members
from warmscale.benchmarks.sim.conditions import Conditions
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
from warmscale.benchmarks.trace_replay import add_member_options, member_conditions, member_workload
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
                        help="parallel processes, one configuration of one member each (default 2; results do not "
                             "depend on it)")
    add_member_options(parser, "every replica of the model")
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


# One simulation: (member index, its kind and parameters, its conditions, configuration, hours, traces,
# fast signals, sleep level, prefix cache).
Job = tuple[int, str, dict[str, float], Conditions, str, float | None, str | None, bool, int, bool]


def _job(job: Job) -> tuple[int, FleetResult, dict[str, int]]:
    i, kind, params, cond, config, hours, traces, fast, level, prefix = job
    res, _, initial = run_config(config, hours, traces, fast, level, member=(i, kind, params), cond=cond,
                                 prefix_cache=prefix)
    return i, res, initial


def run_config(config: str, hours: float | None, traces: str | None, fast: bool, level: int = 1,
               faulty_wake: Any = None, *, member: tuple[int, str, dict[str, float]] = (0, "unperturbed", {}),
               cond: Conditions | None = None,
               prefix_cache: bool = True) -> tuple[FleetResult, Any, dict[str, int]]:
    """One configuration on the fleet under one member: its rotation of every model's trace and its
    conditions ``cond`` (None: exact start-ups, phases 0). The arrivals, start fleets and conditions
    of a member are the same for every configuration. Also returns the start fleets."""
    s = SimSettings(fast_signals=fast, conditions=cond or Conditions())
    works = {m.name: member_workload(model_work(m, hours, traces, s.dt, prefix_cache=prefix_cache), *member)
             for m in FLEET}
    initial = {m.name: initial_replicas(m, works[m.name], s) for m in FLEET}
    res, hot = simulate_fleet(config, FLEET, works, initial, s, level=level, faulty_wake=faulty_wake)
    return res, hot, initial


def run(args: argparse.Namespace) -> int:
    names = check_configs(args.configs)
    wall0 = time.perf_counter()
    members = distinct_members(max(1, args.ensemble), args.seed)
    conds = [member_conditions(p, args.seed, exact=bool(getattr(args, "exact_startup", False))) for _, p in members]
    prefix = bool(getattr(args, "prefix_cache", True))
    jobs: list[Job] = [(i, kind, params, conds[i], n, args.hours, args.traces, bool(args.fast_signals),
                        args.sleep_level, prefix) for i, (kind, params) in enumerate(members) for n in names]
    results: dict[int, dict[str, FleetResult]] = {i: {} for i in range(len(members))}
    initial: dict[int, dict[str, int]] = {}
    with progress.bar(len(jobs), "fleet", unit="runs", quiet=args.quiet) as bar:
        def done(i: int, res: FleetResult, start: dict[str, int]) -> None:
            results[i][res.config] = res
            initial[i] = start
            bar.update(1)
            bar.set_postfix_str(f"member {i} {res.config}" if len(members) > 1 else res.config)

        if args.jobs > 1 and len(jobs) > 1:
            import multiprocessing as mp

            with mp.get_context("fork").Pool(min(args.jobs, len(jobs))) as pool:
                # Longest first: warmscale renders and parses every replica's /metrics every second.
                order = sorted(jobs, key=lambda j: 0 if j[4].startswith("warmscale") else 1)
                for i, res, start in pool.imap_unordered(_job, order):
                    done(i, res, start)
        else:
            for j in jobs:
                done(*_job(j))
    doc = build_json({n: results[0][n] for n in names}, args, time.perf_counter() - wall0, conds[0])
    if len(members) > 1:
        per = [{n: results[i][n] for n in names} for i in range(len(members))]
        doc["ensemble"] = ensemble_json([configurations_json(r) for r in per])
        doc["details"]["ensemble_members"] = [
            {"member": i, "kind": kind, **params, "conditions": conds[i].to_dict(), "initial_replicas": initial[i],
             "configurations": configurations_json(per[i]), "goal_met": _goal(configurations_json(per[i])).get("met"),
             **_hit_rates(per[i])} for i, (kind, params) in enumerate(members)]
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


def configurations_json(results: dict[str, FleetResult]) -> dict[str, Any]:
    """The contract's ``configurations`` object for one member's runs."""
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
    return configs


def _hit_rates(results: dict[str, FleetResult]) -> dict[str, Any]:
    """``{"prefix_cache_hit_rate": {configuration: {model: rate}}}`` for the models replayed with prefix
    caching, else nothing."""
    rates = {n: {m: _num(v["prefix_cache_hit_rate"]) for m, v in r.per_model.items() if "prefix_cache_hit_rate" in v}
             for n, r in results.items()}
    return {"prefix_cache_hit_rate": rates} if any(rates.values()) else {}


def _stat(xs: list[float | None]) -> dict[str, float | None]:
    v = sorted(x for x in xs if x is not None)
    if not v:
        return {"min": None, "median": None, "max": None}
    return {"min": _num(v[0]), "median": _num(float(statistics.median(v))), "max": _num(v[-1])}


def ensemble_json(members: list[dict[str, Any]]) -> dict[str, Any]:
    """min/median/max over the members of each configuration's GPU-hours and median and minimum
    per-model attainment, and in how many members the goal is met."""
    out: dict[str, Any] = {}
    for name in members[0]:
        cs = [m[name] for m in members]
        out[name] = {"gpu_hours": _stat([c["gpu_hours"] for c in cs]),
                     "median_attainment": _stat([c["slo_attainment"]["median"] for c in cs]),
                     "min_attainment": _stat([c["slo_attainment"]["min"] for c in cs]),
                     "wakes": _stat([float(c["wakes"]) for c in cs])}
    doc: dict[str, Any] = {"members": len(members), "configurations": out}
    if "warmscale-hot" in members[0] and "keda-min1" in members[0]:
        doc["goal_met_members"] = sum(1 for m in members if _goal(m).get("met"))
    return doc


def _goal(configs: dict[str, Any]) -> dict[str, Any]:
    goal: dict[str, Any] = {"median_attainment_at_least": GOAL_MEDIAN_ATTAINMENT,
                            "gpu_hours_vs_keda_min1_at_most": GOAL_GPU_RATIO}
    if "warmscale-hot" in configs and "keda-min1" in configs:
        hot, base = configs["warmscale-hot"], configs["keda-min1"]
        ratio = hot["gpu_hours"] / base["gpu_hours"] if base["gpu_hours"] else None
        goal.update(hot_median_attainment=hot["slo_attainment"]["median"], hot_gpu_hours_ratio=_num(ratio),
                    met=bool(ratio is not None and hot["slo_attainment"]["median"] is not None
                             and hot["slo_attainment"]["median"] >= GOAL_MEDIAN_ATTAINMENT and ratio <= GOAL_GPU_RATIO))
    return goal


def build_json(results: dict[str, FleetResult], args: argparse.Namespace, wall: float,
               cond: Conditions | None = None) -> dict[str, Any]:
    """The JSON of member 0's runs (``cond``: its conditions; None: exact start-ups, phases 0)."""
    configs = configurations_json(results)
    goal = _goal(configs)
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
            "seed": getattr(args, "seed", 1), "conditions": (cond or Conditions()).to_dict(),
            "prefix_cache": bool(getattr(args, "prefix_cache", True)),
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
    ens = doc.get("ensemble")
    if ens:
        rows.append(f"ensemble of {ens['members']} (min / median / max):")
        for name, e in ens["configurations"].items():
            gh, med = e["gpu_hours"], e["median_attainment"]
            rows.append(f"  {name:16s} GPU-h {gh['min']:.2f} / {gh['median']:.2f} / {gh['max']:.2f}   median att. "
                        f"{med['min'] * 100:.2f} / {med['median'] * 100:.2f} / {med['max'] * 100:.2f} %")
        if "goal_met_members" in ens:
            rows.append(f"  goal met in {ens['goal_met_members']} of {ens['members']} members")
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
