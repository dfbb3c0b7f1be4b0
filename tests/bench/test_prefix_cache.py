"""The simulated prefix cache (vLLM automatic prefix caching): a table of the cache itself (hit,
eviction, pinning, the last partial block), then the engine that uses it."""

from __future__ import annotations

import pytest

from warmscale.benchmarks.sim.engine import Engine, EngineProfile, Request
from warmscale.simulation.prefix_cache import PrefixCache

BT = 4  # tokens per trace block in these tables

# (steps, then: blocks a lookup of (ids, prompt tokens) hits, and the cache's free (LRU) order).
# A step is ("pin", ids) | ("unpin", ids) | ("trim", max_free).
CASES: list[tuple[str, list[tuple[str, object]], tuple[tuple[int, ...], int], int, list[int]]] = [
    ("empty cache: no hit", [], ((1, 2, 3), 12), 0, []),
    ("full prefix hits, last full block ending the prompt is recomputed",
     [("pin", (1, 2, 3)), ("unpin", (1, 2, 3))], ((1, 2, 3), 12), 2, [3, 2, 1]),
    ("last partial block always computed", [("pin", (1, 2, 3)), ("unpin", (1, 2, 3))], ((1, 2, 3), 11), 2,
     [3, 2, 1]),
    ("prefix extends with new blocks", [("pin", (1, 2)), ("unpin", (1, 2))], ((1, 2, 7, 8), 16), 2, [2, 1]),
    ("a hit stops at the first miss", [("pin", (1, 3)), ("unpin", (1, 3))], ((1, 2, 3), 12), 1, [3, 1]),
    ("evicted LRU, tail first", [("pin", (1, 2, 3)), ("unpin", (1, 2, 3)), ("trim", 2)], ((1, 2, 3), 13), 2,
     [2, 1]),
    ("head evicted last: a trim to 1 keeps the first block", [("pin", (1, 2, 3)), ("unpin", (1, 2, 3)),
                                                              ("trim", 1)], ((1, 2, 3), 13), 1, [1]),
    ("pinned blocks are never evicted", [("pin", (1, 2, 3)), ("trim", 0)], ((1, 2, 3), 13), 3, []),
    ("two holders: one leaving keeps it pinned", [("pin", (1, 2)), ("pin", (1, 5)), ("unpin", (1, 2)),
                                                  ("trim", 0)], ((1, 5), 9), 2, []),
    ("a re-used block becomes most recent", [("pin", (1,)), ("unpin", (1,)), ("pin", (2,)), ("unpin", (2,)),
                                             ("pin", (1,)), ("unpin", (1,)), ("trim", 1)], ((1,), 5), 1, [1]),
    ("a 1-token prompt never hits", [("pin", (1,)), ("unpin", (1,))], ((1,), 1), 0, [1]),
]


