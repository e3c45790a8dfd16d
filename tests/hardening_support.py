"""Shared helpers of the hardening suite (issue 5): sizes, figures, the guards that
scan every captured stream, an oracle for the wire, the ledger as the test sees it.

Sizes come from the test profile (conftest.depth: the "ci" profile's below, a fifth
of them by default) unless the environment sets them, so that a longer run is one
variable away:

    MEMPROVE_FUZZ_EXAMPLES   hypothesis examples per wire-fuzz test and interpreter
                             (raw-byte cases: ten times as many), and per tool in
                             the tool fuzz                           (CI: 300)
    MEMPROVE_FAULT_ROUNDS    daemon faults to inject on writes        (CI: 1000)
    MEMPROVE_SOAK_CALLS      tool calls in the soak's one process     (CI: 10000)
    MEMPROVE_RELIABILITY_REPORT  a file that gets one JSON line of figures per test

Every figure a test measures is printed (`pytest -s` or `-rA` shows it) and, when
MEMPROVE_RELIABILITY_REPORT is set, appended there as one JSON line.

Tests about other users (another user's cache, `.memprove/`, or listener) run as root and
act through `local_users`: LocalUser gives the Popen arguments that run a process as a uid
of its own (`start_server(user=...)`, `run_cli(user=...)`), Users a directory every user can
pass through with the .pyz, ledgerd.py and an interpreter they can run; a skip says why
when the tests are not root.
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from harness import (PROBLEM_CODES, SAFETY_TIMEOUT, clean_env, default_server_python, depth, run_cli,
                     strict, tool_value)


def _size(name, default):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    value = int(raw)
    if value < 1:
        raise ValueError("%s must be a positive integer" % name)
    return value


FUZZ_EXAMPLES = _size("MEMPROVE_FUZZ_EXAMPLES", depth(300))
FAULT_ROUNDS = _size("MEMPROVE_FAULT_ROUNDS", depth(1000))
SOAK_CALLS = _size("MEMPROVE_SOAK_CALLS", depth(10000))

MAX_LINE = 16 * 1024 * 1024          # protocol.md: a line over 16 MiB is refused
TIMEOUT = "0.5"                      # MEMPROVE_TIMEOUT for servers that meet faults

# glibc keeps freed blocks below its (rising) mmap threshold for reuse; a fixed threshold
# makes every block of 128 KiB or more its own mapping, returned when freed, so that a
# server's VmHWM measures what it holds rather than what the allocator caches.
MALLOC_PLAIN = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def skip_or_fail(reason, module_level=False):
    """A missing prerequisite: skipped, or failed when strict() (never skipped silently)."""
    if strict():
        pytest.fail(reason + " (MEMPROVE_TEST_STRICT=1 requires it)", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)


def needs_proc():
    # Linux's /proc (under Wine, a Windows Python sees it as Z:\proc and could not use it).
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/status"):
        skip_or_fail("needs /proc to measure a process")


def hypothesis_or_fail():
    import importlib.util
    if importlib.util.find_spec("hypothesis") is None:
        skip_or_fail("hypothesis is not installed: run the README's test command, which "
                     "installs pyproject.toml's test extra into .venv/", module_level=True)


# The fuzzers' Hypothesis settings, shared by the files they test (each calls
# hypothesis_or_fail() before it imports hypothesis).
try:
    from hypothesis import HealthCheck, Phase
except ImportError:
    SETTINGS = NO_SHRINK = None
else:
    SETTINGS = dict(deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
    # Each of the fuzzers of issue 18's input classes (client responses, hostile .memprove/
    # trees, client files) shares one world (a server, the daemon, files) between its
    # examples, so a failure is not shrunk (a replay would meet another world, and a server
    # stuck on one case fails every later one): the first failure stops the test, naming its
    # case.
    NO_SHRINK = dict(SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate])

# Characters that hide or reorder text (contract.md §6 rule 33): a tag character, a variation
# selector of the supplementary plane (str.isprintable() passes it), a bidi override and
# isolate, zero-width space, byte order mark, interlinear annotation anchor.
HIDING = "\U000e0041\U000e0100\u202e\u2066\u200b\ufeff\ufff9"
# Line breaks and controls a text from a repository may hold (contract.md §6 rules 20 and 23),
# and the characters that hide text, which doctor and the tools show as they show a control.
LINE_BREAKERS = "\n\r\t\x0b\x0c\x1b\x7f\x85\x9b\u2028\u2029" + HIDING


# ---------------------------------------------------------------------------
# The tool fuzzers' world (test_tool_dispatch.py, test_daemon_client.py)
# ---------------------------------------------------------------------------

def ascii_context(path):
    """context.json parsed, once it is seen to be ASCII (contract.md §6 rule 2); None when
    there is no file to read."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    assert data.isascii(), data[:300]
    context = json.loads(data.decode("ascii"))
    assert isinstance(context, dict), context
    return context


