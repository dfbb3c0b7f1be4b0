"""`warmscale bench pd`: a trace through a prefill/decode fleet scaled per role, against one combined pool.

Both modes run the production tracker path (rendered vLLM ``/metrics`` -> production parsers ->
``observe`` + ``decide`` -> KEDA + HPA) on the same arrivals, engine profile and warm pool per pool:

- ``combined``: aggregated replicas (each prefills and decodes), one ScaledObject, ``role: both``
  (the trace replay's ``warmscale`` policy);
- ``pd-per-role``: separate prefill and decode replicas with a KV handoff between them
  (:mod:`benchmarks.sim.pd`), one ScaledObject per role in one ``pdGroup``.

Prints a table, writes JSON (``--json``), optionally a PNG (``--plot``); ``--ensemble N`` runs N
distinct members as ``bench trace`` does (:func:`~benchmarks.sim.arrivals.distinct_members`: member i
starts the trace i/N of its length in and has its own seed for the replicas' start-up draws and the
loops' phases, :mod:`benchmarks.sim.conditions`; both modes of a member share them) and adds
min/median/max per mode and each member's figures (``details.ensemble_members``). A trace with block
ids (mooncake-conv) runs with prefix caching (``--no-prefix-cache``: off; the P/D side caches on its
prefill instances only, :mod:`benchmarks.sim.pd`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from warmscale.benchmarks.sim.arrivals import Workload, distinct_members, load_trace, truncate
from warmscale.benchmarks.sim.conditions import Conditions
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES
from warmscale.benchmarks.sim.pd import (
    KV_BYTES_PER_TOKEN,
    ModeResult,
    PerRolePolicy,
    Transfer,
    pd_start,
    simulate_combined,
    simulate_pd,
)
from warmscale.benchmarks.sim.policies import WarmscalePolicy, max_replicas_for, warmscale_metadata
from warmscale.benchmarks.sim.runner import SimSettings, need_curve, start_replicas_from_need
from warmscale.benchmarks.trace_replay import add_member_options, hit_rate, member_conditions, member_workload
from warmscale.cliargs import (
    key_value,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    writable_path,
)
from warmscale.simulation.actuation import HpaBehavior, KedaConfig
from warmscale.validate.overrides import metadata_overrides
from warmscale.warmpool.startup_model import COLD, PROFILES, time_to_ready

MODES = ("combined", "pd-per-role")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="azure-code",
                        help="a shipped per-request trace by name (default azure-code; also azure-conv, "
                             "mooncake-conv) or a per-request CSV path")
    parser.add_argument("--traces", default=None, help="folder searched first for a trace given by name")
    parser.add_argument("--profile", default="8b-h100", choices=sorted(ENGINE_PROFILES),
                        help="engine + startup profile")
    parser.add_argument("--slo-ttft", type=positive_float, default=2.0, help="TTFT SLO in seconds")
    parser.add_argument("--slo-itl", type=positive_float, default=0.1,
                        help="inter-token latency SLO in seconds for the ITL column (default 0.1, a vLLM bucket bound)")
    parser.add_argument("--hours", type=positive_float, default=None, help="replay only the first HOURS")
    parser.add_argument("--standby", type=non_negative_int, default=None,
                        help="warm-pool placeholders held per pool (default: warmscale.io/standby: auto per pool, "
                             "sized by the warm-pool planner from the burst statistics each scaler publishes)")
    parser.add_argument("--kv-gbps", type=positive_float, default=20.0,
                        help="KV transfer bandwidth per GPU in GB/s (default 20: one 200 Gb/s RDMA NIC at ~80%%)")
    parser.add_argument("--kv-fixed-ms", type=non_negative_float, default=5.0, help="fixed cost per KV transfer")
    parser.add_argument("--meta", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="warmscale trigger metadata for every ScaledObject (repeatable)")
    parser.add_argument("--prefill-meta", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="metadata of the prefill ScaledObject only (repeatable)")
    parser.add_argument("--decode-meta", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="metadata of the decode ScaledObject only (e.g. decodePerPrefillMin=0.5)")
    parser.add_argument("--max-replicas", type=positive_int, default=None, help="maxReplicas per ScaledObject")
    parser.add_argument("--fast-signals", action="store_true", help="engine objects instead of rendered text")
    parser.add_argument("--jobs", type=positive_int, default=2, help="parallel processes for ensemble members")
    add_member_options(parser, "the combined replicas and the P/D prefill instances")
    parser.add_argument("--json", default=None, dest="json_out", type=writable_path,
                        help="results JSON (default <trace>__pd.json)")
    parser.add_argument("--plot", default=None, type=writable_path,
                        help="PNG: replicas per role over time, SLO vs GPU-hours")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _kv(items: list[str]) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in items)


def run_member(args: argparse.Namespace, work: Workload, cond: Conditions | None = None) -> dict[str, ModeResult]:
    """Both modes on ``work`` under the member's conditions ``cond`` (start-up draws, loop phases; None:
    exact start-ups, phases 0)."""
    engine = ENGINE_PROFILES[args.profile]
    startup = PROFILES[args.profile]
    s = SimSettings(dt=1.0, slo_ttft=args.slo_ttft, sample_s=10.0, fast_signals=args.fast_signals,
                    warmup_s=time_to_ready(startup, COLD), conditions=cond or Conditions())
    max_r = args.max_replicas or max_replicas_for(args.profile)
    meta = _kv(args.meta)
    out: dict[str, ModeResult] = {}
    initial = start_replicas_from_need(need_curve(work, engine, args.slo_ttft, 10.0))
    pol = WarmscalePolicy(warmscale_metadata(max_r, args.slo_ttft, meta), startup, args.standby,
                          HpaBehavior(scale_down_stabilization_s=0.0, scale_up_pods=max_r),
                          KedaConfig(min_replicas=1, max_replicas=max_r), fast_signals=args.fast_signals,
                          initial_replicas=initial, cond=s.conditions)
    pol.name = "combined"
    out["combined"] = simulate_combined(work, pol, engine, startup, initial, s, itl_slo=args.slo_itl)
    transfer = Transfer(KV_BYTES_PER_TOKEN.get(args.profile, 131_072.0), engine.gpus_per_replica,
                        fixed_s=args.kv_fixed_ms / 1000.0, bandwidth_bps=args.kv_gbps * 1e9)
    start = pd_start(work, engine)
    per_role = PerRolePolicy(max_r, args.slo_ttft, startup, args.standby, meta,
                             {"prefill": _kv(args.prefill_meta), "decode": _kv(args.decode_meta)},
                             fast_signals=args.fast_signals, initial=start, cond=s.conditions)
    out["pd-per-role"] = simulate_pd(work, per_role, engine, startup, transfer, start, s, itl_slo=args.slo_itl)
    out["combined"].result.params["initial_replicas"] = initial
    out["pd-per-role"].result.params["initial_replicas"] = list(start)
    out["pd-per-role"].result.params["transfer"] = transfer.to_dict()
    return out


def member_conditions_of(args: argparse.Namespace, params: dict[str, float]) -> Conditions:
    """The member's start-up draws and phases, as bench trace sets them (``--exact-startup``: none)."""
    return member_conditions(params, args.seed, exact=bool(getattr(args, "exact_startup", False)))


