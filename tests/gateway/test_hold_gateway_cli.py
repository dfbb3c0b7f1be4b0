"""``warmscale hold-gateway`` as a user runs it: the real CLI as a subprocess, a real Redis (the store and
the queue) and real simulated vLLM engines (warmscale/simulation/engine_http.py) on 127.0.0.1.

It holds a request while the workload has no backend (its token on the queue the ScaledObject
names), routes it once a backend appears (an own replica started on a ``--backend`` URL, or an awake
sleeper published in the hot status), passes a streamed answer through chunk by chunk (a sleeper
that answers 503 first only holds the request again), finishes what it holds on SIGTERM, and a bad
flag exits 2 naming the flag."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from tests.scaler.conftest import eventually
from tests.servers import RedisServer, free_port, stop_process
from warmscale.scaler.hot_status import HotStatus
from warmscale.scaler.store import RedisStore
from warmscale.simulation.engine import CANARY_TEXT, EngineProfile, SimulatedEngine
from warmscale.simulation.engine_http import engine_app

ROOT = Path(__file__).resolve().parents[2]
NS, NAME = "llm", "chat"
# Bound on every wait here (the gateway starts in ~1 s; a held request is routed within 0.05 s).
WAIT_S = 15.0
# Between two streamed chunks of the engine here: long enough that a buffered answer is told apart
# from a streamed one by the arrival times alone (3 chunks: 0.8 s from the first to the last).
SLOW_TOKEN_S = 0.4


class Gateway:
    """``python -m warmscale hold-gateway`` on a free loopback port, JSON logs to a file."""

    def __init__(self, tmp: Path, redis: RedisServer, prefix: str, *args: str, namespace: str = NS) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.queue_key = f"{prefix}:hold:{namespace}:{NAME}"
        self.log_path = tmp / f"gateway-{uuid.uuid4().hex[:6]}.log"
        self._log = self.log_path.open("wb")
        cmd = [sys.executable, "-m", "warmscale", "--log-format", "json", "hold-gateway", "--host", "127.0.0.1",
               "--port", str(self.port), "--namespace", namespace, "--workload", NAME, "--redis-url", redis.url,
               "--store-prefix", prefix, "--queue-key", self.queue_key, "--drain-delay-seconds", "0", *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                     stdout=subprocess.DEVNULL, stderr=self._log)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, session: aiohttp.ClientSession) -> None:
        async def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                async with session.get(self.url + "/readyz") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False
        await eventually(ready, within=WAIT_S)

    def close(self) -> None:
        stop_process(self.proc)
        self._log.close()


class Engines:
    """Simulated vLLM engines served on loopback ports of this test process."""

    def __init__(self) -> None:
        self.runners: list[web.AppRunner] = []

    async def start(self, engine: SimulatedEngine, port: int = 0, token_seconds: float | None = None) -> str:
        return await self.serve(engine_app(engine, "vllm", token_seconds=token_seconds), port)

    async def serve(self, app: web.Application, port: int = 0) -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        self.runners.append(runner)
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    async def close(self) -> None:
        for runner in self.runners:
            await runner.cleanup()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as s:
        yield s


@pytest.fixture
async def engines() -> AsyncIterator[Engines]:
    e = Engines()
    yield e
    await e.close()


@pytest.fixture
def gateways(tmp_path: Path, redis_server: RedisServer, prefix: str) -> Iterator[list[Gateway]]:
    started: list[Gateway] = []
    yield started
    for g in started:
        g.close()


async def start_gateway(gateways: list[Gateway], tmp: Path, redis: RedisServer, prefix: str,
                        session: aiohttp.ClientSession, *args: str) -> Gateway:
    g = Gateway(tmp, redis, prefix, *args)
    gateways.append(g)
    await g.wait_ready(session)
    return g


async def complete(session: aiohttp.ClientSession, url: str, **extra: object) -> tuple[int, str]:
    async with session.post(url + "/v1/completions", json={"model": "m", "prompt": "hi", **extra}) as resp:
        text = await resp.text()
        if resp.status != 200:
            return resp.status, text
        return 200, str(json.loads(text)["choices"][0]["text"])


async def queued(redis_server: RedisServer, key: str, n: int) -> None:
    r = aioredis.from_url(redis_server.url)
    try:
        async def check() -> bool:
            return int(await r.llen(key)) == n
        await eventually(check, within=WAIT_S)
    finally:
        await r.aclose()


async def publish(redis_server: RedisServer, prefix: str, urls: list[str]) -> None:
    store = RedisStore(redis_server.url, prefix=prefix)
    try:
        await store.put_hot_status(HotStatus(NS, NAME, time.time(), awake=len(urls), awake_urls=urls))
    finally:
        await store.close()


async def test_holds_without_a_backend_and_routes_once_its_own_replica_starts(
        tmp_path: Path, redis_server: RedisServer, prefix: str, session: aiohttp.ClientSession,
        engines: Engines, gateways: list[Gateway]) -> None:
    port = free_port()  # the own replica's address, nothing listening there yet
    g = await start_gateway(gateways, tmp_path, redis_server, prefix, session,
                            "--backend", f"http://127.0.0.1:{port}")
    # A client that gives up takes its token off the queue at once (no phantom demand).
    gives_up = asyncio.create_task(complete(session, g.url))
    await queued(redis_server, g.queue_key, 1)
    gives_up.cancel()
    await queued(redis_server, g.queue_key, 0)
    request = asyncio.create_task(complete(session, g.url, max_tokens=4))
    await queued(redis_server, g.queue_key, 1)  # held: the onset the scaler reads
    await asyncio.sleep(0.3)
    assert not request.done()  # no 503, no error: still held
    await engines.start(SimulatedEngine("own-0", EngineProfile()), port=port)
    assert await request == (200, CANARY_TEXT)
    await queued(redis_server, g.queue_key, 0)  # the token left with its request


async def test_routes_a_held_request_to_a_sleeper_published_awake(
        tmp_path: Path, redis_server: RedisServer, prefix: str, session: aiohttp.ClientSession,
        engines: Engines, gateways: list[Gateway]) -> None:
    g = await start_gateway(gateways, tmp_path, redis_server, prefix, session)
    url = await engines.start(SimulatedEngine("sleeper-0", EngineProfile()))
    request = asyncio.create_task(complete(session, g.url))
    await queued(redis_server, g.queue_key, 1)
    t0 = time.monotonic()
    await publish(redis_server, prefix, [url])  # what the waker writes once the canary passed
    assert await request == (200, CANARY_TEXT)
    assert time.monotonic() - t0 < 1.0  # the next read of the hot status (every 0.05 s while holding)


async def test_streams_chunk_by_chunk_and_a_503_before_the_first_byte_holds_again(
        tmp_path: Path, redis_server: RedisServer, prefix: str, session: aiohttp.ClientSession,
        engines: Engines, gateways: list[Gateway]) -> None:
    engine = SimulatedEngine("sleeper-0", EngineProfile())
    engine.sleep_level = 1  # published awake, but asleep again: answers 503
    url = await engines.start(engine, token_seconds=SLOW_TOKEN_S)
    await publish(redis_server, prefix, [url])
    g = await start_gateway(gateways, tmp_path, redis_server, prefix, session)

    async def stream() -> list[tuple[float, bytes]]:
        chunks: list[tuple[float, bytes]] = []
        async with session.post(g.url + "/v1/completions", json={"model": "m", "prompt": "hi", "stream": True}) as r:
            assert r.status == 200
            assert r.content_type == "text/event-stream"
            async for chunk in r.content.iter_any():
                chunks.append((time.monotonic(), chunk))
        return chunks

    request = asyncio.create_task(stream())
    await queued(redis_server, g.queue_key, 1)  # the 503 held it again
    engine.sleep_level = 0
    chunks = await request
    body = b"".join(c for _, c in chunks).decode()
    events = [line.removeprefix("data: ") for line in body.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == CANARY_TEXT
    # Passed through as the engine sent them: the first token arrived well before the last one.
    first = next(t for t, c in chunks if b"Paris" in c)
    last = next(t for t, c in chunks if b"[DONE]" in c)
    assert last - first >= 1.5 * SLOW_TOKEN_S
    assert "429" not in g.log() and '"status": 503' not in g.log()


async def test_sigterm_lets_a_held_request_finish(
        tmp_path: Path, redis_server: RedisServer, prefix: str, session: aiohttp.ClientSession,
        engines: Engines, gateways: list[Gateway]) -> None:
    g = await start_gateway(gateways, tmp_path, redis_server, prefix, session, "--grace-seconds", "10")
    url = await engines.start(SimulatedEngine("sleeper-0", EngineProfile()))
    request = asyncio.create_task(complete(session, g.url))
    await queued(redis_server, g.queue_key, 1)
    g.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    assert g.proc.poll() is None  # still holding it
    with pytest.raises(aiohttp.ClientError):  # the listener is closed: nothing new comes in
        await complete(session, g.url)
    await publish(redis_server, prefix, [url])
    assert await request == (200, CANARY_TEXT)
    assert await asyncio.to_thread(g.proc.wait, WAIT_S) == 0
    assert "draining" in g.log()


@pytest.mark.parametrize(("args", "flag"), [
    (["--hold-max-seconds", "0"], "--hold-max-seconds"),
    (["--backend", "ftp://engine:8000"], "--backend"),
    (["--redis-url", "localhost:6379"], "--redis-url"),
    (["--service-port", "http"], "--service-port"),
    (["--port", "70000"], "--port"),
])
def test_a_bad_flag_exits_2_naming_it(args: list[str], flag: str) -> None:
    base = {"--namespace": NS, "--workload": NAME, "--redis-url": "redis://127.0.0.1:1"}
    for k in args[::2]:
        base.pop(k, None)
    cmd = [sys.executable, "-m", "warmscale", "hold-gateway", *(x for kv in base.items() for x in kv), *args]
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=WAIT_S)
    assert done.returncode == 2, done.stderr
    assert flag in done.stderr


def test_the_shipped_example_passes_the_gateway_flags_it_reads() -> None:
    """manifests/examples/hold-gateway: the container's arguments parse with the real command line, its
    ServiceAccount is the generated Role's, its probes and Service use its port, and the pod's grace
    covers the drain delay and the gateway's own grace."""
    from tests.manifests.helpers import find, render
    from warmscale.cli import build_parser
    from warmscale.scaler.holdgate_cli import QUEUE_KEY_TEMPLATE
    from warmscale.warmpool.rbac import HOLD_GATEWAY_NAME

    objs = render("manifests/examples/hold-gateway")
    (deploy,) = find(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = build_parser().parse_args(c["args"])
    assert args.command == "hold-gateway"
    assert pod["serviceAccountName"] == HOLD_GATEWAY_NAME
    assert {o["metadata"]["name"] for o in find(objs, "RoleBinding")} == {HOLD_GATEWAY_NAME}
    assert args.queue_key == QUEUE_KEY_TEMPLATE.format(namespace=args.namespace, workload=args.workload)
    assert deploy["metadata"]["namespace"] == args.namespace
    assert c["ports"][0]["containerPort"] == args.port
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["terminationGracePeriodSeconds"] > args.drain_delay_seconds + args.grace_seconds
    services = {s["metadata"]["name"]: s for s in find(objs, "Service")}
    assert args.service in services
    assert args.service_port in {p["name"] for p in services[args.service]["spec"]["ports"]}


async def test_a_backend_failing_mid_stream_cuts_the_clients_stream_and_is_not_retried(
        tmp_path: Path, redis_server: RedisServer, prefix: str, session: aiohttp.ClientSession,
        engines: Engines, gateways: list[Gateway]) -> None:
    """The bytes already sent cannot be taken back: the request is not sent again (no duplicate tokens),
    and the client sees a broken stream, not a short one that looks complete."""
    calls = 0

    async def breaks(request: web.Request) -> web.StreamResponse:  # a real HTTP server that dies mid-answer
        nonlocal calls
        calls += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"index": 0, "text": " Paris."}]}\n\n')
        await asyncio.sleep(0.2)
        assert request.transport is not None
        request.transport.abort()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", breaks)
    url = await engines.serve(app)
    g = await start_gateway(gateways, tmp_path, redis_server, prefix, session, "--backend", url)
    received = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async with session.post(g.url + "/v1/completions", json={"model": "m", "stream": True}) as r:
            assert r.status == 200
            async for chunk in r.content.iter_any():
                received += chunk
    assert b"Paris" in received and b"[DONE]" not in received
    await asyncio.sleep(0.3)
    assert calls == 1
    assert "stream ended early" in g.log()
