"""What the scaler remembers per ScaledObject between decisions (pure data, JSON-friendly).

It is kept in the store (memory or Redis) so that several scaler replicas answer alike and a
restart loses neither the TTFT window, the scale-down stabilisation window nor the last decision.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from warmscale.scaler.bursts import BurstMemory
from warmscale.scaler.capacity import Estimate, ItlEstimate
from warmscale.signals.histogram import Histogram, WindowSum


@dataclass(frozen=True)
class ReplicaMemory:
    """Last cumulative values seen from one replica, to difference the next scrape against."""

    observed_at: float
    ttft: Histogram | None = None
    requests_total: float | None = None
    generation_tokens_total: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    waiting: float | None = None
    # Start of the replica's current capacity sample (scaler.capacity): time, prompt tokens then, and
    # whether requests waited at every scrape since.
    sample_at: float | None = None
    sample_prompt: float | None = None
    sample_saturated: bool = False
    # Whether the sample started at a scrape where the prompt counter moved (it then spans counter step
    # to counter step), the scrape gap before that start, and the prefill-time sum and count and the
    # finished requests' prompt tokens then (the windowed prefill-time floor, scaler.capacity).
    sample_aligned: bool = False
    sample_lead: float | None = None
    sample_prefill: tuple[float, float, float] | None = None
    itl: Histogram | None = None  # cumulative inter-token latency histogram
    running: float | None = None  # running sequences at the last scrape (the ITL sample's batch)
    # KV-connector transfer counters (P/D): seconds and transfers, lifetime totals.
    kv_transfer_seconds_total: float | None = None
    kv_transfers_total: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ttft"] = self.ttft.to_dict() if self.ttft is not None else None
        d["itl"] = self.itl.to_dict() if self.itl is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplicaMemory:
        ttft, itl = d.get("ttft"), d.get("itl")
        return cls(
            observed_at=float(d["observed_at"]),
            ttft=Histogram.from_dict(ttft) if ttft else None,
            requests_total=d.get("requests_total"),
            generation_tokens_total=d.get("generation_tokens_total"),
            preemptions_total=d.get("preemptions_total"),
            prompt_tokens_total=d.get("prompt_tokens_total"),
            waiting=d.get("waiting"),
            sample_at=d.get("sample_at"),
            sample_prompt=d.get("sample_prompt"),
            sample_saturated=bool(d.get("sample_saturated", False)),
            sample_aligned=bool(d.get("sample_aligned", False)),
            sample_lead=d.get("sample_lead"),
            sample_prefill=_triple(d.get("sample_prefill")),
            itl=Histogram.from_dict(itl) if itl else None,
            running=d.get("running"),
            kv_transfer_seconds_total=d.get("kv_transfer_seconds_total"),
            kv_transfers_total=d.get("kv_transfers_total"),
        )


def _triple(v: Any) -> tuple[float, float, float] | None:
    return (float(v[0]), float(v[1]), float(v[2])) if v else None


@dataclass(frozen=True)
class ScalerState:
    """All of one ScaledObject's memory. Lists are (time, value) samples, oldest first."""

    replicas: dict[str, ReplicaMemory] = field(default_factory=dict)
    # (decision time, the sum of that decision's new first-token latencies over its replicas) over
    # ttftWindowSeconds; a state stored before 2026-12-02 may hold one entry per replica (summed alike)
    ttft_deltas: tuple[tuple[float, Histogram], ...] = ()
    # The bucket counts of ttft_deltas, carried to the next decision (signals.histogram.slide). Derived
    # data: never stored, not compared; a state without it (restored, or replaced) sums the window again.
    ttft_sum: WindowSum | None = field(default=None, compare=False, repr=False)
    running_samples: tuple[tuple[float, float], ...] = ()
    waiting_samples: tuple[tuple[float, float], ...] = ()
    completions: tuple[tuple[float, float], ...] = ()
    preemption_events: tuple[tuple[float, float], ...] = ()
    recommendations: tuple[tuple[float, int], ...] = ()
    # (time, the rules' need before bounds and holds) over 2 x burstConfirmSeconds (scaler/decide/confirm.py)
    needs: tuple[tuple[float, int], ...] = ()
    # (bucket start, the largest need in it), buckets of burstWindowSeconds over the longest hold
    need_peaks: tuple[tuple[float, int], ...] = ()
    # (time, prompt tokens prefilled, requests finished) per decision, over trendWindowSeconds
    prompt_samples: tuple[tuple[float, float, float], ...] = ()
    # (time, KV-transfer seconds, transfers) per decision over trendWindowSeconds (P/D connectors)
    transfer_samples: tuple[tuple[float, float, float], ...] = ()
    # Learned per-replica capacity, per GPU product ("" when unknown); see scaler.capacity.
    capacity: dict[str, Estimate] = field(default_factory=dict)
    # Inter-token latency: (time, windowed histogram, mean running sequences per replica) per replica
    # interval over ttftWindowSeconds; the learned ITL line per GPU product (scaler.capacity); the last
    # observed correction of the line (quantile / modelled mean), kept while ITL is unknown.
    itl_deltas: tuple[tuple[float, Histogram, float], ...] = ()
    itl_capacity: dict[str, ItlEstimate] = field(default_factory=dict)
    itl_factor: float | None = None
    last_activity_at: float | None = None
    last_desired: int | None = None
    last_increase_at: float | None = None
    last_decision_at: float | None = None
    # Set when the stored state was lost (Redis FLUSHALL, eviction, a store outage without a local
    # copy): the policy then refuses any scale-down for one stabilisation window from this time.
    state_lost_at: float | None = None
    # The need's rises above what was provisioned (scaler.bursts), published for standby: auto.
    bursts: BurstMemory = field(default_factory=BurstMemory)
    # metricUnit inflight: the HPA target last published, the one before it and when it changed
    # (scaler.metric_target; None: not published yet).
    published_target: tuple[float, float | None, float | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": {k: v.to_dict() for k, v in self.replicas.items()},
            "ttft_deltas": [[t, h.to_dict()] for t, h in self.ttft_deltas],
            "completions": [list(s) for s in self.completions],
            "running_samples": [list(s) for s in self.running_samples],
            "waiting_samples": [list(s) for s in self.waiting_samples],
            "preemption_events": [list(s) for s in self.preemption_events],
            "recommendations": [list(s) for s in self.recommendations],
            "needs": [list(s) for s in self.needs],
            "need_peaks": [list(s) for s in self.need_peaks],
            "prompt_samples": [list(s) for s in self.prompt_samples],
            "transfer_samples": [list(s) for s in self.transfer_samples],
            "capacity": {k: v.to_dict() for k, v in self.capacity.items()},
            "itl_deltas": [[t, h.to_dict(), b] for t, h, b in self.itl_deltas],
            "itl_capacity": {k: v.to_dict() for k, v in self.itl_capacity.items()},
            "itl_factor": self.itl_factor,
            "last_activity_at": self.last_activity_at,
            "last_desired": self.last_desired,
            "last_increase_at": self.last_increase_at,
            "last_decision_at": self.last_decision_at,
            "state_lost_at": self.state_lost_at,
            "bursts": self.bursts.to_dict(),
            "published_target": list(self.published_target) if self.published_target is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScalerState:
        return cls(
            replicas={k: ReplicaMemory.from_dict(v) for k, v in d.get("replicas", {}).items()},
            ttft_deltas=tuple((float(t), Histogram.from_dict(h)) for t, h in d.get("ttft_deltas", [])),
            completions=tuple((float(t), float(v)) for t, v in d.get("completions", [])),
            running_samples=tuple((float(t), float(v)) for t, v in d.get("running_samples", [])),
            waiting_samples=tuple((float(t), float(v)) for t, v in d.get("waiting_samples", [])),
            preemption_events=tuple((float(t), float(v)) for t, v in d.get("preemption_events", [])),
            recommendations=tuple((float(t), int(v)) for t, v in d.get("recommendations", [])),
            needs=tuple((float(t), int(v)) for t, v in d.get("needs", [])),
            need_peaks=tuple((float(t), int(v)) for t, v in d.get("need_peaks", [])),
            prompt_samples=tuple((float(t), float(p), float(r)) for t, p, r in d.get("prompt_samples", [])),
            transfer_samples=tuple((float(t), float(x), float(n)) for t, x, n in d.get("transfer_samples", [])),
            capacity={str(k): Estimate.from_dict(v) for k, v in d.get("capacity", {}).items()},
            itl_deltas=tuple((float(t), Histogram.from_dict(h), float(b)) for t, h, b in d.get("itl_deltas", [])),
            itl_capacity={str(k): ItlEstimate.from_dict(v) for k, v in d.get("itl_capacity", {}).items()},
            itl_factor=d.get("itl_factor"),
            last_activity_at=d.get("last_activity_at"),
            last_desired=d.get("last_desired"),
            last_increase_at=d.get("last_increase_at"),
            last_decision_at=d.get("last_decision_at"),
            state_lost_at=d.get("state_lost_at"),
            bursts=BurstMemory.from_dict(d.get("bursts")),
            published_target=_published(d.get("published_target")),
        )


def _published(raw: Any) -> tuple[float, float | None, float | None] | None:
    if not isinstance(raw, list | tuple) or len(raw) != 3 or not raw[0]:
        return None
    return (float(raw[0]), None if raw[1] is None else float(raw[1]), None if raw[2] is None else float(raw[2]))
