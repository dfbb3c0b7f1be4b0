"""Measured time-to-ready survives controller fail-over (kept in the store) and is kept per GPU product."""

from __future__ import annotations

from kubernetes_asyncio import client

from warmscale.scaler.store import MemoryStore
from warmscale.scaler.warm_status import WarmStatus
from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import Controller, Options
from warmscale.warmpool.planning import TimeToReady, TimeToReadyByGpu


def test_seed_counts_as_one_sample_per_state() -> None:
    t = TimeToReady()
    t.seed({"cold": 500.0, "placeholder+staged": 90.0})
    assert t.medians() == {"cold": 500.0, "placeholder+staged": 90.0}
    t.observe("u1", "cold", 520.0)
    t.observe("u2", "cold", 530.0)
    assert t.medians()["cold"] == 520.0  # the seed is one sample among the new ones
    t.seed({"cold": 1.0})  # a state with measurements is not overwritten
    assert t.medians()["cold"] == 520.0


def test_per_gpu_product() -> None:
    t = TimeToReadyByGpu()
    t.observe("NVIDIA-H100-80GB-HBM3", "a", "cold", 500.0)
    t.observe("NVIDIA-A100-SXM4-80GB", "b", "cold", 700.0)
    assert t.medians() == {"NVIDIA-H100-80GB-HBM3": {"cold": 500.0}, "NVIDIA-A100-SXM4-80GB": {"cold": 700.0}}
    ws = WarmStatus("ns", "w", 0.0, time_to_ready_s={"cold": 600.0}, time_to_ready_by_gpu=t.medians())
    assert ws.for_gpu("NVIDIA-A100-SXM4-80GB").expected_time_to_ready(120.0) == 700.0
    assert ws.for_gpu(None).expected_time_to_ready(120.0) == 600.0
    assert ws.for_gpu("unknown").expected_time_to_ready(120.0) == 600.0


def test_readers_accept_the_old_shape() -> None:
    old = {"namespace": "ns", "name": "w", "updated_at": 1.0, "time_to_ready_s": {"cold": 300}}
    ws = WarmStatus.from_dict(old)
    assert ws.version == 1 and ws.time_to_ready_by_gpu == {} and ws.time_to_ready_s == {"cold": 300.0}
    new = WarmStatus("ns", "w", 1.0, time_to_ready_by_gpu={"H100": {"cold": 400.0}})
    assert WarmStatus.from_dict(new.to_dict()) == new and new.to_dict()["version"] == 3


async def test_a_new_leader_starts_from_the_stored_medians() -> None:
    store = MemoryStore()
    await store.put_warm_status("llm", "chat", WarmStatus(
        "llm", "chat", 1.0, time_to_ready_s={"cold": 480.0, "placeholder+staged": 85.0},
        time_to_ready_by_gpu={"NVIDIA-H100-80GB-HBM3": {"cold": 470.0}}))
    api = client.ApiClient()
    try:
        ctl = Controller(api, Options(namespace="llm"), sink=store)
        wl = ob.Workload(kind="Deployment", namespace="llm", name="chat", uid="u", replicas=1, template={},
                         annotations={}, selector={})
        await ctl._seed_time_to_ready(wl)
        assert ctl.ttr[wl.key].medians() == {"cold": 480.0, "placeholder+staged": 85.0}
        assert ctl.ttr_gpu[wl.key].medians() == {"NVIDIA-H100-80GB-HBM3": {"cold": 470.0}}
    finally:
        await api.close()


async def test_an_unreachable_store_starts_empty() -> None:
    class Down:
        async def put_warm_status(self, namespace: str, name: str, status: WarmStatus) -> None:
            raise ConnectionError("down")

        async def get_warm_status(self, namespace: str, name: str) -> WarmStatus | None:
            raise ConnectionError("down")

    api = client.ApiClient()
    try:
        ctl = Controller(api, Options(namespace="llm"), sink=Down())
        wl = ob.Workload(kind="Deployment", namespace="llm", name="chat", uid="u", replicas=1, template={},
                         annotations={}, selector={})
        await ctl._seed_time_to_ready(wl)
        assert wl.key not in ctl.ttr
    finally:
        await api.close()
