"""The .pyz's bytecode cache against other users and hostile files (contract.md
section 5, "Platforms", and section 6 rule 13).

Every archive here is built --no-bytecode, so each start goes through the cache.
The tests with two users need root: the victim's starts and the attacker's
actions run in children that drop to uids no account uses (VICTIM, ATTACKER),
with HOME given explicitly; the rest run as whoever runs the tests.  The
module packed is test_build's stand-in, whose `origin` command prints where its
bytecode came from ("cached", "compiled"); the code an attacker plants first
appends a line to a marker file, so that a single run of it shows.

Under Windows (the `win` fixture), bytecode is cached only in a directory of %LOCALAPPDATA%.
"""

import collections
import ctypes
import importlib.util
import os
try:
    import resource
except ImportError:      # Windows: the tests that use it are skipped there (POSIX_HOST_ONLY)
    resource = None
import shutil
import stat
import subprocess
import sys
import tempfile
import traceback
import zipfile
import zipimport
from pathlib import Path

import pytest

from harness import SAFETY_TIMEOUT, depth, require_python
from hardening_support import (report, skip_or_fail)
from test_build import (PROGRAMS, STAND_IN, assert_version, build, cache_name, cache_tag_of,
                        origin)

# Two uids picked for no account to have them (a uid needs no /etc/passwd entry
# to own files or run a process): (uid, gid).
VICTIM = (54321, 54321)
ATTACKER = (54322, 54322)
ATTACKER_IN_VICTIMS_GROUP = (54322, VICTIM[1])
# Starts raced by a swapping attacker: 200 at CI depth (the old code ran the attacker's
# code in 23 to 29 of 200 through the maze), a fifth in the quick run.
RACE_STARTS = depth(200)
# Links in the maze, so that a walk through it and the link to it stays within
# the kernel's 40.
MAZE_LINKS = 37
# What a start may take at most, in bytes of address space: reading /dev/zero or
# a huge file whole fails there at once rather than eating the machine's memory.
START_ADDRESS_SPACE = 1 << 30

# Run by the attacker with the victim's interpreter: writes, at each path given
# after the two sources, a cache file whose header is right for the first
# source (the header is public: magic number, flags, the source's hash) and
# whose code is the second.  3.6 has no source_hash; __main__.py uses CRC-32
# and length there.
FORGE = r"""
import importlib.util, marshal, os, sys, zlib
source = open(sys.argv[1], "rb").read()
evil = open(sys.argv[2], "rb").read()
if hasattr(importlib.util, "source_hash"):
    check = importlib.util.source_hash(source)
else:
    check = (zlib.crc32(source) & 0xFFFFFFFF).to_bytes(4, "little") + \
        len(source).to_bytes(4, "little")
data = importlib.util.MAGIC_NUMBER + b"\3\0\0\0" + check + \
    marshal.dumps(compile(evil, "memprove_mcp.py", "exec", dont_inherit=True))
data += (zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "little")
for path in sys.argv[3:]:
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o644)
"""

# Run by the attacker in a directory above the cache that they can write:
# exchanges whatever is memprove-mcp and their own .attacker, atomically
# (renameat2 RENAME_EXCHANGE), without end; says "swapping" after the first.
SWAPPER = r"""
import ctypes, os, sys
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
AT_FDCWD, RENAME_EXCHANGE = -100, 2
os.chdir(sys.argv[1])
said = False
while True:
    if renameat2(AT_FDCWD, b"memprove-mcp", AT_FDCWD, b".attacker", RENAME_EXCHANGE):
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
    if not said:
        sys.stdout.write("swapping\n")
        sys.stdout.flush()
        said = True
"""

# Run by the attacker in that directory: moves the victim's memprove-mcp aside
# and puts in its place a link that still leads to it, through a "filesystem
# maze" (a chain of links, each a long run of "./"), so that every walk of the
# path takes milliseconds.  A check of the path and a later use of it are then
# far enough apart for the exchange to fall between them nearly every time.
MAZE = r"""
import os, sys
os.chdir(sys.argv[1])
links = int(sys.argv[2])
os.rename("memprove-mcp", ".victim")
os.mkdir(".maze")
os.symlink("../.victim", ".maze/L%d" % links)
for i in reversed(range(links)):
    os.symlink("./" * 2040 + "L%d" % (i + 1), ".maze/L%d" % i)
os.symlink(".maze/L0", "memprove-mcp")
"""


