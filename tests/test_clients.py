"""The clients' records (memprove_mcp.py section 13): one record per client, and
`mcp print-config --client NAME` (clients.md, "mcp print-config --client NAME";
tools.md, "The command line"), through the built .pyz.

Every form is parsed with a real parser (json, tomllib, PyYAML), compared with
the entry the spec's table describes, and checked against the keys each
client's own documentation gives a stdio server (docs/clients-verified.md).  Config
directories and `--workspace` directories hold the characters that break
hand-written TOML and YAML.  No token, data directory or value set in the
environment may appear; the default output is compared with a golden taken from
print-config before `--client` existed.

Under Windows (the `win` fixture), print-config's standard-error line names each client's
real Windows files.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from hardening_support import hypothesis_or_fail
from harness import (HOST_IS_WINDOWS, clean_env, depth, interpreter_executable, one_stderr_line,
                     powershell_problems, require_python, run_cli, windows_print_config)

hypothesis_or_fail()
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

# clients.md's table, in its order.
CLIENTS = ("claude-code", "codex", "gemini", "opencode", "cline", "continue", "amp", "cursor",
           "vscode", "windsurf", "zed", "goose")
FORMATS = {"codex": "toml", "continue": "yaml", "goose": "yaml"}

# Codex passes a server only these variables from the user's shell, plus the
# ones named in `env_vars` (clients.md, the codex row).
CODEX_ENV_VARS = ["MEMPROVE_TOKEN", "MEMPROVE_TOKEN_FILE", "MEMPROVE_DATA_DIR",
                  "MEMPROVE_WORKSPACE", "MEMPROVE_TIMEOUT", "MEMPROVE_AGENT_NAME",
                  "MEMPROVE_AGENT_ROLE", "MEMPROVE_PARENT_SESSION", "MEMPROVE_MCP_LOG"]

# Directory names that a naive TOML or YAML writer gets wrong: quotes,
# backslashes, `#` (a comment), `: ` (a mapping), a leading `- `, `&`/`*`/`!`
# (anchors, aliases, tags), words YAML 1.1 reads as booleans or null, a tab, C0
# and C1 controls, DEL, U+2028 (a YAML line break), the BOM, non-ASCII and an
# astral character (JSON would write it as a surrogate pair, valid in neither).
NASTY_NAMES = {
    "plain": "memprove config",
    "quotes": "it's a \"quoted\" dir",
    "backslash": "back\\slash\\\\twice\\n not a newline",
    "hash-colon": "a #comment: and: more # ",
    "yaml-indicators": "- &anchor *alias !tag %pct @at `tick [x] {y} | > ? ,",
    "yaml-words": "null",
    "controls": "tab\there\x01\x1b\x7f\x85\x9f end",
    "line-breaks-unicode": "sep\u2028para\u2029bom\ufeff",
    "non-ascii": "caf\u00e9 \u65e5\u672c \u00a0nbsp",
    "astral": "rocket \U0001F680 \U00010348 \U0010FFFD",
}

# What each client's documentation accepts in a stdio server entry (docs/
# clients-verified.md, "The entry each client reads"): where the entry sits, the keys it
# may hold, the ones it must hold, and the name of each part.
DOCUMENTED = {
    "claude-code": dict(path=("mcpServers", "memprove"), keys={"type", "command", "args", "env"},
                        required={"command"}, command="command", args="args", env="env"),
    "codex": dict(path=("mcp_servers", "memprove"),
                  keys={"command", "args", "env", "env_vars", "cwd", "enabled",
                        "startup_timeout_sec", "tool_timeout_sec"},
                  required={"command"}, command="command", args="args", env="env"),
    "gemini": dict(path=("mcpServers", "memprove"),
                   keys={"command", "args", "env", "cwd", "timeout", "trust", "includeTools",
                         "excludeTools"},
                   required={"command"}, command="command", args="args", env="env"),
    "opencode": dict(path=("mcp", "memprove"),
                     keys={"type", "command", "environment", "enabled", "timeout"},
                     required={"type", "command"}, command="command", args=None,
                     env="environment"),
    "cline": dict(path=("mcpServers", "memprove"),
                  keys={"type", "command", "args", "env", "cwd", "disabled", "autoApprove",
                        "timeout"},
                  required={"command"}, command="command", args="args", env="env"),
    "continue": dict(path=("mcpServers", 0), keys={"name", "type", "command", "args", "env", "cwd"},
                     required={"name", "command"}, command="command", args="args", env="env"),
    "amp": dict(path=("amp.mcpServers", "memprove"), keys={"command", "args", "env"},
                required={"command"}, command="command", args="args", env="env"),
    "cursor": dict(path=("mcpServers", "memprove"),
                   keys={"type", "command", "args", "env", "envFile"},
                   required={"command"}, command="command", args="args", env="env"),
    "vscode": dict(path=("servers", "memprove"), keys={"type", "command", "args", "env", "envFile"},
                   required={"type", "command"}, command="command", args="args", env="env"),
    "windsurf": dict(path=("mcpServers", "memprove"), keys={"command", "args", "env", "disabled"},
                     required={"command"}, command="command", args="args", env="env"),
    "zed": dict(path=("context_servers", "memprove"), keys={"command", "args", "env"},
                required={"command"}, command="command", args="args", env="env"),
    "goose": dict(path=("extensions", "memprove"),
                  # block/goose crates/goose/src/agents/extension.rs, ExtensionConfig::Stdio,
                  # plus the entry's own `enabled`.
                  keys={"name", "type", "cmd", "args", "envs", "env_keys", "enabled", "timeout",
                        "description", "bundled", "available_tools"},
                  required={"name", "type", "cmd", "args"}, command="cmd", args="args",
                  env="envs"),
}

# Where each entry goes: text the standard-error line must hold, and the file
# under the project (the Workspace root) it names, if any.
# The words each client's standard-error line holds ("~" standing for the real
# home directory, which the line names: never "~/"), and its project file.
WHERE = {
    "claude-code": (("~/.claude.json",), (".mcp.json",)),
    "codex": (("~/.codex/config.toml",), None),
    "gemini": (("~/.gemini/settings.json", "trusted"), (".gemini", "settings.json")),
    "opencode": (("~/.config/opencode/opencode.json",), ("opencode.json",)),
    "cline": (("~/.cline/data/settings/cline_mcp_settings.json",), None),
    "continue": (("~/.continue/config.yaml", "cn --config"), None),
    "amp": (("~/.config/amp/settings.json",), (".amp", "settings.json")),
    "cursor": (("~/.cursor/mcp.json",), (".cursor", "mcp.json")),
    "vscode": (("~/.config/Code/User/mcp.json",), (".vscode", "mcp.json")),
    "windsurf": (("~/.codeium/windsurf/mcp_config.json",), None),
    "zed": (("~/.config/zed/settings.json",), (".zed", "settings.json")),
    "goose": (("~/.config/goose/config.yaml",), None),
}

# print-config's output before `--client` existed (commit 9ad3478), with
# @COMMAND@, @PYZ@ and @CONFIG@ standing for JSON strings.  It is the
# golden for the default output and for `--client claude-code`.
GOLDEN = """\
{
  "mcpServers": {
    "memprove": {
      "type": "stdio",
      "command": @COMMAND@,
      "args": [
        "mcp",
        "serve",
        "--config-dir",
        @CONFIG@
      ],
      "env": {
        "MEMPROVE_CONFIG_DIR": @CONFIG@
      }
    }
  }
}
"""
GOLDEN_PYTHON = """\
{
  "mcpServers": {
    "memprove": {
      "type": "stdio",
      "command": @COMMAND@,
      "args": [
        @PYZ@,
        "mcp",
        "serve",
        "--config-dir",
        @CONFIG@
      ],
      "env": {
        "MEMPROVE_CONFIG_DIR": @CONFIG@
      }
    }
  }
}
"""
# Since issue 17 the line names the real home directory where it said `~/`.
GOLDEN_WHERE = ("memprove-mcp: put this entry in @ROOT@/.mcp.json (project scope) or in "
                "@HOME@/.claude.json (local or user scope).\n")


def golden_where(root, home):
    return GOLDEN_WHERE.replace("@ROOT@", str(root)).replace("@HOME@", str(home))


def golden(pyz, config_dir, python=None):
    def string(value):
        return json.dumps(value, ensure_ascii=False)
    text = GOLDEN_PYTHON if python else GOLDEN
    text = text.replace("@PYZ@", string(os.path.abspath(str(pyz))))
    text = text.replace("@COMMAND@", string(python or os.path.abspath(str(pyz))))
    return text.replace("@CONFIG@", string(config_dir))


# -- running it ----------------------------------------------------------------

def run_print_config(pyz, args, env, cwd):
    done = run_cli(sys.executable, pyz, ["mcp", "print-config"] + list(args), env, cwd)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8")
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("memprove-mcp: "), err
    return done.stdout, err


def parse(client, data):
    """The document, read by the parser its client's format needs."""
    text = data.decode("utf-8")          # strict: the output is UTF-8
    kind = FORMATS.get(client, "json")
    if kind == "toml":
        return tomllib.loads(text)
    if kind == "yaml":
        return yaml.safe_load(text)
    return json.loads(text)


