"""The context files (memprove_mcp.py section 9) under stress (issue 5, item 5), against
the built .pyz.

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

Also contract.md §6's rules on the context file: links in `.memprove/` are not followed
(rule 6), a context of another Workspace is foreign (rule 14, fuzzed with hostile `.memprove/`
trees), a context naming no root is foreign (rule 20), a rewrite keeps the file's mode
(rule 12).
"""

import json
import os
import re
import shutil
import signal
import stat
import sys
import time
from collections import Counter

import pytest

from hardening_support import (FUZZ_EXAMPLES, NO_SHRINK, THIRD_UID, begun_server, call_tool,
                               context_path, hypothesis_or_fail, outcome_of, read_json, report,
                               skip_or_fail, wrapper)
from harness import (SAFETY_TIMEOUT, TOOL_SAMPLES, make_workspace, sample_calls, server_path,
                     snapshot)
import ledgerd  # noqa: E402  (tests/ is on sys.path through conftest)

hypothesis_or_fail()
from hypothesis import given, settings, strategies as st  # noqa: E402

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
    if not hasattr(os, "geteuid") or os.geteuid() != 0:      # Windows: no uids, no root
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
        server.proc.kill()      # SIGKILL; on Windows TerminateProcess
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


# -- hostile .memprove/ trees (contract.md §6 rules 6, 14 and 15) ----------------------

TREE_CALLS = sample_calls()


class TreeWorld:
    """A sibling project with a real Task and Session, and a server whose
    CLAUDE_PROJECT_DIR is a link the test points at a new project tree for each case."""

    def __init__(self, hserve, config, daemon, tmp_path):
        self.daemon, self.tmp_path = daemon, tmp_path
        self.sibling = make_workspace(tmp_path / "sibling")
        server = hserve(config=config, timeout=5, cwd=self.sibling)
        server.initialize()
        code, begun = outcome_of(server.call("begin", {"new_task": "The sibling's work"}))
        assert code == "ok", begun
        assert server.close() == 0
        self.secrets = (begun["task_id"], begun["session_id"])
        self.link = tmp_path / "project-link"
        self.link.symlink_to(self.sibling)
        self.server = hserve(config=config, timeout=5, env={"CLAUDE_PROJECT_DIR": str(self.link)})
        self.server.initialize()
        self.serial = 0

    def build(self, layout, memprove, context, lock):
        """A new project tree; returns (project, the other user's directory or None)."""
        self.serial += 1
        base = self.tmp_path / "trees" / str(self.serial)
        others = None
        if layout == "shared-parent":
            shared = base / "shared"
            others = shared / ".memprove"
            others.mkdir(parents=True)
            os.chmod(str(others), 0o777)
            os.chown(str(others), THIRD_UID, THIRD_UID)
            project = shared / "project"
            project.mkdir()
        elif layout == "shared-parent-link":
            # §6 rule 22: another user's link to a folder that is not theirs (the sibling's).
            shared = base / "shared"
            shared.mkdir(parents=True)
            others = shared / ".memprove"
            others.symlink_to(self.sibling / ".memprove")
            os.chown(str(others), THIRD_UID, THIRD_UID, follow_symlinks=False)
            project = shared / "project"
            project.mkdir()
        else:
            project = base / "project"
            (project / ".git").mkdir(parents=True)
            directory = project / ".memprove"
            sibling = self.sibling / ".memprove"
            if memprove == "link":
                directory.symlink_to(sibling)
            elif memprove == "file":
                directory.write_bytes(b"not a directory\n")
            elif memprove == "dir":
                directory.mkdir()
                self.fill(project, directory, context, lock)
        fresh = str(self.link) + ".new"
        os.symlink(str(project), fresh)
        os.rename(fresh, str(self.link))
        return project, others

    def fill(self, project, directory, context, lock):
        path = directory / "context.json"
        sibling = self.sibling / ".memprove" / "context.json"
        mine = {"version": 1, "workspace": {"id": "w", "root": os.path.realpath(str(project))},
                "task": None, "session": None}
        if context == "own":
            path.write_text(json.dumps(mine))
        elif context == "no-workspace":
            path.write_text(json.dumps({"version": 1, "task": None, "session": None}))
        elif context == "no-root":
            path.write_text(json.dumps(dict(mine, workspace={"id": "w"})))
        elif context == "number-root":
            path.write_text(json.dumps(dict(mine, workspace={"id": "w", "root": 5})))
        elif context == "foreign":
            path.write_bytes(sibling.read_bytes())
        elif context == "link":
            path.symlink_to(sibling)
        elif context == "dangling":
            path.symlink_to("nowhere")
        elif context == "garbage":
            path.write_bytes(b"{garbage")
        if lock == "file":
            (directory / "context.lock").write_bytes(b"")
        elif lock == "link":
            (directory / "context.lock").symlink_to(directory.parent / "planted.lock")
        elif lock == "dir":
            (directory / "context.lock").mkdir()


