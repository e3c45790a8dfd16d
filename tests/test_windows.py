"""The server on Windows (contract.md §5, the Windows bullet; doctor.md; clients.md),
under the interpreter python.org ships: the embeddable CPython 3.8 and 3.13 for
Windows, run under Wine by tests/windows.sh's wrappers (`windows_python`: each in
turn; not set up, a skip naming the command, a failure under CI=true).

1. Every entry `print-config` prints starts when a Windows program starts it as
   the entry says (CreateProcess, no shell) from a copy of the .pyz without the
   Unix executable bit, and answers `initialize`.
2. doctor's `fix:` lines are PowerShell and every path is a Windows path; an
   entry whose command is the .pyz is `client_command_missing`.
3. print-config's standard-error line names each client's real Windows files.
4. context.json is written while other processes hold it open, read it in a loop
   or hold context.lock past msvcrt's own wait, and a killed writer leaves it whole.
5. The token file, data-dir and daemon.json written by Windows tools (a byte order
   mark, UTF-16, CR LF) are read as meant.
6. Bytecode the .pyz does not carry is cached in %LOCALAPPDATA%\\memprove-mcp only
   when that is a directory.

The processes started here talk through pipes and wait on lines they print, never
on time.  Paths given to the server are in the form it computes (Z:\\tmp\\..., as
`server_path` asks the interpreter).
"""

import json
import ntpath
import os
import queue
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from harness import SAFETY_TIMEOUT, ask_python, initialize_params, run_cli, server_path
from hardening_support import (outcome_of)
from test_doctor import parse_json, parse_text
from test_print_config_clients import CLIENTS, DOCUMENTED, parse

# Long enough for every wait below, so that a call fails only when the server gives up.
PATIENT_TIMEOUT = "60"


# ---------------------------------------------------------------------------
# The Windows side: its interpreter, its paths, a copy of the .pyz, helpers
# ---------------------------------------------------------------------------

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


@pytest.fixture
def helpers():
    started = []
    yield started
    for helper in started:
        helper.stop()


def ok(response):
    code, value = outcome_of(response)
    assert code == "ok", value
    return value


# ---------------------------------------------------------------------------
# 1. Every entry print-config prints starts through CreateProcess
# ---------------------------------------------------------------------------

# Run by the Windows Python: start the entry as a client does (CreateProcess, no
# shell, the entry's env added to its own), send `initialize`, close its input,
# report what came back (or the OSError CreateProcess raised).
LAUNCHER = r'''
import json, os, subprocess, sys
with open(sys.argv[1], encoding="utf-8") as file:
    entry = json.load(file)
env = dict(os.environ)
env.update(entry["env"])
line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": entry["params"]})
try:
    process = subprocess.Popen([entry["command"]] + entry["args"], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
except OSError as error:
    report = {"error": repr(error), "winerror": getattr(error, "winerror", None)}
else:
    out, err = process.communicate((line + "\n").encode("utf-8"), timeout=120)
    report = {"returncode": process.returncode, "stdout": out.decode("utf-8", "replace"),
              "stderr": err.decode("utf-8", "replace")}
sys.stdout.buffer.write(json.dumps(report).encode("utf-8"))
'''

ENTRY_CASES = [("default", []), ("--python", ["--python"])] + \
    [(name, ["--client", name]) for name in CLIENTS]


def print_config(win, plain_pyz, args, env, cwd):
    done = run_cli(win.python, plain_pyz, ["mcp", "print-config"] + list(args), env, cwd)
    assert done.returncode == 0, done.stderr
    return done


def entry_parts(client, document):
    """(command, args, env) of the memprove entry in `document`, a `client` form."""
    rules = DOCUMENTED[client]
    entry = document
    for step in rules["path"]:
        entry = entry[step]
    if rules["args"] is None:            # OpenCode: one list, the command first
        command, args = entry[rules["command"]][0], entry[rules["command"]][1:]
    else:
        command, args = entry[rules["command"]], entry.get(rules["args"], [])
    return command, args, entry.get(rules["env"], {})


