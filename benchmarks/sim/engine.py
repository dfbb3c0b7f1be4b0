"""A vLLM-V1-faithful engine, simulated step by step in continuous time (event-driven).

Scheduler (what ``vllm/v1/core/sched/scheduler.py`` does each step, FCFS, chunked prefill on):

- A per-step token budget ``max_num_batched_tokens`` is shared by the running requests first (one
  token per decoding sequence, the next prompt chunk of a request still prefilling), then by waiting
  requests in FIFO order while fewer than ``max_num_seqs`` run. A request stays *waiting* (counted
  in ``vllm:num_requests_waiting``) until a step schedules its first chunk.
- KV cache in blocks of ``block_size`` tokens, allocated as tokens are scheduled (prefill chunk by
  chunk, one decode token at a time) and freed when the request finishes. When a running request
  cannot get its blocks, the newest running request is preempted (recompute: its blocks are freed,
  it goes back to the head of the queue and later recomputes prompt + generated tokens); no waiting
  request is admitted in a step that preempted. A waiting request is admitted only if the blocks for
  its first chunk are free.
- Step time (a roofline, :meth:`EngineProfile.step_s`) = ``step_fixed_s`` + ``step_per_seq_s`` x
  sequences in the batch + the larger of the compute time (tokens scheduled, prefill and decode, /
  ``prefill_tps``) and the memory time (``step_weights_s`` + ``step_per_kv_token_s`` x KV tokens
  read): a step is bounded by compute or by memory bandwidth, not by their sum. The step that
  computes a prompt's last chunk samples its first token (TTFT = that step's end - arrival).

Time is continuous: the engine advances in *segments* of identical steps (same requests, same per-
request tokens) and jumps over them in one computation (their durations are constant while compute-
bound, and grow linearly with the KV read while memory-bound, an arithmetic series; a segment is cut
where the memory time overtakes the compute time). A segment ends where the batch composition
changes (a prompt finishes, a sequence finishes, the KV cache would run out); an arrival or an
observation cuts the segment at the first step boundary after it (a step in progress completes
first; a request is never scheduled before it arrives). ``tests/bench/test_engine_v1.py`` checks the
segment engine against stepping one iteration at a time.

A :class:`Request` may stand for ``n`` identical requests (a cohort: rate-curve replays); its members
prefill one after another and get their first tokens with the last one, TTFT recorded for the mean
member. Per-request traces use n = 1.

Prefix caching (:mod:`warmscale.simulation.prefix_cache`): a request that carries its trace's block ids
(``Request.hashes``, Mooncake's ``hash_ids``) is admitted with its longest run of leading cached
blocks already computed (at most ``prompt - 1`` tokens: the last block is always computed); its KV
still takes blocks for those tokens (no sharing of physical blocks between running requests: a
conservative simplification). Its prompt's full blocks are cached when its prefill completes and
pinned until it finishes or is preempted; unpinned cached blocks are bounded by the free KV memory
and evicted LRU. Requests without ids (every other trace, ``--no-prefix-cache``) take the old path.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from warmscale.simulation.prefix_cache import PrefixCache
from warmscale.simulation.profiles import CALIBRATED_PROFILES as CALIBRATED_PROFILES

# The profiles live beneath the benchmarks and the demo, which both run on them (re-exported here).
from warmscale.simulation.profiles import ENGINE_PROFILES as ENGINE_PROFILES
from warmscale.simulation.profiles import EngineProfile as EngineProfile
from warmscale.simulation.profiles import attention_ratio as attention_ratio
from warmscale.simulation.profiles import calibration_label as calibration_label

# --- vLLM V1 metric buckets (vllm/v1/metrics/loggers.py; shared/reference/engine-metrics.md) -------------
VLLM_TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
VLLM_ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
VLLM_REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)
# vllm:request_prompt_tokens: build_1_2_5_buckets(max_model_len), here up to 1M tokens.
VLLM_PROMPT_TOKENS_BUCKETS: tuple[float, ...] = (*(float(m * 10**e) for e in range(6) for m in (1, 2, 5)), 1e6)
VLLM_ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)


class Hist:
    """A Prometheus histogram's state: per-bucket (non-cumulative) counts, +Inf last, sum, count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0.0

    def observe(self, v: float, n: float = 1.0) -> None:
        self.counts[bisect.bisect_left(self.bounds, v)] += n
        self.sum += v * n
        self.count += n

    def cumulative(self) -> list[tuple[float, float]]:
        out = []
        cum = 0.0
        for le, c in zip((*self.bounds, math.inf), self.counts, strict=True):
            cum += c
            out.append((le, cum))
        return out


