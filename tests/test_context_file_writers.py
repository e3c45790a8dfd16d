"""The context files (memprove_mcp.py section 9): several writers of one Workspace at once
(contract.md section 2, "Writes are atomic").

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

Under Windows (the `win` fixture: python.org's CPython under Wine), context.json is written
while other processes hold it open, deny reading it, read it in a loop or hold context.lock
past msvcrt's own wait, and a killed writer leaves it whole.
"""

import json
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import pytest

from hardening_support import ok_value
from harness import Helper, SAFETY_TIMEOUT, depth, server_path
import ledgerd  # noqa: E402  (tests/ is on sys.path through conftest)

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


# ---------------------------------------------------------------------------
# Under Windows: context.json while others hold it, read it, or hold its lock
# ---------------------------------------------------------------------------

# Holds context.json open as Python's open() does (no FILE_SHARE_DELETE, so a
# rename onto it fails), and lets it go only once the server has held
# context.lock through three looks in a row: the server is then writing, and a
# writer that gives up at the first refusal has answered already.
HOLDER = r'''
import msvcrt, os, sys, time
context, lock = sys.argv[1], sys.argv[2]
held = open(context, "rb")
descriptor = os.open(lock, os.O_RDWR)
sys.stdout.write("held\n")
sys.stdout.flush()
looks = 0
while looks < 3:
    os.lseek(descriptor, 0, 0)
    try:
        msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
    except OSError:
        looks += 1
    else:
        os.lseek(descriptor, 0, 0)
        msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)
        looks = 0
    time.sleep(0.005)
held.close()
sys.stdout.write("released\n")
sys.stdout.flush()
'''


def memprove_paths(workspace):
    directory = Path(os.path.realpath(str(workspace))) / ".memprove"
    return directory / "context.json", directory / "context.lock"


def sound_context(path):
    """context.json parsed: whole, version 1 (contract.md's context file)."""
    context = json.loads(path.read_text(encoding="ascii"))
    assert context["version"] == 1, context
    return context


def test_begin_and_end_while_another_process_holds_the_context_open(win, win_server, daemon,
                                                                    workspace, tmp_path, helpers):
    """contract.md §5: os.replace fails while another process has context.json open;
    the write retries under the lock, so the call succeeds once the file is let go."""
    server = win_server()
    server.initialize()
    ok_value(server.call("begin", {"new_task": "Held open"}))
    context, lock = memprove_paths(workspace)
    for tool, arguments in (("end", {}), ("begin", {}), ("end", {}), ("begin", {})):
        holder = Helper(win, tmp_path, "holder", HOLDER, win.path(context), win.path(lock))
        helpers.append(holder)
        holder.expect("held")
        ok_value(server.call(tool, arguments))
        holder.expect("released")
        assert holder.proc.wait(SAFETY_TIMEOUT) == 0
    assert sound_context(context)["session"]["number"] == 3
    assert server.close() == 0


# Holds context.json open sharing nothing (as some editors and scanners open a file):
# while it does, no one can even read the file.  The hold outlasts a bare reader's
# short wait (SHARED_READ_WAIT, 2 s): that length is the situation under test.
EXCLUSIVE = r'''
import ctypes, sys, time
from ctypes import wintypes
create = ctypes.windll.kernel32.CreateFileW
create.restype = wintypes.HANDLE
create.argtypes = [wintypes.LPCWSTR, wintypes.DWORD, wintypes.DWORD, wintypes.LPVOID,
                   wintypes.DWORD, wintypes.DWORD, wintypes.HANDLE]
handle = create(sys.argv[1], 0x80000000, 0, None, 3, 0x80, None)  # GENERIC_READ, no sharing
assert handle not in (None, wintypes.HANDLE(-1).value), ctypes.GetLastError()
sys.stdout.write("held\n")
sys.stdout.flush()
time.sleep(float(sys.argv[2]))
ctypes.windll.kernel32.CloseHandle(wintypes.HANDLE(handle))
sys.stdout.write("released\n")
sys.stdout.flush()
'''


