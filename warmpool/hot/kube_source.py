"""The waker's Kubernetes side: the sleeper pods listed by the controller's labels, and Events on them
and the state recorded on them (I/O shell; the RBAC the controller already has: list and patch pods,
create events)."""

from __future__ import annotations

import functools
from typing import Any

from warmscale.warmpool.hot.config import watched_namespaces
from warmscale.warmpool.hot.engine_state import HOT_STATE, state_value
from warmscale.warmpool.hot.sleepers import SLEEPER_SELECTOR, DeviceOf, Sleeper, sleeper_from_pod
from warmscale.warmpool.hot.waker import EventHook, SleeperSource, StateHook
from warmscale.warmpool.kube import EventRecorder, read_raw


def kube_sleepers(core: Any, namespace: str | None = None, device_of: DeviceOf | None = None) -> SleeperSource:
    """Lists the sleeper pods (``core``: a kubernetes_asyncio CoreV1Api), in ``namespace`` (one, or
    several comma-separated: each listed) or all; ``device_of``: DCGM's attribution, for time-sliced
    sleepers."""
    namespaces = watched_namespaces(namespace)

    async def source() -> list[Sleeper]:
        if namespaces:
            calls = [functools.partial(core.list_namespaced_pod, ns, label_selector=SLEEPER_SELECTOR)
                     for ns in namespaces]
        else:
            calls = [functools.partial(core.list_pod_for_all_namespaces, label_selector=SLEEPER_SELECTOR)]
        items = [p for call in calls for p in (await read_raw(call)).get("items") or []]
        return [s for s in (sleeper_from_pod(p, device_of) for p in items) if s is not None]

    return source


def kube_events(recorder: EventRecorder) -> EventHook:
    """A Warning Event on the sleeper's pod (de-duplicated by the recorder)."""

    async def emit(s: Sleeper, reason: str, message: str) -> None:
        ns, name = s.pod.split("/", 1)
        await recorder.emit({"kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": name, "uid": s.uid},
                            "Warning", reason, message)

    return emit


# The annotation's key as a JSON-pointer segment (RFC 6901: "/" is "~1").
_STATE_PATH = "/metadata/annotations/" + HOT_STATE.replace("~", "~0").replace("/", "~1")
JSON_PATCH = "application/json-patch+json"


def kube_states(core: Any) -> StateHook:
    """Records an SGLang sleeper's state on its pod (engine_state): one JSON patch that first tests the
    pod's uid, so a state never lands on a newer pod of the same name (a replaced sleeper); raises
    where the API refused or failed."""

    async def record(s: Sleeper, state: str) -> None:
        ns, name = s.pod.split("/", 1)
        patch: list[dict[str, Any]] = [{"op": "add", "path": _STATE_PATH, "value": state_value(state, s.restarts)}]
        if s.uid:
            patch.insert(0, {"op": "test", "path": "/metadata/uid", "value": s.uid})
        await core.patch_namespaced_pod(name, ns, patch, _content_type=JSON_PATCH)

    return record
