"""What one replica sustains, in tokens, learned online from the engines' own counters (pure).

The estimate starts from a documented prior per engine and ``modelProfile`` (:data:`PRIORS`; the
``generic`` prior when neither says more) and is kept per ScaledObject and GPU product in the
scaler's state. Each scrape interval over which a replica had requests waiting both at its start
and at its end (prefill was the bottleneck: the engine took prompts as fast as it could) gives one
sample of its prefill throughput, ``delta(prompt_tokens_total) / delta(t)``; the estimate is a
running mean of those samples in which the prior counts as :data:`PRIOR_WEIGHT` samples and old
samples fade after :data:`MAX_WEIGHT`. A replica seen serving more prompt tokens per second than the
estimate, saturated or not, raises it to that: capacity is at least what was served.
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


def prior_for(engine: str, profile: str | None) -> Prior:
    if profile is not None and profile in PRIORS:
        return PRIORS[profile]
    return PRIORS.get(engine, PRIORS["generic"])


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
        w = min(est.weight, MAX_WEIGHT)
        return Estimate((est.prefill_tps * w + tps) / (w + 1.0), w + 1.0, est.samples + 1)
    if tps > est.prefill_tps:
        return Estimate(tps, est.weight, est.samples)
    return est
