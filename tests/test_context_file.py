"""The Workspace's files under stress (issue 5, item 5), against the built .pyz.

`context.json` corrupt, binary, empty, huge, a directory, unreadable, a symlink of
every sort, JSON of the wrong shape; `runs.jsonl` with torn, garbage and wrongly typed
lines, a directory, unreadable, huge; `.memprove/` read-only or a plain file.  Each
gives contract.md §2's answer (`context` reports `context_unreadable`, `begin` moves
the file aside and starts afresh, every other tool answers `context_unreadable` and
leaves the file as it is; torn run lines are skipped) or a clear Problem, never an
internal_error (MEMPROVE_MCP_LOG stays empty), never a hang, and never a truncated or
temporary file left behind.  Two servers writing and reading the context at once
never see a torn file, and a server killed mid-write leaves a whole one.

Unreadable files and read-only directories need permission checks: as root the
server runs without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (a prctl wrapper), so
the checks apply to it as to any user.
"""

import json
import os
import signal
import stat
import sys
import time

import pytest

from harness import SAFETY_TIMEOUT, TOOL_SAMPLES, sample_calls, snapshot
from hardening_support import (begun_server, outcome_of, read_json, report, skip_or_fail)


import ledgerd  # noqa: E402

# Every tool but `context` (which reports the file) and `begin` (which moves it aside).
UNREADABLE_FOR_CALLS = sample_calls("context", "begin")
TEMPORARY_PREFIX = ".context."

NO_DAC = """\
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for cap in (1, 2):          # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH out of the bounding set
    if libc.prctl(24, cap, 0, 0, 0) != 0:
        sys.stderr.write("prctl(PR_CAPBSET_DROP) failed: errno " + str(ctypes.get_errno()) + "\\n")
        sys.exit(3)
os.execv(PYTHON, [PYTHON] + sys.argv[1:])
"""


