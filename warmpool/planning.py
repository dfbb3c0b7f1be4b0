"""(workload, nodes, pods, jobs, scaled object, now) -> the desired actions (pure, no I/O).

The controller is level-triggered: every reconcile recomputes the whole plan from the cached
cluster state and applies the difference, so a restart or a missed event changes nothing. Names of
everything created are deterministic (see :mod:`warmpool.objects`), so applying a plan twice never
duplicates an object.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from warmscale.common.gpu_resources import NVIDIA_GPU, effective_gpu_product, node_product
from warmscale.scaler.bursts import MAX_LEVEL, BurstStats, warm_and_cold
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import PREFIX, AnnotationError, WarmConfig, parse_annotations
from warmscale.warmpool.cache_roots import (
    DEFAULT_ALLOWED,
    DEFAULT_FILE_SOURCES,
    cache_root_problem,
    file_source_problem,
)
from warmscale.warmpool.gangs import plan_gangs
from warmscale.warmpool.kueue import QueueQuota, quota_below_floor
from warmscale.warmpool.matching import free_fit, matching_nodes, replica_requests
from warmscale.warmpool.model_uri import staged_label_key
from warmscale.warmpool.raycluster import GROUP_ANNOTATION as RAY_GROUP_KEY
from warmscale.warmpool.raycluster import RAYCLUSTER_KIND

Obj = Mapping[str, Any]
RETRY_COOLDOWN_S = 900.0  # a Job/pull pod that failed for good is retried after this long
WARM_STATES = ("placeholder+staged", "staged", "cold")
# standby: auto. A placeholder at level k is kept when the replica-seconds of missing capacity it
# would have saved in the recorded bursts, weighted by MISS_WEIGHT, per second of evidence reach 1 (it
# holds one replica's GPUs every second). MISS_WEIGHT prices a replica-second of missing capacity in
# GPU-seconds: 1 / (1 - 0.95), the miss budget of the default TTFT quantile (at weight 1 no placeholder
# could ever pay against the burst hold: docs/policy.md). Evidence shorter than MIN_EVIDENCE_S counts
# as that long (quiet for the rest), so one early burst does not buy a placeholder.
MISS_WEIGHT = 20.0
MIN_EVIDENCE_S = 3600.0


def _meta(o: Obj) -> Mapping[str, Any]:
    return o.get("metadata") or {}


def _name(o: Obj) -> str:
    return str(_meta(o).get("name", ""))


def _labels(o: Obj) -> Mapping[str, str]:
    return _meta(o).get("labels") or {}


def parse_time(s: str | None) -> float | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class StandbyEvidence:
    """What ``standby: auto`` is sized from (gathered by the controller, pure data).

    ``bursts``: the scaler's published statistics (None: none yet); ``readable``: False when the store
    could not be read (then the last size is kept); ``last``: the size chosen before (this leader's,
    else the last published :class:`~scaler.warm_status.WarmStatus`'s); ``time_to_ready``: the
    measured medians per warm state (for the workload's GPU product where known)."""

    bursts: BurstStats | None = None
    readable: bool = True
    last: int | None = None
    time_to_ready: Mapping[str, float] = field(default_factory=dict)


def standby_time_to_ready(medians: Mapping[str, float],
                          by_gpu: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """The medians ``standby: auto`` weighs warm against cold with: the workload's, or those of its one
    GPU product where every measurement comes from one product."""
    out = dict(medians)
    if by_gpu and len(by_gpu) == 1:
        out.update(next(iter(by_gpu.values())))
    return out


def auto_standby(ev: StandbyEvidence, fleet: int) -> tuple[int, str]:
    """(placeholders, why) for ``standby: auto``; pure. The math is in docs/policy.md.

    Size: the 95th percentile of the bursts' rise as a share of the fleet they rose from, times the
    fleet now (at least one replica), at most MAX_LEVEL. Then, level by level from the first, a
    placeholder stays only if it pays: over the recorded bursts at its level, a replica on it is ready
    after the warm time-to-ready ``Tw`` instead of the cold ``Tc``, saving ``min(D, Tc) - min(D, Tw)``
    replica-seconds of missing capacity for a burst lasting ``D``; summed and divided by the evidence
    span (at least MIN_EVIDENCE_S) that must reach 1 / MISS_WEIGHT, the replica-seconds the
    placeholder holds per second. With the store unreadable the last size is kept."""
    if not ev.readable:
        if ev.last is None:
            return 0, "store unreadable, no size chosen before: 0"
        return ev.last, "store unreadable: last size kept"
    st = ev.bursts
    if st is None:
        return 0, "no burst statistics published yet"
    # the warm pool's own medians; the scaler's cold time where it measured none (warm: the prior share)
    medians = {"cold": st.cold_s} if st.cold_s > 0 else {}
    medians.update(ev.time_to_ready)
    tw, tc = warm_and_cold(medians, 0.0)
    if tc <= 0:
        return 0, "no time-to-ready known yet"
    if tc <= tw:
        return 0, f"a warm start ({tw:.0f} s) is not faster than a cold one ({tc:.0f} s)"
    size = min(MAX_LEVEL, math.ceil(st.rise_share_p95 * max(1, fleet) - 1e-9))
    if size <= 0:
        return 0, "no burst rose above the provisioned capacity"
    span = max(st.span_s, MIN_EVIDENCE_S)
    n = 0
    why = ""
    for k in range(1, size + 1):
        saved = sum(min(d, tc) - min(d, tw) for d in st.episodes.get(k, ()))
        value = MISS_WEIGHT * saved / span
        if value < 1.0:
            why = (f"placeholder {k} would save {value:.2f} replica-s of missing capacity per replica-s held "
                   f"(bursts at that level in {span:.0f} s, warm {tw:.0f} s vs cold {tc:.0f} s)")
            break
        n = k
    if n == size:
        why = f"p95 burst rise {st.rise_share_p95:.2f} of the fleet ({fleet}); every level pays"
    return n, why


@dataclass
class Plan:
    config: WarmConfig | None = None
    error: AnnotationError | None = None
    matching: list[str] = field(default_factory=list)
    stage_nodes: list[str] = field(default_factory=list)  # chosen for image + weights
    staged_nodes: list[str] = field(default_factory=list)  # chosen and complete (label present)
    prepulled_nodes: list[str] = field(default_factory=list)
    create_stage_jobs: list[str] = field(default_factory=list)  # node names
    delete_stage_jobs: list[str] = field(default_factory=list)  # job names
    label_nodes: list[str] = field(default_factory=list)  # add the staged label (Job succeeded)
    create_prepull: list[str] = field(default_factory=list)  # node names
    delete_prepull: list[str] = field(default_factory=list)  # pod names
    create_placeholders: list[int] = field(default_factory=list)  # indices
    create_gang_members: list[tuple[int, int, str | None]] = field(default_factory=list)  # (gang, member, domain)
    delete_placeholders: list[str] = field(default_factory=list)  # pod names
    create_pod_groups: list[int] = field(default_factory=list)  # Volcano: gang indices (before their members)
    delete_pod_groups: list[str] = field(default_factory=list)  # Volcano: PodGroup names
    pinned: list[str] | None = None  # nodes placeholders are pinned to (None: workload constraints only)
    placeholders_ready: int = 0
    standby: int = 0  # placeholders wanted (the fixed count, or what auto decided)
    standby_reason: str = ""
    floor: int = 0
    floor_raised: bool = False
    scaledobject: str = "none"  # none | create | patch | delete | foreign
    scaledobject_body: dict[str, Any] | None = None
    scale_replicas_to: int | None = None  # no ScaledObject: raise spec.replicas to the floor
    events: list[Event] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)

    def status_json(self) -> str:
        return json.dumps(self.status, sort_keys=True, separators=(",", ":"))


def _job_state(job: Obj) -> tuple[str, float | None]:
    """('succeeded'|'failed'|'running', time of the terminal condition)."""
    st = job.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("status") != "True":
            continue
        if c.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded", parse_time(c.get("lastTransitionTime"))
        if c.get("type") in ("Failed", "FailureTarget"):
            return "failed", parse_time(c.get("lastTransitionTime"))
    if (st.get("succeeded") or 0) > 0 and not (job.get("spec") or {}).get("completions", 1) > 1:
        return "succeeded", None
    return "running", None


def prepull_state(pod: Obj) -> str:
    """'pulled' when every container's image is local, 'failed' when the pod ended otherwise, else 'pulling'."""
    st = pod.get("status") or {}
    statuses = st.get("containerStatuses") or []
    n = len((pod.get("spec") or {}).get("containers") or [])

    def pulled(cs: Obj) -> bool:
        state = cs.get("state") or {}
        return bool(cs.get("imageID")) or "running" in state or "terminated" in state

    if n and len(statuses) >= n and all(pulled(cs) for cs in statuses):
        return "pulled"
    if st.get("phase") in ("Failed", "Succeeded"):
        return "failed"
    return "pulling"


def _finished_at(pod: Obj, now: float) -> float:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            t = parse_time(c.get("lastTransitionTime"))
            if t is not None:
                return t
    return parse_time(_meta(pod).get("creationTimestamp")) or now


def model_source_problem(cfg: WarmConfig, cache_roots: Sequence[str] = DEFAULT_ALLOWED,
                         file_sources: Sequence[str] = DEFAULT_FILE_SOURCES) -> str | None:
    """Why ``cfg``'s model source may not be read (a ``file://`` host path outside ``file_sources``, a
    system path, or one overlapping a cache root), or None."""
    uri = cfg.model_uri
    if uri is None or uri.scheme != "file":
        return None
    return file_source_problem(uri.path, file_sources, [*cache_roots, cfg.cache_root])


def choose_stage_nodes(candidates: Sequence[Obj], n: int, label_key: str | None,
                       has_job: set[str], has_room: set[str], topology_key: str = "") -> list[str]:
    """Deterministic, sticky choice: staged first, then in-progress, then nodes with room for one more
    replica (where a placeholder can hold capacity), then by name. With ``topology_key`` (a gang's
    exclusive topology) whole domains are taken together, the best-ranked domain first, so the nodes a
    group would use are warm together; nodes without the label come last."""

    def rank(node: Obj) -> tuple[int, str]:
        name = _name(node)
        if label_key and _labels(node).get(label_key) == "true":
            return 0, name
        if name in has_job:
            return 1, name
        if name in has_room:
            return 2, name
        return 3, name

    ordered = sorted(candidates, key=rank)
    if topology_key:
        best: dict[str, int] = {}
        for i, node in enumerate(ordered):
            best.setdefault(str(_labels(node).get(topology_key) or ""), i)
        ordered = sorted(ordered, key=lambda x: (not _labels(x).get(topology_key),
                                                 best[str(_labels(x).get(topology_key) or "")]))
    return [_name(x) for x in ordered[:n]]


WEBHOOK_POD_LABEL = "warmscale.io/enabled"


def scaledobject_action(existing: Obj | None, desired: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """What to do with the workload's ScaledObject: never touch one the controller does not own."""
    if existing is not None and not ob.is_managed(existing):
        return "foreign", None
    if desired is None:
        return ("delete", None) if existing is not None else ("none", None)
    if existing is None:
        return "create", desired
    want = {"spec": desired["spec"], "labels": desired["metadata"]["labels"]}
    have = {"spec": {k: (existing.get("spec") or {}).get(k) for k in desired["spec"]},
            "labels": {k: _labels(existing).get(k) for k in desired["metadata"]["labels"]}}
    if want != have:
        return "patch", {"metadata": {"labels": desired["metadata"]["labels"]}, "spec": desired["spec"]}
    return "none", None


def plan(wl: ob.Workload, nodes: Sequence[Obj], pods: Sequence[Obj], jobs: Sequence[Obj],
         scaledobject: Obj | None, now: datetime, *, scaler_address: str = "warmscale-scaler.warmscale:9090",
         retry_cooldown_s: float = RETRY_COOLDOWN_S, allowed_roots: Sequence[str] = DEFAULT_ALLOWED,
         trigger_authentication: str = "", standby: StandbyEvidence | None = None,
         file_sources: Sequence[str] = DEFAULT_FILE_SOURCES, pod_groups: Sequence[Obj] = (),
         queue_quota: QueueQuota | None = None) -> Plan:
    """The whole desired state for one workload. ``pods``/``jobs``/``pod_groups`` (Volcano's) are those
    of its namespace.

    ``allowed_roots``: where cache roots may lie (the controller's ``--cache-root-allow``);
    ``file_sources``: where ``file://`` model sources may lie (``--file-source-allow``);
    ``trigger_authentication``: the ClusterTriggerAuthentication owned ScaledObjects reference;
    ``standby``: what ``standby: auto`` is sized from (None: no evidence, 0 placeholders);
    ``queue_quota``: the workload's Kueue queue as the controller read it (None: not in a queue, or
    unreadable: nothing is checked)."""
    try:
        cfg = parse_annotations(wl.annotations)
        if cfg.enabled and wl.invalid:
            raise AnnotationError(RAY_GROUP_KEY, wl.invalid)
        if cfg.enabled and cfg.autoscale and wl.kind == RAYCLUSTER_KIND:
            raise AnnotationError(PREFIX + "autoscale", "a RayCluster has no scale subresource, so KEDA cannot scale "
                                  "it: scale Serve replicas with warmscale.rayserve.policy (docs/gangs-queues.md)")
    except AnnotationError as exc:
        # Invalid input changes nothing: no creates, no deletes, no patches; only an Event.
        return Plan(error=exc, events=[Event("Warning", "InvalidAnnotation", str(exc))])
    if cfg.enabled and cfg.model_uri is not None and cfg.prestage_nodes > 0 and (
            why := cache_root_problem(cfg.cache_root, allowed_roots)) is not None:
        # A cache root is mounted read-write on nodes: a system path (or one outside the allow-list) is
        # refused like any invalid annotation - an Event, and nothing changes.
        err = AnnotationError(PREFIX + "cache-root", why)
        return Plan(error=err, events=[Event("Warning", "CacheRootRefused", str(err))])
    if cfg.enabled and (why := model_source_problem(cfg, allowed_roots, file_sources)) is not None:
        # A file:// source is mounted from the host into Jobs and engine pods and copied into the cache: a
        # path outside the allow-list (or a system path, or a cache root) is refused the same way.
        err = AnnotationError(PREFIX + "model-uri", why)
        return Plan(error=err, events=[Event("Warning", "ModelSourceRefused", str(err))])
    p = Plan(config=cfg)
    if not cfg.enabled:
        return p
    ts = now.timestamp()
    mine = ob.labels(wl, "x")[ob.WORKLOAD]
    spec = wl.pod_spec
    cands = matching_nodes(spec, nodes)
    p.matching = [_name(x) for x in cands]
    node_by_name = {_name(x): x for x in nodes}

    # --- where one more replica fits, not counting our own placeholders (they yield)
    others = [q for q in pods if not (ob.is_managed(q) and _labels(q).get(ob.ROLE) == "placeholder")]
    has_room = {_name(x) for x in cands if free_fit(spec, x, others)}

    # --- staging Jobs (weights) and the staged label
    uri = cfg.model_uri
    key = cfg.cache_key(wl.namespace) if uri else None
    label_key = staged_label_key(key) if key else None
    my_jobs = {_name(j): j for j in jobs if _labels(j).get(ob.WORKLOAD) == mine and _labels(j).get(ob.ROLE) == "stage"}
    job_nodes = {str(_meta(j).get("annotations", {}).get(ob.NODE_ANN, "")) for j in my_jobs.values()}
    # a group uses group_size nodes: prestage-nodes counts groups' worth of nodes, kept by topology domain
    p.stage_nodes = choose_stage_nodes(cands, cfg.prestage_nodes * wl.group_size, label_key, job_nodes, has_room,
                                       topology_key=wl.topology_key)
    wanted_jobs: set[str] = set()
    if key is not None and label_key is not None:
        for node in p.stage_nodes:
            jname = ob.stage_job_name(key, node)
            wanted_jobs.add(jname)
            if _labels(node_by_name[node]).get(label_key) == "true":
                p.staged_nodes.append(node)
                continue
            job = my_jobs.get(jname)
            if job is None:
                p.create_stage_jobs.append(node)
                continue
            state, at = _job_state(job)
            if state == "succeeded":
                p.label_nodes.append(node)
                p.staged_nodes.append(node)
            elif state == "failed":
                p.events.append(Event("Warning", "StagingFailed", f"staging {uri} on node {node} failed (Job {jname})"))
                if at is None or ts - at >= retry_cooldown_s:
                    p.delete_stage_jobs.append(jname)
    p.delete_stage_jobs += sorted(n for n in my_jobs if n not in wanted_jobs)

    # --- image pre-pull pods
    my_pulls = {_name(q): q for q in pods
                if _labels(q).get(ob.WORKLOAD) == mine and _labels(q).get(ob.ROLE) == "prepull"}
    wanted_pulls: set[str] = set()
    for node in p.stage_nodes:
        pname = ob.prepull_name(wl, node)
        wanted_pulls.add(pname)
        pod = my_pulls.get(pname)
        if pod is None:
            p.create_prepull.append(node)
            continue
        state = prepull_state(pod)
        if state == "pulled":
            p.prepulled_nodes.append(node)
        elif state == "failed":
            p.events.append(Event("Warning", "PrePullFailed", f"pulling images on node {node} failed (pod {pname})"))
            if ts - _finished_at(pod, ts) >= retry_cooldown_s:
                p.delete_prepull.append(pname)
    p.delete_prepull += sorted(n for n in my_pulls
                               if n not in wanted_pulls and not _meta(my_pulls[n]).get("deletionTimestamp"))

    # --- placeholders: how many (fixed, or auto from burst statistics), pinned to the warm nodes
    if cfg.standby_auto:
        p.standby, p.standby_reason = auto_standby(standby or StandbyEvidence(), wl.replicas)
    else:
        p.standby = cfg.standby
    warm = p.staged_nodes if uri is not None else p.prepulled_nodes
    p.pinned = sorted(warm) if cfg.prestage_nodes > 0 and warm else None
    if wl.is_gang:
        gp = plan_gangs(wl, p.standby, cands, pods, p.pinned, ts, pod_groups=pod_groups)
        p.create_gang_members, p.delete_placeholders, p.placeholders_ready = gp.create, gp.delete, gp.ready
        p.create_pod_groups, p.delete_pod_groups = gp.create_groups, gp.delete_groups
        if gp.unfit:
            p.events.append(Event("Warning", "GangDoesNotFit",
                                  f"placeholder gang {gp.unfit_gang} (of {p.standby}) not created: {gp.unfit}; "
                                  "no partial gang is held"))
    else:
        pin = ob.pin_hash(p.pinned)
        holders = [q for q in pods if _labels(q).get(ob.WORKLOAD) == mine and _labels(q).get(ob.ROLE) == "placeholder"]
        by_name = {_name(q): q for q in holders}
        for q in holders:
            if _meta(q).get("deletionTimestamp"):
                continue
            name = _name(q)
            idx = name.rsplit("-", 1)[-1]
            node = str((q.get("spec") or {}).get("nodeName") or "")
            phase = (q.get("status") or {}).get("phase")
            stale = (
                not idx.isdigit() or int(idx) >= p.standby
                or phase in ("Failed", "Succeeded")
                or (node and p.pinned is not None and node not in p.pinned)
                or (not node and (_meta(q).get("annotations") or {}).get(ob.PIN_ANN) != pin)
            )
            if stale:
                p.delete_placeholders.append(name)
        for i in range(p.standby):
            if ob.placeholder_name(wl, i) not in by_name:
                p.create_placeholders.append(i)
        p.placeholders_ready = sum(
            1 for q in holders if not _meta(q).get("deletionTimestamp") and _name(q) not in p.delete_placeholders
            and (q.get("status") or {}).get("phase") == "Running")

    # --- the webhook sees only pods labelled warmscale.io/enabled=true (its objectSelector)
    tmpl_labels = ((wl.template.get("metadata") or {}).get("labels") or {})
    if uri is not None and wl.kind == RAYCLUSTER_KIND:
        p.events.append(Event("Warning", "StagedCopyNotMounted",
                              "the webhook does not mutate RayCluster worker pods yet: the weights are staged in the "
                              "nodes' cache root, but the workers load them only if they mount it themselves"))
    elif uri is not None and tmpl_labels.get(WEBHOOK_POD_LABEL) != "true":
        p.events.append(Event("Warning", "PodsNotSentToWebhook",
                              f"the pod template lacks the label {WEBHOOK_POD_LABEL}: \"true\", so new pods do not "
                              "prefer staged nodes and do not load the staged copy (WARMSCALE_MODEL_PATH)"))

    # --- warm floor and the ScaledObject
    p.floor, p.floor_raised = cfg.floor_at(now)
    if p.floor_raised:
        p.events.append(Event("Normal", "ScaleToZeroRefused",
                              "min-ready floor is 0 but scale-to-zero is not allowed now: keeping 1 replica "
                              "(the scaler refuses zero until an allowed window)"))
    if queue_quota is not None:
        per_replica = sum(replica_requests(wl.member_spec(m)).get(NVIDIA_GPU, 0.0) for m in range(wl.group_size))
        short = quota_below_floor(queue_quota, p.floor, per_replica)
        if short is not None:
            p.events.append(Event("Warning", "KueueQuotaBelowFloor", short))
    desired = ob.scaled_object(wl, cfg, p.floor, scaler_address, trigger_authentication) if cfg.autoscale else None
    p.scaledobject, p.scaledobject_body = scaledobject_action(scaledobject, desired)
    if p.scaledobject == "foreign" and cfg.autoscale:
        p.events.append(Event("Warning", "ScaledObjectNotOwned",
                              f"ScaledObject {wl.name} exists and was not created by warmscale: left unchanged"))
    if scaledobject is None and not cfg.autoscale and wl.replicas < p.floor and wl.kind != RAYCLUSTER_KIND:
        p.scale_replicas_to = p.floor  # (a RayCluster group's replicas are KubeRay's and the Ray autoscaler's)

    p.status = {
        "floor": p.floor,
        "placeholders": f"{p.placeholders_ready}/{p.standby}",
        "staged": f"{len(p.staged_nodes)}/{cfg.prestage_nodes if uri else 0}",
        "prepulled": f"{len(p.prepulled_nodes)}/{cfg.prestage_nodes}",
        "matchingNodes": len(p.matching),
    }
    if cfg.standby_auto:
        p.status["standby"] = "auto"
    if cfg.prestage_nodes > len(cands):
        p.status["warning"] = f"only {len(cands)} nodes fit one replica"
    return p


# ---------------------------------------------------------------- time to ready


def warm_state(node_staged: bool, took_placeholder: bool) -> str:
    """Warm state a replica started from (one of WARM_STATES)."""
    if took_placeholder and node_staged:
        return "placeholder+staged"
    if node_staged:
        return "staged"
    return "cold"


def pod_time_to_ready(pod: Obj) -> float | None:
    """Seconds from creation to the Ready condition turning True, or None if not Ready yet."""
    created = parse_time(_meta(pod).get("creationTimestamp"))
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            t = parse_time(c.get("lastTransitionTime"))
            if created is not None and t is not None:
                return max(0.0, t - created)
    return None


class TimeToReady:
    """Rolling median of the last ``window`` measurements per warm state."""

    def __init__(self, window: int = 20) -> None:
        self._samples: dict[str, deque[float]] = {}
        self._seen: set[str] = set()
        self.window = window

    def observe(self, uid: str, state: str, seconds: float) -> bool:
        if uid in self._seen:
            return False
        self._seen.add(uid)
        self._samples.setdefault(state, deque(maxlen=self.window)).append(seconds)
        return True

    def medians(self) -> dict[str, float]:
        return {k: float(statistics.median(v)) for k, v in self._samples.items() if v}

    def seed(self, medians: Mapping[str, float]) -> None:
        """Start from medians a previous controller published (fail-over): one sample per warm state
        that has none yet, so the first real measurement already moves the median."""
        for state, seconds in medians.items():
            if not self._samples.get(state):
                self._samples.setdefault(state, deque(maxlen=self.window)).append(float(seconds))


def replica_gpu_product(node_labels: Mapping[str, str], pod_spec: Mapping[str, Any] | None) -> str:
    """The row a replica's time-to-ready is learned in: its node's GPU product as the replica gets it
    (``<GPU>-MIG-<profile>`` for a mixed-strategy slice, ``<GPU>-SHARED`` time-sliced; "" unlabelled),
    the same key the scaler reads (:mod:`warmscale.signals.gpus`)."""
    return effective_gpu_product(node_product(node_labels), pod_spec) or ""


class TimeToReadyByGpu:
    """:class:`TimeToReady` per GPU product of the node a replica started on ("" when unlabelled)."""

    def __init__(self) -> None:
        self.by_gpu: dict[str, TimeToReady] = {}

    def observe(self, gpu: str, uid: str, state: str, seconds: float) -> bool:
        return self.by_gpu.setdefault(gpu, TimeToReady()).observe(uid, state, seconds)

    def medians(self) -> dict[str, dict[str, float]]:
        return {g: m for g, t in self.by_gpu.items() if (m := t.medians())}

    def seed(self, by_gpu: Mapping[str, Mapping[str, float]]) -> None:
        for gpu, medians in by_gpu.items():
            self.by_gpu.setdefault(gpu, TimeToReady()).seed(medians)


def stale_stage_labels(nodes: Iterable[Obj], active_keys: set[str]) -> dict[str, list[str]]:
    """Per node, ``warmscale.io/staged-*`` labels of models no enabled workload uses any more."""
    out: dict[str, list[str]] = {}
    for n in nodes:
        stale = [k for k in _labels(n) if k.startswith("warmscale.io/staged-") and k not in active_keys]
        if stale:
            out[_name(n)] = sorted(stale)
    return out


# ---------------------------------------------------------------- cache clean-up


@dataclass
class CleanupPlan:
    # ns, key, uri, root, node, pinned ("" namespace-keyed entry, a SHA-256, or "legacy": see ob.evict_job)
    create_evict_jobs: list[tuple[str, str, str, str, str, str]] = field(default_factory=list)
    unlabel: list[tuple[str, str]] = field(default_factory=list)  # (node, label key): label + record removed
    delete_jobs: list[tuple[str, str]] = field(default_factory=list)  # (ns, job name)
    pending_namespaces: set[str] = field(default_factory=set)  # namespaces with stale caches not yet cleaned
    warnings: list[str] = field(default_factory=list)


def staged_record(node: Obj, key: str) -> dict[str, str] | None:
    """The node's record of what ``key`` staged: ns, uri, root and ``pinned`` ("" for an entry keyed by the
    namespace, the SHA-256 of one keyed by digest, "legacy" for an earlier controller's URI-only entry)."""
    raw = (_meta(node).get("annotations") or {}).get(key)
    try:
        rec = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) and rec.get(k) for k in ("ns", "uri", "root")):
        return None
    out = {k: str(rec[k]) for k in ("ns", "uri", "root")}
    sha = rec.get("sha256")
    if rec.get("layout") != ob.RECORD_LAYOUT:
        out["pinned"] = "legacy"
    elif isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha):
        out["pinned"] = sha
    elif sha is not None:
        return None
    else:
        out["pinned"] = ""
    return out


