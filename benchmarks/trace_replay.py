"""`warmscale bench trace`: replay a trace through every policy on the same arrivals.

Prints a table, writes the JSON the evaluation reads (shape in issues 5 and 11 / docs/benchmarks.md)
and, with ``--plot``, a PNG: replicas and queue over time per policy, and SLO attainment vs GPU-hours.
With ``--ensemble N`` it also runs N-1 perturbed copies of the trace (arrival jitter, rotations) in
parallel processes and adds min/median/max per policy.
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
from warmscale.benchmarks.sim.arrivals import (
    RATE_BIN_S,
    Workload,
    distinct_members,
    load_trace,
    perturbed,
    truncate,
)
from warmscale.benchmarks.sim.conditions import Conditions
from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, calibration_label
from warmscale.benchmarks.sim.references import DEFAULT_SEARCH_EVALS, default_cache_dir
from warmscale.benchmarks.sim.runner import (
    ALIASES,
    CLAIRVOYANT,
    HPA_PROFILES,
    POLICY_NAMES,
    BenchConfig,
    PolicyResult,
    SimSettings,
    run_all,
)
from warmscale.cliargs import (
    UsageError,
    key_value,
    non_negative_int,
    positive_float,
    positive_int,
    writable_path,
)
from warmscale.validate.overrides import metadata_overrides
from warmscale.warmpool.startup_model import PROFILES, time_to_ready_table

# The policy every paired comparison is about, and the heuristic schedule v2's ratios divide by.
SUBJECT = "warmscale"
HEURISTIC = "clairvoyant-heuristic"
# Paired bootstrap of the ensemble's median difference (issue 21, requirement 4): resamples of the
# members, with a fixed seed so that a run is reproducible; 2,000 resamples put the 95% interval's
# ends within about a member's spacing of their limit for 8 members.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 21
# The clairvoyant-best search's simulations on runs longer than 6 h: one simulation of the week takes
# ~50 s (docs/benchmarks.md, "The week"), and the week's budget is 10 minutes.
LONG_RUN_SEARCH_EVALS = 4


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="azure-code",
                        help="a shipped trace by name (default azure-code; also azure-conv, mooncake-conv, "
                             "servegen-deepseek-r1) or a per-request / rate-curve CSV path")
    parser.add_argument("--traces", default=None,
                        help="folder searched first for a trace given by name (else $WARMSCALE_SHARED/traces, "
                             "then the package)")
    parser.add_argument("--profile", default="8b-h100", choices=sorted(ENGINE_PROFILES),
                        help="engine + startup profile")
    parser.add_argument("--slo-ttft", type=positive_float, default=2.0, help="TTFT SLO in seconds")
    parser.add_argument("--seed", type=int, default=1, help="seed of the rate-curve arrivals")
    parser.add_argument("--json", default=None, dest="json_out", type=writable_path,
                        help="where to write the results JSON (default: <trace>__<profile>.json here)")
    parser.add_argument("--plot", default=None, type=writable_path, help="where to write the PNG plot")
    parser.add_argument("--tick", type=positive_float, default=None,
                        help="control-loop step in seconds (default 1); a rate curve's arrivals are binned at a "
                             "fixed 1 s whatever the tick (each bin's cohort arrives at its middle)")
    parser.add_argument("--tokens-from", default=None,
                        help="per-request trace whose token sizes a rate curve draws from (default: by name)")
    parser.add_argument("--rate-scale", type=positive_float, default=1.0, help="multiply a rate curve's rate")
    parser.add_argument("--hours", type=positive_float, default=None, help="replay only the first HOURS of the trace")
    parser.add_argument("--standby", type=non_negative_int, default=None,
                        help="warmscale warm pool: hold N placeholders (default: warmscale.io/standby: auto, sized "
                             "by the warm-pool planner from the burst statistics the scaler publishes)")
    parser.add_argument("--oracle-iterations", type=positive_int, default=3, help="oracle sizing refinement passes")
    parser.add_argument("--policies", default=",".join(POLICY_NAMES), help="comma-separated subset of policies")
    parser.add_argument("--warmscale-meta", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="override a warmscale trigger metadata key (repeatable)")
    parser.add_argument("--start-replicas", type=non_negative_int, default=None,
                        help="ready replicas every policy starts with (default: the oracle's need, max over the "
                             "first 5 minutes)")
    parser.add_argument("--max-replicas", type=positive_int, default=None,
                        help="maxReplicas of every reactive policy (default: the profile's documented value)")
    parser.add_argument("--fast-signals", action="store_true",
                        help="build the policies' snapshots from the engine objects instead of rendering and "
                             "parsing Prometheus text (faster; the results are equal tick by tick)")
    parser.add_argument("--ensemble", type=positive_int, default=1, metavar="N",
                        help="run N members: the trace plus N-1 perturbations (jitter, rotations)")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="parallel processes (default 2): for ensemble members, or, in a single run, for the "
                             "policies once the oracle is sized (results do not depend on it)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--tuned", action=argparse.BooleanOptionalAction, default=True,
                        help="also run every reactive baseline as <name>-tuned: the best of a small sweep of its "
                             "main threshold on this trace (benchmarks.sim.runner.TUNING; default on, --no-tuned "
                             "leaves them out)")
    parser.add_argument("--hpa-behavior", default="shipped-example", choices=HPA_PROFILES,
                        help="the HPA behaviour of every HPA-driven policy: warmscale's shipped examples (default; "
                             "the baselines take its scale-up side) or the Kubernetes defaults for everyone")
    parser.add_argument("--exact-startup", action="store_true",
                        help="every replica starts in exactly the start-up ladder's time and every loop at phase 0 "
                             "(default: per-replica lognormal draws and per-member phases; docs/benchmarks.md, "
                             "'Equal information')")
    parser.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=True,
                        help="simulate vLLM's automatic prefix caching on a trace with block hashes (its "
                             "<stem>.hashes.gz: mooncake-conv); default on, --no-prefix-cache computes every "
                             "prompt token (docs/benchmarks.md, 'Prefix caching')")
    parser.add_argument("--no-references", action="store_true",
                        help="skip the cost references (bound, static-best, clairvoyant-best; docs/benchmarks.md)")
    parser.add_argument("--search-evals", type=int, default=None,
                        help=f"simulations the clairvoyant-best search may spend per member (default "
                             f"{DEFAULT_SEARCH_EVALS}, {LONG_RUN_SEARCH_EVALS} on runs longer than 6 h)")
    parser.add_argument("--reference-cache", default=None,
                        help="folder of found reference schedules (default $WARMSCALE_BENCH_CACHE, else "
                             "~/.cache/warmscale/bench-references; 'none': no cache)")
    parser.add_argument("--pd", action="store_true",
                        help="P/D fleet mode: separate prefill and decode replicas with a KV handoff, scaled per "
                             "role, against one combined pool (the same as `warmscale bench pd`; docs/pd.md)")


def add_member_options(parser: argparse.ArgumentParser, cached: str) -> None:
    """``--ensemble``, ``--seed``, ``--exact-startup`` and ``--prefix-cache`` for a benchmark whose members
    are this command's (``bench pd``, ``bench fleet``); ``cached``: which replicas cache prefixes."""
    parser.add_argument("--ensemble", type=positive_int, default=1, metavar="N",
                        help="N distinct members, as bench trace: rotations i/N of the trace(s), a seed each for "
                             "the start-up draws and loop phases")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the members (member i: seed*1000+i; member 0 and a single run too)")
    parser.add_argument("--exact-startup", action="store_true",
                        help="every replica starts in exactly the start-up ladder's time and every loop at phase 0 "
                             "(default: per-replica lognormal draws and per-member phases, as bench trace)")
    parser.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=True,
                        help=f"simulate vLLM's prefix caching on a trace with block hashes (mooncake-conv; {cached}); "
                             "default on, --no-prefix-cache computes every prompt token")