def limited_memory():
    resource.setrlimit(resource.RLIMIT_AS, (START_ADDRESS_SPACE, START_ADDRESS_SPACE))


def as_user(user, then=None):
    """A preexec_fn that makes the child `user` (uid, gid) with no other group."""
    uid, gid = user

    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        if then is not None:
            then()
    return drop


def start(python, pyz, env, cwd, *flags, user=None):
    """One start of the stand-in: the origin of its bytecode, checked to answer."""
    done = subprocess.run([python] + list(flags) + [str(pyz), "origin"], cwd=str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=SAFETY_TIMEOUT,
                          preexec_fn=as_user(user, limited_memory) if user else limited_memory)
    return origin(done)[0]


def clean_env(home, cache_home=None):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "LANG": "C.UTF-8"}
    if cache_home is not None:
        env["XDG_CACHE_HOME"] = str(cache_home)
    return env


# --- the location, on every platform -------------------------------------------

def main_py_namespace(pyz):
    """The archive's __main__.py run under another name: its functions, no server."""
    with zipfile.ZipFile(str(pyz)) as archive:
        text = archive.read("__main__.py")
    namespace = {"__name__": "memprove_mcp_main_under_test"}
    exec(compile(text, "__main__.py", "exec", dont_inherit=True), namespace)
    return namespace


@pytest.fixture(scope="module")
def plain_pyz(tmp_path_factory):
    """The stand-in without bytecode, so every start goes through the cache."""
    return build(tmp_path_factory.mktemp("plain"), args=["--no-bytecode"])


@pytest.mark.parametrize("platform,environ,home,expected", [
    ("linux", {}, "/home/ana", "/home/ana/.cache/memprove-mcp"),
    ("linux", {"XDG_CACHE_HOME": "/srv/cache"}, "/home/ana", "/srv/cache/memprove-mcp"),
    ("linux", {"XDG_CACHE_HOME": "relative"}, "/home/ana", "/home/ana/.cache/memprove-mcp"),
    ("linux", {"XDG_CACHE_HOME": ""}, "/home/ana", "/home/ana/.cache/memprove-mcp"),
    ("linux", {}, "~", None),                # no home to be found: no cache
    ("freebsd14", {}, "/home/ana", "/home/ana/.cache/memprove-mcp"),
    ("darwin", {}, "/Users/ana", "/Users/ana/Library/Caches/memprove-mcp"),
    ("darwin", {"XDG_CACHE_HOME": "/Users/ana/.cache"}, "/Users/ana",
     "/Users/ana/.cache/memprove-mcp"),
    ("darwin", {"XDG_CACHE_HOME": "cache"}, "/Users/ana",
     "/Users/ana/Library/Caches/memprove-mcp"),
    ("win32", {"LOCALAPPDATA": r"C:\Users\ana\AppData\Local"}, r"C:\Users\ana",
     r"C:\Users\ana\AppData\Local\memprove-mcp"),
    # XDG_CACHE_HOME is not used on Windows, with or without LOCALAPPDATA.
    ("win32", {"LOCALAPPDATA": r"C:\Users\ana\AppData\Local", "XDG_CACHE_HOME": r"D:\shared"},
     r"C:\Users\ana", r"C:\Users\ana\AppData\Local\memprove-mcp"),
    ("win32", {"XDG_CACHE_HOME": r"D:\shared"}, r"C:\Users\ana", None),
    ("win32", {}, r"C:\Users\ana", None),
    ("win32", {"LOCALAPPDATA": r"AppData\Local"}, r"C:\Users\ana", None),
])
def test_the_cache_directory_of_each_platform(plain_pyz, platform, environ, home, expected):
    namespace = main_py_namespace(plain_pyz)
    assert namespace["cache_directory"](platform, environ, home) == expected


