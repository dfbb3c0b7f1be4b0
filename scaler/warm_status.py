"""What the warm-pool controller publishes per workload and the scaler reads as its look-ahead."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from warmscale.scaler.ladder import PLACEHOLDER_UNMEASURED, time_to_ready
from warmscale.scaler.schedule import Bounds, bounds_at

WARM_STATES = ("placeholder+staged", "staged", "cold")


@dataclass(frozen=True)
class WarmStatus:
    """Warm capacity and measured time-to-ready of one Deployment/StatefulSet.

    ``time_to_ready_s`` maps a warm state (one of :data:`WARM_STATES`) to the measured median
    seconds from pod creation to Ready. :meth:`expected_time_to_ready` is what the next replica
    should take given the warm capacity held right now.

    ``min_ready`` and ``scale_to_zero`` are the workload's ``warmscale.io/min-ready`` and
    ``warmscale.io/scale-to-zero`` values (validated by the controller; empty when an older controller
    published the status): the scaler evaluates them at its own clock (:meth:`bounds`), so the floor
    and the scale-to-zero windows bind whoever wrote the ScaledObject.
    """

    namespace: str
    name: str
    updated_at: float
    placeholders_ready: int = 0
    staged_nodes: int = 0
    ready_replicas: int = 0
    starting_replicas: int = 0
    spec_replicas: int = 0
    min_ready_floor: int = 0
    time_to_ready_s: dict[str, float] = field(default_factory=dict)
    min_ready: str = ""
    scale_to_zero: str = ""
    # Version 2 (issue 12): the measured medians per GPU product of the nodes the replicas started on
    # (nvidia.com/gpu.product; "" unlabelled). Readers of version 1 ignore it; readers of version 2
    # accept a version-1 status (empty).
    version: int = 3
    time_to_ready_by_gpu: dict[str, dict[str, float]] = field(default_factory=dict)
    # Version 3 (issue 12, standby: auto): whether the workload's standby is sized automatically and
    # the size the planner chose last (a new leader starts from it while no burst statistics can be
    # read). Readers of version 3 accept versions 1-2 (False, 0).
    standby_auto: bool = False
    standby_size: int = 0

    def bounds(self, now: float) -> Bounds | None:
        """Floor and scale-to-zero at ``now`` (epoch seconds); ``None`` when not published or unreadable."""
        if not self.min_ready and not self.scale_to_zero:
            return None
        try:
            return bounds_at(self.min_ready or "0", self.scale_to_zero or "never", datetime.fromtimestamp(now, UTC))
        except ValueError:
            return None

    def for_gpu(self, gpu: str | None) -> WarmStatus:
        """This status with the medians measured on ``gpu`` nodes, where there are any."""
        by = self.time_to_ready_by_gpu.get(gpu or "")
        if not gpu or not by:
            return self
        return replace(self, time_to_ready_s={**self.time_to_ready_s, **by})

    def ladder(self, fallback: float) -> tuple[tuple[str, int, float], ...]:
        """The warm ladder (:mod:`scaler.ladder`): the first ``placeholders_ready`` additional replicas
        start on a placeholder, the next ones on staged nodes without one, the rest cold. Placeholders
        without a measurement are a warm step timed like the cold one (:data:`PLACEHOLDER_UNMEASURED`);
        staged nodes without one are skipped (their replicas count as cold)."""
        ttr = self.time_to_ready_s
        steps: list[tuple[str, int, float]] = []
        if self.placeholders_ready > 0 and "placeholder+staged" in ttr:
            steps.append(("placeholder+staged", self.placeholders_ready, ttr["placeholder+staged"]))
        elif self.placeholders_ready > 0:
            # Not measured yet: warm, but timed (and released by the burst hold) like the next colder step.
            steps.append((PLACEHOLDER_UNMEASURED, self.placeholders_ready, ttr.get("cold", fallback)))
        staged_free = self.staged_nodes - (self.placeholders_ready if steps else 0)
        if staged_free > 0 and "staged" in ttr:
            steps.append(("staged", staged_free, ttr["staged"]))
        steps.append(("cold", 0, ttr.get("cold", fallback)))
        return tuple(steps)

    def expected_time_to_ready(self, fallback: float, k: int = 1) -> float:
        """Seconds until the k-th additional replica started now is ready (the warm ladder)."""
        return time_to_ready(self.ladder(fallback), k)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WarmStatus:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["time_to_ready_s"] = {str(k): float(v) for k, v in dict(known.get("time_to_ready_s", {})).items()}
        known["time_to_ready_by_gpu"] = {
            str(g): {str(k): float(v) for k, v in dict(m).items()}
            for g, m in dict(known.get("time_to_ready_by_gpu") or {}).items()}
        known["version"] = int(known.get("version", 1))
        known["standby_auto"] = bool(known.get("standby_auto", False))
        known["standby_size"] = max(0, int(known.get("standby_size", 0) or 0))
        return cls(**known)
