"""``python -m tests.cluster up|down|status|token|build``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from . import keda, kueue, volcano
from .binaries import BinariesMissing, locate
from .fleet import DEFAULT_POOLS, default_fleet
from .harness import STATE_FILE, Cluster, ClusterConfig, ClusterStartError, default_state_dir

log = logging.getLogger("tests.cluster")


def _pool_overrides(values: list[str]) -> dict[str, int]:
    overrides: dict[str, int] = {}
    for value in values:
        name, _, count = value.partition("=")
        if not count.isdigit():
            raise SystemExit(f"--pool expects NAME=COUNT, got {value!r}")
        overrides[name] = int(count)
    return overrides


def _up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    if (state_dir / STATE_FILE).exists():
        existing = Cluster.attach(state_dir)
        if existing.healthy():
            log.info("cluster already running", extra={"state_dir": str(state_dir)})
            try:
                if args.keda:
                    keda.start(existing, build=args.build, within=args.timeout)
                if args.volcano:
                    volcano.start(existing, build=args.build, within=args.timeout)
                if args.kueue:
                    kueue.start(existing, build=args.build, within=args.timeout)
            except (BinariesMissing, RuntimeError, TimeoutError) as exc:
                print(f"error: {exc}\n(process logs: {state_dir / 'logs'})", file=sys.stderr)
                return 1
            print(existing.kubeconfig)
            return 0
        log.warning("replacing a stopped or unhealthy cluster", extra={"state_dir": str(state_dir)})
        existing.stop()
    pools = default_fleet(args.nodes, _pool_overrides(args.pool))
    try:
        cluster = Cluster.start(
            ClusterConfig(pools=pools, state_dir=state_dir, build_missing=args.build, startup_timeout=args.timeout,
                          keda=args.keda, kueue=args.kueue, hpa_sync_period=args.hpa_sync_period)
        )
    except (BinariesMissing, ClusterStartError, RuntimeError, TimeoutError) as exc:
        print(f"error: {exc}\n(process logs: {state_dir / 'logs'})", file=sys.stderr)
        return 1
    if args.volcano:
        try:
            volcano.start(cluster, build=args.build, within=args.timeout)
        except (BinariesMissing, RuntimeError, TimeoutError) as exc:
            print(f"error: {exc}\n(process logs: {state_dir / 'logs'}; the cluster is stopped)", file=sys.stderr)
            cluster.stop()
            return 1
    print(
        f"started in {cluster.info['startup_seconds']}s: {sum(p.count for p in pools)} nodes, "
        f"logs in {state_dir / 'logs'}",
        file=sys.stderr,
    )
    print(cluster.kubeconfig)
    return 0


def _down(args: argparse.Namespace) -> int:
    if not (args.state_dir / STATE_FILE).exists():
        print(f"no cluster state in {args.state_dir}", file=sys.stderr)
        return 0
    Cluster.attach(args.state_dir).stop()
    print(f"stopped; removed {args.state_dir}", file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    if not (args.state_dir / STATE_FILE).exists():
        print(json.dumps({"running": False, "state_dir": str(args.state_dir)}))
        return 3
    cluster = Cluster.attach(args.state_dir)
    healthy = cluster.healthy(within=2)
    body = {"running": cluster.alive(), "healthy": healthy, **cluster.status()}
    keda_status = keda.status(cluster) if healthy else None
    if keda_status is not None:
        body["keda"] = keda_status
        healthy = healthy and keda_status["healthy"]
    volcano_status = volcano.status(cluster) if healthy else None
    if volcano_status is not None:
        body["volcano"] = volcano_status
        healthy = healthy and volcano_status["healthy"]
    kueue_status = kueue.status(cluster) if healthy else None
    if kueue_status is not None:
        body["kueue"] = kueue_status
        healthy = healthy and kueue_status["healthy"]
    print(json.dumps(body, indent=2))
    return 0 if healthy else 3


def _token(args: argparse.Namespace) -> int:
    cluster = Cluster.attach(args.state_dir)
    print(asyncio.run(cluster.mint_token(args.namespace, args.service_account, expiration_seconds=args.expiration)))
    return 0


def _build(args: argparse.Namespace) -> int:
    binaries = locate(build=True)
    for path in binaries.all():
        print(path)
    if args.keda:
        kb = keda.locate(build=True)
        print(kb.operator)
        print(kb.adapter)
    if args.volcano:
        vb = volcano.locate(build=True)
        print(vb.scheduler)
        print(vb.controller_manager)
    if args.kueue:
        print(kueue.locate(build=True))
    return 0


def _setup_logging(level: str) -> None:
    try:
        from warmscale.logs import setup_logging
    except ImportError:  # the harness does not need the package installed
        logging.basicConfig(level=level.upper(), stream=sys.stderr)
    else:
        setup_logging(level)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, default=default_state_dir(), help="cluster state directory (default: %(default)s)"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start a cluster in the background; prints the kubeconfig path last")
    up.add_argument("--nodes", type=int, default=2, help="nodes per pool (default 2)")
    up.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME=COUNT",
        help=f"size of one pool ({', '.join(p.name for p in DEFAULT_POOLS)}); 0 drops it",
    )
    up.add_argument("--build", action="store_true", help="build missing binaries first")
    up.add_argument("--keda", action="store_true",
                    help="also run the real KEDA operator + metrics adapter (also on an already running cluster)")
    up.add_argument("--volcano", action="store_true",
                    help="also run the real Volcano scheduler + controller-manager (also on a running cluster)")
    up.add_argument("--kueue", action="store_true",
                    help="also run the real Kueue controller (v0.19.2; also on an already running cluster)")
    up.add_argument("--hpa-sync-period", default="5s", help="controller-manager HPA sync period (default 5s)")
    up.add_argument("--timeout", type=float, default=180.0, help="startup timeout in seconds")
    up.set_defaults(func=_up)

    sub.add_parser("down", help="stop the cluster and remove its state").set_defaults(func=_down)
    sub.add_parser("status", help="print what runs (exit 3 unless running and healthy)").set_defaults(func=_status)
    build = sub.add_parser("build", help="build missing binaries, print their paths")
    build.add_argument("--keda", action="store_true", help="also KEDA (operator, metrics adapter)")
    build.add_argument("--volcano", action="store_true", help="also Volcano (scheduler, controller-manager)")
    build.add_argument("--kueue", action="store_true", help="also Kueue (the controller)")
    build.set_defaults(func=_build)

    token = sub.add_parser("token", help="mint a TokenRequest token for a ServiceAccount")
    token.add_argument("namespace")
    token.add_argument("service_account")
    token.add_argument("--expiration", type=int, default=3600)
    token.set_defaults(func=_token)

    args = parser.parse_args(argv)
    _setup_logging("debug" if args.verbose else "info")
    return int(args.func(args))
