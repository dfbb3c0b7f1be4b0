"""The scale-in victim ranking: ``controller.kubernetes.io/pod-deletion-cost`` by load (pure tables)."""

from __future__ import annotations

import pytest

from warmscale.warmpool.deletion_cost import (
    COST_LOAD_CAP,
    COST_UNKNOWN,
    PodLoad,
    cost_of,
    deletion_costs,
    victims,
)


@pytest.mark.parametrize(("in_flight", "cost"), [
    (0.0, 0), (3.0, 3), (2.6, 3), (250.0, 250),
    (5e7, COST_LOAD_CAP),  # capped below the unknown cost
    (None, COST_UNKNOWN), (float("nan"), COST_UNKNOWN), (-1.0, COST_UNKNOWN),  # unknown is never idle
])
def test_cost_of_a_load(in_flight: float | None, cost: int) -> None:
    assert cost_of(in_flight) == cost


@pytest.mark.parametrize(("pods", "patches"), [
    # The least loaded gets the lowest cost.
    ([PodLoad("a", True, 12, None), PodLoad("b", True, 0, None), PodLoad("c", True, 5, None)],
     {"a": "12", "b": "0", "c": "5"}),
    # Unchanged costs are not written again.
    ([PodLoad("a", True, 12, "12"), PodLoad("b", True, 1, "0")], {"b": "1"}),
    # A pod that is not ready is left alone (the ReplicaSet removes it first anyway).
    ([PodLoad("a", False, None, None), PodLoad("b", True, 4, "9")], {"b": "4"}),
    # A pod whose load is unknown is kept last.
    ([PodLoad("a", True, None, "0"), PodLoad("b", True, 7, None)], {"a": str(COST_UNKNOWN), "b": "7"}),
    ([], {}),
])
def test_deletion_costs(pods: list[PodLoad], patches: dict[str, str]) -> None:
    assert deletion_costs(pods) == patches


@pytest.mark.parametrize(("loads", "count", "gone"), [
    ({"a": 12, "b": 0, "c": 5}, 1, ["b"]),
    ({"a": 12, "b": 0, "c": 5}, 2, ["b", "c"]),
    ({"a": None, "b": 30, "c": 40}, 2, ["b", "c"]),  # the unreachable one is not "least loaded"
    ({"a": 3, "b": 3}, 1, ["a"]),
    ({"a": 1}, 0, []),
])
def test_the_least_loaded_ready_replica_goes_first(loads: dict[str, float | None], count: int,
                                                   gone: list[str]) -> None:
    pods = [PodLoad(n, True, v, None) for n, v in loads.items()]
    costs = {n: int(v) for n, v in deletion_costs(pods).items()}
    assert victims(pods, costs, count) == gone
