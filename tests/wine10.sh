#!/usr/bin/env bash
# Provide Claude Code's own Windows build for the interop tier
# (tests/interop/test_claude_code_windows.py): Wine 10 from Debian unstable in a
# minimal chroot made by debootstrap (Debian 12's Wine 8 cannot run claude.exe),
# with /tmp, /proc and /dev bound into it, and in that chroot
#
#     /opt/python3.13/python.exe       python.org's embeddable CPython 3.13 for
#                                      Windows (tests/windows.sh's, pinned by hash)
#     /opt/claude-code-V/claude.exe    npm's @anthropic-ai/claude-code-win32-x64 at
#                                      the version tests/interop/conftest.py pins
#     /var/lib/memprove/prefix         a Wine prefix set to Windows 10
#
# and four wrappers in ${XDG_CACHE_HOME:-~/.cache}/memprove-mcp-wine10/bin:
#
#     wine            Wine 10's loader in the chroot: `wine PROGRAM.exe ARGS...`, run in
#                     the caller's directory (or "/" when that is not in the chroot, so
#                     only files under /tmp are seen), with the caller's environment and
#                     WINEPREFIX (the prefix above when unset)
#     wineserver      the chroot's wineserver, likewise (`wineserver -k` ends a prefix)
#     python-win3.13  wine /opt/python3.13/python.exe
#     claude          wine /opt/claude-code-V/claude.exe
#
# claude.exe is a program of its own (Node is inside it): no Windows Node is needed.
#
# Needs root (debootstrap, mount, chroot), Debian's mirror, PyPI (through
# tests/windows.sh --pythons-only) and the npm registry (`npm pack`).  The first run pays
# about two and a half minutes and 3.4 GB (the chroot 1.6, the prefix 1.2, claude.exe 0.4
# and its tarball); later runs check the bind mounts and the wrappers only (about a second).
# Each part is made in a temporary directory and renamed into place, so an interrupted
# run never leaves a half-made part that a later run would trust.
#
# Prints the wrappers' directory.  `tests/wine10.sh --remove` stops the prefix's
# wineserver, unmounts and deletes the cache.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/memprove-mcp-wine10"
ROOT="$CACHE/sid"
BIN="$CACHE/bin"
MIRROR="${MEMPROVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
MOUNTS=(/tmp /proc /dev /dev/shm)        # in mount order; unmounted in reverse
# wine64-preloader, which tests/windows.sh explains: without it one start in several
# thousand exits 1 having printed nothing.
PACKAGES=wine,wine64,wine64-preloader
PYTHON_VERSION=3.13
# The one pin of Claude Code: the Linux tier's (NPM_CLIENTS in tests/interop/conftest.py).
CLAUDE_VERSION="$(sed -n 's/^ *"claude-code": ("@anthropic-ai\/claude-code", "\([^"]*\)"),$/\1/p' \
    tests/interop/conftest.py)"
CLAUDE_PACKAGE=@anthropic-ai/claude-code-win32-x64
CLAUDE_DIR="/opt/claude-code-$CLAUDE_VERSION"
PREFIX=/var/lib/memprove/prefix
WINESERVER=/usr/lib/x86_64-linux-gnu/wine/wineserver     # Debian keeps it off PATH
# How long a prefix's wineserver outlives its last process (as tests/windows.sh's).
PERSIST=120

say() { echo "tests/wine10.sh: $*" >&2; }

[ -n "$CLAUDE_VERSION" ] || { say "no claude-code pin found in tests/interop/conftest.py"; exit 1; }

. tests/sid_chroot.sh

# Wine's programs are there (Debian's /usr/bin/wine is an absolute link: followed in the chroot).
has_wine() {
    [ -d "$ROOT" ] && chroot "$ROOT" test -x /usr/bin/wine -a -x "$WINESERVER" \
        -a -x "$(dirname "$WINESERVER")/wine-preloader"
}

stop_wineserver() {
    has_wine && [ -d "$ROOT$PREFIX" ] && mounted "$ROOT/tmp" \
        && WINEPREFIX="$PREFIX" chroot "$ROOT" "$WINESERVER" -k </dev/null >/dev/null 2>&1 || true
}

if [ "${1:-}" = "--remove" ]; then
    if [ -d "$ROOT" ]; then
        stop_wineserver
        unmount_all "$ROOT"
    fi
    rm -rf --one-file-system "$CACHE"
    exit 0
fi

needs_root
take_the_cache

# -- the chroot: Wine 10 ---------------------------------------------------------
has_wine || make_sid "$PACKAGES" "about two minutes"

# An interrupted run's parts inside the chroot (the prefix's is over a gigabyte).
rm -rf "$ROOT"/opt/*.tmp.* "$ROOT"/var/lib/memprove/*.tmp.*

bind_mounts

# -- CPython 3.13 for Windows: tests/windows.sh's download, copied in ----------------
if [ ! -f "$ROOT/opt/python$PYTHON_VERSION/python.exe" ]; then
    windows_cache="$(tests/windows.sh --pythons-only 9>&-)"
    mkdir -p "$ROOT/opt"
    rm -rf "$ROOT/opt/python$PYTHON_VERSION.tmp.$$"
    cp -a "$windows_cache/python$PYTHON_VERSION" "$ROOT/opt/python$PYTHON_VERSION.tmp.$$"
    mv "$ROOT/opt/python$PYTHON_VERSION.tmp.$$" "$ROOT/opt/python$PYTHON_VERSION"
fi

# -- claude.exe --------------------------------------------------------------------
# `npm pack` checks the tarball against the registry's integrity; the tarball is kept,
# so that a chroot made again does not fetch it again.
tarball="$CACHE/downloads/anthropic-ai-claude-code-win32-x64-$CLAUDE_VERSION.tgz"
if [ ! -f "$ROOT$CLAUDE_DIR/claude.exe" ]; then
    if [ ! -f "$tarball" ]; then
        say "fetching $CLAUDE_PACKAGE@$CLAUDE_VERSION from npm (about 190 MB)"
        mkdir -p "$CACHE/downloads.tmp.$$"
        if ! (cd "$CACHE/downloads.tmp.$$" && npm pack --silent \
                "$CLAUDE_PACKAGE@$CLAUDE_VERSION" >"$CACHE/npm.log" 2>&1 9>&-); then
            say "npm pack $CLAUDE_PACKAGE@$CLAUDE_VERSION failed; see $CACHE/npm.log"
            tail -n 20 "$CACHE/npm.log" >&2
            exit 1
        fi
        mkdir -p "$CACHE/downloads"
        mv "$CACHE/downloads.tmp.$$/$(basename "$tarball")" "$tarball"
        rm -rf "$CACHE/downloads.tmp.$$"
    fi
    tmp="$ROOT$CLAUDE_DIR.tmp.$$"
    mkdir -p "$tmp"
    tar -xzf "$tarball" -C "$tmp" --strip-components=1 package/claude.exe
    # Without the Unix executable bit Wine runs it as the Windows program it is.
    chmod 644 "$tmp/claude.exe"
    mv "$tmp" "$ROOT$CLAUDE_DIR"
fi

# -- the prefix ----------------------------------------------------------------------
# Made once, with every stream on /dev/null (Wine's background services keep the
# streams of the process that started them), Windows 10, no Mono or Gecko prompt.
if [ ! -f "$ROOT$PREFIX/system.reg" ]; then
    tmp="$PREFIX.tmp.$$"
    say "making the Wine prefix (about 10 s)"
    rm -rf "$ROOT$tmp"
    mkdir -p "$(dirname "$ROOT$tmp")"
    env WINEPREFIX="$tmp" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=" \
        chroot "$ROOT" /bin/sh -c "wine wineboot --init && wine winecfg -v win10 && $WINESERVER -w" \
        </dev/null >/dev/null 2>&1 9>&-
    [ -f "$ROOT$tmp/system.reg" ] || { say "wineboot made no prefix in $ROOT$tmp"; exit 1; }
    mv "$ROOT$tmp" "$ROOT$PREFIX"
fi

# -- the wrappers --------------------------------------------------------------------
# `wine` runs Wine's loader in the chroot as the caller asked, with what Wine needs
# around it (as tests/windows.sh's wrappers): the prefix's session is started first
# by a process whose streams are /dev/null, under a lock, so that no background
# service holds the caller's pipes open once the program exits; a UTF-8 locale, so
# that non-ASCII paths and arguments pass unchanged.  The wrapper becomes chroot,
# which becomes Wine's loader, which becomes the program: the caller's pid is the
# Windows process.
mkdir -p "$BIN"
cat >"$BIN/wine.tmp" <<EOF
#!/bin/sh
# Made by tests/wine10.sh: Wine 10 (Debian unstable) in $ROOT.
export WINEPREFIX="\${WINEPREFIX:-$PREFIX}" WINEDEBUG="\${WINEDEBUG:--all}" WINEDLLOVERRIDES="mscoree,mshtml=" LC_ALL=C.UTF-8
root=$(printf %q "$ROOT")
(
    flock 9
    if chroot "\$root" $WINESERVER -p$PERSIST </dev/null >/dev/null 2>&1 9>&-; then
        chroot "\$root" wine wineboot </dev/null >/dev/null 2>&1 9>&-
    fi
) 9>>"\$root/var/lib/memprove/.session-lock"
exec chroot "\$root" /bin/sh -c 'cd "\$0" 2>/dev/null || cd /; exec wine "\$@"' "\$PWD" "\$@"
EOF
cat >"$BIN/wineserver.tmp" <<EOF
#!/bin/sh
# Made by tests/wine10.sh: Wine 10's wineserver in $ROOT.
export WINEPREFIX="\${WINEPREFIX:-$PREFIX}"
exec chroot $(printf %q "$ROOT") $WINESERVER "\$@"
EOF
printf '#!/bin/sh\nexec %q %q "$@"\n' "$BIN/wine" "/opt/python$PYTHON_VERSION/python.exe" \
    >"$BIN/python-win$PYTHON_VERSION.tmp"
printf '#!/bin/sh\nexec %q %q "$@"\n' "$BIN/wine" "$CLAUDE_DIR/claude.exe" >"$BIN/claude.tmp"
for name in wine wineserver "python-win$PYTHON_VERSION" claude; do
    chmod 755 "$BIN/$name.tmp"
    mv "$BIN/$name.tmp" "$BIN/$name"
done

# -- they run what they say --------------------------------------------------------
got="$(cd /tmp && "$BIN/python-win$PYTHON_VERSION" -c \
    'import os, sys; print("%s %d.%d" % (os.name, sys.version_info[0], sys.version_info[1]))' \
    </dev/null 2>&1 9>&- | cat)" || true
got="${got%$'\r'}"
[ "$got" = "nt $PYTHON_VERSION" ] || { say "$BIN/python-win$PYTHON_VERSION does not run Windows Python $PYTHON_VERSION: $got"; exit 1; }
got="$(cd /tmp && "$BIN/claude" --version </dev/null 2>&1 9>&- | cat)" || true
got="${got%$'\r'}"
[ "$got" = "$CLAUDE_VERSION (Claude Code)" ] || { say "$BIN/claude does not run Claude Code $CLAUDE_VERSION: $got"; exit 1; }
echo "$BIN"
