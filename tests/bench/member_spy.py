"""A spy on what reaches the simulator from an ensemble's members (bench pd, bench fleet): the members
run in forked workers, so the records go to a file, one JSON object a line.

- ``run``: a simulation entry point's call: its conditions' seed and its arrivals (the first five
  arrival times of each workload it was given);
- ``cluster``: each :class:`~benchmarks.sim.cluster.Cluster` made: the next three start-up factors of
  its draws (a copy of the stream, not consumed; None: the ladder's exact times);
- ``hpa``: each simulated HPA made: its first sync (its phase).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from warmscale.benchmarks.sim.arrivals import Workload
from warmscale.benchmarks.sim.cluster import Cluster
from warmscale.benchmarks.sim.conditions import StartupDraws
from warmscale.benchmarks.sim.runner import SimSettings
from warmscale.simulation.actuation import Hpa


def first_factors(draws: StartupDraws) -> tuple[float, ...]:
    return tuple(round(draws.factor(), 9) for _ in range(3))


def _arrivals(work: Workload) -> list[float]:
    return [round(float(x), 3) for x in work.t[:5]]


def spy(monkeypatch: pytest.MonkeyPatch, log: Path, entry_points: list[tuple[Any, str]]) -> None:
    """Record every call of each ``(module, name)`` entry point (a simulation taking a workload or a
    dict of them and a :class:`SimSettings`), every cluster made and every HPA made, into ``log``."""

    def note(**rec: object) -> None:
        with log.open("a") as f:
            f.write(json.dumps(rec) + "\n")

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **kw: Any) -> Any:
            s = next(x for x in a if isinstance(x, SimSettings))
            works = [x for x in a if isinstance(x, Workload)]
            for d in (x for x in a if isinstance(x, dict)):
                works += [w for w in d.values() if isinstance(w, Workload)]
            note(kind="run", entry=name, config=a[0] if isinstance(a[0], str) else None, seed=s.conditions.seed,
                 arrivals=[_arrivals(w) for w in works])
            return real(*a, **kw)
        return run

    for module, name in entry_points:
        monkeypatch.setattr(module, name, wrap(name, getattr(module, name)))
    cluster_init, hpa_init = Cluster.__init__, Hpa.__init__

    def cluster(self: Cluster, *a: Any, **kw: Any) -> None:
        cluster_init(self, *a, **kw)
        d = copy.deepcopy(self.draws)
        note(kind="cluster", factors=None if d is None else list(first_factors(d)))

    def hpa(self: Hpa, *a: Any, **kw: Any) -> None:
        hpa_init(self, *a, **kw)
        note(kind="hpa", phase=self.next_sync)

    monkeypatch.setattr(Cluster, "__init__", cluster)
    monkeypatch.setattr(Hpa, "__init__", hpa)


def records(log: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == kind]
