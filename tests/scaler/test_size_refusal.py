"""A ScaledObject whose payloads go past its memory budget is refused (issue 20, item 4): its RPCs get
RESOURCE_EXHAUSTED naming the limit (an open stream ends with it), an Event hook is called, the
registry records the refusal, and a restarted scaler neither resumes it nor reads it again until the
refusal expires; other ScaledObjects are untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from tests.scaler.conftest import META, ScriptedReader, eventually
from tests.scaler.conftest import status_of as _code
from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.store import MemoryStore
from warmscale.signals.model import Snapshot
from warmscale.signals.sources.budget import SizeRefused

LIMIT = "ScaledObject default/big: a payload has more than 100,000 series (--max-payload-series 100000)"


class HostileReader(ScriptedReader):
    """Refuses for size what ScaledObject "big" reads (as SourcesReader does past its budget)."""

    def __init__(self) -> None:
        super().__init__(load=64.0)
        self.big_reads = 0

    async def __call__(self, cfg: ScalerConfig, now: float, scope: tuple[str, str] = ("", "")) -> Snapshot:
        if scope[1] == "big":
            self.big_reads += 1
            raise SizeRefused(LIMIT)
        return await super().__call__(cfg, now, scope)


@pytest.mark.parametrize("rpc_process", [False, True], ids=["in-process", "rpc-front"])
async def test_refused_for_size_answers_resource_exhausted_and_is_not_resumed(
    make_server: Any, clients: Any, rpc_process: bool
) -> None:
    store = MemoryStore()
    reader = HostileReader()
    events: list[tuple[str, str, str]] = []

    first = await make_server(reader, store=store, rpc_process=rpc_process)

    async def event(namespace: str, name: str, message: str) -> None:
        events.append((namespace, name, message))

    first.manager.on_refused = event
    c = clients(first.grpc_port)
    await c.poll(c.ref("ok"))
    stream = c.stub.StreamIsActive(c.ref("big"))
    assert (await asyncio.wait_for(stream.read(), 5)).result is True  # the hold answer, never 0

    async def refused() -> bool:
        code, msg = await _code(c.stub.IsActive(c.ref("big")))
        return code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-payload-series 100000" in msg

    await eventually(refused, within=5)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(stream.read(), 10)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "refused for size" in (err.value.details() or "")
    assert reader.big_reads == 1  # read once, never again
    await eventually(lambda: _true(events), within=5)
    assert events == [("default", "big", LIMIT)]
    records = await store.trackers()
    [big] = [r for r in records.values() if r.name == "big"]
    assert big.refused == LIMIT and big.refused_at is not None
    _, ivalue, _ = await c.poll(c.ref("ok"))  # the other ScaledObject is untouched
    assert ivalue == 2
    await first.stop(0.2)

    # Restarted on the same store: "ok" is resumed, "big" is not, and its RPCs stay refused unread.
    reader2 = HostileReader()
    second = await make_server(reader2, store=store, rpc_process=rpc_process)
    assert [t.name for t in second.manager.trackers()] == ["ok"]
    c2 = clients(second.grpc_port)
    code, msg = await _code(c2.stub.GetMetrics(c2.pb.GetMetricsRequest(scaledObjectRef=c2.ref("big"),
                                                                       metricName="warmscale-desired-replicas")))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-payload-series" in msg
    await asyncio.sleep(0.3)
    assert reader2.big_reads == 0
    # A metadata change is a new ScaledObject: read at once.
    await c2.stub.IsActive(c2.ref("big", metadata={**META, "maxPayloadBytes": "1048576"}))
    assert reader2.big_reads == 1


async def _true(events: list[Any]) -> bool:
    return bool(events)
