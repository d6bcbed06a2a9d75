#!/usr/bin/env bash
# CI job: build deploy/Containerfile without any container registry and run the image.
#
# Debian's mmdebstrap makes a bookworm base with python3 and python3-venv, buildah imports it from the
# tarball into a private storage directory and builds the Containerfile on it with
# --build-arg PYTHON_IMAGE=<that base>; the image then runs `fakegpu --version`, `fakegpu demo` and
# `fakegpu slices`, and their output is checked.
#
# Two kinds of failure are told apart:
#   - the machine cannot build images at all (no root, apt cannot install the tools, no way to the Debian
#     mirror or the Python package index, no chroot/mounts): one line "image build skipped: ..." and exit 0;
#   - our image is broken (the Containerfile build fails, or the image's commands fail or print the wrong
#     thing): the log, and exit 1.
# Everything it creates (storage, images, containers, temp files) lives in one temp directory that is
# removed on exit; the installed apt packages stay, like any CI tool.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

BASE_IMAGE=localhost/fakegpu-ci-base:latest
IMAGE=localhost/fakegpu-ci:dev
SUITE=bookworm
HOST_CA=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}

skip() {
    echo "image build skipped: $*"
    exit 0
}

fail() {
    echo "image build FAILED: $*" >&2
    exit 1
}

# Prints the log of a failed step, so CI output says what went wrong.
show_log() {
    echo "---- last lines of $1 ----" >&2
    tail -n 40 "$1" >&2 || true
    echo "----" >&2
}

step_started=$SECONDS
# Prints how long the step just finished took (the CI log is the only record of the timings).
timed() {
    echo "image build: $1 took $((SECONDS - step_started)) s"
    step_started=$SECONDS
}

# ---- tools -------------------------------------------------------------------------------------------
if ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null; then
    [ "$(id -u)" = 0 ] || skip "buildah/mmdebstrap are missing and installing them needs root"
    command -v apt-get >/dev/null || skip "buildah/mmdebstrap are missing and there is no apt-get to install them"
    apt_log=$(mktemp)
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah mmdebstrap; } \
        >"$apt_log" 2>&1 </dev/null; then
        why=$(grep -E '^(E|Err):' "$apt_log" | head -n 1)
        rm -f "$apt_log"
        skip "apt-get could not install buildah and mmdebstrap (${why:-see the output of apt-get})"
    fi
    rm -f "$apt_log"
    command -v buildah >/dev/null && command -v mmdebstrap >/dev/null ||
        skip "apt-get installed buildah and mmdebstrap but they are not on PATH ($PATH)"
    timed "installing buildah and mmdebstrap"
fi
[ "$(id -u)" = 0 ] || skip "mmdebstrap's root mode and buildah's chroot isolation need root here"

# ---- private storage, removed on exit ------------------------------------------------------------------
WORK=$(mktemp -d /var/tmp/fakegpu-image-ci.XXXXXX)
export TMPDIR=$WORK/tmp
mkdir -p "$TMPDIR"
# vfs and chroot isolation need neither overlay mounts nor user namespaces, so they work inside a container.
BUILDAH=(buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs)
# buildah (containers/image) keeps a blob-info cache in /var/lib/containers/cache whatever --root says:
# remove that directory too when this run is what created it.
[ -e /var/lib/containers ] && had_containers_dir=1 || had_containers_dir=0
cleanup() {
    "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
    "${BUILDAH[@]}" rmi --all --force >/dev/null 2>&1 || true
    # A run stopped half-way can leave mmdebstrap's or a chroot's /proc, /sys and /dev mounts behind: unmount
    # them first, and never let rm cross into another filesystem.
    awk -v work="$WORK/" 'index($2, work) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
    rm -rf --one-file-system "$WORK"
    if [ "$had_containers_dir" = 0 ]; then rm -rf /var/lib/containers; fi
}
trap cleanup EXIT
# Stopped by a signal (a CI time-out), bash would skip the EXIT trap: exit instead, so it runs.
trap 'exit 143' TERM INT HUP

# ---- base image: Debian bookworm with python3, python3-venv and pip, from the Debian mirror -----------
# The machine's own Debian sources are used when they are for the same suite (a mirror or snapshot it can
# reach); otherwise mmdebstrap's default mirror.
mirror=()
for sources in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [ -f "$sources" ] && grep -q "$SUITE" "$sources"; then
        mirror=("$sources")
        break
    fi
done
if ! mmdebstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    --customize-hook='chroot "$1" ln -sf python3 /usr/bin/python' \
    "$SUITE" "$WORK/base.tar" "${mirror[@]}" >"$WORK/mmdebstrap.log" 2>&1 </dev/null; then
    why=$(grep -E '^E:' "$WORK/mmdebstrap.log" | head -n 1)
    skip "mmdebstrap could not make a $SUITE base here (${why:-see its log})"