EXCLUSIVE_SECONDS = 3


def test_begin_while_another_process_denies_even_reading_the_context(win, win_server, daemon,
                                                                     workspace, tmp_path,
                                                                     helpers):
    """A refusal to read context.json that lasts past a bare reader's wait is waited out
    as long as the call's writes would wait (MEMPROVE_TIMEOUT): `begin` with no
    arguments continues the context's Task, its parent the open Session, and nothing
    is moved aside as unreadable."""
    server = win_server()
    server.initialize()
    ok_value(server.call("begin", {"new_task": "Locked away"}))
    context, _ = memprove_paths(workspace)
    holder = Helper(win, tmp_path, "exclusive", EXCLUSIVE, win.path(context), EXCLUSIVE_SECONDS)
    helpers.append(holder)
    holder.expect("held")
    begun = ok_value(server.call("begin", {}))
    holder.expect("released")
    assert begun["session"]["number"] == 2 and begun["session"]["parent"] == 1, begun
    assert "moved_aside" not in begun, begun
    assert sorted(path.name for path in context.parent.glob("context.json*")) == ["context.json"]
    assert sound_context(context)["session"]["number"] == 2
    assert server.close() == 0


def test_begin_and_end_while_another_server_reads_the_context_in_a_loop(win_server, daemon,
                                                                        workspace):
    """Two servers in one project: one's `context` reads (each holding the file open while
    it reads) never make the other's writes fail, and no read fails for the writes."""
    writer, reader = win_server(), win_server()
    writer.initialize()
    reader.initialize()
    ok_value(writer.call("begin", {"new_task": "Read while written"}))
    started, finished, reads, problems = threading.Event(), threading.Event(), [], []

    def read_in_a_loop():
        try:
            while not finished.is_set():
                reads.append(ok_value(reader.call("context")))
                started.set()
        except BaseException as error:      # noqa: B902 -- reported below
            problems.append(error)
            started.set()

    thread = threading.Thread(target=read_in_a_loop, daemon=True)
    thread.start()
    assert started.wait(SAFETY_TIMEOUT)
    try:
        numbers = []
        for _ in range(20):
            numbers.append(ok_value(writer.call("begin", {}))["session"]["number"])
            ok_value(writer.call("end", {}))
    finally:
        finished.set()
        thread.join(SAFETY_TIMEOUT)
    assert not problems, problems
    assert numbers == list(range(2, 22))
    assert all("context_error" not in read and read["workspace"]["problem"] is None
               for read in reads), [read for read in reads if "context_error" in read][:1]
    context, _ = memprove_paths(workspace)
    assert sound_context(context)["session"]["number"] == 1
    assert writer.close() == 0 and reader.close() == 0


# Another writer of context.json, as a tool of the user's could be: it takes
# context.lock in a loop of its own, adds one to an unknown key (which servers keep,
# contract.md's context file), and once, halfway, holds the lock past the ~10 s
# after which msvcrt's LK_LOCK gives up on Windows (Wine's after ~10 ms): that
# long hold is the situation under test, not a wait for anything.
TALLY = r'''
import json, msvcrt, os, sys, time
context, lock, count, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
descriptor = os.open(lock, os.O_RDWR)
temporary = os.path.join(os.path.dirname(context), "tally-writer.tmp")

def take():
    while True:
        os.lseek(descriptor, 0, 0)
        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
            return
        except OSError:
            time.sleep(0.001)

def give():
    os.lseek(descriptor, 0, 0)
    msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)

def read():
    while True:
        try:
            with open(context, "rb") as file:
                return json.loads(file.read().decode("utf-8"))
        except PermissionError:          # a server renames onto it this moment
            time.sleep(0.001)

def write(value):
    with open(temporary, "wb") as file:
        file.write((json.dumps(value, indent=2) + "\n").encode("ascii"))
        file.flush()
        os.fsync(file.fileno())
    while True:
        try:
            os.replace(temporary, context)
            return
        except PermissionError:          # a server reads it this moment
            time.sleep(0.001)

sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
for index in range(count):
    take()
    try:
        value = read()
        value["tally"] = value.get("tally", 0) + 1
        write(value)
        if index == count // 2:
            sys.stdout.write("holding\n")
            sys.stdout.flush()
            time.sleep(hold)
    finally:
        give()
sys.stdout.write("done\n")
sys.stdout.flush()
'''


