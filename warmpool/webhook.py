"""Mutating admission webhook: new pods of enabled workloads *prefer* the nodes where the model is staged.

Why a webhook: the controller must not rewrite the workload's pod template (that rolls every pod), and
the scheduler cannot be told per pod otherwise. The webhook adds, to each new pod (CREATE only) whose
labels match the selector of an enabled Deployment/StatefulSet in its namespace with a model URI and
``prestage-nodes > 0``, one *preferred* node-affinity term (weight 100) on
``warmscale.io/staged-<model hash> In [true]``. Preferred, not required: when no staged node has room,
the pod still schedules anywhere (cold), and ``failurePolicy: Ignore`` means a webhook outage only
loses the preference. Placeholders/pre-pull/stage pods (``managed-by: warmscale``) are never touched
(also excluded by the configuration's objectSelector). Existing affinity is kept: the term is
appended; a pod that already carries it is left as is.

The workloads of a namespace are listed from the API and cached for ``ttl_s`` (every replica of the
controller serves the webhook, leader or not, so it does not depend on the leader's caches).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import json
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warmscale.common.http_limits import (
    BodyTooLarge,
    BoundedSite,
    ConnectionLimits,
    HttpMetrics,
    make_runner,
    read_body,
)
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import AnnotationError, WarmConfig, is_enabled, parse_annotations
from warmscale.warmpool.cache_roots import DEFAULT_ALLOWED, DEFAULT_FILE_SOURCES, cache_root_problem
from warmscale.warmpool.model_uri import cache_dir, staged_label_key
from warmscale.warmpool.planning import model_source_problem

log = logging.getLogger("warmscale.warmpool.webhook")
WEIGHT = 100
MODEL_PATH_ENV = "WARMSCALE_MODEL_PATH"
ENSURE_CONTAINER = "warmscale-ensure-model"
CACHE_VOLUME = "warmscale-model-cache"
SOURCE_VOLUME = "warmscale-model-source"
Obj = Mapping[str, Any]
Lister = Callable[[str], Awaitable[Sequence[Obj]]]


def config_for(pod: Obj, workloads: Sequence[Obj], allowed_roots: Sequence[str] = DEFAULT_ALLOWED,
               file_sources: Sequence[str] = DEFAULT_FILE_SOURCES) -> WarmConfig | None:
    """The warm-pool config of the enabled workload ``pod`` belongs to (with a model URI), or None.

    A cache root outside ``allowed_roots`` (or a system path), or a ``file://`` source outside
    ``file_sources`` (or a system path, or a cache root), counts as invalid: nothing is mounted."""
    m = pod.get("metadata") or {}
    labels = m.get("labels") or {}
    if labels.get(ob.MANAGED_BY) == ob.MANAGED_BY_VALUE:
        return None
    for w in workloads:
        wm = w.get("metadata") or {}
        ann = wm.get("annotations") or {}
        if wm.get("deletionTimestamp") or not is_enabled(ann):
            continue
        sel = ((w.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if w.get("kind") == ob.LWS_KIND:  # a LeaderWorkerSet's group pods carry its name label
            sel = {ob.LWS_NAME_LABEL: wm.get("name", "")}
        if not sel or any(labels.get(k) != v for k, v in sel.items()):
            continue
        try:
            cfg = parse_annotations(ann)
        except AnnotationError:
            return None  # invalid annotations change nothing
        if cfg.model_uri is None or cache_root_problem(cfg.cache_root, allowed_roots) is not None or \
                model_source_problem(cfg, allowed_roots, file_sources) is not None:
            return None
        return cfg
    return None


def staged_key_for(pod: Obj, workloads: Sequence[Obj], allowed_roots: Sequence[str] = DEFAULT_ALLOWED,
                   file_sources: Sequence[str] = DEFAULT_FILE_SOURCES, namespace: str | None = None) -> str | None:
    """The staged-node label key new ``pod`` should prefer, or None."""
    cfg = config_for(pod, workloads, allowed_roots, file_sources)
    if cfg is None or cfg.model_uri is None or cfg.prestage_nodes <= 0:
        return None
    return staged_label_key(cfg.cache_key(_namespace(pod, namespace)))


def _namespace(pod: Obj, namespace: str | None) -> str:
    """The pod's namespace: the admission request's (a new pod's metadata may not carry it yet)."""
    return namespace or str((pod.get("metadata") or {}).get("namespace") or "")


def model_path(cfg: WarmConfig, namespace: str) -> str:
    """Where the engine finds the staged copy: fixed per cache identity (model, namespace or digest) and root."""
    return f"{cache_dir(cfg.cache_root, cfg.cache_key(namespace))}/data"


def _append(spec: Obj, path: str, field: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not items:
        return []
    if not spec.get(field):
        return [{"op": "add", "path": f"{path}/{field}", "value": items}]
    return [{"op": "add", "path": f"{path}/{field}/-", "value": i} for i in items]


def engine_patch(pod: Obj, cfg: WarmConfig, image: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """JSON patch making the engine load the staged copy (empty when the pod already has it).

    Adds the node-local cache (hostPath ``cache-root``) as a volume, mounts it read-only into every
    container at the same path (unless something is mounted there already), sets
    ``WARMSCALE_MODEL_PATH`` to the model's fixed path in it (replacing a fallback the template may
    define, e.g. the Hub model id), and prepends the init container ``warmscale stage --ensure``, which
    returns at once where the copy is ready on the node the pod landed on and stages it otherwise."""
    spec = pod.get("spec") or {}
    if any(c.get("name") == ENSURE_CONTAINER for c in spec.get("initContainers") or []):
        return []
    ns = _namespace(pod, namespace)
    path = model_path(cfg, ns)
    mounts, volumes = ob.stager_volumes(cfg, CACHE_VOLUME, SOURCE_VOLUME, cfg.cache_root)
    have = {v.get("name") for v in spec.get("volumes") or []}
    if any(v.get("name") in (CACHE_VOLUME, SOURCE_VOLUME) and v not in volumes for v in spec.get("volumes") or []):
        # a volume of the pod's own under one of our names: the init container (uid 0) would stage into, or
        # copy from, whatever it points at. Leave the pod as it is (it still prefers staged nodes).
        log.warning("pod already has a volume named like the staged cache's: engine not pointed at a copy",
                    extra={"volumes": sorted(n for n in have if n in (CACHE_VOLUME, SOURCE_VOLUME))})
        return []
    ops = _append(spec, "/spec", "volumes", [v for v in volumes if v["name"] not in have])
    for i, c in enumerate(spec.get("containers") or []):
        base = f"/spec/containers/{i}"
        taken = {vm.get("mountPath") for vm in c.get("volumeMounts") or []}
        if cfg.cache_root not in taken and cfg.cache_root.rstrip("/") not in taken:
            ops += _append(c, base, "volumeMounts", [{"name": CACHE_VOLUME, "mountPath": cfg.cache_root,
                                                      "readOnly": True}])
        env = list(c.get("env") or [])
        var = {"name": MODEL_PATH_ENV, "value": path}
        at = next((j for j, e in enumerate(env) if e.get("name") == MODEL_PATH_ENV), None)
        if at is None:
            ops += _append(c, base, "env", [var])
        else:
            ops.append({"op": "replace", "path": f"{base}/env/{at}", "value": var})
    init = {
        "name": ENSURE_CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ob.stager_args(cfg, cfg.cache_root, ns, ensure=True),
        "envFrom": [{"secretRef": {"name": ob.STAGE_CREDENTIALS_SECRET, "optional": True}}],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        # as the staging Jobs: uid 0 without any capability (the kubelet creates the hostPath cache root as
        # root:root 0755, so the image's user could not stage into it), read-only root filesystem: the
        # cache mount is its only writable path
        "securityContext": dict(ob.JOB_CONTAINER_SECURITY),
        "volumeMounts": mounts,
    }
    if not spec.get("initContainers"):
        ops.append({"op": "add", "path": "/spec/initContainers", "value": [init]})
    else:  # first, so the other init containers (and the engine) see the copy
        ops.append({"op": "add", "path": "/spec/initContainers/0", "value": init})
    return ops


def affinity_patch(pod: Obj, key: str) -> list[dict[str, Any]]:
    """JSON patch appending a preferred node-affinity term on ``key In [true]`` (empty if already there)."""
    term = {"weight": WEIGHT, "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": ["true"]}]}}
    spec = pod.get("spec") or {}
    aff = spec.get("affinity")
    if not aff:
        return [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [term]}}}]
    na = aff.get("nodeAffinity")
    if not na:
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity",
                 "value": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}]
    pref = na.get("preferredDuringSchedulingIgnoredDuringExecution")
    if not pref:
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
                 "value": [term]}]
    if any(t.get("preference") == term["preference"] for t in pref):
        return []
    return [{"op": "add", "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/-",
             "value": term}]