def _member_job(args: argparse.Namespace, work: Workload, i: int, kind: str,
                params: dict[str, float]) -> tuple[int, dict[str, ModeResult]]:
    res = run_member(args, member_workload(work, i, kind, params), member_conditions_of(args, params))
    if i != 0:
        for m in res.values():  # members only report numbers
            m.result.timeline = {}
    return i, res


def _clean(x: float) -> float:
    return round(x, 6) if math.isfinite(x) else 0.0


def mode_json(m: ModeResult) -> dict[str, Any]:
    r = m.result
    return {"slo_attainment": _clean(r.slo_attainment), "gpu_hours": _clean(r.gpu_hours),
            "slo_attainment_warm": _clean(r.slo_attainment_warm), "gpu_hours_warm": _clean(r.gpu_hours_warm),
            "ttft_p50_s": _clean(r.ttft_p50_s), "ttft_p99_s": _clean(r.ttft_p99_s), "itl_p99_s": _clean(m.itl_p99_s),
            "itl_within_slo": _clean(m.itl_within),
            "cold_starts": r.cold_starts, "max_replicas": r.max_replicas, "max_prefill": m.max_prefill,
            "max_decode": m.max_decode, "kv_transfer_mean_s": _clean(m.transfer_mean_s), "served": r.served,
            "wall_s": round(r.wall_s, 2), "decision_reasons": m.reasons, "starts": r.starts}


