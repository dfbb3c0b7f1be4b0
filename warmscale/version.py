"""The running code's version and commit, from git (setuptools-scm), for ``warmscale --version``, the
startup log line and the ``warmscale_build_info`` metric.

Where the answer comes from, first hit wins:

1. a git checkout (the package sits in a work tree and ``setuptools_scm`` is importable): the work
   tree itself, so a developer's ``PYTHONPATH=$PWD`` or editable install says what is really running;
2. ``warmscale/_version.py``, which setuptools-scm writes when a wheel or an editable install is built
   (the image and any ``pip install``);
3. the installed distribution's metadata;
4. :data:`UNKNOWN` (a copy with neither git nor a build, e.g. a source tarball run in place).
"""

from __future__ import annotations

import functools
import importlib
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "0+unknown"
UNKNOWN_COMMIT = "unknown"
DIST_NAME = "warmscale"
# The checkout root: warmscale/ is one level under it (the other packages are symbolic links in it).
_CHECKOUT = Path(__file__).resolve().parent.parent
# A development version's local part names the commit: 0.1.dev395+gcfd192d(.d20261201 when dirty).
_LOCAL_COMMIT = re.compile(r"\+g([0-9a-f]{7,40})")
# git is local and fast; this bounds a hung one (a network filesystem) so a process still starts.
GIT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class VersionInfo:
    version: str  # PEP 440, e.g. 0.1.dev395+gcfd192d
    commit: str  # abbreviated commit id, or "unknown"
    source: str  # "git" | "build" | "metadata" | "unknown": which of the module docstring's places answered

    def labels(self) -> dict[str, str]:
        """The ``warmscale_build_info`` labels."""
        return {"version": self.version, "commit": self.commit}


def commit_of(version: str) -> str:
    """The commit a setuptools-scm version names (``+g<id>``), else ``unknown``."""
    m = _LOCAL_COMMIT.search(version)
    return m.group(1) if m else UNKNOWN_COMMIT


def _from_git(root: Path) -> VersionInfo | None:
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return None
    try:
        from setuptools_scm import Configuration, _get_version
    except ImportError:
        return None
    try:
        # pyproject's own [tool.setuptools_scm], so a checkout says what a wheel built from it would.
        with warnings.catch_warnings():  # its API's deprecation notices are not the user's business
            warnings.simplefilter("ignore")
            config = Configuration.from_file(str(root / "pyproject.toml"), dist_name=DIST_NAME)
            version = _get_version(config, force_write_version_files=False)
        if not version:
            return None
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, check=False).stdout.strip()
    except (Exception, SystemExit):  # setuptools-scm raises its own errors (and exits) on odd trees
        return None
    return VersionInfo(version, head or commit_of(version), "git")


def _from_build() -> VersionInfo | None:
    try:
        mod = importlib.import_module("warmscale._version")
    except ImportError:
        return None
    version = str(getattr(mod, "__version__", "") or "")
    if not version:
        return None
    commit = getattr(mod, "__commit_id__", None) or commit_of(version)
    return VersionInfo(version, str(commit).removeprefix("g"), "build")


def _from_metadata() -> VersionInfo | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        version = dist_version(DIST_NAME)
    except PackageNotFoundError:
        return None
    return VersionInfo(version, commit_of(version), "metadata")


def _resolve(root: Path) -> VersionInfo:
    return _from_git(root) or _from_build() or _from_metadata() or VersionInfo(UNKNOWN, UNKNOWN_COMMIT, "unknown")


@functools.cache
def version_info() -> VersionInfo:
    """The version and commit of the running code (computed once per process: git does not change
    under a running process that matters, and the metric and the log line must agree)."""
    return _resolve(_CHECKOUT)


def version() -> str:
    return version_info().version
