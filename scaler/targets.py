"""Which network addresses the scaler may connect to (``--allow-targets``), and which ScaledObject
names it accepts. Pure: parsing and membership only; resolving host names is the caller's job
(:mod:`scaler.target_guard`).

``--allow-targets`` is a comma-separated list of CIDRs (``10.0.0.0/8``, ``fd00::/8``), addresses
(``192.168.1.5``) and host names (``prometheus.monitoring.svc``). A target is allowed when **every**
address its host resolves to lies in an allowed network or is an address of an allowed host name
(those are resolved too): the check is on resolved addresses, so a name that points somewhere else
(DNS rebinding, a hostile record) does not pass because of its spelling.

The word ``private`` stands for :data:`PRIVATE_NETWORKS`, the ranges Kubernetes pod and service
networks are allocated from: the shipped install sets ``--allow-targets=private``, so a ScaledObject
cannot point the scaler at loopback (its own ports, sidecars), link-local addresses (the cloud
metadata service, 169.254.169.254) or the internet (docs/scaler.md, "Which targets").
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 1918, RFC 6598 (shared address space: GKE and EKS pod ranges may use it) and IPv6 unique local
# addresses (RFC 4193). Loopback, link-local, multicast and public addresses are not in it.
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
PRIVATE_KEYWORD = "private"

_HOSTNAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def ip(text: str) -> IPAddress | None:
    """``text`` as an address (IPv4-mapped IPv6 as IPv4, scope ids dropped), else None."""
    try:
        addr = ipaddress.ip_address(text.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


@dataclass(frozen=True)
class AllowTargets:
    networks: tuple[IPNetwork, ...] = ()
    hostnames: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> AllowTargets:
        """Parse the flag's value; raises ValueError naming the bad entry."""
        networks: list[IPNetwork] = []
        hosts: list[str] = []
        for raw in spec.split(","):
            item = raw.strip().lower()
            if not item:
                continue
            if item == PRIVATE_KEYWORD:
                networks.extend(ipaddress.ip_network(n) for n in PRIVATE_NETWORKS)
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
                continue
            except ValueError:
                pass
            if not _HOSTNAME.fullmatch(item):
                raise ValueError(f"--allow-targets: {raw.strip()!r} is neither a CIDR, an address nor a host name")
            hosts.append(item.rstrip("."))
        if not networks and not hosts:
            raise ValueError("--allow-targets: empty list")
        return cls(tuple(networks), tuple(hosts))

    def allows(self, address: str | IPAddress, host_addresses: Iterable[IPAddress] = ()) -> bool:
        """Whether ``address`` lies in an allowed network or is one of ``host_addresses`` (the
        resolved addresses of :attr:`hostnames`)."""
        addr = ip(address) if isinstance(address, str) else address
        if addr is None:
            return False
        if any(addr.version == n.version and addr in n for n in self.networks):
            return True
        return addr in set(host_addresses)

    def refused(self, addresses: Iterable[str | IPAddress], host_addresses: Iterable[IPAddress] = ()) -> list[str]:
        """The addresses (of one target) that are not allowed; empty when the target is allowed."""
        allowed_hosts = set(host_addresses)
        return [str(a) for a in addresses if not self.allows(a, allowed_hosts)]


def url_host(url: str) -> tuple[str, str | None]:
    """(scheme, host) of a URL (host None for ``unix://`` and URLs without one)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.scheme, None
    return parts.scheme, parts.hostname


def invalid_ref(namespace: str, name: str) -> tuple[str, str] | None:
    """(field, message) when a ScaledObjectRef's namespace/name is not a Kubernetes name: KEDA only
    sends real ones, and anything else (a URL, 10 kB of text) must not become a metric label."""
    if not _DNS_LABEL.fullmatch(namespace):
        return "namespace", "must be a Kubernetes namespace name (RFC 1123 label, at most 63 characters)"
    if not _DNS_SUBDOMAIN.fullmatch(name):
        return "name", "must be a Kubernetes object name (RFC 1123 subdomain, at most 253 characters)"
    return None
