"""`mcp hook session-start` (issue 33: every session starts with the Pack) through the built .pyz as a subprocess,
the reference daemon over real HTTP, real files.

- With a Task in the context: standard output is one line, the JSON object
  {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": TEXT}}, TEXT
  byte for byte the text of a `pack` with {} made by a server in the same state for a client
  of the same name (the hook's client: --client, or the variables each client sets); stderr
  empty; exit 0.
- Standard input: a JSON object's `cwd` starts the Workspace search; anything else (not JSON,
  over 64 KiB, never closed) is ignored.
- At most 9,000 UTF-16 code units: the largest budget that fits, else the count and one line.
- Silence (nothing on either stream, exit 0) whatever is wrong, the daemon included; reads
  only; the token nowhere; MEMPROVE_MCP_LOG gets one line.
- Where the command comes from: `print-config --hook`, the kit's hooks/hooks.json (run with
  `sh -c` as the clients run it), Gemini's GEMINI.md; doctor's `hook` check.

Time: the same second is not waited for.  The oracle's `pack` is called just before and just
after the hook; the hook's opening must carry a time between the two, and its text must be
the first `pack` text with that time put in the opening's place (byte for byte the same when
the two calls fall in one second).  The 3 s bound is the bench's to measure; here a hook that
meets a daemon that never answers must merely end by itself (a generous safety bound).
"""

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from harness import (INSTALLED, SAFETY_TIMEOUT, codex_trusts_the_hook, default_server_python,
                     gemini_rules, run_cli, run_with_stdin_held_open, server_path, snapshot,
                     stderr_line_ending, tool_value)
from hardening_support import FakeDaemon, RawDaemon

HOOK = ("mcp", "hook", "session-start")
CAP = 9000                       # UTF-16 code units of additionalContext at most
# The clients, the name each sends as clientInfo.name (the hook's agent), and the variable
# each sets for the hooks it runs (research/session-start.md §1-3).
CLIENT_NAMES = {"claude-code": "claude-code", "codex": "codex-mcp-client",
                "gemini": "gemini-cli-mcp-client"}


def client_variables(client, project):
    """What each client sets for the hooks it runs (research/session-start.md: measured with
    the pinned clients), the project being `project`."""
    kit = "/opt/kits/memprove"
    return {"claude-code": {"CLAUDECODE": "1", "CLAUDE_PLUGIN_ROOT": kit,
                            "CLAUDE_PROJECT_DIR": project, "CLAUDE_CODE_SESSION_ID": "a1"},
            "codex": {"PLUGIN_ROOT": kit, "CLAUDE_PLUGIN_ROOT": kit,
                      "CLAUDE_PLUGIN_DATA": "/opt/kits/data"},
            "gemini": {"GEMINI_SESSION_ID": "3f1c0e6a-5b0e-4c1e-9a57-6c1b2d7e8f90",
                       "GEMINI_PROJECT_DIR": project, "GEMINI_CWD": project,
                       "CLAUDE_PROJECT_DIR": project}}[client]

STAMP = re.compile(r" at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) as ")
FALLBACK_LINE = "The Pack is larger than a session start carries: call pack to read it."


def hook_input(cwd, source="startup"):
    """What a client writes on the hook's standard input (Claude Code's fields)."""
    return json.dumps({"session_id": "0b5e0c1e-7d4f-4a55-9c1e-2f9a4a3e6b01",
                       "transcript_path": "/nonexistent/transcript.jsonl", "cwd": str(cwd),
                       "hook_event_name": "SessionStart", "source": source}).encode("utf-8")


def utf16_units(text):
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def context_file(root):
    return root / ".memprove" / "context.json"


# ---------------------------------------------------------------------------
# Running the hook and reading what it printed
# ---------------------------------------------------------------------------

def run_hook(pyz, env, cwd, args=(), stdin=b"", timeout=SAFETY_TIMEOUT, python=None):
    """The hook run to its end: CompletedProcess (bytes).  Past `timeout`, a failure."""
    try:
        return run_cli(python or default_server_python(), pyz, list(HOOK) + [str(a) for a in args],
                       env, cwd, stdin=stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("the hook did not end by itself within %s s" % timeout)


def additional_context(done):
    """TEXT of a hook that spoke: its exit 0, empty stderr, and one line of stdout holding
    exactly the SessionStart object (compact or not, but one line)."""
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stderr == b"", done.stderr
    out = done.stdout
    assert out.endswith(b"\n") and out.count(b"\n") == 1, out[:300]
    assert b"\r" not in out, out[:300]
    value = json.loads(out.decode("utf-8"))
    assert list(value) == ["hookSpecificOutput"], value
    inner = value["hookSpecificOutput"]
    assert list(inner) == ["hookEventName", "additionalContext"], inner
    assert inner["hookEventName"] == "SessionStart"
    text = inner["additionalContext"]
    assert isinstance(text, str) and text, inner
    assert utf16_units(text) <= CAP, utf16_units(text)
    return text


def assert_silent(done):
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), \
        (done.returncode, done.stdout[:300], done.stderr[:300])


