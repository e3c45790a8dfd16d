"""The agent clients of clients.md against the .pyz, each configured with
`mcp print-config --client NAME`'s output used verbatim, each running a whole headless turn
against a scripted model endpoint in its own API (Amp: its health check only):

    Codex      `codex exec`                     OpenAI Responses
    Gemini     `gemini mcp list`, `gemini -p`   Gemini streamGenerateContent
               and an ACP session (roots)
    OpenCode   `opencode mcp list`, `opencode run`   Chat Completions
    Cline      `cline "..."`                    Chat Completions
    Continue   `cn -p`                          Chat Completions
    Amp        `amp mcp doctor`, user and workspace settings   (its agent runs server-side)

A turn calls `context`, then `tasks`, then ends; the test reads what the model got back (the
tool results in the follow-up request the client sent the endpoint) and checks it: the
Workspace and how it was found, the agent name from the client's `clientInfo`, the token taken
from the configuration directory (the client's environment holds none), and the daemon's task
list (the daemon saw `listTasks`).  The exchange itself is recorded too, without touching the
configuration: the .pyz starts through its shebang (`/usr/bin/env python3`), and a `python3`
first on the client's PATH puts the tee in front of it; every connection is then checked
against protocol.md, with the version the client asks and gets, and, where the Workspace came
from roots, the server's `roots/list` and the client's answer.

Each client runs with a throwaway HOME in a network namespace that has only loopback; the
model endpoint and the reference daemon listen on 127.0.0.1 *inside* that namespace (their
sockets are made by a thread that joined it), so nothing the client does can leave the
machine.  Where no namespace can be made here, everything runs on the host's loopback.
Every process left behind by a client (found by its HOME) is ended by its id.
"""

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from interop.agents import (EXPECTED_AGENT, EXPECTED_VERSION, GEMINI_MODEL, RUN_TIMEOUT,
                            describe, gemini_agent, result_object)
from interop.support import connections, transcripts
from interop.model_endpoint import DIALECTS, Script, ToolCall, Turn


# ---------------------------------------------------------------------------
# The turn and what the model got back
# ---------------------------------------------------------------------------

def marker_for(name):
    return "MEMPROVE-TURN-%s" % name.upper()


def prompt_for(name):
    return ("%s: call the memprove tools context and tasks, then say Done." % marker_for(name))


def turn_script(name, context_tool, tasks_tool):
    """context, then tasks, then the end of the model's turn."""
    return Script([Turn(ToolCall(context_tool, {})), Turn(ToolCall(tasks_tool, {})),
                   Turn("Done: the Workspace and its Tasks are known.")], marker=marker_for(name))


def final_conversation(endpoint):
    """The conversation of the last scripted request: it carries both tool results."""
    scripted = [exchange for exchange in endpoint.recorder.exchanges if exchange.step == 2]
    assert scripted, "the client never came back with both tool results\n%s" % (
        endpoint.recorder.summary())
    exchange = scripted[-1]
    dialect = endpoint.dialect
    body = exchange.json
    if isinstance(dialect, DIALECTS["gemini"]):
        return dialect.conversation(body, True)
    return dialect.conversation(body)


