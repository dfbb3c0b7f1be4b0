"""`warmscale bench suite`: the trace replay on every shipped per-request trace (ensembles of
``--ensemble`` members, 8 by default) and two rate curves (single runs), with ``--fast-signals``, then
one Markdown table of all results (``benchmarks/results/summary.md``).

    python -m warmscale.benchmarks.cli suite [--skip-week] [--ensemble 8] [--only STEMS] [--traces DIR] [--out DIR]

Traces come from ``--traces DIR``, else ``$WARMSCALE_SHARED/traces``, else the package
(:mod:`warmscale.traces`); the week-long rate curve is not shipped and is skipped, with a message
saying where to get it, when none of those has it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

from warmscale import progress
from warmscale.cliargs import positive_int
from warmscale.traces import TraceNotFound, resolve

# (trace file, profile, TTFT SLO s). Mooncake's prompts are very long (p99 85k tokens): prefill alone
# takes 5 s on 8B and 12 s on 70B-TP4, so its SLO is 10 s / 20 s.
RUNS: tuple[tuple[str, str, float], ...] = (
    ("azure_llm_2023_code.csv", "8b-h100", 2.0),
    ("azure_llm_2023_code.csv", "70b-h100-tp4", 2.0),
    ("azure_llm_2023_conv.csv", "8b-h100", 2.0),
    ("azure_llm_2023_conv.csv", "70b-h100-tp4", 2.0),
    ("mooncake_fast25_conversation.csv", "8b-h100", 10.0),
    ("mooncake_fast25_conversation.csv", "70b-h100-tp4", 20.0),
    ("servegen_reason_deepseek-r1_rate_600s.csv", "70b-h100-tp4", 2.0),
    ("azure_llm_2024_conv_rate_10s.csv", "8b-h100", 2.0),  # a week: the longest run (docs/benchmarks.md)
)
WEEK = "azure_llm_2024_conv_rate_10s.csv"
# Scenarios: (stem suffix, trace, profile, TTFT SLO s, extra `bench trace` arguments), ensembles like
# every run.
# "light": issue 22's light afternoon of long-context conversation, where warmscale was dominated by
# the KEDA queue baseline (1.27x its GPU-hours at the same 100%): the week's first 4 h at 0.011x (4,020
# requests, ~0.3 req/s) with Mooncake's prompt sizes and its 10 s SLO. "light05": the same at 0.02x
# (7,208 requests, ~0.5 req/s, the rate; still dominated: docs/policy.md, "Burst confirmation").
_LIGHT = ("--tokens-from", "mooncake-conv", "--hours", "4")
SCENARIOS: tuple[tuple[str, str, str, float, tuple[str, ...]], ...] = (
    ("light", WEEK, "8b-h100", 10.0, (*_LIGHT, "--rate-scale", "0.011")),
    ("light05", WEEK, "8b-h100", 10.0, (*_LIGHT, "--rate-scale", "0.02")),
)
WEEK_ENSEMBLE = 2  # members of the week (each ~10 min of simulation on one core)
# Wall seconds of each run with --ensemble 8 on a 2-core machine to itself (benchmarks/results/summary.md,
# the last column); only the progress bar's ETA reads them. A per-request trace's scale with the members.
EXPECTED_SECONDS = {
    "azure_llm_2023_code__8b-h100": 16.0, "azure_llm_2023_code__70b-h100-tp4": 20.0,
    "azure_llm_2023_conv__8b-h100": 34.0, "azure_llm_2023_conv__70b-h100-tp4": 52.0,
    "mooncake_fast25_conversation__8b-h100": 36.0, "mooncake_fast25_conversation__70b-h100-tp4": 44.0,
    "servegen_reason_deepseek-r1_rate_600s__70b-h100-tp4": 488.0, "azure_llm_2024_conv_rate_10s__8b-h100": 2212.0,
    "azure_llm_2024_conv_rate_10s__8b-h100__light": 30.0, "azure_llm_2024_conv_rate_10s__8b-h100__light05": 40.0,
}
SUMMARY_ENSEMBLE = 8
UNKNOWN_SECONDS = 60.0


def expected_seconds(stem: str, ensemble: int) -> float:
    base = EXPECTED_SECONDS.get(stem, UNKNOWN_SECONDS)
    return base * max(1, ensemble) / SUMMARY_ENSEMBLE


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", default=None,
                        help="folder searched first for the traces (else $WARMSCALE_SHARED/traces, then the package)")
    parser.add_argument("--out", default="benchmarks/results", help="where JSON, PNG and summary.md go")
    parser.add_argument("--skip-week", action="store_true", help="leave out the week-long rate curve")
    parser.add_argument("--ensemble", type=positive_int, default=8, help="members per per-request trace")
    parser.add_argument("--only", default=None, help="comma-separated trace stems to run (default: all)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    from warmscale.benchmarks.cli import main as bench

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs: dict[int, tuple[dict, float]] = {}  # by position in RUNS: the summary keeps that order

    def keep(k: int, stem: str) -> None:  # a run not re-run this time: its last result stays in the summary
        if (out / f"{stem}.json").exists():
            doc = json.loads((out / f"{stem}.json").read_text())
            docs[k] = (doc, float(doc.get("details", {}).get("wall_s", 0.0)))

    plan: list[tuple[int, str, str, str, float, tuple[str, ...], Path]] = []
    runs = [(f"{Path(t).stem}__{p}", t, p, slo, ()) for t, p, slo in RUNS] + [
        (f"{Path(t).stem}__{p}__{suffix}", t, p, slo, more) for suffix, t, p, slo, more in SCENARIOS]
    for k, (stem, trace, profile, slo, more) in enumerate(runs):
        if (args.skip_week and trace == WEEK and not more) or (
                args.only and Path(trace).stem not in args.only.split(",") and stem not in args.only.split(",")):
            keep(k, stem)
            continue
        try:
            path = resolve(trace, args.traces)
        except TraceNotFound as exc:
            print(f"skipped: {exc}", file=sys.stderr)
            continue
        plan.append((k, stem, trace, profile, slo, more, path))
    # Progress in expected wall seconds per run, so the ETA weighs the week as the long run it is.
    weights = [expected_seconds(stem, args.ensemble) for _, stem, *_ in plan]
    with progress.bar(sum(weights), "bench suite", unit="s", quiet=args.quiet) as bar:
        for (k, stem, trace, profile, slo, more, path), weight in zip(plan, weights, strict=True):
            bar.set_postfix_str(stem)
            t0 = time.perf_counter()
            # Every run an ensemble (issue 21, requirement 4), the week included but smaller and without the
            # tuned sweep (one simulation of the week takes ~50 s; its budget is 10 minutes); a scenario's
            # slice of the week (its own arguments) is a full ensemble.
            extra = (["--ensemble", str(min(args.ensemble, WEEK_ENSEMBLE)), "--no-tuned"] if trace == WEEK and not more
                     else ["--ensemble", str(args.ensemble), *more])
            table = io.StringIO()  # each run's table goes above the bar, not through it
            with contextlib.redirect_stdout(table):
                rc = bench(["trace", "--trace", str(path), "--profile", profile, "--slo-ttft", f"{slo:g}",
                            "--json", str(out / f"{stem}.json"), "--plot", str(out / f"{stem}.png"), "--quiet",
                            "--fast-signals", *extra])
            if not args.quiet:
                bar.write(table.getvalue().rstrip("\n"))
            if rc != 0:
                bar.write(f"warmscale bench suite: {stem} failed (exit {rc}); stopping")
                return rc
            docs[k] = (json.loads((out / f"{stem}.json").read_text()), time.perf_counter() - t0)
            bar.update(weight)
    table = summary_table([docs[k] for k in sorted(docs)])
    (out / "summary.md").write_text(table + "\n")
    print(table)
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _profile(doc: dict) -> str:
    """The profile, marked where it is not calibrated against a published run (issue 21, requirement 5)."""
    cal = doc.get("engine_calibration")
    if cal is None:  # results written before the label: the 70B profiles were never calibrated
        cal = "calibrated" if doc["profile"] == "8b-h100" else "uncalibrated"
    return doc["profile"] if cal == "calibrated" else f"{doc['profile']} (uncalibrated)"


def summary_table(docs: list[tuple[dict, float]]) -> str:
    """One Markdown table of all runs: GPU-hours as multiples of clairvoyant-best and of the bound
    (issue 21; "x oracle" is gone); a v2 result without ``references`` shows "-" there."""
    rows = ["| trace | profile | SLO | policy | SLO att. % | warm att. % | GPU-h | x clairvoyant-best | x bound | "
            "ensemble warm att. % min/med/max | ensemble x clairvoyant-best min/med/max | dominated by | "
            "TTFT p99 s | cold | max |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for doc, wall in docs:
        ens = (doc.get("ensemble") or {}).get("policies", {})
        warm = doc.get("warmup_excluded", {})
        for name, p in doc["policies"].items():
            e = ens.get(name)
            att = "/".join(_pct(e["slo_attainment_warm"][k]) for k in ("min", "median", "max")) if e else "-"
            xcb = ("/".join(_x(e["x_clairvoyant_best_warm"][k]) for k in ("min", "median", "max"))
                   if e and "x_clairvoyant_best_warm" in e else "-")
            dom = ", ".join(e["dominated_by"]) if e and e["dominated_by"] else ("none" if e else "-")
            w = p.get("slo_attainment_warm", warm.get(name, {}).get("slo_attainment"))
            rows.append(
                f"| {Path(doc['trace']).stem} | {_profile(doc)} | {doc['slo_ttft_s']:g} s | {name} | "
                f"{100 * p['slo_attainment']:.2f} | {_pct(w)} | {p['gpu_hours']:.1f} | "
                f"{_x(p.get('x_clairvoyant_best'))} | {_x(p.get('x_bound'))} | "
                f"{att} | {xcb} | {dom} | {p['ttft_p99_s']:.1f} | {p['cold_starts']} | {p['max_replicas']} |"
            )
        members = (doc.get("ensemble") or {}).get("members", 1)
        refs = doc.get("references")
        ref = ""
        if refs:
            sb = refs["static_best"]
            ref = (f", bound {refs['bound_gpu_hours']:.1f} GPU-h, clairvoyant-best "
                   f"{refs['clairvoyant_best_gpu_hours']:.1f} GPU-h, static-best {sb['replicas']} replicas")
        rows.append(f"| | | | *{doc['requests']:,} requests, start {doc['details']['oracle']['initial_replicas']} "
                    f"replicas, {members} member(s), {wall:.0f} s{ref}* | | | | | | | | | | | |")
    return "\n".join(rows)
