"""Tests of the reference daemon, tests/ledgerd.py, over real HTTP on 127.0.0.1."""

import hashlib
import http.client
import json
import os
import re
import shlex
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ledgerd  # noqa: E402

TOKEN = "test-token-1"
TIME = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")
HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")


class Answer:
    def __init__(self, status, headers, data):
        self.status = status
        self.headers = headers
        self.data = data
        try:
            self.json = json.loads(data.decode("utf-8"))
        except ValueError:
            self.json = None

    @property
    def code(self):
        return self.json.get("code") if isinstance(self.json, dict) else None

    def __repr__(self):
        return "Answer(%d, %r)" % (self.status, self.data[:300])


def call(d, method, path, body=None, token=TOKEN, key=True, query=None, raw=None, headers=None):
    """One request over a fresh connection.  key=True: a new Idempotency-Key on writes."""
    connection = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
    target = path + ("?" + urlencode(query, quote_via=quote) if query else "")
    sent = {"Accept": "application/json"}
    if token is not None:
        sent["Authorization"] = "Bearer " + token
    if key is True and method == "POST" and path != "/v1/ledger/verify":
        sent["Idempotency-Key"] = str(uuid.uuid4())
    elif isinstance(key, str):
        sent["Idempotency-Key"] = key
    payload = raw if raw is not None else (
        None if body is None else json.dumps(body).encode("utf-8"))
    if payload is not None:
        sent["Content-Type"] = "application/json"
    sent.update(headers or {})
    try:
        connection.request(method, target, body=payload, headers=sent)
        response = connection.getresponse()
        return Answer(response.status, dict((k.lower(), v) for k, v in response.getheaders()),
                      response.read())
    finally:
        connection.close()


def ok(answer, status=200):
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    return answer.json


def problem(answer, status, code):
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json
    assert set(body) == {"type", "title", "status", "code", "detail"}
    assert body["type"] == "urn:memprove:problem:" + code
    assert body["status"] == status and body["code"] == code
    assert isinstance(body["title"], str) and isinstance(body["detail"], str)
    return body


@pytest.fixture
def ld(tmp_path):
    daemon = ledgerd.Daemon(tmp_path / "data").start()
    daemon.add_token(TOKEN)
    yield daemon
    daemon.stop()


class World:
    """A Workspace with one Task and one open Session, built through the API."""

    def __init__(self, d, root):
        self.d = d
        self.root = str(root)
        self.workspace = ok(call(d, "POST", "/v1/workspaces/resolve", {"root": self.root}))[
            "workspace"]
        self.task = self.new_task("Fix flaky upload retries")
        self.session = self.new_session(self.task)

    def new_task(self, title):
        return ok(call(self.d, "POST", "/v1/tasks",
                       {"workspace_id": self.workspace["id"], "title": title}), 201)["task"]

    def new_session(self, task, role="implementer", parent=None, name="claude-code"):
        return ok(call(self.d, "POST", "/v1/sessions", {
            "task_id": task["id"], "agent": {"name": name, "role": role},
            "parent_session_id": parent}), 201)["session"]

    def run(self, command="pytest -q", exit_code=0, session=None):
        return ok(call(self.d, "POST", "/v1/sessions/%s/runs" % (session or self.session)["id"], {
            "command": command, "exit_code": exit_code, "started_at": "2026-12-01T09:59:48Z",
            "finished_at": "2026-12-01T10:00:00Z"}), 201)["run"]

    def checkpoint(self, session=None, task=None, **fields):
        body = {"task_id": (task or self.task)["id"], "facts": [], "open_items": [],
                "reaffirm": [], "withdraw": [], "next_action": None, "evidence": []}
        body.update(fields)
        return call(self.d, "POST", "/v1/sessions/%s/checkpoints" % (session or self.session)["id"],
                    body)

    def decide(self, text="Use backoff.", session=None, **fields):
        body = {"task_id": self.task["id"], "text": text, "rationale": None, "alternatives": [],
                "evidence": [], "supersedes": None}
        body.update(fields)
        return call(self.d, "POST", "/v1/sessions/%s/decisions" % (session or self.session)["id"],
                    body)

    def transition(self, to, session=None, evidence=(), task=None):
        return call(self.d, "POST", "/v1/tasks/%s/transition" % (task or self.task)["id"],
                    {"to": to, "session_id": (session or self.session)["id"],
                     "evidence": list(evidence)})

    def capsule(self, task=None):
        return ok(call(self.d, "GET", "/v1/tasks/%s/capsule" % (task or self.task)["id"]))[
            "capsule"]


@pytest.fixture
def world(ld, tmp_path):
    return World(ld, tmp_path / "shop")


def verify(d):
    return ok(call(d, "POST", "/v1/ledger/verify", {}))


def ledger_rows(d):
    with sqlite3.connect(str(d.db_path)) as connection:
        return connection.execute("SELECT seq, op, data, prev, hash FROM ledger ORDER BY pos"
                                  ).fetchall()


def tamper(d, sql, *args):
    connection = sqlite3.connect(str(d.db_path))
    try:
        with connection:
            connection.execute(sql, args)
    finally:
        connection.close()


# ---------------------------------------------------------------------------
# Life
# ---------------------------------------------------------------------------

def test_daemon_json_is_written_on_start_and_removed_on_stop(tmp_path):
    data = tmp_path / "data"
    with ledgerd.Daemon(data) as d:
        written = json.loads((data / "daemon.json").read_text())
        assert written == {"url": "http://127.0.0.1:%d" % d.port, "pid": os.getpid()}
        assert d.url == written["url"] and d.port > 0
        assert not [p for p in data.iterdir() if p.name.endswith(".tmp")]
    assert not (data / "daemon.json").exists()


def test_data_survives_a_restart(tmp_path):
    d = ledgerd.Daemon(tmp_path / "data").start()
    d.add_token(TOKEN)
    world = World(d, tmp_path / "shop")
    key = str(uuid.uuid4())
    first = call(d, "POST", "/v1/tasks", {"workspace_id": world.workspace["id"], "title": "Two"},
                 key=key)
    d.stop()
    with ledgerd.Daemon(tmp_path / "data") as again:
        listed = ok(call(again, "GET", "/v1/tasks", query={"workspace": world.root}))
        assert [t["number"] for t in listed["tasks"]] == [1, 2]
        repeat = call(again, "POST", "/v1/tasks",
                      {"workspace_id": world.workspace["id"], "title": "Two"}, key=key)
        assert (repeat.status, repeat.data) == (first.status, first.data)
        assert verify(again)["ok"] is True


# ---------------------------------------------------------------------------
# Every operation's happy path and record shapes
# ---------------------------------------------------------------------------

TASK_KEYS = ["id", "number", "title", "status", "created_at", "updated_at", "open_items",
             "sessions_open"]
SESSION_KEYS = ["id", "number", "task_id", "task_number", "agent", "parent_session_id",
                "parent_number", "state", "started_at", "ended_at"]
CLAIM_KEYS = ["number", "kind", "text", "state", "session_number", "created_at",
              "reaffirmed_at", "evidence"]
DECISION_KEYS = CLAIM_KEYS + ["rationale", "alternatives", "decision_state", "supersedes"]
RUN_KEYS = ["id", "label", "task_id", "session_id", "session_number", "command", "exit_code",
            "passed", "started_at", "finished_at"]