TALLY_COUNT = 24


LOCK_HELD_SECONDS = 11


def test_two_servers_and_a_long_lock_holder_lose_no_update(win, win_server, daemon, workspace,
                                                           tmp_path, helpers):
    """Two servers each begin and end Sessions while a third process updates context.json
    under context.lock and once holds the lock for longer than msvcrt waits: every call
    succeeds (the lock is taken in a loop up to MEMPROVE_TIMEOUT) and every one of the
    third process's updates survives the servers' rewrites."""
    servers = [win_server(), win_server()]
    for server in servers:
        server.initialize()
    shared = ok_value(servers[0].call("begin", {"new_task": "Shared"}))["task"]["number"]
    context, lock = memprove_paths(workspace)
    tally = Helper(win, tmp_path, "tally", TALLY, win.path(context), win.path(lock), TALLY_COUNT,
                   LOCK_HELD_SECONDS)
    helpers.append(tally)
    tally.expect("ready")
    finished, done_calls, problems = threading.Event(), [0, 0], []

    def cycle(index):
        server = servers[index]
        try:
            while not finished.is_set():
                # One Task for both: `end {session}` takes a Session of the context's Task,
                # and a new Task per server would move the context between begin and end.
                begun = ok_value(server.call("begin", {"task": shared}))
                ok_value(server.call("end", {"session": begun["session"]["number"]}))
                done_calls[index] += 2
        except BaseException as error:      # noqa: B902 -- reported below
            problems.append(error)

    threads = [threading.Thread(target=cycle, args=(index,), daemon=True) for index in (0, 1)]
    for thread in threads:
        thread.start()
    tally.tell("go")
    try:
        tally.expect("holding")
        tally.expect("done", timeout=SAFETY_TIMEOUT + LOCK_HELD_SECONDS * 2)
    finally:
        finished.set()
        for thread in threads:
            thread.join(SAFETY_TIMEOUT * 4)
    assert not problems, problems
    assert all(count >= 2 for count in done_calls), done_calls
    assert sound_context(context).get("tally") == TALLY_COUNT
    assert all(server.close() == 0 for server in servers)


def test_a_server_killed_mid_write_leaves_the_context_whole(win, win_server, daemon, workspace):
    """Killed (TerminateProcess, as Wine's SIGKILL is) while calls write context.json:
    the file is whole every time, and the next writer clears what was left."""
    context, _ = memprove_paths(workspace)
    for round_number in range(6):
        server = win_server()
        server.initialize()
        pending = []
        for index in range(6):
            tool, arguments = ("begin", {"new_task": "Round %d" % round_number}) if index % 2 == 0 \
                else ("end", {})
            message = server.request_message("tools/call", server.call_params(tool, arguments))
            server.send(message)
            pending.append(message["id"])
        server.response(pending[0])         # the rest are being written now
        server.kill()
        server.checked = True               # killed: its log is cut short on purpose
        if context.exists():
            sound_context(context)
    server = win_server()
    server.initialize()
    ok_value(server.call("begin", {"new_task": "After the kills"}))
    assert sound_context(context)["task"]["title"] == "After the kills"
    assert not [name for name in os.listdir(str(context.parent)) if name.endswith(".tmp")]
    assert server.close() == 0
