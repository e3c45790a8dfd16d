"""What the tests share that is not a fixture: the constants of the protocol, the test
profile's depth, the interpreters (every CPython, the Windows ones under Wine), paths as a
server computes them, clean environments and Workspaces, message builders, the checks of
the two output streams, `Server` (`<python> <pyz> mcp serve` over real pipes), `run_cli`,
`snapshot`, a validator for the JSON Schema subset the tools use, and TOOL_SAMPLES, one
valid call of every tool.

tests/conftest.py holds the hooks and the fixtures, built from these; a test file imports
what it uses from here (`from harness import ...`), never from conftest.  (Not
`support.py`: tests/interop/support.py is the interop tier's own, imported as
`interop.support`.)
"""

import contextlib
import errno
import glob
import hashlib
import io
import json
import os
import queue
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
for _path in (str(REPO), str(TESTS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# A safety net against a hung server, never a means of synchronisation.
SAFETY_TIMEOUT = 30.0

MODERN_VERSION = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18")
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT = "io.modelcontextprotocol/clientInfo"
META_SERVER = "io.modelcontextprotocol/serverInfo"

# The one place the tool list is written down: seed-mcp-server.md's order.
READ_TOOLS = ("pack", "claims", "context", "tasks", "ledger_verify")
WRITE_TOOLS = ("begin", "checkpoint", "decide", "end", "complete")
EXPECTED_TOOLS = READ_TOOLS + WRITE_TOOLS

# One valid call of every tool: the arguments a test sends when any will do, and the
# daemon operations the tool may send (seed-mcp-server.md's table).  A table a test keeps
# of "every tool" is made from this one; tests/test_protocol.py holds it to the tools the
# server lists, so a new tool cannot be left out of them.
TOOL_SAMPLES = {
    "pack": ({}, ("getTaskCapsule", "listTasks")),
    "claims": ({"numbers": [1]}, ("getTaskCapsule", "listTasks")),
    "context": ({}, ()),
    "tasks": ({}, ("listTasks",)),
    "ledger_verify": ({}, ("verifyLedger",)),
    "begin": ({"new_task": "A sample Task"},
              ("listSessions", "resolveWorkspace", "createTask", "listTasks", "createSession",
               "transitionTask")),
    "checkpoint": ({"facts": [{"text": "A sample fact."}]},
                   ("getTaskCapsule", "createCheckpoint", "listTasks", "listSessions")),
    "decide": ({"decision": "A sample decision."},
               ("getTaskCapsule", "proposeDecision", "listTasks", "listSessions")),
    "end": ({}, ("endSession", "getTaskCapsule", "listSessions", "listTasks")),
    "complete": ({}, ("transitionTask", "getTaskCapsule", "listTasks", "listSessions")),
}


def sample_calls(*leaving_out):
    """(tool, arguments) of every tool but those named, in the table's order."""
    return [(tool, json.loads(json.dumps(TOOL_SAMPLES[tool][0]))) for tool in TOOL_SAMPLES
            if tool not in leaving_out]

PROBLEM_CODES = frozenset("""
invalid_params token_missing token_malformed data_dir_missing daemon_unavailable
daemon_address_refused daemon_timeout daemon_error context_unreadable workspace_unusable
context_foreign no_task no_session
task_not_found session_not_found run_label_unknown no_passed_runs runs_failing
internal_error unauthenticated token_revoked scope_missing role_forbidden not_found
claim_not_found claim_not_active session_not_open invalid_transition evidence_invalid
validation_failed idempotency_key_reused
""".split())
RPC_CODES = frozenset(["-32700", "-32600", "-32601", "-32602", "-32603", "-32022"])
OTHER_OUTCOMES = frozenset(["ok", "notification", "response", "cancelled"])
DAEMON_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")

LOG_LINE = re.compile(
    r"memprove-mcp (?P<era>modern|legacy|-) (?P<method>-|\".*?) id=(?P<id>-|-?[0-9]+|\".*?) "
    r"tool=(?P<tool>[a-z_]+|\?|-) (?P<outcome>[a-z][a-z0-9_]*|-?[0-9]+) (?P<ms>[0-9]+)ms"
    r"(?P<warning> warning=token_file_too_open)?\Z")

# The ids of the server's roots/list requests (clients.md), n counting from 1.
ROOTS_REQUEST_ID = re.compile(r"memprove-roots-[1-9][0-9]*\Z")

# Every CPython the server runs on (contract.md section 5).  pyenv provides
# 3.6-3.13; tests/pythons.sh provides 3.14 and 3.15 (Debian unstable in a chroot).
PYTHON_VERSIONS = ("3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
PYTHONS_SCRIPT = "tests/pythons.sh"


# ---------------------------------------------------------------------------
# How deep the suite goes
# ---------------------------------------------------------------------------

# MEMPROVE_TEST_PROFILE picks the depth of the tests that generate or repeat their
# cases.  "quick", the default (the README's command, run many times a day), runs every
# test and every property with a fifth of the examples and rounds; "ci", which .ci/run
# selects, runs them at full depth.  MEMPROVE_FUZZ_EXAMPLES, MEMPROVE_FAULT_ROUNDS,
# MEMPROVE_SOAK_CALLS and MEMPROVE_STRESS_ROUNDS still set one size outright.
TEST_PROFILES = ("quick", "ci")
TEST_PROFILE = os.environ.get("MEMPROVE_TEST_PROFILE", "").strip() or "quick"
QUICK_SHARE = 5


def depth(full):
    """A count of examples or rounds that is `full` at CI depth, under this run's
    profile: all of it under "ci", a fifth of it (at least 10) under "quick"."""
    return full if TEST_PROFILE == "ci" else max(10, full // QUICK_SHARE)


# A tier this machine lacks (an interpreter, Windows under Wine, root, the interop
# clients) is a skip that says how to get it, unless MEMPROVE_TEST_STRICT=1: then it fails
# the run.  .ci/run sets it, since it provides every tier; the project's own variable, not
# CI, which GitHub's runners set too, where Wine, root and the chroot do not exist.
STRICT_VARIABLE = "MEMPROVE_TEST_STRICT"


def strict():
    """True when a missing tier fails the run rather than skipping (MEMPROVE_TEST_STRICT=1)."""
    return os.environ.get(STRICT_VARIABLE, "").strip() == "1"


def _load_hypothesis_profile():
    """Hypothesis's own profiles, for every property that does not count its examples
    itself; the fuzzers count theirs with depth()."""
    try:
        from hypothesis import settings
    except ImportError:      # the modules that need it skip (or fail when strict) saying so
        return
    settings.register_profile("ci", max_examples=100)
    settings.register_profile("quick", max_examples=100 // QUICK_SHARE)
    if TEST_PROFILE in TEST_PROFILES:
        settings.load_profile(TEST_PROFILE)


_load_hypothesis_profile()


# ---------------------------------------------------------------------------
# What the xdist workers of one run share
# ---------------------------------------------------------------------------

def run_directory(tmp_path_factory):
    """This run's base temporary directory: the worker's own under xdist holds only
    that worker's files, so the run's is its parent (the controller's)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def exclusive_lock(path):
    """Hold an exclusive lock on the file `path` (made if absent) while the block runs."""
    with open(str(path), "a+b") as handle:
        if os.name == "nt":
            import msvcrt
            while True:
                handle.seek(0)
                try:
                    msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError as error:
                    # LK_LOCK gives up after ten seconds (Wine's ucrtbase: after ten
                    # milliseconds, leaving errno 0): try again.
                    if error.errno not in (errno.EDEADLOCK, 0):
                        raise
            try:
                yield
            finally:
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            import fcntl
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def built_once(tmp_path_factory, name, build):
    """The path `build(folder)` returns, built into <run directory>/<name> by the first
    worker of this run that asks while the others wait, and returned to every later call.
    The lock and the note of the path sit beside the folder, which holds the build alone."""
    run = run_directory(tmp_path_factory)
    folder, note = run / name, run / (name + ".path")
    with exclusive_lock(run / (name + ".lock")):
        if note.is_file():
            return Path(note.read_text("utf-8"))
        if folder.exists():              # a build that failed, in another worker
            shutil.rmtree(str(folder))
        folder.mkdir()
        path = build(folder)
        note.write_text(str(path), "utf-8")
        return path


# ---------------------------------------------------------------------------
# The .pyz and the interpreters
# ---------------------------------------------------------------------------

# MEMPROVE_TEST_PYZ names an archive the tests take instead of building one: the release
# workflow runs the suite against the very bytes it publishes.  (tests/test_build.py, which
# tests the build itself, still builds its own.)
PYZ_VARIABLE = "MEMPROVE_TEST_PYZ"


def assert_built_from_this_tree(data):
    """A given archive must be this tree's: the bytes build_zipapp.py makes of this tree's
    module and pyz/ with the archive's own bytecode entries (which only each interpreter
    could make again), or the tests would pass for an archive they do not describe."""
    import importlib.util
    import io
    import zipfile
    spec = importlib.util.spec_from_file_location("build_zipapp_of_the_tree",
                                                  str(REPO / "build_zipapp.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        bytecode = [build.Bytecode(name.split("/")[1], "", "", archive.read(name))
                    for name in archive.namelist() if name.startswith("pyc/")]
    expected = build.archive_bytes((REPO / "memprove_mcp.py").read_bytes(), bytecode)
    assert data == expected, "%s names an archive not built from this tree (its module or " \
        "pyz/ differ)" % PYZ_VARIABLE


def build_pyz(folder):
    """folder/memprove_mcp.pyz: built from this tree with every interpreter find_python
    finds, or a copy of the archive MEMPROVE_TEST_PYZ names: its bytes, in this run's
    temporary folder (which the chroot's interpreters see) as a built one is, with the mode
    the build gives (an artifact or a download keeps the bytes, not the mode)."""
    out = folder / "memprove_mcp.pyz"
    given = os.environ.get(PYZ_VARIABLE, "").strip()
    if given:
        assert os.path.isfile(given), "%s=%s is not a file" % (PYZ_VARIABLE, given)
        shutil.copyfile(given, str(out))
        os.chmod(str(out), 0o755)       # build_zipapp.py's ARCHIVE_MODE
        assert_built_from_this_tree(out.read_bytes())
        return out
    pythons = []
    for minor in PYTHON_VERSIONS:
        if find_python(minor):
            pythons += ["--python", find_python(minor)]
    done = subprocess.run([sys.executable, str(REPO / "build_zipapp.py"), "--output", str(out)]
                          + pythons, cwd=str(REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)
    assert done.returncode == 0, "build_zipapp.py failed: %r" % (done.stderr,)
    assert out.is_file()
    return out


def _pyenv_root():
    exe = shutil.which("pyenv")
    if exe:
        try:
            out = subprocess.run([exe, "root"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 timeout=30).stdout.decode().strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")


def _version_key(path):
    name = Path(path).parent.parent.name          # versions/3.11.7/bin/python3.11
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.]", name))


def _real_interpreter(candidate, minor, cwd=None):
    """The interpreter's own sys.executable if it runs and is `minor`, else None."""
    try:
        done = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.executable)"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    if done.returncode != 0 or len(lines) < 2 or lines[0] != minor:
        return None
    return lines[1]


_FOUND = {}


def wrappers_bin(variable, cache_name):
    """Where a setup script (tests/pythons.sh, tests/windows.sh) puts its wrappers:
    $variable, else ${XDG_CACHE_HOME:-~/.cache}/cache_name/bin."""
    if os.environ.get(variable):
        return Path(os.environ[variable])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / cache_name / "bin"


def pythons_bin():
    return wrappers_bin("MEMPROVE_TEST_PYTHONS_BIN", "memprove-mcp-pythons")


def find_python(minor):
    """A path that runs Python `minor` ("3.6"...): pyenv's newest patch release
    of it, else `python3.X` on PATH, else tests/pythons.sh's chroot wrapper
    (which sees only the files under /tmp); None when there is none."""
    if minor not in _FOUND:
        found = None
        pattern = os.path.join(_pyenv_root(), "versions", minor + ".*", "bin", "python" + minor)
        for candidate in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if re.match(r"\d+\.\d+\.\d+\Z", Path(candidate).parent.parent.name):
                found = _real_interpreter(candidate, minor)
                if found:
                    break
        if not found:
            on_path = shutil.which("python" + minor)
            if on_path and "shims" not in Path(on_path).parts:
                found = _real_interpreter(on_path, minor)
        if not found:
            wrapper = pythons_bin() / ("python" + minor)
            # Its sys.executable is a path inside the chroot: keep the wrapper's.
            if wrapper.is_file() and _real_interpreter(str(wrapper), minor, cwd="/tmp"):
                found = str(wrapper)
        if not found and minor == "%d.%d" % sys.version_info[:2]:
            found = sys.executable      # a host without pyenv (Windows, macOS): the tests' own
        _FOUND[minor] = found
    return _FOUND[minor]


def how_to_get(minor):
    """The command that provides Python `minor` for the tests."""
    if tuple(map(int, minor.split("."))) >= (3, 14):
        return "sudo %s (Debian unstable's python%s in a chroot)" % (PYTHONS_SCRIPT, minor)
    return "pyenv install %s" % minor


def require_python(minor):
    """find_python(minor), else skip naming the command that gets it (fail when strict())."""
    path = find_python(minor)
    reason = None
    if path is None:
        reason = "Python %s is not installed; get it with: %s" % (minor, how_to_get(minor))
    elif Path(path).parent == pythons_bin() and not (
            os.path.realpath(tempfile.gettempdir()) + "/").startswith("/tmp/"):
        reason = ("Python %s runs in a chroot that shares only /tmp, and the tests' files go "
                  "to %s: unset TMPDIR" % (minor, tempfile.gettempdir()))
    if reason is not None:
        if strict():
            pytest.fail(reason + " (MEMPROVE_TEST_STRICT=1 requires every Python %s to %s)"
                        % (PYTHON_VERSIONS[0], PYTHON_VERSIONS[-1]))
        pytest.skip(reason)
    return path


def default_server_python():
    """The interpreter a server runs under unless a test names one: sys.executable,
    or Python X.Y when MEMPROVE_TEST_SERVER_PYTHON=X.Y (a path is taken as is), so
    that the end-to-end suite can be run with the server under each Python."""
    wanted = os.environ.get("MEMPROVE_TEST_SERVER_PYTHON")
    if not wanted:
        return sys.executable
    if re.match(r"3\.[0-9]+\Z", wanted):
        return require_python(wanted)
    if server_is_windows():
        return require_windows_python(wanted[len("win"):])
    return wanted


# ---------------------------------------------------------------------------
# Windows: python.org's CPython for Windows, under Wine (tests/windows.sh)
#
# MEMPROVE_TEST_SERVER_PYTHON=win3.8 (or win3.13) runs the tests that start their
# server through `start_server` with the server under that interpreter; the
# tests that name `windows_python` (the `win` fixture's, in the files of the features
# they test) run under each.  The
# server then sees /tmp/x as Z:\tmp\x: a test that registers a Workspace at the
# reference daemon or compares a root uses `server_path`.  The tests that are
# POSIX by nature are listed, with why, in WINDOWS_POSIX_ONLY.
# ---------------------------------------------------------------------------

WINDOWS_VERSIONS = ("3.8", "3.13")
WINDOWS_SCRIPT = "tests/windows.sh"

# pytest itself on Windows (the CI's windows-latest): every Python there is a Windows one,
# paths are the host's own, and the tests that need a POSIX host are skipped (conftest.py,
# WINDOWS_POSIX_ONLY and POSIX_HOST_ONLY).
HOST_IS_WINDOWS = os.name == "nt"


def windows_bin():
    return wrappers_bin("MEMPROVE_TEST_WINDOWS_BIN", "memprove-mcp-windows")


_FOUND_WINDOWS = {}


def find_windows_python(minor):
    """tests/windows.sh's wrapper for Windows Python `minor` if it runs that, else None."""
    if minor not in _FOUND_WINDOWS:
        wrapper = windows_bin() / ("python-win" + minor)
        found = None
        if wrapper.is_file():
            try:
                done = subprocess.run(
                    [str(wrapper), "-c", "import os, sys; print(os.name, '%d.%d' % sys.version_info[:2])"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    timeout=120, cwd="/tmp")
                if done.returncode == 0 and done.stdout.split() == [b"nt", minor.encode()]:
                    found = str(wrapper)
            except (OSError, subprocess.SubprocessError):
                pass
        _FOUND_WINDOWS[minor] = found
    return _FOUND_WINDOWS[minor]


def require_windows_python(minor):
    """find_windows_python(minor), else skip naming the command that sets it up
    (fail when strict())."""
    path = find_windows_python(minor)
    if path is None:
        reason = ("Windows Python %s under Wine is not set up (no working %s); get it with: "
                  "%s (as root, or as yourself once `sudo apt-get install wine64 wine64-preloader` is done)"
                  % (minor, windows_bin() / ("python-win" + minor), WINDOWS_SCRIPT))
        if strict():
            pytest.fail(reason + " (MEMPROVE_TEST_STRICT=1 requires the Windows tier)")
        pytest.skip(reason)
    return path


def server_is_windows():
    """True when MEMPROVE_TEST_SERVER_PYTHON names a Windows Python (win3.X)."""
    return bool(re.match(r"win3\.[0-9]+\Z", os.environ.get("MEMPROVE_TEST_SERVER_PYTHON", "")))


# What `server_python` runs through: every Python, or with the server under Windows
# that one alone (so the tests parametrized by it run there too, once).
SERVER_PYTHONS = ((os.environ["MEMPROVE_TEST_SERVER_PYTHON"],) if server_is_windows()
                  else PYTHON_VERSIONS)


def is_windows_python(python):
    """True for tests/windows.sh's wrappers, and for every Python when the tests themselves
    run on Windows (HOST_IS_WINDOWS)."""
    return HOST_IS_WINDOWS or (Path(str(python)).parent == windows_bin()
                               and Path(str(python)).name.startswith("python-win"))


_SERVER_PATHS = {}


def server_path(path, python=None):
    """`path` as a server under `python` (default: default_server_python()) computes
    it, os.path.realpath there: resolved, and under Wine in Windows form (Z:\\tmp\\x)."""
    python = python or default_server_python()
    if HOST_IS_WINDOWS or not is_windows_python(python):
        return os.path.realpath(str(path))
    key = (str(python), str(path))
    if key not in _SERVER_PATHS:
        _SERVER_PATHS[key] = ask_python(python, "os.path.realpath(sys.argv[1])", str(path))
    return _SERVER_PATHS[key]


def server_file_uri(path, python=None, resolved=True):
    """The `file:` URI a client on the server's platform gives for `path`:
    file:///tmp/x, and under Windows file:///Z:/tmp/x.  `resolved=False`
    keeps the links in `path` as written (Wine's Z: drive is /)."""
    local = server_path(path, python) if resolved else os.path.abspath(str(path))
    if is_windows_python(python or default_server_python()):
        if not resolved and not HOST_IS_WINDOWS:
            local = "Z:" + local
        return "file:///" + quote(local.replace("\\", "/"), safe="/:")
    return "file://" + quote(local)


def default_config_dir(home, python=None):
    """The configuration directory of a server under `python` that nothing names one
    to (contract.md §1): ~/.config/memprove, and on Windows %APPDATA%\\memprove
    (Wine sets APPDATA whatever the caller passes)."""
    python = python or default_server_python()
    if HOST_IS_WINDOWS:
        return str(Path(home) / "AppData" / "Roaming" / "memprove")     # clean_env's APPDATA
    if not is_windows_python(python):
        return str(Path(home) / ".config" / "memprove")
    return ask_python(python, "os.path.join(os.environ['APPDATA'], 'memprove')")


def ask_python(python, expression, *args):
    """The value of `expression` (a str; os, sys imported, sys.argv[1:] = args) under `python`.

    Under Wine, python.exe very rarely exits 1 before it runs anything, saying nothing
    on either stream (seen once in some thousands of starts in one CI run, with the
    session held): Wine's, not the interpreter's, so a question is asked once more then."""
    for _ in range(2):
        done = subprocess.run(
            [str(python), "-c", "import os, sys; sys.stdout.buffer.write((%s).encode('utf-8'))"
             % expression] + list(args),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            timeout=SAFETY_TIMEOUT, cwd="/tmp")
        if done.returncode == 0 or done.stdout or done.stderr or \
                not is_windows_python(python):
            break
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8")


# ---------------------------------------------------------------------------
# The Windows side (tests/windows.sh's interpreters under Wine): what one of them sees,
# and helper processes it runs
# ---------------------------------------------------------------------------

# Long enough for every wait below, so that a call fails only when the server gives up.
PATIENT_TIMEOUT = "60"

_FACTS = {}


class Windows:
    """One Windows Python and what it sees: sys.executable, USERPROFILE, APPDATA."""

    def __init__(self, python):
        self.python = python
        if python not in _FACTS:
            _FACTS[python] = json.loads(ask_python(python, "__import__('json').dumps(["
                                                   "sys.executable, os.environ['USERPROFILE'], "
                                                   "os.environ['APPDATA']])"))
        self.executable, self.profile, self.appdata = _FACTS[python]

    def path(self, path):
        """`path` as this interpreter names it (Z:\\tmp\\...)."""
        return server_path(path, self.python)


class Helper:
    """A Windows Python running `script` (its source) with pipes; `expect` waits for
    a line it prints, `tell` writes it one."""

    def __init__(self, win, directory, name, script, *args):
        path = Path(directory) / (name + ".py")
        path.write_text(script)
        self.proc = subprocess.Popen([win.python, str(path)] + [str(arg) for arg in args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=str(directory))
        self.lines = queue.Queue()
        self.errors = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines.put),
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.errors.append),
                         daemon=True).start()

    @staticmethod
    def _read(stream, keep):
        for line in iter(stream.readline, b""):
            keep(line.decode("utf-8", "replace").rstrip("\r\n"))
        keep(None)

    def expect(self, wanted, timeout=SAFETY_TIMEOUT * 4):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("the helper printed nothing within %ss" % timeout)
        assert line == wanted, (line, wanted, self.errors)

    def tell(self, line):
        self.proc.stdin.write(line.encode("ascii") + b"\n")
        self.proc.stdin.flush()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def windows_print_config(win, plain_pyz, args, env, cwd):
    done = run_cli(win.python, plain_pyz, ["mcp", "print-config"] + list(args), env, cwd)
    assert done.returncode == 0, done.stderr
    return done


POSIX_SHELL_ONLY = [
    (re.compile(r"\bexport\s"), "export"),
    (re.compile(r"\bunset\s"), "unset"),
    (re.compile(r"\bmkdir\s+-p\b"), "mkdir -p"),
    (re.compile(r"\bchmod\b"), "chmod"),
    (re.compile(r"'\"'\"'"), "'\"'\"' quoting"),
    (re.compile(r"\bpython3\s"), "python3"),
    (re.compile(r"(^|[\s'\"(=,:])~[/\\]"), "~/"),
    # (A quoted 'NAME=value' is a word PowerShell passes as it is: `claude mcp add -e`'s.)
    (re.compile(r"(?<![\w:$'])[A-Z][A-Z0-9_]*=\S"), "NAME=value"),
    # A POSIX absolute path standing as a word: /tmp/x, /path/to/your/project.
    (re.compile(r"(^|[\s'\"(=,])/[\w.-]+/"), "a POSIX path"),
]


# The variables whose value is a path: a `$env:NAME = '...'` fix gives a Windows one.
PATH_VARIABLES = ("MEMPROVE_TOKEN_FILE", "MEMPROVE_DATA_DIR", "MEMPROVE_CONFIG_DIR",
                  "MEMPROVE_WORKSPACE")


WINDOWS_ABSOLUTE = re.compile(r"([A-Za-z]:\\|\\\\[^\\]+\\)")


def powershell_problems(text):
    """What in one line of doctor output is POSIX shell or not a Windows path."""
    problems = [name for pattern, name in POSIX_SHELL_ONLY if pattern.search(text)]
    for match in re.finditer(r"\$env:([A-Za-z_][A-Za-z0-9_]*)\s*=\s*'((?:[^']|'')*)'", text):
        if match.group(1) in PATH_VARIABLES and not WINDOWS_ABSOLUTE.match(match.group(2)):
            problems.append("$env:%s is not given a Windows path" % match.group(1))
    return problems


def stderr_line_ending(python):
    """How the server's log lines end: CR LF under Windows, whose standard error is
    a text stream there (the contract fixes `\\n` for standard output only)."""
    return b"\r\n" if is_windows_python(python) else b"\n"


def exit_status(python, code):
    """The exit status of a server that ended by itself (no test killed it).  Wine 8
    now and then shows a Windows Python 3.8 that leaves with os._exit while a thread
    waits on its standard input as killed by SIGKILL (measured: 1 in 100-200 such
    exits; none in 300 under 3.13; on Windows the status is the one given): a -9
    there is read as the 0 the server gave."""
    if code == -9 and is_windows_python(python):
        return 0
    return code


# Tests that hold only on POSIX, by their nature: skipped with the server under
# Windows, saying why.  Keys: "file.py::test" (every parameter) or "file.py".
WINDOWS_POSIX_ONLY = {
    "test_transport.py::test_signal_exits_promptly_and_quietly":
        "SIGTERM and SIGINT are POSIX signals (Wine's loader dies of them as a Unix process)",
    "test_transport.py::test_signal_while_a_long_line_streams_in":
        "SIGTERM and SIGINT are POSIX signals (Wine's loader dies of them as a Unix process)",
    "test_protocol.py::test_signal_exits_promptly_and_quietly":
        "SIGTERM and SIGINT are POSIX signals (Wine's loader dies of them as a Unix process)",
    "test_protocol.py::test_signal_exits_promptly_with_a_call_in_flight":
        "SIGTERM and SIGINT are POSIX signals (Wine's loader dies of them as a Unix process)",
    "test_protocol.py::test_token_file_too_open_warning_on_a_daemon_call":
        "file modes: token_file_too_open is never raised on Windows (contract.md §5)",
    "test_protocol.py::test_token_file_too_open_warning_on_context":
        "file modes: token_file_too_open is never raised on Windows (contract.md §5)",
    "test_context_file.py::test_rule12_new_context_gets_the_umasks_mode":
        "file modes and the umask (Windows has ACLs)",
    "test_context_file.py::test_rule12_rewrite_keeps_the_mode": "file modes (Windows has ACLs)",
    "test_configuration_env.py::test_rule11_too_open_token_file_warns_whatever_it_holds":
        "file modes: token_file_too_open is never raised on Windows (contract.md §5)",
    "test_context_file.py::test_rule6_links_in_memprove_are_not_followed":
        "POSIX symbolic links and O_NOFOLLOW (Wine shows a Unix link as the file it names)",
    "test_context_file.py::test_linked_context_is_unreadable_and_never_followed":
        "POSIX symbolic links (Wine shows a Unix link as the file it names)",
    "test_context_file.py::test_rule14_a_linked_context_is_unreadable":
        "POSIX symbolic links (Wine shows a Unix link as the file it names)",
    "test_context_file.py::test_memprove_tree_fuzz":
        "POSIX symbolic links and owners (Wine shows a Unix link as the file it names)",
    "test_workspace_sources.py::test_s2_workspace_path_not_utf8":
        "a path of arbitrary bytes (Windows paths are UTF-16)",
    "test_workspace_sources.py::test_workspace_path_fuzz": "paths of arbitrary bytes (Windows paths are UTF-16)",
    "test_workspace_sources.py::test_rule11_deleted_working_directory":
        "deleting a process's working directory (Windows refuses to)",
    "test_transport.py::test_rule4_flood_of_large_calls_keeps_memory_bounded":
        "reads the server's memory and blocked read from /proc (under Wine: Wine's loader)",
    "test_hook.py::test_silence_for_an_untrusted_daemon_json_and_no_request":
        "file modes (Windows has ACLs)",
    "test_hook.py::test_print_config_hook_prints_an_entry_whose_command_gives_the_pack":
        "runs the printed hook command with sh, as the clients do on Linux and macOS",
    "test_hook.py::test_the_kits_hooks_json_runs_the_hook_under_sh":
        "runs the kit's hook command with sh, as the clients do on Linux and macOS",
    "test_hook.py::test_a_kit_written_with_workspace_names_it_in_the_hook":
        "runs the kit's hook command with sh, as the clients do on Linux and macOS",
    "test_hook.py::test_doctors_hook_check":
        "doctor and print-config run under the tests' POSIX Python beside the server's context",
    "test_hook.py::test_doctors_hook_check_finds_the_kit_each_client_installed":
        "doctor and the kit run under the tests' POSIX Python beside the server's context",
    "test_cli.py::test_serve_says_what_it_is_to_a_terminal_and_nothing_to_a_pipe":
        "a pseudo-terminal on standard input (Windows has consoles, not ptys)",
    "test_ledgerd.py::test_run_records_what_complete_accepts":
        "ledgerd.py run, a POSIX process, beside the Windows server's context (its Z:\\ root)",
    "test_ledgerd.py::test_run_of_a_missing_command_records_a_failed_run":
        "ledgerd.py run, a POSIX process, beside the Windows server's context (its Z:\\ root)",
    "test_configuration.py::test_rule31_a_data_dir_someone_else_could_write_counts_as_absent":
        "POSIX owners, modes and groups (Windows has ACLs: contract.md §6 rules 31 and 36 do not apply)",
    "test_configuration.py::test_rule31_a_token_file_someone_else_could_write_counts_as_absent":
        "POSIX owners, modes and groups (Windows has ACLs: contract.md §6 rules 31 and 36 do not apply)",
    "test_configuration.py::test_rule31_the_users_own_files_links_and_roots_sticky_folders_are_believed":
        "POSIX owners, modes and groups (Windows has ACLs: contract.md §6 rules 31 and 36 do not apply)",
    "test_configuration.py::test_rule36_a_folder_another_group_can_write_is_not_believed":
        "POSIX owners, modes and groups (Windows has ACLs: contract.md §6 rules 31 and 36 do not apply)",
    "test_configuration.py::test_rule36_roots_group_is_private_only_named_as_root_and_shared_with_no_one":
        "POSIX owners, modes and groups (Windows has ACLs: contract.md §6 rules 31 and 36 do not apply)",
    "test_hook.py::test_rule32_the_printed_hook_in_the_repositorys_file_is_ok_and_named_as_the_repositorys":
        "doctor runs under the tests' POSIX Python beside the server's context",
    "test_hook.py::test_rule35_a_log_file_of_another_user_gets_nothing":
        "POSIX links and owners (Wine shows a Unix link as the file it names)",
    "test_hook.py::test_rule35_a_log_reached_through_another_users_link_in_a_sticky_folder_gets_nothing":
        "POSIX links and owners (Wine shows a Unix link as the file it names)",
    "test_hook.py::test_rule35_a_log_that_is_a_link_leaves_the_file_it_names_unchanged":
        "POSIX links and owners (Wine shows a Unix link as the file it names)",
    "test_ledgerd.py::test_rule35_run_does_not_append_into_a_memprove_folder_that_is_a_link":
        "ledgerd.py run, a POSIX process, beside the Windows server's context (its Z:\\ root)",
    "test_ledgerd.py::test_rule35_run_does_not_append_through_a_runs_file_that_is_a_hard_link":
        "ledgerd.py run, a POSIX process, beside the Windows server's context (its Z:\\ root)",
    "test_ledgerd.py::test_rule35_run_does_not_append_through_a_runs_file_that_is_a_link":
        "ledgerd.py run, a POSIX process, beside the Windows server's context (its Z:\\ root)",
    "test_ledgerd.py::test_rule35_run_with_a_runs_file_that_is_a_fifo_ends_and_writes_nothing":
        "ledgerd.py run, a POSIX process, beside the Windows server's context (its Z:\\ root)",
    "test_stop_hook.py::test_rule19_an_untrusted_daemon_json_is_silent_and_gets_no_request":
        "file modes (Windows has ACLs)",
    "test_stop_hook.py::test_doctor_warns_of_a_hooks_file_without_the_stop_hook":
        "doctor runs under the tests' POSIX Python beside the server's context",
    "test_stop_hook.py::test_doctor_codex_trusted_for_this_kit_is_ok":
        "doctor runs under the tests' POSIX Python beside the server's context",
    "test_stop_hook.py::test_doctor_says_the_minutes_in_force_with_the_kit_installed":
        "doctor runs under the tests' POSIX Python beside the server's context",
}


# Reasons POSIX_HOST_ONLY gives more than once.
SHEBANG = ("runs the .pyz as a program, by its shebang (Windows starts a program by its "
           "extension: WinError 193)")
POSIX_CACHE = ("the bytecode cache's POSIX folder ($XDG_CACHE_HOME or ~/.cache; under Windows "
               "it is %LOCALAPPDATA%'s, which the Windows tier's test_bytecode_cache.py tests)")

POSIX_FIX_LINES = ("expects doctor's sh fix lines (export, mkdir -p -m 700, chmod, sh quoting); "
                   "on Windows they are PowerShell's, which test_doctor_fix_lines.py checks")
POSIX_MODES = "POSIX file modes and owners (Windows has ACLs: contract.md §6 rules 25 and 31)"
NO_FIFOS = "os.mkfifo (Windows has no FIFOs)"
POSIX_LINKS = ("POSIX symbolic links and O_NOFOLLOW (Windows's need a privilege; Wine shows a "
               "Unix link as the file it names)")
POSIX_UIDS = ("judges POSIX owners given a POSIX platform, against this process's uid "
              "(os.geteuid, which Windows has not)")
POSIX_CLIENTS = ("print-config's POSIX entries (the .pyz as their command) and the clients' "
                 "POSIX files; Windows's are the Windows tier's (test_where_line_names_real_windows_files)")
CONTROL_NAMES = "a file name holding a control character (Windows forbids them)"
CODEX_TRUST = ("Codex's trust of the kit's POSIX hook handlers (a Windows handler's trusted_hash "
               "is not known, so doctor does not judge it)")
POSIX_ENTRY = ("hand-writes the POSIX layout of an entry, the .pyz as its command (on Windows "
               "the entry names the interpreter first and doctor fails a bare .pyz)")

# Tests that need the tests' own process on POSIX (fcntl, termios, ptys, os.mkfifo,
# preexec_fn, sh, a .pyz run by its shebang): skipped, with WINDOWS_POSIX_ONLY's, when
# pytest itself runs on Windows (HOST_IS_WINDOWS).
POSIX_HOST_ONLY = {
    "test_cli.py::test_pyz_runs_by_its_shebang": SHEBANG,
    "test_cli.py::test_rule35_a_log_no_command_may_write_gets_nothing_and_holds_none_up[fifo]":
        "os.mkfifo (Windows has no FIFOs)",
    "test_cli.py::test_rule35_a_log_no_command_may_write_gets_nothing_and_holds_none_up[link]":
        "a POSIX symbolic link (Windows's need a privilege; Wine shows a Unix link as the file "
        "it names)",
    "test_build.py::test_real_pyz_prints_its_version": SHEBANG,
    "test_build.py::test_stand_in_pyz_runs_directly_and_through_python": SHEBANG,
    "test_build.py::test_pyz_runs_from_a_path_with_a_space_and_through_a_symlink": SHEBANG,
    "test_build.py::test_reproducible_across_dirs_mtimes_modes_umasks_and_cwds":
        "umasks set by preexec_fn, and file modes (Windows has ACLs)",
    "test_build.py::test_archive_layout": "the archive's executable bits (Windows has ACLs)",
    "test_build.py::test_unknown_python_compiles_once_then_starts_from_the_cache": POSIX_CACHE,
    "test_build.py::test_the_cache_defaults_to_home_dot_cache": POSIX_CACHE,
    "test_build.py::test_a_damaged_cache_file_is_ignored_and_replaced": POSIX_CACHE,
    "test_build.py::test_a_foreign_cache_file_is_ignored_and_replaced": POSIX_CACHE,
    "test_build.py::test_nothing_is_written_under_dont_write_bytecode": POSIX_CACHE,
    "test_build.py::test_a_cache_directory_others_can_write_is_made_private_and_not_trusted":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_anything_but_the_users_own_regular_file_is_ignored_and_replaced":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_prepare_makes_a_missing_directory_0700_only_when_writable":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_prepare_empties_a_directory_others_could_write_and_follows_no_link":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_write_replaces_a_link_in_its_place_without_following_it":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_a_directory_others_can_only_read_is_made_private_and_used":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_the_archive_runs_its_cache_writer_as_a_module_whose_lines_are_pyz_s":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_a_directory_others_can_write_is_emptied_before_use":
        POSIX_CACHE,
    "test_bytecode_cache.py::test_dont_write_bytecode_changes_nothing_and_reads_only_what_no_one_else_could_write":
        POSIX_CACHE,
    "test_transport.py::test_rule5_nonblocking_stdout_loses_no_answer":
        "a wrapper run by its shebang sets O_NONBLOCK on standard output with fcntl",
    "test_hygiene.py::test_the_readme_by_hand_lines_speak_mcp":
        "runs the README's lines for Linux and macOS with sh",
    "test_hygiene.py::test_the_readme_quick_start_runs_as_written":
        "runs the README's lines for Linux and macOS with sh",
    # doctor's fix lines in sh (PowerShell on Windows)
    "test_doctor.py::test_rule35_environment_warns_for_a_log_that_is_not_a_regular_file":
        POSIX_FIX_LINES,
    "test_doctor.py::test_rule35_environment_warns_for_a_relative_log_path": POSIX_FIX_LINES,
    "test_doctor.py::test_config_dir_from_option": POSIX_FIX_LINES,
    "test_doctor.py::test_config_dir_missing_warns": POSIX_FIX_LINES,
    "test_doctor.py::test_token_missing": POSIX_FIX_LINES,
    "test_doctor.py::test_data_dir_not_set": POSIX_FIX_LINES,
    "test_doctor.py::test_no_client_entry_warns_with_the_clients_own_command": POSIX_FIX_LINES,
    "test_doctor.py::test_client_fix_is_the_named_clients_command": POSIX_FIX_LINES,
    "test_doctor.py::test_a_client_without_an_add_command_gets_print_config_and_the_file":
        POSIX_FIX_LINES,
    "test_doctor_fix_lines.py::test_rule33_doctor_shows_a_configuration_directory_hiding_text_escaped":
        POSIX_FIX_LINES,
    "test_plugin.py::test_doctor_warns_of_a_kit_from_other_bytes_with_the_update_commands":
        POSIX_FIX_LINES,
    "test_doctor.py::test_rule29_doctors_fixes_never_run_a_command_from_a_path":
        "pastes doctor's fixes into sh (on Windows they are PowerShell lines), from paths "
        "holding control characters",
    # POSIX entries and files
    "test_doctor.py::test_hand_written_codex_toml": POSIX_ENTRY,
    "test_doctor.py::test_goose_yaml": POSIX_ENTRY,
    "test_doctor.py::test_continue_yaml_block_file": POSIX_ENTRY,
    "test_clients.py::test_every_client_parses_to_the_documented_entry": POSIX_CLIENTS,
    "test_clients.py::test_claude_code_is_the_default_byte_for_byte": POSIX_CLIENTS,
    "test_clients.py::test_the_default_output_is_the_golden_without_any_option": POSIX_CLIENTS,
    "test_clients.py::test_every_client_under_every_python": POSIX_CLIENTS,
    "test_stop_hook.py::test_doctor_codex_untrusted_hooks_warn": CODEX_TRUST,
    "test_stop_hook.py::test_doctor_codex_a_stop_hook_never_trusted_warns": CODEX_TRUST,
    "test_stop_hook.py::test_doctor_codex_trusted_for_an_earlier_kit_warns_modified": CODEX_TRUST,
    # modes, owners and uids
    "test_doctor.py::test_token_file_open_to_others_warns": POSIX_MODES,
    "test_doctor.py::test_rule31_doctor_fails_a_config_dir_others_can_write": POSIX_MODES,
    "test_doctor.py::test_rule25_doctor_fails_a_kit_others_can_change": POSIX_MODES,
    "test_plugin.py::test_rule25_a_kit_below_a_folder_others_can_write_is_refused": POSIX_MODES,
    "test_context_file.py::test_read_only_context_directory":
        "a folder made read-only by its mode (Windows has ACLs)",
    "test_context_file.py::test_unreadable_context[unreadable]":
        "a file made unreadable by its mode (Windows has ACLs)",
    "test_plugin.py::test_rule36_under_umask_002_the_folders_made_are_0755_and_the_update_is_written":
        "a umask set by a wrapper run by its shebang, and file modes (Windows has ACLs)",
    "test_configuration.py::test_daemon_json_believed_only_from_the_user_root_or_one_service_account":
        POSIX_UIDS,
    "test_configuration.py::test_a_service_account_is_refused_where_no_one_can_tell_who_listens":
        POSIX_UIDS,
    # FIFOs, links, devices
    "test_doctor.py::test_a_fifo_as_a_client_file_never_blocks": NO_FIFOS,
    "test_doctor.py::test_rule28_a_fifo_as_the_kits_pyz_never_blocks": NO_FIFOS,
    "test_hook.py::test_rule35_a_log_that_is_a_fifo_nobody_reads_neither_hangs_the_hook_nor_gets_a_byte":
        NO_FIFOS,
    "test_context_file.py::test_fifo_instead_of_a_file": NO_FIFOS,
    "test_cli.py::test_version_says_unknown_for_an_archive_it_cannot_read[fifo]": NO_FIFOS,
    "test_cli.py::test_version_says_unknown_for_an_archive_it_cannot_read[/dev/zero]":
        "a link to /dev/zero (Windows has no devices in its file system)",
    "test_doctor.py::test_linked_context_lock_is_named": POSIX_LINKS,
    "test_doctor.py::test_linked_memprove_or_context_is_named": POSIX_LINKS,
    "test_doctor.py::test_rule28_a_kits_pyz_linked_to_dev_zero_costs_bounded_memory":
        "a link to /dev/zero, and a memory limit set by preexec_fn",
    "test_platform_table.py::test_xdg_config_home_moves_the_files_of_the_clients_that_read_it":
        "a POSIX platform's XDG_CONFIG_HOME judged by the host's os.path (ntpath.isabs('/xdg') "
        "is False)",
    # names Windows cannot hold
    "test_cli.py::test_version_quotes_an_archive_path_utf8_cannot_write":
        "a path of arbitrary bytes (Windows paths are UTF-16)",
    "test_build.py::test_an_archive_name_the_sums_cannot_hold_is_refused[backslash]":
        "a backslash in a file name (on Windows it separates folders)",
    "test_clients.py::test_a_path_that_is_not_utf8_is_refused_in_one_line":
        "a path of arbitrary bytes (Windows paths are UTF-16)",
    "test_clients.py::test_the_where_line_stays_one_line[claude-code-two\\nlines]": CONTROL_NAMES,
    "test_clients.py::test_the_where_line_stays_one_line[claude-code-esc\\x1b[31mred]": CONTROL_NAMES,
    "test_clients.py::test_the_where_line_stays_one_line[gemini-two\\nlines]": CONTROL_NAMES,
    "test_clients.py::test_the_where_line_stays_one_line[gemini-esc\\x1b[31mred]": CONTROL_NAMES,
    "test_clients.py::test_the_where_line_stays_one_line[vscode-two\\nlines]": CONTROL_NAMES,
    "test_clients.py::test_the_where_line_stays_one_line[vscode-esc\\x1b[31mred]": CONTROL_NAMES,
    "test_doctor_clients.py::test_rule23_a_repositorys_mcp_json_cannot_write_a_doctor_line":
        CONTROL_NAMES + ", and /bin/sh",
    # processes: a deleted working directory, SIGTERM
    "test_print_config.py::test_rule11_print_config_in_a_deleted_working_directory":
        "deleting a process's working directory (Windows refuses to), in a wrapper run by its "
        "shebang",
    "test_plugin.py::test_doctor_judges_no_gemini_rule_from_a_deleted_working_directory":
        "deleting a process's working directory (Windows refuses to), with sh",
    "test_ledgerd.py::test_cli_prints_its_line_and_serves":
        "stops the daemon by SIGTERM and expects its clean exit (on Windows that is "
        "TerminateProcess), and file modes",
}

# Tests that need a Linux host (/proc, unshare(1), Linux's listener tables) and do not
# skip by themselves: skipped, saying why, when pytest runs elsewhere (macOS, Windows).
LINUX_HOST_ONLY = {
    "test_plugin.py::test_standard_output_gives_each_clients_commands_for_this_shell":
        "the kit's commands as printed on Linux: sh quoting, no Claude Desktop block (macOS "
        "and Windows have one)",
    "test_daemon_client.py::test_answer_over_64_mib_without_a_length":
        "reads the server's peak memory (VmHWM) from /proc",
}


def listed_reason(item, *tables):
    """The reason the first of `tables` gives for the test `item`, or None.  Keys:
    "file.py" (every test in it), "file.py::test" (every parameter) or
    "file.py::test[id]" (that one)."""
    path, _, test = item.nodeid.partition("::")
    file_name = path.rpartition("/")[2]
    keys = (file_name, file_name + "::" + test.split("[")[0], file_name + "::" + test)
    for table in tables:
        for key in keys:
            if key in table:
                return table[key]
    return None


def skip_posix_only_tests(items, host=False):
    """Skip, saying why, the tests WINDOWS_POSIX_ONLY lists (the server under Windows),
    and with host=True (pytest on Windows) POSIX_HOST_ONLY's too."""
    tables = (WINDOWS_POSIX_ONLY, POSIX_HOST_ONLY) if host else (WINDOWS_POSIX_ONLY,)
    where = "pytest on Windows" if host else "server under Windows"
    for item in items:
        reason = listed_reason(item, *tables)
        if reason:
            item.add_marker(pytest.mark.skip(reason="POSIX only (%s): %s" % (where, reason)))


# ---------------------------------------------------------------------------
# Environment, Workspace, configuration, daemon
# ---------------------------------------------------------------------------

def clean_env(home, extra=None):
    """PATH, HOME and LANG only: no MEMPROVE_*, CLAUDE_PROJECT_DIR, XDG_* or proxy
    variable of the outer environment reaches the server; callers add theirs."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LANG": "C.UTF-8"}
    if HOST_IS_WINDOWS:
        # What a Windows process needs (SYSTEMROOT: Winsock; TEMP, COMSPEC...), and the
        # profile folders under this HOME, so that no test reads or writes the host's own.
        for key in ("SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "TEMP", "TMP"):
            if os.environ.get(key):
                env[key] = os.environ[key]
        env.update(USERPROFILE=str(home), APPDATA=str(Path(home) / "AppData" / "Roaming"),
                   LOCALAPPDATA=str(Path(home) / "AppData" / "Local"))
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def make_workspace(path):
    path.mkdir(parents=True, exist_ok=True)
    (path / ".memprove").mkdir(exist_ok=True)
    (path / ".git").mkdir(exist_ok=True)
    return path


def started_daemon(config, inside=lambda make: make()):
    """tests/ledgerd.py started (by `inside`, e.g. in a network namespace) on the
    configuration's data directory, its token accepted with both scopes."""
    import ledgerd
    started = inside(lambda: ledgerd.Daemon(str(config.data_dir)).start())
    started.add_token(config.token, scopes=("mcp-read", "mcp-write"), roles="*")
    return started


class Config:
    """A configuration directory: `data-dir` names `data_dir`; `token` (0600) holds `token`."""

    def __init__(self, directory, data_dir, token):
        self.dir = directory
        self.data_dir = data_dir
        self.token = token
        self.token_file = directory / "token"

    def env(self):
        return {"MEMPROVE_CONFIG_DIR": str(self.dir)}


# ---------------------------------------------------------------------------
# Message builders
# ---------------------------------------------------------------------------

def modern_meta(client=None, version=MODERN_VERSION, capabilities=None):
    """The 2026-07-28 request `_meta`; `client` adds clientInfo with that name."""
    meta = {META_VERSION: version,
            META_CAPABILITIES: {} if capabilities is None else capabilities}
    if client is not None:
        meta[META_CLIENT] = {"name": client, "version": "1.0"}
    return meta


def modern_params(params=None, client=None, **meta_options):
    out = dict(params or {})
    out["_meta"] = modern_meta(client=client, **meta_options)
    return out


def initialize_params(version="2025-11-25", client="pytest-client"):
    return {"protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": client, "version": "1.0"}}


# ---------------------------------------------------------------------------
# Checks of the two output streams
# ---------------------------------------------------------------------------

def tool_value(result):
    """What a successful tools/call result gives a program, checked against its text.

    Nine tools give `structuredContent`, the same object as their text's JSON (a
    2025-03-26 or 2024-11-05 session gets the text alone).  `pack` gives the
    model its text (the opening statement, an empty line, the Pack) and puts
    its result object in `_meta["memprove/pack"]`; here that object comes back
    with the text split into `opening` and `pack`.
    """
    content = result["content"]
    assert result.get("isError") is False, content
    assert len(content) == 1 and content[0]["type"] == "text", content
    text = content[0]["text"]
    packed = (result.get("_meta") or {}).get("memprove/pack")
    if packed is not None:
        assert "structuredContent" not in result, result
        opening, blank, pack = text.partition("\n\n")
        assert blank, text[:200]
        value = dict(packed, opening=opening, pack=pack)
    else:
        value = json.loads(text)
        if "structuredContent" in result:
            assert result["structuredContent"] == value, result
    assert list(value)[:2] == ["task_id", "session_id"], value
    return value


def _reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def strict_json(data):
    """Parse UTF-8 JSON bytes, refusing NaN and Infinity."""
    return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)


def is_compact(text):
    """True when no white space stands outside a JSON string."""
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in " \t\r\n":
            return False
    return True


def parse_log(line):
    """The fields of one standard-error line, or AssertionError."""
    match = LOG_LINE.match(line)
    assert match, "not a log line: %r" % (line,)
    fields = match.groupdict()
    assert len(fields["method"]) <= 64 and len(fields["id"]) <= 64, line
    assert fields["tool"] in EXPECTED_TOOLS or fields["tool"] in ("?", "-"), line
    outcome = fields["outcome"]
    # A daemon may send a code of its own (contract.md §4 lets it); the log shows
    # it when it is well formed, so any such code is a valid outcome.
    assert outcome in OTHER_OUTCOMES or outcome in PROBLEM_CODES or outcome in RPC_CODES or \
        DAEMON_CODE.match(outcome), line
    return fields


def log_text(value):
    """What the log shows for a client-chosen method or id."""
    return json.dumps(value)[:64]


def same_id(message, request_id):
    """The response's id equals request_id with the same JSON type (0 is not "0")."""
    if "id" not in message:
        return False
    got = message["id"]
    return type(got) is type(request_id) and got == request_id


def check_stdout_line(raw):
    assert raw.endswith(b"\n"), "an output line is not newline-terminated: %r" % raw[:200]
    assert b"\xe2\x80\xa8" not in raw and b"\xe2\x80\xa9" not in raw, "raw U+2028/U+2029 on stdout"
    body = raw[:-1]
    text = body.decode("utf-8")
    assert "\n" not in text and "\r" not in text
    assert is_compact(text), "output is not compact JSON: %r" % text[:200]
    message = strict_json(body)
    assert isinstance(message, dict), text[:200]
    assert message.get("jsonrpc") == "2.0", text[:200]
    if "method" in message:
        # The one request the server ever sends (clients.md): roots/list, exactly.
        assert set(message) == {"jsonrpc", "id", "method"} and message["method"] == "roots/list" \
            and isinstance(message["id"], str) and ROOTS_REQUEST_ID.match(message["id"]), \
            "the server sent a request or notification: %r" % text[:200]
        return message
    assert ("result" in message) != ("error" in message), text[:200]
    if message.get("id") is not None:
        assert isinstance(message["id"], (str, int)) and not isinstance(message["id"], bool)
    else:
        # No id, or `"id": null` for a request that reused an id in flight (§6 rule 8).
        assert "error" in message, "a result without id: %r" % text[:200]
    if "error" in message:
        error = message["error"]
        assert isinstance(error, dict) and isinstance(error.get("code"), int), text[:200]
        assert isinstance(error.get("message"), str), text[:200]
        assert set(error) <= {"code", "message", "data"}, text[:200]
    return message


# ---------------------------------------------------------------------------
# The server over real pipes
# ---------------------------------------------------------------------------

_EOF = object()
_AUTO = object()
_NONE = object()


class Server:
    """`<python> <pyz> mcp serve ...` with a reader thread on each output stream."""

    def __init__(self, argv, env, cwd, planted, user=None):
        self.argv = argv
        self.env = env
        self.planted = planted
        # user: a hardening_support.LocalUser the process runs as (the test runs as root).
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=str(cwd), bufsize=0,
                                     **(user.popen_kwargs() if user is not None else {}))
        self.raw_stdout = []            # every stdout line, bytes, as read
        self.raw_stderr = []            # every stderr line, bytes, as read
        self.stderr_ending = stderr_line_ending(argv[0])
        self.messages = []              # every stdout message, parsed, in order
        self.sent = 0                   # messages sent (non-blank lines)
        self.closed = False
        self.checked = False
        self.returncode = None
        self._partial_has_text = False  # the unfinished last line holds a non-blank byte
        self._next_id = 1000
        self._incoming = queue.Queue()
        self._stash = []
        self._stderr_changed = threading.Condition()
        self._out_thread = threading.Thread(target=self._read_stdout, daemon=True)
        self._err_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._out_thread.start()
        self._err_thread.start()

    # -- reading -----------------------------------------------------------

    def _read_stdout(self):
        # Buffered: the raw stream's readline reads a byte at a time (a 1 MiB line took
        # over 30 s under Wine); a buffered read takes what the pipe holds, never waits for more.
        for line in iter(io.BufferedReader(self.proc.stdout, 1 << 16).readline, b""):
            self.raw_stdout.append(line)
            try:
                message = strict_json(line)
            except Exception:
                message = {"unparseable": line[:200]}
            self.messages.append(message)
            self._incoming.put(message)
        self._incoming.put(_EOF)

    def _read_stderr(self):
        for line in iter(self.proc.stderr.readline, b""):
            with self._stderr_changed:
                self.raw_stderr.append(line)
                self._stderr_changed.notify_all()
        with self._stderr_changed:
            self._stderr_changed.notify_all()

    def _pull(self, timeout):
        try:
            message = self._incoming.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message from the server within %ss" % timeout)
        if message is _EOF:
            self._incoming.put(_EOF)
            raise AssertionError("the server closed its standard output (exit %r); stderr: %r"
                                 % (self.proc.poll(), self.stderr_lines[-5:]))
        return message

    def next_message(self, timeout=SAFETY_TIMEOUT):
        """The next stdout message not yet claimed, in arrival order."""
        if self._stash:
            return self._stash.pop(0)
        return self._pull(timeout)

    def response(self, request_id, timeout=SAFETY_TIMEOUT):
        """The response whose id is request_id (same JSON type); others are kept."""
        return self._claim(lambda message: same_id(message, request_id) and "method" not in message,
                           timeout)

    def server_request(self, timeout=SAFETY_TIMEOUT):
        """The next request the server sent (roots/list); other messages are kept."""
        return self._claim(lambda message: "method" in message, timeout)

    def _claim(self, wanted, timeout):
        for index, message in enumerate(self._stash):
            if wanted(message):
                return self._stash.pop(index)
        while True:
            message = self._pull(timeout)
            if wanted(message):
                return message
            self._stash.append(message)

    def server_requests(self):
        """Every request the server sent, from all of standard output (read after close)."""
        return [message for message in self.messages if "method" in message]

    def unclaimed(self):
        """Messages that arrived while waiting for others and were not claimed."""
        return list(self._stash)

    @property
    def stdout_lines(self):
        return [line.decode("utf-8", "replace").rstrip("\n") for line in self.raw_stdout]

    @property
    def stderr_lines(self):
        with self._stderr_changed:
            return [line.decode("utf-8", "replace")[:-len(self.stderr_ending)]
                    if line.endswith(self.stderr_ending) else line.decode("utf-8", "replace")
                    for line in self.raw_stderr]

    def log_records(self):
        return [parse_log(line) for line in self.stderr_lines]

    def wait_stderr_lines(self, count, timeout=SAFETY_TIMEOUT):
        """Block until `count` stderr lines have been read (or the stream ended)."""
        with self._stderr_changed:
            ok = self._stderr_changed.wait_for(
                lambda: len(self.raw_stderr) >= count or not self._err_thread.is_alive(),
                timeout=timeout)
        assert ok and len(self.raw_stderr) >= count, (
            "expected %d stderr lines, have %r" % (count, self.stderr_lines))
        return self.stderr_lines

    # -- writing -----------------------------------------------------------

    def send_raw(self, data):
        """Write bytes as they are; non-blank complete lines count as messages."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        # Only the new bytes are scanned: a line sent in many pieces (the 128 MiB
        # ones) would otherwise be copied and split again on every piece.
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if self._partial_has_text or line.strip():
                self.sent += 1
            self._partial_has_text = False
        self._partial_has_text = self._partial_has_text or bool(rest.strip())
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message):
        data = json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
        self.send_raw(data)

    def new_id(self):
        self._next_id += 1
        return self._next_id

    def request_message(self, method, params=_NONE, id=_AUTO):
        message = {"jsonrpc": "2.0", "id": self.new_id() if id is _AUTO else id, "method": method}
        if params is not _NONE:
            message["params"] = params
        return message

    def request(self, method, params=_NONE, id=_AUTO):
        """Send a request and return its response (matched by id)."""
        message = self.request_message(method, params, id)
        self.send(message)
        return self.response(message["id"])

    def answer(self, request, result=_NONE, error=_NONE):
        """Respond, as the client, to a request the server sent."""
        message = {"jsonrpc": "2.0", "id": request["id"]}
        if result is not _NONE:
            message["result"] = result
        if error is not _NONE:
            message["error"] = error
        self.send(message)

    def notify(self, method, params=_NONE):
        message = {"jsonrpc": "2.0", "method": method}
        if params is not _NONE:
            message["params"] = params
        self.send(message)

    def modern(self, method, params=None, client=None, id=_AUTO, **meta_options):
        """A 2026-07-28 request with the `_meta` envelope; returns its response."""
        return self.request(method, modern_params(params, client=client, **meta_options), id=id)

    def initialize(self, version="2025-11-25", client="pytest-client", id=_AUTO):
        """The legacy handshake; returns the initialize result."""
        answer = self.request("initialize", initialize_params(version, client), id=id)
        assert "result" in answer, answer
        self.notify("notifications/initialized")
        return answer["result"]

    def call_params(self, name, arguments=_NONE, era="legacy", client=None, extra=None):
        params = {"name": name}
        if arguments is not _NONE:
            params["arguments"] = arguments
        params.update(extra or {})
        if era == "modern":
            params = modern_params(params, client=client)
        return params

    def call(self, name, arguments=_NONE, era="legacy", client=None, id=_AUTO, extra=None):
        """tools/call in the given era; returns the whole response."""
        return self.request("tools/call", self.call_params(name, arguments, era, client, extra), id=id)

    # -- ending ------------------------------------------------------------

    def shut_input(self):
        """Close the server's standard input (end of input)."""
        if self._partial_has_text:
            self.sent += 1
        self._partial_has_text = False
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def wait(self, timeout=SAFETY_TIMEOUT):
        try:
            self.returncode = exit_status(self.argv[0], self.proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the server did not exit within %ss" % timeout)
        self._out_thread.join(SAFETY_TIMEOUT)
        self._err_thread.join(SAFETY_TIMEOUT)
        self.closed = True
        return self.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._out_thread.join(SAFETY_TIMEOUT)
        self._err_thread.join(SAFETY_TIMEOUT)
        self.closed = True

    def close(self, check=True, count=True):
        """End of input; wait for exit; check both streams; return the exit code."""
        self.shut_input()
        code = self.wait()
        if check:
            self.check(count=count)
        return code

    def check(self, count=True):
        """Standard output: only responses. Standard error: one log line per
        message. Neither: a planted string."""
        self.checked = True
        for raw in self.raw_stdout:
            check_stdout_line(raw)
        lines = self.stderr_lines
        for raw in self.raw_stderr:
            assert raw.endswith(self.stderr_ending), raw
        for line in lines:
            parse_log(line)
        if count:
            assert len(lines) == self.sent, (
                "%d messages sent, %d stderr lines: %r" % (self.sent, len(lines), lines))
        out = b"".join(self.raw_stdout)
        err = b"".join(self.raw_stderr)
        for secret in self.planted:
            for form in {secret.encode("utf-8"), json.dumps(secret)[1:-1].encode("utf-8")}:
                assert form not in out, "a planted value is on standard output"
                assert form not in err, "a planted value is on standard error"


def run_cli(python, pyz, args, env, cwd, stdin=b"", user=None, timeout=SAFETY_TIMEOUT):
    """Run `<python> <pyz> args...` to completion; returns CompletedProcess (bytes).
    user: a hardening_support.LocalUser to run it as; timeout: past it, TimeoutExpired."""
    return subprocess.run([python, str(pyz)] + [str(a) for a in args], input=stdin,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(cwd),
                          timeout=timeout, **(user.popen_kwargs() if user is not None else {}))


def run_with_stdin_held_open(argv, env, cwd, folder, timeout=SAFETY_TIMEOUT):
    """Run argv with a standard input that stays open and never gets a byte, as a client
    that holds its pipe; its output goes to files in `folder` (any size, no pipe to fill).
    A CompletedProcess (bytes) once it ends by itself; AssertionError, the process killed,
    while it still runs after `timeout` seconds."""
    out_path, err_path = Path(str(folder)) / "held.out", Path(str(folder)) / "held.err"
    with open(str(out_path), "wb") as out, open(str(err_path), "wb") as err:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                   env=env, cwd=str(cwd))
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError("%s waited for its input to end (killed after %g s)"
                                 % (" ".join(map(str, argv[:4])), timeout))
        finally:
            process.stdin.close()
    return subprocess.CompletedProcess(argv, code, out_path.read_bytes(), err_path.read_bytes())