def launch(win, directory, command, args, env):
    """The report of LAUNCHER starting command + args under the Windows Python."""
    script = Path(directory) / "launcher.py"
    script.write_text(LAUNCHER)
    spec = Path(directory) / "entry.json"
    spec.write_text(json.dumps({"command": command, "args": args, "env": env,
                                "params": initialize_params()}))
    done = subprocess.run([win.python, str(script), str(spec)], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(directory),
                          timeout=SAFETY_TIMEOUT * 4)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.decode("utf-8"))


@pytest.mark.parametrize("case, flags", ENTRY_CASES, ids=[case for case, _ in ENTRY_CASES])
def test_every_printed_entry_starts_through_createprocess(win, plain_pyz, make_env, workspace,
                                                          tmp_path, case, flags):
    """contract.md §5: a .pyz is no program on Windows, so every entry names the
    interpreter, with the .pyz first in the arguments; started as it says, it answers."""
    config_dir = win.path(tmp_path / "config")
    done = print_config(win, plain_pyz, flags, make_env({"MEMPROVE_CONFIG_DIR": config_dir}),
                        workspace)
    client = flags[1] if flags[:1] == ["--client"] else "claude-code"
    command, args, env = entry_parts(client, parse(client, done.stdout))
    report = launch(win, workspace, command, args, env)
    assert "error" not in report, "CreateProcess(%r) failed: %s" % (command, report["error"])
    first = report["stdout"].split("\n")[0]
    answer = json.loads(first)
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "memprove", first
    assert report["returncode"] == 0, report
    assert command == win.executable
    assert args[:3] == [win.path(plain_pyz), "mcp", "serve"], args


def test_the_pyz_as_the_command_is_no_program_on_windows(win, plain_pyz, make_env, workspace,
                                                        tmp_path):
    """The control: the same entry with the .pyz as its command, as the POSIX form
    is written, fails in CreateProcess (WinError 193), as it does on Windows."""
    done = print_config(win, plain_pyz, [], make_env({
        "MEMPROVE_CONFIG_DIR": win.path(tmp_path / "config")}), workspace)
    _, args, env = entry_parts("claude-code", parse("claude-code", done.stdout))
    report = launch(win, workspace, args[0], args[1:], env)
    assert report.get("winerror") == 193, report


# ---------------------------------------------------------------------------
# 2. doctor's fixes are PowerShell
# ---------------------------------------------------------------------------

