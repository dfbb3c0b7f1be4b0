"""The hot tier's objects the controller creates: sleeper pods and the shared ResourceClaims (pure;
plain API dicts; docs/hot-tier.md, "Placement").

A **sleeper** is the workload's pod template with the engine's sleep flags, as a pod of its own:

- labels ``app.kubernetes.io/managed-by: warmscale``, ``warmscale.io/role: hot-sleeper`` and the
  workload's hash, and **none of the template's labels**: the workload's selector (its ReplicaSet,
  its Service, the scaler's ``podSelector``) never matches a sleeper, so nothing routes to it or
  counts it but the hot tier (the waker publishes it once its canary passed);
- an owner reference to the workload (the garbage collector removes it with the workload);
- the annotations the waker reads (:mod:`.sleepers`).

**DRA** (first-class): the template's own GPUs (``nvidia.com/gpu`` and its pod-level
resourceClaims) are dropped and the pod references the pool GPU's shared ResourceClaim instead. That
claim (one per namespace and pool GPU, pinned to the device by its ``uuid`` attribute, no owner:
several workloads' sleepers reference it) is what puts every sleeper of that GPU, and the engine
awake on it, on that GPU by construction. **Time-sliced** (fallback): the pod keeps its
``nvidia.com/gpu`` (a time-sliced replica) and is pinned to the planned node; its GPU is read back
from DCGM.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warmscale.warmpool.hot.config import ENGINE, SLEEP_LEVEL, HotConfig
from warmscale.warmpool.hot.devices import UUID_ATTRIBUTE, DraDevice
from warmscale.warmpool.hot.engine_state import AWAKE, HOT_STATE, state_value
from warmscale.warmpool.hot.pool import Placement
from warmscale.warmpool.hot.sleepers import (
    DEFAULT_PORT,
    HOT_DEVICE,
    HOT_GPU_PRODUCT,
    HOT_INDEX,
    HOT_MODEL,
    HOT_PORT,
    HOT_WORKLOAD,
    SLEEPER_ROLE,
)
from warmscale.warmpool.hot.surface import state_call
from warmscale.warmpool.objects import MANAGED_BY, MANAGED_BY_VALUE, ROLE, Workload, _dns_trunc, _on_node, h, labels

CLAIM_ROLE = "hot-claim"
HOT_POOL_LABEL = "warmscale.io/hot-pool"  # on sleepers and claims: the pool they belong to
HOT_CLAIM = "warmscale.io/hot-claim"  # on a sleeper: the shared claim it references ("" time-sliced)
HOT_NODE = "warmscale.io/hot-node"  # on a sleeper: the node the plan put it on
HOT_TEMPLATE = "warmscale.io/hot-template"  # on a sleeper: the hash of the pod template it was made from
# The pod-level claim name the sleeper's engine container references.
CLAIM_REF = "hot-gpu"
# The device request inside a shared claim.
CLAIM_REQUEST = "gpu"
GPU_RESOURCE = "nvidia.com/gpu"
# The device of a time-sliced sleeper until DCGM attributes it (the waker never wakes it meanwhile).
DEVICE_FROM_DCGM = "dcgm"
# Served-model flags, most specific first (vLLM, then SGLang).
_MODEL_FLAGS = ("--served-model-name", "--model", "--model-path")
# The workload annotation naming the served model where the engine's args do not.
HOT_MODEL_ANN = HOT_MODEL
# The engine's sleep flags and environment (docs/hot-tier.md, "Engines").
SLEEP_ARGS = {"vllm": ("--enable-sleep-mode",), "sglang": ("--enable-memory-saver", "--enable-weights-cpu-backup")}
SLEEP_ENV = {"vllm": (("VLLM_SERVER_DEV_MODE", "1"),), "sglang": ()}


@dataclass(frozen=True)
class SleeperTarget:
    """Where one sleeper goes: its placement, and the shared claim (DRA) or none (time-sliced)."""

    placement: Placement
    claim: str = ""  # the shared ResourceClaim's name; "" on time-sliced GPUs
    gpu_product: str = ""


def sleeper_name(wl: Workload, index: int) -> str:
    return f"ws-hot-{_dns_trunc(wl.name, 40)}-{wl.key_hash[:6]}-{index}"


def claim_name(pool: str, device: str) -> str:
    return f"ws-hot-{_dns_trunc(pool, 40)}-{h(device, 10)}"


def template_hash(wl: Workload) -> str:
    return h(json.dumps(wl.template, sort_keys=True, default=str), 12)


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return str(argv[i + 1])
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def served_model(wl: Workload) -> str:
    """The model name the engine serves (the canary's ``model``): from its flags, else the workload's
    ``warmscale.io/hot-model``, else the workload's name."""
    containers = wl.pod_spec.get("containers") or [{}]
    argv = [str(x) for x in [*(containers[0].get("command") or []), *(containers[0].get("args") or [])]]
    for flag in _MODEL_FLAGS:
        v = _flag_value(argv, flag)
        if v:
            return v
    return str(wl.annotations.get(HOT_MODEL_ANN) or wl.name)


def engine_port(wl: Workload) -> int:
    containers = wl.pod_spec.get("containers") or [{}]
    for p in containers[0].get("ports") or []:
        if p.get("containerPort"):
            return int(p["containerPort"])
    return DEFAULT_PORT


def _without_gpus(resources: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in ("limits", "requests"):
        kept = {r: v for r, v in (resources.get(k) or {}).items() if r != GPU_RESOURCE}
        if kept:
            out[k] = kept
    return out


def _engine(c: dict[str, Any], engine: str) -> None:
    """Add the sleep flags (those not there yet) and the engine's environment to its container."""
    argv = [str(x) for x in [*(c.get("command") or []), *(c.get("args") or [])]]
    missing = [f for f in SLEEP_ARGS.get(engine, ()) if f not in argv]
    if missing:
        c["args"] = [*(c.get("args") or []), *missing]
    env = [dict(e) for e in c.get("env") or []]
    for name, value in SLEEP_ENV.get(engine, ()):
        env = [e for e in env if e.get("name") != name] + [{"name": name, "value": value}]
    if env:
        c["env"] = env


def sleeper_pod(wl: Workload, cfg: HotConfig, target: SleeperTarget) -> dict[str, Any]:
    """Sleeper ``target.placement.index`` of ``wl`` on its pool GPU."""
    p = target.placement
    spec: dict[str, Any] = copy.deepcopy(dict(wl.pod_spec))
    containers = [dict(c) for c in spec.get("containers") or []]
    if not containers:
        raise ValueError(f"{wl.key}: the pod template has no containers")
    _engine(containers[0], cfg.engine)
    if target.claim:
        # The GPU comes from the shared claim alone: the template's GPUs (device plugin or its own
        # claims) would give the sleeper a second GPU of its own.
        for c in containers:
            res = _without_gpus(c.get("resources") or {})
            c["resources"] = res
        containers[0]["resources"]["claims"] = [{"name": CLAIM_REF}]
        spec["resourceClaims"] = [{"name": CLAIM_REF, "resourceClaimName": target.claim}]
    else:
        spec["affinity"] = {**(spec.get("affinity") or {}), **_on_node(p.node)}
    spec["containers"] = containers
    tmpl_meta = wl.template.get("metadata") or {}
    annotations = {str(k): str(v) for k, v in (tmpl_meta.get("annotations") or {}).items()}
    annotations.update({
        HOT_WORKLOAD: f"{wl.namespace}/{wl.name}", HOT_INDEX: str(p.index),
        HOT_DEVICE: p.device if target.claim else DEVICE_FROM_DCGM, HOT_PORT: str(engine_port(wl)),
        HOT_MODEL: served_model(wl), ENGINE: cfg.engine, SLEEP_LEVEL: str(cfg.level),
        HOT_GPU_PRODUCT: target.gpu_product, HOT_CLAIM: target.claim, HOT_NODE: p.node, HOT_TEMPLATE: template_hash(wl),
    })
    annotations.pop(HOT_STATE, None)  # never a state the template carries
    if state_call(cfg.engine) is None:
        # An engine that cannot be asked its state (SGLang): a new engine starts awake, in its first
        # container incarnation; the waker records every state it drives it to from there (engine_state).
        annotations[HOT_STATE] = state_value(AWAKE, 0)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": sleeper_name(wl, p.index), "namespace": wl.namespace,
                     "labels": labels(wl, SLEEPER_ROLE, {HOT_POOL_LABEL: cfg.pool}),
                     "annotations": annotations, "ownerReferences": [wl.owner_ref()]},
        "spec": spec,
    }


def shared_claim(namespace: str, pool: str, dev: DraDevice, device_class: str) -> dict[str, Any]:
    """The pool GPU's shared ResourceClaim in ``namespace``: pinned to ``dev`` by its uuid attribute.
    No owner reference: the sleepers of several workloads share it (the controller deletes it once
    none of its sleepers is left)."""
    expr = f'device.attributes["{dev.driver}"].{UUID_ATTRIBUTE} == {json.dumps(dev.uuid)}'
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": claim_name(pool, dev.device), "namespace": namespace,
                     "labels": {MANAGED_BY: MANAGED_BY_VALUE, ROLE: CLAIM_ROLE, HOT_POOL_LABEL: pool},
                     "annotations": {HOT_DEVICE: dev.device}},
        "spec": {"devices": {"requests": [{"name": CLAIM_REQUEST, "exactly": {
            "deviceClassName": device_class, "selectors": [{"cel": {"expression": expr}}]}}]}},
    }


CLAIM_SELECTOR = f"{MANAGED_BY}={MANAGED_BY_VALUE},{ROLE}={CLAIM_ROLE}"
"""The label selector the controller lists its shared claims by."""