def test_resolve_workspace_creates_once(ld, tmp_path):
    root = str(tmp_path / "shop")
    first = ok(call(ld, "POST", "/v1/workspaces/resolve", {"root": root}))["workspace"]
    assert list(first) == ["id", "root", "created_at"]
    assert first["root"] == root and TIME.match(first["created_at"])
    entries = verify(ld)["entries"]
    again = ok(call(ld, "POST", "/v1/workspaces/resolve", {"root": root}))["workspace"]
    assert again == first
    assert verify(ld)["entries"] == entries == 1
    other = ok(call(ld, "POST", "/v1/workspaces/resolve", {"root": root + "2"}))["workspace"]
    assert other["id"] != first["id"]


def test_tasks_are_numbered_per_workspace_and_listed_by_number(ld, tmp_path):
    root = str(tmp_path / "a shop é")
    workspace = ok(call(ld, "POST", "/v1/workspaces/resolve", {"root": root}))["workspace"]
    other = ok(call(ld, "POST", "/v1/workspaces/resolve", {"root": str(tmp_path / "b")}))[
        "workspace"]
    made = [ok(call(ld, "POST", "/v1/tasks", {"workspace_id": workspace["id"], "title": t}), 201)[
        "task"] for t in ("One", "Two", "Three")]
    elsewhere = ok(call(ld, "POST", "/v1/tasks", {"workspace_id": other["id"], "title": "X"}),
                   201)["task"]
    assert [t["number"] for t in made] == [1, 2, 3] and elsewhere["number"] == 1
    task = made[0]
    assert list(task) == TASK_KEYS
    assert task["status"] == "open" and task["open_items"] == 0 and task["sessions_open"] == 0
    assert TIME.match(task["created_at"]) and TIME.match(task["updated_at"])

    listed = ok(call(ld, "GET", "/v1/tasks", query={"workspace": root}))  # percent-encoded
    assert listed["workspace"] == workspace
    assert [t["title"] for t in listed["tasks"]] == ["One", "Two", "Three"]
    assert listed["tasks"][0] == task
    assert ld.ops[-1]["query"] == {"workspace": root}


def test_list_tasks_of_an_unknown_workspace_is_empty(ld):
    assert ok(call(ld, "GET", "/v1/tasks", query={"workspace": "/nowhere"})) == {
        "workspace": None, "tasks": []}
    assert ok(call(ld, "GET", "/v1/sessions", query={"workspace": "/nowhere"})) == {
        "sessions": []}


def test_list_tasks_filters_by_status(world):
    second = world.new_task("Second")
    ok(world.transition("active"))
    listed = lambda status: [t["number"] for t in ok(call(  # noqa: E731
        world.d, "GET", "/v1/tasks", query={"workspace": world.root, "status": status}))["tasks"]]
    assert listed("active") == [1]
    assert listed("open") == [second["number"]]
    assert listed("done") == []


def test_sessions_shapes_numbers_parents_and_filters(world):
    session = world.session
    assert list(session) == SESSION_KEYS
    assert session["number"] == 1 and session["task_number"] == 1
    assert session["task_id"] == world.task["id"]
    assert session["agent"] == {"name": "claude-code", "role": "implementer"}
    assert session["parent_session_id"] is None and session["parent_number"] is None
    assert session["state"] == "open" and session["ended_at"] is None
    assert TIME.match(session["started_at"])

    other_task = world.new_task("Other")
    child = world.new_session(world.task, role="reviewer", parent=session["id"], name="sub")
    elsewhere = world.new_session(other_task)
    assert child["number"] == 2 and elsewhere["number"] == 3  # numbered in the Workspace
    assert child["parent_session_id"] == session["id"] and child["parent_number"] == 1
    assert elsewhere["task_number"] == 2

    ended = ok(call(world.d, "POST", "/v1/sessions/%s/end" % child["id"], {"outcome": "abandoned"}))
    assert ended["session"]["state"] == "abandoned" and TIME.match(ended["session"]["ended_at"])

    def numbers(**query):
        query["workspace"] = world.root
        return [s["number"] for s in ok(call(world.d, "GET", "/v1/sessions", query=query))[
            "sessions"]]
    assert numbers() == [1, 2, 3]
    assert numbers(task_id=world.task["id"]) == [1, 2]
    assert numbers(state="open") == [1, 3]
    assert numbers(task_id=world.task["id"], state="open") == [1]
    assert world.capsule()["task"]["sessions_open"] == 1


def test_end_session(world):
    path = "/v1/sessions/%s/end" % world.session["id"]
    session = ok(call(world.d, "POST", path, {"outcome": "ended"}))["session"]
    assert session["state"] == "ended" and session["id"] == world.session["id"]
    problem(call(world.d, "POST", path, {"outcome": "ended"}), 409, "session_not_open")
    problem(call(world.d, "POST", path, {"outcome": "abandoned"}), 409, "session_not_open")
    problem(call(world.d, "POST", "/v1/sessions/nope/end", {"outcome": "ended"}), 404, "not_found")
    problem(call(world.d, "POST", path, {"outcome": "finished"}), 422, "validation_failed")


def test_create_session_checks_task_and_parent(world, tmp_path):
    d = world.d
    agent = {"name": "a", "role": "implementer"}
    problem(call(d, "POST", "/v1/sessions", {"task_id": "nope", "agent": agent,
                                             "parent_session_id": None}), 404, "not_found")
    other = World(d, tmp_path / "other")
    problem(call(d, "POST", "/v1/sessions", {"task_id": world.task["id"], "agent": agent,
                                             "parent_session_id": other.session["id"]}),
            422, "validation_failed")
    problem(call(d, "POST", "/v1/sessions", {"task_id": world.task["id"], "agent": agent,
                                             "parent_session_id": "nope"}),
            422, "validation_failed")
    problem(call(d, "POST", "/v1/sessions", {"task_id": world.task["id"],
                                             "agent": {"name": "a", "role": "Bad Role"},
                                             "parent_session_id": None}),
            422, "validation_failed")


def test_record_run_labels_per_workspace(world, tmp_path):
    first = world.run("pytest -q", 0)
    assert list(first) == RUN_KEYS
    assert first["label"] == "r1" and first["passed"] is True and first["exit_code"] == 0
    assert first["task_id"] == world.task["id"] and first["session_id"] == world.session["id"]
    assert first["session_number"] == 1
    assert first["started_at"] == "2026-12-01T09:59:48Z"
    assert first["finished_at"] == "2026-12-01T10:00:00Z"
    second = world.run("npm test", 1)
    assert second["label"] == "r2" and second["passed"] is False and second["exit_code"] == 1
    other = World(world.d, tmp_path / "other")
    assert other.run()["label"] == "r1"
    problem(call(world.d, "POST", "/v1/sessions/nope/runs", {
        "command": "x", "exit_code": 0, "started_at": "2026-12-01T09:59:48Z",
        "finished_at": "2026-12-01T10:00:00Z"}), 404, "not_found")
    problem(call(world.d, "POST", "/v1/sessions/%s/runs" % world.session["id"], {
        "command": "x", "exit_code": 0, "started_at": "yesterday",
        "finished_at": "2026-12-01T10:00:00Z"}), 422, "validation_failed")
    ok(call(world.d, "POST", "/v1/sessions/%s/end" % world.session["id"], {"outcome": "ended"}))
    with pytest.raises(ledgerd.LedgerdError) as refused:
        ledgerd.memprove_run(world.d.url, TOKEN, world.root, world.session["id"], "x", 0)
    assert (refused.value.status, refused.value.code) == (409, "session_not_open")


