"""Open streams are capped (issue 20, item 24): in all (--max-streams) and per ScaledObject
(--max-streams-per-scaledobject); beyond, a new stream gets RESOURCE_EXHAUSTED naming the flag and
the open ones keep streaming. Both the in-process servicer and the RPC front process."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from tests.scaler.conftest import ScriptedReader, eventually


async def _refused(stream: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(stream.read(), 5)
    return err.value


@pytest.mark.parametrize("rpc_process", [False, True], ids=["in-process", "rpc-front"])
async def test_streams_beyond_the_caps_are_refused(make_server: Any, clients: Any, rpc_process: bool) -> None:
    server = await make_server(ScriptedReader(load=10.0), rpc_process=rpc_process, max_streams=3,
                               max_streams_per_scaledobject=2)
    c = clients(server.grpc_port)
    a1, a2 = c.stub.StreamIsActive(c.ref("a")), c.stub.StreamMetricSpec(c.ref("a"))
    assert (await asyncio.wait_for(a1.read(), 5)).result is True
    await asyncio.wait_for(a2.read(), 5)
    err = await _refused(c.stub.StreamIsActive(c.ref("a")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-streams-per-scaledobject 2" in (err.details() or "")
    b = c.stub.StreamIsActive(c.ref("b"))
    assert (await asyncio.wait_for(b.read(), 5)).result is True
    err = await _refused(c.stub.StreamIsActive(c.ref("c")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-streams 3" in (err.details() or "")
    # The open streams are kept; a closed one frees its place.
    assert (await c.stub.IsActive(c.ref("a"))).result is True
    b.cancel()

    async def admitted() -> bool:
        s = c.stub.StreamIsActive(c.ref("c"))
        try:
            return bool((await asyncio.wait_for(s.read(), 5)).result)
        except grpc.aio.AioRpcError:
            return False
        finally:
            s.cancel()

    await eventually(admitted, within=10, every=0.2)
    a1.cancel()
    a2.cancel()
