"""The SLO models: the smallest replica count whose predicted TTFT quantile meets ``ttftSloSeconds``
(:func:`slo_count`) and whose inter-token latency meets ``itlSloSeconds`` (:func:`itl_count`). Pure.

TTFT = prefill of the request's own prompt + the wait for prefill capacity. With prompt tokens
arriving at ``P`` tokens/s, ``p`` tokens per request and ``C`` tokens/s one replica prefills, the
prefill work is split over ``n`` replicas, each an M/M/1 queue with arrival rate ``lam = P / (p n)``
and service rate ``mu = C / p`` requests/s. The q-quantile of its wait is
``ln(rho / (1 - q)) / (mu - lam)`` for ``rho = lam/mu > 1 - q`` (else 0). The observed quantile corrects the
model: the part of it the prefill does not explain is attributed to the wait, and the modelled
wait is scaled by that factor for every ``n`` (docs/policy.md, "SLO model").

ITL: one replica running ``b`` sequences decodes a token per sequence every ``base + per_seq x b``
seconds (the line learned in :mod:`scaler.capacity`), corrected by the observed quantile over the
line's mean (docs/policy.md, rule 4b "ITL model").
"""

from __future__ import annotations

import math

from warmscale.scaler.counts import ceil_count


def wait_quantile(n: int, prompt_tps: float, capacity_tps: float, per_request: float, q: float) -> float:
    """The q-quantile of the prefill wait with ``n`` replicas (``inf`` when they cannot keep up)."""
    if n <= 0:
        return math.inf
    mu = capacity_tps / per_request
    lam = prompt_tps / per_request / n
    if lam >= mu:
        return math.inf
    rho = lam / mu
    if rho <= 1.0 - q:
        return 0.0
    return math.log(rho / (1.0 - q)) / (mu - lam)


def slo_count(observed_q: float, slo: float, q: float, ready: int, prompt_tps: float, capacity_tps: float,
              per_request: float, most: int) -> int | None:
    """Smallest count in ``[ready, most]`` whose corrected prediction meets ``slo``; ``most`` when
    none does but more replicas still help; ``None`` when the model cannot say (no queueing in the
    model at ``ready``) or no count helps (a request's own prefill alone exceeds the SLO).
    An ``observed_q`` of ``inf`` (above the histogram's top bound, :meth:`Histogram.quantile`) says
    nothing of how far above: the model cannot be corrected by it, so the answer is ``most``."""
    if ready <= 0 or per_request <= 0 or capacity_tps <= 0 or prompt_tps < 0:
        return None
    if not math.isfinite(observed_q):
        return max(ready, most)
    base = per_request / capacity_tps
    if base >= slo:
        return ready  # more replicas do not shorten a prefill: hold, do not chase the SLO
    w0 = wait_quantile(ready, prompt_tps, capacity_tps, per_request, q)
    if w0 <= 0.0:
        return None
    factor = max(1.0, (observed_q - base) / w0) if math.isfinite(w0) else 1.0
    for n in range(ready, max(ready, most) + 1):
        if base + factor * wait_quantile(n, prompt_tps, capacity_tps, per_request, q) <= slo:
            return n
    return max(ready, most)


# The prefill-bound need relaxed by the SLO model never runs a replica above this share of its learned
# prefill capacity (docs/policy.md, rule 0 "SLO slack"): the M/M/1 wait is steep near saturation and
# the prompt rate is a 10-s mean, so some margin stays even where the model sees none needed.
PREFILL_MAX_UTILIZATION = 0.95


def prefill_slo_count(prompt_tps: float, capacity_tps: float, per_request: float, slo: float, q: float,
                      most: int) -> int | None:
    """Smallest count in ``[1, most]`` at which the prompt tokens arriving per second keep each replica
    at most :data:`PREFILL_MAX_UTILIZATION` busy and the modelled TTFT quantile (the prompt's own
    prefill plus the M/M/1 wait of :func:`wait_quantile`) meets ``slo``; ``None`` when the model
    cannot say (no capacity or prompt size known, a prompt's own prefill takes the whole SLO) or no
    count up to ``most`` meets it. Non-decreasing in ``prompt_tps`` (the wait grows with the arrival
    rate at every count)."""
    if most < 1 or per_request <= 0 or capacity_tps <= 0 or not prompt_tps >= 0:
        return None
    base = per_request / capacity_tps
    if base >= slo:
        return None
    lo = max(1, ceil_count(prompt_tps / (PREFILL_MAX_UTILIZATION * capacity_tps)))
    for n in range(lo, most + 1):
        if base + wait_quantile(n, prompt_tps, capacity_tps, per_request, q) <= slo:
            return n
    return None


# A quantile more than this many times the line's mean ITL is not the batch's doing: prefill chunks or
# preemptions stall whole steps, and more replicas only dilute that (docs/policy.md, rule 4b).
ITL_TAIL_MAX = 3.0


def itl_count(sequences: float, slo: float, base_s: float, per_seq_s: float, factor: float,
              most: int) -> int | None:
    """Smallest count whose predicted ITL quantile, ``factor x (base + per_seq x sequences / n)``,
    meets ``slo``, capped at ``most``. ``None`` when the count cannot help: nothing to size (no
    sequences, a step that does not grow with the batch) or one sequence alone decodes slower than
    the SLO (more replicas do not shorten a step: the rule does not chase it), or the observed tail is
    more than :data:`ITL_TAIL_MAX` times the line (not the batch's doing). For given ``slo``,
    ``factor`` and line, non-decreasing in ``sequences`` (docs/policy.md, "ITL model")."""
    if not sequences > 0 or per_seq_s <= 0 or not 0 < factor <= ITL_TAIL_MAX:
        return None
    room = slo / factor - base_s  # the share of a step the batch may take
    if room <= 0:
        return None
    n = ceil_count(sequences * per_seq_s / room)
    return max(1, min(n, max(most, 1)))
