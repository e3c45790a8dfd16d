"""The suite's hooks and fixtures: the built .pyz, the interpreters, a clean
environment, a Workspace, a configuration directory, the reference daemon, and
`start_server`, which starts `<python> <pyz> mcp serve` over real pipes (harness.Server).
What the fixtures are built from, and every helper a test imports, is in harness.py;
the hardening suite's fixtures (hserve, local_users, mcp_log, no_internal_error...) come
from hardening_support.py, loaded as a plugin below.

Every server a test starts is checked when it is closed (and, if the test did
not close it, at teardown): standard output carries only JSON-RPC responses,
compact and one per line, with no raw U+2028/U+2029; standard error carries
exactly one well-formed log line per message sent; neither stream carries a
planted token or a planted argument value.
"""

import os
import re
import secrets
import shutil
import subprocess
import sys

import pytest

from harness import (HOST_IS_WINDOWS, LINUX_HOST_ONLY, PATIENT_TIMEOUT, SAFETY_TIMEOUT,
                     SERVER_PYTHONS, TEST_PROFILE, TEST_PROFILES, WINDOWS_VERSIONS, Config,
                     Server, Windows, build_pyz, built_once, clean_env, default_server_python,
                     listed_reason, make_workspace, require_python, require_windows_python,
                     server_is_windows, skip_posix_only_tests, started_daemon)

# The hardening suite's fixtures, for every test file without an import of its own.
pytest_plugins = ["hardening_support"]


# ---------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------

def pytest_configure(config):
    if TEST_PROFILE not in TEST_PROFILES:
        raise pytest.UsageError("MEMPROVE_TEST_PROFILE=%s: the profiles are %s"
                                % (TEST_PROFILE, " and ".join(TEST_PROFILES)))


def pytest_report_header(config):
    return "memprove test profile: %s (MEMPROVE_TEST_PROFILE)" % TEST_PROFILE


def skip_reason(report):
    """The reason a skipped test's report gives, without pytest's "Skipped: " prefix."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per skip reason, with how many tests it skipped, most first (addopts leaves
    `s` out of -r, which would print a line per test and place)."""
    reasons = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = skip_reason(report)
        reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return
    total = sum(reasons.values())
    terminalreporter.write_sep("=", "skipped: %d test%s, %d reason%s" % (
        total, "" if total == 1 else "s", len(reasons), "" if len(reasons) == 1 else "s"))
    for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line("SKIPPED %d: %s" % (count, reason))


def pytest_collection_modifyitems(config, items):
    """On a host other than Linux, skip (saying why) the tests that need one: those of
    LINUX_HOST_ONLY, and on Windows those of WINDOWS_POSIX_ONLY and POSIX_HOST_ONLY and the
    Windows tier (which drives Windows Python under Wine from Linux).

    With MEMPROVE_TEST_SERVER_PYTHON set, run only the tests whose servers it
    changes: those that start theirs through `start_server` and do not already
    run under each Python through `server_python`."""
    skip_host_only_tests(items)
    if not os.environ.get("MEMPROVE_TEST_SERVER_PYTHON"):
        return
    keep, drop = [], []
    for item in items:
        names = getattr(item, "fixturenames", ())
        (keep if "start_server" in names and "windows_python" not in names
         and ("server_python" not in names or server_is_windows()) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if server_is_windows():
        skip_posix_only_tests(items)


def skip_host_only_tests(items):
    """pytest_collection_modifyitems's skips for a host other than Linux."""
    if HOST_IS_WINDOWS:
        skip_posix_only_tests(items, host=True)
        for item in items:
            if "windows_python" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.skip(
                    reason="the Windows tier drives Windows Python under Wine from a Linux "
                           "host (tests/windows.sh); here pytest itself runs on Windows"))
    if not sys.platform.startswith("linux"):
        for item in items:
            reason = listed_reason(item, LINUX_HOST_ONLY)
            if reason:
                item.add_marker(pytest.mark.skip(
                    reason="Linux only (pytest on %s): %s" % (sys.platform, reason)))


# ---------------------------------------------------------------------------
# The .pyz and the interpreters
# ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def pyz(tmp_path_factory):
    """Build the .pyz once per run with build_zipapp.py (the xdist workers share it);
    return its path.  Besides what the build finds itself (pyenv, PATH), it compiles
    bytecode with every interpreter find_python finds, the chroot wrappers included."""
    return built_once(tmp_path_factory, "pyz", build_pyz)


@pytest.fixture(params=SERVER_PYTHONS, ids=[v if v.startswith("win") else "py" + v
                                             for v in SERVER_PYTHONS])
def server_python(request):
    """Each supported interpreter in turn (with the server under Windows, that one);
    absent: skipped, or failed under MEMPROVE_TEST_STRICT=1."""
    if request.param.startswith("win"):
        return require_windows_python(request.param[len("win"):])
    return require_python(request.param)


