"""Wall-clock steps do not skip or freeze the decision windows (issue 20, item 22): the scaler's
clock advances with the monotonic clock across a step and catches up at most 5% faster or slower.
Tables on an injected clock, and the real server whose wall clock steps by +1 h (8 -> 1 in 0.5 s
before)."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

from tests.scaler.conftest import ScriptedReader, eventually
from warmscale.scaler.clock import SLEW_RATE, SteadyClock
from warmscale.scaler.server import ScalerServer
from warmscale.scaler.server_options import ServerOptions


class Fake:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def advance(self, seconds: float, step: float = 0.0) -> None:
        self.mono += seconds
        self.wall += seconds + step


@pytest.mark.parametrize(("step", "after_10s"), [
    (0.0, 10.0),          # no step: the wall clock
    (0.3, 10.3),          # NTP-sized adjustments are taken as they are
    (3600.0, 10.0 * (1 + SLEW_RATE)),   # +1 h: 10 s of monotonic time, 5% faster
    (-3600.0, 10.0 * (1 - SLEW_RATE)),  # -1 h: still forward, 5% slower
])
def test_steady_clock_across_a_step(step: float, after_10s: float) -> None:
    f = Fake()
    clock = SteadyClock(wall=lambda: f.wall, mono=lambda: f.mono)
    t0 = clock()
    f.advance(0.0, step)
    assert clock() == pytest.approx(t0 + step if abs(step) <= 1.0 else t0)  # a step: no jump
    for _ in range(10):
        f.advance(1.0)
        clock()
    assert clock() - t0 == pytest.approx(after_10s)


def test_steady_clock_catches_up_then_follows_the_wall_again() -> None:
    f = Fake()
    clock = SteadyClock(wall=lambda: f.wall, mono=lambda: f.mono)
    f.advance(1.0, 60.0)
    seen = [clock()]
    for _ in range(1300):  # 60 s at 5% of 1,300 s
        f.advance(1.0)
        seen.append(clock())
    assert all(b >= a for a, b in itertools.pairwise(seen))
    assert clock() == f.wall  # caught up: the wall clock again
    f.advance(1.0)
    assert clock() == f.wall


async def test_a_forward_step_does_not_skip_the_scale_down_window(clients: Any) -> None:
    step = [0.0]
    reader = ScriptedReader(load=256.0)  # 8 replicas at 32 per replica
    server = ScalerServer(ServerOptions(host="127.0.0.1", grpc_port=0, metrics_port=None), reader,
                          clock=lambda: time.time() + step[0])  # the wall clock, which an operator steps
    await server.start()
    try:
        c = clients(server.grpc_port)

        async def desired(n: int) -> bool:
            _, ivalue, _ = await c.poll(c.ref())
            return ivalue == n

        await eventually(lambda: desired(8), within=5)
        reader.set(32.0)  # one replica's worth: scale-down waits for the 300 s stabilisation window
        await asyncio.sleep(0.3)
        step[0] = 3600.0
        await asyncio.sleep(1.0)  # ~10 decisions after the step
        _, ivalue, _ = await c.poll(c.ref())
        assert ivalue == 8
    finally:
        await server.stop(0.2)
