"""Every session starts with the Pack (docs/session-start.md, issue 33), and a long silence
ends with a request to record (docs/stop-hook.md, issue 40: the last section), in the real
clients.

Claude Code, Codex CLI and Gemini CLI, each with a fresh HOME, install the kit of
`mcp plugin DIR` with exactly the commands it printed (test_plugin_kit.py's machinery: the
kit names `KitPython`, so every `mcp serve` a client starts is recorded), and run headless
against the scripted model endpoint (model_endpoint.py), offline.  The kit's
`hooks/hooks.json` runs `memprove_mcp.pyz mcp hook session-start` at every session start.

For each client, in one HOME and one project:

1. no Task in the project's context: the session starts as before (the client exits 0, the
   model's turn is played), no hook text reaches the model;
2. a Task begun and checkpointed through `mcp serve` (as the client's own server would have
   done it): the model's FIRST request, before any tool call, holds TEXT, byte for byte what
   `pack` with no arguments returns in the same state for a client of the same
   `clientInfo.name` (its opening's time aside, which must fall within the run);
3. no token (the configuration's token file moved away): silent again;
4. the daemon down (its `daemon.json` left in place, nothing listening at its port): silent
   again.

Where TEXT lands is the client's own: Claude Code, a `system` message after the prompt,
`SessionStart hook additional context: TEXT`; Codex, a `developer` message of its own; Gemini,
a user-turn part `<hook_context>TEXT</hook_context>`.  Every hook run appends one line to
MEMPROVE_MCP_LOG (the clients pass the user's MEMPROVE_* variables to their hooks): what it
did and its milliseconds, printed for the reader (no timed assertion); the token is in no
request, in no log line and in no file the client wrote.

Claude Code also: after `claude -p "/compact" --resume ID`, the hook runs with source
`compact`, and the next request of that session holds TEXT again.  Claude Code for Windows
(claude.exe under Wine 10, tests/wine10.sh) with a kit written by Windows Python: its first
request holds TEXT.

Codex runs a plugin's hook only once the user has trusted it, as the printed lines say.
Installed, the kit's hook is `untrusted` and plain `codex exec` skips it without a word (no
log line).  The test then does what the printed line says: it starts `codex` (its terminal
interface, in a pseudo terminal) and, at "Hooks need review", picks "Trust all and
continue".  Codex 0.171.0 records that in `config.toml`:

    [hooks.state."memprove@memprove:hooks/hooks.json:session_start:0:0"]
    trusted_hash = "sha256:<H>"
    trusted_content_hash = "sha256:<C>"

where H is the sha256 of the handler's identity (codex_trusted_hash: what doctor can compare)
and C covers the plugin's content; `codex app-server`'s `hooks/list` reports each hook's key,
`currentHash` (`sha256:<H>/sha256:<C>`) and `trustStatus`.  Written again from another .pyz
and updated as printed, the kit's hook is `modified`: Codex asks again.
"""

import datetime
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from harness import SAFETY_TIMEOUT, clean_env
from interop.agents import EXPECTED_AGENT, GEMINI_MODEL, describe, gemini_agent
from interop.model_endpoint import DIALECTS, Endpoint, Script, ToolCall, Turn
from interop.support import age_session
from interop.test_plugin_kit import (  # noqa: F401  (kit_python, next_pyz: fixtures)
    ANSWERS, KIT, agent_runner, commands_for, kit_python, next_pyz, powershell_words,
    printed_blocks, run_printed, token_nowhere, windows_kit)

TITLE = "Start every session with the Pack \u2014 caf\u00e9 edition"
CHECKPOINT = {
    "facts": [{"text": "The hook runs before the MCP servers connect (caf\u00e9 measured)."}],
    "open_items": ["Does Codex spill a long hook output to a file?"],
    "next_action": "Prove the hook in the three pinned clients."}
HOOK_WORDS = ["mcp", "hook", "session-start"]
TIME = re.compile(r" at ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z) as ")
LOG_LINE = re.compile(r"^(\S+) memprove-mcp hook session-start source=(\S+) (.+) ([0-9]+)ms$")
STOP_LOG_LINE = re.compile(r"^(\S+) memprove-mcp hook stop (.+) ([0-9]+)ms$")
CLAUDE_PREFIX = "SessionStart hook additional context: "


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------
# memprove as the user's own server would be used: one tool call per `mcp serve`
# ---------------------------------------------------------------------------

def serve_call(run, serve_argv, client, tool, arguments):
    """`tools/call tool` through one `mcp serve` (serve_argv) started by run(argv, stdin) ->
    (code, stdout, stderr), after `initialize` with clientInfo.name `client`: its result."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": client, "version": "1.0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": tool, "arguments": arguments}}]
    code, out, err = run(serve_argv, "".join(json.dumps(m) + "\n" for m in messages).encode())
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    called = [answer for answer in answers if answer.get("id") == 2]
    assert code == 0 and len(called) == 1, (code, out, err)
    result = called[0]["result"]
    assert not result.get("isError"), result
    return result


def begin_task(run, serve_argv, client):
    """A Task begun and checkpointed, its Session left open, as an agent's day leaves it."""
    begun = serve_call(run, serve_argv, client, "begin",
                       {"new_task": TITLE, "agent_role": "implementer"})
    assert begun["structuredContent"]["task"]["number"] == 1, begun
    serve_call(run, serve_argv, client, "checkpoint", CHECKPOINT)


def pack_text(run, serve_argv, client):
    """What `pack` with no arguments returns now to a client named `client`."""
    result = serve_call(run, serve_argv, client, "pack", {})
    texts = [item["text"] for item in result["content"] if item.get("type") == "text"]
    assert len(texts) == 1 and texts[0].startswith("Resuming Task 1: "), result
    return texts[0]


def same_pack(got, expected, earliest, latest):
    """`got` is `expected` byte for byte, but for its opening's time, which lies within
    [earliest, latest]."""
    found, wanted = TIME.search(got.split("\n", 1)[0]), TIME.search(expected.split("\n", 1)[0])
    assert found and wanted, "no opening statement with a time:\n%r\n%r" % (got[:300],
                                                                           expected[:300])
    assert earliest <= found.group(1) <= latest, (earliest, found.group(1), latest)
    aligned = got[:found.start(1)] + wanted.group(1) + got[found.end(1):]
    assert aligned == expected, "the hook's text is not what pack returns:\n--- got (%d) ---\n" \
        "%s\n--- pack (%d) ---\n%s" % (len(got), got[:3000], len(expected), expected[:3000])


# ---------------------------------------------------------------------------
# The kit's hook, its log, what the model was shown
# ---------------------------------------------------------------------------

