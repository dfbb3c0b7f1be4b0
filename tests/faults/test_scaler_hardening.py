"""Issue 20 (fail-safe round 3), the scaler's items, at the boundary of the real `warmscale scaler` process.

- Item 10: the shipped install's ``--allow-targets`` refuses loopback and link-local (cloud metadata)
  targets before any request is sent; a ScaledObject with 1,000 endpoint URLs is refused by the
  endpoint cap, with or without the flag, and nothing is sent.
- Item 4: an endpoint serving a payload of more series than the per-payload limit makes the scaler
  refuse that ScaledObject (RESOURCE_EXHAUSTED naming the flag) without parsing it; the refusal is
  in the Redis registry, so a restarted scaler does not resume it nor read the endpoint again.
- Item 11: 300 slow clients (idle, or trickling their headers) on the metrics port: beyond the cap
  they are closed at once, the others after the idle timeout; the endpoint then serves again.
- Item 23: ``--metrics-token-file`` guards ``/metrics`` and ``/decisions`` (``/healthz`` stays open);
  ``--metrics-host`` binds them to one address.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.faults.scalerproc import ROOT, Engine, start_scalers, until, vllm_payload
from tests.scaler.conftest import status_of as _code
from tests.servers import FakeEngine, RedisServer

FAST = {"scrapeIntervalSeconds": "0.5", "scrapeTimeoutSeconds": "0.5"}


def shipped_allow_targets() -> str:
    """The ``--allow-targets`` value of the shipped install (kustomize base and Helm chart alike)."""
    found = set()
    for path in ("manifests/base/scaler.yaml", "charts/warmscale/templates/scaler.yaml"):
        values = re.findall(r"^\s*- --allow-targets=(\S+)\s*$", (ROOT / path).read_text(), re.M)
        assert len(values) == 1, f"{path}: the scaler has no (or several) --allow-targets"
        found.add(values[0])
    assert len(found) == 1, found
    return found.pop()


async def test_shipped_allow_list_refuses_loopback_and_metadata_before_any_request(
    tmp_path: Path, fake_engine: Callable[..., FakeEngine]
) -> None:
    engine = Engine(fake_engine())  # a loopback stand-in for an internal service
    engine.set(running=20)
    [p] = await start_scalers(tmp_path, 1, "--allow-targets", shipped_allow_targets(), names=["shipped"])
    c = p.client
    try:
        for urls in ([engine.url], ["http://169.254.169.254/latest/meta-data"], ["http://[::1]:8000/metrics"],
                     ["http://8.8.8.8:80/metrics"]):
            code, msg = await _code(c.stub.IsActive(c.ref(name="bad", metadata={**FAST, "endpoints": ",".join(urls)}),
                                                    timeout=10))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and "'endpoints'" in msg, msg
            assert "outside --allow-targets" in msg
        # Pod and service addresses pass the admission check (nothing listens there: the replica is unknown).
        code, _ = await _code(c.stub.IsActive(c.ref(name="pods", metadata={**FAST,
                                                                          "endpoints": "http://10.0.0.1:1/metrics"})))
        assert code == grpc.StatusCode.OK
        assert p.metric("warmscale_trackers") == 1
    finally:
        await p.close()
    assert engine.fake.hits == 0


async def test_a_thousand_endpoints_are_refused_before_any_request(
    tmp_path: Path, fake_engine: Callable[..., FakeEngine]
) -> None:
    engine = Engine(fake_engine())
    engine.set(running=20)
    [p] = await start_scalers(tmp_path, 1, names=["endpoints"])  # no allow-list at all
    c = p.client
    try:
        urls = ",".join(f"{engine.url}?n={i}" for i in range(1000))
        code, msg = await _code(c.stub.IsActive(c.ref(name="many", metadata={**FAST, "endpoints": urls}), timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "'endpoints'" in msg and "at most 256" in msg, msg
        assert p.metric("warmscale_trackers") == 0
    finally:
        await p.close()
    assert engine.fake.hits == 0


async def test_a_payload_past_the_series_budget_refuses_the_scaledobject_across_a_restart(
    tmp_path: Path, fake_engine: Callable[..., FakeEngine], redis_server: RedisServer
) -> None:
    hostile = fake_engine(vllm_payload(running=5) + "".join(f'pad{{i="{i}"}} 1\n' for i in range(3000)))
    engine = Engine(fake_engine())
    engine.set(running=20)
    flags = ("--redis-url", redis_server.url, "--max-payload-series", "2000")
    [p] = await start_scalers(tmp_path, 1, *flags, names=["size-1"])
    c = p.client
    big = c.ref(name="big", metadata={**FAST, "endpoints": hostile.url, "maxPayloadBytes": "67108864"})
    try:
        ok = c.ref(name="ok", metadata={**FAST, "endpoints": engine.url})

        async def sized() -> bool:
            return await p.desired(ok) >= 1

        await until(sized, within=10)

        async def refused() -> bool:
            code, msg = await _code(c.stub.IsActive(big, timeout=5))
            return code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-payload-series 2000" in msg

        await until(refused, within=10)
        hits = hostile.hits
        assert "scaledobject refused for size" in p.log()
    finally:
        await p.close()
    [p2] = await start_scalers(tmp_path, 1, *flags, names=["size-2"])
    try:
        code, msg = await _code(p2.client.stub.IsActive(big, timeout=5))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "refused for size" in msg, (code, msg)
        assert p2.metric("warmscale_trackers") == 1  # "ok" resumed, "big" not
    finally:
        await p2.close()
    assert hostile.hits == hits  # never read again


async def _closed(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), within) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_slow_clients_on_the_metrics_port_are_capped_and_timed_out(tmp_path: Path) -> None:
    from warmscale.scaler.metrics import HTTP_IDLE_SECONDS, HTTP_MAX_CONNECTIONS

    [p] = await start_scalers(tmp_path, 1, names=["slow"])
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        t0 = time.monotonic()
        reset_at_connect = 0
        for i in range(300):  # bounded: 300 loopback connections
            try:
                r, w = await asyncio.open_connection("127.0.0.1", p.metrics_port)
            except ConnectionResetError:  # one past the cap can be reset before the connect returns
                reset_at_connect += 1
                continue
            if i % 2:
                w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never completed
            conns.append((r, w))
        closed_at_once = await asyncio.gather(*(_closed(r, 3.0) for r, _ in conns))
        assert sum(closed_at_once) + reset_at_connect >= 300 - HTTP_MAX_CONNECTIONS, sum(closed_at_once)
        held = [(r, w) for (r, w), c in zip(conns, closed_at_once, strict=True) if not c]
        for _, w in held[1::2]:
            w.write(b"X-Trickle: 1\r\n")  # a byte now and then does not keep a connection
        results = await asyncio.gather(*(_closed(r, HTTP_IDLE_SECONDS + 10) for r, _ in held))
        took = time.monotonic() - t0
        assert all(results), f"{results.count(False)} slow connections still open after {took:.0f}s"
        assert took < HTTP_IDLE_SECONDS + 10
        assert b"warmscale_trackers" in p.http("/metrics")  # serving again
    finally:
        for _, w in conns:
            w.close()
        await p.close()


def _get(url: str, token: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def test_metrics_token_and_bind_address(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    [p] = await start_scalers(tmp_path, 1, "--metrics-host", "127.0.0.2", "--metrics-token-file", str(token),
                              names=["token"])
    base = f"http://127.0.0.2:{p.metrics_port}"
    try:
        assert _get(f"{base}/metrics") == 401 and _get(f"{base}/decisions") == 401
        assert _get(f"{base}/metrics", "wrong") == 401
        assert _get(f"{base}/metrics", "s3cret-token") == 200 and _get(f"{base}/decisions", "s3cret-token") == 200
        assert _get(f"{base}/healthz") == 200
        with pytest.raises(urllib.error.URLError):  # not on the gRPC host's address
            _get(f"http://127.0.0.1:{p.metrics_port}/healthz")
        token.write_text("rotated\n")  # a Secret update in place
        assert _get(f"{base}/metrics", "rotated") == 200 and _get(f"{base}/metrics", "s3cret-token") == 401
        assert "s3cret" not in p.log()
    finally:
        await p.close()