class World:
    """A server and the reference daemon with a Task, a Session, claims of every kind
    and two Runs (r1 failed, r2 passed), for the tool fuzz."""

    def __init__(self, server, daemon, config, workspace):
        self.server, self.daemon, self.config, self.workspace = server, daemon, config, workspace
        self.serial = 0
        self.begin("Fuzz world")
        import ledgerd
        session_id = self.context()["session"]["id"]
        for code in (1, 0):
            ledgerd.memprove_run(daemon.url, config.token, str(workspace), session_id,
                                 "pytest -q", code)
        self.labels = ["r1", "r2"]
        code, value = self.call("checkpoint", {
            "facts": [{"text": "A fact.", "runs": ["r1"]}, {"text": "Another fact."}],
            "open_items": ["An open item.", "Another open item."],
            "next_action": "Do the next thing."})
        assert code == "ok", value
        code, value = self.call("decide", {"decision": "A decision.", "rationale": "Because."})
        assert code == "ok", value

    def context(self):
        return json.loads((self.workspace / ".memprove" / "context.json").read_text("utf-8"))

    def call(self, tool, args, era="legacy"):
        self.serial += 1
        self.last_response = self.server.call(tool, args, era=era, id="t%d" % self.serial)
        return outcome_of(self.last_response, era)

    def begin(self, title):
        code, value = self.call("begin", {"new_task": title})
        assert code == "ok", value

    def poison_context(self, value):
        """Another tool's key in context.json, holding lone surrogates (as \\u escapes)."""
        path = self.workspace / ".memprove" / "context.json"
        try:
            context = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, ValueError):
            return
        context["x-fuzz-other-tool"] = value
        path.write_bytes(json.dumps(context, indent=2).encode("ascii"))

    def check_context(self, poison):
        """contract.md §6 rule 2: context.json is ASCII JSON, and keeps unknown keys."""
        context = ascii_context(self.workspace / ".memprove" / "context.json")
        if context is not None and poison is not None:
            assert context.get("x-fuzz-other-tool") == poison, context

    def ensure_session(self):
        try:
            context = self.context()
        except (OSError, ValueError):
            context = {}
        if not context.get("session"):
            code, value = self.call("begin", {})
            if code != "ok":
                self.begin("Fuzz world again")


@pytest.fixture
def world(hserve, config, daemon, workspace, planted):
    watch = TokenWatch(daemon, [config.token], planted)
    server = hserve(config=config, timeout=5)
    server.initialize()
    built = World(server, daemon, config, workspace)
    yield built
    watch.check()


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------