def check_exchange(agent, roots=None):
    """Every connection the tee recorded, checked against protocol.md (support.
    check_connection); the version each asked is the one the client is known to ask and the
    one it got; the turn's connection called `context` and `tasks`, and, when the Workspace
    came from roots (`roots`: the directory they must name), the server asked for them and
    the client's answer named it."""
    conns = connections(agent.wire)
    assert conns, "the client started no server"
    calls = []
    for conn in conns:
        served = agent.check_wire(conn)
        failure = conn.transcript()
        asked = [s for s in served if s["message"]["method"] == "initialize"]
        assert [s["message"]["params"]["protocolVersion"] for s in asked] == [
            EXPECTED_VERSION[agent.name]], failure
        assert asked[0]["response"]["result"]["protocolVersion"] == EXPECTED_VERSION[
            agent.name], failure
        called = [s["message"]["params"]["name"] for s in served
                  if s["message"]["method"] == "tools/call"]
        calls.extend(called)
        if called and roots:
            asked_roots = [line for line in conn.received() if b'"roots/list"' in line]
            assert asked_roots, "the server never asked for roots" + failure
            replies = [m for m in conn.sent() if "method" not in m and "result" in m
                       and isinstance(m["result"].get("roots"), list)]
            assert replies, "the client never answered roots/list" + failure
            named = [root.get("uri") for root in replies[-1]["result"]["roots"]]
            assert Path(roots).resolve().as_uri() in named, (named, failure)
    assert sorted(calls) == ["context", "tasks"], (calls, transcripts(conns))


def check_turn(agent, endpoint, daemon, context_tool, tasks_tool, found_by="working directory",
               root=None):
    """What the model got back from `context` and `tasks`; returns the context object."""
    failure = "\nendpoint:\n%s" % endpoint.recorder.summary()
    dump = agent.home.parent / ("%s-endpoint.jsonl" % agent.name)
    endpoint.recorder.dump(dump)                        # every request, for a failure's reader
    failure += "\n(every request and answer: %s)" % dump
    assert endpoint.recorder.errors == [], failure
    assert endpoint.script.finished, "the script was not played to its end" + failure
    conversation = final_conversation(endpoint)
    names = [result.name for result in conversation.tool_results]
    assert context_tool in names and tasks_tool in names, (names, failure)
    context_result = conversation.result_of(context_tool)
    tasks_result = conversation.result_of(tasks_tool)
    for result in (context_result, tasks_result):
        assert result.is_error in (None, False), result
        assert not re.match(r"[a-z_]+: ", result.text), "a Problem: %s" % result.text[:500]
    context = result_object(context_result, "workspace")
    root = str(Path(root or agent.project).resolve())
    workspace = context["workspace"]
    assert (workspace["root"], workspace["found_by"], workspace["marked"]) == (
        root, found_by, True), workspace
    assert context["agent"]["name"] == EXPECTED_AGENT[agent.name], context["agent"]
    assert context["agent"]["name_from"] == "client", context["agent"]
    # The token came from the configuration directory print-config names: the client's
    # environment holds none.
    assert context["config"]["config_dir"] == str(agent.config_dir), context["config"]
    assert context["config"]["token_from"] == "config", context["config"]
    tasks = result_object(tasks_result, "tasks")
    assert tasks["tasks"] == [] and tasks["workspace"] == root, tasks
    # The daemon was asked, with this test's token (the only one it accepts).
    answered = [(entry["op"], entry.get("status")) for entry in daemon.ops]
    assert ("listTasks", 200) in answered, answered
    agent.check_no_server_left()
    check_exchange(agent, roots=root if found_by == "roots" else None)
    return context


# ---------------------------------------------------------------------------
# Codex: `codex exec`, OpenAI Responses
# ---------------------------------------------------------------------------

def test_codex_exec_turn(make_agent, endpoint_in, ns_daemon):
    agent = make_agent("codex")
    codex_home = agent.home / ".codex"
    agent.env["CODEX_HOME"] = str(codex_home)
    stdout, stderr = agent.print_config()
    assert "config.toml" in stderr, stderr
    agent.write(codex_home / "config.toml", stdout)               # exactly what it printed
    script = turn_script("codex", "mcp__memprove.context", "mcp__memprove.tasks")
    endpoint = endpoint_in("openai-responses", script)
    provider = ('model_providers.scripted={name="scripted", base_url="%s/v1", '
                'wire_api="responses", env_key="SCRIPTED_API_KEY"}' % endpoint.url)
    code, out, err = agent.run(
        "codex", "exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check",
        "-c", 'model_provider="scripted"', "-c", provider, "-m", "scripted-model",
        prompt_for("codex"), env={"SCRIPTED_API_KEY": "x"})
    assert code == 0, describe(code, out, err, endpoint)
    check_turn(agent, endpoint, ns_daemon, "mcp__memprove.context", "mcp__memprove.tasks")