def check_policies(spec: str) -> tuple[str, ...]:
    """``--policies``: known names (or an old name kept as an alias) only, at least one."""
    import difflib

    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    for n in names:
        if n not in POLICY_NAMES and n not in ALIASES:
            near = difflib.get_close_matches(n, POLICY_NAMES, n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise UsageError(f"--policies: unknown policy {n!r} (known: {', '.join(POLICY_NAMES)}){hint}")
    if not names:
        raise UsageError("--policies: name at least one policy")
    return names


def run(args: argparse.Namespace) -> int:
    if getattr(args, "pd", False):
        return _run_pd(args)
    from warmscale.benchmarks.sim.arrivals import default_tokens_for, detect_kind
    from warmscale.traces import resolve

    wall0 = time.perf_counter()
    check_policies(args.policies)
    metadata_overrides("--warmscale-meta", args.warmscale_meta)
    path = resolve(args.trace, args.traces)
    kind = detect_kind(path)
    tokens_from: Path | None = None
    if args.tokens_from:
        tokens_from = resolve(args.tokens_from, args.traces)
    elif kind == "rate" and not default_tokens_for(path).is_file():
        # A rate curve away from the per-request traces: take the token sizes from the shipped ones.
        tokens_from = resolve(default_tokens_for(path).name, args.traces)
    dt = args.tick if args.tick is not None else 1.0
    work = load_trace(path, dt=RATE_BIN_S, seed=args.seed, tokens_from=tokens_from, rate_scale=args.rate_scale,
                      prefix_cache=getattr(args, "prefix_cache", True))
    if args.hours is not None:
        work = truncate(work, args.hours * 3600.0)
    members = distinct_members(max(1, args.ensemble), args.seed)
    jobs = [(i, kind_, params) for i, (kind_, params) in enumerate(members)]
    outcomes: dict[int, tuple[dict[str, PolicyResult], dict[str, Any], SimSettings]] = {}
    # Progress: one step per policy (and the oracle's sizing) in a single run, one per member in an ensemble.
    steps = len(check_policies(args.policies)) + 1 if len(jobs) == 1 else len(jobs)
    with progress.bar(steps, work.name, unit="policies" if len(jobs) == 1 else "members", quiet=args.quiet) as bar:
        say = (lambda m: None) if args.quiet else bar.write
        say(f"{work.name}: {work.requests} requests over {work.span_s / 3600:.2f} h, profile {args.profile}, "
            f"tick {dt:g}s, SLO TTFT {args.slo_ttft:g}s" + (f", ensemble of {args.ensemble}" if len(jobs) > 1 else ""))

        def done(name: str) -> None:
            bar.update(1)
            bar.set_postfix_str(name)

        if len(jobs) == 1:
            outcomes[0] = _member(args, work, dt, 0, "unperturbed", {}, say, jobs=args.jobs, done=done)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("fork")
            plain = argparse.Namespace(**{k: v for k, v in vars(args).items() if not k.startswith("_")})
            plain.trace_path, plain.trace_kind, plain.tokens_path = str(path), kind, tokens_from
            with ctx.Pool(max(1, min(args.jobs, len(jobs)))) as pool:
                pending = [pool.apply_async(_member_job, (plain, work, dt, i, k, p)) for i, k, p in jobs]
                for res in pending:
                    i, out = res.get()
                    outcomes[i] = out
                    done(f"member {i} ({members[i][0]})")
                    say(f"ensemble member {i} ({members[i][0]}) done at {time.perf_counter() - wall0:.1f}s")
    results, meta, settings = outcomes[0]
    wall = time.perf_counter() - wall0
    engine = ENGINE_PROFILES[args.profile]
    startup = PROFILES[args.profile]
    doc = build_json(work, args, results, meta, engine, startup, settings, wall)
    if len(jobs) > 1:
        doc["ensemble"] = ensemble_summary({i: o[0] for i, o in outcomes.items()},
                                           {i: o[1].get("references", {}) for i, o in outcomes.items()})
        doc["details"]["ensemble_members"] = [
            {"member": i, "kind": members[i][0], **members[i][1],
             "initial_replicas": outcomes[i][1]["initial_replicas"],
             # Each member's own figures, so that two runs compare member by member (issue 22, req 7).
             "policies": {name: {"slo_attainment": _clean(r.slo_attainment),
                                 "slo_attainment_warm": _clean(r.slo_attainment_warm),
                                 "gpu_hours": _clean(r.gpu_hours), "gpu_hours_warm": _clean(r.gpu_hours_warm),
                                 **hit_rate(r)}
                          for name, r in outcomes[i][0].items()}} for i in sorted(outcomes)]
    json_out = Path(args.json_out or f"{path.stem}__{args.profile}.json")
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(format_table(doc))
    print(f"simulated in {wall:.1f} s; results: {json_out}")
    if args.plot:
        plot(results, doc, args.plot)
    return 0


def _run_pd(args: argparse.Namespace) -> int:
    """``--pd``: the P/D fleet mode of :mod:`benchmarks.pd_replay`, with this command's shared options."""
    from warmscale.benchmarks import pd_replay

    parser = argparse.ArgumentParser()
    pd_replay.configure(parser)
    pd_args = parser.parse_args([])
    for key in ("trace", "traces", "profile", "slo_ttft", "hours", "standby", "ensemble", "jobs", "seed",
                "json_out", "plot", "quiet", "fast_signals", "max_replicas", "exact_startup", "prefix_cache"):
        setattr(pd_args, key, getattr(args, key))
    pd_args.meta = list(args.warmscale_meta)
    return pd_replay.run(pd_args)


def member_workload(work: Workload, i: int, kind: str, params: dict[str, float], *,
                    trace_path: str | Path | None = None, tokens_from: str | Path | None = None,
                    rate_scale: float = 1.0, hours: float | None = None) -> Workload:
    """Member ``i``'s arrivals (:func:`~benchmarks.sim.arrivals.distinct_members`): a rate curve
    (``trace_path``) drawn again with the member's own Poisson seed (member 0 keeps ``work``, drawn with
    ``--seed``), then rotated by the member's fraction. Per-request traces: ``work`` rotated."""
    if work.kind == "rate" and trace_path is not None and "seed" in params and i != 0:
        fresh = load_trace(trace_path, dt=RATE_BIN_S, seed=int(params["seed"]), tokens_from=tokens_from,
                           rate_scale=rate_scale)
        work = truncate(fresh, hours * 3600.0) if hours is not None else fresh
    return perturbed(work, kind, params)


def member_conditions(params: dict[str, float], seed: int, *, exact: bool = False) -> Conditions:
    """Member's start-up draws and loop phases (benchmarks/sim/conditions.py): seeded by the member's
    ``seed`` (a single run: ``seed * 1000``, member 0's); ``exact`` (``--exact-startup``): none."""
    return Conditions() if exact else Conditions(seed=int(params.get("seed", seed * 1000)))


def _member_job(args: argparse.Namespace, work: Workload, dt: float, i: int, kind: str,
                params: dict[str, float]) -> tuple[int, Any]:
    work = member_workload(work, i, kind, params, trace_path=args.trace_path if args.trace_kind == "rate" else None,
                           tokens_from=args.tokens_path, rate_scale=args.rate_scale, hours=args.hours)
    return i, _member(args, work, dt, i, kind, params, _quiet)


def _quiet(message: str) -> None:
    return None


def _member(args: argparse.Namespace, work: Workload, dt: float, i: int, kind: str, params: dict[str, float],
            say: Any, jobs: int = 1, done: Any = None) -> tuple[dict[str, PolicyResult], dict[str, Any], SimSettings]:
    engine = ENGINE_PROFILES[args.profile]
    startup = PROFILES[args.profile]
    overrides = dict(kv.split("=", 1) for kv in args.warmscale_meta)
    names = tuple(ALIASES.get(n.strip(), n.strip()) for n in args.policies.split(",") if n.strip())
    cache_arg = getattr(args, "reference_cache", None)
    cache_dir = (None if cache_arg == "none" else Path(cache_arg)) if cache_arg else default_cache_dir()
    long_run = work.span_s > 6 * 3600
    cond = member_conditions(params, args.seed, exact=getattr(args, "exact_startup", False))
    settings = SimSettings(dt=dt, slo_ttft=args.slo_ttft, sample_s=600.0 if long_run else 10.0,
                           fast_signals=args.fast_signals, conditions=cond)
    evals = getattr(args, "search_evals", None)
    if evals is None:
        evals = LONG_RUN_SEARCH_EVALS if long_run else DEFAULT_SEARCH_EVALS
    if long_run and "scrapeIntervalSeconds" not in overrides:
        overrides["scrapeIntervalSeconds"] = "15"
    bc = BenchConfig(slo_ttft=args.slo_ttft, standby=args.standby, warmscale_overrides=overrides,
                     oracle_iterations=args.oracle_iterations, policies=names, profile=args.profile,
                     start_replicas=args.start_replicas, max_replicas=args.max_replicas, jobs=max(1, jobs),
                     references=not getattr(args, "no_references", False),
                     tuned=bool(getattr(args, "tuned", False)),
                     hpa_profile=getattr(args, "hpa_behavior", "shipped-example"),
                     search_evals=evals, cache_dir=cache_dir)
    results, meta = run_all(work, engine, startup, settings, bc, say, done)
    if i != 0:
        for r in results.values():  # members only report numbers
            r.timeline = {}
            r.misses = []
    return results, meta, settings


def _ratio(x: float, ref: float | None) -> float:
    return x / ref if ref is not None and ref > 0 else math.nan


def _stat(values: list[float]) -> dict[str, float | None]:
    xs = sorted(v for v in values if math.isfinite(v))
    if not xs:
        return {"min": None, "median": None, "max": None}
    return {"min": _clean(xs[0]), "median": _clean(float(statistics.median(xs))), "max": _clean(xs[-1])}


def ensemble_summary(members: dict[int, dict[str, PolicyResult]],
                     refs: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``ensemble`` object of the JSON (issue 11, item 7; issue 21, requirements 4 and 7).
    ``refs``: each member's ``references`` (the bound and clairvoyant-best's GPU-hours)."""
    refs = refs or {}
    names = list(members[0])
    out: dict[str, Any] = {}
    for name in names:
        att = [m[name].slo_attainment for m in members.values()]
        att_w = [m[name].slo_attainment_warm for m in members.values()]
        gx: list[float] = []
        gx_w: list[float] = []
        xcb: list[float] = []
        xb: list[float] = []
        for i, m in members.items():
            o = m.get(HEURISTIC)
            gx.append(_ratio(m[name].gpu_hours, o.gpu_hours if o is not None else None))
            gx_w.append(_ratio(m[name].gpu_hours_warm, o.gpu_hours_warm if o is not None else None))
            r = refs.get(i, {})
            xcb.append(_ratio(m[name].gpu_hours_warm, r.get("clairvoyant_best_gpu_hours_warm")))
            xb.append(_ratio(m[name].gpu_hours, r.get("bound_gpu_hours")))
        dominated: list[str] = []
        for other in names:
            if other == name or other in CLAIRVOYANT:
                continue
            for m in members.values():
                a, b = m[other], m[name]
                ge = a.slo_attainment_warm >= b.slo_attainment_warm and a.gpu_hours_warm <= b.gpu_hours_warm
                strict = a.slo_attainment_warm > b.slo_attainment_warm or a.gpu_hours_warm < b.gpu_hours_warm
                if ge and strict:
                    dominated.append(other)
                    break
        out[name] = {"slo_attainment": _stat(att), "slo_attainment_warm": _stat(att_w),
                     "x_clairvoyant_best_warm": _stat(xcb), "x_bound": _stat(xb),
                     "gpu_x_oracle": _stat(gx), "gpu_x_oracle_warm": _stat(gx_w), "dominated_by": dominated}
    doc: dict[str, Any] = {"members": len(members), "policies": out}
    if SUBJECT in names:
        doc["paired"] = {b: paired(members, SUBJECT, b) for b in names if b != SUBJECT and b not in CLAIRVOYANT}
    return doc


def _bootstrap_median(diffs: list[float]) -> tuple[float, list[float]]:
    """The median of ``diffs`` and the 2.5/97.5 percentiles of its paired bootstrap."""
    import numpy as np

    xs = np.asarray(diffs, dtype=np.float64)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, len(xs), size=(BOOTSTRAP_RESAMPLES, len(xs)))
    meds = np.median(xs[picks], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return float(np.median(xs)), [_clean(float(lo)), _clean(float(hi))]


def paired(members: dict[int, dict[str, PolicyResult]], subject: str, baseline: str) -> dict[str, Any]:
    """``subject`` minus ``baseline`` member by member (same arrivals): warm-up-excluded attainment (in
    points of 1.0) and warm GPU-hours; the median difference and its 95% paired-bootstrap interval."""
    ids = sorted(members)
    d_slo = [members[i][subject].slo_attainment_warm - members[i][baseline].slo_attainment_warm for i in ids]
    d_gpu = [members[i][subject].gpu_hours_warm - members[i][baseline].gpu_hours_warm for i in ids]
    m_slo, ci_slo = _bootstrap_median(d_slo)
    m_gpu, ci_gpu = _bootstrap_median(d_gpu)
    return {"median_diff_slo": _clean(m_slo), "ci95_slo": ci_slo, "median_diff_gpu": _clean(m_gpu),
            "ci95_gpu": ci_gpu}


def hit_rate(r: PolicyResult) -> dict[str, float]:
    """``{"prefix_cache_hit_rate": ...}`` with prefix caching on, else nothing (the JSON stays as it was)."""
    rate = r.prefix_cache_hit_rate
    return {} if rate is None else {"prefix_cache_hit_rate": _clean(rate)}


def _clean(x: float) -> float:
    return round(x, 6) if math.isfinite(x) else 0.0


def build_json(work: Any, args: argparse.Namespace, results: dict[str, PolicyResult], meta: dict[str, Any],
               engine: Any, startup: Any, settings: SimSettings, wall: float) -> dict[str, Any]:
    refs = meta.get("references")
    policies: dict[str, dict[str, Any]] = {}
    for name, r in results.items():
        row = {k: (_clean(v) if isinstance(v, float) else v) for k, v in r.summary().items()}
        row["slo_attainment_warm"] = _clean(r.slo_attainment_warm)
        if refs is not None:
            row["x_clairvoyant_best"] = _clean(_ratio(r.gpu_hours, refs["clairvoyant_best_gpu_hours"]))
            row["x_bound"] = _clean(_ratio(r.gpu_hours, refs["bound_gpu_hours"]))
        policies[name] = row
    references = None
    if refs is not None:
        references = {k: (_clean(v) if isinstance(v, float) else v) for k, v in refs.items()
                      if k != "bound_details"}
        references["static_best"] = {k: (_clean(v) if isinstance(v, float) else v)
                                     for k, v in refs["static_best"].items()}
        references["details"] = refs["bound_details"]
    return {
        "trace": work.name,
        "profile": args.profile,
        # issue 21, requirement 5: a profile not calibrated against a published run says so in every table
        "engine_calibration": calibration_label(args.profile),
        "slo_ttft_s": float(args.slo_ttft),
        "requests": int(work.requests),
        "policies": policies,
        "references": references,
        "warmup_excluded": {name: {"slo_attainment": _clean(r.slo_attainment_warm),
                                   "gpu_hours": _clean(r.gpu_hours_warm)} for name, r in results.items()},
        # Everything below is context; the keys above are the contract.
        "details": {
            "kind": work.kind,
            "span_s": work.span_s,
            "seed": args.seed,
            "fast_signals": bool(args.fast_signals),
            "conditions": settings.conditions.to_dict(),
            "hpa_behavior": getattr(args, "hpa_behavior", "shipped-example"),
            "warmup_s": settings.warmup_s,
            "tick_s": settings.dt,
            "rate_bin_s": RATE_BIN_S if work.kind == "rate" else None,
            "tokens_from": work.tokens_from,
            "rate_scale": args.rate_scale if work.kind == "rate" else None,
            "wall_s": round(wall, 2),
            "gpu_hours_vs_oracle": {n: _clean(r.gpu_hours / results[HEURISTIC].gpu_hours)
                                    for n, r in results.items()} if HEURISTIC in results else None,
            "per_policy": {n: {"starts_by_warm_state": r.starts, "served": r.served, "wall_s": round(r.wall_s, 2),
                               "params": r.params} for n, r in results.items()},
            "engine_profile": {k: v for k, v in engine.__dict__.items() if k != "sources"},
            "engine_sources": dict(engine.sources),
            "startup_profile": {k: v for k, v in startup.__dict__.items() if k != "sources"},
            "startup_sources": dict(startup.sources),
            "time_to_ready_s": time_to_ready_table(startup),
            "cluster": {"node_idle_s (cluster-autoscaler scale-down-unneeded-time)": settings.node_idle_s},
            "oracle": meta,
            **({"prefix_cache": {
                "block_tokens": work.hash_tokens,
                "what": "vLLM automatic prefix caching per replica (warmscale/simulation/prefix_cache.py); "
                        "hit rate = prompt tokens found cached / prompt tokens looked up, over the run",
                "router": "least outstanding requests (not prefix-aware)",
                "hit_rate": {n: _clean(r.prefix_cache_hit_rate or 0.0) for n, r in results.items()}}}
               if work.hashes is not None else {}),
        },
    }


def format_table(doc: dict[str, Any]) -> str:
    refs = doc.get("references")
    cal = doc.get("engine_calibration", "calibrated")
    label = doc["profile"] if cal == "calibrated" else f"{doc['profile']} ({cal})"
    rows = [f"{doc['trace']}  profile={label}  SLO TTFT={doc['slo_ttft_s']:g}s  requests={doc['requests']}",
            f"{'policy':24s} {'SLO att.':>9s} {'warm att.':>9s} {'GPU-h':>9s} {'x cv-best':>9s} {'x bound':>8s} "
            f"{'TTFT p50':>9s} {'TTFT p99':>9s} {'cold':>5s} {'max':>4s}"]
    for name, p in doc["policies"].items():
        xcb = f"{p['x_clairvoyant_best']:9.2f}" if "x_clairvoyant_best" in p else f"{'-':>9s}"
        xb = f"{p['x_bound']:8.2f}" if "x_bound" in p else f"{'-':>8s}"
        rows.append(f"{name:24s} {p['slo_attainment'] * 100:8.2f}% {p['slo_attainment_warm'] * 100:8.2f}% "
                    f"{p['gpu_hours']:9.2f} {xcb} {xb} "
                    f"{p['ttft_p50_s']:9.3f} {p['ttft_p99_s']:9.2f} {p['cold_starts']:5d} {p['max_replicas']:4d}")
    if refs is not None:
        sb = refs["static_best"]
        rows.append(f"references: bound {refs['bound_gpu_hours']:.2f} GPU-h, clairvoyant-best "
                    f"{refs['clairvoyant_best_gpu_hours']:.2f} GPU-h, static-best "
                    f"{sb['replicas'] if sb['replicas'] is not None else 'none'} replicas "
                    f"({sb['gpu_hours']:.2f} GPU-h); target: warm attainment >= "
                    f"{refs['target_warm_attainment'] * 100:g}%")
    pc = doc["details"].get("prefix_cache")
    if pc:
        rows.append("prefix cache hit rate (prompt tokens): "
                    + ", ".join(f"{n} {v * 100:.1f}%" for n, v in pc["hit_rate"].items()))
    return "\n".join(rows)


def plot(results: dict[str, PolicyResult], doc: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 9))
    gs = fig.add_gridspec(3, 2, width_ratios=(2.2, 1))
    ax_r = fig.add_subplot(gs[0, 0])
    ax_q = fig.add_subplot(gs[1, 0], sharex=ax_r)
    ax_t = fig.add_subplot(gs[:, 1])
    scale = 3600.0 if doc["details"]["span_s"] > 6 * 3600 else 60.0
    unit = "h" if scale == 3600.0 else "min"
    for name, r in results.items():
        t = [x / scale for x in r.timeline["t"]]
        ax_r.step(t, r.timeline["spec"], where="post", label=name, lw=1)
        ax_q.plot(t, r.timeline["waiting"], label=name, lw=0.8)
    ax_r.set_ylabel("replicas (spec)")
    ax_r.legend(fontsize=7, ncol=2)
    ax_q.set_ylabel("requests waiting")
    ax_q.set_yscale("symlog", linthresh=10)
    ax_q.set_xlabel(f"time ({unit})")
    ax_w = fig.add_subplot(gs[2, 0], sharex=ax_r)
    ws = results.get("warmscale")
    if ws is not None:
        t = [x / scale for x in ws.timeline["t"]]
        ax_w.step(t, ws.timeline["spec"], where="post", label="warmscale spec")
        ax_w.step(t, ws.timeline["ready"], where="post", label="warmscale ready")
        ax_w.step(t, ws.timeline["held"], where="post", label="placeholders + idle nodes")
        ax_w.legend(fontsize=7)
        ax_w.set_ylabel("warmscale")
    for name, p in doc["policies"].items():
        ax_t.scatter(p["gpu_hours"], p["slo_attainment"] * 100, s=30)
        ax_t.annotate(name, (p["gpu_hours"], p["slo_attainment"] * 100), fontsize=7,
                      xytext=(3, 3), textcoords="offset points")
    ax_t.axhline(99.0, color="grey", ls="--", lw=0.8)
    ax_t.set_xlabel("GPU-hours (held capacity included)")
    ax_t.set_ylabel(f"TTFT <= {doc['slo_ttft_s']:g}s (% of requests)")
    ax_t.set_title("SLO vs GPU-hours", fontsize=9)
    fig.suptitle(f"{doc['trace']} - {doc['profile']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=70)
    plt.close(fig)
