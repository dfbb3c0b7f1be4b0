"""A bounded, in-memory log of the scaler's decisions (served as JSON on ``/decisions``).

Only changes are logged (a new desired count, activity or reason for a ScaledObject, or the first
decision of a tracker), so the last ``maxlen`` entries cover a useful stretch of history even with
a thousand ScaledObjects decided every second.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any


class DecisionLog:
    def __init__(self, maxlen: int = 1000) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self._last: dict[str, tuple[int, bool, str]] = {}

    def record(self, key: str, entry: dict[str, Any]) -> bool:
        """Append ``entry`` if it changes ``key``'s (desired, active, reason); return whether it did."""
        sig = (int(entry["desired"]), bool(entry["active"]), str(entry["reason"]))
        if self._last.get(key) == sig:
            return False
        self._last[key] = sig
        self._entries.append({"key": key, **entry})
        return True

    def forget(self, key: str) -> None:
        self._last.pop(key, None)

    def entries(self, *, namespace: str | None = None, name: str | None = None, limit: int | None = None) -> list[
        dict[str, Any]
    ]:
        """Newest last; optionally filtered by namespace/name and cut to the last ``limit``."""
        out = [
            e
            for e in self._entries
            if (namespace is None or e.get("namespace") == namespace) and (name is None or e.get("name") == name)
        ]
        return out[-limit:] if limit else out

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._entries))
