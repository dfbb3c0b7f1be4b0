"""``warmscale.io/hot-standby: "auto"`` (warmpool/hot/auto_size.py): a sleeper is kept while the
capacity it saves in the recorded bursts is worth its share of the pool. Pure tables."""

from __future__ import annotations

import pytest

from warmscale.scaler.bursts import BurstStats
from warmscale.warmpool.hot.auto_size import (
    AUTO_PRIOR_SLEEPERS,
    WAKE_PRIOR_S,
    HotEvidence,
    auto_hot_standby,
    pool_share,
    sleepers_wanted,
)
from warmscale.warmpool.hot.config import HotConfig

HOUR = 3600.0
COLD_S = 510.0  # an 8B from scratch on an H100 (warmpool/startup_model.py)
WAKE_S = 2.2  # a level-1 wake of an 8B (vllm PR #48337)


def bursts(episodes: dict[int, tuple[float, ...]], rise_share: float = 1.0, span: float = HOUR) -> BurstStats:
    return BurstStats("llm", "chat", 0.0, cold_s=COLD_S, span_s=span, fleet=1, rise_share_p95=rise_share,
                      episodes=episodes)


def ev(st: BurstStats | None, *, gpus: int = 1, sleepers: int = 4, warm: bool = False,
       wake: float | None = WAKE_S, **kw: object) -> HotEvidence:
    ttr = {"placeholder+staged": 90.0} if warm else {}
    return HotEvidence(bursts=st, time_to_ready=ttr, warm_standby=warm, wake_s=wake, pool_gpus=gpus,
                       pool_sleepers=sleepers, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("evidence", "fleet", "count", "why"), [
    # Absent data never shrinks the tier.
    (HotEvidence(readable=False), 1, AUTO_PRIOR_SLEEPERS, "no size chosen before"),
    (HotEvidence(readable=False, last=3), 1, 3, "last size kept"),
    (HotEvidence(), 0, AUTO_PRIOR_SLEEPERS, "no burst statistics"),
    # One 10-minute burst an hour: a wake (2.2 s) instead of a cold start (510 s) pays even a whole GPU.
    (ev(bursts({1: (600.0,)}), sleepers=1), 1, 1, "every level pays"),
    # A 60 s burst an hour saves 0.32 GPU-s per s: worth a quarter of a shared GPU, not a whole one.
    (ev(bursts({1: (60.0,)}), gpus=1, sleepers=4), 1, 1, "every level pays"),
    (ev(bursts({1: (60.0,)}), gpus=1, sleepers=1), 1, 0, "less than its pool share 1.00"),
    # With warm-pool placeholders (90 s) a wake saves less: 0.49 GPU-s per s on a 600 s burst.
    (ev(bursts({1: (600.0,)}), warm=True, sleepers=4), 1, 1, "every level pays"),
    (ev(bursts({1: (600.0,)}), warm=True, sleepers=1), 1, 0, "vs 90 s without"),
    # The second level's bursts are 10 s long: its sleeper is not worth its share.
    (ev(bursts({1: (600.0,), 2: (10.0,)}, rise_share=2.0)), 1, 1, "sleeper 2 would save"),
    # One burst a week is not worth a sleeper, even on a shared GPU.
    (ev(bursts({1: (600.0,)}, span=7 * 24 * HOUR)), 1, 0, "sleeper 1 would save"),
    # No burst rose above the provisioned fleet; a wake slower than the alternative.
    (ev(bursts({}, rise_share=0.0)), 3, 0, "no burst rose"),
    (ev(bursts({1: (600.0,)}), warm=True, wake=120.0), 1, 0, "not faster"),
    # The size follows the fleet: rise of 1.5x a fleet of 2 -> 3 levels, each paying.
    (ev(bursts({1: (600.0,), 2: (600.0,), 3: (600.0,)}, rise_share=1.5)), 2, 3, "every level pays"),
])
def test_auto_hot_standby(evidence: HotEvidence, fleet: int, count: int, why: str) -> None:
    size = auto_hot_standby(evidence, fleet)
    assert size.count == count
    assert why in size.why


def test_the_kept_sleepers_value_is_reported_for_the_eviction_order() -> None:
    size = auto_hot_standby(ev(bursts({1: (600.0,)})), 1)
    assert size.value == pytest.approx(20.0 * (COLD_S - WAKE_S) / HOUR)


def test_an_unmeasured_wake_time_is_the_prior() -> None:
    size = auto_hot_standby(ev(bursts({1: (600.0,)}), wake=None), 1)  # 6.5 s still beats a cold start
    assert size.count == 1 and size.value == pytest.approx(20.0 * (COLD_S - WAKE_PRIOR_S) / HOUR)


@pytest.mark.parametrize(("gpus", "sleepers", "share"), [(1, 4, 0.25), (2, 4, 0.5), (4, 2, 1.0), (1, 0, 1.0),
                                                          (0, 3, 1.0)])
def test_pool_share(gpus: int, sleepers: int, share: float) -> None:
    assert pool_share(gpus, sleepers) == share


@pytest.mark.parametrize(("cfg", "count"), [
    (HotConfig(2, False, "p", "vllm"), 2),                 # a fixed count is what it says
    (HotConfig(16, True, "p", "vllm"), AUTO_PRIOR_SLEEPERS),  # auto without evidence: the prior
])
def test_sleepers_wanted(cfg: HotConfig, count: int) -> None:
    assert sleepers_wanted(cfg, None, 1).count == count


def test_auto_is_capped_by_the_annotations_count() -> None:
    st = bursts({k: (600.0,) for k in range(1, 5)}, rise_share=4.0)
    assert sleepers_wanted(HotConfig(2, True, "p", "vllm"), ev(st), 1).count == 2
    assert sleepers_wanted(HotConfig(16, True, "p", "vllm"), ev(st), 1).count == 4


async def test_the_pool_controller_sizes_auto_from_the_stores_bursts_and_keeps_the_size_in_an_outage() -> None:
    """The reconciler's ``_want`` (warmpool/hot/reconciler.py): ``auto`` reads the published bursts each
    pass; a store that cannot be read keeps the size chosen before (absent data never shrinks the tier)."""
    from kubernetes_asyncio import client

    from warmscale.warmpool.hot.config import parse_hot
    from warmscale.warmpool.hot.reconciler import HotReconciler
    from warmscale.warmpool.objects import Workload

    answers: list[BurstStats | Exception | None] = [
        bursts({1: (600.0,) * 6, 2: (600.0,) * 6}, rise_share=2.0), OSError("store down"), None]

    async def read(namespace: str, name: str) -> BurstStats | None:
        assert (namespace, name) == ("llm", "chat")
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    cfg = parse_hot({"warmscale.io/hot-standby": "auto", "warmscale.io/hot-pool": "p", "warmscale.io/engine": "vllm"})
    assert cfg is not None and cfg.auto
    wl = Workload(kind="Deployment", namespace="llm", name="chat", uid="u", replicas=1, template={},
                  annotations={}, selector={})
    async with client.ApiClient() as api:
        rec = HotReconciler(api, bursts=read)
        sized = await rec._want(wl, cfg, pool_gpus=4, pool_workloads=4)
        assert sized.count == 2 and sized.value_per_gib > 0  # two levels of long bursts pay a quarter GPU each
        assert (await rec._want(wl, cfg, pool_gpus=4, pool_workloads=4)).count == 2  # outage: last size
        assert (await rec._want(wl, cfg, pool_gpus=4, pool_workloads=4)).count == AUTO_PRIOR_SLEEPERS
