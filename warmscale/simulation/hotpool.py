"""A hot pool's shape as the simulations build it (the trace benchmark's fleet, :mod:`benchmarks.sim.hotpool`,
and the demo, :mod:`warmscale.demo.hot`): what one pool GPU holds, and the annotations a workload and a
pool node carry to opt in (docs/hot-tier.md), parsed by the product's :mod:`warmscale.warmpool.hot.config`.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmscale.simulation.engine import EngineProfile as DemoEngineProfile
from warmscale.warmpool.hot.config import ENGINE, HOT_POOL, HOT_STANDBY, NODE_AWAKE_PER_GPU, NODE_HOST_RAM, SLEEP_LEVEL
from warmscale.warmpool.hot.surface import LEVEL_DISCARD, LEVEL_OFFLOAD

_MEASURED_8B = DemoEngineProfile()  # vllm PR #48337, Qwen3-8B on an A100: L1 10.57 / 2.19 s, L2 0.31 / 6.53 s
# Weights per GPU: Llama-3.1-70B BF16 (70.6 B parameters x 2 bytes) over 4 GPUs, against an 8B's
# (8.03 B x 2 bytes) on one: each GPU of the TP-4 group copies about 2.2x the bytes of the 8B's GPU.
_BYTES_RATIO_70B_TP4 = (70.6 / 4) / 8.03
# A level-1 wake of 64 GiB of tensors takes about 3 s (llm-d fast model actuation); each GPU of a
# 70B TP-4 group holds about 33 GiB, so 3 s bounds it (the top of issue 23's "0.3-3 s by size").
_WAKE_L1_70B_S = 3.0


@dataclass(frozen=True)
class SleepTimes:
    """Seconds a sleep and a wake take, per sleep level, and the host RAM a sleeper's weights hold."""

    sleep_s: dict[int, float]
    wake_s: dict[int, float]
    host_ram_gib: dict[int, float]
    source: str


SLEEP_TIMES: dict[str, SleepTimes] = {
    "8b-h100": SleepTimes(
        sleep_s={LEVEL_OFFLOAD: _MEASURED_8B.sleep_l1_s, LEVEL_DISCARD: _MEASURED_8B.sleep_l2_s},
        wake_s={LEVEL_OFFLOAD: _MEASURED_8B.wake_l1_s, LEVEL_DISCARD: _MEASURED_8B.wake_l2_s},
        # Level 1 keeps the weights in host RAM: about 22 GiB for an 8B (vllm PR #48337); level 2 drops them.
        host_ram_gib={LEVEL_OFFLOAD: 22.0, LEVEL_DISCARD: 0.0},
        source="vllm PR #48337 (Qwen3-8B, A100): sleep L1 10.57 s, wake L1 2.19 s, sleep L2 0.31 s, wake L2 "
               "6.53 s; as the simulated engine has them (warmscale/simulation/engine.py EngineProfile)"),
    "70b-h100-tp4": SleepTimes(
        # The sleep copies the weights to host RAM (each GPU its share, in parallel): the 8B's time
        # by the bytes per GPU; level 2 discards them (the 8B's 0.3 s) and reloads them on the wake.
        sleep_s={LEVEL_OFFLOAD: _MEASURED_8B.sleep_l1_s * _BYTES_RATIO_70B_TP4, LEVEL_DISCARD: _MEASURED_8B.sleep_l2_s},
        wake_s={LEVEL_OFFLOAD: _WAKE_L1_70B_S, LEVEL_DISCARD: _MEASURED_8B.wake_l2_s * _BYTES_RATIO_70B_TP4},
        host_ram_gib={LEVEL_OFFLOAD: 70.6e9 * 2 / 1024**3, LEVEL_DISCARD: 0.0},
        source="the 8B's figures (vllm PR #48337) scaled by the bytes each GPU copies (2.2x); wake L1 3 s: "
               "64 GiB of tensors wake in about 3 s (llm-d fast model actuation)"),
}
# HBM of one GPU (H100 SXM 80 GB) and what an awake engine takes of it (vLLM's default 0.9 of it:
# 73.9 GiB measured, ai-dynamo/dynamo#11233).
GPU_HBM_GIB = 80.0
AWAKE_HBM_GIB = 73.9
# Sleepers sharing one pool GPU: llm-d fast model actuation keeps at most 2 per GPU by default.
SLEEPERS_PER_GPU = 2
# The host RAM a pool node lets sleepers take (the docs' example annotation).
POOL_NODE_HOST_RAM = "512Gi"


def hot_annotations(pool: str, level: int = LEVEL_OFFLOAD, count: int = 1) -> dict[str, str]:
    """What a model's user writes on its Deployment to opt in (docs/hot-tier.md)."""
    return {HOT_STANDBY: str(count), HOT_POOL: pool, ENGINE: "vllm", SLEEP_LEVEL: str(level)}


def pool_node_annotations(pool: str) -> dict[str, str]:
    return {HOT_POOL: pool, NODE_HOST_RAM: POOL_NODE_HOST_RAM, NODE_AWAKE_PER_GPU: "1"}
