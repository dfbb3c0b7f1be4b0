"""Prometheus metrics of the scaler (all ``warmscale_``) and the HTTP endpoint serving them.

Everything hangs off one :class:`prometheus_client.CollectorRegistry` owned by the server instance
(no global registry), so several servers can live in one process (tests) without colliding.

HTTP (``--metrics-port``): ``/metrics`` (Prometheus text), ``/decisions`` (the bounded decision log
as JSON; ``?namespace=&name=&limit=`` filter it), ``/healthz``.

The HTTP server is bounded (the controller's listener, :class:`warmpool.http_limits.BoundedSite`): at
most :data:`HTTP_MAX_CONNECTIONS` connections (more are closed at once, counted in
``warmscale_http_connections_refused_total``), a connection that sends no complete request within
:data:`HTTP_IDLE_SECONDS` (after connecting or after its last response: a trickling slow client
included) is closed, and a response not taken by the client within :data:`HTTP_RESPONSE_SECONDS`
closes its connection. ``/metrics`` and ``/decisions`` name every tracked tenant (namespaces,
ScaledObjects, counts): ``--metrics-host`` binds them to one address and ``--metrics-token-file``
requires ``Authorization: Bearer <token>`` (``/healthz`` stays open for the kubelet's probes).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from warmscale import buildinfo
from warmscale.common.http_limits import BoundedSite, ConnectionLimits, HttpMetrics, make_runner
from warmscale.scaler.decision_log import DecisionLog
from warmscale.signals.redact import redact, redact_value

# The ScaledObject's label is KEDA's own name for it (keda_scaler_metrics_value{scaledObject=...}), and the
# warm-pool controller's series use the same one: one join key across KEDA, the scaler and the controller.
SO_LABEL = "scaledObject"
SO_LABELS = ("namespace", SO_LABEL)
RPC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5)


class ScalerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        # Inputs, per ScaledObject.
        self.waiting = Gauge("warmscale_waiting_requests", "Requests waiting in the engines (known replicas).",
                             SO_LABELS, registry=r)
        self.running = Gauge("warmscale_running_requests", "Requests running in the engines (known replicas).",
                             SO_LABELS, registry=r)
        self.queue = Gauge("warmscale_gateway_queue_length", "Requests in the gateway queue.", SO_LABELS, registry=r)
        self.kv_usage = Gauge("warmscale_kv_cache_usage_ratio", "Highest KV-cache usage (0..1) of the known replicas.",
                              SO_LABELS, registry=r)
        self.ttft = Gauge("warmscale_ttft_quantile_seconds", "Windowed TTFT at the configured quantile.",
                          SO_LABELS, registry=r)
        self.itl = Gauge("warmscale_itl_quantile_seconds",
                         "Windowed inter-token latency at ttftQuantile (NaN without itlSloSeconds or ITL data).",
                         SO_LABELS, registry=r)
        self.known = Gauge("warmscale_known_replicas", "Replicas whose signal is known.", SO_LABELS, registry=r)
        self.unknown = Gauge("warmscale_unknown_replicas", "Replicas whose signal is unknown (stale, error).",
                             SO_LABELS, registry=r)
        self.signal_age = Gauge("warmscale_signal_age_seconds", "Age of the oldest known replica signal.",
                                SO_LABELS, registry=r)
        self.scrape_errors = Counter("warmscale_scrape_errors_total",
                                     "Snapshot reads that failed or timed out, and per-source errors.",
                                     SO_LABELS, registry=r)
        # Outputs.
        self.ttft_slo = Gauge("warmscale_ttft_slo_seconds",
                              "The ScaledObject's TTFT SLO (ttftSloSeconds; NaN if unset).", SO_LABELS, registry=r)
        self.itl_slo = Gauge("warmscale_itl_slo_seconds",
                             "The ScaledObject's inter-token latency SLO (itlSloSeconds; NaN if unset).",
                             SO_LABELS, registry=r)
        self.ready = Gauge("warmscale_ready_replicas", "Ready replicas the policy counted.", SO_LABELS, registry=r)
        self.starting = Gauge("warmscale_starting_replicas", "Replicas still starting (counted as capacity).",
                              SO_LABELS, registry=r)
        self.time_to_ready = Gauge("warmscale_time_to_ready_seconds",
                                   "Look-ahead: expected time-to-ready of a new replica (measured or configured).",
                                   SO_LABELS, registry=r)
        self.desired = Gauge("warmscale_desired_replicas", "Replica count the policy decided.", SO_LABELS, registry=r)
        self.active = Gauge("warmscale_active", "1 when IsActive answers true.", SO_LABELS, registry=r)
        self.metric_value = Gauge("warmscale_metric_value", "Value reported in GetMetrics (HPA AverageValue input).",
                                  SO_LABELS, registry=r)
        self.decisions = Counter("warmscale_decisions_total", "Decisions computed, by the rule that set them.",
                                 (*SO_LABELS, "reason"), registry=r)
        self.decision_age = Gauge("warmscale_decision_timestamp_seconds", "Unix time of the latest decision.",
                                  SO_LABELS, registry=r)
        self.degraded = Gauge("warmscale_store_degraded",
                              "1 while this instance decides locally: the store is unreachable, not writable, "
                              "or serves a stale decision.", SO_LABELS, registry=r)
        self.leader = Gauge("warmscale_lease_held", "1 while this instance computes the ScaledObject's decision.",
                            SO_LABELS, registry=r)
        self.slo_attainment = Gauge("warmscale_slo_attainment_ratio",
                                    "Share of requests within the SLO (slo: ttft or itl) over the window (5m, 1h, 1d), "
                                    "from the engines' histograms since this scaler started tracking; NaN: none.",
                                    (*SO_LABELS, "slo", "window"), registry=r)
        self.compute_seconds = Histogram("warmscale_decision_seconds", "Time to read a snapshot and decide.",
                                         buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
                                         registry=r)
        # Server.
        self.rpc_seconds = Histogram("warmscale_rpc_duration_seconds", "Unary RPC latency by method and status.",
                                     ("method", "code"), buckets=RPC_BUCKETS, registry=r)
        self.streams = Gauge("warmscale_open_streams", "Open server streams by method.", ("method",), registry=r)
        self.trackers = Gauge("warmscale_trackers", "ScaledObjects tracked by this instance.", registry=r)
        self.store_errors = Counter("warmscale_store_errors_total", "Failed store operations.", ("op",), registry=r)
        # Onset between ticks (scaler/onset.py): ticks started early by the fast poll of a cold queue.
        self.onset_ticks = Counter("warmscale_onset_ticks_total",
                                   "Ticks started at once by the fast poll of a cold workload's queues (an onset).",
                                   registry=r)
        # Next-layer diagnosis (scaler.advice): episodes within the window of each finding that repeated.
        self.advice = Gauge("warmscale_advice",
                            "Next-layer findings that repeated (episodes within the window): see `warmscale advise`.",
                            (*SO_LABELS, "finding"), registry=r)
        self.build_info = buildinfo.register(r, "scaler")

    PER_SO = ("waiting", "running", "queue", "kv_usage", "ttft", "ttft_slo", "itl", "itl_slo", "known", "unknown",
              "signal_age", "scrape_errors", "ready", "starting", "time_to_ready", "desired", "active", "metric_value",
              "decision_age", "leader", "degraded")

    def forget(self, namespace: str, name: str) -> None:
        """Drop a ScaledObject's series (its tracker went idle)."""
        namespace, name = redact(namespace), redact(name)  # labels are created redacted
        for attr in self.PER_SO:
            metric = getattr(self, attr)
            try:
                metric.remove(namespace, name)
            except KeyError:
                pass
        for labels in [tuple(k) for k in self.slo_attainment._metrics]:
            if labels[:2] == (namespace, name):
                self.slo_attainment.remove(*labels)
        for labels in list(self._decision_label_sets()):
            if labels[:2] == (namespace, name):
                try:
                    self.decisions.remove(*labels)
                except KeyError:
                    pass

    def _decision_label_sets(self) -> list[tuple[str, ...]]:
        return [tuple(k) for k in self.decisions._metrics]

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


