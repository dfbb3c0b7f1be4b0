"""The scaler's Kubernetes API client: ``--kubeconfig FILE``, else in-cluster, else ``$KUBECONFIG`` /
``~/.kube/config``, else none (the scaler then works from static endpoints, Prometheus and Redis).

Only loaded when the scaler runs with Kubernetes (``warmscale scaler`` without ``--no-kubernetes``).
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from warmscale.signals.redact import redact

log = logging.getLogger("warmscale.scaler.kube")

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_TOKEN.exists()


async def load_api_client(kubeconfig: str | None = None) -> tuple[Any, str] | None:
    """``(ApiClient, where the configuration came from)``, or ``None`` when there is no configuration.

    An explicit ``kubeconfig`` that cannot be loaded raises (the operator asked for it); the
    automatic choices log and return ``None`` instead."""
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        source = f"kubeconfig {kubeconfig}"
    elif in_cluster():
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except Exception as exc:
            log.warning("in-cluster Kubernetes configuration unusable; running without the API",
                        extra={"error": str(exc)})
            return None
        source = "in-cluster service account"
    else:
        path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
        if not os.path.isfile(path):  # noqa: ASYNC240  (one stat at start-up)
            return None
        try:
            await config.load_kube_config(config_file=path, client_configuration=cfg)
        except Exception as exc:
            log.warning("kubeconfig unusable; running without the API", extra={"kubeconfig": path, "error": str(exc)})
            return None
        source = f"kubeconfig {path}"
    # Every watch holds one HTTP/1.1 connection for minutes: a bounded pool (100 by default) would
    # starve the lists once enough ScaledObjects are watched.
    cfg.connection_pool_maxsize = 0
    return client.ApiClient(configuration=cfg), source


# At most one decision Event per ScaledObject this often: a fleet that moves every few seconds would
# otherwise flood etcd; every change is still one log line and on /decisions (docs/policy.md).
DECISION_EVENT_INTERVAL_S = 60.0


class ScaledObjectEvents:
    """Events on a ScaledObject, posted by the scaler (RBAC: ``create`` on events where it serves).

    - ``__call__``: a ``Warning`` ``ScaledObjectRefused`` on one it refuses (``TrackerManager.on_refused``),
      at most one per message every 10 minutes (:class:`warmpool.kube.EventRecorder`);
    - :meth:`decision`: a ``Normal`` ``ScalingDecision`` when the count it asks for changes
      (``TrackerManager.on_decision``), at most one per ScaledObject every
      :data:`DECISION_EVENT_INTERVAL_S` (changes in between are in the log and on ``/decisions``).

    The ScaledObject's uid is read first (``get`` on scaledobjects, which the scaler has) so that
    ``kubectl describe`` shows the Event."""

    REASON = "ScaledObjectRefused"
    DECISION_REASON = "ScalingDecision"

    def __init__(self, api: Any, clock: Any = None) -> None:
        import time

        from kubernetes_asyncio import client

        self._objects = client.CustomObjectsApi(api)
        self._events = EventRecorder(client.CoreV1Api(api), component="warmscale-scaler")
        self._clock = clock or time.monotonic
        self._last_decision: dict[tuple[str, str], float] = {}

    async def decision(self, namespace: str, name: str, message: str) -> bool:
        """Post ``message`` unless this ScaledObject had a decision Event in the interval; whether it did."""
        now = self._clock()
        if now - self._last_decision.get((namespace, name), -1e18) < DECISION_EVENT_INTERVAL_S:
            return False
        self._last_decision[(namespace, name)] = now
        await self._events.emit(await self._involved(namespace, name), "Normal", self.DECISION_REASON, message)
        return True

    async def __call__(self, namespace: str, name: str, message: str) -> None:
        await self._events.emit(await self._involved(namespace, name), "Warning", self.REASON, message)

    async def _involved(self, namespace: str, name: str) -> dict[str, Any]:
        from kubernetes_asyncio.client.exceptions import ApiException

        involved: dict[str, Any] = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "namespace": namespace,
                                    "name": name}
        try:
            so = await self._objects.get_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects",
                                                                  name)
            involved["uid"] = so["metadata"]["uid"]
        except (ApiException, KeyError, TypeError) as exc:
            log.info("ScaledObject not readable; the Event names it without a uid",
                     extra={"namespace": namespace, "scaledobject": name, "error": str(exc)[:200]})
        return involved


def now_rfc3339(micro: bool = False) -> str:
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.now(UTC).strftime(fmt)


class EventRecorder:
    """core/v1 Events on workloads, de-duplicated (same reason+message at most every ``every_s``)."""

    def __init__(self, core: Any, component: str = "warmscale-warmpool", every_s: float = 600.0) -> None:
        self.core = core
        self.component = component
        self.every_s = every_s
        self._sent: dict[tuple[str, str, str], float] = {}

    async def emit(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> bool:
        key = (str(involved.get("uid")), reason, message)
        now = time.monotonic()
        if now - self._sent.get(key, -1e18) < self.every_s:
            return False
        self._sent[key] = now
        ts = now_rfc3339()
        body = {
            "metadata": {"generateName": f"{involved['name']}.", "namespace": involved["namespace"]},
            "involvedObject": involved, "reason": reason, "message": redact(message)[:1000], "type": type_,
            "source": {"component": self.component}, "reportingComponent": self.component,
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
        }
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await self.core.create_namespaced_event(involved["namespace"], body)
        except ApiException as exc:
            log.warning("event not recorded", extra={"reason": reason, "status": exc.status})
        return True
