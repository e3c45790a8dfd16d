"""No input loses a write (issue 11): contract.md §6 "What no input may do", rule by rule,
and §2's `workspace_unusable`, against the built .pyz over real pipes and the reference
daemon (tests/ledgerd.py) over real HTTP.

Each test names the rule it holds the server to.  Every server runs with MEMPROVE_MCP_LOG
set, and the hardening guard fails the test when it records an internal_error.

The flood test (rule 4) measures the server's peak memory (VmHWM) and prints it as a
figure (MEMPROVE_RELIABILITY_REPORT collects it, see hardening_support.py).
"""

import fcntl
import json
import os
import select
import stat
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from harness import (SAFETY_TIMEOUT, check_stdout_line, clean_env, default_server_python,
                     modern_params, parse_log, server_path)
from hardening_support import (MALLOC_PLAIN, begun_server, needs_proc, outcome_of, peak_kib,
                               read_json, report)


import ledgerd  # noqa: E402  (tests/ is on sys.path through conftest)

LOST_HINT = ("The first attempt's answer was lost, so the write may have been made; "
             "look (`pack`) before repeating it.")
HALF = "\ud800"                     # the first half of a surrogate pair, alone
OTHER_HALF = "\udfff"


def call(server, tool, args=None, era="legacy"):
    request_id = server.new_id()
    params = server.call_params(tool, {} if args is None else args, era=era)
    server.send(server.request_message("tools/call", params, id=request_id))
    return outcome_of(server.response(request_id), era)


def context_path(root):
    return Path(root) / ".memprove" / "context.json"


def context_bytes(root):
    return context_path(root).read_bytes()


def ascii_context(root):
    """context.json, which must be pure ASCII JSON (§6 rule 2)."""
    data = context_bytes(root)
    assert data.isascii(), "context.json holds bytes outside ASCII: %r" % data[:300]
    return json.loads(data.decode("ascii"))


def daemon_ops(daemon, op=None):
    return [entry for entry in daemon.ops if op is None or entry["op"] == op]


def wrapper(tmp_path, name, code):
    """An executable that runs `code` (Python) and then execs the server's interpreter
    (conftest.default_server_python) with its own arguments: a way to start the server with
    a changed umask, standard output or working directory."""
    path = tmp_path / name
    python = default_server_python()
    path.write_text("#!%s\nimport os, sys\n%s\nos.execv(%r, [%r] + sys.argv[1:])\n"
                    % (sys.executable, code, python, python))
    os.chmod(str(path), 0o755)
    return str(path)


def warned_about(hserve, config, name, value, timeout=None):
    """A server started with the environment variable `name` set to `value`, which
    `context` lists in config.warnings: (server, context's value)."""
    server = hserve(config=config, timeout=timeout, env={name: value})
    server.initialize()
    code, shown = call(server, "context")
    assert code == "ok", shown
    assert name in shown["config"]["warnings"], shown["config"]
    return server, shown


@pytest.fixture
def begun(hserve, config, daemon, workspace):
    """A server with a Task and an open Session in the context."""
    return begun_server(hserve, config, "Fixture task")


# =============================================================================
# Rules 1 and 2: any string that arrived can be written; a write is never left
# unaccounted for
# =============================================================================

def test_rule2_lone_surrogate_in_new_task_round_trips(hserve, config, daemon, workspace):
    """§6 rules 1 and 2: `begin {"new_task": "fix \\ud800 bug"}`, sent as raw JSON with the
    escape, succeeds; the daemon gets the title unchanged; context.json is ASCII JSON and holds
    it unchanged; every later tool reads that context."""
    server = hserve(config=config, timeout=5)
    server.initialize()
    title = "fix " + HALF + " bug"
    line = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"begin",'
            '"arguments":{"new_task":"fix \\ud800 bug"}}}\n')
    server.send_raw(line.encode("ascii"))
    code, value = outcome_of(server.response(1))
    assert code == "ok", value
    created = daemon_ops(daemon, "createTask")
    assert len(created) == 1 and created[0]["body"]["title"] == title
    context = ascii_context(workspace)
    assert context["task"]["title"] == title
    assert context["task"]["id"] == value["task_id"]
    assert context["session"]["id"] == value["session_id"]
    code, shown = call(server, "context")
    assert code == "ok" and shown["task"]["number"] == value["task"]["number"], shown
    assert call(server, "checkpoint", {"facts": [{"text": "after " + HALF}]})[0] == "ok"
    assert server.close() == 0


def test_rule2_lone_surrogate_in_agent_name(hserve, config, daemon, workspace):
    """§6 rules 1 and 2: a lone surrogate in an agent name: `begin` succeeds, the daemon gets
    the name (unchanged, or folded as tools.md folds agent names: U+FFFD for the half), and
    context.json holds exactly what the daemon got, as ASCII JSON."""
    server = hserve(config=config, timeout=5)
    server.initialize()
    name = "agent " + OTHER_HALF
    code, value = call(server, "begin", {"new_task": "Agent name", "agent_name": name})
    assert code == "ok", value
    sent = daemon_ops(daemon, "createSession")
    assert len(sent) == 1 and sent[0]["body"]["agent"]["name"] in (name, "agent \ufffd"), sent
    context = ascii_context(workspace)
    assert context["session"]["agent"]["name"] == sent[0]["body"]["agent"]["name"]
    assert call(server, "checkpoint", {"next_action": "Go on."})[0] == "ok"
    assert server.close() == 0