POSIX_ONLY = [
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


def psq(value):
    """`value` as a PowerShell single-quoted string."""
    return "'" + value.replace("'", "''") + "'"


def powershell_problems(text):
    """What in one line of doctor output is POSIX shell or not a Windows path."""
    problems = [name for pattern, name in POSIX_ONLY if pattern.search(text)]
    for match in re.finditer(r"\$env:([A-Za-z_][A-Za-z0-9_]*)\s*=\s*'((?:[^']|'')*)'", text):
        if match.group(1) in PATH_VARIABLES and not WINDOWS_ABSOLUTE.match(match.group(2)):
            problems.append("$env:%s is not given a Windows path" % match.group(1))
    return problems


def assert_powershell(checks):
    for check in checks.values():
        for text in (check["detail"], check["fix"]):
            if text is not None:
                assert not powershell_problems(text), (check["name"], text,
                                                       powershell_problems(text))


def print_config_line(win, plain_pyz):
    """How doctor.md writes the print-config line on Windows."""
    return "& %s %s mcp print-config" % (psq(win.executable), psq(win.path(plain_pyz)))


def run_doctor(win, plain_pyz, env, cwd, *args, json_mode=True):
    argv = ["mcp", "doctor"] + list(args) + (["--json"] if json_mode else [])
    done = run_cli(win.python, plain_pyz, argv, env, cwd)
    assert done.stderr == b"", done.stderr
    out = done.stdout.decode("utf-8")
    checks = parse_json(out) if json_mode else parse_text(out.replace("\r\n", "\n"))
    assert done.returncode == (1 if any(c["status"] == "fail" for c in checks.values()) else 0)
    return checks


@pytest.fixture
def quoted_place(tmp_path):
    """A directory whose name holds a quote and a space, as a user's may."""
    path = tmp_path / "ana's files"
    path.mkdir()
    return path


def test_doctor_with_nothing_set_up_says_it_in_powershell(win, plain_pyz, make_env, quoted_place):
    """No configuration directory, token, data directory or client entry: each fix is
    a PowerShell line with Windows paths, quoted as PowerShell quotes."""
    config_dir = win.path(quoted_place / "memprove config")
    project = quoted_place / "project"
    (project / ".git").mkdir(parents=True)
    env = make_env({"MEMPROVE_CONFIG_DIR": config_dir})
    checks = run_doctor(win, plain_pyz, env, project)
    assert checks["config_dir"]["status"] == "warn"
    assert "New-Item -ItemType Directory -Force -Path %s" % psq(config_dir) in \
        checks["config_dir"]["fix"], checks["config_dir"]
    assert (checks["token"]["status"], checks["token"]["code"]) == ("fail", "token_missing")
    assert (checks["data_dir"]["status"], checks["data_dir"]["code"]) == \
        ("fail", "data_dir_missing")
    assert checks["client"]["status"] == "warn"
    # The fix is Claude Code's own command, its words quoted as PowerShell quotes them.
    assert checks["client"]["fix"] == (
        "claude mcp add memprove -e {env} '--' {python} {pyz} mcp serve --config-dir {cfg}".format(
            env=psq("MEMPROVE_CONFIG_DIR=" + config_dir), python=psq(win.executable),
            pyz=psq(win.path(plain_pyz)), cfg=psq(config_dir))), checks["client"]["fix"]
    assert_powershell(checks)
    # The text form says the same, line by line.
    assert_powershell(run_doctor(win, plain_pyz, env, project, json_mode=False))


TOKEN_CASES = {
    "variable-white-space": ({"MEMPROVE_TOKEN": "   "}, None, "token_missing"),
    "variable-malformed": ({"MEMPROVE_TOKEN": "two words"}, None, "token_malformed"),
    "file-malformed": ({}, b"two words\n", "token_malformed"),
    "file-empty": ({}, b"", "token_missing"),
    "token-file-variable-missing": ({"MEMPROVE_TOKEN_FILE": "@missing"}, None, "token_missing"),
}


@pytest.mark.parametrize("case", sorted(TOKEN_CASES))
def test_doctor_token_fixes_are_powershell(win, plain_pyz, make_env, win_config, config, workspace,
                                           quoted_place, case):
    env, contents, code = TOKEN_CASES[case]
    env = dict(env)
    if env.get("MEMPROVE_TOKEN_FILE") == "@missing":
        env["MEMPROVE_TOKEN_FILE"] = win.path(quoted_place / "no token here")
    if contents is not None:
        config.token_file.write_bytes(contents)
    checks = run_doctor(win, plain_pyz, make_env(dict(win_config, **env)), workspace)
    assert (checks["token"]["status"], checks["token"]["code"]) == ("fail", code), checks["token"]
    if "MEMPROVE_TOKEN" in env:
        # The variable is what to clear, in PowerShell's words.
        assert re.search(r"Remove-Item\s+(-Path\s+)?'?Env:\\?MEMPROVE_TOKEN'?|"
                         r"\$env:MEMPROVE_TOKEN\s*=\s*(\$null|'')", checks["token"]["fix"]), \
            checks["token"]["fix"]
    assert_powershell(checks)


def test_doctor_token_file_open_to_others_is_no_warning_on_windows(win, plain_pyz, make_env,
                                                                   win_config, config, workspace):
    """contract.md §5: the token file has no POSIX mode there (token_file_too_open never)."""
    os.chmod(str(config.token_file), 0o644)
    checks = run_doctor(win, plain_pyz, make_env(win_config), workspace)
    assert checks["token"]["status"] == "ok", checks["token"]
    assert_powershell(checks)


@pytest.mark.parametrize("case", ["no-data-dir-file", "not-a-directory"])
def test_doctor_data_dir_fixes_are_powershell(win, plain_pyz, make_env, win_config, config,
                                              workspace, quoted_place, case):
    if case == "no-data-dir-file":
        (config.dir / "data-dir").unlink()
    else:
        (config.dir / "data-dir").write_text(win.path(quoted_place / "gone") + "\n")
    checks = run_doctor(win, plain_pyz, make_env(win_config), workspace)
    assert (checks["data_dir"]["status"], checks["data_dir"]["code"]) == \
        ("fail", "data_dir_missing"), checks["data_dir"]
    assert_powershell(checks)


def test_doctor_workspace_and_context_fixes_are_powershell(win, plain_pyz, make_env, win_config,
                                                           daemon, quoted_place):
    env = make_env(win_config)
    missing = win.path(quoted_place / "no project")
    checks = run_doctor(win, plain_pyz, env, quoted_place, "--workspace", missing)
    assert (checks["workspace"]["status"], checks["workspace"]["code"]) == \
        ("fail", "workspace_unusable"), checks["workspace"]
    assert_powershell(checks)
    project = quoted_place / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".memprove").mkdir()
    (project / ".memprove" / "context.json").write_text("{not json")
    checks = run_doctor(win, plain_pyz, env, project)
    assert (checks["workspace"]["status"], checks["workspace"]["code"]) == \
        ("fail", "context_unreadable"), checks["workspace"]
    context = win.path(project / ".memprove" / "context.json")
    if context in checks["workspace"]["fix"].replace("''", "'"):
        assert psq(context) in checks["workspace"]["fix"], checks["workspace"]["fix"]
    assert_powershell(checks)


