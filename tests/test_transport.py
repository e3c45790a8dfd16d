"""The transport (memprove_mcp.py section 3), against the built .pyz: concurrency and
lifecycle (issue 5, item 6), what no input may do to it (contract.md §6 rules 4, 5, 8), the soak.

- 100 pipelined requests of every kind in both eras, written at once, each answered
  exactly once and matched by id with its own era's shape.
- `ping`, `tools/list` and `server/discover` answered while every worker waits on a
  held daemon operation.
- Storms of `notifications/cancelled`: nothing is ever sent for a cancelled id (checked
  after the server has exited, so "never" is proven, not waited for), everything else
  is answered.
- End of input with calls in flight and queued: each answered, then exit 0.
- SIGTERM and SIGINT, idle, mid-line, with calls held at the daemon: prompt exit and
  not a byte on standard error but log lines.
- Standard output closed by the client: a quiet exit 0; standard error closed: serving
  goes on.
- Leaving at once under Windows Python with a read of standard input still waiting: exit 0,
  ten times in a row (contract.md §5).

- A flood of large calls with every worker busy keeps memory bounded, and a non-blocking
  standard output loses no answer (contract.md §6 rules 4 and 5); a duplicate id in flight is
  refused (rule 8).
- Soak (issue 5, item 7): MEMPROVE_SOAK_CALLS tool calls (10,000 in CI) in one server
  process; resident memory, open file descriptors and threads read from /proc stay flat.
"""

import errno
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
try:
    import fcntl
    import termios
except ImportError:      # Windows: the tests that use them are skipped there (POSIX_HOST_ONLY)
    fcntl = termios = None

import pytest

from hardening_support import (LedgerView, MALLOC_PLAIN, SOAK_CALLS, call_tool, daemon_ops,
                               needs_proc, outcome_of, peak_kib, proc_stats, report, wrapper)
from harness import (EXPECTED_TOOLS, SAFETY_TIMEOUT, check_stdout_line, initialize_params,
                     modern_params, parse_log, run_with_stdin_held_open, server_path)
import ledgerd  # noqa: E402  (tests/ is on sys.path through conftest)

PROMPT_EXIT = 5.0          # seconds within which a signalled server must be gone


def seed(server, daemon, config, workspace):
    code, begun = outcome_of(server.call("begin", {"new_task": "Lifecycle"}, id="seed-begin"))
    assert code == "ok", begun
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun["session_id"], "pytest", 0)
    code, value = outcome_of(server.call("checkpoint", {
        "facts": [{"text": "Seed fact.", "runs": ["r1"]}], "open_items": ["Seed item."],
        "next_action": "Seed next."}, id="seed-checkpoint"))
    assert code == "ok", value
    return begun


# =============================================================================
# 100 pipelined requests, both eras
# =============================================================================

def mixed_requests(count):
    """(message, check) pairs: a rotation through every kind of request in both eras."""
    kinds = []

    def tool(name, args, era, expect):
        kinds.append(("tools/call", name, args, era, expect))

    for era in ("legacy", "modern"):
        tool("context", {}, era, "ok")
        tool("tasks", {}, era, "ok")
        tool("pack", {"budget": 500}, era, "ok")
        tool("claims", {"numbers": [1, 2, 99]}, era, "ok")
        tool("ledger_verify", {}, era, "ok")
        tool("checkpoint", {"facts": [{"text": "FACT"}]}, era, "ok")
        tool("decide", {"decision": "DECISION"}, era, "ok")
        tool("pack", {"budget": 1}, era, "invalid_params")
        tool("claims", {"numbers": []}, era, "invalid_params")
        tool("checkpoint", {"facts": [{"text": "x", "runs": ["r999"]}]}, era, "run_label_unknown")
        kinds.append(("tools/list", None, None, era, "tools"))
        kinds.append(("nope/method", None, None, era, -32601))
    kinds.append(("ping", None, None, "legacy", "pong"))
    kinds.append(("server/discover", None, None, "modern", "discover"))
    kinds.append(("ping", None, None, "modern", -32601))
    kinds.append(("tools/call", "no-such-tool", {}, "legacy", -32602))
    requests = []
    for n in range(count):
        method, name, args, era, expect = kinds[n % len(kinds)]
        request_id = "q%d" % n if n % 3 else n
        params = None
        if method == "tools/call":
            if args:
                args = json.loads(json.dumps(args).replace("FACT", "Pipelined fact %d" % n)
                                  .replace("DECISION", "Pipelined decision %d" % n))
            params = {"name": name, "arguments": args}
        if era == "modern":
            params = modern_params(params)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        requests.append((message, era, expect, name))
    return requests


