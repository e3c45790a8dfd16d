# The minimal Debian unstable chroot that tests/pythons.sh and tests/wine10.sh each
# keep in a cache of their own: sourced by them, not run.  The caller sets CACHE (the
# cache), ROOT ($CACHE/sid), MIRROR, MOUNTS (host directories bound into the chroot,
# in mount order) and defines say().

# /proc/mounts writes a space in a mount point as \040.
mounted() { awk -v want="${1// /\\040}" '$2 == want { found = 1 } END { exit !found }' /proc/mounts; }

# Every bind mount under the chroot at $1, in the reverse of their order.
unmount_all() {
    local root="$1" index point
    for ((index = ${#MOUNTS[@]} - 1; index >= 0; index--)); do
        point="${MOUNTS[$index]}"
        while mounted "$root$point"; do umount -l "$root$point"; done
    done
}

needs_root() {
    if [ "$(id -u)" != 0 ]; then
        say "needs root (debootstrap, mount, chroot); run it as root or under sudo"
        exit 1
    fi
}

# One run at a time (descriptor 9 holds $CACHE/.lock until the caller exits; children
# that outlive it are given 9>&-); then whatever *.tmp.* is in the cache is an
# interrupted run's leftover, unmounted and removed.
take_the_cache() {
    local stale
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
    for stale in "$CACHE"/*.tmp.*; do
        [ -e "$stale" ] || continue
        unmount_all "$stale"
        rm -rf --one-file-system "$stale"
    done
}

# make_sid PACKAGES HOW-LONG: a new chroot with PACKAGES (comma-separated) in place of
# whatever $ROOT holds, made in a temporary directory and renamed into place, so that
# an interrupted run never leaves a half-made chroot a later run would trust.
make_sid() {
    local packages="$1" how_long="$2" tmp
    if ! command -v debootstrap >/dev/null; then
        say "installing debootstrap"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    if [ -e "$ROOT" ]; then
        unmount_all "$ROOT"
        rm -rf --one-file-system "$ROOT"
    fi
    tmp="$CACHE/sid.tmp.$$"
    say "debootstrap sid with $packages into $tmp ($how_long)"
    if ! debootstrap --variant=minbase --include="$packages" sid "$tmp" "$MIRROR" \
            >"$CACHE/debootstrap.log" 2>&1; then
        say "debootstrap failed; see $CACHE/debootstrap.log"
        tail -n 20 "$CACHE/debootstrap.log" >&2
        exit 1
    fi
    rm -rf "$tmp/var/cache/apt/archives/"*.deb
    mv "$tmp" "$ROOT"
}

# Each of MOUNTS bound into the chroot, unless /proc/mounts lists it already.
bind_mounts() {
    local point
    for point in "${MOUNTS[@]}"; do
        mkdir -p "$ROOT$point"
        mounted "$ROOT$point" || mount --bind "$point" "$ROOT$point"
    done
}
