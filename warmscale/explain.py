"""``warmscale explain NAMESPACE/NAME``: why a running scaler asks for the count it asks for.

    warmscale explain llm/vllm-8b [--scaler http://127.0.0.1:9091] [--last 3] [--json]

Reads the scaler's ``/decisions`` (its metrics port) and prints the last decisions of that
ScaledObject, each with its trace: every step of the pipeline (docs/policy.md, "The decision
pipeline"), the count before and after it, why, and what it read.
Exit status: 0, 1 when the scaler has no decision for it, 2 when the scaler cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

# The scaler's HTTP port in every shipped manifest (docs/scaler.md).
DEFAULT_SCALER = "http://127.0.0.1:9091"
# How long to wait for /decisions: it answers from memory.
TIMEOUT_SECONDS = 10.0
# Inputs shown per step; the rest are in --json.
INPUTS_SHOWN = 8


def _target(raw: str) -> tuple[str, str]:
    ns, sep, name = raw.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME (the ScaledObject), got {raw!r}")
    return ns, name


def _last(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 100, got {raw!r}")
    return int(raw)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scaled_object", type=_target, metavar="NAMESPACE/NAME", help="the ScaledObject")
    parser.add_argument("--scaler", default=DEFAULT_SCALER,
                        help=f"the scaler's HTTP address (its --metrics-port; default {DEFAULT_SCALER})")
    parser.add_argument("--last", type=_last, default=3, help="how many of the last decisions (default 3)")
    parser.add_argument("--json", action="store_true", help="print the decisions as JSON")


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_decisions(entries: Sequence[Mapping[str, Any]]) -> str:
    """The decisions as text: a header line each, then one line per step of its trace."""
    lines: list[str] = []
    for e in entries:
        when = datetime.fromtimestamp(float(e.get("ts", 0.0)), UTC).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"{when} UTC  desired {e.get('desired')}  active {e.get('active')}  reason {e.get('reason')}"
                     f"  ready {e.get('ready')}  starting {e.get('starting')}")
        trace = e.get("trace") or []
        if not trace:
            lines.append("  (no trace: this decision was computed by another scaler replica; ask that one)")
        for step in trace:
            before = "-" if step.get("before") is None else step["before"]
            inputs = step.get("inputs") or {}
            shown = ", ".join(f"{k}={_value(v)}" for k, v in list(inputs.items())[:INPUTS_SHOWN])
            more = f", +{len(inputs) - INPUTS_SHOWN} more" if len(inputs) > INPUTS_SHOWN else ""
            lines.append(f"  {step.get('step', '?'):<13} {before!s:>4} -> {step.get('after')!s:<4} "
                         f"{step.get('why', '')!s:<26} {shown}{more}")
    return "\n".join(lines)


def fetch(scaler: str, namespace: str, name: str, last: int) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"namespace": namespace, "name": name, "limit": last})
    url = f"{scaler.rstrip('/')}/decisions?{query}"
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as resp:
        doc = json.loads(resp.read())
    return list(doc.get("decisions", []))


def run(args: argparse.Namespace) -> int:
    namespace, name = args.scaled_object
    if urllib.parse.urlparse(args.scaler).scheme not in ("http", "https"):
        print(f"warmscale explain: --scaler: expected an http(s) URL, got {args.scaler!r}", file=sys.stderr)
        return 2
    try:
        entries = fetch(args.scaler, namespace, name, args.last)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        print(f"warmscale explain: cannot read {args.scaler}/decisions: {exc}", file=sys.stderr)
        return 2
    if not entries:
        print(f"warmscale explain: {args.scaler} has no decision for {namespace}/{name} "
              "(is it this scaler's ScaledObject, and has KEDA asked for it yet?)", file=sys.stderr)
        return 1
    print(json.dumps(entries, indent=1) if args.json else format_decisions(entries))
    return 0
