"""`warmscale bench <benchmark>` (also `python -m warmscale.benchmarks.cli <benchmark> ...`).

Each benchmark module provides ``configure(parser)`` and ``run(args) -> int``; a module that is not
there (yet) is listed as unavailable instead of breaking the others.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

BENCHMARKS: dict[str, tuple[str, str]] = {
    "trace": ("warmscale.benchmarks.trace_replay", "replay a trace: SLO attainment vs GPU-hours for every policy"),
    "pd": ("warmscale.benchmarks.pd_replay",
           "a trace through a prefill/decode fleet scaled per role vs one combined pool"),
    "cold-vs-warm": ("warmscale.benchmarks.cold_vs_warm",
                     "scale 1->8 on the local cluster, warm pool off vs on"),
    "calibrate": ("warmscale.benchmarks.calibrate", "the engine model against published vLLM measurements on H100"),
    "fleet": ("warmscale.benchmarks.fleet",
              "six models on one cluster: per-model KEDA and warmscale against a shared hot pool of sleepers"),
    "suite": ("warmscale.benchmarks.suite", "every shipped trace through `trace`, plus a results table (Markdown)"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", required=True)
    for name, (module_name, help_text) in BENCHMARKS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if exc.name is not None and exc.name.startswith("warmscale") and exc.name != module_name:
                raise  # one of ours missing is a broken install, not a missing extra
            sub.add_parser(name, help=f"{help_text} (unavailable: {exc.msg}; pip install 'warmscale[demo]')")
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(p)
        p.set_defaults(_bench=module)


# The simulated fleets run the production tracker, which logs every change of the desired count at
# INFO (docs/policy.md): thousands of lines in a replay. The benchmarks report their own tables.
QUIET_LOGGERS = ("warmscale.scaler.tracker",)


def run(args: argparse.Namespace) -> int:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger(name).getEffectiveLevel()))
    module = getattr(args, "_bench", None)
    if module is None:
        print(f"warmscale bench: {args.benchmark} is not available in this installation "
              "(pip install 'warmscale[demo]')", file=sys.stderr)
        return 2
    return int(module.run(args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    from warmscale.cliargs import HelpFormatter, user_errors, walk

    parser = argparse.ArgumentParser(prog="python -m warmscale.benchmarks.cli", description=__doc__)
    configure(parser)
    for p in walk(parser):
        p.formatter_class = HelpFormatter
    args = parser.parse_args(argv)
    try:
        return run(args)
    except user_errors() as exc:
        print(f"warmscale bench {args.benchmark}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
