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
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "testbed" / "versions.env"
BUILD_SCRIPT = REPO_ROOT / ".ci" / "build-cluster.sh"

K8S_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# Seconds each build took on the 2-core machines (build-cluster.sh's "built X in Ns" lines, cold Go
# caches); only the progress bar's ETA reads them. KEDA: ~10 min for both, most in the operator. Volcano:
# the scheduler ~18 min cold under load (its k8s v0.35.3 libraries; 228 s with them cached), then the
# controller-manager 100 s.
BUILD_SECONDS = {"etcd": 37, "kube-apiserver": 254, "kwok": 74, "kube-scheduler": 52, "kube-controller-manager": 50,
                 "kubectl": 19, "helm": 145, "keda-operator": 480, "keda-adapter": 120,
                 "vc-scheduler": 1080, "vc-controller-manager": 100,
                 # kueue: measured with -p 1 on cores shared by other builds (load ~14); ray-operator: 13 min
                 # on 2 shared cores
                 "kueue": 1611, "ray-operator": 780}
_BUILT = re.compile(r"build-cluster: built (\S+) in ")


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
        run_build_script([])
    missing = binaries.missing()
    if missing:
        raise BinariesMissing(
            "cluster binaries missing: "
            + ", ".join(str(p) for p in missing)
            + f" (build them with: bash {BUILD_SCRIPT.relative_to(REPO_ROOT)})"
        )
    return binaries


def planned(script_args: list[str], root: Path | None = None) -> dict[str, Path]:
    """The binaries ``build-cluster.sh script_args`` builds now: those of its selection that are missing."""
    root = root or cache_root()
    v = pinned_versions()
    k8s, bins = root / "bin" / f"k8s-{v['KUBERNETES_VERSION']}", root / "bin"
    cluster = {**{n: k8s / n for n in (*K8S_BINARIES, "kubectl")}, "kwok": bins / f"kwok-{v['KWOK_VERSION']}" / "kwok",
               "helm": bins / f"helm-{v['HELM_VERSION']}" / "helm"}
    keda = {n: bins / f"keda-{v['KEDA_VERSION']}" / n for n in ("keda-operator", "keda-adapter")}
    volcano = {n: bins / f"volcano-{v['VOLCANO_VERSION']}" / n for n in ("vc-scheduler", "vc-controller-manager")}
    kueue = {"kueue": bins / f"kueue-{v['KUEUE_VERSION']}" / "kueue"}
    keda["ray-operator"] = bins / f"kuberay-{v['KUBERAY_VERSION']}" / "ray-operator"  # built with KEDA's flags
    if "--keda-only" in script_args:
        chosen = keda
    elif "--volcano-only" in script_args:
        chosen = volcano
    elif "--kueue-only" in script_args:
        chosen = kueue
    else:  # Volcano only when asked (build-cluster.sh --volcano); Kueue with KEDA unless --no-keda
        chosen = {**cluster, **({} if "--no-keda" in script_args else {**keda, **kueue}),
                  **(volcano if "--volcano" in script_args else {})}
    return {n: p for n, p in chosen.items() if not os.access(p, os.X_OK)}


def run_build_script(script_args: list[str], quiet: bool = False) -> None:
    """Run ``.ci/build-cluster.sh``; on a terminal, with a progress bar whose ETA weighs each binary
    by its usual build time (:data:`BUILD_SECONDS`). Its log lines pass through either way."""
    todo = planned(script_args)
    try:
        from warmscale import progress
    except ImportError:  # the harness runs without the package installed too
        progress = None  # type: ignore[assignment]
    if progress is None or not todo or not progress.wanted(quiet):
        subprocess.run(["bash", str(BUILD_SCRIPT), *script_args], check=True)
        return
    with progress.bar(sum(BUILD_SECONDS.get(n, 60) for n in todo), "cluster build", unit="s") as bar:
        proc = subprocess.Popen(["bash", str(BUILD_SCRIPT), *script_args], stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            bar.write(line.rstrip("\n"))
            m = _BUILT.search(line)
            if m and m.group(1) in todo:
                bar.update(BUILD_SECONDS.get(m.group(1), 60))
                bar.set_postfix_str(m.group(1))
        rc = proc.wait()
    if rc != 0:
        raise subprocess.CalledProcessError(rc, ["bash", str(BUILD_SCRIPT), *script_args])
    sys.stderr.flush()
