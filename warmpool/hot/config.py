"""The hot tier's annotations, on workloads and on pool nodes (pure; docs/hot-tier.md).

Workload (Deployment/StatefulSet):
- ``warmscale.io/hot-standby``: ``"N"`` sleepers, or ``"auto"`` (kept while the capacity a sleeper
  saves in the recorded bursts is worth its share of the pool, like ``standby: auto``);
- ``warmscale.io/hot-pool``: the pool's name;
- ``warmscale.io/engine``: ``vllm`` or ``sglang`` (the engines with an HTTP sleep);
- ``warmscale.io/sleep-level``: ``1`` (weights kept in host RAM, the default) or ``2`` (dropped);
- ``warmscale.io/hot-host-ram``: the host RAM one sleeper's weights take (default 22Gi at level 1,
  0 at level 2).

GPU node of a pool:
- ``warmscale.io/hot-pool``: the pool's name;
- ``warmscale.io/hot-pool-host-ram``: the host RAM the sleepers' weights may take on it (e.g. ``512Gi``);
- ``warmscale.io/hot-pool-awake-per-gpu``: awake engines a GPU may hold (default 1; more only where
  the HBM of the awake engines allows it);
- ``warmscale.io/hot-pool-dra-driver`` / ``hot-pool-device-class``: the DRA driver whose
  ResourceSlices list the node's GPUs and the DeviceClass the shared claims use (both
  ``gpu.nvidia.com`` by default). Without such slices the pool falls back to DCGM's attribution.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from warmscale.common.quantity import parse_quantity
from warmscale.warmpool.annotations import PREFIX, AnnotationError
from warmscale.warmpool.hot.surface import LEVEL_OFFLOAD, LEVELS, support

HOT_STANDBY = PREFIX + "hot-standby"
HOT_POOL = PREFIX + "hot-pool"
ENGINE = PREFIX + "engine"
SLEEP_LEVEL = PREFIX + "sleep-level"
NODE_HOST_RAM = PREFIX + "hot-pool-host-ram"
NODE_AWAKE_PER_GPU = PREFIX + "hot-pool-awake-per-gpu"
# The pool's DRA driver (whose ResourceSlices name the pool's GPUs) and the DeviceClass its shared
# claims ask for; NVIDIA's DRA driver names both gpu.nvidia.com.
NODE_DRA_DRIVER = PREFIX + "hot-pool-dra-driver"
NODE_DEVICE_CLASS = PREFIX + "hot-pool-device-class"
DRA_DRIVER_DEFAULT = "gpu.nvidia.com"
# The host RAM one sleeper's weights take at level 1 (workload annotation; default below).
HOT_HOST_RAM = PREFIX + "hot-host-ram"
# A level-1 sleep of Qwen3-8B keeps about 22 GiB in host RAM (vllm PR #48337); level 2 keeps none.
HOST_RAM_GIB_DEFAULT = 22.0
# Sleepers one workload may ask for: a pool is a handful of GPUs, and each sleeper of a workload
# takes a GPU of its own.
MAX_SLEEPERS = 16
# Awake engines one GPU may be declared to hold (an 80 GiB GPU fits few serving engines).
MAX_AWAKE_PER_GPU = 8
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUALIFIED = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
GIB = 1024.0**3


@dataclass(frozen=True)
class HotConfig:
    count: int  # sleepers asked for (when auto: the most the planner may keep)
    auto: bool
    pool: str
    engine: str
    level: int = LEVEL_OFFLOAD
    host_ram_gib: float = HOST_RAM_GIB_DEFAULT  # per sleeper (0 at level 2)


@dataclass(frozen=True)
class PoolNodeConfig:
    pool: str
    host_ram_gib: float
    awake_per_gpu: int = 1
    dra_driver: str = DRA_DRIVER_DEFAULT
    device_class: str = DRA_DRIVER_DEFAULT


def _pool_name(key: str, raw: str) -> str:
    s = raw.strip()
    if not _NAME.fullmatch(s):
        raise AnnotationError(key, f"expected a DNS label (lower-case letters, digits, '-'), got {raw!r}")
    return s


def parse_hot(annotations: Mapping[str, str]) -> HotConfig | None:
    """The workload's hot-tier settings; ``None`` where it did not opt in. Raises AnnotationError
    naming the key, for an Event; an engine without an HTTP sleep raises with the engine's reason."""
    raw = annotations.get(HOT_STANDBY)
    if raw is None:
        return None
    v = raw.strip().lower()
    if v == "auto":
        count, auto = MAX_SLEEPERS, True
    elif v.isdigit() and 0 <= int(v) <= MAX_SLEEPERS:
        count, auto = int(v), False
    else:
        raise AnnotationError(HOT_STANDBY, f"expected a whole number from 0 to {MAX_SLEEPERS} or auto, got {raw!r}")
    if HOT_POOL not in annotations:
        raise AnnotationError(HOT_POOL, f"required with {HOT_STANDBY} (the pool whose GPUs the sleepers share)")
    pool = _pool_name(HOT_POOL, annotations[HOT_POOL])
    engine = annotations.get(ENGINE, "").strip().lower()
    if not engine:
        raise AnnotationError(ENGINE, f"required with {HOT_STANDBY} (vllm or sglang)")
    s = support(engine)
    if not s.supported:
        raise AnnotationError(ENGINE, f"{s.message}")
    level_raw = annotations.get(SLEEP_LEVEL, str(LEVEL_OFFLOAD)).strip()
    if not level_raw.isdigit() or int(level_raw) not in LEVELS:
        raise AnnotationError(SLEEP_LEVEL, f"expected 1 or 2, got {level_raw!r}")
    level = int(level_raw)
    if engine == "sglang" and level != LEVEL_OFFLOAD:
        raise AnnotationError(SLEEP_LEVEL, "SGLang's release keeps a CPU copy of the weights (level 1 only)")
    ram = HOST_RAM_GIB_DEFAULT if level == LEVEL_OFFLOAD else 0.0
    if HOT_HOST_RAM in annotations:
        try:
            ram = parse_quantity(annotations[HOT_HOST_RAM]) / GIB
        except ValueError as exc:
            raise AnnotationError(HOT_HOST_RAM, f"{exc}") from None
        if ram < 0:
            raise AnnotationError(HOT_HOST_RAM, f"expected a size like 16Gi, got {annotations[HOT_HOST_RAM]!r}")
    return HotConfig(count, auto, pool, engine, level, ram)


