"""How much payload memory reads may hold: per payload, per ScaledObject and per process (pure
bookkeeping, no I/O; used by :mod:`signals.sources.scrape` at the edge).

A metrics payload costs memory twice: its text while it is read and parsed (the bytes), and the
parser's objects (about 1.2 KiB per series in a parse worker, measured: a 50 MiB / 1M-series payload
took a worker to 1.2 GiB). A :class:`Charge` holds one payload's bytes and series against a chain of
:class:`Budget` s -- the ScaledObject's and the process's -- from the first chunk read until its
parse ended. Series are counted from the text as it arrives (one per sample line, an upper bound:
:class:`LineCounter`), so a payload past a limit is neither read further nor parsed.

- **One payload** with more series than the ScaledObject's ``payload_series`` (no engine exports
  that many): the read fails and the budget records the refusal (:attr:`Budget.refused`); the scaler
  then refuses the ScaledObject (``RESOURCE_EXHAUSTED``, an Event) instead of reading it again.
- The payloads of one ScaledObject **together** past its budget, or of the whole process past the
  process's: that read fails (the replica unknown for this decision), nothing is refused -- a large
  fleet read at once is not hostile, and no ScaledObject can take more than its share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MIB = 1024 * 1024


class BudgetExceeded(Exception):
    """A payload would take a budget past its limit (the message names the limit and its flag)."""

    def __init__(self, budget: Budget, message: str) -> None:
        super().__init__(message)
        self.budget = budget


class SizeRefused(Exception):
    """A ScaledObject's payload went past its per-payload limit: the scaler refuses to track it."""


@dataclass
class Budget:
    """Bytes and series held at once, within limits. ``what`` names the holder in messages; the
    ``*_flag`` fields name the settings that raise the limits. ``payload_series`` (a ScaledObject's
    budget): the most series one payload may have; past it the budget records :attr:`refused`."""

    what: str
    max_bytes: int
    max_series: int
    bytes_flag: str
    series_flag: str
    payload_series: int | None = None
    payload_series_flag: str = ""
    bytes: int = 0
    series: int = 0
    refused: str | None = field(default=None)

    def over(self, charge: Charge, nbytes: int, nseries: int) -> tuple[str, bool] | None:
        """(message, refuse) when ``charge`` adding ``nbytes``/``nseries`` would pass a limit."""
        if nseries and self.payload_series is not None and charge.series + nseries > self.payload_series:
            return (f"{self.what}: a payload has more than {self.payload_series:,} series "
                    f"({self.payload_series_flag} {self.payload_series})"), True
        if nbytes and self.bytes + nbytes > self.max_bytes:
            return (f"{self.what}: payloads would hold more than {self.max_bytes:,} bytes at once "
                    f"({self.bytes_flag} {self.max_bytes})"), False
        if nseries and self.series + nseries > self.max_series:
            return (f"{self.what}: payloads would hold more than {self.max_series:,} series at once "
                    f"({self.series_flag} {self.max_series})"), False
        return None


class Charge:
    """One payload's hold on ``budgets`` (see the module docstring); :meth:`release` it when done."""

    def __init__(self, budgets: Sequence[Budget]) -> None:
        self.budgets = tuple(budgets)
        self.bytes = 0
        self.series = 0

    def add(self, nbytes: int = 0, nseries: int = 0) -> None:
        """Hold ``nbytes`` more bytes and ``nseries`` more series on every budget, or none of them:
        raises :class:`BudgetExceeded` (recording a refusal on the budget it concerns)."""
        for b in self.budgets:
            over = b.over(self, nbytes, nseries)
            if over is not None:
                msg, refuse = over
                if refuse and b.refused is None:
                    b.refused = msg
                raise BudgetExceeded(b, msg)
        for b in self.budgets:
            b.bytes += nbytes
            b.series += nseries
        self.bytes += nbytes
        self.series += nseries

    def release(self) -> None:
        for b in self.budgets:
            b.bytes -= self.bytes
            b.series -= self.series
        self.bytes = self.series = 0


class LineCounter:
    """Sample lines of an exposition payload read in chunks: every line that does not start with
    ``#`` (blank lines count: an upper bound of its series)."""

    def __init__(self) -> None:
        self._at_line_start = True

    def feed(self, chunk: bytes | bytearray) -> int:
        """Sample lines that start in ``chunk``."""
        if not chunk:
            return 0
        starts = chunk.count(b"\n") + (1 if self._at_line_start else 0)
        if chunk.endswith(b"\n"):
            starts -= 1  # the line after the last line feed starts in the next chunk
        comments = chunk.count(b"\n#") + (1 if self._at_line_start and chunk.startswith(b"#") else 0)
        self._at_line_start = chunk.endswith(b"\n")
        return max(0, starts - comments)


# Defaults (flags of `warmscale scaler`). Real engines expose hundreds to a few thousand series
# (vLLM ~1,500 with every histogram, a Ray node of several engines ~10,000, ~1 MB).
# One payload: 100,000 series (~120 MiB in a parse worker) -- past it the ScaledObject is refused.
PAYLOAD_SERIES = 100_000
# One ScaledObject's payloads at once: 64 MiB of text (the largest maxPayloadBytes), 200,000 series
# (a fleet of 100 large engines read together), half the process's.
SCALEDOBJECT_SERIES = 200_000
SCALEDOBJECT_BYTES = 64 * MIB
# The whole process: 128 MiB of payload text and 400,000 series held at once.
PROCESS_SERIES = 400_000
PROCESS_BYTES = 128 * MIB
# A parse worker's address space (signals.sources.parsepool): ~55 MiB at start (the interpreter and the
# parsers), the rest for parsing (~1.2 KiB per series: ~800,000 series, 8x the per-payload limit).
DEFAULT_WORKER_MEMORY_BYTES = 1024 * MIB


@dataclass(frozen=True)
class PayloadLimits:
    payload_series: int = PAYLOAD_SERIES
    scaledobject_bytes: int = SCALEDOBJECT_BYTES
    scaledobject_series: int = SCALEDOBJECT_SERIES
    process_bytes: int = PROCESS_BYTES
    process_series: int = PROCESS_SERIES

    def process_budget(self) -> Budget:
        return Budget("this scaler", self.process_bytes, self.process_series, "--max-payload-bytes-in-flight",
                      "--max-series-in-flight")

    def scaledobject_budget(self, what: str) -> Budget:
        return Budget(what, self.scaledobject_bytes, self.scaledobject_series, "--max-scaledobject-payload-bytes",
                      "--max-scaledobject-series", payload_series=self.payload_series,
                      payload_series_flag="--max-payload-series")
