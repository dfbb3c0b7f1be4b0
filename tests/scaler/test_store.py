"""Store semantics (memory and a real redis-server), and scaler replicas sharing Redis."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.scaler.conftest import META, ScriptedReader, eventually
from warmscale.scaler.state import ScalerState
from warmscale.scaler.store import RedisStore, Store, StoreError, TrackerRecord
from warmscale.scaler.warm_status import WarmStatus


def _prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


async def test_lease_state_and_decision(store: Store) -> None:
    a = await store.claim("ns/so/h", "A", 0.5)
    assert a.owner and a.acquired and a.state is None
    b = await store.claim("ns/so/h", "B", 0.5)
    assert not b.owner and b.decision is None
    state = ScalerState(recommendations=((1.0, 5),), last_desired=5)
    assert await store.save("ns/so/h", "A", state, {"desired": 5, "active": True}, 0.5)
    assert not await store.save("ns/so/h", "B", ScalerState(), {"desired": 1}, 0.5)  # fenced
    b = await store.claim("ns/so/h", "B", 0.5)
    assert not b.owner and b.decision == {"desired": 5, "active": True}
    renewed = await store.claim("ns/so/h", "A", 0.5)
    assert renewed.owner and not renewed.acquired
    await asyncio.sleep(0.7)  # A stops renewing: B takes over with A's state
    b = await store.claim("ns/so/h", "B", 0.5)
    assert b.owner and b.acquired and b.state == state
    await store.release("ns/so/h", "A")  # not A's any more: no effect
    assert not (await store.claim("ns/so/h", "A", 0.5)).owner
    await store.release("ns/so/h", "B")
    assert (await store.claim("ns/so/h", "A", 0.5)).owner
    assert await store.load_state("ns/so/h") == state
    assert await store.load_decision("other") is None


async def test_registry_and_warm_status(store: Store) -> None:
    rec = TrackerRecord("llm", "chat", {"endpoints": "http://x/metrics"}, last_seen=123.0)
    await store.touch_tracker("llm/chat/abc", rec)
    assert (await store.trackers())["llm/chat/abc"] == rec
    await store.forget_tracker("llm/chat/abc")
    assert "llm/chat/abc" not in await store.trackers()
    assert await store.get_warm_status("llm", "chat") is None
    ttr = {"cold": 300.0, "placeholder+staged": 20.0}
    ws = WarmStatus("llm", "chat", updated_at=1.0, placeholders_ready=2, time_to_ready_s=ttr)
    await store.put_warm_status("llm", "chat", ws)
    assert await store.get_warm_status("llm", "chat") == ws
    assert await store.ping()


@pytest.mark.servers
async def test_redis_down_raises_store_error() -> None:
    from tests.servers import free_port

    s = RedisStore(f"redis://127.0.0.1:{free_port()}", timeout_s=0.3)
    with pytest.raises(StoreError):
        await s.claim("k", "A", 1.0)
    assert not await s.ping()
    await s.close()


# ------------------------------------------------------------------------- scaler replicas + Redis


@pytest.mark.servers
async def test_two_scalers_sharing_redis_answer_identically(
    make_server: Any, clients: Any, redis_server: Any
) -> None:
    prefix = _prefix()
    # Each replica's engines say something different: identical answers prove one computes.
    ra, rb = ScriptedReader(load=100.0), ScriptedReader(load=300.0)
    a = await make_server(ra, store=RedisStore(redis_server.url, prefix=prefix), instance_id="A")
    b = await make_server(rb, store=RedisStore(redis_server.url, prefix=prefix), instance_id="B")
    ca, cb = clients(a.grpc_port), clients(b.grpc_port)
    # A follower serves the holder's decision while it is at most two intervals old (else it decides
    # itself): 0.5 s intervals keep a loaded test machine's tick jitter well inside that.
    ref = ca.ref(name="shared", metadata={**META, "scrapeIntervalSeconds": "0.5"})
    await ca.poll(ref)
    await cb.poll(ref)
    await asyncio.sleep(0.5)
    answers = set()
    for _ in range(10):  # KEDA round-robins its polls over the replicas
        answers.add(await ca.poll(ref))
        answers.add(await cb.poll(ref))
        spec_a, spec_b = await ca.stub.GetMetricSpec(ref), await cb.stub.GetMetricSpec(ref)
        assert spec_a == spec_b
    assert len(answers) == 1, answers
    value, _, active = answers.pop()
    assert active
    assert (ra.calls == 0) != (rb.calls == 0), (ra.calls, rb.calls)  # exactly one replica read signals
    assert value == (4.0 if ra.calls else 10.0)
    leader, follower = (a, b) if ra.calls else (b, a)
    lt, ft = leader.manager.trackers()[0], follower.manager.trackers()[0]
    assert lt.owner and not ft.owner and lt.id == ft.id

    # The leader goes away: the follower takes over within the lease TTL, from the stored state.
    await leader.stop(0.2)
    follower_reader = rb if leader is a else ra
    calls = follower_reader.calls

    async def took_over() -> bool:
        return follower_reader.calls > calls and ft.owner

    await eventually(took_over, within=6)


@pytest.mark.servers
async def test_scaler_restart_keeps_stabilisation_state(make_server: Any, clients: Any, redis_server: Any) -> None:
    prefix = _prefix()
    reader = ScriptedReader(load=320.0)  # 10 replicas
    first = await make_server(reader, store=RedisStore(redis_server.url, prefix=prefix), instance_id="first")
    c = clients(first.grpc_port)
    ref = c.ref(name="stab")

    async def desired(client: Any, n: float) -> bool:
        return (await client.poll(ref))[0] == n

    await eventually(lambda: desired(c, 10.0))
    reader.set(32.0)  # demand drops to 1 replica: stabilisation holds 10 for 300 s
    await asyncio.sleep(0.5)
    assert (await c.poll(ref))[0] == 10.0
    assert first.manager.trackers()[0].decision.reason == "scale-down-stabilization"
    await first.stop(0.2)

    # A fresh process (new store client, new instance id, same Redis) continues the window.
    reader2 = ScriptedReader(load=32.0)
    second = await make_server(reader2, store=RedisStore(redis_server.url, prefix=prefix), instance_id="second")
    c2 = clients(second.grpc_port)
    value, _, active = await c2.poll(ref)
    assert active and value == 10.0
    await asyncio.sleep(0.5)
    assert reader2.calls > 0
    assert (await c2.poll(ref))[0] == 10.0
    assert second.manager.trackers()[0].decision.reason == "scale-down-stabilization"

    # Control: without the stored state the same signals give 1 replica at once.
    control = await make_server(ScriptedReader(load=32.0), store=RedisStore(redis_server.url, prefix=_prefix()))
    cc = clients(control.grpc_port)
    await eventually(lambda: desired(cc, 1.0))


@pytest.mark.servers
async def test_redis_restart_loses_nothing_and_scaler_keeps_serving(
    make_server: Any, clients: Any, redis_server: Any
) -> None:
    prefix = _prefix()
    reader = ScriptedReader(load=320.0)
    store = RedisStore(redis_server.url, prefix=prefix, timeout_s=0.3)
    server = await make_server(reader, store=store, instance_id="solo")
    c = clients(server.grpc_port)
    ref = c.ref(name="durable")

    async def desired(n: float) -> bool:
        return (await c.poll(ref))[0] == n

    await eventually(lambda: desired(10.0))
    reader.set(32.0)
    await asyncio.sleep(0.3)
    await store.put_warm_status("default", "durable", WarmStatus("default", "durable", updated_at=0.0,
                                                                  time_to_ready_s={"cold": 90.0}))
    tid = server.manager.trackers()[0].id
    before = await store.load_state(tid)
    assert before is not None and before.recommendations

    # Redis goes down: the scaler keeps answering from its last decision.
    await asyncio.to_thread(redis_server.stop)
    try:
        for _ in range(5):
            value, _, active = await c.poll(ref)
            assert active and value == 10.0
            await asyncio.sleep(0.2)
        assert server.metrics.store_errors._metrics  # failures are counted
    finally:
        await asyncio.to_thread(redis_server.start)

    # Nothing lost (AOF): state, decision and warm status are back; the scaler resumes writing.
    check = RedisStore(redis_server.url, prefix=prefix)
    after = await check.load_state(tid)
    # The stabilisation window's maximum (its oldest entry, the 10 from before the drop) survived.
    assert after is not None and after.recommendations[0] == before.recommendations[0]
    assert (await check.get_warm_status("default", "durable")) is not None
    assert (await check.load_decision(tid) or {}).get("desired") == 10
    saved_at = (await check.load_decision(tid) or {}).get("computed_at", 0.0)

    async def writing_again() -> bool:
        d = await check.load_decision(tid)
        return d is not None and d["computed_at"] > saved_at

    await eventually(writing_again, within=8)
    reader.set(640.0)  # and reacts to new signals
    await eventually(lambda: desired(20.0), within=5)
    await check.close()


@pytest.mark.servers
async def test_restarted_scaler_resumes_trackers_from_the_registry(
    make_server: Any, clients: Any, redis_server: Any
) -> None:
    prefix = _prefix()
    first = await make_server(ScriptedReader(load=64.0), store=RedisStore(redis_server.url, prefix=prefix))
    c = clients(first.grpc_port)
    await c.poll(c.ref(name="resume", metadata=META))
    await asyncio.sleep(0.3)
    await first.stop(0.2)
    reader = ScriptedReader(load=64.0)
    second = await make_server(reader, store=RedisStore(redis_server.url, prefix=prefix))
    assert [t.name for t in second.manager.trackers()] == ["resume"]  # before any RPC

    async def computing() -> bool:
        return reader.calls > 0

    await eventually(computing)
