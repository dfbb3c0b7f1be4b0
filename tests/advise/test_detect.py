"""The five next-layer detectors, driven by simulated signals with an injected clock (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from warmscale.common.diagnostics.detect import advise, pearson
from warmscale.common.diagnostics.model import (
    COLD_START,
    ENGINE_OOM,
    NEXT_LAYER,
    PARTIAL_GANG,
    PREFILL_INTERFERENCE,
    QUOTA_CONTENTION,
    LatencySample,
    LoadSample,
    PodRecord,
    Policy,
    ScaleSample,
    Signals,
    Termination,
)

NOW = 1_800_000_000.0
H = 3600.0
POLICY = Policy()


# ---- simulated signal builders: ``n`` episodes, the k-th starting at ``starts[k]``


def cold_bursts(starts: list[float], *, ttr: float = 300.0, ttft: float = 2.5, slo: float = 0.5) -> Signals:
    """Each burst: desired 2 -> 6, ready catches up after ``ttr`` s; TTFT above the SLO meanwhile."""
    out = []
    for t0 in starts:
        out.append(ScaleSample(t0 - 10, "llm", "vllm-llama", 2, 2, 0.2, slo, ttr))
        for dt in range(0, int(ttr), 15):
            out.append(ScaleSample(t0 + dt, "llm", "vllm-llama", 6, 2, ttft, slo, ttr))
        out.append(ScaleSample(t0 + ttr, "llm", "vllm-llama", 6, 6, 0.3, slo, ttr))
    return Signals(scale=tuple(out))


def interference(starts: list[float], *, rise: float = 3.0, r_noise: float = 0.0) -> Signals:
    out = []
    for t0 in starts:
        base = t0 - t0 % POLICY.itl_window_s
        for k in range(10):
            tok = 500.0 + 2000.0 * k
            itl = 0.020 * (1 + (rise - 1) * k / 9) + (r_noise if k % 2 else -r_noise)
            out.append(LatencySample(base + 20 * k, "llm", "vllm-llama", itl, tok))
    return Signals(latency=tuple(out))


def pending(starts: list[float], *, quotas: frozenset[str] = frozenset(), wait: float = 1800.0) -> Signals:
    """At each start, one GPU pod in team-a and one in team-b wait ``wait`` s."""
    pods = []
    for i, t0 in enumerate(starts):
        for ns in ("team-a", "team-b"):
            pods.append(PodRecord(ns, f"train-{i}", "train", created_at=t0, gpus=8, scheduled_at=t0 + wait,
                                  phase="Running"))
    return Signals(pods=tuple(pods), gpu_quota_namespaces=quotas)


def gangs(starts: list[float]) -> Signals:
    pods = []
    for i, t0 in enumerate(starts):
        g = f"llama-405b-{i}"
        pods.append(PodRecord("llm", f"{g}-0", "llama-405b", t0, gpus=8, scheduled_at=t0 + 1, phase="Running",
                              gang=g, gang_size=2))
        pods.append(PodRecord("llm", f"{g}-1", "llama-405b", t0, gpus=8, phase="Pending", gang=g, gang_size=2,
                              pending_reason="Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu"))
    return Signals(pods=tuple(pods))


def ooms(starts: list[float], *, reason: str = "OOMKilled", code: int = 137, loaded: bool = False) -> Signals:
    pods, load = [], []
    for i, t0 in enumerate(starts):
        pods.append(PodRecord("llm", f"vllm-llama-{i}", "vllm-llama", t0 - 600, gpus=1, scheduled_at=t0 - 599,
                              phase="Running", terminations=(Termination(t0, reason, code),)))
        if loaded:
            load.append(LoadSample(t0 - 30, "llm", f"vllm-llama-{i}", running=48, kv_usage=0.97))
    return Signals(pods=tuple(pods), load=tuple(load))


Case = tuple[str, Callable[[list[float]], Signals]]
CASES: list[Case] = [
    (COLD_START, cold_bursts),
    (PREFILL_INTERFERENCE, interference),
    (QUOTA_CONTENTION, pending),
    (PARTIAL_GANG, gangs),
    (ENGINE_OOM, ooms),
]


def three_within_a_day() -> list[float]:
    return [NOW - 20 * H, NOW - 10 * H, NOW - 2 * H]


@pytest.mark.parametrize(("kind", "build"), CASES)
def test_speaks_once_the_failure_repeated(kind: str, build: Callable[[list[float]], Signals]) -> None:
    findings = advise(build(three_within_a_day()), POLICY, NOW)
    f = next(f for f in findings if f.kind == kind)
    assert len(f.episodes) >= 3
    assert f.next_layer == NEXT_LAYER[kind] and f.summary.startswith(f"{len(f.episodes)} times in 24 h")
    assert all(e.evidence for e in f.episodes)
    assert {f.kind for f in findings} == {kind}  # no other detector fires on this failure


@pytest.mark.parametrize(("kind", "build"), CASES)
def test_silent_until_repeated(kind: str, build: Callable[[list[float]], Signals]) -> None:
    assert advise(build([NOW - 10 * H, NOW - 2 * H]), POLICY, NOW) == []  # twice is not yet a pattern


@pytest.mark.parametrize(("kind", "build"), CASES)
def test_old_episodes_fall_out_of_the_window(kind: str, build: Callable[[list[float]], Signals]) -> None:
    starts = [NOW - 40 * H, NOW - 30 * H, NOW - 2 * H]
    assert advise(build(starts), POLICY, NOW) == []
    # ... and the window is configurable, as is the count.
    assert {f.kind for f in advise(build(starts), replace(POLICY, window_s=48 * H), NOW)} == {kind}
    assert {f.kind for f in advise(build(starts[2:]), replace(POLICY, min_episodes=1), NOW)} == {kind}


def test_cold_start_evidence_has_the_measured_time_to_ready() -> None:
    (f,) = advise(cold_bursts(three_within_a_day(), ttr=420.0), POLICY, NOW)
    e = f.episodes[0]
    assert e.data["time_to_ready_s"] == 420.0 and e.data["from"] == 2 and e.data["to"] == 6
    assert "TTFT 2.50s > SLO 0.50s" in e.evidence and "time-to-ready 420s" in e.evidence
    assert "warm pool" in f.next_layer


@pytest.mark.parametrize("variant", ["warm", "slo-met"])
def test_cold_start_needs_both_a_miss_and_a_cold_start(variant: str) -> None:
    sig = cold_bursts(three_within_a_day(), ttr=30.0) if variant == "warm" else \
        cold_bursts(three_within_a_day(), ttft=0.3)
    assert advise(sig, POLICY, NOW) == []


def test_prefill_interference_needs_correlation_and_a_rise() -> None:
    flat = interference(three_within_a_day(), rise=1.1)
    assert advise(flat, POLICY, NOW) == []
    noisy = interference(three_within_a_day(), rise=1.6, r_noise=0.02)  # ITL uncorrelated with prefill
    assert advise(noisy, POLICY, NOW) == []
    (f,) = advise(interference(three_within_a_day()), POLICY, NOW)
    assert "chunked-prefill" in f.next_layer and "disaggregation" in f.next_layer
    assert f.episodes[0].data["r"] > 0.99


def test_quota_contention_needs_several_quota_less_namespaces() -> None:
    assert advise(pending(three_within_a_day(), quotas=frozenset({"team-b"})), POLICY, NOW) == []
    assert advise(pending(three_within_a_day(), wait=120.0), POLICY, NOW) == []  # short waits are fine
    unknown = replace(pending(three_within_a_day()), gpu_quota_namespaces=None)
    assert advise(unknown, POLICY, NOW) == []  # quotas unknown: no claim
    found = advise(pending(three_within_a_day()), POLICY, NOW)
    assert {f.namespace for f in found} == {"team-a", "team-b"}
    assert "no GPU quota in team-a, team-b" in found[0].episodes[0].evidence


def test_still_pending_pods_count_until_now() -> None:
    pods = tuple(PodRecord(ns, f"p{i}", "w", created_at=NOW - (i + 1) * H, gpus=4, pending_reason="Unschedulable")
                 for i in range(3) for ns in ("a", "b"))
    found = advise(Signals(pods=pods, gpu_quota_namespaces=frozenset()), POLICY, NOW)
    assert {f.namespace for f in found} == {"a", "b"} and "still pending" in found[0].episodes[0].evidence


def test_partial_gang_evidence_and_complete_gangs_are_fine() -> None:
    (f,) = advise(gangs(three_within_a_day()), POLICY, NOW)
    assert f.workload == "llama-405b" and "1/2 pods scheduled" in f.episodes[0].evidence
    assert "8 GPU held" in f.episodes[0].evidence and "gang admission" in f.next_layer
    whole = Signals(pods=tuple(replace(p, scheduled_at=p.created_at + 1, phase="Running")
                               for p in gangs(three_within_a_day()).pods))
    assert advise(whole, POLICY, NOW) == []
    fresh = gangs([NOW - 60, NOW - 50, NOW - 40])  # partly scheduled for a minute: still starting
    assert advise(fresh, POLICY, NOW) == []


def test_restarts_count_when_oom_or_at_load() -> None:
    assert advise(ooms(three_within_a_day(), reason="Error", code=1), POLICY, NOW) == []  # no load known
    (f,) = advise(ooms(three_within_a_day(), reason="Error", code=1, loaded=True), POLICY, NOW)
    assert "48 requests running, KV 97%" in f.episodes[0].evidence
    cuda = ooms(three_within_a_day(), reason="Error", code=1)
    cuda = replace(cuda, pods=tuple(replace(p, terminations=(replace(p.terminations[0],
                   message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),))
                   for p in cuda.pods))
    (f,) = advise(cuda, POLICY, NOW)
    assert "out of memory" in f.episodes[0].evidence and "tensor parallelism" in f.next_layer
    assert advise(ooms(three_within_a_day(), reason="Completed", code=0, loaded=True), POLICY, NOW) == []


def test_restart_count_is_episodes() -> None:
    pod = PodRecord("llm", "vllm-0", "vllm", NOW - H, gpus=1, scheduled_at=NOW - H, phase="Running",
                    terminations=(Termination(NOW - 60, "OOMKilled", 137, restarts=4),))
    (f,) = advise(Signals(pods=(pod,)), POLICY, NOW)
    assert len(f.episodes) == 4


def test_pearson() -> None:
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) is None


def test_gang_quota_and_parallelism_findings_point_at_the_gangs_page() -> None:
    """The layers multi-pod replicas and shared clusters need are documented in docs/gangs-queues.md
    (what is built, what is not yet): the findings that name them point there."""
    from pathlib import Path

    assert (Path(__file__).resolve().parents[2] / "docs" / "gangs-queues.md").is_file()
    for kind in (PARTIAL_GANG, QUOTA_CONTENTION, ENGINE_OOM):
        assert "docs/gangs-queues.md" in NEXT_LAYER[kind], kind


def test_findings_point_at_examples_that_exist() -> None:
    """Every example directory a finding names is shipped (MIG slices for quota contention, Ray Serve
    for cold starts)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    named = {m for text in NEXT_LAYER.values() for m in re.findall(r"manifests/examples/[a-z0-9-]+/", text)}
    assert {"manifests/examples/vllm-mig/", "manifests/examples/rayservice/"} <= named
    for path in named:
        assert (root / path / "kustomization.yaml").is_file(), path