def expected_document(client, command, args, env):
    """The entry clients.md's table describes for `client`."""
    if client == "codex":
        return {"mcp_servers": {"memprove": {"command": command, "args": args,
                                             "env_vars": CODEX_ENV_VARS, "env": env}}}
    if client == "opencode":
        return {"mcp": {"memprove": {"type": "local", "command": [command] + args,
                                     "environment": env, "enabled": True}}}
    if client == "continue":
        return {"mcpServers": [{"name": "memprove", "type": "stdio", "command": command,
                                "args": args, "env": env}]}
    if client == "goose":
        return {"extensions": {"memprove": {"name": "memprove", "type": "stdio", "cmd": command,
                                            "args": args, "envs": env, "enabled": True,
                                            "timeout": 300}}}
    top = {"claude-code": "mcpServers", "gemini": "mcpServers", "cline": "mcpServers",
           "amp": "amp.mcpServers", "cursor": "mcpServers", "vscode": "servers",
           "windsurf": "mcpServers", "zed": "context_servers"}[client]
    entry = {"type": "stdio"} if client in ("claude-code", "cline", "cursor", "vscode") else {}
    entry.update(command=command, args=args, env=env)
    if client == "cline":
        entry["disabled"] = False
    return {top: {"memprove": entry}}


def documented_problems(client, document):
    """Where `document` strays from what the client's documentation accepts."""
    rules = DOCUMENTED[client]
    entry = document
    for step in rules["path"]:
        entry = entry[step]
    problems = ["%s not documented" % key for key in set(entry) - rules["keys"]]
    problems += ["%s missing" % key for key in rules["required"] - set(entry)]
    command = entry[rules["command"]]
    if rules["args"] is None:            # OpenCode: one list, the command first
        ok = isinstance(command, list) and command and all(isinstance(x, str) for x in command)
    else:
        args = entry.get(rules["args"], [])
        ok = isinstance(command, str) and isinstance(args, list) and \
            all(isinstance(x, str) for x in args)
    if not ok:
        problems.append("command/args are not strings")
    env = entry.get(rules["env"], {})
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in env.items())):
        problems.append("the environment is not a map of strings")
    if "type" in entry and entry["type"] != ("local" if client == "opencode" else "stdio"):
        problems.append("type %r" % entry["type"])
    if client == "continue":
        assert isinstance(document["mcpServers"], list) and len(document["mcpServers"]) == 1
    return problems


