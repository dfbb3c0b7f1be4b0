"""``warmscale warmpool``: run the warm-pool controller (leader-elected, graceful shutdown)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import uuid
from typing import Any

from warmscale.cliargs import UsageError, non_negative_float, port, positive_float, positive_int, readable_file
from warmscale.warmpool.cache_roots import DEFAULT_ALLOWED, parse_allow_list, parse_file_source_allow
from warmscale.warmpool.deletion_cost_writer import PASS_SECONDS as DELETION_COST_PASS_SECONDS

log = logging.getLogger("warmscale.warmpool")


def lease_namespace(args: argparse.Namespace) -> str:
    """--lease-namespace, else the (first) watched --namespace, else $POD_NAMESPACE, else ``warmscale``."""
    first = next((n.strip() for n in (args.namespace or "").split(",") if n.strip()), None)
    return str(args.lease_namespace or first or os.environ.get("POD_NAMESPACE") or "warmscale")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", type=readable_file,
                        help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    parser.add_argument("--namespace", help="watch only this namespace, or these (comma-separated); default: all. "
                        "Namespaced RBAC for them: `warmscale rbac --namespace NS[,NS...]`")
    parser.add_argument("--metrics-port", type=port(), default=9102, help="Prometheus metrics port (0: off)")
    parser.add_argument("--metrics-address", default="0.0.0.0", help="address the metrics port listens on")
    parser.add_argument("--scaler-address", default="warmscale-scaler.warmscale.svc:9090",
                        help="host:port of the scaler for owned ScaledObjects' external-push trigger")
    parser.add_argument("--stager-image",
                        default=os.environ.get("WARMSCALE_IMAGE", "ghcr.io/warmscale/warmscale:latest"),
                        help="image of the staging Jobs (runs `warmscale stage`)")
    parser.add_argument("--hot-dcgm-url", action="append", default=[], metavar="URL",
                        help="dcgm-exporter /metrics of the hot pool's nodes (repeatable): the pod-to-GPU map of "
                        "time-sliced pools without DRA (docs/hot-tier.md)")
    parser.add_argument("--redis-url", "--redis-address", dest="redis_address",
                        help="publish WarmStatus to this Redis (redis://host:port), the scaler's --redis-url; "
                        "default: log only")
    parser.add_argument("--lease-namespace", default=None,
                        help="namespace of the leader-election Lease (default: --namespace if given, else "
                        "$POD_NAMESPACE, else warmscale); it must exist, else the controller exits with an error")
    parser.add_argument("--lease-name", default="warmscale-warmpool", help="name of the leader-election Lease")
    parser.add_argument("--lease-duration", type=positive_float, default=15.0,
                        help="seconds a leader's Lease holds without renewal before another replica takes over")
    parser.add_argument("--renew-period", type=positive_float, default=5.0,
                        help="seconds between the leader's Lease renewals (less than --lease-duration)")
    parser.add_argument("--identity", default=None, help="leader-election identity (default: host-pid-random)")
    parser.add_argument("--resync", type=positive_float, default=30.0, help="seconds between full reconciles")
    parser.add_argument("--deletion-cost-seconds", type=non_negative_float, default=DELETION_COST_PASS_SECONDS,
                        help="seconds between passes that set controller.kubernetes.io/pod-deletion-cost on enabled "
                             "Deployments' ready pods by load, so a scale-in removes the least loaded replica "
                             "(0: never; docs/warmpool.md)")
    parser.add_argument("--watch-timeout", type=positive_int, default=300,
                        help="seconds after which each watch is resumed from its resourceVersion (a compacted "
                        "version answers 410 Gone: the cache lists afresh)")
    parser.add_argument("--cache-root-allow", default=",".join(DEFAULT_ALLOWED),
                        help="comma-separated directories under which workloads' warmscale.io/cache-root may lie "
                        "(system paths are refused whatever this says)")
    parser.add_argument("--file-source-allow", default="",
                        help="comma-separated host directories under which file:// model sources may lie (default: "
                        "none, file:// is refused); system paths and cache roots are refused whatever this says")
    parser.add_argument("--webhook-port", type=port(), default=0,
                        help="serve the mutating admission webhook (prefer staged nodes) on this HTTPS port (0: off)")
    parser.add_argument("--webhook-address", default="0.0.0.0", help="address the webhook port listens on")
    parser.add_argument("--webhook-cert", type=readable_file,
                        help="serving certificate (PEM); default: a self-signed one is generated")
    parser.add_argument("--webhook-key", type=readable_file, help="private key of --webhook-cert (PEM)")
    parser.add_argument("--webhook-hosts", default="127.0.0.1,localhost",
                        help="SANs of the generated self-signed certificate (comma-separated)")
    parser.add_argument("--webhook-cert-dir", default=None,
                        help="where the generated certificate is written (its tls.crt is the caBundle)")
    parser.add_argument("--webhook-tls-secret", default=None,
                        help="serve the webhook with the certificate of this Secret in --cert-namespace, read "
                        "through the API and reloaded when it changes (what --manage-certs writes)")
    certs = parser.add_argument_group("self-managed certificates (leader only)")
    certs.add_argument("--manage-certs", action="store_true",
                       help="keep a CA and the webhook's, the scaler's and KEDA's certificates in Secrets, "
                       "rotate them before expiry and patch the webhook configuration's caBundle")
    certs.add_argument("--cert-namespace", default=os.environ.get("POD_NAMESPACE", "warmscale"),
                       help="namespace of the install (CA, webhook and scaler Secrets, the Services)")
    certs.add_argument("--keda-namespace", default="keda",
                       help="KEDA's namespace: KEDA's client certificate goes there (Secret "
                       "warmscale-keda-client-tls, read by the ClusterTriggerAuthentication); '' for none")
    certs.add_argument("--webhook-configuration", default="warmscale-webhook",
                       help="MutatingWebhookConfiguration whose caBundle is kept current ('' for none)")
    certs.add_argument("--webhook-service", default="warmscale-webhook",
                       help="Service of the webhook (its certificate's DNS names)")
    certs.add_argument("--scaler-service", default="warmscale",
                       help="Service of the scaler (its certificate's DNS names)")
    certs.add_argument("--cert-validity-hours", type=positive_float, default=90 * 24.0,
                       help="lifetime of the leaf certificates (renewed after 2/3 of it)")
    certs.add_argument("--ca-validity-days", type=positive_float, default=3650.0,
                       help="lifetime of the CA certificate")
    certs.add_argument("--webhook-cert-hosts", default="",
                       help="extra SANs of the webhook certificate (comma-separated DNS names or IPs; e.g. "
                       "127.0.0.1 when the API server calls the webhook by URL, as on the local cluster)")
    certs.add_argument("--scaler-cert-hosts", default="", help="extra SANs of the scaler's certificate")
    parser.add_argument("--trigger-authentication", default="",
                        help="ClusterTriggerAuthentication the owned ScaledObjects reference (mutual TLS to the "
                        "scaler, enableTLS: \"true\"); '' for plaintext")


async def make_api_client(kubeconfig: str | None) -> Any:
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            await config.load_kube_config(client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


def make_sink(redis_address: str | None) -> Any:
    if not redis_address:
        return None
    from warmscale.scaler.store import RedisStore

    return RedisStore(redis_address)


async def _with_waker(run: Any, api: Any, sink: Any, namespace: str | None, metrics: Any,
                      dcgm_urls: list[str] | None = None) -> None:
    """Run the controller (``run``) and, with a store to read wake intents from, the hot tier's waker
    next to it (docs/hot-tier.md, "The wake path"; ``metrics``: its WakerMetrics, made once per process
    in the controller's registry); both end together."""
    if sink is None:
        await run
        return
    import aiohttp
    from kubernetes_asyncio import client

    from warmscale.warmpool.hot.kube_source import kube_events, kube_sleepers, kube_states
    from warmscale.warmpool.hot.reconciler import HotReconciler
    from warmscale.warmpool.hot.waker import Waker
    from warmscale.warmpool.kube import EventRecorder

    core = client.CoreV1Api(api)
    async with aiohttp.ClientSession() as session:
        recorder = EventRecorder(core)
        # The pool's controller creates the sleepers and their shared claims in the watched namespaces
        # (each listed; one pass plans them together) or in all.
        reconciler = HotReconciler(api, namespace=namespace, events=recorder, dcgm=_dcgm_source(session, dcgm_urls))
        waker = Waker(sink, kube_sleepers(core, namespace, reconciler.device_of), session,
                      events=kube_events(recorder), metrics=metrics, record=kube_states(core))
        reconciler.failed, reconciler.busy = waker.failed_pods, waker.busy_pods
        reconciler.unknown = waker.expired_pods
        reconciler.bursts = getattr(sink, "get_burst_stats", None)  # `hot-standby: auto` sizing
        tasks = [asyncio.create_task(waker.run(), name="hot waker"),
                 asyncio.create_task(reconciler.run(), name="hot pool")]
        try:
            await run
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


# A dcgm-exporter read's deadline (one slow exporter delays only the hot pool's pass, every 10 s).
DCGM_TIMEOUT_S = 3.0


def _dcgm_source(session: Any, urls: list[str]) -> Any:
    """The time-sliced fallback's DCGM payloads (``--hot-dcgm-url``, repeatable), concatenated; None
    when none is configured or none answered."""
    if not urls:
        return None
    import aiohttp

    async def read() -> str | None:
        async def one(url: str) -> str:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=DCGM_TIMEOUT_S)) as r:
                r.raise_for_status()
                return str(await r.text())

        parts = await asyncio.gather(*(one(u) for u in urls), return_exceptions=True)
        texts = [p for p in parts if isinstance(p, str)]
        return "\n".join(texts) if texts else None

    return read


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from kubernetes_asyncio import client

    from warmscale.common.http_limits import serve_metrics
    from warmscale.warmpool.controller import Controller, Metrics, Options
    from warmscale.warmpool.kube import LeaderElector, LeaseNamespaceMissing

    try:
        allow = parse_allow_list(args.cache_root_allow)
        file_allow = parse_file_source_allow(getattr(args, "file_source_allow", "") or "")
    except ValueError as exc:
        log.error("bad arguments", extra={"error": str(exc)})
        print(f"warmscale warmpool: {exc}", file=sys.stderr)
        return 2
    metrics = Metrics()
    metrics_runner = None
    if args.metrics_port:  # bounded: connections capped, slow clients closed (warmscale/common/http_limits.py)
        metrics_runner, _ = await serve_metrics(metrics.registry, args.metrics_address, args.metrics_port,
                                                metrics=metrics.http)
    api = await make_api_client(args.kubeconfig)
    sink = make_sink(args.redis_address)
    waker_metrics = None
    if sink is not None:  # the hot tier's waker runs next to the leading controller (docs/hot-tier.md)
        from warmscale.warmpool.hot.waker import WakerMetrics

        waker_metrics = WakerMetrics(metrics.registry)
    identity = args.identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    opts = Options(namespace=args.namespace, scaler_address=args.scaler_address, stager_image=args.stager_image,
                   resync_s=args.resync, cache_root_allow=allow, file_source_allow=file_allow,
                   watch_timeout_s=max(1, args.watch_timeout), deletion_cost_s=args.deletion_cost_seconds,
                   trigger_authentication=getattr(args, "trigger_authentication", "") or "")
    lease_ns = lease_namespace(args)
    elector = LeaderElector(client.CoordinationV1Api(api), lease_ns, args.lease_name, identity,
                            lease_duration=args.lease_duration, renew_period=args.renew_period)

    async def lead() -> None:
        metrics.leader.set(1)
        cert_task = None
        if getattr(args, "manage_certs", False):
            cert_task = asyncio.create_task(cert_manager(args, api, metrics.certs).run(), name="certs")
        try:
            await _with_waker(Controller(api, opts, sink=sink, metrics=metrics).run(), api, sink, args.namespace,
                              waker_metrics, args.hot_dcgm_url)
        finally:
            metrics.leader.set(0)
            if cert_task is not None:
                cert_task.cancel()
                await asyncio.gather(cert_task, return_exceptions=True)

    webhook_task = asyncio.create_task(run_webhook(args, api, stop, metrics.webhook, metrics.http), name="webhook") \
        if getattr(args, "webhook_port", 0) else None
    try:
        await elector.run(lead, stop)
    except LeaseNamespaceMissing as exc:
        log.error("cannot elect a leader", extra={"error": str(exc), "lease_namespace": lease_ns})
        print(f"warmscale warmpool: {exc}", file=sys.stderr)
        return 2
    finally:
        if webhook_task is not None:
            webhook_task.cancel()
            await asyncio.gather(webhook_task, return_exceptions=True)
        if sink is not None and hasattr(sink, "close"):
            await sink.close()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        await api.close()
    return 0


