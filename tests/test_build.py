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
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "build_zipapp.py"
REAL_MODULE = ROOT / "memprove_mcp.py"
SHEBANG = b"#!/usr/bin/env python3\n"
ENTRY_NAMES = ["__main__.py", "memprove_mcp.py"]
PYC_NAME = re.compile(r"pyc/cpython-3\d+/memprove_mcp\.pyc\Z")


def entry_names(archive):
    """The source entries, checked to come first; the bytecode entries after them."""
    names = [info.filename for info in archive.infolist()]
    assert names[:2] == ENTRY_NAMES, names
    assert names[2:] == sorted(names[2:])
    assert all(PYC_NAME.match(name) for name in names[2:]), names
    return names


VERSION_LINE = re.compile(r"^memprove-mcp \S+ \(([0-9a-f]{12})\)$")
BUILT_LINE = re.compile(r"^built (.+) \((\d+) bytes, sha256 ([0-9a-f]{64})\)$")
GUARD_LINE = re.compile(r"^memprove-mcp needs Python 3\.8 or newer; this is Python (\d+\.\d+\.\d+)\.$")

needs_real_module = pytest.mark.skipif(
    not REAL_MODULE.is_file(),
    reason="memprove_mcp.py is not in the repository yet; --version comes from it")

# A stand-in for memprove_mcp.py: same --version contract (digest of its own
# source, read through the zip's loader), and syntax that Python < 3.8 cannot
# parse (the walrus), so a guard that lets an old interpreter through shows up
# as a SyntaxError instead of passing by luck.
STAND_IN = b'''\
# memprove_mcp stand-in for the build tests
import hashlib
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if (words := argv) == ["--version"]:
        data = __loader__.get_data("memprove_mcp.py")   # the source, even when run from bytecode
        sys.stdout.write("memprove-mcp 0.0.0+stand-in (%s)\\n" % hashlib.sha256(data).hexdigest()[:12])
        return 0
    sys.stderr.write("stand-in: unexpected %r\\n" % (words,))
    return 2
'''

OLD_PYTHONS = [
    ("3.7.16", "python3.7"),
    ("3.6.15", "python3.6"),
    ("2.7.18", "python2.7"),
]
SUPPORTED_PYTHONS = [
    ("3.8.18", "python3.8"),
    ("3.9.18", "python3.9"),
    ("3.10.13", "python3.10"),
    ("3.11.7", "python3.11"),
    ("3.12.1", "python3.12"),
    ("3.13.0", "python3.13"),
]


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


def pyenv_python(version, name, strict_in_ci):
    """The pyenv interpreter's path; skip when absent (fail instead under CI=true)."""
    path = find_pyenv_python(version, name)
    if path is None:
        message = "%s %s is not installed (looked under %s)" % (
            name, version, ", ".join(str(root / "versions") for root in pyenv_roots()))
        if strict_in_ci and os.environ.get("CI") == "true":
            pytest.fail(message + "; CI=true requires it")
        pytest.skip(message)
    return path


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def run_build(*args, cwd, umask=None, python=sys.executable, script=BUILD_SCRIPT):
    """Run build_zipapp.py; return the finished process (not checked)."""
    return subprocess.run(
        [python, str(script)] + [str(arg) for arg in args],
        cwd=str(cwd), capture_output=True, text=True, timeout=120,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)))


