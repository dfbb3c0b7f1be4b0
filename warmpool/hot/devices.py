"""Which GPUs a hot pool has, and which GPU a sleeper is on (pure; docs/hot-tier.md, "Placement").

Two sources, in this order:

- **Dynamic Resource Allocation** (first-class): the pool's GPUs are the devices the DRA driver
  publishes in ResourceSlices for the pool's nodes. The controller creates one shared ResourceClaim
  per pool GPU it places sleepers on, pinned to that device by its ``uuid`` attribute; the sleepers of
  several models reference the claim, so the scheduler puts them on that GPU by construction (a
  claim may be reserved for many pods).
- **Time-sliced device-plugin GPUs** (the fallback): the device plugin picks the GPU, so the map is
  read back from DCGM's pod attribution (dcgm-exporter's ``pod``/``namespace`` labels next to each
  GPU's ``UUID`` and ``Hostname``): the pool's GPUs are the UUIDs it reports on the pool's nodes, and a
  sleeper's GPU is the one DCGM attributes it to (unknown until it does: never woken meanwhile).

A pool with neither keeps the tier off (:func:`~warmscale.warmpool.hot.config.placement_off_reason`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warmscale.common.quantity import parse_quantity
from warmscale.signals.engines.dcgm import gpus_by_pod
from warmscale.signals.model import GpuReading
from warmscale.warmpool.hot.pool import PoolGPU

# The device attribute a shared claim is pinned by: unique per GPU (NVIDIA's DRA driver publishes
# ``uuid``; the cluster tests' KWOK slices do too). A device without it cannot be pinned, so it is
# not a pool GPU.
UUID_ATTRIBUTE = "uuid"
# The device capacity that says the GPU's memory (NVIDIA's DRA driver: ``memory``).
MEMORY_CAPACITY = "memory"
# The GPU's memory where the slice says none: an 80 GiB H100/A100 (the common pool GPU).
HBM_GIB_DEFAULT = 80.0
GIB = 1024.0**3
# A time-sliced GPU's ``device`` as the waker sees it: the DCGM UUID, prefixed so it never equals a
# DRA device name.
DCGM_PREFIX = "dcgm/"


@dataclass(frozen=True)
class DraDevice:
    """One pool GPU published by a DRA driver."""

    node: str
    driver: str
    pool: str  # the ResourceSlice pool
    name: str  # the device name in the slice
    uuid: str
    hbm_gib: float = HBM_GIB_DEFAULT

    @property
    def device(self) -> str:
        """The pool GPU's identity (``driver/pool/name``, as in a claim's allocation result)."""
        return f"{self.driver}/{self.pool}/{self.name}"

    def gpu(self) -> PoolGPU:
        return PoolGPU(self.node, self.device, self.hbm_gib)


def _attr(attrs: Mapping[str, Any], driver: str, key: str) -> str | None:
    """A device attribute's string value; the key may be qualified by the driver's domain."""
    for k in (key, f"{driver}/{key}"):
        v = attrs.get(k)
        if isinstance(v, Mapping):
            for typ in ("string", "version", "int"):
                if v.get(typ) is not None:
                    return str(v[typ])
    return None


def _hbm(capacity: Mapping[str, Any]) -> float:
    raw = capacity.get(MEMORY_CAPACITY)
    value = raw.get("value") if isinstance(raw, Mapping) else raw
    if value is None:
        return HBM_GIB_DEFAULT
    try:
        return parse_quantity(str(value)) / GIB
    except ValueError:
        return HBM_GIB_DEFAULT


def dra_devices(slices: Iterable[Mapping[str, Any]], nodes: Iterable[str],
                driver: str | None = None) -> list[DraDevice]:
    """The pinnable GPUs the ResourceSlices publish for ``nodes`` (of ``driver``, or any), sorted by
    node and name. A device without a ``uuid`` attribute is left out (a claim could not pin it)."""
    wanted = set(nodes)
    out: list[DraDevice] = []
    for s in slices:
        spec = s.get("spec") or {}
        node, drv = spec.get("nodeName"), str(spec.get("driver") or "")
        if node not in wanted or (driver is not None and drv != driver):
            continue
        pool = str((spec.get("pool") or {}).get("name") or node)
        for d in spec.get("devices") or []:
            uuid = _attr(d.get("attributes") or {}, drv, UUID_ATTRIBUTE)
            if uuid is None or not d.get("name"):
                continue
            out.append(DraDevice(str(node), drv, pool, str(d["name"]), uuid, _hbm(d.get("capacity") or {})))
    out.sort(key=lambda d: (d.node, d.name, d.driver))
    return out


def claim_device(claim: Mapping[str, Any]) -> str | None:
    """The device a claim was allocated (``driver/pool/name``); ``None`` while it is not allocated."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    if not results:
        return None
    r = results[0]
    return f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"


@dataclass(frozen=True)
class DcgmAttribution:
    """The time-sliced fallback's map: the pool's GPUs, and (namespace, pod) -> the GPU it runs on."""

    gpus: tuple[PoolGPU, ...]
    pod_device: Mapping[tuple[str | None, str], str]

    def device_of(self, namespace: str, pod: str) -> str | None:
        return self.pod_device.get((namespace, pod)) or self.pod_device.get((None, pod))


def dcgm_attribution(readings: Iterable[GpuReading], nodes: Iterable[str],
                     hbm_gib: float = HBM_GIB_DEFAULT) -> DcgmAttribution:
    """The GPUs dcgm-exporter reports on ``nodes`` (by UUID; a reading without a hostname or UUID is
    left out), and the pod each is attributed to. A pod on several GPUs (tensor parallel) maps to
    none: a sleeper holds one GPU."""
    wanted = set(nodes)
    kept = [g for g in readings if g.hostname in wanted and g.uuid]
    gpus: dict[str, PoolGPU] = {}
    for g in kept:
        if g.uuid and g.hostname:
            gpus.setdefault(g.uuid, PoolGPU(g.hostname, DCGM_PREFIX + g.uuid, hbm_gib))
    pod_device: dict[tuple[str | None, str], str] = {}
    for key, refs in gpus_by_pod(kept).items():
        uuids = {r.uuid for r in refs if r.uuid}
        if len(uuids) == 1:
            pod_device[key] = DCGM_PREFIX + uuids.pop()
    return DcgmAttribution(tuple(sorted(gpus.values(), key=lambda g: (g.node, g.device))), pod_device)
