"""Pods, nodes, the warm pool and GPU accounting for one policy's simulated fleet.

- A new pod lands, in order of preference, on a warm placeholder (warmscale's warm pool: GPU held,
  image pulled, weights and compile cache staged), on a node a pod left recently (the cluster
  autoscaler keeps an unneeded node ``node_idle_s``, 10 min by default; the image is still there),
  or on a new node (cold). Its start-up follows :mod:`warmpool.startup_model`.
- Deleted pods stop taking requests, hand their queued requests back to the router and finish
  the ones in flight (graceful drain); their node then idles or becomes a placeholder again.
- Every GPU that is held costs: starting, serving and draining pods, idle nodes and placeholders
  (also while they are being provisioned and staged).
- The warm-pool controller's part uses its pure code: the standby count is what
  :func:`warmpool.planning.plan` decides for the workload's ``warmscale.io/*`` annotations (``auto``:
  from the burst statistics the scaler publishes; :class:`benchmarks.sim.policies.WarmscalePolicy`
  calls it and applies the count with :meth:`Cluster.set_standby`), the warm
  state a replica started from is :func:`warmpool.planning.warm_state`, and the measured
  time-to-ready per warm state is :class:`warmpool.planning.TimeToReady` (rolling median), published
  as a :class:`scaler.warm_status.WarmStatus` like the controller does.
- Time is continuous: requests reach engines at their arrival time, pods become ready at their
  ready time (held requests are released then); the control loop runs every ``dt``.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable

from warmscale.benchmarks.sim.conditions import StartupDraws
from warmscale.benchmarks.sim.engine import Engine, EngineProfile, Request
from warmscale.warmpool.planning import TimeToReady, warm_state
from warmscale.warmpool.startup_model import (
    COLD,
    PLACEHOLDER_STAGED,
    RETAINED_NODE,
    StartupProfile,
    WarmState,
    staging_time,
    time_to_ready,
)

# The inference gateway's saturation detector (gateway-api-inference-extension, pkg/epp/saturationdetector
# defaults): an endpoint with this many waiting requests, or this KV-cache utilisation, is saturated.
GATEWAY_QUEUE_DEPTH = 5
GATEWAY_KV_UTIL = 0.8
# How often the gateway re-checks saturation for the requests it holds: a fixed grid, not the control
# tick (issue 21, requirement 4: halving the tick must not move a result); 0.1 s is below every
# policy's loop and every engine step that matters (a modelling step: the EPP dispatches on events).
GATEWAY_RELEASE_S = 0.1
# The grid's instants are k / RELEASES_PER_S (exact for every tenth of a second, so that a grid point and
# a control tick on it are the same float whatever the tick).
RELEASES_PER_S = round(1.0 / GATEWAY_RELEASE_S)


class Pod:
    __slots__ = ("created_at", "engine", "name", "ready_at", "state", "util_mark", "warm")

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
        self.engine.sync(now)
        b1 = self.engine.busy_s
        self.util_mark = (now, b1)
        span = now - t0
        return max(0.0, min(1.0, (b1 - b0) / span)) if span > 0 else 0.0


class Cluster:
    def __init__(self, engine: EngineProfile, startup: StartupProfile, *, standby: int = 0,
                 node_idle_s: float = 600.0, instant: bool = False, max_pods: int = 1000,
                 make_engine: Callable[[EngineProfile, list[tuple[float, float, int]], float], Engine] | None = None,
                 draws: StartupDraws | None = None, flow_control: bool = True) -> None:
        self.draws = draws  # per-replica start-up factors (benchmarks/sim/conditions.py); None: the exact ladder
        self.flow_control = flow_control  # the gateway holds requests while every endpoint is saturated
        self.make_engine = make_engine or Engine  # a P/D fleet's pools build role engines (benchmarks/sim/pd.py)
        self.ep = engine
        self.sp = startup
        self.gpus = engine.gpus_per_replica
        self.standby = standby
        self.node_idle_s = node_idle_s
        self.instant = instant
        self.max_pods = max_pods
        self.spec = 0
        self.pods: list[Pod] = []  # starting + ready, creation order
        self.ready: list[Pod] = []
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
        self.next_ready = math.inf
        self.ttft_sink: list[tuple[float, float, int]] = []
        self.engines: list[Engine] = []  # every replica's engine, in creation order (run totals)
        self.ttr = TimeToReady()
        self.now = 0.0
        # What the frontend counts (a predictive planner reads it): arrivals and their tokens so far.
        self.arrived_n = 0
        self.arrived_in = 0.0
        self.arrived_out = 0.0
        self._release_k = 0  # the next release instant is _release_k / RELEASES_PER_S

    # ---- views ---------------------------------------------------------------------------------
    def ready_pods(self) -> list[Pod]:
        return self.ready

    def n_ready(self) -> int:
        return len(self.ready)

    def n_starting(self) -> int:
        return len(self.pods) - len(self.ready)

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
            self.ready.append(pod)
        self.spec = n
        self.placeholders = [now] * self.standby
        self.max_replicas = max(self.max_replicas, n)

    def _new_pod(self, now: float, ready_at: float, warm: str) -> Pod:
        self._seq += 1
        engine = self.make_engine(self.ep, self.ttft_sink, now)
        self.engines.append(engine)
        return Pod(f"pod-{self._seq}", now, ready_at, warm, engine)

    def prefix_cache_tokens(self) -> tuple[float, float]:
        """(prompt tokens looked up, tokens found) in the replicas' prefix caches over the run, every
        replica the run made included (``vllm:prefix_cache_queries`` / ``..._hits``); (0, 0) without."""
        return (sum(e.prefix_queries_total for e in self.engines), sum(e.prefix_hits_total for e in self.engines))

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
            warm, label = PLACEHOLDER_STAGED, warm_state(node_staged=True, took_placeholder=True)
            ttr = time_to_ready(self.sp, warm)
        elif self.idle_nodes:
            self.idle_nodes.pop(0)
            warm, label = RETAINED_NODE, "retained-node"
            ttr = time_to_ready(self.sp, warm)
        else:
            warm, label = COLD, warm_state(node_staged=False, took_placeholder=False)
            ttr = time_to_ready(self.sp, warm)
            self.cold_starts += 1
        if self.draws is not None and not self.instant:
            ttr *= self.draws.factor()
        self.starts[label] += 1
        pod = self._new_pod(now, now + ttr, label)
        self.pods.append(pod)
        self.next_ready = min(self.next_ready, pod.ready_at)
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
            for p in self.ready:
                p.engine.sync(now)
            ready = sorted(self.ready, key=lambda p: (p.engine.outstanding, -p.created_at))
            victims += ready[: k - len(victims)]
        for pod in victims:
            self.pods.remove(pod)
            if pod.state == "starting":
                self._free_node(now)
            else:
                self.ready.remove(pod)
                pod.state = "draining"
                for r in pod.engine.take_waiting(now):
                    self._hold(r)
                self.draining.append(pod)
        if self.gateway and self.ready:
            self._flush_gateway(now)

    def set_standby(self, n: int, now: float) -> None:
        """Apply the planner's placeholder count: missing ones are created (and staged), surplus ones
        deleted, the least ready first; a deleted placeholder's node idles until the cluster
        autoscaler removes it (``node_idle_s``), where a new replica may land like on any retained node."""
        self.standby = max(0, n)
        while len(self.placeholders) > self.standby:
            self.placeholders.sort()
            self.placeholders.pop()
            if self.node_idle_s > 0 and not self.instant:
                self.idle_nodes.append(now + self.node_idle_s)
        self._replenish(now)

    def _free_node(self, now: float) -> None:
        if len(self.placeholders) < self.standby:
            self.placeholders.append(now + staging_time(self.sp, new_node=False))
        elif self.node_idle_s > 0 and not self.instant:
            self.idle_nodes.append(now + self.node_idle_s)

    # ---- time ------------------------------------------------------------------------------------
    def events_until(self, t: float) -> None:
        """What the cluster does on its own up to ``t``, in time order: pods becoming ready, each at its
        own ready time (held requests go out then), and with flow control the gateway's release checks
        on their fixed grid (:meth:`release_until`). In time order whatever ``t`` the caller cuts at (an
        arrival, a control tick): a pod ready at 12.34 s is seen by the checks at 12.4 s, not at 12.1 s
        (issue 21, requirement 4: until this, an arrival at 12.5 s made the pod ready before the checks
        at 12.1-12.3 s ran while a control tick at 12.5 s did not, so halving the tick moved results
        once start-ups were drawn off the whole seconds)."""
        self.release_until(t)
        self._ready_until(t)

    def _ready_until(self, t: float) -> None:
        """Pods becoming ready up to ``t``, each at its own ready time (held requests go out then)."""
        while self.next_ready <= t:
            at = self.next_ready
            nxt = math.inf
            became = False
            for p in self.pods:
                if p.state == "starting":
                    if p.ready_at <= at + 1e-12:
                        p.state = "ready"
                        p.engine.clock = p.ready_at
                        p.util_mark = (p.ready_at, 0.0)
                        self.ready.append(p)
                        # As the controller classifies it: staged node + placeholder taken, staged node,
                        # else cold (a retained node has the image but no staged weights: "cold").
                        state = warm_state(node_staged=p.warm == "placeholder+staged",
                                           took_placeholder=p.warm == "placeholder+staged")
                        self.ttr.observe(p.name, state, p.ready_at - p.created_at)
                        became = True
                    else:
                        nxt = min(nxt, p.ready_at)
            self.next_ready = nxt
            if became and self.gateway:
                self._flush_gateway(at)

    def advance(self, now: float) -> None:
        """Control-tick housekeeping at ``now``: engines run up to it, drained pods leave, idle nodes expire."""
        self.events_until(now)
        self.now = now
        for p in self.ready:
            e = p.engine
            if e.seg_end <= now:  # Engine.advance_to's own test, before the call
                e.advance_to(now)
        if self.draining:
            still = []
            for p in self.draining:
                p.engine.advance_to(now)
                if p.engine.idle:
                    self._free_node(now)
                else:
                    still.append(p)
            self.draining = still
        if self.idle_nodes:
            self.idle_nodes = [t for t in self.idle_nodes if t > now]
        if self.gateway and self.ready and not self.flow_control:  # with flow control: on the grid only
            self._flush_gateway(now)

    def _hold(self, r: Request) -> None:
        if not self.gateway:  # the first release check is the grid point after this hold
            self._release_k = max(self._release_k, math.floor(max(r.t_arr, self.now) * RELEASES_PER_S) + 1)
        self.gateway.append(r)
        self.gateway_n += r.n

    def release_until(self, t: float) -> None:
        """With flow control: the gateway's saturation checks on its fixed grid up to ``t``, each
        releasing the held requests that an endpoint no longer saturated takes, with the pods that
        became ready before each check (and only those) among the endpoints. While no endpoint is
        ready nothing is checked: the pod that becomes ready first takes requests at its ready time,
        and the checks resume on the grid after it."""
        if not self.flow_control:
            return
        while self.gateway:
            tau = self._release_k / RELEASES_PER_S
            if tau > t + 1e-12:
                return
            if not self.ready:
                at = self.next_ready
                if at > t:
                    return
                self._ready_until(at)
                self._release_k = max(self._release_k, math.floor(at * RELEASES_PER_S) + 1)
                continue
            self._release_k += 1
            self._ready_until(tau)
            self._flush_gateway(tau)
            if self.gateway and self.ready:
                self._skip_quiet_checks(t)

    def _skip_quiet_checks(self, t: float) -> None:
        """After a check that left requests held (every ready endpoint saturated, each engine run up to
        the check): the next checks up to ``t`` that would find the same state are skipped. Nothing
        changes an endpoint before its engine's next segment ends or a pod becomes ready (no one else
        touches the engines inside :meth:`release_until`), so each such check would run no engine,
        find every endpoint saturated again and release nothing. Skips to the first grid instant at
        or after the earliest of those, never past ``t`` (after ``t`` the caller may act)."""
        at = self.next_ready
        for p in self.ready:
            if p.engine.seg_end < at:
                at = p.engine.seg_end
        k = self._release_k
        if at > t:  # nothing before t: straight to the first instant after t, as the checks would end
            at, strict = t + 1e-12, True
        else:
            strict = False
        j = max(k, math.floor(at * RELEASES_PER_S) - 1)
        while (j / RELEASES_PER_S <= at) if strict else (j / RELEASES_PER_S < at):
            j += 1
        if j > k:
            self._release_k = j

    def saturated(self, now: float) -> bool:
        """Every ready endpoint is saturated, as the inference gateway's saturation detector reads it
        (gateway-api-inference-extension ``saturationdetector`` defaults: queue depth >= 5 or KV-cache
        utilisation >= 0.8); with no ready endpoint too."""
        for p in self.ready:
            e = p.engine
            if e.seg_end <= now:
                e.advance_to(now)
            if e.waiting_n < GATEWAY_QUEUE_DEPTH and e.kv_usage() < GATEWAY_KV_UTIL:
                return False
        return True

    def _flush_gateway(self, now: float) -> None:
        """Release held requests, oldest first: all of them once an endpoint is ready (no flow
        control), else while some endpoint is not saturated."""
        ready = self.ready
        if not ready:
            return
        while self.gateway:
            if self.flow_control and self.saturated(now):
                return
            r = self.gateway.popleft()
            self.gateway_n -= r.n
            self._route(r, ready, now)

    def dispatch(self, r: Request) -> None:
        """A request arrives at ``r.t_arr`` (after :meth:`events_until` of that time). With flow
        control the gateway (llm-d's endpoint picker) holds it while every endpoint is saturated, and
        behind the requests it already holds (FIFO); the held count is its
        ``llm_d_epp_flow_control_queue_size``."""
        self.arrived_n += r.n
        self.arrived_in += r.inp * r.n
        self.arrived_out += r.out * r.n
        ready = self.ready
        if not ready:
            self._hold(r)
            return
        if self.flow_control:
            if self.gateway:
                self.release_until(r.t_arr)
            if self.gateway or self.saturated(r.t_arr):
                self._hold(r)
                return
        self._route(r, ready, r.t_arr)

    @staticmethod
    def _route(r: Request, ready: list[Pod], now: float) -> None:
        """Least outstanding requests (what an inference gateway's queue/KV-aware picker does);
        a cohort is water-filled across the ready pods."""
        for p in ready:
            e = p.engine
            if e.seg_end <= now:
                e.advance_to(now)
        if r.n == 1 or len(ready) == 1:
            # min() by (outstanding, -free blocks): the first pod with the least outstanding, then the most free
            best = None
            bo = bf = 0
            for p in ready:
                e = p.engine
                o = e.waiting_n + e.running_n
                if best is None or o < bo or (o == bo and e.free_blocks > bf):
                    best, bo, bf = e, o, e.free_blocks
            assert best is not None
            best.enqueue(r, now)
            return
        loads = sorted(((p.engine.outstanding, i) for i, p in enumerate(ready)))
        n = r.n
        m = len(loads)
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
            ready[i].engine.enqueue(part, now)
            if part is r:
                break

    def account(self, dt: float) -> None:
        units = len(self.pods) + len(self.draining) + len(self.idle_nodes) + len(self.placeholders)
        self.gpu_seconds += units * self.gpus * dt

    def units(self) -> int:
        return len(self.pods) + len(self.draining) + len(self.idle_nodes) + len(self.placeholders)