@pytest.fixture
def permission_python(tmp_path):
    """An interpreter for which file permissions hold: sys.executable for a plain
    user; for root, a wrapper that drops the capabilities that bypass them."""
    if os.geteuid() != 0:
        return sys.executable
    if not sys.platform.startswith("linux"):
        skip_or_fail("root without Linux capabilities: permission checks cannot apply")
    wrapper = tmp_path / "python-no-dac"
    wrapper.write_text("#!%s\nPYTHON = %r\n%s" % (sys.executable, sys.executable, NO_DAC))
    os.chmod(str(wrapper), 0o755)
    probe = tmp_path / "probe"
    probe.write_text("x")
    os.chmod(str(probe), 0)
    import subprocess
    done = subprocess.run([str(wrapper), "-c", "open(%r).read()" % str(probe)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    if done.returncode == 0:
        skip_or_fail("cannot drop CAP_DAC_OVERRIDE here: permission checks do not apply")
    return str(wrapper)


def call(server, tool, args=None, era="legacy", timeout=SAFETY_TIMEOUT):
    request_id = server.new_id()
    params = server.call_params(tool, TOOL_SAMPLES[tool][0] if args is None else args, era=era)
    server.send(server.request_message("tools/call", params, id=request_id))
    return outcome_of(server.response(request_id, timeout=timeout), era)


def memprove_dir(workspace):
    return workspace / ".memprove"


def leftovers(workspace):
    """Temporary files the server's atomic writes left in .memprove/."""
    return [p.name for p in memprove_dir(workspace).iterdir() if p.name.startswith(TEMPORARY_PREFIX)]


def assert_sound_context(workspace):
    context = read_json(memprove_dir(workspace) / "context.json")
    assert context["version"] == 1 and isinstance(context["task"]["id"], str), context
    assert isinstance(context["session"]["number"], int), context
    return context


def seed(hserve, config, daemon, workspace, python=None):
    """A server with a Task, a Session, a claim and a passed run; the valid context."""
    server, begun = begun_server(hserve, config, "Stress", python)
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun["session_id"], "pytest", 0)
    assert call(server, "checkpoint")[0] == "ok"
    valid = (memprove_dir(workspace) / "context.json").read_bytes()
    return server, valid


@pytest.fixture
def seeded(hserve, config, daemon, workspace):
    """A server with a Task, a Session, a claim and a passed run; the valid context."""
    return seed(hserve, config, daemon, workspace)


# =============================================================================
# context.json
# =============================================================================

def _deep(valid):
    return b'{"version": 1, "task": ' + b"[" * 100000 + b"]" * 100000 + b"}"


def _huge_garbage(valid):
    return os.urandom(1024) * (20 * 1024)


def _huge_valid(valid):
    # Valid JSON of version 1 past the server's 1 MiB cap on what it parses.
    context = json.loads(valid.decode())
    context["padding"] = "p" * (2 * 1024 * 1024)
    return json.dumps(context).encode()


REGULAR_UNREADABLE = {
    "corrupt": lambda valid: b"{not json",
    "binary": lambda valid: bytes(range(256)) * 64,
    "empty": lambda valid: b"",
    "whitespace": lambda valid: b" \n\t\n",
    "truncated": lambda valid: valid[:len(valid) // 2],
    "huge-garbage": _huge_garbage,
    "huge-valid-past-cap": _huge_valid,
    "version-2": lambda valid: valid.replace(b'"version": 1', b'"version": 2'),
    "version-true": lambda valid: valid.replace(b'"version": 1', b'"version": true'),
    "version-1.5": lambda valid: valid.replace(b'"version": 1', b'"version": 1.5'),
    "version-string": lambda valid: valid.replace(b'"version": 1', b'"version": "1"'),
    "array": lambda valid: b"[" + valid + b"]",
    "null": lambda valid: b"null",
    "string": lambda valid: b'"context"',
    "nan": lambda valid: valid.replace(b'"version": 1', b'"version": 1, "x": NaN'),
    "deep": _deep,
    "invalid-utf8": lambda valid: valid.replace(b'"version"', b'"v\xff\xfeersion"'),
    "bom": lambda valid: b"\xef\xbb\xbf" + valid,
    "nul": lambda valid: valid[:10] + b"\x00" + valid[10:],
    "task-id-number": lambda valid: json.dumps(dict(json.loads(valid), task={"id": 5, "number": 1})).encode(),
    "task-number-bool": lambda valid: json.dumps(dict(json.loads(valid), task={"id": "x", "number": True})).encode(),
    "task-list": lambda valid: json.dumps(dict(json.loads(valid), task=[1])).encode(),
    "session-parent-string": lambda valid: json.dumps(dict(json.loads(valid), session=dict(
        json.loads(valid)["session"], parent="s1"))).encode(),
    "session-agent-list": lambda valid: json.dumps(dict(json.loads(valid), session=dict(
        json.loads(valid)["session"], agent=["x"]))).encode(),
}


def _make_directory(path, valid, tmp_path):
    path.mkdir()
    (path / "inside").write_bytes(valid)


def _make_unreadable(path, valid, tmp_path):
    path.write_bytes(valid)
    os.chmod(str(path), 0)


def _make_loop(path, valid, tmp_path):
    os.symlink(path.name, str(path))


def _make_link_to_dir(path, valid, tmp_path):
    os.symlink(str(tmp_path), str(path))


def _make_link_to_dev_zero(path, valid, tmp_path):
    os.symlink("/dev/zero", str(path))


def _make_link_to_garbage(path, valid, tmp_path):
    target = tmp_path / "garbage-outside.json"
    target.write_bytes(b"{garbage")
    os.symlink(str(target), str(path))


def _make_dangling_link(path, valid, tmp_path):
    os.symlink("nowhere/context.json", str(path))


def _make_link_to_valid_outside(path, valid, tmp_path):
    target = tmp_path / "outside-context.json"
    target.write_bytes(valid)
    os.symlink(str(target), str(path))


SPECIAL_UNREADABLE = {
    "directory": _make_directory,
    "unreadable": _make_unreadable,
}

# contract.md §6 rule 14: a context.json that is a symbolic link, whatever it points at, is
# context_unreadable for reading too (a link can make two Workspaces share one context),
# the hint naming the file, found before any daemon request: `begin` too refuses it.
LINKED_CONTEXTS = {
    "symlink-loop": _make_loop,
    "symlink-to-directory": _make_link_to_dir,
    "symlink-to-dev-zero": _make_link_to_dev_zero,
    "symlink-to-garbage": _make_link_to_garbage,
    "symlink-dangling": _make_dangling_link,
    "symlink-to-a-valid-context-outside": _make_link_to_valid_outside,
}


def _entry_fingerprint(path):
    """What the moved-aside entry must still be: its type and content."""
    info = os.lstat(str(path))
    if stat.S_ISLNK(info.st_mode):
        return ("link", os.readlink(str(path)))
    if stat.S_ISDIR(info.st_mode):
        return ("dir", sorted(os.listdir(str(path))))
    os.chmod(str(path), 0o600)
    try:
        with open(str(path), "rb") as handle:
            data = handle.read()
    finally:
        os.chmod(str(path), stat.S_IMODE(info.st_mode))
    return ("file", data)


@pytest.fixture
def stressed(hserve, config, daemon, workspace, permission_python):
    """Like `seeded`, with the server under permission_python."""
    return seed(hserve, config, daemon, workspace, permission_python)


@pytest.mark.parametrize("case", sorted(REGULAR_UNREADABLE) + sorted(SPECIAL_UNREADABLE))
def test_unreadable_context(stressed, case, workspace, tmp_path, daemon):
    server, valid = stressed
    path = memprove_dir(workspace) / "context.json"
    path.unlink()
    if case in REGULAR_UNREADABLE:
        path.write_bytes(REGULAR_UNREADABLE[case](valid))
    else:
        SPECIAL_UNREADABLE[case](path, valid, tmp_path)
    before = _entry_fingerprint(path)
    files = snapshot(memprove_dir(workspace))
    # `context` reports it, right after session_id.
    code, value = call(server, "context", {})
    assert code == "ok", value
    assert list(value)[:3] == ["task_id", "session_id", "context_error"], value
    assert value["context_error"] == "context_unreadable" and value["task"] is None
    # Every other tool: context_unreadable, and nothing is sent or written.
    ops = len(daemon.ops)
    for tool, args in UNREADABLE_FOR_CALLS:
        code, text = call(server, tool, args)
        assert code == "context_unreadable", (tool, text)
    assert len(daemon.ops) == ops
    assert snapshot(memprove_dir(workspace)) == files
    # `begin` moves it aside, unchanged, and starts afresh.
    code, value = call(server, "begin", {"new_task": "Afresh"})
    assert code == "ok", value
    moved = memprove_dir(workspace) / value["moved_aside"]
    assert value["moved_aside"].startswith("context.json.corrupt-") and len(value["moved_aside"]) == len(
        "context.json.corrupt-YYYYMMDDTHHMMSSZ")
    assert _entry_fingerprint(moved) == before
    context = assert_sound_context(workspace)
    assert context["task"]["id"] == value["task_id"] and context["session"]["id"] == value["session_id"]
    assert leftovers(workspace) == []
    code, value = call(server, "context", {})
    assert code == "ok" and "context_error" not in value and value["task"]["title"] == "Afresh"
    assert call(server, "checkpoint")[0] == "ok"
    assert server.close() == 0


@pytest.mark.parametrize("case", sorted(LINKED_CONTEXTS))
def test_linked_context_is_unreadable_and_never_followed(seeded, case, workspace, tmp_path, daemon):
    server, valid = seeded
    path = memprove_dir(workspace) / "context.json"
    path.unlink()
    LINKED_CONTEXTS[case](path, valid, tmp_path)
    before = snapshot(memprove_dir(workspace), tmp_path / "outside-context.json",
                      tmp_path / "garbage-outside.json")
    code, value = call(server, "context", {})
    assert code == "ok", value
    assert list(value)[:3] == ["task_id", "session_id", "context_error"], value
    assert value["context_error"] == "context_unreadable" and value["task"] is None
    ops = len(daemon.ops)
    for tool, args in UNREADABLE_FOR_CALLS + [("begin", {"new_task": "Through a link"})]:
        code, text = call(server, tool, args)
        assert code == "context_unreadable" and "The file context.json is a link." in text, (tool, text)
    assert len(daemon.ops) == ops
    assert snapshot(memprove_dir(workspace), tmp_path / "outside-context.json",
                    tmp_path / "garbage-outside.json") == before
    assert leftovers(workspace) == []
    assert server.close() == 0


def test_moving_aside_never_overwrites_an_earlier_copy(seeded, workspace):
    server, valid = seeded
    directory = memprove_dir(workspace)
    now = time.time()
    earlier = {}
    for offset in range(-2, 30):            # every stamp this test can meet
        name = "context.json.corrupt-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + offset))
        earlier[name] = ("EARLIER COPY %d\n" % offset).encode()
        (directory / name).write_bytes(earlier[name])
    (directory / "context.json").write_bytes(b"{corrupt")
    code, value = call(server, "begin", {"new_task": "Collision"})
    assert code == "ok", value
    server.close()
    for name, data in earlier.items():
        assert (directory / name).read_bytes() == data, "%s was overwritten" % name
    assert b"{corrupt" in [(directory / value["moved_aside"]).read_bytes()]


# =============================================================================
# runs.jsonl
# =============================================================================

def _run_line(run, **changes):
    line = dict((k, run[k]) for k in ("label", "id", "task_id", "session_id", "command",
                                      "exit_code", "passed", "started_at", "finished_at"))
    line.update(changes)
    return json.dumps(line).encode()


GARBAGE_LINES = [
    b"", b"   ", b"\x00\x01\x02", b"\xff\xfe not utf-8", b"[1, 2, 3]", b'"a string"', b"null",
    b"42", b'{"label": 7, "task_id": "x"}', b'{"no_label": true}', b'{"label": "r5", "passed": NaN}',
    b'{"label": "r6", "passed": true' , b"[" * 100000, b"\xef\xbb\xbf{}", b'{"label": "r9"}',
    b'{"label": ["r1"]}', b'{"label": "r10", "finished_at": Infinity}',
]


def test_runs_file_with_torn_and_garbage_lines(seeded, workspace, daemon, config):
    server, valid = seeded
    context = read_json(memprove_dir(workspace) / "context.json")
    runs_path = memprove_dir(workspace) / "runs.jsonl"
    good = [json.loads(line) for line in runs_path.read_bytes().splitlines()]
    failing = ledgerd.memprove_run(daemon.url, config.token, str(workspace),
                                   context["session"]["id"], "pytest -k other", 1)
    data = runs_path.read_bytes()
    lines = data.splitlines()
    mixed = GARBAGE_LINES[:8] + lines[:1] + GARBAGE_LINES[8:] + lines[1:] + [b'{"label": "r77", "id":']
    runs_path.write_bytes(b"\n".join(mixed))          # the last line torn, no newline
    code, value = call(server, "context", {})
    assert code == "ok", value
    assert [run["label"] for run in value["runs"]] == sorted(
        [failing["label"], good[0]["label"]], key=lambda label: label != failing["label"])
    # The failing run is the latest of its command: complete is refused, naming it.
    code, text = call(server, "complete", {})
    assert code == "runs_failing" and failing["label"] in text, text
    # Labels only a garbage line names are unknown; good ones can be cited.
    assert call(server, "checkpoint", {"facts": [{"text": "x", "runs": ["r9"]}]})[0] == "run_label_unknown"
    assert call(server, "checkpoint", {"facts": [{"text": "x", "runs": [good[0]["label"]]}]})[0] == "ok"
    # `memprove run` appends after the torn line: mend it first, as the next run would.
    runs_path.write_bytes(b"\n".join(mixed[:-1]) + b"\n")
    # With a CRLF file and a passing rerun, complete succeeds.
    rerun = ledgerd.memprove_run(daemon.url, config.token, str(workspace), context["session"]["id"],
                                 "pytest -k other", 0)
    runs_path.write_bytes(runs_path.read_bytes().replace(b"\n", b"\r\n"))
    code, value = call(server, "complete", {})
    assert code == "ok", value
    assert sorted(value["evidence"]) == sorted([good[0]["label"], rerun["label"]])
    assert server.close() == 0


@pytest.mark.parametrize("bad_id", [["x"], {"x": 1}], ids=["list", "object"])
def test_runs_line_with_a_wrongly_typed_id(seeded, workspace, bad_id):
    server, valid = seeded
    runs_path = memprove_dir(workspace) / "runs.jsonl"
    run = json.loads(runs_path.read_bytes().splitlines()[0])
    with open(str(runs_path), "ab") as handle:
        handle.write(_run_line(run, label="r50", id=bad_id, command="another command") + b"\n")
    code, text = call(server, "complete", {})
    assert code != "internal_error", text


@pytest.mark.parametrize("field, value", [
    ("task_id", ["x"]), ("command", {"a": 1}), ("command", None), ("passed", "yes"),
    ("finished_at", 5), ("finished_at", None), ("exit_code", "zero"), ("session_id", 3),
    ("label", "not-a-label"), ("id", 7), ("id", None),
])
def test_runs_lines_with_wrong_types_never_crash(seeded, workspace, field, value):
    server, valid = seeded
    runs_path = memprove_dir(workspace) / "runs.jsonl"
    run = json.loads(runs_path.read_bytes().splitlines()[0])
    with open(str(runs_path), "ab") as handle:
        handle.write(_run_line(run, **{field: value, "label": run["label"] if field != "label"
                                       else value}) + b"\n")
    for tool, args in (("context", {}), ("checkpoint", {"facts": [{"text": "x", "runs": ["r1"]}]}),
                       ("complete", {})):
        code, text = call(server, tool, args)
        assert code != "internal_error", (tool, text)
    assert server.close() == 0


def test_runs_file_a_directory_or_unreadable(stressed, workspace):
    server, valid = stressed
    runs_path = memprove_dir(workspace) / "runs.jsonl"
    for make in ("directory", "unreadable"):
        if runs_path.is_dir():
            runs_path.rmdir()
        elif runs_path.exists():
            os.chmod(str(runs_path), 0o600)
            runs_path.unlink()
        if make == "directory":
            runs_path.mkdir()
        else:
            runs_path.write_bytes(b'{"label": "r1"}\n')
            os.chmod(str(runs_path), 0)
        code, value = call(server, "context", {})
        assert code == "ok" and value["runs"] == [], value
        assert call(server, "complete", {})[0] == "no_passed_runs"
        assert call(server, "checkpoint", {"facts": [{"text": "x", "runs": ["r1"]}]})[0] == \
            "run_label_unknown"
    assert server.close() == 0


def test_huge_runs_file(seeded, workspace):
    server, valid = seeded
    runs_path = memprove_dir(workspace) / "runs.jsonl"
    run = json.loads(runs_path.read_bytes().splitlines()[0])
    other = [_run_line(run, label="r%d" % (n + 100), id="other-%d" % n, task_id="another-task")
             for n in range(100000)]
    with open(str(runs_path), "ab") as handle:
        handle.write(b"\n".join(other) + b"\n")
    size = runs_path.stat().st_size
    started = time.monotonic()
    code, value = call(server, "context", {})
    assert code == "ok" and [r["label"] for r in value["runs"]] == [run["label"]], value
    assert call(server, "complete", {})[0] == "ok"
    seconds = time.monotonic() - started
    assert server.close() == 0
    report("huge_runs_file", bytes=size, lines=len(other) + 1, seconds_for_two_calls=round(seconds, 2))


# =============================================================================
# .memprove/ read-only, or not a directory
# =============================================================================

@pytest.mark.parametrize("lock_exists", [True, False], ids=["lock-present", "lock-absent"])
def test_read_only_context_directory(stressed, workspace, lock_exists):
    server, valid = stressed
    directory = memprove_dir(workspace)
    if not lock_exists:
        (directory / "context.lock").unlink()
    os.chmod(str(directory), 0o555)
    try:
        files = snapshot(directory)
        for tool in ("context", "tasks", "pack", "checkpoint", "decide", "claims", "ledger_verify"):
            code, value = call(server, tool)
            assert code == "ok", (tool, value)
        code, text = call(server, "begin", {"new_task": "Read-only"})
        assert code == "internal_error", text
        assert "could not be written" in text and "Task" in text and "Session" in text, text
        code, text = call(server, "end", {})
        assert code == "internal_error" and "was ended" in text, text
        assert snapshot(directory) == files
        assert leftovers(workspace) == []
    finally:
        os.chmod(str(directory), 0o755)
    assert (directory / "context.json").read_bytes() == valid
    assert server.close() == 0


def test_context_directory_is_a_file(hserve, config, daemon, workspace):
    directory = memprove_dir(workspace)
    directory.rmdir()
    directory.write_bytes(b"not a directory")
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, value = call(server, "context", {})
    assert code == "ok", value
    assert value["workspace"]["marked"] is False
    assert value.get("context_error") == "context_unreadable", value
    assert call(server, "tasks", {})[0] == "context_unreadable"
    # contract.md §6 rule 6: found with the context file, before any daemon request,
    # and begin cannot start afresh from it.
    before = len(daemon.ops)
    code, text = call(server, "begin", {"new_task": "No directory"})
    assert code == "context_unreadable" and ".memprove is not a directory" in text, text
    assert len(daemon.ops) == before
    assert directory.read_bytes() == b"not a directory"
    assert server.close() == 0


# =============================================================================
# FIFOs: a read that never returns
# =============================================================================

@pytest.mark.parametrize("which", ["context.json", "runs.jsonl", "token"])
def test_fifo_instead_of_a_file(seeded, workspace, config, which):
    server, valid = seeded
    path = {"context.json": memprove_dir(workspace) / "context.json",
            "runs.jsonl": memprove_dir(workspace) / "runs.jsonl",
            "token": config.token_file}[which]
    path.unlink()
    os.mkfifo(str(path))
    tool = {"context.json": "context", "runs.jsonl": "complete", "token": "tasks"}[which]
    try:
        code, text = call(server, tool, {}, timeout=5)
        assert code != "internal_error", text
    finally:
        # Unblock the server: open the FIFO for writing, then close it (end of file).
        for _ in range(3):
            try:
                os.close(os.open(str(path), os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    server.close(check=False)


# =============================================================================
# Atomic writes: never a torn file, even when killed
# =============================================================================

def test_concurrent_writer_and_reader_never_see_a_torn_context(hserve, config, daemon, workspace):
    writer = hserve(config=config, timeout=5)
    reader = hserve(config=config, timeout=5)
    writer.initialize()
    reader.initialize()
    assert call(writer, "begin", {"new_task": "Writer"})[0] == "ok"
    writes, reads = 40, 0
    for n in range(writes):
        # A burst of reads in flight while each write runs.
        for m in range(10):
            reader.send(reader.request_message("tools/call", reader.call_params("context", {}),
                                               id="r%d.%d" % (n, m)))
        code, value = call(writer, "begin" if n % 2 == 0 else "end", {})
        assert code == "ok", value
        for m in range(10):
            code, value = outcome_of(reader.response("r%d.%d" % (n, m)))
            assert code == "ok" and "context_error" not in value, value
            reads += 1
    assert_sound_context(workspace)
    assert leftovers(workspace) == []
    assert writer.close() == 0 and reader.close() == 0
    report("context_concurrent_reads", writes=writes, reads=reads, torn_reads=0)


def test_killed_mid_write_leaves_a_whole_context(hserve, config, daemon, workspace):
    kills, temporaries = 0, 0
    for round_number in range(8):
        server = hserve(config=config, timeout=5)
        server.initialize()
        for n in range(20):
            server.send(server.request_message(
                "tools/call", server.call_params("begin", {"new_task": "Kill %d.%d" % (round_number, n)}),
                id="b%d" % n))
        for n in range(round_number + 1):
            assert outcome_of(server.response("b%d" % n))[0] == "ok"
        server.proc.send_signal(signal.SIGKILL)
        server.wait()
        server.check(count=False)
        kills += 1
        assert_sound_context(workspace)
        temporaries += len(leftovers(workspace))
    # What a killed writer left, the next write removes; nothing else goes.
    (memprove_dir(workspace) / (TEMPORARY_PREFIX + "planted.tmp")).write_bytes(b"{")
    (memprove_dir(workspace) / "notes.tmp").write_bytes(b"mine")
    server = hserve(config=config, timeout=5)
    server.initialize()
    assert call(server, "begin", {"new_task": "After the kills"})[0] == "ok"
    assert server.close() == 0
    assert leftovers(workspace) == []
    assert (memprove_dir(workspace) / "notes.tmp").read_bytes() == b"mine"
    assert_sound_context(workspace)
    report("context_killed_mid_write", kills=kills, whole_context_after_each=True,
           temporary_files_left_by_kills=temporaries, temporary_files_left_after_next_write=0)
