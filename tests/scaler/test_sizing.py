"""Table tests of the one sizing (scaler/sizing.py): each resource's count from demand over one
replica's capacity, the TTFT quantile as the prefill model's correction, the role's terms."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from warmscale.scaler.roles import ROLE_RULES
from warmscale.scaler.sizing import RESOURCE_TERMS, TERM_ORDER, Capacity, Demand, FleetCounts, look_ahead, size
from warmscale.scaler.slo import slo_count

CAP = Capacity(inflight=10.0, prefill_tps=10_000.0, target_utilization=0.8, prompt_per_request=1_000.0,
               itl_base_s=0.01, itl_per_seq_s=0.0005, itl_factor=1.0, finish_rate=1.0, engine_held=10.0,
               kv_usage_mean=None, kv_usage_max=None, kv_sized=False)
DEM = Demand(inflight_now=20.0, inflight=20.0, horizon=120.0, growth=0.0, backlog=0.0, waiting=0.0,
             backlog_slope=0.0, drain_within=120.0, prompt_tps=None, prefilled_tps=None, ttft_budget=None,
             ttft_over=None, ttft_met=None, saturation_count=None, kv_hot=False, preempting=False)
FLEET = FleetCounts(ready=2, provisioned=2, current=2)
KW: dict[str, Any] = {"step": 2.0, "kv_residency": 0.5, "kv_hot_target": 0.8, "ttft_quantile": 0.95,
                      "itl_slo": None}


def sized(dem: dict[str, Any] | None = None, cap: dict[str, Any] | None = None, fleet: FleetCounts = FLEET,
          **kw: Any) -> Any:
    return size(replace(DEM, **(dem or {})), replace(CAP, **(cap or {})), fleet, **{**KW, **kw})


@pytest.mark.parametrize("dem, cap, terms, resources, term", [
    # concurrency: in-flight over the requests one replica is sized for
    ({"inflight": 30.0}, {}, {"demand": 3}, {"concurrency": 3}, "demand"),
    # the backlog's drain is concurrency demand: (0 + 12/120) / 1.0 per replica -> 2 + 0.1 -> 3
    ({"backlog": 12.0, "waiting": 20.0}, {}, {"demand": 2, "queue": 3}, {"concurrency": 3}, "queue"),
    # a draining backlog (slope -1/s) needs nothing more
    ({"backlog": 12.0, "backlog_slope": -1.0}, {}, {"demand": 2}, {"concurrency": 2}, "demand"),
    # nothing finished yet: at what one engine held (12 / 10 -> 1.2), capped at the step (2 x 2)
    ({"backlog": 12.0}, {"finish_rate": None}, {"demand": 2, "queue": 4}, {"concurrency": 4}, "queue"),
    # prefill: 24k tok/s over 0.8 x 10k -> 3
    ({"prompt_tps": 24_000.0}, {}, {"demand": 2, "prefill": 3}, {"concurrency": 2, "prefill": 3}, "prefill"),
    # the picker's saturation is concurrency demand too
    ({"saturation_count": 5}, {}, {"demand": 2, "saturation": 5}, {"concurrency": 5}, "saturation"),
    # KV residency at its target: 2 x 0.9 / 0.5 -> 4 (and the hot target's 2 x 0.9 / 0.8 -> 3 below it)
    ({"kv_hot": True}, {"kv_usage_mean": 0.9, "kv_sized": True}, {"demand": 2, "kv": 4},
     {"concurrency": 2, "kv": 4}, "kv"),
])
def test_each_resource_is_demand_over_one_replicas_capacity(dem: dict[str, Any], cap: dict[str, Any],
                                                           terms: dict[str, int], resources: dict[str, int],
                                                           term: str) -> None:
    s = sized(dem, cap)
    assert (s.terms, s.resources, s.term, s.count) == (terms, resources, term, resources[s.resource_of(term)])


def test_below_what_runs_only_down_to_a_count_running_its_headroom() -> None:
    three = FleetCounts(ready=3, provisioned=3, current=3)
    assert sized({"inflight": 17.0}, fleet=three).terms["demand"] == 3  # 17 / (10 x 0.8) -> 3, not 2
    assert sized({"inflight": 15.0}, fleet=three).terms["demand"] == 2  # 15 / 8 -> 2


def test_the_observed_quantile_corrects_the_prefill_model_it_does_not_add_a_count() -> None:
    base = {"prompt_tps": 12_000.0, "prefilled_tps": 12_000.0, "ttft_budget": 2.0, "ttft_met": 1.0}
    met = sized(base)
    assert "ttft" not in met.terms and met.resources["prefill"] == met.terms["prefill"]
    # over the budget: the prefill resource is the corrected model's count, the same function and inputs
    over = sized({**base, "ttft_over": 6.0, "ttft_met": 6.0})
    want = slo_count(6.0, 2.0, 0.95, 2, 12_000.0, 10_000.0, 1_000.0, 4)
    assert over.terms["ttft"] == max(2, want) and over.resources["prefill"] == max(over.terms["prefill"], want)
    assert set(over.resources) == {"concurrency", "prefill"} and over.resource_of(over.term) == "prefill"
    # no prompt rate: the model cannot say, so the correction scales what is ready (6/2 capped at 2x)
    blind = sized({"ttft_budget": 2.0, "ttft_over": 6.0})
    assert blind.terms["ttft"] == 4 and blind.resources == {"concurrency": 2, "prefill": 4}
    # the handoff alone exceeds the budget: hold what is provisioned (no prefill replica helps)
    assert sized({"ttft_budget": -0.5, "ttft_over": 1.0}).terms["ttft"] == 2


def test_the_roles_terms_only_and_ties_go_to_the_first_term() -> None:
    dem = {"prompt_tps": 24_000.0, "inflight": 30.0}
    both = sized(dem)
    assert both.terms == {"demand": 3, "prefill": 3} and both.term == "demand"  # a tie: TERM_ORDER
    decode = sized(dem, allowed=ROLE_RULES["decode"])
    assert decode.terms == {"demand": 3} and "prefill" not in decode.resources
    assert set(TERM_ORDER) == {t for ts in RESOURCE_TERMS.values() for t in ts}


def test_decode_under_the_itl_slo() -> None:
    # 20 sequences: 0.01 + 0.0005 x 20 / n <= 0.015 -> n = 2; 60 -> 6, capped at the step (2 x 2)
    assert sized({"inflight": 20.0}, itl_slo=0.015).terms["itl"] == 2
    assert sized({"inflight": 60.0}, itl_slo=0.015).resources["decode"] == 4


@pytest.mark.parametrize("growth, ladder, want", [
    (0.0, (120.0,), (20.0, 120.0)),  # no trend: today's load at the next replica's time-to-ready
    # +0.1/s: 20 + 12 at 120 s asks for 2 more replicas, the second cold (510 s): 20 + min(51, 20) = 40
    (0.1, (120.0, 510.0), (40.0, 510.0)),
])
def test_look_ahead_is_a_fixed_point_on_the_ladder(growth: float, ladder: tuple[float, ...],
                                                   want: tuple[float, float]) -> None:
    def ttr(k: int) -> float:
        return ladder[min(k, len(ladder)) - 1]

    assert look_ahead(20.0, growth, 10.0, 2.0, ladder[0], 2, ttr) == want