def kit_hook_commands(folder):
    """The one handler of hooks/hooks.json in `folder` (the plugin's, or Gemini's extension
    at the kit's root), on POSIX: one SessionStart entry, no matcher, no timeout
    (docs/session-start.md)."""
    hooks = json.loads((folder / "hooks" / "hooks.json").read_text("utf-8"))
    groups = hooks["hooks"]["SessionStart"]
    assert len(groups) == 1 and "matcher" not in groups[0], groups
    handlers = groups[0]["hooks"]
    assert len(handlers) == 1 and handlers[0]["type"] == "command", handlers
    assert "timeout" not in handlers[0], handlers
    return handlers[0]


def log_lines(path):
    """MEMPROVE_MCP_LOG's session-start hook lines, parsed: (time, source, what happened,
    ms).  The kit's stop hook writes its own lines there too (stop_log_lines)."""
    if not path.exists():
        return []
    lines = path.read_text("utf-8").splitlines()
    assert all(LOG_LINE.match(line) or STOP_LOG_LINE.match(line) for line in lines), lines
    parsed = [LOG_LINE.match(line) for line in lines if LOG_LINE.match(line)]
    return [(m.group(1), json.loads(m.group(2)) if m.group(2) != "-" else None, m.group(3),
             int(m.group(4))) for m in parsed]


def first_scripted(endpoint):
    """The body of the first request of the scripted conversation (its step 0: no tool has
    been called yet) as the endpoint received it."""
    first = [exchange for exchange in endpoint.recorder.exchanges if exchange.step == 0]
    assert first, "the client never asked the model\n%s" % endpoint.recorder.summary()
    return first[0].json


def texts_in(value):
    """Every string inside a JSON value, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for member in value:
            yield from texts_in(member)
    elif isinstance(value, dict):
        for member in value.values():
            yield from texts_in(member)


def claude_hook_texts(body, length):
    """The hook texts in a Claude Code request: each `SessionStart hook additional context: `
    block's next `length` characters (TEXT's own length: the block goes on with the
    environment), with where it was."""
    found = []
    for index, message in enumerate(body.get("messages", [])):
        for text in texts_in(message.get("content")):
            start = 0
            while True:
                at = text.find(CLAUDE_PREFIX, start)
                if at < 0:
                    break
                got = text[at + len(CLAUDE_PREFIX):at + len(CLAUDE_PREFIX) + length]
                rest = text[at + len(CLAUDE_PREFIX) + length:]
                assert rest == "" or rest.startswith("\n"), "more hook text than TEXT: %r" % (
                    text[at:at + length + 200])
                found.append((index, message.get("role"), got))
                start = at + 1
    return found


def codex_hook_texts(body):
    """Codex's developer messages that start like the opening statement."""
    found = []
    for index, item in enumerate(body.get("input", [])):
        if item.get("type", "message") == "message" and item.get("role") == "developer":
            for text in texts_in(item.get("content")):
                if text.startswith("Resuming Task "):
                    found.append((index, text))
    return found


def gemini_hook_texts(body):
    """Gemini's `<hook_context>...</hook_context>` parts, unwrapped (Gemini writes `<` and `>`
    inside as `&lt;` and `&gt;`; TEXT here has neither)."""
    found = []
    for index, content in enumerate(body.get("contents", [])):
        for part_index, part in enumerate(content.get("parts", [])):
            text = part.get("text") or ""
            match = re.match(r"<hook_context>(.*?)</hook_context>", text, re.S)
            if match:
                found.append(((index, part_index), match.group(1), text[match.end():]))
    return found


def no_hook_text(endpoint, token):
    """No request holds hook text (nor the Task's title), and none holds the token."""
    for exchange in endpoint.recorder.exchanges:
        body = exchange.body.decode("utf-8", "replace")
        for sign in (CLAUDE_PREFIX, "Resuming Task 1: ", TITLE):
            assert sign not in body, "hook text reached the model (%r) in request %d" % (
                sign, exchange.number)
        # Gemini's system prompt speaks of <hook_context>; a hook's text is a part of its own.
        assert not isinstance(exchange.json, dict) or gemini_hook_texts(exchange.json) == [], (
            exchange.number, gemini_hook_texts(exchange.json))
    token_in_no_request(endpoint, token)


def token_in_no_request(endpoint, token):
    for exchange in endpoint.recorder.exchanges:
        assert token.encode() not in exchange.body, "the token reached the model endpoint"
        assert all(token not in value for _, value in exchange.headers)


class Silence:
    """A session start the hook must leave alone: how the test breaks the state, and the
    word MEMPROVE_MCP_LOG's line must say (docs/session-start.md rules 6 and 10)."""

    def __init__(self, name, logged):
        self.name = name
        self.logged = logged


NO_TASK = Silence("no Task", "no_task")
NO_TOKEN = Silence("no token", "token_missing")
DAEMON_DOWN = Silence("the daemon down", "daemon_unavailable")


def daemon_down(daemon):
    """Stop the daemon but leave its daemon.json (as a daemon that died leaves it): the
    hook finds the address and nothing listening there."""
    path = Path(daemon.daemon_json_path)
    saved = path.read_bytes()
    mode = path.stat().st_mode & 0o7777
    daemon.stop()
    path.write_bytes(saved)
    os.chmod(str(path), mode)


def report(client, what, lines):
    sys.stdout.write("\n[session-start %s] %s: %s\n" % (client, what, lines))


# ---------------------------------------------------------------------------
# Claude Code
# ---------------------------------------------------------------------------

def claude_session(claude, daemon, marker, *extra, env=None, daemon_up=True, steps=None):
    """`claude -p` (stream-json, hook events included) against a scripted endpoint whose
    model answers at once (or plays `steps`): (endpoint, exit code, events, stderr, stdout).
    With the daemon down its port is not carried into Claude Code's namespace (the bridge
    would accept and close, a daemon answering nothing rather than one not there)."""
    script = Script(steps or [Turn("Done: %s." % marker)], marker=marker)
    ports = [urlsplit(daemon.url).port] if daemon_up else []
    with Endpoint("anthropic", script) as endpoint, \
            claude.reaching(urlsplit(endpoint.url).port, *ports) as via:
        code, out, err = claude.run(
            "-p", "%s: start the day." % marker, "--output-format", "stream-json", "--verbose",
            "--include-hook-events", *extra, via=via, timeout=600,
            env=dict(env or {}, ANTHROPIC_BASE_URL=endpoint.url,
                     ANTHROPIC_API_KEY="sk-ant-dummy-hook"))
    events = []
    for line in out.splitlines():
        if line.strip():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return endpoint, code, events, err, out


