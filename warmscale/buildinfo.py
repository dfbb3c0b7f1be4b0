"""``warmscale_build_info``: one gauge (value 1) whose labels say which build is running.

Both long-running processes (the scaler and the warm-pool controller) register it on their own
registry, so a dashboard or an alert can join on it (``* on (instance) group_left(version)``) and a
mixed-version rollout shows as two label sets.
"""

from __future__ import annotations

import os
import re
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

# The image build sets it (the commit the wheel was built from); a checkout reads .git instead.
COMMIT_ENV = "WARMSCALE_COMMIT"
UNKNOWN = "unknown"
# setuptools-scm's local version part carries the abbreviated commit: 0.2.0.dev3+g1a2b3c4(.d20260101)
_SCM_COMMIT = re.compile(r"\+g([0-9a-f]{7,40})")
_CHECKOUT = Path(__file__).resolve().parents[1]


def version() -> str:
    """The installed distribution's version ("0+unknown" when it is not installed)."""
    try:
        return dist_version("warmscale")
    except PackageNotFoundError:
        return "0+unknown"


def _checkout_commit(root: Path) -> str | None:
    """HEAD of a git checkout at ``root`` (a worktree's .git is a file naming its git directory)."""
    git = root / ".git"
    try:
        if git.is_file():
            git = Path(git.read_text().split("gitdir:", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head or None
        ref = head[5:]
        # a worktree's refs live in the main repository's git directory (named by `commondir`)
        common = (git / (git / "commondir").read_text().strip()) if (git / "commondir").is_file() else git
        if (common / ref).is_file():
            return (common / ref).read_text().strip() or None
        packed = common / "packed-refs"
        for line in packed.read_text().splitlines() if packed.is_file() else ():
            if line.endswith(" " + ref):
                return line.split()[0]
    except (OSError, IndexError):
        return None
    return None


def commit(ver: str | None = None) -> str:
    """The commit of this build: $WARMSCALE_COMMIT, else the version's +g<hash>, else the checkout's HEAD."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    m = _SCM_COMMIT.search(ver if ver is not None else version())
    if m:
        return m.group(1)
    return _checkout_commit(_CHECKOUT) or UNKNOWN


def register(registry: CollectorRegistry, component: str) -> Gauge:
    """Add ``warmscale_build_info{version, commit, component}`` = 1 to ``registry``."""
    ver = version()
    gauge = Gauge("warmscale_build_info", "Build of the running process (value 1): version and commit.",
                  ("version", "commit", "component"), registry=registry)
    gauge.labels(ver, commit(ver), component).set(1)
    return gauge
