"""Concurrency and lifecycle (issue 5, item 6), against the built .pyz.

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
"""

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from harness import EXPECTED_TOOLS, SAFETY_TIMEOUT, initialize_params, modern_params, parse_log
from hardening_support import (LedgerView, outcome_of, report)


import ledgerd  # noqa: E402

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
            except BrokenPipeError:
                pass
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
