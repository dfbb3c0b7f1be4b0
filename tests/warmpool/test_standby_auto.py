"""warmscale.io/standby: auto -- the planner's sizing rule (pure; table tests, injected clock)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.warmpool.helpers import workload
from warmscale.scaler.bursts import BurstMemory, BurstStats, burst_stats, record
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import AnnotationError, parse_annotations
from warmscale.warmpool.planning import MIN_EVIDENCE_S, MISS_WEIGHT, StandbyEvidence, auto_standby, plan

P = "warmscale.io/"
NOW = datetime(2026, 1, 5, 3, 0, tzinfo=UTC)  # a Monday night
TTR = {"placeholder+staged": 90.0, "cold": 510.0}
# bursts of 10 minutes save 510 - 90 = 420 replica-s each: this many in an hour pay for a placeholder
PAYING = int(3600 // (420 * MISS_WEIGHT)) + 1
SHORT_OF = max(0, PAYING - 1)
assert 90 + 1.05 * 3600 / MISS_WEIGHT < 510  # the cases below assume a burst can pay within a cold start


def stats(episodes: dict[int, tuple[float, ...]], share: float, span: float = 3600.0) -> BurstStats:
    return BurstStats("ns", "llm", NOW.timestamp(), window_s=90, cold_s=510, span_s=span, fleet=2,
                      rise_p95=max(episodes, default=0), rise_share_p95=share, episodes=episodes)


def bursts_every(period_s: float, duration_s: float, rise: int, base: int = 2, hours: float = 2.0) -> BurstStats:
    """The statistics the scaler publishes after `hours` of a need of `base`, rising by `rise` for
    `duration_s` every `period_s` (the scaler provisioning the need, one decision per 5 s)."""
    mem, t, end = BurstMemory(), 0.0, hours * 3600
    while t < end:
        up = (t % period_s) < duration_s
        need = base + rise if up else base
        mem = record(mem, need, need, 90.0, t)
        t += 5.0
    return burst_stats(mem, end, namespace="ns", name="llm", window_s=90, cold_s=510, fleet=base)


@pytest.mark.parametrize("case, ev, fleet, want", [
    ("no statistics yet", StandbyEvidence(time_to_ready=TTR), 2, 0),
    ("no burst rose", StandbyEvidence(stats({}, 0.0), time_to_ready=TTR), 2, 0),
    # night: one 2-minute burst in two hours saves 30 s of missing capacity: far less than the
    # 7200 s a placeholder holds meanwhile
    ("rare bursts do not pay", StandbyEvidence(stats({1: (120.0,)}, 1.0, span=7200.0), time_to_ready=TTR), 1, 0),
    # one burst an hour: pays once it outlasts the warm start by 3600 / MISS_WEIGHT seconds
    ("one burst an hour, just short", StandbyEvidence(stats({1: (90 + 0.95 * 3600 / MISS_WEIGHT,)}, 1.0),
                                                      time_to_ready=TTR), 1, 0),
    ("one burst an hour, just long enough", StandbyEvidence(stats({1: (90 + 1.05 * 3600 / MISS_WEIGHT,)}, 1.0),
                                                            time_to_ready=TTR), 1, 1),
    # bursts shorter than the warm start: a placeholder cannot serve them, however many
    ("bursts over before a warm start", StandbyEvidence(stats({1: (60.0,) * 30}, 1.0), time_to_ready=TTR), 2, 0),
    ("frequent bursts pay", StandbyEvidence(stats({1: (600.0,) * PAYING}, 0.5), time_to_ready=TTR), 2, 1),
    ("each level pays on its own",
     StandbyEvidence(stats({1: (600.0,) * PAYING, 2: (600.0,) * PAYING, 3: (600.0,) * SHORT_OF}, 1.5),
                     time_to_ready=TTR), 2, 2),
    ("capped by the p95 rise as a share of the fleet",
     StandbyEvidence(stats({1: (600.0,) * PAYING, 2: (600.0,) * PAYING}, 0.25), time_to_ready=TTR), 4, 1),
    ("the share scales with the fleet",
     StandbyEvidence(stats({1: (600.0,) * PAYING, 2: (600.0,) * PAYING}, 0.25), time_to_ready=TTR), 8, 2),
    # a short evidence span counts as MIN_EVIDENCE_S: a burst in the first minutes weighs as one an hour
    ("one early burst", StandbyEvidence(stats({1: (120.0,)}, 1.0, span=700.0), time_to_ready=TTR), 1, 0),
    ("warm start no faster", StandbyEvidence(stats({1: (600.0,) * PAYING}, 1.0),
                                             time_to_ready={"placeholder+staged": 300.0, "cold": 300.0}), 2, 0),
    # unmeasured time-to-ready: the scaler's (published with the statistics)
    ("published times used", StandbyEvidence(stats({1: (600.0,) * PAYING}, 0.5)), 2, 1),
    ("no time-to-ready known", StandbyEvidence(replace(stats({1: (600.0,) * PAYING}, 0.5), cold_s=0.0)), 2, 0),
    ("store down keeps the last size", StandbyEvidence(readable=False, last=3), 2, 3),
    ("store down, nothing chosen before", StandbyEvidence(readable=False), 2, 0),
])
def test_sizing_rule(case: str, ev: StandbyEvidence, fleet: int, want: int) -> None:
    n, why = auto_standby(ev, fleet)
    assert n == want, (case, why)
    assert why


def test_placeholders_rise_with_burstiness() -> None:
    """More frequent (or larger) bursts never yield fewer placeholders; rare ones yield none."""
    sizes = []
    for period in (24 * 3600.0, 7200.0, 1800.0, 600.0):
        ev = StandbyEvidence(bursts_every(period, 300.0, rise=3, hours=4), time_to_ready=TTR)
        sizes.append(auto_standby(ev, 2)[0])
    assert sizes == sorted(sizes) and sizes[0] == 0 and sizes[-1] >= 1, sizes
    by_rise = [auto_standby(StandbyEvidence(bursts_every(1800.0, 300.0, rise=r), time_to_ready=TTR), 2)[0]
               for r in (1, 2, 3)]
    assert by_rise == sorted(by_rise) and by_rise[-1] > by_rise[0]


def test_evidence_span_floor() -> None:
    assert MIN_EVIDENCE_S >= 3600.0  # documented: an hour of evidence before a placeholder pays by rate


def test_annotation_default_is_auto_and_numbers_still_work() -> None:
    assert parse_annotations({P + "enabled": "true"}).standby_auto
    cfg = parse_annotations({P + "enabled": "true", P + "standby": " Auto "})
    assert cfg.standby_auto and cfg.standby == 0
    cfg = parse_annotations({P + "enabled": "true", P + "standby": "3"})
    assert not cfg.standby_auto and cfg.standby == 3
    with pytest.raises(AnnotationError) as exc:
        parse_annotations({P + "enabled": "true", P + "standby": "automatic"})
    assert exc.value.key == P + "standby"


def holder(wl: ob.Workload, i: int) -> dict[str, object]:
    return {"metadata": {"name": ob.placeholder_name(wl, i), "labels": ob.labels(wl, "placeholder"),
                         "annotations": {ob.PIN_ANN: ob.pin_hash(None)}},
            "spec": {}, "status": {"phase": "Running"}}


def test_plan_applies_the_auto_size_and_a_number_overrides_it() -> None:
    wl = workload({P + "enabled": "true"}, replicas=2)
    busy = StandbyEvidence(stats({1: (600.0,) * PAYING, 2: (600.0,) * PAYING}, 1.0), time_to_ready=TTR)
    p = plan(wl, [], [], [], None, NOW, standby=busy)
    assert p.standby == 2 and p.create_placeholders == [0, 1] and p.status["standby"] == "auto"
    assert p.status["placeholders"] == "0/2"
    # the bursts fade (a quiet night): the placeholders go
    quiet = StandbyEvidence(stats({1: (120.0,)}, 1.0, span=6 * 3600.0), time_to_ready=TTR)
    p = plan(wl, [], [holder(wl, 0), holder(wl, 1)], [], None, NOW + timedelta(hours=6), standby=quiet)
    assert p.standby == 0 and sorted(p.delete_placeholders) == sorted(ob.placeholder_name(wl, i) for i in (0, 1))
    # the store is down: the last size stays, nothing is deleted
    down = StandbyEvidence(readable=False, last=2)
    p = plan(wl, [], [holder(wl, 0), holder(wl, 1)], [], None, NOW, standby=down)
    assert p.standby == 2 and p.delete_placeholders == [] and p.create_placeholders == []
    # a number is a number whatever the evidence
    fixed = workload({P + "enabled": "true", P + "standby": "1"}, replicas=2)
    p = plan(fixed, [], [], [], None, NOW, standby=busy)
    assert p.standby == 1 and p.create_placeholders == [0] and "standby" not in p.status
