"""What differs between ensemble members besides the arrivals: start-up draws and loop phases.

Issue 21, requirement 3 (equal information): no policy is told the exact start-up, and no policy's
loops share a phase with the scrape by construction.

- **Start-up draws.** Each new replica's time to ready is the start-up ladder's value for its warm
  state times a lognormal factor of median 1 (:func:`startup_factor`), drawn per replica from the
  member's seed, in the order the replicas are created. The spread is sourced from the published
  cold-start breakdowns (``shared/reference/coldstart-and-warm-pools.md``, table (a) "End to end"):
  8B from a cold node 5-10 min and 1-2 min on a warm node, a factor 2 between the ends of each
  range. Read as the 10th and 90th percentiles of a lognormal, ln 2 = 2 x 1.2816 sigma, so sigma =
  0.27. (The 70B range, 10-30 min, is wider, a factor 3, sigma 0.43; the 8B value is used for every
  profile so that one number is sourced and the bound's floor below is the same everywhere.) Draws
  are clipped to [0.5, 2.0] (2.6 sigma either side) so that the cost bound can use the fastest
  start-up any replica can get (:data:`STARTUP_MIN_FACTOR`).
- **Phases.** Every periodic loop (Prometheus scrape, KEDA poll, HPA sync, a baseline's own cycle,
  warmscale's scrape and the warm-pool resync) starts at a fraction of its period drawn per member,
  one draw per loop kind, the same for every policy of the member (paired comparisons), in whole
  seconds (a loop of a 1 s period, such as warmscale's scrape, keeps phase 0).

Member 0 of an ensemble and a single run use the seed too (``--seed``); ``--exact-startup`` turns
both off (the ladder's deterministic times, every phase 0), as before issue 21.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

# Lognormal sigma of a replica's start-up around the ladder (see the module docstring: a factor 2
# between the ends of the published 8B ranges read as p10..p90).
STARTUP_SIGMA = math.log(2.0) / (2 * 1.2816)
# The draws' clip: 2.6 sigma either side; the lower end is what the cost bound may assume.
STARTUP_MIN_FACTOR = 0.5
STARTUP_MAX_FACTOR = 2.0
# The loop kinds whose phase is drawn (fractions of each loop's own period).
PHASE_KINDS = ("scrape", "poll", "sync", "cycle", "plan")
# Phases are whole seconds: a multiple of every control tick the benchmarks use (1 s, 0.5 s), so that
# halving the tick moves no loop (issue 21, requirement 4).
PHASE_GRID_S = 1.0


@dataclass(frozen=True)
class Conditions:
    """A member's start-up draws and loop phases (``seed`` None: exact start-ups, phases 0)."""

    seed: int | None = None
    sigma: float = STARTUP_SIGMA

    @property
    def exact(self) -> bool:
        return self.seed is None

    def startup_draws(self) -> StartupDraws | None:
        return None if self.seed is None else StartupDraws(self.seed, self.sigma)

    def phase(self, kind: str, period_s: float) -> float:
        """Seconds into the run at which the loop ``kind`` of period ``period_s`` first runs."""
        if self.seed is None or period_s <= 0:
            return 0.0
        if kind not in PHASE_KINDS:
            raise ValueError(f"unknown loop kind {kind!r} (known: {', '.join(PHASE_KINDS)})")
        rng = random.Random(f"phase:{self.seed}:{kind}")
        return float(math.floor(rng.random() * period_s / PHASE_GRID_S) * PHASE_GRID_S)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["startup_clip"] = [STARTUP_MIN_FACTOR, STARTUP_MAX_FACTOR]
        return d


class StartupDraws:
    """The factor of each new replica's time to ready, in creation order (one stream per member)."""

    def __init__(self, seed: int, sigma: float) -> None:
        self.rng = random.Random(f"startup:{seed}")
        self.sigma = sigma

    def factor(self) -> float:
        return startup_factor(self.rng.gauss(0.0, 1.0), self.sigma)


def startup_factor(z: float, sigma: float = STARTUP_SIGMA) -> float:
    """exp(sigma z), clipped to [STARTUP_MIN_FACTOR, STARTUP_MAX_FACTOR]."""
    return min(STARTUP_MAX_FACTOR, max(STARTUP_MIN_FACTOR, math.exp(sigma * z)))