def cert_manager(args: argparse.Namespace, api: Any, metrics: Any = None) -> Any:
    import datetime as dt

    from warmscale.warmpool.certs import CertManager, CertSpec

    spec = CertSpec(namespace=args.cert_namespace, webhook_service=args.webhook_service,
                    scaler_service=args.scaler_service, keda_namespace=args.keda_namespace,
                    leaf_validity=dt.timedelta(hours=args.cert_validity_hours),
                    ca_validity=dt.timedelta(days=args.ca_validity_days),
                    extra_webhook_names=tuple(h for h in args.webhook_cert_hosts.split(",") if h),
                    extra_scaler_names=tuple(h for h in args.scaler_cert_hosts.split(",") if h))
    return CertManager(api, spec, webhook_configuration=args.webhook_configuration or None,
                       metrics=metrics)


async def run_webhook(args: argparse.Namespace, api: Any, stop: asyncio.Event, metrics: Any = None,
                      http_metrics: Any = None) -> None:
    """The webhook on every replica; with --webhook-tls-secret it starts once that Secret exists (the
    leader's certificate manager writes it; until then failurePolicy Ignore admits pods unchanged).

    ``metrics``: reviews and the certificate state (:class:`WebhookMetrics`); ``http_metrics``: the
    connection bounds' counters (both on the controller's registry, ``controller.Metrics``)."""
    from warmscale.common.http_limits import HttpMetrics
    from warmscale.warmpool.webhook import WebhookMetrics

    metrics = metrics or WebhookMetrics()
    http_metrics = http_metrics or HttpMetrics()
    if not args.webhook_tls_secret:
        runner = await start_webhook(args, api, metrics, http_metrics)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
        return
    from warmscale.warmpool.certs import SecretCertificate

    source = SecretCertificate(api, args.cert_namespace, args.webhook_tls_secret, metrics=metrics)
    if not await source.wait_ready(stop):
        return
    runner = await _serve_webhook(args, api, metrics, http_metrics, context=source.context)
    try:
        await source.run(stop)
    finally:
        await runner.cleanup()


