"""The simulated engine's HTTP surface: ``/metrics``, a canary-sized ``/v1/completions``, and the sleep
endpoints of vLLM or SGLang (docs/hot-tier.md), so that the hot tier's adapters talk to it exactly
as they talk to a real engine. Used by the local cluster's pod engines and the adapters' tests.

Sleep and wake take the profile's measured times, divided by ``time_factor`` (the caller's clock
compression: 1 on the wall clock).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable

from aiohttp import web

from warmscale.simulation.engine import MODEL, SimulatedEngine

# How often a draining vLLM sleep checks that the engine has finished what it holds.
DRAIN_POLL_SECONDS = 0.02


def engine_app(engine: SimulatedEngine, flavour: str = "vllm", *, time_factor: float = 1.0,
               clock: Callable[[], float] = time.monotonic,
               token_seconds: float | None = None) -> web.Application:
    """An aiohttp app for one engine; ``flavour`` picks the metric names and sleep endpoints.

    A completion with ``"stream": true`` is sent as server-sent events, as vLLM and SGLang send it:
    one ``data: {...}`` chunk per token (a word of the completion here) every ``token_seconds``
    (default: the profile's decode step of one sequence, 8.5 ms for the 8B on an H100; divided by
    ``time_factor``), then ``data: [DONE]``."""
    if flavour not in ("vllm", "sglang"):
        raise ValueError(f"flavour must be vllm or sglang, got {flavour!r}")
    p = engine.profile
    step_s = token_seconds if token_seconds is not None else p.decode_step_s(1, 0)

    async def pause(seconds: float) -> None:
        await asyncio.sleep(seconds / time_factor)

    def gone() -> web.Response:
        return web.Response(status=503, text="engine process exited\n")

    async def metrics(_: web.Request) -> web.Response:
        if engine.dead:
            return gone()
        engine.step(clock())
        body = engine.exposition() if flavour == "vllm" else engine.sglang_exposition()
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def completions(request: web.Request) -> web.StreamResponse:
        if engine.dead:
            return gone()
        if not engine.awake:
            return web.json_response({"error": "the engine is sleeping"}, status=503)
        body = await request.json()
        model = body.get("model", MODEL)
        if body.get("stream") is True:
            return await stream(request, model)
        return web.json_response({"id": "cmpl-sim", "object": "text_completion", "model": model,
                                  "choices": [{"index": 0, "text": engine.completion(), "finish_reason": "length"}]})

    async def stream(request: web.Request, model: str) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        tokens = re.findall(r"\s*\S+", engine.completion()) or [""]
        for i, token in enumerate(tokens):
            if i:
                await asyncio.sleep(step_s / time_factor)
            last = i == len(tokens) - 1
            chunk = {"id": "cmpl-sim", "object": "text_completion", "model": model,
                     "choices": [{"index": 0, "text": token, "finish_reason": "length" if last else None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    # -- vLLM (--enable-sleep-mode, VLLM_SERVER_DEV_MODE=1) -----------------------------------------
    async def sleep(request: web.Request) -> web.Response:
        level = int(request.query.get("level", "1"))
        if level not in (1, 2):
            return web.json_response({"error": f"bad level {level}"}, status=400)
        mode = request.query.get("mode", "abort")
        if engine.sleep_level:
            return web.Response(status=200)
        t0 = clock()
        if mode == "wait":
            engine.draining = True
            while engine.in_flight:
                engine.step(clock())
                await asyncio.sleep(DRAIN_POLL_SECONDS)
        elif mode == "abort":
            engine.waiting.clear()
            engine.running.clear()
        await pause(p.sleep_l1_s if level == 1 else p.sleep_l2_s)
        engine.fall_asleep(level, clock() - t0)
        return web.Response(status=200)

    async def wake_up(request: web.Request) -> web.Response:
        tags = request.query.getall("tags", [])
        if not engine.sleep_level:
            return web.Response(status=200)
        t0 = clock()
        if engine.sleep_level == 2:
            if tags == ["weights"]:
                engine.weights_allocated = True
                return web.Response(status=200)
            if not engine.weights_reloaded:
                return web.json_response({"error": "weights were discarded: reload_weights first"}, status=400)
            await pause(p.wake_l2_s)
        else:
            await pause(p.wake_l1_s)
        engine.wake_up(clock() - t0)
        return web.Response(status=200)

    async def collective_rpc(request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("method") == "reload_weights" and engine.sleep_level == 2:
            if not engine.weights_allocated:
                return web.json_response({"error": "no weight memory: wake_up?tags=weights first"}, status=400)
            engine.weights_reloaded = True
        return web.json_response({"results": [None]})

    async def is_sleeping(_: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": engine.sleep_level > 0})

    # -- SGLang (--enable-memory-saver --enable-weights-cpu-backup) ---------------------------------
    async def pause_generation(_: web.Request) -> web.Response:
        engine.paused = True
        return web.json_response({"success": True})

    async def continue_generation(_: web.Request) -> web.Response:
        engine.paused = False
        return web.json_response({"success": True})

    async def release(_: web.Request) -> web.Response:
        if engine.in_flight:
            engine.dead = True  # SGLang asserts nothing is in flight: the engine process aborts
            return gone()
        t0 = clock()
        await pause(p.sleep_l1_s)
        engine.fall_asleep(1, clock() - t0)
        return web.json_response({"success": True})

    async def resume(_: web.Request) -> web.Response:
        t0 = clock()
        await pause(p.wake_l1_s)
        engine.wake_up(clock() - t0)
        return web.json_response({"success": True})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    if flavour == "vllm":
        app.router.add_post("/sleep", sleep)
        app.router.add_post("/wake_up", wake_up)
        app.router.add_post("/collective_rpc", collective_rpc)
        app.router.add_get("/is_sleeping", is_sleeping)
    else:
        app.router.add_post("/pause_generation", pause_generation)
        app.router.add_post("/continue_generation", continue_generation)
        app.router.add_post("/release_memory_occupation", release)
        app.router.add_post("/resume_memory_occupation", resume)
    return app
