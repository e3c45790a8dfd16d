"""What a review found another party could do to the server (issue 18), rule by rule of
contract.md §6 (14 to 17), against the built .pyz over real pipes, real files, the reference
daemon over real HTTP and, where a rule is about another user, real other uids.

- Rule 14: a context file of another Workspace (a copied or moved project, a `.memprove`
  or `context.json` that links to a sibling's) is never used, and a `.memprove/` the
  server creates carries a `.gitignore` so that no context is committed and cloned.
- Rule 15: another user's `.memprove/` above a project is not its Workspace.
- Rule 16: `runs.jsonl` is read a line at a time: 64 MiB of newlines answer within the
  harness's safety timeout, memory stays bounded with ~96 MiB of valid lines, and a line
  over 64 KiB is skipped while the lines after it are read.
- Rule 17: the token goes only to a listener owned by the owner of `daemon.json`.

The tests of other users need root (CI runs as root): `hardening_support.local_users`
runs each party as a uid of its own, and skips saying why when the tests are not root.
Figures (seconds for a `context` call on 64 MiB of newlines and of valid lines, the peak
memory of one on ~96 MiB) are printed with `report`.
"""

import json
import os
import re
import shutil
import socket
import time

import pytest

from harness import SAFETY_TIMEOUT, sample_calls, server_path, snapshot
from hardening_support import (MALLOC_PLAIN, UserListener, begun_server, call_tool, doctor_as,
                               victims_daemon, victims_project, victims_token, needs_proc,
                               peak_kib, read_json, report)


import ledgerd  # noqa: E402  (tests/ is on sys.path through conftest)

FOREIGN_TEXT = ("context_foreign: The Workspace's context file belongs to another Workspace; "
                "`begin` starts a fresh one.")
FOREIGN_NAME = re.compile(r"context\.json\.foreign-[0-9]{8}T[0-9]{6}Z\Z")
# Every tool but `context` (which reports it) and `begin` (which starts afresh).
REFUSING_CALLS = sample_calls("context", "begin")
BEGIN = ("begin", {"new_task": "Afresh"})
WRITES_NAMING_A_TASK = ("createSession", "createCheckpoint", "proposeDecision", "transitionTask")


def context_file(root):
    return root / ".memprove" / "context.json"


def task_ids_written(daemon, since):
    """The Task each write since the `since`-th request went to (by its body or path)."""
    found = []
    for entry in daemon.ops[since:]:
        if entry["op"] in WRITES_NAMING_A_TASK:
            body = entry.get("body") or {}
            found.append(body.get("task_id") or entry["path"].split("/")[3])
    return found


# =============================================================================
# Rule 14: a context file of another Workspace is never used
# =============================================================================

@pytest.fixture
def original(hserve, config, daemon, workspace):
    """The original project: a Task with a Session, a claim and a passed run; its server
    closed.  Returns begin's value."""
    server, begun = begun_server(hserve, config, "The original's work")
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun["session_id"], "pytest", 0)
    code, value = call_tool(server, "checkpoint", {"facts": [{"text": "The original's fact."}]})
    assert code == "ok", value
    assert server.close() == 0
    return begun


def copied(workspace, tmp_path):
    there = tmp_path / "a copy of the project"
    shutil.copytree(str(workspace), str(there), symlinks=True)
    return there


def moved(workspace, tmp_path):
    there = tmp_path / "the project, moved"
    os.rename(str(workspace), str(there))
    return there


