"""The interop tier's fixtures: the real clients, installed once into a cache outside the
work tree, and a recorded exchange for each test.

Every test here is marked `interop`, and runs only when asked for: `-m interop` (or any `-m`
expression that names the mark), a path in tests/interop on the command line, or
MEMPROVE_INTEROP=1.  A plain `pytest` deselects them.

The clients install themselves, at the versions pinned below (the ones
docs/clients-verified.md lists), into MEMPROVE_INTEROP_CACHE (default
~/.cache/memprove-mcp-interop), one folder per client keyed by its pins, under a lock so
that two runs never race.  An install that fails (the registry unreachable, no node or
npm) skips that client's tests with a loud reason on the terminal and in the summary; a
client that installs and then fails fails its test.
"""

try:
    import fcntl
except ImportError:      # Windows: the install lock below is POSIX's (interop runs on Linux)
    fcntl = None
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

# -- pinned versions (docs/clients-verified.md) ----------------------------------------
PY_SDK_PINS = ("mcp==2.3.0", "mcp-types==2.3.0")
PY_SDK_CONSTRAINTS = HERE / "requirements-py-sdk.txt"     # what they need, pinned too
NPM_CLIENTS = {
    "ts-sdk-v1": ("@modelcontextprotocol/sdk", "1.32.2"),
    "ts-sdk-v2": ("@modelcontextprotocol/client", "2.4.0"),
    "inspector": ("@modelcontextprotocol/inspector", "2.12.0"),
    "claude-code": ("@anthropic-ai/claude-code", "2.1.332"),
    # The agent clients of clients.md (docs/clients-verified.md: these builds were tried).
    "codex": ("@openai/codex", "0.171.0"),
    "gemini": ("@google/gemini-cli", "0.61.0"),
    "opencode": ("opencode-ai", "1.18.33"),
    "cline": ("cline", "3.0.65"),
    "continue": ("@continuedev/cli", "1.5.47"),
    "amp": ("@ampcode/cli", "0.0.1790142911-g7618fb"),
    # Claude Desktop's bundle tool (research/plugins.md): validates and reads memprove.mcpb.
    "mcpb": ("@anthropic-ai/mcpb", "2.1.2"),
}
# Install scripts npm does not run by itself, run by hand with node after `npm install`
# (relative to the package's folder): Amp's binary is put in place by its postinstall.
NPM_POSTINSTALL = {
    "amp": ["install.cjs"],
}
INSTALL_TIMEOUT = 900

_SKIPPED = []           # the loud reasons, repeated in the terminal summary
_NPM_UNREACHABLE = []   # the client whose install found the npm registry unreachable


class InteropClientMissing(UserWarning):
    """A client could not be installed, so its interop tests were skipped."""


# -- selection and marking --------------------------------------------------------------

def _asked_for(config):
    """-m names the mark, MEMPROVE_INTEROP=1, or a path given on the command line is in here."""
    if "interop" in (config.getoption("markexpr", "") or "") or \
            os.environ.get("MEMPROVE_INTEROP") == "1":
        return True
    base = Path(str(config.invocation_params.dir))
    for arg in config.invocation_params.args:
        if isinstance(arg, str) and not arg.startswith("-"):
            path = (base / arg.split("::")[0]).resolve()
            if path == HERE or HERE in path.parents:
                return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mine = {id(item) for item in items if HERE in Path(str(item.path)).resolve().parents}
    for item in items:
        if id(item) in mine:
            item.add_marker(pytest.mark.interop)
    if mine and not _asked_for(config):
        config.hook.pytest_deselected(items=[item for item in items if id(item) in mine])
        items[:] = [item for item in items if id(item) not in mine]


def pytest_terminal_summary(terminalreporter):
    reasons = list(_SKIPPED)
    # Under pytest-xdist the skips happened in the workers: their reports carry the reasons.
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        said = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        reason = said[len("Skipped: "):] if said.startswith("Skipped: ") else said
        if reason.startswith("INTEROP: ") and reason not in reasons:
            reasons.append(reason)
    if reasons:
        terminalreporter.section("interop clients NOT verified", sep="!", red=True, bold=True)
        for reason in reasons:
            terminalreporter.write_line(reason, red=True, bold=True)


def skip_loudly(config, client, reason):
    """Skip a client whose install failed, saying so on the terminal, in the warnings
    summary and in the final summary (also under MEMPROVE_TEST_STRICT=1: an unreachable
    registry is the environment's doing, not the server's)."""
    message = "INTEROP: %s could not be installed, so it was NOT tested: %s" % (client, reason)
    if message not in _SKIPPED:
        _SKIPPED.append(message)
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")
            reporter.write_line(message, red=True, bold=True)
    warnings.warn(InteropClientMissing(message))
    pytest.skip(message)


# -- the cache --------------------------------------------------------------------------

