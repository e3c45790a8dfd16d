"""Several writers of one Workspace at once (contract.md section 2, "Writes are atomic").

Two server processes open and end Sessions (`begin` and `end` are the tools that write
`context.json`) while a thread records Runs as `memprove run` does (recordRun, then a line
appended to `runs.jsonl`), one Run for each `begin`.  Meanwhile:

- a reader process reads and parses `context.json` in a tight loop: every read must
  parse (the file is replaced atomically, never written in place), and every version it
  sees must still hold a planted unknown key;
- between their calls, the two driving threads act as a third writer that follows the
  contract's rule itself (exclusive lock on `context.lock`, re-read, change, atomic
  rename) and bumps a counter key the servers do not know.  Each bump can fall inside the
  other server's call; a server that applied its change to a copy read before it took
  the lock would put an older counter back, which the next bump sees under the lock and
  the reader sees as the counter going backwards.

MEMPROVE_STRESS_ROUNDS sets the number of begin/end rounds per server (by default 200 in
the "ci" test profile, 40 in the quick one: conftest.depth).
"""

import json
import os
import subprocess
import sys
import threading
import traceback

import pytest

import ledgerd
from harness import depth, server_path

fcntl = pytest.importorskip("fcntl")

ROUNDS = int(os.environ.get("MEMPROVE_STRESS_ROUNDS") or depth(200))
PLANTED = {"owner": "another tool", "values": [1, "two", None, {"three": 3.5}]}

READER = r"""
import json, os, sys
path, stop, planted = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
reads = failures = missing = backwards = 0
last = -1
said_ready = False
while not os.path.exists(stop):
    try:
        with open(path, "rb") as handle:
            context = json.loads(handle.read().decode("utf-8"))
        if not isinstance(context, dict) or context.get("version") != 1:
            raise ValueError("not a version 1 context")
    except Exception:
        failures += 1
        continue
    reads += 1
    if not said_ready:
        print("ready", flush=True)
        said_ready = True
    if context.get("x-planted") != planted:
        missing += 1
    counter = context.get("x-counter")
    if not isinstance(counter, int) or counter < last:
        backwards += 1
    else:
        last = counter
print(json.dumps({"reads": reads, "failures": failures, "missing": missing,
                  "backwards": backwards, "last": last}), flush=True)
"""