class Oracle:
    """A server in the hook's state (same environment, same working directory) whose `pack`
    gives the text the hook must give.  client: the clientInfo.name it sends (None: none)."""

    def __init__(self, start_server, env, cwd, client):
        self.server = start_server(env=env, cwd=cwd)
        self.client = client

    def pack(self, arguments=None):
        answer = self.server.call("pack", {} if arguments is None else arguments, era="modern",
                                  client=self.client)
        result = answer["result"]
        assert result.get("isError") is False, result
        return result["content"][0]["text"], tool_value(result)

    def text(self, arguments=None):
        return self.pack(arguments)[0]

    def close(self):
        assert self.server.close() == 0


def stamp(text):
    match = STAMP.search(text.partition("\n")[0])
    assert match, text[:300]
    return match


def with_time_of(expected, got):
    """`expected` with the opening's time taken from `got` (both openings must have one)."""
    mine, theirs = stamp(expected), stamp(got)
    return expected[:mine.start(1)] + theirs.group(1) + expected[mine.end(1):]


def assert_same_as_pack(got, before, after):
    """got was made between the two `pack` texts: its time lies between theirs, and with that
    time it is byte for byte the first text (which equals the second but for the time)."""
    assert with_time_of(after, before) == before, "the state changed between the two packs"
    assert stamp(before).group(1) <= stamp(got).group(1) <= stamp(after).group(1), \
        (stamp(before).group(1), stamp(got).group(1), stamp(after).group(1))
    assert got == with_time_of(before, got), first_difference(got, with_time_of(before, got))


def first_difference(got, want):
    for index, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return "first difference at %d: got %r, want %r" % (index, got[index:index + 80],
                                                                 want[index:index + 80])
    return "lengths %d and %d: got ...%r, want ...%r" % (len(got), len(want), got[-80:], want[-80:])


def hook_against_pack(oracle, hook, arguments=None):
    """Run `hook()` between two of the oracle's `pack` calls; return the hook's TEXT, checked
    to be the oracle's text."""
    before = oracle.text(arguments)
    text = additional_context(hook())
    after = oracle.text(arguments)
    assert_same_as_pack(text, before, after)
    return text


# ---------------------------------------------------------------------------
# The world: the reference daemon, a configuration, a Workspace whose context names a Task
# ---------------------------------------------------------------------------

class World:
    def __init__(self, pyz, make_env, start_server, daemon, config, workspace, tmp_path):
        self.pyz, self.make_env, self.start_server = pyz, make_env, start_server
        self.daemon, self.config, self.workspace, self.tmp_path = daemon, config, workspace, tmp_path
        self.elsewhere = tmp_path / "elsewhere"
        self.elsewhere.mkdir(exist_ok=True)

    def env(self, extra=None):
        values = dict(self.config.env())
        values.update(extra or {})
        return self.make_env(values)

    def hook(self, args=(), env=None, cwd=None, stdin=b"", timeout=SAFETY_TIMEOUT):
        return run_hook(self.pyz, self.env(env), cwd or self.workspace, args, stdin, timeout)

    def oracle(self, client, env=None, cwd=None):
        return Oracle(self.start_server, dict(self.config.env(), **(env or {})),
                      cwd or self.workspace, client)

    def begin(self, title="Hook me", client="claude-code"):
        """A Task begun by `client` (its Session's agent), with open items, a decision, a
        fact and a next action."""
        server = self.start_server(env=self.config.env(), cwd=self.workspace)
        server.initialize(client=client)
        begun = tool_value(server.call("begin", {"new_task": title})["result"])
        tool_value(server.call("checkpoint", {
            "facts": [{"text": "Uploads retry three times \u2014 \U0001F600 measured."}],
            "open_items": ["Find why the second retry races.", "Ask about the 409s."],
            "next_action": "Read the retry loop."})["result"])
        tool_value(server.call("decide", {"decision": "Back off exponentially.",
                                          "rationale": "The server sheds load."})["result"])
        assert server.close() == 0
        self.daemon.clear_ops()
        return begun

    def without_session(self):
        """The context keeps its Task and names no Session (contract §2: `session` may be
        null): the agent is then named by the client."""
        path = context_file(self.workspace)
        context = json.loads(path.read_text("utf-8"))
        context["session"] = None
        path.write_text(json.dumps(context), "utf-8")

    def name_task(self, task, workspace=None):
        """A context naming `task` (a Capsule's or the daemon's record) and no Session."""
        root = workspace or self.workspace
        context_file(root).write_text(json.dumps({
            "version": 1, "workspace": {"id": "w", "root": server_path(root)},
            "task": {"id": task["id"], "number": task["number"], "title": task["title"]},
            "session": None}), "utf-8")


@pytest.fixture
def world(pyz, make_env, start_server, daemon, config, workspace, tmp_path):
    return World(pyz, make_env, start_server, daemon, config, workspace, tmp_path)


# =============================================================================
# With a Task: the Pack, byte for byte
# =============================================================================

def test_with_a_task_one_line_the_pack_of_pack_nothing_else(world):
    world.begin()
    oracle = world.oracle("claude-code")
    text = hook_against_pack(oracle, lambda: world.hook(
        args=("--client", "claude-code"), stdin=hook_input(world.workspace)))
    opening, blank, pack = text.partition("\n\n")
    assert blank and opening.startswith("Resuming Task 1: Hook me at "), opening
    assert opening.endswith(" as claude-code (implementer). 2 open items (c2, c3) must be "
                            "resolved or carried forward."), opening
    assert pack.startswith("Task 1: Hook me [active]\n") and pack.endswith("\n"), pack
    assert "\U0001F600" in pack and "- c5 Back off exponentially." in pack, pack
    # The daemon was asked for the Capsule, and nothing else, by the hook.
    assert [entry["op"] for entry in world.daemon.ops] == ["getTaskCapsule"] * 3
    oracle.close()