def test_doctor_daemon_timeout_fix_is_powershell(win, plain_pyz, make_env, win_config, daemon,
                                                 workspace):
    gate = daemon.hold("listTasks")
    try:
        checks = run_doctor(win, plain_pyz, make_env(dict(win_config, MEMPROVE_TIMEOUT="1")),
                            workspace)
    finally:
        gate.release()
    assert (checks["daemon"]["status"], checks["daemon"]["code"]) == ("fail", "daemon_timeout")
    assert re.search(r"\$env:MEMPROVE_TIMEOUT\s*=\s*'[0-9]+'", checks["daemon"]["fix"]), \
        checks["daemon"]["fix"]
    assert_powershell(checks)


def write_claude_entry(workspace, command, args, env):
    (workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"memprove": {
        "type": "stdio", "command": command, "args": args, "env": env}}}))


def test_doctor_an_entry_running_the_pyz_itself_cannot_start(win, plain_pyz, make_env,
                                                            win_config, daemon, workspace):
    """doctor.md: on Windows an entry whose command is the .pyz is client_command_missing,
    and the fix is the print-config line, which names the interpreter."""
    config_dir = win_config["MEMPROVE_CONFIG_DIR"]
    write_claude_entry(workspace, win.path(plain_pyz), ["mcp", "serve", "--config-dir", config_dir],
                       {"MEMPROVE_CONFIG_DIR": config_dir})
    checks = run_doctor(win, plain_pyz, make_env(win_config), workspace)
    assert (checks["client"]["status"], checks["client"]["code"]) == \
        ("fail", "client_command_missing"), checks["client"]
    assert print_config_line(win, plain_pyz) in checks["client"]["fix"], checks["client"]["fix"]
    assert_powershell(checks)


def test_doctor_the_printed_entry_runs_this_server(win, plain_pyz, make_env, win_config, daemon,
                                                   workspace):
    env = make_env(win_config)
    done = print_config(win, plain_pyz, [], env, workspace)
    (workspace / ".mcp.json").write_bytes(done.stdout)
    checks = run_doctor(win, plain_pyz, env, workspace)
    assert checks["client"]["status"] == "ok", checks["client"]
    # Every check but the session-start hook's, which no entry of print-config's installs.
    assert all(check["status"] == "ok" for name, check in checks.items() if name != "hook"), checks
    assert checks["hook"]["status"] == "warn", checks["hook"]
    assert_powershell(checks)


def test_doctor_an_entry_holding_the_token_is_fixed_in_powershell(win, plain_pyz, make_env,
                                                                  win_config, config, daemon,
                                                                  workspace):
    config_dir = win_config["MEMPROVE_CONFIG_DIR"]
    write_claude_entry(workspace, win.executable,
                       [win.path(plain_pyz), "mcp", "serve", "--config-dir", config_dir],
                       {"MEMPROVE_CONFIG_DIR": config_dir, "MEMPROVE_TOKEN": config.token})
    checks = run_doctor(win, plain_pyz, make_env(win_config), workspace)
    assert (checks["client"]["status"], checks["client"]["code"]) == \
        ("fail", "token_in_client_config"), checks["client"]
    assert print_config_line(win, plain_pyz) in checks["client"]["fix"], checks["client"]["fix"]
    assert_powershell(checks)


