"""The kit of `mcp plugin DIR` (spec/plugin.md) in the real clients, offline, each with a
fresh HOME: Claude Code, Codex CLI and Gemini CLI install it with exactly the commands
the command printed, list `memprove` connected (Codex: installed and enabled), run one
headless turn against the scripted model endpoint (model_endpoint.py) that calls
`context`, `tasks`, `begin` and `pack`, and the model gets the server's results; each
client has exactly one memprove server.  Then the kit is written again from a .pyz with
other bytes (the module with another VERSION), the printed update commands run, and the
client starts the new .pyz.  `mcpb validate`, `mcpb info` and `mcpb unpack`
(@anthropic-ai/mcpb, pinned) accept the bundle for Claude Desktop.

The interpreter a kit names is the one that ran `mcp plugin` (sys.executable).  Here that
is `KitPython`: a bash script that starts this Python under the script's own name
(`exec -a`, so sys.executable, and with it every entry of the kit, names the script) and
puts the tee (mcp_tee.py) in front of `mcp serve`.  The kit's files stay as the command
wrote them, and every server a client starts from them is recorded and checked against
protocol.md, with the .pyz it ran.

Codex and Gemini run in the agent tier's namespace with only loopback, beside the daemon
and the endpoint (interop/agents.py, its fixtures in interop/conftest.py); Claude Code in
the loopback-only namespace of the `claude` fixture, the endpoint's and daemon's ports
bridged into it.
"""

import hashlib
import json
import ntpath
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harness import REPO, SAFETY_TIMEOUT, built_once, clean_env
from interop.model_endpoint import DIALECTS, Endpoint, Script, ToolCall, Turn
from interop.support import TEE, check_connection, connections, transcripts
from interop.agents import EXPECTED_AGENT, GEMINI_MODEL, describe, gemini_agent, result_object

KIT = "memprove"
ARCHIVE = "memprove_mcp.pyz"
# `mcp plugin`'s standard output: a heading per client, its commands indented by two spaces.
INSTALL_HEADINGS = {"Claude Code:": "claude", "Codex CLI:": "codex", "Gemini CLI:": "gemini",
                    "Claude Desktop:": None}
UPDATE_HEADING = "To update after writing the kit again:"
IN_PLACE = re.compile(r"\bin place\b")
# Gemini CLI asks on standard input even with --consent: `extensions install` whether to
# trust the kit's folder, `extensions update` whether to go on.  A user answers y; with no
# answer (end of input) it exits 0 having done nothing.
ANSWERS = {"gemini": b"y\n"}
TITLE = "Ship the plugin kit \u2014 caf\u00e9 edition"
NEXT_VERSION = "0.1.1"       # the VERSION of the .pyz the kit is written again from


# ---------------------------------------------------------------------------
# The .pyz with other bytes, the interpreter the kit names, the printed commands
# ---------------------------------------------------------------------------

@pytest.fixture
def tmp_path(request, private_place, tmp_path_factory):
    """Each test's folder, private: a kit is refused where another user could change it, as
    under /tmp, where pytest's own folders are (contract.md §6 rule 25).  The Windows test
    keeps one under /tmp, the one folder Wine 10's chroot sees; a Windows Python judges no
    POSIX modes."""
    if "windows" in request.node.name:
        return tmp_path_factory.mktemp("windows")
    return private_place


