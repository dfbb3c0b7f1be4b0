"""A simulated vLLM replica: a small continuous-batching queueing model behind a real ``/metrics``.

Times are the demo's trace time (the demo's clock runs faster than the wall clock). The model is
deliberately small (the trace-replay benchmark has the detailed one): requests wait in
FIFO order until a batch slot and their KV tokens are free; prefill runs at ``prefill_tps``
tokens/s and TTFT = queue wait + prefill (a request counts as waiting until its prefill starts);
decode emits one token per sequence per step, and a step takes ``tpot_base_s + tpot_per_seq_s * batch``.
Every decoded token after the first is an inter-token latency of one step. The exposition uses vLLM
V1's metric names, labels and TTFT/ITL buckets, so the scaler reads it exactly as it reads a real engine.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

VLLM_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
VLLM_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class ItlHistogram(Collector):
    """``vllm:inter_token_latency_seconds``: one observation per generated token (after the first),
    added a step at a time (``observe(step_s, tokens)``), as prometheus_client renders a histogram."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.counts = [0] * (len(VLLM_ITL_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float, tokens: int) -> None:
        if tokens > 0:
            self.counts[bisect.bisect_left(VLLM_ITL_BUCKETS, value)] += tokens
            self.sum += value * tokens

    def collect(self) -> Iterator[HistogramMetricFamily]:
        h = HistogramMetricFamily("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                  labels=list(self.labels))
        cum, buckets = 0, []
        for le, c in zip((*(str(b) for b in VLLM_ITL_BUCKETS), "+Inf"), self.counts, strict=True):
            cum += c
            buckets.append((le, float(cum)))
        h.add_metric(list(self.labels.values()), buckets, self.sum)
        yield h


@dataclass(frozen=True)
class EngineProfile:
    """Llama-3.1-8B on one H100, the numbers of the trace benchmark's ``8b-h100`` engine profile
    (``benchmarks/sim/engine.py``, with their sources): vLLM's default 256 sequences, ~400k KV tokens,
    ~16k prefill tokens/s, ~7 ms per decode step plus ~150 us per sequence (its KV read at ~2.5k tokens)."""

    max_num_seqs: int = 256
    kv_capacity_tokens: int = 400_000
    prefill_tps: float = 16_000.0
    tpot_base_s: float = 0.007
    tpot_per_seq_s: float = 0.00015


@dataclass
class Request:
    arrived_at: float
    input_tokens: int
    output_tokens: int
    first_token_at: float | None = None
    generated: float = 0.0

    @property
    def kv_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class SimulatedEngine:
    """One replica. ``step(now)`` advances the model; ``exposition()`` renders ``/metrics``."""

    name: str
    profile: EngineProfile = field(default_factory=EngineProfile)
    waiting: deque[Request] = field(default_factory=deque)
    running: list[Request] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    last_step: float | None = None
    prefill_busy_until: float = 0.0

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self._waiting = Gauge("vllm:num_requests_waiting", "Waiting requests", labels, registry=self.registry)
        self._running = Gauge("vllm:num_requests_running", "Running requests", labels, registry=self.registry)
        self._kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage (0-1)", labels, registry=self.registry)
        self._ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", labels,
                               buckets=VLLM_TTFT_BUCKETS, registry=self.registry)
        self._prompt = Counter("vllm:prompt_tokens", "Prefill tokens", labels, registry=self.registry)
        self._gen = Counter("vllm:generation_tokens", "Generation tokens", labels, registry=self.registry)
        self._success = Counter("vllm:request_success", "Finished requests", [*labels, "finished_reason"],
                                registry=self.registry)
        self._preempt = Counter("vllm:num_preemptions", "Preemptions", labels, registry=self.registry)
        self._lv = {"model_name": MODEL, "engine": "0"}
        self._itl = ItlHistogram(self._lv)
        self.registry.register(self._itl)

    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.running)

    def kv_used(self) -> int:
        return sum(r.kv_tokens for r in self.running)

    def submit(self, request: Request) -> None:
        self.waiting.append(request)

    def step(self, now: float) -> None:
        if self.last_step is None:
            self.last_step = now
        dt = max(0.0, now - self.last_step)
        self.last_step = now
        p = self.profile
        # Admit in FIFO order while a slot and the KV tokens are free; prefill is serialised, and a
        # request stays waiting until its prefill starts within this step (as vLLM V1 counts it).
        while self.waiting and len(self.running) < p.max_num_seqs and self.prefill_busy_until <= now + dt:
            head = self.waiting[0]
            if self.kv_used() + head.kv_tokens > p.kv_capacity_tokens and self.running:
                break
            self.waiting.popleft()
            start = max(now, self.prefill_busy_until)
            self.prefill_busy_until = start + head.input_tokens / p.prefill_tps
            head.first_token_at = self.prefill_busy_until
            self._prompt.labels(**self._lv).inc(head.input_tokens)
            self.running.append(head)
        # Decode: tokens per sequence in dt at the current batch's step time.
        if self.running:
            step_s = p.tpot_base_s + p.tpot_per_seq_s * len(self.running)
            decoded = 0
            done = []
            for r in self.running:
                assert r.first_token_at is not None
                if r.first_token_at > now:
                    continue
                if r.generated == 0:
                    ttft = r.first_token_at - r.arrived_at
                    self.ttfts.append(ttft)
                    self._ttft.labels(**self._lv).observe(ttft)
                    r.generated = 1.0
                    self._gen.labels(**self._lv).inc(1)
                    continue
                before = int(r.generated)
                r.generated = min(float(r.output_tokens), r.generated + dt / step_s)
                self._gen.labels(**self._lv).inc(int(r.generated) - before)
                decoded += int(r.generated) - before
                if r.generated >= r.output_tokens:
                    done.append(r)
            self._itl.observe(step_s, decoded)
            for r in done:
                self.running.remove(r)
                self._success.labels(**self._lv, finished_reason="stop").inc()
        self._waiting.labels(**self._lv).set(len(self.waiting))
        self._running.labels(**self._lv).set(len(self.running))
        self._kv.labels(**self._lv).set(round(self.kv_used() / p.kv_capacity_tokens, 4))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
