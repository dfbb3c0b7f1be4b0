"""Host name resolution for the scrapes and queries, in a thread pool of its own (an I/O-edge helper).

aiohttp resolves names with ``getaddrinfo`` in the event loop's *default* executor (a handful of
threads, shared with anything else). A source whose host name never resolves (a DNS server that does
not answer) would hold one of those threads per attempt, and a few of them would delay every other
ScaledObject's name resolution. :class:`IsolatedResolver` resolves in its own pool, with at most one
resolution in flight per (host, port, family) — callers asking for a name being resolved share it —
so a hostile name costs one thread at a time, whatever the number of ScaledObjects using it. Address
literals never reach a resolver (aiohttp connects to them directly).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp.abc import AbstractResolver

_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class IsolatedResolver(AbstractResolver):
    def __init__(self, workers: int = 16) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="warmscale-dns")
        self._inflight: dict[tuple[str, int, int], asyncio.Future[Any]] = {}

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> Any:
        key = (host, port, int(family))
        fut = self._inflight.get(key)
        if fut is None:
            call = functools.partial(socket.getaddrinfo, host, port, family, socket.SOCK_STREAM, 0,
                                     socket.AI_ADDRCONFIG)
            fut = asyncio.get_running_loop().run_in_executor(self._pool, call)
            self._inflight[key] = fut
            fut.add_done_callback(functools.partial(self._done, key))
        infos = await asyncio.shield(fut)
        out = []
        for fam, _, proto, _, address in infos:
            if fam == socket.AF_INET6 and (len(address) < 4 or address[3]):
                continue  # no IPv6 in this build, or a link-local address with a scope: not for metrics
            if fam not in (socket.AF_INET, socket.AF_INET6):
                continue
            out.append({"hostname": host, "host": address[0], "port": address[1], "family": fam, "proto": proto,
                        "flags": _NUMERIC})
        if not out:
            raise OSError(f"no usable address for {host!r}")
        return out

    def _done(self, key: tuple[str, int, int], fut: asyncio.Future[Any]) -> None:
        self._inflight.pop(key, None)
        if not fut.cancelled():
            fut.exception()  # retrieved: nobody may be waiting any more

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