# ---------------------------------------------------------------------------
# 3. The where-lines name each client's real Windows files
# ---------------------------------------------------------------------------

# docs/clients-verified.md, "Where each client keeps its files": the Windows column, and
# the project files of clients.md.
WINDOWS_FILES = {
    "claude-code": (r"{root}\.mcp.json", r"{profile}\.claude.json"),
    "codex": (r"{profile}\.codex\config.toml",),
    "gemini": (r"{root}\.gemini\settings.json", r"{profile}\.gemini\settings.json"),
    "opencode": (r"{root}\opencode.json", r"{profile}\.config\opencode\opencode.json"),
    "cline": (r"{profile}\.cline\data\settings\cline_mcp_settings.json",),
    "continue": (r"{profile}\.continue\config.yaml",),
    "amp": (r"{root}\.amp\settings.json", r"{profile}\.config\amp\settings.json"),
    "cursor": (r"{root}\.cursor\mcp.json", r"{profile}\.cursor\mcp.json"),
    "vscode": (r"{root}\.vscode\mcp.json", r"{appdata}\Code\User\mcp.json"),
    "windsurf": (r"{profile}\.codeium\windsurf\mcp_config.json",),
    "zed": (r"{root}\.zed\settings.json", r"{appdata}\Zed\settings.json"),
    # goose's etcetera takes the profile, not %APPDATA% (equal on a default setup).
    "goose": (r"{profile}\AppData\Roaming\Block\goose\config\config.yaml",),
}


@pytest.mark.parametrize("client", CLIENTS)
def test_where_line_names_real_windows_files(win, plain_pyz, make_env, workspace, tmp_path,
                                             client):
    done = print_config(win, plain_pyz, ["--client", client],
                        make_env({"MEMPROVE_CONFIG_DIR": win.path(tmp_path / "config")}),
                        workspace)
    line = done.stderr.decode("utf-8")
    assert line.startswith("memprove-mcp: ") and line.rstrip("\r\n").count("\n") == 0, line
    root = win.path(workspace)
    for pattern in WINDOWS_FILES[client]:
        expected = pattern.format(root=root, profile=win.profile, appdata=win.appdata)
        assert expected in line, (expected, line)
    assert not powershell_problems(line), (line, powershell_problems(line))


# ---------------------------------------------------------------------------
# 4. context.json while others hold it, read it, or hold its lock
# ---------------------------------------------------------------------------

# Holds context.json open as Python's open() does (no FILE_SHARE_DELETE, so a
# rename onto it fails), and lets it go only once the server has held
# context.lock through three looks in a row: the server is then writing, and a
# writer that gives up at the first refusal has answered already.
HOLDER = r'''
import msvcrt, os, sys, time
context, lock = sys.argv[1], sys.argv[2]
held = open(context, "rb")
descriptor = os.open(lock, os.O_RDWR)
sys.stdout.write("held\n")
sys.stdout.flush()
looks = 0
while looks < 3:
    os.lseek(descriptor, 0, 0)
    try:
        msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
    except OSError:
        looks += 1
    else:
        os.lseek(descriptor, 0, 0)
        msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)
        looks = 0
    time.sleep(0.005)
held.close()
sys.stdout.write("released\n")
sys.stdout.flush()
'''


def memprove_paths(workspace):
    directory = Path(os.path.realpath(str(workspace))) / ".memprove"
    return directory / "context.json", directory / "context.lock"


def sound_context(path):
    """context.json parsed: whole, version 1 (contract.md's context file)."""
    context = json.loads(path.read_text(encoding="ascii"))
    assert context["version"] == 1, context
    return context


