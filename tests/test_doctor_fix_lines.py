"""doctor's fix lines in the platform's shell (doctor.md; contract.md §5): sh words and lines on
Linux and macOS, PowerShell words and lines on Windows, given the platform (so that each is
checked on any machine), then doctor itself under python.org's Windows CPython (the `win`
fixture: tests/windows.sh's wrappers under Wine): every fix is a PowerShell line naming
Windows paths, the token file has no mode to fix, an entry whose command is the .pyz is
`client_command_missing`.
"""

import json
import os
import re
import sys

import pytest

from harness import powershell_problems, run_cli, windows_print_config
from test_doctor import parse_json, parse_text
import memprove_mcp as mp


# -- the fix lines, given the platform (any machine) ------------------------------

def test_powershell_words_double_every_single_quote():
    assert mp.powershell_word("mcp") == "mcp"
    assert mp.powershell_word("C:\\Program Files\\Python313\\python.exe") == \
        "'C:\\Program Files\\Python313\\python.exe'"
    assert mp.powershell_word("C:\\Users\\o'brien\\x") == "'C:\\Users\\o''brien\\x'"
    assert mp.powershell_word("it\u2019s") == "'it\u2019\u2019s'"
    assert mp.powershell_word("$env:X") == "'$env:X'"                 # no expansion inside
    assert mp.powershell_word("--client") == "--client"
    assert mp.powershell_word("30") == "'30'"                        # a string, not a number


def test_sh_words_quote_as_sh_reads_them():
    assert mp.sh_word("/usr/bin/python3") == "/usr/bin/python3"
    assert mp.sh_word("/a b/c") == "'/a b/c'"
    assert mp.sh_word("it's") == "'it'\"'\"'s'"


def found_for(platform, program="C:\\tools\\memprove_mcp.pyz", environ=None):
    found = mp.Findings({}, environ or {}, platform)
    found.program, found.config_dir = program, "C:\\Users\\ana\\memprove"
    return found


def test_powershell_fix_lines():
    found = found_for("win32")
    assert mp.fix(found, "set", name="MEMPROVE_TIMEOUT", value="30") == "$env:MEMPROVE_TIMEOUT = '30'"
    assert mp.fix(found, "unset", name="MEMPROVE_TOKEN") == "Remove-Item Env:MEMPROVE_TOKEN"
    assert mp.fix(found, "mkdir", path="C:\\Users\\o'b\\memprove") == \
        "New-Item -ItemType Directory -Force -Path 'C:\\Users\\o''b\\memprove'"
    assert mp.fix(found, "write", path="C:\\[x]\\data-dir", value="C:\\d") == \
        "Set-Content -LiteralPath 'C:\\[x]\\data-dir' -Value 'C:\\d' -Encoding utf8"
    assert mp.fix(found, "move", path="C:\\a b\\context.json", target="C:\\a b\\context.json.bad") \
        == "Move-Item -LiteralPath 'C:\\a b\\context.json' -Destination 'C:\\a b\\context.json.bad'"
    assert mp.SHELLS["powershell"]["private"] is None                 # no chmod on Windows
    line = mp.doctor_command(found, "mcp", "print-config", "--client", "codex")
    assert line == "& %s 'C:\\tools\\memprove_mcp.pyz' mcp print-config --client codex" % (
        mp.powershell_word(sys.executable))


def test_sh_fix_lines():
    found = found_for("linux", "/opt/memprove mcp/memprove_mcp.pyz")
    assert mp.fix(found, "set", name="MEMPROVE_TIMEOUT", value="30") == "export MEMPROVE_TIMEOUT=30"
    assert mp.fix(found, "mkdir", path="/home/ana/.config/memprove") == \
        "mkdir -p -m 700 /home/ana/.config/memprove"
    assert mp.doctor_command(found, "mcp", "print-config") == \
        "python3 '/opt/memprove mcp/memprove_mcp.pyz' mcp print-config"


def test_macos_python_check_names_the_interpreter_a_dock_client_runs(monkeypatch):
    found = found_for("darwin", "/x.pyz", {"PATH": os.defpath})
    origin = mp.interpreter_origin(found)
    assert "a client started from the Dock runs a .pyz entry with" in origin
    assert "/usr/bin:/bin:/usr/sbin:/sbin" in origin
    linux = mp.interpreter_origin(found_for("linux", "/x.pyz", {"PATH": os.defpath}))
    assert "Dock" not in linux


def test_a_token_file_has_no_mode_to_fix_on_windows(tmp_path):
    """doctor's token check on a 0644 file: a warning with a chmod fix under POSIX,
    nothing to say on Windows, where the bits mean nothing (and no fix exists)."""
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    os.chmod(str(token), 0o644)

    def check(platform):
        environ = {"MEMPROVE_TOKEN_FILE": str(token)}
        found = found_for(platform, environ=environ)
        found.config_dir = str(tmp_path)
        return mp.check_token(found)
    assert (check("win32").status, check("win32").code) == ("ok", None)
    if os.name == "nt":         # the POSIX control needs the host's POSIX modes
        return
    checked = check("linux")
    assert (checked.status, checked.fix) == ("warn", "chmod 600 %s" % mp.sh_word(str(token)))


