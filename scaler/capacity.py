"""What one replica sustains, in tokens, learned online from the engines' own counters (pure).

The estimate starts from a documented prior per engine and ``modelProfile`` (:data:`PRIORS`; the
``generic`` prior when neither says more) and is kept per ScaledObject and GPU product in the
scaler's state. Samples run from one step of a replica's prompt-token counter to a later one (the
counter moves when a prefill completes, in lumps). A sample of at least
:data:`SATURATED_MIN_SECONDS` over which requests waited for prefill at every scrape (some waited,
the KV cache was below ``KV_HIGH`` and nothing was preempted: scaler.observation) gives
``delta(prompt_tokens_total) / delta(t)``; the estimate is a running mean of
those, each weighing its length in seconds, in which the prior counts as :data:`PRIOR_WEIGHT`
seconds and old ones fade after :data:`MAX_WEIGHT`. Two lower bounds raise it, saturated or not:
what a replica served over at least :data:`SERVED_MIN_SECONDS` (capacity is at least what was
served), and the prompt tokens it computed over their summed prefill time (:func:`prefill_floor`,
vLLM V1; needs no queue).
Math and sources: docs/policy.md ("Capacity in tokens").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The prior counts as this many samples; the estimate forgets samples older than MAX_WEIGHT ones.
PRIOR_WEIGHT = 3.0
MAX_WEIGHT = 30.0
# Shortest interval a throughput sample may span (shorter ones are mostly scrape jitter).
MIN_SAMPLE_SECONDS = 0.5
# Samples run from one step of the prompt-token counter to a later one (engines count a prompt when
# its prefill completes, so the counter moves in lumps): a saturated sample spans at least
# SATURATED_MIN_SECONDS, an unsaturated ("served") one and the prefill-time floor at least
# SERVED_MIN_SECONDS, so that one lump more or less moves them little.
SATURATED_MIN_SECONDS = 2.0
SERVED_MIN_SECONDS = 10.0
# A saturated sample weighs one per this many seconds it spans.
SAMPLE_UNIT_SECONDS = 1.0
# Fewest prefills the prefill-time floor is taken from.
FLOOR_MIN_PREFILLS = 8.0


@dataclass(frozen=True)
class Prior:
    """Per-replica capacity before any measurement."""

    prefill_tps: float  # prompt tokens per second one replica prefills at full load
    max_seqs: float  # sequences one replica runs at once (the engine's max_num_seqs)
    source: str


# Keys are ``modelProfile`` values; "<engine>" keys are engine defaults; "generic" is the fallback.
PRIORS: dict[str, Prior] = {
    "generic": Prior(8_000.0, 256.0, "half the measured 8B/H100 peak below (an unknown model is assumed "
                                     "larger); max_num_seqs 256 (vLLM V0 / SGLang-like default)"),
    "8b-h100": Prior(16_000.0, 1024.0, "llm-d token-aware autoscaling guide: 15,928 tok/s peak prefill, "
                                       "Llama-3.1-8B on one H100 (shared/reference/autoscalers.md (c)); "
                                       "vLLM V1 max_num_seqs 1024 on an H100"),
    "70b-h100-tp4": Prior(7_000.0, 1024.0, "8B figure x 4 GPUs / 8.75x the FLOPs per token (same MFU, "
                                           "docs/benchmarks.md engine table); vLLM V1 max_num_seqs 1024"),
    "70b-h100-tp8": Prior(12_000.0, 1024.0, "8B figure x 8 GPUs / 8.75x the FLOPs per token at ~80% TP "
                                            "scaling; vLLM V1 max_num_seqs 1024"),
    "vllm": Prior(8_000.0, 1024.0, "generic prefill; vLLM V1 max_num_seqs default 1024 on >= 70 GiB GPUs"),
    "sglang": Prior(8_000.0, 1024.0, "generic prefill; SGLang max_running_requests is sized from memory"),
    "tgi": Prior(8_000.0, 128.0, "generic prefill; TGI max_concurrent_requests default 128"),
}

MODEL_PROFILES = tuple(k for k in PRIORS if k not in ("generic", "vllm", "sglang", "tgi"))


def prior_for(engine: str, profile: str | None, prefill_tps: float | None = None) -> Prior:
    """The ``modelProfile``'s prior, else the engine's, else the generic one; ``prefill_tps`` (the
    ``prefillTpsPrior`` key) replaces its prefill rate."""
    if profile is not None and profile in PRIORS:
        prior = PRIORS[profile]
    else:
        prior = PRIORS.get(engine, PRIORS["generic"])
    if prefill_tps is not None:
        return Prior(prefill_tps, prior.max_seqs, f"prefillTpsPrior {prefill_tps:g}; max_seqs: {prior.source}")
    return prior


@dataclass(frozen=True)
class Estimate:
    """Learned prefill throughput of one replica (tokens/s) and the weight of evidence behind it."""

    prefill_tps: float
    weight: float = PRIOR_WEIGHT
    samples: int = 0  # saturated intervals seen (0: still the prior)

    def to_dict(self) -> dict[str, Any]:
        return {"v": 1, "prefill_tps": self.prefill_tps, "weight": self.weight, "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Estimate:
        return cls(float(d["prefill_tps"]), float(d.get("weight", PRIOR_WEIGHT)), int(d.get("samples", 0)))


def start(prior: Prior) -> Estimate:
    return Estimate(prior.prefill_tps)


def learn(est: Estimate, tokens: float, seconds: float, saturated: bool) -> Estimate:
    """Fold one replica's interval (prompt tokens prefilled over ``seconds``) into the estimate."""
    if seconds < MIN_SAMPLE_SECONDS or tokens < 0:
        return est
    tps = tokens / seconds
    if saturated and tokens > 0:
        # Weighted by its length (one weight per second): the mean is total tokens over total time,
        # not a mean of ratios, which would favour the short samples that happen to end on a lump.
        w, add = min(est.weight, MAX_WEIGHT), seconds / SAMPLE_UNIT_SECONDS
        return Estimate((est.prefill_tps * w + tps * add) / (w + add), w + add, est.samples + 1)
    return raise_to(est, tps)


