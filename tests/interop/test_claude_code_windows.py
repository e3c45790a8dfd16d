"""Claude Code for Windows (`claude.exe`, npm's @anthropic-ai/claude-code-win32-x64 at the
Linux tier's pin) against the .pyz, under Wine 10 (tests/wine10.sh): a Windows user's
first minute.

The user runs `python.exe memprove_mcp.pyz mcp print-config` with python.org's CPython 3.13
for Windows and puts what it prints, byte for byte, in the project's `.mcp.json`; the user's
Claude Code settings approve project servers; memprove's configuration directory is the one
print-config names there, %APPDATA%\\memprove, with the token file and a data-dir naming the
test's reference daemon's data directory in Windows form (Z:\\tmp\\...).  The daemon runs
here, on Linux, on 127.0.0.1; claude.exe runs inside the loopback-only network namespace
where one can be made, loopback_bridge.py carrying the daemon's and the model endpoint's
ports into it.

1. `claude mcp list` and `claude mcp get memprove` report the printed entry (the
   interpreter, the .pyz first in its arguments) Connected, and a control entry whose
   command is the .pyz itself Failed to connect: Windows starts no .pyz, which is why
   print-config names the interpreter there.
2. A whole headless session (`claude -p ... --output-format stream-json`) against the
   scripted model endpoint (model_endpoint.py): the model loads the tools through
   ToolSearch, then calls `tasks`, `begin`, `checkpoint`, `pack`, `tasks`, `context`, a
   call that must fail, and `end`; the requests Claude Code sent the endpoint show what
   the model received for each, checked against the daemon: the Pack byte for byte, the
   Workspace root and the data directory in Windows form, the token found in the
   configuration directory and nowhere else.
"""

import json
import ntpath
import re
import subprocess

from harness import EXPECTED_TOOLS, SAFETY_TIMEOUT
from interop.model_endpoint import Script
from interop.test_claude_code_session import (
    PREFIX, Day, assert_not_preview, assert_pack_text, headless, ledger_ops, model_text, received,
    utc_now)

CONNECTED_LIST = re.compile(r"^memprove: (.*) - \u221a Connected$", re.M)
CONTROL_FAILED = re.compile(r"^memprove-pyz: (.*) - \u00d7 Failed to connect\b", re.M)
CONNECTED_GET = "Status: \u221a Connected"
TITLE = "Fix flaky upload retries on Windows \u2014 caf\u00e9 edition"


def windows_print_config(claude, pyz):
    """`python.exe memprove_mcp.pyz mcp print-config` in the project, as the Windows user
    runs it: its standard output (bytes) and standard error."""
    done = subprocess.run([str(claude.wine.python), str(pyz), "mcp", "print-config"],
                          cwd=str(claude.project_dir), env=claude.env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr.decode("utf-8", "replace")


def check_printed_entry(claude, pyz, stdout, stderr):
    """The entry names Windows Python, the .pyz first in its arguments, and the user's
    %APPDATA%\\memprove; it is to go in the project's .mcp.json.  Returns it."""
    wine = claude.wine
    project = wine.windows(claude.project_dir)
    assert ntpath.join(project, ".mcp.json") in stderr, stderr
    assert b"\r" not in stdout, stdout
    entry = json.loads(stdout.decode("utf-8"))["mcpServers"]["memprove"]
    config_dir = ntpath.join(wine.appdata, "memprove")
    assert entry == {"type": "stdio", "command": wine.executable,
                     "args": [wine.windows(pyz), "mcp", "serve", "--config-dir", config_dir],
                     "env": {"MEMPROVE_CONFIG_DIR": config_dir}}, entry
    return entry


def claude_says(claude, *args):
    code, out, err = claude.run(*args)
    return code, out, "claude %s exited %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(args), code, out, err)


def test_windows_claude_code_connects_with_print_config(claude_windows, windows_pyz):
    claude = claude_windows
    stdout, stderr = windows_print_config(claude, windows_pyz)
    entry = check_printed_entry(claude, windows_pyz, stdout, stderr)
    (claude.project_dir / ".mcp.json").write_bytes(stdout)          # exactly what it printed

    # `mcp list` and `mcp get` exit 0 whatever the status: it is read from what they print.
    code, out, story = claude_says(claude, "mcp", "list")
    listed = CONNECTED_LIST.search(out)
    assert code == 0 and listed, story
    assert listed.group(1) == " ".join([entry["command"]] + entry["args"]), story
    code, out, story = claude_says(claude, "mcp", "get", "memprove")
    assert code == 0 and CONNECTED_GET in out, story
    assert "Scope: Project config" in out, story
    assert "Command: %s\n" % entry["command"] in out, story
    assert "Args: %s\n" % " ".join(entry["args"]) in out, story

    # The control: the same server with the .pyz as its command, as a Linux or macOS entry
    # names it, beside the printed one.  It must fail, or this test could not.
    control = dict(entry, command=entry["args"][0], args=entry["args"][1:])
    servers = json.loads(stdout.decode("utf-8"))["mcpServers"]
    servers["memprove-pyz"] = control
    (claude.project_dir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}, indent=2))
    code, out, story = claude_says(claude, "mcp", "list")
    assert code == 0 and CONTROL_FAILED.search(out), story
    assert CONNECTED_LIST.search(out), story