def test_begin_and_end_while_another_process_holds_the_context_open(win, win_server, daemon,
                                                                    workspace, tmp_path, helpers):
    """contract.md §5: os.replace fails while another process has context.json open;
    the write retries under the lock, so the call succeeds once the file is let go."""
    server = win_server()
    server.initialize()
    ok(server.call("begin", {"new_task": "Held open"}))
    context, lock = memprove_paths(workspace)
    for tool, arguments in (("end", {}), ("begin", {}), ("end", {}), ("begin", {})):
        holder = Helper(win, tmp_path, "holder", HOLDER, win.path(context), win.path(lock))
        helpers.append(holder)
        holder.expect("held")
        ok(server.call(tool, arguments))
        holder.expect("released")
        assert holder.proc.wait(SAFETY_TIMEOUT) == 0
    assert sound_context(context)["session"]["number"] == 3
    assert server.close() == 0


# Holds context.json open sharing nothing (as some editors and scanners open a file):
# while it does, no one can even read the file.  The hold outlasts a bare reader's
# short wait (SHARED_READ_WAIT, 2 s): that length is the situation under test.
EXCLUSIVE = r'''
import ctypes, sys, time
from ctypes import wintypes
create = ctypes.windll.kernel32.CreateFileW
create.restype = wintypes.HANDLE
create.argtypes = [wintypes.LPCWSTR, wintypes.DWORD, wintypes.DWORD, wintypes.LPVOID,
                   wintypes.DWORD, wintypes.DWORD, wintypes.HANDLE]
handle = create(sys.argv[1], 0x80000000, 0, None, 3, 0x80, None)  # GENERIC_READ, no sharing
assert handle not in (None, wintypes.HANDLE(-1).value), ctypes.GetLastError()
sys.stdout.write("held\n")
sys.stdout.flush()
time.sleep(float(sys.argv[2]))
ctypes.windll.kernel32.CloseHandle(wintypes.HANDLE(handle))
sys.stdout.write("released\n")
sys.stdout.flush()
'''
EXCLUSIVE_SECONDS = 3


def test_begin_while_another_process_denies_even_reading_the_context(win, win_server, daemon,
                                                                     workspace, tmp_path,
                                                                     helpers):
    """A refusal to read context.json that lasts past a bare reader's wait is waited out
    as long as the call's writes would wait (MEMPROVE_TIMEOUT): `begin` with no
    arguments continues the context's Task, its parent the open Session, and nothing
    is moved aside as unreadable."""
    server = win_server()
    server.initialize()
    ok(server.call("begin", {"new_task": "Locked away"}))
    context, _ = memprove_paths(workspace)
    holder = Helper(win, tmp_path, "exclusive", EXCLUSIVE, win.path(context), EXCLUSIVE_SECONDS)
    helpers.append(holder)
    holder.expect("held")
    begun = ok(server.call("begin", {}))
    holder.expect("released")
    assert begun["session"]["number"] == 2 and begun["session"]["parent"] == 1, begun
    assert "moved_aside" not in begun, begun
    assert sorted(path.name for path in context.parent.glob("context.json*")) == ["context.json"]
    assert sound_context(context)["session"]["number"] == 2
    assert server.close() == 0


def test_begin_and_end_while_another_server_reads_the_context_in_a_loop(win_server, daemon,
                                                                        workspace):
    """Two servers in one project: one's `context` reads (each holding the file open while
    it reads) never make the other's writes fail, and no read fails for the writes."""
    writer, reader = win_server(), win_server()
    writer.initialize()
    reader.initialize()
    ok(writer.call("begin", {"new_task": "Read while written"}))
    started, finished, reads, problems = threading.Event(), threading.Event(), [], []

    def read_in_a_loop():
        try:
            while not finished.is_set():
                reads.append(ok(reader.call("context")))
                started.set()
        except BaseException as error:      # noqa: B902 -- reported below
            problems.append(error)
            started.set()

    thread = threading.Thread(target=read_in_a_loop, daemon=True)
    thread.start()
    assert started.wait(SAFETY_TIMEOUT)
    try:
        numbers = []
        for _ in range(20):
            numbers.append(ok(writer.call("begin", {}))["session"]["number"])
            ok(writer.call("end", {}))
    finally:
        finished.set()
        thread.join(SAFETY_TIMEOUT)
    assert not problems, problems
    assert numbers == list(range(2, 22))
    assert all("context_error" not in read and read["workspace"]["problem"] is None
               for read in reads), [read for read in reads if "context_error" in read][:1]
    context, _ = memprove_paths(workspace)
    assert sound_context(context)["session"]["number"] == 1
    assert writer.close() == 0 and reader.close() == 0