def reserved_volume_clash(pod: Obj) -> str | None:
    """The name of a volume the pod already has under a name the webhook reserves for its own cache or
    source volume, or None. The engine mutation is then left out (never stage into a user's volume)."""
    spec = pod.get("spec") or {}
    if any(c.get("name") == ENSURE_CONTAINER for c in spec.get("initContainers") or []):
        return None  # already ours (engine_patch leaves such a pod as is)
    names = {v.get("name") for v in spec.get("volumes") or []}
    return next((n for n in (CACHE_VOLUME, SOURCE_VOLUME) if n in names), None)


@dataclass(frozen=True)
class Answer:
    """A review's AdmissionReview and how it ended (``result``: a label of ``warmscale_webhook_reviews_total``)."""

    review: dict[str, Any]
    result: str


def answer(review: Obj, workloads: Sequence[Obj], image: str | None = None,
           allowed_roots: Sequence[str] = DEFAULT_ALLOWED,
           file_sources: Sequence[str] = DEFAULT_FILE_SOURCES) -> Answer:
    """AdmissionReview (v1) in -> AdmissionReview out. Always allows; patches only matching pod CREATEs:
    the preferred affinity on staged nodes, and (with the stager ``image``) the engine's staged copy.

    A pod with a volume of a reserved name (:func:`reserved_volume_clash`) gets the affinity only, and a
    warning in the response."""
    req = review.get("request") or {}
    resp: dict[str, Any] = {"uid": req.get("uid", ""), "allowed": True}
    pod = req.get("object") or {}
    result = "unchanged"
    if req.get("operation") == "CREATE" and (req.get("kind") or {}).get("kind") == "Pod" and not req.get(
            "subResource"):
        ns = req.get("namespace")
        key = staged_key_for(pod, workloads, allowed_roots, file_sources, ns)
        patch = affinity_patch(pod, key) if key else []
        cfg = config_for(pod, workloads, allowed_roots, file_sources) if image else None
        clash = reserved_volume_clash(pod) if cfg is not None else None
        if clash is not None:
            result = "volume_conflict"
            resp["warnings"] = [f"warmscale: the pod already has a volume named {clash!r} (reserved for the "
                                "warm-pool's model cache): the staged copy is not mounted; rename the volume"]
        elif cfg is not None and image:
            patch += engine_patch(pod, cfg, image, ns)
        if patch:
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
            result = "mutated" if result == "unchanged" else result
    return Answer({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}, result)


