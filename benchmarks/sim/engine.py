"""A continuous-batching inference engine, advanced in ticks (vLLM-V1-like, chunked prefill).

Model (see docs/benchmarks.md for the derivation and the sources of the numbers):

- Requests wait FIFO until the scheduler admits them: admission needs a free sequence slot
  (``max_num_seqs``) and KV room for the prompt (``kv_capacity_tokens`` minus a 1% watermark).
- Every engine step decodes one token for each running sequence and fills the rest of the token
  budget (``max_num_batched_tokens``) with prefill chunks, FIFO. A step takes
  ``step_fixed_s + B * step_per_seq_s + kv_tokens * step_per_kv_token_s`` (weights and KV read
  from HBM) plus ``chunk / prefill_tps`` for the prefill tokens it carries.
- Within a tick, steps are treated as a fluid: the prefill backlog drains at
  ``chunk / mixed_step`` tokens/s while decoders gain one token per step. A prompt's first token
  comes when its last prefill token is processed, so TTFT = queue wait + prefill (+ the decode
  slow-down from sharing steps). TPOT is the step time at the current batch size.
- KV usage grows by one token per generated token; when it overflows, the newest running
  sequences are preempted (recompute) back to the head of the queue (``preemptions_total``).

A :class:`Request` may stand for ``n`` identical requests (a cohort); the rate-curve replay uses
cohorts so that a week of traffic costs per tick, not per request. Per-request traces use n = 1.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from signals.histogram import Histogram

# vLLM's bucket bounds for vllm:time_to_first_token_seconds (V1; shared/reference/engine-metrics.md).
VLLM_TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
_INF = float("inf")
_BOUNDS_WITH_INF = (*VLLM_TTFT_BUCKETS, _INF)


@dataclass(frozen=True)
class EngineProfile:
    name: str
    model: str
    gpus_per_replica: int
    prefill_tps: float
    step_fixed_s: float
    step_per_seq_s: float
    step_per_kv_token_s: float
    kv_capacity_tokens: float
    max_num_seqs: int
    max_num_batched_tokens: int
    sources: tuple[tuple[str, str], ...] = ()

    def decode_step_s(self, batch: float, kv_tokens: float) -> float:
        return self.step_fixed_s + batch * self.step_per_seq_s + kv_tokens * self.step_per_kv_token_s

    def prefill_rate(self, batch: float, kv_tokens: float) -> float:
        """Prefill tokens/s while ``batch`` sequences decode alongside (chunked prefill)."""
        chunk = max(self.max_num_batched_tokens - batch, 256.0)
        return chunk / (self.decode_step_s(batch, kv_tokens) + chunk / self.prefill_tps)


_H100_HBM_BPS = 3.35e12  # H100 SXM HBM3 bandwidth (NVIDIA datasheet)
_MBU = 0.8  # memory-bandwidth utilisation reached by decode kernels (assumption, stated in docs)

ENGINE_PROFILES: dict[str, EngineProfile] = {
    "8b-h100": EngineProfile(
        name="8b-h100",
        model="Llama-3.1-8B-Instruct BF16, vLLM, 1x H100 SXM 80GB",
        gpus_per_replica=1,
        prefill_tps=16_000.0,
        step_fixed_s=16.1e9 / (_H100_HBM_BPS * _MBU) + 0.001,
        step_per_seq_s=20e-6,
        step_per_kv_token_s=131_072 / (_H100_HBM_BPS * _MBU),
        kv_capacity_tokens=400_000.0,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        sources=(
            ("prefill_tps", "llm-d token-aware guide: measured peak prefill 15,928 tok/s (autoscalers.md (c)); "
                            "= 2*8e9 FLOP/token at ~26% of H100 989 TFLOPS BF16"),
            ("step_fixed_s", "16.1 GB of weights read per step at 80% of 3.35 TB/s HBM + 1 ms scheduling: 7.0 ms "
                             "(vLLM reports ~7-10 ms TPOT for 8B on H100 at low batch)"),
            ("step_per_kv_token_s", "128 KiB KV/token (32 layers x 8 KV heads x 128 x 2 x BF16) read per step"),
            ("step_per_seq_s", "20 us per sequence per step (sampling, scheduling; assumption)"),
            ("kv_capacity_tokens", "(0.9 x 80 GB - 16 GB weights - ~4 GB activations/graphs) / 128 KiB = ~400k "
                                   "tokens; cf. num_gpu_blocks=28217 x 16 = 451k tokens for a 7B in "
                                   "shared/reference/metrics-samples/vllm-idle.prom"),
            ("max_num_seqs", "vLLM default 256"),
            ("max_num_batched_tokens", "vLLM V1 chunked-prefill budget for the OpenAI server on H100: 8192"),
        ),
    ),
    "70b-h100-tp4": EngineProfile(
        name="70b-h100-tp4",
        model="Llama-3.3-70B-Instruct BF16, vLLM, TP=4 on 4x H100 SXM 80GB",
        gpus_per_replica=4,
        prefill_tps=7_000.0,
        step_fixed_s=(141e9 / 4) / (_H100_HBM_BPS * _MBU) + 0.004,
        step_per_seq_s=30e-6,
        step_per_kv_token_s=(327_680 / 4) / (_H100_HBM_BPS * _MBU),
        kv_capacity_tokens=400_000.0,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        sources=(
            ("prefill_tps", "2*70e9 FLOP/token on 4x 989 TFLOPS at the same ~26% as the 8B anchor: ~7k tok/s"),
            ("step_fixed_s", "35 GB of weights per GPU at 80% of 3.35 TB/s + 4 ms for 160 TP all-reduces: 17 ms"),
            ("step_per_kv_token_s", "320 KiB KV/token (80 layers x 8 KV heads x 128 x 2 x BF16) split over 4 GPUs"),
            ("step_per_seq_s", "30 us per sequence per step (assumption)"),
            ("kv_capacity_tokens", "4 x (0.9 x 80 - 35 - 4) GB / 320 KiB = ~400k tokens"),
            ("max_num_seqs", "vLLM default 256"),
            ("max_num_batched_tokens", "8192"),
        ),
    ),
    "70b-h100-tp8": EngineProfile(
        name="70b-h100-tp8",
        model="Llama-3.3-70B-Instruct BF16, vLLM, TP=8 on 8x H100 SXM 80GB",
        gpus_per_replica=8,
        prefill_tps=12_000.0,
        step_fixed_s=(141e9 / 8) / (_H100_HBM_BPS * _MBU) + 0.004,
        step_per_seq_s=30e-6,
        step_per_kv_token_s=(327_680 / 8) / (_H100_HBM_BPS * _MBU),
        kv_capacity_tokens=1_200_000.0,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        sources=(
            ("prefill_tps", "twice TP4's FLOPs at ~85% TP scaling efficiency: ~12k tok/s (assumption)"),
            ("step_fixed_s", "17.6 GB of weights per GPU at 80% of 3.35 TB/s + 4 ms all-reduce: 10.6 ms"),
            ("step_per_kv_token_s", "320 KiB KV/token split over 8 GPUs"),
            ("step_per_seq_s", "30 us per sequence per step (assumption)"),
            ("kv_capacity_tokens", "8 x (0.9 x 80 - 17.6 - 4) GB / 320 KiB = ~1.2M tokens"),
            ("max_num_seqs", "vLLM default 256"),
            ("max_num_batched_tokens", "8192"),
        ),
    ),
}


class Request:
    """``n`` identical requests that arrived (on average) at ``t_arr``."""

    __slots__ = ("first_token_at", "gen", "inp", "n", "out", "pre_left", "preempted", "t_arr")

    def __init__(self, t_arr: float, inp: float, out: float, n: int = 1) -> None:
        self.t_arr = t_arr
        self.inp = max(1.0, inp)
        self.out = max(1.0, out)
        self.n = n
        self.gen = 0.0  # tokens generated per member
        self.pre_left = 0.0  # prefill tokens still to compute (all members)
        self.first_token_at: float | None = None
        self.preempted = False

    def split(self, k: int) -> Request:
        """Detach ``k`` members into a new request (same state); this one keeps ``n - k``."""
        other = Request(self.t_arr, self.inp, self.out, k)
        other.gen = self.gen
        other.first_token_at = self.first_token_at
        other.preempted = self.preempted
        self.n -= k
        return other

    def context(self) -> float:
        return self.inp + self.gen


class Engine:
    """One replica's engine. ``step(t0, dt, ttft_sink)`` advances it by one tick."""

    def __init__(self, profile: EngineProfile) -> None:
        self.p = profile
        self.waiting: deque[Request] = deque()
        self.prefilling: deque[Request] = deque()
        self.decoding: list[Request] = []
        self.waiting_n = 0
        self.running_n = 0
        self.kv_used = 0.0
        self.kv_limit = profile.kv_capacity_tokens * 0.99
        # Counters (lifetime totals, as the engine exports them).
        self.requests_total = 0.0
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        self.preemptions_total = 0.0
        self.ttft_counts = [0.0] * len(_BOUNDS_WITH_INF)  # per bucket (not cumulative)
        self.ttft_sum = 0.0
        self.ttft_count = 0.0
        self.busy_s = 0.0  # cumulative seconds with work on the GPU (DCGM GPU_UTIL's notion)

    # ---- load balancer view ------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return self.waiting_n + self.running_n

    @property
    def idle(self) -> bool:
        return self.waiting_n == 0 and self.running_n == 0

    def kv_usage(self) -> float:
        return min(1.0, self.kv_used / self.p.kv_capacity_tokens)

    def enqueue(self, req: Request) -> None:
        self.waiting.append(req)
        self.waiting_n += req.n

    def take_waiting(self) -> list[Request]:
        """Remove and return every queued (not admitted) request (a replica going away)."""
        out = list(self.waiting)
        self.waiting.clear()
        self.waiting_n = 0
        return out

    # ---- signals -----------------------------------------------------------------------------
    def ttft_histogram(self) -> Histogram:
        cum = 0.0
        buckets = []
        for le, c in zip(_BOUNDS_WITH_INF, self.ttft_counts, strict=True):
            cum += c
            buckets.append((le, cum))
        return Histogram(buckets=tuple(buckets), sum=self.ttft_sum, count=self.ttft_count)

    def _record_ttft(self, ttft: float, n: int, sink: list[tuple[float, float, int]] | None, t_arr: float) -> None:
        idx = bisect.bisect_left(VLLM_TTFT_BUCKETS, ttft)
        self.ttft_counts[idx] += n
        self.ttft_sum += ttft * n
        self.ttft_count += n
        if sink is not None:
            sink.append((t_arr, ttft, n))

    # ---- one tick ------------------------------------------------------------------------------
    def _admit(self) -> None:
        p = self.p
        while self.waiting:
            r = self.waiting[0]
            need = r.context() if r.preempted else r.inp
            slots = p.max_num_seqs - self.running_n
            room = self.kv_limit - self.kv_used
            k = min(r.n, slots, int(room // need)) if need > 0 else min(r.n, slots)
            if k <= 0:
                if self.running_n == 0 and r.n > 0:
                    k = 1  # a prompt larger than the whole cache still runs alone (no deadlock)
                else:
                    break
            if k < r.n:
                part = r.split(k)
            else:
                part = self.waiting.popleft()
            self.waiting_n -= k
            part.pre_left = need * k
            self.kv_used += need * k
            self.running_n += k
            self.prefilling.append(part)

    def step(self, t0: float, dt: float, ttft_sink: list[tuple[float, float, int]] | None = None) -> None:
        p = self.p
        self._admit()
        if not self.prefilling and not self.decoding:
            return
        batch = 0
        for r in self.decoding:
            batch += r.n
        s_d = max(p.decode_step_s(batch, self.kv_used), 1e-6)
        n_old = len(self.decoding)
        pending = 0.0
        for r in self.prefilling:
            pending += r.pre_left
        steps = 0.0
        if pending > 0:
            rate = p.prefill_rate(batch, self.kv_used)
            chunk = max(p.max_num_batched_tokens - batch, 256.0)
            s_m = chunk / rate
            mixed = min(dt, pending / rate)
            steps = mixed / s_m + ((dt - mixed) / s_d if batch else 0.0)
            self.busy_s += dt if batch else mixed
            # Prefill FIFO: each prompt's first token at the time its last token is computed.
            done_tokens = 0.0
            budget = rate * mixed
            while self.prefilling:
                r = self.prefilling[0]
                if r.pre_left <= budget - done_tokens + 1e-9:
                    done_tokens += r.pre_left
                    r.pre_left = 0.0
                    self.prefilling.popleft()
                    t_done = t0 + done_tokens / rate
                    if r.first_token_at is None:
                        own = r.inp / rate
                        # A cohort's members finish one after another: use the mean member.
                        t_mean = t_done - (r.n - 1) * own / 2.0
                        ttft = max(t_mean - r.t_arr, own)
                        r.first_token_at = r.t_arr + ttft
                        self._record_ttft(ttft, r.n, ttft_sink, r.t_arr)
                        self.prompt_tokens_total += r.inp * r.n
                    r.gen = max(r.gen, 1.0)
                    r.preempted = False
                    self.kv_used += r.n  # the first generated token
                    self.generation_tokens_total += r.n
                    self.decoding.append(r)
                    if r.gen >= r.out:
                        self._finish(r)
                else:
                    r.pre_left -= budget - done_tokens
                    break
        else:
            steps = dt / s_d
            self.busy_s += dt
        # Decode: sequences that were decoding at the start of the tick gain `steps` tokens.
        if batch and steps > 0:
            still: list[Request] = []
            for r in self.decoding[:n_old]:
                gain = min(steps, r.out - r.gen)
                r.gen += gain
                self.kv_used += gain * r.n
                self.generation_tokens_total += gain * r.n
                if r.gen >= r.out - 1e-9:
                    self._release(r)
                else:
                    still.append(r)
            still.extend(self.decoding[n_old:])
            self.decoding = still
            self._preempt_if_full()
        else:
            self.decoding = [r for r in self.decoding if r.gen < r.out]

    def _finish(self, r: Request) -> None:
        # Finished right at prefill (one-token outputs): release now, drop from decoding.
        self._release(r)
        self.decoding.remove(r)

    def _release(self, r: Request) -> None:
        self.kv_used -= r.context() * r.n
        if self.kv_used < 1e-6:
            self.kv_used = 0.0
        self.running_n -= r.n
        self.requests_total += r.n

    def _preempt_if_full(self) -> None:
        while self.kv_used > self.p.kv_capacity_tokens and len(self.decoding) > 1:
            r = self.decoding.pop()  # newest
            self.kv_used -= r.context() * r.n
            self.running_n -= r.n
            self.preemptions_total += r.n
            r.preempted = True
            self.waiting.appendleft(r)
            self.waiting_n += r.n
