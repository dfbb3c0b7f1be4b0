"""The batch worker against a real Redis: a stopped worker loses nothing (SIGTERM: the item in hand goes
back at the head of the queue; SIGKILL: the next worker to start puts the dead one's items back)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from warmscale.batch import keys

ROOT = Path(__file__).resolve().parents[2]


def worker(url: str, queue: str, name: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "warmscale.batch.worker", "--redis", url, "--queue", queue,
                             "--worker-id", name, *extra], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait(pred: Any, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


@pytest.fixture
def r(redis_server: Any) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url, decode_responses=True)


def test_sigterm_puts_the_item_in_hand_back_first(redis_server: Any, r: redis.Redis) -> None:
    q = f"batch:{uuid.uuid4().hex[:6]}"
    r.lpush(q, "a", "b", "c")  # BLMOVE takes from the right: "a" first
    w = worker(redis_server.url, q, "w1", "--work-seconds", "60")
    wait(lambda: r.lrange(keys.processing(q, "w1"), 0, -1) == ["a"])
    t0 = time.monotonic()
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0, w.stderr.read() if w.stderr else ""
    assert time.monotonic() - t0 < 5
    assert r.lrange(q, 0, -1) == ["c", "b", "a"]  # "a" is again the next one taken
    assert r.llen(keys.processing(q, "w1")) == 0 and not r.exists(keys.alive(q, "w1"))


def test_a_killed_workers_items_come_back_when_the_next_worker_starts(redis_server: Any, r: redis.Redis) -> None:
    q = f"batch:{uuid.uuid4().hex[:6]}"
    r.lpush(q, "a", "b")
    dead = worker(redis_server.url, q, "dead", "--work-seconds", "60", "--alive-ttl", "1")
    wait(lambda: r.lrange(keys.processing(q, "dead"), 0, -1) == ["a"])
    dead.kill()
    dead.wait(timeout=10)
    assert r.lrange(keys.processing(q, "dead"), 0, -1) == ["a"]  # nothing ran its clean-up
    wait(lambda: not r.exists(keys.alive(q, "dead")), within=5)
    # a live worker's list is not touched by another's recovery
    r.set(keys.alive(q, "busy"), "1", ex=60)
    r.lpush(keys.processing(q, "busy"), "x")
    nxt = worker(redis_server.url, q, "next", "--exit-when-empty", "--idle-exit", "1")
    assert nxt.wait(timeout=30) == 0, nxt.stderr.read() if nxt.stderr else ""
    assert sorted(r.lrange(keys.done(q), 0, -1)) == ["a", "b"]
    assert r.llen(q) == 0 and r.llen(keys.processing(q, "dead")) == 0
    assert r.lrange(keys.processing(q, "busy"), 0, -1) == ["x"]


def test_exec_failures_retry_then_park_the_item(redis_server: Any, r: redis.Redis) -> None:
    q = f"batch:{uuid.uuid4().hex[:6]}"
    r.lpush(q, "ok", "bad")
    w = worker(redis_server.url, q, "w", "--exec", 'test "$(cat)" = ok', "--attempts", "2",
               "--exit-when-empty", "--idle-exit", "1")
    assert w.wait(timeout=30) == 0, w.stderr.read() if w.stderr else ""
    assert r.lrange(keys.done(q), 0, -1) == ["ok"]
    assert r.lrange(f"{q}:failed", 0, -1) == ["bad"]


@pytest.mark.parametrize(("args", "flag"), [(["--attempts", "0"], "--attempts"),
                                            (["--work-seconds", "-1"], "--work-seconds")])
def test_bad_flags_are_named(args: list[str], flag: str) -> None:
    out = subprocess.run([sys.executable, "-m", "warmscale.batch.worker", "--queue", "q", *args],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and flag in out.stderr
