"""``warmscale_build_info``: one gauge (value 1) whose labels say which build is running.

Both long-running processes (the scaler and the warm-pool controller) register it on their own
registry, so a dashboard or an alert can join on it (``* on (instance) group_left(version)``) and a
mixed-version rollout shows as two label sets. The version and commit are :mod:`warmscale.version`'s
(git, else the build, else the package metadata); an image built without git metadata names its
commit in ``$WARMSCALE_COMMIT``.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Gauge

from warmscale.version import VersionInfo, version_info

# The image build sets it (the commit the wheel was built from, when the build context has no .git).
COMMIT_ENV = "WARMSCALE_COMMIT"


def commit(info: VersionInfo | None = None) -> str:
    """The commit of this build: $WARMSCALE_COMMIT, else :func:`warmscale.version.version_info`'s."""
    return os.environ.get(COMMIT_ENV) or (info or version_info()).commit


def register(registry: CollectorRegistry, component: str) -> Gauge:
    """Add ``warmscale_build_info{version, commit, component}`` = 1 to ``registry``."""
    info = version_info()
    gauge = Gauge("warmscale_build_info", "Build of the running process (value 1): version and commit.",
                  ("version", "commit", "component"), registry=registry)
    gauge.labels(info.version, commit(info), component).set(1)
    return gauge
