"""``warmscale demo``: the whole loop on an embedded default, with no cluster and no servers.

Simulated vLLM engines serve real ``/metrics``; the real scaler (gRPC server, in-memory store)
scrapes them through the same signal sources it uses in production, with the simulated fleet as its
pod discovery; an emulation of KEDA + HPA polls the scaler over gRPC and resizes the fleet; a burst
cut from a real trace drives the traffic. Time is compressed (see ``--speed``, ``--startup``).
"""

from __future__ import annotations

import argparse

from warmscale.demo.burst import DEFAULT_TRACE


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default=None,
                        help=f"per-request trace CSV (default: shared traces' {DEFAULT_TRACE})")
    parser.add_argument("--speed", type=float, default=2.5, help="replay the trace this many times faster")
    parser.add_argument("--span", type=float, default=220.0, help="seconds of trace time to replay")
    parser.add_argument("--lead", type=float, default=120.0, help="start this many trace seconds before the peak")
    parser.add_argument("--startup", type=float, default=8.0, help="seconds a new replica takes to become ready")
    parser.add_argument("--max-replicas", type=int, default=8)
    parser.add_argument("--slo-ttft", type=float, default=1.0, help="TTFT SLO in seconds")
    parser.add_argument("--plot", default="warmscale-demo.png", help="PNG to write ('' for none)")
    parser.add_argument("--json", default=None, help="write the run's summary and timeline as JSON")
    parser.add_argument("--quiet", action="store_true", help="no live progress lines")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from warmscale.demo.run import DemoOptions, run_demo

    summary = asyncio.run(run_demo(DemoOptions.from_args(args)))
    return 0 if summary["requests"] > 0 else 1
