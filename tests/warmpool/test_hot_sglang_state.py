"""An SGLang sleeper's state, which SGLang cannot be asked (warmpool/hot/engine_state.py): the table of
what a record means, and the waker against simulated SGLang engines on 127.0.0.1 and a real Redis,
recording the states it drives them to (in memory here, on the pod in the cluster:
tests/warmpool/test_hot_reconcile_cluster.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web

from tests.servers import RedisServer
from tests.warmpool.test_hot_waker import WL, rig_of, serve, until
from warmscale.scaler.hot_status import WakeIntent
from warmscale.scaler.store import RedisStore
from warmscale.simulation.engine import EngineProfile, Request, SimulatedEngine
from warmscale.warmpool.hot.engine_state import (
    ASLEEP,
    AWAKE,
    CHANGING,
    engine_restarts,
    recorded_sleeping,
    state_value,
)
from warmscale.warmpool.hot.sleepers import Sleeper
from warmscale.warmpool.hot.waker import Waker, WakerMetrics


@pytest.mark.parametrize(("value", "restarts", "sleeping"), [
    ("asleep@0", 0, True),  # released, in this incarnation
    ("awake@0", 0, False),  # created awake, or woken with a passing canary
    ("changing@0", 0, None),  # a sleep or a wake was sent and its outcome never recorded
    (None, 0, None),  # no record (a pod created by an older controller)
    ("asleep@0", None, None),  # no restart count reported: the incarnation is unknown
    ("asleep@0", 1, False),  # the container restarted since: a new engine starts awake
    ("changing@2", 3, False),  # ... whatever was unknown before
    ("asleep@2", 1, None),  # a count below the record's: not the pod it was written for
    ("asleep", 0, None),  # no incarnation
    ("asleep@x", 0, None), ("dozing@0", 0, None), ("", 0, None),  # malformed
])
def test_a_recorded_state_holds_only_for_its_container_incarnation(value: str | None, restarts: int | None,
                                                                    sleeping: bool | None) -> None:
    assert recorded_sleeping(value, restarts) is sleeping


def test_the_state_value_and_the_engine_containers_restart_count() -> None:
    assert state_value(ASLEEP, 3) == "asleep@3" and state_value(CHANGING, None) == "changing"
    with pytest.raises(ValueError, match="state must be one of"):
        state_value("dozing", 0)
    pod = {"spec": {"containers": [{"name": "engine"}, {"name": "side"}]},
           "status": {"containerStatuses": [{"name": "side", "restartCount": 5},
                                            {"name": "engine", "restartCount": 2}]}}
    assert engine_restarts(pod) == 2
    assert engine_restarts({"spec": {"containers": [{"name": "engine"}]}, "status": {}}) is None


class SglangRig:
    """SGLang engines and the record the waker keeps of each (what the pod annotation would hold)."""

    def __init__(self, store: RedisStore, session: aiohttp.ClientSession) -> None:
        self.store, self.session = store, session
        self.engines: list[SimulatedEngine] = []
        self.sleepers: list[Sleeper] = []
        self.runners: list[web.AppRunner] = []
        self.records: dict[str, str] = {}
        self.refuse: set[str] = set()  # states whose record the "API" refuses

    async def engine(self, index: int, device: str, record: str | None) -> SimulatedEngine:
        engine = SimulatedEngine(f"e{index}", EngineProfile())  # a new engine starts awake
        port = await serve(engine, "sglang", self.runners)
        self.engines.append(engine)
        pod = f"ns/llama-sleeper-{index}"
        if record is not None:
            self.records[pod] = record
        self.sleepers.append(Sleeper(pod=pod, workload=WL, index=index, base_url=f"http://127.0.0.1:{port}",
                                     engine="sglang", model="m", node="n1", device=device, restarts=0))
        return engine

    def waker(self) -> Waker:
        async def source() -> list[Sleeper]:  # the pods as listed: each with its record read back
            return [replace(s, recorded=recorded_sleeping(self.records.get(s.pod), s.restarts)) for s in self.sleepers]

        async def record(s: Sleeper, state: str) -> None:
            if state in self.refuse:
                raise RuntimeError("the API refused the patch")
            self.records[s.pod] = state_value(state, s.restarts)

        return Waker(self.store, source, self.session, metrics=WakerMetrics(), record=record)

    async def intent(self, awake: int) -> None:
        await self.store.put_wake_intent(WakeIntent("ns", "llama", awake, time.time(), "wake"))


@pytest.fixture
async def srig(redis_server: RedisServer) -> AsyncIterator[SglangRig]:
    async with rig_of(SglangRig, redis_server) as r:
        yield r


async def test_a_new_sglang_sleeper_is_put_to_sleep_counted_asleep_woken_and_counted_awake(srig: SglangRig) -> None:
    """Before engine_state, an SGLang sleeper was never counted: it had no state to read (fails without it)."""
    e = await srig.engine(0, "gpu-0", state_value(AWAKE, 0))  # as the controller creates it
    w = srig.waker()
    await w.resync()
    await until(lambda: w.status(WL).asleep == 1)
    assert e.sleep_level == 1 and srig.records["ns/llama-sleeper-0"] == "asleep@0"
    await w.close()

    again = srig.waker()  # a restarted waker: the state is read back from the record, no call changes it
    await again.resync()
    assert again.status(WL).asleep == 1 and e.sleep_level == 1
    await srig.intent(1)
    await again.resync()
    await until(lambda: again.status(WL).awake == 1)
    assert e.awake and srig.records["ns/llama-sleeper-0"] == "awake@0"
    assert again.status(WL).awake_pods == ["ns/llama-sleeper-0"]
    await again.close()


async def test_an_unknown_sglang_state_is_never_counted_woken_or_slept(srig: SglangRig) -> None:
    e0 = await srig.engine(0, "gpu-0", None)  # no record
    e1 = await srig.engine(1, "gpu-1", state_value(CHANGING, 0))  # a sleep or wake whose outcome is unknown
    e1.submit(Request(arrived_at=0.0, input_tokens=10, output_tokens=50_000))  # busy: a release would kill it
    await srig.intent(2)
    w = srig.waker()
    await w.resync()
    await asyncio.sleep(0.2)
    hs = w.status(WL)
    assert (hs.asleep, hs.awake, hs.waking) == (0, 0, 0) and w.unknown_pods() == ["ns/llama-sleeper-0",
                                                                                 "ns/llama-sleeper-1"]
    await srig.intent(0)
    await w.resync()
    await asyncio.sleep(0.2)
    assert e0.awake and e1.awake and not e1.dead and e1.in_flight == 1  # nothing slept either
    await w.close()


async def test_a_sleep_that_finds_work_in_flight_stays_awake_and_recorded_awake(srig: SglangRig) -> None:
    e = await srig.engine(0, "gpu-0", state_value(AWAKE, 0))
    await srig.intent(1)  # the scaler wants it awake: it is counted once its canary passes
    w = srig.waker()
    await w.resync()
    await until(lambda: w.status(WL).awake == 1)
    e.submit(Request(arrived_at=0.0, input_tokens=10, output_tokens=50_000))
    await srig.intent(0)
    await w.resync()
    await until(lambda: w.metrics.sleeps.labels(WL, "kept")._value.get() >= 1)
    await asyncio.sleep(0.2)
    assert not e.dead and e.awake and e.in_flight == 1  # paused, found busy, continued: never released
    assert w.status(WL).awake == 1 and srig.records["ns/llama-sleeper-0"] == "awake@0"
    await w.close()


async def test_no_sleep_or_wake_is_sent_when_its_state_cannot_be_recorded_first(srig: SglangRig) -> None:
    e = await srig.engine(0, "gpu-0", state_value(ASLEEP, 0))
    e.sleep_level = 1
    srig.refuse.add(CHANGING)
    await srig.intent(1)
    w = srig.waker()
    await w.resync()
    await asyncio.sleep(0.2)
    assert e.sleep_level == 1 and srig.records["ns/llama-sleeper-0"] == "asleep@0"  # not woken: nothing changed
    srig.refuse.clear()
    await w.resync()  # the next pass records first, then wakes
    await until(lambda: w.status(WL).awake == 1)
    assert e.awake and srig.records["ns/llama-sleeper-0"] == "awake@0"
    await w.close()


async def test_a_restarted_engine_container_is_a_new_engine_found_awake(srig: SglangRig) -> None:
    e = await srig.engine(0, "gpu-0", state_value(ASLEEP, 0))
    e.sleep_level = 1
    await srig.intent(0)
    w = srig.waker()
    await w.resync()
    assert w.status(WL).asleep == 1
    e.sleep_level = 0  # the container restarted (an SGLang abort, an OOM kill): a new engine, awake
    srig.sleepers[0] = replace(srig.sleepers[0], restarts=1)
    await w.resync()
    await until(lambda: srig.records["ns/llama-sleeper-0"] == "asleep@1")  # its canary, then back to sleep
    assert e.sleep_level == 1 and w.status(WL).asleep == 1
    await w.close()


async def test_a_sleep_that_fails_midway_leaves_the_state_unknown_not_awake_capacity(srig: SglangRig) -> None:
    e = await srig.engine(0, "gpu-0", state_value(AWAKE, 0))
    await srig.intent(1)
    w = srig.waker()
    await w.resync()
    await until(lambda: w.status(WL).awake == 1)
    await srig.runners[0].cleanup()  # the engine stops answering: the pause fails
    await srig.intent(0)
    await w.resync()
    await until(lambda: w.unknown_pods() == ["ns/llama-sleeper-0"])
    hs = w.status(WL)
    assert (hs.asleep, hs.awake, hs.awake_urls) == (0, 0, [])  # not counted, not routed
    assert srig.records["ns/llama-sleeper-0"] == "changing@0" and e.awake
    await w.close()


async def test_a_state_recorded_only_as_changing_is_unknown_to_a_restarted_waker(srig: SglangRig) -> None:
    e = await srig.engine(0, "gpu-0", state_value(AWAKE, 0))
    srig.refuse.add(ASLEEP)  # the sleep succeeds; its record does not (the API went away meanwhile)
    w = srig.waker()
    await w.resync()
    await until(lambda: w.status(WL).asleep == 1)  # this process knows
    assert e.sleep_level == 1 and srig.records["ns/llama-sleeper-0"] == "changing@0"
    await w.close()
    again = srig.waker()
    await srig.intent(1)
    await again.resync()
    await asyncio.sleep(0.2)
    assert again.status(WL).asleep == 0 and again.unknown_pods() == ["ns/llama-sleeper-0"] and e.sleep_level == 1
    await again.close()


async def test_a_record_that_failed_is_written_again_at_the_next_pass(srig: SglangRig) -> None:
    e = await srig.engine(0, "gpu-0", state_value(AWAKE, 0))
    srig.refuse.add(ASLEEP)
    w = srig.waker()
    await w.resync()
    await until(lambda: w.status(WL).asleep == 1)
    assert srig.records["ns/llama-sleeper-0"] == "changing@0"
    srig.refuse.clear()
    await w.resync()  # the pod's record differs from what this waker knows: written again
    assert srig.records["ns/llama-sleeper-0"] == "asleep@0" and e.sleep_level == 1
    await w.close()
