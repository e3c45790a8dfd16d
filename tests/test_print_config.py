"""`mcp print-config` through the built .pyz (tools.md, "The command line"): the entry it prints,
`--python`, where the configuration directory comes from, no token or data directory shown,
nothing written, a deleted working directory (contract.md §6 rule 11); and on Windows, every
entry it prints started as a Windows client starts it (CreateProcess, no shell, a .pyz without
the Unix executable bit), where the .pyz as the command is no program (contract.md §5).
The clients' own forms (`--client NAME`) are tested in test_clients.py.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from hardening_support import wrapper
from harness import (HOST_IS_WINDOWS, REPO, SAFETY_TIMEOUT, clean_env, default_config_dir,
                     initialize_params, interpreter_executable, one_stderr_line, run_cli,
                     snapshot, windows_print_config)
from test_clients import CLIENTS, DOCUMENTED, parse


# -- print-config -----------------------------------------------------------------

def print_config(python, pyz, args, env, cwd):
    done = run_cli(python, pyz, ["mcp", "print-config"] + list(args), env, cwd)
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout.decode("utf-8"))      # exactly one JSON document
    where = one_stderr_line(done)
    assert ".mcp.json" in where and os.path.join(env["HOME"], ".claude.json") in where, where
    return entry, done


def runs(python, program, env):
    """The command and first arguments of print-config's entry for `program`: the program,
    and on Windows (which starts a program by its extension) the interpreter, then it."""
    if HOST_IS_WINDOWS:
        return interpreter_executable(python, env), [os.path.abspath(str(program))]
    return os.path.abspath(str(program)), []


def test_print_config(pyz, server_python, make_env, workspace, tmp_path):
    config_dir = tmp_path / "cfg"
    entry, _ = print_config(server_python, pyz, ["--config-dir", str(config_dir)], make_env(),
                            workspace)
    command, first = runs(server_python, pyz, make_env())
    assert entry == {"mcpServers": {"memprove": {
        "type": "stdio",
        "command": command,
        "args": first + ["mcp", "serve", "--config-dir", str(config_dir)],
        "env": {"MEMPROVE_CONFIG_DIR": str(config_dir)}}}}


def test_print_config_python(pyz, server_python, make_env, workspace, tmp_path):
    config_dir = tmp_path / "cfg"
    env = make_env()
    entry, _ = print_config(server_python, pyz, ["--config-dir", str(config_dir), "--python"], env,
                            workspace)
    server = entry["mcpServers"]["memprove"]
    assert server == {
        "type": "stdio",
        "command": interpreter_executable(server_python, env),
        "args": [os.path.abspath(str(pyz)), "mcp", "serve", "--config-dir", str(config_dir)],
        "env": {"MEMPROVE_CONFIG_DIR": str(config_dir)}}
    assert os.path.isabs(server["command"])
    # --python may come before --config-dir, too.
    again, _ = print_config(server_python, pyz, ["--python", "--config-dir", str(config_dir)], env,
                            workspace)
    assert again == entry


def test_print_config_from_source(newest_python, make_env, workspace, tmp_path):
    config_dir = tmp_path / "cfg"
    entry, _ = print_config(newest_python, REPO / "memprove_mcp.py",
                            ["--config-dir", str(config_dir)], make_env(), workspace)
    command, first = runs(newest_python, REPO / "memprove_mcp.py", make_env())
    assert [entry["mcpServers"]["memprove"]["command"]] + \
        entry["mcpServers"]["memprove"]["args"][:len(first)] == [command] + first


@pytest.mark.parametrize("source", ["option", "option-relative", "option-over-env", "env",
                                    "empty-env-falls-through", "xdg", "home"])
def test_print_config_config_dir_sources(pyz, newest_python, make_env, workspace, home, tmp_path,
                                         source):
    option_dir, env_dir, xdg = tmp_path / "opt", tmp_path / "envdir", tmp_path / "xdg"
    args, extra = [], {}
    if source == "option":
        args, expected = ["--config-dir", str(option_dir)], option_dir
    elif source == "option-relative":
        args, expected = ["--config-dir", "rel/cfg"], workspace / "rel" / "cfg"
    elif source == "option-over-env":
        args, expected = ["--config-dir", str(option_dir)], option_dir
        extra = {"MEMPROVE_CONFIG_DIR": env_dir, "XDG_CONFIG_HOME": xdg}
    elif source == "env":
        expected, extra = env_dir, {"MEMPROVE_CONFIG_DIR": env_dir, "XDG_CONFIG_HOME": xdg}
    elif source == "empty-env-falls-through":
        expected, extra = xdg / "memprove", {"MEMPROVE_CONFIG_DIR": "", "XDG_CONFIG_HOME": xdg}
    elif source == "xdg":
        expected, extra = xdg / "memprove", {"XDG_CONFIG_HOME": xdg}
    else:
        expected = Path(default_config_dir(home, newest_python))
    entry, _ = print_config(newest_python, pyz, args, make_env(extra), workspace)
    server = entry["mcpServers"]["memprove"]
    shown = server["args"][-1]
    assert os.path.isabs(shown)
    assert os.path.realpath(shown) == os.path.realpath(str(expected))
    if source != "option-relative":
        assert shown == str(expected)
    assert server["args"] == runs(newest_python, pyz, make_env())[1] + \
        ["mcp", "serve", "--config-dir", shown]
    assert server["env"] == {"MEMPROVE_CONFIG_DIR": shown}
    for directory in (option_dir, env_dir, xdg, workspace / "rel", home / ".config"):
        assert not directory.exists(), directory


@pytest.mark.parametrize("python_flag", [[], ["--python"]], ids=["pyz", "python"])
def test_print_config_never_shows_token_or_data_dir(pyz, newest_python, make_env, workspace,
                                                    config, plant, python_flag):
    token = plant("tok-PLANTED-env")
    token_file = config.dir / "other-token"
    token_file.write_text(plant("tok-PLANTED-file") + "\n")
    data_dir = config.dir.parent / plant("datadir-PLANTED")
    env = make_env({"MEMPROVE_TOKEN": token, "MEMPROVE_TOKEN_FILE": token_file,
                    "MEMPROVE_DATA_DIR": data_dir, "MEMPROVE_CONFIG_DIR": config.dir})
    entry, done = print_config(newest_python, pyz, python_flag, env, workspace)
    assert entry["mcpServers"]["memprove"]["env"] == {"MEMPROVE_CONFIG_DIR": str(config.dir)}
    both = done.stdout + done.stderr
    for secret in (token, config.token, str(data_dir), str(config.data_dir), str(token_file),
                   os.path.basename(str(data_dir)), os.path.basename(str(token_file))):
        assert secret.encode() not in both, secret
    assert b"PLANTED" not in both


@pytest.mark.parametrize("config_exists", [True, False], ids=["config-dir-exists", "no-config-dir"])
def test_print_config_writes_nothing(pyz, newest_python, make_env, workspace, home, config,
                                     tmp_path, config_exists):
    config_dir = config.dir if config_exists else tmp_path / "absent-config"
    roots = [config_dir, workspace, home, pyz.parent, tmp_path]
    before = snapshot(*roots)
    for flags in ([], ["--python"]):
        print_config(newest_python, pyz, ["--config-dir", str(config_dir)] + flags, make_env(),
                     workspace)
        print_config(newest_python, pyz, flags, make_env({"MEMPROVE_CONFIG_DIR": config_dir}),
                     workspace)
    assert snapshot(*roots) == before
    assert not (workspace / ".mcp.json").exists()
    assert not (home / ".claude.json").exists()


def test_rule11_print_config_in_a_deleted_working_directory(pyz, tmp_path, home, config):
    """§6 rule 11: `mcp print-config` run from a deleted working directory prints its entry,
    with no traceback."""
    gone = tmp_path / "gone"
    gone.mkdir()
    python = wrapper(tmp_path, "python-in-deleted-dir",
                     "os.chdir(%r)\nos.rmdir(%r)" % (str(gone), str(gone)))
    done = subprocess.run([python, str(pyz), "mcp", "print-config"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=clean_env(home, config.env()),
                          cwd=str(tmp_path), timeout=SAFETY_TIMEOUT)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout.decode())["mcpServers"]["memprove"]
    assert entry["args"][:2] == ["mcp", "serve"]


# ---------------------------------------------------------------------------
# Under Windows: every entry print-config prints starts through CreateProcess
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
    done = windows_print_config(win, plain_pyz, flags, make_env({"MEMPROVE_CONFIG_DIR": config_dir}),
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
    done = windows_print_config(win, plain_pyz, [], make_env({
        "MEMPROVE_CONFIG_DIR": win.path(tmp_path / "config")}), workspace)
    _, args, env = entry_parts("claude-code", parse("claude-code", done.stdout))
    report = launch(win, workspace, args[0], args[1:], env)
    assert report.get("winerror") == 193, report


# ---------------------------------------------------------------------------
# §6 rule 36: `%` in a path where the hook runs under cmd.exe (Codex on Windows)
# ---------------------------------------------------------------------------

PERCENT_WORDS = ["C:\\Python313\\python.exe", "C:\\Users\\ana\\100%\\memprove_mcp.pyz", "mcp",
                 "hook", "session-start", "--config-dir", "C:\\Users\\ana\\%USERNAME%"]


def test_rule36_hook_refusal_of_a_percent_only_where_cmd_runs_the_hook():
    """Codex CLI runs a hook's commandWindows under cmd.exe, which expands `%` even between
    double quotes: refused, naming the client and cmd.exe.  Not on Linux (sh), nor for
    Claude Code or Gemini CLI on Windows, whose forms cmd.exe does not read."""
    import memprove_mcp as mp
    line = mp.hook_refusal("codex", PERCENT_WORDS, "win32")
    assert line and "Codex CLI" in line and "cmd.exe" in line and "%" in line, line
    assert "100%" in line, line                        # the first word holding one
    for platform in ("linux", "darwin"):
        assert mp.hook_refusal("codex", PERCENT_WORDS, platform) is None, platform
    for client in ("claude-code", "gemini"):
        assert mp.hook_refusal(client, PERCENT_WORDS, "win32") is None, client
    assert mp.hook_refusal("codex", [word.replace("%", "") for word in PERCENT_WORDS],
                           "win32") is None


def test_rule36_print_config_hook_for_codex_on_windows_refuses_a_path_with_percent(
        win, plain_pyz, make_env, workspace, tmp_path):
    """Under the Windows Python: `print-config --hook --client codex --config-dir <a folder
    holding %>` exits 1 with one line naming cmd.exe, nothing on standard output.  Claude
    Code's form (no shell) prints its entry."""
    config_dir = win.path(tmp_path / "50%off")
    env = make_env()
    done = run_cli(win.python, plain_pyz, ["mcp", "print-config", "--hook", "--client", "codex",
                                           "--config-dir", config_dir], env, workspace)
    assert (done.returncode, done.stdout) == (1, b""), (done.returncode, done.stdout)
    line = one_stderr_line(done)
    assert "cmd.exe" in line and "Codex CLI" in line, line
    done = run_cli(win.python, plain_pyz, ["mcp", "print-config", "--hook", "--client",
                                           "claude-code", "--config-dir", config_dir], env,
                   workspace)
    assert done.returncode == 0, done.stderr
    assert config_dir in json.loads(done.stdout.decode("utf-8"))["hooks"]["SessionStart"][0][
        "hooks"][0]["args"]
