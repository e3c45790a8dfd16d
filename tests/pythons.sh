#!/usr/bin/env bash
# Provide CPython 3.14 and 3.15 for the tests: Debian unstable's python3.14 and
# python3.15 in a minimal chroot made by debootstrap, with /tmp, /proc, /dev and the tests' private folder
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
# The tests' private folder (hardening_support.private_place) too: a kit is written only
# where no one else can change it (contract.md §6 rule 25), which /tmp is not.
PRIVATE=/var/lib/memprove-mcp-tests
MOUNTS=(/tmp /proc /dev "$PRIVATE")

say() { echo "tests/pythons.sh: $*" >&2; }

. "$(dirname "$0")/sid_chroot.sh"

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

needs_root
take_the_cache
if ! complete; then
    # A chroot that lacks a version (VERSIONS grew) is made again.
    packages="$(printf 'python%s,' "${VERSIONS[@]}")"
    make_sid "${packages%,}" "about a minute"
    complete || { say "the chroot lacks an interpreter: ${VERSIONS[*]}"; exit 1; }
fi
mkdir -p "$PRIVATE" && chmod 755 "$PRIVATE"
bind_mounts

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