def test_rule2_task_title_stored_by_another_client(hserve, config, daemon, workspace):
    """§6 rules 1 and 2: a Task whose title another client stored with a lone surrogate is
    begun with `begin {"task": N}`: the context holds the title unchanged, as ASCII JSON."""
    title = "half an emoji \ud83d"
    import http.client
    import uuid
    def post(path, body):
        connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        connection.request("POST", path, body=json.dumps(body).encode("ascii"), headers={
            "Authorization": "Bearer " + config.token, "Content-Type": "application/json",
            "Idempotency-Key": str(uuid.uuid4())})
        answer = connection.getresponse()
        data = json.loads(answer.read().decode("utf-8"))
        connection.close()
        assert answer.status in (200, 201), data
        return data
    workspace_id = post("/v1/workspaces/resolve", {"root": server_path(workspace)})["workspace"]["id"]
    task = post("/v1/tasks", {"workspace_id": workspace_id, "title": title})["task"]
    assert task["title"] == title
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, value = call(server, "begin", {"task": task["number"]})
    assert code == "ok", value
    assert value["task_id"] == task["id"]
    context = ascii_context(workspace)
    assert context["task"]["title"] == title
    code, tasks = call(server, "tasks")
    assert code == "ok" and tasks["tasks"][0]["current"] is True, tasks
    assert server.close() == 0


def test_rule2_unknown_context_key_with_a_lone_surrogate_survives_end(begun, daemon, workspace):
    """§6 rules 1 and 2: a context.json holding `\\ud800` in a key the server does not know
    (written there by another tool) survives `end` and a later `begin`: both succeed, the
    key is kept unchanged, and the file stays ASCII."""
    server, value = begun
    context = read_json(context_path(workspace))
    context["x-other-tool"] = {"note": "cut " + HALF, "list": [OTHER_HALF]}
    context_path(workspace).write_bytes(json.dumps(context, indent=2).encode("ascii"))
    code, ended = call(server, "end")
    assert code == "ok", ended
    assert len(daemon_ops(daemon, "endSession")) == 1
    after = ascii_context(workspace)
    assert after["x-other-tool"] == {"note": "cut " + HALF, "list": [OTHER_HALF]}
    assert after["session"] is None
    code, again = call(server, "begin", {})
    assert code == "ok", again
    after = ascii_context(workspace)
    assert after["x-other-tool"] == {"note": "cut " + HALF, "list": [OTHER_HALF]}
    assert after["session"]["id"] == again["session_id"]
    assert server.close() == 0


def test_rule2_lone_surrogates_in_every_text_of_the_write_tools(begun, daemon, workspace):
    """§6 rule 2: checkpoint and decide texts with lone surrogates reach the daemon as they
    were sent; the Pack folds them on display (pack.md)."""
    server, value = begun
    fact, item, action = "fact " + HALF, "item " + OTHER_HALF, "next \udc00"
    code, done = call(server, "checkpoint", {"facts": [{"text": fact}], "open_items": [item],
                                             "next_action": action})
    assert code == "ok", done
    body = daemon_ops(daemon, "createCheckpoint")[-1]["body"]
    assert body["facts"][0]["text"] == fact and body["open_items"][0]["text"] == item
    assert body["next_action"]["text"] == action
    code, decided = call(server, "decide", {"decision": "use " + HALF, "rationale": "why " + HALF,
                                            "alternatives": ["not " + OTHER_HALF]})
    assert code == "ok", decided
    body = daemon_ops(daemon, "proposeDecision")[-1]["body"]
    assert body["text"] == "use " + HALF and body["alternatives"] == ["not " + OTHER_HALF]
    code, claims = call(server, "claims", {"numbers": [1, 2, 3, 4]})
    assert code == "ok", claims
    assert all("\ufffd" in claim["line"] for claim in claims["claims"]), claims
    assert server.close() == 0


# =============================================================================
# Rule 3: every value from the daemon is checked before use
# =============================================================================

def _open_task(server, daemon, workspace):
    """A Task that is already active, begun again by number: no transitionTask."""
    code, value = call(server, "begin", {"new_task": "Active already"})
    assert code == "ok", value
    return value["task"]["number"]


WRONG_WRITES = [
    # (case id, operation, path in its answer, value, tool, arguments, what the hint names)
    ("createSession-numeric-id", "createSession", ("session", "id"), 5, "begin",
     {"new_task": "Numeric id"}, ["Task 1 was created."]),
    ("createSession-missing-id", "createSession", ("session", "id"), ledgerd.REMOVE, "begin",
     {"new_task": "Missing id"}, ["Task 1 was created."]),
    ("createSession-number-1.5", "createSession", ("session", "number"), 1.5, "begin",
     {"new_task": "Fractional number"}, ["Task 1 was created."]),
    ("transitionTask-string-number", "transitionTask", ("task", "number"), "1", "begin",
     {"new_task": "String number"}, ["Task 1 was created.", "Session 1 is open."]),
    ("createTask-missing-id", "createTask", ("task", "id"), ledgerd.REMOVE, "begin",
     {"new_task": "Task without id"}, ["Task 1 was created."]),
    # Found by test_fuzz.py::test_daemon_field_fuzz: a record that is not an object.
    ("createSession-agent-a-string", "createSession", ("session", "agent"), "1", "begin",
     {"new_task": "Agent not an object"}, ["Task 1 was created."]),
]