def no_surrogate_escapes(client, data):
    """Characters outside the basic plane are written as themselves (or
    \\UXXXXXXXX in TOML), never as a \\ud83d-style pair."""
    text = data.decode("utf-8")
    # An escape is a backslash preceded by an even number of backslashes.
    assert not re.search(r"(?<!\\)(?:\\\\)*\\u[dD][89a-fA-F][0-9a-fA-F]{2}", text), (client, text)


# -- every client, every variant ----------------------------------------------

VARIANTS = [(python, workspace) for python in (False, True) for workspace in (False, True)]


@pytest.mark.parametrize("python, with_workspace", VARIANTS,
                         ids=["plain", "workspace", "python", "python-workspace"])
@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_parses_to_the_documented_entry(pyz, make_env, workspace, tmp_path, client,
                                                     python, with_workspace):
    env = make_env()
    interpreter = interpreter_executable(sys.executable, env) if python else None
    program = os.path.abspath(str(pyz))
    for label, name in NASTY_NAMES.items():
        config_dir = str(tmp_path / ("cfg " + name))
        args = ["--config-dir", config_dir, "--client", client]
        server_args = ["mcp", "serve", "--config-dir", config_dir]
        if python:
            args.append("--python")
        if with_workspace:
            target = make_workspace_dir(tmp_path / ("project " + name))
            args += ["--workspace", str(target)]
            server_args += ["--workspace", str(target)]
        out, err = run_print_config(pyz, args, env, workspace)
        document = parse(client, out)
        command = interpreter if python else program
        if python:
            server_args = [program] + server_args
        server_env = {"MEMPROVE_CONFIG_DIR": config_dir}
        if client in ("cursor", "vscode") and not with_workspace:
            server_env["MEMPROVE_WORKSPACE"] = "${workspaceFolder}"
        assert document == expected_document(client, command, server_args, server_env), (label, out)
        assert documented_problems(client, document) == [], label
        no_surrogate_escapes(client, out)
        if not with_workspace or shown(str(target)) == str(target):
            # (A project path with control characters: test_the_where_line_stays_one_line.)
            check_where(client, err, target if with_workspace else workspace, env["HOME"])