@pytest.mark.parametrize("make", [copied, moved], ids=["copied", "moved"])
def test_rule14_a_context_of_another_root_is_foreign(hserve, config, daemon, workspace, tmp_path,
                                                     original, make):
    """A copied or moved project keeps the context file naming the original root: `context`
    reports `context_foreign`, every other tool but `begin` answers it before any daemon
    request and changes nothing, and `begin` moves the file aside and starts afresh; no
    write ever reaches the original's Task."""
    there = make(workspace, tmp_path)
    foreign = context_file(there).read_bytes()
    assert read_json(context_file(there))["workspace"]["root"] != server_path(there)
    server = hserve(config=config, timeout=5, cwd=there)
    server.initialize()
    since = len(daemon.ops)
    files = snapshot(there, workspace)

    code, value = call_tool(server, "context")
    assert code == "ok", value
    assert list(value)[:3] == ["task_id", "session_id", "context_error"], value
    assert value["context_error"] == "context_foreign", value
    assert (value["task_id"], value["session_id"], value["task"], value["session"]) == \
        (None, None, None, None), value
    assert value["workspace"]["root"] == server_path(there), value
    for tool, args in REFUSING_CALLS:
        code, text = call_tool(server, tool, args)
        assert (code, text[:len(FOREIGN_TEXT)]) == ("context_foreign", FOREIGN_TEXT), (tool, text)
    assert daemon.ops[since:] == [], [entry["op"] for entry in daemon.ops[since:]]
    assert snapshot(there, workspace) == files

    code, value = call_tool(server, "begin", {"new_task": "The copy's own work"})
    assert code == "ok", value
    assert FOREIGN_NAME.match(value["moved_aside"]), value
    assert (there / ".memprove" / value["moved_aside"]).read_bytes() == foreign
    context = read_json(context_file(there))
    assert context["workspace"]["root"] == server_path(there), context
    assert context["task"]["id"] == value["task_id"] != original["task_id"], context
    code, done = call_tool(server, "checkpoint", {"facts": [{"text": "The copy's fact."}]})
    assert code == "ok" and done["task_id"] == value["task_id"], done
    assert server.close() == 0
    written = task_ids_written(daemon, since)
    assert written and set(written) == {value["task_id"]}, written


def link_memprove(original_root, there, relative):
    there.mkdir()
    (there / ".git").mkdir()
    target = os.path.relpath(str(original_root / ".memprove"), str(there)) if relative else \
        str(original_root / ".memprove")
    os.symlink(target, str(there / ".memprove"))
    return ".memprove"


def link_context(original_root, there, relative):
    (there / ".memprove").mkdir(parents=True)
    (there / ".git").mkdir()
    target = os.path.relpath(str(context_file(original_root)), str(there / ".memprove")) \
        if relative else str(context_file(original_root))
    os.symlink(target, str(context_file(there)))
    return "context.json"


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
@pytest.mark.parametrize("make", [link_memprove, link_context], ids=[".memprove", "context.json"])
def test_rule14_a_linked_context_is_unreadable(hserve, config, daemon, workspace, tmp_path,
                                               original, make, relative):
    """A clone whose `.memprove` or `context.json` is a symbolic link to a sibling's: the
    link is never read (two Workspaces would share one context) nor written through.
    `context` reports `context_unreadable`; every tool, `begin` included, answers it with
    the hint naming the file, before any daemon request; the sibling's files stay as they
    are and no write reaches its Task."""
    clone = tmp_path / "clone"
    name = make(workspace, clone, relative)
    hint = "The file %s is a link." % name
    server = hserve(config=config, timeout=5, cwd=clone)
    server.initialize()
    since = len(daemon.ops)
    files = snapshot(workspace, clone)

    code, value = call_tool(server, "context")
    assert code == "ok", value
    assert value.get("context_error") == "context_unreadable", value
    assert value["task"] is None and value["session"] is None, value
    for tool, args in REFUSING_CALLS + [BEGIN]:
        code, text = call_tool(server, tool, args)
        assert code == "context_unreadable" and hint in text, (tool, text)
    assert daemon.ops[since:] == [], [entry["op"] for entry in daemon.ops[since:]]
    assert snapshot(workspace, clone) == files
    assert server.close() == 0