def claude_hook_events(events):
    """Claude Code's SessionStart hook lifecycle events (--include-hook-events)."""
    return [event for event in events if event.get("type") == "system"
            and str(event.get("subtype", "")).startswith("hook_")
            and "SessionStart" in json.dumps(event)]


def claude_started_well(code, events, err, out, endpoint):
    """Claude Code ran the turn and ended well, and its SessionStart hook exited 0."""
    story = "claude exit %r\nstderr:\n%s\nstdout:\n%s\nendpoint:\n%s" % (
        code, err[-3000:], out[-4000:], endpoint.recorder.summary())
    assert endpoint.recorder.errors == [], story
    assert code == 0 and events and events[-1].get("is_error") is False, story
    assert endpoint.script.finished, story
    answered = [(event.get("exit_code"), event.get("outcome"), event.get("stderr"))
                for event in claude_hook_events(events) if event["subtype"] == "hook_response"]
    assert answered == [(0, "success", "")], (answered, story)
    return story


def claude_install(claude, kit_python, pyz, kit):
    blocks = printed_blocks(kit_python.write_kit(pyz, kit, claude.config_dir, claude.home))
    install, _ = commands_for(blocks, "claude")
    run_printed(lambda argv, answer: claude.run(*argv[1:], timeout=300), install)
    handler = kit_hook_commands(kit / KIT)
    return kit, handler


def host_runner(home, cwd):
    def run(argv, stdin=b""):
        done = subprocess.run(argv, cwd=str(cwd), env=clean_env(home), input=stdin,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=SAFETY_TIMEOUT)
        return (done.returncode, done.stdout.decode("utf-8", "replace"),
                done.stderr.decode("utf-8", "replace"))
    return run


def test_claude_code_starts_with_the_pack(claude, pyz, kit_python, daemon, config, private_place,
                                          tmp_path):
    kit, handler = claude_install(claude, kit_python, pyz, private_place / "kit")
    assert " ".join(HOOK_WORDS) in handler["command"] and str(kit / KIT / "memprove_mcp.pyz") \
        in handler["command"], handler
    log = tmp_path / "hook.log"
    env = {"MEMPROVE_MCP_LOG": str(log)}
    run = host_runner(claude.home, claude.project_dir)
    serve = [sys.executable, str(pyz), "mcp", "serve", "--config-dir", str(claude.config_dir)]
    seen = {}

    # 1. No Task in the context: the session starts as before, the hook is silent.
    endpoint, code, events, err, out = claude_session(claude, daemon, "HOOK-CLAUDE-0", env=env)
    claude_started_well(code, events, err, out, endpoint)
    no_hook_text(endpoint, config.token)
    seen[NO_TASK.name] = log_lines(log)
    assert [(line[1], line[2]) for line in seen[NO_TASK.name]] == [("startup", NO_TASK.logged)], \
        seen[NO_TASK.name]
    report("claude-code", "hook events, no Task", claude_hook_events(events))

    # 2. A Task: the first request holds the Pack, before any tool call.
    begin_task(run, serve, "claude-code")
    log.unlink()
    started = utc_now()
    endpoint, code, events, err, out = claude_session(claude, daemon, "HOOK-CLAUDE-1", env=env)
    finished = utc_now()
    story = claude_started_well(code, events, err, out, endpoint)
    expected = pack_text(run, serve, "claude-code")
    endpoint.recorder.dump(tmp_path / "claude-1.jsonl")
    found = claude_hook_texts(first_scripted(endpoint), len(expected))
    assert len(found) == 1, (found, story)
    index, role, text = found[0]
    same_pack(text, expected, started, finished)
    seen["Pack"] = log_lines(log)
    assert [(line[1], line[2]) for line in seen["Pack"]] == [("startup", "pack")], seen["Pack"]
    session_id = events[0]["session_id"]
    report("claude-code", "Pack in messages[%d] (role %s)" % (index, role), text[:160])
    report("claude-code", "hook events, Pack", claude_hook_events(events))
    token_in_no_request(endpoint, config.token)

    # 3. /compact: the hook runs again (source compact), and the next request of that
    # session holds the Pack again.
    log.unlink()
    started = utc_now()
    script = Script([Turn("Compacted.")], marker="never-scripted")
    with Endpoint("anthropic", script) as endpoint, \
            claude.reaching(urlsplit(endpoint.url).port, urlsplit(daemon.url).port) as via:
        code, out, err = claude.run(
            "-p", "/compact", "--resume", session_id, "--output-format", "stream-json",
            "--verbose", via=via, timeout=600,
            env=dict(env, ANTHROPIC_BASE_URL=endpoint.url, ANTHROPIC_API_KEY="sk-ant-dummy-hook"))
    assert code == 0 and "compact_boundary" in out, (code, err[-2000:], out[-3000:])
    token_in_no_request(endpoint, config.token)
    endpoint, code, events, err, out = claude_session(
        claude, daemon, "HOOK-CLAUDE-3", "--resume", session_id, env=env)
    finished = utc_now()
    assert code == 0 and events and events[-1].get("is_error") is False, (code, err, out[-3000:])
    expected = pack_text(run, serve, "claude-code")
    endpoint.recorder.dump(tmp_path / "claude-3.jsonl")
    # Resumed, the conversation's first user message is the summary: the request is the
    # first one that carries this run's prompt.
    asked = [exchange.json for exchange in endpoint.recorder.routed("messages")
             if b"HOOK-CLAUDE-3" in exchange.body]
    assert asked, endpoint.recorder.summary()
    found = claude_hook_texts(asked[0], len(expected))
    assert found, "no Pack in the first request after /compact\n%s" % json.dumps(asked[0])[:4000]
    for _, _, text in found:
        same_pack(text, expected, started, finished)
    seen["compact"] = log_lines(log)
    sources = [(line[1], line[2]) for line in seen["compact"]]
    assert ("compact", "pack") in sources and ("resume", "pack") in sources, sources
    report("claude-code", "after /compact: Pack copies in the next request", len(found))
    token_in_no_request(endpoint, config.token)

    # 4. No token, then the daemon down: silent, the session as before.
    def session(marker, silence):
        endpoint, code, events, err, out = claude_session(
            claude, daemon, marker, env=env, daemon_up=silence is not DAEMON_DOWN)
        claude_started_well(code, events, err, out, endpoint)
        return endpoint

    seen.update(silences(claude.config_dir, "claude", daemon, session, log, config.token))
    report("claude-code", "log lines", seen)
    for name, lines in seen.items():
        assert all(config.token not in json.dumps(line) for line in lines), name
    token_nowhere(config.token, claude.home, claude.config_dir / "token")


