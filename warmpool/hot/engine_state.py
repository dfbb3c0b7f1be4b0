"""The state an engine without a state call was last driven to, recorded on its sleeper pod (pure;
docs/hot-tier.md, "SGLang's state").

SGLang has no "is it sleeping" call (vLLM has ``GET /is_sleeping``), so the waker records on the
sleeper pod, in the annotation ``warmscale.io/hot-state`` it owns, what it last drove the engine to,
as ``STATE@RESTARTS`` (the engine container's ``restartCount`` at that moment):

- ``awake@N``: the engine serves (it was created so: a new engine starts awake; or its wake and
  canary passed; or a sleep found work in flight and its pause was undone);
- ``asleep@N``: ``pause_generation`` and ``release_memory_occupation`` both succeeded;
- ``changing@N``: written *before* a sleep or a wake is sent; it stays when a call failed midway or
  the waker died meanwhile: **unknown**, never counted as capacity, never woken or slept.

Read back (a restarted waker, or every pass): the state holds only for the container incarnation it
was recorded for. A container that restarted since (``restartCount`` above ``N``) runs a new engine,
and a new engine starts awake. Anything else (no annotation, a malformed one, no restart count, a
count below ``N``) is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HOT_STATE = "warmscale.io/hot-state"
AWAKE = "awake"
ASLEEP = "asleep"
CHANGING = "changing"
_STATES = (AWAKE, ASLEEP, CHANGING)


def state_value(state: str, restarts: int | None) -> str:
    """The annotation's value for ``state`` in the container incarnation ``restarts`` (``None``:
    unknown incarnation, which reads back as unknown)."""
    if state not in _STATES:
        raise ValueError(f"state must be one of {_STATES}, got {state!r}")
    return state if restarts is None else f"{state}@{restarts}"


def recorded_sleeping(value: str | None, restarts: int | None) -> bool | None:
    """Whether the engine sleeps, from the recorded ``value`` and the container's restart count now:
    ``True`` asleep, ``False`` awake, ``None`` unknown."""
    if value is None or restarts is None:
        return None
    state, sep, at = value.partition("@")
    if not sep or state not in _STATES or not at.isdigit():
        return None
    recorded_at = int(at)
    if restarts > recorded_at:
        return False  # the container restarted since: a new engine, and a new engine starts awake
    if restarts < recorded_at or state == CHANGING:
        return None
    return state == ASLEEP


def engine_restarts(pod: Mapping[str, Any]) -> int | None:
    """The engine container's (the first container's) ``restartCount``; ``None`` while unreported."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return None
    name = containers[0].get("name")
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            count = cs.get("restartCount")
            return count if isinstance(count, int) and count >= 0 else None
    return None
