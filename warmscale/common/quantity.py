"""Kubernetes resource quantities ("500m", "16Gi", "1e3") -> float (pure)."""

from __future__ import annotations

import math
import re

_SUFFIX = {
    "": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}
_RE = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")  # ASCII digits only


def parse_quantity(raw: str | int | float) -> float:
    """Parse a quantity; raises ValueError on anything else."""
    if isinstance(raw, int | float):
        v = float(raw)
    else:
        m = _RE.match(str(raw).strip())
        if not m or m.group(2) not in _SUFFIX:
            raise ValueError(f"bad quantity {raw!r}")
        v = float(m.group(1)) * _SUFFIX[m.group(2)]
    if not math.isfinite(v):
        raise ValueError(f"bad quantity {raw!r}")
    return v
