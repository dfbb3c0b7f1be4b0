"""The prefill/decode ratio bound of a pdGroup, held through the shared store: pure floors, two real
trackers sharing a store (memory and real Redis), and the last known bounds while the store is down."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.scaler.conftest import META, ScriptedReader, eventually
from warmscale.scaler.config import parse_metadata
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.pdgroup import Member, ratio_floor
from warmscale.scaler.store import MemoryStore, RedisStore, Store, StoreError
from warmscale.scaler.tracker import TrackerManager

NOW = 1_000.0
DEC = parse_metadata({**META, "role": "decode", "pdGroup": "g", "decodePerPrefillMin": "2",
                      "decodePerPrefillMax": "3"})
PRE = parse_metadata({**META, "role": "prefill", "pdGroup": "g"})


@pytest.mark.parametrize(("cfg", "members", "floor"), [
    (DEC, {"prefill": Member("prefill", 3, NOW)}, 6),  # decode >= 2 x 3
    (DEC, {"prefill": Member("prefill", 0, NOW)}, 0),
    (PRE, {"decode": Member("decode", 10, NOW, lo=2, hi=3)}, 4),  # prefill >= ceil(10 / 3); bounds from decode
    (PRE, {"decode": Member("decode", 10, NOW)}, None),  # nobody declared a max
    (DEC, {"prefill": Member("prefill", 3, NOW - 3600)}, None),  # stale member: ignored
    (DEC, {}, None),
    (parse_metadata(META), {"prefill": Member("prefill", 3, NOW)}, None),  # not in a group
])
def test_ratio_floor(cfg: Any, members: dict[str, Member], floor: int | None) -> None:
    assert ratio_floor(cfg, members, NOW)[0] == floor


class FlakyStore(MemoryStore):
    """A memory store whose pdGroup calls can be made to fail (the rest keeps working)."""

    down = False

    async def pd_members(self, namespace: str, group: str) -> dict[str, dict[str, Any]]:
        if self.down:
            raise StoreError("redis pd_members: ConnectionError: down")
        return await super().pd_members(namespace, group)

    async def put_pd_member(self, namespace: str, group: str, member: dict[str, Any]) -> None:
        if self.down:
            raise StoreError("redis put_pd_member: ConnectionError: down")
        await super().put_pd_member(namespace, group, member)


def manager(store: Store, reader: Any, instance: str) -> TrackerManager:
    return TrackerManager(store, reader, ScalerMetrics(), DecisionLog(50), instance_id=instance)


PREFILL_META = {**META, "role": "prefill", "pdGroup": "llama", "maxReplicas": "20",
                "scaleDownStabilizationSeconds": "0", "nodeIdleSeconds": "0", "timeToReadySeconds": "0"}
DECODE_META = {**META, "role": "decode", "pdGroup": "llama", "decodePerPrefillMin": "1",
               "decodePerPrefillMax": "2", "maxReplicas": "20"}


async def test_two_trackers_hold_the_ratio_through_the_store() -> None:
    store = FlakyStore()
    pre_load, dec_load = ScriptedReader(load=32.0 * 6), ScriptedReader(load=32.0 * 1)
    m1, m2 = manager(store, pre_load, "a"), manager(store, dec_load, "b")
    pre = m1.get("llm", "llama-prefill", PREFILL_META)
    dec = m2.get("llm", "llama-decode", DECODE_META)
    try:
        # Prefill needs 6, decode's own load says 1: decode is raised to 1 x 6.
        async def decode_raised() -> bool:
            d = await dec.current()
            return d.desired == 6 and d.reason == "pd-ratio"
        await eventually(decode_raised, within=5)
        assert (await pre.current()).desired == 6

        # Decode grows to 16: prefill is raised to ceil(16 / 2) = 8 by decode's declared max.
        dec_load.set(32.0 * 16)
        pre_load.set(32.0 * 2)

        async def prefill_raised() -> bool:
            d = await pre.current()
            return d.desired == 8 and d.reason == "pd-ratio"  # its own load asks for 2
        await eventually(prefill_raised, within=5)

        # The store goes away: each side keeps the last known peer and bounds.
        store.down = True
        await asyncio.sleep(0.5)
        d = await pre.current()
        assert (d.desired, d.reason) == (8, "pd-ratio")
    finally:
        await m1.stop()
        await m2.stop()


@pytest.mark.servers
async def test_redis_store_round_trips_members(redis_server: Any) -> None:
    store = RedisStore(redis_server.url)
    try:
        await store.put_pd_member("llm", "g", Member("decode", 4, NOW, 1.0, 2.0).to_dict())
        await store.put_pd_member("llm", "g", Member("prefill", 2, NOW).to_dict())
        got = await store.pd_members("llm", "g")
        assert Member.from_dict(got["decode"]) == Member("decode", 4, NOW, 1.0, 2.0)
        assert set(got) == {"prefill", "decode"} and await store.pd_members("llm", "other") == {}
    finally:
        await store.close()


class Clock:
    """Wall time plus a jump the test controls (the trackers see time only through it)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        import time

        return time.time() + self.offset


