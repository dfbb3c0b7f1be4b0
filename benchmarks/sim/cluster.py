"""Pods, nodes, the warm pool and GPU accounting for one policy's simulated fleet.

- A new pod lands, in order of preference, on a warm placeholder (warmscale's warm pool: GPU held,
  image pulled, weights and compile cache staged), on a node a pod left recently (the cluster
  autoscaler keeps an unneeded node ``node_idle_s``, 10 min by default; the image is still there),
  or on a new node (cold). Its start-up follows :mod:`warmpool.startup_model`.
- Deleted pods stop taking requests, hand their queued requests back to the router and finish
  the ones in flight (graceful drain); their node then idles or becomes a placeholder again.
- Every GPU that is held costs: starting, serving and draining pods, idle nodes and placeholders
  (also while they are being provisioned and staged).
"""

from __future__ import annotations

from collections import Counter, deque

from benchmarks.sim.engine import Engine, EngineProfile, Request
from warmpool.startup_model import (
    COLD,
    PLACEHOLDER_STAGED,
    RETAINED_NODE,
    StartupProfile,
    WarmState,
    staging_time,
    time_to_ready,
)


class Pod:
    __slots__ = ("busy_mark", "created_at", "engine", "name", "ready_at", "state", "util_mark", "warm")

    def __init__(self, name: str, created_at: float, ready_at: float, warm: str, engine: Engine) -> None:
        self.name = name
        self.created_at = created_at
        self.ready_at = ready_at
        self.state = "starting"
        self.warm = warm
        self.engine = engine
        self.util_mark = (created_at, 0.0)  # (time, busy_s) at the previous utilisation read

    def gpu_util(self, now: float) -> float:
        """Busy share since the previous read (DCGM_FI_DEV_GPU_UTIL over the scrape interval), 0..1."""
        t0, b0 = self.util_mark
        b1 = self.engine.busy_s
        self.util_mark = (now, b1)
        span = now - t0
        return min(1.0, (b1 - b0) / span) if span > 0 else 0.0


