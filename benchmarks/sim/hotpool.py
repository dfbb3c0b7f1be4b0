"""The shared hot pool of the fleet benchmark: sleepers of several models on a few pool GPUs.

What runs here is the product's pure code; only the engines' sleep and wake take simulated time:

- each model opts in with the workload annotations of :mod:`warmpool.hot.config` (``hot-standby: "1"``,
  its pool, ``engine: vllm``, the sleep level), parsed by :func:`parse_hot`; the pool's nodes carry the
  node annotations (:func:`parse_pool_node`); the sleepers are placed by :func:`warmpool.hot.pool.plan_pool`
  and a wake goes where :func:`warmpool.hot.pool.choose_wakes` says (at most ``awake_per_gpu`` awake
  engines per pool GPU);
- a wake is the calls of :func:`warmpool.hot.surface.wake_calls`; the woken engine serves only after its
  canary passed (:func:`warmpool.hot.canary.judge` on the simulated completion, docs/hot-tier.md);
- the sleep and wake times are the simulated engine's measured ones (:class:`warmscale.simulation.engine.EngineProfile`,
  vllm PR #48337) for an 8B, and for a 70B on 4 GPUs derived from them by the bytes each GPU copies
  (:data:`SLEEP_TIMES`).

A pool "GPU" of a TP-N model is a group of N GPUs (a TP engine's sleeper spans its group); every pool
GPU is charged in full for the whole run, asleep or awake (:meth:`HotPool.gpus`).

Two phases (issue 23, requirement 3): a model's sleeper is woken when the scaler's decision wants more
replicas than are ready (the onset); it serves after wake + canary and bridges until the decision no
longer wants more than the Deployment's own ready replicas; then it drains (``mode=wait``: what it holds
is finished, what waits goes back to the gateway) and sleeps, its GPU held awake until the sleep is done.
The Deployment still grows through KEDA and the HPA as the scaler decides. The scaler's pod discovery
sees the Deployment's pods, so a bridge's load is not in its snapshot (the policy does not count awake
sleepers as capacity yet).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from warmscale.benchmarks.sim.cluster import Cluster
from warmscale.benchmarks.sim.engine import Engine, EngineProfile, Request
from warmscale.simulation.engine import CANARY_TEXT
from warmscale.simulation.hotpool import (
    AWAKE_HBM_GIB,
    GPU_HBM_GIB,
    SLEEP_TIMES,
    SLEEPERS_PER_GPU,
    hot_annotations,
    pool_node_annotations,
)
from warmscale.simulation.hotpool import SleepTimes as SleepTimes
from warmscale.warmpool.hot.auto_size import sleepers_wanted
from warmscale.warmpool.hot.canary import judge
from warmscale.warmpool.hot.config import (
    HotConfig,
    parse_hot,
    parse_pool_node,
)
from warmscale.warmpool.hot.pool import (
    SLEEPER_HBM_GIB_DEFAULT,
    Placement,
    Pool,
    PoolGPU,
    PoolPlan,
    SleeperWant,
    choose_wakes,
    plan_pool,
)
from warmscale.warmpool.hot.surface import wake_calls

# ---- measured figures: warmscale/simulation/hotpool.py (SLEEP_TIMES, with their sources) ------------

def canary_s(ep: EngineProfile) -> float:
    """The canary on a woken, empty engine: its prompt (a handful of tokens) in one step, then 3 more
    decode steps for ``CANARY_MAX_TOKENS`` = 4 tokens (warmpool/hot/canary.py)."""
    return ep.step_s(1, 8, 8) + 3 * ep.decode_step_s(1, 12)


# ---- the woken engine -------------------------------------------------------------------------------

class _FirstTokenSink(list[tuple[float, float, int]]):
    """The model's TTFT sink, noting when this engine produced its first token."""

    def __init__(self, target: list[tuple[float, float, int]]) -> None:
        super().__init__()
        self.target = target
        self.first_token_at: float | None = None

    def append(self, x: tuple[float, float, int]) -> None:
        if self.first_token_at is None:
            self.first_token_at = x[0] + x[1]
        self.target.append(x)


@dataclass
class Bridge:
    """A woken sleeper of one model: waking -> serving (after the canary) -> draining -> sleeping -> asleep."""

    placement: Placement
    engine: Engine
    wake_requested_at: float
    serve_at: float  # wake done + canary passed
    state: str = "waking"
    canary_ok: bool = True
    asleep_at: float = math.inf
    first_routed_at: float | None = None
    sink: _FirstTokenSink | None = None
    sleep_s: float = 0.0  # what its sleep takes (the GPU stays held meanwhile)


