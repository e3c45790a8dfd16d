"""A whole Claude Code session against the .pyz, and what the model was shown (issue 10).

`claude -p "<prompt>" --output-format stream-json --verbose --allowedTools 'mcp__memprove__*'`
runs from a Workspace whose `.mcp.json` is `mcp print-config`'s output byte for byte, with the
throwaway HOME of the `claude` fixture (project servers approved, its memprove configuration
pointing at this test's reference daemon), a dummy API key and `ANTHROPIC_BASE_URL` pointing at
a scripted model endpoint (model_endpoint.py), inside the loopback-only network namespace
where this machine can make one (loopback_bridge.py carries the endpoint's and the daemon's
ports into it).

The scripted model plays an agent's day through all ten tools: it first loads them with a
ToolSearch `select:` call (Claude Code 2.1.332 defers MCP tools behind ToolSearch by default,
and that default is what is tested), then `tasks`, `begin` with `new_task`, a Run recorded as
`memprove run` records it, a `checkpoint` citing it, `decide`, four `checkpoint`s of 50 long
facts, `pack` at budget 4,000 and at 60,000, `claims` of 50 long claims, `context`,
`ledger_verify`, one call that must fail, `complete` and `end`.

From the requests Claude Code sent the endpoint the test reads what the model received for
each call: `pack` as the opening statement, an empty line and the Pack, byte for byte equal to
an independent rendering of the daemon's Capsule (test_pack.ref_render, written
from pack.md); every other result as its JSON; the failing call as an error with
`<code>: <sentence>`; the largest `pack` and `claims` whole, never a preview.  Then the ledger,
`context.json`, and the token: nowhere in the server's output streams, in what reached the
endpoint, in Claude Code's output, or in any file Claude Code wrote under HOME.

The server's streams are recorded without touching `.mcp.json`: the .pyz starts with
`#!/usr/bin/env python3`, so a `python3` first on Claude Code's PATH puts the tee (mcp_tee.py)
in front of exactly that server command and nothing else.
"""

import datetime
import http.client
import json
import re
import secrets
import sqlite3
import sys
from urllib.parse import urlsplit

import ledgerd
from harness import EXPECTED_TOOLS
from interop.model_endpoint import Endpoint, Script, ToolCall, Turn
from interop.support import (
    TEE, check_connection, check_tool_listing, connections, print_config, session_connections,
    transcripts)
from test_pack import ref_claim_line, ref_fold, ref_render, units

PREFIX = "mcp__memprove__"
TITLE = "Fix flaky upload retries \u2014 caf\u00e9 edition"
RUN_COMMAND = "pytest -q tests/test_upload.py"
PREVIEW_LIMIT = 50000            # Claude Code's default: a longer result becomes a preview
BULK_CHECKPOINTS = 4             # 4 x 50 long facts: a 60,000-unit Pack with lines to spare
BULK_TEXT = 1150                 # 50 such claim lines come close to claims' 60,000 units
TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def bulk_fact(number):
    """A long fact text of BULK_TEXT characters, different for each number."""
    head = "Fact %03d: the upload retry path was measured with payload %d and " % (number, number)
    body = " ".join("segment-%03d-%02d" % (number, index) for index in range(200))
    return (head + body)[:BULK_TEXT - 1] + "."


def daemon_capsule(daemon, token, task_id):
    """getTaskCapsule straight from the reference daemon."""
    parts = urlsplit(daemon.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", "/v1/tasks/%s/capsule" % task_id,
                           headers={"Authorization": "Bearer " + token,
                                    "Accept": "application/json"})
        answer = connection.getresponse()
        body = answer.read()
    finally:
        connection.close()
    assert answer.status == 200, (answer.status, body[:500])
    return json.loads(body.decode("utf-8"))["capsule"]


def reference_opening(capsule, now, agent):
    """pack.md's opening statement, read literally."""
    items = sorted(claim["number"] for claim in capsule["claims"]
                   if claim.get("kind") == "open_item" and claim.get("state") == "active")
    listed = ", ".join("c%d" % number for number in items)
    if not items:
        sentence = "No open items."
    elif len(items) == 1:
        sentence = "1 open item (%s) must be resolved or carried forward." % listed
    else:
        sentence = "%d open items (%s) must be resolved or carried forward." % (len(items), listed)
    return "Resuming Task %d: %s at %s as %s (%s). %s" % (
        capsule["task"]["number"], ref_fold(capsule["task"]["title"]), now,
        ref_fold(agent["name"]), ref_fold(agent["role"]), sentence)