def raise_to(est: Estimate, tps: float) -> Estimate:
    """Capacity is at least ``tps`` (a lower bound on what one replica prefills per second)."""
    if tps > est.prefill_tps:
        return Estimate(tps, est.weight, est.samples)
    return est


def prefill_floor(prompt_tokens: float, cached_tokens: float, prefill_seconds: float,
                  prefills: float) -> float | None:
    """A lower bound on one replica's prefill rate that needs no queue, from lifetime totals: the
    prompt tokens of the finished requests (vLLM V1 ``request_prompt_tokens_sum``) less every
    prefix-cache hit (``prefix_cache_hits_total``: counted when a request is scheduled, so it covers
    the finished ones' hits and more) over the same requests' summed prefill time
    (``request_prefill_time_seconds_sum``, first scheduled to first token). Requests prefilling at
    once each count the shared time, and decode work interleaved with chunked prefill counts too, so
    the sum is at least the time the engine spent prefilling them: the ratio never exceeds the
    engine's rate (docs/policy.md, "Capacity in tokens"). ``None`` without enough data."""
    computed = prompt_tokens - cached_tokens
    if prefills < FLOOR_MIN_PREFILLS or not prefill_seconds > 0 or not computed > 0:
        return None
    return computed / prefill_seconds


# --------------------------------------------------------------------------------------------- ITL
# Inter-token latency of one replica as a function of the sequences it runs, ``itl(b) = base + per_seq
# x b``: a decode step reads the weights once (``base``) and each sequence's KV cache (``per_seq``).
# Priors from the trace benchmark's engine profiles (benchmarks/sim/engine.py, with their sources) at
# a mean context of ~2,000 tokens per sequence; "generic" assumes a model twice the 8B's cost.


@dataclass(frozen=True)
class ItlPrior:
    """Per-replica ITL model before any measurement."""

    base_s: float  # seconds per decode step with (nearly) no sequence: the weights' read
    per_seq_s: float  # seconds each running sequence adds to a step (its KV read, sampling)
    source: str