@pytest.mark.parametrize("client", sorted(CLIENT_NAMES))
@pytest.mark.parametrize("how", ["option", "environment"])
def test_the_agent_is_the_clients_name(world, client, how):
    """With no Session in the context the opening names the client's agent: the name the
    client sends as clientInfo.name, from --client or from the variable that client sets for
    its hooks."""
    world.begin()
    world.without_session()
    oracle = world.oracle(CLIENT_NAMES[client])
    if how == "option":
        run = lambda: world.hook(args=("--client", client))
    else:
        run = lambda: world.hook(env=client_variables(client, server_path(world.workspace)))
    text = hook_against_pack(oracle, run)
    assert " as %s (implementer). " % CLIENT_NAMES[client] in text.partition("\n")[0], text[:200]
    oracle.close()


def test_geminis_variable_wins_over_claude_codes_which_every_child_inherits(world):
    """Gemini started from a Claude Code shell inherits CLAUDECODE=1; its own variable says
    which client runs the hook."""
    world.begin()
    world.without_session()
    oracle = world.oracle(CLIENT_NAMES["gemini"])
    env = dict(client_variables("gemini", server_path(world.workspace)), CLAUDECODE="1")
    hook_against_pack(oracle, lambda: world.hook(env=env))
    oracle.close()


def test_no_client_known_names_the_agent_as_pack_does_for_a_nameless_client(world):
    world.begin()
    world.without_session()
    oracle = world.oracle(None)
    text = hook_against_pack(oracle, lambda: world.hook())
    assert " as agent (implementer). " in text.partition("\n")[0], text[:200]
    oracle.close()


def test_the_option_wins_over_the_environment_and_memprove_agent_name_over_both(world):
    world.begin()
    world.without_session()
    oracle = world.oracle("codex-mcp-client")
    hook_against_pack(oracle, lambda: world.hook(
        args=("--client", "codex"), env=client_variables("gemini", server_path(world.workspace))))
    oracle.close()
    named = {"MEMPROVE_AGENT_NAME": "ana", "MEMPROVE_AGENT_ROLE": "reviewer"}
    oracle = world.oracle("gemini-cli-mcp-client", env=named)
    text = hook_against_pack(oracle, lambda: world.hook(args=("--client", "gemini"), env=named))
    assert " as ana (reviewer). " in text.partition("\n")[0], text[:200]
    oracle.close()


def test_the_contexts_session_names_the_agent_whatever_the_client(world):
    world.begin(client="claude-code")
    oracle = world.oracle("gemini-cli-mcp-client")
    text = hook_against_pack(oracle, lambda: world.hook(args=("--client", "gemini")))
    assert " as claude-code (implementer). " in text.partition("\n")[0], text[:200]
    oracle.close()


def test_config_dir_option_and_workspace_option(world):
    """The kit's form: --config-dir and --workspace on the command line, no variable, run
    from another folder."""
    world.begin()
    oracle = world.oracle("claude-code")
    env = world.make_env()                       # no MEMPROVE_CONFIG_DIR
    hook_against_pack(oracle, lambda: run_hook(
        world.pyz, env, world.elsewhere, ["--config-dir", world.config.dir, "--workspace",
                                          world.workspace, "--client", "claude-code"]))
    oracle.close()


# =============================================================================
# Standard input
# =============================================================================

def test_the_inputs_cwd_finds_the_workspace_from_elsewhere(world):
    world.begin()
    oracle = world.oracle("claude-code")
    for source in ("startup", "resume", "clear", "compact"):
        hook_against_pack(oracle, lambda: world.hook(
            args=("--client", "claude-code"), cwd=world.elsewhere,
            stdin=hook_input(server_path(world.workspace), source)))
    oracle.close()
    # Without it, from elsewhere, there is no Task: silence.
    assert_silent(world.hook(args=("--client", "claude-code"), cwd=world.elsewhere))
    # --workspace comes before the input's cwd.
    assert_silent(world.hook(args=("--client", "claude-code", "--workspace", world.elsewhere),
                             stdin=hook_input(server_path(world.workspace))))


NOT_AN_OBJECT = {
    "not json": b"SessionStart please\n",
    "a json list": b'["cwd"]',
    "a json string": b'"/"',
    "cwd not a string": b'{"cwd": 5}',
    "not utf-8": b'{"cwd": "\xff\xfe"}',
    "nul bytes": b"\0" * 100,
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(NOT_AN_OBJECT))
def test_input_that_is_not_a_json_object_is_ignored(world, case):
    world.begin()
    oracle = world.oracle("claude-code")
    hook_against_pack(oracle, lambda: world.hook(args=("--client", "claude-code"),
                                                 stdin=NOT_AN_OBJECT[case]))
    oracle.close()


def test_input_over_64_kib_is_ignored(world):
    """A JSON object over 64 KiB whose cwd names the Workspace: not read whole, not used
    (silence from elsewhere); from the Workspace, the Pack as usual."""
    world.begin()
    padded = json.loads(hook_input(server_path(world.workspace)).decode("utf-8"))
    padded["padding"] = "x" * (200 * 1024)
    huge = json.dumps(padded).encode("utf-8")
    assert huge.index(b'"cwd"') < 1024 and len(huge) > 64 * 1024
    assert_silent(world.hook(cwd=world.elsewhere, stdin=huge))
    oracle = world.oracle("claude-code")
    hook_against_pack(oracle, lambda: world.hook(args=("--client", "claude-code"), stdin=huge))
    oracle.close()