class Day:
    """The scripted model's day: the steps, the calls they make, and what the steps saw."""

    def __init__(self, daemon, config, workspace):
        self.daemon = daemon
        self.config = config
        self.workspace = workspace
        self.capsules = {}           # step number -> the daemon's Capsule just before its call
        self.calls = []              # (step number, tool, arguments, expected problem or None)
        self.steps = []
        self.done = set()            # the steps whose `before` has run
        self.marker = "MEMPROVE-SESSION-" + secrets.token_hex(6)

    def call(self, tool, arguments, problem=None, before=None):
        """A step that calls `tool` (a memprove tool's short name, or a Claude Code tool);
        `before(conversation, step)` runs first, once, inside the endpoint."""
        step = len(self.steps)
        name = PREFIX + tool if tool in EXPECTED_TOOLS else tool
        self.calls.append((step, tool, arguments, problem))
        turn = Turn(ToolCall(name, arguments))
        if before is None:
            self.steps.append(turn)
        else:
            def played(conversation):
                if step not in self.done:           # once, whatever the client retries
                    before(conversation, step)
                    self.done.add(step)
                return turn
            self.steps.append(played)

    def begun(self, conversation):
        """`begin`'s result as the model received it."""
        return json.loads(conversation.result_of(PREFIX + "begin").text)

    def record_run(self, conversation, step):
        """What `memprove run` does: recordRun, then a line in runs.jsonl."""
        ledgerd.memprove_run(self.daemon.url, self.config.token, str(self.workspace),
                             self.begun(conversation)["session_id"], RUN_COMMAND, 0)

    def snapshot(self, conversation, step):
        self.capsules[step] = daemon_capsule(self.daemon, self.config.token,
                                             self.begun(conversation)["task_id"])

    def script(self):
        self.call("ToolSearch", {"query": "select:" + ",".join(
            PREFIX + tool for tool in EXPECTED_TOOLS)})
        self.call("tasks", {})
        self.call("begin", {"new_task": TITLE, "agent_role": "implementer"})
        self.call("checkpoint", {
            "facts": [{"text": "The upload suite passes with a fixed retry delay (caf\u00e9).",
                       "runs": ["r1"]}],
            "open_items": ["The retry limit is not documented."],
            "next_action": "Document the retry limit, then complete the Task."},
            before=self.record_run)
        self.call("decide", {"decision": "Keep the fixed retry delay.",
                             "rationale": "r1 passed with it.",
                             "alternatives": ["Exponential backoff"], "runs": ["r1"]})
        for batch in range(BULK_CHECKPOINTS):
            self.call("checkpoint", {"facts": [{"text": bulk_fact(batch * 50 + index + 1)}
                                               for index in range(50)]})
        self.call("pack", {"budget": 4000}, before=self.snapshot)
        self.call("pack", {"budget": 60000}, before=self.snapshot)
        self.call("claims", {"numbers": list(range(5, 55))})
        self.call("context", {})
        self.call("ledger_verify", {})
        self.call("claims", {"numbers": [1], "task": 99}, problem="task_not_found")
        self.call("complete", {})
        self.call("end", {})
        return Script(self.steps, marker=self.marker)


def python3_shim(folder, pyz, wire):
    """A `python3` that puts the tee in front of `<pyz> ...` and runs anything else as is."""
    folder.mkdir()
    shim = folder / "python3"
    shim.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "%s" ]; then exec "%s" "%s" "%s" -- "%s" "$@"; fi\n'
        'exec "%s" "$@"\n' % (pyz, sys.executable, TEE, wire, sys.executable, sys.executable))
    shim.chmod(0o755)
    return folder


