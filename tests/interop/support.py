"""Helpers of the interop tier: the recorded exchanges and their checks against protocol.md,
the plan every SDK client follows, and the driver of a scripted client.

Every client starts `mcp_tee.py` in place of the server; the tee starts the real .pyz and
records each server process it starts as one connection (see mcp_tee.py).  `connections()`
reads them back and `check_connection()` checks one against protocol.md: standard output
carries only JSON-RPC responses, each request is answered once with its id in the JSON type
it was sent with, notifications are never answered, standard error has exactly one
well-formed line per message received, each request was served in the era protocol.md
assigns it, and the token appears nowhere.
"""

import contextlib
import json
import ntpath
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The main suite's helpers (tests/conftest.py); MODERN_VERSION and schema_errors are also
# for the tests that import this module.
from harness import (EXPECTED_TOOLS, META_CLIENT, META_SERVER, META_VERSION, MODERN_VERSION,
                     ask_python, check_stdout_line, log_text, parse_log, schema_errors,
                     strict_json)

HERE = Path(__file__).resolve().parent
TEE = HERE / "mcp_tee.py"
CLIENTS = HERE / "clients"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18")
OLDER_VERSIONS = ("2025-03-26", "2024-11-05")   # clients.md: answered with themselves
LEGACY_ONLY_FIELDS = ("resultType", "ttlMs", "cacheScope")
PROBE_ID = "server-discover-probe-1"      # the TypeScript-based clients' server/discover id
RUN_COMMAND = "pytest -q tests/test_upload.py"


class _Any:
    """Equal to anything (a field whose value is not checked)."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __repr__(self):
        return "ANY"


ANY = _Any()


# ---------------------------------------------------------------------------
# The server command, through the tee
# ---------------------------------------------------------------------------

def teed_command(log_dir, pyz, python=None):
    """argv that starts the tee, which starts `<python> <pyz> mcp serve`."""
    python = python or sys.executable
    return [python, str(TEE), str(log_dir), "--", python, str(pyz), "mcp", "serve"]


def server_env(home, workspace, config, extra=None):
    """The server's whole environment: the daemon through MEMPROVE_DATA_DIR and
    MEMPROVE_TOKEN_FILE, the Workspace through CLAUDE_PROJECT_DIR."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LANG": "C.UTF-8",
           "MEMPROVE_DATA_DIR": str(config.data_dir),
           "MEMPROVE_TOKEN_FILE": str(config.token_file),
           "CLAUDE_PROJECT_DIR": str(workspace)}
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------
# Recorded connections
# ---------------------------------------------------------------------------