def test_input_never_closed_the_hook_still_ends(world, tmp_path):
    """The client holds the pipe open and writes nothing: the hook reads for a bounded time,
    then gives the Pack and exits 0 by itself (the safety bound is generous; the bench
    measures the time)."""
    world.begin()
    oracle = world.oracle("claude-code")

    hook_against_pack(oracle, lambda: run_with_stdin_held_open(
        [default_server_python(), str(world.pyz)] + list(HOOK) + ["--client", "claude-code"],
        world.env(), world.workspace, tmp_path, timeout=10))
    oracle.close()


# =============================================================================
# At most 9,000 UTF-16 code units
# =============================================================================

def capsule_with_open_items(count, title="Cap me"):
    """A Capsule (the daemon's answer) of Task 4 with one open Session, `count` open items
    and as many facts, each text holding a character above U+FFFF (2 UTF-16 units)."""
    task = {"id": "t-cap", "number": 4, "title": title, "status": "active",
            "created_at": "2026-11-01T05:11:47Z", "updated_at": "2026-11-06T18:00:41Z",
            "open_items": count, "sessions_open": 1}
    session = {"id": "s-cap", "number": 2, "task_id": "t-cap", "task_number": 4,
               "agent": {"name": "claude-code", "role": "implementer"},
               "parent_session_id": None, "parent_number": None, "state": "open",
               "started_at": "2026-11-01T07:05:27Z", "ended_at": None}
    claims = []
    for number in range(1, 2 * count + 1):
        kind = "open_item" if number <= count else "fact"
        claims.append({"number": number, "kind": kind,
                       "text": "%s %d \U0001F4CC about the upload retries and their backoff."
                               % ("Look at" if kind == "open_item" else "Known:", number),
                       "state": "active", "session_number": 2,
                       "created_at": "2026-11-05T15:39:39Z", "reaffirmed_at": None,
                       "evidence": []})
    return {"capsule": {"task": task, "sessions": [session], "claims": claims, "runs": [],
                        "ledger": {"entries": 4 * count, "head": "ab" * 32}}}


# Capsules whose default Pack text passes the cap: (open items, title).  The second passes it
# in UTF-16 code units only (its characters are fewer than 9,000).
PAST_THE_CAP = {"700 open items": (700, "Cap me"),
                "a title of 1,500 characters above U+FFFF": (40, "\U0001F4CC" * 1500)}


@pytest.mark.parametrize("case", sorted(PAST_THE_CAP))
def test_a_pack_past_the_cap_is_rendered_at_the_largest_budget_that_fits(world, case):
    capsule = capsule_with_open_items(*PAST_THE_CAP[case])
    world.daemon.serve_capsule("t-cap", capsule)
    world.name_task(capsule["capsule"]["task"])
    oracle = world.oracle("claude-code")
    default = oracle.text()
    assert utf16_units(default) > CAP                # the default budget does not fit
    if "U+FFFF" in case:
        assert len(default) <= CAP, len(default)
    # The largest budget that fits (the Pack grows with its budget: pack.md).
    low, high = 500, 6000
    assert utf16_units(oracle.text({"budget": low})) <= CAP
    while low < high:
        middle = (low + high + 1) // 2
        if utf16_units(oracle.text({"budget": middle})) <= CAP:
            low = middle
        else:
            high = middle - 1
    text = hook_against_pack(oracle, lambda: world.hook(args=("--client", "claude-code")),
                             {"budget": low})
    assert utf16_units(oracle.text({"budget": low + 1})) > CAP
    assert "(Claims left out: " in text
    oracle.close()


def test_a_pack_that_cannot_fit_gives_the_count_and_one_line(world):
    """About 1,300 open items: the opening alone lists them past the cap.  TEXT is the
    opening with its sentence cut to the count, an empty line and the fixed line."""
    capsule = capsule_with_open_items(1500)
    world.daemon.serve_capsule("t-cap", capsule)
    world.name_task(capsule["capsule"]["task"])
    oracle = world.oracle("claude-code")
    before = oracle.text({"budget": 500})
    assert utf16_units(before) > CAP
    text = additional_context(world.hook(args=("--client", "claude-code")))
    after = oracle.text({"budget": 500})
    opening = before.partition("\n\n")[0]
    sentence = "1500 open items (%s) must be resolved or carried forward." % ", ".join(
        "c%d" % n for n in range(1, 1501))
    assert opening.endswith(" " + sentence), opening[-200:]
    cut = opening[:-len(sentence)] + "1,500 open items must be resolved or carried forward."
    assert_same_as_pack(text, cut + "\n\n" + FALLBACK_LINE, with_time_of(
        cut + "\n\n" + FALLBACK_LINE, after))
    oracle.close()


def test_a_title_past_the_cap_is_silence(world):
    """Not even the opening with its count fits: nothing is better than a text over the cap."""
    capsule = capsule_with_open_items(3, title="A title that goes on " * 450)
    world.daemon.serve_capsule("t-cap", capsule)
    world.name_task(capsule["capsule"]["task"])
    assert_silent(world.hook(args=("--client", "claude-code")))


# =============================================================================
# Silence: nothing on either stream, exit 0, nothing written
# =============================================================================

