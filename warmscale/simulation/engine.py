"""A simulated vLLM replica: a small continuous-batching queueing model behind a real ``/metrics``.

Times are the demo's trace time (the demo's clock runs faster than the wall clock). The model is
deliberately small (the trace-replay benchmark has the detailed one): requests wait in
FIFO order until a batch slot and their KV tokens are free; prefill runs at ``prefill_tps``
tokens/s and TTFT = queue wait + prefill (a request counts as waiting until its prefill starts;
a request that carries its trace's block ids prefills only the blocks its replica's prefix cache,
:mod:`warmscale.simulation.prefix_cache`, does not hold, as the benchmark's engine does);
decode emits one token per sequence per step, and a step takes the roofline of the engine profile
(:meth:`EngineProfile.decode_step_s`: overhead + per-sequence cost + the larger of the batch's compute
and the weights' and KV cache's read). Every constant comes from one engine profile of
:mod:`warmscale.simulation.profiles` (the trace benchmark's, calibrated; default ``8b-h100``).
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

from warmscale.simulation.prefix_cache import PrefixCache
from warmscale.simulation.profiles import ENGINE_PROFILES
from warmscale.warmpool.hot.surface import SLEEP_STATES_BY_LEVEL

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


# The engine profile the simulated engines run on unless told otherwise (the demo's default --profile).
DEFAULT_PROFILE = "8b-h100"
_DEFAULT = ENGINE_PROFILES[DEFAULT_PROFILE]


@dataclass(frozen=True)
class EngineProfile:
    """What one simulated replica does: by default the calibrated ``8b-h100`` profile of the trace
    benchmark (Llama-3.1-8B on one H100, :data:`warmscale.simulation.profiles.ENGINE_PROFILES`, with its
    sources: 37k prefill tokens/s, vLLM V1's 1,024 sequences, ~400k KV tokens, the decode step's
    roofline); :meth:`of` takes another profile's constants. Tests override single fields."""

    max_num_seqs: int = _DEFAULT.max_num_seqs
    kv_capacity_tokens: int = int(_DEFAULT.kv_capacity_tokens)
    prefill_tps: float = _DEFAULT.prefill_tps
    step_fixed_s: float = _DEFAULT.step_fixed_s
    step_per_seq_s: float = _DEFAULT.step_per_seq_s
    step_weights_s: float = _DEFAULT.step_weights_s
    step_per_kv_token_s: float = _DEFAULT.step_per_kv_token_s
    gpus_per_replica: int = _DEFAULT.gpus_per_replica
    # Sleep mode (docs/hot-tier.md): an 8B's level-1 sleep copies its weights to host RAM in ~10 s and
    # wakes in ~2 s; level 2 sleeps in 0.3 s and wakes (reload included) in ~6.5 s (vllm PR #48337, an
    # 8B on an A100: 10.57 / 2.19 s and 0.31 / 6.53 s).
    sleep_l1_s: float = 10.0
    wake_l1_s: float = 2.2
    sleep_l2_s: float = 0.3
    wake_l2_s: float = 6.5

    @classmethod
    def of(cls, name: str) -> EngineProfile:
        """The simulated engine of the named profile (:data:`~warmscale.simulation.profiles.ENGINE_PROFILES`)."""
        p = ENGINE_PROFILES[name]
        return cls(max_num_seqs=p.max_num_seqs, kv_capacity_tokens=int(p.kv_capacity_tokens), prefill_tps=p.prefill_tps,
                   step_fixed_s=p.step_fixed_s, step_per_seq_s=p.step_per_seq_s, step_weights_s=p.step_weights_s,
                   step_per_kv_token_s=p.step_per_kv_token_s, gpus_per_replica=p.gpus_per_replica)

    def decode_step_s(self, batch: int, kv_tokens: float) -> float:
        """One decode step of ``batch`` sequences holding ``kv_tokens`` (the profile's roofline,
        :meth:`warmscale.simulation.profiles.EngineProfile.step_s` with one token per sequence)."""
        return (self.step_fixed_s + batch * self.step_per_seq_s
                + max(batch / self.prefill_tps, self.step_weights_s + kv_tokens * self.step_per_kv_token_s))


# What the simulated engine's greedy canary completion returns (docs/hot-tier.md, "Canary").
CANARY_TEXT = " Paris. It is"


