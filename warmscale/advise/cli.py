"""``warmscale advise``: which orchestration layer the cluster's repeated failures ask for (read-only).

    warmscale advise [--kubeconfig F] [--namespace NS] [--since 6h] [--json] [--prometheus URL]
                     [--min-episodes 3] [--episode-window 24h] [--pending-threshold 10m]
                     [--gang-threshold 5m] [--cold-start 60s]

Exit status: 0 (with or without findings), 2 when the cluster cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from dataclasses import replace
from typing import Any

import orjson

from warmscale.common.diagnostics.detect import advise
from warmscale.common.diagnostics.model import Finding, Policy
from warmscale.signals.redact import redact, redact_value

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(raw: str) -> float:
    """``90``, ``90s``, ``10m``, ``6h``, ``1d`` -> seconds (positive, finite, at most 30 days)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*", raw)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 10m, 6h or 1d, got {raw!r}")
    v = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not 0 < v <= 30 * 86400:
        raise argparse.ArgumentTypeError(f"duration {raw!r} out of range (0, 30d]")
    return v


def _count(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise argparse.ArgumentTypeError(f"expected a count in 1..1000, got {raw!r}")
    return int(raw)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--namespace", "-n", default=None, help="one namespace (default: all you may list)")
    parser.add_argument("--since", type=duration, default=duration("6h"), help="how far back to read (6h)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--prometheus", default=None,
                        help="Prometheus URL with the scaler's and the engines' series (cold starts, ITL, load)")
    parser.add_argument("--min-episodes", type=_count, default=Policy.min_episodes,
                        help="repetitions before a finding speaks (3)")
    parser.add_argument("--episode-window", type=duration, default=duration("24h"),
                        help="window the repetitions must fall in (24h)")
    parser.add_argument("--pending-threshold", type=duration, default=duration("10m"),
                        help="GPU pods pending this long count (10m)")
    parser.add_argument("--gang-threshold", type=duration, default=duration("5m"),
                        help="a replica partly scheduled this long counts (5m)")
    parser.add_argument("--cold-start", type=duration, default=duration("60s"),
                        help="new capacity taking this long is a cold start (60s)")


def policy_from(args: argparse.Namespace) -> Policy:
    return replace(Policy(), min_episodes=args.min_episodes, window_s=args.episode_window,
                   pending_threshold_s=args.pending_threshold, gang_threshold_s=args.gang_threshold,
                   cold_start_min_s=args.cold_start)


def render_text(findings: list[Finding], notes: list[str]) -> str:
    """The report as text, redacted (``--prometheus`` may carry credentials; notes and evidence quote it)."""
    lines: list[str] = []
    if not findings:
        lines.append("No repeated failure: no new layer needed.")
    for f in findings:
        where = f.namespace if f.workload == "*" else f"{f.namespace}/{f.workload}"
        lines.append(f"[{f.kind}] {where}: {f.summary}")
        lines.append(f"  next layer: {f.next_layer}")
        for e in f.episodes[-5:]:
            lines.append(f"  - {e.evidence}")
        if len(f.episodes) > 5:
            lines.append(f"  ... and {len(f.episodes) - 5} earlier")
    lines += [f"note: {n}" for n in notes]
    return redact("\n".join(lines))


def render_json(findings: list[Finding], notes: list[str], now: float) -> str:
    """The report as JSON, every string redacted."""
    doc = {"generated_at": now, "findings": [f.to_dict() for f in findings], "notes": notes}
    return orjson.dumps(redact_value(doc), option=orjson.OPT_INDENT_2).decode() + "\n"


async def main_async(args: argparse.Namespace) -> int:
    from warmscale.advise.collect import read_signals
    from warmscale.scaler.kube import load_api_client

    try:
        loaded = await load_api_client(args.kubeconfig)
    except Exception as exc:
        print(f"warmscale advise: cannot load the kubeconfig: {redact(str(exc))}", file=sys.stderr)
        return 2
    if loaded is None:
        print("warmscale advise: no Kubernetes configuration (--kubeconfig, $KUBECONFIG)", file=sys.stderr)
        return 2
    api: Any = loaded[0]
    now = time.time()
    try:
        signals, notes = await read_signals(api, namespace=args.namespace, since_s=args.since, now=now,
                                            prometheus=args.prometheus)
    except Exception as exc:
        print(f"warmscale advise: cannot read the cluster: {type(exc).__name__}: {redact(str(exc))[:300]}",
              file=sys.stderr)
        return 2
    finally:
        await api.close()
    findings = advise(signals, policy_from(args), now)
    if args.json:
        sys.stdout.write(render_json(findings, notes, now))
    else:
        print(render_text(findings, notes))
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(main_async(args))
