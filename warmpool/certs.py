"""Self-managed certificates: one CA issues the webhook's and the scaler's serving certificates and
KEDA's client certificate (mutual TLS between KEDA and the scaler), rotated before they expire.

Pure part: :func:`desired_secrets` takes the Secrets as they are (``name -> data`` with PEM bytes, or
``None`` when missing) and ``now``, and returns the Secrets that must be written (nothing when every
certificate is valid, issued by the current CA for the right names, and not yet due for renewal).
The shell (:class:`CertManager`, leader only) reads and writes the Secrets and patches the webhook
configuration's ``caBundle``.

Rotation: a certificate is renewed once ``RENEW_AT`` of its lifetime has passed (leaves: 90 days,
renewed after 60; the CA: 10 years, renewed after 6 2/3). A new CA is published next to the old
one in every ``ca.crt`` (the bundle keeps each CA until it expires), and every leaf is re-issued by
the new CA at once, so a peer holding either side's old certificate keeps working until it reloads.
The scaler re-reads its mounted Secret when the kubelet updates it (``scaler/tls.py``); the webhook
server re-reads its Secret from the API (:class:`SecretCertificate`).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import logging
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger("warmscale.warmpool.certs")

RENEW_AT = 2 / 3
BACKDATE = dt.timedelta(minutes=5)  # not_valid_before is set this far back (clock skew between peers)
CA_SECRET = "warmscale-ca"
WEBHOOK_SECRET = "warmscale-webhook-tls"
SCALER_SECRET = "warmscale-scaler-tls"
KEDA_CLIENT_SECRET = "warmscale-keda-client-tls"
Data = Mapping[str, bytes]


@dataclass(frozen=True)
class CertSpec:
    """What to issue. ``keda_namespace`` empty: no client certificate (plaintext between KEDA and the scaler)."""

    namespace: str = "warmscale"
    webhook_service: str = "warmscale-webhook"
    scaler_service: str = "warmscale"
    keda_namespace: str = "keda"
    leaf_validity: dt.timedelta = dt.timedelta(days=90)
    ca_validity: dt.timedelta = dt.timedelta(days=3650)
    extra_scaler_names: tuple[str, ...] = ()  # more SANs (DNS names or IP addresses)
    extra_webhook_names: tuple[str, ...] = ()

    def dns(self, service: str) -> list[str]:
        return [service, f"{service}.{self.namespace}", f"{service}.{self.namespace}.svc",
                f"{service}.{self.namespace}.svc.cluster.local"]

    def secrets(self) -> list[tuple[str, str]]:
        """(namespace, name) of every Secret it writes."""
        out = [(self.namespace, CA_SECRET), (self.namespace, WEBHOOK_SECRET), (self.namespace, SCALER_SECRET)]
        if self.keda_namespace:
            out.append((self.keda_namespace, KEDA_CLIENT_SECRET))
        return out


# ---------------------------------------------------------------- certificates (pure)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "warmscale"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def new_ca(now: dt.datetime, validity: dt.timedelta) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a new CA, valid from ``now`` (minus a little clock skew)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(f"warmscale-ca-{int(now.timestamp())}")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue(ca_cert: bytes, ca_key: bytes, cn: str, dns: Sequence[str], now: dt.datetime, validity: dt.timedelta,
          *, server: bool, client: bool) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a leaf signed by the CA, never outliving it."""
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client
                                                                      else [])
    b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - BACKDATE)
         .not_valid_after(min(now + validity, ca.not_valid_after_utc))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False))
    if dns:
        b = b.add_extension(x509.SubjectAlternativeName([_san(d) for d in dns]), critical=False)
    return b.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _load(pem: bytes | None) -> x509.Certificate | None:
    if not pem:
        return None
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None


def key_matches(cert: x509.Certificate, key_pem: bytes | None) -> bool:
    """``key_pem`` is a readable private key whose public half is the certificate's."""
    if not key_pem:
        return False
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError, Exception):  # UnsupportedAlgorithm is not a ValueError
        return False
    try:
        return bool(key.public_key() == cert.public_key())
    except (ValueError, TypeError):
        return False


def pair_problem(crt: bytes | None, key: bytes | None) -> str | None:
    """Why a certificate and its key cannot serve TLS, or None."""
    cert = _load(crt)
    if cert is None:
        return "the certificate is missing or unreadable"
    if not key_matches(cert, key):
        return "the private key is missing, unreadable or not the certificate's"
    return None