def received(endpoint, script, calls):
    """step -> the ToolResult the model was given for that step's call, read from the first
    scripted request that carried it; and the last scripted request's conversation."""
    conversations = {}
    for exchange in endpoint.recorder.routed("messages"):
        conversation = endpoint.dialect.conversation(exchange.json)
        if script.is_scripted(conversation):
            conversations.setdefault(conversation.depth, conversation)
    assert sorted(conversations) == list(range(len(calls) + 1)), (
        "the scripted conversation did not reach every step: depths %s\n%s" % (
            sorted(conversations), endpoint.recorder.summary()))
    results = {}
    for step, tool, _, _ in calls:
        conversation = conversations[step + 1]
        assert len(conversation.tool_results) == step + 1, conversation.tool_results
        result = conversation.tool_results[step]
        want = PREFIX + tool if tool in EXPECTED_TOOLS else tool
        assert result.name == want, (step, result)
        results[step] = result
    return results, conversations[len(calls)]


def model_text(result):
    """The text the model read: the tool_result's content as a string, or its one text block."""
    content = result.content
    if isinstance(content, str):
        return content
    assert isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text", (
        "the model got more than one text: %r" % (content,))
    return content[0]["text"]


PREVIEW = re.compile(r"<persisted-output>|Output too large|Full output saved to|Preview \(first")


def assert_not_preview(tool, text, expected_length=0):
    """Fail loudly when Claude Code moved the result to a file and showed the model a preview
    (`<persisted-output>` ... `Preview (first 2KB):`) or cut it short."""
    assert not PREVIEW.search(text) and len(text) >= expected_length, (
        "Claude Code showed the model a PREVIEW of %s instead of the whole result (%d of %d "
        "characters): is `_meta[\"anthropic/maxResultSizeChars\"]` missing from its tools/list "
        "entry?\n%s" % (tool, len(text), expected_length, text[:1500]))


def assert_pack_text(text, capsule, budget, agent, earliest, latest):
    """The model read the opening, an empty line and the Pack of `capsule`, byte for byte."""
    if text.startswith("{"):
        try:
            wrapped = json.loads(text)
        except ValueError:
            wrapped = None
        assert not isinstance(wrapped, dict), (
            "Claude Code handed the model the JSON-wrapped pack (structuredContent), not the "
            "opening and the Pack: %s" % text[:600])
    pack, _ = ref_render(capsule, budget, None)
    opening_line = text.split("\n", 1)[0]
    found = re.search(r" at (%s) as " % TIME.pattern, opening_line)
    assert found, "no opening statement with a time: %r" % opening_line
    now = found.group(1)
    assert earliest <= now <= latest, (earliest, now, latest)
    expected = reference_opening(capsule, now, agent) + "\n\n" + pack
    assert_not_preview("pack", text, len(expected))
    assert text == expected, "the model did not read the opening and the Pack byte for byte:\n" \
        "--- got (%d) ---\n%s\n--- expected (%d) ---\n%s" % (
            len(text), text[:3000], len(expected), expected[:3000])
    return pack


def ledger_ops(data_dir):
    connection = sqlite3.connect("file:%s?mode=ro" % (data_dir / "ledger.sqlite3"), uri=True)
    try:
        return [row[0] for row in connection.execute("SELECT op FROM ledger ORDER BY pos")]
    finally:
        connection.close()


def files_under(root, skip):
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path not in skip:
            yield path


def headless(claude, daemon, script, prompt, env=()):
    """`claude -p prompt` (stream-json) against a scripted Anthropic endpoint, the
    endpoint's and the daemon's ports reachable from where claude runs, only memprove's
    tools allowed: (the endpoint, exit code, stdout, stderr)."""
    with Endpoint("anthropic", script) as endpoint, \
            claude.reaching(urlsplit(endpoint.url).port, urlsplit(daemon.url).port) as via:
        code, out, err = claude.run(
            "-p", prompt, "--output-format", "stream-json", "--verbose",
            "--allowedTools", "mcp__memprove__*", via=via, timeout=600,
            env=dict(env, ANTHROPIC_BASE_URL=endpoint.url,
                     ANTHROPIC_API_KEY="sk-ant-dummy-" + secrets.token_hex(8)))
    return endpoint, code, out, err


