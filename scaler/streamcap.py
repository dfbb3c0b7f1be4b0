"""Caps on open server streams (``StreamIsActive`` / ``StreamMetricSpec``), shared by the in-process
servicer (:mod:`scaler.server`) and the RPC front process (:mod:`scaler.rpcfront`).

Each open stream costs about 14 KiB of the scaler's memory (5,000 streams measured +71 MiB) and a
task that wakes every few seconds, and nothing else bounds how many a client opens. KEDA opens one
stream per method per ScaledObject (two with ``StreamMetricSpec``); beyond the caps a new stream is
refused with ``RESOURCE_EXHAUSTED`` naming the flag, and the streams already open are kept.
"""

from __future__ import annotations

from collections.abc import Hashable

# KEDA opens at most one stream per method per ScaledObject, two methods: 2 x the default --max-trackers.
DEFAULT_MAX_STREAMS = 8000
# Per ScaledObject (and metadata): KEDA's 2, plus room for an operator restart overlapping the old one's
# streams and a debugging client.
DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT = 8


class StreamCap:
    """Counts open streams, in all and per key; :meth:`enter` refuses beyond the caps."""

    def __init__(self, total: int = DEFAULT_MAX_STREAMS, per_key: int = DEFAULT_MAX_STREAMS_PER_SCALEDOBJECT) -> None:
        if total < 1 or per_key < 1:
            raise ValueError("--max-streams and --max-streams-per-scaledobject must be at least 1")
        self.total = total
        self.per_key = per_key
        self.open = 0
        self._by_key: dict[Hashable, int] = {}

    def enter(self, key: Hashable, what: str) -> str | None:
        """Count one more stream for ``key`` (``what`` names it in the message); the refusal message
        (nothing counted) when a cap is reached."""
        if self.open >= self.total:
            return (f"this scaler has {self.open} streams open, the most allowed (--max-streams {self.total}); "
                    "poll with IsActive/GetMetricSpec or raise the cap")
        n = self._by_key.get(key, 0)
        if n >= self.per_key:
            return (f"{what} has {n} streams open, the most allowed per ScaledObject "
                    f"(--max-streams-per-scaledobject {self.per_key})")
        self.open += 1
        self._by_key[key] = n + 1
        return None

    def leave(self, key: Hashable) -> None:
        n = self._by_key.get(key, 0) - 1
        if n > 0:
            self._by_key[key] = n
        else:
            self._by_key.pop(key, None)
        self.open = max(0, self.open - 1)
