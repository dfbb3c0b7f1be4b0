"""Onset between ticks: when a cold workload's cheap onset signal (its gateway queue's length in
Redis, its endpoint picker's flow-control queue) is polled fast, and when what the poll read is an
onset that ticks the tracker at once (pure; the poll itself is ``Tracker._onset_loop`` in
scaler/tracker.py, the read ``SourcesReader.onset`` in scaler/cli.py).

A tracker decides once per ``scrapeIntervalSeconds`` (1 s by default), so a queue's first request
waits half an interval on average, and a whole one at worst, before the scaler sees it: the wake of
a sleeper (docs/hot-tier.md) and KEDA's ``StreamIsActive`` push came 1.0 s after the onset at p99.
While a workload is cold -- the last decision inactive (at zero), or a hot tier known with no
sleeper wanted awake -- and the last tick read every one of its queues empty, the tracker polls the
queues' length every :data:`ONSET_POLL_SECONDS` (one ``LLEN``/``XLEN`` per Redis queue, one GET of
the picker's ``/metrics`` with ``eppAddress``; no engine scrape, no Prometheus query, no store write),
and the first non-empty read starts the next tick at once. (A picker read through Prometheus,
``eppPool`` alone, is not polled: a query every 0.1 s is no cheap signal.)

Absent data is unknown, never idle: a poll that fails or times out reads ``None`` and changes nothing
(the next regular tick decides as before); the poll never makes anything scale down, it only moves
a tick earlier. The poll reads the queue and takes nothing from it, so a Redis restart loses no
request (a blocking pop would hold one in the scaler).
"""

from __future__ import annotations

from collections.abc import Sequence

# The fast poll's period. Onset -> tick is at most this plus one tick's read, decision and publish
# (about 10-60 ms on the 2-core CI machine: benchmarks/hot_wake.py), inside issue 23's 0.3 s p99
# for the wake request and the StreamIsActive push. Its cost is one LLEN per queue per cold
# workload every 0.1 s (or one GET of the picker's /metrics): 10 reads/s per cold workload, against the
# 1 tick/s (store claim + every source + save) the same workload costs when not cold.
ONSET_POLL_SECONDS = 0.1


def watch_onset(*, active: bool, hot_target: int | None, queues_seen: Sequence[float | None],
                interval_s: float) -> bool:
    """Whether to poll the onset signal until the next tick: the workload is cold (``active`` false,
    or a hot tier known and ``hot_target`` 0), the last tick read at least one queue and every one
    of them known and empty, and the scrape interval is longer than the poll (else the tick is as
    fast)."""
    if interval_s <= ONSET_POLL_SECONDS or not queues_seen:
        return False
    if any(q is None or q > 0 for q in queues_seen):
        return False  # unknown is not "empty"; a non-empty queue is no onset any more
    return not active or hot_target == 0


def is_onset(polled: float | None) -> bool:
    """Whether a poll's read is an onset: a known length above zero (None: unknown, no onset)."""
    return polled is not None and polled > 0