# ---------------------------------------------------------------------------
# Codex CLI and Gemini CLI (the agent tier's namespace: interop/agents.py)
# ---------------------------------------------------------------------------

def agent_runner_in(agent):
    """run(argv, stdin) as the user, in the project, inside the agent's namespace."""
    return lambda argv, stdin=b"": agent.run(*argv, stdin=stdin)


def app_server(agent, messages, timeout=60):
    """The answers of `codex app-server` (stdio JSON-RPC) to `messages`, by id."""
    proc = subprocess.Popen(agent.netns.prefix + ["codex", "app-server"], cwd=str(agent.project),
                            env=dict(agent.env, PWD=str(agent.project)), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    wanted = {message["id"] for message in messages if "id" in message}
    answers, pending = {}, b""
    deadline = time.monotonic() + timeout
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
        proc.stdin.flush()
        while wanted - set(answers) and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if message.get("id") in wanted:
                    answers[message["id"]] = message
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not wanted - set(answers), "codex app-server did not answer: %s" % answers
    return answers


def codex_hooks(agent):
    """`hooks/list` for the project: the SessionStart hooks Codex knows, as it lists them."""
    answers = app_server(agent, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "memprove-interop", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list",
         "params": {"cwds": [str(agent.project)]}}])
    (listed,) = answers[2]["result"]["data"]
    return [hook for hook in listed["hooks"] if hook["eventName"] == "sessionStart"]


def codex_trusted_hash(command, timeout=600):
    """The hash Codex 0.171.0 keeps as a hook's `trusted_hash` (measured against
    `hooks/list`'s currentHash): sha256 of the compact, key-sorted JSON of the handler's
    identity, for a SessionStart entry with no matcher, no statusMessage and the default
    timeout."""
    import hashlib
    identity = {"event_name": "session_start", "hooks": [
        {"async": False, "command": command, "timeout": timeout, "type": "command"}]}
    data = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def kit_hook_in_codex(agent):
    """The kit's SessionStart hook as `hooks/list` shows it (exactly one)."""
    hooks = [hook for hook in codex_hooks(agent) if hook["source"] == "plugin"
             and hook["pluginId"] == "memprove@memprove"]
    assert len(hooks) == 1, hooks
    return hooks[0]


