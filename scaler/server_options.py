"""The scaler server's options, and the constants its RPC front (scaler/rpcfront.py) shares with it.

Apart from scaler/server.py so that the front, which the server starts, need not import the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmscale.scaler.streamcap import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT
from warmscale.scaler.tracker import TrackerOptions

# The gRPC service KEDA calls (externalscaler.proto), also the name its health status is set under.
SERVICE_NAME = "externalscaler.ExternalScaler"

# The longest one shutdown step (gRPC core stop, trackers, HTTP, store) may take after the grace period.
SHUTDOWN_STEP_SECONDS = 5.0


@dataclass(frozen=True)
class ServerOptions:
    host: str = "0.0.0.0"
    grpc_port: int = 9090
    metrics_port: int | None = 8080  # None: no HTTP endpoint
    metrics_host: str | None = None  # default: host
    # /metrics and /decisions require "Authorization: Bearer <the file's content>" (scaler/metrics.py).
    metrics_token_file: str | None = None
    redis_url: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    tracker_idle_seconds: float = 600.0
    grace_seconds: float = 10.0
    decision_log_size: int = 1000
    instance_id: str | None = None
    max_trackers: int = TrackerOptions.max_trackers
    max_trackers_per_namespace: int = TrackerOptions.max_trackers_per_namespace
    # Answer KEDA's RPCs from a process of their own (scaler/rpcfront.py): at 1,000+ ScaledObjects the
    # RPCs then never wait behind the trackers' ticks and scrapes.
    rpc_process: bool = False
    # With rpc_process: how much this process (ticks, scrapes, store) lowers its CPU priority (nice)
    # once the front runs, so that when the container is short of CPU KEDA's RPCs are answered first.
    tick_nice: int = 0
    stream_metric_spec: bool = True
    # Open StreamIsActive/StreamMetricSpec streams: in all, and per ScaledObject (scaler/streamcap.py).
    max_streams: int = DEFAULT_MAX_STREAMS
    max_streams_per_scaledobject: int = DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT
