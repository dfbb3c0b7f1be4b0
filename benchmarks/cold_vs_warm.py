"""`warmscale bench cold-vs-warm` (``python -m warmscale.benchmarks.cold_vs_warm``): scale an annotated
Deployment from 1 to 8 replicas on the local cluster, warm pool off and on.

Per case, in a fresh namespace on 8 fresh KWOK nodes of one H100 each (``a3-highgpu-1g``-like, so
one replica fills a node and the warm pool must hold whole nodes):

- **cold** (``warmscale.io/enabled: "false"``, no controller): the 7 new replicas land on the 7
  free nodes, which model nodes that do not exist yet: provision + image pull + weights download +
  load + cold engine init + readiness.
- **warm** (the real :class:`warmpool.controller.Controller` running in-process, ``standby: 7``,
  ``prestage-nodes: 7``, an ``hf://`` model URI): staging and placeholders are done *before* the
  scale-up (not measured); the new replicas preempt the placeholders.

Pod start delays: KWOK cannot know where a pod landed, so the replicas' template carries a 1 h start
delay and a helper (:class:`DelayInjector` in ``warmscale/localcluster/coldwarm.py``, which runs
each case) watches the namespace; as soon as a replica is bound it derives the node's warm state
*from the cluster* -- capacity held (a placeholder of the workload left that node during the
scale-up, or the scheduler nominated the pod there), image present (the controller's pre-pull pod on
that node finished), weights local (the node carries the ``warmscale.io/staged-<model>`` label; the
startup model keeps the compile cache next to the weights) -- and patches
``sim.warmscale.io/start-delay`` (an absolute time: provision + pull + download) and
``sim.warmscale.io/ready-delay`` (load + engine init + readiness) with the startup model's seconds
for that state times ``--time-factor`` (default 1/60).

Actuation (``--actuation keda``, the default): the scale-up is not a replica patch. The benchmark
runs its own local cluster with the real KEDA v2.21.0 (operator + metrics adapter) and the HPA
(``--hpa-sync-period``, default 1 s), a ``warmscale scaler`` process, simulated engines listening on
the KWOK pods' IPs (``warmscale/localcluster/engines.py``) and a ScaledObject (``external-push``,
``pollingInterval`` 1 s, ``targetInflightPerReplica`` 10). The initial replica carries 5 requests
in flight; at the scale-up the load steps to 75 (mid-band for 8 replicas), so the scaler decides 8
and KEDA and the HPA move the Deployment. Reported per case: load onset -> ``spec.replicas`` changed
(the actuation loops, wall seconds, counted 1:1 like the other overhead) next to the time-to-Ready.
``--actuation patch`` patches the scale subresource instead (and accepts ``--kubeconfig``).

Reported in model seconds: ``model = injected model seconds + real overhead``, where the real
overhead (scheduling, preemption, watch/patch latency, KWOK) is measured wall time minus the
injected wall time and counted 1:1 (a real cluster pays it in real time). Creation and Ready are
timestamped by this process's watch (sub-second; the API's timestamps have 1 s resolution).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from warmscale.cliargs import positive_float, positive_int, writable_path
from warmscale.localcluster.coldwarm import run_case
from warmscale.warmpool.startup_model import (
    PROFILES,
    SLEEPING,
    SOURCE_DOC,
    VARIANTS,
    StartupProfile,
    WarmState,
    profile,
    time_to_ready,
)

log = logging.getLogger("warmscale.bench.cold_vs_warm")
DEFAULT_JSON = "benchmarks/results/cold_vs_warm.json"
DEFAULT_PNG = "benchmarks/results/cold_vs_warm.png"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=os.environ.get("WARMSCALE_KUBECONFIG"),
                        help="admin kubeconfig of a running harness cluster (default: $WARMSCALE_KUBECONFIG; "
                             "otherwise a cluster is started and stopped)")
    parser.add_argument("--profiles", default="8b-h100,8b-h100-fastload",
                        help=f"comma-separated startup profiles/variants (known: "
                             f"{', '.join([*PROFILES, *VARIANTS])}); the first is the reference")
    parser.add_argument("--from-replicas", type=positive_int, default=1, help="replicas before the scale-up")
    parser.add_argument("--to-replicas", type=positive_int, default=8, help="replicas the scale-up asks for")
    parser.add_argument("--time-factor", type=positive_float, default=None,
                        help="wall seconds per model second for the injected delays (default 0.35 with "
                             "--actuation keda, so KEDA's and the HPA's loops stay under 10%% of the warm start; "
                             "1/60 with patch)")
    parser.add_argument("--actuation", choices=("keda", "patch"), default="keda",
                        help="keda: load on the engines -> scaler -> real KEDA + HPA (own cluster); "
                             "patch: patch the Deployment's scale subresource")
    parser.add_argument("--hpa-sync-period", default="1s", help="HPA sync period of the cluster (keda actuation)")
    parser.add_argument("--json", dest="json_out", default=DEFAULT_JSON, type=writable_path,
                        help="where to write the results JSON")
    parser.add_argument("--plot", default=DEFAULT_PNG, type=writable_path, help="PNG path ('' for none)")
    parser.add_argument("--timeout", type=positive_float, default=240.0, help="per-phase wall-clock timeout")

# ---------------------------------------------------------------- report


def report(cases: list[dict[str, Any]], profiles: list[StartupProfile], factor: float) -> dict[str, Any]:
    by = {(c["profile"], c["case"]): c for c in cases}
    rows = []
    for prof in profiles:
        cold, warm = by.get((prof.name, "cold")), by.get((prof.name, "warm"))
        if not cold or not warm:
            continue
        cp50, wp50 = cold["time_to_ready_model_s"]["p50"], warm["time_to_ready_model_s"]["p50"]
        cmax, wmax = cold["time_to_ready_model_s"]["max"], warm["time_to_ready_model_s"]["max"]
        rows.append({
            "profile": prof.name, "cold_p50_s": cp50, "cold_max_s": cmax, "warm_p50_s": wp50, "warm_max_s": wmax,
            "warm_over_cold_p50": round(wp50 / cp50, 4), "warm_over_cold_max": round(wmax / cmax, 4),
            "goal_10pct_met": wmax / cmax <= 0.10 and wp50 / cp50 <= 0.10,
            "model_only": {"cold_s": time_to_ready(prof, WarmState()),
                           "placeholder_staged_s": time_to_ready(prof, WarmState(True, True, True, True)),
                           "sleeping_s": time_to_ready(prof, SLEEPING)},
        })
    return {
        "benchmark": "cold_vs_warm", "time_factor": factor,
        "units": "model seconds (injected startup-model delay + measured real orchestration overhead at 1:1)",
        "startup_model": {p.name: {"phases_s": {k: v for k, v in asdict(p).items() if k.endswith("_s")},
                                   "sources": dict(p.sources)} for p in profiles},
        "source_doc": SOURCE_DOC,
        "summary": rows, "cases": cases,
    }


def table(result: dict[str, Any]) -> str:
    lines = ["| profile | cold p50 s | cold max s | warm p50 s | warm max s | warm/cold p50 | warm/cold max | <=10% |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["summary"]:
        lines.append(f"| {r['profile']} | {r['cold_p50_s']:.1f} | {r['cold_max_s']:.1f} | {r['warm_p50_s']:.1f} | "
                     f"{r['warm_max_s']:.1f} | {100 * r['warm_over_cold_p50']:.1f}% | "
                     f"{100 * r['warm_over_cold_max']:.1f}% | {'yes' if r['goal_10pct_met'] else 'no'} |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(cases))
    for i, c in enumerate(cases):
        vals = [x["time_to_ready_model_s"] for x in c["replicas"]]
        xs = [j + i * width for j in range(len(vals))]
        lab = f"{c['profile']} {c['case']} (p50 {c['time_to_ready_model_s']['p50']:.0f} s)"
        ax.bar(xs, vals, width=width, label=lab)
    ax.set_xlabel("new replica (sorted by time-to-Ready)")
    ax.set_ylabel("time-to-Ready, model seconds")
    ax.set_title(f"Scale 1 -> 8 replicas: warm pool off (cold) vs on (warm); time factor {result['time_factor']:.4g}")
    ax.set_ylim(0, 1.3 * max(x["time_to_ready_model_s"] for c in cases for x in c["replicas"]))
    ax.legend(fontsize=8, ncol=2, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- entry points


async def _bench(args: argparse.Namespace, kubeconfig: Path, keda_run: Any = None) -> dict[str, Any]:
    from warmscale.warmpool.cli import make_api_client

    profiles = [profile(n.strip()) for n in args.profiles.split(",") if n.strip()]
    api = await make_api_client(str(kubeconfig))
    cases = []
    try:
        for prof in profiles:
            for warm in (False, True):
                log.info("case", extra={"profile": prof.name, "warm": warm})
                scaler = keda_run.scaler() if keda_run is not None else None
                try:
                    c = await run_case(api, prof, warm, args, keda_run, scaler.address if scaler else None)
                finally:
                    if scaler is not None:
                        scaler.stop()
                print(f"  {prof.name:18s} {c['case']:4s} p50 {c['time_to_ready_model_s']['p50']:6.1f} s  "
                      f"max {c['time_to_ready_model_s']['max']:6.1f} s  states {c['states']}  "
                      f"(scale-up {c['scale_up_wall_s']:.1f} s wall; onset -> replicas changed "
                      f"{c['actuation'].get('onset_to_replicas_changed_wall_s', '-')} s wall)", file=sys.stderr)
                cases.append(c)
    finally:
        await api.close()
    out = report(cases, profiles, args.time_factor)
    if keda_run is not None:
        out["actuation"] = {"kind": "real KEDA v2.21.0 + HPA", "keda_polling_interval_s": 1,
                            "hpa_sync_period": args.hpa_sync_period,
                            "per_case": {f"{c['profile']}/{c['case']}": c["actuation"] for c in cases}}
    return out


def run(args: argparse.Namespace) -> int:
    from warmscale.localcluster import Cluster, ClusterConfig
    from warmscale.localcluster.fleet import CPU

    if args.time_factor is None:
        args.time_factor = 0.35 if args.actuation == "keda" else 1 / 60
    cluster = None
    if args.actuation == "keda":
        from warmscale.localcluster.binaries import BinariesMissing
        from warmscale.localcluster.kedarun import KedaRun

        print("starting a local cluster with the real KEDA (warmscale/localcluster)...", file=sys.stderr)
        try:
            with KedaRun.start(hpa_sync_period=args.hpa_sync_period, pools=[replace(CPU, count=1)]) as keda_run:
                result = asyncio.run(_bench(args, keda_run.cluster.kubeconfig, keda_run))
        except BinariesMissing as exc:
            print(f"error: {exc}\n(or run with --actuation patch)", file=sys.stderr)
            return 2
    else:
        if args.kubeconfig:
            kubeconfig = Path(args.kubeconfig)
        else:
            print("starting a local cluster (warmscale/localcluster)...", file=sys.stderr)
            cluster = Cluster.start(ClusterConfig(pools=[replace(CPU, count=1)], die_with_parent=True))
            kubeconfig = cluster.kubeconfig
        try:
            result = asyncio.run(_bench(args, kubeconfig))
        finally:
            if cluster is not None:
                cluster.stop()
    result["command"] = "python -m warmscale.benchmarks.cold_vs_warm " + " ".join(sys.argv[1:])
    print(table(result))
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json_out}", file=sys.stderr)
    if args.plot:
        plot(result, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    failed = [c for c in result["cases"] if c["injector_errors"]]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warmscale.benchmarks.cold_vs_warm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    logging.basicConfig(level=logging.WARNING)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