def test_the_archive_runs_its_main_only_as_main(plain_pyz, tmp_path):
    """Executing __main__.py under another name defines its functions and starts
    nothing; run as a zipapp (__name__ "__main__"), it starts the module."""
    namespace = main_py_namespace(plain_pyz)
    assert callable(namespace["run"])
    done = subprocess.run([sys.executable, str(plain_pyz), "--version"], cwd=str(tmp_path),
                          env=clean_env(tmp_path, tmp_path / "xdg"), universal_newlines=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert_version(done, STAND_IN)


# --- the cache writer, pyz/bytecode_cache.py ------------------------------------

@pytest.fixture(scope="module")
def writer():
    """pyz/bytecode_cache.py imported from the repository, a module of its own as in
    the archive."""
    spec = importlib.util.spec_from_file_location("bytecode_cache",
                                                  str(PROGRAMS / "bytecode_cache.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def opened_directory(path):
    return os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY)


def test_prepare_makes_a_missing_directory_0700_only_when_writable(writer, tmp_path):
    directory = tmp_path / "cache home" / "memprove-mcp"
    assert writer.prepare(str(directory), None, False) is None
    assert not (tmp_path / "cache home").exists()
    handle = writer.prepare(str(directory), None, True)
    try:
        assert os.path.samestat(os.fstat(handle), directory.stat())
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    finally:
        os.close(handle)


def test_prepare_empties_a_directory_others_could_write_and_follows_no_link(writer, tmp_path):
    directory = tmp_path / "memprove-mcp"
    (directory / "tree").mkdir(parents=True)
    (directory / "tree" / "leaf").write_bytes(b"leaf")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_bytes(b"kept")
    (directory / "link").symlink_to(outside)
    (directory / "tree" / "link").symlink_to(outside / "kept")
    os.chmod(str(directory), 0o777)
    handle = opened_directory(directory)
    try:
        assert writer.prepare(str(directory), handle, True) == handle
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert os.listdir(str(directory)) == []
    finally:
        os.close(handle)
    assert sorted(os.listdir(str(outside))) == ["kept"]
    assert (outside / "kept").read_bytes() == b"kept"


def test_write_replaces_a_link_in_its_place_without_following_it(writer, tmp_path):
    directory = tmp_path / "memprove-mcp"
    directory.mkdir(mode=0o700)
    outside = tmp_path / "outside"
    outside.write_bytes(b"theirs")
    (directory / "x.pyc").symlink_to(outside)
    handle = opened_directory(directory)
    try:
        writer.write(str(directory), handle, "x.pyc", b"ours", None)    # no reparse points here
    finally:
        os.close(handle)
    info = os.lstat(str(directory / "x.pyc"))
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert (directory / "x.pyc").read_bytes() == b"ours"
    assert outside.read_bytes() == b"theirs"
    assert os.listdir(str(directory)) == ["x.pyc"]


def test_the_archive_runs_its_cache_writer_as_a_module_whose_lines_are_pyz_s(plain_pyz,
                                                                             tmp_path):
    """__main__.py runs the archive's bytecode_cache.py once, as a module that
    borrows nothing from it; an error inside it names the line of
    pyz/bytecode_cache.py, and shows it."""
    namespace = main_py_namespace(plain_pyz)
    namespace["__loader__"] = zipimport.zipimporter(str(plain_pyz))    # as when run as a zipapp
    module = namespace["cache_writer"]()
    assert namespace["cache_writer"]() is module
    assert module.os is os and "reparse_point" not in vars(module)
    directory = tmp_path / "memprove-mcp"
    directory.mkdir(mode=0o700)
    handle = opened_directory(directory)
    try:
        with pytest.raises(TypeError) as raised:     # data as text: os.write refuses it
            module.write(str(directory), handle, "x.pyc", "text", None)
    finally:
        os.close(handle)
    frame = traceback.extract_tb(raised.tb)[-1]
    lines = (PROGRAMS / "bytecode_cache.py").read_text().splitlines()
    assert (frame.filename, frame.name) == (str(plain_pyz) + "/bytecode_cache.py", "write")
    assert "os.write(opened, data)" in lines[frame.lineno - 1]
    assert frame.line == lines[frame.lineno - 1].strip()


# --- hostile files in the user's own cache (no second user needed) --------------

def own_cache(tmp_path, python):
    """A private cache holding what `python` compiled: (env, cache directory, cached file)."""
    env = clean_env(tmp_path, tmp_path / "xdg")
    directory = tmp_path / "xdg" / "memprove-mcp"
    return env, directory, directory / cache_name(cache_tag_of(python))


def interpreter(which):
    return sys.executable if which == "this" else require_python(which)


HOSTILE = ["a FIFO", "a link to /dev/zero", "a huge sparse file", "a file others can write",
           "a link to a good cache file"]


@pytest.mark.parametrize("which", ["this", "3.6"])
@pytest.mark.parametrize("hostile", HOSTILE)
def test_anything_but_the_users_own_regular_file_is_ignored_and_replaced(
        plain_pyz, tmp_path, hostile, which):
    python = interpreter(which)
    env, directory, cached = own_cache(tmp_path, python)
    assert start(python, plain_pyz, env, tmp_path) == "compiled"
    good = cached.read_bytes()
    elsewhere = tmp_path / "good.pyc"
    shutil.copy(str(cached), str(elsewhere))
    cached.unlink()
    if hostile == "a FIFO":
        os.mkfifo(str(cached), 0o600)
    elif hostile == "a link to /dev/zero":
        cached.symlink_to("/dev/zero")
    elif hostile == "a huge sparse file":
        with open(str(cached), "wb") as handle:
            handle.truncate(4 * START_ADDRESS_SPACE)
        os.chmod(str(cached), 0o600)
    elif hostile == "a file others can write":
        cached.write_bytes(good)
        os.chmod(str(cached), 0o666)
    else:
        cached.symlink_to(elsewhere)
    # It answers (no hang on the FIFO, no MemoryError), from what it compiled.
    assert start(python, plain_pyz, env, tmp_path) == "compiled"
    info = os.lstat(str(cached))
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, hostile
    assert cached.read_bytes() == good
    assert sorted(p.name for p in directory.iterdir()) == [cached.name]
    assert start(python, plain_pyz, env, tmp_path) == "cached"
    assert elsewhere.read_bytes() == good


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o711], ids=oct)
def test_a_directory_others_can_only_read_is_made_private_and_used(plain_pyz, tmp_path, mode):
    env, directory, cached = own_cache(tmp_path, sys.executable)
    assert start(sys.executable, plain_pyz, env, tmp_path) == "compiled"
    os.chmod(str(directory), mode)
    # No one else could have written its file: it is used at once.
    assert start(sys.executable, plain_pyz, env, tmp_path) == "cached"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o702], ids=oct)
