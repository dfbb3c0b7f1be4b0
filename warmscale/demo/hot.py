"""The demo's hot pool: sleeping engines on a few shared GPUs that the production waker wakes at the
burst's onset (docs/hot-tier.md; issue 23, requirement 6).

What runs is the product's code: each sleeper is a simulated vLLM engine asleep at level 1 behind the
real sleep surface (:func:`warmscale.simulation.engine_http.engine_app`: ``/sleep?mode=wait``,
``/wake_up``, the canary's ``/v1/completions``), its sleep and wake taking the measured times of
:data:`warmscale.simulation.hotpool.SLEEP_TIMES` (vllm PR #48337) on the demo's clock; the sleepers are
placed on the pool GPUs by :func:`warmscale.warmpool.hot.pool.plan_pool` from the workloads' opt-in
annotations (:func:`warmscale.warmpool.hot.config.parse_hot`); the :class:`warmscale.warmpool.hot.waker.Waker`
reads the scaler's wake intents from the store and wakes or drains and sleeps them; the scaler counts
them through the hot status it publishes (``scaler/decide/hot.py``). The gateway routes to the
sleepers the hot status lists as awake (canary passed), as a gateway reading that status would.

The pool is shared: :data:`POOL_GPUS` GPUs hold the demo model's :data:`HOT_SLEEPERS` sleepers and one
sleeper each of :data:`IDLE_MODELS` other models, idle during the burst (asleep throughout). Every pool
GPU is paid in full for the whole run; the demo model is charged the GPU-seconds its own sleepers were
awake (waking, serving, draining, falling asleep: holding a whole GPU) plus its share, by sleepers held,
of the pool's remaining GPU-seconds (:meth:`HotPoolDemo.charge`); the other models pay the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace

import aiohttp
from aiohttp import web

from warmscale.demo.actuation import Clock
from warmscale.demo.fleet import Fleet
from warmscale.scaler.store import Store
from warmscale.simulation.engine import MODEL, SimulatedEngine
from warmscale.simulation.engine_http import engine_app
from warmscale.simulation.hotpool import (
    AWAKE_HBM_GIB,
    GPU_HBM_GIB,
    SLEEP_TIMES,
    SLEEPERS_PER_GPU,
    hot_annotations,
    pool_node_annotations,
)
from warmscale.warmpool.hot.config import parse_hot, parse_pool_node
from warmscale.warmpool.hot.pool import SLEEPER_HBM_GIB_DEFAULT, Pool, PoolGPU, PoolPlan, SleeperWant, plan_pool
from warmscale.warmpool.hot.sleepers import Sleeper
from warmscale.warmpool.hot.surface import LEVEL_DISCARD, LEVEL_OFFLOAD
from warmscale.warmpool.hot.waker import Waker

NAMESPACE = "demo"
NAME = "vllm-hot"  # the ScaledObject and Deployment of the fleet with a hot pool
POOL = "demo-pool"
NODE = "demo-pool-node-{}"  # one pool node per pool GPU (a TP group of a multi-GPU profile)
# The demo model's sleepers (hot-standby: "3"): the burst's first wave needs about three replicas
# beyond the one serving (the equal-cost fixed fleet of the summary holds 3-4).
HOT_SLEEPERS = 3
# Other models with one sleeper each in the same pool; idle during the burst (they stay asleep).
IDLE_MODELS = 3
# Pool GPUs: every sleeper placed with at most SLEEPERS_PER_GPU per GPU (llm-d FMA's default).
POOL_GPUS = -(-(HOT_SLEEPERS + IDLE_MODELS) // SLEEPERS_PER_GPU)


def hot_wake_s(profile: str) -> float | None:
    """The level-1 wake time of the profile's sleepers (None: none measured, so no hot pool row)."""
    times = SLEEP_TIMES.get(profile)
    return times.wake_s[LEVEL_OFFLOAD] if times is not None else None


def pool_plan(profile: str, gpus_per_replica: int) -> tuple[Pool, PoolPlan]:
    """The pool and the sleepers' placement as the controller plans them from the annotations."""
    node_cfg = parse_pool_node(pool_node_annotations(POOL))
    assert node_cfg is not None
    nodes = [NODE.format(i) for i in range(POOL_GPUS)]
    devices = tuple(PoolGPU(n, f"{n}/gpu-0", GPU_HBM_GIB * gpus_per_replica) for n in nodes)
    pool = Pool(POOL, devices, dict.fromkeys(nodes, node_cfg.host_ram_gib), node_cfg.awake_per_gpu)
    ram = SLEEP_TIMES[profile].host_ram_gib[LEVEL_OFFLOAD]  # the weights a level-1 sleeper keeps in host RAM
    wants = []
    for workload, count in [(f"{NAMESPACE}/{NAME}", HOT_SLEEPERS),
                            *((f"{NAMESPACE}/idle-model-{i + 1}", 1) for i in range(IDLE_MODELS))]:
        cfg = parse_hot(hot_annotations(POOL, LEVEL_OFFLOAD, count))
        assert cfg is not None
        wants.append(SleeperWant(workload, cfg.count, ram, value_per_gib=1.0 / ram,
                                 sleeper_hbm_gib=SLEEPER_HBM_GIB_DEFAULT * gpus_per_replica,
                                 awake_hbm_gib=AWAKE_HBM_GIB * gpus_per_replica))
    return pool, plan_pool(pool, wants)


