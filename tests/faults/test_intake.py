"""Issue 10, items 6, 8 and 9 at the gRPC boundary of the real `warmscale scaler` process.

- Caps: ``--max-trackers`` / ``--max-trackers-per-namespace`` -> RESOURCE_EXHAUSTED beyond, the
  tracked ones keep being served.
- ``--allow-targets``: endpoints, Prometheus, Redis and endpoint pickers outside the list (on resolved addresses) ->
  INVALID_ARGUMENT naming the key; discovered pod addresses and every Redis queue connection (a
  reconnect after a DNS change included) are checked again at connection time.
- Secrets: URL userinfo and credential-like query parameters never reach logs, ``/decisions``,
  ``/metrics`` or error messages.
- Metadata fuzzing through gRPC: every answer is OK or INVALID_ARGUMENT naming a key.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faults.scalerproc import Engine, start_scalers, until
from tests.faults.test_metadata_fuzz import NASTY_NUMBERS, URLS
from tests.scaler.conftest import status_of as _code
from tests.servers import FakeEngine, free_port, running_redis
from warmscale.proto import externalscaler_pb2 as pb
from warmscale.proto import externalscaler_pb2_grpc as pb_grpc
from warmscale.scaler.config import KEYS
from warmscale.scaler.target_guard import TargetGuard
from warmscale.signals.sources.base import Endpoint

FAST = {"scrapeIntervalSeconds": "0.5", "scrapeTimeoutSeconds": "0.5"}


async def test_tracker_caps_answer_resource_exhausted_and_keep_serving_the_tracked(
    tmp_path: Path, fake_engine: Callable[..., FakeEngine]
) -> None:
    engine = Engine(fake_engine())
    engine.set(running=20)
    meta = {**FAST, "endpoints": engine.url}
    [p] = await start_scalers(tmp_path, 1, "--max-trackers", "8", "--max-trackers-per-namespace", "5", names=["caps"])
    c = p.client
    try:
        codes = [await _code(c.stub.IsActive(c.ref(name=f"so-{i}", namespace="a", metadata=meta), timeout=5))
                 for i in range(7)]
        assert [k for k, _ in codes] == [grpc.StatusCode.OK] * 5 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
        assert "--max-trackers-per-namespace 5" in codes[5][1]
        codes = [await _code(c.stub.IsActive(c.ref(name=f"so-{i}", namespace="b", metadata=meta), timeout=5))
                 for i in range(4)]
        assert [k for k, _ in codes] == [grpc.StatusCode.OK] * 3 + [grpc.StatusCode.RESOURCE_EXHAUSTED]
        assert "--max-trackers 8" in codes[3][1]
        # A flood of new ScaledObjects changes nothing for the tracked ones, nor the scaler's size.
        t0 = time.monotonic()
        flood: list[tuple[grpc.StatusCode, str]] = []
        for batch in range(10):  # 200 concurrent at a time (gRPC core sheds beyond ~1,000 pending calls)
            flood += await asyncio.gather(*(_code(c.stub.IsActive(c.ref(
                name=f"flood-{batch}-{i}", namespace=f"n{i % 50}", metadata=meta), timeout=10)) for i in range(200)))
        took = time.monotonic() - t0
        assert {k for k, _ in flood} == {grpc.StatusCode.RESOURCE_EXHAUSTED}, {m for _, m in flood}
        assert await p.desired(c.ref(name="so-0", namespace="a", metadata=meta)) == 1
        assert p.metric("warmscale_trackers") == 8
        size = len(p.http("/metrics"))
        print(f"\ncaps: 2,000 new ScaledObjects refused in {took:.2f}s; 8 tracked; /metrics {size / 1024:.0f} KiB")
        assert size < 200 * 1024
        # Invalid ScaledObject names never become labels.
        code, msg = await _code(c.stub.IsActive(c.ref(name="http://a:b@c/" + "x" * 5000, namespace="a", metadata=meta)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "'name'" in msg
    finally:
        await p.close()


async def test_allow_targets_refuses_outside_addresses_at_admission(
    tmp_path: Path, fake_engine: Callable[..., FakeEngine]
) -> None:
    engine = Engine(fake_engine())
    engine.set(running=20)
    [p] = await start_scalers(tmp_path, 1, "--allow-targets", "127.0.0.0/8", names=["allow"])
    c = p.client
    try:
        ok = {**FAST, "endpoints": engine.url}
        assert (await _code(c.stub.IsActive(c.ref(name="ok", metadata=ok))))[0] == grpc.StatusCode.OK
        for key, extra in [
            ("endpoints", {"endpoints": "http://192.0.2.10:8000/metrics"}),
            ("endpoints", {"endpoints": f"{engine.url},http://[2001:db8::1]:8000/metrics"}),
            ("prometheusAddress", {"prometheusAddress": "http://192.0.2.10:9090"}),
            ("redisAddress", {"redisAddress": "192.0.2.10:6379", "redisQueue": "q", "endpoints": engine.url}),
            ("eppAddress", {"eppAddress": "http://192.0.2.10:9090/metrics", "endpoints": engine.url}),
            ("endpoints", {"endpoints": "http://nothing.invalid:8000/metrics"}),
        ]:
            code, msg = await _code(c.stub.IsActive(c.ref(name="bad", metadata={**FAST, **extra})))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (extra, code, msg)
            assert f"'{key}'" in msg, msg
        assert p.metric("warmscale_trackers") == 1
    finally:
        await p.close()


class _Pods:
    """Stands in for Kubernetes discovery (pure test double): the pods' addresses a test chooses."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.target = None

    def provider(self, *_: Any, **__: Any) -> _Pods:
        return self

    async def endpoints(self) -> list[Endpoint]:
        return [Endpoint(replica=f"pod-{i}", url=u) for i, u in enumerate(self.urls)]

    async def counts(self) -> Any:
        from warmscale.signals.sources.pods import DiscoveryError

        raise DiscoveryError("no counts in this test")

    async def aclose(self) -> None:
        return None


