"""Store records are validated on read (issue 20, item 21): a record in Redis holding ``1e308`` (or
not JSON, or not an object) is unknown, logged once -- it used to overflow the policy on every tick,
so a decision froze at 2 while the load rose 10x."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import orjson
import pytest
import redis

from tests.scaler.conftest import META, ScriptedReader, eventually
from warmscale.scaler.store import MemoryStore, RedisStore, StoreError
from warmscale.scaler.tracker import tracker_id

pytestmark = pytest.mark.servers
HUGE = 1e308


def _warm(namespace: str, name: str) -> dict[str, Any]:
    return {"version": 3, "namespace": namespace, "name": name, "updated_at": time.time(), "placeholders_ready": HUGE,
            "ready_replicas": HUGE, "starting_replicas": HUGE, "spec_replicas": HUGE, "min_ready": "1",
            "time_to_ready_s": {"cold": HUGE}}


def _state() -> dict[str, Any]:
    now = time.time()
    return {"running_samples": [[now, HUGE]], "waiting_samples": [[now, HUGE]], "completions": [[now, HUGE]],
            "last_desired": 2, "last_decision_at": now}


@pytest.mark.parametrize("record", ["warm", "state"])
async def test_a_huge_record_is_unknown_and_the_decision_follows_the_load(
    make_server: Any, clients: Any, redis_server: Any, record: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(redis_server.url)
    if record == "warm":
        raw.set(f"{prefix}:warm:default/llm", orjson.dumps(_warm("default", "llm")))
    else:
        raw.set(f"{prefix}:state:{tracker_id('default', 'llm', META)}", orjson.dumps(_state()))
    reader = ScriptedReader(load=64.0)
    caplog.set_level(logging.WARNING, logger="warmscale.scaler")
    server = await make_server(reader, store=RedisStore(redis_server.url, prefix=prefix))
    c = clients(server.grpc_port)

    async def desired(n: int) -> bool:
        _, ivalue, _ = await c.poll(c.ref())
        return ivalue == n

    await eventually(lambda: desired(2), within=5)
    reader.set(640.0)  # 10x
    await eventually(lambda: desired(20), within=5)
    assert "tracker tick failed" not in caplog.text
    assert caplog.text.count("bad store record") == 1
    raw.close()


async def test_bad_records_of_every_kind() -> None:
    """Warm status and burst statistics: a store failure (the last known one binds; none never permits
    zero); pdGroup members: missing; never an exception other than StoreError."""
    store = MemoryStore()
    store._warm[("a", "w")] = _warm("a", "w")
    store._bursts[("a", "w")] = {"version": 1, "namespace": "a", "name": "w", "p95_rise": float("inf")}
    store._pd[("a", "g")] = {"prefill": {"role": "prefill", "desired": HUGE},
                             "decode": {"role": "decode", "desired": 3}}
    with pytest.raises(StoreError):
        await store.get_warm_status("a", "w")
    with pytest.raises(StoreError):
        await store.get_burst_stats("a", "w")
    assert list(await store.pd_members("a", "g")) == ["decode"]