def parse_pool_node(annotations: Mapping[str, str]) -> PoolNodeConfig | None:
    """A GPU node's pool membership and budgets; ``None`` where it is in no pool."""
    if HOT_POOL not in annotations:
        return None
    pool = _pool_name(HOT_POOL, annotations[HOT_POOL])
    raw = annotations.get(NODE_HOST_RAM)
    if raw is None:
        raise AnnotationError(NODE_HOST_RAM, "required on a pool node (the host RAM sleepers may take)")
    try:
        ram = parse_quantity(raw)
    except ValueError as exc:
        raise AnnotationError(NODE_HOST_RAM, f"{exc}") from None
    if not ram > 0:
        raise AnnotationError(NODE_HOST_RAM, f"expected a positive size like 512Gi, got {raw!r}")
    awake_raw = annotations.get(NODE_AWAKE_PER_GPU, "1").strip()
    if not awake_raw.isdigit() or not 1 <= int(awake_raw) <= MAX_AWAKE_PER_GPU:
        raise AnnotationError(NODE_AWAKE_PER_GPU, f"expected a whole number from 1 to {MAX_AWAKE_PER_GPU}, "
                              f"got {awake_raw!r}")
    driver = annotations.get(NODE_DRA_DRIVER, DRA_DRIVER_DEFAULT).strip()
    device_class = annotations.get(NODE_DEVICE_CLASS, driver).strip()
    for key, v in ((NODE_DRA_DRIVER, driver), (NODE_DEVICE_CLASS, device_class)):
        if not _QUALIFIED.fullmatch(v):
            raise AnnotationError(key, f"expected a DNS subdomain like gpu.nvidia.com, got {v!r}")
    return PoolNodeConfig(pool, ram / GIB, int(awake_raw), driver, device_class)


def placement_off_reason(has_dra: bool, has_dcgm_attribution: bool) -> str | None:
    """Why the tier stays off for a pool: a sleeper must land on its GPU by construction (a shared DRA
    ResourceClaim) or at least be seen there (DCGM's pod attribution under time-slicing)."""
    if has_dra or has_dcgm_attribution:
        return None
    return ("the pool's nodes publish no DRA ResourceSlices and no DCGM pod attribution, so a sleeper's GPU "
            "cannot be known; the hot tier stays off (docs/hot-tier.md, 'Placement')")


def watched_namespaces(namespace: str | Sequence[str] | None) -> tuple[str, ...]:
    """The watched namespaces (``--namespace``): ``"a"``, ``"a,b"`` or ``["a", "b"]`` -> ("a", "b");
    None or "" -> () (all namespaces)."""
    parts = (namespace or "").split(",") if isinstance(namespace, str) or namespace is None else list(namespace)
    return tuple(dict.fromkeys(n.strip() for n in parts if n.strip()))
