"""The five detectors and the repetition gate (pure: recorded signals, a policy and ``now`` in, findings out).

Each detector turns the signals into *episodes* (one occurrence of its failure, with the evidence);
:func:`advise` keeps a finding only when at least ``policy.min_episodes`` of its episodes fall within
``policy.window_s`` before ``now``: a failure that happened once is not a reason for a new layer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from warmscale.common.diagnostics.model import (
    COLD_START,
    ENGINE_OOM,
    NEXT_LAYER,
    PARTIAL_GANG,
    PREFILL_INTERFERENCE,
    QUOTA_CONTENTION,
    Episode,
    Finding,
    LatencySample,
    LoadSample,
    PodRecord,
    Policy,
    ScaleSample,
    Signals,
)

Key = tuple[str, str]  # (namespace, workload)


def _ts(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _group(items: Iterable[ScaleSample | LatencySample]) -> dict[Key, list[ScaleSample | LatencySample]]:
    out: dict[Key, list[ScaleSample | LatencySample]] = defaultdict(list)
    for s in items:
        out[(s.namespace, s.workload)].append(s)
    for v in out.values():
        v.sort(key=lambda s: s.at)
    return out


# ------------------------------------------------------------------------------------ cold start


def cold_start_episodes(samples: Sequence[ScaleSample], policy: Policy) -> dict[Key, list[Episode]]:
    """Scale-ups during which the TTFT SLO was missed while the new replicas were still starting, and
    the capacity took at least ``cold_start_min_s`` to arrive (by the measured time-to-ready or by
    how long ready stayed below desired)."""
    out: dict[Key, list[Episode]] = {}
    for key, group in _group(samples).items():
        seq = [s for s in group if isinstance(s, ScaleSample)]
        episodes: list[Episode] = []
        i = 1
        while i < len(seq):
            prev, cur = seq[i - 1], seq[i]
            if not (cur.desired > prev.desired and cur.desired > cur.ready):
                i += 1
                continue
            start, target = cur.at, cur.desired
            j = i
            worst: ScaleSample | None = None
            while j < len(seq) and seq[j].ready < min(target, seq[j].desired):
                s = seq[j]
                if s.ttft_s is not None and s.slo_s is not None and s.ttft_s > s.slo_s and (
                        worst is None or (worst.ttft_s or 0.0) < s.ttft_s):
                    worst = s
                j += 1
            end = seq[j].at if j < len(seq) else seq[-1].at
            waited = end - start
            ttr = max((s.time_to_ready_s for s in seq[i:j + 1] if s.time_to_ready_s is not None), default=None)
            cold = waited >= policy.cold_start_min_s or (ttr is not None and ttr >= policy.cold_start_min_s)
            if worst is not None and cold:
                assert worst.ttft_s is not None and worst.slo_s is not None
                shown_ttr = f"{ttr:.0f}s" if ttr is not None else "unmeasured"
                episodes.append(Episode(
                    at=start,
                    evidence=(f"{_ts(start)}: scale-up {prev.desired}->{target} replicas; TTFT {worst.ttft_s:.2f}s > "
                              f"SLO {worst.slo_s:.2f}s while ready stayed {cur.ready} for {waited:.0f}s "
                              f"(time-to-ready {shown_ttr})"),
                    data={"from": prev.desired, "to": target, "ttft_s": worst.ttft_s, "slo_s": worst.slo_s,
                          "waited_s": waited, "time_to_ready_s": ttr}))
            i = max(j, i + 1)
        if episodes:
            out[key] = episodes
    return out


# --------------------------------------------------------------------------- prefill interference


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    n = len(xs)
    if n < 3 or n != len(ys):
        return None
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.sqrt(sxx * syy)


def prefill_episodes(samples: Sequence[LatencySample], policy: Policy) -> dict[Key, list[Episode]]:
    """Windows in which decode inter-token latency rose with the prefill tokens arriving (strong
    positive correlation and a rise of at least ``itl_rise``)."""
    out: dict[Key, list[Episode]] = {}
    for key, group in _group(samples).items():
        seq = [s for s in group if isinstance(s, LatencySample)]
        episodes: list[Episode] = []
        windows: dict[int, list[LatencySample]] = defaultdict(list)
        for s in seq:
            windows[int(s.at // policy.itl_window_s)].append(s)
        for w in sorted(windows):
            win = windows[w]
            if len(win) < policy.itl_min_samples:
                continue
            itl = [s.itl_s for s in win]
            tok = [s.prefill_tokens_per_s for s in win]
            r = pearson(tok, itl)
            lo, hi = min(itl), max(itl)
            if r is None or r < policy.itl_correlation or lo <= 0 or hi < policy.itl_rise * lo:
                continue
            at = win[0].at
            episodes.append(Episode(
                at=at,
                evidence=(f"{_ts(at)}: decode ITL {lo * 1000:.0f}->{hi * 1000:.0f} ms as prefill rose "
                          f"{min(tok):.0f}->{max(tok):.0f} tokens/s (r={r:.2f}, {len(win)} samples)"),
                data={"itl_min_s": lo, "itl_max_s": hi, "prefill_tokens_min": min(tok),
                      "prefill_tokens_max": max(tok), "r": r}))
        if episodes:
            out[key] = episodes
    return out


# ------------------------------------------------------------------------------ quota contention


def _pending_interval(p: PodRecord, now: float) -> tuple[float, float]:
    return p.created_at, p.scheduled_at if p.scheduled_at is not None else now


def quota_episodes(pods: Sequence[PodRecord], quota_namespaces: frozenset[str] | None, policy: Policy,
                   now: float) -> dict[Key, list[Episode]]:
    """GPU pods of namespaces without a GPU quota that waited longer than ``pending_threshold_s``
    while GPU pods of at least one *other* such namespace waited too: teams competing for the same
    GPUs with nothing deciding who goes first. One episode per long-pending pod."""
    if quota_namespaces is None:
        return {}
    long_pending = []
    for p in pods:
        if p.gpus <= 0 or p.namespace in quota_namespaces:
            continue
        start, end = _pending_interval(p, now)
        if end - start >= policy.pending_threshold_s:
            long_pending.append((p, start, end))
    out: dict[Key, list[Episode]] = defaultdict(list)
    for p, start, end in long_pending:
        others = sorted({q.namespace for q, s2, e2 in long_pending
                         if q.namespace != p.namespace and s2 < end and start < e2})
        if not others:
            continue
        waited = end - start
        state = "still pending" if p.scheduled_at is None else "then scheduled"
        out[(p.namespace, "*")].append(Episode(
            at=start + policy.pending_threshold_s,
            evidence=(f"{_ts(start)}: pod {p.namespace}/{p.name} ({p.gpus:g} GPU) pending {waited / 60:.0f} min, "
                      f"{state}{': ' + p.pending_reason if p.pending_reason and p.scheduled_at is None else ''}; "
                      f"GPU pods of {', '.join(others)} pending at the same time; no GPU quota in "
                      f"{', '.join(sorted({p.namespace, *others}))}"),
            data={"pod": p.name, "gpus": p.gpus, "pending_s": waited, "other_namespaces": others}))
    return dict(out)


# --------------------------------------------------------------------------------- partial gangs


def gang_episodes(pods: Sequence[PodRecord], policy: Policy, now: float) -> dict[Key, list[Episode]]:
    """Multi-pod replicas (one gang) of which some pods were scheduled while others stayed pending for
    ``gang_threshold_s``: the scheduled pods hold GPUs that serve nothing. One episode per gang."""
    gangs: dict[tuple[str, str], list[PodRecord]] = defaultdict(list)
    for p in pods:
        if p.gang is not None:
            gangs[(p.namespace, p.gang)].append(p)
    out: dict[Key, list[Episode]] = defaultdict(list)
    for (ns, gang), members in sorted(gangs.items()):
        scheduled = [p for p in members if p.scheduled_at is not None]
        pending = [p for p in members if p.scheduled_at is None and p.phase == "Pending" and not p.deleted]
        size = max((p.gang_size or 0 for p in members), default=0) or len(members)
        if not scheduled or not pending:
            continue
        since = max(min(p.created_at for p in pending), min(p.scheduled_at or now for p in scheduled))
        if now - since < policy.gang_threshold_s:
            continue
        held = sum(p.gpus for p in scheduled)
        reason = next((p.pending_reason for p in pending if p.pending_reason), "")
        out[(ns, members[0].workload)].append(Episode(
            at=since,
            evidence=(f"{_ts(since)}: replica {ns}/{gang}: {len(scheduled)}/{size} pods scheduled, {len(pending)} "
                      f"pending {(now - since) / 60:.0f} min{' (' + reason + ')' if reason else ''}; "
                      f"{held:g} GPU held by the scheduled pods serve nothing"),
            data={"gang": gang, "scheduled": len(scheduled), "pending": len(pending), "size": size,
                  "gpus_held": held}))
    return dict(out)


# ---------------------------------------------------------------------------------- engine OOM


def _oom(reason: str, message: str) -> bool:
    m = message.lower()
    return reason == "OOMKilled" or "out of memory" in m or "outofmemoryerror" in m


def _loaded(load: Sequence[LoadSample], ns: str, pod: str, at: float, policy: Policy) -> LoadSample | None:
    near = [s for s in load if s.namespace == ns and s.pod == pod and at - policy.load_window_s <= s.at <= at]
    for s in sorted(near, key=lambda s: -s.at):
        if s.running > 0 or (s.kv_usage is not None and s.kv_usage >= policy.load_kv_high):
            return s
    return None


def oom_episodes(pods: Sequence[PodRecord], load: Sequence[LoadSample], policy: Policy) -> dict[Key, list[Episode]]:
    """Engine restarts that are out-of-memory kills (OOMKilled, a CUDA out-of-memory message), or any
    failing restart while the engine carried load. A pod reports its last termination and its restart
    count: each restart counts as an episode, at the last termination's time."""
    out: dict[Key, list[Episode]] = defaultdict(list)
    for p in pods:
        for t in p.terminations:
            oom = _oom(t.reason, t.message)
            at_load = _loaded(load, p.namespace, p.name, t.at, policy)
            if not oom and (t.exit_code == 0 or at_load is None):
                continue
            what = "out of memory" if oom else f"exit {t.exit_code} ({t.reason})"
            load_txt = (f" with {at_load.running:g} requests running"
                        + (f", KV {at_load.kv_usage:.0%}" if at_load.kv_usage is not None else "")
                        if at_load is not None else "")
            for k in range(max(1, t.restarts)):
                out[(p.namespace, p.workload)].append(Episode(
                    at=t.at,
                    evidence=(f"{_ts(t.at)}: pod {p.namespace}/{p.name} restarted ({what}{load_txt}); "
                              f"restart {t.restarts - k} of {t.restarts}"),
                    data={"pod": p.name, "reason": t.reason, "exit_code": t.exit_code, "oom": oom}))
    return dict(out)