@dataclass
class Request:
    arrived_at: float
    input_tokens: int
    output_tokens: int
    first_token_at: float | None = None
    generated: float = 0.0
    hashes: tuple[int, ...] | None = None  # the prompt's block ids (prefix caching), None: none
    hash_tokens: int = 0  # tokens per block of ``hashes``
    pins: int = 0  # leading blocks of ``hashes`` pinned in the replica's prefix cache while it runs

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
    cache: PrefixCache | None = None  # made by the first request with block ids; sleeping drops it
    # Sleep mode: 0 awake, else the level it sleeps at; no request is admitted or decoded unless awake.
    sleep_level: int = 0
    paused: bool = False  # SGLang's /pause_generation
    draining: bool = False  # vLLM's /sleep?mode=wait: finishing what it holds, taking nothing new
    dead: bool = False  # an SGLang release with a request in flight aborts the engine process
    corrupt_after_wake: bool = False  # fault injection: wrong output after the next wake (vllm#16234)
    serving_wrong_output: bool = False
    # A level-2 wake: /wake_up?tags=weights allocates the weights' memory, reload_weights fills it.
    weights_allocated: bool = False
    weights_reloaded: bool = False

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
        self._prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens", labels,
                                       registry=self.registry)
        self._prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens", labels,
                                    registry=self.registry)
        self._lv = {"model_name": MODEL, "engine": "0"}
        self._sleep_state = Gauge("vllm:engine_sleep_state", "Sleep state (1 for the current one)",
                                  [*labels, "sleep_state"], registry=self.registry)
        self._sleep_ops = Histogram("vllm:sleep_mode_operation_duration_seconds", "Sleep mode operations",
                                    [*labels, "operation"], buckets=(0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
                                    registry=self.registry)
        self._show_sleep_state()
        self._itl = ItlHistogram(self._lv)
        self.registry.register(self._itl)

    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.running)

    @property
    def awake(self) -> bool:
        return self.sleep_level == 0 and not self.paused and not self.dead

    @property
    def takes_requests(self) -> bool:
        """Whether a gateway may route to it: awake, not draining for a sleep."""
        return self.awake and not self.draining

    def _show_sleep_state(self) -> None:
        for level, state in enumerate(SLEEP_STATES_BY_LEVEL):
            self._sleep_state.labels(**self._lv, sleep_state=state).set(1 if level == self.sleep_level else 0)

    def fall_asleep(self, level: int, took_s: float) -> None:
        """Level 1 keeps the weights in host RAM, level 2 drops them; either drops the KV cache."""
        self.sleep_level, self.draining = level, False
        self.cache = None  # the KV cache, cached prefixes included, is gone
        self._sleep_ops.labels(**self._lv, operation="sleep").observe(took_s)
        self._show_sleep_state()

    def wake_up(self, took_s: float) -> None:
        self.sleep_level = 0
        self.weights_allocated = self.weights_reloaded = False
        self.serving_wrong_output, self.corrupt_after_wake = self.corrupt_after_wake, False
        self._sleep_ops.labels(**self._lv, operation="wake").observe(took_s)
        self._show_sleep_state()

    def completion(self) -> str:
        """The greedy completion of the canary prompt (wrong after a faulty wake)."""
        return "\ufffd\ufffd" if self.serving_wrong_output else CANARY_TEXT

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
        if not self.awake:  # asleep, paused or dead: nothing is admitted or decoded
            self._publish()
            return
        while self.waiting and len(self.running) < p.max_num_seqs and self.prefill_busy_until <= now + dt:
            head = self.waiting[0]
            if self.kv_used() + head.kv_tokens > p.kv_capacity_tokens and self.running:
                break
            self.waiting.popleft()
            start = max(now, self.prefill_busy_until)
            self.prefill_busy_until = start + (head.input_tokens - self._cached(head)) / p.prefill_tps
            head.first_token_at = self.prefill_busy_until
            self._prompt.labels(**self._lv).inc(head.input_tokens)
            self.running.append(head)
        # Decode: tokens per sequence in dt at the current batch's step time.
        if self.running:
            step_s = p.decode_step_s(len(self.running), self.kv_used())
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
                if self.cache is not None and r.hashes is not None and r.pins:
                    self.cache.unpin(r.hashes[:r.pins])
                self._success.labels(**self._lv, finished_reason="stop").inc()
            if self.cache is not None:  # unreferenced cached blocks live in the free KV memory
                self.cache.trim((p.kv_capacity_tokens - self.kv_used()) // self.cache.block_tokens)
        self._publish()

    def _cached(self, r: Request) -> int:
        """Prompt tokens of ``r`` its prefix cache holds (0 without block ids); pins its full blocks."""
        if r.hashes is None or r.hash_tokens <= 0:
            return 0
        if self.cache is None:
            self.cache = PrefixCache(r.hash_tokens)
        hit = self.cache.hit_blocks(r.hashes, r.input_tokens) * r.hash_tokens
        r.pins = min(len(r.hashes), r.input_tokens // r.hash_tokens)
        self.cache.pin(r.hashes[:r.pins])
        self._prefix_queries.labels(**self._lv).inc(r.input_tokens)
        self._prefix_hits.labels(**self._lv).inc(hit)
        return hit

    def _publish(self) -> None:
        self._waiting.labels(**self._lv).set(len(self.waiting))
        self._running.labels(**self._lv).set(len(self.running))
        self._kv.labels(**self._lv).set(round(self.kv_used() / self.profile.kv_capacity_tokens, 4))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def sglang_exposition(self) -> bytes:
        """The gauges an SGLang server exports for what it holds (a stand-in's subset: the hot tier's
        idle check reads these; the scaler's full SGLang parse is tested on real captures)."""
        labels = f'{{model_name="{MODEL}"}}'
        kv = round(self.kv_used() / self.profile.kv_capacity_tokens, 4)
        return (f"sglang:num_running_reqs{labels} {len(self.running)}\n"
                f"sglang:num_queue_reqs{labels} {len(self.waiting)}\n"
                f"sglang:token_usage{labels} {kv}\n").encode()