def test_windows_claude_code_keeps_user_servers_where_print_config_says(claude_windows,
                                                                       windows_pyz):
    """Claude Code's Windows user file is unconfirmed by its vendor (%USERPROFILE%\\.claude.json
    assumed; docs/clients-verified.md, "Where each client keeps its files"): `claude mcp add
    --scope user` with the printed entry writes it there, the file print-config's standard-error
    line names, and `claude mcp get` reads it back from there, Connected."""
    claude = claude_windows
    stdout, stderr = windows_print_config(claude, windows_pyz)
    entry = check_printed_entry(claude, windows_pyz, stdout, stderr)
    user_file = ntpath.join(claude.wine.profile, ".claude.json")
    assert "or in %s (local or user scope)" % user_file in stderr, stderr
    # -e takes every word up to the next option: the name goes before it.
    code, out, story = claude_says(claude, "mcp", "add", "--scope", "user", "memprove", "-e",
                                   "MEMPROVE_CONFIG_DIR=" + entry["env"]["MEMPROVE_CONFIG_DIR"],
                                   "--", entry["command"], *entry["args"])
    assert code == 0, story
    written = json.loads(claude.wine.host(user_file).read_text(encoding="utf-8"))
    kept = written["mcpServers"]["memprove"]
    assert (kept["command"], kept["args"], kept["env"]) == (
        entry["command"], entry["args"], entry["env"]), kept
    code, out, story = claude_says(claude, "mcp", "get", "memprove")
    assert code == 0 and CONNECTED_GET in out and "Scope: User config" in out, story


# ---------------------------------------------------------------------------
# A whole session
# ---------------------------------------------------------------------------

class WindowsDay(Day):
    """The scripted model's morning on Windows: load the tools, find no Task, begin one,
    checkpoint, pack, list the Tasks again, read the context, make a call that must fail,
    end the Session."""

    def script(self):
        self.call("ToolSearch", {"query": "select:" + ",".join(
            PREFIX + tool for tool in EXPECTED_TOOLS)})
        self.call("tasks", {})
        self.call("begin", {"new_task": TITLE, "agent_role": "implementer"})
        self.call("checkpoint", {
            "facts": [{"text": "The upload suite fails on Windows paths with a drive letter."}],
            "open_items": ["Does the retry delay differ on Windows?"],
            "next_action": "Run the upload suite under Windows."})
        self.call("pack", {"budget": 4000}, before=self.snapshot)
        self.call("tasks", {})
        self.call("context", {})
        self.call("claims", {"numbers": [1], "task": 99}, problem="task_not_found")
        self.call("end", {})
        return Script(self.steps, marker=self.marker)


