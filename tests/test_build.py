"""Tests of build_zipapp.py and of the .pyz it builds.

Every build runs build_zipapp.py as a subprocess and writes into tmp_path,
never into the repository's dist/.  Tests that need the real memprove_mcp.py
skip while it is absent; the rest pack a small stand-in module.
"""

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness import PYTHON_VERSIONS, built_once, find_python, how_to_get, require_python, strict

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "build_zipapp.py"
# The archive's own programs, which the build reads from pyz/ beside itself.
PROGRAMS = ROOT / "pyz"
PROGRAM_NAMES = ["__main__.py", "bytecode_cache.py"]
REAL_MODULE = ROOT / "memprove_mcp.py"
SHEBANG = b"#!/usr/bin/env python3\n"
ENTRY_NAMES = ["__main__.py", "bytecode_cache.py", "memprove_mcp.py"]
PYC_NAME = re.compile(r"pyc/cpython-3\d+/memprove_mcp\.pyc\Z")


def entry_names(archive):
    """The source entries, checked to come first; the bytecode entries after them."""
    names = [info.filename for info in archive.infolist()]
    sources = len(ENTRY_NAMES)
    assert names[:sources] == ENTRY_NAMES, names
    assert names[sources:] == sorted(names[sources:])
    assert all(PYC_NAME.match(name) for name in names[sources:]), names
    return names


BYTECODE_LINE = re.compile(r"^  bytecode (cpython-3[0-9]+) from CPython 3\.[0-9]+\.[0-9]+\S* \(.+\)$")
VERSION_LINE = re.compile(r"^memprove-mcp \S+ \(([0-9a-f]{12})\)$")
BUILT_LINE = re.compile(r"^built (.+) \((\d+) bytes, sha256 ([0-9a-f]{64})\)$")
GUARD_LINE = re.compile(r"^memprove-mcp needs Python 3\.6 or newer; this is Python (\d+\.\d+\.\d+)\.$")

needs_real_module = pytest.mark.skipif(
    not REAL_MODULE.is_file(),
    reason="memprove_mcp.py is not in the repository yet; --version comes from it")

# A stand-in for memprove_mcp.py: same --version contract (digest of its own
# source, read through the zip's loader), and an f-string, which Python < 3.6
# cannot parse, so a guard that lets an old interpreter through shows up as a
# SyntaxError instead of passing by luck.  `origin` prints where its bytecode
# came from (BYTECODE_ORIGIN, set by __main__.py) and how it was loaded.
STAND_IN = b'''\
# memprove_mcp stand-in for the build tests
import hashlib
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:
        data = __loader__.get_data("memprove_mcp.py")   # the source, even when run from bytecode
        sys.stdout.write(f"memprove-mcp 0.0.0+stand-in ({hashlib.sha256(data).hexdigest()[:12]})\\n")
        return 0
    if argv == ["origin"]:
        module = sys.modules[__name__]
        sys.stdout.write("%s %s %s %s\\n" % (
            globals().get("BYTECODE_ORIGIN", "source"), __name__, module.__spec__.name,
            main.__code__.co_filename))
        return 0
    sys.stderr.write("stand-in: unexpected %r\\n" % (argv,))
    return 2
'''

OLD_PYTHONS = [("2.7.18", "python2.7")]     # 3.0-3.5 are not in pyenv here
# The build script runs on every Python the server does (entries stored, no compresslevel).
BUILD_VERSIONS = PYTHON_VERSIONS