def review_response(review: Obj, workloads: Sequence[Obj], image: str | None = None,
                    allowed_roots: Sequence[str] = DEFAULT_ALLOWED,
                    file_sources: Sequence[str] = DEFAULT_FILE_SOURCES) -> dict[str, Any]:
    """The AdmissionReview of :func:`answer`."""
    return answer(review, workloads, image, allowed_roots, file_sources).review


def review_problem(review: Any) -> str | None:
    """What makes ``review`` unanswerable (no AdmissionReview request with a uid), or None."""
    if not isinstance(review, dict):
        return "the body is not a JSON object"
    req = review.get("request")
    if not isinstance(req, dict):
        return "the AdmissionReview has no request object"
    if not isinstance(req.get("uid"), str) or not req["uid"]:
        return "request.uid is missing or not a string"
    return None


def allowed_unchanged(uid: str, warning: str) -> dict[str, Any]:
    """An AdmissionReview admitting the pod without a patch, with a warning for whoever created it."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True, "warnings": [warning]}}


_UID = re.compile(rb'"uid"\s*:\s*"([0-9A-Za-z-]{1,128})"')


def uid_in_prefix(prefix: bytes) -> str | None:
    """The request uid of a truncated AdmissionReview (the API server writes it first in the request)."""
    at = prefix.find(b'"request"')
    m = _UID.search(prefix, at if at >= 0 else 0)
    return m.group(1).decode() if m else None


class WorkloadLister:
    """Deployments, StatefulSets and LeaderWorkerSets of a namespace, as raw JSON, cached for ``ttl_s``
    (LeaderWorkerSets only where the CRD is installed and readable)."""

    def __init__(self, api: Any, ttl_s: float = 5.0) -> None:
        from kubernetes_asyncio import client

        self.apps: Any = client.AppsV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, list[Obj]]] = {}

    async def __call__(self, namespace: str) -> list[Obj]:
        from kubernetes_asyncio.client.exceptions import ApiException

        from warmscale.warmpool.kube import read_raw

        hit = self._cache.get(namespace)
        if hit and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        out: list[Obj] = []
        for call in (self.apps.list_namespaced_deployment, self.apps.list_namespaced_stateful_set):
            out += (await read_raw(call, namespace)).get("items") or []
        try:
            lws = await read_raw(self.custom.list_namespaced_custom_object, ob.LWS_GROUP, ob.LWS_VERSION, namespace,
                                 ob.LWS_PLURAL)
        except ApiException as exc:
            if exc.status not in (403, 404):  # the CRD not installed, or not granted: no LeaderWorkerSets
                raise
            lws = {}
        out += [{**o, "kind": ob.LWS_KIND} for o in lws.get("items") or []]
        self._cache[namespace] = (time.monotonic(), out)
        return out


class WebhookMetrics:
    """What the webhook answered, and the state of its serving certificate (every replica)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry or CollectorRegistry()
        self.reviews = Counter("warmscale_webhook_reviews_total", "Admission reviews by result: mutated, "
                               "unchanged, and admitted unmutated because of a problem (list_failed, malformed, "
                               "too_large, volume_conflict)", ["result"], registry=self.registry)
        self.certificate_refused = Gauge("warmscale_webhook_certificate_refused", "1 while the certificate in "
                                         "the webhook's Secret cannot be loaded (the previous one is still "
                                         "served, if any); 0 otherwise", registry=self.registry)
        self.certificate_not_after = Gauge("warmscale_webhook_certificate_expiry_timestamp_seconds",
                                           "Expiry of the certificate the webhook serves", registry=self.registry)