def closed_port_url():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return "http://127.0.0.1:%d" % port


def point_at(world, url):
    (world.config.data_dir / "daemon.json").write_text(json.dumps({"url": url, "pid": 1}))


def no_context(world):
    context_file(world.workspace).unlink()


def context_without_task(world):
    path = context_file(world.workspace)
    context = json.loads(path.read_text("utf-8"))
    context["task"] = context["session"] = None
    path.write_text(json.dumps(context), "utf-8")


def no_token(world):
    world.config.token_file.unlink()


def empty_token(world):
    world.config.token_file.write_text("\n")


def no_data_dir(world):
    (world.config.dir / "data-dir").unlink()


def data_dir_missing(world):
    (world.config.dir / "data-dir").write_text(str(world.tmp_path / "no-such-data") + "\n")


def daemon_down(world):
    point_at(world, closed_port_url())


def daemon_refuses_the_token(world):
    world.daemon.revoke_token(world.config.token)


def daemon_not_loopback(world):
    point_at(world, "http://192.0.2.1:9")


def daemon_answers_500(world):
    world.daemon.inject("status500", op="getTaskCapsule", count=None)


def daemon_answers_garbage(world):
    fake = FakeDaemon(lambda request: (200, {"Content-Type": "application/json"},
                                       b"\x00not json{" * 50))
    world.closers.append(fake.close)
    fake.write_daemon_json(world.config.data_dir)


def daemon_answers_a_wrong_capsule(world):
    fake = FakeDaemon(lambda request: (200, {"Content-Type": "application/json"},
                                       json.dumps({"capsule": {"task": "no"}}).encode()))
    world.closers.append(fake.close)
    fake.write_daemon_json(world.config.data_dir)


def daemon_drops_the_connection(world):
    raw = RawDaemon(lambda conn: None)
    world.closers.append(raw.close)
    raw.write_daemon_json(world.config.data_dir)


def task_not_found(world):
    path = context_file(world.workspace)
    context = json.loads(path.read_text("utf-8"))
    context["task"]["id"] = "t-nobody-knows"
    path.write_text(json.dumps(context), "utf-8")


def foreign_context(world):
    path = context_file(world.workspace)
    context = json.loads(path.read_text("utf-8"))
    context["workspace"]["root"] = server_path(world.elsewhere)
    path.write_text(json.dumps(context), "utf-8")


def context_naming_no_workspace(world):
    path = context_file(world.workspace)
    context = json.loads(path.read_text("utf-8"))
    del context["workspace"]["root"]
    path.write_text(json.dumps(context), "utf-8")


def context_not_json(world):
    context_file(world.workspace).write_text("{not json", "utf-8")


def workspace_unusable(world):
    world.extra_env["MEMPROVE_WORKSPACE"] = str(world.tmp_path / "no-such-folder")


SILENT = {
    "no context file": no_context,
    "a context without a Task": context_without_task,
    "no token": no_token,
    "an empty token file": empty_token,
    "no data directory named": no_data_dir,
    "a data directory that does not exist": data_dir_missing,
    "the daemon down": daemon_down,
    "the daemon refuses the token": daemon_refuses_the_token,
    "a daemon address off loopback": daemon_not_loopback,
    "the daemon answers 500": daemon_answers_500,
    "the daemon answers garbage": daemon_answers_garbage,
    "the daemon answers a wrong Capsule": daemon_answers_a_wrong_capsule,
    "the daemon drops the connection": daemon_drops_the_connection,
    "the Task not found": task_not_found,
    "a foreign context": foreign_context,
    "a context naming no Workspace": context_naming_no_workspace,
    "a context that is not JSON": context_not_json,
    "the Workspace unusable": workspace_unusable,
}


@pytest.fixture
def silent_world(world):
    world.begin()
    world.closers, world.extra_env = [], {}
    yield world
    for close in world.closers:
        close()


def log_lines(path):
    """MEMPROVE_MCP_LOG split into its lines, which end as the platform's text files do
    (CR LF under Windows); the last element is what follows the last line end."""
    ending = stderr_line_ending(default_server_python())
    return path.read_bytes().split(ending)


def assert_silent_and_wrote_nothing(world, args=("--client", "claude-code"), env=None,
                                    timeout=SAFETY_TIMEOUT):
    log = world.tmp_path / "hook.log"
    watched = (world.workspace, world.config.dir, world.elsewhere)
    before = snapshot(*watched)
    done = world.hook(args=args, env=dict(world.extra_env, MEMPROVE_MCP_LOG=log, **(env or {})),
                      timeout=timeout)
    assert_silent(done)
    assert snapshot(*watched) == before
    lines = log_lines(log) if log.exists() else None
    assert lines is not None and len(lines) == 2 and lines[1] == b"" and lines[0], lines
    assert world.config.token.encode() not in lines[0]
    log.unlink()
    return done


@pytest.mark.parametrize("case", sorted(SILENT))
def test_silence_whatever_is_wrong(silent_world, case):
    """Each case changes one thing of a world where the hook gives the Pack (checked first):
    then nothing on either stream, exit 0, no file written or moved, one log line."""
    world = silent_world
    additional_context(world.hook(args=("--client", "claude-code")))
    world.daemon.clear_ops()
    SILENT[case](world)
    assert_silent_and_wrote_nothing(world)
    assert [e["op"] for e in world.daemon.ops] in ([], ["getTaskCapsule"]), world.daemon.ops