def renew_at(cert: x509.Certificate) -> dt.datetime:
    """When ``RENEW_AT`` of the certificate's lifetime (from its issuance, not counting the back-dating)
    has passed."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    issued = min(start + BACKDATE, end)
    return issued + (end - issued) * RENEW_AT


def due(cert: x509.Certificate | None, now: dt.datetime) -> bool:
    """Missing, unreadable, not yet valid, or past ``RENEW_AT`` of its lifetime."""
    if cert is None:
        return True
    return now < cert.not_valid_before_utc or now >= renew_at(cert)


def _split_bundle(pem: bytes) -> list[x509.Certificate]:
    try:
        return list(x509.load_pem_x509_certificates(pem)) if pem else []
    except ValueError:
        return []


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception):  # InvalidSignature is not a ValueError
        return False
    return True


def _sans(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return sorted([*ext.get_values_for_type(x509.DNSName), *(str(i) for i in ext.get_values_for_type(x509.IPAddress))])


@dataclass
class Desired:
    """Secrets to write (``(namespace, name) -> data``) and the CA bundle clients must trust."""

    write: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    ca_bundle: bytes = b""
    # what was found broken and is repaired by ``write``: (secret "ns/name", problem)
    problems: list[tuple[str, str]] = field(default_factory=list)


def desired_secrets(current: Mapping[tuple[str, str], Data | None], spec: CertSpec, now: dt.datetime) -> Desired:
    """Which Secrets to (re)write so that every certificate is valid and not due (see the module docstring)."""
    out = Desired()
    ca_data = dict(current.get((spec.namespace, CA_SECRET)) or {})
    ca_cert, ca_key = ca_data.get("tls.crt", b""), ca_data.get("tls.key", b"")
    ca = _load(ca_cert)
    bundle = [c for c in _split_bundle(ca_data.get("ca.crt", b"")) if c.not_valid_after_utc > now]
    if ca is not None and not key_matches(ca, ca_key):  # corrupt, or another pair's: it cannot sign for this CA
        out.problems.append((f"{spec.namespace}/{CA_SECRET}", "the CA's private key is unreadable or not the "
                             "CA certificate's: a new CA is made (the old one stays in the bundle)"))
        log.warning("CA key unusable: rotating to a new CA", extra={"secret": f"{spec.namespace}/{CA_SECRET}"})
    if ca is None or not key_matches(ca, ca_key) or due(ca, now):
        ca_cert, ca_key = new_ca(now, spec.ca_validity)
        ca = _load(ca_cert)
        assert ca is not None
        log.info("new CA", extra={"not_after": ca.not_valid_after_utc.isoformat()})
    # the bundle: the current CA first, then older CAs until they expire
    fp = ca.fingerprint(hashes.SHA256())
    kept = [c for c in bundle if c.fingerprint(hashes.SHA256()) != fp]
    ca_bundle = ca_cert + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in kept)
    out.ca_bundle = ca_bundle
    new_ca_data = {"tls.crt": ca_cert, "tls.key": ca_key, "ca.crt": ca_bundle}
    if new_ca_data != ca_data:
        out.write[(spec.namespace, CA_SECRET)] = new_ca_data

    leaves: list[tuple[tuple[str, str], str, list[str], bool, bool]] = [
        ((spec.namespace, WEBHOOK_SECRET), spec.webhook_service,
         spec.dns(spec.webhook_service) + list(spec.extra_webhook_names), True, False),
        ((spec.namespace, SCALER_SECRET), spec.scaler_service,
         spec.dns(spec.scaler_service) + list(spec.extra_scaler_names), True, False),
    ]
    if spec.keda_namespace:
        leaves.append(((spec.keda_namespace, KEDA_CLIENT_SECRET), "keda-operator", [], False, True))
    for key, cn, dns, server, client in leaves:
        data = dict(current.get(key) or {})
        cert = _load(data.get("tls.crt"))
        problem = pair_problem(data.get("tls.crt"), data.get("tls.key")) if data else None
        if problem is not None:
            out.problems.append((f"{key[0]}/{key[1]}", f"{problem}: re-issued"))
            log.warning("certificate Secret broken: re-issuing", extra={"secret": f"{key[0]}/{key[1]}",
                                                                       "problem": problem})
        ok = (cert is not None and problem is None and not due(cert, now) and _issued_by(cert, ca)
              and _sans(cert) == sorted(dns))
        if ok:
            new = {**data, "ca.crt": ca_bundle}
        else:
            crt, k = issue(ca_cert, ca_key, cn, dns, now, spec.leaf_validity, server=server, client=client)
            new = {"tls.crt": crt, "tls.key": k, "ca.crt": ca_bundle}
            log.info("certificate issued", extra={"secret": f"{key[0]}/{key[1]}", "cn": cn})
        if new != data:
            out.write[key] = new
    return out


def next_check(current: Mapping[tuple[str, str], Data | None], now: dt.datetime,
               at_most: dt.timedelta = dt.timedelta(hours=1)) -> float:
    """Seconds until the earliest renewal point of the certificates in ``current`` (capped by ``at_most``)."""
    wait = at_most
    for data in current.values():
        cert = _load((data or {}).get("tls.crt"))
        if cert is None:
            continue
        wait = min(wait, max(dt.timedelta(seconds=1), renew_at(cert) - now))
    return wait.total_seconds()


# ---------------------------------------------------------------- the shell


def _decode(secret: Mapping[str, Any] | None) -> dict[str, bytes] | None:
    if secret is None:
        return None
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


class CertMetrics:
    """The certificate manager's passes (leader only)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter

        self.registry = registry or CollectorRegistry()
        self.repairs = Counter("warmscale_certificate_repairs_total", "Certificate Secrets found broken (a key "
                               "that is unreadable or not the certificate's) and re-issued", ["secret"],
                               registry=self.registry)
        self.sync_errors = Counter("warmscale_certificate_sync_errors_total", "Certificate passes that failed "
                                   "(retried after 10 s)", registry=self.registry)


