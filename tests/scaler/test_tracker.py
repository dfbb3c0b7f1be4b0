"""Trackers without gRPC: warm status, scrape failures, the decision log, and the CLI process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.scaler.conftest import META, ScriptedReader, eventually, make_client
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.store import MemoryStore
from warmscale.scaler.tracker import TrackerManager, decision_from_dict, decision_to_dict, hold_decision, tracker_id
from warmscale.scaler.warm_status import WarmStatus
from warmscale.signals.model import ReplicaReading, Snapshot

ROOT = Path(__file__).resolve().parents[2]


def _manager(reader: Any, store: MemoryStore | None = None) -> TrackerManager:
    return TrackerManager(store or MemoryStore(), reader, ScalerMetrics(), DecisionLog(50), instance_id="t")


async def test_warm_status_supplies_the_lookahead_and_pod_counts() -> None:
    store = MemoryStore()
    reader = ScriptedReader(load=64.0)
    m = _manager(reader, store)
    await store.put_warm_status("llm", "chat", WarmStatus(
        "llm", "chat", updated_at=time.time(), placeholders_ready=1, ready_replicas=2, starting_replicas=1,
        spec_replicas=3, time_to_ready_s={"cold": 300.0, "placeholder+staged": 25.0}))
    t = m.get("llm", "chat", META)
    d = await t.current()
    assert d.time_to_ready_s == 25.0
    assert (d.ready, d.starting) == (2, 1)
    other = m.get("llm", "other", META)  # no warm status: the configured default look-ahead
    assert (await other.current()).time_to_ready_s == 120.0
    await m.stop()


async def test_warm_status_of_the_scale_target_when_the_scaledobject_is_named_otherwise() -> None:
    """A user-written ScaledObject 'chat-so' targets Deployment 'chat': the controller publishes under
    'chat', and the scaler, which resolved the target, reads it there."""
    from dataclasses import replace

    store = MemoryStore()
    scripted = ScriptedReader(load=64.0)

    async def reader(cfg: Any, now: float, scope: Any = None) -> Snapshot:
        return replace(await scripted(cfg, now, scope), target_name="chat")

    m = _manager(reader, store)
    await store.put_warm_status("llm", "chat", WarmStatus(
        "llm", "chat", updated_at=time.time(), placeholders_ready=1, time_to_ready_s={"placeholder+staged": 25.0}))
    d = await m.get("llm", "chat-so", META).current()
    assert d.time_to_ready_s == 25.0
    await m.stop()


async def test_unknown_snapshot_never_counts_as_idle() -> None:
    reader = ScriptedReader(load=320.0)
    m = _manager(reader)
    t = m.get("ns", "so", {**META, "scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "0"})
    assert (await t.current()).desired == 10

    async def failing(cfg: Any, now: float, scope: Any = None) -> Snapshot:
        return Snapshot(taken_at=now, source_errors=("endpoints: connection refused",))

    m.reader = failing
    await asyncio.sleep(0.4)
    d = await t.current()
    assert d.desired == 10 and d.active  # kept, not zero

    async def all_unknown(cfg: Any, now: float, scope: Any = None) -> Snapshot:
        return Snapshot(taken_at=now, replicas=(ReplicaReading("r0", now, error="timeout"),))

    m.reader = all_unknown
    await asyncio.sleep(0.4)
    d = await t.current()
    assert d.active and d.desired >= 1 and d.reason in ("signals-unknown", "scale-down-stabilization")
    await m.stop()


async def test_decision_log_records_changes_only() -> None:
    reader = ScriptedReader(load=64.0)
    m = _manager(reader)
    t = m.get("ns", "so", META)
    await t.current()
    await asyncio.sleep(0.5)
    assert len(m.decisions) == 1
    reader.set(200.0)

    async def changed() -> bool:
        return len(m.decisions) == 2

    await eventually(changed)
    first, second = list(m.decisions)
    assert first["desired"] == 2 and second["desired"] > 2  # (the trend look-ahead may add more)
    await m.stop()


def test_decision_roundtrip_and_hold() -> None:
    from warmscale.scaler.config import parse_metadata

    cfg = parse_metadata({**META, "minReplicas": "3"})
    h = hold_decision(cfg)
    assert (h.desired, h.active, h.metric_value) == (3, True, 3.0)
    assert hold_decision(parse_metadata({**META, "scaleToZero": "true", "minReplicas": "0"})).desired == 1
    assert decision_from_dict(decision_to_dict(h, 1.0, "me")) == h
    assert tracker_id("a", "b", {"x": "1", "y": "2"}) == tracker_id("a", "b", {"y": "2", "x": "1"})
    assert tracker_id("a", "b", {"x": "1"}) != tracker_id("a", "b", {"x": "2"})


def test_decision_log_is_bounded() -> None:
    log = DecisionLog(maxlen=10)
    for i in range(100):
        log.record(f"k{i % 3}", {"desired": i, "active": True, "reason": "demand", "namespace": "n", "name": "x"})
    assert len(log) == 10
    assert log.entries(limit=2)[-1]["desired"] == 99


async def test_cli_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    from tests.servers import free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log_file = (tmp_path / "scaler.log").open("wb")
    proc = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-m", "warmscale.cli", "scaler", "--host", "127.0.0.1", "--grpc-port", str(port),
         "--metrics-port", str(free_port()), "--grace-seconds", "2"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log_file,
    )
    try:
        client = make_client(port)
        health = health_pb2_grpc.HealthStub(client.channel)

        async def serving() -> bool:
            try:
                r = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
            except grpc.aio.AioRpcError:
                return False
            return r.status == health_pb2.HealthCheckResponse.SERVING

        await eventually(serving, within=20, every=0.2)
        # Real signal sources: the endpoint refuses, so the scaler holds: active (never 0), and with
        # nothing known and no count to hold, GetMetrics is UNAVAILABLE (the HPA keeps what runs).
        dead = f"http://127.0.0.1:{free_port()}/metrics"
        ref = client.ref(metadata={**META, "endpoints": dead})
        assert (await client.stub.IsActive(ref)).result
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.stub.GetMetrics(client.pb.GetMetricsRequest(scaledObjectRef=ref,
                                                                     metricName="warmscale-desired-replicas"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "holding" in (err.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.stub.IsActive(client.ref(metadata={"nope": "1"}))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await client.channel.close()
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(proc.wait, 10)
        assert rc == 0, (tmp_path / "scaler.log").read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log_file.close()
