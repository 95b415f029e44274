#!/usr/bin/env bash
# `make image-tools`: buildah and mmdebstrap (Debian's packages) for `make image`; a no-op when
# both are on PATH, else apt-get (non-interactive, without recommends: chroot isolation needs
# no OCI runtime, and as root buildah's overlay driver needs no fuse-overlayfs).
set -euo pipefail

missing=()
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
if [ ${#missing[@]} -eq 0 ]; then
  echo "image-tools: $(buildah --version), mmdebstrap $(mmdebstrap --version | awk '{print $2}')"
  exit 0
fi
# shellcheck source=deploy/local/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/../local/apt.sh"
apt_sudo image-tools
T0=$(date +%s)
apt_install "${missing[@]}"
echo "image-tools: installed ${missing[*]} in $(( $(date +%s) - T0 ))s: $(buildah --version)"
