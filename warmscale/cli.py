"""The ``warmscale`` command.

Each subcommand lives in its own module, which provides ``configure(parser)`` and ``run(args) -> int``;
heavy imports happen inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from warmscale.cliargs import HelpFormatter, add_global_flags, user_errors, walk
from warmscale.logs import setup_logging
from warmscale.version import version_info

DESCRIPTION = """\
warmscale: event-driven autoscaling and warm pools for LLM inference servers (vLLM, SGLang,
TensorRT-LLM, TGI, Ray Serve) on Kubernetes, next to KEDA.

Try it without a cluster:   warmscale demo
Check a manifest:           warmscale validate -f scaledobject.yaml
Run a component:            warmscale scaler | warmscale warmpool | warmscale hold-gateway
Help on one subcommand:     warmscale SUBCOMMAND --help
"""

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("warmscale.demo.cli", "one real burst through today's KEDA+HPA setup and through warmscale, "
                                   "side by side (simulated vLLM engines, no cluster)"),
    "validate": ("warmscale.validate.cli", "check ScaledObjects and annotated workloads in YAML files offline, "
                                           "with the scaler's and the controller's own parsers"),
    "scaler": ("warmscale.scaler.cli", "run the KEDA external scaler (gRPC)"),
    "warmpool": ("warmscale.warmpool.cli", "run the warm-pool controller"),
    "hold-gateway": ("warmscale.scaler.holdgate_cli",
                     "run the hold gateway in front of one workload: holds requests while it scales from zero "
                     "(a sleeper wakes), never a 503"),
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
# The long-running processes: they log one line with their version when they start.
SERVICES = frozenset({"scaler", "warmpool", "stage", "hold-gateway"})
# Where a missing optional dependency comes from (pyproject's extras).
EXTRA_HINT = "pip install 'warmscale[demo]'"

log = logging.getLogger("warmscale")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmscale", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"warmscale {version()}")
    add_global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a subcommand whose optional parts are missing
            sub.add_parser(name, help=f"{help_text} (unavailable: {exc.msg}; {EXTRA_HINT})")
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(p)
        p.set_defaults(_module=module)
    for p in walk(parser):
        p.formatter_class = HelpFormatter
        if p is not parser:
            add_global_flags(p, top=False)
    return parser


def version() -> str:
    """The running code's version (:func:`warmscale.version.version_info`)."""
    return version_info().version


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, json=args.log_format == "json")
    module = getattr(args, "_module", None)
    if module is None:
        parser.error(f"{args.command} is not available in this installation ({EXTRA_HINT})")
    if args.command in SERVICES:
        info = version_info()
        log.info("warmscale starting", extra={"command": args.command, "version": info.version,
                                              "commit": info.commit})
    try:
        return int(module.run(args) or 0)
    except user_errors() as exc:
        where = " ".join(str(x) for x in (args.command, getattr(args, "benchmark", None)) if x)
        print(f"warmscale {where}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