@pytest.fixture
def tree_world(hserve, config, daemon, tmp_path):
    return TreeWorld(hserve, config, daemon, tmp_path)


def test_memprove_tree_fuzz(tree_world, daemon):
    """Project trees whose `.memprove` is a directory, a link to a sibling's, a file or
    absent; whose context.json is the project's, names no root (no workspace key, none in
    it, a number), is the sibling's (foreign), links to the sibling's, dangles or is
    garbage; whose context.lock is a file, a link or a directory; and (as root) a shared
    parent holding another user's `.memprove/`, or another user's link `.memprove` to a
    folder that is not theirs (rule 22).  Each tool meets each: links and a wrong
    type are `context_unreadable` (hint naming the file) for every tool, `begin` included,
    before any daemon request; garbage is moved aside by `begin` and refused by the
    others; a foreign context (one naming no root too) is `context_foreign` for the
    others, moved aside by `begin`; another user's directory is passed over.  Whatever
    happens, no request names the sibling's Task or Session and the sibling's files stay
    as they are."""
    world = tree_world
    if os.geteuid() != 0:
        # Said, not silent: the other layout needs a second user (see needs_root).
        import warnings
        warnings.warn("the shared-parent layout needs root (another user's .memprove/); "
                      "only 'repo' trees are fuzzed")
    layouts = ["repo"] + (["shared-parent", "shared-parent-link"] if os.geteuid() == 0 else [])
    tally = Counter()

    @settings(max_examples=FUZZ_EXAMPLES, **NO_SHRINK)
    @given(layout=st.sampled_from(layouts),
           memprove=st.sampled_from(["dir", "dir", "dir", "link", "file", "absent"]),
           context=st.sampled_from(["absent", "own", "no-workspace", "no-root", "number-root",
                                    "foreign", "foreign", "link", "dangling", "garbage"]),
           lock=st.sampled_from(["absent", "absent", "file", "link", "dir"]),
           call=st.sampled_from(TREE_CALLS))
    def run(layout, memprove, context, lock, call):
        case = (layout, memprove, context, lock, call[0])
        project, others = world.build(layout, memprove, context, lock)
        sibling_files = snapshot(world.sibling)
        since = len(daemon.ops)
        tool, args = call
        code, value = outcome_of(world.server.call(tool, args))
        tally[(code if tool != "context" else value.get("context_error", "ok"))] += 1
        assert code != "internal_error", (case, value)
        real = layout == "repo" and memprove == "dir"
        hinted = layout == "repo" and (memprove in ("link", "file") or real and (
            context in ("link", "dangling") or lock in ("link", "dir")))
        garbage = real and not hinted and context == "garbage"
        # §6 rule 20: a context naming no root is as foreign as one naming another.
        foreign = real and not hinted and context in ("foreign", "no-workspace", "no-root",
                                                      "number-root")
        sent = daemon.ops[since:]
        if tool == "context":
            assert code == "ok", (case, value)
            wanted = "context_unreadable" if hinted or garbage else \
                "context_foreign" if foreign else None
            assert value.get("context_error") == wanted, (case, value)
            if others is not None:
                assert value["workspace"]["root"] == str(project), (case, value)
                assert ".memprove owned by another user" in value["config"]["warnings"], case
        elif hinted:
            assert code == "context_unreadable" and " is " in value, (case, value)
        elif tool == "begin":
            assert code == "ok", (case, value)
            moved = value.get("moved_aside", "")
            assert moved.startswith("context.json.corrupt-") if garbage else \
                moved.startswith("context.json.foreign-") if foreign else moved == "", (case, value)
            if memprove == "absent" or layout != "repo":
                assert (project / ".memprove" / ".gitignore").read_bytes() == b"*\n", case
        elif garbage or foreign:
            assert code == ("context_unreadable" if garbage else "context_foreign"), (case, value)
        if tool != "begin" and (hinted or garbage or foreign) or tool == "begin" and hinted:
            assert sent == [], (case, [entry["op"] for entry in sent])
        for entry in sent:
            named = entry["path"] + json.dumps(entry.get("body"), default=str)
            assert not any(secret in named for secret in world.secrets), (case, entry["op"])
        assert snapshot(world.sibling) == sibling_files, case
        if others is not None and not others.is_symlink():
            assert os.listdir(str(others)) == [], case
        tally["cases"] += 1

    run()
    assert world.server.close() == 0
    report("memprove_tree_fuzz", cases=tally.pop("cases"), outcomes=dict(tally))


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
    code, text = call_tool(server, tool, args)
    assert code == "context_unreadable", text
    assert daemon.ops == [], [entry["op"] for entry in daemon.ops]
    assert list(outside.iterdir()) == []
    assert server.close() == 0