# ---------------------------------------------------------------------------
# The module's own functions, called directly (the unit tests)
# ---------------------------------------------------------------------------

PLANTED = "ZQXJ-planted-7731"   # a value no hint may repeat


def raises_problem(code, function, *args):
    """`function(*args)` raises memprove_mcp.Problem `code`; returns the Problem."""
    import memprove_mcp as mp
    with pytest.raises(mp.Problem) as caught:
        function(*args)
    assert caught.value.code == code
    return caught.value


def interpreter_executable(python, env):
    """sys.executable of `python` started the way the server is started."""
    done = subprocess.run([python, "-c", "import sys; print(sys.executable)"], env=env,
                          stdout=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    return done.stdout.decode().strip()


def one_stderr_line(done):
    text = done.stderr.decode("utf-8")
    assert text.endswith("\n") and text.count("\n") == 1 and text.strip(), text
    return text


def pasted_in_sh(lines, folder, timeout=SAFETY_TIMEOUT):
    """Each of `lines` run as a user who pastes it into POSIX sh would (`sh -c LINE`), in
    `folder` (the working directory and HOME), with `claude`, `codex` and `gemini` stand-ins
    that do nothing first on PATH (contract.md §6 rule 29: a printed command runs exactly
    what it shows, or fails).  Returns the CompletedProcess of each."""
    stubs = Path(folder) / ".stand-ins"
    stubs.mkdir(exist_ok=True)
    for name in ("claude", "codex", "gemini"):
        stub = stubs / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        os.chmod(str(stub), 0o755)
    env = {"PATH": "%s:/usr/local/bin:/usr/bin:/bin" % stubs, "HOME": str(folder),
           "LANG": "C.UTF-8"}
    return [subprocess.run(["sh", "-c", line], cwd=str(folder), env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout) for line in lines]

def snapshot(*roots):
    """Every path under the roots with its type, size, mode and mtime."""
    seen = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            seen[str(root)] = None
            continue
        for path in [root] + sorted(root.rglob("*")):
            info = path.lstat()
            seen[str(path)] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mode,
                               info.st_mtime_ns)
    return seen