def test_silence_for_an_untrusted_daemon_json_and_no_request(silent_world):
    """Contract §6 rule 19: a data directory others can write is not believed; the hook sends
    the token nowhere (the daemon it names gets no request) and says nothing."""
    world = silent_world
    os.chmod(str(world.config.data_dir), 0o777)
    try:
        assert_silent_and_wrote_nothing(world)
    finally:
        os.chmod(str(world.config.data_dir), 0o700)
    assert world.daemon.ops == []


def trickle_until(release):
    """An answer that never ends: a byte of a status line every tenth of a second, each
    well within any timeout on one read."""
    def answer(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while not release.wait(0.1):
            conn.sendall(b"X")
    return answer


@pytest.mark.parametrize("timeout", [None, "1000", "86400"])
@pytest.mark.parametrize("how", ["silent", "trickling"])
def test_a_daemon_that_accepts_and_never_answers(silent_world, timeout, how):
    """Whatever MEMPROVE_TIMEOUT says, the hook ends by itself, silent, whether the daemon
    says nothing or trickles an answer that never ends.  (The bound is 3 s: the bench
    measures it; 10 s here is a safety net.)"""
    world = silent_world
    release = threading.Event()
    raw = RawDaemon(lambda conn: release.wait(60) if how == "silent" else
                    trickle_until(release)(conn))
    world.closers.append(raw.close)
    world.closers.insert(0, release.set)
    raw.write_daemon_json(world.config.data_dir)
    env = {} if timeout is None else {"MEMPROVE_TIMEOUT": timeout}
    assert_silent_and_wrote_nothing(world, env=env, timeout=10)
    assert raw.requests == 1


def test_no_daemon_request_without_a_task(silent_world):
    world = silent_world
    no_context(world)
    assert_silent_and_wrote_nothing(world)
    assert world.daemon.ops == []


# =============================================================================
# Reads only
# =============================================================================

def test_reads_only_no_file_written_one_getTaskCapsule(world, home):
    world.begin()
    watched = (world.workspace, world.config.dir, home, world.elsewhere)
    before = snapshot(*watched)
    ledger = (world.config.data_dir / "ledger.sqlite3").read_bytes()
    additional_context(world.hook(args=("--client", "claude-code")))
    additional_context(world.hook(cwd=world.elsewhere, stdin=hook_input(world.workspace)))
    assert snapshot(*watched) == before
    assert (world.config.data_dir / "ledger.sqlite3").read_bytes() == ledger
    ops = world.daemon.ops
    assert [entry["op"] for entry in ops] == ["getTaskCapsule", "getTaskCapsule"], ops
    for entry in ops:
        assert entry["method"] == "GET" and "idempotency-key" not in entry["headers"], entry


def test_no_memprove_folder_is_made_in_a_workspace_without_one(world, tmp_path):
    bare = tmp_path / "bare"
    (bare / ".git").mkdir(parents=True)
    before = snapshot(bare, world.config.dir)
    for cwd, stdin in ((bare, b""), (world.elsewhere, hook_input(bare))):
        assert_silent(world.hook(args=("--client", "claude-code"), cwd=cwd, stdin=stdin))
    assert snapshot(bare, world.config.dir) == before
    assert not (bare / ".memprove").exists()
    assert world.daemon.ops == []


# =============================================================================
# The token and the log
# =============================================================================

def test_the_token_is_on_no_stream_and_not_in_the_log_which_has_one_line(world):
    world.begin()
    log = world.tmp_path / "hook.log"
    done = world.hook(args=("--client", "claude-code"), env={"MEMPROVE_MCP_LOG": log})
    additional_context(done)
    token = world.config.token.encode()
    assert token not in done.stdout and token not in done.stderr
    lines = log_lines(log)
    assert len(lines) == 2 and lines[0] and lines[1] == b"", lines
    assert token not in lines[0]
    # A second run adds one more line.
    additional_context(world.hook(args=("--client", "claude-code"),
                                  env={"MEMPROVE_MCP_LOG": log}))
    assert len(log_lines(log)) == 3
    # The input's `source` goes to the line, which stays one line whatever it holds.
    forged = json.dumps({"cwd": server_path(world.workspace),
                         "source": "startup\nforged line\r\u2028\u001b[31m " + "x" * 5000})
    additional_context(world.hook(args=("--client", "claude-code"),
                                  env={"MEMPROVE_MCP_LOG": log}, stdin=forged.encode("utf-8")))
    lines = log_lines(log)
    assert len(lines) == 4 and lines[3] == b"" and b"\r" not in lines[2], lines[2][:300]
    # Given as MEMPROVE_TOKEN rather than a file, the token is still nowhere.
    world.config.token_file.unlink()
    done = world.hook(env={"MEMPROVE_MCP_LOG": log, "MEMPROVE_TOKEN": world.config.token})
    additional_context(done)
    assert token not in done.stdout + done.stderr + log.read_bytes()


# =============================================================================
# Where the command comes from: print-config --hook, the kit, doctor
# =============================================================================

def commands_in(value):
    """Every "command" string in a JSON value."""
    if isinstance(value, dict):
        found = [value["command"]] if isinstance(value.get("command"), str) else []
        for item in value.values():
            found += commands_in(item)
        return found
    if isinstance(value, list):
        return [command for item in value for command in commands_in(item)]
    return []


def session_start_commands(value):
    """The commands of the SessionStart entries of a `hooks` object (the three clients'
    shape: {"SessionStart": [{"hooks": [{"type": "command", "command": ...}]}]})."""
    entries = value["SessionStart"]
    assert isinstance(entries, list) and len(entries) == 1, entries
    assert "matcher" not in entries[0], entries          # every source, in all three clients
    hooks = entries[0]["hooks"]
    assert len(hooks) == 1 and hooks[0]["type"] == "command", hooks
    assert "timeout" not in hooks[0], hooks               # seconds in one, ms in another
    return hooks[0]["command"]


def run_with_sh(command, env, cwd, stdin):
    """The command run as Claude Code, Codex and Gemini run a hook on Linux and macOS."""
    try:
        return subprocess.run(["sh", "-c", command], input=stdin, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, cwd=str(cwd),
                              timeout=SAFETY_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError("the hook command did not end: %r" % command)


@pytest.mark.parametrize("client", sorted(CLIENT_NAMES))
def test_print_config_hook_prints_an_entry_whose_command_gives_the_pack(world, home, client):
    world.begin()
    world.without_session()
    before = snapshot(home, world.workspace)
    done = run_cli(sys.executable, world.pyz, ["mcp", "print-config", "--client", client,
                                               "--hook"], world.env(), world.workspace)
    assert done.returncode == 0, done.stderr
    assert snapshot(home, world.workspace) == before          # writes nothing
    err = done.stderr.decode("utf-8")
    assert err.endswith("\n") and err.count("\n") == 1, err   # names the file
    assert {"claude-code": "settings.json", "codex": "hooks.json",
            "gemini": "settings.json"}[client] in err, err
    entry = json.loads(done.stdout.decode("utf-8"))
    commands = commands_in(entry)
    assert len(commands) == 1, entry
    command = commands[0]
    assert session_start_commands(entry["hooks"]) == command
    words = shlex.split(command)
    at = words.index("mcp")
    assert words[at:at + 3] == list(HOOK) and "--client" in words, words
    assert words[words.index("--client") + 1] == client, words
    assert os.path.realpath(words[at - 1]) == os.path.realpath(str(world.pyz)), words
    assert all(os.path.isabs(word) for word in words[:at]), words
    assert world.config.token not in done.stdout.decode("utf-8")
    # Run as the client runs it: the user's environment, the input on stdin, from elsewhere.
    oracle = world.oracle(CLIENT_NAMES[client])
    hook_against_pack(oracle, lambda: run_with_sh(command, world.env(), world.elsewhere,
                                                  hook_input(world.workspace)))
    oracle.close()


@pytest.mark.parametrize("client", ["cursor", "vscode", "opencode", "goose", "continue"])
def test_print_config_hook_for_a_client_without_a_hook_is_one_line_and_exit_1(world, client):
    done = run_cli(sys.executable, world.pyz, ["mcp", "print-config", "--client", client,
                                               "--hook"], world.env(), world.workspace)
    assert done.returncode == 1 and done.stdout == b"", (done.returncode, done.stdout)
    err = done.stderr.decode("utf-8")
    assert err.endswith("\n") and err.count("\n") == 1 and client in err, err


def write_kit(world, folder, *options):
    done = run_cli(sys.executable, world.pyz, ["mcp", "plugin", folder, "--config-dir",
                                               world.config.dir] + list(options),
                   world.make_env(), world.tmp_path)
    assert done.returncode == 0, done.stderr
    return done


def test_the_kits_hooks_json_runs_the_hook_under_sh(world, private_place):
    world.begin()
    kit = private_place / "my kits" / "memprove kit"  # spaces: the command quotes them
    kit.parent.mkdir()
    done = write_kit(world, kit)
    hooks = json.loads((kit / "memprove" / "hooks" / "hooks.json").read_text("utf-8"))
    # Gemini's extension is the kit's folder: its own hooks file, the same command here.
    assert json.loads((kit / "hooks" / "hooks.json").read_text("utf-8")) == hooks
    assert sorted(hooks) == ["description", "hooks"] and isinstance(hooks["description"], str)
    assert list(hooks["hooks"]) == ["SessionStart"], hooks
    command = session_start_commands(hooks["hooks"])
    words = shlex.split(command)
    assert os.path.isabs(words[0]), words
    assert words[1] == str(kit / "memprove" / "memprove_mcp.pyz"), words
    assert words[2:5] == list(HOOK), words
    assert words[words.index("--config-dir") + 1] == str(world.config.dir), words
    assert "--workspace" not in words, words
    assert "trust" in done.stdout.decode("utf-8").lower()    # Codex runs it once trusted
    # Run as Claude Code runs it: sh -c, its variable set, the project as working directory,
    # no memprove variable in the environment.
    oracle = world.oracle("claude-code")
    hook_against_pack(oracle, lambda: run_with_sh(
        command, world.make_env({"CLAUDECODE": "1", "CLAUDE_PROJECT_DIR": world.workspace}),
        world.workspace, hook_input(world.workspace)))
    oracle.close()
    # The kit's command is silent where there is no Task.
    no_context(world)
    assert_silent(run_with_sh(command, world.make_env({"CLAUDECODE": "1"}), world.workspace,
                              hook_input(world.workspace)))


def test_a_kit_written_with_workspace_names_it_in_the_hook(world, private_place):
    world.begin()
    kit = private_place / "kit"
    write_kit(world, kit, "--workspace", world.workspace)
    command = session_start_commands(json.loads(
        (kit / "memprove" / "hooks" / "hooks.json").read_text("utf-8"))["hooks"])
    words = shlex.split(command)
    assert words[words.index("--workspace") + 1] == str(world.workspace), words
    world.without_session()
    oracle = world.oracle("gemini-cli-mcp-client")
    hook_against_pack(oracle, lambda: run_with_sh(
        command, world.make_env({"GEMINI_SESSION_ID": "g1"}), world.elsewhere, b"{}"))
    oracle.close()


def test_geminis_context_file_survives_compression(world, private_place):
    kit = private_place / "kit"
    write_kit(world, kit)
    extension = json.loads((kit / "gemini-extension.json").read_text("utf-8"))
    assert extension["contextFileName"] == "GEMINI.md", extension
    text = (kit / "GEMINI.md").read_text("utf-8")
    assert "pack" in text and "memprove" in text.lower(), text
    assert len(text) < 2000, len(text)                   # short and static
    again = private_place / "again"
    write_kit(world, again, "--workspace", world.workspace)
    assert (again / "GEMINI.md").read_text("utf-8") == text
    assert world.config.token not in text and str(world.config.dir) not in text


def doctor_checks(world, *args):
    done = run_cli(sys.executable, world.pyz, ["mcp", "doctor", "--json"] + list(args),
                   world.env(), world.workspace)
    assert done.stderr == b"", done.stderr
    assert world.config.token.encode() not in done.stdout
    report = json.loads(done.stdout.decode("utf-8"))
    return [check["name"] for check in report["checks"]], \
        dict((check["name"], check) for check in report["checks"])


def install_printed_hook(world, home, client):
    """The entry `print-config --hook` prints, written where it says (Claude Code's and
    Gemini's settings.json, Codex's hooks.json)."""
    done = run_cli(sys.executable, world.pyz, ["mcp", "print-config", "--client", client,
                                               "--hook"], world.env(), world.workspace)
    assert done.returncode == 0, done.stderr
    place = {"claude-code": home / ".claude" / "settings.json",
             "codex": home / ".codex" / "hooks.json",
             "gemini": home / ".gemini" / "settings.json"}[client]
    place.parent.mkdir(parents=True, exist_ok=True)
    place.write_bytes(done.stdout)


@pytest.mark.parametrize("client", sorted(CLIENT_NAMES))
def test_doctors_hook_check(world, home, client):
    args = ("--client", client)
    world.begin()
    install_printed_hook(world, home, client)
    names, checks = doctor_checks(world, *args)
    assert names[-1] == "hook" and len(names) == 8, names
    hook = checks["hook"]
    assert hook["status"] == "ok" and "Task 1" in hook["detail"], hook
    assert hook["fix"] is None, hook
    world.daemon.clear_ops()
    # No Task in the context: a warn saying so, with a fix; doctor's only request stays its
    # daemon check's listTasks.
    no_context(world)
    names, checks = doctor_checks(world, *args)
    hook = checks["hook"]
    assert hook["status"] == "warn" and hook["fix"], hook
    assert "begin" in hook["fix"] + hook["detail"], hook
    assert [entry["op"] for entry in world.daemon.ops] == ["listTasks"], world.daemon.ops


@pytest.mark.parametrize("client", sorted(CLIENT_NAMES))
def test_doctors_hook_check_finds_the_kit_each_client_installed(world, home, private_place,
                                                               client):
    """No hook at all: a warn whose fix writes the kit or prints the entry.  The kit installed
    (as each client records it): ok, naming the kit's hooks.json and the Task.  The kit
    disabled for the Workspace: a warn."""
    args = ("--client", client)
    world.begin()
    hook = doctor_checks(world, *args)[1]["hook"]
    assert hook["status"] == "warn", hook
    assert "mcp plugin" in hook["fix"] and "print-config --hook --client " + client in hook["fix"]
    kit = private_place / "kit"
    write_kit(world, kit)
    INSTALLED[client](home, kit)
    if client == "codex":
        # Codex skips a plugin's hook, silently, until the user trusts it; doctor says so.
        hook = doctor_checks(world, *args)[1]["hook"]
        assert hook["status"] == "warn" and "not trusted" in hook["detail"], hook
        assert "codex" in hook["fix"], hook
        codex_trusts_the_hook(home, kit)
    hook = doctor_checks(world, *args)[1]["hook"]
    assert hook["status"] == "ok" and "hooks.json" in hook["detail"], hook
    assert "Task 1" in hook["detail"], hook
    if client == "gemini":
        gemini_rules(home, ["!%s/*" % server_path(world.workspace)])
    else:
        shutil.rmtree(str(home / ".claude"), ignore_errors=True)
        shutil.rmtree(str(home / ".codex"), ignore_errors=True)
        INSTALLED[client](home, kit, enabled=False)
    hook = doctor_checks(world, *args)[1]["hook"]
    assert hook["status"] == "warn" and "disabled" in hook["detail"], hook


def test_doctor_has_no_hook_check_for_a_client_without_one(world):
    world.begin()
    for client in ("cursor", "vscode", "opencode"):
        names, _ = doctor_checks(world, "--client", client)
        assert "hook" not in names and len(names) == 7, (client, names)
    names, _ = doctor_checks(world)                      # the default: claude-code
    assert names[-1] == "hook", names
