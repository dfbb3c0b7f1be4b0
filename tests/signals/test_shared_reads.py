"""SharedReads: one fetch in flight per key, a bounded wait that leaves the fetch running."""

from __future__ import annotations

import asyncio

import pytest

from warmscale.signals.sources.shared import SharedReads


async def test_concurrent_and_fresh_reads_share_one_fetch() -> None:
    shared, calls = SharedReads(), 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return calls

    got = await asyncio.gather(*(shared.get("k", fetch, wait=1.0, fresh_for=0.5) for _ in range(10)))
    assert got == [1] * 10 and calls == 1
    assert await shared.get("k", fetch, wait=1.0, fresh_for=0.5) == 1  # fresh: reused
    assert await shared.get("k", fetch, wait=1.0, fresh_for=0.0) == 2  # not fresh enough: fetched again
    await shared.aclose()


async def test_a_late_fetch_times_out_the_caller_and_serves_the_next() -> None:
    shared, calls = SharedReads(), 0

    async def slow() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.3)
        return "late"

    with pytest.raises(TimeoutError):
        await shared.get("k", slow, wait=0.1, fresh_for=0.5)
    with pytest.raises(TimeoutError):
        await shared.get("k", slow, wait=0.05, fresh_for=0.5)  # joins the one in flight
    await asyncio.sleep(0.3)
    assert await shared.get("k", slow, wait=0.1, fresh_for=0.5) == "late"
    assert calls == 1
    await shared.aclose()


async def test_failures_propagate_and_are_not_left_unretrieved() -> None:
    shared = SharedReads()

    async def boom() -> None:
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        await shared.get("k", boom, wait=1.0)
    await shared.aclose()


async def test_isolated_resolver_resolves_and_shares_one_lookup_per_name() -> None:
    import socket

    from warmscale.signals.sources.resolver import IsolatedResolver

    r = IsolatedResolver(workers=2)
    got = await asyncio.gather(*(r.resolve("localhost", 80, socket.AF_INET) for _ in range(20)))
    assert all(g and g[0]["host"] == "127.0.0.1" and g[0]["port"] == 80 for g in got)
    assert not r._inflight  # every lookup done and forgotten
    with pytest.raises(OSError):
        await r.resolve("no-such-host.invalid", 80)
    await r.close()
