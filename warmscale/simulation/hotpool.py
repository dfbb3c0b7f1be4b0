"""A hot pool's shape as the simulations build it (the trace benchmark's fleet, :mod:`benchmarks.sim.hotpool`,
and the demo, :mod:`warmscale.demo.hot`): what one pool GPU holds, and the annotations a workload and a
pool node carry to opt in (docs/hot-tier.md), parsed by the product's :mod:`warmscale.warmpool.hot.config`.
"""

from __future__ import annotations

from warmscale.warmpool.hot.config import ENGINE, HOT_POOL, HOT_STANDBY, NODE_AWAKE_PER_GPU, NODE_HOST_RAM, SLEEP_LEVEL
from warmscale.warmpool.hot.surface import LEVEL_OFFLOAD

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