@pytest.mark.parametrize("case, op, path, value, tool, args, named", WRONG_WRITES,
                         ids=[case[0] for case in WRONG_WRITES])
def test_rule3_wrong_typed_answer_to_a_write(hserve, config, daemon, workspace, case, op, path,
                                              value, tool, args, named):
    """§6 rules 1 and 3: a write's answer with a field of the wrong type (valid JSON) is
    `daemon_error`, its hint names what was made, and nothing of it reaches context.json
    or a result."""
    server = hserve(config=config, timeout=5)
    server.initialize()
    daemon.rewrite(op, path, value)
    code, text = call(server, tool, args)
    assert code == "daemon_error", (case, text)
    for sentence in named:
        assert sentence in text, (case, text)
    assert not context_path(workspace).exists(), context_bytes(workspace)
    assert server.close() == 0


def test_rule3_numeric_session_id_when_begun_by_number(hserve, config, daemon, workspace):
    """§6 rule 3: `begin {"task": N}` of an active Task (no transitionTask after
    createSession) whose createSession answers a numeric id: `daemon_error` naming the open
    Session, never an ok result with that id, and the context is left as it was."""
    server = hserve(config=config, timeout=5)
    server.initialize()
    number = _open_task(server, daemon, workspace)
    before = context_bytes(workspace)
    daemon.rewrite("createSession", ("session", "id"), 5)
    code, text = call(server, "begin", {"task": number})
    assert code == "daemon_error", text
    assert "Session 2 is open." in text, text
    assert context_bytes(workspace) == before
    assert call(server, "checkpoint", {"facts": [{"text": "Still fine."}]})[0] == "ok"
    assert server.close() == 0


CAPSULE_FAULTS = [
    ("task-without-number", ("capsule", "task", "number"), ledgerd.REMOVE),
    ("task-number-string", ("capsule", "task", "number"), "1"),
    ("claims-of-strings", ("capsule", "claims"), ["x"]),
    ("claim-number-1.5", ("capsule", "claims", 0, "number"), 1.5),
    ("runs-a-number", ("capsule", "runs"), 5),
    ("sessions-a-string", ("capsule", "sessions"), "s"),
]


@pytest.mark.parametrize("case, path, value", CAPSULE_FAULTS, ids=[c[0] for c in CAPSULE_FAULTS])
def test_rule3_wrong_typed_capsule_read_tools_agree(begun, config, daemon, workspace, case, path,
                                                   value):
    """§6 rule 3: a Capsule with a value of the wrong type is `daemon_error` from `pack` and
    from `claims` alike (they once disagreed: internal_error and daemon_error)."""
    server, begun_value = begun
    assert call(server, "checkpoint", {"facts": [{"text": "One fact."}]})[0] == "ok"
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun_value["session_id"],
                         "pytest -q", 0)
    daemon.rewrite("getTaskCapsule", path, value, count=None)
    for tool, args in (("pack", {}), ("claims", {"numbers": [1]})):
        response = server.call(tool, args)
        result = response["result"]
        assert result.get("isError") is True, (case, tool, result)
        text = result["content"][0]["text"]
        assert text.startswith("daemon_error: "), (case, tool, text)
    daemon.clear_faults()
    assert server.close() == 0


@pytest.mark.parametrize("case, path, value", [
    ("claims-of-strings", ("capsule", "claims"), ["x"]),
    ("runs-a-number", ("capsule", "runs"), 5),
], ids=["claims-of-strings", "runs-a-number"])
def test_rule3_wrong_typed_capsule_in_end_and_complete(begun, config, daemon, workspace, case, path,
                                                       value):
    """§6 rules 1 and 3: `end` reads the Capsule after `endSession`: a wrong-typed Capsule is
    `daemon_error` naming the ended Session; `complete` reads it before its write:
    `daemon_error` and nothing sent."""
    server, begun_value = begun
    assert call(server, "checkpoint", {"open_items": ["An item."]})[0] == "ok"
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun_value["session_id"],
                         "pytest -q", 0)
    before = context_bytes(workspace)
    daemon.rewrite("getTaskCapsule", path, value, count=None)
    daemon.clear_ops()
    code, text = call(server, "complete")
    assert code == "daemon_error", (case, text)
    assert daemon_ops(daemon, "transitionTask") == []
    assert context_bytes(workspace) == before
    code, text = call(server, "end")
    assert code == "daemon_error", (case, text)
    assert "Session 1 was ended." in text, text
    daemon.clear_faults()
    assert server.close() == 0


# =============================================================================
# Rule 4: memory stays bounded whatever arrives
# =============================================================================

FLOOD_CALLS = 400
FLOOD_SIZE = 1 << 20                # bytes of padding in each flooding call
HELD = 8                            # calls held at the daemon: every worker busy
QUEUE = 64                          # calls that may wait behind them


def _pipe_bytes(fd):
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


