"""Locate (and optionally build) the pinned control-plane binaries.

The binaries live outside the repository, keyed by the pinned versions in
``testbed/versions.env``::

    ${WARMSCALE_CACHE:-~/.cache/warmscale}/bin/k8s-<kubernetes version>/{etcd,kube-apiserver,...}
    ${WARMSCALE_CACHE:-~/.cache/warmscale}/bin/kwok-<kwok version>/kwok

``.ci/build-cluster.sh`` builds whatever is missing.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "testbed" / "versions.env"
BUILD_SCRIPT = REPO_ROOT / ".ci" / "build-cluster.sh"

K8S_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class BinariesMissing(RuntimeError):
    """Raised when a control-plane binary is not in the cache."""


def cache_root() -> Path:
    """Root of the harness cache (binaries, default cluster state)."""
    env = os.environ.get("WARMSCALE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "warmscale"


def pinned_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines of the versions file."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            versions[key.strip()] = value.strip()
    return versions


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the binaries a cluster needs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path

    @classmethod
    def expected(cls, root: Path | None = None) -> Binaries:
        root = root or cache_root()
        versions = pinned_versions()
        k8s_dir = root / "bin" / f"k8s-{versions['KUBERNETES_VERSION']}"
        kwok_dir = root / "bin" / f"kwok-{versions['KWOK_VERSION']}"
        return cls(
            etcd=k8s_dir / "etcd",
            kube_apiserver=k8s_dir / "kube-apiserver",
            kube_controller_manager=k8s_dir / "kube-controller-manager",
            kube_scheduler=k8s_dir / "kube-scheduler",
            kwok=kwok_dir / "kwok",
        )

    def all(self) -> list[Path]:
        return [self.etcd, self.kube_apiserver, self.kube_controller_manager, self.kube_scheduler, self.kwok]

    def missing(self) -> list[Path]:
        return [p for p in self.all() if not os.access(p, os.X_OK)]


def locate(build: bool = False) -> Binaries:
    """Return the cached binaries; build the missing ones first if ``build`` is true.

    Raises :class:`BinariesMissing` when some are still missing.
    """
    binaries = Binaries.expected()
    if binaries.missing() and build:
        log.info("building missing cluster binaries", extra={"script": str(BUILD_SCRIPT)})
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True)
    missing = binaries.missing()
    if missing:
        raise BinariesMissing(
            "cluster binaries missing: "
            + ", ".join(str(p) for p in missing)
            + f" (build them with: bash {BUILD_SCRIPT.relative_to(REPO_ROOT)})"
        )
    return binaries