class Connection:
    """One server process as the tee recorded it."""

    def __init__(self, base):
        self.base = base
        self.name = base.name

    def _read(self, suffix):
        path = Path(str(self.base) + suffix)
        return path.read_bytes() if path.exists() else b""

    @property
    def events(self):
        return [json.loads(line) for line in self._read(".events").decode().splitlines() if line]

    def event(self, kind):
        for item in self.events:
            if item["event"] == kind:
                return item
        return None

    @property
    def inbound(self):
        return self._read(".in")

    @property
    def outbound(self):
        return self._read(".out")

    @property
    def stderr(self):
        return self._read(".err")

    @property
    def wire(self):
        return self._read(".wire").decode("utf-8", "replace")

    @property
    def server_pid(self):
        start = self.event("start")
        return start["server_pid"] if start else None

    def sent(self):
        """The client's messages, parsed, in order (blank lines are not messages)."""
        return [strict_json(line) for line in self.inbound.splitlines() if line.strip()]

    def received(self):
        """The server's output lines, raw, in order."""
        return self.outbound.splitlines(keepends=True)

    def requests(self):
        return [m for m in self.sent() if isinstance(m, dict) and "method" in m and "id" in m]

    def response(self, request_id):
        """The one response whose id equals request_id with the same JSON type."""
        found = [m for m in (strict_json(raw) for raw in self.received())
                 if "id" in m and type(m["id"]) is type(request_id) and m["id"] == request_id]
        assert len(found) == 1, "%d responses to id %r\n%s" % (len(found), request_id,
                                                              self.transcript())
        return found[0]

    def finished(self):
        """The server process has exited (recorded by the tee, or gone if the tee was killed)."""
        if self.event("server_exit"):
            return True
        pid = self.server_pid
        if pid is None:
            return False
        try:
            with open("/proc/%d/stat" % pid) as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state in ("Z", "X")

    def transcript(self, limit=8000):
        text = self.wire
        if len(text) > limit:
            text = text[:limit // 2] + "\n[...]\n" + text[-limit // 2:]
        err = self.stderr.decode("utf-8", "replace")
        return "--- %s (events %s)\n%s--- stderr:\n%s" % (self.name, self.events, text, err[-3000:])

    def __repr__(self):
        return "<Connection %s>" % self.name


def connections(log_dir, timeout=20.0):
    """Every connection recorded in log_dir, oldest first, once each server has exited (or
    `timeout` seconds have passed: check_connection then fails on the one still running)."""
    deadline = time.monotonic() + timeout
    while True:
        found = sorted({path.with_suffix("") for path in Path(log_dir).glob("conn-*.events")},
                       key=lambda path: tuple(int(part) for part in path.name.split("-")[1:]))
        conns = [Connection(path) for path in found]
        if all(conn.finished() for conn in conns) or time.monotonic() > deadline:
            return conns
        time.sleep(0.05)


def transcripts(conns):
    return "\n".join(conn.transcript() for conn in conns)


def expected_era(message, initialized):
    """The era protocol.md assigns a request, or None where it names none."""
    params = message.get("params")
    if message.get("method") == "initialize" and isinstance(params, dict) and isinstance(
            params.get("protocolVersion"), str):
        return "legacy"
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and META_VERSION in meta:
        return "modern"
    if message.get("method") in ("server/discover", "subscriptions/listen", "ping"):
        return None
    return "legacy" if initialized else None


def check_connection(conn, secrets=(), server_version=None):
    """Check one recorded connection against protocol.md; return its requests, each as
    {"message", "response", "era", "log"}, in the order the client sent them.  secrets must
    appear nowhere; server_version, when given, is the serverInfo version every era shows."""
    context = "\n" + conn.transcript()
    assert conn.finished(), "the server is still running after its client ended" + context
    # Standard output: nothing but JSON-RPC responses, compact, one a line.
    out = conn.outbound
    assert not out or out.endswith(b"\n"), "a partial line on standard output" + context
    answers = []
    for raw in conn.received():
        try:
            answers.append(check_stdout_line(raw))
        except AssertionError as error:
            raise AssertionError("standard output is not pure: %s%s" % (error, context))
    sent = conn.sent()
    requests = [m for m in sent if "method" in m and "id" in m]
    # The server's own request (roots/list, checked by check_stdout_line) is not an answer.
    answers = [answer for answer in answers if "method" not in answer]
    # Every response answers a request of this connection, with the id's JSON type.
    for answer in answers:
        assert "id" in answer, "a response without id: %r%s" % (answer, context)
        assert any(type(r["id"]) is type(answer["id"]) and r["id"] == answer["id"]
                   for r in requests), "a response to no request: %r%s" % (answer, context)
    # Standard error: exactly one well-formed line per message received.
    lines = conn.stderr.decode("utf-8").splitlines()
    assert conn.stderr == b"" or conn.stderr.endswith(b"\n"), "partial stderr line" + context
    records = []
    for line in lines:
        try:
            records.append(parse_log(line))
        except AssertionError as error:
            raise AssertionError("%s%s" % (error, context))
    assert len(records) == len(sent), "%d messages received, %d log lines%s" % (
        len(sent), len(records), context)
    for secret in secrets:
        for stream in (conn.inbound, conn.outbound, conn.stderr):
            assert secret.encode("utf-8") not in stream, "the token is on the wire or in the log"
    # End of input: exit 0.  A client's signal (passed on by the tee) may also end it, even
    # during an exit already under way, as long as it goes quietly (the stderr check above).
    exit_event = conn.event("server_exit")
    allowed = [0] + [-e["signal"] for e in conn.events if e["event"] == "signal"]
    if exit_event is not None:
        assert exit_event["returncode"] in allowed, "the server exited %r%s" % (
            exit_event["returncode"], context)
    # Notifications and client responses get a log line and no answer.
    unused = list(records)
    for message in sent:
        if "method" in message and "id" in message:
            continue
        outcome = "notification" if "method" in message else "response"
        logged_id = log_text(message["id"]) if "id" in message else "-"
        match = [r for r in unused if r["outcome"] == outcome and r["id"] == logged_id]
        assert match, "no log line for %r%s" % (message, context)
        unused.remove(match[0])
    # Each request: one answer with its id, one log line, served in the era it belongs to.
    served = []
    initialized = False
    for message in requests:
        rid = message["id"]
        matching = [a for a in answers if type(a["id"]) is type(rid) and a["id"] == rid]
        assert len(matching) == 1, "%d answers to id %r%s" % (len(matching), rid, context)
        answer = matching[0]
        method_text = log_text(message["method"])
        record = [r for r in unused if r["method"] == method_text and r["id"] == log_text(rid)]
        assert record, "no log line for %s id=%s%s" % (method_text, log_text(rid), context)
        record = record[0]
        unused.remove(record)
        era = expected_era(message, initialized)
        if era is not None:
            assert record["era"] == era, "%s id=%s served in era %s, protocol.md says %s%s" % (
                method_text, log_text(rid), record["era"], era, context)
        if "error" in answer:
            assert record["outcome"] == str(answer["error"]["code"]), (record, answer)
        elif message["method"] == "tools/call":
            result = answer["result"]
            if result.get("isError"):
                code = result["content"][0]["text"].split(":", 1)[0]
                assert record["outcome"] == code, (record, result)
            else:
                assert record["outcome"] == "ok", (record, result)
        if message["method"] == "tools/call":
            assert record["tool"] == (message["params"].get("name") or "?"), record
        server_info = {"name": "memprove", "version": server_version or ANY}
        if "result" in answer:
            result = answer["result"]
            if record["era"] == "modern":
                assert result.get("resultType") == "complete", answer
                assert result.get("_meta", {}).get(META_SERVER) == server_info, answer
            elif record["era"] == "legacy":
                present = [key for key in LEGACY_ONLY_FIELDS if key in result]
                assert not present, "a legacy result carries %s%s" % (present, context)
            if message["method"] in ("server/discover", "tools/list") and record["era"] == "modern":
                assert result.get("cacheScope") == "public", answer
                assert isinstance(result.get("ttlMs"), int), answer
            if message["method"] == "server/discover":
                assert result.get("supportedVersions") == [MODERN_VERSION], answer
                assert result.get("capabilities") == {"tools": {}}, answer
                assert isinstance(result.get("instructions"), str), answer
        if message["method"] == "initialize" and "result" in answer:
            offered = message["params"]["protocolVersion"]
            want = offered if offered in LEGACY_VERSIONS + OLDER_VERSIONS else "2025-11-25"
            result = answer["result"]
            assert result["protocolVersion"] == want, answer
            assert result.get("capabilities") == {"tools": {}}, answer
            assert result.get("serverInfo") == server_info, answer
            assert isinstance(result.get("instructions"), str), answer
            initialized = True
        served.append({"message": message, "response": answer, "era": record["era"],
                       "log": record})
    return served


def client_name(request):
    """The clientInfo name a request carries (initialize params or the modern _meta)."""
    params = request.get("params") or {}
    info = params.get("clientInfo") or (params.get("_meta") or {}).get(META_CLIENT) or {}
    return info.get("name")


def session_connections(conns):
    """The connections that did more than a server/discover probe."""
    return [conn for conn in conns
            if any(r["method"] != "server/discover" for r in conn.requests())]


# ---------------------------------------------------------------------------
# The plan every SDK client follows
# ---------------------------------------------------------------------------

def sdk_plan(title):
    """Every tool once with valid arguments (the read tools first, then a Session on a new
    Task, a passed Run recorded by the test, checkpoint, decide, claims, pack, complete,
    end), then one call that gives a Problem.  The Workspace, the daemon and so the numbers
    are fresh for each run: Task 1, Session 1, claims 1-3 from the checkpoint, 4 from decide."""
    return [
        {"tool": "context", "args": {}},
        {"tool": "tasks", "args": {}},
        {"tool": "ledger_verify", "args": {}},
        {"tool": "begin", "args": {"new_task": title, "agent_role": "implementer"}},
        {"hook": "record_run"},
        {"tool": "checkpoint", "args": {
            "facts": [{"text": "The upload suite passes with a fixed retry delay.",
                       "runs": ["r1"]}],
            "open_items": ["The retry limit is not documented."],
            "next_action": "Complete the Task."}},
        {"tool": "decide", "args": {
            "decision": "Keep the fixed retry delay.", "rationale": "r1 passed with it.",
            "alternatives": ["Exponential backoff"], "runs": ["r1"]}},
        {"tool": "claims", "args": {"numbers": [1, 2, 4]}},
        {"tool": "pack", "args": {"budget": 4000}},
        {"tool": "complete", "args": {}},
        {"tool": "end", "args": {}},
        {"tool": "claims", "args": {"numbers": [1], "task": 99}, "problem": "task_not_found"},
    ]


def recorder(daemon, config, workspace):
    """The plan's hook: record a passed Run in the Session `begin` opened, as `memprove run`
    does (the daemon's recordRun, then a line in the Workspace's runs.jsonl)."""
    import ledgerd

    def on_hook(name, events):
        assert name == "record_run", name
        begun = [e for e in events if e.get("event") == "call" and e["tool"] == "begin"][-1]
        session_id = begun["result"]["structuredContent"]["session_id"]
        ledgerd.memprove_run(daemon.url, config.token, str(workspace), session_id, RUN_COMMAND, 0)
    return on_hook


SIZE_HINT = ("anthropic/maxResultSizeChars", 200000)     # tools.md: on pack and claims


def check_tool_listing(tools):
    """The ten tools, in order, each with the fields protocol.md names: an outputSchema for
    every tool but `pack` (whose text the model must read), and Claude Code's result-size
    hint in `_meta` on `pack` and `claims` alone; name -> tool."""
    names = [tool["name"] for tool in tools]
    assert names == list(EXPECTED_TOOLS), names
    for tool in tools:
        for key in ("title", "description", "inputSchema", "annotations"):
            assert key in tool, (tool["name"], key)
        assert tool["inputSchema"].get("type") == "object", tool["name"]
        if tool["name"] == "pack":
            assert "outputSchema" not in tool, tool
        else:
            assert tool["outputSchema"].get("type") == "object", tool["name"]
        hint = (tool.get("_meta") or {}).get(SIZE_HINT[0])
        assert hint == (SIZE_HINT[1] if tool["name"] in ("pack", "claims") else None), tool
    return {tool["name"]: tool for tool in tools}


def check_sdk_run(events, plan, workspace, agent_name):
    """The events a scripted SDK client printed, checked against the plan; returns the calls."""
    kinds = [event["event"] for event in events]
    assert "error" not in kinds and kinds[-1:] == ["done"], "the client failed: %s" % (
        events[-1] if events else "no output")
    tools = check_tool_listing(next(e for e in events if e["event"] == "tools")["tools"])
    calls = [e for e in events if e["event"] == "call"]
    steps = [step for step in plan if "tool" in step]
    assert [c["tool"] for c in calls] == [s["tool"] for s in steps]
    assert set(c["tool"] for c in calls) == set(EXPECTED_TOOLS), "not every tool was called"
    results = {}
    for call, step in zip(calls, steps):
        result = call["result"]
        texts = [item.get("text") for item in result.get("content", [])
                 if item.get("type") == "text"]
        assert len(texts) == 1, result
        if "problem" in step:
            assert result.get("isError") is True, result
            assert texts[0].startswith(step["problem"] + ": "), texts[0]
            assert "structuredContent" not in result, result
            continue
        assert not result.get("isError"), "%s failed: %s" % (step["tool"], texts[0])
        if step["tool"] == "pack":
            # tools.md: no structuredContent, so clients hand the model the text; the
            # result object rides in _meta for programs.
            assert "structuredContent" not in result, result
            structured = result["_meta"]["memprove/pack"]
            assert texts[0].split("\n\n", 1)[1].startswith("Task ")
        else:
            structured = result.get("structuredContent")
            assert isinstance(structured, dict), result
            assert schema_errors(tools[step["tool"]]["outputSchema"], structured) == []
            assert json.loads(texts[0]) == structured
        assert list(structured)[:2] == ["task_id", "session_id"], list(structured)
        results.setdefault(step["tool"], structured)
    assert results["context"]["workspace"]["root"] == str(Path(workspace).resolve())
    assert results["context"]["workspace"]["found_by"] == "CLAUDE_PROJECT_DIR"
    assert results["ledger_verify"]["ok"] is True
    begun = results["begin"]
    assert begun["task"]["number"] == 1 and begun["session"]["number"] == 1, begun
    assert begun["task"]["status"] == "active", begun
    assert begun["session"]["agent"] == {"name": agent_name, "role": "implementer"}, begun
    assert [c["number"] for c in results["claims"]["claims"]] == [1, 2, 4], results["claims"]
    assert results["complete"]["status"] == "done" and results["complete"]["evidence"] == ["r1"]
    assert results["end"]["outcome"] == "ended" and results["end"]["session"] == 1
    return results


# ---------------------------------------------------------------------------
# A scripted client
# ---------------------------------------------------------------------------

def run_scripted_client(argv, on_hook, timeout=120.0, cwd=None, env=None):
    """Run a client script of clients/: its standard output is one JSON event a line; a
    `hook` event calls on_hook(name, events so far), then the script is let go on.
    Returns (events, returncode, stderr text)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=cwd, env=env)
    stderr = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    events = []
    try:
        for raw in iter(proc.stdout.readline, b""):
            try:
                event = json.loads(raw)
            except ValueError:
                event = {"event": "noise", "line": raw.decode("utf-8", "replace")}
            events.append(event)
            if event.get("event") == "hook":
                on_hook(event["name"], events)
                proc.stdin.write(b"continue\n")
                proc.stdin.flush()
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            proc.stdin.close()
        except OSError:
            pass
    reader.join(10)
    text = b"".join(stderr).decode("utf-8", "replace")
    if not timer.is_alive() and code == -9:
        text += "\n[killed after %ss]" % timeout
    return events, code, text


def describe_run(events, code, stderr, conns=()):
    """A failure message: what the client printed, its exit, its stderr, the exchange."""
    shown = json.dumps(events[-4:], indent=1)[-6000:]
    return "client exit %r\nlast events: %s\nclient stderr:\n%s\n%s" % (
        code, shown, stderr[-4000:], transcripts(conns))


# ---------------------------------------------------------------------------
# Claude Code (the `claude` fixture of conftest.py makes one)
# ---------------------------------------------------------------------------

QUIET = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "MCP_TIMEOUT": "30000"}


class Claude:
    """`claude` with a throwaway HOME that approves project .mcp.json servers, and a
    memprove configuration directory in that HOME that points at the test's daemon."""

    def __init__(self, project_dir, home, bin_dir, prefix, config):
        self.home = home
        self.bin_dir = bin_dir
        self.prefix = prefix
        self.approve_project_servers(home / ".claude")
        self.config_dir = home / ".config" / "memprove"
        self.write_memprove_config(str(config.data_dir), config.token)
        self.env = dict(QUIET, PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", os.defpath),
                        HOME=str(home), LANG="C.UTF-8")
        self.project_dir = project_dir

    @staticmethod
    def approve_project_servers(claude_dir):
        """Claude Code's user settings in `claude_dir` (~/.claude), approving .mcp.json."""
        claude_dir.mkdir(parents=True)
        (claude_dir / "settings.json").write_text(json.dumps({"enableAllProjectMcpServers": True}))

    def write_memprove_config(self, data_dir, token):
        """config_dir's data-dir (naming `data_dir` as the server will read it) and token."""
        self.config_dir.mkdir(parents=True)
        (self.config_dir / "data-dir").write_text(data_dir + "\n")
        fd = os.open(str(self.config_dir / "token"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")

    def run(self, *args, cwd=None, shell=None, timeout=120, env=None, via=()):
        """(exit code, stdout, stderr) of `claude args...` (or of `sh -c shell`); env: more
        variables, over this HOME's; via: argv put before the command (see `reaching`)."""
        argv = ["sh", "-c", shell] if shell else [str(self.bin_dir / "claude")] + list(args)
        done = subprocess.run(self.prefix + list(via) + argv, cwd=str(cwd or self.project_dir),
                              env=dict(self.env, **(env or {})),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)
        out = done.stdout.decode("utf-8", "replace")
        return done.returncode, out, done.stderr.decode("utf-8", "replace")

    @contextlib.contextmanager
    def reaching(self, *ports):
        """Inside the loopback-only namespace, 127.0.0.1:<port> reaches the outer
        127.0.0.1:<port> for each of `ports` (loopback_bridge.py, through Unix sockets);
        yields the `via` argv for run().  Without a namespace there is nothing to bridge."""
        if not self.prefix:
            yield []
            return
        from interop.loopback_bridge import UnixToTcp
        folder = tempfile.mkdtemp(prefix="mp-bridge-")     # short: a socket path is ~100 bytes
        relays = []
        try:
            for port in ports:
                relays.append(UnixToTcp(os.path.join(folder, "%d.sock" % port), port))
            yield [sys.executable, str(HERE / "loopback_bridge.py")] + [
                "%d=%s" % (relay.port, relay.path) for relay in relays] + ["--"]
        finally:
            for relay in relays:
                relay.close()
            shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------
# Claude Code for Windows under Wine 10 (tests/wine10.sh; the `claude_windows` fixture)
# ---------------------------------------------------------------------------

class Wine10:
    """tests/wine10.sh's chroot seen from here: its wrappers (`python-win3.13`, `claude`)
    and the Windows user of its prefix, whose folders are asked of Windows Python."""

    PYTHON = "python-win3.13"

    def __init__(self, bin_dir):
        self.bin = Path(bin_dir)
        self.root = self.bin.parent / "sid"             # tests/wine10.sh's layout
        self.python = self.bin / self.PYTHON
        (self.executable, self.profile, self.appdata, self.local_appdata,
         prefix) = json.loads(ask_python(self.python, "__import__('json').dumps([sys.executable] + "
                                         "[os.environ[name] for name in ('USERPROFILE', 'APPDATA', "
                                         "'LOCALAPPDATA', 'WINEPREFIX')])"))
        self.drive_c = self.root / prefix.lstrip("/") / "drive_c"

    def windows(self, path):
        """`path` as Windows Python names it (Z:\\tmp\\...)."""
        return ask_python(self.python, "os.path.realpath(sys.argv[1])", str(path))

    def host(self, windows_path):
        """The file here that a Windows path on C: or Z: names."""
        drive, rest = ntpath.splitdrive(windows_path)
        parts = [part for part in rest.split("\\") if part]
        if drive.upper() == "Z:":
            return Path("/", *parts)
        if drive.upper() == "C:":
            return self.drive_c.joinpath(*parts)
        raise ValueError("not on C: or Z: %r" % windows_path)

    def user_state(self):
        """What Claude Code and memprove keep for this Windows user: ~\\.claude and
        ~\\.claude.json, Claude Code's cache in %LOCALAPPDATA%, %APPDATA%\\memprove."""
        return [self.host(ntpath.join(self.profile, ".claude")),
                self.host(ntpath.join(self.profile, ".claude.json")),
                self.host(ntpath.join(self.local_appdata, "claude-cli-nodejs")),
                self.host(ntpath.join(self.appdata, "memprove"))]

    def forget_user(self):
        for path in self.user_state():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(str(path))
            elif path.exists() or path.is_symlink():
                path.unlink()


class WindowsClaude(Claude):
    """claude.exe under Wine 10 as a Windows user runs it for the first time: its user
    settings (%USERPROFILE%\\.claude) approve the project's .mcp.json, and memprove's
    configuration directory is the one print-config names there, %APPDATA%\\memprove,
    pointing at the test's daemon (the data directory in Windows form).  The caller
    holds the prefix's user for the test (`claude_windows`): there is one."""

    def __init__(self, project_dir, wine, prefix, config):
        self.wine = wine
        self.home = wine.host(wine.profile)
        self.bin_dir = wine.bin
        self.prefix = prefix
        self.approve_project_servers(self.home / ".claude")
        self.config_dir = wine.host(ntpath.join(wine.appdata, "memprove"))
        self.write_memprove_config(wine.windows(config.data_dir), config.token)
        # No HOME: Wine gives Windows programs none (USERPROFILE is the home there).
        self.env = dict(QUIET, PATH=os.environ.get("PATH", os.defpath), LANG="C.UTF-8")
        self.project_dir = project_dir


def print_config(pyz, home, cwd):
    """`mcp print-config` as a user runs it: its standard output, and where it says to put it."""
    done = subprocess.run([sys.executable, str(pyz), "mcp", "print-config"], cwd=str(cwd),
                          env={"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home),
                               "LANG": "C.UTF-8"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr.decode()


# ---------------------------------------------------------------------------
# The reference daemon's clock, turned back (the stop hook's gate)
# ---------------------------------------------------------------------------

def age_session(db_path, number, minutes):
    """Make Session `number`'s records `minutes` old in the reference daemon's SQLite store
    (tests/ledgerd.py, `db_path`), as if nothing had been recorded since: its `started_at`,
    the `created_at` of its Claims and checkpoints, and the `reaffirmed_at` of every
    reaffirmed Claim of its Task (what the stop hook reads as the last record).  Only the
    tables change: the ledger's entries, whose hash chain verifyLedger checks, keep the times
    they were written with.  Returns the time written (UTC, the daemon's form)."""
    import sqlite3
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - minutes * 60))
    connection = sqlite3.connect(str(db_path))
    try:
        with connection:
            rows = connection.execute("SELECT id, task_id FROM sessions WHERE number = ?",
                                      (number,)).fetchall()
            assert len(rows) == 1, "Session s%d: %r" % (number, rows)
            session_id, task_id = rows[0]
            connection.execute("UPDATE sessions SET started_at = ? WHERE id = ?",
                               (stamp, session_id))
            for table in ("claims", "checkpoints"):
                connection.execute("UPDATE %s SET created_at = ? WHERE session_id = ?" % table,
                                   (stamp, session_id))
            connection.execute("UPDATE claims SET reaffirmed_at = ? WHERE task_id = ? AND "
                               "reaffirmed_at IS NOT NULL", (stamp, task_id))
    finally:
        connection.close()
    return stamp
