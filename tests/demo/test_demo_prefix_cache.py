"""The demo's engine caches prefixes as the benchmark's does: a request with block ids prefills only
what its replica's cache does not hold; a sleep drops the cache; the Mooncake burst carries its ids."""

from __future__ import annotations

import pytest

from warmscale.demo.burst import burst, load_trace
from warmscale.simulation.engine import EngineProfile, Request, SimulatedEngine
from warmscale.traces import block_hashes, resolve

# 1,000 prompt tokens per second of prefill: the TTFTs below read as tokens computed.
PROFILE = EngineProfile(max_num_seqs=8, kv_capacity_tokens=100_000, prefill_tps=1000.0)


def _ttft(e: SimulatedEngine, r: Request, at: float) -> float:
    e.submit(r)
    t = at
    while r.first_token_at is None or r.generated < r.output_tokens:
        e.step(t)
        t += 0.01
    return r.first_token_at - r.arrived_at


def test_the_demo_engine_prefills_only_the_uncached_blocks() -> None:
    e = SimulatedEngine("e", PROFILE)
    assert _ttft(e, Request(0.0, 1100, 1, hashes=(1, 2, 3), hash_tokens=512), 0.0) == pytest.approx(1.1)
    assert _ttft(e, Request(5.0, 1100, 1, hashes=(1, 2, 9), hash_tokens=512), 5.0) == pytest.approx(0.076)
    assert _ttft(e, Request(10.0, 1100, 1), 10.0) == pytest.approx(1.1)  # no ids: all computed
    series = {line.split("{")[0]: line.rsplit(" ", 1)[1] for line in e.exposition().decode().splitlines()
              if line.startswith("vllm:prefix_cache_")}
    assert series["vllm:prefix_cache_hits_total"] == "1024.0"
    assert series["vllm:prefix_cache_queries_total"] == "2200.0"  # the request without ids is not a query
    e.fall_asleep(1, 1.0)
    e.wake_up(1.0)
    assert _ttft(e, Request(20.0, 1100, 1, hashes=(1, 2, 3), hash_tokens=512), 20.0) == pytest.approx(1.1)


def test_the_mooncake_burst_carries_its_block_ids() -> None:
    path = resolve("mooncake-conv")
    rows = load_trace(path)
    arrivals = burst(rows, 30.0, 120.0, block_hashes(path, rows))
    assert arrivals and all(a.hashes is not None and a.hash_tokens == 512 for a in arrivals)
    assert all(len(a.hashes or ()) == -(-a.input_tokens // 512) for a in arrivals)
    azure = resolve("azure-code")
    assert block_hashes(azure, load_trace(azure)) is None
