"""The warm pool's floor and scale-to-zero windows bind whoever wrote the ScaledObject.

The controller publishes the workload's ``min-ready`` and ``scale-to-zero`` values with its warm status;
the scaler evaluates them at its own clock. These tests run the real tracker (store, policy, decision)
with a clock the test moves across a window's start; the engines report zero load throughout.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.scaler.conftest import META, META_ZERO, ScriptedReader, eventually
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.schedule import bounds_at
from warmscale.scaler.store import MemoryStore
from warmscale.scaler.tracker import WARM_BOUNDS_MAX_AGE, TrackerManager
from warmscale.scaler.warm_status import WarmStatus

BERLIN = ZoneInfo("Europe/Berlin")
VLLM_MIN_READY = "tz=Europe/Berlin; mon-fri 08:00-20:00=2; default=1"  # manifests/examples/vllm
TGI_MIN_READY = "tz=America/New_York; mon-fri 08:00-18:00=1; default=0"  # manifests/examples/tgi
TGI_ZERO = "allowed: mon-fri 20:00-06:00; sat,sun 00:00-24:00"


def _t(y: int, mo: int, d: int, h: int, mi: int, s: int = 0, tz: ZoneInfo = BERLIN) -> float:
    return datetime(y, mo, d, h, mi, s, tzinfo=tz).timestamp()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _manager(reader: Any, store: MemoryStore, clock: Clock) -> TrackerManager:
    return TrackerManager(store, reader, ScalerMetrics(), DecisionLog(50), instance_id="t", clock=clock)


def test_bounds_at() -> None:
    mon_0959 = datetime(2026, 11, 30, 9, 59, tzinfo=BERLIN)  # 2026-11-30 is a Monday
    assert bounds_at(VLLM_MIN_READY, "never", mon_0959).floor == 2
    assert bounds_at(VLLM_MIN_READY, "never", mon_0959.replace(hour=7)).floor == 1
    # floor 0 where zero is not allowed is raised to 1 (what the controller's Event reports)
    ny = ZoneInfo("America/New_York")
    tue_noon = datetime(2026, 12, 1, 12, 0, tzinfo=ny)
    assert bounds_at(TGI_MIN_READY, TGI_ZERO, tue_noon) == bounds_at(TGI_MIN_READY, TGI_ZERO, tue_noon)
    b = bounds_at(TGI_MIN_READY, TGI_ZERO, tue_noon)
    assert (b.floor, b.zero_allowed) == (1, False)
    b = bounds_at(TGI_MIN_READY, TGI_ZERO, tue_noon.replace(hour=19))  # floor 0, not yet an allowed window
    assert (b.floor, b.zero_allowed) == (1, False)
    b = bounds_at(TGI_MIN_READY, TGI_ZERO, tue_noon.replace(hour=21))
    assert (b.floor, b.zero_allowed) == (0, True)
    # scale-to-zero windows default to min-ready's timezone: Tue 21:00 New York is Wed 02:00 UTC
    assert bounds_at(TGI_MIN_READY, TGI_ZERO, datetime(2026, 12, 2, 2, 0, tzinfo=ZoneInfo("UTC"))).zero_allowed


def _example_metadata(owned: bool) -> dict[str, str]:
    """The vLLM example's trigger metadata: its hand-written ScaledObject, or the one the controller
    would create for the same Deployment with autoscale on (minReplicas = the floor it saw: 1)."""
    from pathlib import Path

    import yaml

    from warmscale.warmpool import objects as ob
    from warmscale.warmpool.annotations import parse_annotations
    from warmscale.warmpool.controller import workload_from

    d = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "vllm"
    if not owned:
        so = yaml.safe_load((d / "scaledobject.yaml").read_text())
    else:
        dep = yaml.safe_load((d / "deployment.yaml").read_text())
        dep["metadata"]["annotations"]["warmscale.io/autoscale"] = "true"
        cfg = parse_annotations(dep["metadata"]["annotations"])
        so = ob.scaled_object(workload_from("Deployment", dep), cfg, 1, "warmscale.warmscale.svc:9090",
                              "warmscale-mtls")
    meta = dict(so["spec"]["triggers"][0]["metadata"])
    assert meta["minReplicas"] == "1"
    return {**meta, "scrapeIntervalSeconds": "0.1"}  # the reader is scripted: no engines are scraped


@pytest.mark.parametrize("owned", [False, True], ids=["hand-written", "controller-owned"])
async def test_scheduled_floor_binds_at_the_window_start(owned: bool) -> None:
    """vLLM example: ScaledObject with minReplicas 1 (hand-written, or created by the controller before
    the window), min-ready 2 from Monday 08:00 Berlin. Zero load. At 07:59:50 the scaler asks for 1;
    once its clock passes 08:00 it asks for 2 without any controller reconcile in between (the status
    was published before the window)."""
    store, clock = MemoryStore(), Clock(_t(2026, 11, 30, 7, 59, 50))
    await store.put_warm_status("llm", "vllm-llama", WarmStatus(
        "llm", "vllm-llama", updated_at=clock.t - 5, min_ready=VLLM_MIN_READY, scale_to_zero="never"))
    m = _manager(ScriptedReader(load=0.0), store, clock)
    t = m.get("llm", "vllm-llama", _example_metadata(owned))
    d = await t.current()
    assert (d.desired, d.reason) == (1, "min-replicas")
    clock.t = _t(2026, 11, 30, 8, 0, 0)

    async def floor_reached() -> bool:
        return (await t.current()).desired == 2

    await eventually(floor_reached, within=3.0)
    d = await t.current()
    assert d.reason == "warm-floor" and d.active
    await m.stop()


async def test_zero_refused_outside_an_allowed_window() -> None:
    """TGI example: the ScaledObject allows zero (scaleToZero, minReplicas 0), the warm pool allows it
    only in its windows. Idle on a weekday afternoon: 1 replica, active. Saturday: 0, inactive."""
    ny = ZoneInfo("America/New_York")
    store, clock = MemoryStore(), Clock(_t(2026, 12, 1, 19, 0, tz=ny))  # Tuesday 19:00: floor 0, zero not allowed
    await store.put_warm_status("llm", "tgi-mistral", WarmStatus(
        "llm", "tgi-mistral", updated_at=clock.t, min_ready=TGI_MIN_READY, scale_to_zero=TGI_ZERO))
    m = _manager(ScriptedReader(load=0.0), store, clock)
    t = m.get("llm", "tgi-mistral", META_ZERO)
    d = await t.current()
    assert (d.desired, d.active) == (1, True)
    clock.t = _t(2026, 12, 5, 12, 0, tz=ny)  # Saturday
    await store.put_warm_status("llm", "tgi-mistral", WarmStatus(
        "llm", "tgi-mistral", updated_at=clock.t, min_ready=TGI_MIN_READY, scale_to_zero=TGI_ZERO))

    async def zero() -> bool:
        d = await t.current()
        return d.desired == 0 and not d.active

    await eventually(zero, within=3.0)
    await m.stop()


async def test_no_warm_status_or_a_stale_one_leaves_the_scaledobject_bounds() -> None:
    store, clock = MemoryStore(), Clock(_t(2026, 11, 30, 9, 0))
    m = _manager(ScriptedReader(load=0.0), store, clock)
    assert (await m.get("llm", "plain", META_ZERO).current()).desired == 0
    await store.put_warm_status("llm", "old", WarmStatus(
        "llm", "old", updated_at=clock.t - WARM_BOUNDS_MAX_AGE - 1, min_ready="3"))
    assert (await m.get("llm", "old", META).current()).desired == 1
    await m.stop()


@pytest.mark.parametrize("so_zero", [False, True])
async def test_the_stricter_side_wins(so_zero: bool) -> None:
    """Zero needs both: the ScaledObject's scaleToZero and the warm pool's window."""
    store, clock = MemoryStore(), Clock(_t(2026, 11, 30, 9, 0))
    await store.put_warm_status("llm", "w", WarmStatus("llm", "w", updated_at=clock.t, min_ready="0",
                                                       scale_to_zero="allowed"))
    m = _manager(ScriptedReader(load=0.0), store, clock)
    d = await m.get("llm", "w", META_ZERO if so_zero else META).current()
    assert d.desired == (0 if so_zero else 1)
    await m.stop()