def make_workspace_dir(path):
    path.mkdir(parents=True, exist_ok=True)
    (path / ".memprove").mkdir(exist_ok=True)
    return path


def check_where(client, err, root, home):
    """The standard-error line names the client's file by its real path (no
    `~/`), and the project's own file under the Workspace root when the
    client reads one."""
    words, project_file = WHERE[client]
    assert "~" not in err, (client, err)
    for word in words:
        assert word.replace("~", home, 1) in err, (client, err)
    if project_file:
        assert shown(os.path.join(str(root), *project_file)) in err, (client, err)


def shown(path):
    """A path on the one standard-error line: as it is, or JSON-quoted (ASCII)
    when it holds a control character or a line separator."""
    if any(char < " " or "\x7f" <= char <= "\x9f" or char in "\u2028\u2029" for char in path):
        return json.dumps(path)
    return path


def test_claude_code_is_the_default_byte_for_byte(pyz, make_env, workspace, tmp_path):
    env = make_env()
    interpreter = interpreter_executable(sys.executable, env)
    for name in NASTY_NAMES.values():
        config_dir = str(tmp_path / name)
        for python in (False, True):
            flags = ["--python"] if python else []
            default = run_print_config(pyz, ["--config-dir", config_dir] + flags, env, workspace)
            named = run_print_config(pyz, ["--config-dir", config_dir, "--client", "claude-code"]
                                     + flags, env, workspace)
            assert named == default
            assert default[0] == golden(pyz, config_dir, interpreter if python else None) \
                .encode("utf-8")
            assert default[1] == golden_where(workspace, env["HOME"])


def test_the_default_output_is_the_golden_without_any_option(pyz, make_env, workspace, home):
    """No option at all: the configuration directory is ~/.config/memprove."""
    out, err = run_print_config(pyz, [], make_env(), workspace)
    assert out == golden(pyz, str(home / ".config" / "memprove")).encode("utf-8")
    assert err == golden_where(workspace, home)


# -- what never appears ----------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_no_token_data_dir_or_set_value_appears(pyz, make_env, workspace, tmp_path, client):
    canaries = {
        "MEMPROVE_TOKEN": "canary-token-5e1f",
        "MEMPROVE_TOKEN_FILE": str(tmp_path / "canary-token-file-77aa"),
        "MEMPROVE_DATA_DIR": str(tmp_path / "canary-data-dir-3c0d"),
        "MEMPROVE_TIMEOUT": "41.5",
        "MEMPROVE_AGENT_NAME": "canary-agent-9b2e",
        "MEMPROVE_AGENT_ROLE": "canaryrole",
        "MEMPROVE_PARENT_SESSION": "918273",
        "MEMPROVE_MCP_LOG": str(tmp_path / "canary-log-4d4d"),
        "OPENAI_API_KEY": "canary-openai-1a2b",
        "GEMINI_API_KEY": "canary-gemini-3c4d",
    }
    # The Workspace variables are set to real directories: the standard-error
    # line may name the Workspace they lead to, the entry never.
    places = {"MEMPROVE_WORKSPACE": make_workspace_dir(tmp_path / "canary-ws-6f6f"),
              "CLAUDE_PROJECT_DIR": make_workspace_dir(tmp_path / "canary-claude-8e8e")}
    env = make_env(dict(canaries, **{k: str(v) for k, v in places.items()}))
    config_dir = str(tmp_path / "cfg")
    for flags in ([], ["--python"], ["--workspace", str(tmp_path / "elsewhere")]):
        out, err = run_print_config(pyz, ["--config-dir", config_dir, "--client", client] + flags,
                                    env, workspace)
        text = out.decode("utf-8")
        for name, value in canaries.items():
            for form in (value, json.dumps(value)[1:-1]):
                assert form not in text, (client, name)
                assert form not in err, (client, name)
        for name, value in places.items():
            assert str(value) not in text, (client, name)
        document = parse(client, out)
        assert config_dir in strings_in(document)