class CertManager:
    """Leader only: keep the Secrets of :class:`CertSpec` current and the webhook's ``caBundle`` patched."""

    def __init__(self, api: Any, spec: CertSpec, webhook_configuration: str | None = "warmscale-webhook",
                 metrics: CertMetrics | None = None) -> None:
        from kubernetes_asyncio import client

        self.metrics = metrics or CertMetrics()
        self.core: Any = client.CoreV1Api(api)
        self.adm: Any = client.AdmissionregistrationV1Api(api)
        self.spec = spec
        self.webhook_configuration = webhook_configuration
        self.rotations = 0

    async def _read(self, ns: str, name: str) -> dict[str, Any] | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        from warmscale.warmpool.kube import read_raw

        try:
            return dict(await read_raw(self.core.read_namespaced_secret, name, ns))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def sync(self, now: dt.datetime | None = None) -> float:
        """One pass; returns the seconds until the next one is due."""
        from kubernetes_asyncio.client.exceptions import ApiException

        now = now or dt.datetime.now(dt.UTC)
        raw = {key: await self._read(*key) for key in self.spec.secrets()}
        current = {key: _decode(s) for key, s in raw.items()}
        want = desired_secrets(current, self.spec, now)
        for secret, _problem in want.problems:
            self.metrics.repairs.labels(secret).inc()
        for (ns, name), data in want.write.items():
            body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": name, "namespace": ns,
                                 "labels": {"app.kubernetes.io/managed-by": "warmscale",
                                            "app.kubernetes.io/part-of": "warmscale"}},
                    "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
            old = raw[(ns, name)]
            if old is None:
                try:
                    await self.core.create_namespaced_secret(ns, body)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    return 1.0  # someone else wrote it first: re-read
            else:  # replace guarded by the resourceVersion: a concurrent writer makes this a 409 and a retry
                body["metadata"]["resourceVersion"] = (old.get("metadata") or {}).get("resourceVersion")
                try:
                    await self.core.replace_namespaced_secret(name, ns, body)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    return 1.0
            self.rotations += 1
            log.info("certificate Secret written", extra={"secret": f"{ns}/{name}"})
        if self.webhook_configuration:
            await self.patch_ca_bundle(want.ca_bundle)
        merged = {**current, **{k: dict(v) for k, v in want.write.items()}}
        return next_check(merged, now)

    async def patch_ca_bundle(self, bundle: bytes) -> bool:
        """Set every webhook's ``caBundle`` of the configuration to ``bundle``; False when it does not exist."""
        from kubernetes_asyncio.client.exceptions import ApiException

        from warmscale.warmpool.kube import read_raw

        name = self.webhook_configuration
        try:
            cfg = await read_raw(self.adm.read_mutating_webhook_configuration, name)
        except ApiException as exc:
            if exc.status == 404:
                log.warning("webhook configuration not found; caBundle not set", extra={"configuration": name})
                return False
            raise
        want = base64.b64encode(bundle).decode()
        hooks = cfg.get("webhooks") or []
        if all((h.get("clientConfig") or {}).get("caBundle") == want for h in hooks):
            return True
        patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": cfg["metadata"]["resourceVersion"]}]
        patch += [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": want}
                  for i in range(len(hooks))]
        try:
            await self.adm.patch_mutating_webhook_configuration(name, patch,
                                                                _content_type="application/json-patch+json")
            log.info("webhook caBundle patched", extra={"configuration": name})
        except ApiException as exc:
            if exc.status not in (409, 422):
                raise
        return True

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                wait = await self.sync()
            except Exception as exc:  # the API server away: try again soon
                self.metrics.sync_errors.inc()
                log.warning("certificate sync failed", extra={"error": str(exc)[:300]})
                wait = 10.0
            try:
                await asyncio.wait_for(stop.wait(), timeout=min(wait, 300.0))
            except TimeoutError:
                pass