# -- doctor under the Windows Python (the `win` fixture) --------------------------

def psq(value):
    """`value` as a PowerShell single-quoted string."""
    return "'" + value.replace("'", "''") + "'"


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
    done = windows_print_config(win, plain_pyz, [], env, workspace)
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


# -- §6 rule 33: a path hiding text is shown escaped ---------------------------------

# A right-to-left override (a name that reads `...exe.txt` shown as `...txt.exe`) and a
# tag character (U+E0041, which JSON escapes as the pair \udb40\udc41), in a folder's name.
HIDING_CHARS = [("\u202e", "\\u202e"), ("\U000e0041", "\\udb40\\udc41")]


@pytest.mark.parametrize("char,escaped", HIDING_CHARS, ids=["u202e", "tag"])
def test_rule33_a_path_hiding_text_is_escaped_in_sh_and_powershell_lines(char, escaped):
    assert mp.shown_path("/home/ana/gpj" + char + "exe") == '"/home/ana/gpj%sexe"' % escaped
    assert mp.shown_path("/home/ana/a\u200db\u200ec") == "/home/ana/a\u200db\u200ec"    # kept as is
    sh = found_for("linux", "/opt/kit" + char + "/memprove_mcp.pyz")
    assert mp.fix(sh, "mkdir", path="/home/ana/memprove" + char) == \
        "mkdir -p -m 700 '/home/ana/memprove%s'" % escaped
    assert mp.fix(sh, "write", path="/c/data-dir", value="/d" + char) == \
        "echo '/d%s' > /c/data-dir" % escaped
    assert mp.doctor_command(sh, "mcp", "print-config") == \
        "python3 '/opt/kit%s/memprove_mcp.pyz' mcp print-config" % escaped
    ps = found_for("win32", "C:\\kit" + char + "\\memprove_mcp.pyz")
    assert mp.fix(ps, "mkdir", path="C:\\Users\\ana" + char) == \
        "New-Item -ItemType Directory -Force -Path 'C:\\\\Users\\\\ana%s'" % escaped
    assert mp.doctor_command(ps, "mcp", "print-config").endswith(
        " 'C:\\\\kit%s\\\\memprove_mcp.pyz' mcp print-config" % escaped)
    for line in (mp.fix(sh, "mkdir", path="/x" + char), mp.fix(ps, "mkdir", path="C:\\x" + char),
                 mp.doctor_command(sh, "mcp"), mp.doctor_command(ps, "mcp")):
        assert char not in line and line.isascii(), line


def hidden_in(text):
    return [char for char in text if char in "\u202e" or 0xE0000 <= ord(char) <= 0xE007F]


@pytest.mark.parametrize("char,escaped", HIDING_CHARS, ids=["u202e", "tag"])
def test_rule33_doctor_shows_a_configuration_directory_hiding_text_escaped(pyz, make_env, tmp_path,
                                                                          char, escaped):
    """doctor's check line and its `mkdir` fix name the missing configuration directory
    escaped, in the text output and in `--json`; no hidden character reaches either."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    config_dir = str(tmp_path / ("memprove" + char + "gifnoc"))
    env = make_env({"MEMPROVE_CONFIG_DIR": config_dir})
    done = run_cli(sys.executable, pyz, ["mcp", "doctor"], env, project)
    text = done.stdout.decode("utf-8")
    checks = parse_text(text)
    quoted = json.dumps(config_dir)[1:-1]
    assert hidden_in(text) == [] and escaped in quoted, text
    assert checks["config_dir"]["status"] == "warn" and quoted in checks["config_dir"]["detail"], text
    assert checks["config_dir"]["fix"] == "mkdir -p -m 700 '%s'" % quoted, checks["config_dir"]
    done = run_cli(sys.executable, pyz, ["mcp", "doctor", "--json"], env, project)
    shown = json.dumps(json.loads(done.stdout.decode("utf-8")), ensure_ascii=False)
    assert hidden_in(shown) == [] and "mkdir -p -m 700 '%s'" % quoted in parse_json(
        done.stdout.decode("utf-8"))["config_dir"]["fix"]


def test_rule33_doctor_shows_a_path_hiding_text_escaped_in_powershell(win, plain_pyz, make_env, tmp_path):
    """The same under the Windows Python: the fix is a PowerShell line naming the folder
    escaped, single-quoted."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    config_dir = win.path(tmp_path / "memprove\u202egifnoc")
    checks = run_doctor(win, plain_pyz, make_env({"MEMPROVE_CONFIG_DIR": config_dir}), project)
    quoted = json.dumps(config_dir)[1:-1]
    assert "\\u202e" in quoted
    assert checks["config_dir"]["status"] == "warn" and quoted in checks["config_dir"]["detail"]
    assert checks["config_dir"]["fix"] == \
        "New-Item -ItemType Directory -Force -Path %s" % psq(quoted), checks["config_dir"]
    assert all("\u202e" not in (check["detail"] + (check["fix"] or "")) for check in checks.values())
    assert_powershell(checks)
