"""Ray Serve LLM (Ray metrics agent; vLLM re-exported as ``ray_vllm_*``). ``engine-metrics.md`` section 5.

Queue = requests queued at Serve routers (``ray_serve_deployment_queued_queries``, not yet assigned
to a replica) + requests waiting inside the vLLM engines. Running = the engines' running count,
else Serve's ``num_ongoing_requests_at_replicas``. Older builds spell engine series ``ray_vllm:x``.
"""

from __future__ import annotations

from dataclasses import replace

from warmscale.signals.engines import vllm
from warmscale.signals.engines._common import counter_sum, gauge_sum, required
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import MetricIndex, PayloadError

PREFIXES = ("ray_vllm_", "ray_vllm:")
QUEUED = "ray_serve_deployment_queued_queries"
ONGOING = "ray_serve_num_ongoing_requests_at_replicas"


def detect(idx: MetricIndex) -> bool:
    return idx.has_prefix("ray_serve_", *PREFIXES)


def parse(idx: MetricIndex) -> ReplicaSignal:
    router_queue = gauge_sum(idx, QUEUED)
    engine_prefix = next((p for p in PREFIXES if p + "num_requests_running" in idx), None)
    if engine_prefix is not None:
        sig = vllm.read(idx, prefix=engine_prefix, engine="ray")
        waiting = sig.waiting + (router_queue or 0.0)
        requests = sig.requests_total
        if requests is None:
            requests = counter_sum(idx, "ray_serve_deployment_request_counter_total",
                                   "ray_serve_deployment_request_counter")
        return replace(sig, waiting=waiting, requests_total=requests)
    ongoing = gauge_sum(idx, ONGOING)
    if router_queue is None and ongoing is None:
        raise PayloadError(f"missing required metrics for waiting/running: none of {QUEUED}, {ONGOING}, "
                           "ray_vllm_num_requests_waiting/running in the payload")
    return ReplicaSignal(
        engine="ray",
        waiting=required(router_queue, "waiting", (QUEUED,)),
        running=required(ongoing, "running", (ONGOING,)),
        requests_total=counter_sum(idx, "ray_serve_deployment_request_counter_total",
                                   "ray_serve_deployment_request_counter"),
    )
