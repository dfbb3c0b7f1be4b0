"""`warmscale demo`: its options and entry point (the demo itself: :mod:`warmscale.demo.run`)."""

from __future__ import annotations

import argparse

from warmscale.cliargs import (
    UsageError,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    writable_path,
)
from warmscale.demo.burst import DEFAULT_TRACE

# The demo's trigger metadata keys that come from a flag of their own; every other key is a duration
# divided by --speed (warmscale.demo.run.DemoOptions.metadata).
METADATA_FLAGS = {"ttftSloSeconds": "--slo-ttft", "minReplicas": "--initial", "maxReplicas": "--max-replicas"}


def configure(parser: argparse.ArgumentParser) -> None:
    from warmscale.warmpool.startup_model import PROFILES

    parser.add_argument("--trace", default=DEFAULT_TRACE,
                        help=f"a per-request trace: a shipped one by name (default {DEFAULT_TRACE}; also azure-conv, "
                             "mooncake-conv) or a CSV path (timestamp_s,input_tokens,output_tokens)")
    parser.add_argument("--traces", default=None,
                        help="folder searched first for a trace given by name (else $WARMSCALE_SHARED/traces, "
                             "then the package)")
    parser.add_argument("--speed", type=positive_float, default=8.0, help="replay this many times faster")
    parser.add_argument("--span", type=positive_float, default=660.0, help="trace seconds to replay")
    parser.add_argument("--lead", type=non_negative_float, default=20.0,
                        help="start this many trace seconds before the busiest minute")
    parser.add_argument("--profile", default="8b-h100", choices=sorted(PROFILES),
                        help="model size and GPU whose start-up ladder (image pull, weights, engine start) both "
                             "fleets climb")
    parser.add_argument("--standby", type=non_negative_int, default=2, help="warmscale's warm pool: placeholders held")
    parser.add_argument("--initial", type=positive_int, default=1,
                        help="replicas serving at the start, and minReplicas")
    parser.add_argument("--max-replicas", type=positive_int, default=8, help="maxReplicas of both fleets")
    parser.add_argument("--slo-ttft", type=positive_float, default=2.0, help="TTFT SLO in seconds")
    parser.add_argument("--every", type=positive_float, default=20.0, help="trace seconds between table rows")
    parser.add_argument("--drain", type=non_negative_float, default=60.0,
                        help="trace seconds to let queues drain after the window")
    parser.add_argument("--plot", default="warmscale-demo.png", type=writable_path,
                        help="PNG to write ('' for none; needs matplotlib: pip install 'warmscale[demo]')")
    parser.add_argument("--json", default=None, type=writable_path, help="write the run's summary and timeline as JSON")
    parser.add_argument("--log-file", default="warmscale-demo.log", type=writable_path,
                        help="where the scaler's logs go during the demo ('' leaves them on stderr)")
    parser.add_argument("--quiet", action="store_true", help="no table and no summary")
    parser.add_argument("--cluster", action="store_true",
                        help="instead: the local Kubernetes control plane + the real KEDA + the warm pool, a cold and "
                             "a warm scale-up side by side (runs from a source checkout; builds the binaries on "
                             "first use; writes warmscale-cluster-demo.png)")
    parser.add_argument("--cluster-time-factor", type=positive_float, default=0.25,
                        help="with --cluster: wall seconds per model second of the start-up delays")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    if args.cluster:
        from warmscale.demo.cluster import run_cluster

        return run_cluster(args)
    from warmscale.demo.run import DemoError, DemoOptions, run_demo
    from warmscale.scaler.config import ConfigError
    from warmscale.traces import TraceNotFound

    if args.initial > args.max_replicas:
        raise UsageError(f"--initial {args.initial} is above --max-replicas {args.max_replicas}")
    try:
        summary = asyncio.run(run_demo(DemoOptions.from_args(args)))
    except ConfigError as exc:  # a flag whose value makes the demo's trigger metadata invalid
        flag = METADATA_FLAGS.get(exc.key, "--speed")
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        print(f"warmscale demo: {flag} {value:g}: gives {exc}", file=sys.stderr)
        return 2
    except (TraceNotFound, ValueError) as exc:
        print(f"warmscale demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("warmscale demo: interrupted", file=sys.stderr)
        return 130
    except DemoError as exc:
        print(f"warmscale demo failed: {exc} (logs: {args.log_file or 'stderr'})", file=sys.stderr)
        return 1
    return 0 if summary["requests"] > 0 and all(f["served"] > 0 for f in summary["fleets"].values()) else 1
