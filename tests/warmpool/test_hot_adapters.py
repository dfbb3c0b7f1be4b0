"""The hot tier's engine adapters against the simulated engines' HTTP surface (real aiohttp servers on
127.0.0.1), and the pure surface and canary tables."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from warmscale.simulation.engine import CANARY_TEXT, EngineProfile, Request, SimulatedEngine
from warmscale.simulation.engine_http import engine_app
from warmscale.warmpool.hot import surface
from warmscale.warmpool.hot.canary import judge
from warmscale.warmpool.hot.client import EngineSleeper

# Measured sleep/wake times compressed 1000x: the adapters' logic, not the wait, is under test.
FAST = 1000.0


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    runners: list[web.AppRunner] = []
    session = aiohttp.ClientSession()

    async def start(flavour: str = "vllm") -> tuple[SimulatedEngine, EngineSleeper]:
        engine = SimulatedEngine("e", EngineProfile())
        runner = web.AppRunner(engine_app(engine, flavour, time_factor=FAST), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return engine, EngineSleeper(session, f"http://127.0.0.1:{port}", flavour, "m")

    yield start
    await session.close()
    for r in runners:
        await r.cleanup()


@pytest.mark.parametrize("level", [1, 2])
async def test_vllm_sleeps_and_wakes_gated_on_the_canary(serve: Any, level: int) -> None:
    engine, s = await serve("vllm")
    assert (await s.record_reference()).text == CANARY_TEXT
    assert await s.sleeping() is False
    slept = await s.sleep(level)
    assert slept.slept, slept.why
    assert engine.sleep_level == level and await s.sleeping() is True
    assert f'vllm:engine_sleep_state{{engine="0",model_name="{"meta-llama/Llama-3.1-8B-Instruct"}",' \
           f'sleep_state="{surface.SLEEP_STATES_BY_LEVEL[level]}"}} 1.0' in engine.exposition().decode()
    woke = await s.wake(level)
    assert woke.woke and woke.ready, woke.why
    assert engine.awake and await s.sleeping() is False


async def test_a_level_2_wake_without_its_reload_fails_and_is_not_ready(serve: Any) -> None:
    engine, s = await serve("vllm")
    assert (await s.sleep(2)).slept
    plain = await s.wake(1)  # the level-1 wake of a level-2 sleeper: the weights are gone
    assert not plain.woke and not plain.ready and "reload_weights first" in plain.why
    assert engine.sleep_level == 2


async def test_vllm_sleep_waits_for_requests_in_flight(serve: Any) -> None:
    engine, s = await serve("vllm")
    engine.submit(Request(arrived_at=0.0, input_tokens=10, output_tokens=2))
    slept = await s.sleep(1)
    assert slept.slept and engine.in_flight == 0 and engine.sleep_level == 1


async def test_a_wake_whose_canary_differs_is_never_ready(serve: Any) -> None:
    engine, s = await serve("vllm")
    await s.record_reference()
    assert (await s.sleep(1)).slept
    engine.corrupt_after_wake = True
    woke = await s.wake(1)
    assert woke.woke and not woke.ready and "differs" in woke.why


async def test_sglang_sleep_never_releases_with_a_request_in_flight(serve: Any) -> None:
    engine, s = await serve("sglang")
    engine.submit(Request(arrived_at=0.0, input_tokens=10, output_tokens=500))
    slept = await s.sleep(1)
    assert not slept.slept and "1 requests in flight" in slept.why
    assert not engine.dead and not engine.paused and engine.sleep_level == 0  # resumed, request kept
    assert engine.in_flight == 1


async def test_sglang_sleeps_when_idle_and_wakes(serve: Any) -> None:
    engine, s = await serve("sglang")
    await s.record_reference()
    slept = await s.sleep(1)
    assert slept.slept, slept.why
    assert engine.sleep_level == 1 and engine.paused and await s.sleeping() is None  # SGLang has no state call
    woke = await s.wake(1)
    assert woke.ready, woke.why
    assert engine.awake


@pytest.mark.parametrize("engine", ["trtllm", "triton", "ray", "tgi", "llamacpp"])
def test_engines_without_an_http_sleep_get_an_event_message(engine: str) -> None:
    s = surface.support(engine)
    assert not s.supported and s.reason.startswith("HotStandby") and "hot-standby" in s.message
    with pytest.raises(surface.UnsupportedEngine):
        surface.sleep_calls(engine)


def test_the_calls_each_engine_gets() -> None:
    assert [(c.path, c.query) for c in surface.sleep_calls("vllm", 1)] == [("/sleep", (("level", "1"),
                                                                                        ("mode", "wait")))]
    assert [c.path for c in surface.wake_calls("vllm", 2)] == ["/wake_up", "/collective_rpc", "/wake_up"]
    sg = surface.sleep_calls("sglang")
    assert [c.path for c in sg] == ["/pause_generation", "/release_memory_occupation"]
    assert sg[1].needs_idle and not sg[0].needs_idle
    with pytest.raises(ValueError, match="sleep level"):
        surface.sleep_calls("vllm", 3)


@pytest.mark.parametrize(("body", "reference", "ok"), [
    ({"choices": [{"text": " Paris"}]}, None, True),
    ({"choices": [{"text": " Paris"}]}, " Paris", True),
    ({"choices": [{"text": " Lyon"}]}, " Paris", False),
    ({"choices": [{"text": "  "}]}, None, False),
    ({"choices": []}, None, False),
    ("garbage", None, False),
])
def test_canary_judgement(body: Any, reference: str | None, ok: bool) -> None:
    assert judge(body, reference).ok is ok