def check_answer(response, era, expect, name):
    if isinstance(expect, int):
        assert response.get("error", {}).get("code") == expect, response
        return str(expect)
    result = response["result"]
    if era == "modern":
        assert result["resultType"] == "complete" and "_meta" in result, result
    else:
        assert "resultType" not in result, result
        assert set(result.get("_meta") or {}) <= {"memprove/pack"}, result
    if expect == "pong":
        assert result == {}
    elif expect == "tools":
        assert [t["name"] for t in result["tools"]] == list(EXPECTED_TOOLS)
    elif expect == "discover":
        assert result["supportedVersions"] == ["2026-07-28"]
    else:
        code, value = outcome_of(response, era)
        assert code == expect, (name, value)
        return "%s:%s" % (name, code)
    return expect


def test_100_pipelined_requests_matched_by_id(hserve, config, daemon, workspace):
    server = hserve(config=config, timeout=5)
    server.initialize()
    seed(server, daemon, config, workspace)
    requests = mixed_requests(100)
    data = b"".join(json.dumps(m, separators=(",", ":")).encode() + b"\n" for m, _, _, _ in requests)
    started = time.monotonic()
    server.send_raw(data)                                  # all 100 in one write
    outcomes = Counter()
    for message, era, expect, name in requests:
        response = server.response(message["id"])
        outcomes[check_answer(response, era, expect, name)] += 1
    seconds = time.monotonic() - started
    assert server.unclaimed() == []
    assert server.close() == 0
    order = [m.get("id") for m in server.messages if m.get("id") in {r[0]["id"] for r in requests}]
    assert sorted(map(str, order)) == sorted(str(m["id"]) for m, _, _, _ in requests)
    # Every pipelined write was made exactly once.
    ledger = LedgerView(daemon.db_path)
    try:
        texts = ledger.claim_texts()
    finally:
        ledger.close()
    made = [m["params"]["arguments"] for m, _, expect, name in requests
            if name in ("checkpoint", "decide") and expect == "ok"]
    for args in made:
        text = args["facts"][0]["text"] if "facts" in args else args["decision"]
        assert texts[text] == 1, text
    report("pipelined_100", requests=len(requests), writes=len(made),
           answered_out_of_order=order != [m["id"] for m, _, _, _ in requests],
           outcomes=dict(outcomes), seconds=round(seconds, 2))


# =============================================================================
# Quick methods while every worker waits
# =============================================================================

@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_quick_methods_answered_while_every_worker_waits(hserve, config, daemon, workspace, era):
    server = hserve(config=config, timeout=30)
    server.initialize()
    seed(server, daemon, config, workspace)
    gate = daemon.hold("getTaskCapsule")
    calls = ["held%d" % n for n in range(12)]              # more calls than workers
    try:
        for request_id in calls:
            server.send(server.request_message("tools/call", server.call_params("pack", {}, era=era),
                                               id=request_id))
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        for round_number in range(5):
            assert server.request("ping", id="ping%d" % round_number)["result"] == {}
            assert [t["name"] for t in server.request("tools/list")["result"]["tools"]] == \
                list(EXPECTED_TOOLS)
            assert [t["name"] for t in server.modern("tools/list")["result"]["tools"]] == \
                list(EXPECTED_TOOLS)
            assert server.modern("server/discover")["result"]["cacheScope"] == "public"
            assert server.request("initialize", initialize_params())["result"]["protocolVersion"]
        assert server.unclaimed() == []                     # no held call has answered
    finally:
        gate.release()
    for request_id in calls:
        assert outcome_of(server.response(request_id), era)[0] == "ok"
    assert server.close() == 0


