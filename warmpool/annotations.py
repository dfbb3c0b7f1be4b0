"""``warmscale.io/*`` annotations of a Deployment/StatefulSet -> a validated :class:`WarmConfig` (pure).

Every key, its default and meaning is in :data:`KEYS` (``python -m warmscale.warmpool.annotations`` prints the
table that ``docs/warmpool.md`` carries). An invalid value raises :class:`AnnotationError` naming the
key; the controller turns it into an Event and changes nothing.

``min-ready`` (a number or a schedule by day and time) and ``scale-to-zero`` (``never``, ``allowed`` or
``allowed: <windows>``) use the syntax documented and parsed in :mod:`scaler.schedule`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from warmscale.common.quantity import parse_quantity
from warmscale.scaler.config import ConfigError, parse_bool
from warmscale.scaler.schedule import (  # noqa: F401  (the schedule syntax lives with the scaler, which evaluates it too)
    DAYS,
    ScaleToZero,
    Schedule,
    Window,
    _localize,
    _parse_count,
    _parse_days,
    _parse_time,
    _parse_tz,
    _parse_window,
    _split_entries,
    parse_min_ready,
    parse_scale_to_zero,
)
from warmscale.warmpool.model_uri import CacheKey, ModelURI, ModelURIError, parse_model_uri

PREFIX = "warmscale.io/"
STATUS_KEY = PREFIX + "status"  # written by the controller


class AnnotationError(ConfigError):
    """Invalid ``warmscale.io/*`` annotation; ``key`` is the full annotation key."""


@dataclass(frozen=True)
class WarmConfig:
    enabled: bool = False
    min_ready: Schedule = field(default_factory=Schedule)
    scale_to_zero: ScaleToZero = field(default_factory=ScaleToZero)
    standby: int = 0  # the fixed count (standby_auto False)
    standby_auto: bool = True  # `auto` (the default): sized by the planner from burst statistics
    prestage_nodes: int = 0
    model_uri: ModelURI | None = None
    model_size: int | None = None
    model_sha256: str | None = None
    cache_root: str = "/var/lib/warmscale/models"
    cache_budget: int = 500 * 1024**3
    autoscale: bool = False
    max_replicas: int = 10
    ttft_slo_seconds: float | None = None
    scaler_address: str | None = None
    trigger_metadata: Mapping[str, str] = field(default_factory=dict)
    stage_pod_annotations: Mapping[str, str] = field(default_factory=dict)
    role: str = "both"
    pd_group: str | None = None
    ray_worker_group: str | None = None  # a RayCluster's target group (None: its only one)

    def cache_key(self, namespace: str) -> CacheKey:
        """The cache identity of this workload's model in ``namespace`` (see :class:`CacheKey`)."""
        assert self.model_uri is not None
        return CacheKey(self.model_uri, namespace, self.model_sha256)

    def floor_at(self, now: datetime) -> tuple[int, bool]:
        """(ScaledObject minReplicaCount at ``now``, whether a 0 floor was raised to 1)."""
        f = self.min_ready.floor_at(now)
        if f == 0 and not self.scale_to_zero.allowed_at(now):
            return 1, True
        return f, False


def _parse_standby(raw: str) -> int | str:
    if raw.strip().lower() == "auto":
        return "auto"
    return _parse_count(raw)


def _parse_size(raw: str) -> int:
    v = parse_quantity(raw)
    if v <= 0 or v != int(v):
        raise ValueError(f"expected a positive byte count, got {raw!r}")
    return int(v)


def _parse_sha256(raw: str) -> str:
    s = raw.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", s):
        raise ValueError("expected 64 hex digits")
    return s


def _parse_abs_path(raw: str) -> str:
    s = raw.strip()
    if not s.startswith("/") or "\x00" in s or any(p == ".." for p in s.split("/")):
        raise ValueError(f"expected an absolute path without '..', got {raw!r}")
    return s.rstrip("/") or "/"


def _parse_positive_float(raw: str) -> float:
    v = float(raw.strip())
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"expected a positive number, got {raw!r}")
    return v


def _parse_role(raw: str) -> str:
    r = raw.strip().lower()
    if r not in ("both", "prefill", "decode"):
        raise ValueError(f"expected prefill, decode or both, got {raw!r}")
    return r


def _parse_group(raw: str) -> str:
    s = raw.strip()
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", s):
        raise ValueError(f"expected a lowercase DNS name, got {raw!r}")
    return s


def _parse_label_value(raw: str) -> str:
    """A Kubernetes label value (KubeRay labels a group's pods ``ray.io/group=<groupName>``)."""
    s = raw.strip()
    if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", s):
        raise ValueError(f"expected a worker group name (a label value: 1-63 letters, digits, '-', '_', '.'), "
                         f"got {raw!r}")
    return s


def _parse_str_map(raw: str) -> dict[str, str]:
    try:
        d = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"expected a JSON object: {exc.msg}") from None
    if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in d.items()):
        raise ValueError("expected a JSON object of string to string")
    return d


def _parse_address(raw: str) -> str:
    s = raw.strip()
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {raw!r}")
    return s


def _parse_uri(raw: str) -> ModelURI:
    try:
        return parse_model_uri(raw)
    except ModelURIError as exc:
        raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class Key:
    name: str  # without the prefix
    field: str
    parse: Callable[[str], Any]
    default: str
    doc: str


KEYS: tuple[Key, ...] = (
    Key("enabled", "enabled", parse_bool, "false", "`true` turns the warm pool on for this workload."),
    Key("min-ready", "min_ready", parse_min_ready, "0",
        "Warm floor of ready replicas: a number or a schedule (`tz=...; mon-fri 08:00-20:00=4; default=1`). "
        "Kept as the ScaledObject's minReplicaCount."),
    Key("scale-to-zero", "scale_to_zero", parse_scale_to_zero, "never",
        "`never`, `allowed`, or `allowed: <windows>`. Where not allowed, a 0 floor is raised to 1 (with an Event)."),
    Key("standby", "standby", _parse_standby, "auto",
        "Replicas' worth of capacity held by placeholder pods (priority -5, never preempting): a number, or "
        "`auto`: sized from the burst statistics the scaler publishes, zero where a placeholder would cost more "
        "GPU-hours than the misses it prevents (docs/policy.md, \"Warm capacity sized from history\"). "
        "A LeaderWorkerSet's replica is a group: it is held as a gang of one placeholder per member, all or "
        "nothing (docs/gangs-queues.md)."),
    Key("prestage-nodes", "prestage_nodes", _parse_count, "0",
        "On how many matching nodes to pre-pull the images and pre-stage the weights. A LeaderWorkerSet "
        "counts groups: each group's `size` nodes, taken domain by domain of its exclusive topology."),
    Key("model-uri", "model_uri", _parse_uri, "(none)",
        "Weights source: `hf://org/name@revision`, `s3://bucket/prefix`, `pvc://claim/path`, `file:///path` "
        "(only under the controller's `--file-source-allow` roots; never a system path)."),
    Key("model-size", "model_size", _parse_size, "(none)",
        "Expected total size of the weights (bytes or a quantity like `16Gi`); verified by the stager."),
    Key("model-sha256", "model_sha256", _parse_sha256, "(none)",
        "Expected SHA-256 (of the file, or of the tree manifest for a directory); verified by the stager. "
        "Also the cache identity: workloads of any namespace naming the same URI and digest share one copy "
        "(without it, each namespace has its own)."),
    Key("cache-root", "cache_root", _parse_abs_path, "/var/lib/warmscale/models",
        "Node-local cache directory (hostPath) the stager writes into."),
    Key("cache-budget", "cache_budget", _parse_size, "500Gi",
        "Disk budget of the node-local cache; least-recently-used models are evicted to stay under it."),
    Key("autoscale", "autoscale", parse_bool, "false",
        "`true`: the controller creates and owns a KEDA ScaledObject (external-push trigger) for the workload."),
    Key("max-replicas", "max_replicas", _parse_count, "10", "maxReplicaCount of the owned ScaledObject."),
    Key("ttft-slo-seconds", "ttft_slo_seconds", _parse_positive_float, "(none)",
        "TTFT SLO passed to the scaler trigger (`ttftSloSeconds`)."),
    Key("scaler-address", "scaler_address", _parse_address, "(controller flag --scaler-address)",
        "host:port of the scaler's gRPC Service for the external-push trigger."),
    Key("trigger-metadata", "trigger_metadata", _parse_str_map, "{}",
        "JSON object of extra trigger metadata (scaler keys, see docs/metadata.md)."),
    Key("stage-pod-annotations", "stage_pod_annotations", _parse_str_map, "{}",
        "JSON object of annotations for the staging Job's pods (e.g. to disable sidecar injection)."),
    Key("role", "role", _parse_role, "both",
        "Disaggregated serving: `prefill`, `decode` or `both`; passed to the owned ScaledObject's trigger (`role`)."),
    Key("pd-group", "pd_group", _parse_group, "(none)",
        "Name shared by the prefill and decode workloads of one deployment; passed as `pdGroup` (needs a role)."),
    Key("ray-worker-group", "ray_worker_group", _parse_label_value, "(the only group)",
        "RayCluster targets: the `workerGroupSpecs[].groupName` kept warm (needed when the cluster has several)."),
)
_BY_NAME = {k.name: k for k in KEYS}


def parse_annotations(annotations: Mapping[str, str] | None) -> WarmConfig:
    """Validate every ``warmscale.io/*`` annotation; other annotations are ignored.

    Raises :class:`AnnotationError` naming the first bad (or unknown) key, in sorted order.
    """
    values: dict[str, Any] = {}
    ann = dict(annotations or {})
    for full in sorted(ann):
        if not full.startswith(PREFIX) or full == STATUS_KEY:
            continue
        name = full[len(PREFIX):]
        key = _BY_NAME.get(name)
        if key is None:
            raise AnnotationError(full, f"unknown key; known: {', '.join(k.name for k in KEYS)}")
        raw = ann[full]
        try:
            if name == "scale-to-zero":
                tz_raw = ann.get(PREFIX + "min-ready", "0")
                try:
                    tz = parse_min_ready(tz_raw).tz
                except ValueError:
                    tz = "UTC"
                values[key.field] = parse_scale_to_zero(raw, tz)
            else:
                values[key.field] = key.parse(raw)
        except (ValueError, TypeError) as exc:
            raise AnnotationError(full, str(exc)) from None
    standby = values.pop("standby", "auto")
    if standby == "auto":
        values["standby_auto"] = True
    else:
        values["standby"], values["standby_auto"] = int(standby), False
    cfg = WarmConfig(**values)
    if (cfg.model_size is not None or cfg.model_sha256 is not None) and cfg.model_uri is None:
        raise AnnotationError(PREFIX + "model-uri", "model-size/model-sha256 need model-uri")
    if cfg.pd_group is not None and cfg.role == "both":
        raise AnnotationError(PREFIX + "role", "pd-group needs role prefill or decode")
    if cfg.autoscale and cfg.max_replicas < max(1, cfg.min_ready.maximum):
        raise AnnotationError(PREFIX + "max-replicas", f"{cfg.max_replicas} is below the largest min-ready floor")
    return cfg


def is_enabled(annotations: Mapping[str, str] | None) -> bool:
    """Cheap check used to filter watched workloads (invalid values count as enabled, so they get an Event)."""
    raw = (annotations or {}).get(PREFIX + "enabled")
    return raw is not None and raw.strip().lower() not in ("false", "0", "no")


def defaults_table() -> str:
    rows = ["| annotation | default | meaning |", "|---|---|---|"]
    for k in KEYS:
        rows.append(f"| `{PREFIX}{k.name}` | `{k.default}` | {k.doc} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(defaults_table())