# ---------------------------------------------------------------------------
# A hook's world (`mcp hook EVENT`): test_hook.py and test_stop_hook.py
# ---------------------------------------------------------------------------

def run_hook(pyz, env, cwd, args=(), stdin=b"", timeout=SAFETY_TIMEOUT, python=None,
             event="session-start"):
    """`mcp hook EVENT` run to its end: CompletedProcess (bytes).  Past `timeout`, a failure."""
    try:
        return run_cli(python or default_server_python(), pyz,
                       ["mcp", "hook", event] + [str(a) for a in args], env, cwd, stdin=stdin,
                       timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("the hook did not end by itself within %s s" % timeout)


def context_file(root):
    return root / ".memprove" / "context.json"


def log_lines(path):
    """MEMPROVE_MCP_LOG split into its lines, which end as the platform's text files do
    (CR LF under Windows); the last element is what follows the last line end."""
    ending = stderr_line_ending(default_server_python())
    return path.read_bytes().split(ending)


def daemon_capsule(world):
    """The daemon's own Capsule answer ({"capsule": ...}) of the Task the world's context
    names, read over HTTP as the hooks read it."""
    import urllib.request
    task = json.loads(context_file(world.workspace).read_text("utf-8"))["task"]
    request = urllib.request.Request("%s/v1/tasks/%s/capsule" % (world.daemon.url, task["id"]),
                                     headers={"Authorization": "Bearer " + world.config.token})
    with urllib.request.urlopen(request, timeout=SAFETY_TIMEOUT) as answer:
        return json.loads(answer.read().decode("utf-8"))


class HookWorld:
    """The reference daemon, a configuration, a Workspace whose context names a Task, and
    the hook `event` run in it (the `world` fixture of the hooks' test files)."""

    event = "session-start"

    def __init__(self, pyz, make_env, start_server, daemon, config, workspace, tmp_path):
        self.pyz, self.make_env, self.start_server = pyz, make_env, start_server
        self.daemon, self.config, self.workspace, self.tmp_path = daemon, config, workspace, tmp_path
        self.elsewhere = tmp_path / "elsewhere"
        self.elsewhere.mkdir(exist_ok=True)

    def env(self, extra=None):
        values = dict(self.config.env())
        values.update(extra or {})
        return self.make_env(values)

    def hook(self, args=(), env=None, cwd=None, stdin=b"", timeout=SAFETY_TIMEOUT):
        return run_hook(self.pyz, self.env(env), cwd or self.workspace, args, stdin, timeout,
                        event=self.event)

    def begin(self, title="Hook me", client="claude-code"):
        """A Task begun by `client` (its Session's agent), with open items, a decision, a
        fact and a next action."""
        server = self.start_server(env=self.config.env(), cwd=self.workspace)
        server.initialize(client=client)
        begun = tool_value(server.call("begin", {"new_task": title})["result"])
        tool_value(server.call("checkpoint", {
            "facts": [{"text": "Uploads retry three times \u2014 \U0001F600 measured."}],
            "open_items": ["Find why the second retry races.", "Ask about the 409s."],
            "next_action": "Read the retry loop."})["result"])
        tool_value(server.call("decide", {"decision": "Back off exponentially.",
                                          "rationale": "The server sheds load."})["result"])
        assert server.close() == 0
        self.daemon.clear_ops()
        return begun

    def without_session(self):
        """The context keeps its Task and names no Session (contract §2: `session` may be
        null): the agent is then named by the client."""
        path = context_file(self.workspace)
        context = json.loads(path.read_text("utf-8"))
        context["session"] = None
        path.write_text(json.dumps(context), "utf-8")

    def name_task(self, task, workspace=None):
        """A context naming `task` (a Capsule's or the daemon's record) and no Session."""
        root = workspace or self.workspace
        context_file(root).write_text(json.dumps({
            "version": 1, "workspace": {"id": "w", "root": server_path(root)},
            "task": {"id": task["id"], "number": task["number"], "title": task["title"]},
            "session": None}), "utf-8")


def write_kit(world, folder, *options):
    """`mcp plugin FOLDER` for the world's configuration, which must succeed."""
    done = run_cli(sys.executable, world.pyz, ["mcp", "plugin", folder, "--config-dir",
                                               world.config.dir] + list(options),
                   world.make_env(), world.tmp_path)
    assert done.returncode == 0, done.stderr
    return done


def doctor_checks(world, *args, env=None):
    """(check names in order, {name: check}) of `mcp doctor --json` in the world."""
    done = run_cli(sys.executable, world.pyz, ["mcp", "doctor", "--json"] + list(args),
                   world.env(env), world.workspace)
    assert done.stderr == b"", done.stderr
    assert world.config.token.encode() not in done.stdout
    report = json.loads(done.stdout.decode("utf-8"))
    return [check["name"] for check in report["checks"]], \
        dict((check["name"], check) for check in report["checks"])


def install_printed_hook(world, home, client):
    """The entry `print-config --hook` prints, written where it says (Claude Code's and
    Gemini's settings.json, Codex's hooks.json)."""
    done = run_cli(sys.executable, world.pyz, ["mcp", "print-config", "--client", client,
                                               "--hook"], world.env(), world.workspace)
    assert done.returncode == 0, done.stderr
    place = {"claude-code": home / ".claude" / "settings.json",
             "codex": home / ".codex" / "hooks.json",
             "gemini": home / ".gemini" / "settings.json"}[client]
    place.parent.mkdir(parents=True, exist_ok=True)
    place.write_bytes(done.stdout)


# ---------------------------------------------------------------------------
# A plugin kit a client installed (docs/plugin.md, "doctor")
# ---------------------------------------------------------------------------
# Each client's record of an installed kit, as the pinned clients write it; the interop
# tier checks doctor against the real clients.  test_plugin.py and test_doctor.py use them.

def claude_installed(home, kit, enabled=True):
    plugins = home / ".claude" / "plugins"
    plugins.mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps(
        {"enabledPlugins": {"memprove@memprove": enabled},
         "extraKnownMarketplaces": {"memprove": {"source": {"source": "directory",
                                                             "path": str(kit)}}}}))
    (plugins / "known_marketplaces.json").write_text(json.dumps(
        {"memprove": {"source": {"source": "directory", "path": str(kit)},
                      "installLocation": str(kit)}}))