# =============================================================================
# Cancellation storms
# =============================================================================

def test_cancellation_storm(hserve, config, daemon, workspace):
    server = hserve(config=config, timeout=30)
    server.initialize()
    seed(server, daemon, config, workspace)
    gate = daemon.hold("listTasks")
    ids = [n if n % 2 else "c%d" % n for n in range(30)]
    cancelled = set(ids[::3])
    try:
        for n, request_id in enumerate(ids):
            era = "modern" if n % 4 == 0 else "legacy"
            server.send(server.request_message("tools/call", server.call_params("tasks", {}, era=era),
                                               id=request_id))
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        storm = 0
        for request_id in sorted(cancelled, key=str):
            for _ in range(3):                               # repeated cancels
                server.notify("notifications/cancelled", {"requestId": request_id, "reason": "storm"})
                storm += 1
        for n in range(1000):                                # cancels for nothing in flight
            target = [n, "x%d" % n, str(ids[1]), None, [n], {"id": n}, 1.5, True][n % 8]
            params = {"requestId": target} if n % 10 else [target]
            server.notify("notifications/cancelled", params)
            storm += 1
        assert server.request("ping", id="after-storm")["result"] == {}
    finally:
        gate.release()
    expected = [request_id for request_id in ids if request_id not in cancelled]
    for request_id in expected:
        assert outcome_of(server.response(request_id))[0] == "ok"
    assert server.close() == 0                               # exited: nothing more can come
    answered = [m["id"] for m in server.messages if "id" in m]
    for request_id in cancelled:
        assert not any(type(a) is type(request_id) and a == request_id for a in answered), request_id
    logs = server.log_records()
    outcomes = Counter(record["outcome"] for record in logs if record["method"] == '"tools/call"')
    assert outcomes["cancelled"] == len(cancelled) and outcomes["ok"] >= len(expected)
    report("cancellation_storm", calls=len(ids), cancelled=len(cancelled), notifications=storm,
           answered=len(expected), sent_for_cancelled=0)


# =============================================================================
# End of input with calls in flight
# =============================================================================

def test_end_of_input_answers_every_call_in_flight_and_queued(hserve, config, daemon, workspace):
    server = hserve(config=config, timeout=30)
    server.initialize()
    seed(server, daemon, config, workspace)
    gate = daemon.hold("getTaskCapsule")
    ids = []
    try:
        for n in range(20):
            tool, args = [("pack", {}), ("checkpoint", {"facts": [{"text": "EOF fact %d" % n}]}),
                          ("claims", {"numbers": [1]}), ("tasks", {})][n % 4]
            server.send(server.request_message("tools/call", server.call_params(tool, args),
                                               id="e%d" % n))
            ids.append("e%d" % n)
        # The last line lacks its newline: it is served all the same.
        server.send_raw(b'{"jsonrpc":"2.0","id":"last","method":"tools/call","params":'
                        b'{"name":"context","arguments":{}}}')
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        server.shut_input()
    finally:
        gate.release()
    assert server.wait() == 0
    server.check()
    for request_id in ids + ["last"]:
        assert outcome_of(server.response(request_id))[0] == "ok", request_id


# =============================================================================
# Signals
# =============================================================================

def _signalled(server, signum):
    started = time.monotonic()
    server.proc.send_signal(signum)
    try:
        code = server.proc.wait(timeout=PROMPT_EXIT)
    except subprocess.TimeoutExpired:
        server.kill()
        raise AssertionError("no exit within %ss of %s" % (PROMPT_EXIT, signum))
    server.wait()
    return code, time.monotonic() - started


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("state", ["idle", "mid-line", "calls-held"])
def test_signal_exits_promptly_and_quietly(hserve, config, daemon, workspace, signame, state):
    server = hserve(config=config, timeout=30)
    server.initialize()
    gate = None
    try:
        if state == "calls-held":
            seed(server, daemon, config, workspace)
            gate = daemon.hold("getTaskCapsule")
            for n in range(12):
                server.send(server.request_message("tools/call", server.call_params("pack", {}),
                                                   id="h%d" % n))
            assert gate.wait_arrived(SAFETY_TIMEOUT)
        elif state == "mid-line":
            server.send_raw(b'{"jsonrpc":"2.0","id":"half","meth')
        if state == "idle":
            assert server.request("ping", id="ready")["result"] == {}
        logged = server.sent - (12 if state == "calls-held" else 0)   # a partial line is no message
        server.wait_stderr_lines(logged)
        code, seconds = _signalled(server, getattr(signal, signame))
    finally:
        if gate is not None:
            gate.release()
    assert code == 0, code
    server.check(count=False)                  # every stderr line is a log line: no traceback
    assert len(server.stderr_lines) == logged, server.stderr_lines
    assert b"Traceback" not in b"".join(server.raw_stderr)
    report("signal_exit", signal=signame, state=state, seconds=round(seconds, 3), exit_code=code)


