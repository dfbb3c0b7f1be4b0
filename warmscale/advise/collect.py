"""Read the recorded signals for ``warmscale advise`` (imperative shell; read-only).

Kubernetes (the user's credentials, list only): pods (pending GPU pods, multi-pod replicas,
restarts and their last termination) and ResourceQuotas. Prometheus (``--prometheus``, optional):
the scaler's own series (desired/ready replicas, TTFT quantile and SLO, time-to-ready) and the
engines' inter-token latency, prompt tokens and load, over ``--since``. Without Prometheus the
cold-start and prefill-interference detectors have no data and say so.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import orjson
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from warmscale.common.diagnostics.model import LatencySample, LoadSample, PodRecord, ScaleSample, Signals
from warmscale.common.diagnostics.pods import gpu_quota_namespaces, pod_record
from warmscale.scaler.metrics import SO_LABEL

STEP_S = 30.0
# The scaler's series (one per ScaledObject: labels namespace, scaledObject).
SCALE_QUERIES = {
    "desired": "warmscale_desired_replicas",
    "ready": "warmscale_ready_replicas",
    "ttft": "warmscale_ttft_quantile_seconds",
    "slo": "warmscale_ttft_slo_seconds",
    "ttr": "warmscale_time_to_ready_seconds",
}
# vLLM (current names); per pod.
ITL_QUERY = ("sum by (namespace, pod) (rate(vllm:inter_token_latency_seconds_sum[1m])) / "
             "sum by (namespace, pod) (rate(vllm:inter_token_latency_seconds_count[1m]))")
PROMPT_QUERY = "sum by (namespace, pod) (rate(vllm:prompt_tokens_total[1m]))"
RUNNING_QUERY = "sum by (namespace, pod) (vllm:num_requests_running)"
KV_QUERY = "max by (namespace, pod) (vllm:kv_cache_usage_perc)"


async def read_kubernetes(api: Any, namespace: str | None) -> tuple[list[PodRecord], frozenset[str] | None, list[str]]:
    """Pods and GPU-quota namespaces; notes for what could not be read (e.g. RBAC)."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    notes: list[str] = []

    async def raw(call: Any, *args: Any) -> dict[str, Any]:
        resp = await call(*args, _preload_content=False)
        body: dict[str, Any] = orjson.loads(await resp.read())
        return body

    if namespace:
        pods_doc = await raw(core.list_namespaced_pod, namespace)
    else:
        pods_doc = await raw(core.list_pod_for_all_namespaces)
    pods = [pod_record(p) for p in pods_doc.get("items") or []]
    quotas: frozenset[str] | None
    try:
        if namespace:
            q = await raw(core.list_namespaced_resource_quota, namespace)
        else:
            q = await raw(core.list_resource_quota_for_all_namespaces)
        quotas = gpu_quota_namespaces(q.get("items") or [])
    except ApiException as exc:
        quotas = None
        notes.append(f"resourcequotas not readable ({exc.status}): quota contention not evaluated")
    return pods, quotas, notes


def query_range(prom: PrometheusConnect, query: str, start: float, end: float, step: float = STEP_S,
                deadline_s: float = 20.0) -> list[dict[str, Any]]:
    """One range query through prometheus-api-client (blocking: ``read_prometheus`` runs it in a thread;
    this one-shot CLI reads history, not the scaler's hot path)."""
    result: list[dict[str, Any]] = prom.custom_query_range(
        query, start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(end, UTC),
        step=f"{step:g}", params={"timeout": f"{deadline_s:g}s"}, timeout=deadline_s)
    return result


def _series(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], dict[float, float]]:
    out: dict[tuple[str, ...], dict[float, float]] = {}
    for item in result:
        metric = item.get("metric") or {}
        key = tuple(str(metric.get(lab, "")) for lab in labels)
        vals = out.setdefault(key, {})
        for t, v in item.get("values") or []:
            try:
                f = float(v)
            except ValueError:
                continue
            if math.isfinite(f):
                vals[float(t)] = f
    return out


