# shellcheck shell=bash
# Debian's packages for the tools tests need (kcat, prometheus, buildah, mmdebstrap); sourced by
# deploy/local/kcat-tool.sh, deploy/local/prometheus-tool.sh and deploy/container/image-tools.sh.

# apt_sudo ME: set SUDO to "" as root, else "sudo" (fails, saying why, without either or apt-get)
apt_sudo() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$1: there is no apt-get to install what is missing; install it by hand" >&2
    return 1
  fi
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "$1: apt-get needs root (or sudo)" >&2; return 1; }
    SUDO="sudo"
  fi
}

# apt_install PACKAGE... [-- APT-GET OPTION...]: non-interactive, without recommends; the package
# lists are fetched when there are none, or when a package's candidate is unknown. After apt_sudo.
apt_install() {
  local pkgs=() opts=() pkg
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do pkgs+=("$1"); shift; done
  if [ $# -gt 0 ]; then shift; opts=("$@"); fi
  export DEBIAN_FRONTEND=noninteractive
  for pkg in "${pkgs[@]}"; do
    if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      $SUDO apt-get update -qq
      break
    fi
  done
  $SUDO apt-get install -y -qq --no-install-recommends "${opts[@]}" "${pkgs[@]}" >/dev/null
}