@pytest.mark.servers
async def test_ratio_holds_through_real_redis_and_its_outage() -> None:
    """Two scalers (separate managers) share a real redis-server: the decode role is raised to the
    ratio floor; the server goes away for longer than a member record stays fresh (the clock jumps
    an hour): the last known peer and bounds still hold; the server comes back with its AOF and
    the members are published and read again."""
    from tests.servers import running_redis

    clock = Clock()
    with running_redis() as redis:
        s1, s2 = RedisStore(redis.url), RedisStore(redis.url)
        pre_load, dec_load = ScriptedReader(load=32.0 * 5), ScriptedReader(load=32.0 * 1)
        m1 = TrackerManager(s1, pre_load, ScalerMetrics(), DecisionLog(50), instance_id="a", clock=clock)
        m2 = TrackerManager(s2, dec_load, ScalerMetrics(), DecisionLog(50), instance_id="b", clock=clock)
        m1.get("llm", "llama-prefill", PREFILL_META)
        dec = m2.get("llm", "llama-decode", {**DECODE_META, "decodePerPrefillMin": "2"})
        try:
            async def raised(want: int) -> bool:
                d = await dec.current()
                return d.desired == want and d.reason == "pd-ratio"
            await eventually(lambda: raised(10), within=10)  # decode >= 2 x 5 prefill
            got = await s1.pd_members("llm", "llama")
            assert Member.from_dict(got["prefill"]).desired == 5 and Member.from_dict(got["decode"]).lo == 2.0

            redis.stop()
            clock.offset += 3600.0  # far beyond stale_after: a fresh read would call the prefill role gone
            await asyncio.sleep(1.5)
            d = await dec.current()
            assert (d.desired, d.reason) == (10, "pd-ratio")

            redis.start()  # same port, same AOF
            pre_load.set(32.0 * 6)

            await eventually(lambda: raised(12), within=20)
        finally:
            await m1.stop()
            await m2.stop()
            await s1.close()
            await s2.close()


async def test_prefill_tracker_reads_the_decode_members_transfer_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decode member's published KV-transfer time reaches the prefill tracker's ScalerContext (the TTFT
    budget's input), and it stays while the store is down."""
    import warmscale.scaler.tracker as tracker_mod
    seen: list[float | None] = []
    real = tracker_mod.observe

    def spy(snapshot: Any, state: Any, cfg: Any, ctx: Any) -> Any:
        if cfg.role == "prefill":
            seen.append(ctx.pd_transfer_s)
        return real(snapshot, state, cfg, ctx)

    monkeypatch.setattr(tracker_mod, "observe", spy)
    store = FlakyStore()
    import time

    await store.put_pd_member("llm", "llama", Member("decode", 2, time.time(), kv_transfer_s=0.25).to_dict())
    m1 = manager(store, ScriptedReader(load=32.0), "a")
    m1.get("llm", "llama-prefill", PREFILL_META)
    try:
        await eventually(lambda: _true(bool(seen) and seen[-1] == 0.25), within=5)
        store.down = True
        n = len(seen)
        await eventually(lambda: _true(len(seen) > n + 2), within=5)
        assert seen[-1] == 0.25
    finally:
        await m1.stop()


async def _true(v: bool) -> bool:
    return v
