"""Replica counts from real-valued needs (pure).

A need computed in floating point lands a hair above a whole number when it should be exactly that
number (``3 * (1/3) * 3``), and rounding it up would then ask for a replica nobody needs.
:func:`ceil_count` rounds up after forgiving that much; every count in the policy goes through it.
"""

from __future__ import annotations

import math

# Forgiven before rounding up: far below any meaningful fraction of a replica (a need of 1e-9
# replicas is a rounding error), far above double precision's error on counts below 1e6.
COUNT_EPSILON = 1e-9


def ceil_count(x: float) -> int:
    """The smallest whole count that covers ``x``, forgiving :data:`COUNT_EPSILON` of float error."""
    return math.ceil(x - COUNT_EPSILON)
