"""One replica's prefix cache of KV blocks, as vLLM's automatic prefix caching keeps it (pure).

vLLM (``--enable-prefix-caching``, on by default in V1; docs "Automatic Prefix Caching", design
``docs/design/prefix_caching.md``) hashes every *full* block of a prompt together with the hash of the
block before it, so a block id names the whole prefix up to it. A new request reuses its longest run
of leading blocks already in the cache and computes the rest; at most ``prompt - 1`` tokens can hit
(the last token is always computed to sample the first output token), so the prompt's last partial
block, and a last full block that ends the prompt, are always computed. Blocks of running requests
are referenced (pinned); a finished request's blocks stay cached in the free pool and are evicted,
least recently used first (a request's tail blocks before its head), when the free pool is allocated.

Here a block is a trace's block (Mooncake: 512 tokens) named by the trace's id. Both simulated
engines use it (the benchmarks' ``benchmarks/sim/engine.py`` and the demo's
``warmscale/simulation/engine.py``); each bounds the unpinned blocks by its free KV memory (:meth:`trim`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Block ids held by a replica: pinned (referenced by running requests) or free (LRU order)."""

    __slots__ = ("block_tokens", "evicted", "free", "pinned")

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self.pinned: dict[int, int] = {}  # id -> running requests referencing it
        self.free: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced; first = evicted next
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.pinned) + len(self.free)

    def __contains__(self, block: int) -> bool:
        return block in self.pinned or block in self.free

    def hit_blocks(self, ids: Sequence[int], prompt_tokens: int) -> int:
        """How many leading blocks of a prompt are cached and reusable: the longest cached run of
        ``ids``, at most the full blocks before the prompt's last token (``(prompt - 1) // block``)."""
        limit = min(len(ids), (prompt_tokens - 1) // self.block_tokens)
        k = 0
        pinned, free = self.pinned, self.free
        while k < limit and (ids[k] in pinned or ids[k] in free):
            k += 1
        return k

    def pin(self, ids: Sequence[int]) -> None:
        """A running request references these blocks (cached or just computed)."""
        pinned, free = self.pinned, self.free
        for b in ids:
            if b in free:
                del free[b]
            pinned[b] = pinned.get(b, 0) + 1

    def unpin(self, ids: Sequence[int]) -> None:
        """A request that referenced ``ids`` finished or was preempted: blocks no longer referenced go
        to the free pool's recent end, tail first, so its head is evicted last."""
        pinned, free = self.pinned, self.free
        for b in reversed(ids):
            c = pinned.get(b, 0) - 1
            if c > 0:
                pinned[b] = c
            elif c == 0:
                del pinned[b]
                free[b] = None

    def trim(self, max_free: int) -> int:
        """Evict free blocks, least recently used first, until at most ``max_free`` stay; the count."""
        free = self.free
        n = len(free) - max(0, max_free)
        if n <= 0:
            return 0
        pop = free.popitem
        for _ in range(n):
            pop(last=False)
        self.evicted += n
        return n