# The API server's own limit on a request body is 3 MiB (kube-apiserver --max-request-bytes default), so a
# review of a pod it accepted fits; the rest is the AdmissionReview envelope.
MAX_REVIEW_BYTES = 3 * 1024 * 1024 + 256 * 1024
# Reviews read and answered at once: bounds the memory of large reviews (each parses to ~10x its size).
REVIEWS_IN_FLIGHT = 16


def make_app(lister: Lister, image: str | None = None, allowed_roots: Sequence[str] = DEFAULT_ALLOWED,
             metrics: WebhookMetrics | None = None, body_timeout_s: float = ConnectionLimits().body_timeout_s,
             max_review_bytes: int = MAX_REVIEW_BYTES, file_sources: Sequence[str] = DEFAULT_FILE_SOURCES) -> Any:
    from aiohttp import web

    counts = metrics or WebhookMetrics()
    gate = asyncio.Semaphore(REVIEWS_IN_FLIGHT)

    def reply(body: dict[str, Any], result: str, status: int = 200) -> web.Response:
        counts.reviews.labels(result).inc()
        return web.json_response(body, status=status)

    async def mutate(request: web.Request) -> web.Response:
        async with gate:
            return await _mutate(request)

    async def _mutate(request: web.Request) -> web.Response:
        try:
            raw = await read_body(request, max_review_bytes, body_timeout_s)
        except BodyTooLarge as exc:
            uid = uid_in_prefix(exc.prefix)
            log.warning("admission review over the size limit; admitting unchanged",
                        extra={"limit_bytes": max_review_bytes, "uid": uid})
            msg = (f"warmscale: the admission review is over {max_review_bytes} bytes: the pod is admitted "
                   "without the warm-pool mutation")
            resp = reply(allowed_unchanged(uid, msg), "too_large") if uid else reply(
                {"error": msg}, "too_large", status=413)
            resp.force_close()  # the rest of the body is not read
            return resp
        except TimeoutError:
            log.warning("admission review body not received in time", extra={"timeout_s": body_timeout_s})
            resp = reply({"error": "request body not received in time"}, "malformed", status=408)
            resp.force_close()
            return resp
        try:
            review = json.loads(raw)
        except ValueError as exc:
            review, problem = None, f"the body is not JSON ({exc})"
        else:
            problem = review_problem(review)
        if problem is not None:
            log.warning("malformed admission review", extra={"problem": problem[:200], "bytes": len(raw)})
            return reply({"error": problem}, "malformed", status=400)
        req = review["request"]
        uid = req["uid"]
        ns = req.get("namespace") if isinstance(req.get("namespace"), str) else ""
        listed = True
        try:
            workloads = await lister(ns) if ns else []
        except Exception as exc:  # never block pod creation: allow without a patch
            log.warning("listing workloads failed; admitting unchanged", extra={"error": str(exc)[:200]})
            workloads, listed = [], False
        try:
            out = answer(review, workloads, image, allowed_roots, file_sources)
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:  # a field of the wrong shape
            log.warning("malformed admission review", extra={"uid": uid, "error": f"{type(exc).__name__}: {exc}"[:200]})
            return reply(allowed_unchanged(uid, "warmscale: the admission review could not be read; the pod is "
                                           "admitted without the warm-pool mutation"), "malformed")
        result = out.result if listed or out.result != "unchanged" else "list_failed"
        if result == "volume_conflict":
            log.warning("pod has a volume of a reserved name; staged copy not mounted", extra={"namespace": ns})
        elif out.review["response"].get("patch"):
            log.info("pod mutated (staged nodes preferred, staged copy mounted)", extra={"namespace": ns, "pod": (
                (req.get("object") or {}).get("metadata") or {}).get("generateName")})
        else:
            log.debug("admission review", extra={"namespace": ns, "workloads": len(workloads)})
        return reply(out.review, result)

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(lister: Lister, port: int, cert_file: str | None, key_file: str | None, host: str = "0.0.0.0",
                image: str | None = None, allowed_roots: Sequence[str] = DEFAULT_ALLOWED,
                context: ssl.SSLContext | None = None, metrics: WebhookMetrics | None = None,
                limits: ConnectionLimits = ConnectionLimits(), http_metrics: HttpMetrics | None = None,
                file_sources: Sequence[str] = DEFAULT_FILE_SOURCES) -> Any:
    """Start the HTTPS server under ``limits``; returns the aiohttp runner (``await runner.cleanup()`` to stop).

    ``context``: an SSL context the caller keeps current (:class:`warmpool.certs.SecretCertificate`),
    instead of the certificate files."""
    ctx = context
    if ctx is None:
        assert cert_file and key_file
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert_file, key_file)
    runner = make_runner(make_app(lister, image, allowed_roots, metrics, limits.body_timeout_s,
                                 file_sources=file_sources), limits)
    await runner.setup()
    site = BoundedSite(runner, host, port, ssl_context=ctx, limits=limits, name="webhook", metrics=http_metrics)
    await site.start()
    log.info("webhook listening", extra={"port": site.port})
    return runner


