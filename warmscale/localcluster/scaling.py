"""The pieces of an end-to-end scaling run on the local cluster with the real KEDA.

- :class:`ScalerProcess`: ``warmscale scaler`` as a separate process (this checkout's code), with
  its per-RPC counts (``/metrics``) and decision log (``/decisions``).
- :func:`engine_deployment` / :func:`scaled_object`: a Deployment whose KWOK pods carry a metrics
  port, and a ScaledObject pointing an ``external-push`` (or ``external``) trigger at the scaler.
- :class:`ReplicaTimeline`: the Deployment's ``spec.replicas`` and ready pods over time (polled).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .binaries import REPO_ROOT
from .engines import stop_task
from .processes import free_port
from .workloads import READY_DELAY, START_DELAY, pod_spec

KEDA_GROUP, KEDA_VERSION = "keda.sh", "v1alpha1"
ENGINE_PORT_NAME = "metrics"


class ScalerProcess:
    """``python -m warmscale.cli scaler`` on 127.0.0.1 (free ports), logging to ``log_path``."""

    def __init__(self, kubeconfig: Path, log_path: Path, *, extra_args: list[str] | None = None,
                 grpc_port: int | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_args = list(extra_args or [])
        self.grpc_port = grpc_port or free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, within: float = 30.0) -> ScalerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "warmscale.cli", "--log-format", "json", "scaler",
            "--host", "127.0.0.1", "--grpc-port", str(self.grpc_port), "--metrics-port", str(self.metrics_port),
            "--kubeconfig", str(self.kubeconfig), "--grace-seconds", "1", *self.extra_args,
        ]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"scaler exited ({self.proc.returncode}):\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return self
            time.sleep(0.1)
        raise TimeoutError(f"scaler not healthy:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (a crash: no graceful stream end)."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def _get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=3) as r:
            return bytes(r.read())

    def rpc_counts(self) -> dict[str, int]:
        """Unary RPCs answered so far, by method (``warmscale_rpc_duration_seconds_count``)."""
        counts: dict[str, int] = {}
        for line in self._get("/metrics").decode().splitlines():
            if line.startswith("warmscale_rpc_duration_seconds_count{"):
                labels, value = line[len("warmscale_rpc_duration_seconds_count{"):].rsplit("} ", 1)
                method = labels.split('method="', 1)[1].split('"', 1)[0]
                counts[method] = counts.get(method, 0) + int(float(value))
        return counts

    def open_streams(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for line in self._get("/metrics").decode().splitlines():
            if line.startswith("warmscale_open_streams{"):
                labels, value = line[len("warmscale_open_streams{"):].rsplit("} ", 1)
                out[labels.split('method="', 1)[1].split('"', 1)[0]] = int(float(value))
        return out

    def decisions(self, namespace: str, name: str, limit: int = 1) -> list[dict[str, Any]]:
        body = json.loads(self._get(f"/decisions?namespace={namespace}&name={name}&limit={limit}"))
        return list(body["decisions"])

    def latest_desired(self, namespace: str, name: str) -> int | None:
        d = self.decisions(namespace, name)
        return int(d[-1]["desired"]) if d else None


def engine_deployment(name: str, replicas: int, port: int, *, ready_delay: str = "1s",
                      start_delay: str = "0s") -> dict[str, Any]:
    """A Deployment of simulated engine pods (cpu nodes) with a named metrics port and KWOK delays."""
    labels = {"app": name}
    spec = pod_spec()
    spec["containers"][0]["ports"] = [{"name": ENGINE_PORT_NAME, "containerPort": port}]
    spec["terminationGracePeriodSeconds"] = 0
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {START_DELAY: start_delay, READY_DELAY: ready_delay}},
                "spec": spec,
            },
        },
    }


def scaler_metadata(name: str, port: int, redis_address: str, queue: str, **overrides: str) -> dict[str, str]:
    """Trigger metadata for the engine pods of :func:`engine_deployment` plus a Redis gateway queue."""
    meta = {
        "engine": "vllm",
        "podSelector": f"app={name}",
        "metricsPort": str(port),
        "redisAddress": redis_address,
        "redisQueue": queue,
        "redisQueueType": "list",
        "targetInflightPerReplica": "10",
        "timeToReadySeconds": "2",
        "trendWindowSeconds": "5",
        "scaleDownStabilizationSeconds": "4",
        # The burst hold keeps a peak for node idle time + time-to-ready (600 s by default): short here
        # like every other window, so a scale-down shows within a test.
        "nodeIdleSeconds": "0",
        "idleWindowSeconds": "3",
        "scrapeIntervalSeconds": "0.5",
        "hpaTolerance": "0",
        "minReplicas": "1",
        "maxReplicas": "8",
    }
    meta.update(overrides)
    return meta


def scaled_object(
    name: str,
    scaler_address: str,
    metadata: Mapping[str, str],
    *,
    min_replicas: int = 0,
    max_replicas: int = 8,
    polling_interval: int = 1,
    cooldown: int = 3,
    push: bool = True,
    tolerance: str | None = "0",
    fallback: dict[str, Any] | None = None,
    auth_ref: str | None = None,
) -> dict[str, Any]:
    trigger: dict[str, Any] = {"type": "external-push" if push else "external",
                               "metadata": {"scalerAddress": scaler_address, **metadata}}
    if auth_ref:
        trigger["authenticationRef"] = {"name": auth_ref}
    behavior: dict[str, Any] = {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 1000, "periodSeconds": 1}]},
        "scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}]},
    }
    if tolerance is not None:
        behavior["scaleUp"]["tolerance"] = tolerance
        behavior["scaleDown"]["tolerance"] = tolerance
    spec: dict[str, Any] = {
        "scaleTargetRef": {"name": name},
        "pollingInterval": polling_interval,
        "cooldownPeriod": cooldown,
        "minReplicaCount": min_replicas,
        "maxReplicaCount": max_replicas,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
        "triggers": [trigger],
    }
    if fallback is not None:
        spec["fallback"] = fallback
    return {"apiVersion": f"{KEDA_GROUP}/{KEDA_VERSION}", "kind": "ScaledObject",
            "metadata": {"name": name}, "spec": spec}


async def create_scaled_object(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    await client.CustomObjectsApi(api).create_namespaced_custom_object(
        KEDA_GROUP, KEDA_VERSION, namespace, "scaledobjects", body)


async def read_scaled_object(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        KEDA_GROUP, KEDA_VERSION, namespace, "scaledobjects", name)
    return obj


async def patch_scaled_object(api: client.ApiClient, namespace: str, name: str, patch: dict[str, Any]) -> None:
    await client.CustomObjectsApi(api).patch_namespaced_custom_object(
        KEDA_GROUP, KEDA_VERSION, namespace, "scaledobjects", name, patch,
        _content_type="application/merge-patch+json")


async def read_hpa(api: client.ApiClient, namespace: str, so_name: str) -> Any | None:
    try:
        return await client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(
            f"keda-hpa-{so_name}", namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def so_condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


@dataclass
class ReplicaTimeline:
    """Polls the Deployment's ``spec.replicas`` and ready replicas; records every change."""

    api: client.ApiClient
    namespace: str
    name: str
    interval: float = 0.1
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (monotonic, spec, ready)
    _task: asyncio.Task[None] | None = None
    _closing: bool = False

    def start(self) -> ReplicaTimeline:
        self._task = asyncio.create_task(self._run())
        return self

    async def aclose(self) -> None:
        self._closing = True
        if self._task is not None:
            await stop_task(self._task)  # bounded, and safe from a lost cancellation

    async def _run(self) -> None:
        apps = client.AppsV1Api(self.api)
        while not self._closing:
            with contextlib.suppress(ApiException):
                d = await apps.read_namespaced_deployment(self.name, self.namespace)
                spec, ready = int(d.spec.replicas or 0), int((d.status.ready_replicas if d.status else 0) or 0)
                if not self.samples or self.samples[-1][1:] != (spec, ready):
                    self.samples.append((time.monotonic(), spec, ready))
            await asyncio.sleep(self.interval)

    @property
    def spec(self) -> int | None:
        return self.samples[-1][1] if self.samples else None

    @property
    def ready(self) -> int | None:
        return self.samples[-1][2] if self.samples else None

    def first(self, after: float, *, spec: int | None = None, ready: int | None = None) -> float | None:
        """Monotonic time of the first sample after ``after`` with that spec/ready count (>= for ready)."""
        for t, s, r in self.samples:
            if t < after:
                continue
            if spec is not None and s != spec:
                continue
            if ready is not None and r < ready:
                continue
            return t
        return None

    def specs_since(self, after: float) -> list[int]:
        """The spec.replicas values from the one current at ``after`` on, each change once."""
        last_before = [s for t, s, _ in self.samples if t < after][-1:]
        out: list[int] = []
        for s in last_before + [s for t, s, _ in self.samples if t >= after]:
            if not out or out[-1] != s:
                out.append(s)
        return out

    async def wait(self, *, spec: int | None = None, ready: int | None = None, within: float,
                   what: str = "") -> float:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.samples:
                _, s, r = self.samples[-1]
                if (spec is None or s == spec) and (ready is None or r >= ready):
                    return time.monotonic()
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{what or self.name}: spec={self.spec} ready={self.ready} after {within:.0f}s "
                           f"(wanted spec={spec} ready>={ready}); history {self.samples[-12:]}")
