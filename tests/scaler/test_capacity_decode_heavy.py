"""Capacity on a decode-heavy fleet (issue 12, the DeepSeek-R1 day): a replica whose requests wait for
KV blocks, not for prefill, says nothing about its prefill rate; and a backlog is drained over the time
new replicas take to be ready, not within the burst window. Table tests, injected clock."""

from __future__ import annotations

import pytest

from tests.scaler.test_policy import Run, cfg
from warmscale.signals.model import ReplicaReading, ReplicaSignal

RATE = 14_000.0  # prompt tokens/s the replica prefills when prefill is its bottleneck


def _sig(prompt: float, waiting: float, kv: float, preempted: float, running: float = 300.0) -> ReplicaReading:
    sig = ReplicaSignal(engine="vllm", waiting=waiting, running=running, kv_usage=kv, prompt_tokens_total=prompt,
                        requests_total=prompt / 1_000.0, generation_tokens_total=prompt / 5.0,
                        preemptions_total=preempted)
    return ReplicaReading(replica="a", observed_at=0.0, signal=sig)


def _run(phase_rate: float, waiting: float, kv: float, preempt_per_s: float, seconds: int = 300) -> float:
    """Five minutes saturated at ``RATE`` with the KV cache at half (prefill-bound), then ``seconds`` with
    requests waiting at ``phase_rate`` prompt tokens/s, the KV cache at ``kv`` and ``preempt_per_s``
    preemptions per second; the learned prefill rate at the end."""
    run = Run(cfg(maxReplicas="50", modelProfile="70b-h100-tp4"))
    prompt, preempted = 0.0, 0.0
    for _ in range(300):
        run.step([_sig(prompt, 10.0, 0.5, preempted)], dt=1)
        prompt += RATE
    before = run.state.capacity[""].prefill_tps
    assert before == pytest.approx(RATE, rel=0.02)
    for _ in range(seconds):
        run.step([_sig(prompt, waiting, kv, preempted)], dt=1)
        prompt += phase_rate
        preempted += preempt_per_s
    return run.state.capacity[""].prefill_tps


# (case, prompt tokens/s while waiting, KV usage, preemptions/s, learned rate at least, at most)
CASES = [
    # The DeepSeek-R1 day: two replicas under a burst, the cache full of long decodes, preempting;
    # prompts trickle in at half the rate as blocks free. Before: learned ~RATE / 2.
    ("kv full and preempting: not a prefill sample", RATE / 2, 500.0, 0.97, 9.0, RATE * 0.98, RATE * 1.02),
    ("kv full, no preemption: not a prefill sample", RATE / 2, 500.0, 0.95, 0.0, RATE * 0.98, RATE * 1.02),
    ("preempting below kvCacheHigh: not a prefill sample", RATE / 2, 500.0, 0.85, 2.0, RATE * 0.98, RATE * 1.02),
    # Prefill really is the bottleneck (cache at half, nothing preempted): the estimate follows it down.
    ("prefill-bound at half the rate: learned", RATE / 2, 50.0, 0.5, 0.0, RATE / 2 * 0.98, RATE * 0.6),
    # Served more than thought while the cache is full: capacity is at least what was served.
    # (timed conservatively: 10-s samples over 11 s, docs/policy.md)
    ("kv full serving more: raised", RATE * 1.3, 50.0, 0.95, 0.0, RATE * 1.15, RATE * 1.3),
]


@pytest.mark.parametrize(("case", "rate", "waiting", "kv", "preempt", "lo", "hi"), CASES, ids=[c[0] for c in CASES])
def test_a_saturated_decode_heavy_replica_does_not_halve_the_capacity(case: str, rate: float, waiting: float,
                                                                      kv: float, preempt: float, lo: float,
                                                                      hi: float) -> None:
    assert lo <= _run(rate, waiting, kv, preempt) <= hi


def _backlog_step(ttr: str, waiting: float) -> dict[str, int]:
    """Two replicas serving 14k prompt tokens/s each at the 70B prior, 1,000 prompt tokens a request,
    ``waiting`` requests queued on each and not growing; the prefill-bound need after 30 s."""
    run = Run(cfg(maxReplicas="32", modelProfile="70b-h100-tp4", timeToReadySeconds=ttr, burstWindowSeconds="10"))
    prompt = 0.0
    rules: dict[str, int] = {}
    for _ in range(30):
        readings = [ReplicaReading(replica=r, observed_at=0.0, signal=ReplicaSignal(
            engine="vllm", waiting=waiting, running=300.0, kv_usage=0.97, prompt_tokens_total=prompt,
            requests_total=prompt / 1_000.0, generation_tokens_total=prompt / 5.0, preemptions_total=0.0))
            for r in ("a", "b")]
        rules = run.step(readings, dt=1, ready_replicas=2, starting_replicas=0, current_replicas=2).rules
        prompt += RATE
    return rules


@pytest.mark.parametrize(("ttr", "waiting", "most"), [
    # 2 x 1,000 waiting x 1,000 tokens = 2M tokens. Within the 10-s burst window that is 200k tok/s more:
    # ~20 replicas more, none of which can serve before 905 s. Over 905 s it is 2.2k tok/s.
    ("905", 1_000.0, 4),
    ("905", 0.0, 3),
])
def test_a_backlog_behind_a_cold_start_does_not_ask_for_five_times_the_replicas(ttr: str, waiting: float,
                                                                               most: int) -> None:
    assert 2 <= _backlog_step(ttr, waiting)["prefill"] <= most


def test_a_backlog_is_still_taken_within_the_burst_window_when_replicas_come_quickly() -> None:
    """With a time-to-ready under the burst window the waiting prompts are sized as before (10 s)."""
    assert _backlog_step("5", 1_000.0)["prefill"] >= 18
