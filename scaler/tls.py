"""TLS for the gRPC server, matching KEDA's external scaler client settings.

KEDA side (trigger metadata / TriggerAuthentication): ``enableTLS: "true"`` plus ``caCert`` (the CA
that signed ``--tls-cert``); for mutual TLS also ``tlsClientCert`` + ``tlsClientKey`` signed by the CA
given here as ``--tls-client-ca``. With ``--tls-client-ca`` the server requires a client certificate.

The files are re-read when they change (checked at each new TLS handshake, at most once a second), so
a rotated certificate (a mounted Secret the kubelet updates, written by the warm-pool controller's
certificate manager) is served without a restart; established connections keep theirs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import grpc

log = logging.getLogger("warmscale.scaler.tls")


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path!r}: {exc}") from exc
    if b"-----BEGIN" not in data:
        raise ValueError(f"{what} {path!r} is not PEM")
    return data


class CertificateFiles:
    """The PEM files of the serving certificate, re-read when they change (see the module docstring)."""

    def __init__(self, cert: str, key: str, client_ca: str | None = None, min_interval_s: float = 1.0) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp = self._fingerprint()
        self.reloads = 0
        self.initial = self._configuration()

    def _fingerprint(self) -> tuple[tuple[float, int], ...]:
        out = []
        for p in (self.cert, self.key, self.client_ca):
            if p:
                try:
                    st = os.stat(p)
                    out.append((st.st_mtime, st.st_size))
                except OSError:
                    out.append((0.0, -1))
        return tuple(out)

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        chain = _read(self.cert, "--tls-cert")
        private_key = _read(self.key, "--tls-key")
        root = _read(self.client_ca, "--tls-client-ca") if self.client_ca else None
        cfg: grpc.ServerCertificateConfiguration = grpc.ssl_server_certificate_configuration(
            [(private_key, chain)], root_certificates=root)
        return cfg

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's per-handshake callback: a new configuration when the files changed, else None."""
        with self._lock:
            now = time.monotonic()
            if now - self._checked < self.min_interval_s:
                return None
            self._checked = now
            stamp = self._fingerprint()
            if stamp == self._stamp:
                return None
            try:
                cfg = self._configuration()
            except ValueError as exc:  # half-written (a Secret update in progress): keep the current one
                log.warning("certificate files unreadable; serving the previous ones", extra={"error": str(exc)})
                return None
            self._stamp = stamp
            self.reloads += 1
            log.info("serving certificate reloaded", extra={"cert": self.cert, "reloads": self.reloads})
            return cfg


def server_credentials(cert: str, key: str, client_ca: str | None = None,
                       files: CertificateFiles | None = None) -> grpc.ServerCredentials:
    """Server credentials from PEM files, reloaded when they change; ``client_ca`` turns on mandatory
    client certificates."""
    files = files or CertificateFiles(cert, key, client_ca)
    creds: grpc.ServerCredentials = grpc.dynamic_ssl_server_credentials(
        files.initial, files.fetch, require_client_authentication=client_ca is not None)
    return creds
