"""``warmscale demo --cluster``: a cold and a warm scale-up side by side through the real KEDA.

Runs from a checkout (the cluster harness, ``warmscale/localcluster``, builds from ``.ci/`` and
installs CRDs from ``testbed/``): the local control plane (etcd, kube-apiserver, controller-manager
with the HPA, scheduler, KWOK) and the real KEDA v2.21.0
operator + metrics adapter, built from Go modules on first use (``.ci/build-cluster.sh``, cached in
``~/.cache/warmscale``; progress is printed while it builds) and started here; two ``warmscale
scaler`` processes; simulated vLLM engines listening on the KWOK pods' IPs; the warm-pool
controller for the warm Deployment. Both Deployments carry 5 requests in flight on 1 replica; then
the load steps to 35 on both at the same moment, the scalers decide 4, KEDA and the HPA scale both,
and the replicas start -- cold (no warm pool: provision, pull, download, load) or warm (placeholder
capacity, image and weights already on the node). Start-up delays come from the startup model
(``warmpool/startup_model.py``, profile ``8b-h100-fastload``) x ``--cluster-time-factor``.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _checkout() -> None:
    if not (REPO / ".ci" / "build-cluster.sh").exists() or not (REPO / "testbed").exists():
        raise SystemExit("warmscale demo --cluster runs from a checkout of the repository "
                         "(it needs .ci/build-cluster.sh and testbed/)")


def ensure_binaries() -> None:
    """Build the cluster and KEDA binaries if any is missing, printing progress."""
    from warmscale.localcluster import keda
    from warmscale.localcluster.binaries import BUILD_SCRIPT, Binaries

    if not Binaries.expected().missing() and not keda.KedaBinaries.expected().missing():
        return
    print("first run: building the local Kubernetes control plane, KWOK and KEDA from Go modules\n"
          "(about 20 minutes on 2 cores; cached in ~/.cache/warmscale, later runs start in seconds)",
          flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO)
    current = ["starting"]

    def beat() -> None:
        while proc.poll() is None:
            time.sleep(30)
            if proc.poll() is None:
                print(f"  ... {int(time.monotonic() - t0) // 60} min {int(time.monotonic() - t0) % 60:02d} s: "
                      f"{current[0]}", flush=True)

    threading.Thread(target=beat, daemon=True).start()
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if "build-cluster:" in line:
            current[0] = line.split("build-cluster:", 1)[1].strip()
            print(f"  {current[0]}", flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"the build failed (exit {proc.returncode}); run bash {BUILD_SCRIPT} to see why")


def run_cluster(args: argparse.Namespace) -> int:
    _checkout()
    ensure_binaries()
    from dataclasses import replace

    from warmscale.localcluster.fleet import CPU
    from warmscale.localcluster.kedarun import KedaRun

    t0 = time.monotonic()
    print("starting the local cluster and the real KEDA ...", flush=True)
    with KedaRun.start(hpa_sync_period="1s", pools=[replace(CPU, count=1)]) as run:
        print(f"cluster and KEDA {run.cluster.info['keda']['version']} ready in {time.monotonic() - t0:.0f} s",
              flush=True)
        summary = asyncio.run(_demo(run, args))
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)
    return 0 if summary else 1


async def _demo(run: Any, args: argparse.Namespace) -> dict[str, Any]:
    from warmscale.localcluster.coldwarm import CaseHooks, run_case
    from warmscale.warmpool.cli import make_api_client
    from warmscale.warmpool.startup_model import profile

    prof = profile("8b-h100-fastload")
    factor = float(args.cluster_time_factor)
    case_args = argparse.Namespace(from_replicas=1, to_replicas=4, time_factor=factor, timeout=240.0)
    acts: dict[str, Any] = {}
    arrived = asyncio.Event()
    waiting: list[str] = []
    go_at: list[float] = []

    def hooks(label: str) -> CaseHooks:
        async def before() -> None:
            waiting.append(label)
            if len(waiting) == 2:
                go_at.append(time.monotonic())
                print(f"{'':>6}  both set up; load 5 -> 35 requests in flight on both now",
                      flush=True)
                arrived.set()
            await arrived.wait()

        return CaseHooks(on_actuation=lambda act: acts.__setitem__(label, act), before_scale_up=before)

    api = await make_api_client(str(run.cluster.kubeconfig))
    scalers = {label: run.scaler() for label in ("cold", "warm")}
    print("setting up: 2 x 4 one-GPU nodes, 2 Deployments (1 replica each), warm pool for 'warm' "
          "(3 placeholders, images pulled, weights staged), 2 ScaledObjects", flush=True)
    print(f"{'t s':>6}  {'cold replicas (ready/spec)':>28}  {'warm replicas (ready/spec)':>28}", flush=True)
    series: dict[str, list[tuple[float, int, int]]] = {"cold": [], "warm": []}
    stop = asyncio.Event()

    def sample() -> None:
        t = time.monotonic() - go_at[0]
        row = []
        for label in ("cold", "warm"):
            a = acts.get(label)
            spec, ready = (a.timeline.spec or 0, a.timeline.ready or 0) if a else (0, 0)
            if label in finished:  # the case has ended: all its replicas were Ready
                spec = ready = case_args.to_replicas
            series[label].append((t, spec, ready))
            row.append(f"{ready}/{spec}")
        if not args.quiet:
            print(f"{t:6.0f}  {row[0]:>28}  {row[1]:>28}", flush=True)

    async def table() -> None:
        while not stop.is_set():
            await asyncio.sleep(2.0)
            if go_at:
                sample()

    finished: set[str] = set()

    async def case(label: str) -> dict[str, Any]:
        out = await run_case(api, prof, label == "warm", case_args, run, scalers[label].address, hooks(label))
        finished.add(label)
        return out

    printer = asyncio.create_task(table())
    try:
        cold, warm = await asyncio.gather(case("cold"), case("warm"))
    finally:
        stop.set()
        printer.cancel()
        await asyncio.gather(printer, return_exceptions=True)
        await api.close()
    sample()  # the end: the last case's replicas all Ready (the 2 s table would miss it)
    summary = {"profile": prof.name, "time_factor": factor, "cold": _brief(cold), "warm": _brief(warm)}
    print("\n| case | time-to-Ready p50 (model s) | max | load onset -> replicas changed (wall s) |")
    print("|---|---:|---:|---:|")
    for label in ("cold", "warm"):
        b = summary[label]
        print(f"| {label} | {b['p50_s']} | {b['max_s']} | {b['onset_to_replicas_changed_wall_s']} |")
    if args.plot:
        path = args.plot if args.plot != "warmscale-demo.png" else "warmscale-cluster-demo.png"
        _plot(series, factor, path)
        print(f"wrote {path}")
    return summary


def _brief(case: dict[str, Any]) -> dict[str, Any]:
    ttr = case["time_to_ready_model_s"]
    return {"p50_s": ttr.get("p50"), "max_s": ttr.get("max"), "states": case["states"],
            "onset_to_replicas_changed_wall_s": case["actuation"].get("onset_to_replicas_changed_wall_s")}


def _plot(series: dict[str, list[tuple[float, int, int]]], factor: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for label, color in (("cold", "tab:blue"), ("warm", "tab:orange")):
        pts = series[label]
        if not pts:
            continue
        ts = [t / factor for t, _, _ in pts]
        ax.step(ts, [r for _, _, r in pts], where="post", color=color, label=f"{label}: ready")
        ax.step(ts, [s for _, s, _ in pts], where="post", color=color, linestyle=":", label=f"{label}: spec")
    ax.set_xlabel("model seconds since the load step (wall / time factor)")
    ax.set_ylabel("replicas")
    ax.set_title("Scale 1 -> 4 through the real KEDA + HPA: cold vs warm pool")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