def test_gemini_names_the_token_file_only_when_it_is_set(pyz, make_env, workspace, tmp_path):
    config_dir = str(tmp_path / "cfg")
    token_file = str(tmp_path / "secret-token-file-path")
    args = ["--config-dir", config_dir, "--client", "gemini"]
    with_it, _ = run_print_config(pyz, args, make_env({"MEMPROVE_TOKEN_FILE": token_file}),
                                  workspace)
    env = json.loads(with_it)["mcpServers"]["memprove"]["env"]
    assert env == {"MEMPROVE_CONFIG_DIR": config_dir,
                   "MEMPROVE_TOKEN_FILE": "$MEMPROVE_TOKEN_FILE"}
    assert token_file.encode() not in with_it
    without, _ = run_print_config(pyz, args, make_env(), workspace)
    assert json.loads(without)["mcpServers"]["memprove"]["env"] == {
        "MEMPROVE_CONFIG_DIR": config_dir}
    # An empty variable is not set (contract.md §1).
    empty, _ = run_print_config(pyz, args, make_env({"MEMPROVE_TOKEN_FILE": ""}), workspace)
    assert empty == without


def test_only_gemini_names_the_token_file(pyz, make_env, workspace, tmp_path):
    env = make_env({"MEMPROVE_TOKEN_FILE": str(tmp_path / "t")})
    for client in CLIENTS:
        if client in ("gemini", "codex"):         # codex names every variable in env_vars
            continue
        out, _ = run_print_config(pyz, ["--client", client], env, workspace)
        assert b"MEMPROVE_TOKEN" not in out, client


# -- --workspace -------------------------------------------------------------------

def test_a_relative_workspace_is_made_absolute(pyz, make_env, workspace, tmp_path):
    (workspace / "sub dir").mkdir()
    config_dir = str(tmp_path / "cfg")
    for client in CLIENTS:
        out, err = run_print_config(pyz, ["--config-dir", config_dir, "--client", client,
                                          "--workspace", "sub dir"], make_env(), workspace)
        text = json.dumps(parse(client, out), ensure_ascii=False)
        assert json.dumps(str(workspace / "sub dir"))[1:-1] in text, client
        assert "${workspaceFolder}" not in text, client


def test_workspace_equals_form(pyz, make_env, workspace, tmp_path):
    target = make_workspace_dir(tmp_path / "p")
    spaced, _ = run_print_config(pyz, ["--client", "zed", "--workspace", str(target)], make_env(),
                                 workspace)
    joined, _ = run_print_config(pyz, ["--client=zed", "--workspace=%s" % target], make_env(),
                                 workspace)
    assert spaced == joined
    assert json.loads(joined)["context_servers"]["memprove"]["args"][-2:] == ["--workspace",
                                                                             str(target)]


# -- usage -----------------------------------------------------------------------

@pytest.mark.parametrize("args, lists_names", [
    (["mcp", "print-config", "--client", "claude"], True),
    (["mcp", "print-config", "--client", "CODEX"], True),
    (["mcp", "print-config", "--client", "vs code\nsecond line"], True),
    (["mcp", "print-config", "--client=nope"], True),
    (["mcp", "print-config", "--client"], False),
    (["mcp", "print-config", "--client="], False),
    (["mcp", "print-config", "--workspace"], False),
    (["mcp", "print-config", "--workspace="], False),
    (["mcp", "serve", "--client", "codex"], False),
], ids=["unknown", "wrong-case", "newline", "equals-unknown", "no-value", "equals-empty",
        "workspace-no-value", "workspace-empty", "serve-client"])
def test_a_bad_client_or_workspace_is_a_usage_error(pyz, make_env, workspace, args, lists_names):
    done = run_cli(sys.executable, pyz, args, make_env(), workspace)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == b""
    err = done.stderr.decode("utf-8")
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "second line" not in err
    if lists_names:
        for name in CLIENTS:
            assert name in err, (name, err)


def test_help_lists_every_client(pyz, make_env, workspace):
    done = run_cli(sys.executable, pyz, ["--help"], make_env(), workspace)
    assert done.returncode == 0
    usage = done.stdout.decode("utf-8")
    for word in ("--client", "--workspace") + CLIENTS:
        assert word in usage, word


