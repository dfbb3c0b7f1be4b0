"""Checks of the harness that need no cluster (fleet manifests, PKI, stage files)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from warmscale.localcluster import pki
from warmscale.localcluster.fleet import GPU_RESOURCE, default_fleet, gpu_fleet
from warmscale.localcluster.harness import KWOK_CONFIG, STAGES_DIR


def test_default_fleet_manifests() -> None:
    pools = {p.name: p for p in default_fleet(per_pool=3, overrides={"l4": 0})}
    assert set(pools) == {"h100", "a100", "cpu"}
    node = pools["h100"].manifest(0)
    labels = node["metadata"]["labels"]
    assert labels["type"] == "kwok"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8" == node["status"]["capacity"][GPU_RESOURCE]
    assert node["spec"]["taints"] == [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]
    cpu = pools["cpu"].manifest(2)
    assert cpu["metadata"]["name"] == "kwok-cpu-2"
    assert GPU_RESOURCE not in cpu["status"]["capacity"] and "taints" not in cpu["spec"]
    assert len(gpu_fleet(1000)[0].manifests()) == 1000
    with pytest.raises(ValueError, match="unknown pool"):
        default_fleet(overrides={"tpu": 1})


def test_pki(tmp_path: Path) -> None:
    files = pki.generate(tmp_path)
    ca = x509.load_pem_x509_certificate(files.ca.cert.read_bytes())
    admin = x509.load_pem_x509_certificate(files.admin.cert.read_bytes())
    serving = x509.load_pem_x509_certificate(files.serving.cert.read_bytes())
    admin.verify_directly_issued_by(ca)
    serving.verify_directly_issued_by(ca)
    org = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [a.value for a in org] == ["system:masters"]
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert files.sa_private_key.stat().st_mode & 0o077 == 0


def test_stage_files() -> None:
    stages = {}
    for path in sorted(STAGES_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert doc["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and doc["kind"] == "Stage"
        stages[doc["metadata"]["name"]] = doc["spec"]
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-start",
        "pod-ready",
        "pod-complete",
        "pod-delete",
    }
    annotations = {
        "pod-start": "sim.warmscale.io/start-delay",
        "pod-ready": "sim.warmscale.io/ready-delay",
        "pod-complete": "sim.warmscale.io/job-duration",
    }
    for name, annotation in annotations.items():
        expression = stages[name]["delay"]["durationFrom"]["jq"]["expression"]
        assert annotation in expression
    assert stages["pod-delete"]["next"] == {"finalizers": {"empty": True}, "delete": True}
    assert yaml.safe_load(KWOK_CONFIG.read_text())["kind"] == "KwokConfiguration"


async def test_stop_task_gives_up_on_a_task_that_never_stops() -> None:
    """Teardown is bounded: a loop that swallows every cancellation is left behind after ``within``."""
    import asyncio
    import time

    from warmscale.localcluster.engines import stop_task

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    t0 = time.monotonic()
    await stop_task(task, within=0.5)
    assert 0.4 < time.monotonic() - t0 < 3.0
    assert not task.done()
    task.get_coro().close()  # type: ignore[union-attr]


@pytest.mark.servers
async def test_stop_task_ends_a_redis_loop_whose_cancellation_is_lost(redis_server: object) -> None:
    """The cause of the real-KEDA tests' 300 s teardown: a loop of redis-py commands (what PodEngines
    runs) cancelled once may run on, since on Python 3.11 ``asyncio.wait_for`` (redis-py's socket
    timeout) can drop the cancellation. ``stop_task`` cancels again until the loop ends."""
    import asyncio
    import random

    import redis.asyncio as aioredis

    from warmscale.localcluster.engines import stop_task

    r = aioredis.from_url(redis_server.url)  # type: ignore[attr-defined]
    lost = 0
    try:
        for _ in range(30):
            async def loop() -> None:
                while True:
                    if await r.llen("q") < 100:
                        await r.rpush("q", *[str(i) for i in range(20)])
                    await r.lpop("q", 15)
                    await asyncio.sleep(0)

            task = asyncio.create_task(loop())
            await asyncio.sleep(random.random() * 0.01)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=0.1)
            lost += not done
            await stop_task(task, within=5.0)
            assert task.done()
    finally:
        await r.delete("q")
        await r.aclose()
    print(f"\ncancellations lost by a single cancel(): {lost} of 30")