def test_transitions(world):
    problem(world.transition("open"), 409, "invalid_transition")
    task = ok(world.transition("active"))["task"]
    assert list(task) == TASK_KEYS and task["status"] == "active"
    problem(world.transition("active"), 409, "invalid_transition")
    problem(world.transition("open"), 409, "invalid_transition")
    problem(world.transition("closed"), 422, "validation_failed")
    passed, failed = world.run("pytest -q", 0), world.run("ruff .", 1)
    problem(world.transition("done"), 422, "evidence_invalid")  # no evidence
    problem(world.transition("done", evidence=[failed["id"]]), 422, "evidence_invalid")
    problem(world.transition("done", evidence=[passed["id"], failed["id"]]), 422,
            "evidence_invalid")
    problem(world.transition("done", evidence=["nope"]), 422, "evidence_invalid")
    other_task = world.new_task("Other")
    other_session = world.new_session(other_task)
    other_run = world.run("pytest -q", 0, session=other_session)
    problem(world.transition("done", evidence=[other_run["id"]]), 422, "evidence_invalid")
    problem(world.transition("done", session=other_session, evidence=[passed["id"]]), 422,
            "validation_failed")
    problem(world.transition("done", session={"id": "nope"}, evidence=[passed["id"]]), 422,
            "validation_failed")
    problem(call(world.d, "POST", "/v1/tasks/nope/transition",
                 {"to": "done", "session_id": world.session["id"], "evidence": []}),
            404, "not_found")
    done = ok(world.transition("done", evidence=[passed["id"]]))["task"]
    assert done["status"] == "done"
    problem(world.transition("active"), 409, "invalid_transition")
    problem(world.transition("done", evidence=[passed["id"]]), 409, "invalid_transition")


def test_transition_needs_an_open_session(world):
    ok(call(world.d, "POST", "/v1/sessions/%s/end" % world.session["id"], {"outcome": "ended"}))
    problem(world.transition("active"), 409, "session_not_open")


def test_open_to_done_directly(world):
    run = world.run()
    assert ok(world.transition("done", evidence=[run["id"]]))["task"]["status"] == "done"


def test_checkpoint_records_claims_in_order_with_evidence_labels(world, tmp_path):
    passed, failed = world.run("pytest -q", 0), world.run("pytest -q", 1)
    answer = ok(world.checkpoint(
        facts=[{"text": "Retries use a fixed 1 s delay.", "evidence": [failed["id"]]},
               {"text": "Uploads pass.", "evidence": [passed["id"], passed["id"]]}],
        open_items=[{"text": "The S3 mock ignores Content-MD5."}],
        next_action={"text": "Compare r1 under load."},
        evidence=[passed["id"]]), 201)["checkpoint"]
    assert list(answer) == ["id", "number", "session_number", "claims", "reaffirmed", "withdrawn"]
    assert answer["number"] == 1 and answer["session_number"] == 1
    assert answer["reaffirmed"] == [] and answer["withdrawn"] == []
    claims = answer["claims"]
    assert [(c["number"], c["kind"]) for c in claims] == [
        (1, "fact"), (2, "fact"), (3, "open_item"), (4, "next_action")]
    assert [c["evidence"] for c in claims] == [["r2", "r1"], ["r1"], ["r1"], ["r1"]]
    for claim in claims:
        assert list(claim) == CLAIM_KEYS
        assert claim["state"] == "active" and claim["reaffirmed_at"] is None
        assert claim["session_number"] == 1 and TIME.match(claim["created_at"])
    assert claims[0]["text"] == "Retries use a fixed 1 s delay."
    assert world.capsule()["task"]["open_items"] == 1

    # A second checkpoint: reaffirm, withdraw, and a next action superseding the first.
    second = ok(world.checkpoint(reaffirm=[1], withdraw=[3, 3], next_action={"text": "Ship."}),
                201)["checkpoint"]
    assert second["number"] == 2 and second["reaffirmed"] == [1] and second["withdrawn"] == [3]
    assert [(c["number"], c["kind"], c["evidence"]) for c in second["claims"]] == [
        (5, "next_action", [])]
    capsule = world.capsule()
    states = dict((c["number"], c["state"]) for c in capsule["claims"])
    assert states == {1: "active", 2: "active", 3: "withdrawn", 4: "superseded", 5: "active"}
    assert TIME.match(capsule["claims"][0]["reaffirmed_at"])
    assert capsule["claims"][1]["reaffirmed_at"] is None
    assert capsule["task"]["open_items"] == 0

    # Evidence may be any Run of the Workspace, but not of another one.
    sibling = world.new_task("Sibling")
    sibling_run = world.run("make", 2, session=world.new_session(sibling))
    assert ok(world.checkpoint(facts=[{"text": "Make fails.", "evidence": [sibling_run["id"]]}]),
              201)["checkpoint"]["claims"][0]["evidence"] == ["r3"]
    elsewhere = World(world.d, tmp_path / "elsewhere").run()
    problem(world.checkpoint(facts=[{"text": "x", "evidence": [elsewhere["id"]]}]), 422,
            "evidence_invalid")
    problem(world.checkpoint(open_items=[{"text": "x"}], evidence=["nope"]), 422,
            "evidence_invalid")


def test_checkpoint_errors(world):
    ok(world.checkpoint(open_items=[{"text": "One"}, {"text": "Two"}]), 201)
    ok(world.checkpoint(withdraw=[2]), 201)
    problem(world.checkpoint(reaffirm=[9]), 422, "claim_not_found")
    problem(world.checkpoint(withdraw=[9]), 422, "claim_not_found")
    problem(world.checkpoint(withdraw=[2]), 409, "claim_not_active")
    problem(world.checkpoint(reaffirm=[2]), 409, "claim_not_active")
    problem(world.checkpoint(reaffirm=[1], withdraw=[1]), 422, "validation_failed")
    problem(world.checkpoint(), 422, "validation_failed")  # records nothing
    problem(world.checkpoint(evidence=[world.run()["id"]]), 422, "validation_failed")
    other = world.new_task("Other")
    problem(world.checkpoint(task=other, open_items=[{"text": "x"}]), 422, "validation_failed")
    problem(call(world.d, "POST", "/v1/sessions/nope/checkpoints", {
        "task_id": world.task["id"], "facts": [], "open_items": [{"text": "x"}], "reaffirm": [],
        "withdraw": [], "next_action": None, "evidence": []}), 404, "not_found")
    ok(call(world.d, "POST", "/v1/sessions/%s/end" % world.session["id"], {"outcome": "ended"}))
    problem(world.checkpoint(open_items=[{"text": "x"}]), 409, "session_not_open")
    # Nothing of the refused checkpoints was written.
    capsule = world.capsule()
    assert [c["number"] for c in capsule["claims"]] == [1, 2]


def test_decisions(world):
    run = world.run("pytest -q", 1)
    first = ok(world.decide("Use exponential backoff with jitter.",
                            rationale="Fixed delays synchronise the clients.",
                            alternatives=["Fixed 1 s delay"], evidence=[run["id"]]), 201)
    assert list(first) == ["decision"] and list(first["decision"]) == ["id", "claim"]
    claim = first["decision"]["claim"]
    assert list(claim) == DECISION_KEYS
    assert claim["number"] == 1 and claim["kind"] == "decision" and claim["state"] == "active"
    assert claim["decision_state"] == "proposed" and claim["supersedes"] is None
    assert claim["rationale"] == "Fixed delays synchronise the clients."
    assert claim["alternatives"] == ["Fixed 1 s delay"] and claim["evidence"] == ["r1"]
    assert isinstance(first["decision"]["id"], str)

    ok(world.checkpoint(facts=[{"text": "A fact.", "evidence": []}]), 201)  # claim 2
    problem(world.decide(supersedes=2), 422, "claim_not_found")   # not a decision
    problem(world.decide(supersedes=7), 422, "claim_not_found")
    second = ok(world.decide("Use a token bucket.", supersedes=1), 201)["decision"]["claim"]
    assert second["number"] == 3 and second["supersedes"] == 1
    problem(world.decide(supersedes=1), 409, "claim_not_active")
    problem(world.decide(evidence=["nope"]), 422, "evidence_invalid")
    problem(world.decide(rationale=""), 422, "validation_failed")
    problem(world.decide(task_id=world.new_task("Other")["id"]), 422, "validation_failed")
    states = dict((c["number"], c["state"]) for c in world.capsule()["claims"])
    assert states == {1: "superseded", 2: "active", 3: "active"}
    ok(call(world.d, "POST", "/v1/sessions/%s/end" % world.session["id"], {"outcome": "ended"}))
    problem(world.decide(), 409, "session_not_open")