# Another writer of context.json, as a tool of the user's could be: it takes
# context.lock in a loop of its own, adds one to an unknown key (which servers keep,
# contract.md's context file), and once, halfway, holds the lock past the ~10 s
# after which msvcrt's LK_LOCK gives up on Windows (Wine's after ~10 ms): that
# long hold is the situation under test, not a wait for anything.
TALLY = r'''
import json, msvcrt, os, sys, time
context, lock, count, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
descriptor = os.open(lock, os.O_RDWR)
temporary = os.path.join(os.path.dirname(context), "tally-writer.tmp")

def take():
    while True:
        os.lseek(descriptor, 0, 0)
        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
            return
        except OSError:
            time.sleep(0.001)

def give():
    os.lseek(descriptor, 0, 0)
    msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)

def read():
    while True:
        try:
            with open(context, "rb") as file:
                return json.loads(file.read().decode("utf-8"))
        except PermissionError:          # a server renames onto it this moment
            time.sleep(0.001)

def write(value):
    with open(temporary, "wb") as file:
        file.write((json.dumps(value, indent=2) + "\n").encode("ascii"))
        file.flush()
        os.fsync(file.fileno())
    while True:
        try:
            os.replace(temporary, context)
            return
        except PermissionError:          # a server reads it this moment
            time.sleep(0.001)

sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
for index in range(count):
    take()
    try:
        value = read()
        value["tally"] = value.get("tally", 0) + 1
        write(value)
        if index == count // 2:
            sys.stdout.write("holding\n")
            sys.stdout.flush()
            time.sleep(hold)
    finally:
        give()
sys.stdout.write("done\n")
sys.stdout.flush()
'''

TALLY_COUNT = 24
LOCK_HELD_SECONDS = 11


def test_two_servers_and_a_long_lock_holder_lose_no_update(win, win_server, daemon, workspace,
                                                           tmp_path, helpers):
    """Two servers each begin and end Sessions while a third process updates context.json
    under context.lock and once holds the lock for longer than msvcrt waits: every call
    succeeds (the lock is taken in a loop up to MEMPROVE_TIMEOUT) and every one of the
    third process's updates survives the servers' rewrites."""
    servers = [win_server(), win_server()]
    for server in servers:
        server.initialize()
    ok(servers[0].call("begin", {"new_task": "Shared"}))
    context, lock = memprove_paths(workspace)
    tally = Helper(win, tmp_path, "tally", TALLY, win.path(context), win.path(lock), TALLY_COUNT,
                   LOCK_HELD_SECONDS)
    helpers.append(tally)
    tally.expect("ready")
    finished, done_calls, problems = threading.Event(), [0, 0], []

    def cycle(index):
        server = servers[index]
        try:
            while not finished.is_set():
                begun = ok(server.call("begin", {"new_task": "Server %d" % index}))
                ok(server.call("end", {"session": begun["session"]["number"]}))
                done_calls[index] += 2
        except BaseException as error:      # noqa: B902 -- reported below
            problems.append(error)

    threads = [threading.Thread(target=cycle, args=(index,), daemon=True) for index in (0, 1)]
    for thread in threads:
        thread.start()
    tally.tell("go")
    try:
        tally.expect("holding")
        tally.expect("done", timeout=SAFETY_TIMEOUT + LOCK_HELD_SECONDS * 2)
    finally:
        finished.set()
        for thread in threads:
            thread.join(SAFETY_TIMEOUT * 4)
    assert not problems, problems
    assert all(count >= 2 for count in done_calls), done_calls
    assert sound_context(context).get("tally") == TALLY_COUNT
    assert all(server.close() == 0 for server in servers)