# =============================================================================
# Rule 12: files keep their mode
# =============================================================================

@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600])
def test_rule12_rewrite_keeps_the_mode(begun, workspace, mode):
    """§6 rule 12: a rewrite of context.json keeps the mode of the file it replaces."""
    server, value = begun
    os.chmod(str(context_path(workspace)), mode)
    assert call_tool(server, "begin", {})[0] == "ok"
    assert stat.S_IMODE(context_path(workspace).stat().st_mode) == mode
    assert call_tool(server, "end")[0] == "ok"
    assert stat.S_IMODE(context_path(workspace).stat().st_mode) == mode
    assert server.close() == 0


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_rule12_new_context_gets_the_umasks_mode(hserve, config, daemon, workspace, tmp_path, umask):
    """§6 rule 12: a new context.json gets the mode any new file gets under the umask."""
    python = wrapper(tmp_path, "python-umask-%03o" % umask, "os.umask(%d)" % umask)
    server = hserve(python=python, config=config, timeout=5)
    server.initialize()
    assert call_tool(server, "begin", {"new_task": "Umask %03o" % umask})[0] == "ok"
    assert stat.S_IMODE(context_path(workspace).stat().st_mode) == 0o666 & ~umask
    assert server.close() == 0


FOREIGN_TEXT = ("context_foreign: The Workspace's context file belongs to another Workspace; "
                "`begin` starts a fresh one.")


FOREIGN_NAME = re.compile(r"context\.json\.foreign-[0-9]{8}T[0-9]{6}Z\Z")


# Every tool but `context` (which reports it) and `begin` (which starts afresh).
REFUSING_CALLS = sample_calls("context", "begin")


BEGIN = ("begin", {"new_task": "Afresh"})


WRITES_NAMING_A_TASK = ("createSession", "createCheckpoint", "proposeDecision", "transitionTask")


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
    foreign = context_path(there).read_bytes()
    assert read_json(context_path(there))["workspace"]["root"] != server_path(there)
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
    context = read_json(context_path(there))
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
    target = os.path.relpath(str(context_path(original_root)), str(there / ".memprove")) \
        if relative else str(context_path(original_root))
    os.symlink(target, str(context_path(there)))
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
# Rule 20: a context file that names no Workspace is foreign
# =============================================================================

@pytest.fixture
def cloned(hserve, config, daemon, workspace):
    """A Workspace with a Task and a recorded run, whose context.json is then made to name
    no root, as a clone's could, with an agent name of the clone's choosing."""
    server, begun = begun_server(hserve, config, "The clone's Task")
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun["session_id"], "pytest", 0)
    assert server.close() == 0
    context = read_json(context_path(workspace))
    context["session"]["agent"] = {"name": "chosen-by-the-clone", "role": "reviewer"}
    return context


@pytest.mark.parametrize("shape", ["no workspace", "no root", "a null root", "a number as root",
                                   "a list as workspace"])
def test_rule20_a_context_naming_no_root_is_foreign(hserve, config, daemon, workspace, cloned,
                                                    shape):
    """`context` reports `context_foreign`; every other tool but `begin` answers it before any
    daemon request; `begin` moves the file aside and records its Session under the
    client's name, never the clone's."""
    if shape == "no workspace":
        cloned.pop("workspace")
    elif shape == "no root":
        cloned["workspace"] = {"id": cloned["workspace"]["id"]}
    elif shape == "a null root":
        cloned["workspace"]["root"] = None
    elif shape == "a number as root":
        cloned["workspace"]["root"] = 5
    else:
        cloned["workspace"] = [str(workspace)]
    context_path(workspace).write_text(json.dumps(cloned, indent=2))
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, value = call_tool(server, "context")
    assert code == "ok" and value["context_error"] == "context_foreign", value
    assert value["agent"]["name"] == "pytest-client", value
    before = len(daemon.ops)
    for tool, args in (("tasks", {}), ("checkpoint", {"facts": [{"text": "Ours?"}]}),
                       ("end", {})):
        code, text = call_tool(server, tool, args)
        assert code == "context_foreign", (tool, text)
    assert len(daemon.ops) == before, daemon.ops[before:]
    code, begun = call_tool(server, "begin", {"new_task": "Afresh"})
    assert code == "ok", begun
    assert re.match(r"context\.json\.foreign-[0-9]{8}T[0-9]{6}Z\Z", begun["moved_aside"]), begun
    assert begun["session"]["agent"] == {"name": "pytest-client", "role": "implementer"}, begun
    sessions = [entry for entry in daemon.ops[before:] if entry["op"] == "createSession"]
    assert [entry["body"]["agent"]["name"] for entry in sessions] == ["pytest-client"], sessions
    assert server.close() == 0