def test_rule14_a_memprove_the_server_creates_gets_a_gitignore(hserve, config, daemon, tmp_path):
    """§2: the server makes `.memprove/` on its first write, with a `.gitignore` holding `*`
    beside the context files, so that a context is never committed and cloned; the file
    is the user's afterwards (a later write leaves it as the user made it)."""
    project = tmp_path / "fresh project"
    (project / ".git").mkdir(parents=True)
    server = hserve(config=config, timeout=5, cwd=project)
    server.initialize()
    code, value = call_tool(server, "begin", {"new_task": "First write"})
    assert code == "ok", value
    directory = project / ".memprove"
    assert (directory / ".gitignore").read_bytes() == b"*\n"
    assert read_json(directory / "context.json")["task"]["id"] == value["task_id"]
    (directory / ".gitignore").write_bytes(b"# the user's own\n")
    code, value = call_tool(server, "begin", {"new_task": "Second write"})
    assert code == "ok", value
    assert (directory / ".gitignore").read_bytes() == b"# the user's own\n"
    assert server.close() == 0


def test_rule14_no_gitignore_in_a_memprove_it_did_not_create(hserve, config, daemon, workspace):
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, value = call_tool(server, "begin", {"new_task": "In the user's directory"})
    assert code == "ok", value
    assert not os.path.lexists(str(workspace / ".memprove" / ".gitignore"))
    assert server.close() == 0


# =============================================================================
# Rule 15: another user's .memprove/ is not a Workspace
# =============================================================================

@pytest.mark.parametrize("owner", ["third", "root", "victim"])
def test_rule15_another_users_memprove_above_a_project(local_users, start_server, planted, owner):
    """A shared directory without `.git` (here 01777, like /tmp) holds a `.memprove/` of
    another user (0777, so that a write would succeed) and the victim's project below it.
    The walk up passes over it: the project is its own Workspace, `context` warns
    `.memprove owned by another user`, and `begin` writes the victim's context in the
    project, nothing in the other user's directory.  One of root, or of the victim, is a
    Workspace as before."""
    users = local_users
    victim = users.victim
    shared = users.directory("shared", mode=0o1777)
    found = users.directory("shared/.memprove", mode=0o777,
                            owner={"third": users.third, "root": None, "victim": victim}[owner])
    project = users.directory("shared/project", owner=victim)
    daemon, env = victims_daemon(users, planted)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "context")
    assert code == "ok", value
    warned = ".memprove owned by another user" in value["config"]["warnings"]
    workspace = value["workspace"]
    if owner == "third":
        assert (workspace["root"], workspace["marked"], warned) == (str(project), False, True), value
    else:
        assert (workspace["root"], workspace["marked"], warned) == (str(shared), True, False), value
    code, value = call_tool(server, "begin", {"new_task": "The victim's work"})
    assert code == "ok", value
    assert server.close() == 0
    if owner == "third":
        assert os.listdir(str(found)) == []
        written = context_file(project)
        assert os.stat(str(written)).st_uid == victim.uid
        assert read_json(written)["workspace"]["root"] == str(project)
    else:
        assert read_json(found / "context.json")["task"]["id"] == value["task_id"]


def test_rule15_another_users_memprove_in_the_start_directory_itself(local_users, start_server,
                                                                     planted):
    """The server starts in the shared directory itself (no `.git`), so the Workspace is
    that directory, whose `.memprove/` is another user's (0777, holding their context):
    it is neither read nor written.  `context` reports `context_unreadable` with the hint,
    `begin` fails with it, and doctor's workspace check fails
    with a fix that names another folder, not the removal of theirs."""
    users = local_users
    victim = users.victim
    shared = users.directory("shared", mode=0o1777)
    theirs = users.directory("shared/.memprove", mode=0o777, owner=users.third)
    their_context = {"version": 1, "workspace": {"id": "w", "root": str(shared)},
                     "task": {"id": "their-task", "number": 7, "title": "Theirs"}, "session": None}
    (theirs / "context.json").write_text(json.dumps(their_context))
    users.third.own(theirs / "context.json")
    before = snapshot(theirs)
    daemon, env = victims_daemon(users, planted)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=shared,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "context")
    assert code == "ok", value
    assert (value["workspace"]["root"], value.get("context_error")) == \
        (str(shared), "context_unreadable"), value
    assert value["task"] is None, value                # their Task is not shown as ours
    # Refused with the context file, before any daemon request (as a link in .memprove/ is).
    code, text = call_tool(server, "begin", {"new_task": "The victim's work"})
    assert code == "context_unreadable" and "belongs to another user" in text, text
    status, checks, _ = doctor_as(users, victim, env, shared)
    assert (status, checks["workspace"]["code"]) == (1, "context_unreadable"), checks["workspace"]
    assert "--workspace" in checks["workspace"]["fix"], checks["workspace"]
    assert server.close() == 0
    assert snapshot(theirs) == before


