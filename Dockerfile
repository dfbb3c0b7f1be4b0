# syntax=docker/dockerfile:1
# One image for the three warmscale processes:
#   warmscale scaler     the KEDA external scaler (gRPC 9090, metrics 9091)
#   warmscale warmpool   the warm-pool controller (metrics 9092)
#   warmscale stage      the weight stager (runs in the controller's staging Jobs)
#
# Build:  docker build -t warmscale:0.1.0 .
# Run:    docker run --rm -p 9090:9090 -p 9091:9091 warmscale:0.1.0 scaler --metrics-port 9091
# The manifests reference the image as `warmscale:0.1.0`; point them at your registry with
#   cd manifests && kustomize edit set image warmscale=<registry>/warmscale:<tag>
#
# Stage 1 builds a wheel of the project and wheels of its dependencies (compilers stay here): only
# pyproject's `dependencies`, what the scaler, the controller and the stager import; the `demo` extra
# (matplotlib, numpy, tqdm: the demo's plot and the benchmarks) is not installed.
# stage 2 installs only those wheels into a virtualenv on the same slim base and runs as an
# unprivileged user (uid/gid 10001, matching runAsUser in manifests/base).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependencies first, so the layer is reused while only the code changes.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && python -m pip wheel --wheel-dir /wheels -r /tmp/requirements.txt
COPY . .
# The build context has no .git (.dockerignore): the version comes from the build argument, which
# tools/build-image.sh sets from git (setuptools-scm); without it the wheel says 0.1.0+unknown.
ARG WARMSCALE_VERSION=""
RUN if [ -n "$WARMSCALE_VERSION" ]; then export SETUPTOOLS_SCM_PRETEND_VERSION_FOR_WARMSCALE="$WARMSCALE_VERSION"; fi \
 && python -m pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
# The commit the image was built from (warmscale_build_info{commit}); .git is not in the build context.
ARG WARMSCALE_COMMIT=unknown
ENV WARMSCALE_COMMIT=${WARMSCALE_COMMIT}
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PATH=/opt/warmscale/bin:$PATH
RUN groupadd --system --gid 10001 warmscale \
 && useradd --system --uid 10001 --gid warmscale --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin warmscale
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/warmscale \
 && /opt/warmscale/bin/pip install --no-index --find-links=/wheels warmscale \
 && rm -rf /root/.cache
USER 10001:10001
WORKDIR /tmp
EXPOSE 9090 9091 9092
ENTRYPOINT ["warmscale"]
CMD ["--help"]