def cleanup_plan(nodes: Sequence[Obj], evict_jobs: Sequence[Obj], active_keys: set[str],
                 scope: str | Collection[str] | None = None,
                 allowed_roots: Sequence[str] = DEFAULT_ALLOWED) -> CleanupPlan:
    """Evict caches of models no enabled (and not deleting) workload uses, then drop their node labels.

    Per stale ``(node, key)``: no record of what was staged (label from an older controller) -> only the
    label goes (the stager's LRU reclaims the disk); else an evict Job on that node; once it succeeded
    (or failed for good: Warning, LRU later) the label and record are removed and the Job deleted.
    Evict Jobs of keys that became active again are deleted. A controller scoped to the namespace(s)
    ``scope`` only touches records of those (it cannot see the other namespaces' workloads). A record whose
    cache root is not an allowed one (node annotations are not proof of anything) gets no Job: the label
    and record are dropped with a warning."""
    p = CleanupPlan()
    if isinstance(scope, str):
        scope = {scope}
    jobs = {(str(_meta(j).get("namespace")), _name(j)): j for j in evict_jobs}
    wanted: set[tuple[str, str]] = set()
    for node_name, keys in stale_stage_labels(nodes, active_keys).items():
        node = next(n for n in nodes if _name(n) == node_name)
        for key in keys:
            rec = staged_record(node, key)
            if rec is None:
                if scope is None:
                    p.unlabel.append((node_name, key))
                continue
            if scope is not None and rec["ns"] not in scope:
                continue
            if (why := cache_root_problem(rec["root"], allowed_roots)) is not None:
                p.warnings.append(f"not evicting {rec['uri']} on node {node_name}: {why}; label removed")
                p.unlabel.append((node_name, key))
                continue
            ident = (rec["ns"], ob.evict_job_name(key, node_name))
            wanted.add(ident)
            p.pending_namespaces.add(rec["ns"])
            job = jobs.get(ident)
            if job is None:
                p.create_evict_jobs.append((rec["ns"], key, rec["uri"], rec["root"], node_name, rec["pinned"]))
                continue
            state, _ = _job_state(job)
            if state == "running":
                continue
            if state == "failed":
                p.warnings.append(f"evicting {rec['uri']} on node {node_name} failed (Job {ident[1]}); "
                                  "label removed, the cache's LRU budget reclaims the disk")
            p.unlabel.append((node_name, key))
            p.delete_jobs.append(ident)
    p.delete_jobs += sorted(k for k in jobs if k not in wanted and not _meta(jobs[k]).get("deletionTimestamp"))
    return p
