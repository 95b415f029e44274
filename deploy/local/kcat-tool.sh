#!/usr/bin/env bash
# Make `kcat` (librdkafka's command-line client) available for tests/integration/test_codecs.py,
# which publishes compressed batches through it as connectors on librdkafka do: a no-op when it
# is on PATH, else Debian's `kcat` package through apt-get (non-interactive, no recommends).
#   env: KCAT (a binary to use instead; must exist)
set -euo pipefail

if [ -n "${KCAT:-}" ]; then
  [ -x "$KCAT" ] || { echo "kcat-tool: KCAT=$KCAT is not executable" >&2; exit 1; }
  echo "kcat-tool: $KCAT"; exit 0
fi
if command -v kcat >/dev/null 2>&1; then
  echo "kcat-tool: $(command -v kcat)"; exit 0
fi
# shellcheck source=deploy/local/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_sudo kcat-tool
apt_install kcat
command -v kcat >/dev/null 2>&1 || { echo "kcat-tool: apt-get installed no kcat on PATH" >&2; exit 1; }
echo "kcat-tool: installed $(command -v kcat)"
