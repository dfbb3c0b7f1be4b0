"""The demo's stand-in for a Deployment: replicas that start, serve ``/metrics`` and drain.

One aiohttp server serves every replica's exposition at ``/replica/<name>/metrics``. A router sends
each arriving request to the ready replica with the fewest requests in flight, like a gateway with
flow control: it holds requests while no ready replica has fewer than ``max_engine_waiting``
waiting. ``scale_to(n)`` behaves like a Deployment: new replicas become ready after ``startup_s``;
removed replicas stop taking requests and go away once drained.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from aiohttp import web

from warmscale.demo.engine import EngineProfile, Request, SimulatedEngine


@dataclass
class Replica:
    engine: SimulatedEngine
    created_at: float
    ready_at: float
    draining: bool = False

    def ready(self, now: float) -> bool:
        return now >= self.ready_at and not self.draining


@dataclass
class Fleet:
    startup_s: float
    profile: EngineProfile = field(default_factory=EngineProfile)
    replicas: dict[str, Replica] = field(default_factory=dict)
    held: deque[Request] = field(default_factory=deque)
    base_url: str = ""
    max_engine_waiting: int = 8
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- the Deployment ------------------------------------------------------------------
    @property
    def spec_replicas(self) -> int:
        return sum(1 for r in self.replicas.values() if not r.draining)

    def scale_to(self, n: int, now: float, startup_s: float | None = None) -> None:
        live = [r for r in self.replicas.values() if not r.draining]
        for _ in range(n - len(live)):
            name = f"vllm-{next(self._names)}"
            delay = self.startup_s if startup_s is None else startup_s
            self.replicas[name] = Replica(SimulatedEngine(name, self.profile), now, now + delay)
        if n < len(live):
            # Like a ReplicaSet: not-ready replicas go first, then the newest.
            victims = sorted(live, key=lambda r: (r.ready(now), -r.created_at))[: len(live) - n]
            for r in victims:
                r.draining = True

    def counts(self, now: float) -> tuple[int, int]:
        """(ready, starting) replicas."""
        ready = sum(1 for r in self.replicas.values() if r.ready(now))
        starting = sum(1 for r in self.replicas.values() if not r.draining and now < r.ready_at)
        return ready, starting

    def endpoints(self, now: float) -> list[str]:
        """Metrics URLs of the replicas that are up (ready or draining with work left)."""
        return [f"{self.base_url}/replica/{name}/metrics" for name, r in self.replicas.items() if now >= r.ready_at]

    # -- traffic ---------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        self.held.append(request)

    def step(self, now: float) -> None:
        ready = [r for r in self.replicas.values() if r.ready(now)]
        while self.held and ready:
            target = min(ready, key=lambda r: r.engine.in_flight)
            if len(target.engine.waiting) >= self.max_engine_waiting:
                break
            target.engine.submit(self.held.popleft())
        for name, r in list(self.replicas.items()):
            if now >= r.ready_at:
                r.engine.step(now)
            if r.draining and (r.engine.in_flight == 0 or now < r.ready_at):
                del self.replicas[name]

    def queue(self) -> int:
        return len(self.held) + sum(len(r.engine.waiting) for r in self.replicas.values())

    def running(self) -> int:
        return sum(len(r.engine.running) for r in self.replicas.values())

    def take_ttfts(self) -> list[float]:
        out: list[float] = []
        for r in self.replicas.values():
            out.extend(r.engine.ttfts)
            r.engine.ttfts.clear()
        return out

    # -- /metrics --------------------------------------------------------------------------
    def app(self) -> web.Application:
        async def metrics(request: web.Request) -> web.Response:
            r = self.replicas.get(request.match_info["name"])
            if r is None:
                raise web.HTTPNotFound()
            return web.Response(body=r.engine.exposition(), content_type="text/plain", charset="utf-8")

        app = web.Application()
        app.router.add_get("/replica/{name}/metrics", metrics)
        return app
