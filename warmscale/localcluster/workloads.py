"""Object builders and queries for tests, demos and benchmarks on the simulated fleet.

Pods are never run: kwok moves them through their phases. The timing annotations:

  sim.warmscale.io/start-delay   Pending (scheduled) -> Running, unready   ("image pull")
  sim.warmscale.io/ready-delay   Running -> Ready                          ("model load")
  sim.warmscale.io/job-duration  Ready -> Succeeded, for restartPolicy Never/OnFailure pods

Values are Go durations ("5s", "1m30s") or RFC3339 times (absolute deadline); default 0.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from .fleet import GPU_RESOURCE, GPU_TAINT

START_DELAY = "sim.warmscale.io/start-delay"
READY_DELAY = "sim.warmscale.io/ready-delay"
JOB_DURATION = "sim.warmscale.io/job-duration"

IMAGE = "registry.invalid/warmscale/sim:latest"  # never pulled


def body(manifest: dict[str, Any]) -> Any:
    """A dict manifest as a request body: kubernetes_asyncio accepts dicts where it types models."""
    return manifest


def gpu_toleration() -> dict[str, str]:
    return {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}


def sim_annotations(
    start_delay: str | None = None, ready_delay: str | None = None, job_duration: str | None = None
) -> dict[str, str]:
    values = {START_DELAY: start_delay, READY_DELAY: ready_delay, JOB_DURATION: job_duration}
    return {k: v for k, v in values.items() if v is not None}


def pod_spec(
    *,
    gpus: int = 0,
    cpu: str = "100m",
    memory: str = "128Mi",
    node_selector: Mapping[str, str] | None = None,
    restart_policy: str = "Always",
    priority_class: str | None = None,
    name: str = "main",
) -> dict[str, Any]:
    """A one-container pod spec; GPU pods tolerate the GPU taint."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU_RESOURCE] = str(gpus)
        limits[GPU_RESOURCE] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": name, "image": IMAGE, "resources": {"requests": requests, "limits": limits}}],
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 5,
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if gpus:
        spec["tolerations"] = [gpu_toleration()]
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def pod(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    finalizers: list[str] | None = None,
    **spec_kwargs: Any,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if finalizers:
        metadata["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec(**spec_kwargs)}


def deployment(
    name: str, replicas: int, *, annotations: Mapping[str, str] | None = None, **spec_kwargs: Any
) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": dict(annotations or {})},
                "spec": pod_spec(**spec_kwargs),
            },
        },
    }


def daemon_set(name: str, **spec_kwargs: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(**spec_kwargs)},
        },
    }


def job(
    name: str, completions: int, *, annotations: Mapping[str, str] | None = None, **spec_kwargs: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": dict(annotations or {})},
                "spec": pod_spec(restart_policy="Never", **spec_kwargs),
            },
        },
    }


def condition(pod_obj: client.V1Pod, kind: str) -> client.V1PodCondition | None:
    for cond in (pod_obj.status.conditions if pod_obj.status else None) or []:
        if cond.type == kind:
            return cond
    return None


def is_ready(pod_obj: client.V1Pod) -> bool:
    cond = condition(pod_obj, "Ready")
    return cond is not None and cond.status == "True"


def transition_time(pod_obj: client.V1Pod, kind: str) -> dt.datetime | None:
    cond = condition(pod_obj, kind)
    return cond.last_transition_time if cond is not None else None
