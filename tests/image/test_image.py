"""The container image, built from the Dockerfile without Docker (tools/build-image.sh) and run.

Marker ``image``, not in the default run: it needs root, the Debian packages podman, buildah and
mmdebstrap (plus crun or runc), network access to deb.debian.org and PyPI, ~0.6 GB of disk, and
about 6 minutes the first time (base ~2.5 min, build ~3 min; later runs reuse the base and layers).
Run: ``python3 -m pytest -m image tests/image``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.image
ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/warmscale:test"


@pytest.fixture(scope="module")
def image() -> str:
    missing = [t for t in ("podman", "buildah", "mmdebstrap") if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"needs root and {', '.join(missing) or 'podman/buildah/mmdebstrap'} "
                    "(apt-get install podman buildah mmdebstrap crun runc)")
    out = subprocess.run(["bash", str(ROOT / "tools/build-image.sh"), TAG], capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = out.stdout + out.stderr
    # `warmscale --version` in the image: the version tools/build-image.sh took from git
    assert re.search(r"^warmscale \d+\.\d+\S*$", log, re.M), log[-2000:]
    assert "health (inside the container): SERVING" in log  # a scaler answering grpc.health.v1
    return log


def _runtime(log: str) -> str:
    for line in log.splitlines():
        if "OCI runtime:" in line:
            return line.rsplit(":", 1)[1].strip()
    return "crun"


def test_image_runs_the_scaler_and_the_stager(image: str, tmp_path: Path) -> None:
    """Beyond the script's smoke test: the init container's command (`warmscale stage --ensure`)
    runs in the image with the webhook's security context (uid 0, every capability dropped, read-only
    root filesystem) on a root-owned 0755 cache root as the kubelet creates it: unstaged, then ready."""
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    cache.mkdir()
    (src / "model.bin").write_bytes(b"w" * 4096)
    os.chmod(cache, 0o755)  # root:root 0755, as a DirectoryOrCreate hostPath
    cmd = ["podman", "--runtime", _runtime(image), "run", "--rm", "--ulimit", "nofile=16384:16384",
           "--ulimit", "nproc=4096:4096", "--user", "0:0", "--cap-drop", "ALL", "--read-only",
           "--security-opt", "no-new-privileges", "-v", f"{src}:/src:ro", "-v", f"{cache}:/cache", TAG,
           "--log-format", "json", "stage", "--ensure", "--uri", "file:///src", "--cache-root", "/cache"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and '"already":false' in first.stdout + first.stderr, first.stderr
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and '"already":true' in again.stdout + again.stderr, again.stderr
    [entry] = [p for p in cache.iterdir() if "file-" in p.name and not p.name.startswith(".")]
    assert (entry / "data" / "model.bin").stat().st_size == 4096
    assert entry.stat().st_uid == 0