def self_signed(hosts: Sequence[str], directory: Path, days: int = 365) -> tuple[Path, Path, bytes]:
    """A self-signed serving certificate for ``hosts`` (IPs or DNS names); returns (cert, key, CA bundle PEM).

    For development and the local cluster; in a real cluster mount a cert-manager Certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "warmscale-warmpool-webhook")])
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(pem)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return cert_file, key_file, pem


def webhook_configuration(name: str, ca_bundle: bytes, *, url: str | None = None,
                          service: tuple[str, str, int] | None = None,
                          namespace_selector: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The MutatingWebhookConfiguration (``url`` for the local cluster, ``service`` ns/name/port in-cluster)."""
    client_config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()}
    if url:
        client_config["url"] = url
    elif service:
        client_config["service"] = {"namespace": service[0], "name": service[1], "port": service[2],
                                    "path": "/mutate"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {ob.MANAGED_BY: ob.MANAGED_BY_VALUE}},
        "webhooks": [{
            "name": "warm-pool.warmscale.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 3,
            "reinvocationPolicy": "Never",
            "clientConfig": client_config,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "namespaceSelector": dict(namespace_selector or {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}),
            # only pods of annotated workloads (their template carries the label), never our own pods
            "objectSelector": {"matchExpressions": [
                {"key": "warmscale.io/enabled", "operator": "In", "values": ["true"]},
                {"key": ob.MANAGED_BY, "operator": "NotIn", "values": [ob.MANAGED_BY_VALUE]}]},
        }],
    }
