"""The vLLM-V1 engine model: scheduler table tests, block allocation, and the segment jumps against a
per-iteration reference."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, VLLM_TTFT_BUCKETS, Engine, EngineProfile, Request

# Round numbers: every step costs 10 ms + 1 ms per 100 prefill tokens; budget 100 tokens; 4 seqs.
SIMPLE = EngineProfile(
    name="simple", model="test", gpus_per_replica=1, prefill_tps=100_000.0, step_fixed_s=0.01,
    step_per_seq_s=0.0, step_per_kv_token_s=0.0, kv_capacity_tokens=16 * 100, max_num_seqs=4,
    max_num_batched_tokens=100, block_size=16,
)


def steps(e: Engine, n: int) -> None:
    """Run exactly ``n`` iterations (one segment each)."""
    e.max_jump = 1
    for _ in range(n):
        assert e.seg_end < float("inf")
        e.advance_to(e.seg_end)


def test_v1_scheduler_table() -> None:
    """Token budget shared by decodes and prefill chunks, FIFO, waiting until the first chunk is
    scheduled, blocks allocated chunk by chunk."""
    e = Engine(SIMPLE, [])
    e.max_jump = 1
    e.enqueue(Request(0.0, 150, 3), 0.0)  # A: 150-token prompt -> chunks 100 + 50
    e.enqueue(Request(0.0, 30, 2), 0.0)  # B: waits behind A's first chunk (budget used up)
    # step 1: A gets 100 tokens (7 blocks), B still waiting (no budget left)
    assert (e.waiting_n, e.running_n) == (1, 1)
    assert e.running[0].blocks == 7 and e.total_blocks - e.free_blocks == 7
    steps(e, 1)
    # step 2: A's last 50 tokens + B's 30-token prompt (same step, 80 tokens)
    assert (e.waiting_n, e.running_n) == (0, 2)
    comp = e._seg[0]  # type: ignore[index]
    assert [(r.inp, t, pre) for r, t, pre in comp] == [(150, 50, True), (30, 30, True)]
    steps(e, 1)
    # both got their first token at the end of step 2; A holds ceil(150/16)=10 blocks, B 2
    assert len(e.sink) == 2
    assert [r.blocks for r in e.running] == [10, 2]
    assert e.prompt_tokens_total == 180 and e.generation_tokens_total == 2
    # step 3: decode 1 token each (2 tokens), A now has 151 tokens (still 10 blocks), B 31 (2 blocks)
    comp = e._seg[0]  # type: ignore[index]
    assert [(t, pre) for _, t, pre in comp] == [(1, False), (1, False)]
    steps(e, 1)
    # B finished (2 tokens) and freed its blocks; A decodes one more
    assert e.running_n == 1 and e.requests_total == 1
    steps(e, 1)
    assert e.idle and e.free_blocks == e.total_blocks and e.requests_total == 2
    assert e.h_iter.count == 4 and e.h_iter.sum == 100 + 80 + 2 + 1


def test_waiting_until_first_chunk_and_max_num_seqs() -> None:
    e = Engine(replace(SIMPLE, max_num_seqs=2, max_num_batched_tokens=1000), [])
    for _ in range(3):
        e.enqueue(Request(0.0, 10, 50), 0.0)
    assert (e.waiting_n, e.running_n) == (1, 2)  # the third waits for a sequence slot


def test_recompute_preemption_of_the_newest() -> None:
    # 16 blocks of 16 tokens; two requests of 64 prompt + 100 output tokens (11 blocks each at the end)
    e = Engine(replace(SIMPLE, kv_capacity_tokens=256, max_num_batched_tokens=1000), [])
    e.enqueue(Request(0.0, 64, 100), 0.0)
    e.enqueue(Request(0.0, 64, 100), 0.0)
    old, new = e.running
    e.max_jump = 1
    while new in e.running:
        e.advance_to(e.seg_end)
    # the newest was preempted (recompute: blocks freed, back to the head of the queue), the oldest kept
    assert e.preemptions_total == 1 and e.waiting[0] is new and new.blocks == 0 and new.done == 0
    assert new.target == 64 + new.gen and old in e.running
    e.advance_to(100.0)
    assert e.requests_total == 2 and e.free_blocks == e.total_blocks
    assert old.t_first is not None and new.t_first is not None


def test_no_request_is_scheduled_before_it_arrives() -> None:
    e = Engine(ENGINE_PROFILES["8b-h100"], [])
    rng = random.Random(4)
    t = 0.0
    reqs = []
    for _ in range(300):
        t += rng.expovariate(5.0)
        e.advance_to(t)
        r = Request(t, rng.randint(50, 3000), rng.randint(1, 300))
        reqs.append(r)
        e.enqueue(r, t)
    e.advance_to(1e6)
    assert all(r.t_sched is not None and r.t_sched >= r.t_arr for r in reqs)
    assert all(ttft > 0 for _, ttft, _ in e.sink)


def _replay(max_jump: int, seed: int, profile: EngineProfile) -> list[tuple[float, float, int]]:
    e = Engine(profile, [])
    e.max_jump = max_jump
    rng = random.Random(seed)
    t = 0.0
    for _ in range(400):
        t += rng.expovariate(6.0)
        e.advance_to(t)
        e.enqueue(Request(t, rng.randint(20, 4000), rng.randint(1, 400)), t)
    e.advance_to(1e6)
    assert e.idle
    return sorted(e.sink)


@pytest.mark.parametrize("seed", [1, 2])
def test_segment_jumps_match_the_per_iteration_reference(seed: int) -> None:
    profile = replace(ENGINE_PROFILES["8b-h100"], kv_capacity_tokens=60_000)  # some preemption too
    fast = _replay(1 << 30, seed, profile)
    ref = _replay(1, seed, profile)
    assert len(fast) == len(ref)
    for (a1, t1, _), (a2, t2, _) in zip(fast, ref, strict=True):
        assert a1 == a2
        assert t1 == pytest.approx(t2, rel=1e-6, abs=1e-6)


def test_ttft_histogram_uses_v1_buckets() -> None:
    e = Engine(ENGINE_PROFILES["8b-h100"], [])
    e.enqueue(Request(0.0, 500, 5), 0.0)
    e.advance_to(10.0)
    cum = e.h_ttft.cumulative()
    assert tuple(le for le, _ in cum[:-1]) == VLLM_TTFT_BUCKETS
    assert cum[-1][1] == 1 and e.h_ttft.count == 1


def test_prefill_time_per_token_grows_with_the_context() -> None:
    """Issue 21, requirement 5: the attention term. An 8k-token prompt costs more per token than the
    calibration's 1000-token prompts; those cost what the calibrated roof says (mean context 500)."""
    from warmscale.benchmarks.sim.engine import ENGINE_PROFILES, Engine, Request

    p = ENGINE_PROFILES["8b-h100"]

    def ttft(inp: int) -> float:
        sink: list[tuple[float, float, int]] = []
        e = Engine(p, sink, 0.0)
        e.enqueue(Request(0.0, inp, 1), 0.0)
        e.advance_to(120.0)
        return sink[0][1]

    short, long = ttft(1000) / 1000, ttft(16000) / 16000
    # 16k: ~25% more compute per token at a mean context of 8k (the 1000-token prompt's 2.5 ms step
    # overhead is 8% of its time, so the ratio of the times is ~1.16).
    assert long > 1.12 * short
    assert abs(p.attention_extra(1000, p.calibration_context)) < 1e-12
    assert p.attention_extra(1000, 8000) > 0 > p.attention_extra(1000, 0)
