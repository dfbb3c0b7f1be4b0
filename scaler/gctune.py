"""Garbage-collector settings for the long-running scaler processes (an I/O-shell helper).

With CPython's defaults (a young collection every 700 net allocations) the scaler process at 1,000
ScaledObjects promotes the objects that live for one tick interval (snapshots, readings, pending
reads) into the oldest generation, which then fills by a quarter every second or so: a full
collection of ~300,000 objects -- 0.3-0.6 s wall on the loaded 2-core machine of ``benchmarks/
rpc_load``, 6-8 of them every 10 s, each stopping the event loop (ticks and scrapes) while it runs.
A young generation of 50,000 lets those objects die of their reference count before they are ever
promoted (measured: no full collection in the same 10 s, about 3x less time in the collector), and
the objects that exist once start-up is done (modules, classes, the parsed configuration) are
frozen out of every later collection. Cyclic garbage still goes, only a little later.

The RPC front (``scaler/rpcfront.py``) is the opposite case: few objects live long (the mirror), and
grpc.aio leaves about 5 objects in a reference cycle per call, so nearly all of its young generation
is cyclic garbage. With 50,000 each young collection freed ~50,000 objects at once: 20-66 ms of CPU
(up to 150 ms wall on the loaded machine) during which no RPC was answered, every ~5 s at 2,000
RPC/s -- about 1 % of the answers, the p99. ``FRONT_YOUNG_THRESHOLD`` collects the same garbage in
slices of under 2 ms (measured with ``benchmarks/rpc_load --client go``, ``distinct``: max 1.65 ms
CPU per collection, the same total).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 20)
FRONT_YOUNG_THRESHOLD = 2_000


def tune(young: int = YOUNG_THRESHOLD) -> None:
    """Collect once, freeze what start-up left, then collect the young generation every ``young``
    net allocations."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(young, *OLDER_THRESHOLDS)
