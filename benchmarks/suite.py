"""`warmscale bench suite`: the trace replay on every shipped per-request trace and two rate curves,
then one Markdown table of all results (``benchmarks/results/summary.md``).

    python -m benchmarks.cli suite [--skip-week] [--traces DIR] [--out DIR]

Traces come from ``--traces DIR``, else ``$WARMSCALE_SHARED/traces``, else the package
(:mod:`warmscale.traces`); the week-long rate curve is not shipped and is skipped, with a message
saying where to get it, when none of those has it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

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
    ("azure_llm_2024_conv_rate_10s.csv", "8b-h100", 2.0),  # a week: about 5 minutes
)
WEEK = "azure_llm_2024_conv_rate_10s.csv"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", default=None,
                        help="folder searched first for the traces (else $WARMSCALE_SHARED/traces, then the package)")
    parser.add_argument("--out", default="benchmarks/results", help="where JSON, PNG and summary.md go")
    parser.add_argument("--skip-week", action="store_true", help="leave out the week-long rate curve")


def run(args: argparse.Namespace) -> int:
    from benchmarks.cli import main as bench

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs: list[tuple[dict, float]] = []
    for trace, profile, slo in RUNS:
        if args.skip_week and trace == WEEK:
            continue
        try:
            path = resolve(trace, args.traces)
        except TraceNotFound as exc:
            print(f"skipped: {exc}", file=sys.stderr)
            continue
        stem = f"{Path(trace).stem}__{profile}"
        t0 = time.perf_counter()
        bench(["trace", "--trace", str(path), "--profile", profile, "--slo-ttft", f"{slo:g}",
               "--json", str(out / f"{stem}.json"), "--plot", str(out / f"{stem}.png"), "--quiet"])
        docs.append((json.loads((out / f"{stem}.json").read_text()), time.perf_counter() - t0))
    table = summary_table(docs)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    return 0


def summary_table(docs: list[tuple[dict, float]]) -> str:
    rows = ["| trace | profile | SLO | policy | SLO att. | GPU-h | x oracle | TTFT p50 s | TTFT p99 s | cold | max |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for doc, wall in docs:
        oracle = doc["policies"].get("oracle", {}).get("gpu_hours") or float("nan")
        for name, p in doc["policies"].items():
            rows.append(
                f"| {Path(doc['trace']).stem} | {doc['profile']} | {doc['slo_ttft_s']:g} s | {name} | "
                f"{100 * p['slo_attainment']:.2f}% | {p['gpu_hours']:.1f} | {p['gpu_hours'] / oracle:.2f} | "
                f"{p['ttft_p50_s']:.2f} | {p['ttft_p99_s']:.1f} | {p['cold_starts']} | {p['max_replicas']} |"
            )
        rows.append(f"| | | | *{doc['requests']:,} requests, simulated in {wall:.1f} s* | | | | | | | |")
    return "\n".join(rows)
