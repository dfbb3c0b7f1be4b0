"""The signal layer's snapshot holds readings only; the scaler's own inputs (warm pool bounds and
ladder, the pdGroup's floor and transfer time) travel beside it in a ScalerContext (issue 22, 8)."""

from __future__ import annotations

from dataclasses import fields

from warmscale.scaler.config import parse_metadata
from warmscale.scaler.context import ScalerContext
from warmscale.scaler.observation import observe
from warmscale.scaler.state import ScalerState
from warmscale.signals.model import Snapshot


def test_the_snapshot_carries_no_scaler_input() -> None:
    scaler_inputs = {f.name for f in fields(ScalerContext)}
    assert scaler_inputs == {"ttr_ladder", "warm_floor", "zero_allowed", "pd_floor", "pd_transfer_s"}
    assert not scaler_inputs & {f.name for f in fields(Snapshot)}


def test_observe_takes_the_context_into_the_observation() -> None:
    cfg = parse_metadata({"endpoints": "http://e:8000/metrics"})
    ctx = ScalerContext(ttr_ladder=(("warm", 2, 10.0), ("cold", 0, 300.0)), warm_floor=2, zero_allowed=False,
                        pd_floor=3, pd_transfer_s=0.25)
    obs, _ = observe(Snapshot(taken_at=100.0), ScalerState(), cfg, ctx)
    assert (obs.ttr_ladder, obs.warm_floor, obs.zero_allowed, obs.pd_floor, obs.pd_transfer_s) == (
        ctx.ttr_ladder, 2, False, 3, 0.25)
    bare, _ = observe(Snapshot(taken_at=100.0), ScalerState(), cfg)
    assert (bare.ttr_ladder, bare.warm_floor, bare.zero_allowed, bare.pd_floor, bare.pd_transfer_s) == (
        (), None, None, None, None)
