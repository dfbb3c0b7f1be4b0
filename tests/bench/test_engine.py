"""The engine model against hand-computed cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.sim.engine import ENGINE_PROFILES, VLLM_TTFT_BUCKETS, Engine, EngineProfile, Request

# Round numbers: prefill 1000 tok/s whatever the batch, steps free unless stated.
SIMPLE = EngineProfile(
    name="simple", model="test", gpus_per_replica=1, prefill_tps=1000.0, step_fixed_s=0.0,
    step_per_seq_s=0.0, step_per_kv_token_s=0.0, kv_capacity_tokens=1e9, max_num_seqs=256,
    max_num_batched_tokens=1000,
)


def run(engine: Engine, ticks: int, dt: float = 1.0) -> list[tuple[float, float, int]]:
    sink: list[tuple[float, float, int]] = []
    for i in range(ticks):
        engine.step(i * dt, dt, sink)
    return sink


def test_ttft_is_prefill_time_on_an_idle_engine() -> None:
    e = Engine(SIMPLE)
    e.enqueue(Request(0.0, 500, 10))
    sink = run(e, 1)
    assert sink == [(0.0, pytest.approx(0.5), 1)]


def test_ttft_includes_queue_wait_fifo() -> None:
    e = Engine(SIMPLE)
    e.enqueue(Request(0.0, 1000, 10))
    e.enqueue(Request(0.2, 500, 10))
    sink = run(e, 2)
    # The second prompt's last token is computed at 1.5 s; it arrived at 0.2 s.
    assert [round(x[1], 6) for x in sink] == [1.0, 1.3]


def test_prefill_spanning_ticks() -> None:
    e = Engine(SIMPLE)
    e.enqueue(Request(0.0, 2500, 5))
    sink = run(e, 3)
    assert sink[0][1] == pytest.approx(2.5)


def test_tpot_from_batch_size() -> None:
    prof = replace(SIMPLE, step_fixed_s=0.01, step_per_seq_s=0.001)
    e = Engine(prof)
    for _ in range(10):
        e.enqueue(Request(0.0, 10, 51))
    run(e, 1)  # prefill (100 tokens) + first tokens
    assert e.generation_tokens_total == pytest.approx(10)
    # 10 sequences decode: step = 10 ms + 10 x 1 ms = 20 ms -> 50 tokens each in one second.
    run(e, 1)
    assert e.requests_total == 10
    assert e.generation_tokens_total == pytest.approx(510)
    assert e.running_n == 0 and e.kv_used == 0


def test_kv_capacity_bounds_admission() -> None:
    prof = replace(SIMPLE, kv_capacity_tokens=1000.0)
    e = Engine(prof)
    e.enqueue(Request(0.0, 600, 100))
    e.enqueue(Request(0.0, 600, 100))
    e.step(0.0, 0.1)
    assert e.running_n == 1 and e.waiting_n == 1
    assert e.kv_usage() == pytest.approx(0.6)


def test_max_num_seqs_bounds_admission() -> None:
    e = Engine(replace(SIMPLE, max_num_seqs=2))
    for _ in range(3):
        e.enqueue(Request(0.0, 10, 100))
    e.step(0.0, 0.01)
    assert e.running_n == 2 and e.waiting_n == 1


def test_kv_growth_preempts_the_newest() -> None:
    prof = replace(SIMPLE, kv_capacity_tokens=1000.0, step_fixed_s=0.01)
    e = Engine(prof)
    e.enqueue(Request(0.0, 400, 1000))
    e.enqueue(Request(0.0, 400, 1000))
    run(e, 3)  # each gains 100 tokens/s: 2 x 400 + growth overflows 1000
    assert e.preemptions_total >= 1
    assert e.waiting_n == 1 and e.running_n == 1


def test_cohort_counts_as_n_requests() -> None:
    e = Engine(SIMPLE)
    e.enqueue(Request(0.0, 100, 1, n=4))
    sink = run(e, 1)
    # 4 x 100 tokens; the mean member finishes at (0.4 - 1.5 x 0.1) = 0.25 s.
    assert sink[0][2] == 4
    assert sink[0][1] == pytest.approx(0.25)
    assert e.requests_total == 4


def test_ttft_histogram_uses_vllm_buckets() -> None:
    e = Engine(SIMPLE)
    e.enqueue(Request(0.0, 500, 10))
    run(e, 1)
    h = e.ttft_histogram()
    assert h.bounds()[:-1] == VLLM_TTFT_BUCKETS
    assert h.count == 1 and h.sum == pytest.approx(0.5)
    assert dict(h.buckets)[0.5] == 1 and dict(h.buckets)[0.25] == 0


def test_chunked_prefill_shares_steps_with_decode() -> None:
    p = ENGINE_PROFILES["8b-h100"]
    alone = p.prefill_rate(0, 0)
    busy = p.prefill_rate(128, 200_000)
    assert busy < alone < p.prefill_tps
    assert p.decode_step_s(1, 1000) == pytest.approx(p.step_fixed_s + p.step_per_seq_s + 1000 * p.step_per_kv_token_s)


def test_gpu_busy_time_counts_any_kernel() -> None:
    prof = replace(SIMPLE, step_fixed_s=0.01)
    e = Engine(prof)
    e.enqueue(Request(0.0, 100, 1000))
    run(e, 3)
    # Tick 1: the prefill (100 tokens at ~1000 tok/s); ticks 2-3: one sequence decoding keeps the
    # GPU "100% utilised" (DCGM_FI_DEV_GPU_UTIL counts any kernel).
    assert e.busy_s == pytest.approx(100 / prof.prefill_rate(0, 100) + 2.0)