def test_a_directory_others_can_write_is_emptied_before_use(plain_pyz, tmp_path, mode):
    env, directory, cached = own_cache(tmp_path, sys.executable)
    assert start(sys.executable, plain_pyz, env, tmp_path) == "compiled"
    good = cached.read_bytes()
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "kept").write_bytes(b"kept")
    # What someone else could have left: files of any name, links, directories.
    (directory / cache_name(cache_tag_of(sys.executable), optimize=1)).write_bytes(good)
    (directory / "junk").write_bytes(b"junk")
    (directory / "link to outside").symlink_to(outside)
    (directory / "dangling").symlink_to(tmp_path / "nowhere")
    (directory / "tree" / "deeper").mkdir(parents=True)
    (directory / "tree" / "deeper" / "leaf").write_bytes(b"leaf")
    (directory / "tree" / "link").symlink_to(outside / "inner")
    os.chmod(str(directory), mode)
    assert start(sys.executable, plain_pyz, env, tmp_path) == "compiled"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert sorted(p.name for p in directory.iterdir()) == [cached.name]
    assert cached.read_bytes() == good
    assert (outside / "inner" / "kept").read_bytes() == b"kept"     # links were not followed
    assert start(sys.executable, plain_pyz, env, tmp_path) == "cached"
    assert start(sys.executable, plain_pyz, env, tmp_path, "-O") == "compiled"


