"""The startup ladder shared by the trace replay and the cold-vs-warm benchmark."""

from __future__ import annotations

import pytest

from warmscale.scaler.warm_status import WARM_STATES
from warmscale.warmpool.startup_model import (
    COLD,
    PHASES,
    PLACEHOLDER_STAGED,
    PROFILES,
    RETAINED_NODE,
    SLEEPING,
    WarmState,
    ladder,
    staging_time,
    time_to_ready,
    time_to_ready_table,
)

P8 = PROFILES["8b-h100"]


def test_cold_8b_climbs_every_phase_in_order() -> None:
    steps = ladder(P8, COLD)
    assert [name for name, _ in steps] == list(PHASES)
    # 120 provision + 180 pull + 60 download + 25 load + 120 init + 5 readiness
    assert time_to_ready(P8, COLD) == pytest.approx(510.0)
    assert 300 <= time_to_ready(P8, COLD) <= 600  # "5-10 min" for 8B from nothing


def test_placeholder_on_staged_node_skips_provision_pull_download() -> None:
    names = [n for n, _ in ladder(P8, PLACEHOLDER_STAGED)]
    assert names == ["weights_load", "engine_init", "readiness"]
    assert time_to_ready(P8, PLACEHOLDER_STAGED) == pytest.approx(25 + 60 + 5)
    assert 60 <= time_to_ready(P8, PLACEHOLDER_STAGED) <= 120  # "1-2 min on a warm node"


def test_retained_node_keeps_only_the_image() -> None:
    assert time_to_ready(P8, RETAINED_NODE) == pytest.approx(60 + 25 + 120 + 5)


def test_sleeping_engine_only_wakes() -> None:
    assert ladder(P8, SLEEPING) == (("wake", 3.0), ("readiness", 5.0))


@pytest.mark.parametrize("flag", ["capacity_held", "image_present", "weights_local", "compile_cache"])
def test_each_warmth_flag_shortens_the_ladder(flag: str) -> None:
    for profile in PROFILES.values():
        assert time_to_ready(profile, WarmState(**{flag: True})) < time_to_ready(profile, COLD)


def test_70b_is_slower_than_8b_and_within_the_reference_range() -> None:
    p70 = PROFILES["70b-h100-tp4"]
    assert time_to_ready(p70, COLD) > time_to_ready(P8, COLD)
    assert 600 <= time_to_ready(p70, COLD) <= 1800  # "10-30 min" for 70B from nothing
    assert p70.gpus_per_replica == 4 and PROFILES["70b-h100-tp8"].gpus_per_replica == 8


def test_every_number_has_a_source() -> None:
    for profile in PROFILES.values():
        sourced = {k for k, _ in profile.sources}
        needed = {f for f in profile.__dataclass_fields__ if f.endswith("_s")}
        assert needed <= sourced, needed - sourced


def test_named_states_cover_what_the_controller_publishes() -> None:
    table = time_to_ready_table(P8)
    assert set(WARM_STATES) <= set(table)
    assert table["placeholder+staged"] < table["staged"] < table["cold"]


def test_staging_a_new_placeholder_overlaps_pull_and_download() -> None:
    assert staging_time(P8, new_node=True) == pytest.approx(120 + max(180, 60))
    assert staging_time(P8, new_node=False) == pytest.approx(180)


def test_labels() -> None:
    assert COLD.label() == "cold"
    assert PLACEHOLDER_STAGED.label() == "placeholder+staged"
    assert SLEEPING.label() == "sleeping"