async def _serve_webhook(args: argparse.Namespace, api: Any, metrics: Any, http_metrics: Any, *,
                         cert: str | None = None, key: str | None = None, context: Any = None) -> Any:
    """The webhook server as every mode runs it (one place for its options: the host-path allow-lists, the
    stager image, the metrics)."""
    from warmscale.warmpool.webhook import WorkloadLister
    from warmscale.warmpool.webhook import serve as serve_webhook

    return await serve_webhook(WorkloadLister(api), args.webhook_port, cert, key, host=args.webhook_address,
                               image=args.stager_image, context=context, metrics=metrics, http_metrics=http_metrics,
                               **_path_policy(args))


async def start_webhook(args: argparse.Namespace, api: Any, metrics: Any = None, http_metrics: Any = None) -> Any:
    """Serve the webhook on every replica (not only the leader): it reads workloads from the API itself."""
    import tempfile
    from pathlib import Path

    from warmscale.warmpool.webhook import self_signed

    cert, key = args.webhook_cert, args.webhook_key
    if not cert or not key:
        directory = Path(args.webhook_cert_dir or tempfile.mkdtemp(prefix="warmscale-webhook-"))
        cert_path, key_path, _ = self_signed([h for h in args.webhook_hosts.split(",") if h], directory)
        cert, key = str(cert_path), str(key_path)
        log.info("self-signed webhook certificate", extra={"cert": cert})
    return await _serve_webhook(args, api, metrics, http_metrics, cert=cert, key=key)


def _path_policy(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """The host paths the webhook may mount: the same allow-lists as the controller's (serve checked them)."""
    return {"allowed_roots": parse_allow_list(args.cache_root_allow),
            "file_sources": parse_file_source_allow(getattr(args, "file_source_allow", "") or "")}


def run(args: argparse.Namespace) -> int:
    if args.renew_period >= args.lease_duration:
        raise UsageError(f"--renew-period {args.renew_period:g} must be less than --lease-duration "
                         f"{args.lease_duration:g}")
    if bool(args.webhook_cert) != bool(args.webhook_key):
        raise UsageError("--webhook-cert and --webhook-key go together")

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await serve(args, stop)

    return asyncio.run(main())