# =============================================================================
# Rule 16: runs.jsonl is read a line at a time
# =============================================================================

def run_line(label, task_id, **fields):
    line = {"label": label, "id": "id-" + label, "task_id": task_id, "session_id": "s",
            "command": "make check", "exit_code": 0, "passed": True,
            "started_at": "2026-12-01T09:00:00Z", "finished_at": "2026-12-01T09:00:01Z"}
    line.update(fields)
    return json.dumps(line).encode("ascii") + b"\n"


@pytest.fixture
def with_a_run(hserve, config, daemon, workspace):
    """A begun server (MALLOC_PLAIN, so that VmHWM shows what it holds) and the one run
    of its Task recorded as `memprove run` does: (server, Task id, runs.jsonl)."""
    server = hserve(config=config, timeout=5, env=MALLOC_PLAIN)
    server.initialize()
    code, begun = call_tool(server, "begin", {"new_task": "Runs"})
    assert code == "ok", begun
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun["session_id"], "pytest", 0)
    return server, begun["task_id"], workspace / ".memprove" / "runs.jsonl"


def append_filler(path, unit, total):
    """Append `unit` repeated up to `total` bytes, written a MiB at a time."""
    block = unit * max(1, (1 << 20) // len(unit))
    with open(str(path), "ab") as handle:
        written = 0
        while written < total:
            handle.write(block)
            written += len(block)
    return written


def timed_labels(server, timeout=SAFETY_TIMEOUT):
    """The labels `context` lists and how long the call took (a figure, never asserted;
    the harness's safety timeout is the only limit)."""
    started = time.monotonic()
    code, value = call_tool(server, "context", timeout=timeout)
    seconds = time.monotonic() - started
    assert code == "ok", value
    return [run["label"] for run in value["runs"]], seconds


FILLER_BYTES = 64 << 20


def test_rule16_a_file_of_newlines_reads_as_fast_as_valid_lines(with_a_run):
    """64 MiB of newlines between two runs of the Task (the review measured 16 MiB taking
    180 s, ~10 µs a blank line): the call answers within the harness's safety timeout and
    lists both runs.  The same size of valid lines of another Task is timed too: both
    figures are reported, neither asserted."""
    server, task_id, path = with_a_run
    append_filler(path, b"\n", FILLER_BYTES)
    with open(str(path), "ab") as handle:
        handle.write(run_line("r900", task_id, finished_at="2026-12-01T09:00:00Z"))
    labels, newline_seconds = timed_labels(server)
    assert sorted(labels) == ["r1", "r900"], labels
    path.write_bytes(path.read_bytes().split(b"\n", 1)[0] + b"\n")
    append_filler(path, run_line("r2", "another task"), FILLER_BYTES)
    labels, valid_seconds = timed_labels(server)
    assert labels == ["r1"], labels
    assert server.close() == 0
    report("runs_newlines", bytes=FILLER_BYTES, seconds_newlines=round(newline_seconds, 2),
           seconds_valid_lines=round(valid_seconds, 2))


def test_rule16_memory_stays_bounded_reading_valid_lines(with_a_run):
    """~96 MiB of valid lines of another Task (the review measured a peak of 784 MiB in one
    call): the server's peak memory (VmHWM) stays within its size after a call on a small
    file plus a third of the file (a whole-file read alone would pass that)."""
    needs_proc()
    server, task_id, path = with_a_run
    assert timed_labels(server)[0] == ["r1"]
    idle_kib = peak_kib(server.proc.pid)
    size = append_filler(path, run_line("r2", "another task", command="make check " + "x" * 150),
                         96 << 20)
    labels, seconds = timed_labels(server)
    assert labels == ["r1"], labels
    final_kib = peak_kib(server.proc.pid)
    assert server.close() == 0
    bound_kib = idle_kib + (size // 3) // 1024
    report("runs_memory", bytes=size, idle_hwm_kib=idle_kib, peak_hwm_kib=final_kib,
           bound_kib=bound_kib, seconds=round(seconds, 2))
    assert final_kib <= bound_kib, (
        "reading %d bytes of runs.jsonl took the peak from %d KiB to %d KiB"
        % (size, idle_kib, final_kib))


@pytest.mark.parametrize("size", [70000, 1 << 20, 16 << 20], ids=["70kB", "1MiB", "16MiB"])
@pytest.mark.parametrize("ending", ["newline", "at-the-end"])
def test_rule16_a_line_over_64_kib_is_skipped_and_the_next_ones_read(with_a_run, size, ending):
    """A line over 64 KiB is skipped unread, however valid: its run is not listed and cannot
    be cited; the lines after it are read (or, at the end of the file, those before it)."""
    server, task_id, path = with_a_run
    long_line = run_line("r50", task_id, command="x" * size)
    with open(str(path), "ab") as handle:
        if ending == "newline":
            handle.write(long_line + run_line("r51", task_id, command="after"))
        else:
            handle.write(run_line("r51", task_id, command="before") + long_line.rstrip(b"\n"))
    labels, _ = timed_labels(server)
    assert sorted(labels) == ["r1", "r51"], labels
    code, text = call_tool(server, "checkpoint", {"facts": [{"text": "A fact.", "runs": ["r50"]}]})
    assert code == "run_label_unknown" and "r50" in text, text
    assert server.close() == 0


# =============================================================================
# Rule 17: the token goes to the daemon's owner only
# =============================================================================

REFUSED_HINT = "Another user listens on that port."


def test_rule17_a_dead_daemons_port_taken_by_another_user(local_users, start_server, planted):
    """The victim's daemon dies (killed: its daemon.json stays) and another user listens on
    its port.  `tasks` answers `daemon_address_refused` (hint: another user listens there)
    and doctor's `daemon` check fails (exit 1): neither sends the listener a byte."""
    users = local_users
    victim = users.victim
    daemon, env = victims_daemon(users, planted)
    project = victims_project(users)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "tasks")
    assert code == "ok", value                     # the victim's own daemon gets the token
    daemon.crash()
    listener = UserListener(users, users.other, port=daemon.port)
    try:
        code, text = call_tool(server, "tasks")
        status, checks, output = doctor_as(users, victim, env, project)
    finally:
        received = listener.stop()
    assert code == "daemon_address_refused" and REFUSED_HINT in text, text
    assert (status, checks["daemon"]["status"], checks["daemon"]["code"]) == \
        (1, "fail", "daemon_address_refused"), checks["daemon"]
    assert all(data == b"" for data in received), "the listener received %r" % received
    assert server.close() == 0
    for secret in planted:
        assert secret.encode() not in output


def loopback_or_skip(host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.bind((host, 0))
    except OSError:
        pytest.skip("%s cannot be bound here" % host)
    finally:
        probe.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
@pytest.mark.parametrize("owner", ["victim", "other", "root"])
def test_rule17_only_the_owner_of_daemon_json_gets_the_token(local_users, start_server, planted,
                                                            host, owner):
    """daemon.json (the victim's) names a loopback port whose listener is the victim's, another
    user's, or root's.  Only the victim's own listener gets the token (the control that
    the listener sees what is sent); any other owner, root included, gets nothing, and the
    call answers `daemon_address_refused` with the hint."""
    users = local_users
    victim = users.victim
    bind = "::1" if host == "::1" else "127.0.0.1"
    loopback_or_skip(bind)
    data, token, env = victims_token(users, planted)
    project = victims_project(users)
    listener = UserListener(users, {"victim": victim, "other": users.other, "root": None}[owner],
                            host=bind)
    url = "http://%s:%d" % ("[::1]" if host == "::1" else host, listener.port)
    (data / "daemon.json").write_text(json.dumps({"url": url, "pid": 4242}))
    victim.own(data / "daemon.json")
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    try:
        code, text = call_tool(server, "tasks")
    finally:
        received = listener.stop()
    assert server.close() == 0
    sent = b"".join(received)
    if owner == "victim":
        assert ("Authorization: Bearer " + token).encode() in sent, received
    else:
        assert code == "daemon_address_refused" and REFUSED_HINT in text, text
        assert sent == b"", "another owner's listener received %r" % received


# -- rule 17's two ways of asking who owns a socket --------------------------------
# The server asks sock_diag first and reads /proc/net/tcp(6) where that is refused:
# both are asked here of one real connection, so the fallback is held to the same
# answer on a machine whose kernel answers sock_diag.

import memprove_mcp as mp  # noqa: E402


@pytest.fixture(params=["127.0.0.1", "::1"])
def connection(request):
    """(the connection's far end as the server sees it, its near end) on loopback."""
    if not mp.PLATFORMS[mp.PLATFORM]["socket_tables"]:
        pytest.skip("this platform lists no socket owners (PLATFORMS' socket_tables)")
    loopback_or_skip(request.param)
    family = socket.AF_INET6 if ":" in request.param else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((request.param, 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        try:
            yield family, client.getpeername()[:2], client.getsockname()[:2]
        finally:
            accepted.close()
            client.close()


def test_rule17_sock_diag_and_the_proc_tables_name_the_same_owner(connection):
    family, near, far = connection
    try:
        diagnosed = mp.diagnosed_owner(family, near, far, time.monotonic() + SAFETY_TIMEOUT)
    except (OSError, ValueError) as error:
        diagnosed = error                   # refused here: the tables alone are checked
    listed = mp.tables_owner(mp.PLATFORMS[mp.PLATFORM]["socket_tables"], near, far)
    assert listed == os.geteuid(), listed
    assert diagnosed == os.geteuid() or isinstance(diagnosed, Exception), diagnosed
    # A connection that is not there is no one's, in either.
    gone = (near[0], far[1])
    assert mp.tables_owner(mp.PLATFORMS[mp.PLATFORM]["socket_tables"], gone, far) is None


@pytest.mark.parametrize("offset", [0, 65536 - 40, 65536 - 5, 65536, 3 * 65536 + 17])
def test_rule17_a_row_across_a_read_boundary_is_found(tmp_path, offset):
    """table_owner reads 64 KiB at a time: the row it looks for may start, or be cut,
    anywhere, and the uid after it may lie in the next read."""
    header = b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    row = b"   7: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  4321 0 99\n"
    filler = b"   1: 00000000:0000 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1 0 1\n"
    # Whole lines before the row, as many as start it at or just before `offset`.
    before = header + filler * max(0, (offset - len(header)) // len(filler))
    table = tmp_path / "tcp"
    table.write_bytes(before + row + filler * 3)
    assert mp.table_owner(str(table), " 0100007F:1F90 0100007F:C350 ") == 4321
    assert mp.table_owner(str(table), " 0100007F:1F91 0100007F:C350 ") is None


def test_rule17_a_connection_reset_before_it_is_asked_about_is_an_oserror(connection):
    """The daemon's end reset (SO_LINGER 0) before the server asks who owns it: the
    question raises OSError, which the daemon client reads as a lost answer (nothing
    was sent yet), never another exception that would be internal_error."""
    import select
    import struct
    family, near, far = connection
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((host, 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        accepted.close()
        try:
            assert select.select([client], [], [], SAFETY_TIMEOUT)[0]     # the reset is here
            with pytest.raises(OSError):
                client.recv(1)                                          # ECONNRESET
            with pytest.raises(OSError):
                mp.peer_owner(client, time.monotonic() + SAFETY_TIMEOUT)
        finally:
            client.close()

