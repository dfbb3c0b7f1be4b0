"""TLS for the gRPC server, matching KEDA's external scaler client settings.

KEDA side (trigger metadata / TriggerAuthentication): ``enableTLS: "true"`` plus ``caCert`` (the CA
that signed ``--tls-cert``); for mutual TLS also ``tlsClientCert`` + ``tlsClientKey`` signed by the CA
given here as ``--tls-client-ca``. With ``--tls-client-ca`` the server requires a client certificate.
"""

from __future__ import annotations

from pathlib import Path

import grpc


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path!r}: {exc}") from exc
    if b"-----BEGIN" not in data:
        raise ValueError(f"{what} {path!r} is not PEM")
    return data


def server_credentials(cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    """Server credentials from PEM files; ``client_ca`` turns on mandatory client certificates."""
    chain = _read(cert, "--tls-cert")
    private_key = _read(key, "--tls-key")
    root = _read(client_ca, "--tls-client-ca") if client_ca else None
    creds: grpc.ServerCredentials = grpc.ssl_server_credentials(
        [(private_key, chain)], root_certificates=root, require_client_auth=root is not None
    )
    return creds
