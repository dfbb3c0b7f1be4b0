"""The real KubeRay operator (v1.5.0) next to the local control plane, as a plain process out of cluster.

Built by ``.ci/build-cluster.sh`` (with KEDA, last) from the ``testbed/kuberay`` wrapper module (the Go
module proxy serves ``github.com/ray-project/kuberay/ray-operator`` v1.5.0; nothing of it is
committed), or by hand::

    cd testbed/kuberay && nice -n 10 go build -p 1 \\
        -o ${WARMSCALE_CACHE:-~/.cache/warmscale}/bin/kuberay-v1.5.0/ray-operator \\
        github.com/ray-project/kuberay/ray-operator

(about 13 minutes on 2 shared cores, warm module cache). Its CRDs (RayCluster, RayJob, RayService: the
operator sets up a controller for each, so all three are installed) come from the same module
(:func:`tests.cluster.crds.kuberay_crd_dir`). :func:`running` starts the operator watching one
namespace, with leader election off and its metrics and probes on free loopback ports; it creates
the head and worker pods of a RayCluster, which KWOK then runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from kubernetes_asyncio import client

from . import crds, processes
from .binaries import cache_root, pinned_versions

BUILD_HINT = "bash .ci/build-cluster.sh (it builds the KubeRay operator with KEDA's binaries)"


def version() -> str:
    """The KubeRay version pinned in ``testbed/versions.env`` (read when asked: the wheel has no testbed)."""
    return pinned_versions().get("KUBERAY_VERSION", "v1.5.0")


def binary() -> Path:
    return cache_root() / "bin" / f"kuberay-{version()}" / "ray-operator"


def available() -> bool:
    b = binary()
    return b.is_file() and os.access(b, os.X_OK)


async def install_crds(api: client.ApiClient) -> list[str]:
    return await crds.install(api, crds.load_crds(crds.kuberay_crd_dir()))


@contextlib.asynccontextmanager
async def running(kubeconfig: Path, namespace: str, log_dir: Path) -> AsyncIterator[processes.ProcessHandle]:
    """The operator for ``namespace`` (stopped on exit; its log in ``log_dir/kuberay-operator.log``)."""
    argv = [str(binary()), "--watch-namespace", namespace, "--enable-leader-election=false",
            "--metrics-addr", f"127.0.0.1:{processes.free_port()}",
            "--health-probe-bind-address", f"127.0.0.1:{processes.free_port()}", "--log-stdout-encoder", "console"]
    handle = processes.start("kuberay-operator", argv, log_dir, die_with_parent=True,
                             env={"KUBECONFIG": str(kubeconfig)})
    try:
        yield handle
    finally:
        handle.stop()
