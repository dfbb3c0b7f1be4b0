"""The Ray Serve policy's decision from the scaler's last answer (pure table)."""

from __future__ import annotations

import math

import pytest

from warmscale.rayserve.decide import Answer, Decision, decide

STALE = 10.0


@pytest.mark.parametrize(("answer", "now", "target", "expected"), [
    (Answer(3.0, 1.0, at=100.0), 101.0, 1, Decision(3, "scaler")),
    (Answer(3.0000000001, 1.0, at=100.0), 101.0, 1, Decision(3, "scaler")),  # float noise is not a 4th
    (Answer(96.0, 32.0, at=100.0), 101.0, 1, Decision(3, "scaler")),  # value / per-replica target
    (Answer(97.0, 32.0, at=100.0), 101.0, 1, Decision(4, "scaler")),
    (Answer(0.0, 1.0, at=100.0), 101.0, 5, Decision(0, "scaler")),  # the scaler's own zero (Serve clamps)
    (None, 101.0, 5, Decision(5, "no answer yet")),  # never down on missing data
    (Answer(1.0, 1.0, at=100.0), 111.0, 5, Decision(5, "stale answer (11 s)")),
    (Answer(1.0, 1.0, at=100.0), 110.0, 5, Decision(1, "scaler")),  # exactly stale_s old: still fresh
    (Answer(1.0, 0.0, at=100.0), 101.0, 4, Decision(4, "invalid answer")),
    (Answer(math.nan, 1.0, at=100.0), 101.0, 4, Decision(4, "invalid answer")),
    (Answer(-1.0, 1.0, at=100.0), 101.0, 4, Decision(4, "invalid answer")),
    (None, 101.0, -1, Decision(0, "no answer yet")),
])
def test_decide(answer: Answer | None, now: float, target: int, expected: Decision) -> None:
    assert decide(answer, now, target, STALE) == expected
