"""The hot tier's two records in the store (pure data; docs/hot-tier.md, "The wake path").

- :class:`HotStatus`, written by the waker (the warm-pool side) per workload: its sleepers asleep and
  available, the ones awake and routed (canary passed), the ones that failed to wake, and the measured
  wake time per GPU product. The scaler counts the awake ones as ready capacity and the asleep ones
  as the ladder's ``hot`` rung.
- :class:`WakeIntent`, written by the scaler per workload when its decision changes: how many of the
  workload's sleepers should be awake now (a level, not a delta: a repeated or late intent changes
  nothing). An absent intent is unknown: the waker keeps what is awake, it never sleeps anything.

Both are JSON with a ``version``; readers take the keys they know and default the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# A hot status not republished for this long says nothing about the sleepers any more (the waker is
# gone or cut off from the store): the scaler then neither counts nor wakes them. The waker republishes
# every few seconds (warmpool/hot/waker.py, STATUS_SECONDS).
HOT_STATUS_MAX_AGE = 30.0


@dataclass(frozen=True)
class HotStatus:
    namespace: str
    name: str
    updated_at: float  # epoch seconds
    asleep: int = 0  # sleepers asleep and healthy: what a wake can call on now
    awake: int = 0  # sleepers awake whose canary passed (routed)
    waking: int = 0  # wakes in progress
    failed: int = 0  # sleepers that failed to wake twice (reported, never routed)
    # Measured median seconds from the wake request to a passing canary, per GPU product ("" unlabelled).
    wake_s: dict[str, float] = field(default_factory=dict)
    awake_pods: list[str] = field(default_factory=list)  # the awake sleepers (namespace/pod), for routing
    awake_urls: list[str] = field(default_factory=list)  # their base URLs (http://IP:PORT): what a gateway routes to
    # Requests running or waiting in the awake sleepers (their /metrics); None: unknown (never idle).
    awake_load: float | None = None
    version: int = 1

    def wake_seconds(self, gpu: str | None, fallback: float) -> float:
        """The measured wake time on ``gpu`` nodes, else on any (unlabelled first), else ``fallback``."""
        if gpu and gpu in self.wake_s:
            return self.wake_s[gpu]
        if "" in self.wake_s:
            return self.wake_s[""]
        return max(self.wake_s.values(), default=fallback)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HotStatus:
        return cls(namespace=str(d["namespace"]), name=str(d["name"]), updated_at=float(d["updated_at"]),
                   asleep=max(0, int(d.get("asleep", 0))), awake=max(0, int(d.get("awake", 0))),
                   waking=max(0, int(d.get("waking", 0))), failed=max(0, int(d.get("failed", 0))),
                   wake_s={str(k): float(v) for k, v in dict(d.get("wake_s") or {}).items()},
                   awake_pods=[str(p) for p in d.get("awake_pods") or []],
                   awake_urls=[str(u) for u in d.get("awake_urls") or []],
                   awake_load=None if d.get("awake_load") is None else float(d["awake_load"]),
                   version=int(d.get("version", 1)))


@dataclass(frozen=True)
class WakeIntent:
    """``awake`` of the workload's sleepers should be awake now (0: release all, after a drain)."""

    namespace: str
    name: str
    awake: int
    at: float  # epoch seconds when the scaler decided it
    reason: str = ""  # the hot step's why (decide/hot.py)
    by: str = ""  # the scaler instance
    version: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WakeIntent:
        return cls(namespace=str(d["namespace"]), name=str(d["name"]), awake=max(0, int(d["awake"])),
                   at=float(d["at"]), reason=str(d.get("reason", "")), by=str(d.get("by", "")),
                   version=int(d.get("version", 1)))
