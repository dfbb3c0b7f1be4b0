"""``--allow-targets`` at the edges: resolve, check, refuse (the pure rules: :mod:`scaler.targets`).

Two checks:

- **Admission** (a new ScaledObject's first RPC): the hosts of ``endpoints``, ``prometheusAddress``
  and ``redisAddress`` are resolved; any address outside the list -> ``INVALID_ARGUMENT`` naming the
  key (:class:`~scaler.config.ConfigError`). Nothing is tracked for it.
- **Every connection** of the scrape/Prometheus HTTP session (:meth:`TargetGuard.socket_factory`, given
  to aiohttp's connector): the address about to be dialled is checked again, so discovered pod IPs
  and names that resolve elsewhere later (DNS rebinding) are refused too -- that replica is unknown.
- **Every connection of a Redis queue source** (:meth:`TargetGuard.allows`, given to
  :class:`signals.sources.redis_queue.RedisQueueSource`): the host is resolved again on every connect
  and reconnect and only allowed addresses are dialled -- else that queue is unknown.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from typing import Any

from warmscale.scaler.config import ConfigError, ScalerConfig
from warmscale.scaler.targets import AllowTargets, IPAddress, ip, url_host
from warmscale.signals.redact import redact

log = logging.getLogger("warmscale.scaler.targets")

RESOLVE_SECONDS = 2.0
# The allowed host names are resolved again this often (their addresses may change).
HOSTS_REFRESH_SECONDS = 30.0


class TargetGuard:
    def __init__(self, allow: AllowTargets) -> None:
        self.allow = allow
        self._host_addresses: frozenset[IPAddress] = frozenset()
        self._hosts_at = -1e18

    @classmethod
    def from_flag(cls, spec: str | None) -> TargetGuard | None:
        return cls(AllowTargets.parse(spec)) if spec else None

    async def _resolve(self, host: str) -> list[IPAddress]:
        literal = ip(host)
        if literal is not None:
            return [literal]
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(RESOLVE_SECONDS):
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        out = [a for a in (ip(str(i[4][0])) for i in infos) if a is not None]
        if not out:
            raise OSError(f"{host} has no address")
        return out

    async def refresh_hosts(self, force: bool = False) -> None:
        """Resolve the allowed host names (at most every HOSTS_REFRESH_SECONDS)."""
        if not self.allow.hostnames or (not force and time.monotonic() - self._hosts_at < HOSTS_REFRESH_SECONDS):
            return
        self._hosts_at = time.monotonic()
        found: set[IPAddress] = set()
        for host in self.allow.hostnames:
            try:
                found.update(await self._resolve(host))
            except (OSError, TimeoutError) as exc:
                log.warning("allowed host does not resolve", extra={"host": host, "error": str(exc)})
        self._host_addresses = frozenset(found)

    def allows(self, address: str) -> bool:
        return self.allow.allows(address, self._host_addresses)

    async def check_config(self, cfg: ScalerConfig) -> None:
        """Raise :class:`ConfigError` naming the first key whose target is outside the list."""
        await self.refresh_hosts()
        targets: list[tuple[str, str]] = [("endpoints", u) for u in cfg.endpoints]
        if cfg.prometheus_address:
            targets.append(("prometheusAddress", cfg.prometheus_address))
        if cfg.redis_address:
            targets.append(("redisAddress", cfg.redis_address))
        if cfg.epp_address:
            targets.append(("eppAddress", cfg.epp_address))
        targets += [("dcgmEndpoints", u) for u in cfg.dcgm_endpoints]
        hosts: dict[str, list[IPAddress] | BaseException] = {}
        checked: list[tuple[str, str, str]] = []
        for key, url in targets:
            scheme, host = url_host(url)
            if host is None:
                raise ConfigError(key, f"{scheme}:// targets cannot be checked against --allow-targets")
            checked.append((key, url, host))
            hosts[host] = []
        # Distinct hosts resolved concurrently (a list of 1,000 endpoints costs one round of lookups).
        names = list(hosts)
        results = await asyncio.gather(*(self._resolve(h) for h in names), return_exceptions=True)
        hosts = dict(zip(names, results, strict=True))
        for key, url, host in checked:
            found = hosts[host]
            if isinstance(found, BaseException):
                raise ConfigError(key, f"{host} does not resolve ({found or 'timeout'}); --allow-targets "
                                       "checks resolved addresses")
            refused = self.allow.refused(found, self._host_addresses)
            if refused:
                raise ConfigError(key, f"{redact(url)} resolves to {', '.join(refused)}, outside --allow-targets")

    def socket_factory(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """aiohttp ``TCPConnector(socket_factory=...)``: refuse to dial an address outside the list."""
        family, type_, proto, _, sockaddr = addr_info
        address = str(sockaddr[0])
        if not self.allows(address):
            raise OSError(errno.EACCES, f"{address} is outside --allow-targets")
        return socket.socket(family=family, type=type_, proto=proto)
