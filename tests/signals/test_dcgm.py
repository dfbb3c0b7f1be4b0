"""dcgm-exporter as an input: per-GPU readings, attribution to a ScaledObject's pods, the pod -> GPU
map (pure), and the source against a real local HTTP server."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest

from tests.servers import FakeEngine, sample
from warmscale.scaler.cli import with_attributed_gpus
from warmscale.scaler.config import parse_metadata
from warmscale.scaler.sources import build_collector
from warmscale.signals.engines import dcgm
from warmscale.signals.model import ReplicaReading, Snapshot
from warmscale.signals.parsing import parse_text
from warmscale.signals.sources.dcgm import DcgmSource

VLLM_POD, SGLANG_POD = "vllm-llama-8b-7c9f6d5b8-kq2xz", "sglang-qwen-32b-5d8b9c7f6-p7wlm"
NS = "llm-serving"


def test_readings_carry_utilisation_memory_and_attribution() -> None:
    gpus = dcgm.gpu_usage(parse_text(sample("dcgm-load.prom")))
    assert [g.gpu for g in gpus] == ["0", "1", "2", "3"]
    g0 = gpus[0]
    assert (g0.namespace, g0.pod, g0.container) == (NS, VLLM_POD, "vllm")
    assert g0.uuid == "GPU-1f6c2a0e-8a77-4c5b-9d13-6e2a4f0b7c31" and g0.hostname == "gpu-node-h100-07"
    assert g0.utilization == pytest.approx(0.812304)
    assert g0.fb_used_mib is not None and g0.fb_free_mib is not None
    assert g0.memory_used == pytest.approx(g0.fb_used_mib / (g0.fb_used_mib + g0.fb_free_mib))
    assert gpus[3].pod is None and gpus[3].container is None  # unallocated


def test_attribution_keeps_the_scaled_objects_pods() -> None:
    gpus = dcgm.gpu_usage(parse_text(sample("dcgm-load.prom")))
    mine = dcgm.attribute(gpus, NS, [VLLM_POD, "not-there"])
    assert [g.gpu for g in mine] == ["0", "1"]
    assert dcgm.attribute(gpus, "other-namespace", [VLLM_POD]) == ()
    assert [g.gpu for g in dcgm.attribute(gpus, None, [SGLANG_POD])] == ["2"]


def test_pod_to_gpu_map() -> None:
    by_pod = dcgm.gpus_by_pod(dcgm.gpu_usage(parse_text(sample("dcgm-load.prom"))))
    assert set(by_pod) == {(NS, VLLM_POD), (NS, SGLANG_POD)}
    assert [(r.index, r.uuid) for r in by_pod[(NS, VLLM_POD)]] == [
        ("0", "GPU-1f6c2a0e-8a77-4c5b-9d13-6e2a4f0b7c31"), ("1", "GPU-7b2d9e41-03c4-4f88-a1d0-5c9e8b7a6f12")]
    assert {r.container for r in by_pod[(NS, VLLM_POD)]} == {"vllm"}
    # GPU 10 sorts after GPU 9 (indices are numbers written as text).
    text = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="G{i}",Hostname="n",namespace="a",pod="p"}} 5\n'
                   for i in (10, 9))
    assert [r.index for r in dcgm.gpus_by_pod(dcgm.gpu_usage(parse_text(text)))[("a", "p")]] == ["9", "10"]


def test_the_payload_parser_reads_only_the_fields_it_uses() -> None:
    """parse_gpus (what the source runs) gives what parsing the whole payload gives, and a field it
    does not read cannot fail it."""
    text = sample("dcgm-load.prom")
    assert dcgm.parse_gpus(text) == dcgm.gpu_usage(parse_text(text))
    noisy = text + "DCGM_FI_DEV_SM_CLOCK{gpu=\"0\" 1980\n"  # a malformed line of another field
    assert dcgm.parse_gpus(noisy) == dcgm.gpu_usage(parse_text(text))


def test_bad_values_are_unknown_not_zero() -> None:
    text = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="G0",pod="p",namespace="a"} NaN\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="G1",pod="p",namespace="a"} 250\n'
            'DCGM_FI_DEV_FB_USED{gpu="1",UUID="G1",pod="p",namespace="a"} -5\n')
    gpus = dcgm.gpu_usage(parse_text(text))
    assert [(g.utilization, g.fb_used_mib, g.memory_used) for g in gpus] == [(None, None, None)] * 2


def test_snapshot_narrowed_to_the_pods() -> None:
    gpus = dcgm.gpu_usage(parse_text(sample("dcgm-load.prom")))
    snap = Snapshot(taken_at=0.0, gpus=gpus, pods=(SGLANG_POD,))
    assert [g.gpu for g in with_attributed_gpus(snap, NS).gpus or ()] == ["2"]
    # No pod list from the API: the replicas' names (pod names for Prometheus and pod discovery).
    snap = Snapshot(taken_at=0.0, gpus=gpus, replicas=(ReplicaReading(VLLM_POD, 0.0, None, "x"),))
    assert [g.gpu for g in with_attributed_gpus(snap, NS).gpus or ()] == ["0", "1"]
    assert with_attributed_gpus(Snapshot(taken_at=0.0, gpus=gpus), NS).gpus is None  # nothing to attribute by
    assert with_attributed_gpus(Snapshot(taken_at=0.0, gpus=gpus, pods=()), NS).gpus == ()  # no pod: no GPU
    assert with_attributed_gpus(Snapshot(taken_at=0.0, pods=(VLLM_POD,)), NS).gpus is None  # no DCGM


async def test_source_reads_every_exporter_and_reports_failures(fake_engine: Callable[..., FakeEngine]) -> None:
    node_a = fake_engine(sample("dcgm-load.prom"))
    node_b = fake_engine('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b0",Hostname="node-b",namespace="llm-serving",'
                         f'pod="{VLLM_POD}"}} 40\n')
    down = fake_engine("").refuse()
    garbage = fake_engine().garbage()
    async with aiohttp.ClientSession() as session:
        src = DcgmSource([node_a.url, node_b.url, down.url, garbage.url], session, timeout=2.0)
        res = await src.read(0.0)
        assert res.gpus is not None and len(res.gpus) == 5
        assert not res.absent and not res.replicas  # DCGM never stands for replicas
        assert len(res.errors) == 2 and all(e.startswith("dcgm http://127.0.0.1:") for e in res.errors)
        res = await DcgmSource([down.url], session, timeout=2.0).read(0.0)
        assert res.gpus is None and len(res.errors) == 1  # none answered: unknown, not "no GPUs"
        big = await DcgmSource([node_a.url], session, timeout=2.0, max_payload_bytes=1024).read(0.0)
        assert big.gpus is None and "cap" in big.errors[0]


async def test_collector_gathers_the_gpus(fake_engine: Callable[..., FakeEngine]) -> None:
    engine = fake_engine(sample("vllm-v1-load.prom"))
    exporter = fake_engine(sample("dcgm-load.prom"))
    cfg = parse_metadata({"endpoints": engine.url, "dcgmEndpoints": exporter.url})
    async with aiohttp.ClientSession() as session:
        collector = build_collector(cfg, session=session)
        try:
            snap = await collector.collect()
        finally:
            await collector.aclose()
    assert snap.gpus is not None and len(snap.gpus) == 4 and not snap.source_errors
    assert len(snap.known) == 1


async def test_allow_targets_checks_dcgm_endpoints() -> None:
    """``--allow-targets``: an exporter outside the list is INVALID_ARGUMENT naming dcgmEndpoints."""
    from warmscale.scaler.config import ConfigError
    from warmscale.scaler.target_guard import TargetGuard

    guard = TargetGuard.from_flag("127.0.0.1/32")
    assert guard is not None
    ok = parse_metadata({"endpoints": "http://127.0.0.1:8000/metrics", "dcgmEndpoints": "http://127.0.0.1:9400/metrics"})
    await guard.check_config(ok)
    bad = parse_metadata({"endpoints": "http://127.0.0.1:8000/metrics",
                          "dcgmEndpoints": "http://127.0.0.1:9400/metrics,http://10.9.9.9:9400/metrics"})
    with pytest.raises(ConfigError) as info:
        await guard.check_config(bad)
    assert info.value.key == "dcgmEndpoints"
