"""How long a sleeper may stay in an unknown state before the controller replaces it (pure; docs/hot-tier.md,
"Faults"; issue 23: "a sleeper that fails to wake twice is replaced and reported").

A sleeper's state is unknown when the waker cannot say whether its engine sleeps: vLLM's
``/is_sleeping`` unanswered, SGLang without a record for this container incarnation, or a sleep or
wake that failed midway (``changing``). An unknown sleeper is neither counted, woken nor slept, and
stays so until its container restarts; without a bound it holds its place in the pool (and maybe its
GPU) for ever. At every pass the waker also reads its ``/metrics`` (the requests in flight on it), and
the sleeper **expires**, for the controller to delete and recreate, when either

- its engine answers with **nothing in flight** and its state has been unknown for
  :data:`UNKNOWN_MAX_SECONDS` (an SGLang ``changing`` record, an engine without an answer to its state
  call); or
- its engine, which answered in this incarnation before, has not answered :data:`UNKNOWN_READS_MAX`
  reads in a row (it died or hangs after serving; a hung engine serves nothing).

Never while it may be serving: a read that finds a request in flight keeps it, whatever the time
(and restarts neither count: the bound is time unknown, not time idle). An engine that never answered
in this incarnation is starting (loading its weights takes minutes): it is not expired by the reads,
and the time bound needs an answer. Nothing routes to an unknown sleeper meanwhile (the hot status
lists only sleepers whose canary passed; the workload's Service never selects a sleeper), so no
request arrives between the idle read and the deletion.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Seconds a sleeper's state may stay unknown, with its engine answering and idle, before it is
# replaced: past the longest sleep the waker drives (a 70B TP4 level-1 sleep takes about 22 s,
# warmscale/simulation/hotpool.py SLEEP_TIMES) and several waker passes (RESYNC_SECONDS, 5 s) that
# each ask its state again; short against the minutes its pool slot is otherwise lost.
UNKNOWN_MAX_SECONDS = 120.0
# Reads in a row without any answer (its state call and its /metrics) after which an engine that
# answered before in this incarnation is replaced: three waker passes (15 s), past a GC pause or a
# brief network fault.
UNKNOWN_READS_MAX = 3


@dataclass(frozen=True)
class UnknownLife:
    """What the waker has seen of one sleeper since its state became unknown."""

    since: float  # when its state was first seen unknown (the waker's clock, seconds)
    misses: int = 0  # reads in a row without an answer
    answered: bool = False  # its engine answered in this container incarnation (it is not starting)
    in_flight: float | None = None  # requests running or waiting at the last read; None: no answer


def seen(life: UnknownLife | None, now: float, in_flight: float | None, *, answered_before: bool) -> UnknownLife:
    """``life`` after one more read of an unknown sleeper at ``now`` (``in_flight``: from its
    ``/metrics``, None without an answer); ``answered_before``: its engine answered in this incarnation
    before its state became unknown (it was asleep or awake)."""
    if life is None:
        life = UnknownLife(since=now, answered=answered_before)
    if in_flight is None:
        return replace(life, misses=life.misses + 1, in_flight=None)
    return replace(life, misses=0, answered=True, in_flight=in_flight)


def expired(life: UnknownLife, now: float) -> str | None:
    """Why the sleeper is to be replaced now (a sentence for its Event), or None: kept."""
    if life.in_flight is not None and life.in_flight > 0:
        return None  # it may be serving: never
    if life.in_flight is not None and now - life.since >= UNKNOWN_MAX_SECONDS:
        return (f"its state has been unknown for {now - life.since:.0f} s (over {UNKNOWN_MAX_SECONDS:g} s) with "
                "nothing in flight")
    if life.in_flight is None and life.answered and life.misses >= UNKNOWN_READS_MAX:
        return f"its engine, unknown, has not answered {life.misses} reads in a row"
    return None