class Cluster:
    def __init__(self, engine: EngineProfile, startup: StartupProfile, *, standby: int = 0,
                 node_idle_s: float = 600.0, instant: bool = False, max_pods: int = 1000) -> None:
        self.ep = engine
        self.sp = startup
        self.gpus = engine.gpus_per_replica
        self.standby = standby
        self.node_idle_s = node_idle_s
        self.instant = instant
        self.max_pods = max_pods
        self.spec = 0
        self.pods: list[Pod] = []  # starting + ready, creation order
        self.draining: list[Pod] = []
        self.idle_nodes: list[float] = []  # expiry times
        self.placeholders: list[float] = []  # available-at times (GPU held from creation)
        self.gateway: deque[Request] = deque()
        self.gateway_n = 0
        self.gpu_seconds = 0.0
        self.cold_starts = 0
        self.starts: Counter[str] = Counter()
        self.max_replicas = 0
        self._seq = 0
        self.ttft_sink: list[tuple[float, float, int]] = []

    # ---- views ---------------------------------------------------------------------------------
    def ready_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.state == "ready"]

    def n_ready(self) -> int:
        return sum(1 for p in self.pods if p.state == "ready")

    def n_starting(self) -> int:
        return sum(1 for p in self.pods if p.state == "starting")

    def placeholders_ready(self, now: float) -> int:
        return sum(1 for t in self.placeholders if t <= now)

    def waiting_total(self) -> int:
        return self.gateway_n + sum(p.engine.waiting_n for p in self.pods) + sum(
            p.engine.waiting_n for p in self.draining)

    # ---- setup -----------------------------------------------------------------------------------
    def start_ready(self, n: int, now: float) -> None:
        """``n`` pods already serving at ``now`` (the fleet before the trace starts), plus the warm pool."""
        for _ in range(n):
            pod = self._new_pod(now, now, "initial")
            pod.state = "ready"
            self.pods.append(pod)
        self.spec = n
        self.placeholders = [now] * self.standby
        self.max_replicas = max(self.max_replicas, n)

    def _new_pod(self, now: float, ready_at: float, warm: str) -> Pod:
        self._seq += 1
        return Pod(f"pod-{self._seq}", now, ready_at, warm, Engine(self.ep))

    # ---- actuation -------------------------------------------------------------------------------
    def set_spec(self, n: int, now: float) -> None:
        self.spec = max(0, min(self.max_pods, n))
        self.reconcile(now)

    def reconcile(self, now: float) -> None:
        while len(self.pods) < self.spec:
            self._create(now)
        if len(self.pods) > self.spec:
            self._delete(len(self.pods) - self.spec, now)
        self.max_replicas = max(self.max_replicas, len(self.pods))

    def _create(self, now: float) -> None:
        warm: WarmState
        avail = [i for i, t in enumerate(self.placeholders) if t <= now]
        if self.instant:
            label, ttr = "instant", 0.0
        elif avail:
            self.placeholders.pop(avail[0])
            warm, label = PLACEHOLDER_STAGED, "placeholder+staged"
            ttr = time_to_ready(self.sp, warm)
        elif self.idle_nodes:
            self.idle_nodes.pop(0)
            warm, label = RETAINED_NODE, "retained-node"
            ttr = time_to_ready(self.sp, warm)
        else:
            warm, label = COLD, "cold"
            ttr = time_to_ready(self.sp, warm)
            self.cold_starts += 1
        self.starts[label] += 1
        self.pods.append(self._new_pod(now, now + ttr, label))
        self._replenish(now)

    def _replenish(self, now: float) -> None:
        """The warm-pool controller keeps ``standby`` placeholders (held GPU, staged node)."""
        while len(self.placeholders) < self.standby:
            if self.idle_nodes:
                self.idle_nodes.pop(0)
                self.placeholders.append(now + staging_time(self.sp, new_node=False))
            else:
                self.placeholders.append(now + staging_time(self.sp, new_node=True))

    def _delete(self, k: int, now: float) -> None:
        # ReplicaSet order: not-ready pods first (newest first), then the least loaded ready pods.
        starting = [p for p in self.pods if p.state == "starting"]
        starting.sort(key=lambda p: -p.created_at)
        victims = starting[:k]
        if len(victims) < k:
            ready = sorted(self.ready_pods(), key=lambda p: (p.engine.outstanding, -p.created_at))
            victims += ready[: k - len(victims)]
        for pod in victims:
            self.pods.remove(pod)
            if pod.state == "starting":
                self._free_node(now)
            else:
                pod.state = "draining"
                for r in pod.engine.take_waiting():
                    self._hold(r)
                self.draining.append(pod)

    def _free_node(self, now: float) -> None:
        if len(self.placeholders) < self.standby:
            self.placeholders.append(now + staging_time(self.sp, new_node=False))
        elif self.node_idle_s > 0 and not self.instant:
            self.idle_nodes.append(now + self.node_idle_s)

    # ---- time ------------------------------------------------------------------------------------
    def advance(self, now: float) -> None:
        became_ready = False
        for p in self.pods:
            if p.state == "starting" and p.ready_at <= now + 1e-9:
                p.state = "ready"
                p.util_mark = (now, p.engine.busy_s)
                became_ready = True
        if self.draining:
            still = []
            for p in self.draining:
                if p.engine.idle:
                    self._free_node(now)
                else:
                    still.append(p)
            self.draining = still
        if self.idle_nodes:
            self.idle_nodes = [t for t in self.idle_nodes if t > now]
        if became_ready or (self.gateway and self.pods):
            self._flush_gateway()

    def _hold(self, r: Request) -> None:
        self.gateway.append(r)
        self.gateway_n += r.n

    def _flush_gateway(self) -> None:
        ready = self.ready_pods()
        if not ready:
            return
        while self.gateway:
            r = self.gateway.popleft()
            self.gateway_n -= r.n
            self._route(r, ready)

    def dispatch(self, r: Request) -> None:
        ready = self.ready_pods()
        if not ready:
            self._hold(r)
            return
        self._route(r, ready)

    @staticmethod
    def _route(r: Request, ready: list[Pod]) -> None:
        """Least outstanding requests (what an inference gateway's queue/KV-aware picker does);
        a cohort is water-filled across the ready pods."""
        if r.n == 1 or len(ready) == 1:
            best = min(ready, key=lambda p: (p.engine.outstanding, p.engine.kv_used))
            best.engine.enqueue(r)
            return
        loads = sorted(((p.engine.outstanding, i) for i, p in enumerate(ready)))
        n = r.n
        m = len(loads)
        # Water level L such that sum(max(0, L - load_i)) = n.
        level = 0.0
        prefix = 0.0
        for j in range(m):
            prefix += loads[j][0]
            cnt = j + 1
            cand = (n + prefix) / cnt
            nxt = loads[j + 1][0] if j + 1 < m else float("inf")
            if cand <= nxt:
                level = cand
                break
        shares = [max(0, int(level - load)) for load, _ in loads]
        rest = n - sum(shares)
        for j in range(len(shares)):
            if rest <= 0:
                break
            shares[j] += 1
            rest -= 1
        shares[0] += rest
        for (_, i), k in zip(loads, shares, strict=True):
            if k <= 0:
                continue
            part = r.split(k) if k < r.n else r
            ready[i].engine.enqueue(part)
            if part is r:
                break

    def step_engines(self, t0: float, dt: float) -> None:
        sink = self.ttft_sink
        for p in self.pods:
            if p.state == "ready":
                p.engine.step(t0, dt, sink)
        for p in self.draining:
            p.engine.step(t0, dt, sink)

    def account(self, now: float, dt: float) -> None:
        units = len(self.pods) + len(self.draining) + len(self.idle_nodes) + len(self.placeholders)
        self.gpu_seconds += units * self.gpus * dt
