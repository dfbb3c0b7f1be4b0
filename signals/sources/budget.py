"""How much payload memory reads may hold at once: per ScaledObject and per process (pure bookkeeping,
no I/O; used by :mod:`signals.sources.scrape` at the edge).

A metrics payload costs memory twice: its text while it is read and parsed (the bytes), and the
parser's objects (about 1.2 KiB per series in a parse worker, measured: a 50 MiB / 1M-series payload
took a worker to 1.2 GiB). A :class:`Charge` holds one payload's bytes and series against a chain of
:class:`Budget` s -- the ScaledObject's and the process's -- from the first chunk read until its
parse ended. Series are counted from the text before parsing (one per sample line, an upper bound),
so a payload over a budget is never parsed.

- Over the **ScaledObject's** budget: that read fails (the replica unknown) and the budget records
  the refusal (:attr:`Budget.refused`); the scaler then refuses the ScaledObject
  (``RESOURCE_EXHAUSTED``, an Event) instead of reading it again.
- Over the **process's** budget: that read fails (the replica unknown for this decision), nothing is
  refused -- the payloads of other ScaledObjects hold the memory, and they are bounded each.
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
    """A ScaledObject's payloads went past its budget: the scaler refuses to track it."""


@dataclass
class Budget:
    """Bytes and series held at once, within limits. ``what`` names the holder in messages;
    ``bytes_flag``/``series_flag`` name the settings that raise the limits. ``refuses``: going past a
    limit records :attr:`refused` (a ScaledObject's budget), else it only fails that read."""

    what: str
    max_bytes: int
    max_series: int
    bytes_flag: str
    series_flag: str
    refuses: bool = False
    bytes: int = 0
    series: int = 0
    refused: str | None = field(default=None)

    def over(self, nbytes: int, nseries: int) -> str | None:
        """The message when adding ``nbytes``/``nseries`` would pass a limit, else None."""
        if nbytes and self.bytes + nbytes > self.max_bytes:
            return (f"{self.what}: payloads would hold more than {self.max_bytes:,} bytes at once "
                    f"({self.bytes_flag} {self.max_bytes})")
        if nseries and self.series + nseries > self.max_series:
            return (f"{self.what}: payloads would hold more than {self.max_series:,} series at once "
                    f"(this one has {nseries:,}; {self.series_flag} {self.max_series})")
        return None


class Charge:
    """One payload's hold on ``budgets`` (see the module docstring); :meth:`release` it when done."""

    def __init__(self, budgets: Sequence[Budget]) -> None:
        self.budgets = tuple(budgets)
        self.bytes = 0
        self.series = 0

    def add(self, nbytes: int = 0, nseries: int = 0) -> None:
        """Hold ``nbytes`` more bytes and ``nseries`` more series on every budget, or none of them:
        raises :class:`BudgetExceeded` (recording the refusal on a refusing budget)."""
        for b in self.budgets:
            msg = b.over(nbytes, nseries)
            if msg is not None:
                if b.refuses and b.refused is None:
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


def count_series(text: str) -> int:
    """Sample lines of an exposition payload, an upper bound of its series (blank lines count)."""
    lines = text.count("\n") + (0 if not text or text.endswith("\n") else 1)
    comments = text.count("\n#") + (1 if text.startswith("#") else 0)
    return max(0, lines - comments)


# Defaults (flags of `warmscale scaler`). Real engines expose hundreds to a few thousand series
# (vLLM ~1,500 with every histogram, a Ray node of several engines ~10,000, ~1 MB).
# One ScaledObject: 100,000 series (~120 MiB in a parse worker), 32 MiB of payload text at once.
SCALEDOBJECT_SERIES = 100_000
SCALEDOBJECT_BYTES = 32 * MIB
# The whole process: what two parse workers hold at once, and four ScaledObjects' worth of text.
PROCESS_SERIES = 200_000
PROCESS_BYTES = 128 * MIB
# A parse worker's address space (signals.sources.parsepool): ~55 MiB at start (the interpreter and the
# parsers), the rest for parsing (~1.2 KiB per series: ~800,000 series, 8x one ScaledObject's budget).
DEFAULT_WORKER_MEMORY_BYTES = 1024 * MIB


@dataclass(frozen=True)
class PayloadLimits:
    scaledobject_bytes: int = SCALEDOBJECT_BYTES
    scaledobject_series: int = SCALEDOBJECT_SERIES
    process_bytes: int = PROCESS_BYTES
    process_series: int = PROCESS_SERIES

    def process_budget(self) -> Budget:
        return Budget("this scaler", self.process_bytes, self.process_series, "--max-payload-bytes-in-flight",
                      "--max-series-in-flight")

    def scaledobject_budget(self, what: str) -> Budget:
        return Budget(what, self.scaledobject_bytes, self.scaledobject_series, "--max-scaledobject-payload-bytes",
                      "--max-scaledobject-series", refuses=True)
