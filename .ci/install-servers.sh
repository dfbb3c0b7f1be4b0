#!/usr/bin/env bash
# Install the real servers the integration tests start themselves: Prometheus and Redis (Debian
# packages). Idempotent. The packages' own systemd services are stopped and disabled: the tests run
# private instances on free 127.0.0.1 ports with temporary data directories.
set -euo pipefail

PKGS=(prometheus redis-server)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages' postinst scripts from starting their daemons where there is no init system.
  policy_added=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    policy_added=1
  fi
  lists=(/var/lib/apt/lists/*_Packages)
  if [ ! -e "${lists[0]}" ] || ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    $SUDO apt-get update
  fi
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
  if [ -n "$policy_added" ]; then
    $SUDO rm -f /usr/sbin/policy-rc.d
  fi
fi

# The tests never use the system services; don't leave them running on the default ports.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  for svc in prometheus redis-server; do
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
  done
elif command -v service >/dev/null 2>&1; then
  for svc in prometheus redis-server; do
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi

for bin in /usr/bin/prometheus /usr/bin/redis-server; do
  if [ ! -x "$bin" ]; then
    echo "install-servers: $bin missing after install" >&2
    exit 1
  fi
done
echo "install-servers: $(/usr/bin/prometheus --version 2>&1 | head -1)"
echo "install-servers: $(/usr/bin/redis-server --version)"
