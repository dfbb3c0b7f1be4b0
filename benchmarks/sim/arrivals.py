"""Arrivals from trace files: per-request CSVs as they are, rate curves as Poisson cohorts.

- Per-request: header ``timestamp_s,input_tokens,output_tokens`` (extra columns are ignored); any
  such CSV works. Rows are sorted by time; one :class:`~benchmarks.sim.engine.Request` per row. When
  the trace has a block-hash sidecar (``<stem>.hashes.gz``: Mooncake's ``hash_ids``), each row keeps
  its prompt's block ids (``Workload.hashes``) and the simulated engines cache prefixes
  (``prefix_cache=False``: ``--no-prefix-cache``, the ids are not loaded).
- Rate curve: header ``bucket_start_s,bucket_end_s,requests`` or ``...,rate_rps[,...]``. The
  expected count of each tick is the curve's integral over the tick; the count is Poisson around
  it; the tick's requests form one cohort (n identical requests at the tick's middle) whose token
  sizes are the mean of n draws from a per-request trace (exact draws up to 64 requests, the
  normal approximation of the mean above).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from warmscale.traces import block_hashes, loader

# The arrival bin of a rate curve in the trace replay: fixed, so that the control tick paces only the
# control loops. (It was the tick until issue 21: halving the tick drew other Poisson counts, a
# different arrival sample, and moved a policy by 10.9% of its GPU-hours on the DeepSeek-R1 day;
# tests/bench/test_convergence.py.) 1 s: the tick the benchmarks run at, so their arrivals are unchanged.
RATE_BIN_S = 1.0


@dataclass
class Workload:
    name: str
    kind: str  # "requests" | "rate"
    t: np.ndarray  # arrival time (s)
    n: np.ndarray  # requests per entry
    inp: np.ndarray  # input tokens (per member)
    out: np.ndarray  # output tokens (per member)
    span_s: float
    tokens_from: str | None = None
    # Per entry, its prompt's block ids (a tuple; object array), and tokens per block; None: no prefix caching.
    hashes: np.ndarray | None = None
    hash_tokens: int = 0
    # compute_floor's last answer and the arrays it was computed from (recomputed when they are replaced).
    _floor: tuple[np.ndarray, np.ndarray, int, np.ndarray] | None = field(default=None, init=False, repr=False,
                                                                          compare=False)

    @property
    def requests(self) -> int:
        return int(self.n.sum())

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the entries where ``mask`` (a boolean array or an index) selects, block ids too."""
        self.t, self.n, self.inp, self.out = self.t[mask], self.n[mask], self.inp[mask], self.out[mask]
        if self.hashes is not None:
            self.hashes = self.hashes[mask]

    def compute_floor(self) -> np.ndarray:
        """Prompt tokens each entry must compute at least: its prompt less the longest run of leading
        full blocks any earlier entry's prompt holds (an infinite cache shared by every replica, a
        block reusable as soon as it arrives; at most ``prompt - 1`` tokens, as the engines cache).
        Without block ids, the prompts. For lower bounds (``references.lower_bound``)."""
        if self.hashes is None:
            return self.inp
        memo = self._floor  # every cache key and the bound ask for it: one pass over the block ids per workload
        if memo is not None and memo[0] is self.inp and memo[1] is self.hashes and memo[2] == self.hash_tokens:
            return memo[3]
        bt = self.hash_tokens
        seen: set[int] = set()
        floor = self.inp.copy()
        for i, ids in enumerate(self.hashes):
            p = int(self.inp[i])
            limit = min(len(ids), (p - 1) // bt)
            k = 0
            while k < limit and ids[k] in seen:
                k += 1
            floor[i] = p - k * bt
            seen.update(ids[:p // bt])
        floor.flags.writeable = False  # shared by every caller
        self._floor = (self.inp, self.hashes, bt, floor)
        return floor


def truncate(work: Workload, seconds: float) -> Workload:
    """The first ``seconds`` of ``work`` (its block ids too), in place."""
    work.keep(work.t < seconds)
    work.span_s = min(work.span_s, seconds)
    return work


def detect_kind(path: Path) -> str:
    return loader.detect_kind(path)


def _block_ids(path: Path, rows: list[tuple[float, int, int]]) -> tuple[np.ndarray | None, int]:
    hashes = block_hashes(path, rows)
    if hashes is None:
        return None, 0
    ids = np.empty(len(rows), dtype=object)
    ids[:] = hashes.ids
    return ids, hashes.block_tokens


def load_requests(path: Path, *, prefix_cache: bool = True) -> Workload:
    rows = loader.read_requests(path)
    ids, block_tokens = _block_ids(path, rows) if prefix_cache else (None, 0)
    t = np.fromiter((r[0] for r in rows), dtype=np.float64, count=len(rows))
    inp = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
    out = np.fromiter((r[2] for r in rows), dtype=np.float64, count=len(rows))
    order = np.argsort(t, kind="stable")
    t, inp, out = t[order], inp[order], out[order]
    if len(t):
        t = t - t[0]
    span = float(t[-1]) if len(t) else 0.0
    return Workload(name=path.name, kind="requests", t=t, n=np.ones(len(t), dtype=np.int64),
                    inp=np.maximum(inp, 1.0), out=np.maximum(out, 1.0), span_s=span,
                    hashes=None if ids is None else ids[order], hash_tokens=block_tokens)


def load_rate(path: Path, tokens: Workload, *, dt: float, seed: int, scale: float = 1.0) -> Workload:
    rates = loader.read_rates(path)
    start, end = np.asarray(rates.start, dtype=np.float64), np.asarray(rates.end, dtype=np.float64)
    value = np.asarray(rates.value, dtype=np.float64)
    count = value if rates.column == "requests" else value * (end - start)
    count = np.maximum(count, 0.0) * scale
    origin = float(start.min())
    start, end = start - origin, end - origin
    span = float(end.max())
    # Cumulative expected arrivals at each bucket edge; linear within a bucket.
    order = np.argsort(start)
    start, end, count = start[order], end[order], count[order]
    edges = np.concatenate([[start[0]], end])
    cum = np.concatenate([[0.0], np.cumsum(count)])
    ticks = np.arange(0.0, span + dt, dt)
    expected = np.diff(np.interp(ticks, edges, cum))
    rng = np.random.default_rng(seed)
    n = rng.poisson(np.maximum(expected, 0.0))
    keep = n > 0
    t = ticks[:-1][keep] + dt / 2.0
    n = n[keep].astype(np.int64)
    pool_in, pool_out = tokens.inp, tokens.out
    mean_in = np.empty(len(n))
    mean_out = np.empty(len(n))
    small = n <= 64
    if small.any():
        ns = n[small]
        total = int(ns.sum())
        idx = rng.integers(0, len(pool_in), total)
        starts = np.concatenate([[0], np.cumsum(ns)[:-1]])
        mean_in[small] = np.add.reduceat(pool_in[idx], starts) / ns
        mean_out[small] = np.add.reduceat(pool_out[idx], starts) / ns
    big = ~small
    if big.any():
        nb = n[big].astype(np.float64)
        mean_in[big] = pool_in.mean() + rng.standard_normal(len(nb)) * pool_in.std() / np.sqrt(nb)
        mean_out[big] = pool_out.mean() + rng.standard_normal(len(nb)) * pool_out.std() / np.sqrt(nb)
    return Workload(name=path.name, kind="rate", t=t, n=n, inp=np.maximum(mean_in, 1.0),
                    out=np.maximum(mean_out, 1.0), span_s=span, tokens_from=tokens.name)


def default_tokens_for(rate_path: Path) -> Path:
    """The per-request trace whose token sizes pair best with a rate curve (same service kind)."""
    name = rate_path.name.lower()
    pick = "azure_llm_2023_code.csv" if "code" in name else "azure_llm_2023_conv.csv"
    return rate_path.parent / pick


def load_trace(path: str | Path, *, dt: float, seed: int, tokens_from: str | Path | None = None,
               rate_scale: float = 1.0, prefix_cache: bool = True) -> Workload:
    p = Path(path)
    kind = detect_kind(p)
    if kind == "requests":
        return load_requests(p, prefix_cache=prefix_cache)
    tok = Path(tokens_from) if tokens_from else default_tokens_for(p)
    if not tok.exists():
        raise loader.TraceError(p, f"a rate curve takes its token sizes from a per-request trace: {tok} does not "
                                "exist (--tokens-from)")
    if loader.detect_kind(tok) != "requests":
        raise loader.TraceError(tok, "the token sizes of a rate curve come from a per-request trace "
                                "(timestamp_s,input_tokens,output_tokens) (--tokens-from)", line=1, column=1)
    return load_rate(p, load_requests(tok, prefix_cache=False), dt=dt, seed=seed, scale=rate_scale)


def _reordered(work: Workload, t: np.ndarray, name: str) -> Workload:
    order = np.argsort(t, kind="stable")
    return Workload(name=name, kind=work.kind, t=t[order], n=work.n[order], inp=work.inp[order],
                    out=work.out[order], span_s=work.span_s, tokens_from=work.tokens_from,
                    hashes=None if work.hashes is None else work.hashes[order], hash_tokens=work.hash_tokens)


def jittered(work: Workload, seed: int, half_width_s: float = 0.5) -> Workload:
    """Every arrival moved by an independent uniform offset in [-half_width, +half_width] s (clipped
    to the trace), then re-sorted."""
    rng = np.random.default_rng(seed)
    t = np.clip(work.t + rng.uniform(-half_width_s, half_width_s, len(work.t)), 0.0, work.span_s)
    return _reordered(work, t, work.name)


def rotated(work: Workload, fraction: float) -> Workload:
    """The trace started ``fraction`` of its length in: arrivals at t >= offset move to t - offset,
    the earlier ones to the end (t - offset + span)."""
    span = work.span_s
    if span <= 0:
        return work
    offset = fraction * span
    t = work.t - offset
    t = np.where(t < 0.0, t + span, t)
    return _reordered(work, t, work.name)


def ensemble_members(n: int, seed: int) -> list[tuple[str, dict[str, float]]]:
    """Member 0 is the trace as is; then odd members jitter arrivals by +-0.5 s (seed ``seed*1000+i``)
    and even members rotate the trace by k/(R+1) of its length, k = 1..R, R = (n-1)//2."""
    out: list[tuple[str, dict[str, float]]] = [("unperturbed", {})]
    rotations = (n - 1) // 2
    for i in range(1, n):
        if i % 2 == 1:
            out.append(("jitter", {"seed": float(seed * 1000 + i), "half_width_s": 0.5}))
        else:
            out.append(("rotate", {"fraction": (i // 2) / (rotations + 1)}))
    return out


def distinct_members(n: int, seed: int) -> list[tuple[str, dict[str, float]]]:
    """``n`` distinct members (issue 21, requirement 4): member i starts the trace i/n of its length in
    (member 0 as is), and has its own seed ``seed * 1000 + i`` for the rate curve's Poisson arrivals,
    the replicas' start-up draws and the loops' phases (benchmarks/sim/conditions.py)."""
    return [("member", {"fraction": i / n, "seed": float(seed * 1000 + i)}) for i in range(n)]


def perturbed(work: Workload, kind: str, params: dict[str, float]) -> Workload:
    if kind == "member":
        return rotated(work, params["fraction"]) if params["fraction"] > 0 else work
    if kind == "jitter":
        return jittered(work, int(params["seed"]), params.get("half_width_s", 0.5))
    if kind == "rotate":
        return rotated(work, params["fraction"])
    return work


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    if len(values) == 0:
        return math.nan
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cw = np.cumsum(w)
    k = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(v[min(k, len(v) - 1)])
