"""Where the hold gateway (scaler/holdgate.py) sends a request, and how long it may hold one (pure).

Scale from zero without a 503 (issue 23, req 3): while a workload has no routable backend, the
gateway holds the request, and its queue (a Redis list the ScaledObject names as ``redisQueue``) is
the onset the scaler reads (scaler/onset.py: at once, not at the next tick). The backends are the
workload's own ready replicas and its awake sleepers, those the waker published in the hot status
after their canary passed (warmpool/hot/waker.py): a sleeper waking, asleep, failed, or whose
canary failed is never among them, and a hot status older than HOT_STATUS_MAX_AGE is unknown: none
of its sleepers is routed (the request waits for a fresh one or an own replica).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warmscale.scaler.hot_status import HOT_STATUS_MAX_AGE, HotStatus

# A held request waits at most this long for a backend, then gets 504 (a bounded wait, not a 503
# "come back later"): past a cold start of an 8B on an H100 (about 510 s, warmpool/startup_model.py),
# so that scale from zero without any sleeper still answers.
HOLD_MAX_SECONDS = 600.0
# Requests held at once per gateway; one more is refused with 429 + Retry-After (the gateway's memory
# is bounded; each held request is its body, capped at HOLD_MAX_BODY_BYTES).
HOLD_MAX_REQUESTS = 1000
# A held request's body: an OpenAI completion with a long prompt fits (32k tokens x ~4 bytes x 2).
HOLD_MAX_BODY_BYTES = 256 * 1024
# Retry-After on a 429 (held queue full): the wake time of a level-2 8B (6.5 s, vllm PR #48337), rounded up.
HOLD_FULL_RETRY_AFTER_S = 7


@dataclass(frozen=True)
class Backends:
    urls: tuple[str, ...]  # own ready replicas first, then awake sleepers
    sleepers: int  # of them, awake sleepers


def backends(own: Sequence[str], hot: HotStatus | None, now: float) -> Backends:
    """The routable backends: ``own`` (the workload's ready replicas, base URLs) and the awake
    sleepers of a fresh ``hot`` status (``now`` and its ``updated_at``: epoch seconds)."""
    awake: list[str] = []
    if hot is not None and now - hot.updated_at <= HOT_STATUS_MAX_AGE:
        awake = [u for u in hot.awake_urls if u not in own]
    return Backends((*own, *awake), len(awake))


def pick(urls: Sequence[str], in_flight: Mapping[str, int]) -> str | None:
    """The backend with the fewest requests this gateway has in flight on it (the first on a tie:
    own replicas before sleepers); None: hold."""
    if not urls:
        return None
    return min(urls, key=lambda u: (in_flight.get(u, 0), urls.index(u)))


def endpoint_urls(slices: Sequence[Mapping[str, Any]], port: str | None) -> tuple[str, ...]:
    """The ready endpoints of a Service's EndpointSlices (discovery.k8s.io/v1, as the API serves them),
    as base URLs ``http://ADDRESS:PORT``, sorted. ``port``: the slice port's name or number (the
    Service port's name; None: the slice's only port, else its first). An endpoint whose ``ready`` is
    false (starting, terminating) is left out; an absent ``ready`` is ready (the API's rule)."""
    urls: set[str] = set()
    for s in slices:
        number = _slice_port(s.get("ports") or [], port)
        if number is None:
            continue
        for ep in s.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            for address in ep.get("addresses") or []:
                host = f"[{address}]" if ":" in address else address
                urls.add(f"http://{host}:{number}")
    return tuple(sorted(urls))


def _slice_port(ports: Sequence[Mapping[str, Any]], want: str | None) -> int | None:
    for p in ports:
        number = p.get("port")
        if not isinstance(number, int):
            continue
        if want is None or want == p.get("name") or want == str(number):
            return number
    return None
