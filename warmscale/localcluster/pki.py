"""Certificates and keys for a local control plane (python ``cryptography``).

One CA signs the apiserver serving certificate (127.0.0.1 / localhost) and the client
certificates of the admin (``O=system:masters``), the controller-manager and the
scheduler. A separate RSA key pair signs service-account tokens. A front-proxy CA signs
the client certificate the apiserver presents to aggregated API servers.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PKI files."""

    ca: CertPair
    serving: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    sa_private_key: Path
    sa_public_key: Path
    front_proxy_ca: CertPair
    front_proxy_client: CertPair


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _write_key(path: Path, key: PrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _leaf_builder(
    subject: x509.Name, ca_cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    """A leaf certificate's builder: not a CA, digital signature only."""
    return (
        _builder(subject, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _make_ca(
    directory: Path, stem: str = "ca", common_name: str = "warmscale-testbed-ca"
) -> tuple[CertPair, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return pair, key, cert


def _issue(
    directory: Path,
    stem: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    *,
    server: bool,
) -> CertPair:
    key = _key()
    builder = (
        _leaf_builder(subject, ca_cert, key)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return pair


def _make_sa_keys(directory: Path) -> tuple[Path, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "sa.key", directory / "sa.pub"
    _write_key(private, key)
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def generate(directory: Path) -> Pki:
    """Create all PKI files in ``directory`` (created if needed) and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key, ca_cert = _make_ca(directory)
    serving = _issue(directory, "apiserver", ca_key, ca_cert, _name("kube-apiserver"), server=True)
    admin = _issue(directory, "admin", ca_key, ca_cert, _name("warmscale-admin", "system:masters"), server=False)
    kcm = _issue(
        directory,
        "controller-manager",
        ca_key,
        ca_cert,
        _name("system:kube-controller-manager"),
        server=False,
    )
    scheduler = _issue(directory, "scheduler", ca_key, ca_cert, _name("system:kube-scheduler"), server=False)
    sa_private, sa_public = _make_sa_keys(directory)
    # Aggregated API servers (e.g. a KEDA metrics adapter) trust requests the apiserver proxies
    # with this client certificate.
    fp_ca, fp_key, fp_cert = _make_ca(directory, "front-proxy-ca", "warmscale-front-proxy-ca")
    fp_client = _issue(directory, "front-proxy-client", fp_key, fp_cert, _name("front-proxy-client"), server=False)
    return Pki(ca, serving, admin, kcm, scheduler, sa_private, sa_public, fp_ca, fp_client)


def make_ca(directory: Path, stem: str, common_name: str) -> CertPair:
    """A self-signed CA (``<stem>.crt``/``<stem>.key`` in ``directory``)."""
    directory.mkdir(parents=True, exist_ok=True)
    pair, _, _ = _make_ca(directory, stem, common_name)
    return pair


def issue_leaf(
    directory: Path,
    stem: str,
    ca: CertPair,
    common_name: str,
    *,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = True,
    client: bool = True,
) -> CertPair:
    """A leaf signed by ``ca`` (read from its files) with the given SANs and extended key usages."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    builder = (
        _leaf_builder(_name(common_name), ca_cert, key)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return pair
