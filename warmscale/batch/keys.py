"""Redis key names of one reliable queue (pure).

``<queue>`` holds the items waiting; each worker moves the item it works on into its own
``<queue>:processing:<worker>`` list and keeps ``<queue>:alive:<worker>`` set while it lives; finished
items go to ``<queue>:done``. A processing list whose worker is no longer alive holds items that went
nowhere: any worker starting up puts them back on ``<queue>``.
"""

from __future__ import annotations

PROCESSING = ":processing:"
ALIVE = ":alive:"
DONE = ":done"


def processing(queue: str, worker: str) -> str:
    return f"{queue}{PROCESSING}{worker}"


def alive(queue: str, worker: str) -> str:
    return f"{queue}{ALIVE}{worker}"


def done(queue: str) -> str:
    return f"{queue}{DONE}"


def worker_of(queue: str, processing_key: str) -> str | None:
    """The worker a processing list belongs to (None: not one of ``queue``'s)."""
    prefix = f"{queue}{PROCESSING}"
    return processing_key[len(prefix):] or None if processing_key.startswith(prefix) else None
