"""Reaction time: queue onset at an engine -> the scaler's StreamIsActive push, and load onset ->
the Deployment's replicas changed through the real KEDA and HPA.

    python -m warmscale.benchmarks.reaction [--trials 10] [--no-prometheus] [--no-keda] [--keda-trials 5]

Measured: a fake vLLM engine (aiohttp) serves the idle sample payload; a real ``warmscale scaler``
process (real signal sources, in-memory store) tracks a ScaledObject with ``scaleToZero: "true"``
whose ``endpoints`` is that engine; a KEDA-like client holds ``StreamIsActive`` open. Each trial
switches the payload at a random moment to the same payload with 6 requests waiting (queue onset)
and times the push of ``true``; then switches back and times the push of ``false``. Default scrape
interval (1 s), so the expected reaction is about half an interval plus one scrape.

Modelled (clearly labelled): KEDA + Prometheus defaults (Prometheus scrape 15 s, KEDA
pollingInterval 30 s). The onset lands uniformly within a scrape interval and the scrape uniformly
within a polling interval, so reaction = U(0,15) + U(0,30) + query latency; the query latency is
*measured* against a real Prometheus scraping the same engine. Distribution by Monte Carlo.

Measured through the real KEDA v2.21.0 + HPA on the local cluster (``benchmarks/reaction_keda.py``):
queue onset -> replicas 0 -> 1 (push activation) and load onset -> replicas 1 -> N (metrics adapter
+ HPA). Needs the cached cluster and KEDA binaries (``bash .ci/build-cluster.sh``); without them this
part is reported as not run, with the reason.

Prints a table and writes ``benchmarks/results/reaction.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from typing import Any

from warmscale.benchmarks.rpc_load import PROMQL, ROOT, SAMPLES, ScalerProcess, free_port, percentile

RESULTS = ROOT / "benchmarks" / "results"
SCRAPE_S = 15.0
POLL_S = 30.0


async def measure_push(trials: int) -> dict[str, Any]:
    import grpc

    from warmscale.localcluster.servers import FakeEngine
    from warmscale.proto import externalscaler_pb2 as pb
    from warmscale.proto import externalscaler_pb2_grpc as pb_grpc

    idle = (SAMPLES / "vllm-idle.prom").read_text()
    load = queue_onset(idle, waiting=6)
    engine = FakeEngine(idle)
    port = free_port()
    scaler = ScalerProcess([sys.executable, "-m", "warmscale.cli", "--log-level", "warning", "scaler",
                            "--host", "127.0.0.1", "--grpc-port", str(port), "--metrics-port", "-1"], port)
    meta = {"endpoints": engine.url, "engine": "vllm", "scaleToZero": "true", "minReplicas": "0",
            "idleWindowSeconds": "0", "maxReplicas": "10"}
    onsets: list[float] = []
    back: list[float] = []
    try:
        await scaler.ready()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ExternalScalerStub(ch)
            stream = stub.StreamIsActive(pb.ScaledObjectRef(name="reaction", namespace="bench", scalerMetadata=meta))
            first = await asyncio.wait_for(stream.read(), 10)
            if first.result:  # wait for the idle verdict
                msg = await asyncio.wait_for(stream.read(), 10)
                assert msg.result is False
            for _ in range(trials):
                await asyncio.sleep(1.0 + random.random())
                t0 = time.perf_counter()
                engine.serve(load)
                msg = await asyncio.wait_for(stream.read(), 10)
                onsets.append(time.perf_counter() - t0)
                assert msg.result is True
                await asyncio.sleep(0.5 + random.random())
                t0 = time.perf_counter()
                engine.serve(idle)
                msg = await asyncio.wait_for(stream.read(), 10)
                back.append(time.perf_counter() - t0)
                assert msg.result is False
            stream.cancel()
    finally:
        scaler.stop()
        engine.close()
    return {"onset_to_push_s": onsets, "idle_to_push_s": back}


def queue_onset(payload: str, waiting: int) -> str:
    """The idle payload with ``waiting`` requests queued (only the waiting gauge changes)."""
    out = []
    for line in payload.splitlines():
        if line.startswith("vllm:num_requests_waiting{") and line.endswith(" 0.0"):
            line = line[: -len("0.0")] + f"{waiting}.0"
        out.append(line)
    return "\n".join(out) + "\n"


def measure_prometheus_query(n: int = 200) -> list[float]:
    import urllib.parse
    import urllib.request

    from warmscale.localcluster.servers import FakeEngine, PrometheusServer

    engine = FakeEngine((SAMPLES / "vllm-v1-load.prom").read_text())
    prom = PrometheusServer([engine.target], scrape_interval="1s")
    try:
        prom.start()
        prom.wait_for(PROMQL)
        url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": PROMQL})
        lat = []
        for _ in range(n):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
            lat.append(time.perf_counter() - t0)
            time.sleep(0.01)
        return lat
    finally:
        prom.close()
        engine.close()


def model_keda_prometheus(query_lat: list[float], samples: int = 200_000) -> list[float]:
    rng = random.Random(1)
    return [rng.uniform(0, SCRAPE_S) + rng.uniform(0, POLL_S) + rng.choice(query_lat) for _ in range(samples)]


def stats(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "mean_s": round(statistics.fmean(xs), 3),
        "p50_s": round(percentile(xs, 50), 3),
        "p95_s": round(percentile(xs, 95), 3),
        "max_s": round(max(xs), 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--no-prometheus", action="store_true")
    ap.add_argument("--no-keda", action="store_true", help="leave out the real-KEDA paths")
    ap.add_argument("--keda-trials", type=int, default=5)
    ap.add_argument("--hpa-sync-period", default="1s", help="HPA sync period of the local cluster (real-KEDA paths)")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    pushed = asyncio.run(measure_push(args.trials))
    rows = [
        {"path": "warmscale StreamIsActive push (measured)", **stats(pushed["onset_to_push_s"])},
        {"path": "warmscale push back to idle (measured)", **stats(pushed["idle_to_push_s"])},
    ]
    result: dict[str, Any] = {"benchmark": "reaction", "command": "python -m warmscale.benchmarks.reaction " + " ".join(
        sys.argv[1:]), "goal": "onset -> push <= 1 s", "scrape_interval_s": 1.0, "raw": pushed}
    if not args.no_prometheus:
        qlat = measure_prometheus_query()
        modelled = model_keda_prometheus(qlat)
        rows.append({"path": "KEDA+Prometheus defaults (MODELLED)", **stats(modelled)})
        result["prometheus_query_latency"] = stats(qlat)
        result["model"] = (f"U(0,{SCRAPE_S:g}) scrape delay + U(0,{POLL_S:g}) KEDA polling delay + measured "
                           "PromQL query latency (Monte Carlo, 200k samples)")
    if not args.no_keda:
        from warmscale.localcluster.binaries import BinariesMissing

        try:
            from warmscale.benchmarks.reaction_keda import measure

            keda = measure(args.keda_trials, args.hpa_sync_period)
        except BinariesMissing as exc:
            print(f"real-KEDA paths not run: {exc}", file=sys.stderr)
            result["keda_not_run"] = str(exc)
        else:
            sync = keda["hpa_sync_period"]
            rows.append({"path": "onset -> replicas 0->1, real KEDA push", **stats(keda["zero_to_one_s"])})
            rows.append({"path": f"onset -> replicas 1->N, real KEDA+HPA ({sync})", **stats(keda["one_to_n_s"])})
            result["keda"] = keda
    result["rows"] = rows
    result["loadavg_before"] = [round(x, 2) for x in load_before]
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    head = f"{'path':<48}{'n':>8}{'mean s':>9}{'p50 s':>9}{'p95 s':>9}{'max s':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['path']:<48}{r['n']:>8}{r['mean_s']:>9.3f}{r['p50_s']:>9.3f}{r['p95_s']:>9.3f}{r['max_s']:>9.3f}")
    if "prometheus_query_latency" in result:
        q = result["prometheus_query_latency"]
        print(f"(measured PromQL query latency: p50 {q['p50_s'] * 1000:.2f} ms, p95 {q['p95_s'] * 1000:.2f} ms)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "reaction.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
