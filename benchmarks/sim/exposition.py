"""The simulated replicas' ``/metrics`` as Prometheus text, read back through the production code.

- :func:`render_vllm` writes one engine's state as vLLM V1 exposes it (names, types, bucket bounds of
  ``vllm/v1/metrics/loggers.py``; ``shared/reference/engine-metrics.md`` section 1).
- :class:`SimScrapeSource` is a :class:`signals.sources.base.Source`: every read renders each ready
  replica's text and parses it with :func:`signals.engines.parse_payload` (the production parser), so
  warmscale's :class:`signals.sources.collector.SnapshotCollector` builds its snapshot exactly as it
  does from HTTP scrapes. :class:`FastSource` builds the same readings from the engine objects
  (``--fast-signals``); ``tests/bench/test_signal_path.py`` checks them equal tick by tick.
- :class:`PromScrape` is what Prometheus holds for the Prometheus-fed baselines: every ``interval``
  seconds each ready replica's rendered text (and a dcgm-exporter line for its GPU, and the router's
  EPP queue gauge) is parsed with :func:`signals.parsing.parse_text` and the samples kept until the
  next scrape.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from warmscale.benchmarks.sim.engine import Engine, Hist
from warmscale.signals.engines import parse_payload
from warmscale.signals.engines import vllm as vllm_parser
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import QueueReading, ReplicaReading, ReplicaSignal
from warmscale.signals.parsing import parse_text
from warmscale.signals.sources.base import SourceResult

MODEL = "llm"
_LABELS = f'engine="0",model_name="{MODEL}"'


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf"
    if float(v).is_integer():
        return repr(float(v))
    return repr(float(v))


def _hist_lines(out: list[str], name: str, help_: str, h: Hist) -> None:
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} histogram")
    for le, c in h.cumulative():
        out.append(f'{name}_bucket{{{_LABELS},le="{_num(le)}"}} {_num(c)}')
    out.append(f"{name}_sum{{{_LABELS}}} {_num(h.sum)}")
    out.append(f"{name}_count{{{_LABELS}}} {_num(h.count)}")


def _one(out: list[str], name: str, kind: str, help_: str, value: float, extra: str = "") -> None:
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} {kind}")
    labels = _LABELS + (("," + extra) if extra else "")
    sample = name if kind != "counter" or name.endswith("_total") else name + "_total"
    out.append(f"{sample}{{{labels}}} {_num(value)}")


def render_vllm(e: Engine) -> str:
    """One replica's ``/metrics`` (vLLM V1 names and types)."""
    out: list[str] = []
    _one(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         float(e.running_n))
    _one(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         float(e.waiting_n))
    _one(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage())
    _one(out, "vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
         e.preemptions_total)
    _one(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", e.prompt_tokens_total)
    # Prefix caching (warmscale/simulation/prefix_cache.py; 0 on traces without block hashes, as V1 exports it
    # with nothing cached): the capacity floor subtracts the hits from the prompt tokens.
    _one(out, "vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.", getattr(e, "prefix_queries_total", 0.0))
    _one(out, "vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
         getattr(e, "prefix_hits_total", 0.0))
    _one(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         e.generation_tokens_total)
    _one(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.",
         e.requests_total, 'finished_reason="length"')
    _hist_lines(out, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", e.h_ttft)
    _hist_lines(out, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", e.h_itl)
    _hist_lines(out, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e.h_e2e)
    _hist_lines(out, "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.", e.h_queue)
    _hist_lines(out, "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.", e.h_prefill)
    _hist_lines(out, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", e.h_prompt)
    _hist_lines(out, "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.", e.h_decode)
    _hist_lines(out, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", e.h_iter)
    xfer = getattr(e, "h_xfer", None)  # a P/D decode instance with the NIXL connector (benchmarks/sim/pd.py)
    if xfer is not None:
        _hist_lines(out, "vllm:nixl_xfer_time_seconds", "Histogram of transfer duration for NIXL KV Cache transfers.",
                    xfer)
    return "\n".join(out) + "\n"


def _histogram(h: Hist) -> Histogram:
    return Histogram(buckets=tuple(h.cumulative()), sum=h.sum, count=h.count)


def engine_signal(e: Engine) -> ReplicaSignal:
    """What :func:`signals.engines.vllm.read` returns for :func:`render_vllm`'s text, built directly."""
    return ReplicaSignal(
        engine="vllm",
        waiting=float(e.waiting_n),
        running=float(e.running_n),
        kv_usage=min(1.0, e.kv_usage()),
        ttft=_histogram(e.h_ttft),
        itl=_histogram(e.h_itl),
        prompt_tokens_total=e.prompt_tokens_total,
        generation_tokens_total=e.generation_tokens_total,
        requests_total=e.requests_total,
        preemptions_total=e.preemptions_total,
        max_running=None,
        kv_transfer_seconds_total=e.h_xfer.sum if getattr(e, "h_xfer", None) is not None else None,
        kv_transfers_total=e.h_xfer.count if getattr(e, "h_xfer", None) is not None else None,
        prefill_seconds_total=e.h_prefill.sum,
        prefills_total=float(e.h_prefill.count),
        prefill_prompt_tokens_total=e.h_prompt.sum,
        prefix_cache_hits_total=getattr(e, "prefix_hits_total", 0.0),
    )


class SimScrapeSource:
    """The ``endpoints`` source of a simulated fleet: render, then parse with the production parser."""

    name = "endpoints"

    def __init__(self, pods: Callable[[], list[Any]], queue: Callable[[], float] | None = None,
                 *, fast: bool = False) -> None:
        self._pods = pods
        self._queue = queue
        self.fast = fast

    async def read(self, now: float) -> SourceResult:
        readings = []
        for pod in self._pods():
            e = pod.engine
            e.sync(now)
            if self.fast:
                sig = engine_signal(e)
            else:
                sig = parse_payload(render_vllm(e), "vllm")
            readings.append(ReplicaReading(replica=pod.name, observed_at=now, signal=sig))
        queues: tuple[QueueReading, ...] = ()
        if self._queue is not None:
            queues = (QueueReading(name="gateway", observed_at=now, length=float(self._queue())),)
        return SourceResult(replicas=tuple(readings), queues=queues)

    async def aclose(self) -> None:
        return None


def render_dcgm(pod: str, util: float) -> str:
    return ("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",namespace="bench",pod="{pod}"}} {_num(round(util * 100.0, 6))}\n')


def render_epp(queue: float) -> str:
    return ("# HELP llm_d_epp_flow_control_queue_size Requests held by the endpoint picker.\n"
            "# TYPE llm_d_epp_flow_control_queue_size gauge\n"
            f'llm_d_epp_flow_control_queue_size{{pool="{MODEL}"}} {_num(queue)}\n')


class PromScrape:
    """What Prometheus holds: each ready pod's samples as of its last scrape (one global interval)."""

    def __init__(self, interval_s: float = 15.0, *, fast: bool = False, phase_s: float = 0.0) -> None:
        self.interval = interval_s
        self.next_at = phase_s
        self.fast = fast
        self.samples: list[dict[str, float]] = []
        self.names: list[str] = []  # the pod of each sample
        self.router_queue = 0.0
        self.pending = 0

    def maybe_scrape(self, now: float, pods: list[Any], router_queue: float = 0.0, pending: int = 0) -> bool:
        if now + 1e-9 < self.next_at:
            return False
        self.next_at = now + self.interval
        out = []
        for pod in pods:
            e = pod.engine
            e.sync(now)
            util = pod.gpu_util(now)
            if self.fast:
                out.append({"waiting": float(e.waiting_n), "running": float(e.running_n),
                            "kv": min(1.0, e.kv_usage()), "util": round(util * 100.0, 6) / 100.0})
                continue
            sig = vllm_parser.read(parse_text(render_vllm(e)))
            dcgm = parse_text(render_dcgm(pod.name, util))
            u = dcgm.total("DCGM_FI_DEV_GPU_UTIL")
            out.append({"waiting": sig.waiting, "running": sig.running, "kv": sig.kv_usage or 0.0,
                        "util": (u or 0.0) / 100.0})
        self.samples = out
        self.names = [pod.name for pod in pods]
        if self.fast:
            self.router_queue = float(router_queue)
        else:
            self.router_queue = parse_text(render_epp(float(router_queue))).total(
                "llm_d_epp_flow_control_queue_size") or 0.0
        self.pending = pending  # kube-state-metrics: pods not ready
        return True

    def sum(self, key: str) -> float:
        return sum(s[key] for s in self.samples)

    def avg(self, key: str) -> float | None:
        return self.sum(key) / len(self.samples) if self.samples else None