def _stalled_reading(pid, stdin_fd):
    """True while the server leaves input unread in its pipe and none of its threads runs
    or reads: it has stopped reading (backpressure), not merely fallen behind."""
    if _pipe_bytes(stdin_fd) == 0:
        return False
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
            with open("/proc/%d/task/%s/wchan" % (pid, tid)) as handle:
                wchan = handle.read()
        except OSError:
            continue
        if state != "S" or "pipe" in wchan:
            return False
    return True


def test_rule4_flood_of_large_calls_keeps_memory_bounded(hserve, config, daemon, workspace):
    """§6 rule 4: with every worker busy (8 calls held at the daemon), a client floods 400
    tool calls of 1 MiB each.  The server stops reading while 64 wait (the flood stays in
    the pipe, and the notification that follows the 72nd call is not read until a place is
    free), and its peak memory (VmHWM) stays within its idle size plus the 72 calls it may
    hold, far below the 400 MiB an unbounded queue reaches."""
    needs_proc()
    # glibc keeps freed blocks below its (rising) mmap threshold for reuse; a fixed threshold
    # makes every block of 128 KiB or more its own mapping, returned when freed, so that
    # VmHWM measures what the server holds rather than what the allocator caches.
    server = hserve(config=config, timeout=30, env=MALLOC_PLAIN)
    server.initialize()
    gate = daemon.hold("listTasks")
    for index in range(HELD):
        server.send(server.request_message("tools/call", server.call_params("tasks", {}),
                                           id="held-%d" % index))
    assert gate.wait_arrived(timeout=SAFETY_TIMEOUT)
    pid = server.proc.pid
    idle_kib = peak_kib(pid)
    logged_before = len(server.stderr_lines)
    padding = "x" * FLOOD_SIZE
    done = threading.Event()

    def flood():
        try:
            for index in range(FLOOD_CALLS):
                server.send_raw(json.dumps(
                    {"jsonrpc": "2.0", "id": "flood-%d" % index, "method": "tools/call",
                     "params": {"name": "tasks", "arguments": {"status": "open", "pad": padding}}},
                    separators=(",", ":")).encode("ascii") + b"\n")
                # A notification after each call: the server logs it as soon as it reads it.
                server.send_raw(b'{"jsonrpc":"2.0","method":"notifications/progress","params":'
                                b'{"progressToken":"flood-%d","progress":1}}\n' % index)
        finally:
            done.set()

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    stdin_fd = server.proc.stdin.fileno()
    deadline = time.monotonic() + SAFETY_TIMEOUT * 4
    stalls = 0
    while not done.is_set() and stalls < 3:      # three looks in a row: it has stopped
        assert time.monotonic() < deadline, "the flood neither finished nor stalled"
        stalls = stalls + 1 if _stalled_reading(pid, stdin_fd) else 0
        done.wait(0.05)
    during_kib = peak_kib(pid)
    read_notifications = len(server.stderr_lines) - logged_before
    flood_read_all = done.is_set()
    gate.release()
    writer.join(SAFETY_TIMEOUT * 4)
    assert not writer.is_alive()
    for index in range(HELD):
        assert outcome_of(server.response("held-%d" % index))[0] == "ok"
    for index in range(FLOOD_CALLS):
        assert outcome_of(server.response("flood-%d" % index))[0] == "invalid_params"
    final_kib = peak_kib(pid)
    assert server.close() == 0
    held_kib = (HELD + QUEUE) * FLOOD_SIZE // 1024
    bound_kib = idle_kib + 2 * held_kib + 32 * 1024
    report("flood_memory", calls=FLOOD_CALLS, call_bytes=FLOOD_SIZE, idle_hwm_kib=idle_kib,
           peak_hwm_kib=during_kib, final_hwm_kib=final_kib, bound_kib=bound_kib,
           notifications_read_while_full=read_notifications)
    assert not flood_read_all, (
        "the server read all %d calls while %d were running: no backpressure" % (FLOOD_CALLS, HELD))
    assert read_notifications <= QUEUE + 2, read_notifications
    assert final_kib <= bound_kib, (
        "peak memory %d KiB past the bound %d KiB (idle %d KiB)" % (final_kib, bound_kib, idle_kib))


# =============================================================================
# Rule 5: every answer is written whole
# =============================================================================

