"""What the detectors read and what they report (pure data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Finding kinds and the layer each one names (the orchestration guidance: add a layer only when a
# named failure repeats).
COLD_START = "cold-start-slo"
PREFILL_INTERFERENCE = "prefill-interference"
QUOTA_CONTENTION = "quota-contention"
PARTIAL_GANG = "partial-gang"
ENGINE_OOM = "engine-oom"
KINDS = (COLD_START, PREFILL_INTERFERENCE, QUOTA_CONTENTION, PARTIAL_GANG, ENGINE_OOM)

NEXT_LAYER = {
    COLD_START: "warm capacity: a warm pool (warmscale.io/min-ready, standby, prestage-nodes) so that scale-ups "
                "land on ready or pre-staged capacity; for Ray Serve, the warmscale Ray Serve policy and a RayCluster "
                "worker group kept warm (manifests/examples/rayservice/, docs/gangs-queues.md)",
    PREFILL_INTERFERENCE: "a chunked-prefill budget first (vLLM --max-num-batched-tokens, SGLang "
                          "--chunked-prefill-size), then prefill/decode disaggregation (role: prefill|decode)",
    QUOTA_CONTENTION: "quotas: a GPU ResourceQuota per namespace, or Kueue ClusterQueues with borrowing "
                      "(what warmscale does and does not do with them yet: docs/gangs-queues.md); small models on "
                      "MIG slices or time-sliced GPUs instead of whole ones (manifests/examples/vllm-mig/, "
                      "docs/warmpool.md)",
    PARTIAL_GANG: "gang admission: all pods of a replica admitted together (Kueue, Volcano, scheduler-plugins "
                  "coscheduling PodGroup); a LeaderWorkerSet's warm capacity held as whole placeholder gangs "
                  "(docs/gangs-queues.md)",
    ENGINE_OOM: "parallelism: tensor parallelism across a node's GPUs (--tensor-parallel-size), then pipeline "
                "parallelism across nodes (--pipeline-parallel-size) as LeaderWorkerSet groups "
                "(docs/gangs-queues.md)",
}


@dataclass(frozen=True)
class Policy:
    """When a failure counts, and when it has repeated enough to speak (defaults: 3 in 24 h)."""

    min_episodes: int = 3
    window_s: float = 24 * 3600.0
    cold_start_min_s: float = 60.0  # a scale-up counts as cold when new capacity took at least this long
    pending_threshold_s: float = 600.0  # GPU pods pending this long (quota contention)
    gang_threshold_s: float = 300.0  # a replica's pods partly scheduled this long
    itl_window_s: float = 300.0  # windows in which ITL is correlated with prefill tokens
    itl_min_samples: int = 6
    itl_correlation: float = 0.7
    itl_rise: float = 1.5  # ITL in the window rose by at least this factor
    load_kv_high: float = 0.85  # an engine restart counts "at load" above this KV usage ...
    load_window_s: float = 120.0  # ... or with running requests within this long before it


@dataclass(frozen=True, slots=True)
class ScaleSample:
    """A ScaledObject's state at ``at``: what the scaler asked for and what served."""

    at: float
    namespace: str
    workload: str
    desired: int
    ready: int
    ttft_s: float | None = None  # the windowed TTFT quantile the SLO is held to
    slo_s: float | None = None
    time_to_ready_s: float | None = None  # measured (warm pool) or configured look-ahead


@dataclass(frozen=True)
class LatencySample:
    at: float
    namespace: str
    workload: str
    itl_s: float  # decode inter-token latency (mean or a quantile over the scrape interval)
    prefill_tokens_per_s: float  # prompt tokens entering prefill per second


@dataclass(frozen=True)
class LoadSample:
    at: float
    namespace: str
    pod: str
    running: float
    kv_usage: float | None = None


@dataclass(frozen=True)
class Termination:
    """A container's last termination (pod status ``lastState.terminated``) and its restart count."""

    at: float
    reason: str
    exit_code: int
    message: str = ""
    restarts: int = 1


@dataclass(frozen=True)
class PodRecord:
    namespace: str
    name: str
    workload: str  # owning workload (Deployment/StatefulSet/LeaderWorkerSet/...) name, else the pod's
    created_at: float
    gpus: float = 0.0
    scheduled_at: float | None = None
    phase: str = "Pending"
    pending_reason: str = ""
    gang: str | None = None  # the replica (gang) the pod belongs to, when it is one of several pods
    gang_size: int | None = None
    terminations: tuple[Termination, ...] = ()
    deleted: bool = False


@dataclass(frozen=True)
class Signals:
    """Everything recorded over the look-back window. ``gpu_quota_namespaces is None``: unknown (no
    quota finding then)."""

    scale: tuple[ScaleSample, ...] = ()
    latency: tuple[LatencySample, ...] = ()
    load: tuple[LoadSample, ...] = ()
    pods: tuple[PodRecord, ...] = ()
    gpu_quota_namespaces: frozenset[str] | None = None


@dataclass(frozen=True)
class Episode:
    at: float
    evidence: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    kind: str
    namespace: str
    workload: str
    episodes: tuple[Episode, ...]
    next_layer: str
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "finding": self.kind, "namespace": self.namespace, "workload": self.workload,
            "episodes": len(self.episodes), "summary": self.summary, "next_layer": self.next_layer,
            "evidence": [{"at": e.at, "evidence": e.evidence, **({"data": e.data} if e.data else {})}
                         for e in self.episodes],
        }