def test_a_whole_windows_claude_code_session(claude_windows, windows_pyz, daemon, config,
                                             tmp_path):
    claude = claude_windows
    wine = claude.wine
    stdout, stderr = windows_print_config(claude, windows_pyz)
    check_printed_entry(claude, windows_pyz, stdout, stderr)
    (claude.project_dir / ".mcp.json").write_bytes(stdout)          # exactly what it printed
    day = WindowsDay(daemon, config, claude.project_dir)
    script = day.script()
    started = utc_now()
    endpoint, code, out, err = headless(
        claude, daemon, script, "%s: resume the upload work with memprove." % day.marker)
    finished = utc_now()
    endpoint.recorder.dump(tmp_path / "endpoint.jsonl")
    story = "claude exit %d\nstderr:\n%s\nstdout (end):\n%s\nendpoint (in full: %s):\n%s" % (
        code, err[-3000:], out[-3000:], tmp_path / "endpoint.jsonl", endpoint.recorder.summary())

    # -- claude.exe ran the whole script and ended well -------------------------------------
    assert endpoint.recorder.errors == [], story
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    final = events[-1] if events else {}
    assert code == 0 and final.get("type") == "result" and final.get("is_error") is False, story
    init = events[0]
    assert init.get("cwd") == wine.windows(claude.project_dir), init.get("cwd")
    assert {"name": "memprove", "status": "connected", "source": "project"} in init.get(
        "mcp_servers", []), init.get("mcp_servers")
    assert script.finished, story

    # -- what the model received, call by call -------------------------------------------
    results, last = received(endpoint, script, day.calls)
    assert last.depth == len(day.calls)
    assert results[0].content == [{"type": "tool_reference", "tool_name": PREFIX + tool}
                                  for tool in EXPECTED_TOOLS], results[0].content
    seen = {}
    agent = None
    for step, tool, arguments, problem in day.calls[1:]:
        result = results[step]
        text = model_text(result)
        assert_not_preview(tool, text)
        if problem:
            assert result.is_error is True, (tool, result.raw)
            assert re.match(r"%s: [A-Z][^\n]*\.\Z" % problem, text), text
            continue
        assert not result.is_error, "%s failed: %s" % (tool, text)
        if tool == "pack":
            capsule = day.capsules[step]
            pack = assert_pack_text(text, capsule, arguments["budget"], agent, started, finished)
            seen.setdefault(tool, []).append((capsule, pack))
            continue
        value = json.loads(text)
        assert isinstance(value, dict) and list(value)[:2] == ["task_id", "session_id"], text
        seen.setdefault(tool, []).append(value)
        if tool == "begin":
            agent = value["session"]["agent"]

    # -- the results say what the daemon on Linux did, in the Windows server's terms ---------
    root = wine.windows(claude.project_dir)
    before, after = seen["tasks"]
    assert before["tasks"] == [] and before["workspace"] == root, before
    begun = seen["begin"][0]
    assert begun["task"] == {"number": 1, "title": TITLE, "status": "active"}, begun
    assert begun["session"] == {"number": 1, "agent": {"name": "claude-code",
                                                       "role": "implementer"}, "parent": None}
    assert [(c["number"], c["kind"]) for c in seen["checkpoint"][0]["claims"]] == [
        (1, "fact"), (2, "open_item"), (3, "next_action")], seen["checkpoint"]
    (capsule, pack), = seen["pack"]
    assert capsule["task"]["title"] == TITLE, capsule["task"]
    assert "Open items:\n- c2 Does the retry delay differ on Windows?\n" in pack, pack
    assert after["workspace"] == root, after
    assert [(t["number"], t["title"], t["status"], t["current"]) for t in after["tasks"]] == [
        (1, TITLE, "active", True)], after
    context = seen["context"][0]
    assert context["workspace"]["root"] == root, context
    assert context["workspace"]["found_by"] == "CLAUDE_PROJECT_DIR", context
    assert context["task"] == {"number": 1, "title": TITLE}, context
    assert context["task_id"] == begun["task_id"], context
    settings = context["config"]
    assert settings["config_dir"] == ntpath.join(wine.appdata, "memprove"), settings
    assert settings["token_from"] == "config", settings
    assert settings["data_dir"] == wine.windows(config.data_dir), settings
    assert settings["daemon_url"] == daemon.url, settings
    assert settings["warnings"] == [], settings
    ended = seen["end"][0]
    assert ended["outcome"] == "ended" and ended["session"] == 1, ended

    # -- the ledger and context.json ---------------------------------------------------------
    assert ledger_ops(config.data_dir) == [
        "resolveWorkspace", "createTask", "createSession", "transitionTask", "createCheckpoint",
        "endSession"], ledger_ops(config.data_dir)
    with daemon.store.lock:
        assert daemon.store.verify()["first_bad"] is None
    saved = json.loads((claude.project_dir / ".memprove" / "context.json").read_text())
    assert saved["session"] is None and saved["workspace"]["root"] == root, saved
    assert saved["task"] == {"id": begun["task_id"], "number": 1, "title": TITLE}, saved

    # -- the token is nowhere but in its file ------------------------------------------------
    token = config.token.encode("utf-8")
    for exchange in endpoint.recorder.exchanges:
        assert token not in exchange.body, "the token reached the model endpoint"
        assert all(config.token not in value for _, value in exchange.headers)
    assert token not in out.encode() and token not in err.encode(), "the token is in its output"
    written = [path for place in wine.user_state() if place != claude.config_dir
               for path in ([place] if place.is_file() else sorted(place.rglob("*")))
               if path.is_file() and not path.is_symlink()]
    assert any(path.suffix == ".jsonl" and "projects" in path.parts for path in written), written
    for path in written:
        assert token not in path.read_bytes(), "the token is in %s" % path
