"""Write kubeconfig files for the local control plane."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .pki import CertPair


def write(
    path: Path, server: str, ca_file: Path, user: str, *, client: CertPair | None = None, token: str | None = None
) -> Path:
    """Write a single-context kubeconfig (client certificate or bearer token) and return ``path``."""
    credentials: dict[str, Any] = {}
    if client is not None:
        credentials["client-certificate"] = str(client.cert)
        credentials["client-key"] = str(client.key)
    if token is not None:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "warmscale", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "warmscale", "context": {"cluster": "warmscale", "user": user}}],
        "current-context": "warmscale",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