# ---------------------------------------------------------------------------
# Gemini CLI: `gemini mcp list`, `gemini -p`, and an ACP session (roots)
# ---------------------------------------------------------------------------

GEMINI_CONTEXT, GEMINI_TASKS = "mcp_memprove_context", "mcp_memprove_tasks"


def test_gemini_mcp_list_and_turn(make_agent, endpoint_in, ns_daemon):
    script = turn_script("gemini", GEMINI_CONTEXT, GEMINI_TASKS)
    endpoint = endpoint_in("gemini", script)
    agent = gemini_agent(make_agent, endpoint, lambda agent: [agent.project])
    stdout, stderr = agent.print_config()
    assert ".gemini/settings.json" in stderr, stderr
    agent.write(agent.project / ".gemini" / "settings.json", stdout)   # exactly as printed

    code, out, err = agent.run("gemini", "mcp", "list")
    assert code == 0 and re.search(r"memprove: .*\(stdio\) - Connected", out + err), describe(
        code, out, err)

    code, out, err = agent.run("gemini", "-m", GEMINI_MODEL, "-y", "-p", prompt_for("gemini"))
    assert code == 0, describe(code, out, err, endpoint)
    # `gemini -p` declares roots, and its roots name the launch folder, the project.
    check_turn(agent, endpoint, ns_daemon, GEMINI_CONTEXT, GEMINI_TASKS, found_by="roots")


class AcpClient:
    """A minimal Agent Client Protocol client (JSON-RPC 2.0, one message a line) driving
    `gemini --acp`: it answers permission requests with the first "allow" option and
    refuses every other request the agent makes."""

    def __init__(self, proc):
        self.proc = proc
        self.ids = iter(range(1, 1000))
        self.seen = []

    def request(self, method, params):
        ident = next(self.ids)
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": ident, "method": method,
                                           "params": params}) + "\n").encode())
        self.proc.stdin.flush()
        for raw in iter(self.proc.stdout.readline, b""):
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            self.seen.append(message)
            if message.get("id") == ident and "method" not in message:
                if "error" in message:
                    raise AssertionError("%s failed: %s" % (method, message["error"]))
                return message["result"]
            if "method" in message and "id" in message:
                self._answer(message)
        raise AssertionError("the agent ended before answering %s" % method)

    def _answer(self, message):
        if message["method"] == "session/request_permission":
            options = message["params"].get("options") or []
            allow = [o for o in options if str(o.get("kind", "")).startswith("allow")]
            reply = {"result": {"outcome": {"outcome": "selected",
                                            "optionId": (allow or options)[0]["optionId"]}}}
        else:
            reply = {"error": {"code": -32601, "message": "not offered by this client"}}
        reply.update(jsonrpc="2.0", id=message["id"])
        self.proc.stdin.write((json.dumps(reply) + "\n").encode())
        self.proc.stdin.flush()


