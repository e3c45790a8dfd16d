#!/usr/bin/env python3
"""Benchmark of memprove-mcp: everything side by side in one run, as ratios.

    python3 benchmarks/bench.py            # the full run (a few minutes)
    python3 benchmarks/bench.py --quick    # fewer repetitions, for CI (under a minute)

It builds the .pyz into a temporary folder, starts the reference daemon
(tests/ledgerd.py) there with a token and Workspaces, drives the server over
real pipes, and prints the machine and one Markdown table: median, p90, the
ratio to the row's baseline, the target and whether it was met.

- Cold start: process spawn until the answer to `server/discover` and to
  `initialize`, for the .pyz, against `python3 -I -c pass` (the floor), all
  with this same absolute interpreter (sys.executable); the .pyz launched by
  its shebang through a pyenv shim on a row of its own (when pyenv is here);
  and an equivalent server written with the official SDK's `MCPServer`
  (`mcp` 2.3.0, installed once into a cached virtual environment under
  ~/.cache/memprove-mcp-bench or $MEMPROVE_BENCH_CACHE; the row is skipped
  with the reason when it cannot be installed).
- Cold start under the newest Python found (pyenv, PATH, or tests/pythons.sh's
  chroot: 3.15 today) against `python3.X -I -c pass` on that same one: the .pyz
  with its bytecode for it, and without it (what the next Python sees): the first
  start, which compiles and caches the bytecode, and the second, from the cache.
- Per-call overhead: `context`, `tasks`, `pack`, `checkpoint` through the
  server against the bare daemon round trips of the same operations made
  with urllib (`context` makes no daemon request: its baseline is a `ping`
  through the same server).
- The Pack: `render_pack` on synthetic Capsules of 1,000, 10,000 and 100,000
  claims (default budget with and without a query, budget 60,000, unlimited
  budget with and without a query) beside `json.loads` of each Capsule; beside
  each row the tool can ask for (budget 6000, the query, budget 60,000), the
  same Pack through the server: `pack` of that Capsule minus `claims [1]` of it
  (the same request, decoding and checks), interleaved, against `json.loads`;
  and, from the 10,000-claim Capsule's rounds, `pack` end to end against
  `claims [1]`, with the server's share of `claims [1]` beside `json.loads` of
  the same bytes.
- The session-start hook (`mcp hook session-start`, spawn until it exits, its
  input written and closed as a client does): with a Task in the context beside
  a cold `mcp serve` answering `server/discover` then its first `pack` (what
  the model would otherwise wait for), and with no Task beside `python3 -I -c
  pass`; and its bound, whatever the daemon does: against a daemon that
  accepts and never answers (MEMPROVE_TIMEOUT=1000), and with its standard
  input never closed.
- Memory: the server's peak RSS (VmHWM) after start and after N calls, its
  threads and open file descriptors.

Every phase interleaves its variants (round-robin, in a shuffled order each
repetition) so that machine noise hits all alike.  The exit status is 0 even
when a target is missed (this is a report, not a test), 1 when something is
broken (a request failed), 2 for a usage error.  Standard library only;
Python 3.8 or later.
"""

import argparse
import gc
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import quote

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import ledgerd  # noqa: E402  (the reference daemon)
import memprove_mcp  # noqa: E402  (the server's module, for render_pack)

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "memprove-bench", "version": "1"}
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": CLIENT_INFO}
TOOL_NAMES = ("pack", "claims", "context", "tasks", "ledger_verify",
              "begin", "checkpoint", "decide", "end", "complete")
SDK_REQUIREMENT = "mcp==2.3.0"
REQUEST_TIMEOUT = 60.0           # seconds before a silent server counts as broken
MIB = 1024.0 * 1024.0
PACK_QUERY = "upload retry"     # the query of the Pack rows: about one line in ten matches

# Repetitions of each phase: (full, quick).
PLAN = {
    "cold": (40, 12),            # each light cold-start variant
    "cold_sdk": (12, 3),         # each MCPServer variant (about a second each)
    "calls": (300, 50),          # each per-call variant
    "pack_small": (300, 40),     # render_pack, 1,000 claims
    "pack_medium": (100, 20),    # render_pack, 10,000 claims
    "pack_large": (15, 1),       # render_pack, 100,000 claims
    "pack_served_small": (100, 20),   # pack through the server, 1,000 claims
    "pack_e2e": (40, 12),        # pack through the server, 10,000 claims (and the end-to-end rows)
    "pack_served_large": (8, 1),  # pack through the server, 100,000 claims (about 6 s a repetition)
    "hook": (40, 12),            # each session-start and stop hook variant and their baselines
    "hook_bound": (3, 1),        # each hook that meets a silent daemon or open input (~1-3 s)
    "hook_largest": (5, 2),      # each hook that reads the largest Capsule it takes (~1-2 s)
    "memory_calls": (10000, 1000),
}


class BenchError(Exception):
    """Something is broken: a request failed or a process misbehaved."""


STARTED = time.monotonic()


def progress(message):
    sys.stderr.write("bench: %5.1f s  %s\n" % (time.monotonic() - STARTED, message))
    sys.stderr.flush()


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------

def percentile(values, fraction):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values):
    return percentile(values, 0.5)


# ---------------------------------------------------------------------------
# Processes: a watchdog, and a small line client
# ---------------------------------------------------------------------------

class Watchdog:
    """Kills a process that has not answered by its deadline, so nothing hangs."""

    def __init__(self):
        self.lock = threading.Lock()
        self.deadlines = {}
        self.killed = set()
        thread = threading.Thread(target=self.watch, name="bench-watchdog", daemon=True)
        thread.start()

    def arm(self, process, seconds=REQUEST_TIMEOUT):
        with self.lock:
            self.deadlines[process.pid] = (process, time.monotonic() + seconds)

    def disarm(self, process):
        with self.lock:
            self.deadlines.pop(process.pid, None)

    def watch(self):
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            with self.lock:
                late = [p for p, deadline in self.deadlines.values() if deadline < now]
            for process in late:
                self.killed.add(process.pid)
                try:
                    process.kill()
                except OSError:
                    pass


WATCHDOG = None


def ask(process, line, label):
    """Write one line (if any), return the answer line; raise BenchError on silence."""
    WATCHDOG.arm(process)
    try:
        if line is not None:
            process.stdin.write(line)
            process.stdin.flush()
        answer = process.stdout.readline()
    except (OSError, ValueError) as error:
        raise BenchError("%s: the pipe broke: %s" % (label, error))
    finally:
        WATCHDOG.disarm(process)
    if process.pid in WATCHDOG.killed:
        raise BenchError("%s: no answer within %d s" % (label, REQUEST_TIMEOUT))
    return answer


def finish(process, grace=10.0):
    """Close standard input and wait for the process to leave (killed after `grace`)."""
    for stream in (process.stdin,):
        try:
            stream.close()
        except OSError:
            pass
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def request_line(request_id, method, params):
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"


DISCOVER_LINE = request_line(1, "server/discover", {"_meta": MODERN_META})
INITIALIZE_LINE = request_line(1, "initialize", {"protocolVersion": LEGACY_VERSION, "capabilities": {},
                                                 "clientInfo": CLIENT_INFO})


class Server:
    """One server process over real pipes; one request at a time, modern era."""

    def __init__(self, argv, env, cwd, log_path):
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, env=env, cwd=cwd)
        self.next_id = 0

    @property
    def pid(self):
        return self.process.pid

    def exchange(self, method, params, label):
        """(seconds, decoded answer); the time covers write, read and parse."""
        self.next_id += 1
        line = request_line(self.next_id, method, params)
        started = time.perf_counter()
        raw = ask(self.process, line, label)
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        elapsed = time.perf_counter() - started
        if not isinstance(answer, dict) or answer.get("id") != self.next_id:
            raise BenchError("%s: unexpected answer %r%s" % (label, raw[:200], self.log_tail()))
        return elapsed, answer

    def request(self, method, params=None, modern=True):
        if modern:
            params = dict(params or {}, _meta=MODERN_META)
        elapsed, answer = self.exchange(method, params, method)
        if "result" not in answer:
            raise BenchError("%s failed: %s" % (method, json.dumps(answer.get("error"))[:300]))
        return elapsed, answer["result"]

    def call(self, tool, arguments=None):
        params = {"name": tool, "arguments": arguments or {}, "_meta": MODERN_META}
        elapsed, answer = self.exchange("tools/call", params, "tools/call " + tool)
        result = answer.get("result")
        if not isinstance(result, dict):
            raise BenchError("tools/call %s failed: %s" % (tool, json.dumps(answer.get("error"))[:300]))
        if result.get("isError"):
            raise BenchError("tools/call %s answered an error: %s"
                             % (tool, result["content"][0]["text"][:300]))
        return elapsed, result

    def ping(self):
        elapsed, answer = self.exchange("ping", None, "ping")
        if answer.get("result") != {}:
            raise BenchError("ping failed: %s" % json.dumps(answer)[:300])
        return elapsed

    def log_tail(self):
        try:
            with open(self.log_path, "rb") as handle:
                lines = handle.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return ("; its standard error ends: " + " | ".join(lines[-5:])) if lines else ""

    def close(self):
        finish(self.process)
        self.log.close()


def proc_status(pid):
    """{'hwm', 'rss' (MiB), 'threads', 'fds'} of a live process, from /proc."""
    values = {}
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0]) * 1024 / MIB
    return {"hwm": values["VmHWM"], "rss": values["VmRSS"],
            "threads": len(os.listdir("/proc/%d/task" % pid)),
            "fds": len(os.listdir("/proc/%d/fd" % pid))}


# ---------------------------------------------------------------------------
# The daemon's HTTP API, bare (urllib), for the baselines
# ---------------------------------------------------------------------------

