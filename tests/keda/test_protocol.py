"""How the real KEDA v2.21.0 uses the scaler's RPCs: StreamMetricSpec and mutual TLS."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.keda.conftest import E2E, report
from tests.scaler.conftest import MaxRunningReader
from warmscale.localcluster import pki
from warmscale.localcluster.scaling import patch_scaled_object, read_hpa


async def _hpa_metric(e2e: E2E, name: str) -> str | None:
    hpa = await read_hpa(e2e.api, e2e.namespace, name)
    if hpa is None or not hpa.spec.metrics:
        return None
    m = hpa.spec.metrics[0]
    return str(m.external.metric.name) if m.type == "External" and m.external else f"{m.type}"


async def _hpa_active(e2e: E2E, name: str) -> bool:
    hpa = await read_hpa(e2e.api, e2e.namespace, name)
    conds = (hpa.status.conditions if hpa is not None and hpa.status else None) or []
    return any(c.type == "ScalingActive" and c.status == "True" for c in conds)


async def _until(pred: object, within: float, what: str) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if await pred():  # type: ignore[operator]
            return time.monotonic() - t0
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out after {within:.0f}s waiting for {what}")


async def test_stream_metric_spec_saves_get_metric_spec_calls_and_spec_changes_reach_the_hpa(e2e: E2E) -> None:
    streamed = await e2e.workload("streamed", 1)
    polled = await e2e.workload("polled", 1)
    with_stream = e2e.scaler()
    without = e2e.scaler("--no-stream-metric-spec")
    await e2e.scale_with(streamed, with_stream, e2e.metadata(streamed), min_replicas=1, polling_interval=1)
    await e2e.scale_with(polled, without, e2e.metadata(polled), min_replicas=1, polling_interval=1)
    for name in ("streamed", "polled"):
        await _until(lambda n=name: _hpa_active(e2e, n), 60, f"HPA of {name} ScalingActive")
    # Both get a little load, so both paths (KEDA's loop and the HPA via the adapter) are exercised.
    streamed.engines.set_concurrency(5)
    polled.engines.set_concurrency(5)
    await asyncio.sleep(2)
    a0, b0 = with_stream.rpc_counts(), without.rpc_counts()
    window = 20.0
    await asyncio.sleep(window)
    a1, b1 = with_stream.rpc_counts(), without.rpc_counts()

    def delta(x: dict[str, int], y: dict[str, int], m: str) -> int:
        return y.get(m, 0) - x.get(m, 0)

    spec_streamed, spec_polled = delta(a0, a1, "GetMetricSpec"), delta(b0, b1, "GetMetricSpec")
    assert with_stream.open_streams().get("StreamMetricSpec", 0) >= 1
    assert without.open_streams().get("StreamMetricSpec", 0) == 0
    assert spec_streamed < spec_polled, (spec_streamed, spec_polled)

    # A spec change reaches the HPA: the metric name comes from the trigger metadata.
    t0 = time.monotonic()
    await patch_scaled_object(e2e.api, e2e.namespace, "streamed", {"spec": {"triggers": [{
        "type": "external-push",
        "metadata": {"scalerAddress": with_stream.address, **e2e.metadata(streamed, metricName="llm-replicas")},
    }]}})
    await _until(lambda: _name_is(e2e, "streamed", "s0-llm-replicas"), 60, "HPA metric renamed")
    report("stream-metric-spec", window_s=window,
           get_metric_spec_streamed=spec_streamed, get_metric_spec_polled=spec_polled,
           get_metrics_streamed=delta(a0, a1, "GetMetrics"), get_metrics_polled=delta(b0, b1, "GetMetrics"),
           is_active_streamed=delta(a0, a1, "IsActive"), is_active_polled=delta(b0, b1, "IsActive"),
           spec_change_to_hpa_s=round(time.monotonic() - t0, 2))


async def _name_is(e2e: E2E, so: str, name: str) -> bool:
    return await _hpa_metric(e2e, so) == name


async def test_mutual_tls_with_trigger_authentication(e2e: E2E) -> None:
    """The scaler requires a client certificate; KEDA presents one from a TriggerAuthentication."""
    certs = e2e.logs / "scaler-tls"
    ca = pki.make_ca(certs, "ca", "warmscale-scaler-test-ca")
    server = pki.issue_leaf(certs, "server", ca, "warmscale-scaler", dns=("localhost",), ips=("127.0.0.1",),
                            client=False)
    keda_client = pki.issue_leaf(certs, "keda-client", ca, "keda-operator", server=False)
    scaler = e2e.scaler("--tls-cert", str(server.cert), "--tls-key", str(server.key),
                        "--tls-client-ca", str(ca.cert))
    core = client.CoreV1Api(e2e.api)

    def b64(p: object) -> str:
        return base64.b64encode(p.read_bytes()).decode()  # type: ignore[attr-defined]

    await core.create_namespaced_secret(e2e.namespace, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "scaler-client-tls"},
        "data": {"ca.crt": b64(ca.cert), "tls.crt": b64(keda_client.cert), "tls.key": b64(keda_client.key)},
    })
    await client.CustomObjectsApi(e2e.api).create_namespaced_custom_object(
        "keda.sh", "v1alpha1", e2e.namespace, "triggerauthentications", {
            "apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
            "metadata": {"name": "warmscale-mtls"},
            "spec": {"secretTargetRef": [
                {"parameter": "caCert", "name": "scaler-client-tls", "key": "ca.crt"},
                {"parameter": "tlsClientCert", "name": "scaler-client-tls", "key": "tls.crt"},
                {"parameter": "tlsClientKey", "name": "scaler-client-tls", "key": "tls.key"},
            ]},
        })
    w = await e2e.workload("llm", 0)
    meta = e2e.metadata(w, scaleToZero="true", minReplicas="0", enableTLS="true")
    await e2e.scale_with(w, scaler, meta, min_replicas=0, auth_ref="warmscale-mtls")
    w.engines.set_concurrency(15)
    # Activation (push stream) and the HPA's metric (GetMetrics) both go over mutual TLS: at least
    # 2 replicas Ready (15 in flight / 10; the look-ahead may briefly ask for 3).
    await w.timeline.wait(ready=2, within=60, what="0 -> 2+ over mutual TLS")
    onset = w.engines.onset_at
    assert onset is not None
    t1 = w.timeline.first(onset, spec=1)
    assert scaler.open_streams().get("StreamIsActive", 0) >= 1
    report("mtls", onset_to_first_scale_s=round((t1 or onset) - onset, 2), replicas=w.timeline.specs_since(onset))


def _quantity(q: str) -> float:
    """A Kubernetes quantity as KEDA writes metric targets (plain or milli)."""
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


async def _hpa_target(e2e: E2E, name: str) -> float | None:
    hpa = await read_hpa(e2e.api, e2e.namespace, name)
    if hpa is None or not hpa.spec.metrics or hpa.spec.metrics[0].type != "External":
        return None
    avg = hpa.spec.metrics[0].external.target.average_value
    return _quantity(str(avg)) if avg is not None else None


async def test_stream_metric_spec_target_changes_reach_the_hpa_without_moving_it(
    e2e: E2E, monkeypatch: pytest.MonkeyPatch
) -> None:
    """metricUnit inflight through the real KEDA: the scaler (in this process, its gRPC server real,
    its engines scripted: SGLang-style, 2 replicas, 120 requests, 100 then 130 sequences per replica)
    publishes the per-replica target; every change it streams reaches the HPA's AverageValue target
    (KEDA applies StreamMetricSpec; GetMetricSpec only while it builds the HPA), and the Deployment stays at 2 replicas
    throughout: 120 / (0.8 x 100) and 120 / (0.8 x 130) both round up to 2."""
    from warmscale.scaler import metric_target
    from warmscale.scaler.server import ScalerServer
    from warmscale.scaler.server_options import ServerOptions

    monkeypatch.setattr(metric_target, "RETARGET_MIN_INTERVAL_S", 3.0)
    w = await e2e.workload("inflight", 2)
    reader = MaxRunningReader(load=120.0, replicas=2, max_running=100.0)
    server = ScalerServer(ServerOptions(host="127.0.0.1", grpc_port=0, metrics_port=None, grace_seconds=0.5), reader)
    await server.start()
    try:
        meta = {"endpoints": "http://127.0.0.1:9/metrics", "engine": "sglang", "metricUnit": "inflight",
                "hpaTolerance": "0", "minReplicas": "1", "maxReplicas": "8", "burstConfirmSeconds": "0",
                "scrapeIntervalSeconds": "0.5", "scaleDownStabilizationSeconds": "4", "nodeIdleSeconds": "0",
                "timeToReadySeconds": "2"}
        await e2e.scale_with(w, f"127.0.0.1:{server.grpc_port}", meta, min_replicas=1, polling_interval=1)
        await _until(lambda: _hpa_active(e2e, "inflight"), 60, "HPA ScalingActive")

        def near(t: float | None, want: float) -> bool:
            return t is not None and abs(want / t - 1) < metric_target.RETARGET_MIN_CHANGE

        seen: list[float] = []

        async def target_near(want: float) -> bool:
            t = await _hpa_target(e2e, "inflight")
            if t is not None and (not seen or seen[-1] != t):
                seen.append(t)
            return near(t, want)

        await _until(lambda: target_near(80.0), 120, "HPA target near 0.8 x 100")
        await w.timeline.wait(spec=2, within=60, what="2 replicas")
        t0 = time.monotonic()
        before = len(seen)
        polls_before = _rpc_counts(server).get("GetMetricSpec", 0)
        reader.max_running = 130.0
        await _until(lambda: target_near(104.0), 120, "HPA target near 0.8 x 130")
        changed_s = time.monotonic() - t0
        await asyncio.sleep(5)  # two HPA syncs under the last target
        # Each streamed change reached the HPA: the steps down from the prior, then the step up.
        assert before >= 3 and len(seen) > before, seen
        assert w.timeline.specs_since(t0) == [2], w.timeline.specs_since(t0)
        tracker = server.manager.trackers()[0]
        assert tracker.decision is not None and tracker.decision.metric_target == seen[-1]
        calls = _rpc_counts(server)
        # KEDA took the new spec from the stream (GetMetricSpec is called only while it builds the HPA).
        assert calls.get("GetMetricSpec", 0) == polls_before, (polls_before, calls)
    finally:
        await server.stop(0.5)
    report("stream-metric-spec-target", hpa_targets=seen, change_to_last_target_s=round(changed_s, 1),
           replicas=w.timeline.specs_since(t0), get_metric_spec_at_creation=polls_before, rpcs=calls)


def _rpc_counts(server: Any) -> dict[str, float]:
    """warmscale_rpc_duration_seconds_count by method (all codes), from an in-process server."""
    out: dict[str, float] = {}
    for fam in server.metrics.registry.collect():
        for sample in fam.samples:
            if sample.name == "warmscale_rpc_duration_seconds_count":
                out[sample.labels["method"]] = out.get(sample.labels["method"], 0.0) + sample.value
    return out
