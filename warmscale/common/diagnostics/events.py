"""Findings the warm-pool controller can establish from the pods of a workload it manages, as
Kubernetes Event (reason, message) pairs (pure). The controller sees pods only: engine out-of-memory
restarts and partly scheduled multi-pod replicas; cold starts against the SLO are the scaler's
(``warmscale_advice``), quota contention needs ResourceQuotas (``warmscale advise``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from warmscale.common.diagnostics.detect import advise
from warmscale.common.diagnostics.model import ENGINE_OOM, PARTIAL_GANG, Finding, Policy, Signals
from warmscale.common.diagnostics.pods import pod_record

REASONS = {ENGINE_OOM: "NextLayerParallelism", PARTIAL_GANG: "NextLayerGangAdmission"}


def event_for(f: Finding) -> tuple[str, str]:
    """A stable message (no elapsed times): it changes only when an episode is added."""
    last = f.episodes[-1]
    what = last.data.get("pod") or last.data.get("gang") or ""
    when = datetime.fromtimestamp(last.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return REASONS[f.kind], (f"{f.summary}. Next layer: {f.next_layer}. Latest episode: {when}"
                             + (f" ({what})" if what else ""))


def workload_events(pods: Iterable[Mapping[str, Any]], selector: Mapping[str, str], now: float,
                    policy: Policy | None = None) -> list[tuple[str, str]]:
    """Events for the pods ``selector`` matches (placeholders and other controller pods excluded by the caller)."""
    own = []
    for p in pods:
        labels = (p.get("metadata") or {}).get("labels") or {}
        if selector and all(labels.get(k) == v for k, v in selector.items()):
            own.append(pod_record(p))
    findings = advise(Signals(pods=tuple(own)), policy or Policy(), now)
    return [event_for(f) for f in findings if f.kind in REASONS]
