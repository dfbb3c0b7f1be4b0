"""Peak memory of the scaler's scrape path on one oversized payload (issue 20, item 4).

    python3 -m warmscale.benchmarks.payload_memory [--series 1000000] [--max-payload-bytes 67108864]

A loopback ``http.server`` child serves a vLLM-like payload of ``--series`` series (bounded: at most
4,000,000 series, on 127.0.0.1 only; a child process writes it, so none of it is counted here); this
process reads it once through the production :class:`scaler.cli.SourcesReader` (parse workers
included) as one ScaledObject at ``maxPayloadBytes``, and prints the outcome and the peak RSS
(``VmHWM``) of this process and of each parse worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Bounds of this load test: loopback only, at most this many series (~80 MB of text).
MAX_SERIES = 4_000_000


def payload(series: int) -> str:
    lines = ["# TYPE vllm:num_requests_running gauge", 'vllm:num_requests_running{engine="0",model_name="m"} 3',
             "# TYPE vllm:num_requests_waiting gauge", 'vllm:num_requests_waiting{engine="0",model_name="m"} 1',
             "# TYPE vllm:padding gauge"]
    lines += [f'vllm:padding{{engine="0",model_name="m",i="{i}"}} 1' for i in range(series)]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(url: str, max_payload_bytes: int, limits: dict[str, int]) -> tuple[str, list[float]]:
    from warmscale.scaler.cli import SourcesReader
    from warmscale.scaler.config import parse_metadata

    cfg = parse_metadata({"endpoints": url, "maxPayloadBytes": str(max_payload_bytes), "scrapeTimeoutSeconds": "120",
                          "scrapeIntervalSeconds": "300"})
    if limits:  # (not on releases before the payload budgets)
        from warmscale.signals.sources.budget import PayloadLimits

        reader = SourcesReader(limits=PayloadLimits(**limits))
    else:
        reader = SourcesReader()
    workers: list[float] = []
    try:
        snap = await reader.read(cfg, time.time(), ("bench", "payload-memory"))
        r = snap.replicas[0] if snap.replicas else None
        known = r is not None and r.signal is not None
        outcome = "known" if known else f"unknown: {r.error if r else snap.source_errors}"
    except Exception as exc:  # a refusal of the whole ScaledObject
        outcome = f"refused: {type(exc).__name__}: {exc}"
    finally:
        pool = getattr(reader.parser, "_executor", None)  # the parse workers, still alive
        for pid in list(getattr(pool, "_processes", {}) or {}):
            try:
                workers.append(peak_mib(pid))
            except OSError:
                workers.append(float("nan"))  # it died (a memory limit)
        await reader.aclose()
    return outcome, workers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, default=1_000_000)
    ap.add_argument("--max-payload-bytes", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--no-budgets", action="store_true",
                    help="raise the payload budgets out of the way (what the parse workers' own cap does)")
    ap.add_argument("--write-payload", default=None, help=argparse.SUPPRESS)  # the writer child
    args = ap.parse_args()
    if not 1 <= args.series <= MAX_SERIES:
        ap.error(f"--series: 1..{MAX_SERIES}")
    if args.write_payload:
        Path(args.write_payload).write_text(payload(args.series))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "metrics")
        subprocess.run([sys.executable, __file__, "--series", str(args.series), "--write-payload", str(out)],
                       check=True)
        size = out.stat().st_size
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                   "--directory", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.0)
            import warmscale.scaler.cli  # noqa: F401  (imports are not the read's memory)

            base = peak_mib()
            t0 = time.monotonic()
            huge = 2**40
            limits = dict.fromkeys(("payload_series", "scaledobject_bytes", "scaledobject_series", "process_bytes",
                                    "process_series"), huge) if args.no_budgets else {}
            outcome, workers = asyncio.run(measure(f"http://127.0.0.1:{port}/metrics", args.max_payload_bytes, limits))
            took = time.monotonic() - t0
            main_peak = peak_mib()
        finally:
            server.kill()
            server.wait()
    print(f"payload: {args.series:,} series, {size / 2**20:.1f} MiB; maxPayloadBytes {args.max_payload_bytes:,}")
    print(f"outcome: {outcome} ({took:.1f} s)")
    shown = ", ".join(f"{w:.0f} MiB" for w in workers) or "none started"
    print(f"peak RSS: scaler process {main_peak:.0f} MiB (before the read {base:.0f} MiB); parse workers: {shown}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