def test_a_whole_claude_code_session(claude, pyz, daemon, config, server_version, tmp_path):
    stdout, _ = print_config(pyz, claude.home, claude.project_dir)
    (claude.project_dir / ".mcp.json").write_bytes(stdout)          # exactly what it printed
    wire = tmp_path / "wire"
    shim = python3_shim(tmp_path / "shim", pyz, wire)
    day = Day(daemon, config, claude.project_dir)
    script = day.script()
    started = utc_now()
    endpoint, code, out, err = headless(
        claude, daemon, script, "%s: resume the upload work with memprove and finish the day."
        % day.marker, {"PATH": str(shim) + ":" + claude.env["PATH"]})
    finished = utc_now()
    endpoint.recorder.dump(tmp_path / "endpoint.jsonl")
    conns = connections(wire)
    story = "claude exit %d\nstderr:\n%s\nstdout (end):\n%s\nendpoint (in full: %s):\n%s\n%s" % (
        code, err[-3000:], out[-3000:], tmp_path / "endpoint.jsonl", endpoint.recorder.summary(),
        transcripts(conns)[-6000:])

    # -- Claude Code ran the whole script and ended well ---------------------------------
    assert endpoint.recorder.errors == [], story
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    final = events[-1] if events else {}
    assert code == 0 and final.get("type") == "result" and final.get("is_error") is False, story
    init = events[0]
    assert {"name": "memprove", "status": "connected", "source": "project"} in init.get(
        "mcp_servers", []), init.get("mcp_servers")
    assert script.finished, story

    # -- what the model received, call by call -------------------------------------------
    results, last = received(endpoint, script, day.calls)
    sessions = session_connections(conns)
    assert len(sessions) == 1, "%d server processes served the session\n%s" % (
        len(sessions), transcripts(conns))
    for conn in conns:      # every server process: pure streams, a log line a message, no token
        check_connection(conn, secrets=[config.token], server_version=server_version)
    served = check_connection(sessions[0], secrets=[config.token], server_version=server_version)
    answered = [s for s in served if s["message"]["method"] == "tools/call"]
    memprove_calls = [call for call in day.calls if call[1] in EXPECTED_TOOLS]
    assert [s["message"]["params"]["name"] for s in answered] == [
        call[1] for call in memprove_calls], "Claude Code did not make the scripted calls"
    assert [s["message"]["params"].get("arguments") for s in answered] == [
        call[2] for call in memprove_calls], "Claude Code changed the arguments"
    server_results = dict(zip([call[0] for call in memprove_calls],
                              [s["response"]["result"] for s in answered]))

    loaded = results[0]
    assert loaded.content == [{"type": "tool_reference", "tool_name": PREFIX + tool}
                              for tool in EXPECTED_TOOLS], loaded.content

    seen = {}
    agent = None
    for step, tool, arguments, problem in day.calls[1:]:
        result, server = results[step], server_results[step]
        text = model_text(result)
        assert_not_preview(tool, text)
        if problem:
            assert result.is_error is True, (tool, result.raw)
            assert re.match(r"%s: [A-Z][^\n]*\.\Z" % problem, text), text
            assert text == server["content"][0]["text"], (text, server)
            continue
        assert not result.is_error, "%s failed: %s" % (tool, text)
        if tool == "pack":
            capsule = day.capsules[step]
            pack = assert_pack_text(text, capsule, arguments["budget"], agent, started, finished)
            assert "structuredContent" not in server, "pack still returns structuredContent"
            assert server["content"] == [{"type": "text", "text": text}], server["content"]
            figures = server["_meta"]["memprove/pack"]
            assert figures["units"] == units(pack) and figures["budget"] == arguments["budget"]
            assert (figures["task_id"], figures["task"]) == (capsule["task"]["id"], 1), figures
            seen.setdefault(tool, []).append((capsule, pack, text))
            continue
        value = json.loads(text)
        assert isinstance(value, dict) and list(value)[:2] == ["task_id", "session_id"], text
        assert value == server["structuredContent"], (tool, text, server)
        # Claude Code shows the model JSON.stringify(structuredContent) (compact), not the
        # server's text (the same JSON, spaced): the same object either way.
        assert json.loads(server["content"][0]["text"]) == value, server
        seen.setdefault(tool, []).append(value)
        if tool == "begin":
            agent = value["session"]["agent"]

    # -- the results say what the day did ---------------------------------------------------
    begun = seen["begin"][0]
    assert seen["tasks"][0]["tasks"] == [], seen["tasks"]
    assert begun["task"] == {"number": 1, "title": TITLE, "status": "active"}, begun
    assert begun["session"] == {"number": 1, "agent": {"name": "claude-code",
                                                       "role": "implementer"}, "parent": None}
    first = seen["checkpoint"][0]
    assert [(c["number"], c["kind"]) for c in first["claims"]] == [
        (1, "fact"), (2, "open_item"), (3, "next_action")], first
    assert seen["decide"][0]["claim"] == 4, seen["decide"]
    assert [c["number"] for c in seen["checkpoint"][-1]["claims"]][-1] == 4 + 50 * BULK_CHECKPOINTS
    context = seen["context"][0]
    assert context["workspace"]["root"] == str(claude.project_dir.resolve()), context
    assert context["workspace"]["found_by"] == "CLAUDE_PROJECT_DIR", context
    assert context["task"] == {"number": 1, "title": TITLE}, context
    assert [run["label"] for run in context["runs"]] == ["r1"], context
    assert seen["complete"][0]["status"] == "done" and seen["complete"][0]["evidence"] == ["r1"]
    assert seen["end"][0]["outcome"] == "ended" and seen["end"][0]["session"] == 1
    assert seen["end"][0]["context_session"] is None, seen["end"]

    # -- the largest results came whole ------------------------------------------------------
    (_, small, _), (capsule, large, large_text) = seen["pack"]
    assert "Open items:\n- c2 The retry limit is not documented.\n" in small, small
    assert len(large_text) > PREVIEW_LIMIT and units(large) > 59000, units(large)
    assert large.endswith("The claims tool gives any claim in full.)\n"), large[-300:]
    claims_step = [call[0] for call in day.calls if call[1] == "claims" and not call[3]][0]
    claims_text = model_text(results[claims_step])
    claims = seen["claims"][0]
    by_number = {claim["number"]: claim for claim in capsule["claims"]}
    assert [c["line"] for c in claims["claims"]] == [
        ref_claim_line(by_number[number]) for number in range(5, 55)], "claims lines differ"
    assert claims["missing"] == [] and claims.get("left_out") == [], claims
    assert len(claims_text) > PREVIEW_LIMIT, len(claims_text)

    # -- what the server said for that: the size hint, and no outputSchema for pack -------------
    listed = [s for s in served if s["message"]["method"] == "tools/list"][-1]
    check_tool_listing(listed["response"]["result"]["tools"])

    # -- the ledger and context.json ---------------------------------------------------------
    verified = seen["ledger_verify"][0]
    ops = ledger_ops(config.data_dir)
    assert ops == (["resolveWorkspace", "createTask", "createSession", "transitionTask",
                    "recordRun", "createCheckpoint", "proposeDecision"]
                   + ["createCheckpoint"] * BULK_CHECKPOINTS
                   + ["transitionTask", "endSession"]), ops
    assert verified["ok"] is True and verified["first_bad"] is None, verified
    assert verified["entries"] == len(ops) - 2, verified          # before complete and end
    with daemon.store.lock:
        assert daemon.store.verify()["first_bad"] is None
    saved = json.loads((claude.project_dir / ".memprove" / "context.json").read_text())
    assert saved["version"] == 1 and saved["session"] is None, saved
    assert saved["task"] == {"id": begun["task_id"], "number": 1, "title": TITLE}, saved
    assert saved["workspace"]["root"] == str(claude.project_dir.resolve()), saved
    runs = [json.loads(line) for line in
            (claude.project_dir / ".memprove" / "runs.jsonl").read_text().splitlines()]
    assert [(run["label"], run["passed"]) for run in runs] == [("r1", True)], runs

    # -- the token is nowhere ------------------------------------------------------------------
    token = config.token.encode("utf-8")
    for exchange in endpoint.recorder.exchanges:
        assert token not in exchange.body, "the token reached the model endpoint"
        assert all(config.token not in value for _, value in exchange.headers)
    assert token not in out.encode() and token not in err.encode(), "the token is in its output"
    ours = {claude.config_dir / "token", claude.config_dir / "data-dir"}
    written = list(files_under(claude.home, ours))
    assert any(path.suffix == ".jsonl" and "projects" in path.parts for path in written), written
    for path in written:
        assert token not in path.read_bytes(), "the token is in %s" % path
    persisted = [path for path in written if "tool-results" in path.parts]
    assert persisted == [], "Claude Code saved results to files (previews): %s" % persisted
    assert last.depth == len(day.calls)
