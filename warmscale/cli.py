"""`warmscale` command line: one subcommand per process or job.

Each subcommand lives in its own module, which provides ``configure(parser)`` and ``run(args) -> int``;
heavy imports happen inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from warmscale.logs import setup_logging

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("warmscale.demo.cli", "one real burst through today's KEDA+HPA setup and through warmscale, "
                                   "side by side (simulated vLLM engines, no cluster)"),
    "scaler": ("warmscale.scaler.cli", "run the KEDA external scaler (gRPC)"),
    "warmpool": ("warmscale.warmpool.cli", "run the warm-pool controller"),
    "rbac": ("warmscale.warmpool.rbac",
             "print the warm-pool controller's RBAC (cluster-wide, or --namespace NS: Roles per "
             "namespace) or its node-write admission policy"),
    "ca-bundle": ("warmscale.warmpool.cabundle",
                  "copy the self-managed CA bundle into the webhook configuration's caBundle once (namespaced "
                  "install: the controller may not patch it)"),
    "stage": ("warmscale.warmpool.stager", "stage model weights into a node-local cache (runs in a Job)"),
    "advise": ("warmscale.advise.cli", "which orchestration layer repeated failures ask for (read-only)"),
    "explain": ("warmscale.explain", "why a running scaler asks for its count: the last decisions' traces"),
    "bench": ("warmscale.benchmarks.cli", "run a benchmark (trace replay, cold vs warm start)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmscale", description=__doc__)
    parser.add_argument("--version", action="version", version=f"warmscale {version()}")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", choices=("json", "text"), default="json")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a subcommand whose optional parts are missing
            sub.add_parser(name, help=f"{help_text} (unavailable: {exc})")
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(p)
        p.set_defaults(_module=module)
    return parser


def version() -> str:
    """The installed distribution's version (the source tree's when run from a checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("warmscale")
    except PackageNotFoundError:
        return "0+unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, json=args.log_format == "json")
    module = getattr(args, "_module", None)
    if module is None:
        parser.error(f"{args.command} is not available in this installation")
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