# The signal lands while the main thread is inside a C-level readline that no
# later byte completes: it must still be acted on at once.
def test_signal_while_a_long_line_streams_in(hserve):
    server = hserve()
    assert server.request("ping", id="ready")["result"] == {}
    server.wait_stderr_lines(1)
    streaming, stop = threading.Event(), threading.Event()

    def stream():
        chunk, written = b"x" * 65536, 0
        try:
            server.proc.stdin.write(b'{"jsonrpc":"2.0","id":"long","method":"ping","params":{"p":"')
            while not stop.is_set():
                server.proc.stdin.write(chunk)
                server.proc.stdin.flush()
                written += 1
                if written == 50:
                    streaming.set()
        except OSError:
            streaming.set()

    writer = threading.Thread(target=stream, daemon=True)
    writer.start()
    assert streaming.wait(SAFETY_TIMEOUT)
    server.proc.send_signal(signal.SIGTERM)
    stop.set()                                   # the client stops writing, stdin stays open
    writer.join(SAFETY_TIMEOUT)
    try:
        code = server.proc.wait(timeout=PROMPT_EXIT)
    except subprocess.TimeoutExpired:
        server.kill()
        raise AssertionError("no exit within %ss of SIGTERM" % PROMPT_EXIT)
    server.wait()
    assert code == 0


# =============================================================================
# The client closes our output
# =============================================================================

def _popen(pyz, env, cwd):
    return subprocess.Popen([sys.executable, str(pyz), "mcp", "serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(cwd))


@pytest.mark.parametrize("when", ["idle", "calls-in-flight"])
def test_stdout_closed_by_the_client_is_a_quiet_exit(pyz, make_env, config, daemon, workspace,
                                                     mcp_log, when):
    env = make_env(dict(config.env(), MEMPROVE_MCP_LOG=str(mcp_log)))
    process = _popen(pyz, env, workspace)
    gate = daemon.hold("listTasks") if when == "calls-in-flight" else None
    try:
        process.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1
        if gate is not None:
            for n in range(5):
                process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call",
                                                "params": modern_params({"name": "tasks"})}).encode()
                                    + b"\n")
            process.stdin.flush()
            assert gate.wait_arrived(SAFETY_TIMEOUT)
        process.stdout.close()                               # the client stops listening
        if gate is not None:
            gate.release()                                   # the answers meet a closed pipe
        else:
            try:
                for n in range(5):
                    process.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % (2 + n))
                    process.stdin.flush()
            except OSError as error:    # EPIPE; on Windows EINVAL, the reader gone
                if not isinstance(error, BrokenPipeError) and error.errno != errno.EINVAL:
                    raise
        code = process.wait(timeout=SAFETY_TIMEOUT)
        errors = process.stderr.read().decode("utf-8", "replace").splitlines()
    finally:
        if gate is not None:
            gate.release()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 0, (code, errors)
    for line in errors:
        parse_log(line)                                      # log lines only, no traceback
    assert config.token not in "\n".join(errors)


