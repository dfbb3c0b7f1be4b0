"""standby: auto's store fields against a real redis-server: burst statistics, the warm status's
version-3 fields, and readers of older (and newer) shapes."""

from __future__ import annotations

import uuid

import orjson
import pytest

from warmscale.scaler.bursts import BurstMemory, BurstStats, burst_stats, record
from warmscale.scaler.state import ScalerState
from warmscale.scaler.store import RedisStore, Store, StoreError
from warmscale.scaler.warm_status import WarmStatus


def _memory() -> BurstMemory:
    mem = BurstMemory()
    for t in range(0, 900, 5):
        need = 5 if 300 <= t < 600 else 2
        mem = record(mem, need, need, 90.0, float(t))
    return mem


async def test_burst_stats_round_trip(store: Store) -> None:
    assert await store.get_burst_stats("llm", "chat") is None
    st = burst_stats(_memory(), 900.0, namespace="llm", name="chat", window_s=90.0, cold_s=510.0, fleet=2)
    assert st.episodes and st.version == 1
    await store.put_burst_stats("llm", "chat", st)
    assert await store.get_burst_stats("llm", "chat") == st
    assert await store.get_burst_stats("llm", "other") is None


async def test_state_with_burst_memory_survives_the_store(store: Store) -> None:
    state = ScalerState(last_desired=2, bursts=_memory())
    assert (await store.claim("llm/chat/h", "A", 5.0)).owner
    assert await store.save("llm/chat/h", "A", state, {"desired": 2}, 5.0)
    assert await store.load_state("llm/chat/h") == state


async def test_readers_accept_old_and_newer_shapes_in_redis(redis_server: object) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    s = RedisStore(redis_server.url, prefix=prefix)  # type: ignore[attr-defined]
    raw = s._redis  # written as an older (or newer) scaler/controller would
    try:
        # a version-2 warm status (before standby: auto) and a version-1 one (before per-GPU medians)
        v2 = {"namespace": "llm", "name": "chat", "updated_at": 1.0, "placeholders_ready": 1, "version": 2,
              "time_to_ready_s": {"cold": 500}, "time_to_ready_by_gpu": {"H100": {"cold": 480}}}
        await raw.set(f"{prefix}:warm:llm/chat", orjson.dumps(v2))
        ws = await s.get_warm_status("llm", "chat")
        assert ws is not None and ws.version == 2 and not ws.standby_auto and ws.standby_size == 0
        assert ws.time_to_ready_by_gpu == {"H100": {"cold": 480.0}} and ws.placeholders_ready == 1
        v1 = {"namespace": "llm", "name": "old", "updated_at": 1.0, "time_to_ready_s": {"cold": 300}}
        await raw.set(f"{prefix}:warm:llm/old", orjson.dumps(v1))
        ws = await s.get_warm_status("llm", "old")
        assert ws is not None and ws.version == 1 and ws.time_to_ready_by_gpu == {} and ws.standby_size == 0
        # this version's warm status round-trips with its new fields
        v3 = WarmStatus("llm", "new", 2.0, standby_auto=True, standby_size=2)
        await s.put_warm_status("llm", "new", v3)
        assert await s.get_warm_status("llm", "new") == v3
        # a scaler state stored before burst memory existed reads with an empty one
        old_state = ScalerState(last_desired=3).to_dict()
        del old_state["bursts"]
        await raw.set(f"{prefix}:state:llm/chat/h", orjson.dumps(old_state))
        got = await s.load_state("llm/chat/h")
        assert got is not None and got.last_desired == 3 and got.bursts == BurstMemory()
        # burst statistics: a minimal record and a newer writer's (unknown keys ignored)
        await raw.set(f"{prefix}:bursts:llm/chat", orjson.dumps({"namespace": "llm", "name": "chat"}))
        st = await s.get_burst_stats("llm", "chat")
        assert st == BurstStats("llm", "chat", 0.0, version=0)
        newer = {"namespace": "llm", "name": "chat", "updated_at": 5.0, "version": 7, "span_s": 3600,
                 "rise_share_p95": 0.5, "episodes": {"1": [300.0]}, "per_product": {"H100": {}}}
        await raw.set(f"{prefix}:bursts:llm/chat", orjson.dumps(newer))
        st = await s.get_burst_stats("llm", "chat")
        assert st is not None and st.version == 7 and st.episodes == {1: (300.0,)} and st.span_s == 3600
        # garbage is a store error (the planner then keeps its last size), never a crash
        await raw.set(f"{prefix}:bursts:llm/chat", b"not json")
        with pytest.raises(StoreError):
            await s.get_burst_stats("llm", "chat")
    finally:
        await s.close()


async def test_redis_down_is_a_store_error() -> None:
    s = RedisStore("redis://127.0.0.1:1", timeout_s=0.2)
    try:
        with pytest.raises(StoreError):
            await s.get_burst_stats("llm", "chat")
        with pytest.raises(StoreError):
            await s.put_burst_stats("llm", "chat", BurstStats("llm", "chat", 0.0))
    finally:
        await s.close()
