#!/usr/bin/env bash
# Provide CPython 3.14 and 3.15 for the tests: Debian unstable's python3.14 and
# python3.15 in a minimal chroot made by debootstrap, with /tmp, /proc and /dev
# bound into it, and one two-line wrapper per interpreter in
#
#     ${XDG_CACHE_HOME:-~/.cache}/memprove-mcp-pythons/bin/python3.14, python3.15
#
# which tests/conftest.py and the `pyz` fixture find there.  A wrapper runs the
# chroot's interpreter in the caller's working directory (or "/" when that is
# not in the chroot), so it serves for any test whose files live under /tmp
# (the one directory the chroot shares).
#
# Needs root (debootstrap, mount, chroot) and the Debian mirror.  The first run
# pays about a minute; later runs only check the bind mounts (idempotent: each
# is made only when /proc/mounts does not list it).  The chroot is built in a
# temporary directory and renamed into place, so an interrupted run never
# leaves a half-made chroot that a later run would trust.
#
# Prints the wrappers' directory.  `tests/pythons.sh --remove` unmounts and
# deletes the chroot.
set -euo pipefail

VERSIONS=(3.14 3.15)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/memprove-mcp-pythons"
ROOT="$CACHE/sid"
BIN="$CACHE/bin"
MIRROR="${MEMPROVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
MOUNTS=(/tmp /proc /dev)

say() { echo "tests/pythons.sh: $*" >&2; }

# /proc/mounts writes a space in a mount point as \040.
mounted() { awk -v want="${1// /\\040}" '$2 == want { found = 1 } END { exit !found }' /proc/mounts; }

unmount_all() {
    local root="$1" point
    for point in "${MOUNTS[@]}"; do
        while mounted "$root$point"; do umount -l "$root$point"; done
    done
}

complete() {
    local version
    for version in "${VERSIONS[@]}"; do
        [ -x "$ROOT/usr/bin/python$version" ] || return 1
    done
}

if [ "${1:-}" = "--remove" ]; then
    [ -d "$ROOT" ] && unmount_all "$ROOT"
    rm -rf --one-file-system "$ROOT" "$BIN"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    say "needs root (debootstrap, mount, chroot); run it as root or under sudo"
    exit 1
fi

mkdir -p "$CACHE"
# One run at a time; then whatever sid.tmp.* is here is an interrupted run's leftover.
exec 9>"$CACHE/.lock"
flock 9
for stale in "$CACHE"/sid.tmp.*; do
    [ -e "$stale" ] || continue
    unmount_all "$stale"
    rm -rf --one-file-system "$stale"
done
if ! complete; then
    if ! command -v debootstrap >/dev/null; then
        say "installing debootstrap"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    # A chroot that lacks a version (VERSIONS grew): made again.
    if [ -e "$ROOT" ]; then
        unmount_all "$ROOT"
        rm -rf --one-file-system "$ROOT"
    fi
    tmp="$CACHE/sid.tmp.$$"
    packages="$(printf 'python%s,' "${VERSIONS[@]}")"
    say "debootstrap sid with ${packages%,} into $tmp (about a minute)"
    if ! debootstrap --variant=minbase --include="${packages%,}" sid "$tmp" "$MIRROR" \
            >"$CACHE/debootstrap.log" 2>&1; then
        say "debootstrap failed; see $CACHE/debootstrap.log"
        tail -n 20 "$CACHE/debootstrap.log" >&2
        exit 1
    fi
    rm -rf "$tmp/var/cache/apt/archives/"*.deb
    mv "$tmp" "$ROOT"
    complete || { say "the chroot lacks an interpreter: ${VERSIONS[*]}"; exit 1; }
fi

for point in "${MOUNTS[@]}"; do
    mkdir -p "$ROOT$point"
    mounted "$ROOT$point" || mount --bind "$point" "$ROOT$point"
done

mkdir -p "$BIN"
for version in "${VERSIONS[@]}"; do
    wrapper="$BIN/python$version"
    # Outside /tmp the caller's directory is not in the chroot: "/" then.
    printf '#!/bin/sh\nexec chroot %q /bin/sh -c '\''cd "$0" 2>/dev/null || cd /; exec /usr/bin/python%s "$@"'\'' "$PWD" "$@"\n' \
        "$ROOT" "$version" >"$wrapper.tmp"
    chmod 755 "$wrapper.tmp"
    mv "$wrapper.tmp" "$wrapper"
    (cd /tmp && "$wrapper" -c 'import sys; assert sys.version_info[:2] == tuple(map(int, sys.argv[1].split(".")))' "$version") \
        || { say "$wrapper does not run Python $version"; exit 1; }
done
echo "$BIN"