def test_gemini_session_finds_the_workspace_by_roots(make_agent, endpoint_in, ns_daemon,
                                                      tmp_path):
    """An ACP session's working directory is the project, so Gemini's roots name it, while
    the servers it starts run in Gemini's own working directory, elsewhere: the walk up from
    there finds no Workspace, the roots do."""
    script = turn_script("gemini", GEMINI_CONTEXT, GEMINI_TASKS)
    endpoint = endpoint_in("gemini", script)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    agent = gemini_agent(make_agent, endpoint, lambda agent: [agent.project, elsewhere])
    stdout, stderr = agent.print_config()
    agent.write(agent.project / ".gemini" / "settings.json", stdout)   # exactly as printed

    environment = dict(agent.env, PWD=str(elsewhere))
    proc = subprocess.Popen(agent.netns.prefix + [
        "gemini", "--acp", "-m", GEMINI_MODEL, "--approval-mode", "yolo"],
        cwd=str(elsewhere), env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    errors = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
    reader.start()
    timer = threading.Timer(RUN_TIMEOUT, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    client = AcpClient(proc)
    try:
        client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}})
        session = client.request("session/new", {"cwd": str(agent.project), "mcpServers": []})
        done = client.request("session/prompt", {"sessionId": session["sessionId"], "prompt": [
            {"type": "text", "text": prompt_for("gemini")}]})
        assert done.get("stopReason") == "end_turn", done
    except AssertionError as error:
        raise AssertionError("%s\nstderr:\n%s\nendpoint:\n%s" % (
            error, b"".join(errors).decode("utf-8", "replace")[-4000:],
            endpoint.recorder.summary()))
    finally:
        # End of input ends the ACP connection; Gemini stays up after it, so it is then
        # stopped as a client stops an agent (SIGTERM), and killed only if that fails.
        proc.stdin.close()
        for stop in (lambda: os.kill(proc.pid, signal.SIGTERM),
                     lambda: os.killpg(proc.pid, signal.SIGKILL)):
            stop()
            try:
                proc.wait(15)
                break
            except subprocess.TimeoutExpired:
                continue
        timer.cancel()
        reader.join(10)
        agent.end_leftovers()
    context = check_turn(agent, endpoint, ns_daemon, GEMINI_CONTEXT, GEMINI_TASKS,
                         found_by="roots")
    assert context["workspace"]["root"] != str(elsewhere.resolve())


# ---------------------------------------------------------------------------
# OpenCode: `opencode mcp list`, `opencode run`, Chat Completions
# ---------------------------------------------------------------------------

OPENCODE_QUIET = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                  "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1"}


def test_opencode_mcp_list_and_run(make_agent, endpoint_in, ns_daemon):
    script = turn_script("opencode", "memprove_context", "memprove_tasks")
    endpoint = endpoint_in("openai-chat", script)
    agent = make_agent("opencode", env=OPENCODE_QUIET)
    stdout, stderr = agent.print_config()
    assert "opencode.json" in stderr, stderr
    agent.write(agent.project / "opencode.json", stdout)               # exactly as printed
    # The model provider lives in the user's configuration, which OpenCode merges with it.
    agent.write(agent.home / ".config" / "opencode" / "opencode.json", {
        "$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
        "model": "scripted/scripted-model",
        "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                                  "options": {"baseURL": endpoint.url + "/v1", "apiKey": "x"},
                                  "models": {"scripted-model": {"name": "Scripted",
                                                                "tool_call": True}}}}})

    code, out, err = agent.run("opencode", "mcp", "list")
    assert code == 0 and re.search(r"memprove.*connected", out + err, re.I), describe(
        code, out, err)

    code, out, err = agent.run("opencode", "run", "--model", "scripted/scripted-model",
                               prompt_for("opencode"))
    assert code == 0, describe(code, out, err, endpoint)
    # OpenCode declares roots and names the project in them.
    check_turn(agent, endpoint, ns_daemon, "memprove_context", "memprove_tasks",
               found_by="roots")


# ---------------------------------------------------------------------------
# Cline: a headless turn, Chat Completions (`-P openai`)
# ---------------------------------------------------------------------------

