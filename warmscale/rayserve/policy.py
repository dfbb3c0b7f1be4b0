"""A Ray Serve custom autoscaling policy that asks warmscale's scaler for the replica count.

KubeRay's RayService has no scale subresource, so KEDA cannot scale Serve replicas; instead the Serve
controller runs this policy, and the policy asks the scaler what it would tell KEDA. In a Serve
config (``serve deploy`` / RayService ``serveConfigV2``)::

    deployments:
      - name: llm
        autoscaling_config:
          min_replicas: 1
          max_replicas: 8
          policy:
            policy_function: warmscale.rayserve.policy:WarmscalePolicy
            policy_kwargs:
              scaler: warmscale-scaler.warmscale:9090
              name: llm               # the ScaledObject name the scaler keys its state by
              namespace: serving
              metadata: {endpoints: "...", engine: vllm, minReplicas: "1", maxReplicas: "8"}

``metadata`` is what a ScaledObject's trigger would carry (docs/metadata.md). Ray instantiates the
class once per deployment with ``policy_kwargs`` and calls it every control-loop tick (about every
0.1 s) with an ``AutoscalingContext``.

The call never waits on the network: a daemon thread asks the scaler every ``poll_s`` (GetMetricSpec
then GetMetrics, each bounded by ``timeout_s``) and the call reads its last answer. Any failure (the
scaler down, hung, TLS refused, UNAVAILABLE while it has no basis) leaves the answer to go stale, and
a stale or missing answer keeps the deployment's current target (:mod:`warmscale.rayserve.decide`):
missing data never scales down. The thread ends when the policy object is collected (Ray replaces it
when the deployment's config changes). ``warmscale`` must be importable where the Serve controller
runs (it is installed in the Ray image).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc

from warmscale.proto import externalscaler_pb2 as pb
from warmscale.proto import externalscaler_pb2_grpc as pb_grpc
from warmscale.rayserve.decide import Answer, Decision, decide

log = logging.getLogger("warmscale.rayserve")

# One RPC's bound: the scaler answers from memory (its decisions are made by its trackers), so a
# healthy answer takes milliseconds; a second is slack for a loaded node, and the thread waits it, not Serve.
DEFAULT_TIMEOUT_S = 1.0
# How often the thread asks: the scaler decides about once a second (its tick), so faster polling
# learns nothing new; Serve's own loop is 0.1 s.
DEFAULT_POLL_S = 1.0
# An answer older than this is missing data (keep the current target): ten polls missed, long enough
# to ride out a scaler restart's first seconds, short enough that a dead scaler is noticed.
DEFAULT_STALE_S = 10.0
STATE_KEY = "warmscale"  # what the policy writes into Serve's policy_state (the last decision's reason)


def _positive(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"warmscale policy: {name} must be a number of seconds, got {value!r}") from None
    if not v > 0:
        raise ValueError(f"warmscale policy: {name} must be > 0, got {value!r}")
    return v


def _pem(name: str, path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"warmscale policy: {name} {path!r} cannot be read: {exc}") from None


class WarmscalePolicy:
    """Ray Serve's class-callable policy (``policy_kwargs`` -> ``__init__``); see the module docstring.

    ``scaler``: ``host:port`` of the scaler's gRPC service; ``name``/``namespace``: the ScaledObject
    reference; ``metadata``: its trigger metadata; ``tls_ca`` (and ``tls_cert`` + ``tls_key`` for
    mutual TLS): PEM files, else plaintext."""

    def __init__(self, scaler: str, name: str, namespace: str = "", metadata: Mapping[str, str] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, poll_s: float = DEFAULT_POLL_S,
                 stale_s: float = DEFAULT_STALE_S, tls_ca: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None) -> None:
        if not isinstance(scaler, str) or ":" not in scaler:
            raise ValueError(f"warmscale policy: scaler must be host:port, got {scaler!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"warmscale policy: name must name the ScaledObject, got {name!r}")
        meta = dict(metadata or {})
        bad = [k for k, v in meta.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise ValueError(f"warmscale policy: metadata values must be strings (as in a ScaledObject): {bad}")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("warmscale policy: tls_cert and tls_key go together (mutual TLS)")
        self.scaler, self.timeout_s = scaler, _positive("timeout_s", timeout_s)
        self.poll_s, self.stale_s = _positive("poll_s", poll_s), _positive("stale_s", stale_s)
        self.ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=meta)
        ca, cert, key = _pem("tls_ca", tls_ca), _pem("tls_cert", tls_cert), _pem("tls_key", tls_key)
        self._credentials = grpc.ssl_channel_credentials(ca, key, cert) if ca or cert else None
        self._lock = threading.Lock()
        self._answer: Answer | None = None
        self.error: str | None = None  # the last failure, None once an answer arrives again
        self.asked = 0  # polls made (tests and logs)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ----------------------------------------------------------------------------- Ray Serve's side

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        """``AutoscalingContext`` -> (replicas, policy_state); never blocks on the scaler."""
        self._ensure_polling()
        d = self.decision(int(ctx.target_num_replicas))
        state = dict(getattr(ctx, "policy_state", None) or {})
        state[STATE_KEY] = d.reason
        return d.replicas, state

    def decision(self, current_target: int) -> Decision:
        with self._lock:
            answer = self._answer
        return decide(answer, time.monotonic(), current_target, self.stale_s)

    def close(self) -> None:
        self._stop.set()

    # ---------------------------------------------------------------------------- the poller thread

    def _ensure_polling(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=_poll_loop, args=(weakref.ref(self), self._stop),
                                        name=f"warmscale-policy-{self.ref.name}", daemon=True)
        self._thread.start()

    def _channel(self) -> grpc.Channel:
        if self._credentials is not None:
            return grpc.secure_channel(self.scaler, self._credentials)
        return grpc.insecure_channel(self.scaler)

    def poll_once(self, stub: pb_grpc.ExternalScalerStub) -> None:
        """Ask the scaler once; keep the answer, or note the failure (the old answer goes stale)."""
        self.asked += 1
        try:
            spec = stub.GetMetricSpec(self.ref, timeout=self.timeout_s)
            if not spec.metricSpecs:
                raise ValueError("GetMetricSpec returned no metric spec")
            metric = spec.metricSpecs[0]
            got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=metric.metricName),
                                  timeout=self.timeout_s)
            if not got.metricValues:
                raise ValueError("GetMetrics returned no value")
            target = metric.targetSizeFloat or float(metric.targetSize)
            answer = Answer(value=float(got.metricValues[0].metricValueFloat), target=float(target),
                            at=time.monotonic())
        except (grpc.RpcError, ValueError) as exc:
            reason = (f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError)
                      and hasattr(exc, "code") else str(exc))
            if reason != self.error:
                log.warning("warmscale scaler did not answer; keeping the current replica count",
                            extra={"scaledobject": f"{self.ref.namespace}/{self.ref.name}", "scaler": self.scaler,
                                   "error": reason})
            self.error = reason
            return
        with self._lock:
            self._answer = answer
        if self.error is not None:
            log.info("warmscale scaler answers again", extra={"scaledobject": f"{self.ref.namespace}/{self.ref.name}"})
            self.error = None


def _poll_loop(ref: weakref.ref[WarmscalePolicy], stop: threading.Event) -> None:
    """Poll while the policy lives and is not closed; holds it only for one poll at a time."""
    policy = ref()
    if policy is None:
        return
    channel = policy._channel()
    stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    poll_s = policy.poll_s
    del policy
    try:
        while not stop.is_set():
            policy = ref()
            if policy is None:
                return
            started = time.monotonic()
            policy.poll_once(stub)
            del policy
            stop.wait(max(0.0, poll_s - (time.monotonic() - started)))
    finally:
        channel.close()
