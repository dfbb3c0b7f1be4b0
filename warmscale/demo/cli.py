"""`warmscale demo`: its options and entry point (the demo itself: :mod:`warmscale.demo.run`)."""

from __future__ import annotations

import argparse

from warmscale.demo.burst import DEFAULT_TRACE


def configure(parser: argparse.ArgumentParser) -> None:
    from warmscale.warmpool.startup_model import PROFILES

    parser.add_argument("--trace", default=DEFAULT_TRACE,
                        help=f"a per-request trace: a shipped one by name (default {DEFAULT_TRACE}; also azure-conv, "
                             "mooncake-conv) or a CSV path (timestamp_s,input_tokens,output_tokens)")
    parser.add_argument("--traces", default=None,
                        help="folder searched first for a trace given by name (else $WARMSCALE_SHARED/traces, "
                             "then the package)")
    parser.add_argument("--speed", type=float, default=8.0, help="replay this many times faster (default 8)")
    parser.add_argument("--span", type=float, default=660.0, help="trace seconds to replay (default 660)")
    parser.add_argument("--lead", type=float, default=20.0,
                        help="start this many trace seconds before the busiest minute (default 20)")
    parser.add_argument("--profile", default="8b-h100", choices=sorted(PROFILES),
                        help="startup ladder of warmpool/startup_model.py (default 8b-h100)")
    parser.add_argument("--standby", type=int, default=2, help="warmscale's warm pool: placeholders held (default 2)")
    parser.add_argument("--initial", type=int, default=1, help="replicas serving at the start, and minReplicas")
    parser.add_argument("--max-replicas", type=int, default=8)
    parser.add_argument("--slo-ttft", type=float, default=2.0, help="TTFT SLO in seconds (default 2)")
    parser.add_argument("--every", type=float, default=20.0, help="trace seconds between table rows (default 20)")
    parser.add_argument("--drain", type=float, default=60.0,
                        help="trace seconds to let queues drain after the window (default 60)")
    parser.add_argument("--plot", default="warmscale-demo.png", help="PNG to write ('' for none)")
    parser.add_argument("--json", default=None, help="write the run's summary and timeline as JSON")
    parser.add_argument("--log-file", default="warmscale-demo.log",
                        help="where the scaler's logs go during the demo ('' leaves them on stderr)")
    parser.add_argument("--quiet", action="store_true", help="no table and no summary")
    parser.add_argument("--cluster", action="store_true",
                        help="instead: the local Kubernetes control plane + the real KEDA + the warm pool, a cold and "
                             "a warm scale-up side by side (runs from a checkout; builds the binaries on first use; "
                             "writes warmscale-cluster-demo.png)")
    parser.add_argument("--cluster-time-factor", type=float, default=0.25,
                        help="with --cluster: wall seconds per model second of the start-up delays (default 0.25)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    if args.cluster:
        from warmscale.demo.cluster import run_cluster

        return run_cluster(args)
    from warmscale.demo.run import DemoError, DemoOptions, run_demo
    from warmscale.scaler.config import ConfigError
    from warmscale.traces import TraceNotFound

    try:
        summary = asyncio.run(run_demo(DemoOptions.from_args(args)))
    except (TraceNotFound, ConfigError, ValueError) as exc:
        print(f"warmscale demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("warmscale demo: interrupted", file=sys.stderr)
        return 130
    except DemoError as exc:
        print(f"warmscale demo failed: {exc} (logs: {args.log_file or 'stderr'})", file=sys.stderr)
        return 1
    return 0 if summary["requests"] > 0 and all(f["served"] > 0 for f in summary["fleets"].values()) else 1