class Bare:
    """The daemon's operations made directly: what any client of it must pay."""

    def __init__(self, url, token):
        self.url = url
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.headers = {"Authorization": "Bearer " + token, "Accept": "application/json",
                        "User-Agent": "memprove-bench/1"}

    def send(self, method, path, body=None, expect=200):
        return json.loads(self.read(method, path, body, expect).decode("utf-8"))

    def read(self, method, path, body=None, expect=200):
        """The answer's bytes, unparsed: what the daemon gives any client."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if method == "POST":
            headers["Idempotency-Key"] = str(uuid.uuid4())
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=REQUEST_TIMEOUT) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            raise BenchError("daemon %s %s answered %d: %s"
                             % (method, path.split("?")[0], error.code, error.read()[:300]))
        except (OSError, urllib.error.URLError) as error:
            raise BenchError("daemon %s %s failed: %s" % (method, path.split("?")[0], error))
        if status != expect:
            raise BenchError("daemon %s %s answered %d, not %d" % (method, path, status, expect))
        return raw

    def list_tasks(self, root):
        return self.send("GET", "/v1/tasks?workspace=" + quote(root, safe=""))

    def capsule(self, task_id):
        return self.send("GET", "/v1/tasks/%s/capsule" % quote(task_id, safe=""))

    def capsule_bytes(self, task_id):
        return self.read("GET", "/v1/tasks/%s/capsule" % quote(task_id, safe=""))

    def checkpoint(self, session_id, task_id, text):
        body = {"task_id": task_id, "facts": [{"text": text, "evidence": []}], "open_items": [],
                "reaffirm": [], "withdraw": [], "next_action": None, "evidence": []}
        return self.send("POST", "/v1/sessions/%s/checkpoints" % quote(session_id, safe=""), body,
                         expect=201)


def timed(function, *args):
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


# ---------------------------------------------------------------------------
# Synthetic Capsules
# ---------------------------------------------------------------------------

VOCABULARY = (
    "the a of to in on for with when after before because retry retries upload uploads backoff "
    "jitter mock S3 Content-MD5 header timeout flaky test suite client server cache token ledger "
    "session checkpoint decision parser schema config daemon socket thread queue worker budget "
    "query claim run fixture database migration index latency memory handler request response "
    "body stream chunk encoding unicode path workspace lock file rename atomic exponential delay "
    "fails passes returns raises drops keeps sends reads writes slow fast seconds bytes 404 500 "
    "connection reset refused pool limit size order number label field value error warning"
).split()
COMMANDS = ("pytest -q tests/test_upload.py", "pytest -q", "pytest -q -k retry",
            "python3 -m unittest discover", "make check")


def sentence(rng, low, high):
    words = []
    length = 0
    target = rng.randint(low, high)
    while length < target:
        word = rng.choice(VOCABULARY)
        words.append(word)
        length += len(word) + 1
    return (" ".join(words)[:1].upper() + " ".join(words)[1:]).rstrip() + "."


def claim_text(rng):
    """Mostly one or two lines' worth; one in ten is longer than the 300-unit cap."""
    if rng.random() < 0.1:
        return sentence(rng, 300, 700)
    return sentence(rng, 40, 220)