def test_capsule_shape(world):
    run = world.run()
    ok(world.checkpoint(open_items=[{"text": "An item."}]), 201)
    ok(world.decide(), 201)
    capsule = world.capsule()
    assert list(capsule) == ["task", "sessions", "claims", "runs", "ledger"]
    assert capsule["task"]["id"] == world.task["id"] and capsule["task"]["open_items"] == 1
    assert [s["id"] for s in capsule["sessions"]] == [world.session["id"]]
    assert [c["number"] for c in capsule["claims"]] == [1, 2]
    assert list(capsule["claims"][1]) == DECISION_KEYS
    assert capsule["runs"] == [run]
    assert capsule["ledger"] == {"entries": verify(world.d)["entries"],
                                 "head": verify(world.d)["head"]}
    problem(call(world.d, "GET", "/v1/tasks/nope/capsule"), 404, "not_found")


# ---------------------------------------------------------------------------
# The ledger's hash chain
# ---------------------------------------------------------------------------

def test_empty_ledger_verifies(ld):
    assert verify(ld) == {"ok": True, "entries": 0, "head": "0" * 64, "first_bad": None}


def test_chain_verifies_after_many_writes_and_matches_the_rule(world):
    for index in range(10):
        world.run("cmd %d" % index, index % 2)
        ok(world.checkpoint(facts=[{"text": "Fact %d é" % index, "evidence": []}]), 201)
    result = verify(world.d)
    rows = ledger_rows(world.d)
    assert result["ok"] is True and result["first_bad"] is None
    assert result["entries"] == len(rows) == 3 + 20
    prev = "0" * 64
    for seq, (row_seq, op, data, row_prev, row_hash) in enumerate(rows, 1):
        assert row_seq == seq and row_prev == prev and HEX64.match(row_hash)
        entry = {"seq": row_seq, "op": op, "data": json.loads(data), "prev": row_prev}
        text = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert hashlib.sha256((prev + text).encode("utf-8")).hexdigest() == row_hash
        prev = row_hash
    assert result["head"] == prev
    assert [row[1] for row in rows[:3]] == ["resolveWorkspace", "createTask", "createSession"]


def test_tampered_data_is_a_hash_mismatch(world):
    for index in range(5):
        world.run("cmd %d" % index)
    tamper(world.d, "UPDATE ledger SET data = ? WHERE seq = 5", json.dumps({"forged": True}))
    result = verify(world.d)
    assert result["ok"] is False
    assert result["first_bad"] == {"seq": 5, "reason": "hash_mismatch"}
    assert result["entries"] == 8


def test_tampered_prev_is_a_prev_mismatch(world):
    for index in range(5):
        world.run("cmd %d" % index)
    tamper(world.d, "UPDATE ledger SET prev = ? WHERE seq = 4", "f" * 64)
    assert verify(world.d)["first_bad"] == {"seq": 4, "reason": "prev_mismatch"}


def test_tampered_seq_is_a_seq_mismatch(world):
    tamper(world.d, "UPDATE ledger SET seq = 7 WHERE seq = 2")
    assert verify(world.d)["first_bad"] == {"seq": 7, "reason": "seq_mismatch"}


