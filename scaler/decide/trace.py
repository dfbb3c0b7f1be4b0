"""One entry of a decision's trace: what a step did to the count and why (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Inputs = Mapping[str, float | int | str | bool | None]


@dataclass(frozen=True)
class Step:
    """``step`` moved the count from ``before`` to ``after`` (equal where it only checked) because of
    ``why`` (a reason code, the same vocabulary as ``Decision.reason``), reading ``inputs``."""

    step: str
    before: int | None
    after: int
    why: str
    inputs: Inputs = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "before": self.before, "after": self.after, "why": self.why,
                "inputs": dict(self.inputs)}


def changed(trace: tuple[Step, ...]) -> tuple[Step, ...]:
    """The steps that moved the count (the first, ``need``, always counts)."""
    return tuple(s for s in trace if s.before is None or s.before != s.after)
