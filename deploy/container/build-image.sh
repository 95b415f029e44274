#!/usr/bin/env bash
# `make image`: build the OCI image of transcript-owner with buildah (no container engine).
#
# 1. The base: Debian bookworm with python3 (3.11), python3-venv, ca-certificates and tini, made
#    with mmdebstrap (as root) and imported into buildah's local storage as $BASE, unless an
#    image of that name is there already (its tag carries a hash of the recipe below, so a
#    changed recipe makes a new base). BASE=<image> skips this and builds on that image
#    instead (e.g. BASE=docker.io/library/python:3.11-slim-bookworm where a registry is
#    reachable); REBUILD_BASE=1 makes the base again (security updates).
# 2. The image: deploy/container/Containerfile, `buildah build --isolation chroot --layers`,
#    tagged $IMAGE:<version from pyproject.toml> and $IMAGE:latest.
#
# Environment: IMAGE (default localhost/transcript-owner), BASE, REBUILD_BASE, DEBIAN_MIRROR,
# DEBIAN_SECURITY_MIRROR, IMAGE_SOURCE (org.opencontainers.image.source; default: the git
# remote "origin", if any), STORAGE_DRIVER (buildah's; e.g. vfs where overlay cannot mount),
# BUILD_CA_BUNDLE (default: this host's CA bundle, $PIP_CERT or $SSL_CERT_FILE or
# /etc/ssl/certs/ca-certificates.crt): mounted over the base's bundle in the RUN steps only,
# so that pip trusts what this host trusts (a TLS-inspecting proxy's CA); never in the image.
# Set BUILD_CA_BUNDLE= (empty) to use the base's own bundle.
# The last line printed is "image: <name>:<version> <size>".
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-localhost/transcript-owner}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

for tool in buildah mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "build-image: $tool is missing: make image-tools" >&2; exit 2; }
done

VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE=${IMAGE_SOURCE-$(git config --get remote.origin.url 2>/dev/null || true)}

# --- 1. the base -----------------------------------------------------------------------------
base_args=(
    --variant=minbase --mode=root --format=tar
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr  # /bin -> usr/bin, no usrmerge (perl)
    --include=python3,python3-venv,ca-certificates,tini
    --aptopt='APT::Install-Recommends "false"'
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
)
sources=(
    "deb $DEBIAN_MIRROR bookworm main"
    "deb $DEBIAN_MIRROR bookworm-updates main"
    "deb $DEBIAN_SECURITY_MIRROR bookworm-security main"
)
if [[ -z ${BASE:-} ]]; then
    recipe=$(printf '%s\n' "${base_args[@]}" | sha256sum | cut -c1-12)
    BASE=localhost/transcript-owner-base:bookworm-$recipe
    if [[ -n ${REBUILD_BASE:-} ]] || ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
        echo "build-image: making the base $BASE with mmdebstrap"
        work=$(mktemp -d)
        ctr=
        trap '[[ -n $ctr ]] && buildah rm "$ctr" >/dev/null 2>&1; rm -rf "$work"' EXIT
        mmdebstrap "${base_args[@]}" bookworm "$work/rootfs.tar" "${sources[@]}" \
            > "$work/mmdebstrap.log" 2>&1 || { cat "$work/mmdebstrap.log" >&2; exit 1; }
        ctr=$(buildah from scratch)
        buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
        buildah config \
            --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            --env LANG=C.UTF-8 --cmd '["/bin/bash"]' \
            --label org.opencontainers.image.title=transcript-owner-base \
            --label org.opencontainers.image.description="Debian bookworm (mmdebstrap minbase) with python3, python3-venv, ca-certificates, tini" \
            "$ctr"
        buildah commit --quiet --rm "$ctr" "$BASE" >/dev/null
        ctr=
        rm -rf "$work"
        trap - EXIT
    else
        echo "build-image: reusing the base $BASE"
    fi
fi

# --- 2. the image ----------------------------------------------------------------------------
ca=${BUILD_CA_BUNDLE-${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}
mounts=()
[[ -n $ca && -f $ca ]] && mounts=(--volume "$(realpath "$ca"):/etc/ssl/certs/ca-certificates.crt:ro")
echo "build-image: building $IMAGE:$VERSION on $BASE"
# (awk, not head: head exits after one line, and with pipefail the SIGPIPE buildah then gets
# failed the build, exit 141, once the store held more than one image of the name)
previous=$(buildah images --quiet --no-trunc "$IMAGE:$VERSION" 2>/dev/null | awk 'NR == 1' || true)
buildah build --isolation chroot --layers --force-rm \
    --build-arg BASE="$BASE" --build-arg VERSION="$VERSION" \
    --build-arg REVISION="$REVISION" --build-arg SOURCE="$SOURCE" "${mounts[@]}" \
    -f deploy/container/Containerfile -t "$IMAGE:$VERSION" -t "$IMAGE:latest" .
current=$(buildah images --quiet --no-trunc "$IMAGE:$VERSION" | awk 'NR == 1')
# the image this build replaced (now untagged): removed unless something still uses it; the
# layer cache (intermediate images) stays
if [[ -n $previous && $previous != "$current" ]]; then
    buildah rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(buildah images --format '{{.Size}}' "$IMAGE:$VERSION" | awk 'NR == 1')
echo "image: $IMAGE:$VERSION $size"
