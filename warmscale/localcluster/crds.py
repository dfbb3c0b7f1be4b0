"""Install CustomResourceDefinitions: KEDA's (from the shared reference directory), the Gateway API
Inference Extension's (InferencePool, ...: from its Go module, pinned in ``testbed/gaie/go.mod``),
LeaderWorkerSet's (a copy of the v0.10.0 CRD in ``testbed/lws``: its module is not served here) and
KubeRay's (RayCluster, RayJob, RayService: from its Go module, pinned in ``testbed/kuberay/go.mod``).
Volcano's and Kueue's come from their modules too (``volcano.py``, ``kueue.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .binaries import REPO_ROOT

log = logging.getLogger(__name__)


def keda_crd_dir() -> Path:
    """``$WARMSCALE_SHARED/reference/keda`` (default shared dir: ``<repo>/../shared``)."""
    shared = Path(os.environ.get("WARMSCALE_SHARED", REPO_ROOT.parent / "shared"))
    return shared / "reference" / "keda"


LWS_VERSION = "v0.10.0"


def lws_crd_dir() -> Path:
    """``testbed/lws/<version>``: the LeaderWorkerSet CRD (kubernetes-sigs/lws config/crd/bases, copied)."""
    return REPO_ROOT / "testbed" / "lws" / LWS_VERSION


GAIE_MODULE = "sigs.k8s.io/gateway-api-inference-extension"
GAIE_WRAPPER = REPO_ROOT / "testbed" / "gaie"


KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_WRAPPER = REPO_ROOT / "testbed" / "kuberay"


def go_module_dir(module: str, wrapper: Path, timeout: float = 300.0) -> Path:
    """The directory of ``module`` (at the version ``wrapper``'s go.mod pins) in the Go module cache:
    ``go mod download -json`` puts it there (a no-op once there) and names it. Read-only: nothing is
    built from the module, nothing of it is committed."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
    try:
        out = subprocess.run([go, "mod", "download", "-json", module], cwd=wrapper, env=env,
                             capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot fetch {module} with go mod download: {exc}") from None
    try:
        info = json.loads(out.stdout)
    except ValueError:
        info = {}
    if out.returncode != 0 or "Dir" not in info:
        detail = info.get("Error") or out.stderr.strip()
        raise RuntimeError(f"go mod download {module} (in {wrapper}) failed: {detail}")
    return Path(info["Dir"])


def module_crd_dir(module: str, wrapper: Path, timeout: float = 300.0) -> Path:
    """``config/crd/bases`` of ``module`` as pinned in the wrapper module ``wrapper`` (``go_module_dir``)."""
    bases = go_module_dir(module, wrapper, timeout) / "config" / "crd" / "bases"
    if not bases.is_dir():
        raise RuntimeError(f"{bases} missing from the {module} module")
    return bases


def gaie_crd_dir(timeout: float = 300.0) -> Path:
    """The Gateway API Inference Extension's CRDs (``testbed/gaie``; nothing is built from it)."""
    return module_crd_dir(GAIE_MODULE, GAIE_WRAPPER, timeout)


def kuberay_crd_dir(timeout: float = 300.0) -> Path:
    """KubeRay's CRDs (RayCluster, RayJob, RayService) from the operator module of ``testbed/kuberay``."""
    return module_crd_dir(KUBERAY_MODULE, KUBERAY_WRAPPER, timeout)


def load_crds(directory: Path) -> list[dict[str, Any]]:
    """All CustomResourceDefinition documents in ``directory/*.yaml``."""
    crds: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


async def install(api: client.ApiClient, crds: list[dict[str, Any]], within: float = 60.0) -> list[str]:
    """Create (or replace) the CRDs and wait until they are Established; return their names."""
    ext = client.ApiextensionsV1Api(api)
    names: list[str] = []
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            await ext.create_custom_resource_definition(cast(Any, crd))
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = await ext.read_custom_resource_definition(name)
            crd = {**crd, "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version}}
            await ext.replace_custom_resource_definition(name, cast(Any, crd))
        names.append(name)
    pending = set(names)
    try:
        async with asyncio.timeout(within):
            while pending:
                for name in sorted(pending):
                    obj = await ext.read_custom_resource_definition(name)
                    conditions = (obj.status.conditions if obj.status else None) or []
                    if any(c.type == "Established" and c.status == "True" for c in conditions):
                        pending.discard(name)
                if pending:
                    await asyncio.sleep(0.2)
    except TimeoutError:
        raise TimeoutError(f"CRDs not established after {within:.0f}s: {sorted(pending)}") from None
    log.info("installed CRDs", extra={"crds": names})
    return names