def codex_installed(home, kit, enabled=True):
    codex = home / ".codex"
    manifest = kit / "memprove" / ".codex-plugin" / "plugin.json"
    version = json.loads(manifest.read_text(encoding="utf-8"))["version"]
    shutil.copytree(str(kit / "memprove"), str(codex / "plugins" / "cache" / "memprove" /
                                               "memprove" / version))
    (codex / "config.toml").write_text(
        'model = "x"\n\n[marketplaces.memprove]\nsource_type = "local"\nsource = %s\n\n'
        '[plugins."memprove@memprove"]\nenabled = %s\n'         # (a TOML string: a Windows path's \)
        % (json.dumps(str(kit)), "true" if enabled else "false"))


def closed_port_url():
    """A loopback URL where nothing listens: a port just bound and let go."""
    import socket
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return "http://127.0.0.1:%d" % port


def codex_trusts_the_hook(home, kit, content_hash=None):
    """As Codex 0.171.0 records the hooks the user trusted (measured: docs/session-start.md):
    a table under each hook's key in config.toml (the kit's SessionStart and Stop), holding
    the SHA-256 of the handler as Codex sees it, its defaults filled in, as compact JSON with
    sorted keys; and, where given, the `trusted_content_hash` of the plugin folder."""
    hooks = json.loads((kit / "memprove" / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    for event, label in (("SessionStart", "session_start"), ("Stop", "stop")):
        command = hooks["hooks"][event][0]["hooks"][0]["command"]
        seen = {"event_name": label, "hooks": [
            {"async": False, "command": command, "timeout": 600, "type": "command"}]}
        digest = hashlib.sha256(json.dumps(seen, sort_keys=True, separators=(",", ":"),
                                           ensure_ascii=False).encode("utf-8")).hexdigest()
        with open(str(home / ".codex" / "config.toml"), "a", encoding="utf-8") as config:
            config.write('\n[hooks.state."memprove@memprove:hooks/hooks.json:%s:0:0"]\n'
                         'trusted_hash = "sha256:%s"\n' % (label, digest))
            if content_hash:
                config.write('trusted_content_hash = "%s"\n' % content_hash)


def gemini_installed(home, kit, enabled=True):
    """As `gemini extensions install`; not enabled: as `gemini extensions disable memprove`
    then writes it, a rule for the home folder and those below it."""
    extension = home / ".gemini" / "extensions" / "memprove"
    shutil.copytree(str(kit), str(extension))
    (extension / ".gemini-extension-install.json").write_text(json.dumps(
        {"source": str(kit), "type": "local"}))
    if not enabled:
        gemini_rules(home, ["!%s/*" % home])


def gemini_rules(home, overrides):
    (home / ".gemini" / "extensions" / "extension-enablement.json").write_text(json.dumps(
        {"memprove": {"overrides": overrides}}, indent=2))


INSTALLED = {"claude-code": claude_installed, "codex": codex_installed,
             "gemini": gemini_installed}


def installed_kit_paths(client, home, kit):
    """(the folder the client runs the kit's server from, its server file, the .pyz that
    server names) of a kit `INSTALLED[client]` installed: Claude Code reads the kit in
    place, Codex its copy (whose entry names the kit's .pyz by its path), Gemini CLI its
    copy."""
    if client == "claude-code":
        folder = kit / "memprove"
        return folder, folder / ".mcp.json", folder / "memprove_mcp.pyz"
    if client == "codex":
        cache = home / ".codex" / "plugins" / "cache" / "memprove" / "memprove"
        folder = next(cache.iterdir())
        return folder, folder / ".codex-plugin" / "mcp.json", kit / "memprove" / "memprove_mcp.pyz"
    folder = home / ".gemini" / "extensions" / "memprove"
    return folder, folder / "gemini-extension.json", folder / "memprove" / "memprove_mcp.pyz"

# ---------------------------------------------------------------------------
# A small validator for the JSON Schema subset the tools use
# ---------------------------------------------------------------------------

SCHEMA_KEYWORDS = frozenset([
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "description", "title", "default"])


def schema_errors(schema, value, where="$"):
    """The places where value breaks schema (the keywords of SCHEMA_KEYWORDS)."""
    errors = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_type(value, kind) for kind in kinds):
            return ["%s: %r is not %s" % (where, type(value).__name__, kinds)]
    if "enum" in schema and value not in schema["enum"]:
        errors.append("%s: not in enum" % where)
    if "const" in schema and value != schema["const"]:
        errors.append("%s: not the const" % where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append("%s: below minimum" % where)
        if "maximum" in schema and value > schema["maximum"]:
            errors.append("%s: above maximum" % where)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
            errors.append("%s: length" % where)
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append("%s: pattern" % where)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errors.append("%s: item count" % where)
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                errors += schema_errors(schema["items"], item, "%s[%d]" % (where, index))
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append("%s: %s missing" % (where, key))
        for key, item in value.items():
            if key in properties:
                errors += schema_errors(properties[key], item, "%s.%s" % (where, key))
            elif schema.get("additionalProperties") is False:
                errors.append("%s: %s not allowed" % (where, key))
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(schema["additionalProperties"], item, "%s.%s" % (where, key))
    return errors


def _is_type(value, kind):
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    raise AssertionError("unknown type %r" % kind)


def schema_keyword_problems(schema, where="$"):
    """Keywords outside the subset that means the same in draft-07 and 2020-12."""
    problems = []
    if not isinstance(schema, dict):
        return ["%s: a schema that is not an object" % where]
    for key, value in schema.items():
        if key not in SCHEMA_KEYWORDS:
            problems.append("%s: keyword %s" % (where, key))
    for key, sub in (schema.get("properties") or {}).items():
        problems += schema_keyword_problems(sub, "%s.%s" % (where, key))
    if "items" in schema:
        problems += schema_keyword_problems(schema["items"], where + "[]")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += schema_keyword_problems(schema["additionalProperties"], where + "{}")
    return problems