class Request:
    """``n`` identical requests that arrived at ``t_arr`` (n = 1 for per-request traces)."""

    __slots__ = ("blocks", "done", "gen", "hash_tokens", "hashes", "inp", "kv", "n", "out", "pins", "t_arr",
                 "t_first", "t_sched", "target")

    def __init__(self, t_arr: float, inp: float, out: float, n: int = 1,
                 hashes: tuple[int, ...] | None = None, hash_tokens: int = 0) -> None:
        self.t_arr = t_arr
        self.inp = max(1, round(inp))
        self.out = max(1, round(out))
        self.n = n
        self.gen = 0  # tokens generated per member
        self.done = 0  # prefill tokens computed (all members) since the last (re)start
        self.target = self.inp * n  # prefill tokens to compute: prompt (+ generated, after a preemption)
        self.kv = 0  # KV tokens held (all members)
        self.blocks = 0  # KV blocks held
        self.t_sched: float | None = None  # first scheduled
        self.t_first: float | None = None  # first token
        # The prompt's block ids (prefix caching; n = 1 only) and tokens per block; None: no caching.
        self.hashes = hashes if n == 1 and hash_tokens > 0 else None
        self.hash_tokens = hash_tokens
        self.pins = 0  # leading blocks of ``hashes`` this request pins in its engine's prefix cache

    def split(self, k: int) -> Request:
        """Detach ``k`` members (not yet scheduled) into a new request; this one keeps ``n - k``."""
        other = Request(self.t_arr, self.inp, self.out, k)
        other.gen = self.gen
        other.t_first = self.t_first
        other.t_sched = self.t_sched
        other.target = self.target // self.n * k
        self.n -= k
        self.target = self.target // (self.n + k) * self.n
        return other

    @property
    def prefilling(self) -> bool:
        return self.done < self.target