SCREEN_CODES = re.compile(r"\x1b\[[0-9;?>]*[A-Za-z~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def codex_trusts_the_hooks(agent, endpoint):
    """What the printed line says to do: start `codex` (its terminal interface, in a pseudo
    terminal, in the project) and trust the hooks: at "Hooks need review" the test picks
    "Trust all and continue" (the second choice), waits until Codex has recorded the trust
    in config.toml, and ends Codex.  Returns what Codex showed, for a failure's reader."""
    import fcntl
    import pty
    import struct
    import termios
    provider = ('model_providers.scripted={name="scripted", base_url="%s/v1", '
                'wire_api="responses", env_key="SCRIPTED_API_KEY"}' % endpoint.url)
    argv = agent.netns.prefix + ["codex", "-c", 'model_provider="scripted"', "-c", provider,
                                 "-m", "scripted-model"]
    env = dict(agent.env, SCRIPTED_API_KEY="x", TERM="xterm-256color", PWD=str(agent.project))
    env.pop("NO_COLOR", None)
    config_toml = Path(agent.env.get("CODEX_HOME") or agent.home / ".codex") / "config.toml"
    pid, terminal = pty.fork()
    if pid == 0:                                          # the child: becomes codex
        try:
            os.chdir(str(agent.project))
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    shown, chose, reviewed = b"", False, False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([terminal], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(terminal, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                shown += chunk
                if b"\x1b[6n" in chunk:                  # where is the cursor? (top left)
                    os.write(terminal, b"\x1b[1;1R")
            text = SCREEN_CODES.sub(" ", shown.decode("utf-8", "replace"))
            if not chose and "Trust all and continue" in text:
                chose = True
                # Codex discards what is typed before its prompt reads keys (a key sent on
                # the prompt's first frame was dropped, or ended Codex with "timed out
                # discarding buffered terminal input"), and shows no sign of being ready:
                # the test types as a person does, after reading.
                time.sleep(1.0)
                os.write(terminal, b"\x1b[B")            # down to the second choice
                time.sleep(0.3)
                os.write(terminal, b"\r")
            elif chose and not reviewed and "t trust all" in text:
                reviewed = True                           # the first choice was taken: the
                os.write(terminal, b"t")                  # review lists them; trust all
            if chose and "trusted_hash" in config_toml.read_text("utf-8"):
                break
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(terminal)
        agent.end_leftovers(grace=0)
    return re.sub(r"\s+", " ", SCREEN_CODES.sub(" ", shown.decode("utf-8", "replace")))[-3000:]


def doctor_hook(pyz, agent):
    """`mcp doctor --client codex --json`'s `hook` check, run by the user in the project."""
    done = agent.run(sys.executable, str(pyz), "mcp", "doctor", "--client", agent.name,
                     "--config-dir", str(agent.config_dir), "--json")
    checks = dict((check["name"], check) for check in json.loads(done[1])["checks"])
    return checks["hook"]


def codex_session(agent, endpoint_in, marker, trusted=True):
    """`codex exec` against a scripted endpoint whose model answers at once; Codex says on
    standard error that the trusted hook ran and completed (exit 0), or nothing of an
    untrusted one: (endpoint, those lines, the story)."""
    from interop.test_plugin_kit import codex_exec
    endpoint = endpoint_in("openai-responses", Script([Turn("Done: %s." % marker)],
                                                      marker=marker))
    code, out, err = codex_exec(agent, endpoint, "%s: start the day." % marker)
    story = describe(code, out, err, endpoint)
    assert code == 0 and endpoint.script.finished and endpoint.recorder.errors == [], story
    hook_lines = [line for line in err.splitlines() if line.startswith("hook: SessionStart")]
    assert hook_lines == (["hook: SessionStart", "hook: SessionStart Completed"] if trusted
                          else []), story
    return endpoint, hook_lines, story


def silences(config_dir, name, daemon, session, log, token):
    """No token, then the daemon down, each a session(marker, silence) -> endpoint that must
    start as before, with no hook text; MEMPROVE_MCP_LOG's lines, by case."""
    token_file = config_dir / "token"
    away = config_dir / "token.away"
    seen = {}
    for silence in (NO_TOKEN, DAEMON_DOWN):
        if silence is NO_TOKEN:
            token_file.rename(away)
        else:
            away.rename(token_file)
            daemon_down(daemon)
        if log.exists():
            log.unlink()
        endpoint = session("HOOK-%s-%s" % (name.upper(), silence.logged.upper()), silence)
        no_hook_text(endpoint, token)
        seen[silence.name] = log_lines(log)
        assert [(line[1], line[2]) for line in seen[silence.name]] == [
            ("startup", silence.logged)], seen[silence.name]
    return seen


def test_codex_starts_with_the_pack(make_agent, endpoint_in, ns_daemon, pyz, next_pyz, kit_python,
                                    config, private_place, tmp_path):
    agent = make_agent("codex")
    log = tmp_path / "hook.log"
    agent.env["MEMPROVE_MCP_LOG"] = str(log)
    kit = private_place / "kit"
    printed = kit_python.write_kit(pyz, kit, agent.config_dir, agent.home)
    blocks = printed_blocks(printed)
    said = re.findall(r"Codex reads it in place: [^:]*: start `codex` once and trust the hooks\.",
                      " ".join(printed.split()))
    assert said, "the printed lines do not say that Codex runs the hook only once trusted:\n" \
        + printed
    install, _ = commands_for(blocks, "codex")
    run_printed(agent_runner(agent), install)
    kit_hook_commands(kit / KIT)

    # Installed, the hook is not trusted: Codex skips it without a word.
    assert kit_hook_in_codex(agent)["trustStatus"] == "untrusted"
    endpoint, hook_lines, story = codex_session(agent, endpoint_in, "HOOK-CODEX-UNTRUSTED",
                                                trusted=False)
    no_hook_text(endpoint, config.token)
    assert not log.exists(), story

    # As the printed line says: start codex once and trust the hooks.
    shown = codex_trusts_the_hooks(agent, endpoint_in(
        "openai-responses", Script([Turn("Done.")], marker="HOOK-CODEX-TUI")))
    hook = kit_hook_in_codex(agent)
    assert hook["trustStatus"] == "trusted", (hook, shown)
    handler_hash = hook["currentHash"].split("/")[0]
    assert handler_hash == codex_trusted_hash(hook["command"], hook["timeoutSec"]), hook
    recorded = (Path(agent.env.get("CODEX_HOME") or agent.home / ".codex") /
                "config.toml").read_text("utf-8")
    assert '[hooks.state.%s]\ntrusted_hash = "%s"\n' % (json.dumps(hook["key"]), handler_hash) \
        in recorded, recorded
    report("codex", "trust recorded by `codex` (Trust all and continue)",
           recorded[recorded.index("[hooks.state."):])
    report("codex", "doctor's hook check, trusted", doctor_hook(pyz, agent))
    run = agent_runner_in(agent)
    serve = [sys.executable, str(pyz), "mcp", "serve", "--config-dir", str(agent.config_dir)]
    client = EXPECTED_AGENT["codex"]
    seen = {}

    endpoint, hook_lines, story = codex_session(agent, endpoint_in, "HOOK-CODEX-0")
    no_hook_text(endpoint, config.token)
    seen[NO_TASK.name] = log_lines(log)
    assert [(line[1], line[2]) for line in seen[NO_TASK.name]] == [("startup", NO_TASK.logged)], (
        seen, story)
    report("codex", "stderr hook lines, no Task", hook_lines)

    begin_task(run, serve, client)
    log.unlink()
    started = utc_now()
    endpoint, hook_lines, story = codex_session(agent, endpoint_in, "HOOK-CODEX-1")
    finished = utc_now()
    expected = pack_text(run, serve, client)
    endpoint.recorder.dump(tmp_path / "codex-1.jsonl")
    found = codex_hook_texts(first_scripted(endpoint))
    assert len(found) == 1, (found, story)
    index, text = found[0]
    same_pack(text, expected, started, finished)
    seen["Pack"] = log_lines(log)
    assert [(line[1], line[2]) for line in seen["Pack"]] == [("startup", "pack")], seen
    report("codex", "Pack in input[%d] (developer)" % index, text[:160])
    report("codex", "stderr hook lines, Pack", hook_lines)
    token_in_no_request(endpoint, config.token)

    def session(marker):
        return codex_session(agent, endpoint_in, marker)[0]
    seen.update(silences(agent.config_dir, agent.name, ns_daemon,
                         lambda marker, silence: session(marker), log, config.token))
    report("codex", "log lines", seen)
    token_nowhere(config.token, agent.home, agent.config_dir / "token")

    # The kit written again from another .pyz (the hook's command unchanged) and updated as
    # printed: Codex's trust also covers the plugin's content, so the hook needs review again.
    blocks = printed_blocks(kit_python.write_kit(next_pyz, kit, agent.config_dir, agent.home))
    _, update = commands_for(blocks, "codex")
    run_printed(agent_runner(agent), update)
    again = kit_hook_in_codex(agent)
    assert (again["command"], again["currentHash"].split("/")[0]) == (hook["command"],
                                                                       handler_hash), again
    report("codex", "trust after the printed update", again["trustStatus"])
    report("codex", "doctor's hook check after the update", doctor_hook(next_pyz, agent))
    assert again["trustStatus"] == "modified", again


def test_gemini_starts_with_the_pack(make_agent, endpoint_in, ns_daemon, pyz, kit_python, config,
                                     private_place, tmp_path):
    first = endpoint_in("gemini", Script([Turn("Done.")], marker="HOOK-GEMINI-INSTALL"))
    agent = gemini_agent(make_agent, first, lambda agent: [agent.project])
    log = tmp_path / "hook.log"
    agent.env["MEMPROVE_MCP_LOG"] = str(log)
    kit = private_place / "kit"
    blocks = printed_blocks(kit_python.write_kit(pyz, kit, agent.config_dir, agent.home))
    install, _ = commands_for(blocks, "gemini")
    run_printed(agent_runner(agent), install, ANSWERS["gemini"])
    kit_hook_commands(kit)          # Gemini's extension is the kit's folder itself
    run = agent_runner_in(agent)
    serve = [sys.executable, str(pyz), "mcp", "serve", "--config-dir", str(agent.config_dir)]
    client = EXPECTED_AGENT["gemini"]
    seen = {}

    def session(marker):
        endpoint = endpoint_in("gemini", Script([Turn("Done: %s." % marker)], marker=marker))
        code, out, err = agent.run("gemini", "-m", GEMINI_MODEL, "-y", "-p",
                                   "%s: start the day." % marker,
                                   env={"GOOGLE_GEMINI_BASE_URL": endpoint.url})
        story = describe(code, out, err, endpoint)
        assert code == 0 and endpoint.script.finished and endpoint.recorder.errors == [], story
        assert "hook" not in err.lower() or "fail" not in err.lower(), story
        return endpoint, story, err

    endpoint, story, err = session("HOOK-GEMINI-0")
    no_hook_text(endpoint, config.token)
    seen[NO_TASK.name] = log_lines(log)
    assert [(line[1], line[2]) for line in seen[NO_TASK.name]] == [("startup", NO_TASK.logged)], (
        seen, story)

    begin_task(run, serve, client)
    log.unlink()
    started = utc_now()
    endpoint, story, err = session("HOOK-GEMINI-1")
    finished = utc_now()
    expected = pack_text(run, serve, client)
    endpoint.recorder.dump(tmp_path / "gemini-1.jsonl")
    found = gemini_hook_texts(first_scripted(endpoint))
    assert len(found) == 1, (found, story)
    where, text, after = found[0]
    assert not re.search(r"[<>&]", expected), "TEXT has a character Gemini escapes"
    same_pack(text, expected, started, finished)
    seen["Pack"] = log_lines(log)
    assert [(line[1], line[2]) for line in seen["Pack"]] == [("startup", "pack")], seen
    report("gemini", "Pack in contents%s, then %r" % (list(where), after[:80]), text[:160])
    # The kit's context file (contextFileName), which outlives a compression, is there too.
    gemini_md = max((kit / "GEMINI.md").read_text("utf-8").splitlines(), key=len)
    assert any(gemini_md in text for text in texts_in(first_scripted(endpoint))), gemini_md
    token_in_no_request(endpoint, config.token)

    seen.update(silences(agent.config_dir, agent.name, ns_daemon,
                         lambda marker, silence: session(marker)[0], log, config.token))
    report("gemini", "log lines", seen)
    token_nowhere(config.token, agent.home, agent.config_dir / "token")


# ---------------------------------------------------------------------------
# Claude Code for Windows, under Wine 10
# ---------------------------------------------------------------------------

def test_windows_claude_code_starts_with_the_pack(claude_windows, windows_pyz, daemon, config,
                                                  tmp_path):
    """claude.exe with a kit written by Windows Python (python.org's CPython 3.13), in a
    folder whose name has a space, installed with the printed PowerShell commands: the first
    request holds the Pack of the Task begun through the kit's own .pyz."""
    claude = claude_windows
    wine = claude.wine
    kit = tmp_path / "my kit"
    blocks = windows_kit(claude, windows_pyz, kit)
    for argv in (powershell_words(line) for line in blocks["Claude Code:"]):
        assert argv[0] == "claude", blocks
        code, out, err = claude.run(*argv[1:], timeout=300)
        assert code == 0, "`%s` exited %d\n%s\n%s" % (" ".join(argv), code, out, err)
    # Its shape is Windows' own (which entry each client runs there is the kit's business):
    # shown, not checked; what counts is what reaches the model.
    report("claude-code (Windows)", "the kit's hooks.json",
           (kit / KIT / "hooks" / "hooks.json").read_text("utf-8"))

    def run(argv, stdin=b""):
        done = subprocess.run(argv, cwd=str(claude.project_dir), env=claude.env, input=stdin,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=SAFETY_TIMEOUT)
        return (done.returncode, done.stdout.decode("utf-8", "replace"),
                done.stderr.decode("utf-8", "replace"))
    # The kit's own .pyz, as its entries name it (the configuration directory is
    # print-config's default there, %APPDATA%\memprove, as the kit's).
    serve = [str(wine.python), str(kit / KIT / "memprove_mcp.pyz"), "mcp", "serve"]
    begin_task(run, serve, "claude-code")
    log = tmp_path / "hook.log"
    started = utc_now()
    endpoint, code, events, err, out = claude_session(
        claude, daemon, "HOOK-WINDOWS-1", env={"MEMPROVE_MCP_LOG": wine.windows(log)})
    finished = utc_now()
    endpoint.recorder.dump(tmp_path / "windows-1.jsonl")
    report("claude-code (Windows)", "hook events", claude_hook_events(events))
    story = claude_started_well(code, events, err, out, endpoint)
    expected = pack_text(run, serve, "claude-code")
    found = claude_hook_texts(first_scripted(endpoint), len(expected))
    assert len(found) == 1, (found, log_lines(log), story)
    index, role, text = found[0]
    same_pack(text, expected, started, finished)
    assert [(line[1], line[2]) for line in log_lines(log)] == [("startup", "pack")], story
    report("claude-code (Windows)", "Pack in messages[%d] (role %s)" % (index, role), text[:160])
    token_in_no_request(endpoint, config.token)


# ---------------------------------------------------------------------------
# The stop hook: one extra turn to record, after a long silence (issue 40 item 4)
# ---------------------------------------------------------------------------
# shared/spec/stop-hook.md: the kit's hooks.json also runs `mcp hook stop` (Claude Code and
# Codex: Stop; Gemini CLI: AfterAgent).  In each client, installed as printed, with Task 1
# begun and checkpointed through `mcp serve` (its Session s1 open), four headless turns:
#
# 1. the Session's last record 5 minutes old: the hook is silent, the turn takes one request;
# 2. 45 minutes old: exactly one extra model request, holding R (Claude Code's `Stop hook
#    feedback:` reminder, Codex's `<hook_prompt>`, Gemini's user turn), and none after it
#    (the stop that follows it has stop_hook_active: the hook says `again`);
# 3. 45 minutes old, and the model answers the extra turn with memprove's `checkpoint`
#    reaffirming the next action: the turn ends after it, without a second R;
# 4. the next turn's stop is silent: the checkpoint is the last record (`recorded 0min ago`).
#
# "45 minutes old" is made by age_session (support.py): the Session's times in the reference
# daemon's tables are set back; its ledger's entries, hash chain and all, are not touched.
# No token in any request of any turn.

STOP_REASON = ("memprove: Session s1 of Task 1 has recorded nothing in the ledger for %d "
               "minutes. Before you stop: if this work found a fact, opened or closed an open "
               "item, made a decision or changed the next action, record it with memprove's "
               "`checkpoint` (or `decide`). If nothing changed, call `checkpoint` reaffirming "
               "the next action c%d. Then stop.")
STOP_SIGN = "has recorded nothing in the ledger for"
MAIN_ROUTES = ("messages", "responses", "generate", "stream_generate")
BLOCKED = re.compile(r"blocked ([0-9]+)min\Z")


def stop_log_lines(path):
    """What each stop hook run said in MEMPROVE_MCP_LOG ("blocked 45min", "again", ...)."""
    if not path.exists():
        return []
    return [m.group(2) for m in map(STOP_LOG_LINE.match, path.read_text("utf-8").splitlines())
            if m]


def ledger_rows(daemon, sql, *args):
    import sqlite3
    connection = sqlite3.connect(str(daemon.db_path))
    try:
        return connection.execute(sql, args).fetchall()
    finally:
        connection.close()


def next_action_number(daemon):
    """The number of the Task's one active next action, in the daemon's store."""
    rows = ledger_rows(daemon, "SELECT number FROM claims WHERE kind = 'next_action' AND "
                       "state = 'active'")
    assert len(rows) == 1, rows
    return rows[0][0]


def conversation_requests(endpoint):
    """[(exchange, conversation)] of the scripted conversation's model requests, in order
    (a client's title, quota or token-count requests aside)."""
    found = []
    dialect = endpoint.dialect
    for exchange in endpoint.recorder.exchanges:
        body = exchange.json
        if exchange.route not in MAIN_ROUTES or not isinstance(body, dict):
            continue
        conversation = dialect.conversation(body, True) if isinstance(
            dialect, DIALECTS["gemini"]) else dialect.conversation(body)
        if endpoint.script.is_scripted(conversation):
            found.append((exchange, conversation))
    return found


def claude_stop_texts(body):
    """Claude Code's `Stop hook feedback:` reminders: (where, role, what follows the words
    to the reminder's end, the whole message)."""
    found = []
    for index, message in enumerate(body.get("messages", [])):
        for text in texts_in(message.get("content")):
            for match in re.finditer(r"Stop hook feedback:\n(.*?)(?:\n</system-reminder>|\Z)",
                                     text, re.S):
                found.append(("messages[%d]" % index, message.get("role"), match.group(1), text))
    return found


def codex_stop_texts(body):
    """Codex's user `<hook_prompt hook_run_id=...>R</hook_prompt>` items, unwrapped."""
    found = []
    for index, item in enumerate(body.get("input", [])):
        if item.get("role") != "user":
            continue
        for text in texts_in(item.get("content")):
            for match in re.finditer(r'<hook_prompt hook_run_id="[^"]*">(.*?)</hook_prompt>',
                                     text, re.S):
                found.append(("input[%d]" % index, "user", match.group(1), text))
    return found


def gemini_stop_texts(body):
    """Gemini's user turns made of the hook's reason alone."""
    found = []
    for index, content in enumerate(body.get("contents", [])):
        parts = content.get("parts") or []
        texts = [part.get("text") for part in parts]
        if content.get("role", "user") == "user" and any(
                isinstance(text, str) and STOP_SIGN in text for text in texts):
            found.append(("contents[%d]" % index, "user", texts[0] if len(texts) == 1
                          else texts, json.dumps(content, ensure_ascii=False)))
    return found


def no_stop_text(endpoint, story):
    for exchange in endpoint.recorder.exchanges:
        assert STOP_SIGN not in " ".join(texts_in(exchange.json)), (exchange.number, story)


def asked_once(endpoint, stop_texts, reason, count, story):
    """The conversation took `count` requests; R first reached the model in the second (the
    extra turn the block gave), once, in the client's own form; every later request holds
    that one R and no second; no request outside the conversation holds R.  Returns the
    extra request's message, quoted, for the reader."""
    requests = conversation_requests(endpoint)
    assert len(requests) == count, (len(requests), count, story)
    found = [stop_texts(exchange.json) for exchange, _ in requests]
    assert found[0] == [], (found[0], story)
    for each in found[1:]:
        assert [text for _, _, text, _ in each] == [reason], (each, reason, story)
    inside = {exchange.number for exchange, _ in requests}
    for exchange in endpoint.recorder.exchanges:
        if exchange.number not in inside:
            assert reason not in " ".join(texts_in(exchange.json)), (exchange.number, story)
    where, role, _, message = found[1][0]
    return "request 2 of %d, %s (%s): %r" % (count, where, role, message)


def stop_cases(client, session, checkpoint_turns, stop_texts, daemon, log, token,
               after_checkpoint="again"):
    """The four turns above in one client.  session(marker, steps) runs one headless turn
    against the scripted model playing `steps` (checking that the client ended well and the
    script was played) and returns (endpoint, story); checkpoint_turns(number) are the
    model's turns that call memprove's `checkpoint` with `reaffirm: [number]`, its last the
    call (what comes before it: a client's own, Claude Code's ToolSearch).
    after_checkpoint: what the stop hook says at the stop that ends the extra turn with
    the checkpoint in it (`again` where the client says stop_hook_active there)."""
    number = next_action_number(daemon)
    took = {}

    def turn(case, minutes, steps):
        if minutes is not None:
            age_session(daemon.db_path, 1, minutes)
        if log.exists():
            log.unlink()
        began = time.monotonic()
        endpoint, story = session(case, steps)
        took[case] = "%.1fs" % (time.monotonic() - began)
        token_in_no_request(endpoint, token)
        return endpoint, stop_log_lines(log), story

    def reason_of(lines, story, then="again"):
        blocked = BLOCKED.match(lines[0]) if lines else None
        assert blocked and int(blocked.group(1)) in (45, 46), (lines, story)
        assert lines[1:] == [then], (lines, story)
        return STOP_REASON % (int(blocked.group(1)), number)

    # 1. 5 minutes: silent.
    case = "STOP-%s-5MIN" % client.upper()
    endpoint, lines, story = turn(case, 5, [Turn("Done: %s." % case)])
    assert lines == ["recorded 5min ago"], (lines, story)
    assert len(conversation_requests(endpoint)) == 1, story
    no_stop_text(endpoint, story)
    report(client, "5 min: requests, stop log", (1, lines))

    # 2. 45 minutes: one extra request holding R, none after it.
    case = "STOP-%s-45MIN" % client.upper()
    endpoint, lines, story = turn(case, 45, [Turn("Done: %s." % case),
                                             Turn("Nothing changed: %s." % case)])
    reason = reason_of(lines, story)
    report(client, "45 min: stop log %s; the extra request" % lines,
           asked_once(endpoint, stop_texts, reason, 2, story))

    # 3. 45 minutes, and the model checkpoints in the extra turn.
    case = "STOP-%s-CHECKPOINT" % client.upper()
    calls = checkpoint_turns(number)
    steps = [Turn("Done: %s." % case)] + calls + [Turn("Recorded: %s." % case)]
    before = utc_now()
    endpoint, lines, story = turn(case, 45, steps)
    reason = reason_of(lines, story, after_checkpoint)
    asked_once(endpoint, stop_texts, reason, len(steps), story)
    name = calls[-1].calls[0].name
    result = conversation_requests(endpoint)[-1][1].result_of(name)
    assert result and result.is_error in (None, False), (result, story)
    assert not re.match(r"[a-z_]+: ", result.text) and "reaffirmed" in result.text, result.text
    (reaffirmed,) = ledger_rows(daemon, "SELECT reaffirmed_at FROM claims WHERE number = ?",
                                number)
    assert reaffirmed[0] >= before, (reaffirmed, before)
    report(client, "checkpoint in the extra turn: requests, stop log, result",
           (len(steps), lines, result.text[:200]))

    # 4. The next stop: silent, the checkpoint is the last record.
    case = "STOP-%s-NEXT" % client.upper()
    endpoint, lines, story = turn(case, None, [Turn("Done: %s." % case)])
    assert lines == ["recorded 0min ago"], (lines, story)
    assert len(conversation_requests(endpoint)) == 1, story
    no_stop_text(endpoint, story)
    report(client, "the next stop: stop log", lines)
    report(client, "time per turn", took)


CLAUDE_TOOLS = "mcp__plugin_memprove_memprove__"


def test_claude_code_stop_asks_once(claude, pyz, kit_python, daemon, config, private_place,
                                    tmp_path):
    claude_install(claude, kit_python, pyz, private_place / "kit")
    log = tmp_path / "hook.log"
    run = host_runner(claude.home, claude.project_dir)
    serve = [sys.executable, str(pyz), "mcp", "serve", "--config-dir", str(claude.config_dir)]
    begin_task(run, serve, "claude-code")

    def session(marker, steps):
        endpoint, code, events, err, out = claude_session(
            claude, daemon, marker, "--allowedTools", CLAUDE_TOOLS + "*", steps=steps,
            env={"MEMPROVE_MCP_LOG": str(log)})
        endpoint.recorder.dump(tmp_path / ("%s.jsonl" % marker))
        return endpoint, claude_started_well(code, events, err, out, endpoint)

    def checkpoint_turns(number):
        return [Turn(ToolCall("ToolSearch", {"query": "select:" + CLAUDE_TOOLS + "checkpoint"})),
                Turn(ToolCall(CLAUDE_TOOLS + "checkpoint", {"reaffirm": [number]}))]

    stop_cases("claude-code", session, checkpoint_turns, claude_stop_texts, daemon, log,
               config.token)
    token_nowhere(config.token, claude.home, claude.config_dir / "token")


def test_codex_stop_asks_once(make_agent, endpoint_in, ns_daemon, pyz, kit_python, config,
                              private_place, tmp_path):
    from interop.test_plugin_kit import codex_exec
    agent = make_agent("codex")
    log = tmp_path / "hook.log"
    agent.env["MEMPROVE_MCP_LOG"] = str(log)
    blocks = printed_blocks(kit_python.write_kit(pyz, private_place / "kit", agent.config_dir,
                                                 agent.home))
    install, _ = commands_for(blocks, "codex")
    run_printed(agent_runner(agent), install)
    # As printed: start codex once and trust the hooks (both: SessionStart and Stop).
    shown = codex_trusts_the_hooks(agent, endpoint_in(
        "openai-responses", Script([Turn("Done.")], marker="STOP-CODEX-TUI")))
    assert kit_hook_in_codex(agent)["trustStatus"] == "trusted", shown
    begin_task(agent_runner_in(agent), [sys.executable, str(pyz), "mcp", "serve",
                                        "--config-dir", str(agent.config_dir)],
               EXPECTED_AGENT["codex"])
    said = {}

    def session(marker, steps):
        endpoint = endpoint_in("openai-responses", Script(steps, marker=marker))
        code, out, err = codex_exec(agent, endpoint, "%s: start the day." % marker)
        endpoint.recorder.dump(tmp_path / ("%s.jsonl" % marker))
        story = describe(code, out, err, endpoint)
        assert code == 0 and endpoint.script.finished and endpoint.recorder.errors == [], story
        said[marker] = [line for line in err.splitlines() if line.startswith("hook: Stop")]
        return endpoint, story

    def checkpoint_turns(number):
        return [Turn(ToolCall("mcp__memprove.checkpoint", {"reaffirm": [number]}))]

    stop_cases("codex", session, checkpoint_turns, codex_stop_texts, ns_daemon, log,
               config.token)
    report("codex", "stderr stop lines", said)
    token_nowhere(config.token, agent.home, agent.config_dir / "token")


def test_gemini_stop_asks_once(make_agent, endpoint_in, ns_daemon, pyz, kit_python, config,
                               private_place, tmp_path):
    first = endpoint_in("gemini", Script([Turn("Done.")], marker="STOP-GEMINI-INSTALL"))
    agent = gemini_agent(make_agent, first, lambda agent: [agent.project])
    log = tmp_path / "hook.log"
    agent.env["MEMPROVE_MCP_LOG"] = str(log)
    blocks = printed_blocks(kit_python.write_kit(pyz, private_place / "kit", agent.config_dir,
                                                 agent.home))
    install, _ = commands_for(blocks, "gemini")
    run_printed(agent_runner(agent), install, ANSWERS["gemini"])
    begin_task(agent_runner_in(agent), [sys.executable, str(pyz), "mcp", "serve",
                                        "--config-dir", str(agent.config_dir)],
               EXPECTED_AGENT["gemini"])
    said = {}

    def session(marker, steps):
        endpoint = endpoint_in("gemini", Script(steps, marker=marker))
        code, out, err = agent.run("gemini", "-m", GEMINI_MODEL, "-y", "-p",
                                   "%s: start the day." % marker,
                                   env={"GOOGLE_GEMINI_BASE_URL": endpoint.url})
        endpoint.recorder.dump(tmp_path / ("%s.jsonl" % marker))
        story = describe(code, out, err, endpoint)
        assert code == 0 and endpoint.script.finished and endpoint.recorder.errors == [], story
        said[marker] = [line for line in err.splitlines() if "blocked" in line]
        return endpoint, story

    def checkpoint_turns(number):
        return [Turn(ToolCall("mcp_memprove_checkpoint", {"reaffirm": [number]}))]

    # Gemini says stop_hook_active: false at the stop after a tool call of the extra turn:
    # the hook reads the ledger there, and the checkpoint keeps it silent.
    stop_cases("gemini", session, checkpoint_turns, gemini_stop_texts, ns_daemon, log,
               config.token, after_checkpoint="recorded 0min ago")
    report("gemini", "stderr block lines", said)
    token_nowhere(config.token, agent.home, agent.config_dir / "token")
