"""The hot tier end to end: real KEDA + HPA, ``warmscale scaler`` with Redis, the controller's hot side
(reconciler + waker) and simulated vLLM engines on KWOK pod IPs; the GPU nodes publish DRA
ResourceSlices and the real scheduler allocates the shared claims (``tests/keda/hot_rig.py``).

Timings are reported (``[keda-e2e]`` lines), never asserted tightly.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from tests.cluster.fixtures import NodePoolFactory
from tests.keda.conftest import E2E, Workload, report
from tests.keda.hot_rig import DRIVER, TIME_FACTOR, HotSide, SleeperEngines, events, publish_gpus, unpublish, until
from warmscale.localcluster.engines import stop_task
from warmscale.localcluster.fleet import H100
from warmscale.scaler.hot_status import HotStatus
from warmscale.simulation.engine import CANARY_TEXT

# The Deployment's own replicas: ready 8 s after they start (KWOK), and told to the scaler as 30 s (a
# cold start is minutes: the scaler must see a sleeper as the sooner capacity, else it wakes none).
READY_DELAY = "8s"
OWN_TTR_S = 30
# The first sleep of a new sleeper: pod scheduled on its DRA claim, engine up, canary, then the sleep;
# once over 60 s with three clusters sharing the two cores (a bound, not a pace).
FIRST_SLEEP_S = 120
HOT = {"warmscale.io/hot-standby": "1", "warmscale.io/engine": "vllm", "warmscale.io/hot-host-ram": "16Gi"}


async def hot_workload(e2e: E2E, name: str, pool: str, annotations: dict[str, str] | None = None) -> Workload:
    """A Deployment at 0 replicas with one sleeper in ``pool`` (its pods tolerate the GPU nodes)."""
    w = await e2e.workload(name, 0, ready_delay=READY_DELAY)
    await client.AppsV1Api(e2e.api).patch_namespaced_deployment(name, e2e.namespace, {
        "metadata": {"annotations": {**HOT, "warmscale.io/hot-pool": pool, **(annotations or {})}},
        "spec": {"template": {"spec": {"tolerations": [{"operator": "Exists"}]}}}})
    return w


async def gpu_pool(e2e: E2E, make: NodePoolFactory, pool: str) -> tuple[list[str], list[str]]:
    nodes = await make(replace(H100, name=pool, count=1))
    for n in nodes:
        await client.CoreV1Api(e2e.api).patch_node(n, {"metadata": {"annotations": {
            "warmscale.io/hot-pool": pool, "warmscale.io/hot-pool-host-ram": "64Gi",
            "warmscale.io/hot-pool-dra-driver": DRIVER}}})
    return nodes, await publish_gpus(e2e.api, nodes, count=1)


async def hot_side(e2e: E2E, w: Workload) -> tuple[HotSide, SleeperEngines]:
    """The controller's hot side and the sleepers' engines, and the scaler (with Redis) driving ``w``
    through the real KEDA, scale to zero allowed."""
    hot = await HotSide(e2e.api, e2e.namespace, e2e.redis_url).start()
    engines = SleeperEngines(e2e.api, e2e.namespace).start()
    scaler = e2e.scaler("--redis-url", e2e.redis_url)
    meta = e2e.metadata(w, scaleToZero="true", minReplicas="0", idleWindowSeconds="4", scrapeIntervalSeconds="0.2",
                        timeToReadySeconds=str(OWN_TTR_S))
    await e2e.scale_with(w, scaler, meta, min_replicas=0, max_replicas=4)
    return hot, engines


async def status(hot: HotSide, ns: str, name: str) -> HotStatus | None:
    assert hot.store is not None
    return await hot.store.get_hot_status(ns, name)


async def first_token(session: aiohttp.ClientSession, base_url: str, model: str) -> str:
    async with session.post(f"{base_url}/v1/completions", json={"model": model, "prompt": "The capital of France is",
                                                                "max_tokens": 4, "temperature": 0}) as r:
        r.raise_for_status()
        return str((await r.json())["choices"][0]["text"])


async def test_scale_from_zero_wakes_a_sleeper_that_bridges_until_the_deployment_is_ready_then_sleeps(
        e2e: E2E, k8s_node_pool: NodePoolFactory) -> None:
    ns = e2e.namespace
    pool = f"h{ns[-6:]}"
    nodes, slices = await gpu_pool(e2e, k8s_node_pool, pool)
    w = await hot_workload(e2e, "llm", pool)
    await hot_workload(e2e, "other", pool)  # a second model's sleeper on the same GPU, idle throughout
    await hot_workload(e2e, "tgi", pool, {"warmscale.io/engine": "tgi"})  # no sleep: an Event, no sleeper
    hot, engines = await hot_side(e2e, w)
    routed: list[str] = []
    try:
        # Both models' sleepers run on the pool's one GPU, through one claim the scheduler allocated.
        core = client.CoreV1Api(e2e.api)

        async def sleepers_running() -> list[Any] | None:
            pods = (await core.list_namespaced_pod(ns, label_selector="warmscale.io/role=hot-sleeper")).items
            return pods if len(pods) == 2 and all(p.status.phase == "Running" and p.status.pod_ip for p in pods) \
                else None

        pods = await until(sleepers_running, 60, "both sleepers running")
        assert {p.spec.node_name for p in pods} == set(nodes)
        assert len({p.spec.resource_claims[0].resource_claim_name for p in pods}) == 1
        assert {p.metadata.annotations["warmscale.io/hot-workload"] for p in pods} == {f"{ns}/llm", f"{ns}/other"}
        tgi = await until(lambda: events(e2e.api, ns, "HotStandbyUnsupported"), 30, "TGI's Event")
        assert tgi[0].involved_object.name == "tgi" and "TGI has no sleep mode" in tgi[0].message

        # The waker records each one's canary and, on the scaler's intent (0 awake), puts it to sleep.
        async def asleep() -> bool:
            s = await status(hot, ns, "llm")
            return s is not None and s.asleep == 1 and s.awake == 0
        await until(asleep, FIRST_SLEEP_S, "the llm sleeper asleep")
        await w.timeline.wait(spec=0, within=30, what="at zero before the load")
        await until(lambda: w.timeline.samples and w.timeline.samples[-1][2] == 0, 30, "no replica ready")
        await until(asleep, 60, "the llm sleeper asleep again (a new tracker may wake it once)")

        n_before = len(hot.wake_requests)
        w.engines.set_concurrency(3)
        onset = await until(lambda: w.engines.onset_at, 10, "the onset", every=0.001)
        await until(lambda: len(hot.wake_requests) > n_before, 30, "a wake request")
        t_wake, sleeper = hot.wake_requests[n_before]
        assert sleeper.workload == f"{ns}/llm"

        async def awake() -> HotStatus | None:
            s = await status(hot, ns, "llm")
            return s if s is not None and s.awake_pods else None
        hs = await until(awake, 30, "the woken sleeper published awake", every=0.005)
        routed += hs.awake_pods
        async with aiohttp.ClientSession() as session:
            text = await first_token(session, sleeper.base_url, sleeper.model)
        t_token = time.monotonic()
        assert text == CANARY_TEXT

        # Phase 2: KEDA + the HPA grow the Deployment meanwhile; once its own replica is Ready the
        # sleeper is released and sleeps again.
        await w.timeline.wait(ready=1, within=60, what="the Deployment's own replica Ready")
        t_ready = w.timeline.first(onset, ready=1)

        async def released() -> bool:
            s = await status(hot, ns, "llm")
            return s is not None and s.awake == 0 and s.asleep == 1
        await until(released, 60, "the sleeper released and asleep again")
        t_asleep = time.monotonic()
        other = await status(hot, ns, "other")
        assert other is not None and other.awake == 0 and other.asleep == 1  # never woken
        report("hot_scale_from_zero", onset_to_wake_request_s=round(t_wake - onset, 3),
               onset_to_first_token_s=round(t_token - onset, 3),
               simulated_wake_s=round(2.2 / TIME_FACTOR, 3), scrape_interval_s=0.2,
               onset_to_own_replica_ready_s=round(t_ready - onset, 3) if t_ready else None,
               onset_to_asleep_again_s=round(t_asleep - onset, 3))
        assert routed == [f"{ns}/{sleeper.pod.split('/', 1)[1]}"]
    finally:
        await hot.aclose()
        await engines.aclose()
        await unpublish(e2e.api, slices)


async def test_a_wake_whose_canary_fails_is_never_routed_and_the_sleeper_is_replaced_after_two(
        e2e: E2E, k8s_node_pool: NodePoolFactory) -> None:
    ns = e2e.namespace
    pool = f"c{ns[-6:]}"
    _, slices = await gpu_pool(e2e, k8s_node_pool, pool)
    w = await hot_workload(e2e, "llm", pool)
    hot, engines = await hot_side(e2e, w)
    ever_awake: list[str] = []

    async def watch_routing() -> None:
        while True:
            s = await status(hot, ns, "llm")
            if s is not None:
                ever_awake.extend(s.awake_pods)
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch_routing())
    core = client.CoreV1Api(e2e.api)
    try:
        async def asleep() -> bool:
            s = await status(hot, ns, "llm")
            return s is not None and s.asleep == 1
        await until(asleep, FIRST_SLEEP_S, "the sleeper asleep")
        # A new tracker starts active (absent history is not idleness) and may wake it once: let that pass.
        await w.timeline.wait(spec=0, within=30, what="at zero before the load")
        await until(asleep, 60, "the sleeper asleep again")
        first = (await core.list_namespaced_pod(ns, label_selector="warmscale.io/role=hot-sleeper")).items[0]
        engines.corrupt_next.add(first.metadata.name)  # every wake of it serves wrong output
        ever_awake.clear()
        w.engines.set_concurrency(3)
        await until(lambda: events(e2e.api, ns, "HotSleeperWakeFailed"), 60, "the sleeper reported failed")
        await until(lambda: events(e2e.api, ns, "HotSleeperReplaced"), 30, "the failed sleeper replaced")

        async def new_pod() -> bool:
            pods = (await core.list_namespaced_pod(ns, label_selector="warmscale.io/role=hot-sleeper")).items
            return any(p.metadata.uid != first.metadata.uid and p.status.phase == "Running" for p in pods)
        await until(new_pod, 60, "a new sleeper pod")
        # The Deployment still grows through KEDA meanwhile (the HPA path is unchanged).
        await w.timeline.wait(ready=1, within=60, what="the Deployment's own replica Ready")
        assert f"{ns}/{first.metadata.name}" not in ever_awake, ever_awake
        report("hot_canary_fails", wakes=len(hot.wake_requests), routed=sorted(set(ever_awake)))
    finally:
        # Not one cancel(): in one CI run on a loaded box it landed inside the store read (redis-py's
        # wait_for drops it on Python 3.11) and the loop went on "cancelling" for good, so this teardown
        # hung until pytest-timeout. stop_task cancels until the task ends (docs/keda.md).
        await stop_task(watcher)
        await hot.aclose()
        await engines.aclose()
        await unpublish(e2e.api, slices)