def cache_root():
    root = os.environ.get("MEMPROVE_INTEROP_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "memprove-mcp-interop")
    return Path(root).resolve()


class InstallFailed(Exception):
    def __init__(self, message, network=False):
        Exception.__init__(self, message)
        self.network = network


# What an installer prints when it cannot reach its registry.
NETWORK_TROUBLE = re.compile(
    r"ECONNREFUSED|ENOTFOUND|ETIMEDOUT|EAI_AGAIN|ECONNRESET|ENETUNREACH|EHOSTUNREACH|"
    r"Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|Read timed out|ProxyError|"
    r"Temporary failure resolving|Could not resolve host|Failed getting release file")


def _run_install(argv, cwd, env, log):
    with open(str(log), "ab") as out:
        out.write(("\n$ %s\n" % " ".join(argv)).encode())
        out.flush()
        try:
            done = subprocess.run(argv, cwd=str(cwd), env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise InstallFailed("%s: %s (log: %s)" % (argv[0], error, log))
    if done.returncode != 0:
        text = log.read_text(errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        trouble = [line for line in lines if NETWORK_TROUBLE.search(line)]
        errors = [line for line in lines if re.match(r"(npm error|ERROR:)", line)]
        said = (trouble or errors or lines or ["(no output)"])[0]
        raise InstallFailed("`%s %s` exited %d: %s (log: %s)" % (
            os.path.basename(argv[0]), " ".join(argv[1:3]), done.returncode, said[:300], log),
            network=bool(trouble))


def cached_install(name, key_material, install):
    """The folder `<cache>/<name>-<key>`, made by install(folder, log) unless a complete one
    is there; one install at a time per folder (a lock file beside it)."""
    key = hashlib.sha256(json.dumps(key_material, sort_keys=True).encode()).hexdigest()[:12]
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / ("%s-%s" % (name, key))
    marker = folder / ".memprove-interop-complete"
    with open(str(root / ("%s-%s.lock" % (name, key))), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return folder
        if folder.exists():
            shutil.rmtree(str(folder))
        folder.mkdir(parents=True)
        log = folder / "install.log"
        started = time.monotonic()
        install(folder, log)
        marker.write_text(json.dumps({"key": key_material,
                                      "seconds": round(time.monotonic() - started, 1)}))
        return folder


def _npm_env():
    env = dict(os.environ)
    env.update(npm_config_update_notifier="false", npm_config_fund="false",
               npm_config_audit="false", NO_UPDATE_NOTIFIER="1")
    return env


def install_npm_client(config, client):
    """The node project folder holding `client`'s pinned package, or a loud skip."""
    package, version = NPM_CLIENTS[client]
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        skip_loudly(config, client, "node and npm are needed to install %s@%s" % (package, version))

    def install(folder, log):
        (folder / "package.json").write_text(json.dumps({
            "name": "memprove-interop-" + client, "version": "0.0.0", "private": True,
            "description": "installed by tests/interop of memprove-mcp",
            "dependencies": {package: version}}, indent=2))
        _run_install([npm, "install", "--no-audit", "--no-fund"], folder, _npm_env(), log)
        for script in NPM_POSTINSTALL.get(client, ()):
            _run_install([node, script], folder / "node_modules" / package, _npm_env(), log)
        meta = folder / "node_modules" / package / "package.json"
        if not meta.exists() or json.loads(meta.read_text()).get("version") != version:
            raise InstallFailed("%s@%s is not in node_modules after npm install" % (
                package, version))

    if _NPM_UNREACHABLE:
        skip_loudly(config, client, "%s@%s: not tried, the npm registry was unreachable for %s" % (
            package, version, _NPM_UNREACHABLE[0]))
    try:
        key = {"package": package, "version": version,
               "platform": sys.platform, "machine": platform.machine()}
        if client in NPM_POSTINSTALL:
            key["postinstall"] = NPM_POSTINSTALL[client]
        return cached_install(client, key, install)
    except InstallFailed as error:
        if error.network:
            _NPM_UNREACHABLE.append(client)
        skip_loudly(config, client, "%s@%s: %s" % (package, version, error))


def node_script(project, script):
    """A copy of clients/<script> inside the node project, so that its imports resolve
    from that project's node_modules."""
    source = (HERE / "clients" / script).read_bytes()
    target = project / "memprove-interop" / ("%s-%s%s" % (
        Path(script).stem, hashlib.sha256(source).hexdigest()[:12], Path(script).suffix))
    if not target.exists():
        target.parent.mkdir(exist_ok=True)
        partial = target.with_name(target.name + ".%d.partial" % os.getpid())
        partial.write_bytes(source)
        os.replace(str(partial), str(target))
    return target


# -- the clients -------------------------------------------------------------------------

@pytest.fixture(scope="session")
def py_sdk(request):
    """The python of a virtual environment with the pinned `mcp`, made with this python3."""
    if sys.version_info < (3, 10):
        skip_loudly(request.config, "python-sdk",
                    "mcp 2.x needs Python 3.10 or later; this is %s" % platform.python_version())
    constraints = PY_SDK_CONSTRAINTS.read_text()

    def install(folder, log):
        venv = folder / "venv"
        _run_install([sys.executable, "-m", "venv", str(venv)], folder, dict(os.environ), log)
        python = venv / "bin" / "python"
        (folder / "constraints.txt").write_text(constraints)
        _run_install([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                      "--no-input", "--quiet", "-c", str(folder / "constraints.txt")]
                     + list(PY_SDK_PINS), folder, dict(os.environ), log)
        check = subprocess.run([str(python), "-c", "import importlib.metadata as m, mcp; "
                                "print(m.version('mcp'))"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=120)
        if check.stdout.decode().strip() != PY_SDK_PINS[0].split("==")[1]:
            raise InstallFailed("mcp does not import after pip install: %r" % check.stdout[-300:])

    try:
        folder = cached_install("python-sdk", {"pins": PY_SDK_PINS, "constraints": constraints,
                                               "python": sys.version, "exe": sys.executable},
                                install)
    except InstallFailed as error:
        skip_loudly(request.config, "python-sdk", "%s: %s" % (" ".join(PY_SDK_PINS), error))
    return folder / "venv" / "bin" / "python"


@pytest.fixture(scope="session")
def ts_sdk_v1(request):
    return install_npm_client(request.config, "ts-sdk-v1")


@pytest.fixture(scope="session")
def ts_sdk_v2(request):
    return install_npm_client(request.config, "ts-sdk-v2")


@pytest.fixture(scope="session")
def inspector(request):
    return install_npm_client(request.config, "inspector")


@pytest.fixture(scope="session")
def claude_code(request):
    return install_npm_client(request.config, "claude-code")


@pytest.fixture(scope="session")
def agent_client(request):
    """agent_client(name) -> the node project folder of that pinned agent client (NPM_CLIENTS),
    installed on first use."""
    return lambda name: install_npm_client(request.config, name)


# -- one test's world --------------------------------------------------------------------

@pytest.fixture
def check_wire(config, server_version):
    """check_wire(connection) -> support.check_connection with this test's token as the
    secret and the .pyz's version as the serverInfo version."""
    from interop.support import check_connection

    def check(conn):
        return check_connection(conn, secrets=[config.token], server_version=server_version)
    return check


@pytest.fixture
def wire_log(tmp_path):
    """The folder the tee records this test's connections in."""
    path = tmp_path / "wire"
    path.mkdir()
    return path


# -- Claude Code ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def loopback_only(request):
    """argv prefix that runs a command in a new network namespace with only `lo` (up), or
    [] where namespaces cannot be made here (then the switches in support.QUIET are all
    there is)."""
    unshare = shutil.which("unshare")
    script = 'ip link set lo up 2>/dev/null; exec "$@"'
    for flags in (["-n"], ["-rn"]):
        if not unshare:
            break
        prefix = [unshare] + flags + ["sh", "-c", script, "sh"]
        try:
            done = subprocess.run(prefix + ["cat", "/proc/net/dev"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        interfaces = [line.split(b":")[0].strip() for line in done.stdout.splitlines()[2:]]
        if done.returncode == 0 and interfaces == [b"lo"]:
            return prefix
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("INTEROP: no network namespace here (unshare -n failed); Claude Code "
                            "runs with its updater, telemetry and error reporting off",
                            yellow=True, bold=True)
    return []


@pytest.fixture
def claude(claude_code, loopback_only, config, daemon, tmp_path):
    """`claude` (support.Claude) for a fresh project Workspace, its HOME pointing at the
    test's daemon, inside the loopback-only namespace where one can be made."""
    from harness import make_workspace
    from interop.support import Claude
    project = make_workspace(tmp_path / "project")
    made = Claude(project, tmp_path / "claude-home", claude_code / "node_modules" / ".bin",
                  loopback_only, config)
    code, out, err = made.run("--version")
    version = NPM_CLIENTS["claude-code"][1]
    assert code == 0 and out.startswith(version + " (Claude Code)"), (code, out, err)
    return made


# -- Claude Code for Windows, under Wine 10 ---------------------------------------------

WINE10_SCRIPT = HERE.parent / "wine10.sh"
WINE10_CLIENT = "claude-code-windows"


@pytest.fixture(scope="session")
def wine10(request):
    """support.Wine10 of tests/wine10.sh's chroot (Wine 10, Windows CPython 3.13, claude.exe
    at the pinned version), set up by the script on first use (two and a half minutes; later
    a check of about a second).  Not root: a skip that says so (a failure under
    MEMPROVE_TEST_STRICT=1).  A setup that fails is skipped loudly like any client's
    install, and under MEMPROVE_TEST_STRICT=1 fails, unless it could not reach Debian's
    mirror, PyPI or npm: that is the environment's doing, a loud skip as for every client
    of this tier."""
    from harness import strict
    from interop.support import Wine10
    if os.geteuid() != 0:
        reason = "%s needs root (debootstrap, mount, chroot): run the interop tier as root" % (
            WINE10_SCRIPT.relative_to(HERE.parent.parent))
        if strict():
            pytest.fail(reason + " (MEMPROVE_TEST_STRICT=1 requires Claude Code for Windows)")
        pytest.skip(reason)
    log = cache_root() / "wine10-setup.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["bash", str(WINE10_SCRIPT)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=INSTALL_TIMEOUT)
        said, code = done.stderr.decode("utf-8", "replace"), done.returncode
    except (OSError, subprocess.TimeoutExpired) as error:
        said, code = "%s: %s" % (WINE10_SCRIPT.name, error), None
    log.write_text(said)
    if code == 0:
        return Wine10(done.stdout.decode().strip())
    lines = [line.strip() for line in said.splitlines() if line.strip()] or ["(no output)"]
    trouble = [line for line in lines if NETWORK_TROUBLE.search(line)]
    reason = "%s exited %s: %s (log: %s)" % (WINE10_SCRIPT.relative_to(HERE.parent.parent), code,
                                              (trouble or lines)[0][:300], log)
    if strict() and not trouble:
        pytest.fail("INTEROP: %s could not be set up: %s (MEMPROVE_TEST_STRICT=1 requires it)" % (
            WINE10_CLIENT, reason))
    skip_loudly(request.config, WINE10_CLIENT, reason)


@pytest.fixture
def claude_windows(wine10, loopback_only, config, daemon, tmp_path):
    """`claude` (support.WindowsClaude): claude.exe under Wine 10 for a fresh project
    Workspace, as the prefix's one Windows user with nothing of Claude Code or memprove
    left from before, its memprove configuration pointing at the test's daemon, inside
    the loopback-only namespace where one can be made.  One test at a time holds that
    user (a lock beside the chroot), and its state is cleared again afterwards."""
    from harness import make_workspace
    from interop.support import WindowsClaude
    with open(str(wine10.bin.parent / ".user.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wine10.forget_user()
        try:
            made = WindowsClaude(make_workspace(tmp_path / "project"), wine10, loopback_only,
                                 config)
            code, out, err = made.run("--version")
            version = NPM_CLIENTS["claude-code"][1]
            assert code == 0 and out.startswith(version + " (Claude Code)"), (code, out, err)
            yield made
        finally:
            wine10.forget_user()


# -- the agent tier's world (interop/agents.py) ---------------------------------------------
# Imported here, not at the top: interop.agents imports the main suite's harness, which this
# conftest must not need before pytest has put tests/ on sys.path.
from interop.agents import Agent, LoopbackNamespace  # noqa: E402
from interop.model_endpoint import Endpoint  # noqa: E402

@pytest.fixture
def netns(request):
    space = LoopbackNamespace()
    if not space.prefix:
        reporter = request.config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("INTEROP: no network namespace here; the agent clients run on "
                                "the host's loopback", yellow=True, bold=True)
    yield space
    space.close()


@pytest.fixture
def ns_daemon(netns, config):
    """The reference daemon, listening on 127.0.0.1 inside the namespace."""
    from harness import started_daemon
    started = started_daemon(config, netns.inside)
    yield started
    started.stop()


@pytest.fixture
def make_agent(agent_client, tmp_path, pyz, config, netns, ns_daemon, check_wire):
    made = []

    def make(name, env=None):
        agent = Agent(name, agent_client(name), tmp_path, pyz, config, netns, env)
        agent.check_wire = check_wire
        made.append(agent)
        return agent
    yield make
    for agent in made:
        agent.end_leftovers(grace=0)


@pytest.fixture
def endpoint_in(netns):
    """endpoint_in(dialect, script) -> a started Endpoint on 127.0.0.1 inside the namespace."""
    started = []

    def make(dialect, script):
        endpoint = netns.inside(lambda: Endpoint(dialect, script))
        started.append(endpoint.start())
        return endpoint
    yield make
    for endpoint in started:
        endpoint.stop()


@pytest.fixture
def windows_pyz(pyz, tmp_path):
    """A copy of the .pyz without the Unix executable bit, as a file downloaded on
    Windows is: Wine would start a file that has it as a Unix program."""
    copy = tmp_path / "dist" / "memprove_mcp.pyz"
    copy.parent.mkdir()
    shutil.copyfile(str(pyz), str(copy))
    os.chmod(str(copy), 0o644)
    return copy