@pytest.mark.parametrize("mode,expected", [(0o755, "cached"), (0o777, "compiled")],
                         ids=["0o755", "0o777"])
def test_dont_write_bytecode_changes_nothing_and_reads_only_what_no_one_else_could_write(
        plain_pyz, tmp_path, mode, expected):
    env, directory, cached = own_cache(tmp_path, sys.executable)
    assert start(sys.executable, plain_pyz, env, tmp_path) == "compiled"
    os.chmod(str(directory), mode)
    (directory / "junk").write_bytes(b"junk")
    before = sorted((p.name, p.read_bytes()) for p in directory.iterdir())
    assert start(sys.executable, plain_pyz, env, tmp_path, "-B") == expected
    assert stat.S_IMODE(directory.stat().st_mode) == mode
    assert sorted((p.name, p.read_bytes()) for p in directory.iterdir()) == before


# --- a second user (root only) ----------------------------------------------------

def can_run_as(user, python):
    try:
        done = subprocess.run([python, "-c", "pass"], cwd="/", preexec_fn=as_user(user),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=SAFETY_TIMEOUT)
    except OSError:
        return False
    return done.returncode == 0


def python_for_other_users():
    """An interpreter another uid can run (pyenv's under /root is out of their reach)."""
    candidates = [sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3",
                  "/usr/local/bin/python3", shutil.which("python3")]
    for python in candidates:
        if python and os.path.isfile(python) and can_run_as(VICTIM, python):
            return python
    skip_or_fail("no Python here that another user can run (tried %s)"
                 % ", ".join(filter(None, candidates)))


class TwoUsers:
    """A world-readable place under /tmp holding the archive and the victim's home
    (theirs, 0755); the victim's starts and the attacker's acts run as those uids."""

    def __init__(self, base, python):
        self.base = base
        self.python = python
        self.tag = cache_tag_of(python)
        self.pyz = build(base / "archive", args=["--no-bytecode"])
        self.source = base / "archive" / "src" / "memprove_mcp.py"
        self.home = self.victims(base / "victim", 0o755)
        self.marker = self.home / "attacker-code-ran"
        self.evil = base / "evil.py"
        self.evil.write_bytes(b"open(%r, 'a').write('ran\\n')\n" % str(self.marker).encode()
                              + STAND_IN)

    @staticmethod
    def victims(path, mode):
        path.mkdir()
        os.chown(str(path), *VICTIM)
        os.chmod(str(path), mode)
        return path

    def env(self, cache_home=None):
        return clean_env(self.home, cache_home)

    def start(self, *flags, cache_home=None):
        return start(self.python, self.pyz, self.env(cache_home), self.base, *flags,
                     user=VICTIM)

    def run_as(self, user, argv):
        done = subprocess.run(argv, cwd=str(self.base), preexec_fn=as_user(user),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=SAFETY_TIMEOUT)
        assert done.returncode == 0, done.stderr

    def plant(self, *paths, user=ATTACKER):
        """Forged cache files, made by the attacker, whose code marks that it ran."""
        self.run_as(user, [self.python, "-c", FORGE, str(self.source), str(self.evil)]
                    + [str(path) for path in paths])

    def attacker_runs(self):
        return len(self.marker.read_text().splitlines()) if self.marker.exists() else 0


@pytest.fixture
def users():
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        skip_or_fail("needs root: a second user is a real uid, and only root can become one")
    python = python_for_other_users()
    base = Path(tempfile.mkdtemp(prefix="memprove-cache-users-", dir="/tmp"))
    try:
        os.chmod(str(base), 0o755)
        yield TwoUsers(base, python)
    finally:
        shutil.rmtree(str(base))


def victims_directory(users, mode):
    """~/.cache/memprove-mcp of the victim's, made by the victim under umask 000."""
    directory = users.home / ".cache" / "memprove-mcp"
    users.run_as(VICTIM, [users.python, "-c", "import os, sys; os.umask(0); "
                          "os.makedirs(sys.argv[1], int(sys.argv[2], 8))", str(directory),
                          oct(mode)[2:]])
    assert stat.S_IMODE(directory.stat().st_mode) == mode
    return directory