def test_concurrent_writes_never_fork_the_chain(world):
    answers = []

    def writer(index):
        answers.append(call(world.d, "POST", "/v1/sessions/%s/runs" % world.session["id"], {
            "command": "cmd %d" % index, "exit_code": 0, "started_at": "2026-12-01T09:59:48Z",
            "finished_at": "2026-12-01T10:00:00Z"}))
    threads = [threading.Thread(target=writer, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a.status for a in answers) == [201] * 16
    assert sorted(int(a.json["run"]["label"][1:]) for a in answers) == list(range(1, 17))
    result = verify(world.d)
    assert (result["ok"], result["entries"]) == (True, 3 + 16)


# ---------------------------------------------------------------------------
# Idempotency
# ---------------------------------------------------------------------------

def test_same_key_same_body_answers_the_first_answer_and_writes_nothing(world):
    body = {"workspace_id": world.workspace["id"], "title": "Once"}
    key = str(uuid.uuid4())
    first = call(world.d, "POST", "/v1/tasks", body, key=key)
    entries = verify(world.d)["entries"]
    again = call(world.d, "POST", "/v1/tasks", dict(reversed(list(body.items()))), key=key)
    assert (again.status, again.data) == (first.status, first.data)
    assert first.status == 201
    assert verify(world.d)["entries"] == entries
    titles = [t["title"] for t in ok(call(world.d, "GET", "/v1/tasks",
                                          query={"workspace": world.root}))["tasks"]]
    assert titles.count("Once") == 1


def test_same_key_other_body_is_refused(world):
    key = str(uuid.uuid4())
    ok(call(world.d, "POST", "/v1/tasks", {"workspace_id": world.workspace["id"], "title": "A"},
            key=key), 201)
    entries = verify(world.d)["entries"]
    problem(call(world.d, "POST", "/v1/tasks",
                 {"workspace_id": world.workspace["id"], "title": "B"}, key=key),
            422, "idempotency_key_reused")
    problem(call(world.d, "POST", "/v1/workspaces/resolve", {"root": "/elsewhere"}, key=key),
            422, "idempotency_key_reused")
    assert verify(world.d)["entries"] == entries


def test_a_refusal_is_kept_under_its_key_too(world):
    key = str(uuid.uuid4())
    path = "/v1/sessions/%s/end" % world.session["id"]
    ok(call(world.d, "POST", path, {"outcome": "ended"}))
    first = call(world.d, "POST", path, {"outcome": "ended"}, key=key)
    problem(first, 409, "session_not_open")
    again = call(world.d, "POST", path, {"outcome": "ended"}, key=key)
    assert (again.status, again.data) == (first.status, first.data)


def test_writes_need_a_key_and_verify_does_not(world):
    problem(call(world.d, "POST", "/v1/tasks",
                 {"workspace_id": world.workspace["id"], "title": "A"}, key=None),
            422, "validation_failed")
    assert verify(world.d)["ok"] is True   # sent without a key


def test_a_retry_in_flight_waits_for_the_first_answer(world):
    d = world.d
    gate = d.hold("createTask")
    body = {"workspace_id": world.workspace["id"], "title": "Slow"}
    key = str(uuid.uuid4())
    answers = {}

    def send(name):
        answers[name] = call(d, "POST", "/v1/tasks", body, key=key)
    first = threading.Thread(target=send, args=("first",))
    first.start()
    assert gate.wait_arrived(timeout=10)
    retry = threading.Thread(target=send, args=("retry",))
    retry.start()
    assert d.wait_for_waiters(1, timeout=10)   # the retry waits on the first, not at the gate
    other = call(d, "POST", "/v1/tasks", dict(body, title="Other"), key=key)
    problem(other, 422, "idempotency_key_reused")
    gate.release()
    first.join(10)
    retry.join(10)
    assert answers["first"].status == 201
    assert (answers["retry"].status, answers["retry"].data) == (201, answers["first"].data)
    tasks = ok(call(d, "GET", "/v1/tasks", query={"workspace": world.root}))["tasks"]
    assert [t["title"] for t in tasks].count("Slow") == 1
    assert [e["op"] for e in ledger_entries(d)].count("createTask") == 2  # world's + this one


def ledger_entries(d):
    return [{"seq": s, "op": o, "data": json.loads(data)} for s, o, data, _, _ in ledger_rows(d)]


# ---------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------

def test_missing_unknown_and_revoked_tokens(ld):
    query = {"workspace": "/w"}
    problem(call(ld, "GET", "/v1/tasks", query=query, token=None), 401, "unauthenticated")
    problem(call(ld, "GET", "/v1/tasks", query=query, token="nobody"), 401, "unauthenticated")
    problem(call(ld, "GET", "/v1/tasks", query=query, token=None,
                 headers={"Authorization": "Basic " + TOKEN}), 401, "unauthenticated")
    problem(call(ld, "GET", "/nowhere", token=None), 401, "unauthenticated")
    ok(call(ld, "GET", "/v1/tasks", query=query))
    ld.revoke_token(TOKEN)
    problem(call(ld, "GET", "/v1/tasks", query=query), 401, "token_revoked")
    problem(call(ld, "POST", "/v1/ledger/verify", {}), 401, "token_revoked")


def test_rotation_takes_effect_on_the_next_request(ld):
    query = {"workspace": "/w"}
    ok(call(ld, "GET", "/v1/tasks", query=query))
    ld.add_token("test-token-2")
    ld.remove_token(TOKEN)
    problem(call(ld, "GET", "/v1/tasks", query=query), 401, "unauthenticated")
    ok(call(ld, "GET", "/v1/tasks", query=query, token="test-token-2"))
    # The file is read on every request: a hand edit counts too.
    ld.tokens_path.write_text(json.dumps({"tokens": {TOKEN: {
        "scopes": ["mcp-read"], "roles": "*", "revoked": False}}}))
    problem(call(ld, "GET", "/v1/tasks", query=query, token="test-token-2"), 401,
            "unauthenticated")
    ok(call(ld, "GET", "/v1/tasks", query=query))


def test_scopes(world):
    d = world.d
    d.add_token("reader", scopes=("mcp-read",))
    d.add_token("writer", scopes=("mcp-write",))
    ok(call(d, "GET", "/v1/tasks", query={"workspace": world.root}, token="reader"))
    ok(call(d, "POST", "/v1/ledger/verify", {}, token="reader"))
    ok(call(d, "GET", "/v1/tasks/%s/capsule" % world.task["id"], token="reader"))
    problem(call(d, "POST", "/v1/tasks", {"workspace_id": world.workspace["id"], "title": "x"},
                 token="reader"), 403, "scope_missing")
    problem(call(d, "POST", "/v1/ledger/verify", {}, token="writer"), 403, "scope_missing")
    problem(call(d, "GET", "/v1/sessions", query={"workspace": world.root}, token="writer"),
            403, "scope_missing")
    ok(call(d, "POST", "/v1/tasks", {"workspace_id": world.workspace["id"], "title": "x"},
            token="writer"), 201)


def test_roles(world):
    d = world.d
    d.add_token("implementer", roles=["implementer"])
    body = {"task_id": world.task["id"], "agent": {"name": "a", "role": "reviewer"},
            "parent_session_id": None}
    problem(call(d, "POST", "/v1/sessions", body, token="implementer"), 403, "role_forbidden")
    body["agent"]["role"] = "implementer"
    ok(call(d, "POST", "/v1/sessions", body, token="implementer"), 201)
    body["agent"]["role"] = "reviewer"
    ok(call(d, "POST", "/v1/sessions", body), 201)   # roles "*"


# ---------------------------------------------------------------------------
# Strict requests
# ---------------------------------------------------------------------------

def test_bodies_are_checked_strictly(world):
    d = world.d
    wid = world.workspace["id"]
    refused = [
        ("/v1/tasks", {"workspace_id": wid, "title": "x", "extra": 1}),        # unknown field
        ("/v1/tasks", {"workspace_id": wid}),                                  # missing field
        ("/v1/tasks", {"workspace_id": wid, "title": 3}),                      # wrong type
        ("/v1/tasks", {"workspace_id": wid, "title": "   "}),                  # empty text
        ("/v1/tasks", {"workspace_id": wid, "title": "x" * 201}),              # too long
        ("/v1/tasks", ["workspace_id", "title"]),                              # not an object
        ("/v1/workspaces/resolve", {"root": "relative/path"}),
        ("/v1/sessions/%s/runs" % world.session["id"], {
            "command": "x", "exit_code": True, "started_at": "2026-12-01T09:59:48Z",
            "finished_at": "2026-12-01T10:00:00Z"}),                           # bool, not int
        ("/v1/ledger/verify", {"extra": True}),
    ]
    for path, body in refused:
        problem(call(d, "POST", path, body), 422, "validation_failed")
    for raw in (b"{not json", b'{"workspace_id": "a", "workspace_id": "b", "title": "x"}',
                b'{"workspace_id": NaN, "title": "x"}', b""):
        problem(call(d, "POST", "/v1/tasks", raw=raw), 422, "validation_failed")
    problem(world.checkpoint(facts=[{"text": "x"}]), 422, "validation_failed")  # no evidence
    problem(world.checkpoint(facts=[{"text": "x", "evidence": [], "runs": []}]), 422,
            "validation_failed")
    problem(world.checkpoint(next_action="Ship."), 422, "validation_failed")
    problem(world.checkpoint(reaffirm=[0]), 422, "validation_failed")
    problem(world.checkpoint(reaffirm=["1"]), 422, "validation_failed")
    problem(world.decide(alternatives="one"), 422, "validation_failed")
    # The queries too.
    problem(call(d, "GET", "/v1/tasks"), 422, "validation_failed")
    problem(call(d, "GET", "/v1/tasks", query={"workspace": world.root, "status": "closed"}),
            422, "validation_failed")
    problem(call(d, "GET", "/v1/tasks", query={"workspace": world.root, "limit": "3"}),
            422, "validation_failed")
    problem(call(d, "GET", "/v1/sessions", query={"workspace": world.root, "state": "ended"}),
            422, "validation_failed")
    # Nothing was written by any of them.
    assert verify(d)["entries"] == 3


def test_unknown_paths_and_methods_are_not_found(ld):
    problem(call(ld, "GET", "/v1/nothing"), 404, "not_found")
    problem(call(ld, "GET", "/v1/tasks/"), 404, "not_found")
    problem(call(ld, "DELETE", "/v1/tasks"), 404, "not_found")
    problem(call(ld, "GET", "/v1/ledger/verify"), 404, "not_found")
    assert [op["op"] for op in ld.ops] == [None, None, None, None]


# ---------------------------------------------------------------------------
# Test controls: ops, faults, hold, serve_capsule
# ---------------------------------------------------------------------------

def test_ops_are_recorded_in_arrival_order(world):
    d = world.d
    d.clear_ops()
    assert d.ops == []
    call(d, "GET", "/v1/tasks", query={"workspace": world.root, "status": "open"})
    call(d, "POST", "/v1/ledger/verify", {}, token="wrong")
    ops = d.ops
    assert [(o["op"], o["method"], o["status"]) for o in ops] == [
        ("listTasks", "GET", 200), ("verifyLedger", "POST", 401)]
    assert ops[0]["path"] == "/v1/tasks"
    assert ops[0]["query"] == {"workspace": world.root, "status": "open"}
    assert ops[0]["body"] is None
    assert ops[0]["headers"]["authorization"] == "Bearer " + TOKEN
    assert ops[0]["headers"]["accept"] == "application/json"
    assert ops[1]["body"] == {}
    assert set(ops[0]) == {"op", "method", "path", "query", "headers", "body", "status"}


def create_task_body(world, title="Faulty"):
    return {"workspace_id": world.workspace["id"], "title": title}


def task_titles(world):
    return [t["title"] for t in ok(call(world.d, "GET", "/v1/tasks",
                                        query={"workspace": world.root}))["tasks"]]


def test_fault_delay(world):
    world.d.inject("delay", op="listTasks", seconds=0.3)
    started = time.monotonic()
    assert task_titles(world) == ["Fix flaky upload retries"]
    assert time.monotonic() - started >= 0.3


def test_fault_status500_does_not_execute(world):
    world.d.inject("status500", op="createTask")
    answer = call(world.d, "POST", "/v1/tasks", create_task_body(world))
    assert answer.status == 500 and answer.json is None
    assert answer.headers["content-type"].startswith("text/plain")
    assert "Faulty" not in task_titles(world)
    assert world.d.ops[-2]["status"] == 500


def test_fault_garbage(world):
    world.d.inject("garbage")
    answer = call(world.d, "GET", "/v1/tasks", query={"workspace": world.root})
    assert answer.status == 200 and answer.json is None and answer.data


def test_fault_truncated_executes_and_the_retry_gets_the_whole_answer(world):
    world.d.inject("truncated", op="createTask")
    key = str(uuid.uuid4())
    with pytest.raises(http.client.IncompleteRead):
        call(world.d, "POST", "/v1/tasks", create_task_body(world), key=key)
    assert task_titles(world).count("Faulty") == 1
    again = call(world.d, "POST", "/v1/tasks", create_task_body(world), key=key)
    assert ok(again, 201)["task"]["title"] == "Faulty"
    assert task_titles(world).count("Faulty") == 1


def test_fault_drop_before_does_not_execute(world):
    world.d.inject("drop_before", op="createTask")
    key = str(uuid.uuid4())
    entries = verify(world.d)["entries"]
    with pytest.raises(http.client.RemoteDisconnected):
        call(world.d, "POST", "/v1/tasks", create_task_body(world), key=key)
    assert verify(world.d)["entries"] == entries
    assert "Faulty" not in task_titles(world)
    assert world.d.ops[-3]["op"] == "createTask" and world.d.ops[-3]["status"] is None
    ok(call(world.d, "POST", "/v1/tasks", create_task_body(world), key=key), 201)
    assert task_titles(world).count("Faulty") == 1


def test_fault_drop_after_commits_the_write(world):
    world.d.inject("drop_after", op="createCheckpoint")
    key = str(uuid.uuid4())
    body = {"task_id": world.task["id"], "facts": [], "open_items": [{"text": "Dropped."}],
            "reaffirm": [], "withdraw": [], "next_action": None, "evidence": []}
    path = "/v1/sessions/%s/checkpoints" % world.session["id"]
    with pytest.raises(http.client.RemoteDisconnected):
        call(world.d, "POST", path, body, key=key)
    assert [c["text"] for c in world.capsule()["claims"]] == ["Dropped."]
    assert ledger_entries(world.d)[-1]["op"] == "createCheckpoint"
    retry = ok(call(world.d, "POST", path, body, key=key), 201)["checkpoint"]
    assert retry["claims"][0]["text"] == "Dropped."
    assert [c["text"] for c in world.capsule()["claims"]] == ["Dropped."]


def test_fault_huge(world):
    world.d.inject("huge", op="getTaskCapsule")
    connection = http.client.HTTPConnection("127.0.0.1", world.d.port, timeout=10)
    try:
        connection.request("GET", "/v1/tasks/%s/capsule" % world.task["id"],
                           headers={"Authorization": "Bearer " + TOKEN})
        response = connection.getresponse()
        assert response.status == 200
        assert int(response.getheader("Content-Length")) == 65 * 1024 * 1024 + 1
        assert response.read(4096) == b"\x00" * 4096
    finally:
        connection.close()
    assert world.capsule()["task"]["id"] == world.task["id"]   # the next one is whole


def test_fault_redirect_is_not_followed_by_http_client(world):
    world.d.inject("redirect", op="verifyLedger")
    answer = call(world.d, "POST", "/v1/ledger/verify", {})
    assert answer.status == 302 and answer.headers["location"] == "http://203.0.113.1/"


def test_faults_count_and_aim(world):
    d = world.d
    d.inject("status500", op="listSessions", count=2)
    assert task_titles(world)                       # another operation is untouched
    query = {"workspace": world.root}
    assert [call(d, "GET", "/v1/sessions", query=query).status for _ in range(3)] == [
        500, 500, 200]
    with pytest.raises(ValueError):
        d.inject("explode")
    with pytest.raises(ValueError):
        d.inject("delay")


def test_hold_blocks_a_read_until_released(world):
    d = world.d
    gate = d.hold("listTasks")
    answers = []
    thread = threading.Thread(target=lambda: answers.append(
        call(d, "GET", "/v1/tasks", query={"workspace": world.root})))
    thread.start()
    assert gate.wait_arrived(timeout=10)
    assert answers == []
    assert d.ops[-1]["op"] == "listTasks" and d.ops[-1]["status"] is None
    gate.release()
    thread.join(10)
    assert answers[0].status == 200 and d.ops[-1]["status"] == 200


def test_serve_capsule(world):
    d = world.d
    body = {"capsule": {"task": {"id": "t-1"}, "anything": ["as", "given"]}}
    d.serve_capsule("t-1", body)
    assert ok(call(d, "GET", "/v1/tasks/t-1/capsule")) == body
    problem(call(d, "GET", "/v1/tasks/t-1/capsule", token=None), 401, "unauthenticated")
    d.add_token("writer", scopes=("mcp-write",))
    problem(call(d, "GET", "/v1/tasks/t-1/capsule", token="writer"), 403, "scope_missing")
    assert world.capsule()["task"]["id"] == world.task["id"]   # other Tasks as stored
    d.serve_capsule("t-1", None)
    problem(call(d, "GET", "/v1/tasks/t-1/capsule"), 404, "not_found")


def test_rewrite_changes_one_field_of_real_answers(world):
    d = world.d
    d.rewrite("createSession", ("session", "id"), 5)
    d.rewrite("getTaskCapsule", ("capsule", "task", "number"), ledgerd.REMOVE, count=None)
    answer = call(d, "POST", "/v1/sessions", {
        "task_id": world.task["id"], "agent": {"name": "rewritten", "role": "implementer"},
        "parent_session_id": None})
    session = ok(answer, 201)["session"]
    assert session["id"] == 5 and session["agent"]["name"] == "rewritten"
    stored = call(d, "GET", "/v1/sessions", query={"workspace": world.root}).json["sessions"]
    assert [s["agent"]["name"] for s in stored] == ["claude-code", "rewritten"]   # executed
    assert all(isinstance(s["id"], str) for s in stored)
    second = ok(call(d, "POST", "/v1/sessions", {
        "task_id": world.task["id"], "agent": {"name": "plain", "role": "implementer"},
        "parent_session_id": None}), 201)["session"]
    assert isinstance(second["id"], str)                          # count 1: used up
    for _ in range(2):
        assert "number" not in world.capsule()["task"]            # count None: every one
    problem(call(d, "GET", "/v1/tasks/nope/capsule"), 404, "not_found")   # 2xx only
    d.clear_faults()
    assert world.capsule()["task"]["number"] == 1
    with pytest.raises(ValueError):
        d.rewrite("explode", ("x",), 1)


def test_lone_surrogates_in_texts_are_kept_and_answered_unchanged(world):
    d = world.d
    title = "fix \ud800 bug \udfff"
    raw = ('{"workspace_id":"%s","title":"fix \\ud800 bug \\udfff"}'
           % world.workspace["id"]).encode("ascii")
    task = ok(call(d, "POST", "/v1/tasks", raw=raw), 201)["task"]
    assert task["title"] == title
    session = world.new_session(task, name="agent \udc80")
    assert session["agent"]["name"] == "agent \udc80"
    claim = ok(call(d, "POST", "/v1/sessions/%s/decisions" % session["id"], {
        "task_id": task["id"], "text": "half \ud83d", "rationale": None, "alternatives": [],
        "evidence": [], "supersedes": None}), 201)["decision"]["claim"]
    assert claim["text"] == "half \ud83d"
    capsule = world.capsule(task)
    assert capsule["task"]["title"] == title
    assert capsule["claims"][0]["text"] == "half \ud83d"
    assert [t["title"] for t in task_titles_raw(world)][-1] == title
    assert ok(call(d, "POST", "/v1/ledger/verify", {}))["ok"] is True
    # Ids and paths still may not hold one.
    problem(call(d, "POST", "/v1/tasks", {"workspace_id": "w\ud800", "title": "x"}), 422,
            "validation_failed")
    problem(call(d, "POST", "/v1/workspaces/resolve", {"root": "/tmp/ws\udcff"}), 422,
            "validation_failed")


def task_titles_raw(world):
    return call(world.d, "GET", "/v1/tasks", query={"workspace": world.root}).json["tasks"]


# ---------------------------------------------------------------------------
# memprove run
# ---------------------------------------------------------------------------

def test_memprove_run_appends_the_line_and_returns_the_run(world, tmp_path):
    root = tmp_path / "shop"
    first = ledgerd.memprove_run(world.d.url, TOKEN, root, world.session["id"], "pytest -q", 0,
                                 started_at="2026-12-01T09:59:48Z",
                                 finished_at="2026-12-01T10:00:00Z")
    second = ledgerd.memprove_run(world.d.url, TOKEN, str(root), world.session["id"], "ruff .", 1)
    assert first["label"] == "r1" and first["passed"] is True
    assert second["label"] == "r2" and second["passed"] is False
    assert TIME.match(second["started_at"]) and TIME.match(second["finished_at"])
    lines = [json.loads(line) for line in
             (root / ".memprove" / "runs.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    assert list(lines[0]) == ["label", "id", "task_id", "session_id", "command", "exit_code",
                              "passed", "started_at", "finished_at"]
    assert lines[0] == dict((k, first[k]) for k in lines[0])
    assert lines[1]["label"] == "r2" and lines[1]["exit_code"] == 1
    assert world.capsule()["runs"] == [first, second]
    assert "idempotency-key" in world.d.ops[-2]["headers"]


# ---------------------------------------------------------------------------
# By hand
# ---------------------------------------------------------------------------

def test_cli_prints_its_line_and_serves(tmp_path):
    data = tmp_path / "by hand"
    script = str(Path(ledgerd.__file__))
    process = subprocess.Popen([sys.executable, script, "--data-dir", str(data)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True)
    try:
        first = process.stdout.readline()
        found = re.match(r"\Aledgerd listening on (http://127\.0\.0\.1:([0-9]+)) \(data dir (.+)\)\n\Z",
                         first)
        assert found, first
        assert found.group(3) == str(data.resolve())
        second = process.stdout.readline()
        assert "export MEMPROVE_DATA_DIR=" in second and "MEMPROVE_TOKEN_FILE=" in second
        token_file = data / "token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert json.loads((data / "daemon.json").read_text())["url"] == found.group(1)
        connection = http.client.HTTPConnection("127.0.0.1", int(found.group(2)), timeout=10)
        connection.request("POST", "/v1/ledger/verify", body=b"{}",
                           headers={"Authorization": "Bearer " + token})
        assert json.loads(connection.getresponse().read())["ok"] is True
        connection.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert process.returncode == 0
    assert not (data / "daemon.json").exists()


def test_cli_help():
    done = subprocess.run([sys.executable, str(Path(ledgerd.__file__)), "--help"],
                          stdout=subprocess.PIPE, universal_newlines=True, timeout=30)
    assert done.returncode == 0 and "--data-dir" in done.stdout and "--token" in done.stdout
    assert "ledgerd.py run" in done.stdout


# -- `ledgerd.py run -- COMMAND`: memprove run by hand (issue 31, item 9) ------------------

def ledgerd_run(args, env, cwd):
    return subprocess.run([sys.executable, str(Path(ledgerd.__file__)), "run"] + args,
                          cwd=str(cwd), env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)


def runs_lines(workspace):
    return [json.loads(line) for line in
            (workspace / ".memprove" / "runs.jsonl").read_text("utf-8").splitlines()]


def test_run_records_what_complete_accepts(hserve, config, daemon, workspace, make_env, tmp_path):
    """A real command run through `ledgerd.py run`, from a subfolder of the Workspace, is
    recorded as memprove run records it: the built .pyz's `complete` refuses the failing
    run and completes the Task once the same command passes, which the daemon holds as
    passed."""
    from hardening_support import begun_server, call_tool
    server, begun = begun_server(hserve, config, "By hand")
    below = workspace / "src"
    below.mkdir()
    env = make_env(config.env())
    outcome = tmp_path / "outcome"          # what the "tests" give: failing, then fixed
    script = "import os, sys; print('in', os.getcwd()); sys.exit(int(open(sys.argv[1]).read()))"
    command = [sys.executable, "-c", script, str(outcome)]
    outcome.write_text("3")
    failing = ledgerd_run(["--"] + command, env, below)
    assert failing.returncode == 3, failing.stderr
    assert failing.stdout == "in %s\n" % below
    assert re.search(r"^ledgerd\.py run: r1 failed \(exit 3\), recorded in ", failing.stderr, re.M)
    assert call_tool(server, "complete")[0] == "runs_failing"
    outcome.write_text("0")
    passing = ledgerd_run(["--"] + command, env, below)
    assert passing.returncode == 0, passing.stderr
    lines = runs_lines(workspace)
    assert [list(line) for line in lines] == [
        ["label", "id", "task_id", "session_id", "command", "exit_code", "passed",
         "started_at", "finished_at"]] * 2
    assert [(line["label"], line["exit_code"], line["passed"]) for line in lines] == [
        ("r1", 3, False), ("r2", 0, True)]
    # One line a shell runs as the same words.
    assert [shlex.split(line["command"]) for line in lines] == [command] * 2
    assert {line["session_id"] for line in lines} == {begun["session_id"]}
    assert {line["task_id"] for line in lines} == {begun["task_id"]}
    assert all(TIME.match(line["started_at"]) and line["started_at"] <= line["finished_at"]
               for line in lines)
    code, completed = call_tool(server, "complete")
    assert code == "ok", completed
    assert (completed["status"], completed["evidence"]) == ("done", ["r2"])
    assert server.close() == 0


def test_run_without_a_session_runs_nothing(config, daemon, workspace, make_env, tmp_path):
    marker = tmp_path / "ran"
    done = ledgerd_run(["--", sys.executable, "-c", "open(%r, 'w').close()" % str(marker)],
                       make_env(config.env()), workspace)
    assert done.returncode == ledgerd.RUN_NOT_RECORDED
    assert "has no Session: call `begin` first" in done.stderr
    assert "nothing was run" in done.stderr
    assert not marker.exists()
    assert not (workspace / ".memprove" / "runs.jsonl").exists()
    assert [op["op"] for op in daemon.ops] == []


def test_run_of_a_missing_command_records_a_failed_run(hserve, config, daemon, workspace,
                                                       make_env):
    from hardening_support import begun_server
    server, begun = begun_server(hserve, config, "Missing")
    assert server.close() == 0
    done = ledgerd_run(["--", "no-such-command-31"], make_env(config.env()), workspace)
    assert done.returncode == 127
    assert "no-such-command-31: command not found" in done.stderr
    assert [(line["command"], line["exit_code"], line["passed"]) for line in
            runs_lines(workspace)] == [("no-such-command-31", 127, False)]


def test_run_usage():
    done = subprocess.run([sys.executable, str(Path(ledgerd.__file__)), "run", "--", ],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=30)
    assert done.returncode == 2 and "no COMMAND after --" in done.stderr
    helped = subprocess.run([sys.executable, str(Path(ledgerd.__file__)), "run", "--help"],
                            stdout=subprocess.PIPE, universal_newlines=True, timeout=30)
    assert helped.returncode == 0 and "memprove run" in helped.stdout


# -- the controls issue 18's tests need ------------------------------------------------

def test_a_gate_is_a_barrier_for_count_arrivals(world):
    """wait_arrived(count=2) returns once two requests are held; both then run, in turn:
    the second transition to `active` meets an active Task (invalid_transition)."""
    d = world.d
    other = world.new_session(world.task, name="other")
    gate = d.hold("transitionTask")
    answers = []
    threads = [threading.Thread(target=lambda s=session: answers.append(
        world.transition("active", session=s))) for session in (world.session, other)]
    for thread in threads:
        thread.start()
    assert gate.wait_arrived(timeout=10, count=2)
    assert answers == []
    gate.release()
    for thread in threads:
        thread.join(10)
    assert sorted(answer.status for answer in answers) == [200, 409]
    problem(next(answer for answer in answers if answer.status == 409), 409, "invalid_transition")


def test_the_problem_fault_answers_a_code_without_executing(world):
    d = world.d
    d.inject("problem", op="transitionTask", code="invalid_transition")
    problem(world.transition("active"), 409, "invalid_transition")
    assert world.capsule()["task"]["status"] == "open"         # nothing was executed
    assert ok(world.transition("active"))["task"]["status"] == "active"
    with pytest.raises(ValueError):
        d.inject("problem", op="transitionTask")                # a code is needed
    with pytest.raises(ValueError):
        d.inject("status500", code="invalid_transition")        # and only there


def test_set_task_status_changes_the_store_alone(world):
    d = world.d
    entries = len(ledger_rows(d))
    d.set_task_status(world.task["id"], "done")
    assert world.capsule()["task"]["status"] == "done"
    assert len(ledger_rows(d)) == entries
    problem(world.transition("active"), 409, "invalid_transition")


# -- §6 rule 35: runs.jsonl only as a regular file reached without a link -----------------

GITCONFIG = b"[user]\n\tname = Ana\n"


def begun_workspace(hserve, config):
    """A Workspace whose context names a Session (a `begin` through the built .pyz)."""
    from hardening_support import begun_server
    server, begun = begun_server(hserve, config, "Rule 35")
    assert server.close() == 0
    return begun


def not_recorded(done, daemon):
    """The command ran, the daemon has its Run, the line was not written: the runner's own
    status and one sentence saying so."""
    assert done.returncode == ledgerd.RUN_NOT_RECORDED, (done.returncode, done.stderr)
    assert done.stderr.startswith("ledgerd.py run: ") and re.search(
        r"not (recorded|written to runs\.jsonl)", done.stderr), done.stderr
    assert "recordRun" in [op["op"] for op in daemon.ops]


def test_rule35_run_does_not_append_through_a_runs_file_that_is_a_link(
        hserve, config, daemon, workspace, make_env, tmp_path):
    """A repository's .memprove/runs.jsonl is a link to another file of the user's (a fake
    ~/.gitconfig): `ledgerd.py run -- true` leaves that file and the link unchanged and says
    the run was not recorded.  (Before: it appended a JSON line to the file.)"""
    begun_workspace(hserve, config)
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_bytes(GITCONFIG)
    runs = workspace / ".memprove" / "runs.jsonl"
    os.symlink(str(gitconfig), str(runs))
    done = ledgerd_run(["--", "true"], make_env(config.env()), workspace)
    not_recorded(done, daemon)
    assert gitconfig.read_bytes() == GITCONFIG
    assert os.path.islink(str(runs)) and os.readlink(str(runs)) == str(gitconfig)


def test_rule35_run_does_not_append_into_a_memprove_folder_that_is_a_link(
        hserve, config, daemon, workspace, make_env, tmp_path):
    """.memprove itself a link to a folder elsewhere (holding the context and a runs.jsonl):
    nothing appended there, the run not recorded.  (Before: appended through the link.)"""
    begun_workspace(hserve, config)
    elsewhere = tmp_path / "elsewhere"
    os.rename(str(workspace / ".memprove"), str(elsewhere))
    os.symlink(str(elsewhere), str(workspace / ".memprove"))
    (elsewhere / "runs.jsonl").write_bytes(GITCONFIG)
    done = ledgerd_run(["--", "true"], make_env(config.env()), workspace)
    not_recorded(done, daemon)
    assert (elsewhere / "runs.jsonl").read_bytes() == GITCONFIG
    assert os.path.islink(str(workspace / ".memprove"))


def test_rule35_run_with_a_runs_file_that_is_a_fifo_ends_and_writes_nothing(
        hserve, config, daemon, workspace, make_env):
    """runs.jsonl a FIFO nobody reads: the runner ends by itself (the safety bound is
    generous) saying the run was not recorded.  (Before: it waited for a reader for ever.)"""
    begun_workspace(hserve, config)
    runs = workspace / ".memprove" / "runs.jsonl"
    os.mkfifo(str(runs))
    done = ledgerd_run(["--", "true"], make_env(config.env()), workspace)
    not_recorded(done, daemon)
    assert stat.S_ISFIFO(os.lstat(str(runs)).st_mode)


def test_rule35_run_does_not_append_through_a_runs_file_that_is_a_hard_link(
        hserve, config, daemon, workspace, make_env, tmp_path):
    """.memprove/runs.jsonl is a hard link to another file of the user's (a fake
    ~/.gitconfig, another name of the same file): `ledgerd.py run -- true` leaves it
    unchanged and says the run was not recorded, exit 125.  (Before: it appended a JSON
    line to the file, a regular file once opened.)"""
    begun_workspace(hserve, config)
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_bytes(GITCONFIG)
    runs = workspace / ".memprove" / "runs.jsonl"
    os.link(str(gitconfig), str(runs))
    done = ledgerd_run(["--", "true"], make_env(config.env()), workspace)
    assert ledgerd.RUN_NOT_RECORDED == 125
    not_recorded(done, daemon)
    assert gitconfig.read_bytes() == GITCONFIG
    assert os.stat(str(runs)).st_ino == os.stat(str(gitconfig)).st_ino
