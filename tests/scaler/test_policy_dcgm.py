"""DCGM as a secondary signal in the pure policy (dcgmEndpoints): busy GPUs hold a scale-down, nothing
else. Tables on an injected clock (tests/scaler/test_policy.py's Run)."""

from __future__ import annotations

import pytest

from tests.scaler.test_policy import Run, cfg, replica
from warmscale.signals.model import GpuReading


def gpus(*utils: float | None, used: float = 73000.0, free: float = 7000.0) -> tuple[GpuReading, ...]:
    return tuple(GpuReading(gpu=str(i), uuid=f"GPU-{i}", hostname="n1", namespace="llm", pod=f"p{i // 2}",
                            utilization=u, fb_used_mib=used, fb_free_mib=free) for i, u in enumerate(utils))


# Three replicas ran; the engines now ask for one (5 in flight, 10 per replica). Without DCGM the
# decision steps down (the hold windows are 0): these rows differ only in what DCGM says.
QUIET = {"targetInflightPerReplica": "10", "burstConfirmSeconds": "0", "scaleDownStabilizationSeconds": "0",
         "nodeIdleSeconds": "0", "timeToReadySeconds": "0", "dcgmEndpoints": "http://dcgm:9400/metrics"}
ROWS = [
    ("no DCGM reading: the engines decide", None, {}, 1, "demand"),
    ("GPUs busy: the scale-down holds what runs", gpus(0.97, 0.95, 0.96), {}, 3, "gpu-busy-hold"),
    ("GPUs below the threshold: the engines decide", gpus(0.5, 0.6), {}, 1, "demand"),
    ("mean over the known GPUs only", gpus(0.95, None), {}, 3, "gpu-busy-hold"),
    ("no GPU attributed (empty): the engines decide", (), {}, 1, "demand"),
    ("no utilisation field at all: unknown, the engines decide", gpus(None, None), {}, 1, "demand"),
    ("a threshold of 1 holds only fully busy GPUs", gpus(0.99), {"dcgmBusyUtilization": "1"}, 1, "demand"),
]


@pytest.mark.parametrize(("name", "readings", "meta", "desired", "reason"), ROWS, ids=[r[0] for r in ROWS])
def test_busy_gpus_hold_a_scale_down(name: str, readings: tuple[GpuReading, ...] | None, meta: dict[str, str],
                                     desired: int, reason: str) -> None:
    run = Run(cfg(**{**QUIET, **meta}))
    run.step([replica("a", running=30)], current_replicas=3)
    d = run.step([replica("a", running=5)], current_replicas=3, gpus=readings)
    assert (d.desired, d.reason) == (desired, reason)
    if readings:
        known = [g.utilization for g in readings if g.utilization is not None]
        assert d.gpu_utilization == (pytest.approx(sum(known) / len(known)) if known else None)
        assert d.gpu_memory_used == pytest.approx(73000 / 80000)


def test_busy_gpus_never_raise_or_lower_what_the_engines_ask() -> None:
    """A scale-up the engines ask for is unchanged by busy GPUs (DCGM asks for nothing), and idle
    GPUs never lower it; busy GPUs never hold more than what runs."""
    for readings in (gpus(1.0, 1.0), gpus(0.0, 0.0), None):
        run = Run(cfg(**QUIET))
        run.step([replica("a", running=10)], current_replicas=2)
        d = run.step([replica("a", running=50)], current_replicas=2, gpus=readings)
        assert (d.desired, d.reason) == (5, "demand"), readings
    run = Run(cfg(**QUIET))
    run.step([replica("a", running=30)], current_replicas=2)
    assert run.step([replica("a", running=5)], current_replicas=2, gpus=gpus(1.0)).desired == 2


def test_busy_gpus_block_scale_to_zero() -> None:
    meta = {**QUIET, "scaleToZero": "true", "minReplicas": "0", "idleWindowSeconds": "5"}
    idle = [replica("a", running=0, requests=10)]
    for readings, want in ((gpus(1.0), 1), (gpus(0.1), 0)):
        run = Run(cfg(**meta))
        d = None
        for _ in range(10):
            d = run.step(idle, current_replicas=1, gpus=readings)
        assert d is not None and d.desired == want, (readings, d)