def test_a_server_killed_mid_write_leaves_the_context_whole(win, win_server, daemon, workspace):
    """Killed (TerminateProcess, as Wine's SIGKILL is) while calls write context.json:
    the file is whole every time, and the next writer clears what was left."""
    context, _ = memprove_paths(workspace)
    for round_number in range(6):
        server = win_server()
        server.initialize()
        pending = []
        for index in range(6):
            tool, arguments = ("begin", {"new_task": "Round %d" % round_number}) if index % 2 == 0 \
                else ("end", {})
            message = server.request_message("tools/call", server.call_params(tool, arguments))
            server.send(message)
            pending.append(message["id"])
        server.response(pending[0])         # the rest are being written now
        server.kill()
        server.checked = True               # killed: its log is cut short on purpose
        if context.exists():
            sound_context(context)
    server = win_server()
    server.initialize()
    ok(server.call("begin", {"new_task": "After the kills"}))
    assert sound_context(context)["task"]["title"] == "After the kills"
    assert not [name for name in os.listdir(str(context.parent)) if name.endswith(".tmp")]
    assert server.close() == 0


# ---------------------------------------------------------------------------
# 5. Files written by Windows tools
# ---------------------------------------------------------------------------

def utf8_bom(text):
    return b"\xef\xbb\xbf" + text.encode("utf-8")


def utf16_le(text):
    return b"\xff\xfe" + text.encode("utf-16-le")


def utf16_be(text):
    return b"\xfe\xff" + text.encode("utf-16-be")


# How Windows tools write a one-line file: Notepad (UTF-8 with a BOM), PowerShell 5.1's
# `>` and Out-File (UTF-16 LE with a BOM, CR LF), Set-Content -Encoding UTF8 / Unicode /
# BigEndianUnicode, with and without -NoNewline, and a plain CR LF.
FORMS = {
    "utf8-bom": lambda text: utf8_bom(text + "\n"),
    "utf8-bom-crlf": lambda text: utf8_bom(text + "\r\n"),
    "utf8-bom-no-newline": utf8_bom,
    "crlf": lambda text: (text + "\r\n").encode("utf-8"),
    "utf16-le-crlf": lambda text: utf16_le(text + "\r\n"),
    "utf16-le-no-newline": utf16_le,
    "utf16-be-crlf": lambda text: utf16_be(text + "\r\n"),
}


def reaches_the_daemon(server, daemon, config):
    """One tool call that needs the token, the data directory and daemon.json, answered
    by the daemon with the token as it is."""
    daemon.clear_ops()
    ok(server.call("tasks"))
    ops = daemon.ops
    assert [entry["op"] for entry in ops] == ["listTasks"], ops
    assert ops[0]["headers"]["authorization"] == "Bearer " + config.token


@pytest.mark.parametrize("form", sorted(FORMS))
def test_token_file_written_by_windows_tools(win_server, daemon, config, form):
    config.token_file.write_bytes(FORMS[form](config.token))
    server = win_server()
    server.initialize()
    reaches_the_daemon(server, daemon, config)
    assert server.close() == 0


@pytest.mark.parametrize("form", sorted(FORMS))
def test_data_dir_written_by_windows_tools(win, win_server, daemon, config, form):
    """PowerShell 5.1's `echo C:\\... > data-dir` is the utf16-le-crlf form."""
    (config.dir / "data-dir").write_bytes(FORMS[form](win.path(config.data_dir)))
    server = win_server()
    server.initialize()
    reaches_the_daemon(server, daemon, config)
    assert server.close() == 0


@pytest.mark.parametrize("form", ["utf8-bom", "utf8-bom-crlf", "utf16-le-crlf", "utf16-be-crlf"])
def test_daemon_json_written_by_windows_tools(win_server, daemon, config, form):
    record = json.dumps({"url": daemon.url, "pid": os.getpid()}, indent=2)
    daemon.daemon_json_path.write_bytes(FORMS[form](record.replace("\n", "\r\n")
                                                    if form.endswith("crlf") else record))
    server = win_server()
    server.initialize()
    reaches_the_daemon(server, daemon, config)
    assert server.close() == 0


def test_the_windows_python_is_what_the_tests_think(win):
    """The wrappers run python.org's Windows build: os.name nt, MSC, an absolute
    Windows sys.executable (what every entry must name)."""
    assert ntpath.isabs(win.executable) and win.executable.lower().endswith("python.exe")
    version = ask_python(win.python, "sys.version + ' ' + os.name")
    assert "MSC" in version and version.endswith(" nt"), version


# ---------------------------------------------------------------------------
# 6. The bytecode cache (contract.md §5; §6 rule 13's Windows clause)
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