def bump(directory, state):
    """The third writer: under the lock, check the counter is the last one written, then
    write it + 1 (re-read, change, atomic rename, as contract.md asks of every writer)."""
    path = os.path.join(directory, "context.json")
    with open(os.path.join(directory, "context.lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            with open(path, "rb") as handle:
                context = json.loads(handle.read().decode("utf-8"))
            if context.get("x-counter") != state["counter"]:
                state["lost"] += 1
            state["counter"] += 1
            context["x-counter"] = state["counter"]
            temporary = os.path.join(directory, ".bump.%d.tmp" % threading.get_ident())
            with open(temporary, "wb") as handle:
                handle.write(json.dumps(context, indent=2).encode("utf-8"))
            os.replace(temporary, path)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def ok(server, tool, arguments):
    response = server.call(tool, arguments)
    result = response.get("result")
    assert result and result.get("isError") is False, (tool, response)
    return result["structuredContent"]


def start_helper(script, args):
    process = subprocess.Popen([sys.executable, "-c", script] + [str(a) for a in args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    assert first == b"ready\n", (first, process.stderr.read())
    return process


def finish_helper(process):
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return json.loads(out.decode("utf-8"))


def test_two_servers_and_memprove_run_write_one_workspace_at_once(
        start_server, daemon, config, workspace, tmp_path):
    root = os.path.realpath(str(workspace))
    directory = os.path.join(root, ".memprove")
    context_path = os.path.join(directory, "context.json")
    stop = tmp_path / "stop"

    lead = start_server(env=config.env())
    lead.initialize(client="lead")
    first = ok(lead, "begin", {"new_task": "Shared work", "agent_name": "lead"})
    s1 = first["session_id"]

    # Plant the unknown keys the way any careful writer would: under the lock.
    state = {"counter": -1, "lost": 0}
    with open(os.path.join(directory, "context.lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        with open(context_path, "rb") as handle:
            context = json.loads(handle.read().decode("utf-8"))
        context.update({"x-planted": PLANTED, "x-counter": 0})
        with open(context_path + ".plant", "w") as handle:
            json.dump(context, handle)
        os.replace(context_path + ".plant", context_path)
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    state["counter"] = 0

    reader = start_helper(READER, [context_path, stop, json.dumps(PLANTED)])

    alpha = start_server(env=config.env())
    alpha.initialize(client="alpha")
    beta = start_server(env=config.env())
    beta.initialize(client="beta")

    errors = []
    runs = []
    sessions_of = {"alpha": [], "beta": []}
    writers_done = threading.Event()
    run_wanted = threading.Semaphore(0)

    def drive(server, name):
        try:
            for _ in range(ROUNDS):
                begun = ok(server, "begin", {"task": 1, "agent_name": name})
                run_wanted.release()
                bump(directory, state)          # lands inside the other server's calls
                number = begun["session"]["number"]
                sessions_of[name].append(number)
                ended = ok(server, "end", {"session": number})
                bump(directory, state)
                assert ended["session_id"] == begun["session_id"], ended
                assert ended["session"] == number and ended["outcome"] == "ended", ended
        except Exception:
            errors.append(traceback.format_exc())

    def record_runs():
        try:
            while True:
                run_wanted.acquire()
                if writers_done.is_set():
                    return
                run = ledgerd.memprove_run(daemon.url, config.token, root, s1,
                                           "make test", len(runs) % 2)
                runs.append(run)
        except Exception:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=drive, args=(alpha, "alpha")),
               threading.Thread(target=drive, args=(beta, "beta"))]
    runner = threading.Thread(target=record_runs)
    for thread in threads + [runner]:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    writers_done.set()
    run_wanted.release()
    runner.join(timeout=60)
    stop.write_text("stop")
    watched = finish_helper(reader)
    assert not any(thread.is_alive() for thread in threads + [runner]), "a writer hung"
    assert not errors, errors[0]

    # Every read parsed; no write lost the planted key or put back an older counter.
    assert watched["failures"] == 0, watched
    assert watched["reads"] >= 100, watched
    assert watched["missing"] == 0, watched
    assert watched["backwards"] == 0, watched
    assert state["lost"] == 0, state
    assert state["counter"] == 4 * ROUNDS, state

    with open(context_path, "rb") as handle:
        final = json.loads(handle.read().decode("utf-8"))
    assert final["version"] == 1 and final["task"]["id"] == first["task_id"]
    assert final["x-planted"] == PLANTED and final["x-counter"] == state["counter"]
    assert final["session"] is None or final["session"]["number"] in [1] + \
        sessions_of["alpha"] + sessions_of["beta"], final["session"]
    assert runs and len(runs) <= 2 * ROUNDS, len(runs)

    # The ledger saw every Session once, and runs.jsonl every Run once, whole.
    numbers = sorted(sessions_of["alpha"] + sessions_of["beta"])
    assert numbers == list(range(2, 2 + 2 * ROUNDS))
    with open(os.path.join(directory, "runs.jsonl")) as handle:
        lines = [json.loads(line) for line in handle]
    assert [line["id"] for line in lines] == [run["id"] for run in runs]
    assert [line["label"] for line in lines] == ["r%d" % n for n in range(1, len(runs) + 1)]
    verified = ok(lead, "ledger_verify", {})
    assert verified["ok"] is True
    assert verified["entries"] == 4 + 2 * 2 * ROUNDS + len(runs)
    for server in (lead, alpha, beta):
        assert server.close() == 0


# -- two agents begin one open Task (tools.md, begin step 6; issue 18) ------------------

def sent_begin(server, arguments):
    message = server.request_message("tools/call", server.call_params("begin", arguments))
    server.send(message)
    return message["id"]


def operations(daemon):
    return [(entry["op"], entry["status"]) for entry in daemon.ops]


def test_two_agents_begin_one_open_task_at_once(start_server, daemon, config, workspace):
    """Both begins have made their Session when their transitions to `active` reach the
    daemon (a barrier holds the transitions until both are there): the first moves the
    Task, the second gets `invalid_transition`, reads the Task again, sees it active, and
    goes on.  Both agents get their Session (one failed 12 times in 15)."""
    from hardening_support import (open_task, outcome_of)
    from harness import SAFETY_TIMEOUT
    root = server_path(workspace)
    task = open_task(daemon, config.token, root, "Begun twice at once")
    servers = []
    for name in ("alpha", "beta"):
        server = start_server(env=config.env())
        server.initialize(client=name)
        servers.append(server)
    gate = daemon.hold("transitionTask")
    ids = [sent_begin(server, {"task": task["number"], "agent_name": name})
           for server, name in zip(servers, ("alpha", "beta"))]
    try:
        assert gate.wait_arrived(SAFETY_TIMEOUT, count=2), operations(daemon)
    finally:
        gate.release()
    results = [outcome_of(server.response(request_id)) for server, request_id in zip(servers, ids)]
    for code, value in results:
        assert code == "ok", value
        assert value["task_id"] == task["id"] and value["task"]["status"] == "active", value
    assert results[0][1]["session_id"] != results[1][1]["session_id"]
    statuses = sorted(status for op, status in operations(daemon) if op == "transitionTask")
    assert statuses == [200, 409], operations(daemon)
    with open(os.path.join(str(workspace), ".memprove", "context.json")) as handle:
        assert json.load(handle)["session"]["id"] in [value["session_id"] for _, value in results]
    for server in servers:
        assert server.close() == 0


@pytest.mark.parametrize("meanwhile", ["still open", "done"])
@pytest.mark.parametrize("arguments, made", [
    ({"task": 1}, "Session 1 is open."),
    ({"new_task": "A new Task"}, "Task 2 was created. Session 1 is open."),
], ids=["task", "new_task"])
def test_a_refused_transition_to_a_task_that_is_not_active_still_fails(
        start_server, daemon, config, workspace, meanwhile, arguments, made):
    """When the Task read again after `invalid_transition` is not active (still open: the
    daemon refused for a reason of its own; or done meanwhile), begin fails with
    `invalid_transition`, its hint naming what was made, and writes no context."""
    from hardening_support import (open_task, outcome_of)
    from harness import SAFETY_TIMEOUT
    root = server_path(workspace)
    open_task(daemon, config.token, root, "Open until it is not")
    server = start_server(env=config.env())
    server.initialize()
    if meanwhile == "still open":
        daemon.inject("problem", op="transitionTask", code="invalid_transition")
        code, text = outcome_of(server.call("begin", arguments))
    else:
        gate = daemon.hold("transitionTask")
        request_id = sent_begin(server, arguments)
        try:
            assert gate.wait_arrived(SAFETY_TIMEOUT), operations(daemon)
            held = [entry for entry in daemon.ops if entry["op"] == "transitionTask"][-1]
            daemon.set_task_status(held["path"].split("/")[3], "done")
        finally:
            gate.release()
        code, text = outcome_of(server.response(request_id))
    assert code == "invalid_transition" and made in text, text
    done = operations(daemon)
    after = [op for op, _ in done[[op for op, _ in done].index("transitionTask") + 1:]]
    assert after == ["listTasks"], done                  # read again, and nothing more
    assert not os.path.exists(os.path.join(root, ".memprove", "context.json"))
    assert server.close() == 0
