"""What the scaler adds to a snapshot from its own store before :func:`scaler.observation.observe`.

A :class:`~warmscale.signals.model.Snapshot` holds what the signal sources read (engines, queues,
gateways, the API server's pod counts). The warm pool's bounds and ladder (published by the
warm-pool controller, read by the tracker from the store: :mod:`scaler.warm_status`) and the
pdGroup's ratio floor and transfer time (the other role's record: :mod:`scaler.pdgroup`) are scaler
inputs, not readings; they travel beside the snapshot in a :class:`ScalerContext`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScalerContext:
    """The scaler's own inputs for one decision (the defaults: no warm pool, no pdGroup)."""

    # The warm ladder: (warm state, replicas it can start, seconds) warmest first; the last step's
    # count is 0 (unlimited). Empty: only ``Snapshot.time_to_ready_s`` is known (see scaler.ladder).
    ttr_ladder: tuple[tuple[str, int, float], ...] = ()
    # The warm pool's ``min-ready`` floor and scale-to-zero permission at the snapshot's time (None: no
    # warm pool for the target, the ScaledObject's own bounds apply; zero_allowed False also while the
    # store never answered: unknown never permits zero).
    warm_floor: int | None = None
    zero_allowed: bool | None = None
    pd_floor: int | None = None  # the prefill/decode ratio bound of the ScaledObject's pdGroup
    pd_transfer_s: float | None = None  # the KV-transfer time the pdGroup's other role published
