"""The hot pool's placement: which sleepers are kept on which pool GPU, and which are evicted (pure).

A pool is a set of GPUs (declared on their nodes, docs/hot-tier.md) shared by the sleepers of several
models. A sleeper keeps a little HBM on its GPU (its CUDA context and what the sleep level leaves:
about 1.4 GiB for vLLM level 1) and its weights in the node's host RAM (level 1). Budgets:

- per node, the host RAM the sleepers' weights may take (declared);
- per GPU, its HBM: the sleepers' residue plus the awake engines;
- at most ``awake_per_gpu`` awake engines per GPU (one unless the pool declares that HBM allows more);
- at most one sleeper of a workload per GPU (two could not both wake there).

When the sleepers asked for do not fit, the ones with the least expected value per GiB of host RAM
(the SLO they save, from the recorded bursts) are left out, not the newest or the oldest. A sleeper
already placed keeps its GPU while it still fits (no churn), unless a more valuable one needs the room.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# vLLM level 1 keeps about 1.4 GiB of HBM per sleeping engine (ai-dynamo/dynamo#11233: 73.9 -> 1.4 GiB).
SLEEPER_HBM_GIB_DEFAULT = 1.4


@dataclass(frozen=True)
class PoolGPU:
    node: str
    device: str  # the DRA device name, or the GPU's index/UUID under time-slicing
    hbm_gib: float


@dataclass(frozen=True)
class Pool:
    name: str
    gpus: tuple[PoolGPU, ...]
    host_ram_gib: Mapping[str, float]  # node -> the host RAM its sleepers' weights may take
    awake_per_gpu: int = 1


@dataclass(frozen=True)
class SleeperWant:
    """``count`` sleepers of ``workload`` (namespace/name)."""

    workload: str
    count: int
    host_ram_gib: float  # per sleeper: its weights in host RAM (level 1), ~0 at level 2
    value_per_gib: float  # expected SLO saved per GiB of host RAM held (the eviction order)
    sleeper_hbm_gib: float = SLEEPER_HBM_GIB_DEFAULT
    awake_hbm_gib: float = 0.0  # what the engine takes on the GPU when awake


@dataclass(frozen=True)
class Placement:
    workload: str
    index: int  # 0..count-1
    node: str
    device: str


@dataclass(frozen=True)
class PoolPlan:
    placements: tuple[Placement, ...]
    left_out: tuple[tuple[str, int, str], ...] = ()  # (workload, index, why)
    reasons: tuple[str, ...] = field(default_factory=tuple)

    def of(self, workload: str) -> tuple[Placement, ...]:
        return tuple(p for p in self.placements if p.workload == workload)


def _units(wants: Iterable[SleeperWant]) -> list[tuple[SleeperWant, int]]:
    units = [(w, i) for w in wants for i in range(max(0, w.count))]
    # Most valuable first; ties by workload and index, so the plan is the same on every pass.
    units.sort(key=lambda u: (-u[0].value_per_gib, u[0].workload, u[1]))
    return units


def plan_pool(pool: Pool, wants: Iterable[SleeperWant], current: Iterable[Placement] = ()) -> PoolPlan:
    """Place the sleepers asked for, most valuable first, each on the GPU it has if it still fits."""
    ram_left = dict(pool.host_ram_gib)
    hbm_left = {g.device: g.hbm_gib for g in pool.gpus}
    by_device = {g.device: g for g in pool.gpus}
    hosted: dict[str, set[str]] = {g.device: set() for g in pool.gpus}
    had = {(p.workload, p.index): p.device for p in current if p.device in by_device}
    placements: list[Placement] = []
    left_out: list[tuple[str, int, str]] = []

    def fits(w: SleeperWant, g: PoolGPU) -> bool:
        # Room for the sleeper's residue, and for the engine awake (it wakes where it sleeps).
        need_hbm = max(w.sleeper_hbm_gib, w.awake_hbm_gib)
        return (w.workload not in hosted[g.device] and ram_left.get(g.node, 0.0) >= w.host_ram_gib
                and hbm_left[g.device] >= need_hbm)

    for w, i in _units(wants):
        gpu: PoolGPU | None = None
        kept = had.get((w.workload, i))
        if kept is not None and fits(w, by_device[kept]):
            gpu = by_device[kept]
        else:
            candidates = [g for g in pool.gpus if fits(w, g)]
            # Spread: the node with the most host RAM left, then the GPU with the most HBM left.
            candidates.sort(key=lambda g: (-ram_left.get(g.node, 0.0), -hbm_left[g.device], g.device))
            gpu = candidates[0] if candidates else None
        if gpu is None:
            left_out.append((w.workload, i, f"no GPU of pool {pool.name} has room ({w.host_ram_gib:g} GiB host RAM, "
                                            f"{max(w.sleeper_hbm_gib, w.awake_hbm_gib):g} GiB HBM) after the "
                                            f"sleepers worth more than {w.value_per_gib:.3g} per GiB"))
            continue
        ram_left[gpu.node] = ram_left.get(gpu.node, 0.0) - w.host_ram_gib
        hbm_left[gpu.device] -= w.sleeper_hbm_gib
        hosted[gpu.device].add(w.workload)
        placements.append(Placement(w.workload, i, gpu.node, gpu.device))
    reasons = tuple(f"{n}: {ram_left[n]:.1f} GiB host RAM left" for n in sorted(ram_left))
    return PoolPlan(tuple(placements), tuple(left_out), reasons)


def choose_wakes(plan: PoolPlan, workload: str, count: int, awake: Mapping[str, int],
                 awake_per_gpu: int = 1) -> tuple[Placement, ...]:
    """Up to ``count`` of ``workload``'s sleepers to wake, on GPUs with room for one more awake engine
    (``awake``: device -> engines awake there now); the lowest indices first."""
    out: list[Placement] = []
    used = dict(awake)
    for p in sorted(plan.of(workload), key=lambda p: p.index):
        if len(out) >= count:
            break
        if used.get(p.device, 0) < awake_per_gpu:
            out.append(p)
            used[p.device] = used.get(p.device, 0) + 1
    return tuple(out)
