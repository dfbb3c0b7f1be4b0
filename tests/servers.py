"""The real-server pytest fixtures shared by every suite, over :mod:`warmscale.localcluster.servers`.

* ``redis_server`` (session): a :class:`RedisServer`.
* ``prometheus_server`` (session factory): ``prometheus_server(targets, scrape_interval="1s")`` starts
  a :class:`PrometheusServer`; every server stops at session end.
* ``fake_engine`` (function factory): ``fake_engine(payload)``, a :class:`FakeEngine` closed at the end
  of the test.

Install the servers with ``.ci/install-servers.sh``. Without them the server tests skip, except in
CI (``CI=true``), where a missing binary fails loudly.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from warmscale.localcluster.processes import free_port
from warmscale.localcluster.servers import (
    PROMETHEUS_BIN,
    REDIS_BIN,
    FakeEngine,
    PrometheusServer,
    RedisServer,
    stop_process,
)

__all__ = ["SAMPLES_DIR", "FakeEngine", "PrometheusServer", "RedisServer", "free_port", "require_binary",
           "running_redis", "sample", "stop_process"]

SAMPLES_DIR = Path(
    os.environ.get("WARMSCALE_SAMPLES", Path(__file__).resolve().parents[2] / "shared/reference/metrics-samples")
)


def require_binary(path: str, what: str) -> None:
    """Skip (or fail under CI=true) when a server binary is missing."""
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return
    msg = f"{what} not found at {path}; run .ci/install-servers.sh"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


@contextlib.contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A started private redis-server (skips, or fails in CI, without the binary); closed on exit."""
    require_binary(REDIS_BIN, "redis-server")
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture(scope="session")
def prometheus_server() -> Iterator[Callable[..., PrometheusServer]]:
    """Factory: ``prometheus_server(targets, scrape_interval="1s")``; every server stops at session end."""
    require_binary(PROMETHEUS_BIN, "prometheus")
    started: list[PrometheusServer] = []

    def start(targets: Sequence[str], scrape_interval: str = "1s") -> PrometheusServer:
        server = PrometheusServer(targets, scrape_interval)
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for s in started:
            s.close()


def sample(name: str) -> str:
    """A payload from ``../shared/reference/metrics-samples`` (e.g. ``"vllm-v1-load.prom"``)."""
    return (SAMPLES_DIR / name).read_text()


@pytest.fixture
def fake_engine() -> Iterator[Callable[..., FakeEngine]]:
    """Factory: ``fake_engine(payload="", path="/metrics")``; closed at the end of the test."""
    made: list[FakeEngine] = []

    def make(payload: str = "", path: str = "/metrics") -> FakeEngine:
        e = FakeEngine(payload, path)
        made.append(e)
        return e

    try:
        yield make
    finally:
        for e in made:
            e.close()