# What the server and the hook do when they leave at once (memprove_mcp.leave_at_once), in a
# process of the server's Python: a thread still inside a read of standard input that will
# never return, after a socket exchange with another process.  Under Windows Python (Wine, 3.8
# and 3.13) leaving by ExitProcess hung in about half such runs until wineserver's SIGKILL (exit 137): the
# hook run by a client that holds its pipe open, or a server whose client closed standard output.
LEAVE_WITH_A_READ_WAITING = """\
import _thread, socket, sys
sys.path.insert(0, sys.argv[1])
import memprove_mcp
_thread.start_new_thread(sys.stdin.buffer.read1, (1,))
exchanged = _thread.allocate_lock()
exchanged.acquire()

def exchange():
    conn = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    conn.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    conn.recv(64)
    conn.close()
    exchanged.release()
    never = _thread.allocate_lock()         # then waits, as the module's threads do
    never.acquire()
    never.acquire()

_thread.start_new_thread(exchange, ())
exchanged.acquire()
sys.stdout.buffer.write(b"said\\n")
sys.stdout.flush()
memprove_mcp.leave_at_once()
"""


def test_leaving_at_once_with_a_read_of_stdin_waiting_exits_0(windows_python, pyz, make_env,
                                                               daemon, workspace, tmp_path):
    """Ten times, as one run in two hung (POSIX has no such exit: os._exit ends every thread)."""
    argv = [windows_python, "-c", LEAVE_WITH_A_READ_WAITING, server_path(pyz, windows_python),
            daemon.url.rsplit(":", 1)[1]]
    for _ in range(10):
        done = run_with_stdin_held_open(argv, make_env(), workspace, tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"said\n", b"")


# End of input in a process of the server's Python: the Transport answers every call, then
# finish() returns with every worker it started still alive, waiting for work.  It used to end
# them and join them, and Python's join returns before the thread is gone: the process then
# left while threads were on their way out, which under Wine crashed it now and then (below).
WORKERS_AT_THE_END = """\
import io, json, sys
sys.path.insert(0, sys.argv[1])
import memprove_mcp
lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": json.loads(sys.argv[2])},
         {"jsonrpc": "2.0", "method": "notifications/initialized"}]
lines += [{"jsonrpc": "2.0", "id": n, "method": "tools/call",
           "params": {"name": "tasks", "arguments": {}}} for n in range(1, 9)]
transport = memprove_mcp.Transport(memprove_mcp.parse_command_line(["mcp", "serve"])[1])
transport.run(io.BytesIO(b"".join(json.dumps(line).encode() + b"\\n" for line in lines)))
sys.stdout.write(json.dumps({"workers": len(transport.workers),
                             "alive": sum(w.is_alive() for w in transport.workers)}) + "\\n")
sys.stdout.flush()
memprove_mcp.leave_at_once()
"""


def test_at_end_of_input_the_workers_are_left_waiting(pyz, make_env, workspace):
    done = subprocess.run(
        [sys.executable, "-c", WORKERS_AT_THE_END, server_path(pyz, sys.executable),
         json.dumps(initialize_params())], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=make_env(), cwd=str(workspace), timeout=SAFETY_TIMEOUT)
    lines = done.stdout.decode("utf-8").splitlines()
    assert done.returncode == 0 and len(lines) == 10, (done.returncode, lines, done.stderr)
    assert sorted(json.loads(line)["id"] for line in lines[:9]) == list(range(9))
    workers = json.loads(lines[9])
    assert workers["workers"] >= 1 and workers["alive"] == workers["workers"], workers


def test_every_worker_used_then_end_of_input_exits_0(win_server, daemon):
    """Under each Windows Python, twenty times: eight calls at once, end of input, exit 0 and
    log lines only.  With the workers ended before leaving, 6 of 6,000 such runs (four calls) and
    2 of 1,600 (eight) died of SIGSEGV, and CI once saw an ld.so assertion on standard error;
    with them left waiting, 0 of 6,000 (a loop of servers; the message of the commit that left
    them waiting has the figures)."""
    for _ in range(20):
        server = win_server()
        server.initialize()
        asked = [server.request_message("tools/call", server.call_params("tasks", {}))
                 for _ in range(8)]
        for message in asked:
            server.send(message)
        for message in asked:
            answer = server.response(message["id"])
            assert answer["result"]["isError"] is False, answer
        assert server.close() == 0


