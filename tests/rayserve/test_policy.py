"""The Ray Serve policy's shell against the real `warmscale scaler` process (no Ray: the context is a
plain object with the two fields the policy reads; tests/rayserve/test_ray_serve.py runs it in Ray)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.faults.scalerproc import Engine, start_scalers
from tests.servers import FakeEngine, free_port
from warmscale.rayserve.policy import STATE_KEY, WarmscalePolicy

# The scaler's fast settings of its own fault tests, one replica per 32 running requests.
META = {"scrapeIntervalSeconds": "0.2", "scrapeTimeoutSeconds": "0.5", "targetInflightPerReplica": "32",
        "burstConfirmSeconds": "0", "minReplicas": "1", "maxReplicas": "8"}
# Serve's control loop runs every 0.1 s: a call must cost far less than that, whatever the scaler does.
CALL_BUDGET_S = 0.01


def ctx(target: int) -> SimpleNamespace:
    return SimpleNamespace(target_num_replicas=target, current_num_replicas=target, policy_state={"mine": 1})


def wait_until(check: Callable[[], bool], within: float) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > within:
            raise TimeoutError(f"not within {within}s")
        time.sleep(0.05)
    return time.monotonic() - t0


@pytest.fixture
def hung_scaler() -> Iterator[str]:
    """A listener that accepts TCP and never speaks HTTP/2: every RPC to it runs into its deadline."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield f"127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


@pytest.mark.parametrize(("kwargs", "names"), [
    ({"scaler": "no-port", "name": "x"}, "scaler"),
    ({"scaler": "h:1", "name": ""}, "name"),
    ({"scaler": "h:1", "name": "x", "timeout_s": 0}, "timeout_s"),
    ({"scaler": "h:1", "name": "x", "poll_s": "soon"}, "poll_s"),
    ({"scaler": "h:1", "name": "x", "metadata": {"maxReplicas": 8}}, "metadata"),
    ({"scaler": "h:1", "name": "x", "tls_cert": "/c.pem"}, "tls_key"),
    ({"scaler": "h:1", "name": "x", "tls_ca": "/nonexistent/ca.pem"}, "tls_ca"),
])
def test_bad_kwargs_name_the_kwarg(kwargs: dict[str, object], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        WarmscalePolicy(**kwargs)  # type: ignore[arg-type]


async def test_follows_the_scaler_and_keeps_the_count_when_it_is_gone(
    tmp_path: Path, fake_engine: Callable[..., FakeEngine]
) -> None:
    engine = Engine(fake_engine())
    engine.set(running=96)  # 3 replicas' worth
    [p] = await start_scalers(tmp_path, 1, names=["rayserve"])
    policy = WarmscalePolicy(scaler=f"127.0.0.1:{p.grpc_port}", name="llm", namespace="ray",
                             metadata={**META, "endpoints": engine.url}, poll_s=0.2, stale_s=2.0)
    try:
        replicas, state = policy(ctx(1))
        assert (replicas, state) == (1, {"mine": 1, STATE_KEY: "no answer yet"})  # nothing known: keep
        took = wait_until(lambda: policy(ctx(1))[0] == 3, within=20)
        print(f"\nrayserve policy: first scaler answer (3 replicas) after {took:.2f}s")
        assert policy(ctx(1))[1][STATE_KEY] == "scaler"
        engine.set(running=200)  # 7 replicas
        wait_until(lambda: policy(ctx(3))[0] == 7, within=20)
        await p.close()  # the scaler is gone
        wait_until(lambda: policy.error is not None, within=5)
        assert policy(ctx(7))[0] == 7  # the last answer, still fresh
        wait_until(lambda: policy(ctx(7))[1][STATE_KEY].startswith("stale"), within=5)
        t0 = time.monotonic()
        assert policy(ctx(7)) == (7, {"mine": 1, STATE_KEY: policy(ctx(7))[1][STATE_KEY]})
        assert time.monotonic() - t0 < CALL_BUDGET_S * 2
    finally:
        policy.close()
        await p.close()


def test_a_hung_scaler_never_delays_the_call(hung_scaler: str) -> None:
    policy = WarmscalePolicy(scaler=hung_scaler, name="llm", timeout_s=0.3, poll_s=0.1, stale_s=1.0)
    try:
        worst = 0.0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            assert policy(ctx(4)) == (4, {"mine": 1, STATE_KEY: "no answer yet"})
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.1)  # Serve's loop period
        print(f"\nrayserve policy: worst call {worst * 1000:.2f} ms against a hung scaler")
        assert worst < CALL_BUDGET_S
        assert policy.error is not None and "DEADLINE_EXCEEDED" in policy.error
        assert policy.asked >= 2  # the thread kept asking, each bounded by timeout_s
    finally:
        policy.close()


def test_refused_connection_keeps_the_count() -> None:
    policy = WarmscalePolicy(scaler=f"127.0.0.1:{free_port()}", name="llm", timeout_s=0.3, poll_s=0.1)
    try:
        wait_until(lambda: policy(ctx(2)) is not None and policy.error is not None, within=5)
        assert policy(ctx(2))[0] == 2
    finally:
        policy.close()
