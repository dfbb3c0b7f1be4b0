"""The engine profiles: one model on one GPU type, the constants every simulated engine runs on
(the trace benchmark's step-by-step engine, :mod:`benchmarks.sim.engine`, and the demo's small one,
:mod:`warmscale.simulation.engine`), each with its source. One source of truth: nothing else writes
an engine's throughput, step times or batch limits.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    block_size: int = 16
    # Memory roof's floor: the time to read the weights once per step (0: no memory roof but the KV read).
    step_weights_s: float = 0.0
    # The attention term of prefill (issue 21, requirement 5): a prompt token at context c costs
    # (1 + attn_per_ctx c) / (1 + attn_per_ctx c_cal) of a calibrated token, where attn_per_ctx is the
    # attention's FLOPs per token per token of context over the linear layers' FLOPs per token
    # (:func:`attention_ratio`) and c_cal the mean context of the calibration run's prompts.
    attn_per_ctx: float = 0.0
    calibration_context: float = 0.0
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def num_blocks(self) -> int:
        return int(self.kv_capacity_tokens // self.block_size)

    def step_s(self, nseq: float, tokens: float, kv_tokens: float) -> float:
        """One step's time (roofline): overhead + per-sequence cost + the larger of the compute time of
        the ``tokens`` scheduled (prefill chunks and decode tokens alike, at ``prefill_tps``) and the
        memory time (the weights, then the ``kv_tokens`` of KV cache read)."""
        return (self.step_fixed_s + nseq * self.step_per_seq_s
                + max(tokens / self.prefill_tps, self.step_weights_s + kv_tokens * self.step_per_kv_token_s))

    def attention_extra(self, tokens: float, context: float) -> float:
        """Compute seconds that ``tokens`` prompt tokens at a mean context of ``context`` cost beyond
        (or, below the calibration's context, under) the calibrated roof."""
        if self.attn_per_ctx <= 0.0:
            return 0.0
        a = self.attn_per_ctx
        return tokens * a * (context - self.calibration_context) / ((1.0 + a * self.calibration_context)
                                                                    * self.prefill_tps)

    def decode_step_s(self, batch: float, kv_tokens: float) -> float:
        return self.step_s(batch, batch, kv_tokens)

    def prefill_rate(self, batch: float, kv_tokens: float) -> float:
        """Prefill tokens/s while ``batch`` sequences decode alongside (full chunked-prefill steps)."""
        chunk = max(self.max_num_batched_tokens - batch, 256.0)
        return chunk / self.step_s(batch + 1, chunk + batch, kv_tokens)


_H100_HBM_BPS = 3.35e12  # H100 SXM HBM3 bandwidth (NVIDIA datasheet)


def attention_ratio(n_layers: int, d_attn: int, linear_flops_per_token: float) -> float:
    """Attention FLOPs per prompt token per token of context over the linear FLOPs per token: QK^T and
    softmax x V cost 2 d_attn FLOPs each per layer per context token (Kaplan et al. 2020, "Scaling Laws
    for Neural Language Models", arXiv:2001.08361, Table 1 counts the QK logits as 2 n_layer n_ctx
    d_attn per token; softmax x V is the same count)."""
    return 4.0 * n_layers * d_attn / linear_flops_per_token


# The calibration run's prompts were 1000 tokens (benchmarks/calibrate.py): a mean context of 500.
_CALIBRATION_CONTEXT = 500.0
_ATTN_SOURCE = ("attention term: a prompt token at context c costs (1 + r c) / (1 + r 500) of a calibrated one, "
                "r = 4 n_layers d_attn / linear FLOPs per token (Kaplan et al. 2020, arXiv:2001.08361, Table 1: "
                "QK logits 2 n_layer n_ctx d_attn per token, softmax x V alike); 500 = the mean context of the "
                "calibration run's 1000-token prompts; attention at the GEMMs' efficiency (assumption)")
_MBU = 0.8  # memory-bandwidth utilisation reached by decode kernels (assumption, stated in docs)
_V1_DEFAULTS = ("vLLM V1 OpenAI server defaults on a >= 70 GiB GPU that is not an A100 (H100): "
                "max_num_seqs 1024, max_num_batched_tokens 8192 - vllm-project/vllm 99d7eb5 (v0.11 line), "
                "vllm/engine/arg_utils.py EngineArgs._set_default_args: "
                "`if device_memory >= 70 * GiB_bytes and \"a100\" not in device_name:`; block_size 16 (CUDA default)")

ENGINE_PROFILES: dict[str, EngineProfile] = {
    "8b-h100": EngineProfile(
        name="8b-h100",
        model="Llama-3.1-8B-Instruct BF16, vLLM V1, 1x H100 SXM 80GB",
        gpus_per_replica=1,
        prefill_tps=37_000.0,
        step_fixed_s=0.0025,
        step_weights_s=16.1e9 / (_H100_HBM_BPS * _MBU),
        attn_per_ctx=attention_ratio(32, 4096, 2 * 7.5e9),  # Llama-3.1-8B: 32 layers, 32 x 128 query dims
        calibration_context=_CALIBRATION_CONTEXT,
        step_per_seq_s=20e-6,
        step_per_kv_token_s=131_072 / (_H100_HBM_BPS * _MBU),
        kv_capacity_tokens=400_000.0,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        sources=(
            ("prefill_tps", "compute roof, tokens/s (prefill and decode tokens alike): calibrated to the saturated "
                            "throughput of vLLM 0.8.3 V1 on an H100 (benchcompare 35 req/s: 28.45 req/s of 1000 in / "
                            "100 out served; benchmarks/calibrate.py, docs/benchmarks.md 'Engine calibration'): "
                            "37k tok/s = 2 x 7.5e9 FLOP/token (8B without the LM head) at ~56% of 989 TFLOPS BF16"),
            ("step_fixed_s", "per-step overhead (scheduling, launch, sampling sync): the benchcompare 1 req/s mean "
                             "TPOT 8.56 ms at batch ~1 less the 6.0 ms weight read and ~0.05 ms KV read: 2.5 ms"),
            ("step_weights_s", "memory roof's floor: 16.1 GB of weights read per step at 80% of 3.35 TB/s HBM: 6.0 ms"),
            ("step_per_kv_token_s", "128 KiB KV/token (32 layers x 8 KV heads x 128 x 2 x BF16) read per step"),
            ("step_per_seq_s", "20 us per sequence per step (sampling, scheduling; assumption)"),
            ("kv_capacity_tokens", "(0.9 x 80 GB - 16 GB weights - ~4 GB activations/graphs) / 128 KiB = ~400k "
                                   "tokens; cf. num_gpu_blocks=28217 x 16 = 451k tokens for a 7B in "
                                   "shared/reference/metrics-samples/vllm-idle.prom"),
            ("max_num_seqs", _V1_DEFAULTS),
            ("max_num_batched_tokens", _V1_DEFAULTS),
            ("calibration", "docs/benchmarks.md, 'Engine calibration'"),
            ("attn_per_ctx", _ATTN_SOURCE + "; Llama-3.1-8B: 32 layers, d_attn 4096, 2 x 7.5e9 FLOP/token: 3.5e-5"),
        ),
    ),
    "70b-h100-tp4": EngineProfile(
        name="70b-h100-tp4",
        model="Llama-3.3-70B-Instruct BF16, vLLM V1, TP=4 on 4x H100 SXM 80GB",
        gpus_per_replica=4,
        prefill_tps=37_000.0 * 0.4375,
        step_fixed_s=0.0025 + 0.004,
        step_weights_s=(141e9 / 4) / (_H100_HBM_BPS * _MBU),
        attn_per_ctx=attention_ratio(80, 8192, 2 * 69e9),  # Llama-3.3-70B: 80 layers, 64 x 128 query dims
        calibration_context=_CALIBRATION_CONTEXT,
        step_per_seq_s=30e-6,
        step_per_kv_token_s=(327_680 / 4) / (_H100_HBM_BPS * _MBU),
        kv_capacity_tokens=400_000.0,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        sources=(
            ("prefill_tps", "the 8B's calibrated compute roof x 0.4375 (4 GPUs x 8/70 of the FLOPs per token x ~96% "
                            "TP efficiency, the factor used since the first 24k/10.5k derivation): ~16.2k tok/s "
                            "(scaled, not calibrated)"),
            ("step_fixed_s", "the 8B's measured 2.5 ms per-step overhead + 4 ms for 160 TP all-reduces: 6.5 ms"),
            ("step_weights_s", "35 GB of weights per GPU at 80% of 3.35 TB/s: 13.2 ms"),
            ("step_per_kv_token_s", "320 KiB KV/token (80 layers x 8 KV heads x 128 x 2 x BF16) split over 4 GPUs"),
            ("step_per_seq_s", "30 us per sequence per step (assumption)"),
            ("kv_capacity_tokens", "4 x (0.9 x 80 - 35 - 4) GB / 320 KiB = ~400k tokens"),
            ("attn_per_ctx", _ATTN_SOURCE + "; Llama-3.3-70B: 80 layers, d_attn 8192, 2 x 69e9 FLOP/token: 1.9e-5"),
            ("max_num_seqs", _V1_DEFAULTS),
            ("max_num_batched_tokens", _V1_DEFAULTS),
        ),
    ),
    "70b-h100-tp8": EngineProfile(
        name="70b-h100-tp8",
        model="Llama-3.3-70B-Instruct BF16, vLLM V1, TP=8 on 8x H100 SXM 80GB",
        gpus_per_replica=8,
        prefill_tps=37_000.0 * 0.75,
        step_fixed_s=0.0025 + 0.004,
        step_weights_s=(141e9 / 8) / (_H100_HBM_BPS * _MBU),
        attn_per_ctx=attention_ratio(80, 8192, 2 * 69e9),
        calibration_context=_CALIBRATION_CONTEXT,
        step_per_seq_s=30e-6,
        step_per_kv_token_s=(327_680 / 8) / (_H100_HBM_BPS * _MBU),
        kv_capacity_tokens=1_200_000.0,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        sources=(
            ("prefill_tps", "the 8B's calibrated compute roof x 0.75 (twice TP4's FLOPs at ~85% TP scaling, the "
                            "factor used since the first 24k/18k derivation): ~27.8k tok/s (assumption)"),
            ("step_fixed_s", "the 8B's measured 2.5 ms per-step overhead + 4 ms all-reduce: 6.5 ms"),
            ("step_weights_s", "17.6 GB of weights per GPU at 80% of 3.35 TB/s: 6.6 ms"),
            ("step_per_kv_token_s", "320 KiB KV/token split over 8 GPUs"),
            ("step_per_seq_s", "30 us per sequence per step (assumption)"),
            ("kv_capacity_tokens", "8 x (0.9 x 80 - 17.6 - 4) GB / 320 KiB = ~1.2M tokens"),
            ("attn_per_ctx", _ATTN_SOURCE + "; as the TP4 profile"),
            ("max_num_seqs", _V1_DEFAULTS),
            ("max_num_batched_tokens", _V1_DEFAULTS),
        ),
    ),
}


# Profiles whose constants were fitted to a published run on their own model and GPU (issue 21,
# requirement 5). The 70B profiles are scaled from the 8B's calibration (their sources say how), not
# calibrated against a published 70B run on H100: every table that uses them says "uncalibrated".
CALIBRATED_PROFILES = frozenset({"8b-h100"})


def calibration_label(profile: str) -> str:
    return "calibrated" if profile in CALIBRATED_PROFILES else "uncalibrated"