def stamp(index):
    minutes = index // 60
    return "2026-%02d-%02dT%02d:%02d:%02dZ" % (1 + (minutes // 1440 // 28) % 12,
                                                1 + (minutes // 1440) % 28,
                                                (minutes // 60) % 24, minutes % 60, index % 60)


def synthetic_capsule(claims, seed=7):
    """A Capsule of `claims` claims, with realistic kinds, states, lengths and runs."""
    rng = random.Random(seed * 1000003 + claims)
    task_id = str(uuid.UUID(int=rng.getrandbits(128)))
    n_runs = max(4, claims // 10)
    n_sessions = max(2, claims // 100)
    runs = []
    for index in range(n_runs):
        exit_code = 0 if rng.random() < 0.7 else rng.choice((1, 2, 5))
        runs.append({"id": str(uuid.UUID(int=rng.getrandbits(128))), "label": "r%d" % (index + 1),
                     "task_id": task_id, "session_id": "s",
                     "session_number": 1 + index * n_sessions // n_runs,
                     "command": rng.choice(COMMANDS), "exit_code": exit_code, "passed": exit_code == 0,
                     "started_at": stamp(index * 90), "finished_at": stamp(index * 90 + 30)})
    records = []
    last_next_action = None
    for index in range(claims):
        number = index + 1
        roll = rng.random()
        kind = ("fact" if roll < 0.55 else "open_item" if roll < 0.67
                else "decision" if roll < 0.82 else "next_action")
        if kind == "fact":
            state = "active" if rng.random() < 0.85 else rng.choice(("withdrawn", "superseded"))
        elif kind == "open_item":
            state = "active" if rng.random() < 0.4 else "withdrawn"
        elif kind == "decision":
            state = "active" if rng.random() < 0.85 else "superseded"
        else:
            state = "active"
            if last_next_action is not None:
                last_next_action["state"] = "superseded"
        evidence = []
        if rng.random() < 0.4:
            evidence = sorted(set("r%d" % rng.randint(1, n_runs) for _ in range(rng.randint(1, 2))),
                              key=lambda label: int(label[1:]))
        record = {"number": number, "kind": kind, "text": claim_text(rng), "state": state,
                  "session_number": 1 + index * n_sessions // claims, "created_at": stamp(index * 9),
                  "reaffirmed_at": None, "evidence": evidence}
        if kind == "decision":
            record.update(rationale=sentence(rng, 30, 160) if rng.random() < 0.9 else "",
                          alternatives=[sentence(rng, 10, 50) for _ in range(rng.randint(0, 2))],
                          decision_state=rng.choice(("accepted", "accepted", "proposed")),
                          supersedes=None)
        if kind == "next_action":
            last_next_action = record
        records.append(record)
    sessions = []
    for index in range(n_sessions):
        is_open = index == n_sessions - 1
        sessions.append({"id": str(uuid.UUID(int=rng.getrandbits(128))), "number": index + 1,
                         "task_id": task_id, "task_number": 1,
                         "agent": {"name": rng.choice(("claude-code", "codex", "ana")),
                                   "role": rng.choice(("implementer", "reviewer"))},
                         "parent_session_id": None, "parent_number": None,
                         "state": "open" if is_open else "ended",
                         "started_at": stamp(index * 600),
                         "ended_at": None if is_open else stamp(index * 600 + 500)})
    task = {"id": task_id, "number": 1, "title": "Fix flaky upload retries in the S3 client",
            "status": "active", "created_at": stamp(0), "updated_at": stamp(claims * 9),
            "open_items": sum(1 for c in records if c["kind"] == "open_item" and c["state"] == "active"),
            "sessions_open": 1}
    return {"task": task, "sessions": sessions, "claims": records, "runs": runs,
            "ledger": {"entries": claims * 2 + n_runs, "head": "%064x" % rng.getrandbits(256)}}


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------

class Report:
    def __init__(self):
        self.rows = []          # (section, measurement, median, p90, versus, target, result)
        self.notes = []
        self.skipped = []

    def section(self, title):
        self.rows.append(("section", title))

    def add(self, measurement, middle, high="", versus="", target="", met=None):
        result = "" if met is None else ("met" if met else "**missed**")
        self.rows.append(("row", measurement, middle, high, versus, target, result))

    def render(self):
        lines = ["| measurement | median | p90 | vs baseline | target | result |",
                 "|---|---:|---:|---|---|---|"]
        for row in self.rows:
            if row[0] == "section":
                lines.append("| **%s** | | | | | |" % row[1])
            else:
                lines.append("| " + " | ".join(row[1:]) + " |")
        return "\n".join(lines)


def ms(seconds):
    if seconds != seconds:
        return "-"
    value = seconds * 1000.0
    return "%.0f ms" % value if value >= 100 else "%.1f ms" % value if value >= 10 else "%.2f ms" % value


def ratio_text(value):
    return "%.2f×" % value if value < 10 else "%.1f×" % value


# ---------------------------------------------------------------------------
# Set-up: the .pyz, the daemon, the Workspaces, the SDK's virtual environment
# ---------------------------------------------------------------------------

def trivial_zipapp(folder):
    """A zipapp whose __main__ only writes a line: what CPython itself costs to
    start any .pyz (zipimport, then runpy and the importlib it imports)."""
    import zipapp
    source = os.path.join(folder, "trivial")
    target = os.path.join(folder, "trivial.pyz")
    os.makedirs(source)
    with open(os.path.join(source, "__main__.py"), "w") as handle:
        handle.write(READY + "\n")
    zipapp.create_archive(source, target)
    return target


def build_pyz(folder):
    output = os.path.join(folder, "memprove_mcp.pyz")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "build_zipapp.py"), "--output", output],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if done.returncode != 0 or not os.path.isfile(output):
        raise BenchError("build_zipapp.py failed: %s" % done.stderr.decode("utf-8", "replace")[-500:])
    return output


def cache_folder():
    return os.environ.get("MEMPROVE_BENCH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "memprove-mcp-bench")


SDK_SERVER = '''\
# The memprove server's ten tool names on the official SDK's high-level API
# (mcp 2.x MCPServer, formerly FastMCP), with trivial bodies.  Written by
# benchmarks/bench.py.
import site
import sys

for _path in reversed(%(paths)r):
    sys.path.insert(0, _path)
    site.addsitedir(_path)

from mcp.server.mcpserver import MCPServer

app = MCPServer("memprove-sdk-equivalent", instructions="The same ten tool names, trivial bodies.")


@app.tool()
def pack(task: int = 0, budget: int = 6000, query: str = "") -> str:
    """The Task's Pack."""
    return "pack"


@app.tool()
def claims(numbers: list[int], task: int = 0) -> str:
    """Claims in full."""
    return "claims"


@app.tool()
def context() -> str:
    """The local context."""
    return "context"


@app.tool()
def tasks(status: str = "") -> str:
    """The Workspace's Tasks."""
    return "tasks"


@app.tool()
def ledger_verify() -> str:
    """Verify the ledger."""
    return "ledger_verify"


@app.tool()
def begin(task: int = 0, new_task: str = "", agent_name: str = "", agent_role: str = "",
          parent_session: int = 0) -> str:
    """Open a Session."""
    return "begin"


@app.tool()
def checkpoint(facts: list[dict] | None = None, open_items: list[str] | None = None,
               reaffirm: list[int] | None = None, withdraw: list[int] | None = None,
               next_action: str = "", runs: list[str] | None = None, session: int = 0) -> str:
    """Record what was learned."""
    return "checkpoint"


@app.tool()
def decide(decision: str, rationale: str = "", alternatives: list[str] | None = None,
           runs: list[str] | None = None, supersedes: int = 0, session: int = 0) -> str:
    """Record a decision."""
    return "decide"


@app.tool()
def end(session: int = 0, abandoned: int = 0) -> str:
    """End a Session."""
    return "end"


@app.tool()
def complete(session: int = 0) -> str:
    """Complete the Task."""
    return "complete"


if __name__ == "__main__":
    app.run()
'''


def prepare_sdk(folder):
    """(script path, None) for the MCPServer equivalent, or (None, reason to skip)."""
    if sys.version_info < (3, 10):
        return None, "mcp 2.3.0 needs Python 3.10 or later; this is %s" % platform.python_version()
    key = "venv-%s-%s" % (sys.implementation.cache_tag,
                          SDK_REQUIREMENT.replace("==", "-"))
    venv = os.path.join(cache_folder(), key)
    marker = os.path.join(venv, "memprove-bench.json")
    paths = None
    if os.path.isfile(marker):
        try:
            with open(marker) as handle:
                recorded = json.load(handle)
            if recorded.get("executable") == os.path.realpath(sys.executable) and all(
                    os.path.isdir(path) for path in recorded["paths"]):
                paths = recorded["paths"]
        except (OSError, ValueError, KeyError, TypeError):
            paths = None
    if paths is None:
        progress("installing %s into %s (once; it is cached)" % (SDK_REQUIREMENT, venv))
        shutil.rmtree(venv, ignore_errors=True)
        try:
            done = subprocess.run([sys.executable, "-m", "venv", venv], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=300)
            if done.returncode != 0:
                return None, "cannot create a virtual environment: %s" % last_line(done.stdout)
            python = os.path.join(venv, "Scripts" if os.name == "nt" else "bin",
                                  "python.exe" if os.name == "nt" else "python")
            done = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                                   "--timeout", "60", "--retries", "2", SDK_REQUIREMENT],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
            if done.returncode != 0:
                return None, "pip install %s failed: %s" % (SDK_REQUIREMENT, last_line(done.stdout))
            done = subprocess.run([python, "-c", "import json, sysconfig; print(json.dumps(sorted(set("
                                   "[sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]))))"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            paths = json.loads(done.stdout.decode("utf-8"))
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            return None, "cannot install %s: %s" % (SDK_REQUIREMENT, error)
        with open(marker, "w") as handle:
            json.dump({"executable": os.path.realpath(sys.executable), "paths": paths,
                       "requirement": SDK_REQUIREMENT}, handle)
    script = os.path.join(folder, "sdk_server.py")
    with open(script, "w") as handle:
        handle.write(SDK_SERVER % {"paths": paths})
    return script, None


def last_line(output):
    lines = [line for line in output.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def find_pyenv_shim(env, cwd):
    """(shim PATH entry, interpreter it resolves to) or (None, reason)."""
    pyenv = shutil.which("pyenv", path=os.environ.get("PATH"))
    if pyenv is None:
        for root in (os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")):
            if root and os.access(os.path.join(root, "bin", "pyenv"), os.X_OK):
                pyenv = os.path.join(root, "bin", "pyenv")
                break
    if pyenv is None:
        return None, "pyenv is not installed here"
    try:
        root = subprocess.run([pyenv, "root"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=30).stdout.decode().strip()
        shims = os.path.join(root, "shims")
        if not os.access(os.path.join(shims, "python3"), os.X_OK):
            return None, "pyenv has no python3 shim"
        shim_env = dict(env, PATH=shims + os.pathsep + env.get("PATH", ""))
        done = subprocess.run([pyenv, "which", "python3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=dict(shim_env, PYENV_ROOT=root), cwd=cwd, timeout=30)
        if done.returncode != 0:
            return None, "the pyenv shim does not resolve python3 here"
        return shims, done.stdout.decode().strip()
    except (OSError, subprocess.SubprocessError) as error:
        return None, "pyenv failed: %s" % error


class Setting:
    """The temporary folder, the daemon, two Workspaces and the server's environment."""

    def __init__(self, folder):
        self.folder = folder
        self.data_dir = os.path.join(folder, "data")
        self.token = "bench-" + uuid.uuid4().hex
        self.daemon = ledgerd.Daemon(self.data_dir).start()
        self.daemon.add_token(self.token)
        self.bare = Bare(self.daemon.url, self.token)
        self.workspaces = {}
        for name in ("reads", "writes"):
            root = os.path.join(folder, "home", name)
            os.makedirs(os.path.join(root, ".memprove"))
            self.workspaces[name] = root
        self.base_env = {"PATH": os.environ.get("PATH", os.defpath),
                         "HOME": os.path.join(folder, "home"),
                         "MEMPROVE_TOKEN": self.token, "MEMPROVE_DATA_DIR": self.data_dir}
        for name in ("LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR"):
            if name in os.environ:
                self.base_env[name] = os.environ[name]
        self.logs = 0

    def env(self, workspace):
        return dict(self.base_env, CLAUDE_PROJECT_DIR=self.workspaces[workspace])

    def server(self, argv, workspace):
        self.logs += 1
        server = Server(argv, self.env(workspace), self.workspaces[workspace],
                        os.path.join(self.folder, "server-%d.log" % self.logs))
        server.request("server/discover")
        return server

    def stop(self):
        self.daemon.stop()


# ---------------------------------------------------------------------------
# Phase 1: cold start
# ---------------------------------------------------------------------------

def spawn_until_answer(argv, lines, env, cwd, check):
    """Seconds from spawn until the answer to the last of `lines`, each sent once the
    previous one is answered.  `lines` None: until exit (its standard output closed);
    []: until the first line it prints unasked."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    answers = []
    try:
        if not lines:
            process.stdin.close()
            answers.append(ask(process, None, " ".join(argv)))
        for line in lines or ():
            answers.append(ask(process, line, " ".join(argv)))
        elapsed = time.perf_counter() - started
    finally:
        finish(process)
    if not lines:
        if answers[0] != (b"" if lines is None else b"\n") or process.returncode != 0:
            raise BenchError("%s: exit %s" % (" ".join(argv), process.returncode))
        return elapsed
    for answer in answers:
        try:
            result = json.loads(answer)["result"]
        except (ValueError, KeyError, TypeError):
            raise BenchError("%s: no answer: %r" % (" ".join(argv), answer[:200]))
    if not check(result):
        raise BenchError("%s: unexpected answer: %r" % (" ".join(argv), answer[:200]))
    return elapsed


# The floor's "answer": a line written once the interpreter is up (before its teardown).
READY = "import sys; sys.stdout.write('\\n'); sys.stdout.flush()"


def discovered(result):
    return MODERN_VERSION in (result.get("supportedVersions") or ())


def initialized(result):
    return result.get("protocolVersion") == LEGACY_VERSION


def tool_answered(result):
    return result.get("isError") is False


TASKS_LINE = request_line(2, "tools/call", {"name": "tasks", "arguments": {}, "_meta": MODERN_META})


def phase_cold(setting, pyz, quick, report, use_sdk):
    env = setting.env("reads")
    cwd = setting.workspaces["reads"]
    py = sys.executable
    variants = [
        ("floor", [py, "-I", "-c", "pass"], None, None),
        ("ready", [py, "-I", "-c", READY], [], None),
        ("nosite", [py, "-I", "-S", "-c", READY], [], None),
        ("discover", [py, pyz, "mcp", "serve"], [DISCOVER_LINE], discovered),
        ("initialize", [py, pyz, "mcp", "serve"], [INITIALIZE_LINE], initialized),
        ("isolated", [py, "-I", pyz, "mcp", "serve"], [DISCOVER_LINE], discovered),
        ("nosite_zipapp", [py, "-I", "-S", trivial_zipapp(setting.folder)], [], None),
        ("nosite_pyz", [py, "-I", "-S", pyz, "mcp", "serve"], [DISCOVER_LINE], discovered),
        ("first_call", [py, pyz, "mcp", "serve"], [DISCOVER_LINE, TASKS_LINE], tool_answered),
    ]
    envs = dict((name, env) for name, _, _, _ in variants)

    shim, resolved = (None, None)
    if os.name == "posix":
        shim, resolved = find_pyenv_shim(env, cwd)
    if shim is not None:
        variants.append(("shim", [pyz, "mcp", "serve"], [DISCOVER_LINE], discovered))
        envs["shim"] = dict(env, PATH=shim + os.pathsep + env["PATH"])
    else:
        report.skipped.append(".pyz by its shebang through a pyenv shim: %s" % resolved)

    sdk_reason = None
    if use_sdk:
        script, sdk_reason = prepare_sdk(setting.folder)
        if script is not None:
            for name, line, check in (("sdk_discover", DISCOVER_LINE, discovered),
                                      ("sdk_initialize", INITIALIZE_LINE, initialized)):
                argv = [py, script]
                # Once, untimed: it starts, answers, and offers the same ten tool names.
                probe = Server(argv, env, cwd, os.path.join(setting.folder, "sdk.log"))
                try:
                    first = json.loads(line)
                    _, answer = probe.exchange(first["method"], first["params"], "MCPServer")
                    if not check(answer.get("result") or {}):
                        raise BenchError("the MCPServer equivalent answered %s" % json.dumps(answer)[:300])
                    if name == "sdk_discover":
                        _, tools = probe.exchange("tools/list", {"_meta": MODERN_META},
                                                  "MCPServer tools/list")
                        names = sorted(tool["name"] for tool in tools["result"]["tools"])
                        if names != sorted(TOOL_NAMES):
                            raise BenchError("the MCPServer equivalent offers %s" % names)
                finally:
                    probe.close()
                variants.append((name, argv, [line], check))
                envs[name] = env
    else:
        sdk_reason = "--no-sdk"
    if sdk_reason:
        report.skipped.append("the MCPServer equivalent (%s): %s" % (SDK_REQUIREMENT, sdk_reason))

    reps = PLAN["cold"][quick]
    sdk_reps = PLAN["cold_sdk"][quick]
    samples = dict((name, []) for name, _, _, _ in variants)
    rng = random.Random(1)
    progress("cold start: %d repetitions of %d variants" % (reps, len(variants)))
    for rep in range(reps):
        order = [v for v in variants if not v[0].startswith("sdk_") or rep < sdk_reps]
        rng.shuffle(order)
        for name, argv, lines, check in order:
            samples[name].append(spawn_until_answer(argv, lines, envs[name], cwd, check))

    floor = median(samples["floor"])
    ready = median(samples["ready"])
    report.section("Cold start (spawn → first answer), %s" % short_python())
    report.add("`python3 -I -c pass`, until it exits: **the floor**", ms(floor),
               ms(percentile(samples["floor"], 0.9)), "baseline")

    def versus_floor(name):
        value = median(samples[name])
        return value, "%s floor, %s ready (%+.1f ms)" % (
            ratio_text(value / floor), ratio_text(value / ready), (value - floor) * 1000)

    report.add("`python3 -I -c` writing a line, until that line (**ready**: no teardown)", ms(ready),
               ms(percentile(samples["ready"], 0.9)), "%s floor" % ratio_text(ready / floor), "info")
    for name, label in (("discover", "`.pyz` → `server/discover` answered"),
                        ("initialize", "`.pyz` → `initialize` answered")):
        value, versus = versus_floor(name)
        report.add(label + " (`python3 memprove_mcp.pyz mcp serve`)", ms(value),
                   ms(percentile(samples[name], 0.9)), versus, "≤ 1.5× floor", value / floor <= 1.5)
    value, versus = versus_floor("isolated")
    report.add("`.pyz` → `server/discover`, launched with `python3 -I`", ms(value),
               ms(percentile(samples["isolated"], 0.9)), versus, "info")
    bare_floor = median(samples["nosite"])
    report.add("`python3 -I -S -c` writing a line, until that line (ready, no `site` at all)",
               ms(bare_floor), ms(percentile(samples["nosite"], 0.9)),
               "%s floor (%+.1f ms)" % (ratio_text(bare_floor / floor), (bare_floor - floor) * 1000), "info")
    zipapp_floor = median(samples["nosite_zipapp"])
    report.add("a zipapp whose `__main__` writes a line, `python3 -I -S`: **any `.pyz`'s floor** "
               "(zipimport, runpy)", ms(zipapp_floor), ms(percentile(samples["nosite_zipapp"], 0.9)),
               "%s the row above (%+.1f ms)" % (ratio_text(zipapp_floor / bare_floor),
                                                 (zipapp_floor - bare_floor) * 1000), "info")
    value = median(samples["nosite_pyz"])
    report.add("`.pyz` → `server/discover` with `python3 -I -S` (no `site`, like the rows above)", ms(value),
               ms(percentile(samples["nosite_pyz"], 0.9)),
               "%s the zipapp floor, %s bare (%+.1f ms over the zipapp)" % (
                   ratio_text(value / zipapp_floor), ratio_text(value / bare_floor),
                   (value - zipapp_floor) * 1000),
               "≤ 1.5× the zipapp floor", value / zipapp_floor <= 1.5)
    value, versus = versus_floor("first_call")
    report.add("`.pyz` → `server/discover`, then a first `tasks` answered (first daemon request)",
               ms(value), ms(percentile(samples["first_call"], 0.9)), versus, "info")
    if shim is not None:
        value, versus = versus_floor("shim")
        same = os.path.realpath(resolved) == os.path.realpath(sys.executable)
        label = "`.pyz` → `server/discover` by its shebang (`env python3` → pyenv shim → %s)" % (
            "the same interpreter" if same else resolved)
        report.add(label, ms(value), ms(percentile(samples["shim"], 0.9)), versus,
                   "info: the launch path's cost")
    if "sdk_discover" in samples:
        for name, ours, label in (("sdk_discover", "discover", "`server/discover`"),
                                  ("sdk_initialize", "initialize", "`initialize`")):
            value = median(samples[name])
            factor = value / median(samples[ours])
            report.add("MCPServer equivalent (%s) → %s answered" % (SDK_REQUIREMENT, label), ms(value),
                       ms(percentile(samples[name], 0.9)),
                       "%s the `.pyz`, %s floor" % (ratio_text(factor), ratio_text(value / floor)),
                       "`.pyz` ≥ 10× faster", factor >= 10)
    return samples


# ---------------------------------------------------------------------------
# Phase 1b: cold start under the newest interpreter, first and second start
# ---------------------------------------------------------------------------

def pythons_bin():
    """Where tests/pythons.sh puts its wrappers (as tests/conftest.py finds them)."""
    if os.environ.get("MEMPROVE_TEST_PYTHONS_BIN"):
        return os.environ["MEMPROVE_TEST_PYTHONS_BIN"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "memprove-mcp-pythons", "bin")


def newest_python():
    """(minor, argv prefix, wrapper or None, label) of the newest CPython 3.X found:
    pyenv, python3.X on PATH, or tests/pythons.sh's chroot (entered with chroot(1)
    rather than through its wrapper, so that no shell start is timed; the server
    finds its Workspace through CLAUDE_PROJECT_DIR, so the chroot's "/" working
    directory does not matter).  None when there is none."""
    import glob
    import re
    found = {}
    roots = [os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")]
    for root in filter(None, roots):
        for path in glob.glob(os.path.join(root, "versions", "3.*.*", "bin", "python3.*")):
            match = re.search(r"python3\.([0-9]+)$", path)
            if match and os.access(path, os.X_OK):
                found.setdefault(int(match.group(1)), ([path], None))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if "shims" in directory.split(os.sep):
            continue
        for path in glob.glob(os.path.join(directory, "python3.*")):
            match = re.search(r"python3\.([0-9]+)$", path)
            if match and os.access(path, os.X_OK):
                found.setdefault(int(match.group(1)), ([path], None))
    chroot = os.path.join(os.path.dirname(pythons_bin()), "sid")
    for path in glob.glob(os.path.join(pythons_bin(), "python3.*")):
        match = re.search(r"python3\.([0-9]+)$", path)
        inside = "/usr/bin/" + os.path.basename(path)
        if match and int(match.group(1)) not in found:
            if hasattr(os, "geteuid") and os.geteuid() == 0 and os.path.isfile(chroot + inside) \
                    and shutil.which("chroot"):
                found[int(match.group(1))] = ([shutil.which("chroot"), chroot, inside], path)
            else:
                found[int(match.group(1))] = ([path], path)
    if not found or max(found) < 6:
        return None
    minor = max(found)
    argv, wrapper = found[minor]
    label = " ".join(argv) if wrapper is None or len(argv) == 1 else \
        "%s in the chroot %s (through chroot(1), in the floor too)" % (argv[2], argv[1])
    return "3.%d" % minor, argv, wrapper, label


def build_pyz_for(folder, name, args):
    output = os.path.join(folder, name)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "build_zipapp.py"), "--output", output]
                          + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if done.returncode != 0 or not os.path.isfile(output):
        raise BenchError("build_zipapp.py failed: %s" % done.stderr.decode("utf-8", "replace")[-500:])
    return output


def phase_cold_newest(setting, quick, report):
    """Cold start under the newest Python found against `python3.X -I -c pass` on the
    same one: with the .pyz's own bytecode for it, and without (the next Python the
    build does not know yet): the first start, which compiles and caches, and the
    second, from the user's bytecode cache."""
    newest = newest_python()
    if newest is None:
        report.skipped.append("cold start under the newest Python: none found")
        return
    minor, py, wrapper, label = newest
    tag = "cpython-" + minor.replace(".", "")
    # The build runs the interpreter itself: through its wrapper when it is the chroot's.
    builder = wrapper or py[0]
    shipped = build_pyz_for(setting.folder, "shipped-%s.pyz" % minor, ["--python", builder])
    unknown = build_pyz_for(setting.folder, "unknown-%s.pyz" % minor,
                            ["--python", builder, "--exclude-tag", tag])
    cwd = setting.workspaces["reads"]
    warm = os.path.join(setting.folder, "xdg-warm")
    base = setting.env("reads")
    env_warm = dict(base, XDG_CACHE_HOME=warm)
    fresh = [0]

    def env_first():
        fresh[0] += 1
        return dict(base, XDG_CACHE_HOME=os.path.join(setting.folder, "xdg-first-%d" % fresh[0]))
    # Untimed: warm the cache, and check that the shipped .pyz needs none.
    spawn_until_answer(py + [unknown, "mcp", "serve"], [DISCOVER_LINE], env_warm, cwd, discovered)
    probe = os.path.join(warm, "memprove-mcp")
    if not os.path.isdir(probe) or not any(name.endswith(tag + ".pyc") for name in os.listdir(probe)):
        raise BenchError("the first start under Python %s cached no bytecode in %s" % (minor, probe))
    variants = [
        ("floor", py + ["-I", "-c", "pass"], None, None, lambda: base),
        ("discover_shipped", py + [shipped, "mcp", "serve"], [DISCOVER_LINE], discovered,
         lambda: base),
        ("initialize_shipped", py + [shipped, "mcp", "serve"], [INITIALIZE_LINE], initialized,
         lambda: base),
        ("discover_first", py + [unknown, "mcp", "serve"], [DISCOVER_LINE], discovered, env_first),
        ("initialize_first", py + [unknown, "mcp", "serve"], [INITIALIZE_LINE], initialized,
         env_first),
        ("discover_second", py + [unknown, "mcp", "serve"], [DISCOVER_LINE], discovered,
         lambda: env_warm),
        ("initialize_second", py + [unknown, "mcp", "serve"], [INITIALIZE_LINE], initialized,
         lambda: env_warm),
    ]
    reps = PLAN["cold"][quick]
    samples = dict((variant[0], []) for variant in variants)
    rng = random.Random(2)
    progress("cold start under Python %s: %d repetitions of %d variants" % (minor, reps, len(variants)))
    for _ in range(reps):
        order = list(variants)
        rng.shuffle(order)
        for name, argv, lines, check, env in order:
            samples[name].append(spawn_until_answer(argv, lines, env(), cwd, check))
    floor = median(samples["floor"])
    report.section("Cold start under the newest Python found: %s" % label)
    report.add("`python%s -I -c pass`, until it exits: **the floor**" % minor, ms(floor),
               ms(percentile(samples["floor"], 0.9)), "baseline")
    rows = (
        ("discover_shipped", "`.pyz` with its bytecode for %s → `server/discover`" % tag, "info"),
        ("initialize_shipped", "`.pyz` with its bytecode for %s → `initialize`" % tag, "info"),
        ("discover_first", "`.pyz` without it, **first start** (compiles, caches) → `server/discover`",
         "info"),
        ("initialize_first", "`.pyz` without it, **first start** → `initialize`", "info"),
        ("discover_second", "`.pyz` without it, **second start** (from the cache) → `server/discover`",
         "≤ 1.5× floor"),
        ("initialize_second", "`.pyz` without it, **second start** → `initialize`", "≤ 1.5× floor"),
    )
    for name, text, target in rows:
        value = median(samples[name])
        versus = "%s floor (%+.1f ms)" % (ratio_text(value / floor), (value - floor) * 1000)
        met = value / floor <= 1.5 if target != "info" else None
        report.add(text, ms(value), ms(percentile(samples[name], 0.9)), versus, target, met)
    return samples


def short_python():
    return "Python %s at %s" % (platform.python_version(), sys.executable)


# ---------------------------------------------------------------------------
# Phase 2: per-call overhead
# ---------------------------------------------------------------------------

def seed_reads(server, setting):
    """A Task a few sessions old: facts, open items, decisions, a next action, runs."""
    _, begun = server.call("begin", {"new_task": "Fix flaky upload retries in the S3 client"})
    begun = begun["structuredContent"]
    rng = random.Random(3)
    labels = []
    for index in range(4):
        run = ledgerd.memprove_run(setting.daemon.url, setting.token, setting.workspaces["reads"],
                                   begun["session_id"], rng.choice(COMMANDS), index % 2)
        labels.append(run["label"])
    for index in range(15):
        server.call("checkpoint", {
            "facts": [{"text": claim_text(rng), "runs": [rng.choice(labels)]},
                      {"text": claim_text(rng)}],
            "open_items": [claim_text(rng)] if index % 3 == 0 else [],
            "next_action": sentence(rng, 30, 90)})
        if index % 4 == 0:
            server.call("decide", {"decision": sentence(rng, 30, 100), "rationale": sentence(rng, 40, 160),
                                   "alternatives": [sentence(rng, 10, 40)], "runs": [rng.choice(labels)]})
    return begun


def phase_calls(setting, pyz, quick, report):
    argv = [sys.executable, pyz, "mcp", "serve"]
    reads = setting.server(argv, "reads")
    writes = setting.server(argv, "writes")
    try:
        begun = seed_reads(reads, setting)
        _, context = reads.call("context")
        root = context["structuredContent"]["workspace"]["root"]
        task_id = begun["task_id"]
        _, other = writes.call("begin", {"new_task": "Record checkpoints"})
        other = other["structuredContent"]
        _, other_context = writes.call("context")
        if other_context["structuredContent"]["workspace"]["root"] != setting.workspaces["writes"]:
            raise BenchError("the writes server found another Workspace")
        bare = setting.bare
        counter = [0]

        def fact():
            counter[0] += 1
            return "Checkpoint %d: the retry loop backs off %d ms before upload attempt %d." % (
                counter[0], 100 + counter[0] % 900, counter[0] % 7)

        def bare_checkpoint():
            bare.capsule(other["task_id"])
            bare.checkpoint(other["session_id"], other["task_id"], fact())

        variants = {
            "ping": lambda: reads.ping(),
            "context": lambda: reads.call("context")[0],
            "tasks": lambda: reads.call("tasks")[0],
            "tasks_bare": lambda: timed(bare.list_tasks, root),
            "pack": lambda: reads.call("pack")[0],
            "pack_bare": lambda: timed(bare.capsule, task_id),
            "checkpoint": lambda: writes.call("checkpoint", {"facts": [{"text": fact()}]})[0],
            "checkpoint_bare": lambda: timed(bare_checkpoint),
        }
        for function in variants.values():      # warm up: first-call imports, caches
            for _ in range(3):
                function()
        reps = PLAN["calls"][quick]
        progress("per-call overhead: %d repetitions of %d variants" % (reps, len(variants)))
        samples = dict((name, []) for name in variants)
        names = sorted(variants)
        rng = random.Random(2)
        for _ in range(reps):
            rng.shuffle(names)
            for name in names:
                samples[name].append(variants[name]())
        claims = len(bare.capsule(task_id)["capsule"]["claims"])
    finally:
        reads.close()
        writes.close()

    report.section("Per call, through the server vs the bare daemon round trip (urllib, same token)")
    report.add("`ping` through the server (a no-op round trip over the pipes)",
               ms(median(samples["ping"])), ms(percentile(samples["ping"], 0.9)), "baseline of `context`")
    rows = (("context", "ping", "`context` (reads local files only; no daemon request)", "ping"),
            ("tasks", "tasks_bare", "`tasks`", "`GET /v1/tasks?workspace=`"),
            ("pack", "pack_bare", "`pack` (a Task of %d claims, default budget)" % claims,
             "`GET /v1/tasks/{id}/capsule`"),
            ("checkpoint", "checkpoint_bare", "`checkpoint` (one fact)",
             "`GET …/capsule` + `POST /v1/sessions/{id}/checkpoints`"))
    for ours, theirs, label, bare_label in rows:
        if theirs != "ping":
            report.add("bare: %s" % bare_label, ms(median(samples[theirs])),
                       ms(percentile(samples[theirs], 0.9)), "baseline of `%s`" % ours)
        difference = median(samples[ours]) - median(samples[theirs])
        report.add(label, ms(median(samples[ours])), ms(percentile(samples[ours], 0.9)),
                   "%s (%+.2f ms)" % (ratio_text(median(samples[ours]) / median(samples[theirs])),
                                      difference * 1000),
                   "≤ +1 ms", difference <= 0.001)
    return samples


# ---------------------------------------------------------------------------
# Phase 2b: the session-start hook
# ---------------------------------------------------------------------------

HOOK_ARGS = ["mcp", "hook", "session-start", "--client", "claude-code"]
PACK_LINE = request_line(2, "tools/call", {"name": "pack", "arguments": {}, "_meta": MODERN_META})
HOOK_BOUND = 3.0                 # seconds: the hook's whole run, whatever the daemon does


def hook_input(cwd):
    """What Claude Code writes on a SessionStart hook's standard input."""
    return json.dumps({"session_id": str(uuid.uuid4()), "transcript_path": "/nonexistent",
                       "cwd": cwd, "hook_event_name": "SessionStart",
                       "source": "startup"}).encode("utf-8")


def spawn_until_exit(argv, stdin, env, cwd, close_input=True):
    """(seconds from spawn until the process has exited, its standard output).  stdin: bytes
    written, then closed (close_input) or held open until the process has exited."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=cwd)
    WATCHDOG.arm(process)
    try:
        if close_input:
            out, err = process.communicate(stdin)
        else:
            if stdin:
                process.stdin.write(stdin)
                process.stdin.flush()
            out = process.stdout.read()           # until it closes its standard output
            err = process.stderr.read()
            process.wait()
        elapsed = time.perf_counter() - started
    finally:
        WATCHDOG.disarm(process)
        finish(process)
    if process.pid in WATCHDOG.killed:
        raise BenchError("%s: still running after %d s" % (" ".join(argv), REQUEST_TIMEOUT))
    if process.returncode != 0 or err:
        raise BenchError("%s: exit %s, standard error %r" % (" ".join(argv), process.returncode,
                                                            err[:300]))
    return elapsed, out


STOP_ARGS = ["mcp", "hook", "stop", "--client", "claude-code"]
STOP_IDLE = 45                   # minutes since the last record of the blocking row's Session


def stop_input(cwd, active):
    """What Claude Code writes on a Stop hook's standard input (stop_hook_active: whether this
    stop is one a block caused)."""
    return json.dumps({"session_id": str(uuid.uuid4()), "transcript_path": "/nonexistent",
                       "cwd": cwd, "hook_event_name": "Stop", "stop_hook_active": active,
                       "last_assistant_message": "Done. The retry now backs off and the "
                                                 "upload tests pass."}).encode("utf-8")


def stop_blocked(out):
    """Whether the stop hook printed one block, its reason the fixed paragraph."""
    try:
        value = json.loads(out.decode("utf-8"))
        return out.count(b"\n") == 1 and value["decision"] == "block" and \
            value["reason"].startswith("memprove: Session s")
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


def idle_capsule(context, minutes, claims=60):
    """A synthetic Capsule of the Task and Session `context` (a context.json) names: that
    Session open and the only one, every claim and run its own, the last record `minutes`
    before now (so the stop hook blocks), the Task active."""
    capsule = synthetic_capsule(claims)
    now = time.time()

    def at(seconds_ago):
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - seconds_ago))

    number = context["session"]["number"]
    last = minutes * 60
    capsule["task"].update(id=context["task"]["id"], number=context["task"]["number"],
                           created_at=at(last + claims * 60 + 120), updated_at=at(last))
    session = capsule["sessions"][-1]
    session.update(id=context["session"]["id"], number=number, task_id=context["task"]["id"],
                   task_number=context["task"]["number"], state="open", ended_at=None,
                   started_at=at(last + claims * 60 + 60))
    capsule["sessions"] = [session]
    for index, claim in enumerate(capsule["claims"]):
        claim.update(session_number=number, created_at=at(last + (claims - 1 - index) * 60),
                     reaffirmed_at=None)
    for index, run in enumerate(capsule["runs"]):
        run.update(task_id=context["task"]["id"], session_number=number,
                   started_at=at(last + claims * 60 - index * 30),
                   finished_at=at(last + claims * 60 - index * 30 - 10))
    capsule["task"]["sessions_open"] = 1
    return capsule


def hook_spoke(out):
    try:
        value = json.loads(out.decode("utf-8"))
        return out.count(b"\n") == 1 and bool(value["hookSpecificOutput"]["additionalContext"])
    except (ValueError, KeyError, TypeError):
        return False


class SilentDaemon:
    """A loopback listener that accepts every connection and never answers."""

    def __init__(self):
        import socket
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.held = []
        self.thread = threading.Thread(target=self.accept, name="bench-silent", daemon=True)
        self.thread.start()

    def accept(self):
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self):
        self.sock.close()
        for connection in self.held:
            connection.close()


class CapsuleDaemon:
    """A loopback daemon that answers every request with one fixed Capsule body: the
    largest answers the hook reads (contract.md §6 rule 34), served as fast as a socket
    takes them, so that the hook's own reading is what is timed."""

    def __init__(self, body):
        import socket
        self.served = 0                      # requests read
        self.answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, name="bench-capsule", daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer_one, args=(connection,), daemon=True).start()

    def answer_one(self, connection):
        try:
            connection.recv(65536)           # the request: one GET, headers only
            self.served += 1                 # before the answer: counted once it is read
            connection.sendall(self.answer)
        except OSError:
            pass
        finally:
            connection.close()

    def close(self):
        self.sock.close()


HOOK_BODY = 16 * 1024 * 1024     # the largest Capsule the hook reads (memprove_mcp.HOOK_BODY)


def largest_capsules():
    """{name: (the Capsule's JSON body, what the hook must do)}: the most claims, and the
    longest single text, that fit in HOOK_BODY; and a 60 MB text, past it."""
    bodies = {}
    claims = 1000
    while True:                        # the most synthetic claims under the limit
        body = json.dumps({"capsule": synthetic_capsule(claims)}).encode("utf-8")
        if len(body) > HOOK_BODY:
            break
        bodies["hook_many"], claims = (body, "speaks"), claims * 2
    low, high = claims // 2, claims
    while high - low > 500:
        middle = (low + high) // 2
        body = json.dumps({"capsule": synthetic_capsule(middle)}).encode("utf-8")
        if len(body) <= HOOK_BODY:
            bodies["hook_many"], low = (body, "speaks"), middle
        else:
            high = middle
    base = synthetic_capsule(10)
    shell = json.dumps({"capsule": base}).encode("utf-8")
    for name, size, outcome in (("hook_huge_text", HOOK_BODY - len(shell) - 1024, "speaks"),
                                ("hook_over_limit", 60 * 1000 * 1000, "silent")):
        capsule = synthetic_capsule(10)
        capsule["claims"][0]["text"] = "\x7f" * size     # DEL: one fold of it once took seconds
        # Unescaped, as JSON allows: each DEL one byte of the body.
        bodies[name] = (json.dumps({"capsule": capsule}, ensure_ascii=False).encode("utf-8"),
                        outcome)
    return bodies


def phase_hook(setting, pyz, quick, report):
    """`mcp hook session-start` and `mcp hook stop` from spawn to exit (a client waits for
    its exit), beside what the one that reads the Capsule costs at most (a cold server's first
    `pack`) and the interpreter's floor."""
    py = sys.executable
    with_task = setting.env("reads")                 # phase_calls left its context a Task
    root = setting.workspaces["reads"]
    no_task_root = os.path.join(setting.folder, "home", "no-task")
    os.makedirs(os.path.join(no_task_root, ".memprove"))
    no_task = dict(setting.base_env, CLAUDE_PROJECT_DIR=no_task_root)
    silent = SilentDaemon()
    silent_data = os.path.join(setting.folder, "silent-data")
    os.makedirs(silent_data, mode=0o700)
    os.chmod(silent_data, 0o700)
    with open(os.path.join(silent_data, "daemon.json"), "w") as handle:
        json.dump({"url": silent.url, "pid": os.getpid()}, handle)
    silent_env = dict(with_task, MEMPROVE_DATA_DIR=silent_data, MEMPROVE_TIMEOUT="1000")
    hook = [py, pyz] + HOOK_ARGS

    def floor():
        return spawn_until_exit([py, "-I", "-c", "pass"], b"", no_task, no_task_root)[0]

    def serve_pack():
        return spawn_until_answer([py, pyz, "mcp", "serve"], [DISCOVER_LINE, PACK_LINE], with_task,
                                  root, tool_answered)

    def hook_with_task():
        elapsed, out = spawn_until_exit(hook, hook_input(root), with_task, root)
        if not hook_spoke(out):
            raise BenchError("the hook with a Task printed %r" % out[:300])
        return elapsed

    def hook_without_task():
        elapsed, out = spawn_until_exit(hook, hook_input(no_task_root), no_task, no_task_root)
        if out != b"":
            raise BenchError("the hook without a Task printed %r" % out[:300])
        return elapsed

    def hook_silent_daemon():
        elapsed, out = spawn_until_exit(hook, hook_input(root), silent_env, root)
        if out != b"":
            raise BenchError("the hook facing a silent daemon printed %r" % out[:300])
        return elapsed

    def hook_open_input():
        elapsed, out = spawn_until_exit(hook, b"", with_task, root, close_input=False)
        if not hook_spoke(out):
            raise BenchError("the hook with its input held open printed %r" % out[:300])
        return elapsed

    largest, daemons = {}, []

    def serving(body):
        """(the environment whose data directory names a CapsuleDaemon serving `body`, it)."""
        daemon = CapsuleDaemon(body)
        daemons.append(daemon)
        data = os.path.join(setting.folder, "capsule-data-%d" % len(daemons))
        os.makedirs(data, mode=0o700)
        os.chmod(data, 0o700)
        with open(os.path.join(data, "daemon.json"), "w") as handle:
            json.dump({"url": daemon.url, "pid": os.getpid()}, handle)
        env = dict(with_task, MEMPROVE_DATA_DIR=data)
        env.pop("MEMPROVE_CHECKPOINT_MINUTES", None)     # the default, 30
        return env, daemon

    def hook_on(body, outcome):
        env = serving(body)[0]

        def run():
            elapsed, out = spawn_until_exit(hook, hook_input(root), env, root)
            if hook_spoke(out) != (outcome == "speaks"):
                raise BenchError("the hook on a Capsule of %d bytes printed %r" % (
                    len(body), out[:300]))
            return elapsed
        return run

    # The stop hook: the context's Session open, nothing recorded for STOP_IDLE minutes (it
    # blocks, after one getTaskCapsule); and a stop a block caused (silent, no request).
    with open(os.path.join(root, ".memprove", "context.json"), encoding="utf-8") as handle:
        named = json.load(handle)
    if not named.get("task") or not named.get("session"):
        raise BenchError("the per-call Workspace's context names no Task and Session")
    stop = [py, pyz] + STOP_ARGS
    stop_env, stop_daemon = serving(json.dumps({"capsule": idle_capsule(
        named, STOP_IDLE)}).encode("utf-8"))

    def stop_blocks():
        asked = stop_daemon.served
        elapsed, out = spawn_until_exit(stop, stop_input(root, False), stop_env, root)
        if not stop_blocked(out) or stop_daemon.served != asked + 1:
            raise BenchError("the stop hook, %d min after the last record, printed %r after "
                             "%d requests" % (STOP_IDLE, out[:300], stop_daemon.served - asked))
        return elapsed

    def stop_again():
        asked = stop_daemon.served
        elapsed, out = spawn_until_exit(stop, stop_input(root, True), stop_env, root)
        if out != b"" or stop_daemon.served != asked:
            raise BenchError("the stop hook with stop_hook_active printed %r after %d requests"
                             % (out[:300], stop_daemon.served - asked))
        return elapsed

    variants = {"floor": floor, "serve_pack": serve_pack, "hook_task": hook_with_task,
                "hook_none": hook_without_task, "stop_block": stop_blocks,
                "stop_again": stop_again}
    bounded = {"hook_silent": hook_silent_daemon, "hook_open": hook_open_input}
    try:
        for name, (body, outcome) in sorted(largest_capsules().items()):
            largest[name] = hook_on(body, outcome)
        for function in variants.values():        # once untimed: the bytecode cache, the OS's
            function()
        reps = PLAN["hook"][quick]
        bound_reps = PLAN["hook_bound"][quick]
        largest_reps = PLAN["hook_largest"][quick]
        progress("hooks: %d repetitions of %d variants, %d of %d bounded ones, "
                 "%d of %d on the largest Capsules" % (reps, len(variants), bound_reps,
                                                       len(bounded), largest_reps, len(largest)))
        samples = dict((name, []) for name in list(variants) + list(bounded) + list(largest))
        rng = random.Random(4)
        for rep in range(reps):
            order = sorted(variants) + (sorted(bounded) if rep < bound_reps else []) + \
                (sorted(largest) if rep < largest_reps else [])
            rng.shuffle(order)
            for name in order:
                samples[name].append((variants.get(name) or bounded.get(name) or largest[name])())
    finally:
        silent.close()
        for daemon in daemons:
            daemon.close()

    floor_value = median(samples["floor"])
    serve_value = median(samples["serve_pack"])
    report.section("Session-start and stop hooks (spawn → exit), %s" % short_python())
    report.add("`python3 -I -c pass`, until it exits: **the floor**", ms(floor_value),
               ms(percentile(samples["floor"], 0.9)), "baseline of the silent hooks")
    report.add("cold `mcp serve` → `server/discover`, then its first `pack` answered",
               ms(serve_value), ms(percentile(samples["serve_pack"], 0.9)),
               "baseline of the hooks that read the Capsule; %s floor" % ratio_text(
                   serve_value / floor_value))
    # Each hook against what it stands beside: the Pack's cold `pack` when it reads the
    # Capsule, the interpreter's floor when it sends nothing (target 1.3x either way).
    pack, floor_ = (serve_value, "cold `pack`"), (floor_value, "floor")
    for name, label, (base, base_name) in (
            ("hook_task", "hook with a Task (`--client claude-code`, Claude Code's input): the "
                          "Pack printed", pack),
            ("hook_none", "hook with no Task in the context: silent", floor_),
            ("stop_block", "stop hook, the Session's last record %d min old (one "
                           "`getTaskCapsule`, Claude Code's input): it blocks" % STOP_IDLE, pack),
            ("stop_again", "stop hook, `stop_hook_active` true (no request): silent", floor_)):
        value = median(samples[name])
        versus = "%s %s (%+.1f ms)" % (ratio_text(value / base), base_name, (value - base) * 1000)
        if base is not floor_value:
            versus += ", %s floor" % ratio_text(value / floor_value)
        report.add(label, ms(value), ms(percentile(samples[name], 0.9)), versus,
                   "≤ 1.3× %s" % base_name, value / base <= 1.3)
    for name, label in (("hook_silent", "hook, the daemon accepts and never answers "
                                         "(`MEMPROVE_TIMEOUT=1000`): silent"),
                        ("hook_open", "hook, its standard input never closed: the Pack printed"),
                        ("hook_many", "hook, the most claims a Capsule under 16 MiB holds: "
                                      "it speaks"),
                        ("hook_huge_text", "hook, one claim of about 16 MiB of DEL characters: "
                                           "the Pack printed"),
                        ("hook_over_limit", "hook, one claim of 60 MB of DEL characters (past "
                                            "16 MiB): silent")):
        longest = max(samples[name])
        report.add(label, ms(median(samples[name])), ms(percentile(samples[name], 0.9)),
                   "longest of %d: %s" % (len(samples[name]), ms(longest)),
                   "≤ %.0f s, every run" % HOOK_BOUND, longest <= HOOK_BOUND)
    return samples


# ---------------------------------------------------------------------------
# Phase 3: the Pack
# ---------------------------------------------------------------------------

# The Pack's rows: (budget, query).  The first three are issue 27's measure,
# each against `json.loads` of the same Capsule's bytes.
PACK_RENDERS = ((memprove_mcp.PACK_BUDGET, None), (memprove_mcp.PACK_BUDGET, PACK_QUERY), (60000, None),
                (10 ** 9, None), (10 ** 9, PACK_QUERY))
AGAINST_LOADS = 3


def phase_pack(setting, pyz, quick, report, capsules):
    """`render_pack` in process on Capsules of 1,000, 10,000 and 100,000 claims
    (decoded from JSON, as the server gets them), beside `json.loads` of their bytes;
    and, beside each row the `pack` tool can ask for (a budget of at most 60,000),
    the same Pack through the server (`pack_served`).  Returns the 10,000-claim
    Capsule's samples through the server, for the end-to-end rows."""
    render = memprove_mcp.render_pack
    variants = {}            # (size, "loads" or (budget, query)) -> (function, repetitions)
    figures = {}
    for size, plan in ((1000, "pack_small"), (10000, "pack_medium"), (100000, "pack_large")):
        raw = json.dumps(capsules[size]).encode("utf-8")
        variants[(size, "loads")] = (lambda raw=raw: json.loads(raw), PLAN[plan][quick])
        for budget, text in PACK_RENDERS:
            capsule = capsules[size]
            variants[(size, (budget, text))] = (lambda capsule=capsule, budget=budget, text=text:
                                                render(capsule, budget, text), PLAN[plan][quick])
            figures[(size, (budget, text))] = render(capsule, budget, text)   # once, untimed: its figures
        figures[(size, "loads")] = len(raw)
    most = max(reps for _, reps in variants.values())
    progress("the Pack: up to %d repetitions of %d variants" % (most, len(variants)))
    samples = dict((key, []) for key in variants)
    rng = random.Random(4)
    for rep in range(most):
        order = [key for key, (_, reps) in variants.items() if rep < reps]
        rng.shuffle(order)
        for key in order:
            started = time.perf_counter()
            variants[key][0]()
            samples[key].append(time.perf_counter() - started)
    served = pack_served(setting, pyz, quick, capsules)

    def middle(size, what):
        return median(samples[(size, what)])

    report.section("The Pack: `render_pack` on synthetic Capsules (in process), and `pack` of the same "
                   "Capsule through the server")
    for size in (1000, 10000, 100000):
        loads = middle(size, "loads")
        reps = variants[(size, "loads")][1]
        runs = " (%d run%s)" % (reps, "" if reps == 1 else "s") if reps < 5 else ""
        report.add("`json.loads` of the %s-claim Capsule's bytes (%s)%s" % (
                       "{:,}".format(size), size_text(figures[(size, "loads")]), runs),
                   ms(loads), ms(percentile(samples[(size, "loads")], 0.9)), "baseline of the rows below")
        server = served[size]
        server_loads = median(server["loads"])
        server_runs = len(server["loads"])
        server_runs = " (%d run%s)" % (server_runs, "" if server_runs == 1 else "s") if server_runs < 5 else ""
        for index, (budget, text) in enumerate(PACK_RENDERS):
            value = middle(size, (budget, text))
            out = figures[(size, (budget, text))]
            label = "%s claims, %s, %s → %s units, %d claims shown%s" % (
                "{:,}".format(size),
                "unlimited budget" if budget == 10 ** 9 else "budget " + "{:,}".format(budget),
                "query `%s`" % text if text else "no query", "{:,}".format(out["units"]),
                out["claims_shown"], runs)
            versus = "%s `json.loads`" % ratio_text(value / loads)
            high = ms(percentile(samples[(size, (budget, text))], 0.9))
            if size == 1000:
                report.add(label, ms(value), high, versus, "info")
            elif size == 100000:
                medium = middle(10000, (budget, text))
                report.add(label, ms(value), high, "%s the 10,000; %s" % (ratio_text(value / medium), versus),
                           "≤ 11× the 10,000", value / medium <= 11)
            elif index < AGAINST_LOADS:
                report.add(label, ms(value), high, versus, "≤ 0.5× `json.loads`", value <= 0.5 * loads)
            else:
                report.add(label, ms(value), high, versus, "≤ 30 ms", value <= 0.030)
            name = SERVED_CALLS.get((budget, text))
            if name is None:
                continue            # the tool's budget is at most 60,000: no unlimited Pack through it
            difference = server[name + "-over"]
            value = median(difference)
            label = "↳ the same through the server: `pack` − `claims [1]` of the Capsule, %d claims shown%s" % (
                server["figures"][name]["claims_shown"], server_runs)
            versus = "%s `json.loads` (%s, interleaved)" % (ratio_text(value / server_loads), ms(server_loads))
            if size == 1000:
                report.add(label, ms(value), ms(percentile(difference, 0.9)), versus, "info")
            else:
                report.add(label, ms(value), ms(percentile(difference, 0.9)), versus, "≤ 0.5× `json.loads`",
                           value <= 0.5 * server_loads)
    return served[10000]


# The `pack` calls beside the in-process rows they repeat, by their (budget, query).
SERVED_CALLS = {(memprove_mcp.PACK_BUDGET, None): "pack", (memprove_mcp.PACK_BUDGET, PACK_QUERY): "query",
                (60000, None): "wide"}


def pack_served(setting, pyz, quick, capsules):
    """`pack` through the server (the .pyz over real pipes, the daemon's `serve_capsule`)
    of each synthetic Capsule, each call next to a `claims [1]` of it: the same request,
    decoding and checks, so `pack` − `claims [1]` is what the Pack costs there.
    Interleaved with `json.loads` of the bytes the daemon sends (and, for 10,000 claims,
    a bare GET of them, for the end-to-end rows).  {size: {variant: [seconds], ...,
    "<name>-over": [pack − its claims [1], per repetition], "figures", "texts", "body"}}."""
    calls = {"claims": ("claims", {"numbers": [1]}), "pack": ("pack", {}),
             "query": ("pack", {"query": PACK_QUERY}), "wide": ("pack", {"budget": 60000})}
    served = {}
    server = setting.server([sys.executable, pyz, "mcp", "serve"], "reads")
    try:
        _, context = server.call("context")
        task_id = context["structuredContent"]["task_id"]
        for size, plan in ((1000, "pack_served_small"), (10000, "pack_e2e"), (100000, "pack_served_large")):
            # A shallow copy with the Task's id: no second copy of the claims to walk.
            body = dict(capsules[size], task=dict(capsules[size]["task"], id=task_id))
            setting.daemon.serve_capsule(task_id, {"capsule": body})
            try:
                raw = setting.bare.capsule_bytes(task_id)
                figures, texts = {}, {}
                for name, (tool, arguments) in calls.items():
                    _, result = server.call(tool, arguments)    # once, untimed: its figures
                    if tool == "pack":
                        # The Pack's figures: in `_meta` since the pack result became text for the model.
                        figures[name] = result.get("structuredContent") or result["_meta"]["memprove/pack"]
                        texts[name] = result["content"][0]["text"]
                rng = random.Random(5)

                def paired(call, rng=rng):
                    """`claims [1]` and the `pack` call next to each other, in a random order:
                    a shared machine's load drifts between calls far apart more than
                    between neighbours.  (pack's seconds, claims's seconds)"""
                    first = rng.random() < 0.5
                    claims = server.call(*calls["claims"])[0] if first else None
                    ours = server.call(*call)[0]
                    return ours, claims if first else server.call(*calls["claims"])[0]

                variants = dict((name, lambda call=calls[name]: paired(call)) for name in ("pack", "query", "wide"))
                variants["loads"] = lambda raw=raw: timed(json.loads, raw)
                if size == 10000:
                    variants["raw"] = lambda: timed(setting.bare.capsule_bytes, task_id)
                reps = PLAN[plan][quick]
                progress("pack through the server, %s claims: %d repetitions of %d variants" % (
                    "{:,}".format(size), reps, len(variants)))
                samples = dict((name, []) for name in variants)
                names = sorted(variants)
                for _ in range(reps):
                    rng.shuffle(names)
                    for name in names:
                        samples[name].append(variants[name]())
            finally:
                setting.daemon.serve_capsule(task_id, None)
            for name in ("pack", "query", "wide"):
                pairs = samples[name]
                samples[name] = [ours for ours, _ in pairs]
                samples[name + "-claims"] = [claims for _, claims in pairs]
                samples[name + "-over"] = [ours - claims for ours, claims in pairs]
            samples["claims"] = samples["pack-claims"]     # one `claims [1]` a repetition, for its own rows
            samples.update(figures=figures, texts=texts, body=raw)
            served[size] = samples
    finally:
        server.close()
    return served


def phase_pack_e2e(report, samples):
    """`pack` of a 10,000-claim Capsule through the server against `claims [1]` of it
    (issue 19's measure: the same request, decoding and checks, then the Pack or
    not), and the server's share of `claims [1]` against `json.loads` of the bytes;
    from pack_served's samples of that Capsule."""
    raw, figures, texts = samples["body"], samples["figures"], samples["texts"]
    matched = re.search(r"\nQuery: .* \((\d+) of (\d+) lines match\)\n", texts["query"])
    if matched is None:
        raise BenchError("the Pack of query %r has no Query line" % PACK_QUERY)

    def middle(name):
        return median(samples[name])

    def cells(name):
        return ms(middle(name)), ms(percentile(samples[name], 0.9))

    def over(name, baseline):
        """The median of the differences within each repetition: a shared machine's
        load drifts between repetitions more than within one."""
        return median([ours - theirs for ours, theirs in zip(samples[name], samples[baseline])])

    report.section("The Pack end to end: a 10,000-claim Capsule (%s of JSON, `serve_capsule`) "
                   "through the server" % size_text(len(raw)))
    report.add("bare: `GET /v1/tasks/{id}/capsule`, its bytes read (the daemon's answer)", *cells("raw"),
               versus="baseline of `claims [1]`")
    report.add("`json.loads` of those bytes (in the bench process)", *cells("loads"),
               versus="baseline of the server's share")
    share = over("claims", "raw")
    report.add("`claims [1]` through the server: the same request, then decoding and checking it all",
               *cells("claims"), versus="server's share %+.1f ms = %s `json.loads`" % (
                   share * 1000, ratio_text(share / middle("loads"))),
               target="share ≤ 2× `json.loads`", met=share <= 2 * middle("loads"))
    for name, label in (("pack", "budget 6000, no query"),
                        ("query", "query `%s` (%s of %s lines match), budget 6000" % (
                            (PACK_QUERY,) + matched.groups())),
                        ("wide", "budget 60,000, no query")):
        difference = median(samples[name + "-over"])
        report.add("`pack`, %s → %d claims shown" % (label, figures[name]["claims_shown"]), *cells(name),
                   versus="%+.1f ms over `claims [1]` (%s)" % (
                       difference * 1000, ratio_text(middle(name) / middle(name + "-claims"))),
                   target="≤ +30 ms", met=difference <= 0.030)


def size_text(count):
    return "%.1f MiB" % (count / MIB) if count >= MIB else "%.0f KiB" % (count / 1024.0)


# ---------------------------------------------------------------------------
# Phase 4: memory
# ---------------------------------------------------------------------------

def floor_rss():
    """VmHWM (MiB) of `python3 -I -c pass`, read by the process itself as it ends."""
    done = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.stdout.write("
                           "[l for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"],
                          stdout=subprocess.PIPE, timeout=60)
    return int(done.stdout.split()[1]) * 1024 / MIB


def phase_memory(setting, pyz, quick, report):
    if not os.path.isdir("/proc/self/task"):
        report.skipped.append("memory: no /proc on this system")
        return None
    calls = PLAN["memory_calls"][quick]
    floor = floor_rss()
    server = setting.server([sys.executable, pyz, "mcp", "serve"], "reads")
    try:
        start = proc_status(server.pid)
        tools = ("context", "tasks", "pack")
        for index in range(10):
            server.call(tools[index % 3])
        warm = proc_status(server.pid)
        progress("memory: %d calls" % calls)
        for index in range(10, calls):
            server.call(tools[index % 3])
            if index % 2000 == 0:
                setting.daemon.clear_ops()
        end = proc_status(server.pid)
    finally:
        server.close()
    setting.daemon.clear_ops()
    report.section("Memory of the server process (`/proc/<pid>/status` VmHWM, peak RSS)")
    report.add("`python3 -I -c pass`: peak RSS (the floor)", "%.1f MiB" % floor, "", "baseline")
    report.add("peak RSS after start (`server/discover` answered)", "%.1f MiB" % start["hwm"], "",
               "%+.1f MiB over the floor" % (start["hwm"] - floor), "≤ 16 MiB", start["hwm"] <= 16)
    report.add("peak RSS after the first 10 calls (first-call imports done)", "%.1f MiB" % warm["hwm"], "",
               "%+.1f MiB over start" % (warm["hwm"] - start["hwm"]), "info")
    report.add("peak RSS after %s calls (`context`, `tasks`, `pack` in turn)" % "{:,}".format(calls),
               "%.1f MiB" % end["hwm"], "",
               "%+.1f MiB over start, %+.1f over the first 10" % (end["hwm"] - start["hwm"],
                                                                  end["hwm"] - warm["hwm"]),
               "≤ +2 MiB", end["hwm"] - start["hwm"] <= 2)
    report.add("threads; open fds (after start → after %s calls)" % "{:,}".format(calls),
               "%d → %d; %d → %d" % (start["threads"], end["threads"], start["fds"], end["fds"]), "", "",
               "info")
    return {"start": start, "warm": warm, "end": end}


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def machine():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s; %s, %d CPUs; Python %s (%s) at %s" % (
        platform.platform(), model, os.cpu_count() or 0, platform.python_version(),
        platform.python_implementation(), sys.executable)


def load_average():
    try:
        return "%.2f" % os.getloadavg()[0]
    except (AttributeError, OSError):
        return "?"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions and 1,000 calls for memory (CI; under a minute)")
    parser.add_argument("--no-sdk", action="store_true",
                        help="skip the MCPServer equivalent (no virtual environment, no pip)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2
    global WATCHDOG
    WATCHDOG = Watchdog()
    quick = 1 if args.quick else 0
    began = time.monotonic()
    load_before = load_average()
    report = Report()
    folder = os.path.realpath(tempfile.mkdtemp(prefix="memprove-bench-"))
    setting = None
    try:
        progress("building the .pyz")
        pyz = build_pyz(folder)
        progress("making synthetic Capsules")
        # As the server gets them: decoded from JSON (its keys shared, its objects laid out as
        # json.loads lays them out).
        capsules = dict((size, json.loads(json.dumps(synthetic_capsule(size))))
                        for size in (1000, 10000, 100000))
        gc.collect()
        if hasattr(gc, "freeze"):
            gc.freeze()          # the Capsules are not garbage: keep collections from walking them
        setting = Setting(folder)
        phase_cold(setting, pyz, quick, report, not args.no_sdk)
        phase_cold_newest(setting, quick, report)
        phase_calls(setting, pyz, quick, report)
        phase_hook(setting, pyz, quick, report)
        setting.daemon.clear_ops()
        phase_pack_e2e(report, phase_pack(setting, pyz, quick, report, capsules))
        setting.daemon.clear_ops()
        phase_memory(setting, pyz, quick, report)
    except BenchError as error:
        sys.stderr.write("bench: broken: %s\n" % error)
        return 1
    finally:
        if setting is not None:
            setting.stop()
        shutil.rmtree(folder, ignore_errors=True)

    print("# memprove-mcp benchmark%s" % (" (--quick)" if quick else ""))
    print()
    print("Machine: %s." % machine())
    print("Run: %s, %.0f s, load average %s before and %s after; every phase interleaves its "
          "variants; medians and 90th percentiles."
          % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.monotonic() - began,
             load_before, load_average()))
    print()
    print(report.render())
    missed = sum(1 for row in report.rows if row[0] == "row" and row[-1] == "**missed**")
    met = sum(1 for row in report.rows if row[0] == "row" and row[-1] == "met")
    print()
    print("Targets: %d met, %d missed." % (met, missed))
    for reason in report.skipped:
        print("Skipped: %s." % reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())
