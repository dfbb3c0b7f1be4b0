"""The tracker (shell) records the need in its burst memory and publishes burst statistics."""

from __future__ import annotations

from tests.scaler.conftest import META, ScriptedReader
from warmscale.scaler.config import parse_metadata
from warmscale.scaler.decision_log import DecisionLog
from warmscale.scaler.metrics import ScalerMetrics
from warmscale.scaler.store import MemoryStore
from warmscale.scaler.tracker import BURST_PUBLISH_SECONDS, Tracker, TrackerManager
from warmscale.scaler.warm_status import WarmStatus


async def test_tracker_publishes_bursts_from_its_decisions() -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    reader = ScriptedReader(load=20.0, replicas=1)
    manager = TrackerManager(store, reader, ScalerMetrics(), DecisionLog(), instance_id="t", clock=lambda: now[0])
    md = {**META, "scaleDownStabilizationSeconds": "0", "nodeIdleSeconds": "0"}
    await store.put_warm_status("default", "llm", WarmStatus("default", "llm", now[0],
                                                             time_to_ready_s={"placeholder+staged": 60.0,
                                                                              "cold": 400.0}))
    tracker = Tracker(manager, "default", "llm", md, parse_metadata(md))
    for i in range(240):  # 20 in flight (1 replica), then 100 (4 replicas) for 2 minutes, then 20 again
        reader.set(100.0 if 60 <= i < 180 else 20.0)
        await tracker.tick()
        now[0] += 1.0
    st = await store.get_burst_stats("default", "llm")
    assert st is not None and st.window_s == 60.0 and st.cold_s == 400.0
    assert st.updated_at > now[0] - BURST_PUBLISH_SECONDS - 1
    assert st.rise_p95 >= 2 and 1 in st.episodes
    assert 100 <= st.episodes[1][0] <= 125  # the burst's two minutes (need at its level from the first tick)
    # the memory is part of the stored state (survives fail-over)
    state = await store.load_state(tracker.id)
    assert state is not None and state.bursts.since == 1000.0 and 1 in state.bursts.episodes