class HotCluster(Cluster):
    """A model's fleet whose gateway also routes to its woken sleepers (serving bridges)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bridges: list[Bridge] = []

    def serving(self) -> list[Any]:
        return self.ready + [b for b in self.bridges if b.state == "serving"]

    def _activate(self, at: float) -> None:
        for b in self.bridges:
            if b.state == "waking" and b.serve_at <= at + 1e-12:
                if not b.canary_ok:  # a wake whose canary fails is never routed; it goes back to sleep
                    b.state, b.asleep_at = "sleeping", at + b.sleep_s
                    continue
                b.state = "serving"
                b.engine.clock = max(b.engine.clock, b.serve_at)
        if self.gateway:
            self._flush_gateway(at)

    def events_until(self, t: float) -> None:
        while True:
            due = [b.serve_at for b in self.bridges if b.state == "waking" and b.serve_at <= t]
            if not due:
                break
            at = min(due)
            super().events_until(at)
            self._activate(at)
        super().events_until(t)

    def _flush_gateway(self, now: float) -> None:
        targets = self.serving()
        if not targets:
            return
        while self.gateway:
            r = self.gateway.popleft()
            self.gateway_n -= r.n
            self._route_hot(r, targets, now)

    def dispatch(self, r: Request) -> None:
        targets = self.serving()
        if not targets:
            self._hold(r)
            return
        self._route_hot(r, targets, r.t_arr)

    def _route_hot(self, r: Request, targets: list[Any], now: float) -> None:
        for b in targets:
            if isinstance(b, Bridge) and b.first_routed_at is None:
                b.first_routed_at = now  # the earliest a bridge may get work (tests read it)
        self._route(r, targets, now)

    def advance(self, now: float) -> None:
        super().advance(now)
        for b in self.bridges:
            if b.state in ("serving", "draining"):
                b.engine.advance_to(now)
            if b.state == "draining" and b.engine.idle:
                b.state = "sleeping"
                b.asleep_at = now + b.sleep_s
        if self.gateway and self.serving():
            self._flush_gateway(now)

    def busy(self) -> bool:
        return any(not b.engine.idle for b in self.bridges if b.state in ("serving", "draining"))


# ---- the pool -------------------------------------------------------------------------------------

@dataclass
class HotModel:
    name: str  # the workload (namespace/name)
    profile: str
    cfg: HotConfig
    cluster: HotCluster
    engine: EngineProfile


@dataclass
class HotPool:
    """Every model's sleepers on the pools' GPUs; :meth:`on_decision` after each scaler decision."""

    models: dict[str, HotModel]
    pools: dict[str, Pool]
    plans: dict[str, PoolPlan]
    gpus_per_device: dict[str, int]  # pool device -> the GPUs it stands for (a TP group)
    faulty_wake: Callable[[str, int], bool] = lambda workload, n: False  # tests: this wake's canary fails
    wakes: int = 0
    failed_wakes: int = 0
    wake_to_first_token: list[float] = field(default_factory=list)
    log: list[tuple[float, str, str, str]] = field(default_factory=list)  # (time, workload, device, event)
    history: list[tuple[str, Bridge]] = field(default_factory=list)  # every wake: (workload, its bridge)

    def gpus(self) -> int:
        """The GPUs the pools hold: charged in full for the whole run, asleep or awake."""
        return sum(self.gpus_per_device[g.device] for p in self.pools.values() for g in p.gpus)

    def _awake(self, now: float) -> dict[str, int]:
        """Engines awake per pool device: waking, serving, draining, or still falling asleep."""
        out: dict[str, int] = {}
        for m in self.models.values():
            for b in m.cluster.bridges:
                if b.state in ("waking", "serving", "draining") or (b.state == "sleeping" and b.asleep_at > now):
                    out[b.placement.device] = out.get(b.placement.device, 0) + 1
        return out

    def step(self, now: float) -> None:
        """Bridges whose sleep finished leave their GPU (it may host another wake)."""
        for m in self.models.values():
            keep = []
            for b in m.cluster.bridges:
                if b.state == "sleeping" and b.asleep_at <= now:
                    self._record(b)
                    self.log.append((b.asleep_at, m.name, b.placement.device, "asleep"))
                    continue
                keep.append(b)
            m.cluster.bridges = keep

    def close(self) -> None:
        """The run is over: the bridges still up report their first token too."""
        for m in self.models.values():
            for b in m.cluster.bridges:
                self._record(b)
            m.cluster.bridges = []

    def _record(self, b: Bridge) -> None:
        if b.sink is not None and b.sink.first_token_at is not None:
            self.wake_to_first_token.append(b.sink.first_token_at - b.wake_requested_at)

    def on_decision(self, name: str, desired: int, now: float) -> None:
        """The scaler decided ``desired`` for model ``name`` at ``now``: wake sleepers at the onset
        (more wanted than ready), put the bridges back to sleep once it is over."""
        m = self.models[name]
        c = m.cluster
        active = [b for b in c.bridges if b.state in ("waking", "serving")]
        times = SLEEP_TIMES[m.profile]
        want = desired - c.n_ready() - len(active)
        if desired <= c.n_ready():
            for b in active:
                self._sleep(m, b, now)
            return
        if want <= 0:
            return
        plan = self.plans[m.cfg.pool]
        busy = {(b.placement.workload, b.placement.index) for b in c.bridges}
        free = PoolPlan(tuple(p for p in plan.placements if (p.workload, p.index) not in busy))
        pool = self.pools[m.cfg.pool]
        for p in choose_wakes(free, name, want, self._awake(now), pool.awake_per_gpu):
            self.wakes += 1
            # The wake's calls (one for level 1; three for level 2), their time as measured.
            calls = wake_calls(m.cfg.engine, m.cfg.level)
            assert calls, "a supported engine has wake calls"
            ok = judge({"choices": [{"text": "" if self.faulty_wake(name, self.wakes) else CANARY_TEXT}]},
                       CANARY_TEXT).ok
            if not ok:
                self.failed_wakes += 1
            sink = _FirstTokenSink(c.ttft_sink)
            serve_at = now + times.wake_s[m.cfg.level] + canary_s(m.engine)
            b = Bridge(p, Engine(m.engine, sink, serve_at), now, serve_at, canary_ok=ok, sink=sink,
                       sleep_s=times.sleep_s[m.cfg.level])
            c.bridges.append(b)
            self.history.append((name, b))
            self.log.append((now, name, p.device, "wake"))

    def _sleep(self, m: HotModel, b: Bridge, now: float) -> None:
        """``/sleep?mode=wait``: what waits goes back to the gateway, what runs finishes, then the sleep."""
        if b.state == "waking":  # the Deployment caught up before the wake finished: it sleeps right after
            b.state, b.asleep_at = "sleeping", b.serve_at + b.sleep_s
            return
        for r in b.engine.take_waiting(now):
            m.cluster._hold(r)
        b.state = "draining"
        self.log.append((now, m.name, b.placement.device, "drain"))


def build_pool(models: list[tuple[str, str, EngineProfile, HotCluster]], level: int) -> HotPool:
    """One pool per engine profile, each of ceil(models / SLEEPERS_PER_GPU) pool GPUs (TP groups for a
    multi-GPU profile) on one node, one sleeper per model; placed by plan_pool."""
    by_profile: dict[str, list[tuple[str, str, EngineProfile, HotCluster]]] = {}
    for item in models:
        by_profile.setdefault(item[1], []).append(item)
    pools: dict[str, Pool] = {}
    plans: dict[str, PoolPlan] = {}
    per_device: dict[str, int] = {}
    hot: dict[str, HotModel] = {}
    for profile, items in sorted(by_profile.items()):
        name = f"hot-{profile.split('-')[0]}"
        node = f"{name}-node-0"
        node_cfg = parse_pool_node(pool_node_annotations(name))
        assert node_cfg is not None
        tp = items[0][2].gpus_per_replica
        n_dev = math.ceil(len(items) / SLEEPERS_PER_GPU)
        devices = tuple(PoolGPU(node, f"{node}/gpu-{i * tp}" + (f"-{i * tp + tp - 1}" if tp > 1 else ""),
                                GPU_HBM_GIB * tp) for i in range(n_dev))
        pool = Pool(name, devices, {node: node_cfg.host_ram_gib}, node_cfg.awake_per_gpu)
        wants = []
        for wname, _, ep, cluster in items:
            cfg = parse_hot(hot_annotations(name, level))
            assert cfg is not None
            ram = SLEEP_TIMES[profile].host_ram_gib[cfg.level]
            # (`auto` without the scaler's burst statistics, which this replay does not publish: the prior)
            wants.append(SleeperWant(wname, sleepers_wanted(cfg, None, 1).count, ram, value_per_gib=1.0 / max(ram, 1.0),
                                     sleeper_hbm_gib=SLEEPER_HBM_GIB_DEFAULT * tp, awake_hbm_gib=AWAKE_HBM_GIB * tp))
            hot[wname] = HotModel(wname, profile, cfg, cluster, ep)
        pools[name] = pool
        plans[name] = plan_pool(pool, wants)
        for d in devices:
            per_device[d.device] = tp
    return HotPool(hot, pools, plans, per_device)