log = logging.getLogger("warmscale.scaler.metrics")

# Connections the HTTP endpoint holds at once: Prometheus (a few replicas), the kubelet's probes,
# operators; 2,000 slow clients were held indefinitely before.
HTTP_MAX_CONNECTIONS = 256
# A connection must complete a request this long after connecting or after its last response
# (aiohttp's keep-alive timeout, which also closes a client trickling its headers). Prometheus keeps
# its connection across scrapes only when it scrapes more often than this; otherwise it reconnects.
HTTP_IDLE_SECONDS = 15.0
# Longest a response may take to be written (a client that does not read /metrics holds nothing).
HTTP_RESPONSE_SECONDS = 30.0


class BearerToken:
    """``--metrics-token-file``: the token a request must carry, re-read when the file changes (a
    mounted Secret is updated in place)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._token = b""
        self.read()

    def read(self) -> bytes:
        st = os.stat(self.path)
        stamp = (st.st_mtime, st.st_size)
        if stamp != self._stamp:
            with open(self.path, "rb") as f:
                token = f.read().strip()
            if not token:
                raise ValueError(f"--metrics-token-file {self.path}: empty")
            self._token, self._stamp = token, stamp
        return self._token

    def allows(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        try:
            token = self.read()
        except (OSError, ValueError) as exc:  # keep the last one read
            log.warning("metrics token file unreadable; keeping the last token", extra={"error": str(exc)})
            token = self._token
        return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token)


async def _send(request: web.Request, body: bytes, content_type: str, status: int = 200) -> web.StreamResponse:
    """Write a response within HTTP_RESPONSE_SECONDS, else close the connection."""
    resp = web.StreamResponse(status=status, headers={"Content-Type": content_type})
    resp.content_length = len(body)
    try:
        async with asyncio.timeout(HTTP_RESPONSE_SECONDS):
            await resp.prepare(request)
            await resp.write(body)
            await resp.write_eof()
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
    return resp


async def start_http(
    host: str,
    port: int,
    metrics: ScalerMetrics,
    decisions: DecisionLog,
    healthy: Callable[[], bool] = lambda: True,
    extra: Callable[[], dict[str, Any]] | None = None,
    token: BearerToken | None = None,
    max_connections: int = HTTP_MAX_CONNECTIONS,
) -> tuple[web.AppRunner, int]:
    """Serve ``/metrics``, ``/decisions`` and ``/healthz`` (bounded, see the module docstring); with
    ``token`` the first two require it. Returns the runner and the bound port."""

    def refused(request: web.Request) -> web.Response | None:
        if token is None or token.allows(request.headers.get("Authorization")):
            return None
        return web.Response(status=401, text="unauthorized\n", headers={"WWW-Authenticate": "Bearer"})

    async def metrics_handler(request: web.Request) -> web.StreamResponse:
        denied = refused(request)
        if denied is not None:
            return denied
        return await _send(request, metrics.exposition(), CONTENT_TYPE_LATEST)

    async def decisions_handler(request: web.Request) -> web.StreamResponse:
        denied = refused(request)
        if denied is not None:
            return denied
        q = request.query
        try:
            limit = int(q["limit"]) if "limit" in q else None
        except ValueError:
            return web.json_response({"error": "limit must be an integer"}, status=400)
        body: dict[str, Any] = {
            "decisions": decisions.entries(namespace=q.get("namespace"), name=q.get("name"), limit=limit),
        }
        if extra is not None:
            body.update(extra())
        return await _send(request, orjson.dumps(redact_value(body), default=str), "application/json")

    async def healthz(_: web.Request) -> web.Response:
        ok = healthy()
        return web.Response(text="ok\n" if ok else "not serving\n", status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/decisions", decisions_handler)
    app.router.add_get("/healthz", healthz)
    limits = ConnectionLimits(max_connections=max_connections, idle_timeout_s=HTTP_IDLE_SECONDS)
    runner = make_runner(app, limits)
    await runner.setup()
    site = BoundedSite(runner, host, port, limits=limits, name="scaler-metrics",
                       metrics=HttpMetrics(metrics.registry))
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner, site.port