@dataclass
class HotPoolDemo:
    fleet: Fleet  # the demo model's fleet (its Deployment); its sleepers are added to it
    clock: Clock
    profile: str  # the engine profile's name (its measured sleep and wake times)
    gpus_per_replica: int
    pool: Pool | None = None
    plan: PoolPlan | None = None
    sleepers: list[Sleeper] = field(default_factory=list)
    engines: dict[str, SimulatedEngine] = field(default_factory=dict)  # every sleeper's engine, by pod
    runners: list[web.AppRunner] = field(default_factory=list)
    waker: Waker | None = None
    task: asyncio.Task[None] | None = None
    engaged_gpu_s: float = 0.0  # GPU-seconds the demo model's sleepers held a GPU awake
    waking: int = 0  # wakes in progress, as last published
    wake_requests: int = 0  # wakes the waker sent to the demo model's sleepers
    _accounted_at: float | None = None

    def __post_init__(self) -> None:
        self.pool, self.plan = pool_plan(self.profile, self.gpus_per_replica)
        if self.plan.left_out:  # a bad option combination: said before anything starts
            raise ValueError(f"the demo's hot pool does not hold its sleepers: {self.plan.left_out}")

    async def start(self, store: Store, session: aiohttp.ClientSession) -> None:
        assert self.pool is not None and self.plan is not None
        own = f"{NAMESPACE}/{NAME}"
        times = SLEEP_TIMES[self.profile]
        # The sleepers' engines: the fleet's, sleeping and waking in the profile's measured times.
        profile = replace(self.fleet.profile, sleep_l1_s=times.sleep_s[LEVEL_OFFLOAD],
                          wake_l1_s=times.wake_s[LEVEL_OFFLOAD], sleep_l2_s=times.sleep_s[LEVEL_DISCARD],
                          wake_l2_s=times.wake_s[LEVEL_DISCARD])
        for p in self.plan.placements:
            pod = f"{p.workload}-sleeper-{p.index}"
            engine = SimulatedEngine(pod, profile)
            engine.sleep_level = LEVEL_OFFLOAD
            runner = web.AppRunner(engine_app(engine, "vllm", time_factor=self.clock.speed, clock=self.clock.now),
                                   access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.runners.append(runner)
            self.engines[pod] = engine
            self.sleepers.append(Sleeper(pod=pod, workload=p.workload, index=p.index,
                                         base_url=f"http://127.0.0.1:{port}", engine="vllm", model=MODEL,
                                         node=p.node, device=p.device, level=LEVEL_OFFLOAD))
            if p.workload == own:
                self.fleet.sleepers[pod] = engine

        async def source() -> list[Sleeper]:
            return list(self.sleepers)

        def on_request(sleeper: Sleeper, _intent: object, _at: float) -> None:
            if sleeper.workload == own:
                self.wake_requests += 1

        self.waker = Waker(store, source, session, on_request=on_request, awake_per_gpu=self.pool.awake_per_gpu)
        await self.waker.resync()  # the sleepers known (asleep) and published before the burst
        self.task = asyncio.create_task(self.waker.run(), name="demo waker")

    async def refresh(self, store: Store, now: float) -> None:
        """The gateway's view: route to the sleepers the published hot status lists as awake; and
        account the GPU-seconds the model's sleepers hold awake."""
        hs = await store.get_hot_status(NAMESPACE, NAME)
        self.fleet.routed = set(hs.awake_pods) if hs is not None else set()
        if self._accounted_at is not None:
            held = self.fleet.sleepers_awake() + self.waking
            self.engaged_gpu_s += held * self.gpus_per_replica * max(0.0, now - self._accounted_at)
        self.waking = hs.waking if hs is not None else 0
        self._accounted_at = now

    def pool_gpu_seconds(self, t: float) -> float:
        return POOL_GPUS * self.gpus_per_replica * t

    def share(self) -> float:
        """The demo model's share of the pool's idle GPU-seconds: its sleepers over all the pool's."""
        assert self.plan is not None
        mine = sum(1 for p in self.plan.placements if p.workload == f"{NAMESPACE}/{NAME}")
        return mine / max(1, len(self.plan.placements))

    def charge(self, t: float) -> float:
        """GPU-seconds the demo model pays for the pool over ``t``: its awake GPU-seconds, plus its share
        of the rest (the pool is paid in full: the other models pay what is left)."""
        engaged = min(self.engaged_gpu_s, self.pool_gpu_seconds(t))
        return engaged + (self.pool_gpu_seconds(t) - engaged) * self.share()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        for runner in self.runners:
            await runner.cleanup()
