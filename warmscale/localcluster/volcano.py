"""The real Volcano (scheduler + controller-manager, v1.15.1) next to the local control plane.

Both run as plain processes out of cluster with the admin kubeconfig, built by
``.ci/build-cluster.sh --volcano`` from the ``testbed/volcano`` wrapper module into
``${WARMSCALE_CACHE}/bin/volcano-<version>/{vc-scheduler,vc-controller-manager}``:

- the CRDs are Volcano's own, ``config/crd/volcano/bases/*.yaml`` of the ``volcano.sh/volcano`` module
  (``go mod download -json`` in the wrapper names its directory in the Go module cache; nothing is
  copied or generated);
- the scheduler's configuration is the installer's (``volcano-scheduler.conf`` of the
  ``volcano-scheduler-configmap`` in the module's ``installer/volcano-development.yaml``: actions
  enqueue, allocate, backfill; the gang plugin among them) with one change, Volcano's ``preempt``
  action added after ``allocate`` (without it Volcano never evicts a lower-priority pod for a pending
  one, so no replica could take a placeholder's room), written to ``<state>/volcano/``;
- the controller-manager runs only what gangs of bare pods need: ``pg-controller`` (PodGroups for
  Volcano pods that name none) and ``queue-controller`` (opens the queues);
- no webhook-manager: its admission checks (queue state, PodGroup fields) are not needed to schedule.

:func:`start` returns when the scheduler made the ``default`` queue and the queue controller opened
it (the first proof that both run against this API server). The processes join the cluster's process
list (``state.json``), so ``down`` stops them with the cluster; :func:`stop` stops Volcano alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from . import crds, processes
from .binaries import BUILD_SCRIPT, REPO_ROOT, BinariesMissing, cache_root, pinned_versions

if TYPE_CHECKING:
    from .harness import Cluster

log = logging.getLogger(__name__)

MODULE = "volcano.sh/volcano"
WRAPPER = REPO_ROOT / "testbed" / "volcano"
SCHEDULER_NAME = "volcano"
GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"
DEFAULT_QUEUE = "default"  # made by the scheduler at startup (--default-queue)
PROCESS_NAMES = ("vc-scheduler", "vc-controller-manager")
CONTROLLERS = "pg-controller,queue-controller"
INSTALLER = "installer/volcano-development.yaml"
CONFIGMAP = "volcano-scheduler-configmap"
# The installer runs the scheduler with a 1 s period (its default); kept, so a gang is bound within
# a second or two of fitting.
SCHEDULE_PERIOD = "1s"
INSTALLER_ACTIONS = 'actions: "enqueue, allocate, backfill"'
ACTIONS = 'actions: "enqueue, allocate, preempt, backfill"'  # + preempt: placeholders must be preemptible


def version() -> str:
    return pinned_versions()["VOLCANO_VERSION"]


@dataclass(frozen=True)
class VolcanoBinaries:
    scheduler: Path
    controller_manager: Path

    @classmethod
    def expected(cls, root: Path | None = None) -> VolcanoBinaries:
        d = (root or cache_root()) / "bin" / f"volcano-{version()}"
        return cls(d / "vc-scheduler", d / "vc-controller-manager")

    def missing(self) -> list[Path]:
        return [p for p in (self.scheduler, self.controller_manager) if not os.access(p, os.X_OK)]


def locate(build: bool = False) -> VolcanoBinaries:
    """The cached Volcano binaries (built first when ``build``); :class:`BinariesMissing` otherwise."""
    binaries = VolcanoBinaries.expected()
    if binaries.missing() and build:
        from .binaries import run_build_script

        log.info("building Volcano", extra={"script": str(BUILD_SCRIPT)})
        run_build_script(["--volcano-only"])
    missing = binaries.missing()
    if missing:
        raise BinariesMissing(
            "Volcano binaries missing: " + ", ".join(str(p) for p in missing)
            + f" (bash {BUILD_SCRIPT.relative_to(REPO_ROOT)} --volcano-only builds them once the Go proxy "
            "serves volcano.sh/apis v1.15.1, which it does not yet; docs/gangs-queues.md, Volcano)"
        )
    return binaries


def module_dir() -> Path:
    """The ``volcano.sh/volcano`` module pinned in ``testbed/volcano``, in the Go module cache (by its exact
    version: the wrapper's module graph needs a ``volcano.sh/apis`` the proxy does not serve yet)."""
    return crds.go_module_dir(f"{MODULE}@{version()}", WRAPPER)


def crd_dir() -> Path:
    return module_dir() / "config" / "crd" / "volcano" / "bases"


def scheduler_conf(module: Path) -> str:
    """``volcano-scheduler.conf`` of the installer's scheduler ConfigMap (what a default install runs) with
    the ``preempt`` action added."""
    path = module / INSTALLER
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" and (doc.get("metadata") or {}).get(
                "name") == CONFIGMAP:
            conf = str(doc["data"]["volcano-scheduler.conf"])
            if INSTALLER_ACTIONS not in conf:
                raise RuntimeError(f"{path}: {CONFIGMAP} no longer has {INSTALLER_ACTIONS!r}; revisit ACTIONS")
            return conf.replace(INSTALLER_ACTIONS, ACTIONS)
    raise RuntimeError(f"{path}: no ConfigMap {CONFIGMAP} with volcano-scheduler.conf")


