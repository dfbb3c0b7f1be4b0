"""Table tests of the hot pool's placement and wake choice (pure)."""

from __future__ import annotations

from warmscale.warmpool.hot.pool import Placement, Pool, PoolGPU, SleeperWant, choose_wakes, plan_pool

H100 = 80.0


def pool(nodes: int = 2, gpus: int = 2, ram: float = 100.0, awake: int = 1) -> Pool:
    gs = tuple(PoolGPU(f"n{n}", f"n{n}-gpu{g}", H100) for n in range(nodes) for g in range(gpus))
    return Pool("p", gs, {f"n{n}": ram for n in range(nodes)}, awake_per_gpu=awake)


def want(w: str, count: int = 1, ram: float = 16.0, value: float = 1.0, awake_hbm: float = 70.0) -> SleeperWant:
    return SleeperWant(w, count, ram, value, awake_hbm_gib=awake_hbm)


def test_sleepers_of_several_models_share_a_gpu_but_never_two_of_one() -> None:
    plan = plan_pool(pool(nodes=1, gpus=1, ram=1000.0), [want("a", 2), want("b"), want("c")])
    assert {(p.workload, p.device) for p in plan.placements} == {("a", "n0-gpu0"), ("b", "n0-gpu0"),
                                                                  ("c", "n0-gpu0")}
    assert [(w, i) for w, i, _ in plan.left_out] == [("a", 1)]  # a's second sleeper has no other GPU


def test_host_ram_budget_leaves_out_the_least_valuable_per_gib() -> None:
    # one node, 40 GiB of host RAM: 16 + 16 fit, the third (least value per GiB) does not
    plan = plan_pool(pool(nodes=1, gpus=4, ram=40.0),
                     [want("old-but-valuable", value=5.0), want("new-cheap", value=0.1), want("mid", value=1.0)])
    assert {p.workload for p in plan.placements} == {"old-but-valuable", "mid"}
    [(w, _, why)] = plan.left_out
    assert w == "new-cheap" and "host RAM" in why


def test_a_placed_sleeper_keeps_its_gpu_while_it_fits() -> None:
    current = [Placement("a", 0, "n1", "n1-gpu1")]
    plan = plan_pool(pool(), [want("a"), want("b")], current)
    assert Placement("a", 0, "n1", "n1-gpu1") in plan.placements


def test_spread_over_nodes_by_host_ram_left() -> None:
    plan = plan_pool(pool(nodes=2, gpus=1, ram=40.0), [want("a"), want("b")])
    assert {p.node for p in plan.placements} == {"n0", "n1"}


def test_an_engine_that_would_not_fit_awake_is_not_placed() -> None:
    plan = plan_pool(pool(nodes=1, gpus=1), [want("huge", awake_hbm=90.0)])
    assert not plan.placements and plan.left_out[0][0] == "huge"


def test_wakes_go_to_gpus_without_an_awake_engine() -> None:
    plan = plan_pool(pool(nodes=1, gpus=3, ram=1000.0), [want("a", 3)])
    woken = choose_wakes(plan, "a", 3, awake={"n0-gpu0": 1})
    assert {p.device for p in woken} == {"n0-gpu1", "n0-gpu2"}
    # a pool whose HBM allows two awake engines per GPU
    assert len(choose_wakes(plan, "a", 3, awake={"n0-gpu0": 1}, awake_per_gpu=2)) == 3


def test_the_plan_is_the_same_on_every_pass() -> None:
    wants = [want(w, 2, value=v) for w, v in (("x", 1.0), ("y", 1.0), ("z", 2.0))]
    first = plan_pool(pool(nodes=2, gpus=2, ram=50.0), wants)
    again = plan_pool(pool(nodes=2, gpus=2, ram=50.0), list(reversed(wants)), first.placements)
    assert first == again


# -- annotations --------------------------------------------------------------------------------
import pytest  # noqa: E402

from warmscale.warmpool.annotations import AnnotationError  # noqa: E402
from warmscale.warmpool.hot.config import HotConfig, PoolNodeConfig, parse_hot, parse_pool_node, placement_off_reason  # noqa: E402

OK = {"warmscale.io/hot-standby": "2", "warmscale.io/hot-pool": "shared-h100", "warmscale.io/engine": "vllm"}


def test_a_workload_opts_in() -> None:
    assert parse_hot({}) is None
    assert parse_hot(OK) == HotConfig(2, False, "shared-h100", "vllm", 1)
    auto = parse_hot({**OK, "warmscale.io/hot-standby": "auto", "warmscale.io/sleep-level": "2"})
    assert auto is not None and auto.auto and auto.level == 2


@pytest.mark.parametrize(("extra", "key"), [
    ({"warmscale.io/hot-standby": "-1"}, "warmscale.io/hot-standby"),
    ({"warmscale.io/hot-standby": "99"}, "warmscale.io/hot-standby"),
    ({"warmscale.io/hot-pool": "Bad_Name"}, "warmscale.io/hot-pool"),
    ({"warmscale.io/engine": "tgi"}, "warmscale.io/engine"),
    ({"warmscale.io/engine": "llamacpp"}, "warmscale.io/engine"),
    ({"warmscale.io/sleep-level": "3"}, "warmscale.io/sleep-level"),
    ({"warmscale.io/engine": "sglang", "warmscale.io/sleep-level": "2"}, "warmscale.io/sleep-level"),
])
def test_bad_hot_annotations_name_the_key(extra: dict[str, str], key: str) -> None:
    with pytest.raises(AnnotationError, match=key):
        parse_hot({**OK, **extra})


def test_tgi_gets_the_reason_in_its_event() -> None:
    with pytest.raises(AnnotationError, match="TGI has no sleep mode"):
        parse_hot({**OK, "warmscale.io/engine": "tgi"})


def test_pool_nodes() -> None:
    assert parse_pool_node({}) is None
    node = parse_pool_node({"warmscale.io/hot-pool": "p", "warmscale.io/hot-pool-host-ram": "512Gi"})
    assert node == PoolNodeConfig("p", 512.0, 1)
    with pytest.raises(AnnotationError, match="hot-pool-host-ram"):
        parse_pool_node({"warmscale.io/hot-pool": "p"})
    with pytest.raises(AnnotationError, match="hot-pool-awake-per-gpu"):
        parse_pool_node({"warmscale.io/hot-pool": "p", "warmscale.io/hot-pool-host-ram": "1Ti",
                         "warmscale.io/hot-pool-awake-per-gpu": "0"})


def test_a_pool_without_dra_or_dcgm_keeps_the_tier_off() -> None:
    assert placement_off_reason(True, False) is None and placement_off_reason(False, True) is None
    reason = placement_off_reason(False, False)
    assert reason is not None and "stays off" in reason
