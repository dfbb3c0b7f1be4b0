"""A sleeper whose state is unknown has a bounded life (warmpool/hot/unknown_life.py): the table on an
injected clock (pure), and the waker against simulated SGLang engines on 127.0.0.1 and a real Redis:
an idle unknown sleeper is listed for the controller to replace after the bound, a busy one never,
an engine that died after serving after UNKNOWN_READS_MAX reads, a starting one never; and an unknown
sleeper holds its GPU (no other engine is woken onto it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.servers import RedisServer
from tests.warmpool.test_hot_sglang_state import SglangRig
from tests.warmpool.test_hot_waker import WL, rig_of, until
from warmscale.simulation.engine import Request
from warmscale.warmpool.hot.engine_state import ASLEEP, AWAKE, state_value
from warmscale.warmpool.hot.unknown_life import UNKNOWN_MAX_SECONDS, UNKNOWN_READS_MAX, UnknownLife, expired, seen
from warmscale.warmpool.hot.waker import Waker, WakerMetrics

B = UNKNOWN_MAX_SECONDS


def life_of(reads: list[tuple[float, float | None]], *, answered_before: bool) -> UnknownLife:
    life = None
    for at, in_flight in reads:
        life = seen(life, at, in_flight, answered_before=answered_before)
    assert life is not None
    return life


@pytest.mark.parametrize(("reads", "answered_before", "now", "replaced"), [
    ([(0.0, 0.0)], False, B - 1, False),  # idle, unknown, within the bound
    ([(0.0, 0.0), (B, 0.0)], False, B, True),  # idle and unknown for the bound: replaced
    ([(0.0, 0.0), (B, 2.0)], False, B + 600, False),  # a request in flight: never, whatever the time
    ([(0.0, 2.0), (B, 0.0)], False, B, True),  # ... until it is idle (the bound is time unknown)
    ([(0.0, None)] * UNKNOWN_READS_MAX, True, 15.0, True),  # answered before, then N reads unanswered
    ([(0.0, None)] * (UNKNOWN_READS_MAX - 1), True, 10.0, False),  # one read short
    ([(0.0, None), (5.0, 0.0), (10.0, None), (15.0, None)], True, 15.0, False),  # not in a row
    ([(0.0, None)] * 50, False, B * 10, False),  # never answered in this incarnation: starting, never
    ([(0.0, 0.0)] + [(1.0, None)] * UNKNOWN_READS_MAX, False, 5.0, True),  # it answered while unknown
])
def test_an_unknown_sleeper_is_replaced_only_past_its_bound_and_never_while_it_may_serve(
        reads: list[tuple[float, float | None]], answered_before: bool, now: float, replaced: bool) -> None:
    why = expired(life_of(reads, answered_before=answered_before), now)
    assert (why is not None) is replaced, why


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def waker_on(srig: SglangRig, clock: Clock) -> Waker:
    w = srig.waker()
    return Waker(srig.store, w.source, srig.session, metrics=WakerMetrics(), record=w.record, clock=clock)


@pytest.fixture
async def srig(redis_server: RedisServer) -> AsyncIterator[SglangRig]:
    async with rig_of(SglangRig, redis_server) as r:
        yield r


async def test_an_idle_unknown_sleeper_is_listed_for_replacement_after_the_bound_a_busy_one_never(
        srig: SglangRig) -> None:
    await srig.engine(0, "gpu-0", None)  # no record: unknown, idle
    busy = await srig.engine(1, "gpu-1", None)
    busy.submit(Request(arrived_at=0.0, input_tokens=10, output_tokens=50_000))  # serving
    clock = Clock()
    w = waker_on(srig, clock)
    await w.resync()
    assert w.unknown_pods() == ["ns/llama-sleeper-0", "ns/llama-sleeper-1"] and w.expired_pods() == {}
    clock.t += B - 1
    await w.resync()
    assert w.expired_pods() == {}
    clock.t += 1
    await w.resync()
    expired_now = w.expired_pods()
    assert list(expired_now) == ["ns/llama-sleeper-0"] and "unknown for 120 s" in expired_now["ns/llama-sleeper-0"]
    clock.t += 10 * B
    await w.resync()
    assert list(w.expired_pods()) == ["ns/llama-sleeper-0"] and busy.in_flight == 1  # never the busy one
    await w.close()


async def test_an_engine_that_stops_answering_after_serving_is_listed_a_starting_one_never(srig: SglangRig) -> None:
    e = await srig.engine(0, "gpu-0", state_value(AWAKE, 0))
    await srig.engine(1, "gpu-1", None)
    srig.sleepers[1] = replace(srig.sleepers[1], base_url="http://127.0.0.1:9")  # never answers: starting
    await srig.intent(1)
    clock = Clock()
    w = waker_on(srig, clock)
    await w.resync()
    await until(lambda: w.status(WL).awake == 1)
    await srig.runners[0].cleanup()  # the engine stops answering: the sleep fails midway, unknown
    await srig.intent(0)
    await w.resync()
    await until(lambda: "ns/llama-sleeper-0" in w.unknown_pods())
    for _ in range(UNKNOWN_READS_MAX):
        clock.t += 5.0
        await w.resync()
    assert list(w.expired_pods()) == ["ns/llama-sleeper-0"] and e.awake
    assert "not answered 3 reads in a row" in w.expired_pods()["ns/llama-sleeper-0"]
    clock.t += 10 * B
    await w.resync()
    assert "ns/llama-sleeper-1" not in w.expired_pods()  # never answered: starting, kept
    await w.close()


async def test_a_known_state_again_ends_the_unknown_life(srig: SglangRig) -> None:
    await srig.engine(0, "gpu-0", None)
    clock = Clock()
    w = waker_on(srig, clock)
    await w.resync()
    clock.t += B - 1
    await w.resync()
    srig.records["ns/llama-sleeper-0"] = state_value(ASLEEP, 0)  # its state recorded after all
    await w.resync()
    assert w.status(WL).asleep == 1 and w.unknown_pods() == []
    srig.records.pop("ns/llama-sleeper-0")  # unknown again: a new life, from now
    clock.t += 2
    await w.resync()
    clock.t += B - 1
    await w.resync()
    assert w.expired_pods() == {}
    await w.close()


async def test_an_unknown_sleeper_holds_its_gpu_no_other_engine_is_woken_onto_it(srig: SglangRig) -> None:
    unknown = await srig.engine(0, "gpu-0", None)  # maybe awake (it is: a new engine starts awake)
    other = await srig.engine(1, "gpu-0", state_value(ASLEEP, 0))
    other.sleep_level = 1
    await srig.intent(1)
    w = srig.waker()
    await w.resync()
    await asyncio.sleep(0.3)
    assert unknown.awake and other.sleep_level == 1 and w.status(WL).awake == 0  # one awake engine per GPU
    await w.close()


