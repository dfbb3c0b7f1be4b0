"""Endpoint-picker signals and prefill/decode roles in the policy (pure, no I/O).

- The picker's flow-control queue is demand: it adds to the gateway queue (so a pool with no pods and
  no Redis still activates), and an unknown picker makes the queue unknown (never idle).
- Stale endpoints (the picker has no fresh metrics for them and scores them saturated) are unknown
  capacity: they hold scale-down and scale to zero, and they disable the saturation rule (a stale-driven
  saturation is a metrics problem, not load).
- The picker's ready endpoints stand in for the ready replica count when the API server gave none, and
  its running requests (and the engines' queue it reports) for the engines' when no engine is read
  directly. A picker that does not report running requests then leaves them unknown, never 0: no
  scale-down, no scale to zero (issue 20 item 9).
- The saturation of the stage a ScaledObject serves (``role``: prefill -> ``prefill``, decode ->
  ``decode``, both -> ``effective``) sizes the pool proportionally above ``EPP_SATURATION_TARGET``.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.counts import ceil_count
from warmscale.signals.model import Snapshot

STAGE_OF_ROLE = {"prefill": "prefill", "decode": "decode", "both": "effective"}


@dataclass(frozen=True)
class GatewayView:
    queue: float = 0.0
    unknown: bool = False
    running: float | None = None
    ready_endpoints: int | None = None
    stale_endpoints: float = 0.0
    saturation: float | None = None
    engine_waiting: float | None = None


def gateway_view(snapshot: Snapshot, cfg: ScalerConfig) -> GatewayView:
    """What the snapshot's picker readings contribute, for ``cfg.role``."""
    if not snapshot.gateways:
        return GatewayView()
    stage = STAGE_OF_ROLE.get(cfg.role, "effective")
    queue, stale = 0.0, 0.0
    unknown = False
    running: float | None = None
    waiting: float | None = None
    ready: int | None = None
    sats: list[float] = []
    for g in snapshot.gateways:
        sig = g.signal
        if sig is None:
            unknown = True
            continue
        queue += sig.queue
        if sig.stale_endpoints:
            stale += sig.stale_endpoints
        if sig.running is not None:
            running = (running or 0.0) + sig.running
        if sig.engine_waiting is not None:
            waiting = (waiting or 0.0) + sig.engine_waiting
        if sig.ready_endpoints is not None:
            ready = (ready or 0) + round(sig.ready_endpoints)
        s = sig.stage_saturation(stage)
        if s is not None:
            sats.append(s)
    return GatewayView(queue=queue, unknown=unknown, running=running, ready_endpoints=ready, stale_endpoints=stale,
                       saturation=max(sats) if sats else None, engine_waiting=waiting)


def saturation_rule(saturation: float | None, stale: float, ready: int, provisioned: int,
                    cfg: ScalerConfig) -> int | None:
    """Replicas that would bring the picker's saturation of this stage to ``EPP_SATURATION_TARGET``;
    ``None`` when it does not apply (no saturation, nothing ready: an empty pool reads 1.0, stale endpoints)."""
    if saturation is None or ready <= 0 or stale > 0 or saturation <= cfg.epp_saturation_target:
        return None
    need = ceil_count(ready * saturation / cfg.epp_saturation_target)
    return max(provisioned, min(need, ceil_count(ready * cfg.scale_up_max_step)))