def test_rule5_nonblocking_stdout_loses_no_answer(pyz, tmp_path, make_env, config, workspace, mcp_log):
    """§6 rule 5: the server's standard output is a non-blocking pipe (O_NONBLOCK, as some
    parents leave it) that the client reads only once it is full: all 300 answers arrive
    whole, each log line says ok, and the exit status is 0."""
    python = wrapper(tmp_path, "python-nonblocking-stdout",
                     "import fcntl\nflags = fcntl.fcntl(1, fcntl.F_GETFL)\n"
                     "fcntl.fcntl(1, fcntl.F_SETFL, flags | os.O_NONBLOCK)")
    env = make_env(dict(config.env(), MEMPROVE_MCP_LOG=str(mcp_log)))
    process = subprocess.Popen([python, str(pyz), "mcp", "serve"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                               cwd=str(workspace))
    count = 300
    params = modern_params({"name": "context", "arguments": {}})     # no handshake needed
    requests = b"".join(json.dumps({"jsonrpc": "2.0", "id": index, "method": "tools/call",
                                    "params": params}).encode() + b"\n"
                        for index in range(count))
    stderr_chunks = []
    err_reader = threading.Thread(target=lambda: stderr_chunks.append(process.stderr.read()),
                                  daemon=True)
    err_reader.start()
    process.stdin.write(requests)
    process.stdin.flush()
    out_fd = process.stdout.fileno()
    # Read nothing until the pipe is full (over 40,000 bytes and growing no more in three
    # looks): the server has met EAGAIN and must wait it out.
    deadline = time.monotonic() + SAFETY_TIMEOUT
    looks = [-1]
    while not (looks[-1] >= 40000 and looks[-3:] == [looks[-1]] * 3) and process.poll() is None:
        assert time.monotonic() < deadline, "the answers never filled the pipe: %r" % looks[-3:]
        select.select([], [], [], 0.02)
        looks.append(_pipe_bytes(out_fd))
    process.stdin.close()
    data = b""
    while True:
        ready = select.select([out_fd], [], [], SAFETY_TIMEOUT)[0]
        assert ready, "no answer within %ss" % SAFETY_TIMEOUT
        piece = os.read(out_fd, 4096)         # slowly: small reads
        if not piece:
            break
        data += piece
    code = process.wait(timeout=SAFETY_TIMEOUT)
    err_reader.join(SAFETY_TIMEOUT)
    lines = data.split(b"\n")
    assert lines[-1] == b""
    answers = [check_stdout_line(line + b"\n") for line in lines[:-1]]
    odd = [answer for answer in answers if "result" not in answer]
    assert not odd, odd[:3]
    log = stderr_chunks[0].decode().splitlines()
    report("nonblocking_stdout", requests=count, answers=len(answers), exit_code=code)
    assert sorted(answer["id"] for answer in answers) == list(range(count)), (
        "%d of %d answers arrived" % (len(answers), count))
    assert all(answer["result"]["isError"] is False for answer in answers)
    assert len(log) == count and all(parse_log(line)["outcome"] == "ok" for line in log), log[-3:]
    assert code == 0


# =============================================================================
# Rule 6: links in .memprove/ are not followed for writing
# =============================================================================

def _lock_symlink(directory, outside):
    (directory / "context.lock").symlink_to(outside / "planted.lock")


def _lock_directory(directory, outside):
    (directory / "context.lock").mkdir()


def _memprove_file(directory, outside):
    directory.rmdir()
    directory.write_bytes(b"a file, not a directory\n")


@pytest.mark.parametrize("make", [_lock_symlink, _lock_directory, _memprove_file],
                         ids=["context.lock-symlink-outside", "context.lock-a-directory",
                              ".memprove-a-file"])
@pytest.mark.parametrize("tool, args", [("begin", {"new_task": "Through a link"}),
                                        ("end", {})], ids=["begin", "end"])
def test_rule6_links_in_memprove_are_not_followed(hserve, config, daemon, workspace, tmp_path,
                                                   make, tool, args):
    """§6 rules 1 and 6: a `.memprove/context.lock` that is a symlink to a file outside the
    Workspace, a `context.lock` that is a directory, or a `.memprove` that is a file:
    `context_unreadable`, found with the context file before any daemon request, and no file
    is created at the link's target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    directory = workspace / ".memprove"
    make(directory, outside)
    server = hserve(config=config, timeout=5)
    server.initialize()
    daemon.clear_ops()
    code, text = call(server, tool, args)
    assert code == "context_unreadable", text
    assert daemon.ops == [], [entry["op"] for entry in daemon.ops]
    assert list(outside.iterdir()) == []
    assert server.close() == 0


# =============================================================================
# Rule 7: numbers from outside have bounds
# =============================================================================

@pytest.mark.parametrize("value", ["1e10", "inf", "86401", "1" * 5000],
                         ids=["1e10", "inf", "86401", "5000-digits"])
def test_rule7_timeout_out_of_bounds_is_ignored_with_a_warning(hserve, config, daemon, workspace,
                                                                value):
    """§6 rule 7: MEMPROVE_TIMEOUT past 86,400 seconds (or not finite) is ignored with a
    warning in `context`'s config.warnings, and the daemon tools still work."""
    server, _ = warned_about(hserve, config, "MEMPROVE_TIMEOUT", value)
    code, value_ = call(server, "begin", {"new_task": "Timeout bounds"})
    assert code == "ok", value_
    assert call(server, "tasks")[0] == "ok"
    assert server.close() == 0


def test_rule7_timeout_at_the_bound_is_used(hserve, config, daemon, workspace):
    """§6 rule 7: 86400 is within bounds: no warning."""
    server = hserve(config=config, env={"MEMPROVE_TIMEOUT": "86400"})
    server.initialize()
    code, shown = call(server, "context")
    assert code == "ok" and "MEMPROVE_TIMEOUT" not in shown["config"]["warnings"], shown
    assert call(server, "tasks")[0] == "ok"
    assert server.close() == 0


@pytest.mark.parametrize("value", ["1" * 5000, "1" * 19], ids=["5000-digits", "19-digits"])
def test_rule7_parent_session_of_many_digits_is_a_warning(hserve, config, daemon, workspace, value):
    """§6 rule 7: MEMPROVE_PARENT_SESSION has at most 18 digits; a longer one is ignored with
    a warning, never raised on, and `begin` still works."""
    server, _ = warned_about(hserve, config, "MEMPROVE_PARENT_SESSION", value, timeout=5)
    code, begun = call(server, "begin", {"new_task": "Parent digits"})
    assert code == "ok", begun
    assert begun["session"]["parent"] is None
    assert server.close() == 0


@pytest.mark.parametrize("where", ["fact", "checkpoint", "decide"])
def test_rule7_run_label_over_20_characters_is_invalid(begun, daemon, workspace, where):
    """§6 rule 7: a run label is at most 20 characters: `r` plus 5,000 digits (or 20) is
    `invalid_params`, and nothing is sent; 19 digits is a well-formed label that is unknown."""
    server, value = begun
    for label, expected in (("r" + "1" * 5000, "invalid_params"), ("r" + "1" * 20, "invalid_params"),
                            ("r" + "1" * 19, "run_label_unknown")):
        if where == "fact":
            tool, args = "checkpoint", {"facts": [{"text": "A fact.", "runs": [label]}]}
        elif where == "checkpoint":
            tool, args = "checkpoint", {"facts": [{"text": "A fact."}], "runs": [label]}
        else:
            tool, args = "decide", {"decision": "A decision.", "runs": [label]}
        daemon.clear_ops()
        code, text = call(server, tool, args)
        assert code == expected, (label[:30], text)
        if expected == "invalid_params":
            assert "1" * 21 not in text, text        # never the value
        assert daemon.ops == []
    assert server.close() == 0


# =============================================================================
# Rule 8: an id in flight is not reused
# =============================================================================

def _own_check(server):
    """The stream checks of conftest, allowing the one `"id": null` error of rule 8."""
    nulls = []
    for raw in server.raw_stdout:
        message = json.loads(raw.decode("utf-8"))
        if message.get("id", 0) is None:
            assert set(message) == {"jsonrpc", "id", "error"}, message
            nulls.append(message)
            continue
        check_stdout_line(raw)
    lines = server.stderr_lines
    for line in lines:
        parse_log(line)
    assert len(lines) == server.sent, (server.sent, lines)
    server.checked = True
    return nulls


def test_rule8_duplicate_id_in_flight_is_refused_and_cancel_still_applies(hserve, config, daemon,
                                                                          workspace):
    """§6 rule 8: while `tasks` id 7 waits at the daemon, a second request with id 7 gets
    -32600 with `"id": null` and is not executed; a cancellation of id 7 then still cancels
    the first (no answer with id 7 ever comes)."""
    server = hserve(config=config, timeout=30)
    server.initialize()
    assert call(server, "begin", {"new_task": "Duplicate ids"})[0] == "ok"
    daemon.clear_ops()
    gate = daemon.hold("listTasks")
    server.send(server.request_message("tools/call", server.call_params("tasks", {}), id=7))
    assert gate.wait_arrived(timeout=SAFETY_TIMEOUT)
    server.send(server.request_message("tools/call", server.call_params("tasks", {}), id=7))
    refused = server.next_message()
    assert refused == {"jsonrpc": "2.0", "id": None, "error": refused["error"]}, refused
    assert refused["error"]["code"] == -32600
    server.notify("notifications/cancelled", {"requestId": 7, "reason": "test"})
    server.send(server.request_message("ping", id="after-cancel"))
    assert server.response("after-cancel")["result"] == {}
    gate.release()
    server.wait_stderr_lines(server.sent)
    assert server.request("ping", id="last")["result"] == {}
    server.shut_input()
    assert server.wait() == 0
    assert [m for m in server.messages if m.get("id") == 7] == [], server.messages
    assert len(daemon_ops(daemon, "listTasks")) == 1, [e["op"] for e in daemon.ops]
    nulls = _own_check(server)
    assert len(nulls) == 1
    outcomes = [parse_log(line)["outcome"] for line in server.stderr_lines]
    assert outcomes.count("cancelled") == 1 and outcomes.count("-32600") == 1, outcomes


def test_rule8_duplicate_id_in_flight_first_keeps_its_one_answer(hserve, config, daemon, workspace):
    """§6 rule 8: without a cancellation, the request in flight gets exactly one answer, its
    own, and the duplicate is never executed."""
    server = hserve(config=config, timeout=30)
    server.initialize()
    assert call(server, "begin", {"new_task": "Duplicate ids"})[0] == "ok"
    daemon.clear_ops()
    gate = daemon.hold("listTasks")
    server.send(server.request_message("tools/call", server.call_params("tasks", {}), id="same"))
    assert gate.wait_arrived(timeout=SAFETY_TIMEOUT)
    server.send(server.request_message("tools/call",
                                       server.call_params("checkpoint", {"next_action": "Dup."}),
                                       id="same"))
    refused = server.next_message()
    assert refused.get("id", 0) is None and refused["error"]["code"] == -32600, refused
    gate.release()
    code, value = outcome_of(server.response("same"))
    assert code == "ok" and "tasks" in value, value
    assert server.request("ping", id="last")["result"] == {}
    server.shut_input()
    assert server.wait() == 0
    assert [m.get("id") for m in server.messages].count("same") == 1
    assert daemon_ops(daemon, "createCheckpoint") == []
    assert len(daemon_ops(daemon, "listTasks")) == 1
    _own_check(server)


# =============================================================================
# Rule 9: a lost answer stays a possible write
# =============================================================================

def test_rule9_lost_answer_then_refused_retry(begun, daemon, workspace):
    """§6 rule 9: createCheckpoint's answer is lost after the write (drop_after), and its
    retry is refused (500): the error's hint says the write may have been made."""
    server, value = begun
    daemon.inject("drop_after", op="createCheckpoint", count=1)
    daemon.inject("status500", op="createCheckpoint", count=1)
    code, text = call(server, "checkpoint", {"facts": [{"text": "Lost then refused."}]})
    assert len(daemon_ops(daemon, "createCheckpoint")) == 2
    assert code == "daemon_error", text
    assert LOST_HINT in text, text
    assert server.close() == 0


def test_rule9_lost_answer_then_daemon_gone(begun, daemon, workspace):
    """§6 rule 9: the daemon drops createCheckpoint's connection after making the write and
    then stops listening, so the retry's connection is refused: whatever the code, the hint
    says the write may have been made."""
    server, value = begun
    daemon.inject("drop_after", op="createCheckpoint", count=1)
    gate = daemon.hold("createCheckpoint")
    request_id = server.new_id()
    server.send(server.request_message("tools/call", server.call_params(
        "checkpoint", {"facts": [{"text": "Lost then gone."}]}), id=request_id))
    assert gate.wait_arrived(timeout=SAFETY_TIMEOUT)
    daemon.close_listener()
    gate.release()
    code, text = outcome_of(server.response(request_id))
    assert code in ("daemon_unavailable", "daemon_error", "daemon_timeout"), text
    assert LOST_HINT in text, text
    assert server.close() == 0


# =============================================================================
# Rule 10: end restores a whole context
# =============================================================================

def test_rule10_end_restores_the_parents_task(begun, daemon, workspace):
    """§6 rule 10: `begin new_task` from a Session of another Task, then `end`: the context
    gets back the parent Session and the parent's Task, and the next `checkpoint` works."""
    server, first = begun
    code, second = call(server, "begin", {"new_task": "A sub-task"})
    assert code == "ok", second
    assert second["session"]["parent"] == first["session"]["number"]
    assert second["task_id"] != first["task_id"]
    code, ended = call(server, "end")
    assert code == "ok", ended
    assert ended["context_session"] == first["session"]["number"]
    context = read_json(context_path(workspace))
    assert context["session"]["id"] == first["session_id"]
    assert context["task"]["id"] == first["task_id"], context["task"]
    assert context["task"]["number"] == first["task"]["number"]
    assert context["task"]["title"] == "Fixture task"
    code, done = call(server, "checkpoint", {"facts": [{"text": "Back on the first Task."}]})
    assert code == "ok", done
    assert done["task_id"] == first["task_id"] and done["session_id"] == first["session_id"]
    assert server.close() == 0


# =============================================================================
# Rule 11: every unusable setting is reported
# =============================================================================

@pytest.mark.parametrize("content, codes", [
    (b"", ("token_missing",)), (b"two words\n", ("token_malformed",)),
    # Not UTF-8: unreadable as text (token_missing) or a character a token cannot have.
    (b"\xff\xfe\n", ("token_missing", "token_malformed")),
], ids=["empty", "white-space-inside", "not-utf8"])
def test_rule11_too_open_token_file_warns_whatever_it_holds(hserve, config, daemon, workspace,
                                                           content, codes):
    """§6 rule 11: a token file readable by others that is empty or malformed still gives the
    log suffix `warning=token_file_too_open` and `token_file_mode: too_open`."""
    config.token_file.write_bytes(content)
    os.chmod(str(config.token_file), 0o644)
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, text = call(server, "tasks")
    assert code in codes, text
    code, shown = call(server, "context")
    assert code == "ok", shown
    assert shown["config"]["token_file_mode"] == "too_open", shown["config"]
    assert server.close() == 0
    records = server.log_records()
    tasks_line = [r for r in records if r["tool"] == "tasks"]
    assert tasks_line and tasks_line[0]["warning"], server.stderr_lines


def test_rule11_agent_name_over_64_characters_is_a_warning(hserve, config, daemon, workspace):
    """§6 rule 11: MEMPROVE_AGENT_NAME over 64 characters is ignored with a warning."""
    server, shown = warned_about(hserve, config, "MEMPROVE_AGENT_NAME", "n" * 65, timeout=5)
    assert shown["agent"]["name_from"] != "environment"
    code, begun = call(server, "begin", {"new_task": "Long agent name"})
    assert code == "ok" and begun["session"]["agent"]["name"] != "n" * 65, begun
    assert server.close() == 0


def test_rule11_deleted_working_directory(hserve, config, daemon, tmp_path):
    """§6 rule 11 and §2: a deleted working directory gives `workspace_unusable` from the tools
    (before any daemon operation) and a working `context` (`workspace.root` null, problem
    `workspace_unusable`)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    server = hserve(config=config, timeout=5, cwd=gone)
    server.initialize()
    gone.rmdir()
    daemon.clear_ops()
    for tool, args in (("begin", {"new_task": "Nowhere"}), ("tasks", {}), ("checkpoint",
                       {"next_action": "x"}), ("pack", {}), ("end", {})):
        code, text = call(server, tool, args)
        assert code == "workspace_unusable", (tool, text)
    assert daemon.ops == []
    code, shown = call(server, "context")
    assert code == "ok", shown
    assert shown["workspace"]["root"] is None
    assert shown["workspace"]["problem"] == "workspace_unusable"
    assert not gone.exists()
    assert server.close() == 0


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


# =============================================================================
# Rule 12: files keep their mode
# =============================================================================

@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600])
def test_rule12_rewrite_keeps_the_mode(begun, workspace, mode):
    """§6 rule 12: a rewrite of context.json keeps the mode of the file it replaces."""
    server, value = begun
    os.chmod(str(context_path(workspace)), mode)
    assert call(server, "begin", {})[0] == "ok"
    assert stat.S_IMODE(context_path(workspace).stat().st_mode) == mode
    assert call(server, "end")[0] == "ok"
    assert stat.S_IMODE(context_path(workspace).stat().st_mode) == mode
    assert server.close() == 0


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_rule12_new_context_gets_the_umasks_mode(hserve, config, daemon, workspace, tmp_path, umask):
    """§6 rule 12: a new context.json gets the mode any new file gets under the umask."""
    python = wrapper(tmp_path, "python-umask-%03o" % umask, "os.umask(%d)" % umask)
    server = hserve(python=python, config=config, timeout=5)
    server.initialize()
    assert call(server, "begin", {"new_task": "Umask %03o" % umask})[0] == "ok"
    assert stat.S_IMODE(context_path(workspace).stat().st_mode) == 0o666 & ~umask
    assert server.close() == 0


# =============================================================================
# §2: a Workspace that cannot be used
# =============================================================================

@pytest.mark.parametrize("variable", ["CLAUDE_PROJECT_DIR", "MEMPROVE_WORKSPACE"])
def test_s2_start_directory_that_does_not_exist(hserve, config, daemon, workspace, tmp_path, variable):
    """§2: CLAUDE_PROJECT_DIR or MEMPROVE_WORKSPACE naming a directory that does not exist:
    `workspace_unusable` before any daemon operation, nothing created; `context` answers with
    the path and the problem."""
    missing = tmp_path / "no" / "such" / "project"
    server = hserve(config=config, timeout=5, env={variable: str(missing)})
    server.initialize()
    daemon.clear_ops()
    for tool, args in (("begin", {"new_task": "Mistyped"}), ("tasks", {}), ("end", {})):
        code, text = call(server, tool, args)
        assert code == "workspace_unusable", (tool, text)
    assert daemon.ops == []
    assert not (tmp_path / "no").exists()
    code, shown = call(server, "context")
    assert code == "ok", shown
    assert shown["workspace"]["problem"] == "workspace_unusable"
    assert shown["workspace"]["found_by"] == variable
    assert shown["workspace"]["root"] == server_path(missing)
    assert server.close() == 0


def test_s2_start_directory_that_is_a_file(hserve, config, daemon, workspace, tmp_path):
    """§2: a start directory that is a file is `workspace_unusable` too."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    server = hserve(config=config, timeout=5, env={"CLAUDE_PROJECT_DIR": str(a_file)})
    server.initialize()
    code, text = call(server, "begin", {"new_task": "A file"})
    assert code == "workspace_unusable", text
    assert daemon.ops == [] and a_file.read_text() == "x"
    assert server.close() == 0


@pytest.mark.parametrize("how", ["working-directory", "CLAUDE_PROJECT_DIR"])
def test_s2_workspace_path_not_utf8(hserve, config, daemon, tmp_path, how):
    """§2: a Workspace root whose name is not valid UTF-8 (`ws\\xff`) cannot be sent to the
    daemon as the same string in a query and a body: `workspace_unusable` before any daemon
    operation, while `context` answers with `"problem": "workspace_unusable"`."""
    raw = os.fsencode(str(tmp_path)) + b"/ws\xff"
    os.mkdir(raw)
    os.mkdir(raw + b"/.memprove")
    os.mkdir(raw + b"/.git")
    root = os.fsdecode(raw)
    if how == "working-directory":
        server = hserve(config=config, timeout=5, cwd=root)
    else:
        server = hserve(config=config, timeout=5, env={"CLAUDE_PROJECT_DIR": root})
    server.initialize()
    daemon.clear_ops()
    for tool, args in (("begin", {"new_task": "Not UTF-8"}), ("tasks", {}), ("begin", {"task": 1})):
        code, text = call(server, tool, args)
        assert code == "workspace_unusable", (tool, text)
    assert daemon.ops == []
    assert os.listdir(raw + b"/.memprove") == []
    code, shown = call(server, "context")
    assert code == "ok", shown
    assert shown["workspace"]["problem"] == "workspace_unusable"
    assert server.close() == 0


def test_s2_usable_workspace_reports_no_problem(hserve, config, daemon, workspace):
    """§2: a usable Workspace: `context`'s workspace.problem is null."""
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, shown = call(server, "context")
    assert code == "ok" and shown["workspace"]["problem"] is None, shown
    assert server.close() == 0
