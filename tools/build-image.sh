#!/usr/bin/env bash
# Build the project's Dockerfile without Docker and smoke-test the image (docs/install.md, step 1):
#
#   1. base image from Debian packages: mmdebstrap (bookworm, minbase + python3 3.11, venv, pip) ->
#      a rootfs tarball -> `podman import` as localhost/warmscale-base:bookworm (only when missing);
#      no base layer is pulled from a registry;
#   2. `buildah bud` builds the Dockerfile itself on it (--build-arg PYTHON_IMAGE=that base; the build
#      stage downloads the dependencies' wheels from PyPI);
#   3. smoke test with podman (crun): `warmscale --version`, then a scaler in the container answering
#      a gRPC health check (from inside the container, and from the host through a published port).
#
# Usage: tools/build-image.sh [TAG]      (default localhost/warmscale:<version>)
# Needs root (or a configured rootless podman), and the Debian packages podman buildah mmdebstrap crun
# (`apt-get install podman buildah mmdebstrap umoci crun`). Network: deb.debian.org and PyPI only.
# Environment: WARMSCALE_IMAGE_CACHE (default ~/.cache/warmscale/image), DEBIAN_MIRROR,
# WARMSCALE_BUILD_NETWORK (buildah --network; default host), WARMSCALE_OCI_RUNTIME (crun|runc; default:
# the first that runs a container here), WARMSCALE_ULIMITS, WARMSCALE_BUILD_CA_BUNDLE (default the
# host's; '' for none).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# The version from git (setuptools-scm, as `pip install` computes it), passed into the build, whose
# context has no .git; an image tag cannot hold '+', so the tag uses '-' there.
VERSION="$(cd "$ROOT" && python3 -m setuptools_scm 2>/dev/null || echo 0.1.0+unknown)"
TAG="${1:-localhost/warmscale:${VERSION//+/-}}"
BASE="localhost/warmscale-base:bookworm"
CACHE="${WARMSCALE_IMAGE_CACHE:-$HOME/.cache/warmscale/image}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
NETWORK="${WARMSCALE_BUILD_NETWORK:-host}"
NAME="warmscale-smoke-$$"

log() { printf '[build-image] %s\n' "$*" >&2; }
for tool in podman buildah mmdebstrap; do
  command -v "$tool" >/dev/null || { log "missing $tool: apt-get install podman buildah mmdebstrap crun"; exit 2; }
done
mkdir -p "$CACHE"

# 1. the base, from Debian packages
if ! podman image exists "$BASE"; then
  log "base: mmdebstrap bookworm (python3, python3-venv, python3-pip) -> $BASE"
  nice -n 10 mmdebstrap --variant=minbase --mode=root \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
    --aptopt='APT::Install-Recommends "false"' \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
    bookworm "$CACHE/base.tar" "$MIRROR"
  podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$CACHE/base.tar" "$BASE" >/dev/null
  rm -f "$CACHE/base.tar"
else
  log "base: $BASE present"
fi

# The OCI runtime: crun (podman's default) where it works, else runc. On hosts with a hybrid cgroup
# layout (v1 controllers plus a cgroup2 hierarchy that has controllers, as on the machines this was
# written on) crun refuses every container ("cgroups in hybrid mode not supported"); runc runs them.
# Limits: podman's default ulimits exceed what an unprivileged-in-effect container host may set, so
# they are set explicitly (WARMSCALE_ULIMITS).
read -r -a ULIMITS <<< "${WARMSCALE_ULIMITS:---ulimit nofile=16384:16384 --ulimit nproc=4096:4096}"
RUNTIME="${WARMSCALE_OCI_RUNTIME:-}"
if [ -z "$RUNTIME" ]; then
  for candidate in crun runc; do
    command -v "$candidate" >/dev/null || continue
    if err="$(podman --runtime "$candidate" run --rm "${ULIMITS[@]}" "$BASE" true 2>&1)"; then
      RUNTIME="$candidate"; break
    fi
    log "runtime $candidate cannot run containers here: $err"
  done
fi
[ -n "$RUNTIME" ] || { log "no OCI runtime works (apt-get install crun or runc)"; exit 2; }
log "OCI runtime: $RUNTIME"
PODMAN=(podman --runtime "$RUNTIME")

# 2. the Dockerfile itself. The host's CA bundle is mounted (read-only) into the RUN steps only, so a
# TLS-intercepting egress proxy the host trusts also works for pip in the build; it is not in any layer.
CA_BUNDLE="${WARMSCALE_BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
VOLUMES=()
[ -n "$CA_BUNDLE" ] && [ -f "$CA_BUNDLE" ] && VOLUMES=(--volume "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
log "buildah bud -> $TAG"
nice -n 10 buildah bud --runtime "$RUNTIME" "${ULIMITS[@]}" "${VOLUMES[@]}" --layers --network "$NETWORK" \
  --build-arg "PYTHON_IMAGE=$BASE" --build-arg "WARMSCALE_VERSION=$VERSION" \
  --build-arg "WARMSCALE_COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
  -f "$ROOT/Dockerfile" -t "$TAG" "$ROOT"

# 3. smoke test
cleanup() { podman rm -f "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT
log "smoke: warmscale --version"
"${PODMAN[@]}" run --rm "${ULIMITS[@]}" "$TAG" --version
PORT="$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')"
log "smoke: scaler in the container (gRPC published on 127.0.0.1:$PORT)"
"${PODMAN[@]}" run -d --name "$NAME" "${ULIMITS[@]}" -p "127.0.0.1:$PORT:9090" --read-only --tmpfs /tmp "$TAG" \
  --log-format json scaler --host 0.0.0.0 --grpc-port 9090 --metrics-port 9091 --no-kubernetes >/dev/null
check='
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel(sys.argv[1]) as ch:
    r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=3, wait_for_ready=True)
print(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))
sys.exit(0 if r.status == health_pb2.HealthCheckResponse.SERVING else 1)
'
ok=""
for _ in $(seq 1 30); do
  if out="$("${PODMAN[@]}" exec "$NAME" python -c "$check" 127.0.0.1:9090 2>/dev/null)"; then ok="$out"; break; fi
  sleep 1
done
[ -n "$ok" ] || { log "scaler did not answer the health check"; podman logs "$NAME" >&2; exit 1; }
log "health (inside the container): $ok"
if python3 -c 'import grpc_health' 2>/dev/null; then
  log "health (from the host, 127.0.0.1:$PORT): $(python3 -c "$check" "127.0.0.1:$PORT")"
fi
log "image $TAG: ok ($(podman image inspect --format '{{.Size}}' "$TAG") bytes)"