@pytest.mark.parametrize(("steps", "lookup", "hit", "free"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cache_table(steps: list[tuple[str, object]], lookup: tuple[tuple[int, ...], int], hit: int,
                     free: list[int]) -> None:
    c = PrefixCache(BT)
    for op, arg in steps:
        if op == "pin":
            c.pin(arg)  # type: ignore[arg-type]
        elif op == "unpin":
            c.unpin(arg)  # type: ignore[arg-type]
        else:
            c.trim(arg)  # type: ignore[arg-type]
    assert c.hit_blocks(*lookup) == hit
    assert list(c.free) == free


# Every step costs 10 ms + 1 ms per 100 tokens; budget 1000 tokens; 16 sequences; 512-token trace
# blocks in a 64-block (of 16 tokens: 1,024 tokens) cache: two 512-token blocks' worth.
PROFILE = EngineProfile(
    name="pc", model="test", gpus_per_replica=1, prefill_tps=100_000.0, step_fixed_s=0.01,
    step_per_seq_s=0.0, step_per_kv_token_s=0.0, kv_capacity_tokens=16 * 256, max_num_seqs=16,
    max_num_batched_tokens=1000, block_size=16,
)


def _serve(e: Engine, r: Request, at: float) -> float:
    """Enqueue ``r`` at ``at``, run until it is done; its TTFT."""
    e.enqueue(r, at)
    e.advance_to(at + 100.0)
    assert r.t_first is not None and e.idle
    return r.t_first - r.t_arr


def test_engine_computes_only_the_uncached_blocks() -> None:
    e = Engine(PROFILE, [])
    first = _serve(e, Request(0.0, 1100, 1, hashes=(1, 2, 3), hash_tokens=512), 0.0)
    # 1,100 tokens in chunks of 1000 + 100: 2 steps, 10 ms + 10 ms + 1 ms.
    assert first == pytest.approx(0.01 + 0.01 + 0.01 + 0.001)
    # Same two full blocks, another tail: 1,024 cached, 76 computed in one step.
    second = _serve(e, Request(10.0, 1100, 1, hashes=(1, 2, 9), hash_tokens=512), 10.0)
    assert second == pytest.approx(0.01 + 0.00076)
    assert (e.prefix_queries_total, e.prefix_hits_total) == (2200, 1024)
    # The prompt ends exactly on a block: its last full block is recomputed (at most prompt - 1 hit).
    third = _serve(e, Request(20.0, 1024, 1, hashes=(1, 2), hash_tokens=512), 20.0)
    assert third == pytest.approx(0.01 + 0.00512)
    assert e.prefix_hits_total == 1024 + 512


def test_engine_pins_running_blocks_and_bounds_the_rest_by_free_kv() -> None:
    e = Engine(PROFILE, [])
    a = Request(0.0, 1100, 50, hashes=(1, 2, 3), hash_tokens=512)
    e.enqueue(a, 0.0)
    e.sync(0.05)  # A's prefill is done (2 steps), it is decoding: blocks 1, 2 pinned
    assert e.cache is not None and dict(e.cache.pinned) == {1: 1, 2: 1} and not e.cache.free
    # B fills the KV: A's blocks stay (pinned) while B's prompt takes the rest.
    b = Request(0.1, 2900, 1, hashes=(7, 8, 9, 10, 11, 12), hash_tokens=512)
    e.enqueue(b, 0.1)
    e.advance_to(100.0)
    assert e.idle
    # Both finished: 2 + 5 full blocks went free, but the free KV holds 4096 // 512 = 8 blocks: all stay.
    assert len(e.cache.free) == 7 and not e.cache.pinned
    # B finished first (one output token), A last: A's blocks are the most recent, B's tail the oldest.
    assert list(e.cache.free) == [11, 10, 9, 8, 7, 2, 1]
    # C's 3,000 prompt tokens (188 KV blocks of 16) leave 68 x 16 = 1,088 free tokens: 2 cached blocks
    # stay, the LRU ones (B's, tail first) go; C's own 5 full blocks are pinned while it runs.
    c = Request(200.0, 3000, 100, hashes=(20, 21, 22, 23, 24, 25), hash_tokens=512)
    e.enqueue(c, 200.0)
    e.sync(200.1)
    assert c.t_first is not None and not e.idle
    assert list(e.cache.free) == [2, 1]
    assert e.cache.evicted == 5
    assert set(e.cache.pinned) == {20, 21, 22, 23, 24}


def test_requests_without_ids_never_make_a_cache() -> None:
    e = Engine(PROFILE, [])
    _serve(e, Request(0.0, 1100, 1), 0.0)
    _serve(e, Request(1.0, 1100, 1), 1.0)
    assert e.cache is None and e.prefix_queries_total == 0.0


def test_preemption_releases_the_pins() -> None:
    small = EngineProfile(
        name="pc-small", model="test", gpus_per_replica=1, prefill_tps=100_000.0, step_fixed_s=0.01,
        step_per_seq_s=0.0, step_per_kv_token_s=0.0, kv_capacity_tokens=16 * 80, max_num_seqs=16,
        max_num_batched_tokens=1000, block_size=16,
    )
    e = Engine(small, [])
    a = Request(0.0, 600, 400, hashes=(1, 2), hash_tokens=512)
    b = Request(0.0, 600, 400, hashes=(3, 4), hash_tokens=512)
    e.enqueue(a, 0.0)
    e.enqueue(b, 0.0)
    e.advance_to(1000.0)
    assert e.preemptions_total >= 1 and e.idle
    assert e.cache is not None and not e.cache.pinned  # every pin released (finish or preemption)


def test_the_engine_exports_its_hits_as_vllm_does() -> None:
    """``vllm:prefix_cache_hits_total`` / ``_queries_total`` (tokens): the scaler's capacity floor
    subtracts the hits from the prompt tokens (it read 0 before, overstating the capacity)."""
    from warmscale.benchmarks.sim.exposition import engine_signal, render_vllm
    from warmscale.signals.engines import parse_payload

    e = Engine(PROFILE, [])
    _serve(e, Request(0.0, 1100, 1, hashes=(1, 2, 3), hash_tokens=512), 0.0)
    _serve(e, Request(10.0, 1100, 1, hashes=(1, 2, 9), hash_tokens=512), 10.0)
    text = render_vllm(e)
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="llm"} 1024.0' in text
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="llm"} 2200.0' in text
    assert parse_payload(text, "vllm").prefix_cache_hits_total == 1024.0
    assert engine_signal(e).prefix_cache_hits_total == 1024.0


def test_blocks_a_decode_outgrew_are_evicted_before_the_next_lookup() -> None:
    """A long decode fills the free KV within one segment: the next admission finds the LRU blocks
    gone (the cache is trimmed before the lookup, not only after the last plan's allocation)."""
    e = Engine(PROFILE, [])
    _serve(e, Request(0.0, 1100, 1, hashes=(1, 2, 3), hash_tokens=512), 0.0)
    _serve(e, Request(0.5, 1100, 1, hashes=(5, 6, 7), hash_tokens=512), 0.5)
    assert e.cache is not None and list(e.cache.free) == [2, 1, 6, 5]
    b = Request(1.0, 100, 3500, hashes=(50,), hash_tokens=512)
    e.enqueue(b, 1.0)
    # At 34 s B holds ~3,400 KV tokens (213 of 256 blocks): the 43 free blocks (688 tokens) hold one
    # trace block, the most recent (5); block 1 is gone, so C computes its whole prompt.
    c = Request(34.0, 600, 1, hashes=(1, 9), hash_tokens=512)
    e.enqueue(c, 34.0)
    assert c in e.running and b.gen < b.out
    assert e.prefix_hits_total == 0.0  # (it was 512 when the cache was trimmed only after a plan)
    assert not e.cache.free  # C's blocks took the rest