ITL_PRIORS: dict[str, ItlPrior] = {
    "generic": ItlPrior(0.017, 0.00024, "twice the 8B/H100 figures below (an unknown model is assumed larger)"),
    "8b-h100": ItlPrior(0.0085, 0.00012, "16.1 GB weights at 80% of 3.35 TB/s + 2.5 ms per-step overhead = "
                                         "8.5 ms (vLLM 0.8.3 on an H100 measured 8.56 ms mean TPOT at 1 req/s: "
                                         "docs/benchmarks.md 'Engine calibration'); 20 us + 2,000 KV tokens x "
                                         "128 KiB at 80% of 3.35 TB/s = 118 us per sequence"),
    "70b-h100-tp4": ItlPrior(0.020, 0.00009, "35 GB weights per GPU at 80% of 3.35 TB/s + the 8B's 2.5 ms "
                                             "overhead + 4 ms all-reduce = 19.7 ms; 30 us + 2,000 x 80 KiB KV "
                                             "per GPU = 91 us per sequence"),
    "70b-h100-tp8": ItlPrior(0.013, 0.00006, "17.6 GB weights per GPU + 2.5 ms overhead + 4 ms all-reduce = "
                                             "13.1 ms; 30 us + 2,000 x 40 KiB KV per GPU = 61 us per sequence"),
}
# Batch sizes at which the prior's line is pinned (its two pseudo-samples).
ITL_PRIOR_BATCHES = (1.0, 64.0)
# The prior counts as this many samples (always: it keeps the slope defined when every sample was
# seen at one batch size); observations fade beyond ITL_MAX_WEIGHT samples.
ITL_PRIOR_WEIGHT = 4.0
ITL_MAX_WEIGHT = 120.0


def itl_prior_for(engine: str, profile: str | None) -> ItlPrior:
    if profile is not None and profile in ITL_PRIORS:
        return ITL_PRIORS[profile]
    return ITL_PRIORS.get(engine, ITL_PRIORS["generic"])


@dataclass(frozen=True)
class ItlEstimate:
    """Weighted sums of observed (batch, mean ITL) samples; the line is fitted with the prior's
    pseudo-samples added (:func:`itl_line`)."""

    w: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"v": 1, "w": self.w, "sx": self.sx, "sy": self.sy, "sxx": self.sxx, "sxy": self.sxy,
                "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ItlEstimate:
        return cls(float(d.get("w", 0.0)), float(d.get("sx", 0.0)), float(d.get("sy", 0.0)),
                   float(d.get("sxx", 0.0)), float(d.get("sxy", 0.0)), int(d.get("samples", 0)))


def learn_itl(est: ItlEstimate, batch: float, itl_s: float) -> ItlEstimate:
    """Fold one replica's interval (mean running sequences, mean inter-token latency) into the sums."""
    if not (batch > 0 and itl_s > 0) or batch != batch or itl_s != itl_s:
        return est
    keep = min(1.0, (ITL_MAX_WEIGHT - 1.0) / est.w) if est.w > 0 else 1.0
    return ItlEstimate(est.w * keep + 1.0, est.sx * keep + batch, est.sy * keep + itl_s,
                       est.sxx * keep + batch * batch, est.sxy * keep + batch * itl_s, est.samples + 1)


def itl_line(est: ItlEstimate, prior: ItlPrior) -> tuple[float, float]:
    """(base seconds, seconds per sequence) of one replica's ITL line; both non-negative.

    The prior's shape is first scaled to the samples (least squares of ``y = s x prior(b)``), then the
    line is the weighted least-squares fit through the samples and two pseudo-samples of that scaled
    prior (:data:`ITL_PRIOR_BATCHES`, :data:`ITL_PRIOR_WEIGHT`): samples seen at one batch size move
    the line's level and keep the prior's split between base and slope; samples spread over batch
    sizes learn the split."""
    w, sx, sy, sxx, sxy = est.w, est.sx, est.sy, est.sxx, est.sxy
    pb, ps = prior.base_s, prior.per_seq_s
    scale = 1.0
    if w > 0:
        pp = pb * pb * w + 2 * pb * ps * sx + ps * ps * sxx  # sum of prior(b)^2 over the samples
        if pp > 0:
            scale = max(0.0, (pb * sy + ps * sxy) / pp)
    pw = ITL_PRIOR_WEIGHT / len(ITL_PRIOR_BATCHES)
    for b in ITL_PRIOR_BATCHES:
        y = scale * (pb + ps * b)
        w, sx, sy, sxx, sxy = w + pw, sx + pw * b, sy + pw * y, sxx + pw * b * b, sxy + pw * b * y
    var = w * sxx - sx * sx
    slope = (w * sxy - sx * sy) / var if var > 0 else scale * ps
    if slope < 0:
        return sy / w, 0.0
    base = (sy - slope * sx) / w
    if base < 0:
        return 0.0, sxy / sxx
    return base, slope
