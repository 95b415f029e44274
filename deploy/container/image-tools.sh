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
if ! command -v apt-get >/dev/null 2>&1; then
  echo "image-tools: ${missing[*]} missing and there is no apt-get; install buildah and mmdebstrap" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "image-tools: apt-get needs root (or sudo)" >&2; exit 1; }
  SUDO="sudo"
fi
T0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
# the package lists: fetched when there are none, or when a candidate is unknown
for pkg in "${missing[@]}"; do
  if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    $SUDO apt-get update -qq
    break
  fi
done
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "image-tools: installed ${missing[*]} in $(( $(date +%s) - T0 ))s: $(buildah --version)"