def member_json(i: int, kind: str, params: dict[str, float], cond: Conditions,
                res: dict[str, ModeResult]) -> dict[str, Any]:
    """One member of ``details.ensemble_members``: its kind, rotation and seed, conditions, start fleets
    and each mode's own figures (as bench trace records its members)."""
    return {"member": i, "kind": kind, **params, "conditions": cond.to_dict(),
            "initial_replicas": {name: m.result.params["initial_replicas"] for name, m in res.items()},
            "modes": {name: {"slo_attainment": _clean(m.result.slo_attainment),
                             "slo_attainment_warm": _clean(m.result.slo_attainment_warm),
                             "gpu_hours": _clean(m.result.gpu_hours), "gpu_hours_warm": _clean(m.result.gpu_hours_warm),
                             "itl_p99_s": _clean(m.itl_p99_s), "cold_starts": m.result.cold_starts,
                             "starts": m.result.starts, **hit_rate(m.result)}
                      for name, m in res.items()}}


def _stat(xs: list[float]) -> dict[str, float]:
    return {"min": _clean(min(xs)), "median": _clean(float(statistics.median(xs))), "max": _clean(max(xs))}


def run(args: argparse.Namespace) -> int:
    from warmscale.traces import TraceNotFound, resolve

    wall0 = time.perf_counter()
    for flag in ("--meta", "--prefill-meta", "--decode-meta"):
        metadata_overrides(flag, getattr(args, flag.removeprefix("--").replace("-", "_")))
    try:
        path = resolve(args.trace, args.traces)
    except TraceNotFound as exc:
        print(f"warmscale bench pd: {exc}", file=sys.stderr)
        return 2
    work = load_trace(path, dt=1.0, seed=args.seed, prefix_cache=getattr(args, "prefix_cache", True))
    if work.kind != "requests" or int(work.n.max()) != 1:
        print("warmscale bench pd: needs a per-request trace (one request per row)", file=sys.stderr)
        return 2
    if args.hours is not None:
        work = truncate(work, args.hours * 3600.0)
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    say(f"{work.name}: {work.requests} requests over {work.span_s / 3600:.2f} h, profile {args.profile}, "
        f"SLO TTFT {args.slo_ttft:g}s" + (f", ensemble of {args.ensemble}" if args.ensemble > 1 else ""))
    members = distinct_members(max(1, args.ensemble), args.seed)
    results: dict[int, dict[str, ModeResult]] = {0: _member_job(args, work, 0, *members[0])[1]}
    say(f"member 0 done at {time.perf_counter() - wall0:.1f}s")
    if len(members) > 1:
        import multiprocessing as mp

        plain = argparse.Namespace(**{k: v for k, v in vars(args).items() if not k.startswith("_")})
        with mp.get_context("fork").Pool(max(1, min(args.jobs, len(members) - 1))) as pool:
            pending = [pool.apply_async(_member_job, (plain, work, i, k, p)) for i, (k, p) in enumerate(members)
                       if i > 0]
            for job in pending:
                i, res = job.get()
                results[i] = res
                say(f"member {i} ({members[i][0]}) done at {time.perf_counter() - wall0:.1f}s")
    doc: dict[str, Any] = {
        "trace": work.name, "profile": args.profile, "slo_ttft_s": float(args.slo_ttft),
        "slo_itl_s": float(args.slo_itl), "requests": work.requests,
        "modes": {name: mode_json(m) for name, m in results[0].items()},
        "details": {"span_s": work.span_s,
                    "standby_per_pool": "auto" if args.standby is None else args.standby, "warmup_s": time_to_ready(
            PROFILES[args.profile], COLD), "wall_s": round(time.perf_counter() - wall0, 2),
                    "seed": args.seed, "conditions": member_conditions_of(args, members[0][1]).to_dict(),
                    "params": {name: m.result.params for name, m in results[0].items()}},
    }
    if work.hashes is not None:
        doc["details"]["prefix_cache"] = {
            "block_tokens": work.hash_tokens,
            "what": "vLLM automatic prefix caching per replica (warmscale/simulation/prefix_cache.py): combined "
                    "replicas and P/D prefill instances; the KV handoff moves the whole prompt and decode caches "
                    "nothing (benchmarks/sim/pd.py); hit rate = prompt tokens found cached / looked up",
            "router": "least outstanding requests (not prefix-aware)",
            "hit_rate": {name: _clean(m.result.prefix_cache_hit_rate or 0.0) for name, m in results[0].items()}}
    if len(results) > 1:
        doc["ensemble"] = {"members": len(results), "kinds": [members[i][0] for i in sorted(results)], "modes": {
            name: {key: _stat([getattr(r[name].result, key) for r in results.values()])
                   for key in ("slo_attainment", "gpu_hours", "slo_attainment_warm", "gpu_hours_warm")}
            for name in MODES}}
        doc["details"]["ensemble_members"] = [member_json(i, *members[i], member_conditions_of(args, members[i][1]),
                                                          results[i]) for i in sorted(results)]
    out = Path(args.json_out or f"{path.stem}__pd.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(format_table(doc))
    print(f"simulated in {time.perf_counter() - wall0:.1f} s; results: {out}")
    if args.plot:
        plot(results[0], doc, args.plot)
    return 0


def format_table(doc: dict[str, Any]) -> str:
    rows = [f"{doc['trace']}  profile={doc['profile']}  SLO TTFT={doc['slo_ttft_s']:g}s ITL={doc['slo_itl_s']:g}s  "
            f"requests={doc['requests']}",
            f"{'mode':14s} {'SLO att.':>9s} {'GPU-h':>7s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'ITL p99':>8s} "
            f"{'ITL<=SLO':>9s} {'max P+D':>8s} {'KV xfer':>8s} {'cold':>5s}"]
    for name, m in doc["modes"].items():
        pd = f"{m['max_prefill']}+{m['max_decode']}" if name != "combined" else str(m["max_replicas"])
        xfer = f"{m['kv_transfer_mean_s'] * 1000:6.1f}ms" if m["kv_transfer_mean_s"] else f"{'-':>8s}"
        rows.append(f"{name:14s} {m['slo_attainment'] * 100:8.2f}% {m['gpu_hours']:7.2f} {m['ttft_p50_s']:8.3f}s "
                    f"{m['ttft_p99_s']:8.2f}s {m['itl_p99_s'] * 1000:6.1f}ms {m['itl_within_slo'] * 100:8.2f}% "
                    f"{pd:>8s} {xfer} {m['cold_starts']:5d}")
    pc = doc["details"].get("prefix_cache")
    if pc:
        rows.append("prefix cache hit rate (prompt tokens): "
                    + ", ".join(f"{n} {v * 100:.1f}%" for n, v in pc["hit_rate"].items()))
    ens = doc.get("ensemble")
    if ens:
        rows.append(f"ensemble of {ens['members']} (min / median / max):")
        for name, st in ens["modes"].items():
            a, g = st["slo_attainment"], st["gpu_hours"]
            rows.append(f"{name:14s} SLO {a['min'] * 100:.2f} / {a['median'] * 100:.2f} / {a['max'] * 100:.2f} %   "
                        f"GPU-h {g['min']:.2f} / {g['median']:.2f} / {g['max']:.2f}")
    return "\n".join(rows)


def plot(results: dict[str, ModeResult], doc: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_s) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": (2.2, 1)})
    comb = results["combined"].result.timeline
    ax_r.step([x / 60 for x in comb["t"]], comb["spec"], where="post", label="combined (both)")
    pdt = results["pd-per-role"].result.timeline
    ax_r.step([x / 60 for x in pdt["t"]], pdt["prefill"], where="post", label="P/D prefill")
    ax_r.step([x / 60 for x in pdt["t"]], pdt["decode"], where="post", label="P/D decode")
    ax_r.set_xlabel("time (min)")
    ax_r.set_ylabel("replicas (spec)")
    ax_r.legend(fontsize=8)
    for name, m in doc["modes"].items():
        ax_s.scatter(m["gpu_hours"], m["slo_attainment"] * 100)
        ax_s.annotate(name, (m["gpu_hours"], m["slo_attainment"] * 100), fontsize=8)
    ax_s.set_xlabel("GPU-hours")
    ax_s.set_ylabel(f"TTFT <= {doc['slo_ttft_s']:g}s (%)")
    fig.suptitle(f"{doc['trace']} - {doc['profile']}: per-role vs combined", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=70)
    plt.close(fig)
