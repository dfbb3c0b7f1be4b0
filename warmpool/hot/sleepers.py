"""The hot tier's sleepers as the waker sees them, read from their pods (pure).

A sleeper is a pod the controller created for a workload's hot standby: it carries the controller's
labels (``app.kubernetes.io/managed-by: warmscale``, ``warmscale.io/role: hot-sleeper``) and says in
annotations whose sleeper it is and how to reach and wake its engine. A pod without those labels is
never a sleeper, whatever its annotations say: nothing warmscale did not create is slept or woken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from warmscale.warmpool.hot.config import ENGINE, SLEEP_LEVEL
from warmscale.warmpool.hot.engine_state import HOT_STATE, engine_restarts, recorded_sleeping
from warmscale.warmpool.hot.surface import LEVEL_OFFLOAD, LEVELS, support
from warmscale.warmpool.objects import MANAGED_BY, MANAGED_BY_VALUE, ROLE

SLEEPER_ROLE = "hot-sleeper"
# Annotations on a sleeper pod (written by the controller when it creates the sleeper).
HOT_WORKLOAD = "warmscale.io/hot-workload"  # namespace/name of the workload it stands by for
HOT_INDEX = "warmscale.io/hot-index"  # 0..count-1 (the pool plan's index)
HOT_DEVICE = "warmscale.io/hot-device"  # the pool GPU it sleeps on (DRA device or GPU UUID)
HOT_PORT = "warmscale.io/hot-port"  # the engine's HTTP port
HOT_MODEL = "warmscale.io/hot-model"  # the served model name (the canary's "model")
HOT_CANARY = "warmscale.io/hot-canary"  # the canary's answer recorded before the first sleep
HOT_GPU_PRODUCT = "warmscale.io/hot-gpu-product"  # its node's nvidia.com/gpu.product (the wake time's key)
# vLLM's and SGLang's default HTTP port.
DEFAULT_PORT = 8000


@dataclass(frozen=True)
class Sleeper:
    pod: str  # namespace/name
    workload: str  # namespace/name
    index: int
    base_url: str  # http://IP:PORT
    engine: str
    model: str
    node: str
    device: str
    level: int = LEVEL_OFFLOAD
    gpu_product: str = ""
    canary_reference: str | None = None
    uid: str = ""  # the pod's (an Event's involvedObject)
    restarts: int | None = None  # the engine container's restartCount (its incarnation); None: unreported
    # The state the waker recorded on the pod for this incarnation (engine_state): True asleep, False
    # awake, None unknown. What the waker knows of an engine without a state call (SGLang).
    recorded: bool | None = None


DeviceOf = Callable[[str, str], "str | None"]
"""(namespace, pod) -> the GPU a time-sliced sleeper runs on (DCGM's attribution), or ``None``."""
# A time-sliced sleeper's device annotation until DCGM attributes it (sleeper_pods.DEVICE_FROM_DCGM).
_FROM_DCGM = "dcgm"


def sleeper_from_pod(pod: Mapping[str, Any], device_of: DeviceOf | None = None) -> Sleeper | None:
    """The sleeper a pod is (a pod dict as the API returns it); ``None`` for any pod the controller did
    not create as a sleeper, or one not yet reachable (no IP) or not described fully. A time-sliced
    sleeper's GPU comes from ``device_of`` (DCGM's attribution): unknown there, it is no sleeper yet
    (never woken: its GPU's budget could not be kept)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY) != MANAGED_BY_VALUE or labels.get(ROLE) != SLEEPER_ROLE:
        return None
    ann = meta.get("annotations") or {}
    ip = (pod.get("status") or {}).get("podIP")
    node = (pod.get("spec") or {}).get("nodeName")
    workload, device, model = ann.get(HOT_WORKLOAD), ann.get(HOT_DEVICE), ann.get(HOT_MODEL)
    if device == _FROM_DCGM:
        device = device_of(str(meta.get("namespace")), str(meta.get("name"))) if device_of is not None else None
    engine = str(ann.get(ENGINE, "")).strip().lower()
    if not (ip and node and workload and device and model) or not support(engine).supported:
        return None
    try:
        index = int(ann.get(HOT_INDEX, "0"))
        port = int(ann.get(HOT_PORT, str(DEFAULT_PORT)))
        level = int(ann.get(SLEEP_LEVEL, str(LEVEL_OFFLOAD)))
    except ValueError:
        return None
    if level not in LEVELS or not 0 < port < 65536:
        return None
    restarts = engine_restarts(pod)
    return Sleeper(pod=f"{meta.get('namespace')}/{meta.get('name')}", workload=str(workload), index=index,
                   base_url=f"http://{ip}:{port}", engine=engine, model=str(model), node=str(node),
                   device=str(device), level=level, gpu_product=str(ann.get(HOT_GPU_PRODUCT, "")),
                   canary_reference=ann.get(HOT_CANARY), uid=str(meta.get("uid", "")), restarts=restarts,
                   recorded=recorded_sleeping(ann.get(HOT_STATE), restarts))


SLEEPER_SELECTOR = f"{MANAGED_BY}={MANAGED_BY_VALUE},{ROLE}={SLEEPER_ROLE}"
"""The label selector the waker lists sleeper pods by (the API filters; :func:`sleeper_from_pod` checks
again)."""
