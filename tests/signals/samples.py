"""Expected values of every sample payload (../shared/reference/metrics-samples and ./data)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.servers import SAMPLES_DIR

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Expected:
    file: str
    engine: str
    waiting: float
    running: float
    kv: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    requests: float | None
    preemptions: float | None
    ttft_count: float | None
    ttft_sum: float | None = None
    max_running: float | None = None
    gpu: float | None = None
    itl_count: float | None = None  # the ITL/TPOT histogram's count and sum (None: the engine has none)
    itl_sum: float | None = None

    def text(self) -> str:
        local = DATA_DIR / self.file
        return (local if local.exists() else SAMPLES_DIR / self.file).read_text()


ENGINE_SAMPLES: tuple[Expected, ...] = (
    # vLLM V1, DP=2: 23+21 running, 4+2 waiting (not the *_by_reason series), KV max(0.6127, 0.5874).
    Expected("vllm-v1-load.prom", "vllm", 6, 44, 0.6127, 10136274 + 10281609, 2032381 + 1943722,
             6578 + 207 + 57 + 6474 + 190 + 55, 7 + 3, 6865 + 6740, 2040.847117527676 + 2015.1948307124446,
             itl_count=2025516 + 1936982, itl_sum=54616.42840510968 + 52044.12904024272),
    Expected("vllm-idle.prom", "vllm", 0, 0, 0.0, 3523614, 688765, 2220 + 70 + 28, 0, 2318, 668.6784088688752,
             itl_count=686447, itl_sum=18504.241603684564),
    # Legacy names: KV from gpu_cache_usage_perc.
    # ITL from the old time_per_output_token_seconds.
    Expected("vllm-legacy-load.prom", "vllm", 5, 37, 0.6041, 13865522, 2718463, 8773 + 278 + 76, 14, 9164,
             2745.8563747197086, itl_count=2709299, itl_sum=72872.37087287138),
    # SGLang: num_queue_reqs + PD queues (all 0), not num_running_reqs_offline_batch; retractions.
    Expected("sglang-load.prom", "sglang", 7, 41, 0.6031981816066998, 22702347, 4876003, 11874, 3, 11915,
             5618.390261762825, itl_count=4864088, itl_sum=158844.64401404964),
    # TGI: counters without _total; KV proxy 157286/262144; finished = success + the failures after the
    # batch took the request (err="validation" was refused before it, "incomplete" is no TGI label: 0);
    # no TTFT; ITL = the per-request mean time per token.
    Expected("tgi-load.prom", "tgi", 5, 28, 157286 / 262144, 22411968, 5767776, 18297, None, None,
             itl_count=18297, itl_sum=452.90062257857284),
    # Triton + TRT-LLM: waiting from request_type="waiting" (pending_request_count=2 on postprocessing is
    # NOT added), scheduled = running, KV fraction, max slots 256, mean GPU utilisation.
    Expected("triton-trtllm-load.prom", "triton", 6, 48, 0.599957, 15934877, 4498210, 14230, None, None,
             max_running=256, gpu=(0.93 + 0.91) / 2),
    # Ray Serve LLM: router queue 4 + engine waiting 2+1; running 18+16; KV max over ReplicaId.
    Expected("ray-serve-llm-load.prom", "ray", 4 + 2 + 1, 34, 0.6214, 9202985 + 9231342, 1763954 + 1777542,
             6010 + 6020, None, 6028 + 6036, 1852.8364072755564 + 1797.063653519531),
    # trtllm-serve (synthetic, tests/signals/data); per-request TPOT histogram.
    Expected("trtllm-serve-load.prom", "trtllm", 4, 30, 0.5523, 1204512, 341977, 920, None, 920,
             232.86957247093457, max_running=64, itl_count=920, itl_sum=26.142094362616216),
)  # fmt: skip

DCGM_SAMPLE = "dcgm-load.prom"
DCGM_BY_POD = {
    ("llm-serving", "vllm-llama-8b-7c9f6d5b8-kq2xz"): (0.812304 + 0.798215) / 2,
    ("llm-serving", "sglang-qwen-32b-5d8b9c7f6-p7wlm"): 0.602377,
}