def scheduler_args(b: VolcanoBinaries, kc: Path, conf: Path) -> list[str]:
    return [str(b.scheduler), f"--kubeconfig={kc}", f"--scheduler-conf={conf}", f"--scheduler-name={SCHEDULER_NAME}",
            f"--default-queue={DEFAULT_QUEUE}", f"--schedule-period={SCHEDULE_PERIOD}", "--leader-elect=false",
            "--cache-dumper=false", "--kube-api-qps=500", "--kube-api-burst=1000"]


def controller_manager_args(b: VolcanoBinaries, kc: Path) -> list[str]:
    return [str(b.controller_manager), f"--kubeconfig={kc}", f"--controllers={CONTROLLERS}",
            f"--scheduler-name={SCHEDULER_NAME}", "--leader-elect=false", "--kube-api-qps=500",
            "--kube-api-burst=1000"]


def running(cluster: Cluster) -> bool:
    names = {p.name for p in cluster.processes if p.alive()}
    return all(n in names for n in PROCESS_NAMES)


def start(cluster: Cluster, *, die_with_parent: bool = False, within: float = 120.0,
          build: bool = False) -> dict[str, Any]:
    """Start Volcano next to ``cluster`` (idempotent: returns the running one's info)."""
    from .harness import run_sync

    if running(cluster) and "volcano" in cluster.info:
        return dict(cluster.info["volcano"])
    if cluster.state_dir is None:
        raise RuntimeError("Volcano needs a cluster with a state directory (started or attached, not kubeconfig-only)")
    binaries = locate(build=build)
    t0 = time.monotonic()
    module = module_dir()
    state = cluster.state_dir / "volcano"
    state.mkdir(parents=True, exist_ok=True)
    conf = state / "volcano-scheduler.conf"
    conf.write_text(scheduler_conf(module))
    marks: dict[str, float] = {}

    async def install() -> None:
        async with cluster.admin_client() as api:
            await crds.install(api, crds.load_crds(crd_dir()), within)

    run_sync(install)
    marks["crds"] = time.monotonic() - t0
    logs = cluster.state_dir / "logs"
    handles: list[processes.ProcessHandle] = []
    try:
        handles.append(processes.start("vc-scheduler", scheduler_args(binaries, cluster.kubeconfig, conf), logs,
                                       die_with_parent=die_with_parent))
        handles.append(processes.start("vc-controller-manager",
                                       controller_manager_args(binaries, cluster.kubeconfig), logs,
                                       die_with_parent=die_with_parent))
        cluster.processes.extend(handles)
        cluster.info["volcano"] = {"version": version(), "scheduler_conf": str(conf)}
        cluster._write_state()
        run_sync(lambda: _wait_default_queue_open(cluster, handles, time.monotonic() + within))
        marks["default_queue_open"] = time.monotonic() - t0
    except BaseException:
        for h in reversed(handles):
            h.stop(timeout=3)
        cluster.processes[:] = [p for p in cluster.processes if p not in handles]
        cluster.info.pop("volcano", None)
        cluster._write_state()
        raise
    cluster.info["volcano"]["startup_marks"] = {k: round(v, 2) for k, v in marks.items()}
    cluster._write_state()
    log.info("Volcano ready", extra={"version": version(), "seconds": round(time.monotonic() - t0, 2)})
    return dict(cluster.info["volcano"])


def stop(cluster: Cluster) -> None:
    """Stop Volcano only (the cluster keeps running; its CRDs and queues stay)."""
    for p in reversed(cluster.processes):
        if p.name in PROCESS_NAMES:
            p.stop()
    cluster.processes[:] = [p for p in cluster.processes if p.name not in PROCESS_NAMES]
    cluster.info.pop("volcano", None)
    if cluster.state_dir is not None:
        cluster._write_state()


async def queue_state(api: client.ApiClient, name: str = DEFAULT_QUEUE) -> str:
    """The queue's ``status.state`` ("" while it does not exist or has none yet)."""
    try:
        q = await client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, "queues", name)
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str((q.get("status") or {}).get("state") or "")


async def _wait_default_queue_open(cluster: Cluster, handles: list[processes.ProcessHandle], deadline: float) -> None:
    state = ""
    async with cluster.admin_client() as api:
        while time.monotonic() < deadline:
            for h in handles:
                if not h.alive():
                    raise RuntimeError(f"{h.name} exited during startup:\n{h.log_tail(30)}")
            state = await queue_state(api)
            if state == "Open":
                return
            await asyncio.sleep(0.5)
    raise TimeoutError(f"Volcano queue {DEFAULT_QUEUE!r} not Open (state {state or 'absent'!r}); logs: "
                       + ", ".join(str(h.log_path) for h in handles))


def status(cluster: Cluster) -> dict[str, Any] | None:
    """Volcano's part of ``python -m tests.cluster status`` (None when Volcano was not started)."""
    from .harness import run_sync

    info = cluster.info.get("volcano")
    if info is None:
        return None
    alive = {p.name: p.alive() for p in cluster.processes if p.name in PROCESS_NAMES}

    async def check() -> str:
        async with cluster.admin_client() as api:
            return await queue_state(api)

    try:
        state = run_sync(check)
    except (OSError, ApiException) as exc:
        state = f"error: {exc}"
    return {"version": info.get("version"), "processes": alive, "default_queue": state,
            "startup_marks": info.get("startup_marks"),
            "healthy": state == "Open" and len(alive) == len(PROCESS_NAMES) and all(alive.values())}