def test_a_path_that_is_not_utf8_is_refused_in_one_line(pyz, make_env, workspace):
    """A byte that is not UTF-8 has no form in JSON, TOML or YAML text: one line
    and a failure status, never a traceback or half an entry."""
    for client in CLIENTS:
        argv = [sys.executable.encode(), str(pyz).encode(), b"mcp", b"print-config",
                b"--config-dir", b"/tmp/not-utf8-\xff", b"--client", client.encode()]
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=make_env(), cwd=str(workspace), timeout=30)
        assert done.returncode == 1, (client, done.stderr)
        assert done.stdout == b""
        err = done.stderr.decode("utf-8")
        assert err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("client", CLIENTS)
def test_a_non_ascii_path_under_an_ascii_locale(pyz, make_env, workspace, tmp_path, client):
    """Python 3.6 under LANG=C reads arguments as ASCII with surrogate-escaped
    bytes (3.7 and later coerce the C locale to UTF-8): the entry must still
    name the UTF-8 path, in every format."""
    python = require_python("3.6")
    config_dir = str(tmp_path / "caf\u00e9 \U0001F680 cfg")
    done = run_cli(python, pyz, ["mcp", "print-config", "--config-dir", config_dir,
                                 "--client", client],
                   make_env({"LANG": "C", "LC_ALL": "C"}), workspace)
    assert done.returncode == 0, done.stderr
    document = parse(client, done.stdout)
    assert json.dumps(config_dir, ensure_ascii=False) in json.dumps(document, ensure_ascii=False)


@pytest.mark.parametrize("name", ["two\nlines", "esc\x1b[31mred", "sep\u2028here", "c1\x85"])
@pytest.mark.parametrize("client", ["claude-code", "gemini", "vscode"])
def test_the_where_line_stays_one_line(pyz, make_env, tmp_path, client, name):
    """A project path holding a line break or another control character (a
    terminal escape) is JSON-quoted on the standard-error line; any other path
    is printed as it is (the default's golden)."""
    project = make_workspace_dir(tmp_path / name)
    out, err = run_print_config(pyz, ["--client", client], make_env(), project)
    parse(client, out)
    assert "\u2028" not in err
    quoted = json.dumps(os.path.join(str(project), *WHERE[client][1]))
    assert shown(os.path.join(str(project), *WHERE[client][1])) == quoted
    assert err.startswith("memprove-mcp: put this entry in %s " % quoted), err


# Any text a path can hold: no NUL (argv cannot carry it), no lone surrogate
# (not UTF-8).  Hypothesis leans towards the edges: controls, quotes,
# backslashes, line separators, astral characters.
PATH_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                    min_size=1, max_size=40)
if HOST_IS_WINDOWS:     # Windows drops a name's trailing spaces and dots: no such name there
    PATH_TEXT = PATH_TEXT.filter(lambda text: text == text.rstrip(" ."))


