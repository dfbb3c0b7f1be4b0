"""Engine ``/metrics`` payloads the RPC-load, reaction and engine-farm benchmarks serve, shipped in the
package so that they run from an install without a ``shared/`` folder beside the repository.

Copies of ``shared/reference/metrics-samples/vllm-v1-load.prom`` and ``vllm-idle.prom`` (synthetic
payloads whose names, types, HELP text and buckets follow vLLM V1's ``vllm/v1/metrics/loggers.py``;
each file's header comments say what it models).
"""

from __future__ import annotations

from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parent
