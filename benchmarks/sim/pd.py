"""A disaggregated (prefill/decode) fleet for the trace replay, scaled per role by the production code.

The fleet (llm-d / vLLM with the NIXL KV connector, simulated):

- A request first goes to the **prefill pool**: a vLLM instance runs it with ``max_tokens=1``
  (:class:`PrefillEngine`, the same step-level engine as the combined pool). Its TTFT histogram is
  the prefill stage's: arrival at prefill to the prompt's last chunk.
- When the prefill finishes, the prompt's KV moves to a decode instance: :class:`Transfer` time =
  a fixed cost + the KV bytes over the link (``kv_bytes_per_token x prompt tokens / bandwidth``, each
  GPU of a tensor-parallel replica moving its shard over its own NIC).
- The **decode pool** (:class:`DecodeEngine`) admits the request only if its KV blocks for the prompt
  are free (decode's KV pressure), samples the first token in its next step and decodes the rest. The
  user's TTFT is arrival -> that first token: prefill wait + prefill + transfer + decode admission.
  A decode engine counts each transfer in ``vllm:nixl_xfer_time_seconds`` (the D instance pulls the
  KV in vLLM's NIXL connector), which it exposes with the rest of its ``/metrics``.
- Each pool is a :class:`~benchmarks.sim.cluster.Cluster` (pods, warm pool, GPU accounting). The two
  pools draw their replicas' start-up factors from one stream, in creation order across the fleet
  (``SimSettings.conditions``, :mod:`benchmarks.sim.conditions`), and both trackers' loops take the
  member's phases, as the combined pool's do.
- Prefix caching (a trace with block ids, ``Workload.hashes``): the **prefill** instances cache
  prefixes as a combined replica does (:mod:`benchmarks.sim.engine`; a hit skips prefill compute).
  The handoff still moves the whole prompt's KV and the decode instance holds all of it: decode-side
  prefix hits, with which vLLM's NIXL connector pulls only the blocks the decode instance lacks, are
  not modelled (a conservative simplification: the transfer is an upper bound).

``pd-per-role`` scales the two pools with two production trackers (``role: prefill`` and
``role: decode``, one ``pdGroup``), each reading its pool's rendered ``/metrics`` through the
production parsers, both sharing one store (the ratio bound and the decode role's published
KV-transfer time go through it), each actuated through its own KEDA + HPA. The combined pool it is
compared with is the trace replay's ``warmscale`` policy on aggregated replicas (``role: both``).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from warmscale.benchmarks.sim.arrivals import Workload, weighted_quantile
from warmscale.benchmarks.sim.cluster import Cluster
from warmscale.benchmarks.sim.conditions import Conditions, StartupDraws
from warmscale.benchmarks.sim.engine import VLLM_ITL_BUCKETS, Engine, EngineProfile, Hist, Request
from warmscale.benchmarks.sim.policies import Policy, WarmscalePolicy, warmscale_metadata
from warmscale.benchmarks.sim.runner import PolicyResult, SimSettings, _unserved_arrivals
from warmscale.scaler.store import MemoryStore
from warmscale.signals.histogram import Histogram
from warmscale.simulation.actuation import HpaBehavior, KedaConfig
from warmscale.warmpool.startup_model import StartupProfile

# vllm:nixl_xfer_time_seconds buckets (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py).
NIXL_XFER_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)

# KV bytes per token of the whole model (layers x KV heads x head dim x 2 (K and V) x 2 bytes BF16),
# as in benchmarks/sim/engine.py's step_per_kv_token_s sources.
KV_BYTES_PER_TOKEN: dict[str, float] = {"8b-h100": 131_072.0, "70b-h100-tp4": 327_680.0, "70b-h100-tp8": 327_680.0}


@dataclass(frozen=True)
class Transfer:
    """KV handoff time from a prefill to a decode instance (assumptions, stated in docs/pd.md)."""

    bytes_per_token: float
    gpus: int = 1
    fixed_s: float = 0.005  # NIXL post + notification + scheduling (vLLM's post-time buckets start at 1 ms)
    bandwidth_bps: float = 20e9  # per GPU: one 200 Gb/s RDMA NIC at ~80%

    def seconds(self, tokens: float) -> float:
        return self.fixed_s + tokens * self.bytes_per_token / (self.bandwidth_bps * max(1, self.gpus))

    def to_dict(self) -> dict[str, float]:
        return {"bytes_per_token": self.bytes_per_token, "gpus": self.gpus, "fixed_s": self.fixed_s,
                "bandwidth_bytes_per_s_per_gpu": self.bandwidth_bps}


class PDRequest(Request):
    """A request of the P/D fleet: on prefill it asks for one token; ``dec_out`` is what decode makes.
    ``hashes``: the prompt's block ids, for the prefill instance's prefix cache (None: no caching)."""

    __slots__ = ("dec_out", "xfer")

    def __init__(self, t_arr: float, inp: float, out: float, n: int = 1, *, dec_out: float = 1.0,
                 hashes: tuple[int, ...] | None = None, hash_tokens: int = 0) -> None:
        super().__init__(t_arr, inp, out, n, hashes, hash_tokens)
        self.dec_out = dec_out
        self.xfer = 0.0


def decode_request(p: Request, xfer_s: float) -> PDRequest:
    """The decode side of ``p``: the prompt's KV arrived (held from admission), one step samples the
    first token of each member, then decoding goes on."""
    out = p.dec_out if isinstance(p, PDRequest) else p.out
    d = PDRequest(p.t_arr, p.inp, out, p.n)
    d.kv = d.inp * d.n
    d.target = d.n
    d.xfer = xfer_s
    return d


class PrefillEngine(Engine):
    """A prefill instance: finished (one-token) requests go to ``outbox`` for the KV handoff."""

    def __init__(self, profile: EngineProfile, outbox: list[tuple[float, Request]], now: float = 0.0) -> None:
        super().__init__(profile, None, now)  # its first tokens are not the user's
        self.outbox = outbox

    def _finish(self, r: Request, now: float) -> None:
        super()._finish(r, now)
        self.outbox.append((now, r))


class DecodeEngine(Engine):
    """A decode instance with the NIXL connector: counts each KV transfer it receives."""

    def __init__(self, profile: EngineProfile, sink: list[tuple[float, float, int]], now: float = 0.0) -> None:
        super().__init__(profile, sink, now)
        self.h_xfer = Hist(NIXL_XFER_BUCKETS)

    def enqueue(self, req: Request, now: float) -> None:
        if isinstance(req, PDRequest) and req.xfer > 0:
            self.h_xfer.observe(req.xfer, req.n)
            req.xfer = 0.0  # a request handed back (pod deleted) and routed again is not a new transfer
        super().enqueue(req, now)


class PDFleet:
    """The prefill and decode pools and the KV handoffs in flight between them; ``draws``: the
    member's start-up factors, one stream for both pools (None: the ladder's exact times)."""

    def __init__(self, engine: EngineProfile, startup: StartupProfile, transfer: Transfer, *,
                 standby: tuple[int, int], node_idle_s: float, engines: list[Engine],
                 draws: StartupDraws | None = None) -> None:
        self.outbox: list[tuple[float, Request]] = []
        self.transfer = transfer
        self.engines = engines

        def pre(ep: EngineProfile, sink: list[tuple[float, float, int]], now: float) -> Engine:
            e = PrefillEngine(ep, self.outbox, now)
            engines.append(e)
            return e

        def dec(ep: EngineProfile, sink: list[tuple[float, float, int]], now: float) -> Engine:
            e = DecodeEngine(ep, sink, now)
            engines.append(e)
            return e

        self.pre = Cluster(engine, startup, standby=standby[0], node_idle_s=node_idle_s, make_engine=pre, draws=draws)
        self.dec = Cluster(engine, startup, standby=standby[1], node_idle_s=node_idle_s, make_engine=dec, draws=draws)
        self.in_flight: list[tuple[float, int, PDRequest]] = []  # (arrives at decode, seq, request)
        self._seq = 0
        self.transfer_s = 0.0
        self.transfers = 0

    def dispatch(self, t: float, inp: float, out: float, n: int, hashes: tuple[int, ...] | None = None,
                 hash_tokens: int = 0) -> None:
        self.pre.events_until(t)
        self.pre.dispatch(PDRequest(t, inp, 1, n, dec_out=out, hashes=hashes, hash_tokens=hash_tokens))

    def advance(self, now: float) -> None:
        self.pre.advance(now)
        for done_at, r in self.outbox:
            x = self.transfer.seconds(r.inp)
            self.transfer_s += x * r.n
            self.transfers += r.n
            self._seq += 1
            heapq.heappush(self.in_flight, (done_at + x, self._seq, decode_request(r, x)))
        self.outbox.clear()
        while self.in_flight and self.in_flight[0][0] <= now:
            due, _, req = heapq.heappop(self.in_flight)
            self.dec.events_until(due)
            if self.dec.ready:
                self.dec._route(req, self.dec.ready, due)
            else:
                self.dec._hold(req)
        self.dec.advance(now)

    def units(self) -> int:
        return self.pre.units() + self.dec.units()

    def busy(self) -> bool:
        return bool(self.in_flight or self.outbox) or any(
            c.gateway_n > 0 or c.draining or any(not p.engine.idle for p in c.pods) for c in (self.pre, self.dec))


class PerRolePolicy:
    """Two production trackers, ``role: prefill`` and ``role: decode`` of one ``pdGroup``, sharing a store."""

    name = "pd-per-role"

    def __init__(self, max_replicas: int, slo_ttft: float, startup: StartupProfile, standby: int | None,
                 overrides: dict[str, str], role_overrides: dict[str, dict[str, str]], *, fast_signals: bool,
                 initial: tuple[int, int] = (1, 1), cond: Conditions | None = None) -> None:
        self.clock = [0.0]
        self.store = MemoryStore(clock=lambda: self.clock[0])
        self.policies: dict[str, WarmscalePolicy] = {}
        for role in ("prefill", "decode"):
            md = warmscale_metadata(max_replicas, slo_ttft, {**overrides, "role": role, "pdGroup": "llm",
                                                              **role_overrides.get(role, {})})
            self.policies[role] = WarmscalePolicy(
                md, startup, standby, HpaBehavior(scale_down_stabilization_s=0.0, scale_up_pods=max_replicas),
                KedaConfig(min_replicas=1, max_replicas=max_replicas), fast_signals=fast_signals,
                store=self.store, workload=f"llm-{role}", clock=self.clock,
                initial_replicas=initial[0] if role == "prefill" else initial[1], cond=cond)

    @property
    def standby(self) -> tuple[int, int]:
        """Placeholders per pool at t = 0 (each pool's warm-pool plan: ``--standby N`` or auto)."""
        return self.policies["prefill"].standby, self.policies["decode"].standby

    def control(self, fleet: PDFleet, now: float, dt: float) -> None:
        self.policies["prefill"].control(fleet.pre, now, dt)
        self.policies["decode"].control(fleet.dec, now, dt)

    def params(self) -> dict[str, Any]:
        return {role: p.params() for role, p in self.policies.items()}

    def reasons(self) -> dict[str, dict[str, int]]:
        return {role: dict(p.reasons) for role, p in self.policies.items()}

    def close(self) -> None:
        for p in self.policies.values():
            p.close()


@dataclass
class ModeResult:
    """One fleet mode's outcome: the trace replay's :class:`PolicyResult` plus per-role figures."""

    result: PolicyResult
    itl_p99_s: float
    itl_within: float = 1.0  # share of inter-token gaps within the ITL SLO (per the engines' histograms)
    max_prefill: int = 0
    max_decode: int = 0
    transfer_mean_s: float = 0.0
    reasons: dict[str, Any] = field(default_factory=dict)


def itl_histogram(engines: list[Engine]) -> Histogram:
    """Every engine's ``vllm:inter_token_latency_seconds``, merged."""
    counts = [0.0] * (len(VLLM_ITL_BUCKETS) + 1)
    for e in engines:
        for i, c in enumerate(e.h_itl.counts):
            counts[i] += c
    cum, buckets = 0.0, []
    for le, c in zip((*VLLM_ITL_BUCKETS, math.inf), counts, strict=True):
        cum += c
        buckets.append((le, cum))
    return Histogram(buckets=tuple(buckets), sum=0.0, count=cum)


def itl_quantile(engines: list[Engine], q: float) -> float:
    """The ``q`` quantile of the inter-token latency over every engine (linear within the bucket)."""
    h = itl_histogram(engines)
    if h.count <= 0:
        return 0.0
    v = h.quantile(q)
    return float(v) if v is not None and math.isfinite(v) else float(VLLM_ITL_BUCKETS[-1])


def itl_within(engines: list[Engine], slo: float) -> float:
    """Share of inter-token gaps at most ``slo`` (counted up to the largest bucket bound <= ``slo``)."""
    h = itl_histogram(engines)
    if h.count <= 0:
        return 1.0
    below = [c for le, c in h.buckets if le <= slo]
    return (below[-1] if below else 0.0) / h.count


def simulate_pd(work: Workload, policy: PerRolePolicy, engine: EngineProfile, startup: StartupProfile,
                transfer: Transfer, initial: tuple[int, int], s: SimSettings, *, itl_slo: float = 0.1) -> ModeResult:
    """The trace through a P/D fleet scaled by ``policy`` (the loop of :func:`benchmarks.sim.runner.simulate`)."""
    wall0 = time.perf_counter()
    engines: list[Engine] = []
    fleet = PDFleet(engine, startup, transfer, standby=policy.standby, node_idle_s=s.node_idle_s, engines=engines,
                    draws=s.conditions.startup_draws())
    fleet.pre.start_ready(initial[0], 0.0)
    fleet.dec.start_ready(initial[1], 0.0)
    T, N, IN, OUT = work.t.tolist(), work.n.tolist(), work.inp.tolist(), work.out.tolist()
    H = work.hashes.tolist() if work.hashes is not None else None
    m, ptr, dt, step_i, t = len(T), 0, s.dt, 0, 0.0
    span = work.span_s
    end_limit = span + s.drain_max_s
    gpu_s = gpu_warm = 0.0
    gpus = engine.gpus_per_replica
    tl: dict[str, list[float]] = {"t": [], "prefill": [], "decode": [], "waiting": []}
    next_sample = 0.0
    max_pre = max_dec = 0
    policy.control(fleet, 0.0, dt)
    while True:
        step_i += 1
        t_next = step_i * dt
        while ptr < m and T[ptr] < t_next:
            fleet.advance(T[ptr])  # handoffs due before this arrival reach decode first
            if H is None:
                fleet.dispatch(T[ptr], IN[ptr], OUT[ptr], N[ptr])
            else:
                fleet.dispatch(T[ptr], IN[ptr], OUT[ptr], N[ptr], H[ptr], work.hash_tokens)
            ptr += 1
        fleet.advance(t_next)
        if t < span:
            seg = min(t_next, span) - t
            units = fleet.units() * gpus
            gpu_s += units * seg
            lo, hi = max(t, s.warmup_s), min(t_next, span)
            if hi > lo:
                gpu_warm += units * (hi - lo)
        t = t_next
        policy.control(fleet, t, dt)
        max_pre = max(max_pre, len(fleet.pre.pods))
        max_dec = max(max_dec, len(fleet.dec.pods))
        if t >= next_sample and t <= span + dt:
            next_sample = t + s.sample_s
            tl["t"].append(round(t, 3))
            tl["prefill"].append(fleet.pre.spec)
            tl["decode"].append(fleet.dec.spec)
            tl["waiting"].append(fleet.pre.waiting_total() + fleet.dec.waiting_total())
        if s.progress is not None and step_i % 600 == 0:
            s.progress(policy.name, min(1.0, t / span) if span > 0 else 1.0)
        if t >= span and ptr >= m and (not fleet.busy() or t >= end_limit):
            break
    policy.close()
    sink = fleet.dec.ttft_sink
    result = _result(policy.name, work, sink, s, gpu_s, gpu_warm, time.perf_counter() - wall0,
                     cold=fleet.pre.cold_starts + fleet.dec.cold_starts, max_replicas=max_pre + max_dec,
                     starts={f"prefill:{k}": v for k, v in fleet.pre.starts.items()}
                     | {f"decode:{k}": v for k, v in fleet.dec.starts.items()}, timeline=tl, params=policy.params())
    if work.hashes is not None:  # the prefill instances' caches (decode caches nothing; module docstring)
        result.prefix_cache = fleet.pre.prefix_cache_tokens()
    decoders: list[Engine] = [e for e in engines if isinstance(e, DecodeEngine)]
    return ModeResult(result, itl_quantile(decoders, 0.99), itl_within(decoders, itl_slo), max_prefill=max_pre,
                      max_decode=max_dec,
                      transfer_mean_s=fleet.transfer_s / fleet.transfers if fleet.transfers else 0.0,
                      reasons=policy.reasons())


def simulate_combined(work: Workload, policy: Policy, engine: EngineProfile, startup: StartupProfile,
                      initial: int, s: SimSettings, *, itl_slo: float = 0.1) -> ModeResult:
    """The same trace through one combined (aggregated) pool: :func:`benchmarks.sim.runner.simulate`,
    with the engines kept for the inter-token latency."""
    from warmscale.benchmarks.sim.runner import simulate

    engines: list[Engine] = []

    def make(ep: EngineProfile, sink: list[tuple[float, float, int]], now: float) -> Engine:
        e = Engine(ep, sink, now)
        engines.append(e)
        return e

    res = simulate(work, policy, engine, startup, initial, s, make_engine=make)
    reasons = dict(getattr(policy, "reasons", {}))
    return ModeResult(res, itl_quantile(engines, 0.99), itl_within(engines, itl_slo), reasons={"both": reasons})


def _result(name: str, work: Workload, sink: list[tuple[float, float, int]], s: SimSettings, gpu_s: float,
            gpu_warm: float, wall: float, *, cold: int, max_replicas: int, starts: dict[str, int],
            timeline: dict[str, list[float]], params: dict[str, Any]) -> PolicyResult:
    total = work.requests
    arr = np.array([x[0] for x in sink], dtype=np.float64)
    ttft = np.array([x[1] for x in sink], dtype=np.float64)
    w = np.array([x[2] for x in sink], dtype=np.float64)
    served = int(w.sum())
    if served < total:
        never = _unserved_arrivals(work, sink)
        ttft = np.concatenate([ttft, np.full(len(never), float(s.drain_max_s))])
        w = np.concatenate([w, [float(x[1]) for x in never]])
        arr = np.concatenate([arr, [x[0] for x in never]])
    ok = ttft <= s.slo_ttft
    late = arr >= s.warmup_s
    n_warm = float(w[late].sum())
    return PolicyResult(
        name=name, slo_attainment=float(w[ok].sum()) / total if total else 1.0, gpu_hours=gpu_s / 3600.0,
        ttft_p50_s=weighted_quantile(ttft, w, 0.5) if len(w) else 0.0,
        ttft_p99_s=weighted_quantile(ttft, w, 0.99) if len(w) else 0.0,
        cold_starts=cold, max_replicas=max_replicas, requests=total, served=served, wall_s=wall, starts=starts,
        timeline=timeline, slo_attainment_warm=float(w[late & ok].sum()) / n_warm if n_warm > 0 else 1.0,
        gpu_hours_warm=gpu_warm / 3600.0, params=params)


def pd_start(work: Workload, engine: EngineProfile, window_s: float = 300.0, grid_s: float = 10.0) -> tuple[int, int]:
    """(prefill, decode) replicas an operator would start with: the most each role needs in the first
    ``window_s`` (prompt tokens at 70% of a prefill-only replica; KV tokens and sequences in flight at
    80% of a decode replica), at least 1 each."""
    early = work.t < window_s
    if not early.any():
        return 1, 1
    cells = math.ceil(window_s / grid_s) + 1
    idx = (work.t[early] // grid_s).astype(np.int64)
    inp, out, n = work.inp[early], work.out[early], work.n[early].astype(np.float64)
    tokens = np.bincount(idx, weights=inp * n, minlength=cells)
    prefill = float((tokens / grid_s / (0.7 * engine.prefill_rate(0, 0))).max())
    tpot = engine.decode_step_s(engine.max_num_seqs / 4, engine.kv_capacity_tokens / 2)
    end = np.minimum(((work.t[early] + out * tpot) // grid_s).astype(np.int64) + 1, cells)
    kv, seqs = np.zeros(cells + 1), np.zeros(cells + 1)
    np.add.at(kv, idx, (inp + out) * n)
    np.add.at(kv, end, -(inp + out) * n)
    np.add.at(seqs, idx, n)
    np.add.at(seqs, end, -n)
    decode = max(float((np.cumsum(kv) / (0.8 * engine.kv_capacity_tokens)).max()),
                 float((np.cumsum(seqs) / (0.8 * engine.max_num_seqs)).max()))
    return max(1, math.ceil(prefill - 1e-9)), max(1, math.ceil(decode - 1e-9))