def test_stderr_closed_by_the_client_keeps_serving(pyz, make_env, workspace):
    process = _popen(pyz, make_env(), workspace)
    process.stderr.close()
    try:
        for n in range(3):
            process.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % n)
            process.stdin.flush()
            assert json.loads(process.stdout.readline()) == {"jsonrpc": "2.0", "id": n, "result": {}}
        process.stdin.close()
        code = process.wait(timeout=SAFETY_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 0


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
    assert call_tool(server, "begin", {"new_task": "Duplicate ids"})[0] == "ok"
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
    assert call_tool(server, "begin", {"new_task": "Duplicate ids"})[0] == "ok"
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


WINDOW = 16                       # calls in flight at once


WARM_UP = 1000                    # calls before the first measurement


RSS_NOISE_KIB = 1024              # growth allowed between the warm-up and the end


MIX = [("context", {}, "ok"), ("context", {}, "ok"), ("tasks", {}, "ok"), ("context", {}, "ok"),
       ("claims", {"numbers": [1, 2]}, "ok"), ("context", {}, "ok"),
       ("pack", {"budget": 1}, "invalid_params"), ("ledger_verify", {}, "ok"),
       ("context", {}, "ok"), ("checkpoint", {"facts": [{"text": "x", "runs": ["r99"]}]},
                               "run_label_unknown")]


def run_calls(server, first, count, era_every=2):
    """Pipelined calls first..first+count-1, WINDOW at a time; every outcome checked."""
    pending = []
    for n in range(first, first + count):
        tool, args, expected = MIX[n % len(MIX)]
        era = "modern" if n % era_every == 0 else "legacy"
        server.send(server.request_message("tools/call", server.call_params(tool, args, era=era),
                                           id=n))
        pending.append((n, era, expected))
        if len(pending) == WINDOW or n == first + count - 1:
            for request_id, era, expected in pending:
                code, value = outcome_of(server.response(request_id, timeout=SAFETY_TIMEOUT), era)
                assert code == expected, (request_id, value)
            pending = []


def test_soak(hserve, config, daemon, workspace):
    needs_proc()
    server = hserve(config=config, timeout=10)
    server.initialize()
    code, begun = outcome_of(server.call("begin", {"new_task": "Soak"}, id="begin"))
    assert code == "ok", begun
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun["session_id"], "pytest", 0)
    assert outcome_of(server.call("checkpoint", {"facts": [{"text": "Soak fact."}],
                                                  "next_action": "Soak on."}, id="cp"))[0] == "ok"
    pid = server.proc.pid
    warm_up, total = WARM_UP, WARM_UP + SOAK_CALLS
    run_calls(server, 0, warm_up)
    before = proc_stats(pid)
    samples = [before["rss_kib"]]
    started = time.monotonic()
    done, step = warm_up, max(1, SOAK_CALLS // 10)
    while done < total:
        count = min(step, total - done)
        run_calls(server, done, count)
        done += count
        daemon.clear_ops()
        samples.append(proc_stats(pid)["rss_kib"])
    seconds = time.monotonic() - started
    after = proc_stats(pid)
    assert server.request("ping", id="still-here")["result"] == {}
    assert server.close() == 0
    growth = after["rss_kib"] - before["rss_kib"]
    second_half = samples[-1] - samples[len(samples) // 2]
    report("soak", calls=SOAK_CALLS, seconds=round(seconds, 1),
           calls_per_second=round(SOAK_CALLS / seconds),
           rss_kib_before=before["rss_kib"], rss_kib_after=after["rss_kib"],
           rss_growth_kib=growth, rss_samples_kib=samples, fds_before=before["fds"],
           fds_after=after["fds"], threads_before=before["threads"],
           threads_after=after["threads"])
    assert after["fds"] == before["fds"], "file descriptors leaked: %r -> %r" % (before, after)
    assert after["threads"] <= before["threads"], "threads leaked: %r -> %r" % (before, after)
    assert growth <= RSS_NOISE_KIB and second_half <= RSS_NOISE_KIB // 2, (
        "memory grows: %d KiB over the run, samples %r" % (growth, samples))