@pytest.mark.parametrize("client", ["codex", "continue", "goose", "gemini"])
def test_any_path_survives_every_format(pyz, tmp_path_factory, client):
    """Whatever a path holds, the parsed entry gives it back unchanged."""
    home = tmp_path_factory.mktemp("home")
    env = clean_env(home)

    @settings(max_examples=depth(40), deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(PATH_TEXT, PATH_TEXT)
    def check(config_name, workspace_name):
        config_dir = os.path.abspath(os.path.join(str(home), config_name))
        target = os.path.abspath(os.path.join(str(home), "w", workspace_name))
        args = ["--config-dir", config_dir, "--client", client, "--workspace", target]
        if expanded_by(client, config_dir, target):
            refused_in_one_line(run_cli(sys.executable, pyz, ["mcp", "print-config"] + args,
                                        env, home), client, config_dir, target)
            return
        out, _ = run_print_config(pyz, args, env, home)
        document = parse(client, out)
        wanted = {"--config-dir": config_dir, "--workspace": target}
        args = {"codex": lambda d: d["mcp_servers"]["memprove"]["args"],
                "continue": lambda d: d["mcpServers"][0]["args"],
                "goose": lambda d: d["extensions"]["memprove"]["args"],
                "gemini": lambda d: d["mcpServers"]["memprove"]["args"]}[client](document)
        for option, value in wanted.items():
            assert args[args.index(option) + 1] == value
        no_surrogate_escapes(client, out)

    check()


def test_every_client_under_every_python(pyz, server_python, make_env, workspace, tmp_path):
    """The hand-written writers run on every interpreter the server supports."""
    env = make_env()
    name = "".join(NASTY_NAMES.values())
    config_dir = str(tmp_path / name)
    for client in CLIENTS:
        done = run_cli(server_python, pyz, ["mcp", "print-config", "--config-dir", config_dir,
                                            "--client", client, "--workspace", str(workspace)],
                       env, workspace)
        assert done.returncode == 0, (client, done.stderr)
        document = parse(client, done.stdout)
        expected = expected_document(client, os.path.abspath(str(pyz)),
                                     ["mcp", "serve", "--config-dir", config_dir,
                                      "--workspace", str(workspace)],
                                     {"MEMPROVE_CONFIG_DIR": config_dir})
        assert document == expected, client


# -- values a client would expand (clients.md, issue 18) ------------------------------
# Claude Code expands `${HOME}` in a path, so a server printed for one directory would be
# started with another.  Each client's own expansion syntax is refused for it; the other
# clients take the same path as it is.

CLIENT_LABELS = {"claude-code": "Claude Code", "codex": "Codex CLI", "gemini": "Gemini CLI",
                 "opencode": "OpenCode", "cline": "Cline", "continue": "Continue", "amp": "Amp",
                 "cursor": "Cursor", "vscode": "VS Code", "windsurf": "Windsurf", "zed": "Zed",
                 "goose": "Goose"}
EXPANDED_BY = {"claude-code": ("${",), "cursor": ("${",), "vscode": ("${",), "gemini": ("$",),
               "opencode": ("{env:", "{file:")}
EXPANDING_NAMES = {"dollar-brace": "dir ${HOME}", "dollar": "dir $HOME",
                   "env": "dir {env:HOME}", "file": "dir {file:~/.secret}"}


def expanded_by(client, *values):
    """The character sequences of `values` that `client` would expand."""
    return sorted(set(chars for chars in EXPANDED_BY.get(client, ()) for value in values
                      if chars in value))


def refused_in_one_line(done, client, *values):
    """Exit 1, nothing on standard output, one line on standard error naming the path (one
    of the values that hold what the client expands, shown as the where-line shows paths)
    and its characters."""
    assert (done.returncode, done.stdout) == (1, b""), (client, done.returncode, done.stdout[:200])
    err = one_stderr_line(done)
    assert "Traceback" not in err, err
    named = [value for value in values if expanded_by(client, value) and shown(value) in err
             and all(chars in err for chars in expanded_by(client, value))]
    assert named, (client, values, err)
    # The client by its label, as every refusal names it (issue 39: once the record's repr).
    assert ", which %s would expand in its configuration; use a path without it." % (
        CLIENT_LABELS[client]) in err, err


def strings_in(document):
    if isinstance(document, dict):
        return [text for value in document.values() for text in strings_in(value)]
    if isinstance(document, list):
        return [text for value in document for text in strings_in(value)]
    return [document] if isinstance(document, str) else []


def expanding_place(where, tmp_path, label, name, pyz, env):
    """(print-config's arguments, interpreter, .pyz, extra environment, the value printed)
    with `name` in the path `where` names."""
    place = tmp_path / where / label / name
    if where == "config-dir":
        return ["--config-dir", str(place)], sys.executable, pyz, {}, str(place)
    if where == "MEMPROVE_CONFIG_DIR":
        return [], sys.executable, pyz, {"MEMPROVE_CONFIG_DIR": str(place)}, str(place)
    place.mkdir(parents=True)
    if where == "workspace":
        return ["--workspace", str(place)], sys.executable, pyz, {}, str(place)
    if where == "pyz":
        program = place / "memprove_mcp.pyz"
        shutil.copyfile(str(pyz), str(program))
        return [], sys.executable, program, {}, str(program)
    link = place / "python3"
    link.symlink_to(sys.executable)
    return ["--python"], str(link), pyz, {}, interpreter_executable(str(link), env)


# (A link to the interpreter in "python": on Windows links need a privilege.)
EXPANDING_PLACES = ("config-dir", "MEMPROVE_CONFIG_DIR", "workspace", "pyz") + \
    (() if HOST_IS_WINDOWS else ("python",))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_value_the_client_would_expand_is_refused(pyz, make_env, workspace, tmp_path, client):
    """Every value printed (the command, the .pyz, --config-dir or MEMPROVE_CONFIG_DIR,
    --workspace) holding what `client` expands is refused; any other is printed and parses
    back exactly."""
    for where in EXPANDING_PLACES:
        for label, name in EXPANDING_NAMES.items():
            args, python, program, extra, value = expanding_place(where, tmp_path, label, name,
                                                                  pyz, make_env())
            assert name.split("/")[0] in value
            done = run_cli(python, program, ["mcp", "print-config", "--client", client] + args,
                           make_env(extra), workspace)
            if expanded_by(client, value):
                refused_in_one_line(done, client, value)
            else:
                assert done.returncode == 0, (where, label, done.stderr)
                assert value in strings_in(parse(client, done.stdout)), (where, label)


def test_the_default_client_refuses_a_dollar_brace(pyz, make_env, workspace, tmp_path):
    """No --client is Claude Code's entry: `${` is refused there too."""
    value = str(tmp_path / "cfg ${HOME}")
    done = run_cli(sys.executable, pyz, ["mcp", "print-config", "--config-dir", value],
                   make_env(), workspace)
    refused_in_one_line(done, "claude-code", value)


# ---------------------------------------------------------------------------
# Under Windows: the where-lines name each client's real Windows files
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
    done = windows_print_config(win, plain_pyz, ["--client", client],
                        make_env({"MEMPROVE_CONFIG_DIR": win.path(tmp_path / "config")}),
                        workspace)
    line = done.stderr.decode("utf-8")
    assert line.startswith("memprove-mcp: ") and line.rstrip("\r\n").count("\n") == 0, line
    root = win.path(workspace)
    for pattern in WINDOWS_FILES[client]:
        expected = pattern.format(root=root, profile=win.profile, appdata=win.appdata)
        assert expected in line, (expected, line)
    assert not powershell_problems(line), (line, powershell_problems(line))


# -- the records themselves ----------------------------------------------------------

def module_tree():
    import ast
    from pathlib import Path
    source = Path(__file__).resolve().parents[1] / "memprove_mcp.py"
    return ast.parse(source.read_text(encoding="utf-8"))


def test_everything_of_a_client_is_its_record():
    """Issue 34: "where is X for Codex" has one answer, CLIENTS["codex"], so a new
    client is one record.  No other table of the module is keyed by client names
    (as KIT_SERVERS, KIT_ENABLE, KIT_UPDATE and KIT_FINDERS were) or lists rows
    that open with a client's label (as KIT_INSTALL and KIT_REMOVE did)."""
    import ast
    names = set(CLIENTS) | {"claude-desktop"}
    labels = {"Claude Code", "Codex CLI", "Gemini CLI", "Claude Desktop", "OpenCode", "Cline",
              "Continue", "Amp", "Cursor", "VS Code", "Windsurf", "Zed", "Goose"}

    def strings(nodes):
        return [node.value for node in nodes
                if isinstance(node, ast.Constant) and isinstance(node.value, str)]

    tables = []
    for node in ast.walk(module_tree()):
        if isinstance(node, ast.Dict) and len(set(strings(node.keys)) & names) >= 2:
            tables.append(("keyed by clients", node.lineno))
        if isinstance(node, (ast.Tuple, ast.List)):
            firsts = strings(element.elts[0] for element in node.elts
                             if isinstance(element, ast.Tuple) and element.elts)
            if len(set(firsts) & labels) >= 2:
                tables.append(("rows of clients", node.lineno))
    clients_table = [node.value.lineno for node in ast.walk(module_tree())
                     if isinstance(node, ast.Assign) and
                     [getattr(target, "id", None) for target in node.targets] == ["CLIENTS"]]
    assert tables == [("keyed by clients", clients_table[0])]


def test_the_records_name_every_client_of_clients_md_and_the_kit():
    """print-config's and doctor's clients are the records with an entry, in
    clients.md's order; Claude Desktop is a record of the kit alone."""
    import subprocess
    listing = subprocess.run(
        [sys.executable, "-c", "import memprove_mcp as m; print(' '.join(m.CLIENT_NAMES)); "
         "print(' '.join(n for n, c in m.CLIENTS.items() if c.install))"],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        stdout=subprocess.PIPE, check=True, universal_newlines=True).stdout.split("\n")
    assert listing[0].split() == list(CLIENTS)
    assert listing[1].split() == ["claude-code", "codex", "gemini", "claude-desktop"]