def build(tmp_path, source_bytes=STAND_IN, name="memprove_mcp.pyz", out_dir=None):
    """Build from source_bytes with --source/--output in tmp_path; return the .pyz path."""
    source_dir = tmp_path / "src"
    source_dir.mkdir(parents=True, exist_ok=True)
    source = source_dir / "memprove_mcp.py"
    source.write_bytes(source_bytes)
    output = (out_dir or tmp_path / "out") / name
    done = run_build("--source", source, "--output", output, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return output


def run_pyz(command, cwd, env=None):
    return subprocess.run(command, cwd=str(cwd), capture_output=True, text=True,
                          timeout=120, env=env)


def assert_version(done, source_bytes):
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    match = VERSION_LINE.match(lines[0])
    assert match, lines[0]
    assert match.group(1) == sha256(source_bytes)[:12]


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
    shutil.copy(str(BUILD_SCRIPT), str(a / "build_zipapp.py"))
    (a / "memprove_mcp.py").write_bytes(module_source)
    os.chmod(str(a / "memprove_mcp.py"), 0o600)
    os.utime(str(a / "memprove_mcp.py"), (1_000_000_000, 1_000_000_000))
    os.utime(str(a / "build_zipapp.py"), (1_200_000_000, 1_200_000_000))
    decoy_cwd = tmp_path / "decoy"
    decoy_cwd.mkdir()
    (decoy_cwd / "memprove_mcp.py").write_bytes(b"print('decoy')\n")
    done_a = run_build(cwd=decoy_cwd, umask=0o022, script=a / "build_zipapp.py")
    assert done_a.returncode == 0, done_a.stderr
    out_a = a / "dist" / "memprove_mcp.pyz"

    # Copy B: explicit relative --source/--output from its own cwd, umask 077,
    # other mtimes and modes.
    b = tmp_path / "b" / "nested"
    b.mkdir(parents=True)
    shutil.copy(str(BUILD_SCRIPT), str(b / "build_zipapp.py"))
    (b / "memprove_mcp.py").write_bytes(module_source)
    os.chmod(str(b / "memprove_mcp.py"), 0o755)
    os.utime(str(b / "memprove_mcp.py"), (1_700_000_000, 1_700_000_123))
    os.utime(str(b / "build_zipapp.py"), (1_600_000_000, 1_600_000_000))
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
    # The printed line tells the truth about the file.
    for done, out, data in ((done_a, out_a, bytes_a), (done_b, out_b, bytes_b)):
        lines = done.stdout.splitlines()
        assert len(lines) == 1, done.stdout
        match = BUILT_LINE.match(lines[0])
        assert match, lines[0]
        assert Path(match.group(1)) == out
        assert int(match.group(2)) == len(data)
        assert match.group(3) == sha256(data)


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


def test_build_script_runs_and_agrees_on_every_supported_python(tmp_path):
    """build_zipapp.py runs on 3.8-3.13 and every one builds the same bytes."""
    reference = build(tmp_path, name="reference.pyz").read_bytes()
    ran = []
    for version, name in SUPPORTED_PYTHONS:
        path = find_pyenv_python(version, name)
        if path is None:
            continue
        output = tmp_path / ("built-by-%s.pyz" % version)
        done = run_build("--source", tmp_path / "src" / "memprove_mcp.py", "--output", output,
                         cwd=tmp_path, python=path)
        assert done.returncode == 0, (version, done.stderr)
        assert output.read_bytes() == reference, "Python %s built different bytes" % version
        ran.append(version)
    if not ran:
        pytest.skip("no pyenv Python 3.8-3.13 found under %s" % ", ".join(map(str, pyenv_roots())))


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
            assert info.compress_type == zipfile.ZIP_DEFLATED
        assert archive.read("memprove_mcp.py") == STAND_IN
        main_py = archive.read("__main__.py")
    main_py.decode("ascii")       # Python 2 refuses non-ASCII source without a coding line
    assert main_py.index(b"version_info < (3, 8)") < main_py.index(b"import memprove_mcp")


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
    # Bytecode of every supported Python this machine has, and of this one.
    for version, name in SUPPORTED_PYTHONS:
        if find_pyenv_python(version, name) is not None:
            assert "pyc/%s/memprove_mcp.pyc" % cache_tag(name) in names
    assert "pyc/%s/memprove_mcp.pyc" % sys.implementation.cache_tag in names


def cache_tag(name):
    """python3.11 -> cpython-311, the folder its bytecode goes in."""
    return "cpython-" + name[len("python"):].replace(".", "")


def imported_from(done):
    """The -v line that says where memprove_mcp was imported from."""
    lines = [line for line in done.stderr.decode().splitlines()
             if line.startswith("import") and "memprove_mcp" in line]
    assert len(lines) == 1, lines
    return lines[0]


def test_no_bytecode_packs_the_source_alone(tmp_path):
    output = tmp_path / "plain.pyz"
    source = tmp_path / "memprove_mcp.py"
    source.write_bytes(STAND_IN)
    done = run_build("--source", source, "--output", output, "--no-bytecode", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(str(output)) as archive:
        assert [info.filename for info in archive.infolist()] == ENTRY_NAMES


@needs_real_module
@pytest.mark.parametrize("version,name", SUPPORTED_PYTHONS)
def test_each_python_imports_its_own_bytecode(tmp_path, version, name):
    """zipimport takes pyc/<cache tag>/memprove_mcp.pyc, so nothing is compiled at start."""
    python = pyenv_python(version, name, strict_in_ci=True)
    source = REAL_MODULE.read_bytes()
    pyz = build(tmp_path, source)
    done = subprocess.run([python, "-v", str(pyz), "--version"], cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0
    assert VERSION_LINE.match(done.stdout.decode().strip()).group(1) == sha256(source)[:12]
    assert "/pyc/%s/" % cache_tag(name) in imported_from(done)


@needs_real_module
def test_bytecode_with_a_foreign_magic_falls_back_to_the_source(tmp_path):
    source = REAL_MODULE.read_bytes()
    pyz = build(tmp_path, source)
    mine = "pyc/%s/memprove_mcp.pyc" % sys.implementation.cache_tag
    spoiled = tmp_path / "spoiled.pyz"
    with zipfile.ZipFile(str(pyz)) as original, zipfile.ZipFile(str(spoiled), "w") as copy:
        for info in original.infolist():
            data = original.read(info.filename)
            copy.writestr(info, b"\0\0\r\n" + data[4:] if info.filename == mine else data)
    assert mine in zipfile.ZipFile(str(spoiled)).namelist()
    done = subprocess.run([sys.executable, "-v", str(spoiled), "--version"], cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0
    assert VERSION_LINE.match(done.stdout.decode().strip()).group(1) == sha256(source)[:12]
    assert "/pyc/" not in imported_from(done)


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
    assert sorted(p.name for p in out_dir.iterdir()) == [good.name]


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
    assert sorted(p.name for p in output.parent.iterdir()) == [output.name]


def test_usage(tmp_path):
    bad = run_build("--no-such-option", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert "usage:" in bad.stderr
    extra = run_build("surplus", cwd=tmp_path)
    assert extra.returncode == 2
    helped = run_build("--help", cwd=tmp_path)
    assert helped.returncode == 0
    for option in ("-o", "--output", "--source", "--help"):
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
    assert_version(run_pyz([sys.executable, str(pyz), "--version"], cwd=tmp_path), source)
    assert_version(run_pyz([sys.executable, "-I", str(pyz), "--version"], cwd=tmp_path), source)
    assert_version(run_pyz([str(pyz), "--version"], cwd=tmp_path,
                           env=env_with_python3_first(tmp_path)), source)


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
    shutil.copy(str(BUILD_SCRIPT), str(spaced / "build_zipapp.py"))
    (spaced / "memprove_mcp.py").write_bytes(source)
    done = run_build(cwd=tmp_path, script=spaced / "build_zipapp.py")
    assert done.returncode == 0, done.stderr
    pyz = spaced / "dist" / "memprove_mcp.pyz"
    link_dir = tmp_path / "links here"
    link_dir.mkdir()
    link = link_dir / "memprove link.pyz"
    link.symlink_to(pyz)
    env = env_with_python3_first(tmp_path)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    for target in (pyz, link):
        assert_version(run_pyz([sys.executable, str(target), "--version"], cwd=elsewhere), source)
        assert_version(run_pyz([str(target), "--version"], cwd=elsewhere, env=env), source)
    # A relative path through the symlink, too.
    assert_version(run_pyz([sys.executable, os.path.join("..", "links here", link.name),
                            "--version"], cwd=elsewhere), source)


# --- the old-Python guard ---------------------------------------------------

@pytest.mark.parametrize("version,name", OLD_PYTHONS, ids=[n for _, n in OLD_PYTHONS])
def test_old_python_gets_one_line_and_status_1(tmp_path, version, name):
    python = pyenv_python(version, name, strict_in_ci=True)
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
    python = pyenv_python("3.7.16", "python3.7", strict_in_ci=True)
    pyz = build(tmp_path, REAL_MODULE.read_bytes())
    done = run_pyz([python, str(pyz), "mcp", "serve"], cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert GUARD_LINE.match(done.stderr.rstrip("\n")) and done.stderr.count("\n") == 1


@pytest.mark.parametrize("version,name", SUPPORTED_PYTHONS, ids=[n for _, n in SUPPORTED_PYTHONS])
def test_supported_python_passes_the_guard(tmp_path, version, name):
    """The positive control: 3.8 and newer are let through to main()."""
    python = pyenv_python(version, name, strict_in_ci=False)
    pyz = build(tmp_path)
    assert_version(run_pyz([python, str(pyz), "--version"], cwd=tmp_path), STAND_IN)
