"""The gRPC server against clients generated from KEDA's own protos (main and v2.20.2)."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from typing import Any

import grpc
import orjson
import pytest
from aiohttp import ClientSession
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.scaler.conftest import META, META_ZERO, MaxRunningReader, ScriptedReader, eventually
from warmscale.scaler.hpa import hpa_replicas

VERSIONS = ["main", "v2.20.2"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_unary_rpcs_land_the_hpa_on_the_decision(make_server: Any, clients: Any, version: str) -> None:
    reader = ScriptedReader(load=100.0)  # 100 in flight / 32 per replica -> 4 replicas
    server = await make_server(reader)
    c = clients(server.grpc_port, version)
    ref = c.ref()

    spec = await c.stub.GetMetricSpec(ref)
    assert len(spec.metricSpecs) == 1
    ms = spec.metricSpecs[0]
    assert ms.metricName == "warmscale-desired-replicas"
    assert ms.targetSizeFloat == 1.0 and ms.targetSize == 1

    value, ivalue, active = await c.poll(ref)
    assert active is True
    assert ivalue == math.ceil(value - 1e-9)
    # KEDA uses metricValueFloat (> 0); the HPA (AverageValue) computes ceil(value / target).
    assert hpa_replicas(value, ms.targetSizeFloat, current=0, tolerance=0.1) == 4

    tracker = server.manager.trackers()[0]
    assert tracker.decision is not None and tracker.decision.desired == 4


async def test_decisions_are_computed_in_the_background_not_per_rpc(make_server: Any, clients: Any) -> None:
    reader = ScriptedReader(load=64.0)
    server = await make_server(reader)
    c = clients(server.grpc_port)
    ref = c.ref(metadata={**META, "scrapeIntervalSeconds": "1"})
    await c.poll(ref)
    calls = reader.calls
    for _ in range(50):
        await c.poll(ref)
    assert reader.calls - calls <= 2  # at most one background tick happened meanwhile
    # ... and the background loop keeps reading while nobody asks.
    before = reader.calls
    for _ in range(100):  # two more ticks arrive (about 2 s; up to 10 s on a loaded machine)
        if reader.calls - before >= 2:
            break
        await asyncio.sleep(0.1)
    assert reader.calls - before >= 2


@pytest.mark.parametrize("version", VERSIONS)
async def test_metadata_change_is_a_new_tracker(make_server: Any, clients: Any, version: str) -> None:
    server = await make_server(ScriptedReader(load=64.0))
    c = clients(server.grpc_port, version)
    v1, *_ = await c.poll(c.ref())
    v2, *_ = await c.poll(c.ref(metadata={**META, "targetInflightPerReplica": "8"}))
    assert (v1, v2) == (2.0, 8.0)
    assert len(server.manager) == 2


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({**META, "maxReplicas": "lots"}, "maxReplicas"),
        ({**META, "engine": "llamacpp"}, "engine"),
        ({**META, "bogusKey": "1"}, "bogusKey"),
        ({**META, "scaleToZero": "maybe"}, "scaleToZero"),
        ({"minReplicas": "1"}, "endpoints"),
        ({**META, "ttftSloSeconds": "-1"}, "ttftSloSeconds"),
        ({**META, "itlSloSeconds": "0.0"}, "itlSloSeconds"),
    ],
)
async def test_invalid_metadata_is_invalid_argument_naming_the_key(
    make_server: Any, clients: Any, version: str, metadata: dict[str, str], key: str
) -> None:
    server = await make_server(ScriptedReader(load=10.0))
    c = clients(server.grpc_port, version)
    bad = c.ref(metadata=metadata)
    calls = [
        c.stub.IsActive(bad),
        c.stub.GetMetricSpec(bad),
        c.stub.GetMetrics(c.pb.GetMetricsRequest(scaledObjectRef=bad, metricName="x")),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert key in (err.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in c.stub.StreamIsActive(bad):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and key in (err.value.details() or "")
    # The server keeps serving valid ScaledObjects.
    _, ivalue, active = await c.poll(c.ref())
    assert active and ivalue == 1
    assert len(server.manager) == 1


@pytest.mark.parametrize("version", VERSIONS)
async def test_stream_is_active_sends_current_then_pushes_changes_within_1s(
    make_server: Any, clients: Any, version: str
) -> None:
    reader = ScriptedReader(load=0.0)
    server = await make_server(reader)
    c = clients(server.grpc_port, version)
    stream = c.stub.StreamIsActive(c.ref(metadata=META_ZERO))
    first = await asyncio.wait_for(stream.read(), 3)
    assert first.result is False  # idle and scaleToZero: inactive

    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    reader.set(5.0)
    msg = await asyncio.wait_for(stream.read(), 2)
    pushed = time.monotonic() - t0
    assert msg.result is True
    assert pushed <= 1.0, f"push took {pushed:.3f}s"

    t0 = time.monotonic()
    reader.set(0.0)
    msg = await asyncio.wait_for(stream.read(), 2)
    assert msg.result is False and time.monotonic() - t0 <= 1.0
    stream.cancel()


async def test_stream_does_not_repeat_unchanged_values(make_server: Any, clients: Any) -> None:
    reader = ScriptedReader(load=10.0)
    server = await make_server(reader)
    c = clients(server.grpc_port)
    stream = c.stub.StreamIsActive(c.ref())
    assert (await asyncio.wait_for(stream.read(), 3)).result is True
    reader.set(300.0)  # desired changes, activity does not
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(stream.read(), 0.6)
    stream.cancel()


async def test_stream_metric_spec_matches_get_metric_spec(make_server: Any, clients: Any) -> None:
    server = await make_server(ScriptedReader(load=10.0))
    c = clients(server.grpc_port, "main")
    ref = c.ref(metadata={**META, "metricName": "llm-replicas"})
    stream = c.stub.StreamMetricSpec(ref)
    streamed = await asyncio.wait_for(stream.read(), 3)
    polled = await c.stub.GetMetricSpec(ref)
    assert streamed == polled
    assert streamed.metricSpecs[0].metricName == "llm-replicas"
    assert streamed.metricSpecs[0].targetSizeFloat == 1.0
    stream.cancel()


@pytest.mark.parametrize("rpc_process", [False, True])
async def test_stream_metric_spec_sends_each_new_target(make_server: Any, clients: Any,
                                                        monkeypatch: pytest.MonkeyPatch, rpc_process: bool) -> None:
    """metricUnit inflight: the engines' per-replica capacity changes (100 -> 130 sequences); the
    published target follows in steps, each pushed on the open stream as a new spec, GetMetricSpec
    equals the latest streamed one, and GetMetrics keeps landing the HPA on the same count."""
    from warmscale.scaler import metric_target

    monkeypatch.setattr(metric_target, "RETARGET_MIN_INTERVAL_S", 0.5)
    reader = MaxRunningReader(load=120.0, replicas=2, max_running=100.0)
    server = await make_server(reader, rpc_process=rpc_process)
    c = clients(server.grpc_port, "main")
    meta = {k: v for k, v in META.items() if k != "targetInflightPerReplica"}
    ref = c.ref(metadata={**meta, "metricUnit": "inflight", "engine": "sglang", "hpaTolerance": "0"})
    stream = c.stub.StreamMetricSpec(ref)
    targets: list[float] = []
    raised_at: int | None = None

    def near(t: float, want: float) -> bool:
        return abs(want / t - 1) < metric_target.RETARGET_MIN_CHANGE  # retarget's dead band

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            spec = (await asyncio.wait_for(stream.read(), 10)).metricSpecs[0]
        except TimeoutError:
            raise AssertionError(f"no new spec within 10 s after {targets}") from None
        targets.append(spec.targetSizeFloat)
        if raised_at is None and near(targets[-1], 80.0):  # 0.8 x 100 sequences
            reader.max_running = 130.0  # 0.8 x 130 = 104 per replica
            raised_at = len(targets)
        if raised_at is not None and near(targets[-1], 104.0):
            break
    stream.cancel()
    # From the sglang prior (0.8 x 1,024 sequences = 820; the first change may come before the first
    # message) down in steps.
    assert 80.0 < targets[0] <= 820.0 and len(targets) > 3
    assert raised_at is not None and near(targets[-1], 104.0), targets
    assert all(a != b for a, b in itertools.pairwise(targets)), targets  # only on change
    assert targets[raised_at - 1:] == sorted(targets[raised_at - 1:]), targets
    polled = (await c.stub.GetMetricSpec(ref)).metricSpecs[0]
    assert polled.targetSizeFloat == targets[-1]
    resp = await c.stub.GetMetrics(c.pb.GetMetricsRequest(scaledObjectRef=ref, metricName="warmscale-desired-replicas"))
    assert hpa_replicas(resp.metricValues[0].metricValueFloat, polled.targetSizeFloat, 2, 0.0) == 2


@pytest.mark.parametrize("rpc_process", [False, True])
async def test_target_holds_while_no_stream_listens(make_server: Any, clients: Any, monkeypatch: pytest.MonkeyPatch,
                                                    rpc_process: bool) -> None:
    """KEDA < 2.21 (or --no-stream-metric-spec) only polls GetMetricSpec, which KEDA reads when it builds
    the HPA, not after: a changed target would never reach the HPA. So without an open StreamMetricSpec
    stream the published target stays where it is, whatever the engines report; once a stream opens
    it moves."""
    from warmscale.scaler import metric_target

    monkeypatch.setattr(metric_target, "RETARGET_MIN_INTERVAL_S", 0.2)
    reader = MaxRunningReader(load=120.0, replicas=2, max_running=100.0)
    server = await make_server(reader, rpc_process=rpc_process)
    c = clients(server.grpc_port, "main")
    meta = {k: v for k, v in META.items() if k != "targetInflightPerReplica"}
    ref = c.ref(metadata={**meta, "metricUnit": "inflight", "engine": "sglang", "hpaTolerance": "0"})
    polled = set()
    for _ in range(15):
        polled.add((await c.stub.GetMetricSpec(ref)).metricSpecs[0].targetSizeFloat)
        await asyncio.sleep(0.2)
    assert polled == {820.0}  # the sglang prior, 0.8 x 1,024 sequences: never moved
    stream = c.stub.StreamMetricSpec(ref)
    first = (await asyncio.wait_for(stream.read(), 5)).metricSpecs[0].targetSizeFloat
    second = (await asyncio.wait_for(stream.read(), 5)).metricSpecs[0].targetSizeFloat
    stream.cancel()
    assert first == 820.0 and second < first


async def test_stream_metric_spec_can_be_switched_off(make_server: Any, clients: Any) -> None:
    """``--no-stream-metric-spec``: UNIMPLEMENTED, as from a scaler without the RPC (KEDA then polls)."""
    server = await make_server(ScriptedReader(load=10.0), stream_metric_spec=False)
    c = clients(server.grpc_port, "main")
    stream = c.stub.StreamMetricSpec(c.ref())
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await asyncio.wait_for(stream.read(), 3)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert (await c.stub.GetMetricSpec(c.ref())).metricSpecs[0].targetSizeFloat == 1.0


async def test_v2_client_has_no_stream_metric_spec_and_server_has_it(make_server: Any, clients: Any) -> None:
    server = await make_server(ScriptedReader(load=10.0))
    old = clients(server.grpc_port, "v2.20.2")
    assert not hasattr(old.stub, "StreamMetricSpec")
    new = clients(server.grpc_port, "main")
    assert hasattr(new.stub, "StreamMetricSpec")


async def test_first_rpc_holds_when_signals_fail(make_server: Any, clients: Any) -> None:
    reader = ScriptedReader(load=500.0)
    reader.fail = RuntimeError("engine unreachable")
    server = await make_server(reader)
    c = clients(server.grpc_port)
    t0 = time.monotonic()
    ref = c.ref(metadata={**META_ZERO, "minReplicas": "2"})
    assert (await c.stub.IsActive(ref)).result is True  # hold: never 0
    assert time.monotonic() - t0 < 2.0  # bounded by the scrape timeout
    # ... and no count the HPA could act on: a floor below what runs would scale it down.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.stub.GetMetrics(c.pb.GetMetricsRequest(scaledObjectRef=ref, metricName="warmscale-desired-replicas"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert server.manager.trackers()[0].decision is None

    reader.fail = None  # signals come back: real decisions replace the hold
    async def decided() -> bool:
        v, _, _ = await c.poll(c.ref(metadata={**META_ZERO, "minReplicas": "2"}))
        return v == 16.0

    await eventually(decided)


async def test_first_rpc_bounded_by_scrape_timeout_when_reader_hangs(make_server: Any, clients: Any) -> None:
    reader = ScriptedReader(load=10.0)
    reader.delay = 30.0
    server = await make_server(reader)
    c = clients(server.grpc_port)
    t0 = time.monotonic()
    _, ivalue, active = await c.poll(c.ref(metadata={**META, "scrapeTimeoutSeconds": "0.5"}))
    assert time.monotonic() - t0 < 2.5
    assert active and ivalue is None  # a hold: active, and no count the HPA could lower the target to


async def test_health_service(make_server: Any, clients: Any) -> None:
    server = await make_server(ScriptedReader())
    c = clients(server.grpc_port)
    health = health_pb2_grpc.HealthStub(c.channel)
    for service in ("", "externalscaler.ExternalScaler"):
        resp = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await health.Check(health_pb2.HealthCheckRequest(service="nope"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_graceful_shutdown(make_server: Any, clients: Any) -> None:
    reader = ScriptedReader(load=10.0)
    server = await make_server(reader, grace_seconds=5.0)
    c = clients(server.grpc_port)
    health = health_pb2_grpc.HealthStub(c.channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    stream = c.stub.StreamIsActive(c.ref())
    assert (await stream.read()).result is True

    # An in-flight RPC: a new ScaledObject whose first snapshot takes 0.8 s.
    reader.delay = 0.8
    inflight = asyncio.ensure_future(c.stub.IsActive(c.ref(name="slow")))
    await asyncio.sleep(0.2)
    t0 = time.monotonic()
    stopping = asyncio.ensure_future(server.stop())
    assert (await asyncio.wait_for(watch.read(), 2)).status == health_pb2.HealthCheckResponse.NOT_SERVING
    # The health watch ends once it has said NOT_SERVING (an open watcher would otherwise hold the
    # server's single graceful stop for the whole grace period) ...
    assert await asyncio.wait_for(watch.read(), 2) == grpc.aio.EOF
    assert await watch.code() == grpc.StatusCode.OK
    # ... streams end cleanly (status OK: KEDA resets its reconnect back-off) ...
    assert await asyncio.wait_for(stream.read(), 2) == grpc.aio.EOF
    assert await stream.code() == grpc.StatusCode.OK
    # ... the in-flight RPC completes ...
    assert (await asyncio.wait_for(inflight, 3)).result is True
    await asyncio.wait_for(stopping, 6)
    assert time.monotonic() - t0 < 5.0
    # ... and new RPCs are refused.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.stub.IsActive(c.ref(), timeout=1)
    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@pytest.mark.parametrize("grace", [0.0, 0.5])
async def test_grpc_server_is_stopped_with_one_call(make_server: Any, clients: Any, monkeypatch: Any,
                                                    grace: float) -> None:
    """Two overlapping ``grpc.aio.Server.stop`` calls race inside grpc (the later one's grace timeout
    cancels calls on the core server the other has destroyed: a segmentation fault, seen in CI): the
    scaler stops its server with exactly one, even with a health watch and a push stream open."""
    server = await make_server(ScriptedReader(load=10.0))
    c = clients(server.grpc_port)
    watch = health_pb2_grpc.HealthStub(c.channel).Watch(health_pb2.HealthCheckRequest(service=""))
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    stream = c.stub.StreamIsActive(c.ref())
    assert (await stream.read()).result is True
    calls: list[float | None] = []
    inner = server._server
    original = inner.stop

    async def counted(g: float | None) -> None:
        calls.append(g)
        await original(g)

    monkeypatch.setattr(inner, "stop", counted)
    await asyncio.wait_for(server.stop(grace), 10)
    assert len(calls) == 1, calls


async def test_idle_trackers_are_dropped_but_not_while_streaming(make_server: Any, clients: Any) -> None:
    server = await make_server(ScriptedReader(load=10.0), tracker_idle_seconds=0.5)
    server.manager.options = type(server.manager.options)(idle_seconds=0.5, janitor_seconds=0.1)
    await server.manager.stop()  # restart the janitor with the short period
    server.manager.closing = False
    await server.manager.start()
    c = clients(server.grpc_port)
    await c.poll(c.ref(name="polled"))
    stream = c.stub.StreamIsActive(c.ref(name="streamed"))
    await stream.read()
    assert len(server.manager) == 2

    async def only_streamed_left() -> bool:
        return [t.name for t in server.manager.trackers()] == ["streamed"]

    await eventually(only_streamed_left, within=3)
    await asyncio.sleep(1.0)
    assert [t.name for t in server.manager.trackers()] == ["streamed"]
    stream.cancel()

    async def none_left() -> bool:
        return len(server.manager) == 0

    await eventually(none_left, within=3)


async def test_metrics_and_decision_log_endpoints(make_server: Any, clients: Any) -> None:
    reader = ScriptedReader(load=100.0, replicas=2)
    server = await make_server(reader)
    c = clients(server.grpc_port)
    await c.poll(c.ref(name="chat", namespace="llm"))
    with pytest.raises(grpc.aio.AioRpcError):
        await c.stub.IsActive(c.ref(metadata={"bogus": "1"}))
    await asyncio.sleep(0.3)
    async with ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as r:
            assert r.status == 200
            text = await r.text()
        async with http.get(f"http://127.0.0.1:{server.metrics_port}/decisions?namespace=llm") as r:
            body = orjson.loads(await r.read())
        async with http.get(f"http://127.0.0.1:{server.metrics_port}/healthz") as r:
            assert r.status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families and all(name.startswith("warmscale_") for name in families)

    def value(name: str, **labels: str) -> float:
        for s in families[name].samples:
            if all(s.labels.get(k) == v for k, v in labels.items()) and s.name == name:
                return float(s.value)
        raise KeyError((name, labels))

    so = {"namespace": "llm", "scaledObject": "chat"}
    assert value("warmscale_desired_replicas", **so) == 4
    assert value("warmscale_running_requests", **so) == 100
    assert value("warmscale_waiting_requests", **so) == 0
    assert value("warmscale_trackers") == 1
    assert value("warmscale_active", **so) == 1
    assert "warmscale_decisions" in families  # counter by reason
    rpc = {(s.labels["method"], s.labels["code"]) for s in families["warmscale_rpc_duration_seconds"].samples
           if s.name.endswith("_count")}
    assert {("GetMetrics", "OK"), ("IsActive", "OK"), ("IsActive", "INVALID_ARGUMENT")} <= rpc
    for name in ("warmscale_kv_cache_usage_ratio", "warmscale_ttft_quantile_seconds", "warmscale_itl_quantile_seconds",
                 "warmscale_itl_slo_seconds", "warmscale_signal_age_seconds",
                 "warmscale_scrape_errors", "warmscale_store_errors"):
        assert name in families
    assert body["decisions"] and body["decisions"][-1]["desired"] == 4
    assert body["decisions"][-1]["reason"] == "demand"


@pytest.mark.parametrize("version", VERSIONS)
async def test_tls(make_server: Any, clients: Any, pki: Any, version: str) -> None:
    server = await make_server(ScriptedReader(load=10.0), tls_cert=str(pki.server_cert), tls_key=str(pki.server_key))
    creds = grpc.ssl_channel_credentials(root_certificates=pki.read(pki.ca))
    c = clients(server.grpc_port, version, credentials=creds)
    _, ivalue, active = await c.poll(c.ref())
    assert active and ivalue == 1
    plain = clients(server.grpc_port, version)
    with pytest.raises(grpc.aio.AioRpcError):
        await plain.stub.IsActive(plain.ref(), timeout=2)


@pytest.mark.parametrize("version", VERSIONS)
async def test_mutual_tls_requires_a_client_certificate_from_the_ca(
    make_server: Any, clients: Any, pki: Any, version: str
) -> None:
    server = await make_server(ScriptedReader(load=10.0), tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                               tls_client_ca=str(pki.ca))
    ca = pki.read(pki.ca)
    # KEDA with caCert + tlsClientCert + tlsClientKey.
    good = clients(server.grpc_port, version, credentials=grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=pki.read(pki.client_key), certificate_chain=pki.read(pki.client_cert)))
    _, ivalue, active = await good.poll(good.ref())
    assert active and ivalue == 1

    no_cert = clients(server.grpc_port, version, credentials=grpc.ssl_channel_credentials(root_certificates=ca))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await no_cert.stub.IsActive(no_cert.ref(), timeout=2)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE

    rogue = clients(server.grpc_port, version, credentials=grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=pki.read(pki.rogue_key), certificate_chain=pki.read(pki.rogue_cert)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rogue.stub.IsActive(rogue.ref(), timeout=2)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_shutdown_is_bounded_when_a_step_hangs(make_server: Any, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A shutdown step that never finishes (here: the trackers) is cancelled and logged; stop()
    returns within the grace period plus one bounded step, so SIGTERM always ends the process."""
    import warmscale.scaler.server as server_module
    server = await make_server(ScriptedReader(load=10.0))
    monkeypatch.setattr(server_module, "SHUTDOWN_STEP_SECONDS", 0.3)

    async def hang() -> None:
        await asyncio.sleep(3600)

    monkeypatch.setattr(server.manager, "stop", hang)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await server.stop(0.1)
    assert loop.time() - t0 < 2.0
    assert any(getattr(r, "step", None) == "trackers" for r in caplog.records)