async def test_allow_targets_checks_discovered_pod_addresses_at_connection_time(
    fake_engine: Callable[..., FakeEngine]
) -> None:
    from warmscale.scaler.cli import SourcesReader
    from warmscale.scaler.config import parse_metadata

    engine = Engine(fake_engine())
    engine.set(running=20)
    inside = engine.url
    outside = inside.replace("127.0.0.1", "127.0.0.2")  # loopback too, but not in the list
    guard = TargetGuard.from_flag("127.0.0.1/32")
    reader = SourcesReader(discovery=_Pods([inside, outside]), guard=guard, parse_workers=1)
    try:
        cfg = parse_metadata({"podSelector": "app=x", "metricsPort": str(engine.fake.port), **FAST})
        snap = await reader.read(cfg, time.time(), ("llm", "chat"))
        by = {r.replica: r for r in snap.replicas}
        assert by["pod-0"].signal is not None and by["pod-0"].signal.running == 20
        assert by["pod-1"].signal is None and "outside --allow-targets" in (by["pod-1"].error or "")
    finally:
        await reader.aclose()

class _Listener:
    """A loopback port that counts the connections it accepts (to show nothing dialled it)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port, self.accepted = host, port, 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> _Listener:
        def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            writer.close()

        self.server = await asyncio.start_server(accept, self.host, self.port)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_allow_targets_checks_every_redis_queue_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admission resolved the Redis host once; the check holds for every later connection too: after a
    DNS change and a dropped connection the reconnect is refused (the queue is unknown, the address
    outside the list is never dialled), and it recovers when the name points back inside."""
    import redis.asyncio as aioredis

    from warmscale.scaler.cli import SourcesReader
    from warmscale.scaler.config import parse_metadata

    names = {"queue.warmscale.test": "127.0.0.1"}
    loop = asyncio.get_running_loop()
    real_getaddrinfo = loop.getaddrinfo

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:  # DNS, as the test sets it
        return await real_getaddrinfo(names.get(host, host), port, *args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    with running_redis() as server:
        admin = aioredis.Redis(port=server.port)
        reader = SourcesReader(guard=TargetGuard.from_flag("127.0.0.1/32"), parse_workers=1)
        try:
            async with _Listener("127.0.0.2", server.port) as decoy:
                await admin.rpush("jobs", "a", "b", "c")
                by_name = parse_metadata({**FAST, "redisAddress": f"redis://queue.warmscale.test:{server.port}",
                                          "redisQueue": "jobs"})
                literal = parse_metadata({**FAST, "redisAddress": f"127.0.0.2:{server.port}", "redisQueue": "jobs"})

                async def queue(cfg: Any) -> tuple[float | None, str | None]:
                    [q] = (await reader.read(cfg, time.time())).queues
                    return q.length, q.error

                assert await queue(by_name) == (3.0, None)
                # An address outside the list, never admitted (no admission in this path): refused at dial time.
                length, error = await queue(literal)
                assert length is None and "outside --allow-targets" in (error or ""), error
                # The name now resolves outside the list; the open connection is dropped -> the reconnect is refused.
                names["queue.warmscale.test"] = "127.0.0.2"
                await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                # (the read that finds its connection closed may fail with that; the next ones reconnect)
                readings = [await queue(by_name) for _ in range(3)]
                assert all(length is None for length, _ in readings), readings
                error = readings[-1][1] or ""
                assert "127.0.0.2" in error and "outside --allow-targets" in error, readings
                assert decoy.accepted == 0
                # Back inside the list: the next connection is allowed again.
                names["queue.warmscale.test"] = "127.0.0.1"
                await admin.rpush("jobs", "d")
                assert await queue(by_name) == (4.0, None)
                assert decoy.accepted == 0
        finally:
            await reader.aclose()
            await admin.aclose()


async def test_credentials_never_reach_logs_decisions_metrics_or_errors(tmp_path: Path) -> None:
    dead = free_port()
    secret_url = f"http://admin:s3cretpw@127.0.0.1:{dead}/prom?token=tok123&X-Amz-Signature=sig456"
    [p] = await start_scalers(tmp_path, 1, names=["secrets"])
    c = p.client
    try:
        # Prometheus alone: its failure is the whole snapshot, logged with the (redacted) address.
        assert await p.active(c.ref(name="sec", metadata={**FAST, "prometheusAddress": secret_url}))
        assert await p.active(c.ref(name="sec2", metadata={
            **FAST, "endpoints": f"http://u:epw789@127.0.0.1:{dead}/metrics?api_key=key000"}))
        await until(lambda: asyncio.sleep(0, "***@127.0.0.1" in p.log()), within=10)
        code, msg = await _code(c.stub.IsActive(c.ref(name="bad", metadata={
            **FAST, "prometheusAddress": "http://admin:s3cretpw@127.0.0.1:99999?password=pw000"})))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "'prometheusAddress'" in msg
        seen = {"log": p.log(), "decisions": p.http("/decisions").decode(), "metrics": p.http("/metrics").decode(),
                "error": msg}
        for where, text in seen.items():
            for secret in ("s3cretpw", "tok123", "sig456", "epw789", "key000", "pw000"):
                assert secret not in text, f"{secret} leaked into {where}"
        assert "token=***" in seen["log"] and "X-Amz-Signature=***" in seen["log"]
    finally:
        await p.close()


# --------------------------------------------------------------------------- fuzzing through gRPC

NAMES = [k.name for k in KEYS]


@pytest.fixture(scope="module")
def fuzz_scaler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    loop = asyncio.new_event_loop()
    [p] = loop.run_until_complete(start_scalers(tmp, 1, "--max-trackers", "5000", names=["fuzz"]))
    channel = grpc.insecure_channel(f"127.0.0.1:{p.grpc_port}")
    try:
        yield pb_grpc.ExternalScalerStub(channel), f"http://127.0.0.1:{free_port()}/metrics"
    finally:
        channel.close()
        loop.run_until_complete(p.close())
        loop.close()


_values = st.one_of(st.sampled_from(NASTY_NUMBERS), st.sampled_from(URLS), st.text(max_size=10),
                    st.floats().map(repr), st.integers(-(2**70), 2**70).map(str))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(extra=st.dictionaries(st.sampled_from(NAMES), _values, max_size=4))
def test_fuzzed_metadata_is_ok_or_invalid_argument_naming_a_key(fuzz_scaler: tuple[Any, str],
                                                                extra: dict[str, str]) -> None:
    stub, dead = fuzz_scaler
    meta = {"endpoints": dead, "scrapeIntervalSeconds": "5", **extra}
    ref = pb.ScaledObjectRef(name="fuzz", namespace="fuzz", scalerMetadata=meta)
    try:
        stub.IsActive(ref, timeout=30)
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details()
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
        m = re.match(r"invalid scaler metadata '([^']*)'", details or "")
        assert m and (m.group(1) in meta or m.group(1) in NAMES), details
