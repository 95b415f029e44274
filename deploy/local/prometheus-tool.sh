#!/usr/bin/env bash
# Make the `prometheus` binary available for tests/integration/test_prometheus.py: a no-op when
# it is on PATH, else Debian's `prometheus` package through apt-get (non-interactive, without
# the recommended node exporter). Only the binary is wanted: the package's own service must
# not start, so invoke-rc.d is denied for the install (a policy-rc.d answering 101, unless one
# already exists) and, where systemd runs, the unit is disabled and stopped afterwards. Fails
# if anything listens on the package's port 9090 that did not before.
#   env: PROMETHEUS (a binary to use instead; must exist)
set -euo pipefail

if [ -n "${PROMETHEUS:-}" ]; then
  [ -x "$PROMETHEUS" ] || { echo "prometheus-tool: PROMETHEUS=$PROMETHEUS is not executable" >&2; exit 1; }
  "$PROMETHEUS" --version 2>&1 | head -1; exit 0
fi
if command -v prometheus >/dev/null 2>&1; then
  echo "prometheus-tool: $(command -v prometheus): $(prometheus --version 2>&1 | head -1)"; exit 0
fi
# shellcheck source=deploy/local/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_sudo prometheus-tool || { echo "prometheus-tool: or set PROMETHEUS=/path/to/prometheus" >&2; exit 1; }
T0=$(date +%s)
listening_9090() { command -v ss >/dev/null 2>&1 && ss -Hltn 'sport = :9090' | grep -q .; }
BUSY_BEFORE=""
if listening_9090; then BUSY_BEFORE=1; fi

POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=""
if [ ! -e "$POLICY" ]; then
  # ours only for the install: the package's postinst must not start its service
  printf '#!/bin/sh\n# prometheus-tool.sh (transcript-owner): temporary, removed after install\nexit 101\n' \
    | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod 755 "$POLICY"
  OWN_POLICY=1
fi
cleanup() { if [ -n "$OWN_POLICY" ]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT

apt_install prometheus -- -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold

# where systemd runs, the unit was enabled (not started): disable it, stop it if it runs anyway
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi

if [ -z "$BUSY_BEFORE" ] && listening_9090; then
  echo "prometheus-tool: something listens on :9090 since the install:" >&2
  ss -ltnp 'sport = :9090' >&2
  exit 1
fi
echo "prometheus-tool: installed $(command -v prometheus): $(prometheus --version 2>&1 | head -1)" \
     "in $(( $(date +%s) - T0 ))s"