# ------------------------------------------------------------------------------------- the gate


def _summary(kind: str, n: int, window_h: float) -> str:
    what = {
        COLD_START: "scale-ups missed the TTFT SLO while new replicas were still starting",
        PREFILL_INTERFERENCE: "decode inter-token latency rose with concurrent prefill tokens",
        QUOTA_CONTENTION: "GPU pods of several quota-less namespaces waited long at the same time",
        PARTIAL_GANG: "multi-pod replicas were only partly scheduled",
        ENGINE_OOM: "the engine restarted out of memory or under load",
    }[kind]
    return f"{n} times in {window_h:g} h: {what}"


def gate(kind: str, episodes: dict[Key, list[Episode]], policy: Policy, now: float) -> list[Finding]:
    """Findings whose failure repeated: at least ``min_episodes`` episodes within the window."""
    out = []
    since = now - policy.window_s
    for (ns, wl), eps in sorted(episodes.items()):
        recent = tuple(sorted((e for e in eps if since <= e.at <= now), key=lambda e: e.at))
        if len(recent) < policy.min_episodes:
            continue
        out.append(Finding(kind=kind, namespace=ns, workload=wl, episodes=recent, next_layer=NEXT_LAYER[kind],
                           summary=_summary(kind, len(recent), policy.window_s / 3600)))
    return out


def advise(signals: Signals, policy: Policy, now: float) -> list[Finding]:
    """Every finding whose failure has repeated, in a stable order."""
    findings: list[Finding] = []
    findings += gate(COLD_START, cold_start_episodes(signals.scale, policy), policy, now)
    findings += gate(PREFILL_INTERFERENCE, prefill_episodes(signals.latency, policy), policy, now)
    findings += gate(QUOTA_CONTENTION, quota_episodes(signals.pods, signals.gpu_quota_namespaces, policy, now),
                     policy, now)
    findings += gate(PARTIAL_GANG, gang_episodes(signals.pods, policy, now), policy, now)
    findings += gate(ENGINE_OOM, oom_episodes(signals.pods, signals.load, policy), policy, now)
    return findings