fi
timed "mmdebstrap base"

if ! {
    ctr=$("${BUILDAH[@]}" from scratch) &&
        "${BUILDAH[@]}" add "$ctr" "$WORK/base.tar" / &&
        "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr" &&
        "${BUILDAH[@]}" commit -q "$ctr" "$BASE_IMAGE" &&
        "${BUILDAH[@]}" rm "$ctr"
} >"$WORK/import.log" 2>&1; then
    why=$(grep -v '^$' "$WORK/import.log" | tail -n 1)
    skip "buildah could not import the base into its storage (${why:-see its log})"
fi
rm -f "$WORK/base.tar"
timed "importing the base into buildah"

# ---- how pip inside the build reaches the package index -----------------------------------------------
# The host's CA bundle (this machine's TLS goes through an intercepting proxy) and any http(s) index the
# host's pip is set to use; both are mounted into the build's RUN steps only, never written to the image.
# Host-only settings (file:// indexes, local wheel directories, constraints) are left out on purpose.
host_pip() { python3 -m pip config get "$1" 2>/dev/null || true; }
index_url=${PIP_INDEX_URL:-$(host_pip global.index-url)}
extra_urls=${PIP_EXTRA_INDEX_URL:-$(host_pip global.extra-index-url)}
{
    echo "[global]"
    if [ -f "$HOST_CA" ]; then echo "cert = /etc/ssl/certs/ca-certificates.crt"; fi
    case $index_url in http://* | https://*) echo "index-url = $index_url" ;; esac
    extras=$(tr ' ' '\n' <<<"$extra_urls" | grep -E '^https?://' | tr '\n' ' ' || true)
    if [ -n "$extras" ]; then echo "extra-index-url = $extras"; fi
} >"$WORK/pip.conf"
MOUNTS=(-v "$WORK/pip.conf:/etc/pip.conf:ro")
if [ -f "$HOST_CA" ]; then MOUNTS+=(-v "$HOST_CA:/etc/ssl/certs/ca-certificates.crt:ro"); fi

# Can a container from the base run at all, and reach the index? If not, the machine cannot build the
# image, which is not our Containerfile's fault.
probe=$("${BUILDAH[@]}" from -q "${MOUNTS[@]}" "$BASE_IMAGE" 2>"$WORK/probe.log") ||
    skip "buildah could not make a container from the base ($(tail -n 1 "$WORK/probe.log"))"
"${BUILDAH[@]}" run --isolation chroot "$probe" -- python --version >>"$WORK/probe.log" 2>&1 ||
    skip "buildah could not run a command in a chroot here ($(tail -n 1 "$WORK/probe.log"))"
"${BUILDAH[@]}" run --isolation chroot "$probe" -- \
    python -m pip download -q --no-deps --dest /tmp/probe pip >>"$WORK/probe.log" 2>&1 ||
    skip "pip inside a build container cannot reach the package index ($(tail -n 1 "$WORK/probe.log"))"
"${BUILDAH[@]}" rm "$probe" >/dev/null
timed "probing the build environment"

# ---- the image itself: from here on a failure is ours --------------------------------------------------
if ! "${BUILDAH[@]}" bud --isolation chroot --layers=false "${MOUNTS[@]}" \
    --build-arg "PYTHON_IMAGE=$BASE_IMAGE" -f deploy/Containerfile -t "$IMAGE" "$REPO" \
    >"$WORK/build.log" 2>&1 </dev/null; then
    show_log "$WORK/build.log"
    fail "deploy/Containerfile did not build"
fi
timed "building deploy/Containerfile"

ctr=$("${BUILDAH[@]}" from -q "$IMAGE")
# Runs one fakegpu command in the image and checks that its output holds the expected text.
check() {
    local expect=$1
    shift
    local out=$WORK/run.log
    if ! "${BUILDAH[@]}" run --isolation chroot "$ctr" -- "$@" >"$out" 2>&1 </dev/null; then
        show_log "$out"
        fail "'$*' exited non-zero in the image"
    fi
    if ! grep -q -- "$expect" "$out"; then
        show_log "$out"
        fail "'$*' in the image did not print '$expect'"
    fi
    echo "image build: '$*' in the image: ok ($(grep -m 1 -- "$expect" "$out"))"
}
version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
check "^fakegpu $version " fakegpu --version
check "nvidia.com/gpu  *8  *8 " fakegpu demo
check "^kind: ResourceSlice" fakegpu slices
timed "running the image"
echo "image build: deploy/Containerfile built on a registry-free $SUITE base and ran fakegpu --version, demo and slices"