@pytest.fixture(scope="session")
def next_pyz(tmp_path_factory):
    """The .pyz of the module with VERSION = NEXT_VERSION (other bytes, another version
    in serverInfo), built once per run."""
    def build(folder):
        source = (REPO / "memprove_mcp.py").read_text(encoding="utf-8")
        changed = re.sub(r'^VERSION = "[^"]*"$', 'VERSION = "%s"' % NEXT_VERSION, source,
                         count=1, flags=re.M)
        assert changed != source, "no VERSION line in memprove_mcp.py"
        (folder / "memprove_mcp.py").write_text(changed, encoding="utf-8")
        out = folder / ARCHIVE
        done = subprocess.run([sys.executable, str(REPO / "build_zipapp.py"), "--source",
                               str(folder / "memprove_mcp.py"), "--output", str(out),
                               "--no-bytecode"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return out
    return built_once(tmp_path_factory, "pyz-next", build)


class KitPython:
    """The interpreter the kit names (see the module's docstring): `<folder>/python3`."""

    def __init__(self, folder, wire):
        folder.mkdir()
        self.path = folder / "python3"
        self.wire = wire
        real = shlex.quote(sys.executable)
        self.path.write_text(
            '#!/bin/bash\n'
            'if [ "$2" = mcp ] && [ "$3" = serve ]; then\n'
            '  exec %s %s %s -- %s "$@"\n'
            'fi\n'
            'exec -a "$0" %s "$@"\n' % (real, shlex.quote(str(TEE)), shlex.quote(str(wire)),
                                         real, real))
        self.path.chmod(0o755)

    def write_kit(self, pyz, folder, config_dir, home):
        """`<python> <pyz> mcp plugin <folder> --config-dir <config_dir>` as a user runs it:
        its standard output, as text."""
        done = subprocess.run([str(self.path), str(pyz), "mcp", "plugin", str(folder),
                               "--config-dir", str(config_dir)], cwd=str(home),
                              env=clean_env(home), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=SAFETY_TIMEOUT)
        assert done.returncode == 0, (done.returncode, done.stderr)
        if (Path(str(config_dir)) / "token").is_file():
            assert done.stderr == b"", done.stderr
        else:                            # one line says where the token belongs
            assert done.stderr.count(b"\n") == 1 and b"token does not exist" in done.stderr, \
                done.stderr
        return done.stdout.decode("utf-8")


@pytest.fixture
def kit_python(tmp_path):
    wire = tmp_path / "kit-wire"
    wire.mkdir()
    return KitPython(tmp_path / "kit-python", wire)


def printed_blocks(stdout, desktop=False):
    """{heading: [command line, ...]} of `mcp plugin`'s standard output, after checking
    its shape: every heading once (Claude Desktop's only where it runs: `desktop`), each
    command indented by two spaces, and a line for each client that reads the folder in place
    (Claude Code's and Codex's kit notes)."""
    blocks, current, other = {}, None, []
    for line in stdout.splitlines():
        if line in INSTALL_HEADINGS or line == UPDATE_HEADING:
            assert line not in blocks, "%r twice:\n%s" % (line, stdout)
            current = blocks[line] = []
        elif line.startswith("  ") and current is not None:
            current.append(line[2:])
        else:
            current = None
            other.append(line)
    expected = set(INSTALL_HEADINGS) | {UPDATE_HEADING}
    assert set(blocks) == (expected if desktop else expected - {"Claude Desktop:"}), stdout
    assert all(blocks.values()), stdout
    in_place = [line.split(" reads it in place")[0] for line in other if IN_PLACE.search(line)]
    assert in_place == ["Claude Code", "Codex"], stdout
    return blocks


def commands_for(blocks, program):
    """The printed install commands and update commands of `program`, as argv lists
    (POSIX shell words: this is Linux)."""
    heading = next(h for h, name in INSTALL_HEADINGS.items() if name == program)
    install = [shlex.split(line) for line in blocks[heading]]
    update = [shlex.split(line) for line in blocks[UPDATE_HEADING]]
    assert install and all(argv[0] == program for argv in install), blocks[heading]
    return install, [argv for argv in update if argv[0] == program]


def doctor_client(pyz, client, home, project, config_dir, extra=None):
    """`mcp doctor --client CLIENT --json`'s `client` check, run from `pyz` by the user
    whose HOME the client installed the kit in (its daemon check is not looked at)."""
    done = subprocess.run([sys.executable, str(pyz), "mcp", "doctor", "--client", client,
                           "--config-dir", str(config_dir), "--json"], cwd=str(project),
                          env=clean_env(home, extra), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    checks = dict((check["name"], check) for check in json.loads(done.stdout)["checks"])
    return checks["client"]


def found_the_kit(check, version):
    """doctor's client check on a kit: ok, naming the version of the archive that runs."""
    assert check["status"] == "ok" and "(from a plugin kit)" in check["detail"] and \
        "runs this server, version %s" % archive_part(version) in check["detail"], check


def kit_version(kit):
    """The version the kit gives its plugin (the marketplace's entry; every manifest agrees)."""
    marketplace = json.loads((kit / ".claude-plugin" / "marketplace.json").read_text("utf-8"))
    return marketplace["plugins"][0]["version"]


def archive_part(version):
    """A kit's version less the digest of its other files: the archive's own version."""
    return version.rsplit(".", 1)[0]


def file_sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------------------
# What the servers did, and what the model got
# ---------------------------------------------------------------------------

def served_by(wire, pyz_path, version, pyz_bytes_from, secrets=()):
    """Every connection the tee recorded in `wire` since the last call (they are moved
    aside), checked against protocol.md: each ran `<pyz_path> mcp serve ...`, a file
    holding the bytes of `pyz_bytes_from`, and gave `version` as its serverInfo version
    (pyz_path None: wherever the .pyz is).  Returns [(connection, served requests)]."""
    conns = connections(wire)
    assert conns, "no server was started from the kit"
    checked = []
    for conn in conns:
        argv = conn.event("start")["argv"]
        assert argv[2:4] == ["mcp", "serve"], (argv, conn.transcript())
        assert pyz_path is None or argv[1] == str(pyz_path), (argv, conn.transcript())
        assert file_sha(argv[1]) == file_sha(pyz_bytes_from), "%s is not the .pyz it should " \
            "be" % argv[1]
        checked.append((conn, check_connection(conn, secrets=secrets, server_version=version)))
    seen = wire / ("seen-%d" % len(list(wire.glob("seen-*"))))
    seen.mkdir()
    for path in wire.glob("conn-*"):
        path.rename(seen / path.name)
    return checked


def tool_calls(checked):
    return [s["message"]["params"]["name"] for _, served in checked for s in served
            if s["message"]["method"] == "tools/call"]


def the_turn_was_served(checked):
    """The turn's four calls reached a server of the kit, and one server only."""
    assert sorted(tool_calls(checked)) == ["begin", "context", "pack", "tasks"], transcripts(
        [conn for conn, _ in checked])
    assert len(checked) == 1, "more than one memprove server: %s" % transcripts(
        [conn for conn, _ in checked])


def turn_script(marker, names):
    """The model's turn: `context`, `tasks`, `begin` a Task, `pack` it, then done;
    names maps each tool to its name as the client offers it."""
    steps = [Turn(ToolCall(names["context"], {})), Turn(ToolCall(names["tasks"], {})),
             Turn(ToolCall(names["begin"], {"new_task": TITLE, "agent_role": "implementer"})),
             Turn(ToolCall(names["pack"], {"budget": 2000})),
             Turn("Done: the Task is begun and packed.")]
    return Script(list(names.get("before", [])) + steps, marker=marker)


def last_conversation(endpoint):
    """The conversation of the last scripted request: it carries every tool result."""
    steps = len(endpoint.script.steps)
    scripted = [exchange for exchange in endpoint.recorder.exchanges
                if exchange.step == steps - 1]
    assert scripted, "the client never came back with every tool result\n%s" % (
        endpoint.recorder.summary())
    dialect, body = endpoint.dialect, scripted[-1].json
    if isinstance(dialect, DIALECTS["gemini"]):         # it also takes `stream`
        return dialect.conversation(body, True)
    return dialect.conversation(body)


def check_model_got(endpoint, names, root, config_dir, found_by, agent_name, dump):
    """The results of the turn as the model got them: the Workspace (`root`, as the server
    names it) and how it was found, the agent, the token from the configuration directory,
    no Task before `begin`, and the Pack of the Task it began.  Every request the endpoint
    got is written to `dump` first, for a failure's reader."""
    endpoint.recorder.dump(dump)
    failure = "\nendpoint (in full: %s):\n%s" % (dump, endpoint.recorder.summary())
    assert endpoint.recorder.errors == [], failure
    assert endpoint.script.finished, "the script was not played to its end" + failure
    conversation = last_conversation(endpoint)
    got = {tool: conversation.result_of(name) for tool, name in names.items()
           if tool != "before"}
    assert all(got.values()), ([r.name for r in conversation.tool_results], failure)
    for result in got.values():
        assert result.is_error in (None, False), result
        assert not re.match(r"[a-z_]+: ", result.text), "a Problem: %s" % result.text[:500]
    context = result_object(got["context"], "workspace")
    assert (context["workspace"]["root"], context["workspace"]["found_by"]) == (
        root, found_by), context["workspace"]
    assert context["agent"]["name"] == agent_name, context["agent"]
    assert context["config"]["config_dir"] == str(config_dir), context["config"]
    assert context["config"]["token_from"] == "config", context["config"]
    tasks = result_object(got["tasks"], "tasks")
    assert tasks["tasks"] == [] and tasks["workspace"] == root, tasks
    begun = result_object(got["begin"], "session")
    assert begun["task"]["number"] == 1 and begun["task"]["title"] == TITLE, begun
    pack = got["pack"].text
    assert "Resuming Task 1: %s at " % TITLE in pack, pack[:2000]


def token_nowhere(token, home, *keep):
    """The token is in no file under `home` but its own (`keep`)."""
    for path in sorted(Path(home).rglob("*")):
        if path.is_file() and not path.is_symlink() and path not in keep:
            assert token.encode() not in path.read_bytes(), "the token is in %s" % path


# ---------------------------------------------------------------------------
# Claude Code
# ---------------------------------------------------------------------------

CLAUDE_SERVER = "plugin:memprove:memprove"
CLAUDE_PREFIX = "mcp__plugin_memprove_memprove__"
CLAUDE_LISTED = re.compile(r"^(\S+): (.*) - (\S) (\w[\w ]*)$", re.M)


def claude_listed(claude):
    """{name: (command line, status)} of `claude mcp list` (it exits 0 whatever the status)."""
    code, out, err = claude.run("mcp", "list")
    assert code == 0, (code, out, err)
    return {match.group(1): (match.group(2), match.group(4))
            for match in CLAUDE_LISTED.finditer(out)}, out


def run_printed(run, argvs, answer=b""):
    """Run each printed command (argv) with `run`; each must exit 0."""
    for argv in argvs:
        code, out, err = run(argv, answer)
        assert code == 0, "`%s` exited %d\n%s\n%s" % (" ".join(argv), code, out, err)


def claude_turn(claude, daemon, marker):
    """A headless `claude -p` turn against the scripted Anthropic endpoint: the model loads
    the tools with ToolSearch (Claude Code defers MCP tools), then calls `context`, `tasks`,
    `begin` and `pack`.  Checks that it ran, with exactly one memprove server, connected,
    and what the model got (turn_script, check_model_got); returns the endpoint."""
    names = {tool: CLAUDE_PREFIX + tool for tool in ("context", "tasks", "begin", "pack")}
    names["before"] = [Turn(ToolCall("ToolSearch", {"query": "select:" + ",".join(
        names[tool] for tool in ("context", "tasks", "begin", "pack"))}))]
    script = turn_script(marker, names)
    with Endpoint("anthropic", script) as endpoint, \
            claude.reaching(urlsplit(endpoint.url).port, urlsplit(daemon.url).port) as via:
        code, out, err = claude.run(
            "-p", "%s: begin the kit work with memprove." % marker, "--output-format",
            "stream-json", "--verbose", "--allowedTools", CLAUDE_PREFIX + "*", via=via,
            timeout=600, env={"ANTHROPIC_BASE_URL": endpoint.url,
                              "ANTHROPIC_API_KEY": "sk-ant-dummy-kit"})
    story = "claude exit %d\nstderr:\n%s\nstdout:\n%s\nendpoint:\n%s" % (
        code, err[-3000:], out[-3000:], endpoint.recorder.summary())
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert code == 0 and events and events[-1].get("is_error") is False, story
    # The init event: the kit's session-start hook reports itself before it (stream-json).
    init = next(event for event in events if event.get("subtype") == "init")
    servers = [(server["name"], server["status"]) for server in init.get("mcp_servers", [])
               if KIT in server["name"]]
    assert servers == [(CLAUDE_SERVER, "connected")], servers
    names.pop("before")
    return endpoint, names


def claude_installed_version(claude):
    """The version Claude Code recorded for the installed plugin (what `claude plugin
    install` and `update` write; Claude Code itself reads the kit in place)."""
    installed = json.loads((claude.home / ".claude" / "plugins" / "installed_plugins.json")
                           .read_text("utf-8"))
    entries = installed["plugins"]["memprove@memprove"]
    assert len(entries) == 1, entries
    return entries[0]["version"]


def test_claude_code_installs_the_kit(claude, pyz, next_pyz, kit_python, daemon, config,
                                      server_version, tmp_path):
    kit = tmp_path / "kit"
    blocks = printed_blocks(kit_python.write_kit(pyz, kit, claude.config_dir, claude.home))
    install, update = commands_for(blocks, "claude")

    def run(argv, answer):
        return claude.run(*argv[1:], timeout=300)

    for folder in (kit, kit / KIT):                     # the marketplace, then the plugin
        code, out, err = claude.run("plugin", "validate", str(folder))
        assert code == 0 and "Validation passed" in out, (code, out, err)
    run_printed(run, install)
    kit_pyz = kit / KIT / ARCHIVE                       # Claude Code reads the kit in place
    listed, out = claude_listed(claude)
    assert [name for name in listed if KIT in name] == [CLAUDE_SERVER], out
    command, status = listed[CLAUDE_SERVER]
    assert status == "Connected", out
    assert command == " ".join([str(kit_python.path), str(kit_pyz), "mcp", "serve",
                                "--config-dir", str(claude.config_dir)]), out
    served_by(kit_python.wire, kit_pyz, server_version, pyz, [config.token])
    found_the_kit(doctor_client(pyz, "claude-code", claude.home, claude.project_dir,
                                claude.config_dir), kit_version(kit))
    # Disabled, Claude Code lists no memprove server and doctor says so; its fix, run as
    # printed, enables the plugin again.
    code, out, err = claude.run("plugin", "disable", "memprove@memprove")
    assert code == 0, (code, out, err)
    listed, out = claude_listed(claude)
    assert [name for name in listed if KIT in name] == [], out
    disabled = doctor_client(pyz, "claude-code", claude.home, claude.project_dir,
                             claude.config_dir)
    assert disabled["status"] == "warn" and " is disabled in " in disabled["detail"], disabled
    run_printed(run, [disabled["fix"].split(" ")])
    listed, out = claude_listed(claude)
    assert [name for name in listed if KIT in name] == [CLAUDE_SERVER], out
    found_the_kit(doctor_client(pyz, "claude-code", claude.home, claude.project_dir,
                                claude.config_dir), kit_version(kit))
    served_by(kit_python.wire, kit_pyz, server_version, pyz, [config.token])

    endpoint, names = claude_turn(claude, daemon, "MEMPROVE-KIT-CLAUDE")
    # Claude Code gives a plugin's server the session's folder as CLAUDE_PROJECT_DIR.
    check_model_got(endpoint, names, str(claude.project_dir.resolve()), str(claude.config_dir),
                    "CLAUDE_PROJECT_DIR", "claude-code", tmp_path / "endpoint.jsonl")
    the_turn_was_served(served_by(kit_python.wire, kit_pyz, server_version, pyz,
                                  [config.token]))

    # Written again from other bytes: the update commands, then the new .pyz runs.
    installed = kit_version(kit)
    assert claude_installed_version(claude) == installed
    blocks = printed_blocks(kit_python.write_kit(next_pyz, kit, claude.config_dir, claude.home))
    install_again, update = commands_for(blocks, "claude")
    assert install_again == install and update, blocks
    assert kit_version(kit) != installed
    run_printed(run, update)
    assert claude_installed_version(claude) == kit_version(kit)
    listed, out = claude_listed(claude)
    assert [name for name in listed if KIT in name] == [CLAUDE_SERVER], out
    assert listed[CLAUDE_SERVER][1] == "Connected", out
    served_by(kit_python.wire, kit_pyz, NEXT_VERSION, next_pyz, [config.token])
    # Doctor from the older .pyz sees the kit's newer one, and says how to update.
    stale = doctor_client(pyz, "claude-code", claude.home, claude.project_dir, claude.config_dir)
    assert stale["status"] == "warn" and archive_part(kit_version(kit)) in stale["detail"], stale
    assert stale["fix"].endswith("claude plugin update memprove@memprove"), stale
    token_nowhere(config.token, claude.home, claude.config_dir / "token")


def powershell_words(line):
    """The words of a printed PowerShell command: bare words, or '...' with '' for '."""
    words = re.findall(r"'((?:[^']|'')*)'|(\S+)", line)
    return [quoted.replace("''", "'") if quoted or not bare else bare for quoted, bare in words]


def windows_kit(claude, windows_pyz, kit):
    """`mcp plugin kit` run by Windows Python under Wine 10, as claude.exe's user would: the
    printed blocks of PowerShell commands (Claude Desktop's among them)."""
    wine = claude.wine
    done = subprocess.run([str(wine.python), str(windows_pyz), "mcp", "plugin",
                           wine.windows(kit)], cwd=str(claude.project_dir), env=claude.env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert done.returncode == 0, done.stderr
    return printed_blocks(done.stdout.decode("utf-8"), desktop=True)


def test_windows_claude_code_installs_the_kit(claude_windows, windows_pyz, daemon, config,
                                              tmp_path):
    """claude.exe under Wine 10 with a kit written by Windows Python (tests/wine10.sh):
    the printed PowerShell commands install it, `claude mcp list` shows memprove
    connected, and one headless turn gets the server's results."""
    claude = claude_windows
    wine = claude.wine
    kit = tmp_path / "kit"
    blocks = windows_kit(claude, windows_pyz, kit)
    assert [powershell_words(line) for line in blocks["Claude Desktop:"]] == [
        ["Invoke-Item", "-LiteralPath", wine.windows(kit / (KIT + ".mcpb"))]], blocks
    install = [powershell_words(line) for line in blocks["Claude Code:"]]
    assert install and all(argv[0] == "claude" for argv in install), blocks
    for argv in install:
        code, out, err = claude.run(*argv[1:], timeout=300)
        assert code == 0, "`%s` exited %d\n%s\n%s" % (" ".join(argv), code, out, err)
    config_dir = ntpath.join(wine.appdata, "memprove")          # print-config's default there
    listed, out = claude_listed(claude)
    assert [name for name in listed if KIT in name] == [CLAUDE_SERVER], out
    command, status = listed[CLAUDE_SERVER]
    assert status == "Connected", out
    words = command.split(" ")
    assert words[0] == wine.executable and words[2:] == [
        "mcp", "serve", "--config-dir", config_dir], out
    # Claude Code for Windows substitutes ${CLAUDE_PLUGIN_ROOT} with forward slashes.
    assert ntpath.normcase(words[1]) == ntpath.normcase(
        wine.windows(kit / KIT / ARCHIVE)), out

    endpoint, names = claude_turn(claude, daemon, "MEMPROVE-KIT-WINDOWS")
    check_model_got(endpoint, names, wine.windows(claude.project_dir), config_dir,
                    "CLAUDE_PROJECT_DIR", "claude-code", tmp_path / "endpoint.jsonl")
    for place in wine.user_state():
        if place.is_dir():
            token_nowhere(config.token, place, claude.config_dir / "token")
        elif place.is_file():
            assert config.token.encode() not in place.read_bytes(), place


# ---------------------------------------------------------------------------
# Codex CLI
# ---------------------------------------------------------------------------

def codex_exec(agent, endpoint, prompt):
    provider = ('model_providers.scripted={name="scripted", base_url="%s/v1", '
                'wire_api="responses", env_key="SCRIPTED_API_KEY"}' % endpoint.url)
    return agent.run("codex", "exec", "--dangerously-bypass-approvals-and-sandbox",
                     "--skip-git-repo-check", "-c", 'model_provider="scripted"', "-c", provider,
                     "-m", "scripted-model", prompt, env={"SCRIPTED_API_KEY": "x"})


def agent_runner(agent):
    def run(argv, answer):
        return agent.run(*argv, stdin=answer)
    return run


def codex_plugin_list(agent):
    code, out, err = agent.run("codex", "plugin", "list", "--json")
    assert code == 0, describe(code, out, err)
    return [entry for entry in json.loads(out)["installed"] if entry["name"] == KIT]


CODEX_NAMES = {tool: "mcp__memprove." + tool for tool in ("context", "tasks", "begin", "pack")}


def test_codex_installs_the_kit(make_agent, endpoint_in, ns_daemon, pyz, next_pyz, kit_python,
                                config, server_version, tmp_path):
    agent = make_agent("codex")
    kit = tmp_path / "kit"
    blocks = printed_blocks(kit_python.write_kit(pyz, kit, agent.config_dir, agent.home))
    install, update = commands_for(blocks, "codex")
    run_printed(agent_runner(agent), install)
    installed = codex_plugin_list(agent)
    assert len(installed) == 1, installed
    version = kit_version(kit)
    assert (installed[0]["installed"], installed[0]["enabled"], installed[0]["version"]) == (
        True, True, version), installed
    codex_home = {"CODEX_HOME": agent.env["CODEX_HOME"]} if "CODEX_HOME" in agent.env else None
    found_the_kit(doctor_client(pyz, "codex", agent.home, agent.project, agent.config_dir,
                                codex_home), version)
    # Disabled by hand (Codex has no disable command), Codex lists the plugin as not enabled
    # and doctor says so; its fix, run as printed, enables it again.
    config_toml = Path(agent.env.get("CODEX_HOME") or agent.home / ".codex") / "config.toml"
    text = config_toml.read_text()
    assert text.count("enabled = true") == 1, text
    config_toml.write_text(text.replace("enabled = true", "enabled = false"))
    assert [entry["enabled"] for entry in codex_plugin_list(agent)] == [False]
    disabled = doctor_client(pyz, "codex", agent.home, agent.project, agent.config_dir,
                             codex_home)
    assert disabled["status"] == "warn" and " is disabled in " in disabled["detail"], disabled
    run_printed(agent_runner(agent), [disabled["fix"].split(" ")])
    assert [entry["enabled"] for entry in codex_plugin_list(agent)] == [True]
    found_the_kit(doctor_client(pyz, "codex", agent.home, agent.project, agent.config_dir,
                                codex_home), version)

    script = turn_script("MEMPROVE-KIT-CODEX", CODEX_NAMES)
    endpoint = endpoint_in("openai-responses", script)
    code, out, err = codex_exec(agent, endpoint, "MEMPROVE-KIT-CODEX: begin the kit work.")
    assert code == 0, describe(code, out, err, endpoint)
    check_model_got(endpoint, CODEX_NAMES, str(agent.project.resolve()), str(agent.config_dir),
                    "working directory", EXPECTED_AGENT["codex"], tmp_path / "endpoint.jsonl")
    the_turn_was_served(served_by(kit_python.wire, None, server_version, pyz, [config.token]))

    blocks = printed_blocks(kit_python.write_kit(next_pyz, kit, agent.config_dir, agent.home))
    install_again, update = commands_for(blocks, "codex")
    assert install_again == install and update, blocks
    run_printed(agent_runner(agent), update)
    version = kit_version(kit)
    installed = codex_plugin_list(agent)
    assert [(e["installed"], e["enabled"], e["version"]) for e in installed] == [
        (True, True, version)], installed
    names = {"context": CODEX_NAMES["context"]}
    script = Script([Turn(ToolCall(names["context"], {})), Turn("Done.")],
                    marker="MEMPROVE-KIT-CODEX-2")
    endpoint = endpoint_in("openai-responses", script)
    code, out, err = codex_exec(agent, endpoint, "MEMPROVE-KIT-CODEX-2: where am I?")
    assert code == 0, describe(code, out, err, endpoint)
    assert endpoint.script.finished, endpoint.recorder.summary()
    checked = served_by(kit_python.wire, None, NEXT_VERSION, next_pyz, [config.token])
    assert tool_calls(checked) == ["context"]
    token_nowhere(config.token, agent.home, agent.config_dir / "token")


# ---------------------------------------------------------------------------
# Gemini CLI
# ---------------------------------------------------------------------------

GEMINI_NAMES = {tool: "mcp_memprove_" + tool for tool in ("context", "tasks", "begin", "pack")}
GEMINI_LISTED = re.compile(r"^(\S) (\S+) \(from (\S+)\): (.*) \((\w+)\) - (\w+)$", re.M)


def gemini_listed(agent):
    code, out, err = agent.run("gemini", "mcp", "list")
    assert code == 0, describe(code, out, err)
    return [match.groups() for match in GEMINI_LISTED.finditer(out + err)], out + err


def gemini_enabled_here(agent):
    """What `gemini extensions list`, run in the project, says of the kit's extension there."""
    code, out, err = agent.run("gemini", "extensions", "list")
    assert code == 0, describe(code, out, err)
    said = re.findall(r"Enabled \(Workspace\): (true|false)", out + err)
    assert len(said) == 1, out + err
    return said[0] == "true"


def test_gemini_installs_the_kit(make_agent, endpoint_in, ns_daemon, pyz, next_pyz,
                                 kit_python, config, server_version, tmp_path):
    script = turn_script("MEMPROVE-KIT-GEMINI", GEMINI_NAMES)
    endpoint = endpoint_in("gemini", script)
    # The project is a folder the user trusts (Gemini starts no stdio server elsewhere).
    agent = gemini_agent(make_agent, endpoint, lambda agent: [agent.project])
    kit = tmp_path / "kit"
    blocks = printed_blocks(kit_python.write_kit(pyz, kit, agent.config_dir, agent.home))
    install, update = commands_for(blocks, "gemini")
    # Gemini's extension is the kit's folder itself (plugin.md).
    code, out, err = agent.run("gemini", "extensions", "validate", str(kit))
    assert code == 0 and "successfully validated" in out + err, describe(code, out, err)
    run_printed(agent_runner(agent), install, ANSWERS["gemini"])
    # `extensions install` copies the extension into ~/.gemini/extensions; `link` would
    # read it in place.
    linked = install[0][1:3] == ["extensions", "link"]
    gemini_pyz = (kit if linked else agent.home / ".gemini" / "extensions" / KIT) / KIT / ARCHIVE
    listed, out = gemini_listed(agent)
    assert [row for row in listed if KIT in row[1]] == [
        ("\u2713", KIT, KIT, " ".join([str(kit_python.path), str(gemini_pyz), "mcp", "serve",
                                       "--config-dir", str(agent.config_dir)]),
         "stdio", "Connected")], out
    served_by(kit_python.wire, gemini_pyz, server_version, pyz, [config.token])
    found_the_kit(doctor_client(pyz, "gemini", agent.home, agent.project, agent.config_dir),
                  kit_version(kit))
    # Disabled for the project, Gemini starts no server of the extension in a session there
    # (`gemini mcp list` still shows it: it lists every extension's) and doctor says why,
    # as `extensions list` does; its fix, run as printed, enables it again.
    code, out, err = agent.run("gemini", "extensions", "disable", KIT, "--scope", "workspace")
    assert code == 0, describe(code, out, err)
    assert gemini_enabled_here(agent) is False
    disabled = doctor_client(pyz, "gemini", agent.home, agent.project, agent.config_dir)
    assert disabled["status"] == "warn" and "is disabled for %s" % agent.project.resolve() \
        in disabled["detail"], disabled
    code, out, err = agent.run("sh", "-c", disabled["fix"], cwd=agent.home)
    assert code == 0, describe(code, out, err)
    assert gemini_enabled_here(agent) is True
    found_the_kit(doctor_client(pyz, "gemini", agent.home, agent.project, agent.config_dir),
                  kit_version(kit))

    code, out, err = agent.run("gemini", "-m", GEMINI_MODEL, "-y", "-p",
                               "MEMPROVE-KIT-GEMINI: begin the kit work.")
    assert code == 0, describe(code, out, err, endpoint)
    # `gemini -p` declares roots naming the launch folder, the project.
    check_model_got(endpoint, GEMINI_NAMES, str(agent.project.resolve()), str(agent.config_dir),
                    "roots", EXPECTED_AGENT["gemini"], tmp_path / "endpoint.jsonl")
    the_turn_was_served(served_by(kit_python.wire, gemini_pyz, server_version, pyz,
                                  [config.token]))

    blocks = printed_blocks(kit_python.write_kit(next_pyz, kit, agent.config_dir, agent.home))
    install_again, update = commands_for(blocks, "gemini")
    assert install_again == install, blocks
    # Gemini runs its copy: until the update, doctor from the new .pyz finds it behind.
    stale = doctor_client(next_pyz, "gemini", agent.home, agent.project, agent.config_dir)
    assert stale["status"] == "warn" and "gemini extensions update memprove" in stale["fix"], stale
    run_printed(agent_runner(agent), update, ANSWERS["gemini"])
    found_the_kit(doctor_client(next_pyz, "gemini", agent.home, agent.project, agent.config_dir),
                  kit_version(kit))
    listed, out = gemini_listed(agent)
    assert [(row[3].split(" ")[1], row[-1]) for row in listed if KIT in row[1]] == [
        (str(gemini_pyz), "Connected")], out
    served_by(kit_python.wire, gemini_pyz, NEXT_VERSION, next_pyz, [config.token])
    token_nowhere(config.token, agent.home, agent.config_dir / "token")


# ---------------------------------------------------------------------------
# Claude Desktop's bundle: @anthropic-ai/mcpb
# ---------------------------------------------------------------------------

def test_mcpb_accepts_the_bundle(agent_client, loopback_only, pyz, kit_python, tmp_path):
    mcpb = agent_client("mcpb") / "node_modules" / ".bin" / "mcpb"
    home = tmp_path / "home"
    home.mkdir()
    config_dir = tmp_path / "config"
    kit = tmp_path / "kit"
    printed_blocks(kit_python.write_kit(pyz, kit, config_dir, home))
    bundle = kit / (KIT + ".mcpb")       # written here too; Linux has no Claude Desktop to open it

    def run(*args):
        done = subprocess.run(loopback_only + [str(mcpb)] + list(args), cwd=str(tmp_path),
                              env=clean_env(home), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        return done.returncode, done.stdout.decode("utf-8", "replace")

    with zipfile.ZipFile(str(bundle)) as archive:
        assert sorted(archive.namelist()) == sorted([ARCHIVE, "manifest.json"]), archive.namelist()
        manifest = archive.read("manifest.json")
    (tmp_path / "manifest.json").write_bytes(manifest)
    code, out = run("validate", str(tmp_path / "manifest.json"))
    assert code == 0 and "validation passes" in out, out
    code, out = run("info", str(bundle))
    assert code == 0 and "File: %s.mcpb" % KIT in out, out
    # `info` reads only the file's size and signature: unpacking reads the zip itself.
    code, out = run("unpack", str(bundle), str(tmp_path / "unpacked"))
    assert code == 0, out
    assert (tmp_path / "unpacked" / "manifest.json").read_bytes() == manifest
    assert file_sha(tmp_path / "unpacked" / ARCHIVE) == file_sha(pyz)
    code, out = run("validate", str(tmp_path / "unpacked" / "manifest.json"))
    assert code == 0 and "validation passes" in out, out
    # The control: a manifest without a required field is refused, so the checks can fail.
    broken = dict(json.loads(manifest.decode("utf-8")))
    del broken["author"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    code, out = run("validate", str(tmp_path / "broken.json"))
    assert code != 0 and "author" in out, out


# ---------------------------------------------------------------------------
# The way out (issue 31 item 7): the printed commands that remove the kit
# ---------------------------------------------------------------------------

REMOVE_HEADING = "To remove it (then delete the folder):"
DOCTOR_NAMES = {"claude": "claude-code", "codex": "codex", "gemini": "gemini"}


def remove_commands(stdout, program):
    """The printed commands under REMOVE_HEADING that are `program`'s, as argv lists."""
    lines = stdout.splitlines()
    assert lines.count(REMOVE_HEADING) == 1, stdout
    block = []
    for line in lines[lines.index(REMOVE_HEADING) + 1:]:
        if not line.startswith("  "):
            break
        block.append(shlex.split(line[2:]))
    mine = [argv for argv in block if argv[0] == program]
    assert mine, stdout
    return mine


def kit_client(request, program, tmp_path):
    """(run(argv, answer), HOME, project, configuration directory, doctor's extra environment)
    of the real client `program`, with a fresh HOME."""
    if program == "claude":
        claude = request.getfixturevalue("claude")

        def run(argv, answer):
            return claude.run(*argv[1:], timeout=300)
        return run, claude.home, claude.project_dir, claude.config_dir, None
    make_agent = request.getfixturevalue("make_agent")
    if program == "gemini":
        # Nothing here asks the model: the endpoint's address is never used.
        agent = gemini_agent(make_agent, type("Nowhere", (), {"url": "http://127.0.0.1:9"}),
                             lambda agent: [agent.project])
    else:
        agent = make_agent(program)
    extra = {"CODEX_HOME": agent.env["CODEX_HOME"]} if "CODEX_HOME" in agent.env else None
    return agent_runner(agent), agent.home, agent.project, agent.config_dir, extra


@pytest.mark.parametrize("program", ["claude", "codex", "gemini"])
def test_the_printed_remove_commands_take_the_kit_out(request, pyz, kit_python, tmp_path,
                                                      private_place, program):
    run, home, project, config_dir, extra = kit_client(request, program, tmp_path)
    name = DOCTOR_NAMES[program]
    kit = private_place / "kit"                 # a folder only its user can change (rule 25)
    stdout = kit_python.write_kit(pyz, kit, config_dir, home)
    install, _ = commands_for(printed_blocks(stdout), program)
    remove = remove_commands(stdout, program)
    run_printed(run, install, ANSWERS.get(program, b""))
    check = doctor_client(pyz, name, home, project, config_dir, extra)
    assert check["status"] == "ok" and "(from a plugin kit) runs this server" in \
        check["detail"], check
    run_printed(run, remove, ANSWERS.get(program, b""))
    check = doctor_client(pyz, name, home, project, config_dir, extra)
    assert check["status"] == "warn" and check["detail"].startswith(
        "no memprove entry for %s in " % name), check