def report(test, **figures):
    """Print the figures of a test and append them as one JSON line to
    MEMPROVE_RELIABILITY_REPORT when it is set."""
    record = {"test": test}
    record.update(figures)
    line = json.dumps(record, sort_keys=False)
    print("\nRELIABILITY " + line)
    path = os.environ.get("MEMPROVE_RELIABILITY_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    return record


def peak_kib(pid):
    """VmHWM of a live process: the most memory it has held at once."""
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/%d/status" % pid)


def proc_stats(pid):
    """{"rss_kib", "fds", "threads"} of a live process, from /proc."""
    stats = {}
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                stats["rss_kib"] = int(line.split()[1])
            elif line.startswith("Threads:"):
                stats["threads"] = int(line.split()[1])
    stats["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    return stats


# ---------------------------------------------------------------------------
# Guards: the MCP internal-error log and the daemon's view of the token
# ---------------------------------------------------------------------------

@pytest.fixture
def mcp_log(tmp_path):
    """A MEMPROVE_MCP_LOG path; the server appends a traceback (frames only) there
    for every internal_error.  Checked after the test: it must not exist."""
    return tmp_path / "mcp-internal-errors.log"


@pytest.fixture(autouse=True)
def no_internal_error(mcp_log, planted):
    """Every hardening test: no server wrote a traceback (an internal_error), and if one
    did, it carries no planted value."""
    yield
    if mcp_log.exists():
        text = mcp_log.read_text("utf-8", "replace")
        for secret in planted:
            assert secret not in text, "a planted value is in the MCP log"
        pytest.fail("the server recorded an internal_error (a traceback):\n" + text[:4000])


class TokenWatch:
    """Wraps a ledgerd.Daemon so that every request it receives is checked as it
    arrives: the token only in `Authorization: Bearer <token>`, never in the path, the
    query, the body or another header; no planted value in a header."""

    def __init__(self, daemon, tokens, planted):
        self.daemon = daemon
        self.tokens = set(tokens)
        self.planted = planted
        self.problems = []
        self.seen = 0
        self.authorized = Counter()
        original = daemon._arrive

        def arrive(entry):
            self.inspect(entry)
            return original(entry)

        daemon._arrive = arrive

    def inspect(self, entry):
        self.seen += 1
        headers = dict(entry.get("headers") or {})
        auth = headers.pop("authorization", "")
        if auth.startswith("Bearer "):
            self.authorized[auth[len("Bearer "):]] += 1
        elsewhere = json.dumps([entry.get("path"), entry.get("query"), entry.get("body"), headers],
                               ensure_ascii=False)
        for token in self.tokens:
            if token in elsewhere:
                self.problems.append("the token was sent outside the Authorization header: %s %s"
                                     % (entry.get("method"), entry.get("op")))
        for value in self.planted:
            if value in json.dumps(headers, ensure_ascii=False):
                self.problems.append("a planted value is in a request header")

    def check(self):
        assert not self.problems, self.problems[:5]


# ---------------------------------------------------------------------------
# A listener that records every connection (a would-be proxy or redirect target)
# ---------------------------------------------------------------------------

class Spy:
    """A TCP listener on `host` that accepts and records every connection and the
    first bytes sent on it, then closes it."""

    def __init__(self, host="127.0.0.1"):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.received = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._stop:
                conn.close()
                return
            conn.settimeout(2.0)
            try:
                data = conn.recv(65536)
            except OSError:
                data = b""
            self.received.append(data)
            conn.close()

    @property
    def url(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%d" % (host, self.port)

    def close(self):
        self._stop = True
        try:
            # Wake accept() so that the thread ends.
            socket.create_connection((self.host, self.port), timeout=1).close()
        except OSError:
            pass
        self.sock.close()
        self._thread.join(5)


def non_loopback_address():
    """An IPv4 address of this machine that is not loopback, or None."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))      # no packet is sent for a UDP connect
        address = probe.getsockname()[0]
    except OSError:
        address = None
    finally:
        probe.close()
    if not address or address.startswith("127.") or address == "0.0.0.0":
        return None
    try:
        socket.socket().bind((address, 0))
    except OSError:
        return None
    return address


# ---------------------------------------------------------------------------
# Tool results
# ---------------------------------------------------------------------------

PROBLEM_TEXT = re.compile(r"([a-z][a-z0-9_]*): ")


def outcome_of(response, era=None):
    """'ok' and the structuredContent, or the Problem code and the error text, of a
    tools/call response; fails on a JSON-RPC error or a malformed result."""
    assert "error" not in response, "a JSON-RPC error for a tools/call: %r" % (response,)
    result = response["result"]
    assert isinstance(result.get("content"), list) and len(result["content"]) == 1, result
    content = result["content"][0]
    assert content.get("type") == "text" and isinstance(content.get("text"), str), result
    if era == "modern":
        assert result.get("resultType") == "complete", result
    elif era == "legacy":
        assert "resultType" not in result, result
        assert set(result.get("_meta") or {}) <= {"memprove/pack"}, result
    if result.get("isError") is True:
        text = content["text"]
        match = PROBLEM_TEXT.match(text)
        assert match, "an error text without a Problem code: %r" % text[:200]
        code = match.group(1)
        assert "structuredContent" not in result, result
        assert "Traceback" not in text, text
        return code, text
    return "ok", tool_value(result)


def call_tool(server, tool, args=None, era="legacy", timeout=SAFETY_TIMEOUT):
    """outcome_of a tools/call of `tool` with `args` (default {}), its answer awaited up to
    `timeout` (the harness's safety net)."""
    request_id = server.new_id()
    params = server.call_params(tool, {} if args is None else args, era=era)
    server.send(server.request_message("tools/call", params, id=request_id))
    return outcome_of(server.response(request_id, timeout=timeout), era)


def ok_value(response):
    """The value of a successful tools/call response (its outcome checked to be ok)."""
    code, value = outcome_of(response)
    assert code == "ok", value
    return value


def context_path(root):
    return Path(root) / ".memprove" / "context.json"


def context_bytes(root):
    return context_path(root).read_bytes()


def ascii_context_of(root):
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
    code, shown = call_tool(server, "context")
    assert code == "ok", shown
    assert name in shown["config"]["warnings"], shown["config"]
    return server, shown


def append_filler(path, unit, total):
    """Append `unit` repeated up to `total` bytes, written a MiB at a time."""
    block = unit * max(1, (1 << 20) // len(unit))
    with open(str(path), "ab") as handle:
        written = 0
        while written < total:
            handle.write(block)
            written += len(block)
    return written


@pytest.fixture
def begun(hserve, config, daemon, workspace):
    """A server with a Task and an open Session in the context."""
    return begun_server(hserve, config, "Fixture task")


# ---------------------------------------------------------------------------
# The wire oracle: what protocol.md makes the server answer to a chunk of bytes
# ---------------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError(name)


def split_lines(data):
    """The server's framing: lines ending in \\n (the last one may lack it at EOF
    only), a trailing \\r dropped, blank lines skipped.  Returns the raw lines."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for line in lines:
        if len(line) > MAX_LINE:
            out.append(line)
            continue
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.strip():
            out.append(line)
    return out


def id_key(value):
    return (type(value).__name__, value)


def valid_id(value):
    return isinstance(value, (str, int)) and not isinstance(value, bool)


class Expectation:
    """What a chunk of complete lines must produce.

    must: Counter of id keys that get exactly that many responses (any result or
    error, but never -32603 or -32700); maybe: id keys that may get one (a tools/call
    cancelled in the same chunk); noid: the number of error responses without id
    (-32700 or -32600, never anything else)."""

    def __init__(self):
        self.must = Counter()
        self.maybe = set()
        self.noid = 0
        self.calls = set()       # id keys of tools/call requests
        self.messages = 0        # non-blank lines (messages, as the log counts them)

    def add_line(self, line):
        self.messages += 1
        if len(line) > MAX_LINE:
            self.noid += 1
            return
        try:
            message = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            self.noid += 1
            return
        self.add_message(message)

    def add_message(self, message):
        if not isinstance(message, dict):
            self.noid += 1                     # batch or not an object: -32600
            return
        has_id = "id" in message
        request_id = message.get("id")
        echo = has_id and valid_id(request_id)
        if message.get("jsonrpc") != "2.0":
            self._answer(echo, request_id)
            return
        if "method" not in message:
            if has_id and ("result" in message or "error" in message):
                return                         # a client's response: ignored
            self._answer(echo, request_id)
            return
        if not isinstance(message["method"], str):
            self._answer(echo, request_id)
            return
        if not has_id:
            params = message.get("params")
            if message["method"] == "notifications/cancelled" and isinstance(params, dict):
                target = params.get("requestId")
                if valid_id(target) and id_key(target) in self.calls:
                    self.maybe.add(id_key(target))
            return                             # a notification: never answered
        if not echo:
            self.noid += 1
            return
        key = id_key(request_id)
        self.must[key] += 1
        if message["method"] == "tools/call":
            self.calls.add(key)

    def _answer(self, echo, request_id):
        if echo:
            self.must[id_key(request_id)] += 1
        else:
            self.noid += 1

    def settle(self):
        for key in self.maybe:
            self.must.pop(key, None)


def take_noid(server):
    """Remove and return the id-less messages the server's stash holds."""
    found = [m for m in server._stash if "id" not in m]
    server._stash[:] = [m for m in server._stash if "id" in m]
    return found


def claim_response(server, key, timeout=SAFETY_TIMEOUT):
    """The next response whose id has this key (type name, value)."""
    kind, value = key
    for index, message in enumerate(server._stash):
        if "id" in message and id_key(message["id"]) == key:
            return server._stash.pop(index)
    deadline = time.monotonic() + timeout
    while True:
        message = server._pull(max(0.01, deadline - time.monotonic()))
        if "id" in message and id_key(message["id"]) == key:
            return message
        server._stash.append(message)


def check_wire_response(message):
    """No response to anything is -32603 or has a traceback; a tool result's error
    text begins with a Problem code that is not internal_error."""
    assert "unparseable" not in message, message
    if "error" in message:
        code = message["error"]["code"]
        assert code in (-32700, -32600, -32601, -32602, -32022), message
        assert "Traceback" not in message["error"]["message"], message
        if "id" not in message:
            assert code in (-32700, -32600), message
        return
    result = message["result"]
    if isinstance(result, dict) and "content" in result and "isError" in result:
        if result["isError"]:
            text = result["content"][0]["text"]
            match = PROBLEM_TEXT.match(text)
            assert match and match.group(1) in PROBLEM_CODES, text[:200]
            assert match.group(1) != "internal_error", text[:200]


# ---------------------------------------------------------------------------
# The ledger, read by the test straight from the daemon's SQLite file
# ---------------------------------------------------------------------------

class LedgerView:
    """Read-only queries on ledger.sqlite3 (WAL: readers never block the daemon)."""

    def __init__(self, db_path):
        self.conn = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True,
                                    check_same_thread=False)
        # Texts with a lone surrogate are BLOBs in ledgerd's store: read them back as str.
        self.conn.row_factory = lambda cursor, values: sqlite3.Row(cursor, tuple(
            value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value
            for value in values))

    def close(self):
        self.conn.close()

    def entries(self):
        return [(row["op"], json.loads(row["data"]))
                for row in self.conn.execute("SELECT op, data FROM ledger ORDER BY pos")]

    def rows(self, sql, *args):
        return self.conn.execute(sql, args).fetchall()

    def claim_texts(self):
        return Counter(row["text"] for row in self.rows("SELECT text FROM claims"))

    def task_titles(self):
        return Counter(row["title"] for row in self.rows("SELECT title FROM tasks"))

    def session_agents(self):
        return Counter(row["agent_name"] for row in self.rows("SELECT agent_name FROM sessions"))


def duplicate_entries(entries):
    """Ledger entries that record the same write twice: the same claim text created
    twice, the same task title, the same session agent name, a Session ended twice, the
    same transition of a Task twice.  (The tests make every such value unique.)"""
    seen, duplicates = Counter(), []
    for op, data in entries:
        if op == "createCheckpoint":
            keys = [("claim", claim["text"]) for claim in data["claims"]]
        elif op == "proposeDecision":
            keys = [("claim", data["text"])]
        elif op == "createTask":
            keys = [("task", data["title"])]
        elif op == "createSession":
            keys = [("session", data["agent"]["name"])]
        elif op == "endSession":
            keys = [("end", data["session_id"])]
        elif op == "transitionTask":
            keys = [("transition", data["task_id"], data["from"], data["to"])]
        elif op == "resolveWorkspace":
            keys = [("workspace", data["root"])]
        else:
            keys = [(op, json.dumps(data, sort_keys=True))]
        for key in keys:
            seen[key] += 1
            if seen[key] == 2:
                duplicates.append(key)
    return duplicates


def daemon_post(daemon, token, path, body):
    """One write to the reference daemon as a test's own setup (not the server's): the
    answer's JSON; a status other than 200 or 201 fails."""
    import http.client
    import uuid
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=SAFETY_TIMEOUT)
    try:
        connection.request("POST", path, body=json.dumps(body).encode("utf-8"), headers={
            "Authorization": "Bearer " + token, "Content-Type": "application/json",
            "Idempotency-Key": str(uuid.uuid4())})
        response = connection.getresponse()
        answer = json.loads(response.read().decode("utf-8"))
    finally:
        connection.close()
    assert response.status in (200, 201), answer
    return answer


def open_task(daemon, token, root, title):
    """A Task of the Workspace at `root` that no agent has begun (status open)."""
    workspace = daemon_post(daemon, token, "/v1/workspaces/resolve", {"root": str(root)})
    task = daemon_post(daemon, token, "/v1/tasks", {"workspace_id": workspace["workspace"]["id"],
                                                    "title": title})["task"]
    assert task["status"] == "open", task
    return task


def read_json(path):
    with open(str(path), "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*"))


# ---------------------------------------------------------------------------
# Starting servers with the guards in place
# ---------------------------------------------------------------------------

@pytest.fixture
def hserve(start_server, mcp_log):
    """hserve(python=None, env=None, cwd=None, config=None, timeout=None, args=(), **more)
    -> Server with MEMPROVE_MCP_LOG set (see no_internal_error) and, given a config, its
    directory; `more` goes to start_server (program=, user=)."""
    def start(python=None, env=None, cwd=None, config=None, timeout=None, args=(), **more):
        extra = {"MEMPROVE_MCP_LOG": str(mcp_log)}
        if config is not None:
            extra.update(config.env())
        if timeout is not None:
            extra["MEMPROVE_TIMEOUT"] = str(timeout)
        extra.update(env or {})
        return start_server(python=python, env=extra, cwd=cwd, args=args, **more)
    return start


def begun_server(hserve, config, title, python=None):
    """A server (with config, MEMPROVE_TIMEOUT=5), initialized, after a legacy
    `begin {"new_task": title}` that succeeded: (server, begin's value)."""
    server = hserve(python=python, config=config, timeout=5)
    server.initialize()
    code, value = outcome_of(server.call("begin", {"new_task": title}), "legacy")
    assert code == "ok", value
    return server, value


# ---------------------------------------------------------------------------
# Other users of the machine (the tests run as root)
# ---------------------------------------------------------------------------
# Some rules are about another user's files and sockets (contract.md §5's cache, §6 rules
# 15 and 17).  Root runs each party as a uid of its own (no passwd entry needed): a
# LocalUser gives the Popen arguments for it (`start_server(user=...)`,
# `run_cli(user=...)`), and `local_users` gives a world-traversable directory with the
# .pyz, tests/ledgerd.py and an interpreter every user can run.

VICTIM_UID, OTHER_UID, THIRD_UID = 54321, 54322, 54323


def needs_root(why):
    """Skip, saying why, unless the tests run as root (.ci/run does; under
    MEMPROVE_TEST_STRICT=1 a run that is not root fails here instead)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        skip_or_fail("needs root to %s: the test runs processes as other uids (%d-%d); run it "
                     "as root, as .ci/run does" % (why, VICTIM_UID, THIRD_UID))


def chown_tree(path, uid, gid):
    """`path` and everything under it owned by uid:gid (links themselves, never followed)."""
    path = Path(path)
    os.chown(str(path), uid, gid, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for below in path.rglob("*"):
            os.chown(str(below), uid, gid, follow_symlinks=False)


class LocalUser:
    """A user of this machine: a uid, a group of the same number, a home of its own."""

    def __init__(self, uid, home):
        self.uid = self.gid = uid
        self.home = home

    def __repr__(self):
        return "LocalUser(%d)" % self.uid

    def popen_kwargs(self):
        """Popen's arguments that run the child as this user, with no supplementary group."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def own(self, *paths):
        for path in paths:
            chown_tree(path, self.uid, self.gid)

    def env(self, extra=None):
        """What the user's processes get on top of conftest.clean_env: its HOME, no cache
        outside it."""
        values = {"HOME": str(self.home), "XDG_CACHE_HOME": str(self.home / ".cache")}
        values.update(extra or {})
        return values


def reachable_by_others(path):
    """True when any user can run `path`: every directory above it, and above the file
    it links to (a virtual environment's python links to its base interpreter), lets
    others through, and the file itself lets them read and run it."""
    real = os.path.realpath(path)
    if os.stat(real).st_mode & 0o005 != 0o005:
        return False
    for start in (os.path.abspath(path), real):
        place = os.path.dirname(start)
        while True:
            if os.stat(place).st_mode & 0o001 == 0:
                return False
            parent = os.path.dirname(place)
            if parent == place:
                break
            place = parent
    return True


def python_for_others():
    """An interpreter every user can run: sys.executable when its directories let others
    through (pyenv under /root does not), else the system's python3."""
    for candidate in (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if candidate and reachable_by_others(candidate):
            return candidate
    skip_or_fail("no Python 3 interpreter that other users can run (sys.executable is under "
                 "a directory closed to them, and /usr/bin/python3 is missing)")


class Users:
    """A directory every user can pass through (mode 0755, under /tmp, not pytest's
    root-only tmp_path), the .pyz and tests/ledgerd.py copied there, an interpreter every
    user can run, and three users: `victim` runs the server, `other` and `third` are the
    other users whose files and sockets it meets."""

    def __init__(self, base, pyz):
        self.base = base
        self.python = python_for_others()
        self.pyz = base / "memprove_mcp.pyz"
        shutil.copyfile(str(pyz), str(self.pyz))
        self.ledgerd = base / "ledgerd.py"
        shutil.copyfile(str(Path(__file__).resolve().parent / "ledgerd.py"), str(self.ledgerd))
        for path in (self.pyz, self.ledgerd):
            os.chmod(str(path), 0o644)
        self.victim = self.user(VICTIM_UID)
        self.other = self.user(OTHER_UID)
        self.third = self.user(THIRD_UID)
        self.processes = []

    def user(self, uid):
        home = self.directory("home-%d" % uid, mode=0o700)
        user = LocalUser(uid, home)
        user.own(home)
        return user

    def directory(self, relative, owner=None, mode=0o755):
        """base/relative, made (parents 0755 root's), owned by `owner` (a LocalUser; None:
        root), with `mode`."""
        path = self.base / relative
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(str(path), mode)
        if owner is not None:
            owner.own(path)
        return path

    def mcp_log(self, user):
        """A MEMPROVE_MCP_LOG the user can write; checked at teardown like mcp_log."""
        return self.base / ("mcp-internal-errors-%d.log" % user.uid)

    def server_env(self, user, extra=None):
        """A user's server environment: its HOME and MEMPROVE_MCP_LOG, then `extra`."""
        values = {"MEMPROVE_MCP_LOG": str(self.mcp_log(user))}
        values.update(extra or {})
        return user.env(values)

    def spawn(self, argv, user=None, **options):
        """A process of `user` (None: root) that is killed at teardown if still running."""
        process = subprocess.Popen(argv, **dict(options, **(user.popen_kwargs() if user else {})))
        self.processes.append(process)
        return process

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        logs = sorted(self.base.glob("mcp-internal-errors-*.log"))
        texts = [path.read_text("utf-8", "replace")[:2000] for path in logs]
        shutil.rmtree(str(self.base), ignore_errors=True)
        if texts:
            pytest.fail("a server of another user recorded an internal_error:\n" + "\n".join(texts))


@pytest.fixture
def local_users(pyz):
    """Users (see there); a skip that says why unless the tests run as root."""
    needs_root("act as several users")
    base = Path(tempfile.mkdtemp(prefix="memprove-users-", dir="/tmp"))
    os.chmod(str(base), 0o755)
    users = Users(base, pyz)
    try:
        yield users
    finally:
        users.close()


@pytest.fixture
def private_place():
    """A new folder that no other user can change, nor any folder above it (contract.md §6
    rule 25 asks this of a kit's folder; pytest's tmp_path lies in /tmp, which anyone can
    write): as root, made in /var/lib/memprove-mcp-tests (which tests/pythons.sh binds
    into its chroot, as it binds /tmp, and other users can pass through); otherwise in
    ~/.cache/memprove-mcp-tests (where the tests keep what they install).  Removed after
    the test."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        base = Path("/var/lib/memprove-mcp-tests")
        base.mkdir(exist_ok=True)
        os.chmod(str(base), 0o755)
    else:
        base = Path.home() / ".cache" / "memprove-mcp-tests"
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(str(base), 0o700)
    place = Path(tempfile.mkdtemp(prefix="memprove-private-", dir=str(base)))
    os.chmod(str(place), 0o755)
    try:
        yield place
    finally:
        for below in [place] + list(place.rglob("*")):      # a test may leave a folder 0555
            if below.is_dir() and not below.is_symlink():
                os.chmod(str(below), 0o755)
        shutil.rmtree(str(place), ignore_errors=True)

LISTENER = r"""
import socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((host, port))
sock.listen(16)
port = sock.getsockname()[1]
print("ready %d" % port, flush=True)
stopping = threading.Event()

def serve():
    while True:
        conn, _ = sock.accept()
        if stopping.is_set():
            conn.close()
            return
        conn.settimeout(2.0)
        data = b""
        try:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                piece = conn.recv(65536)
                if not piece:
                    break
                data += piece
        except OSError:
            pass
        print("connection " + data.hex(), flush=True)
        conn.close()

thread = threading.Thread(target=serve, daemon=True)
thread.start()
sys.stdin.readline()
stopping.set()
socket.create_connection((host, port), timeout=5).close()
thread.join(10)
print("done", flush=True)
"""


class UserListener:
    """A TCP listener run by `user` (None: root) on host:port (0: a free one) that records
    the first bytes of every connection (up to the end of the HTTP head): a stand-in for
    another user's program on the port a dead daemon left in daemon.json."""

    def __init__(self, users, user, host="127.0.0.1", port=0):
        self.host = host
        self.process = users.spawn([users.python, "-c", LISTENER, host, str(port)], user,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        first = self.process.stdout.readline().decode()
        assert first.startswith("ready "), (first, self.process.stderr.read())
        self.port = int(first.split()[1])

    @property
    def url(self):
        return "http://%s:%d" % ("[%s]" % self.host if ":" in self.host else self.host, self.port)

    def stop(self):
        """The bytes each connection sent, in order (the listener has ended)."""
        out, err = self.process.communicate(b"stop\n", timeout=SAFETY_TIMEOUT)
        lines = out.decode().splitlines()
        assert lines and lines[-1] == "done", (lines, err)
        return [bytes.fromhex(line.split(" ", 1)[1]) if " " in line else b""
                for line in lines[:-1] if line.startswith("connection")]


class UserDaemon:
    """tests/ledgerd.py run by `user` in a process of its own, accepting `token`; the
    daemon.json it writes is the user's."""

    def __init__(self, users, user, data_dir, token):
        self.process = users.spawn([users.python, str(users.ledgerd), "--data-dir", str(data_dir),
                                    "--token", token], user, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        first = self.process.stdout.readline().decode()
        match = re.match(r"ledgerd listening on (http://127\.0\.0\.1:(\d+)) ", first)
        assert match, (first, self.process.stderr.read())
        self.url, self.port = match.group(1), int(match.group(2))

    def crash(self):
        """Killed: it leaves daemon.json behind, naming a port nobody listens on."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(SAFETY_TIMEOUT)


# The victim's world, for the tests of another user's files and listeners.

def victims_daemon(users, planted):
    """The victim's own daemon (ledgerd run as the victim) and its server's environment."""
    victim = users.victim
    data = users.directory("data", owner=victim, mode=0o700)
    token = "tok-PLANTED-" + secrets.token_hex(16)
    planted.add(token)
    daemon = UserDaemon(users, victim, data, token)
    env = users.server_env(victim, {"MEMPROVE_DATA_DIR": str(data),
                                    "MEMPROVE_TOKEN_FILE": str(data / "token"),
                                    "MEMPROVE_TIMEOUT": "5"})
    return daemon, env


def victims_token(users, planted):
    """The victim's data directory and token file (0600, the victim's), no daemon yet."""
    victim = users.victim
    data = users.directory("data", owner=victim, mode=0o700)
    token = "tok-PLANTED-" + secrets.token_hex(16)
    planted.add(token)
    (data / "token").write_text(token + "\n")
    os.chmod(str(data / "token"), 0o600)
    victim.own(data)
    env = users.server_env(victim, {"MEMPROVE_DATA_DIR": str(data),
                                    "MEMPROVE_TOKEN_FILE": str(data / "token"),
                                    "MEMPROVE_TIMEOUT": "2"})
    return data, token, env


def victims_project(users):
    project = users.directory("project", owner=users.victim)
    users.directory("project/.git", owner=users.victim)
    users.directory("project/.memprove", owner=users.victim)
    return project


def doctor_as(users, user, env, cwd):
    """`mcp doctor --json` run by `user`: (exit status, the checks by name, both outputs)."""
    done = run_cli(users.python, users.pyz, ["mcp", "doctor", "--json"],
                   clean_env(user.home, env), cwd, user=user)
    checks = dict((check["name"], check) for check in json.loads(done.stdout.decode())["checks"])
    return done.returncode, checks, done.stdout + done.stderr


# ---------------------------------------------------------------------------
# A fake daemon whose every answer the test chooses
# ---------------------------------------------------------------------------

class FakeDaemon:
    """HTTP on 127.0.0.1 answering every request with answer(request) ->
    (status, headers dict, body bytes); records each request as
    {"method", "path", "headers", "body"}.  write_daemon_json(data_dir) points a
    server at it."""

    def __init__(self, answer):
        import http.server

        fake = self
        self.answer = answer
        self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = {"method": self.command, "path": self.path,
                           "headers": dict((k.lower(), v) for k, v in self.headers.items()),
                           "body": body}
                fake.requests.append(request)
                status, headers, payload = fake.answer(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def write_daemon_json(self, data_dir):
        Path(data_dir, "daemon.json").write_text(json.dumps({"url": self.url, "pid": os.getpid()}))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class RawDaemon:
    """A loopback TCP server for answers http.server cannot give: for each connection it
    reads the request (headers and Content-Length body), then calls answer(conn) in the
    connection's thread, which writes whatever bytes it likes (and may sleep)."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            head, _, body = data.partition(b"\r\n\r\n")
            match = re.search(rb"(?i)content-length:\s*(\d+)", head)
            length = int(match.group(1)) if match else 0
            while len(body) < length:
                piece = conn.recv(65536)
                if not piece:
                    return
                body += piece
            self.requests += 1
            self.answer(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def write_daemon_json(self, data_dir):
        Path(data_dir, "daemon.json").write_text(json.dumps({"url": self.url, "pid": os.getpid()}))

    def close(self):
        self._stop = True
        try:
            # Wake accept() so that the thread ends.
            socket.create_connection(self.sock.getsockname(), timeout=1).close()
        except OSError:
            pass
        self.sock.close()
        self._thread.join(5)


# ---------------------------------------------------------------------------
# The Reliability figures, from a MEMPROVE_RELIABILITY_REPORT file
# ---------------------------------------------------------------------------

_VERSIONS = {}


def python_version(executable):
    """"3.11.7" for an interpreter's path (asked once per path)."""
    if executable not in _VERSIONS:
        import subprocess
        done = subprocess.run([executable, "-c", "import platform; print(platform.python_version())"],
                              stdout=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
        _VERSIONS[executable] = done.stdout.decode().strip()
    return _VERSIONS[executable]


def summarize(lines):
    """The README's figures from the report's JSON lines."""
    records = [json.loads(line) for line in lines if line.strip()]
    by_test = {}
    for record in records:
        by_test.setdefault(record["test"], []).append(record)
    wire = [r for r in records if r["test"].startswith("wire_")]
    summary = {
        "wire_messages_fuzzed": sum(r["messages"] for r in wire),
        "interpreters": sorted(set(r["python"] for r in wire), key=lambda v: [int(p) for p in v.split(".")]),
        "tool_calls_fuzzed": sum(r["calls"] for r in by_test.get("tool_fuzz", [])),
        "faults_injected_on_writes": sum(r["faults_injected"] for r in by_test.get("write_faults", [])),
        "faults_injected_on_reads": sum(r["faults_injected"] for r in by_test.get("read_faults", [])),
        "writes_lost": sum(r["writes_lost"] for r in by_test.get("write_faults", []) + by_test.get("daemon_killed", [])),
        "writes_duplicated": sum(r["writes_duplicated"] for r in by_test.get("write_faults", []) + by_test.get("daemon_killed", [])),
    }
    # Issue 11 (contract.md §6 rules 1-12 and the fuzzers of its input classes).
    for flood in by_test.get("flood_memory", []):
        summary.update(flood_calls=flood["calls"], flood_call_bytes=flood["call_bytes"],
                       flood_idle_hwm_kib=flood["idle_hwm_kib"],
                       flood_peak_hwm_kib=flood["final_hwm_kib"],
                       flood_bound_kib=flood["bound_kib"],
                       flood_lines_read_while_full=flood["notifications_read_while_full"])
    for case in by_test.get("nonblocking_stdout", []):
        summary.update(nonblocking_answers="%d of %d" % (case["answers"], case["requests"]))
    summary["workspace_paths_fuzzed"] = sum(r["calls"] for r in by_test.get("workspace_path_fuzz", []))
    summary["daemon_fields_fuzzed"] = sum(r["calls"] for r in by_test.get("daemon_field_fuzz", []))
    # Issue 18 (contract.md §6 rules 14-18 and their fuzzers).
    for case in by_test.get("runs_newlines", []):
        summary.update(runs_newlines_bytes=case["bytes"],
                       runs_newlines_seconds=case["seconds_newlines"],
                       runs_valid_lines_seconds=case["seconds_valid_lines"])
    for case in by_test.get("runs_memory", []):
        summary.update(runs_memory_bytes=case["bytes"],
                       runs_memory_growth_kib=case["peak_hwm_kib"] - case["idle_hwm_kib"])
    for case in by_test.get("roots_storm_memory", []):
        summary.update(roots_storm_notifications=case["notifications"],
                       roots_storm_growth_kib=case["growth_kib"])
    for case in by_test.get("roots_stray_answer", []):
        summary["roots_stray_answer_seconds_%s" % case["which"]] = case["seconds_to_ping"]
    for case in by_test.get("roots_many", []):
        summary.update(roots_many=case["roots"], roots_many_seconds=case["seconds"])
    races = [r for name, cases in by_test.items() if name.startswith("bytecode cache: ")
             for r in cases]
    if races:
        summary.update(bytecode_race_starts=sum(r["starts"] for r in races),
                       bytecode_race_attacker_runs=sum(r["attacker_runs"] for r in races))
    summary["roots_cases_fuzzed"] = sum(r["cases"] for r in by_test.get("roots_fuzz", []))
    summary["memprove_trees_fuzzed"] = sum(r["cases"] for r in by_test.get("memprove_tree_fuzz", []))
    summary["client_files_fuzzed"] = sum(sum(r["runs"].values())
                                         for r in by_test.get("client_file_long_line_fuzz", []))
    for soak in by_test.get("soak", []):
        summary.update(soak_calls=soak["calls"], soak_rss_growth_kib=soak["rss_growth_kib"],
                       soak_fds_leaked=soak["fds_after"] - soak["fds_before"],
                       soak_threads_leaked=max(0, soak["threads_after"] - soak["threads_before"]))
    return summary


if __name__ == "__main__":
    import sys as _sys
    with open(_sys.argv[1], encoding="utf-8") as _handle:
        print(json.dumps(summarize(_handle), indent=2))
