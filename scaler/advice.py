"""The scaler's own next-layer diagnosis: ``warmscale_advice{namespace,workload,finding}``.

Each tracker records what it decided and what served (desired, ready, windowed TTFT against the SLO,
time-to-ready) into a bounded history; every ``evaluate_every_s`` the cold-start detector of
:mod:`warmscale.common.diagnostics.detect` runs over it (the same pure function ``warmscale advise`` uses) and the
gauge holds the number of episodes within the window of every finding that repeated (no series while
silent). One book per scaler instance (no global state).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from prometheus_client import Gauge

from warmscale.common.diagnostics.detect import cold_start_episodes, gate
from warmscale.common.diagnostics.model import COLD_START, Policy, ScaleSample

# A sample is kept when desired, ready or "TTFT over the SLO" changes, else one per this many seconds;
# at most MAX_SAMPLES per ScaledObject (the oldest go first), so 1,000 ScaledObjects stay a few MB.
SAMPLE_EVERY_S = 300.0
MAX_SAMPLES = 2048


@dataclass
class _History:
    samples: deque[ScaleSample] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    evaluated_at: float = 0.0
    exported: bool = False


def _miss(ttft_s: float | None, slo_s: float | None) -> bool:
    return ttft_s is not None and slo_s is not None and ttft_s > slo_s


class AdviceBook:
    def __init__(self, gauge: Gauge, policy: Policy | None = None, evaluate_every_s: float = 30.0) -> None:
        """``gauge``: ``warmscale_advice`` (``ScalerMetrics.advice``)."""
        self.policy = policy or Policy()
        self.evaluate_every_s = evaluate_every_s
        self.gauge = gauge
        self._h: dict[tuple[str, str], _History] = {}

    def record(self, namespace: str, workload: str, now: float, *, desired: int, ready: int, ttft_s: float | None,
               slo_s: float | None, time_to_ready_s: float | None) -> None:
        h = self._h.setdefault((namespace, workload), _History())
        last = h.samples[-1] if h.samples else None
        if last is None or now - last.at >= SAMPLE_EVERY_S or (last.desired, last.ready) != (desired, ready) \
                or _miss(last.ttft_s, last.slo_s) != _miss(ttft_s, slo_s):
            h.samples.append(ScaleSample(now, namespace, workload, desired, ready, ttft_s, slo_s, time_to_ready_s))
        while h.samples and h.samples[0].at < now - self.policy.window_s:
            h.samples.popleft()
        if now - h.evaluated_at >= self.evaluate_every_s:
            h.evaluated_at = now
            self._evaluate(namespace, workload, h, now)

    def _evaluate(self, namespace: str, workload: str, h: _History, now: float) -> None:
        findings = gate(COLD_START, cold_start_episodes(tuple(h.samples), self.policy), self.policy, now)
        if findings:
            self.gauge.labels(namespace, workload, COLD_START).set(len(findings[0].episodes))
            h.exported = True
        elif h.exported:
            self.gauge.remove(namespace, workload, COLD_START)
            h.exported = False

    def forget(self, namespace: str, workload: str) -> None:
        h = self._h.pop((namespace, workload), None)
        if h is not None and h.exported:
            self.gauge.remove(namespace, workload, COLD_START)
