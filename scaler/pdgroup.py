"""Ratio bounds between the prefill and decode ScaledObjects of one ``pdGroup`` (pure).

Each member publishes its latest decision and its bounds to the shared store; each reads the other's.
The bound only ever *raises* the lagging role, never lowers one (lowering could starve a role that
needs its replicas, and two members lowering each other could deadlock):

- decode >= ceil(decodePerPrefillMin x prefill)
- prefill >= ceil(decode / decodePerPrefillMax)

A member's record older than ``stale_after_s`` is ignored (that role is gone or not tracked). Bounds
come from the member's own config, else from the other's record (one ScaledObject may declare them).
While the store is unreachable the tracker uses the last record it read, aged as of that read (the
last known bounds hold for the whole outage: an unreachable store is unknown, never "the peer left").

Each member also publishes the mean KV-transfer time its replicas report (vLLM's NIXL connector
counts transfers on the decode side, SGLang on the prefill side): the other role reads it, so the
prefill role's TTFT budget knows the handoff it is followed by (scaler/roles.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.counts import ceil_count


@dataclass(frozen=True)
class Member:
    role: str
    desired: int
    at: float
    lo: float | None = None  # decodePerPrefillMin
    hi: float | None = None  # decodePerPrefillMax
    kv_transfer_s: float | None = None  # mean KV-transfer time this role's replicas report

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "desired": self.desired, "at": self.at, "lo": self.lo, "hi": self.hi,
                "xfer": self.kv_transfer_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Member:
        def opt(v: Any) -> float | None:
            return None if v is None else float(v)

        return cls(role=str(d["role"]), desired=int(d["desired"]), at=float(d["at"]), lo=opt(d.get("lo")),
                   hi=opt(d.get("hi")), kv_transfer_s=opt(d.get("xfer")))


def stale_after(cfg: ScalerConfig) -> float:
    return max(60.0, 10 * cfg.scrape_interval_seconds)


def ratio_floor(cfg: ScalerConfig, members: dict[str, Member], now: float) -> tuple[int | None, str]:
    """The replica floor the group's ratio bound sets for ``cfg.role`` (``None``: no bound applies) and why."""
    other = peer(cfg, members, now)
    if other is None:
        return None, ""
    lo = cfg.decode_per_prefill_min if cfg.decode_per_prefill_min is not None else other.lo
    hi = cfg.decode_per_prefill_max if cfg.decode_per_prefill_max is not None else other.hi
    if cfg.role == "decode" and lo is not None:
        return ceil_count(lo * other.desired), f"decode >= {lo:g} x {other.desired} prefill"
    if cfg.role == "prefill" and hi is not None:
        return ceil_count(other.desired / hi), f"prefill >= {other.desired} decode / {hi:g}"
    return None, ""


def peer(cfg: ScalerConfig, members: dict[str, Member], now: float) -> Member | None:
    """The other role's fresh record (``None``: not in a group, or that role is gone)."""
    if cfg.pd_group is None or cfg.role not in ("prefill", "decode"):
        return None
    other = members.get("prefill" if cfg.role == "decode" else "decode")
    if other is None or now - other.at > stale_after(cfg):
        return None
    return other