class SecretCertificate:
    """The webhook's serving certificate read from its Secret through the API (every replica, leader
    or not), loaded into one SSL context that is updated in place when the Secret changes.

    A certificate and key are first loaded into a scratch context: a pair that does not load (corrupt, or
    a key of another certificate) is refused and the previous one stays served (loading it into the live
    context would leave that context with the new certificate and the old key, and fail every handshake).
    ``metrics.certificate_refused`` is 1 while the Secret holds such a pair."""

    def __init__(self, api: Any, namespace: str, name: str = WEBHOOK_SECRET, every_s: float = 30.0,
                 metrics: Any = None) -> None:
        from kubernetes_asyncio import client

        from warmscale.warmpool.webhook import WebhookMetrics

        self.core: Any = client.CoreV1Api(api) if api is not None else None  # None: only :meth:`offer`
        self.namespace, self.name, self.every_s = namespace, name, every_s
        self.metrics = metrics or WebhookMetrics()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._dir = Path(tempfile.mkdtemp(prefix="warmscale-webhook-tls-"))
        self._loaded: bytes | None = None
        self._refused: bytes | None = None
        self.loads = 0
        self.refusals = 0

    def _load_into(self, context: ssl.SSLContext, crt: bytes, key: bytes) -> None:
        cert_file, key_file = self._dir / "tls.crt", self._dir / "tls.key"
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        cert_file.write_bytes(crt)
        try:
            context.load_cert_chain(cert_file, key_file)
        finally:
            key_file.unlink(missing_ok=True)

    def offer(self, crt: bytes | None, key: bytes | None) -> bool:
        """Serve ``crt``/``key`` if they load (else keep the previous pair); True when a pair is served."""
        if not crt or not key:
            problem: str | None = "tls.crt or tls.key is empty"
        elif crt + key == self._loaded:
            self.metrics.certificate_refused.set(0)
            return True
        else:
            problem = pair_problem(crt, key)
        if problem is None:
            assert crt and key
            try:
                self._load_into(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), crt, key)
            except (ssl.SSLError, ValueError, OSError) as exc:
                problem = f"it does not load: {exc}"
        if problem is not None:
            self.metrics.certificate_refused.set(1)
            seen = (crt or b"") + (key or b"")
            if seen != self._refused:  # once per content, not every refresh
                self._refused = seen
                self.refusals += 1
                log.warning("webhook certificate in the Secret refused; the previous one is still served",
                            extra={"secret": f"{self.namespace}/{self.name}", "problem": problem[:200],
                                   "serving": self._loaded is not None})
            return self._loaded is not None
        assert crt and key
        self._load_into(self.context, crt, key)  # new handshakes use it at once
        self._loaded, self._refused = crt + key, None
        self.loads += 1
        cert = _load(crt)
        if cert is not None:
            self.metrics.certificate_not_after.set(cert.not_valid_after_utc.timestamp())
        self.metrics.certificate_refused.set(0)
        log.info("webhook certificate loaded", extra={"secret": f"{self.namespace}/{self.name}"})
        return True

    async def refresh(self) -> bool:
        """Load the Secret's certificate if it changed; True when a certificate is served."""
        from warmscale.warmpool.kube import read_raw

        secret = await read_raw(self.core.read_namespaced_secret, self.name, self.namespace)
        data = _decode(secret) or {}
        return self.offer(data.get("tls.crt"), data.get("tls.key"))

    async def wait_ready(self, stop: asyncio.Event) -> bool:
        while not stop.is_set():
            try:
                if await self.refresh():
                    return True
            except Exception as exc:
                log.info("waiting for the webhook certificate", extra={"error": str(exc)[:200]})
            try:
                await asyncio.wait_for(stop.wait(), timeout=2.0)
            except TimeoutError:
                pass
        return False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.every_s)
            except TimeoutError:
                pass
            try:
                await self.refresh()
            except Exception as exc:
                log.warning("webhook certificate refresh failed", extra={"error": str(exc)[:200]})