def _blocks(r: Request, kv_tokens: int, bs: int) -> int:
    if r.n == 1:
        return -(-kv_tokens // bs)
    per = -(-kv_tokens // r.n)
    return r.n * -(-per // bs)


class Engine:
    """One replica's engine. Feed it with :meth:`enqueue`; :meth:`advance_to` runs it up to a time;
    :meth:`sync` brings its state to the first step boundary at or after a time (for observation)."""

    def __init__(self, profile: EngineProfile, ttft_sink: list[tuple[float, float, int]] | None = None,
                 now: float = 0.0) -> None:
        self.p = profile
        self.bs = profile.block_size
        self.total_blocks = profile.num_blocks
        self.free_blocks = self.total_blocks
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.waiting_n = 0
        self.running_n = 0
        self.clock = now  # start of the next step (engine idle: time it became idle)
        self.sink = ttft_sink
        self.max_jump = 1 << 30  # 1: one iteration per segment (the per-iteration reference, tests)
        # Segment being executed: (composition, k steps, A, tokens per step, slope); None when idle.
        self._seg: tuple[list[tuple[Request, int, bool]], int, float, float, float] | None = None
        self._preempted = False  # the last _plan preempted a request
        self.seg_end = math.inf
        # Counters and histograms, lifetime totals as the engine exports them.
        self.requests_total = 0.0
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        self.preemptions_total = 0.0
        self.rejected_total = 0.0
        self.steps_total = 0
        self.busy_s = 0.0
        self.h_ttft = Hist(VLLM_TTFT_BUCKETS)
        self.h_itl = Hist(VLLM_ITL_BUCKETS)
        self.h_e2e = Hist(VLLM_REQUEST_LATENCY_BUCKETS)
        self.h_queue = Hist(VLLM_REQUEST_LATENCY_BUCKETS)
        self.h_prefill = Hist(VLLM_REQUEST_LATENCY_BUCKETS)
        self.h_prompt = Hist(VLLM_PROMPT_TOKENS_BUCKETS)  # per request, with its prefill time
        self.h_decode = Hist(VLLM_REQUEST_LATENCY_BUCKETS)
        self.h_iter = Hist(VLLM_ITERATION_TOKENS_BUCKETS)
        # Prefix cache, made by the first request that carries block ids; vLLM's
        # ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` counters, in tokens.
        self.cache: PrefixCache | None = None
        self.prefix_queries_total = 0.0
        self.prefix_hits_total = 0.0

    # ---- views -----------------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return self.waiting_n + self.running_n

    @property
    def idle(self) -> bool:
        return self.waiting_n == 0 and self.running_n == 0

    def kv_usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: share of the KV blocks in use (0..1)."""
        return 1.0 - self.free_blocks / self.total_blocks if self.total_blocks else 0.0

    def kv_tokens(self) -> int:
        return sum(r.kv for r in self.running)

    # ---- input -----------------------------------------------------------------------------------
    def enqueue(self, req: Request, now: float) -> None:
        """A request reaches the engine at ``now`` (it joins the first step that starts after it).

        The step in progress at ``now`` completes and the next step is scheduled with the new request
        in the queue. (Equivalent to scheduling that step before the arrival and again after it, which
        is what this did before: the two differ only when the first scheduling preempted, and then the
        step is scheduled a second time, as before.)"""
        if _blocks(req, req.n * (req.inp + req.out), self.bs) > self.total_blocks:
            self.sync(now)
            self.rejected_total += req.n  # prompt + output exceed the whole cache: vLLM rejects it (max_model_len)
            return
        self.advance_to(now)
        seg = self._seg
        if seg is None:
            if self.clock < now:
                self.clock = now
        elif self.clock < now:
            _, k, a, _g, sl = seg
            j = min(k, max(1, self._steps_started_before(now - self.clock, a, sl)))
            self._apply(j)
            self.waiting.append(req)
            self.waiting_n += req.n
            self._plan()
            if self._preempted:
                self._plan()
            return
        self.waiting.append(req)
        self.waiting_n += req.n
        self._plan()

    def take_waiting(self, now: float) -> list[Request]:
        """Remove and return every request not yet scheduled (a replica going away)."""
        self.sync(now)
        out = [r for r in self.waiting if r.t_sched is None]
        keep = deque(r for r in self.waiting if r.t_sched is not None)
        self.waiting = keep
        self.waiting_n = sum(r.n for r in keep)
        self._plan()
        return out

    # ---- time ------------------------------------------------------------------------------------
    def advance_to(self, t: float) -> None:
        """Complete every segment that ends at or before ``t``."""
        while self.seg_end <= t:  # math.inf exactly while no segment is planned (_plan)
            self._apply(self._seg[1])  # type: ignore[index]
            self._plan()

    def sync(self, t: float) -> None:
        """Run up to ``t`` and complete the step in progress at ``t`` (if any)."""
        self.advance_to(t)
        seg = self._seg
        if seg is None or self.clock >= t:
            return
        _, k, a, _g, sl = seg
        j = min(k, max(1, self._steps_started_before(t - self.clock, a, sl)))
        self._apply(j)
        self._plan()

    def _segment_time(self, k: int, nseq: int, new_tok: int, kv0: int,
                      attn: tuple[float, float] = (0.0, 0.0)) -> tuple[int, float, float]:
        """(k', a, s): the segment's first ``k' <= k`` steps last ``a + s*i`` each (step i >= 0).

        Step i reads ``kv0 + new_tok*i`` KV tokens (:meth:`EngineProfile.step_s`: the larger of the
        compute and the memory time). The compute time is the tokens at the roof plus the prefill
        chunks' attention term ``attn`` = (first step, growth per step: a prompt's context grows by
        its chunk each step). The memory time grows with the KV read, so a segment is cut at the
        step where the other time overtakes the one that bounds it."""
        p = self.p
        base = p.step_fixed_s + p.step_per_seq_s * nseq
        compute = new_tok / p.prefill_tps + attn[0]
        c_slope = attn[1]
        mem0 = p.step_weights_s + p.step_per_kv_token_s * kv0
        m_slope = p.step_per_kv_token_s * new_tok
        if compute <= mem0:
            if c_slope > m_slope:  # steps i with compute + c_slope*i <= mem0 + m_slope*i stay memory-bound
                k = min(k, int((mem0 - compute) / (c_slope - m_slope)) + 1)
            return k, base + mem0, m_slope
        if m_slope > c_slope:
            # Steps i with mem0 + m_slope*i <= compute + c_slope*i stay compute-bound.
            k = min(k, int((compute - mem0) / (m_slope - c_slope)) + 1)
        return k, base + compute, c_slope

    def _dur(self, j: int, a: float, s: float) -> float:
        return j * a + s * j * (j - 1) / 2.0

    def _steps_started_before(self, span: float, a: float, s: float) -> int:
        """Number of steps i >= 0 with start ``dur(i) < span``."""
        c2 = s / 2.0
        if c2 <= 0.0:
            return math.ceil(span / a) if a > 0 else 1 << 30
        b = a - c2
        root = (-b + math.sqrt(b * b + 4 * c2 * span)) / (2 * c2)
        j = math.ceil(root)
        while j > 0 and self._dur(j - 1, a, s) >= span:
            j -= 1
        while self._dur(j, a, s) < span:
            j += 1
        return j

    # ---- scheduler (one V1 step's decisions at self.clock) -----------------------------------------
    def _unpin(self, r: Request) -> None:
        if r.pins and self.cache is not None and r.hashes is not None:
            self.cache.unpin(r.hashes[:r.pins])
            r.pins = 0

    def _cached_tokens(self, r: Request) -> tuple[int, int]:
        """(blocks, tokens) of ``r``'s prompt found in the prefix cache at admission (a fresh start)."""
        ids = r.hashes
        if ids is None or r.done or r.kv:
            return 0, 0
        c = self.cache
        if c is None:
            c = self.cache = PrefixCache(r.hash_tokens)
        k = c.hit_blocks(ids, r.inp)
        return k, k * c.block_tokens

    def _preempt(self, r: Request) -> None:
        self._unpin(r)
        self.free_blocks += r.blocks
        r.blocks = 0
        r.kv = 0
        r.done = 0
        r.target = r.n * (r.inp + r.gen)
        self.running_n -= r.n
        self.waiting.appendleft(r)
        self.waiting_n += r.n
        self.preemptions_total += r.n

    def _plan(self) -> None:
        """Schedule the step at ``self.clock`` (V1's decisions: token budget, running first, then
        waiting in FIFO order; block allocation; recompute preemption of the newest) and the segment
        of identical steps that follows it.

        Hot (a few million calls per trace replay): attributes are read once into locals and the
        arithmetic of :func:`_blocks`, the cache's trim and the prefill chunks' attention term is inlined,
        in the same order of operations (``tests/bench/test_sim_speed.py`` checks it against the
        first-written scheduler, ``tests/bench/reference_engine.py``)."""
        running = self.running
        waiting = self.waiting
        if not running and not waiting:
            self._seg = None
            self.seg_end = math.inf
            return
        p = self.p
        bs = self.bs
        cache = self.cache
        # The steps since the last plan took free KV: evict before looking up (PrefixCache.trim's test first).
        if cache is not None and cache.free and len(cache.free) > self.free_blocks * bs // cache.block_tokens:
            cache.trim(self.free_blocks * bs // cache.block_tokens)
        budget = p.max_num_batched_tokens
        comp: list[tuple[Request, int, bool]] = []
        append = comp.append
        preempted = False
        # Aggregates of the batch, and k: how many identical steps follow before its composition changes.
        k = 1 << 30
        n_pre = 0
        nseq = 0
        new_tok = 0
        pre_tok = 0
        kv0 = 0
        free = self.free_blocks  # written back before anything else reads it
        i = 0
        n_run = len(running)
        while i < n_run and budget > 0:
            r = running[i]
            done = r.done
            target = r.target
            rn = r.n
            if done < target:
                t = target - done
                if t > budget:
                    t = budget
                pre = True
            else:
                t = rn
                if t > budget:
                    break
                pre = False
            # Blocks held are always a multiple of n (``_blocks``), so more are needed exactly when
            # the tokens outgrow them.
            kv = r.kv
            kvt = kv + t
            blocks = r.blocks
            if kvt > blocks * bs:
                need = (-(-kvt // bs) if rn == 1 else _blocks(r, kvt, bs)) - blocks
                if need > free:
                    self.free_blocks = free
                    victim_was_r = False
                    while need > self.free_blocks:
                        victim = running.pop()
                        self._preempt(victim)
                        preempted = True
                        if victim is r:
                            victim_was_r = True
                            break
                    free = self.free_blocks
                    n_run = len(running)
                    if victim_was_r:
                        break
                r.blocks = blocks + need
                free -= need
            append((r, t, pre))
            budget -= t
            nseq += rn
            new_tok += t
            kv0 += kv
            if pre:
                n_pre += 1
                pre_tok += t
                left = target - done
                if left > t:
                    left //= t
                    if left < k:
                        k = left
                else:
                    k = 1
            else:
                left = r.out - r.gen
                if left < k:
                    k = left
            i += 1
        self.free_blocks = free
        self._preempted = preempted
        if not preempted:
            max_seqs = p.max_num_seqs
            while waiting and budget > 0 and self.running_n < max_seqs:
                r = waiting[0]
                slots = max_seqs - self.running_n
                if r.n > slots:
                    r = r.split(slots)
                    waiting.appendleft(r)
                hit_k, hit = self._cached_tokens(r) if r.hashes is not None else (0, 0)
                left = r.target - r.done - hit
                t = left if left < budget else budget
                need = _blocks(r, r.kv + hit + t, bs) - r.blocks
                if need > self.free_blocks:
                    break
                if r.hashes is not None and self.cache is not None:
                    self.prefix_queries_total += r.inp
                    self.prefix_hits_total += hit
                    if hit:
                        r.done += hit
                        r.kv += hit
                        self.cache.pin(r.hashes[:hit_k])
                        r.pins = hit_k
                waiting.popleft()
                self.waiting_n -= r.n
                running.append(r)
                self.running_n += r.n
                if r.t_sched is None:
                    r.t_sched = self.clock
                    self.h_queue.observe(self.clock - r.t_arr, r.n)
                if need > 0:
                    r.blocks += need
                    self.free_blocks -= need
                append((r, t, True))
                budget -= t
                nseq += r.n
                new_tok += t
                kv0 += r.kv
                n_pre += 1
                pre_tok += t
                if left > t:
                    left //= t
                    if left < k:
                        k = left
                else:
                    k = 1
        cache = self.cache
        # Cached blocks nobody references live in the free KV memory (PrefixCache.trim's test first).
        if cache is not None and cache.free and len(cache.free) > self.free_blocks * bs // cache.block_tokens:
            cache.trim(self.free_blocks * bs // cache.block_tokens)
        if not comp:  # nothing can run (cannot happen with requests that fit the cache); stay idle
            self._seg = None
            self.seg_end = math.inf
            return
        if n_pre > 1:
            k = 1
        # A queue head left waiting with budget and slots to spare did not fit the KV cache: that stays
        # so until a finish frees blocks (the KV only grows meanwhile), so the segment may go on.
        # (Skipped when even the most blocks the next k steps could take, k*tokens/bs + 2 per member,
        # fit in the free ones: the usual case, and the check's outcome then.)
        if k > 1 and k * new_tok / bs + 2 * nseq > self.free_blocks:
            extra = 0
            for r, t, _ in comp:
                kvt = r.kv + k * t
                if kvt > r.blocks * bs:
                    extra += _blocks(r, kvt, bs) - r.blocks
            if extra > self.free_blocks:
                k = 1
        if k > self.max_jump:
            k = self.max_jump
        if k < 1:
            k = 1
        attn = (0.0, 0.0)
        # The prefill chunks' attention term (EngineProfile.attention_extra, term by term) at the segment's
        # first step and its growth per step: a single request's context grows by its chunk each step; a
        # cohort is taken at its members' mean context, half a prompt.
        if pre_tok and p.attn_per_ctx > 0.0:
            a = p.attn_per_ctx
            cc = p.calibration_context
            den = (1.0 + a * cc) * p.prefill_tps
            extra_s = 0.0
            slope = 0.0
            for r, t, pre in comp:
                if not pre:
                    continue
                if r.n == 1:
                    extra_s += t * a * (r.done + t / 2.0 - cc) / den
                    slope += t * a * (cc + t - cc) / den - t * a * (cc - cc) / den
                else:
                    extra_s += t * a * (r.target / (2.0 * r.n) - cc) / den
            attn = (extra_s, slope)
        k, a0, s = self._segment_time(k, nseq, new_tok, kv0, attn)
        self._seg = (comp, k, a0, float(new_tok), s)
        self.seg_end = self.clock + (k * a0 + s * k * (k - 1) / 2.0)

    def _apply(self, j: int) -> None:
        """Execute the first ``j`` steps of the current segment."""
        seg = self._seg
        assert seg is not None
        comp, _k, a, g, sl = seg
        dur = j * a + sl * j * (j - 1) / 2.0
        t_end = self.clock + dur
        self.busy_s += dur
        self.steps_total += j
        hi = self.h_iter
        hi.counts[bisect.bisect_left(hi.bounds, g)] += j
        hi.sum += g * j
        hi.count += j
        bs = self.bs
        step = dur / j
        finished: list[Request] = []
        itl_n = 0  # inter-token latencies observed in these steps (all ``step`` long)
        gen_tokens = 0
        taken = 0  # blocks these steps allocate (the free count drops by them)
        for r, t, pre in comp:
            add = t * j
            kv = r.kv + add
            r.kv = kv
            blocks = r.blocks
            if kv > blocks * bs:
                b = -(-kv // bs) if r.n == 1 else _blocks(r, kv, bs)
                taken += b - blocks
                r.blocks = b
            if pre:
                done = r.done + add
                r.done = done
                if done >= r.target:
                    ids = r.hashes
                    if ids is not None and self.cache is not None:  # its full prompt blocks are cached now
                        full = min(len(ids), r.inp // r.hash_tokens)
                        if full > r.pins:
                            self.cache.pin(ids[r.pins:full])
                            r.pins = full
                    if r.t_first is None:
                        t0 = r.t_sched if r.t_sched is not None else r.t_arr
                        first = t_end if r.n == 1 else t0 + (t_end - t0) * (r.n + 1) / (2 * r.n)
                        r.t_first = first
                        ttft = first - r.t_arr
                        self.h_ttft.observe(ttft, r.n)
                        self.h_prefill.observe(first - t0, r.n)
                        self.h_prompt.observe(r.inp, r.n)
                        self.prompt_tokens_total += r.inp * r.n
                        if self.sink is not None:
                            self.sink.append((r.t_arr, ttft, r.n))
                    else:
                        itl_n += r.n
                    r.gen += 1
                    gen_tokens += r.n
                    if r.gen >= r.out:
                        finished.append(r)
            else:
                gen = r.gen + j
                r.gen = gen
                gen_tokens += add
                itl_n += add
                if gen >= r.out:
                    finished.append(r)
        if taken:
            self.free_blocks -= taken
        if itl_n:
            self.h_itl.observe(step, itl_n)
        self.generation_tokens_total += gen_tokens
        self.clock = t_end
        for r in finished:
            self._finish(r, t_end)

    def _finish(self, r: Request, now: float) -> None:
        self._unpin(r)
        self.free_blocks += r.blocks
        r.blocks = 0
        self.running.remove(r)
        self.running_n -= r.n
        self.requests_total += r.n
        self.h_e2e.observe(now - r.t_arr, r.n)
        if r.t_first is not None:
            self.h_decode.observe(now - r.t_first, r.n)