@functools.lru_cache(maxsize=None)
def pyenv_roots():
    """Where pyenv keeps its versions: `pyenv root`, $PYENV_ROOT, /root/.pyenv."""
    roots = []
    try:
        found = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        if found.returncode == 0 and found.stdout.strip():
            roots.append(found.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    roots += [os.environ.get("PYENV_ROOT"), "/root/.pyenv"]
    unique = []
    for root in roots:
        if root and Path(root) not in unique:
            unique.append(Path(root))
    return tuple(unique)


def find_pyenv_python(version, name):
    for root in pyenv_roots():
        path = root / "versions" / version / "bin" / name
        if path.is_file() and os.access(str(path), os.X_OK):
            return str(path)
    return None


def pyenv_python(version, name):
    """The pyenv interpreter's path; skip when absent (fail instead when strict())."""
    path = find_pyenv_python(version, name)
    if path is None:
        message = "%s %s is not installed (looked under %s); get it with: pyenv install %s" % (
            name, version, ", ".join(str(root / "versions") for root in pyenv_roots()), version)
        if strict():
            pytest.fail(message + " (MEMPROVE_TEST_STRICT=1 requires it)")
        pytest.skip(message)
    return path


def found_pythons():
    """{minor: path} of every Python 3.6-3.15 the tests have."""
    return {minor: find_python(minor) for minor in PYTHON_VERSIONS if find_python(minor)}


def python_args():
    """--python for every interpreter the tests have, as the `pyz` fixture passes them."""
    args = []
    for path in found_pythons().values():
        args += ["--python", path]
    return args


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def run_build(*args, cwd, umask=None, python=sys.executable, script=BUILD_SCRIPT, env=None):
    """Run build_zipapp.py (in this environment, with `env` added); return the finished
    process (not checked)."""
    return subprocess.run(
        [python, str(script)] + [str(arg) for arg in args],
        cwd=str(cwd), capture_output=True, text=True, timeout=120,
        env=None if env is None else dict(os.environ, **env),
        preexec_fn=None if umask is None else (lambda: os.umask(umask)))


def copy_build_script(folder):
    """build_zipapp.py and the programs it packs, copied into folder: the script's path."""
    (folder / "pyz").mkdir()
    for name in PROGRAM_NAMES:
        shutil.copy(str(PROGRAMS / name), str(folder / "pyz" / name))
    shutil.copy(str(BUILD_SCRIPT), str(folder / "build_zipapp.py"))
    return folder / "build_zipapp.py"


def build(tmp_path, source_bytes=STAND_IN, name="memprove_mcp.pyz", out_dir=None, args=()):
    """Build from source_bytes with --source/--output in tmp_path; return the .pyz path."""
    source_dir = tmp_path / "src"
    source_dir.mkdir(parents=True, exist_ok=True)
    source = source_dir / "memprove_mcp.py"
    source.write_bytes(source_bytes)
    output = (out_dir or tmp_path / "out") / name
    done = run_build("--source", source, "--output", output, *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return output


def run_pyz(command, cwd, env=None):
    """Run a .pyz; by default in this environment with the bytecode cache in cwd,
    never the user's."""
    if env is None:
        env = dict(os.environ, XDG_CACHE_HOME=str(Path(cwd) / "xdg-cache"))
    return subprocess.run(command, cwd=str(cwd), capture_output=True, text=True,
                          timeout=120, env=env)


def assert_version(done, source_bytes, archive=None):
    """--version's first line names the source's digest; the real module's, run from
    `archive`, adds the archive's SHA-256 and path as a SHA256SUMS line has them."""
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    match = VERSION_LINE.match(lines[0])
    assert match, lines[0]
    assert match.group(1) == sha256(source_bytes)[:12]
    if archive is None:
        assert len(lines) == 1, done.stdout
    else:
        assert lines[1:] == ["sha256 %s  %s" % (sha256(Path(archive).read_bytes()),
                                                os.path.abspath(str(archive)))], done.stdout


def env_with_python3_first(tmp_path):
    """An environment whose PATH finds the interpreter under test as `python3`,
    so the shebang `/usr/bin/env python3` runs it and not whatever is first."""
    bin_dir = tmp_path / "python3-bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "python3"
    if not link.exists():
        link.symlink_to(sys.executable)
    env = dict(os.environ)
    env["PATH"] = str(bin_dir) + os.pathsep + env.get("PATH", "")
    return env


# --- reproducibility --------------------------------------------------------

@pytest.fixture
def module_source():
    """The real module's bytes when present, else the stand-in's."""
    return REAL_MODULE.read_bytes() if REAL_MODULE.is_file() else STAND_IN


def test_reproducible_across_dirs_mtimes_modes_umasks_and_cwds(tmp_path, module_source):
    # Copy A: default paths (next to the script), umask 022, odd mtimes, run
    # from a cwd holding a decoy memprove_mcp.py that must NOT be packed.
    a = tmp_path / "copy a"
    a.mkdir()
    copy_build_script(a)
    (a / "memprove_mcp.py").write_bytes(module_source)
    os.chmod(str(a / "memprove_mcp.py"), 0o600)
    os.utime(str(a / "memprove_mcp.py"), (1_000_000_000, 1_000_000_000))
    os.utime(str(a / "build_zipapp.py"), (1_200_000_000, 1_200_000_000))
    for name in PROGRAM_NAMES:
        os.chmod(str(a / "pyz" / name), 0o600)
        os.utime(str(a / "pyz" / name), (1_100_000_000, 1_100_000_000))
    decoy_cwd = tmp_path / "decoy"
    decoy_cwd.mkdir()
    (decoy_cwd / "memprove_mcp.py").write_bytes(b"print('decoy')\n")
    done_a = run_build(cwd=decoy_cwd, umask=0o022, script=a / "build_zipapp.py")
    assert done_a.returncode == 0, done_a.stderr
    out_a = a / "dist" / "memprove_mcp.pyz"

    # Copy B: explicit relative --source/--output from its own cwd, umask 077,
    # other mtimes and modes, and the programs in pyz/ with CRLF line ends, as a
    # checkout that converts them would leave them.
    b = tmp_path / "b" / "nested"
    b.mkdir(parents=True)
    copy_build_script(b)
    (b / "memprove_mcp.py").write_bytes(module_source)
    os.chmod(str(b / "memprove_mcp.py"), 0o755)
    os.utime(str(b / "memprove_mcp.py"), (1_700_000_000, 1_700_000_123))
    os.utime(str(b / "build_zipapp.py"), (1_600_000_000, 1_600_000_000))
    for name in PROGRAM_NAMES:
        program = b / "pyz" / name
        program.write_bytes(program.read_bytes().replace(b"\n", b"\r\n"))
        os.chmod(str(program), 0o755)
    done_b = run_build("--source", "memprove_mcp.py", "-o", "elsewhere/out.pyz",
                       cwd=b, umask=0o077, script=b / "build_zipapp.py")
    assert done_b.returncode == 0, done_b.stderr
    out_b = b / "elsewhere" / "out.pyz"

    bytes_a, bytes_b = out_a.read_bytes(), out_b.read_bytes()
    assert sha256(bytes_a) == sha256(bytes_b)
    with zipfile.ZipFile(str(out_a)) as archive:
        assert archive.read("memprove_mcp.py") == module_source   # not the decoy
    # The umask reaches neither content nor mode.
    assert out_a.stat().st_mode & 0o777 == 0o755
    assert out_b.stat().st_mode & 0o777 == 0o755
    # The printed lines tell the truth about the file, and so does SHA256SUMS beside it.
    for done, out, data in ((done_a, out_a, bytes_a), (done_b, out_b, bytes_b)):
        lines = done.stdout.splitlines()
        match = BUILT_LINE.match(lines[0])
        assert match, lines[0]
        assert Path(match.group(1)) == out
        assert int(match.group(2)) == len(data)
        assert match.group(3) == sha256(data)
        with zipfile.ZipFile(str(out)) as archive:
            tags = [name.split("/")[1] for name in archive.namelist() if name.startswith("pyc/")]
        assert sorted(BYTECODE_LINE.match(line).group(1) for line in lines[1:]) == sorted(tags)
        sums = out.parent / "SHA256SUMS"
        assert sums.read_text("ascii") == "%s  %s\n" % (sha256(data), out.name)
        assert sums.stat().st_mode & 0o777 == 0o644


def test_one_byte_change_changes_the_digest(tmp_path, module_source):
    first = build(tmp_path / "one", module_source)
    # Flip one bit of one byte inside the first line, a comment in both modules.
    assert module_source.startswith(b"#") and module_source.index(b"\n") > 6
    changed = module_source[:5] + bytes([module_source[5] ^ 0x01]) + module_source[6:]
    assert len(changed) == len(module_source)
    assert sum(x != y for x, y in zip(changed, module_source)) == 1
    compile(changed, "changed", "exec")     # still a valid module, so the build succeeds
    second = build(tmp_path / "two", changed)
    assert sha256(first.read_bytes()) != sha256(second.read_bytes())


def test_two_builds_in_a_row_are_identical(tmp_path):
    first = build(tmp_path, name="first.pyz")
    second = build(tmp_path, name="second.pyz")
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize("minor", BUILD_VERSIONS, ids=["py" + v for v in BUILD_VERSIONS])
def test_build_script_runs_and_agrees_on_every_python(tmp_path, minor):
    """build_zipapp.py runs on 3.7-3.15 and every one writes the same zip.  The
    script and source are copied under tmp_path (under /tmp), where the chroot's
    interpreters can read them too; --no-bytecode, since a chroot's build sees
    other interpreters than the host's."""
    python = require_python(minor)
    script = copy_build_script(tmp_path)
    source = tmp_path / "memprove_mcp.py"
    source.write_bytes(STAND_IN)
    reference = run_build("--source", source, "--output", tmp_path / "reference.pyz",
                          "--no-bytecode", cwd=tmp_path, script=script)
    assert reference.returncode == 0, reference.stderr
    done = run_build("--source", "memprove_mcp.py", "--output", "theirs.pyz", "--no-bytecode",
                     cwd=tmp_path, python=python, script="build_zipapp.py")
    assert done.returncode == 0, (minor, done.stderr)
    assert (tmp_path / "theirs.pyz").read_bytes() == (tmp_path / "reference.pyz").read_bytes(), \
        "Python %s built different bytes" % minor


def test_bytecode_of_every_python_is_reproducible(tmp_path):
    """Two builds with every interpreter the tests have write the same bytes."""
    first = build(tmp_path, REAL_MODULE.read_bytes() if REAL_MODULE.is_file() else STAND_IN,
                  name="first.pyz", args=python_args())
    second = build(tmp_path, REAL_MODULE.read_bytes() if REAL_MODULE.is_file() else STAND_IN,
                   name="second.pyz", args=python_args())
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(str(first)) as archive:
        names = entry_names(archive)
    for minor in found_pythons():
        assert "pyc/%s/memprove_mcp.pyc" % cache_tag(minor) in names


# --- the archive's layout ---------------------------------------------------

def test_archive_layout(tmp_path):
    pyz = build(tmp_path)
    data = pyz.read_bytes()
    assert data.startswith(SHEBANG)
    assert data.splitlines(keepends=True)[0] == SHEBANG
    assert pyz.stat().st_mode & 0o111 == 0o111
    with zipfile.ZipFile(str(pyz)) as archive:
        assert archive.testzip() is None
        infos = archive.infolist()
        entry_names(archive)
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.create_system == 3
            assert info.external_attr == 0o644 << 16
            assert info.compress_type == zipfile.ZIP_STORED      # no zlib in its bytes
        assert archive.read("memprove_mcp.py") == STAND_IN
        main_py = archive.read("__main__.py")
        assert archive.read("bytecode_cache.py") == (PROGRAMS / "bytecode_cache.py").read_bytes()
    main_py.decode("ascii")       # Python 2 refuses non-ASCII source without a coding line
    assert main_py.index(b"version_info < (3, 6)") < main_py.index(b"def load")
    # pyz/__main__.py with the digest of the packed source written in, on the
    # same line, so that a traceback's line numbers are those of pyz/.
    assert ('SOURCE_SHA256 = "%s"' % sha256(STAND_IN)).encode() in main_py
    assert main_py == (PROGRAMS / "__main__.py").read_bytes().replace(
        b"@SOURCE_SHA256@", sha256(STAND_IN).encode())
    # Nothing costly at start: only what running a zipapp has already imported
    # (os imports stat; posixpath or ntpath is os.path, each imported only on its own platform).
    imported = set(re.findall(rb"^\s*import ([\w.]+)", main_py, re.M))
    assert imported <= {b"sys", b"os", b"stat", b"marshal", b"zlib", b"importlib.util",
                        b"posixpath", b"ntpath"}, imported


def test_module_is_copied_byte_for_byte(tmp_path):
    """CRLF line ends, a latin-1 coding line and no final newline survive untouched."""
    odd = (b"# -*- coding: latin-1 -*-\r\n"
           b"NAME = '\xe9t\xe9'\r\n"
           b"def main(argv=None):\r\n"
           b"    return 0")
    pyz = build(tmp_path, odd)
    with zipfile.ZipFile(str(pyz)) as archive:
        assert archive.read("memprove_mcp.py") == odd


@needs_real_module
def test_real_module_is_packed_as_is(tmp_path):
    source = REAL_MODULE.read_bytes()
    pyz = build(tmp_path, source)
    with zipfile.ZipFile(str(pyz)) as archive:
        names = entry_names(archive)
        assert archive.read("memprove_mcp.py") == source
    # Bytecode of every Python the build finds by itself (pyenv, PATH), and of this one.
    for minor, path in found_pythons().items():
        if "memprove-mcp-pythons" not in path:       # the chroot wrappers are given, not found
            assert "pyc/%s/memprove_mcp.pyc" % cache_tag(minor) in names
    assert "pyc/%s/memprove_mcp.pyc" % sys.implementation.cache_tag in names


def cache_tag(minor):
    """3.11 -> cpython-311, the folder its bytecode goes in."""
    return "cpython-" + minor.replace(".", "")


def test_no_bytecode_packs_the_source_alone(tmp_path):
    output = tmp_path / "plain.pyz"
    source = tmp_path / "memprove_mcp.py"
    source.write_bytes(STAND_IN)
    done = run_build("--source", source, "--output", output, "--no-bytecode", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(str(output)) as archive:
        assert [info.filename for info in archive.infolist()] == ENTRY_NAMES


@pytest.fixture(scope="module")
def stand_in_with_all(tmp_path_factory):
    """The stand-in built with the bytecode of every interpreter the tests have (once
    per run: the xdist workers share it)."""
    return built_once(tmp_path_factory, "stand-in-all",
                      lambda folder: build(folder, args=python_args()))


def origin(done):
    """(BYTECODE_ORIGIN, __name__, spec name, co_filename) the stand-in printed."""
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return tuple(done.stdout.split())


@pytest.mark.parametrize("minor", PYTHON_VERSIONS, ids=["py" + v for v in PYTHON_VERSIONS])
def test_each_python_runs_its_shipped_bytecode(stand_in_with_all, tmp_path, minor):
    """pyc/<cache tag>/memprove_mcp.pyc is what runs: nothing compiled, nothing cached."""
    python = require_python(minor)
    done = run_pyz([python, str(stand_in_with_all), "origin"], cwd=tmp_path)
    assert origin(done) == ("shipped", "memprove_mcp", "memprove_mcp", "memprove_mcp.py")
    assert_version(run_pyz([python, str(stand_in_with_all), "--version"], cwd=tmp_path), STAND_IN)
    assert not (tmp_path / "xdg-cache").exists()


@needs_real_module
@pytest.mark.parametrize("minor", PYTHON_VERSIONS, ids=["py" + v for v in PYTHON_VERSIONS])
def test_each_python_starts_the_real_module_from_its_bytecode(pyz, tmp_path, minor):
    """The session's .pyz (bytecode of all ten) answers --version under each
    Python without compiling: no bytecode cache appears.  An archive MEMPROVE_TEST_PYZ
    names carries the bytecode of the Pythons its build was given (a release's notes
    list them): a Python it has none for is a skip that says so."""
    python = require_python(minor)
    if os.environ.get("MEMPROVE_TEST_PYZ", "").strip():
        with zipfile.ZipFile(str(pyz)) as archive:
            if "pyc/%s/memprove_mcp.pyc" % cache_tag(minor) not in archive.namelist():
                pytest.skip("the archive MEMPROVE_TEST_PYZ names carries no bytecode for "
                            "Python %s" % minor)
    done = subprocess.run([python, str(pyz), "--version"], cwd=str(tmp_path),
                          env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(str(pyz)) as archive:
        packed = archive.read("memprove_mcp.py")     # the module may have changed since
    assert VERSION_LINE.match(done.stdout.decode().splitlines()[0]).group(1) == sha256(packed)[:12]
    assert not (tmp_path / ".cache").exists()


def test_bytecode_with_a_foreign_magic_falls_back_to_the_source(tmp_path):
    pyz = build(tmp_path)
    mine = "pyc/%s/memprove_mcp.pyc" % sys.implementation.cache_tag
    spoiled = tmp_path / "spoiled.pyz"
    with zipfile.ZipFile(str(pyz)) as original, zipfile.ZipFile(str(spoiled), "w") as copy:
        for info in original.infolist():
            data = original.read(info.filename)
            copy.writestr(info, b"\0\0\r\n" + data[4:] if info.filename == mine else data)
    assert mine in zipfile.ZipFile(str(spoiled)).namelist()
    done = run_pyz([sys.executable, str(spoiled), "origin"], cwd=tmp_path)
    assert origin(done)[0] == "compiled"
    assert_version(run_pyz([sys.executable, str(spoiled), "--version"], cwd=tmp_path), STAND_IN)


# --- the bytecode cache (contract.md section 5) ------------------------------

def cache_tag_of(python):
    return subprocess.run([python, "-c", "import sys; print(sys.implementation.cache_tag)"],
                          cwd="/tmp", stdout=subprocess.PIPE, check=True,
                          timeout=60).stdout.decode().strip()


def without_own_bytecode(tmp_path, python=None, source=STAND_IN):
    """A .pyz without the bytecode of `python`'s cache tag: to it, an unknown Python."""
    python = python or sys.executable
    tag = cache_tag_of(python)
    pyz = build(tmp_path, source, name="unknown.pyz", args=["--exclude-tag", tag] + python_args())
    with zipfile.ZipFile(str(pyz)) as archive:
        assert "pyc/%s/memprove_mcp.pyc" % tag not in archive.namelist()
    return pyz, tag


def cache_env(tmp_path, cache_home, extra=None):
    """A clean environment whose user cache directory is cache_home."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / "home"),
           "LANG": "C.UTF-8"}
    if cache_home is not None:
        env["XDG_CACHE_HOME"] = str(cache_home)
    env.update(extra or {})
    return env


def cache_name(tag, source=STAND_IN, optimize=0):
    """The name the bytecode of source is cached under, by `python -O`*optimize."""
    return "memprove_mcp-%s.%s%s.pyc" % (sha256(source), tag,
                                         ".opt-%d" % optimize if optimize else "")


def cache_file(cache_home, tag, source=STAND_IN):
    return cache_home / "memprove-mcp" / cache_name(tag, source)


def start(python, pyz, tmp_path, env, *flags):
    done = run_pyz([python] + list(flags) + [str(pyz), "origin"], cwd=tmp_path, env=env)
    return origin(done)[0]


def compiled_once(tmp_path, python=None):
    """A .pyz unknown to `python`, started once so that it compiles its module and caches
    it under the cache home tmp_path/xdg: (pyz, env, the cache file)."""
    python = python or sys.executable
    pyz, tag = without_own_bytecode(tmp_path, python)
    cache_home = tmp_path / "xdg"
    env = cache_env(tmp_path, cache_home)
    assert start(python, pyz, tmp_path, env) == "compiled"
    return pyz, env, cache_file(cache_home, tag)


def newest_python():
    found = found_pythons()
    return found[max(found, key=lambda minor: tuple(map(int, minor.split("."))))]


@pytest.mark.parametrize("which", ["this", "newest"])
def test_unknown_python_compiles_once_then_starts_from_the_cache(tmp_path, which):
    python = sys.executable if which == "this" else newest_python()
    pyz, env, cached = compiled_once(tmp_path, python)
    assert cached.is_file()
    assert stat.S_IMODE(cached.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600
    assert sorted(p.name for p in cached.parent.iterdir()) == [cached.name]   # no temporary left
    before = cached.read_bytes()
    assert start(python, pyz, tmp_path, env) == "cached"
    assert start(python, pyz, tmp_path, env) == "cached"
    assert cached.read_bytes() == before
    # A standard hash-based .pyc of this source (plus a CRC-32 trailer).
    header = subprocess.run(
        [python, "-c", "import importlib.util as u, sys; sys.stdout.buffer.write("
         "u.MAGIC_NUMBER + b'\\3\\0\\0\\0' + u.source_hash(open(sys.argv[1], 'rb').read()))",
         str(tmp_path / "src" / "memprove_mcp.py")],
        cwd=str(tmp_path), stdout=subprocess.PIPE, timeout=60).stdout
    assert before[:16] == header
    assert_version(run_pyz([python, str(pyz), "--version"], cwd=tmp_path, env=env), STAND_IN)


def test_the_cache_defaults_to_home_dot_cache(tmp_path):
    pyz, tag = without_own_bytecode(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    for cache_home in (None, "", "relative/cache"):      # unset, empty, relative: ignored
        env = cache_env(tmp_path, cache_home)
        assert start(sys.executable, pyz, tmp_path, env) in ("compiled", "cached")
        assert cache_file(home / ".cache", tag).is_file()
    assert not (tmp_path / "relative").exists()
    assert sorted(p.name for p in home.iterdir()) == [".cache"]


@pytest.mark.parametrize("damage", ["bit flipped in the code", "truncated", "empty",
                                    "header only", "trailer wrong"])
def test_a_damaged_cache_file_is_ignored_and_replaced(tmp_path, damage):
    pyz, env, cached = compiled_once(tmp_path)
    good = cached.read_bytes()
    if damage == "bit flipped in the code":
        # In the marshalled code, where only the CRC-32 trailer can see it.
        at = good.index(b"stand-in: unexpected")
        bad = good[:at] + bytes([good[at] ^ 0x20]) + good[at + 1:]
    elif damage == "truncated":
        bad = good[:len(good) // 2]
    elif damage == "empty":
        bad = b""
    elif damage == "header only":
        bad = good[:16]
    else:
        bad = good[:-4] + bytes(4)
    cached.write_bytes(bad)
    assert start(sys.executable, pyz, tmp_path, env) == "compiled"
    assert cached.read_bytes() == good
    assert start(sys.executable, pyz, tmp_path, env) == "cached"


@pytest.mark.parametrize("foreign", ["another Python's", "another source's"])
def test_a_foreign_cache_file_is_ignored_and_replaced(tmp_path, foreign):
    pyz, tag = without_own_bytecode(tmp_path)
    cache_home = tmp_path / "xdg"
    env = cache_env(tmp_path, cache_home)
    cached = cache_file(cache_home, tag)
    if foreign == "another Python's":
        # What another interpreter cached for the same source, under this one's name.
        others = [path for minor, path in sorted(found_pythons().items())
                  if cache_tag(minor) != tag]
        if not others:
            mine = "%d.%d" % sys.version_info[:2]
            another = "3.12" if mine != "3.12" else "3.11"
            reason = ("needs a second Python besides this %s (no other of %s to %s is found); get "
                      "one with: %s" % (mine, PYTHON_VERSIONS[0], PYTHON_VERSIONS[-1],
                                        how_to_get(another)))
            if strict():
                pytest.fail(reason + " (MEMPROVE_TEST_STRICT=1 requires every Python)")
            pytest.skip(reason)
        other = others[0]
        other_pyz, other_tag = without_own_bytecode(tmp_path / "other", other)
        assert start(other, other_pyz, tmp_path, env) == "compiled"
        planted = cache_file(cache_home, other_tag).read_bytes()
    else:
        # What this interpreter cached for another source, under this source's name.
        changed = STAND_IN.replace(b"stand-in for the build tests", b"another stand-in, same size")
        other_pyz, _ = without_own_bytecode(tmp_path / "other", source=changed)
        assert start(sys.executable, other_pyz, tmp_path, env) == "compiled"
        planted = cache_file(cache_home, tag, changed).read_bytes()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(planted)
    assert start(sys.executable, pyz, tmp_path, env) == "compiled"
    assert cached.read_bytes() != planted
    assert start(sys.executable, pyz, tmp_path, env) == "cached"
    assert_version(run_pyz([sys.executable, str(pyz), "--version"], cwd=tmp_path, env=env),
                   STAND_IN)


@pytest.mark.parametrize("how", [["-B"], "PYTHONDONTWRITEBYTECODE"])
def test_nothing_is_written_under_dont_write_bytecode(tmp_path, how):
    pyz, tag = without_own_bytecode(tmp_path)
    cache_home = tmp_path / "xdg"
    flags, extra = (how, None) if isinstance(how, list) else ([], {how: "1"})
    env = cache_env(tmp_path, cache_home, extra)
    assert start(sys.executable, pyz, tmp_path, env, *flags) == "compiled"
    assert start(sys.executable, pyz, tmp_path, env, *flags) == "compiled"
    assert not cache_home.exists()
    # What is already cached is still read, as with any .pyc.
    assert start(sys.executable, pyz, tmp_path, cache_env(tmp_path, cache_home)) == "compiled"
    before = cache_file(cache_home, tag).read_bytes()
    assert start(sys.executable, pyz, tmp_path, env, *flags) == "cached"
    assert cache_file(cache_home, tag).read_bytes() == before


@pytest.mark.parametrize("obstacle", ["a file where the directory goes",
                                      "a file where the cache home goes"])
def test_an_unwritable_cache_directory_is_no_error(tmp_path, obstacle):
    pyz, tag = without_own_bytecode(tmp_path)
    cache_home = tmp_path / "xdg"
    if obstacle == "a file where the directory goes":
        cache_home.mkdir()
        (cache_home / "memprove-mcp").write_bytes(b"not a directory")
    else:
        cache_home.write_bytes(b"not a directory")
    snapshot = sorted(str(p) for p in tmp_path.rglob("*"))
    env = cache_env(tmp_path, cache_home)
    for _ in range(2):
        assert start(sys.executable, pyz, tmp_path, env) == "compiled"
        assert_version(run_pyz([sys.executable, str(pyz), "--version"], cwd=tmp_path, env=env),
                       STAND_IN)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == snapshot


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root: a non-root user cannot make a directory someone else's")
def test_a_cache_directory_of_another_user_is_neither_read_nor_written(tmp_path):
    pyz, env, cached = compiled_once(tmp_path)
    before = cached.read_bytes()
    os.chown(str(cached.parent), 65534, 65534)
    for _ in range(2):
        assert start(sys.executable, pyz, tmp_path, env) == "compiled"
    assert cached.read_bytes() == before
    assert cached.parent.stat().st_uid == 65534


def test_a_cache_directory_others_can_write_is_made_private_and_not_trusted(tmp_path):
    pyz, env, cached = compiled_once(tmp_path)
    os.chmod(str(cached.parent), 0o777)
    assert start(sys.executable, pyz, tmp_path, env) == "compiled"
    assert stat.S_IMODE(cached.parent.stat().st_mode) == 0o700
    assert start(sys.executable, pyz, tmp_path, env) == "cached"


# --- failures and the command line -------------------------------------------

def test_failed_build_keeps_the_old_archive_and_leaves_no_temp_file(tmp_path):
    out_dir = tmp_path / "out"
    good = build(tmp_path, out_dir=out_dir)
    before = good.read_bytes()
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"def main(:\n")
    done = run_build("--source", broken, "--output", good, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "does not compile" in done.stderr
    missing = run_build("--source", tmp_path / "no-such.py", "--output", good, cwd=tmp_path)
    assert missing.returncode == 1
    assert "cannot read" in missing.stderr
    assert good.read_bytes() == before
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([good.name, "SHA256SUMS"])


@pytest.mark.parametrize("fault", ["bytecode_cache.py missing", "no digest placeholder"])
def test_a_faulty_program_in_pyz_fails_the_build(tmp_path, fault):
    script = copy_build_script(tmp_path)
    (tmp_path / "memprove_mcp.py").write_bytes(STAND_IN)
    if fault == "bytecode_cache.py missing":
        (tmp_path / "pyz" / "bytecode_cache.py").unlink()
        expected = "cannot read %s" % (tmp_path / "pyz" / "bytecode_cache.py")
    else:
        main_py = tmp_path / "pyz" / "__main__.py"
        main_py.write_bytes(main_py.read_bytes().replace(b"@SOURCE_SHA256@", b"0" * 64))
        expected = "%s must hold @SOURCE_SHA256@ once" % main_py
    done = run_build("--no-bytecode", cwd=tmp_path, script=script)
    assert (done.returncode, done.stdout) == (1, "")
    assert expected in done.stderr
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())


def test_failure_while_writing_leaves_no_half_file(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("build_zipapp_under_test", str(BUILD_SCRIPT))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = tmp_path / "memprove_mcp.py"
    source.write_bytes(STAND_IN)
    output = tmp_path / "out" / "memprove_mcp.pyz"
    assert module.main(["--source", str(source), "--output", str(output)]) == 0
    before = output.read_bytes()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(module.os, "fsync", fail)
    assert module.main(["--source", str(source), "--output", str(output)]) == 1
    assert output.read_bytes() == before
    assert sorted(p.name for p in output.parent.iterdir()) == sorted([output.name, "SHA256SUMS"])


def test_usage(tmp_path):
    bad = run_build("--no-such-option", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert "usage:" in bad.stderr
    extra = run_build("surplus", cwd=tmp_path)
    assert extra.returncode == 2
    helped = run_build("--help", cwd=tmp_path)
    assert helped.returncode == 0
    for option in ("-o", "--output", "--source", "--python", "--exclude-tag", "--no-bytecode",
                   "--help"):
        assert option in helped.stdout


def test_main_returns_the_status(tmp_path):
    spec = importlib.util.spec_from_file_location("build_zipapp_main", str(BUILD_SCRIPT))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--bogus"]) == 2
    assert module.DEFAULT_SOURCE == str(ROOT / "memprove_mcp.py")
    assert module.DEFAULT_OUTPUT == str(ROOT / "dist" / "memprove_mcp.pyz")
    assert module.hash_based_pyc_entries(STAND_IN, []) == []


# --- running the .pyz ---------------------------------------------------------

@needs_real_module
def test_real_pyz_prints_its_version(tmp_path):
    source = REAL_MODULE.read_bytes()
    pyz = build(tmp_path, source)
    assert_version(run_pyz([sys.executable, str(pyz), "--version"], cwd=tmp_path), source, pyz)
    assert_version(run_pyz([sys.executable, "-I", str(pyz), "--version"], cwd=tmp_path), source,
                   pyz)
    assert_version(run_pyz([str(pyz), "--version"], cwd=tmp_path,
                           env=env_with_python3_first(tmp_path)), source, pyz)


def test_a_traceback_through_the_entry_names_the_lines_of_pyz_main(tmp_path):
    """The archive's __main__.py is pyz/__main__.py line for line: the line
    numbers a traceback gives in it are that file's."""
    pyz = build(tmp_path, b"def main(argv=None):\n    raise RuntimeError('raised by main')\n",
                args=["--no-bytecode"])
    done = run_pyz([sys.executable, str(pyz)], cwd=tmp_path)
    assert done.returncode == 1 and "RuntimeError: raised by main" in done.stderr, done.stderr
    frames = re.findall(r'File "%s", line (\d+), in (\S+)' % re.escape(
        str(pyz) + os.sep + "__main__.py"), done.stderr)
    lines = (PROGRAMS / "__main__.py").read_text().splitlines()
    assert [(name, lines[int(number) - 1].strip()) for number, name in frames] == [
        ("<module>", "sys.exit(run())"), ("run", "return module.main()")], done.stderr


def test_stand_in_pyz_runs_directly_and_through_python(tmp_path):
    pyz = build(tmp_path)
    assert_version(run_pyz([sys.executable, str(pyz), "--version"], cwd=tmp_path), STAND_IN)
    assert_version(run_pyz([str(pyz), "--version"], cwd=tmp_path,
                           env=env_with_python3_first(tmp_path)), STAND_IN)


@pytest.mark.parametrize("source_kind", ["stand-in", "real"])
def test_pyz_runs_from_a_path_with_a_space_and_through_a_symlink(tmp_path, source_kind):
    if source_kind == "real":
        if not REAL_MODULE.is_file():
            pytest.skip("memprove_mcp.py is not in the repository yet")
        source = REAL_MODULE.read_bytes()
    else:
        source = STAND_IN
    spaced = tmp_path / "dir with space"
    spaced.mkdir()
    # The build script itself also lives under the space.
    script = copy_build_script(spaced)
    (spaced / "memprove_mcp.py").write_bytes(source)
    done = run_build(cwd=tmp_path, script=script)
    assert done.returncode == 0, done.stderr
    pyz = spaced / "dist" / "memprove_mcp.pyz"
    link_dir = tmp_path / "links here"
    link_dir.mkdir()
    link = link_dir / "memprove link.pyz"
    link.symlink_to(pyz)
    env = env_with_python3_first(tmp_path)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    # The real module names the archive as it was run, the link's path through the link.
    named = (lambda path: path) if source_kind == "real" else (lambda path: None)
    for target in (pyz, link):
        assert_version(run_pyz([sys.executable, str(target), "--version"], cwd=elsewhere), source,
                       named(target))
        assert_version(run_pyz([str(target), "--version"], cwd=elsewhere, env=env), source,
                       named(target))
    # A relative path through the symlink, too.
    assert_version(run_pyz([sys.executable, os.path.join("..", "links here", link.name),
                            "--version"], cwd=elsewhere), source, named(link))


# --- the old-Python guard ---------------------------------------------------

@pytest.mark.parametrize("version,name", OLD_PYTHONS, ids=[n for _, n in OLD_PYTHONS])
def test_old_python_gets_one_line_and_status_1(tmp_path, version, name):
    python = pyenv_python(version, name)
    pyz = build(tmp_path)
    done = run_pyz([python, str(pyz), "--version"], cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines(keepends=True)
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith("\n")
    match = GUARD_LINE.match(lines[0].rstrip("\n"))
    assert match, lines[0]
    assert match.group(1) == version


@needs_real_module
def test_old_python_is_refused_before_the_real_module_is_read(tmp_path):
    python = pyenv_python("2.7.18", "python2.7")
    pyz = build(tmp_path, REAL_MODULE.read_bytes())
    done = run_pyz([python, str(pyz), "mcp", "serve"], cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert GUARD_LINE.match(done.stderr.rstrip("\n")) and done.stderr.count("\n") == 1


@pytest.mark.parametrize("minor", PYTHON_VERSIONS, ids=["py" + v for v in PYTHON_VERSIONS])
def test_supported_python_passes_the_guard(tmp_path, minor):
    """The positive control: 3.6 and newer are let through to main(), from the
    source when the archive has no bytecode."""
    python = require_python(minor)
    pyz = build(tmp_path, args=["--no-bytecode"])
    assert_version(run_pyz([python, str(pyz), "--version"], cwd=tmp_path), STAND_IN)


# --- the sum and the release (issue 41) ----------------------------------------

@pytest.mark.parametrize("checker", [["sha256sum", "-c"], ["shasum", "-a", "256", "-c"]],
                         ids=["sha256sum", "shasum"])
def test_the_sums_file_is_what_the_checkers_read(tmp_path, checker):
    """SHA256SUMS beside the archive passes `sha256sum -c` (Linux) and `shasum -a 256 -c`
    (macOS's), run in its folder as the README says, and one changed byte fails both."""
    if shutil.which(checker[0]) is None:
        pytest.skip("%s is not installed" % checker[0])
    pyz = build(tmp_path)
    done = subprocess.run(checker + ["SHA256SUMS"], cwd=str(pyz.parent), capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "memprove_mcp.pyz: OK\n"), done.stderr
    data = bytearray(pyz.read_bytes())
    data[-30] ^= 0x01
    pyz.write_bytes(bytes(data))
    done = subprocess.run(checker + ["SHA256SUMS"], cwd=str(pyz.parent), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "memprove_mcp.pyz: FAILED" in done.stdout, done


RELEASE_SOURCE = STAND_IN.replace(b"import hashlib\n", b'VERSION = "1.2.3"\nimport hashlib\n', 1)
CHANGELOG_TEXT = """# Changelog

## [Unreleased]

- Something after.

## [1.2.3] - 2026-12-07

### Added

- The thing users see.

## [1.2.2] - 2026-11-01

- Older.

[1.2.3]: https://example.invalid/compare/v1.2.2...v1.2.3
"""


def release_tree(tmp_path, changelog=CHANGELOG_TEXT):
    """A copy of the build script with a module of VERSION 1.2.3 and a CHANGELOG.md."""
    script = copy_build_script(tmp_path)
    (tmp_path / "memprove_mcp.py").write_bytes(RELEASE_SOURCE)
    if changelog is not None:
        (tmp_path / "CHANGELOG.md").write_text(changelog, "utf-8")
    return script


def test_a_release_build_writes_notes_that_name_what_rebuilds_it(tmp_path):
    """--release v1.2.3: the archive, its sum and RELEASE-NOTES.md (the changelog's section,
    the sum, each interpreter with its full version); only the --python interpreters are
    used, so the notes name every one, and a second build from them is the same bytes."""
    assert RELEASE_SOURCE != STAND_IN
    python = require_python("3.8")
    script = release_tree(tmp_path)
    alone = {"MEMPROVE_BUILD_PYTHONS": ""}      # .ci/run names the chroot's there: the notes would too
    done = run_build("--release", "v1.2.3", "--python", python, cwd=tmp_path, script=script,
                     env=alone)
    assert done.returncode == 0, done.stderr
    dist = tmp_path / "dist"
    assert sorted(p.name for p in dist.iterdir()) == [
        "RELEASE-NOTES.md", "SHA256SUMS", "memprove_mcp.pyz"]
    data = (dist / "memprove_mcp.pyz").read_bytes()
    with zipfile.ZipFile(str(dist / "memprove_mcp.pyz")) as archive:
        assert [n for n in archive.namelist() if n.startswith("pyc/")] == [
            "pyc/cpython-38/memprove_mcp.pyc"]          # none searched for
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    notes = (dist / "RELEASE-NOTES.md").read_text("utf-8")
    assert notes.startswith("### Added\n\n- The thing users see.\n\n### The archive\n"), notes
    assert "Something after" not in notes and "Older" not in notes and "example.invalid" not in notes
    assert "SHA-256 `%s`" % sha256(data) in notes
    assert "- `cpython-38`: CPython %s\n" % version in notes
    again = tmp_path / "again"
    again.mkdir()
    done = run_build("--release", "v1.2.3", "--python", python, "-o", again / "memprove_mcp.pyz",
                     cwd=tmp_path, script=script, env=alone)
    assert done.returncode == 0, done.stderr
    for name in ("memprove_mcp.pyz", "SHA256SUMS", "RELEASE-NOTES.md"):
        assert (again / name).read_bytes() == (dist / name).read_bytes(), name


@pytest.mark.parametrize("tag,changelog,expected", [
    ("v1.2.4", CHANGELOG_TEXT, "the tag v1.2.4 is not v1.2.3, the module's VERSION"),
    ("1.2.3", CHANGELOG_TEXT, "the tag 1.2.3 is not v1.2.3"),
    ("v1.2.3", CHANGELOG_TEXT.replace("[1.2.3] - 2026-12-07", "[1.2.3]"),
     "CHANGELOG.md's section [1.2.3] has no date"),
    ("v1.2.3", CHANGELOG_TEXT.replace("[1.2.3]", "[1.2.9]"),
     "CHANGELOG.md has no section ## [1.2.3] - YYYY-MM-DD"),
    ("v1.2.3", None, "cannot read"),
], ids=["other version", "no v", "undated", "no section", "no changelog"])
def test_a_release_build_refuses_a_tag_the_tree_does_not_hold(tmp_path, tag, changelog, expected):
    """Refused before anything is compiled or written: status 1, the reason, no dist/."""
    script = release_tree(tmp_path, changelog)
    done = run_build("--release", tag, cwd=tmp_path, script=script)
    assert (done.returncode, done.stdout) == (1, "")
    assert expected in done.stderr
    assert not (tmp_path / "dist").exists()


@needs_real_module
def test_the_repository_can_release_its_version(tmp_path):
    """The one version: pyproject.toml takes VERSION from the module, the installed package
    says the same, and the tree can build its release (CHANGELOG.md has the dated section)."""
    import importlib.metadata
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "memprove_mcp.VERSION"}
    version = re.search(r'(?m)^VERSION = "(.+)"$', REAL_MODULE.read_text("utf-8")).group(1)
    try:
        assert importlib.metadata.version("memprove-mcp") == version, \
            "the installed memprove-mcp is another version: pip install -e '.[test]' again"
    except importlib.metadata.PackageNotFoundError:
        pass
    done = run_build("--release", "v" + version, "--no-bytecode", "-o", tmp_path / "m.pyz",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    notes = (tmp_path / "RELEASE-NOTES.md").read_text("utf-8")
    assert "### Rebuilding the same bytes" in notes and "[Unreleased]" not in notes, notes


HOSTILE_CHANGELOGS = {
    # The attack on issue 41: an example heading in fenced code is no section...
    "fenced heading": ("```\n## [1.2.3] - 2026-01-01\nnot this\n```\n\n" + CHANGELOG_TEXT, None),
    # ...a link reference inside the section does not end it...
    "link inside": (CHANGELOG_TEXT.replace("- The thing users see.\n",
                                           "- The thing users see.\n\n[x]: https://example.invalid/x\n"
                                           "\n### Changed\n\n- Kept.\n"), None),
    # ...and what the notes must not carry is refused.
    "hidden": (CHANGELOG_TEXT.replace("users see", "users\u202esee"), "holds U+202E"),
    "control": (CHANGELOG_TEXT.replace("users see", "users\rsee"), "holds U+000D"),
    "own heading": (CHANGELOG_TEXT.replace("- The thing users see.\n",
                                           "### The archive\n\nSHA-256 `0000`\n"),
                    "holds '### The archive'"),
    "huge": (CHANGELOG_TEXT + "x" * (1 << 20), "is over 1048576 bytes"),
    "brackets": ("## [a\n" * 20000 + CHANGELOG_TEXT, None),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CHANGELOGS))
def test_a_release_takes_the_section_alone_or_refuses(tmp_path, case):
    """The notes hold the version's section, whole, and nothing the changelog only shows
    (fenced code), or the build refuses saying why; no hostile text reaches them."""
    changelog, refused = HOSTILE_CHANGELOGS[case]
    script = release_tree(tmp_path, changelog)
    done = run_build("--release", "v1.2.3", "--no-bytecode", cwd=tmp_path, script=script)
    if refused:
        assert (done.returncode, done.stdout) == (1, "") and refused in done.stderr, done.stderr
        assert not (tmp_path / "dist").exists()
        return
    assert done.returncode == 0, done.stderr
    notes = (tmp_path / "dist" / "RELEASE-NOTES.md").read_text("utf-8")
    assert notes.startswith("### Added\n\n- The thing users see.\n"), notes
    assert "not this" not in notes and "Older" not in notes
    if case == "link inside":
        assert "- Kept.\n" in notes


@pytest.mark.parametrize("name", ["mémprove.pyz", "a\nb.pyz", "back\\slash.pyz"],
                         ids=["non-ASCII", "line break", "backslash"])
def test_an_archive_name_the_sums_cannot_hold_is_refused(tmp_path, name):
    (tmp_path / "memprove_mcp.py").write_bytes(STAND_IN)
    done = run_build("--source", "memprove_mcp.py", "-o", tmp_path / "out" / name, "--no-bytecode",
                     cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert "must be printable ASCII" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_sum_that_cannot_be_replaced_leaves_the_old_archive(tmp_path):
    """The attack's shared dist/: another user's SHA256SUMS stays, so the archive must too
    (renamed last): the new archive never sits beside a sum that passes for it."""
    out = tmp_path / "out"
    old = build(tmp_path, out_dir=out)
    before = old.read_bytes()
    (out / "SHA256SUMS").unlink()
    (out / "SHA256SUMS").mkdir()              # a rename over it fails, as over another's file
    changed = STAND_IN.replace(b"stand-in", b"stand-in, changed", 1)
    assert changed != STAND_IN
    (tmp_path / "src" / "memprove_mcp.py").write_bytes(changed)
    done = run_build("--source", tmp_path / "src" / "memprove_mcp.py", "--output", old,
                     cwd=tmp_path)
    assert done.returncode == 1 and "SHA256SUMS" in done.stderr, done.stderr
    assert old.read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["SHA256SUMS", "memprove_mcp.pyz"]


@needs_real_module
def test_a_given_archive_must_be_this_trees(tmp_path):
    """MEMPROVE_TEST_PYZ (the release workflow's acceptance run): the tests take an archive
    only when it is this tree's build, with whatever bytecode it carries; one built from a
    changed module (the attack on issue 41: VERSION 9.9.9) is refused."""
    from harness import assert_built_from_this_tree
    source = REAL_MODULE.read_bytes()
    own = build(tmp_path / "own", source, args=python_args()[:2])
    assert_built_from_this_tree(own.read_bytes())
    changed = source.replace(b'\nVERSION = "', b'\nVERSION = "9.9.9-', 1)
    assert changed != source
    other = build(tmp_path / "other", changed)
    with pytest.raises(AssertionError, match="not built from this tree"):
        assert_built_from_this_tree(other.read_bytes())


@pytest.mark.parametrize("repository,named", [
    ("acme/memprove-mcp", "acme/memprove-mcp"), ("", "<this repository>"),
    ("acme/x; rm -rf ~", "<this repository>"), ("acme/x\n### The archive", "<this repository>"),
], ids=["runner's", "none", "shell", "line break"])
def test_the_notes_name_the_repository_the_runner_gives(tmp_path, repository, named):
    """On GitHub's runner the notes' `gh attestation verify` line names the repository
    (GITHUB_REPOSITORY); a value that is no owner/name leaves the placeholder."""
    script = release_tree(tmp_path)
    done = run_build("--release", "v1.2.3", "--no-bytecode", cwd=tmp_path, script=script,
                     env={"GITHUB_REPOSITORY": repository})
    assert done.returncode == 0, done.stderr
    notes = (tmp_path / "dist" / "RELEASE-NOTES.md").read_text("utf-8")
    assert "`gh attestation verify memprove_mcp.pyz --repo %s`" % named in notes, notes