@pytest.mark.parametrize("mode,attacker", [(0o777, ATTACKER), (0o1777, ATTACKER),
                                           (0o770, ATTACKER_IN_VICTIMS_GROUP)],
                         ids=["world-writable", "sticky", "group-writable"])
def test_code_planted_while_the_directory_was_open_never_runs(users, mode, attacker):
    directory = victims_directory(users, mode)
    plain = directory / cache_name(users.tag)
    optimized = directory / cache_name(users.tag, optimize=1)
    users.plant(plain, optimized, user=attacker)
    first = users.start()
    assert (users.attacker_runs(), first) == (0, "compiled")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    # The -O name, which the first start does not write, was emptied too.
    optimizing = users.start("-O")
    assert (users.attacker_runs(), optimizing) == (0, "compiled")
    assert sorted((p.name, p.stat().st_uid) for p in directory.iterdir()) == sorted(
        [(plain.name, VICTIM[0]), (optimized.name, VICTIM[0])])
    assert (users.start(), users.start("-O")) == ("cached", "cached")


def test_a_file_another_user_left_in_a_directory_now_private_never_runs(users):
    """As the cache before this rule left it: made 0700, but not emptied."""
    directory = victims_directory(users, 0o777)
    plain = directory / cache_name(users.tag)
    optimized = directory / cache_name(users.tag, optimize=1)
    users.plant(plain, optimized)
    os.chmod(str(directory), 0o700)
    for flags in ((), ("-O",)):
        started = users.start(*flags)
        assert (users.attacker_runs(), started) == (0, "compiled")
    assert sorted((p.name, p.stat().st_uid) for p in directory.iterdir()) == sorted(
        [(plain.name, VICTIM[0]), (optimized.name, VICTIM[0])])
    assert users.start() == "cached"


def shared_directory(users):
    """A directory above the cache that others can write (no sticky bit): what
    XDG_CACHE_HOME names when it is shared."""
    shared = users.base / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    return shared


def tree(path):
    """Every name under path, with its owner and mode, links not followed."""
    found = [(".", os.lstat(str(path)).st_uid, os.lstat(str(path)).st_mode)]
    for root, dirs, files in os.walk(str(path)):
        for name in sorted(dirs + files):
            info = os.lstat(os.path.join(root, name))
            found.append((os.path.relpath(os.path.join(root, name), str(path)),
                          info.st_uid, info.st_mode))
    return sorted(found)


@pytest.mark.parametrize("planted", ["a link to the victim's home",
                                     "a link to a private directory of the victim's",
                                     "the attacker's own directory"])
def test_what_another_user_puts_in_the_cache_directorys_place_is_not_touched(users, planted):
    shared = shared_directory(users)
    target = users.home
    if planted == "a link to a private directory of the victim's":
        target = users.victims(users.home / "private", 0o700)
    if planted == "the attacker's own directory":
        target = shared / "memprove-mcp"
        users.run_as(ATTACKER, ["mkdir", "-m", "777", str(target)])
        users.plant(target / cache_name(users.tag), target / cache_name(users.tag, optimize=1))
    else:
        users.run_as(ATTACKER, ["ln", "-s", str(target), str(shared / "memprove-mcp")])
    before = tree(target)
    for flags in ((), ("-O",), ()):
        assert users.start(*flags, cache_home=shared) == "compiled"
    assert tree(target) == before
    assert users.attacker_runs() == 0
    done = subprocess.run([users.python, str(users.pyz), "--version"], cwd=str(users.base),
                          env=users.env(shared), preexec_fn=as_user(VICTIM),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=SAFETY_TIMEOUT)
    assert_version(done, STAND_IN)


