"""The demo's stand-in for a Deployment on GPU nodes: replicas that start, serve ``/metrics`` and drain.

Time is trace time (seconds; the demo's clock runs ``speed`` times faster than the wall clock).

- A new replica climbs the startup ladder of :mod:`warmpool.startup_model`: on a warm placeholder
  (warmscale's warm pool: GPU held, image pulled, weights and compile cache staged) it takes
  ``time_to_ready(profile, PLACEHOLDER_STAGED)``; otherwise it starts cold (node provisioning, image
  pull, weights download, load, engine init). A consumed placeholder is replaced the way the
  warm-pool controller does it: a new node is provisioned and staged (``staging_time``).
- Removed replicas stop taking requests, hand their queued requests back to the router and go
  away once their running requests finished; their node becomes a placeholder again if the pool
  is short, else it is released.
- The router sends each request to the ready replica with the fewest requests in flight (a
  Service or gateway in front of the pods); with no ready replica it holds the request. With a hot
  pool (:mod:`warmscale.demo.hot`) the gateway also routes to the woken sleepers the waker publishes
  as awake (``bridges``), and the fleet steps its sleepers' engines.
- GPU-seconds count every held GPU: starting, serving and draining replicas and placeholders
  (also while they are being provisioned and staged), as the trace benchmark counts them.

One aiohttp app serves every replica's exposition at ``/replica/<name>/metrics``.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass, field

from aiohttp import web

from warmscale.simulation.engine import EngineProfile, Request, SimulatedEngine
from warmscale.warmpool.startup_model import COLD, PLACEHOLDER_STAGED, StartupProfile, staging_time, time_to_ready


@dataclass
class Replica:
    engine: SimulatedEngine
    created_at: float
    ready_at: float
    warm: str  # "initial" | "placeholder+staged" | "cold"
    draining: bool = False

    def ready(self, now: float) -> bool:
        return now >= self.ready_at and not self.draining


@dataclass
class Fleet:
    name: str
    startup: StartupProfile
    profile: EngineProfile = field(default_factory=EngineProfile)
    standby: int = 0  # placeholders the warm pool keeps (0: no warm pool, every start is cold)
    replicas: dict[str, Replica] = field(default_factory=dict)
    placeholders: list[float] = field(default_factory=list)  # times at which each becomes warm
    held: deque[Request] = field(default_factory=deque)
    base_url: str = ""
    gpu_seconds: float = 0.0
    starts: Counter[str] = field(default_factory=Counter)
    scale_events: list[tuple[float, int, int]] = field(default_factory=list)
    added: list[Replica] = field(default_factory=list)  # every replica created by a scale-up
    # The hot pool's sleepers of this model (stepped with the fleet), and those of them the gateway
    # routes to now: awake with a passing canary (as the waker publishes them), not draining for a sleep.
    sleepers: dict[str, SimulatedEngine] = field(default_factory=dict)
    routed: set[str] = field(default_factory=set)
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _accounted_at: float | None = None

    # -- the Deployment and the warm pool ---------------------------------------------------------
    @property
    def spec_replicas(self) -> int:
        return sum(1 for r in self.replicas.values() if not r.draining)

    def start_ready(self, n: int, now: float) -> None:
        """``n`` replicas already serving at ``now`` (the fleet before the burst), plus the warm pool."""
        for _ in range(n):
            self._add(now, now, "initial")
        self.placeholders = [now] * self.standby
        self._accounted_at = now

    def _add(self, now: float, ready_at: float, warm: str) -> Replica:
        name = f"{self.name}-{next(self._names)}"
        self.replicas[name] = Replica(SimulatedEngine(name, self.profile), now, ready_at, warm)
        return self.replicas[name]

    def time_to_ready(self, warm: bool) -> float:
        return time_to_ready(self.startup, PLACEHOLDER_STAGED if warm else COLD)

    def placeholders_ready(self, now: float) -> int:
        return sum(1 for t in self.placeholders if t <= now)

    def scale_to(self, n: int, now: float) -> None:
        before = self.spec_replicas
        if n == before:
            return
        self.scale_events.append((now, before, n))
        for _ in range(n - before):
            avail = [i for i, t in enumerate(self.placeholders) if t <= now]
            if avail:
                self.placeholders.pop(avail[0])
                warm = "placeholder+staged"
                # The warm-pool controller re-creates the placeholder; it needs a new node, staged.
                self.placeholders.append(now + staging_time(self.startup, new_node=True))
            else:
                warm = "cold"
            self.starts[warm] += 1
            self.added.append(self._add(now, now + self.time_to_ready(warm != "cold"), warm))
        if n < before:
            live = [r for r in self.replicas.values() if not r.draining]
            # Like a ReplicaSet: not-ready replicas go first (newest first), then the least loaded.
            victims = sorted(live, key=lambda r: (r.ready(now), r.engine.in_flight, -r.created_at))[: before - n]
            for r in victims:
                r.draining = True
                while r.engine.waiting:
                    self.held.append(r.engine.waiting.popleft())

    def _free_node(self, now: float) -> None:
        """A replica's node is free: it becomes a (staged, so at once warm) placeholder if the pool is short."""
        if len(self.placeholders) < self.standby:
            self.placeholders.append(now)
        else:
            # The pool is full: drop the farthest-from-warm pending placeholder in favour of this node.
            pending = [i for i, t in enumerate(self.placeholders) if t > now]
            if pending:
                self.placeholders[max(pending, key=lambda i: self.placeholders[i])] = now

    def counts(self, now: float) -> tuple[int, int]:
        """(ready, starting) replicas."""
        ready = sum(1 for r in self.replicas.values() if r.ready(now))
        starting = sum(1 for r in self.replicas.values() if not r.draining and now < r.ready_at)
        return ready, starting

    def endpoints(self, now: float) -> list[str]:
        """Metrics URLs of the replicas that are up (ready, or draining with work left)."""
        return [f"{self.base_url}/replica/{name}/metrics" for name, r in self.replicas.items() if now >= r.ready_at]

    # -- traffic -----------------------------------------------------------------------------------
    def targets(self, now: float) -> list[SimulatedEngine]:
        """The engines the router may send a request to: ready replicas and routed sleepers."""
        out = [r.engine for r in self.replicas.values() if r.ready(now)]
        out.extend(e for name, e in self.sleepers.items() if name in self.routed and e.takes_requests)
        return out

    def submit(self, request: Request, now: float) -> None:
        ready = self.targets(now)
        if not ready or self.held:
            self.held.append(request)
            return
        min(ready, key=lambda e: e.in_flight).submit(request)

    def step(self, now: float) -> None:
        ready = self.targets(now)
        while self.held and ready:
            min(ready, key=lambda e: e.in_flight).submit(self.held.popleft())
        for e in self.sleepers.values():
            e.step(now)
        for name, r in list(self.replicas.items()):
            if now >= r.ready_at:
                r.engine.step(now)
            if r.draining and (r.engine.in_flight == 0 or now < r.ready_at):
                del self.replicas[name]
                if now >= r.ready_at or r.warm != "cold":  # a node still being provisioned is just released
                    self._free_node(now)
        self._account(now)

    def _account(self, now: float) -> None:
        if self._accounted_at is not None:
            units = len(self.replicas) + len(self.placeholders)
            self.gpu_seconds += units * self.startup.gpus_per_replica * max(0.0, now - self._accounted_at)
        self._accounted_at = now

    def _engines(self) -> list[SimulatedEngine]:
        return [r.engine for r in self.replicas.values()] + list(self.sleepers.values())

    def queue(self) -> int:
        return len(self.held) + sum(len(e.waiting) for e in self._engines())

    def running(self) -> int:
        return sum(len(e.running) for e in self._engines())

    def sleepers_awake(self) -> int:
        """This model's sleepers awake now (serving, draining or falling asleep: holding their GPU)."""
        return sum(1 for e in self.sleepers.values() if e.sleep_level == 0)

    def take_ttfts(self) -> list[float]:
        out: list[float] = []
        for e in self._engines():
            out.extend(e.ttfts)
            e.ttfts.clear()
        return out

    # -- /metrics ----------------------------------------------------------------------------------
    def app(self) -> web.Application:
        async def metrics(request: web.Request) -> web.Response:
            r = self.replicas.get(request.match_info["name"])
            if r is None:
                raise web.HTTPNotFound()
            return web.Response(body=r.engine.exposition(), content_type="text/plain", charset="utf-8")

        app = web.Application()
        app.router.add_get("/replica/{name}/metrics", metrics)
        return app
