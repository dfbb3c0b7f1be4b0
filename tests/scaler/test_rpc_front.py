"""`warmscale scaler --rpc-process`: KEDA's RPCs answered by a process of their own, from a mirror of
the decisions the scaler process pushes (scaler/rpcfront.py). Real CLI process, real fake engine."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tests.faults.signalpath import ScalerCLI, until, vllm_payload
from tests.servers import FakeEngine
from warmscale.proto import externalscaler_pb2 as pb


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[ScalerCLI]:
    cli = ScalerCLI(tmp_path / "scaler.log", "--rpc-process")
    try:
        await cli.ready()
        yield cli
    finally:
        await cli.close()


async def test_answers_follow_the_decisions_and_errors_name_the_key(front: ScalerCLI) -> None:
    engine = FakeEngine(vllm_payload(40))
    try:
        meta = {"engine": "vllm", "endpoints": engine.url, "targetInflightPerReplica": "10",
                "scaleDownStabilizationSeconds": "0", "timeToReadySeconds": "1"}
        assert await front.poll("so", meta) == (4.0, True)
        ref = pb.ScaledObjectRef(name="so", namespace="faults", scalerMetadata=meta)
        spec = await front.stub.GetMetricSpec(ref, timeout=5)
        assert spec.metricSpecs[0].metricName == "warmscale-desired-replicas"
        stream = front.stub.StreamIsActive(ref)
        first = await asyncio.wait_for(stream.read(), 5)
        assert first.result is True
        engine.serve(vllm_payload(100))

        async def ten() -> bool:
            v, _ = await front.poll("so", meta)
            return v == 10

        await until(ten, within=5)
        stream.cancel()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await front.poll("bad", {"endpoints": engine.url, "maxReplicas": "x"})
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "'maxReplicas'" in (err.value.details() or "")
        await asyncio.sleep(1.5)  # the front reports its RPC latencies every second
        assert 'warmscale_rpc_duration_seconds_count{code="OK",method="GetMetrics"}' in await front.metrics()
    finally:
        engine.close()


async def test_sigterm_stops_both_processes(front: ScalerCLI) -> None:
    engine = FakeEngine(vllm_payload(5))
    try:
        await front.poll("so", {"engine": "vllm", "endpoints": engine.url})
        t0 = time.monotonic()
        front.proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(front.proc.wait, 15)
        assert rc == 0, front.log_path.read_text()[-2000:]
        assert time.monotonic() - t0 < 5
        with pytest.raises(grpc.aio.AioRpcError):
            await front.poll("so", {"engine": "vllm", "endpoints": engine.url})
    finally:
        engine.close()


def _nices(pid: int) -> tuple[int, set[int]]:
    """(nice of the process, nice of each of its threads) from /proc."""

    def nice(stat: Path) -> int:
        return int(stat.read_text().rsplit(")", 1)[1].split()[16])

    return nice(Path(f"/proc/{pid}/stat")), {nice(t / "stat") for t in Path(f"/proc/{pid}/task").iterdir()}


def _front_pid(pid: int) -> int:
    children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    [front] = [c for c in children if b"warmscale.scaler.rpcfront" in Path(f"/proc/{c}/cmdline").read_bytes()]
    return front


async def test_the_scaler_process_yields_the_cpu_to_the_front(front: ScalerCLI) -> None:
    """--tick-nice (default 10): every thread of the scaler process runs 10 nice levels below the
    front, so a CPU-starved container answers KEDA's RPCs before it ticks and scrapes."""
    base, front_threads = _nices(_front_pid(front.proc.pid))
    _, scaler_threads = _nices(front.proc.pid)
    assert front_threads == {base}
    assert scaler_threads == {min(19, base + 10)}