@pytest.fixture(params=WINDOWS_VERSIONS, ids=["win" + v for v in WINDOWS_VERSIONS])
def windows_python(request):
    """Each Windows Python in turn; not set up: skipped, or failed under MEMPROVE_TEST_STRICT=1."""
    return require_windows_python(request.param)


@pytest.fixture
def newest_python():
    return sys.executable


@pytest.fixture(scope="session")
def server_version(pyz, tmp_path_factory):
    """V of `--version` (`memprove-mcp V (<12 hex>)`, then the archive's SHA-256 and path)."""
    # A HOME of its own: the .pyz's folder is shared, and a test snapshots it.
    done = subprocess.run([sys.executable, str(pyz), "--version"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT,
                          env=clean_env(str(tmp_path_factory.mktemp("version-home"))))
    match = re.match(r"memprove-mcp (\S+) \(([0-9a-f]{12})\)\nsha256 [0-9a-f]{64}  .+\n\Z",
                     done.stdout.decode())
    assert match, done.stdout
    return match.group(1)


# ---------------------------------------------------------------------------
# Environment, Workspace, configuration, daemon
# ---------------------------------------------------------------------------

@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def make_env(home):
    """make_env(extra=None) -> a clean environment with this test's HOME."""
    def make(extra=None):
        return clean_env(home, extra)
    return make


@pytest.fixture
def planted():
    """Strings that must appear on neither output stream of any server of the test."""
    return set()


@pytest.fixture
def plant(planted):
    """plant(prefix="PLANTED-ARG") -> a fresh recognisable value, remembered as planted."""
    def make(prefix="PLANTED-ARG"):
        value = "%s-%s" % (prefix, secrets.token_hex(8))
        planted.add(value)
        return value
    return make


@pytest.fixture
def workspace(tmp_path):
    """A Workspace root: a directory with `.memprove/` and `.git/`."""
    return make_workspace(tmp_path / "ws")


@pytest.fixture
def config(tmp_path, planted):
    directory = tmp_path / "config"
    data_dir = tmp_path / "data"
    directory.mkdir()
    data_dir.mkdir()
    token = "tok-PLANTED-" + secrets.token_hex(16)
    planted.add(token)
    (directory / "data-dir").write_text(str(data_dir) + "\n")
    token_file = directory / "token"
    fd = os.open(str(token_file), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.chmod(str(token_file), 0o600)
    return Config(directory, data_dir, token)


@pytest.fixture
def daemon(config):
    started = started_daemon(config)
    yield started
    started.stop()


# ---------------------------------------------------------------------------
# The server over real pipes
# ---------------------------------------------------------------------------

@pytest.fixture
def start_server(pyz, make_env, workspace, planted):
    """start_server(python=None, env=None, cwd=None, args=(), program=None, user=None)
    -> a running Server.

    python: the interpreter (default: default_server_python()); env: added to the clean
    environment (a None value removes a key); cwd: default the `workspace`;
    args: after `mcp serve`; program: the .pyz to run (default: the session's); user: a
    hardening_support.LocalUser to run it as."""
    servers = []

    def start(python=None, env=None, cwd=None, args=(), program=None, user=None):
        argv = [python or default_server_python(), str(program or pyz), "mcp", "serve"] + \
            [str(a) for a in args]
        server = Server(argv, make_env(env), cwd or workspace, planted, user=user)
        servers.append(server)
        return server

    yield start
    problems = []
    for server in servers:
        if not server.closed:
            try:
                server.close(check=False)
            except AssertionError as error:
                problems.append(str(error))
                server.kill()
        if not server.checked:
            try:
                server.check()
            except AssertionError as error:
                problems.append(str(error))
    assert not problems, problems


# ---------------------------------------------------------------------------
# The Windows side: an interpreter under Wine, a copy of the .pyz it can start, helpers
# ---------------------------------------------------------------------------

@pytest.fixture
def win(windows_python):
    return Windows(windows_python)


@pytest.fixture
def plain_pyz(pyz, tmp_path):
    """A copy of the .pyz without the Unix executable bit: Wine would start a file
    that has it as a Unix program, where Windows answers WinError 193."""
    copy = tmp_path / "dist" / "memprove_mcp.pyz"
    copy.parent.mkdir()
    shutil.copyfile(str(pyz), str(copy))
    os.chmod(str(copy), 0o644)
    return copy


@pytest.fixture
def win_config(config, win):
    """The `config` fixture, its data-dir naming the data directory as Windows does,
    and the environment naming the configuration directory so."""
    (config.dir / "data-dir").write_text(win.path(config.data_dir) + "\n")
    return {"MEMPROVE_CONFIG_DIR": win.path(config.dir)}


@pytest.fixture
def win_server(start_server, win, win_config):
    """win_server(env=None, cwd=None) -> a Server under the Windows Python, configured."""
    def start(env=None, cwd=None):
        extra = dict(win_config, MEMPROVE_TIMEOUT=PATIENT_TIMEOUT)
        extra.update(env or {})
        return start_server(python=win.python, env=extra, cwd=cwd)
    return start


@pytest.fixture
def helpers():
    started = []
    yield started
    for helper in started:
        helper.stop()