def step_for(since_s: float) -> float:
    """A range-query step that keeps a query under ~2,000 points (Prometheus refuses > 11,000)."""
    return max(STEP_S, math.ceil(since_s / 2000))


async def read_prometheus(address: str, start: float, end: float, pods: list[PodRecord], namespace: str | None,
                          *, step: float | None = None,
                          ) -> tuple[list[ScaleSample], list[LatencySample], list[LoadSample]]:
    ns_sel = f'{{namespace="{namespace}"}}' if namespace else ""
    st = step if step is not None else step_for(end - start)
    prom = PrometheusConnect(url=address.rstrip("/"), disable_ssl=False, retry=Retry(total=0))
    try:
        scale_res = await asyncio.gather(*(asyncio.to_thread(query_range, prom, q + ns_sel, start, end, st)
                                           for q in SCALE_QUERIES.values()))
        lat_res = await asyncio.gather(*(asyncio.to_thread(query_range, prom, q, start, end, st)
                                         for q in (ITL_QUERY, PROMPT_QUERY, RUNNING_QUERY, KV_QUERY)))
    except PrometheusApiClientException as exc:
        raise RuntimeError(f"prometheus: {exc}") from None
    by = {k: _series(r, "namespace", SO_LABEL) for k, r in zip(SCALE_QUERIES, scale_res, strict=True)}
    scale: list[ScaleSample] = []
    for key, desired in by["desired"].items():
        for t in sorted(desired):
            ready = by["ready"].get(key, {}).get(t)
            if ready is None:
                continue
            scale.append(ScaleSample(t, key[0], key[1], int(desired[t]), int(ready), by["ttft"].get(key, {}).get(t),
                                     by["slo"].get(key, {}).get(t), by["ttr"].get(key, {}).get(t)))
    workload = {(p.namespace, p.name): p.workload for p in pods}
    itl, prompt, running, kv = (_series(r, "namespace", "pod") for r in lat_res)
    per_wl: dict[tuple[str, str], dict[float, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for key, vals in itl.items():
        if namespace and key[0] != namespace:
            continue
        wl = workload.get((key[0], key[1]), key[1])
        for t, v in vals.items():
            tok = prompt.get(key, {}).get(t)
            if tok is not None:
                per_wl[(key[0], wl)][t].append((v, tok))
    latency = [LatencySample(t, ns, wl, sum(v for v, _ in xs) / len(xs), sum(tok for _, tok in xs))
               for (ns, wl), by_t in per_wl.items() for t, xs in sorted(by_t.items())]
    load = [LoadSample(t, key[0], key[1], v, kv.get(key, {}).get(t)) for key, vals in running.items()
            for t, v in vals.items() if not namespace or key[0] == namespace]
    return scale, latency, load


async def read_signals(api: Any, *, namespace: str | None, since_s: float, now: float,
                       prometheus: str | None) -> tuple[Signals, list[str]]:
    pods, quotas, notes = await read_kubernetes(api, namespace)
    scale: list[ScaleSample] = []
    latency: list[LatencySample] = []
    load: list[LoadSample] = []
    if prometheus:
        try:
            scale, latency, load = await read_prometheus(prometheus, now - since_s, now, pods, namespace)
        except (TimeoutError, requests.RequestException, RuntimeError, KeyError, ValueError) as exc:
            notes.append(f"prometheus {prometheus} not readable ({type(exc).__name__}: {exc}): cold-start and "
                         "prefill-interference not evaluated")
    else:
        notes.append("no --prometheus: cold-start and prefill-interference not evaluated, restarts count only "
                     "when out of memory")
    return Signals(scale=tuple(scale), latency=tuple(latency), load=tuple(load), pods=tuple(pods),
                   gpu_quota_namespaces=quotas), notes