def test_cline_turn(make_agent, endpoint_in, ns_daemon):
    script = turn_script("cline", "memprove__context", "memprove__tasks")
    endpoint = endpoint_in("openai-chat", script)
    # Local sessions: plain `cline` leaves a hub daemon running after it exits.
    agent = make_agent("cline", env={"CLINE_SESSION_BACKEND_MODE": "local",
                                     "CLINE_DISABLE_TELEMETRY": "1"})
    stdout, stderr = agent.print_config()
    assert "cline_mcp_settings.json" in stderr, stderr
    agent.write(agent.home / ".cline" / "data" / "settings" / "cline_mcp_settings.json", stdout)
    code, out, err = agent.run("cline", "auth", "-p", "openai", "-k", "x", "-m", "scripted-model",
                               "-b", endpoint.url + "/v1")
    assert code == 0, describe(code, out, err)
    code, out, err = agent.run("cline", "-P", "openai", "-m", "scripted-model",
                               "--auto-approve", "true", prompt_for("cline"))
    assert code == 0, describe(code, out, err, endpoint)
    check_turn(agent, endpoint, ns_daemon, "memprove__context", "memprove__tasks")


# ---------------------------------------------------------------------------
# Continue: `cn -p`, Chat Completions
# ---------------------------------------------------------------------------

CONTINUE_MODEL = """\
name: memprove-interop
version: 0.0.1
schema: v1
models:
  - name: scripted
    provider: openai
    model: scripted-model
    apiBase: {url}/v1
    apiKey: x
    roles: [chat, edit, apply]
    capabilities: [tool_use]
"""


def test_continue_turn(make_agent, endpoint_in, ns_daemon):
    script = turn_script("continue", "context", "tasks")
    endpoint = endpoint_in("openai-chat", script)
    agent = make_agent("continue", env={"CONTINUE_TELEMETRY_ENABLED": "0",
                                        "CONTINUE_CLI_DISABLE_COMMIT_SIGNATURE": "1"})
    stdout, stderr = agent.print_config()
    assert "config.yaml" in stderr, stderr
    # The model and print-config's `mcpServers:` are two top-level keys of one file: the
    # printed text is appended as it is.  (`cn` does not read the project's
    # .continue/mcpServers/ block files; Continue's IDE extension does.)
    config = agent.write(agent.home / ".continue" / "config.yaml",
                         CONTINUE_MODEL.format(url=endpoint.url).encode() + stdout)
    code, out, err = agent.run("cn", "--config", str(config), "--auto", "-p",
                               prompt_for("continue"))
    assert code == 0, describe(code, out, err, endpoint)
    check_turn(agent, endpoint, ns_daemon, "context", "tasks")


# ---------------------------------------------------------------------------
# Amp: `amp mcp doctor` (its agent runs on its own servers, so no turn here)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("place", ["user", "workspace"])
def test_amp_mcp_doctor(make_agent, endpoint_in, place):
    endpoint = endpoint_in("openai-chat", Script([], marker="MEMPROVE-AMP"))
    agent = make_agent("amp", env={"AMP_API_KEY": "x", "AMP_URL": endpoint.url})
    stdout, stderr = agent.print_config()
    assert str(agent.home / ".config" / "amp" / "settings.json") in stderr, stderr   # never ~/
    assert str(agent.project / ".amp" / "settings.json") in stderr, stderr
    if place == "user":
        agent.write(agent.home / ".config" / "amp" / "settings.json", stdout)   # as printed
    else:
        # A workspace's servers run only once approved, as the standard-error line says.
        agent.write(agent.project / ".amp" / "settings.json", stdout)           # as printed
        code, out, err = agent.run("amp", "mcp", "approve", "memprove")
        assert code == 0, describe(code, out, err)
    code, out, err = agent.run("amp", "mcp", "doctor")
    assert code == 0 and re.search(r"memprove .*connected \(10 tools", out + err), describe(
        code, out, err)
    agent.check_no_server_left()
    conns = connections(agent.wire)
    assert conns, "amp started no server"
    for conn in conns:
        served = agent.check_wire(conn)
        methods = [s["message"]["method"] for s in served]
        assert methods[:2] == ["initialize", "tools/list"], conn.transcript()
        assert served[0]["message"]["params"]["protocolVersion"] == EXPECTED_VERSION["amp"]