@pytest.mark.parametrize("victims_place", ["its directory", "a link to it through a maze"])
def test_a_directory_swapped_in_above_the_cache_is_never_used(users, victims_place):
    """The attacker exchanges the victim's cache directory (or a link to it) and
    their own, in a loop, while the victim starts again and again: a check of the
    path and a later use of it could see two different directories; one
    descriptor, opened without following a link, cannot."""
    if not hasattr(ctypes.CDLL(None), "renameat2"):
        skip_or_fail("needs renameat2 (glibc 2.28 or later) for the attacker's exchange")
    shared = shared_directory(users)
    assert users.start(cache_home=shared) == "compiled"
    assert users.start(cache_home=shared) == "cached"
    own = shared / ".attacker"
    users.run_as(ATTACKER, ["mkdir", "-m", "755", str(own)])
    users.plant(own / cache_name(users.tag))
    if victims_place != "its directory":
        users.run_as(ATTACKER, [users.python, "-c", MAZE, str(shared), str(MAZE_LINKS)])
    swapper = subprocess.Popen([users.python, "-c", SWAPPER, str(shared)], cwd=str(users.base),
                               preexec_fn=as_user(ATTACKER), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True)
    try:
        assert swapper.stdout.readline() == "swapping\n", swapper.communicate()
        origins = collections.Counter(users.start(cache_home=shared)
                                      for _ in range(RACE_STARTS))
    finally:
        swapper.kill()
        swapper.communicate(timeout=SAFETY_TIMEOUT)
    report("bytecode cache: %s swapped above it" % victims_place, starts=RACE_STARTS,
           attacker_runs=users.attacker_runs(), **origins)
    assert users.attacker_runs() == 0
    assert set(origins) <= {"cached", "compiled"}


# ---------------------------------------------------------------------------
# Under Windows: %LOCALAPPDATA% (contract.md §5; §6 rule 13's Windows clause)
# ---------------------------------------------------------------------------

# Wine sets LOCALAPPDATA itself, whatever the caller passes, so every Windows test
# shares one %LOCALAPPDATA%\memprove-mcp: the test that changes it holds this lock.
# (The server's own .pyz carries bytecode for both Windows Pythons and never uses it.)
CACHE_LOCK = "/tmp/memprove-windows-cache.lock"


# Run by the Windows Python: "aside" moves %LOCALAPPDATA%\memprove-mcp away and puts a
# regular file in its place; "back" puts the directory back; "look" prints what is there.
CACHE_PLACE = r'''
import os, sys
place = os.path.join(os.environ["LOCALAPPDATA"], "memprove-mcp")
aside = place + ".aside-" + sys.argv[2]
if sys.argv[1] == "aside":
    if os.path.lexists(place):
        os.rename(place, aside)
    with open(place, "w") as handle:
        handle.write("not a directory\n")
elif sys.argv[1] == "back":
    os.remove(place)
    if os.path.lexists(aside):
        os.rename(aside, place)
else:
    sys.stdout.write("dir" if os.path.isdir(place) else open(place).read())
'''


def stand_in_origin(win, pyz, cwd):
    from test_build import origin
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}   # bytecode written
    done = subprocess.run([win.python, win.path(pyz), "origin"], cwd=str(cwd), env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=SAFETY_TIMEOUT * 4)
    return origin(done)[0]


def test_bytecode_is_cached_only_in_a_directory_of_localappdata(win, tmp_path):
    """A .pyz with no bytecode for this Python compiles on its first start and loads
    %LOCALAPPDATA%\\memprove-mcp's copy on the next; with a file in that directory's
    place it compiles every time and leaves the file as it was.  (A reparse point in
    its place, the rule's other half, cannot be made under Wine 8.)"""
    import fcntl
    from test_build import STAND_IN, build
    source = STAND_IN + ("# %s\n" % os.urandom(8).hex()).encode("ascii")  # its own cache file
    pyz = build(tmp_path, source, args=["--no-bytecode"])
    script = tmp_path / "cache_place.py"
    script.write_text(CACHE_PLACE)

    def place(action):
        return subprocess.run([win.python, str(script), action, tmp_path.name],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, check=True,
                              timeout=SAFETY_TIMEOUT * 4).stdout

    with open(CACHE_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert [stand_in_origin(win, pyz, tmp_path) for _ in range(2)] == ["compiled", "cached"]
        place("aside")
        try:
            assert [stand_in_origin(win, pyz, tmp_path) for _ in range(2)] == \
                ["compiled", "compiled"]
            assert place("look") == "not a directory\n"
        finally:
            place("back")
        assert place("look") == "dir"
