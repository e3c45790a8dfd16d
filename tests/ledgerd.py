#!/usr/bin/env python3
"""ledgerd: the reference memprove daemon, for the tests and for trying the MCP server by hand.

It implements the daemon's HTTP API of the contract (contract.md section 3) for real, with the
standard library alone (Python 3.8 or later):

- HTTP on 127.0.0.1 (a free port unless one is given); on start it writes
  ``<data dir>/daemon.json`` = ``{"url": "http://127.0.0.1:<port>", "pid": <pid>}`` (atomically)
  and removes it on stop.
- One SQLite database, ``<data dir>/ledger.sqlite3``, holds the Workspaces, Tasks, Sessions,
  Claims, Checkpoints, Runs, the answers kept for idempotency keys, and the ledger: every write
  appends an entry ``{"seq", "op", "data", "prev", "hash"}`` whose ``hash`` is the SHA-256 (hex)
  of ``prev`` followed by the canonical JSON of the entry without ``hash``; the first ``prev``
  is 64 zeros.  ``verifyLedger`` recomputes that chain from the stored rows.
- Tokens come from ``<data dir>/tokens.json``, read again on every request::

      {"tokens": {"<token>": {"scopes": ["mcp-read", "mcp-write"],
                              "roles": ["implementer", "reviewer"] or "*",
                              "revoked": false}}}

- Every answer that is not 2xx is ``application/problem+json`` with a ``code``.
- Request bodies are checked strictly: unknown, missing or wrongly typed fields are
  ``validation_failed``, so an MCP server that deviates from the contract is caught.

Run it by hand::

    mkdir -p -m 700 "$HOME/memprove-try"        # a folder of your own (contract.md §6 rule 19)
    python3 tests/ledgerd.py --data-dir "$HOME/memprove-try" [--port N] [--token TOKEN]
    export MEMPROVE_DATA_DIR="$HOME/memprove-try" MEMPROVE_TOKEN_FILE="$HOME/memprove-try/token"

It serves until SIGINT or SIGTERM.  Tests drive it from Python::

    d = Daemon(tmp_path / "data").start()       # or: with Daemon(...) as d:
    d.add_token("secret", scopes=("mcp-read", "mcp-write"), roles="*")
    d.revoke_token("secret"); d.remove_token("secret")
    d.ops                  # every request in arrival order: {"op", "method", "path", "query",
                           #   "headers", "body", "status"} (status None until answered, or
                           #   when the connection was dropped); d.clear_ops()
    d.serve_capsule(task_id, {"capsule": ...})  # getTaskCapsule answers that body (None: undo)
    d.inject(fault, op=None, count=1, seconds=None, code=None)   # the next `count` requests
                           #   (count None: all) of operation `op` (None: any) get the fault;
                           #   clear_faults()
    gate = d.hold(op); gate.wait_arrived(timeout=10, count=1); gate.release()
    d.set_task_status(task_id, status)   # as another agent's transition would leave it
    d.rewrite(op, ("session", "id"), 5, count=1)   # the next `count` 2xx answers of `op`
                           #   (count None: all) carry that field changed (value REMOVE:
                           #   deleted; a path the answer lacks: unchanged); what was
                           #   executed and remembered stays as it was
    d.wait_for_waiters(n, timeout=10)  # n retries have waited for a write in flight
    d.close_listener()     # new connections refused; requests in progress still run
    d.stop()

Faults.  Not executed (the operation never runs): ``status500`` (500, text/plain),
``garbage`` (200, not JSON), ``huge`` (200 announcing 65 MiB + 1 bytes, zeros streamed until
the client hangs up), ``redirect`` (302 to http://203.0.113.1/), ``drop_before`` (the
connection closed without an answer).  Executed and committed: ``drop_after`` (then closed
without an answer), ``truncated`` (the real answer's first half under its full
Content-Length, then closed), ``delay`` (answered normally after `seconds`), ``problem``
(the Problem `code` of PROBLEMS, as if the daemon had refused the request).  A write whose
answer was lost this way is answered in full to a retry with the same Idempotency-Key.
``rewrite`` changes one field of an answer that is otherwise real (a daemon answering
values of the wrong type, contract.md section 6 rule 3).

Texts (titles, agent names, claim texts, commands) may hold lone surrogates, as JSON allows
(contract.md section 6 rule 2): they are kept and answered unchanged (stored as a BLOB of their
UTF-8 with surrogates passed through, and hashed that way in the ledger).  Ids and paths may not.

``memprove_run(url, token, workspace_root, session_id, command, exit_code)`` records a Run as
``memprove run`` does (recordRun, then a line in ``<root>/.memprove/runs.jsonl``).  By hand,
where the memprove CLI's ``memprove run`` is not installed, the same from a shell::

    python3 tests/ledgerd.py run [--workspace DIR] [--config-dir DIR] -- pytest -q

runs the command in the Workspace's context Session (the one ``begin`` opened) and exits with
its status (125: nothing recorded, see standard error).
"""

import argparse
import hashlib
import http.client
import http.server
import json
import ntpath
import os
import re
import secrets
import shlex
import signal
import sqlite3
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit

ZERO_HASH = "0" * 64
ALL_SCOPES = ("mcp-read", "mcp-write")
MAX_REQUEST_BODY = 1 << 20          # a request body larger than this is refused
HUGE_LENGTH = 65 * (1 << 20) + 1    # the Content-Length the "huge" fault announces
REDIRECT_TARGET = "http://203.0.113.1/"
FAULTS = ("delay", "status500", "garbage", "truncated", "drop_before", "drop_after", "huge",
          "redirect", "problem")
REMOVE = object()                   # d.rewrite(op, path, REMOVE): the field is deleted

ROLE_PATTERN = re.compile(r"[a-z][a-z0-9-]{0,31}\Z")
TIME_PATTERN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")
SURROGATE = re.compile("[\ud800-\udfff]")

# Problem code -> (HTTP status, title); contract.md section 4, the daemon's rows.
PROBLEMS = {
    "unauthenticated": (401, "The daemon did not accept the token."),
    "token_revoked": (401, "The token has been revoked."),
    "scope_missing": (403, "The token lacks a scope this operation needs."),
    "role_forbidden": (403, "The token's role may not perform this operation."),
    "not_found": (404, "The daemon has no such record."),
    "claim_not_found": (422, "No Claim of this Task has that number."),
    "claim_not_active": (409, "That Claim is already withdrawn or superseded."),
    "session_not_open": (409, "That Session has already ended."),
    "invalid_transition": (409, "The Task cannot move to that status from its current one."),
    "evidence_invalid": (422, "A cited Run does not belong to this Task or did not pass."),
    "validation_failed": (422, "The daemon rejected a field of the request."),
    "idempotency_key_reused": (422, "The daemon saw that write key with a different request."),
    "internal_error": (500, "The daemon failed unexpectedly."),
}


class Problem(Exception):
    """An answer of the daemon that is not 2xx (RFC 9457 problem details)."""

    def __init__(self, code, detail=""):
        Exception.__init__(self, code)
        self.code = code
        self.detail = detail
        self.status = PROBLEMS[code][0]

    def body(self):
        return {"type": "urn:memprove:problem:" + self.code, "title": PROBLEMS[self.code][1],
                "status": self.status, "code": self.code, "detail": self.detail}


def canonical(value):
    """The canonical JSON the ledger hashes: keys sorted, no spaces, not ASCII-escaped."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def utf8(text):
    """UTF-8 bytes of a str; a lone surrogate (JSON allows one) passes through as its three
    bytes, so that a text that has one can still be hashed and stored."""
    return text.encode("utf-8", "surrogatepass")


def entry_hash(entry):
    """SHA-256 (hex) of entry["prev"] followed by the canonical JSON of the entry without hash."""
    fields = {"seq": entry["seq"], "op": entry["op"], "data": entry["data"], "prev": entry["prev"]}
    return hashlib.sha256(utf8(entry["prev"] + canonical(fields))).hexdigest()


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_id():
    return str(uuid.uuid4())


def to_json(value):
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (a canned golden Capsule has one) cannot be UTF-8: escape it.
        text = json.dumps(value, separators=(",", ":"))
    return text


# ---------------------------------------------------------------------------
# Strict checking of bodies and queries.  A checker takes (value, where) and
# returns the value or raises validation_failed naming the field.
# ---------------------------------------------------------------------------

def invalid(where, what):
    return Problem("validation_failed", "%s %s." % (where, what))


def check_object(value, where, fields):
    """`value` must be a JSON object with exactly the keys of `fields` (name -> checker)."""
    if not isinstance(value, dict):
        raise invalid(where, "must be a JSON object")
    for name in value:
        if name not in fields:
            raise invalid(where, "has an unknown field %r" % name)
    for name in fields:
        if name not in value:
            raise invalid(where, "lacks the field %r" % name)
    return dict((name, check(value[name], "%s.%s" % (where, name)))
                for name, check in fields.items())


def obj(fields):
    return lambda value, where: check_object(value, where, fields)


def text(limit):
    def check(value, where):
        if not isinstance(value, str):
            raise invalid(where, "must be a string")
        if not value.strip():
            raise invalid(where, "must not be empty")
        if len(value) > limit:
            raise invalid(where, "is longer than %d characters" % limit)
        return value
    return check


def identifier(value, where):
    if not isinstance(value, str) or not value or len(value) > 200 or SURROGATE.search(value):
        raise invalid(where, "must be an id string")
    return value


def integer(value, where):
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(where, "must be an integer")
    return value


def number(value, where):
    if integer(value, where) < 1:
        raise invalid(where, "must be a number >= 1")
    return value


def one_of(*choices):
    def check(value, where):
        if not isinstance(value, str) or value not in choices:
            raise invalid(where, "must be one of " + ", ".join(choices))
        return value
    return check


def nullable(checker):
    return lambda value, where: None if value is None else checker(value, where)


def list_of(checker, limit=1000):
    def check(value, where):
        if not isinstance(value, list):
            raise invalid(where, "must be a list")
        if len(value) > limit:
            raise invalid(where, "has more than %d items" % limit)
        return [checker(item, "%s[%d]" % (where, index)) for index, item in enumerate(value)]
    return check


def timestamp(value, where):
    if not isinstance(value, str) or not TIME_PATTERN.match(value):
        raise invalid(where, "must be a UTC time YYYY-MM-DDTHH:MM:SSZ")
    return value


def absolute_path(value, where):
    # POSIX and Windows forms on any host (ntpath.isabs("/x") is False from 3.13 on).
    if (not isinstance(value, str) or not (value.startswith("/") or os.path.isabs(value) or
                                           is_windows_absolute(value))
            or "\x00" in value or SURROGATE.search(value)):
        raise invalid(where, "must be an absolute path")
    return value


def is_windows_absolute(value):
    """C:\\x or \\\\server\\share\\x: a server on Windows (or under Wine, where / is Z:)
    names its Workspace so, whatever the daemon's own platform."""
    drive, rest = ntpath.splitdrive(value)
    return bool(drive) and rest[:1] in ("\\", "/")


def role(value, where):
    if not isinstance(value, str) or not ROLE_PATTERN.match(value):
        raise invalid(where, "must match ^[a-z][a-z0-9-]{0,31}$")
    return value


def check_query(pairs, required, optional):
    """Query parameters (name, value) pairs: each at most once, none unknown."""
    query = {}
    for name, value in pairs:
        if name not in required and name not in optional:
            raise invalid("The query", "has an unknown parameter %r" % name)
        if name in query:
            raise invalid("The query", "repeats the parameter %r" % name)
        query[name] = value
    for name, check in required.items():
        if name not in query:
            raise invalid("The query", "lacks the parameter %r" % name)
        query[name] = check(query[name], name)
    for name, check in optional.items():
        if name in query:
            query[name] = check(query[name], name)
    return query


def unique(values):
    seen, kept = set(), []
    for value in values:
        if value not in seen:
            seen.add(value)
            kept.append(value)
    return kept


# ---------------------------------------------------------------------------
# The store: one SQLite connection, used only while holding `lock`.
# ---------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS workspaces (
    id TEXT PRIMARY KEY, root TEXT NOT NULL UNIQUE, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, number INTEGER NOT NULL,
    title TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    UNIQUE (workspace_id, number));
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, task_id TEXT NOT NULL,
    number INTEGER NOT NULL, agent_name TEXT NOT NULL, agent_role TEXT NOT NULL,
    parent_session_id TEXT, state TEXT NOT NULL, started_at TEXT NOT NULL, ended_at TEXT,
    UNIQUE (workspace_id, number));
CREATE TABLE IF NOT EXISTS checkpoints (
    id TEXT PRIMARY KEY, task_id TEXT NOT NULL, session_id TEXT NOT NULL,
    number INTEGER NOT NULL, created_at TEXT NOT NULL, reaffirmed TEXT NOT NULL,
    withdrawn TEXT NOT NULL, UNIQUE (task_id, number));
CREATE TABLE IF NOT EXISTS claims (
    id TEXT PRIMARY KEY, task_id TEXT NOT NULL, number INTEGER NOT NULL, kind TEXT NOT NULL,
    text TEXT NOT NULL, state TEXT NOT NULL, session_id TEXT NOT NULL, checkpoint_id TEXT,
    created_at TEXT NOT NULL, reaffirmed_at TEXT, evidence TEXT NOT NULL,
    rationale TEXT, alternatives TEXT, decision_state TEXT, supersedes INTEGER,
    UNIQUE (task_id, number));
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, task_id TEXT NOT NULL,
    session_id TEXT NOT NULL, number INTEGER NOT NULL, command TEXT NOT NULL,
    exit_code INTEGER NOT NULL, passed INTEGER NOT NULL, started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL, UNIQUE (workspace_id, number));
CREATE TABLE IF NOT EXISTS ledger (
    pos INTEGER PRIMARY KEY, seq INTEGER NOT NULL, op TEXT NOT NULL, data TEXT NOT NULL,
    prev TEXT NOT NULL, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, status INTEGER NOT NULL,
    body TEXT NOT NULL);
"""

TASKS_SQL = """SELECT t.*,
    (SELECT COUNT(*) FROM claims c WHERE c.task_id = t.id AND c.kind = 'open_item'
        AND c.state = 'active') AS open_items,
    (SELECT COUNT(*) FROM sessions s WHERE s.task_id = t.id AND s.state = 'open')
        AS sessions_open
    FROM tasks t"""
SESSIONS_SQL = """SELECT s.*, t.number AS task_number, p.number AS parent_number
    FROM sessions s JOIN tasks t ON t.id = s.task_id
    LEFT JOIN sessions p ON p.id = s.parent_session_id"""
CLAIMS_SQL = """SELECT c.*, s.number AS session_number
    FROM claims c JOIN sessions s ON s.id = c.session_id"""
RUNS_SQL = """SELECT r.*, s.number AS session_number
    FROM runs r JOIN sessions s ON s.id = r.session_id"""


def _stored(value):
    """A parameter as SQLite keeps it: a str with a lone surrogate becomes a BLOB."""
    if isinstance(value, str) and SURROGATE.search(value):
        return utf8(value)
    return value


def _text_row(cursor, values):
    """sqlite3.Row with every BLOB read back as the str it was stored from."""
    return sqlite3.Row(cursor, tuple(value.decode("utf-8", "surrogatepass")
                                     if isinstance(value, bytes) else value for value in values))


class Store:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.conn.row_factory = _text_row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(SCHEMA)

    def close(self):
        with self.lock:
            self.conn.close()

    # -- plumbing --------------------------------------------------------
    def one(self, sql, *args):
        return self.conn.execute(sql, tuple(map(_stored, args))).fetchone()

    def all(self, sql, *args):
        return self.conn.execute(sql, tuple(map(_stored, args))).fetchall()

    def run(self, sql, *args):
        self.conn.execute(sql, tuple(map(_stored, args)))

    def next_number(self, table, column, value):
        row = self.one("SELECT MAX(number) FROM %s WHERE %s = ?" % (table, column), value)
        return (row[0] or 0) + 1

    # -- the ledger ------------------------------------------------------
    def append(self, op, data):
        last = self.one("SELECT seq, hash FROM ledger ORDER BY pos DESC LIMIT 1")
        entry = {"seq": last["seq"] + 1 if last else 1, "op": op, "data": data,
                 "prev": last["hash"] if last else ZERO_HASH}
        entry["hash"] = entry_hash(entry)
        self.run("INSERT INTO ledger (seq, op, data, prev, hash) VALUES (?, ?, ?, ?, ?)",
                 entry["seq"], op, canonical(data), entry["prev"], entry["hash"])
        return entry

    def head(self):
        count = self.one("SELECT COUNT(*) FROM ledger")[0]
        last = self.one("SELECT hash FROM ledger ORDER BY pos DESC LIMIT 1")
        return {"entries": count, "head": last["hash"] if last else ZERO_HASH}

    def verify(self):
        first_bad, entries, prev, head = None, 0, ZERO_HASH, ZERO_HASH
        for row in self.all("SELECT seq, op, data, prev, hash FROM ledger ORDER BY pos"):
            entries += 1
            head = row["hash"]
            if first_bad is not None:
                continue
            if row["seq"] != entries:
                first_bad = {"seq": row["seq"], "reason": "seq_mismatch"}
            elif row["prev"] != prev:
                first_bad = {"seq": row["seq"], "reason": "prev_mismatch"}
            else:
                try:
                    entry = {"seq": row["seq"], "op": row["op"], "data": json.loads(row["data"]),
                             "prev": row["prev"]}
                    good = entry_hash(entry) == row["hash"]
                except (ValueError, TypeError):
                    good = False
                if not good:
                    first_bad = {"seq": row["seq"], "reason": "hash_mismatch"}
            prev = row["hash"]
        return {"ok": first_bad is None, "entries": entries, "head": head, "first_bad": first_bad}

    # -- idempotency -----------------------------------------------------
    def remembered(self, key):
        return self.one("SELECT fingerprint, status, body FROM idempotency WHERE key = ?", key)

    def remember(self, key, fingerprint, status, body):
        self.run("INSERT INTO idempotency (key, fingerprint, status, body) VALUES (?, ?, ?, ?)",
                 key, fingerprint, status, body)

    # -- lookups ---------------------------------------------------------
    def task_row(self, task_id):
        return self.one(TASKS_SQL + " WHERE t.id = ?", task_id)

    def session_row(self, session_id):
        return self.one(SESSIONS_SQL + " WHERE s.id = ?", session_id)

    def claim_row(self, task_id, claim_number):
        return self.one(CLAIMS_SQL + " WHERE c.task_id = ? AND c.number = ?", task_id, claim_number)

    def open_session(self, session_id):
        """The Session named in a path: 404 when unknown, 409 when no longer open."""
        session = self.session_row(session_id)
        if session is None:
            raise Problem("not_found", "No Session has that id.")
        if session["state"] != "open":
            raise Problem("session_not_open", "The Session is %s." % session["state"])
        return session

    def run_labels(self, workspace_id):
        return dict((row["id"], "r%d" % row["number"])
                    for row in self.all("SELECT id, number FROM runs WHERE workspace_id = ?",
                                        workspace_id))

    def evidence_runs(self, workspace_id, run_ids):
        """Run ids cited as evidence: each a Run of the Workspace (failed ones too)."""
        for run_id in run_ids:
            row = self.one("SELECT workspace_id FROM runs WHERE id = ?", run_id)
            if row is None or row["workspace_id"] != workspace_id:
                raise Problem("evidence_invalid", "A cited Run is not a Run of this Workspace.")
        return unique(run_ids)

    def touch_task(self, task_id, now):
        self.run("UPDATE tasks SET updated_at = ? WHERE id = ?", now, task_id)

    def add_claim(self, task, session, kind, claim_text, evidence, now, checkpoint_id=None,
                  decision=None):
        claim_id = new_id()
        claim_number = self.next_number("claims", "task_id", task["id"])
        decision = decision or {}
        self.run("INSERT INTO claims (id, task_id, number, kind, text, state, session_id,"
                 " checkpoint_id, created_at, reaffirmed_at, evidence, rationale, alternatives,"
                 " decision_state, supersedes) VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, NULL,"
                 " ?, ?, ?, ?, ?)",
                 claim_id, task["id"], claim_number, kind, claim_text, session["id"],
                 checkpoint_id, now, json.dumps(evidence), decision.get("rationale"),
                 json.dumps(decision["alternatives"]) if decision else None,
                 decision.get("decision_state"), decision.get("supersedes"))
        return claim_id, claim_number

    # -- records (contract.md section 3, "Records") -----------------------
    def workspace_record(self, row):
        return {"id": row["id"], "root": row["root"], "created_at": row["created_at"]}

    def task_record(self, row):
        return {"id": row["id"], "number": row["number"], "title": row["title"],
                "status": row["status"], "created_at": row["created_at"],
                "updated_at": row["updated_at"], "open_items": row["open_items"],
                "sessions_open": row["sessions_open"]}

    def session_record(self, row):
        return {"id": row["id"], "number": row["number"], "task_id": row["task_id"],
                "task_number": row["task_number"],
                "agent": {"name": row["agent_name"], "role": row["agent_role"]},
                "parent_session_id": row["parent_session_id"],
                "parent_number": row["parent_number"], "state": row["state"],
                "started_at": row["started_at"], "ended_at": row["ended_at"]}

    def claim_record(self, row, labels):
        record = {"number": row["number"], "kind": row["kind"], "text": row["text"],
                  "state": row["state"], "session_number": row["session_number"],
                  "created_at": row["created_at"], "reaffirmed_at": row["reaffirmed_at"],
                  "evidence": [labels[run_id] for run_id in json.loads(row["evidence"])]}
        if row["kind"] == "decision":
            record.update({"rationale": row["rationale"],
                           "alternatives": json.loads(row["alternatives"]),
                           "decision_state": row["decision_state"],
                           "supersedes": row["supersedes"]})
        return record

    def run_record(self, row):
        return {"id": row["id"], "label": "r%d" % row["number"], "task_id": row["task_id"],
                "session_id": row["session_id"], "session_number": row["session_number"],
                "command": row["command"], "exit_code": row["exit_code"],
                "passed": bool(row["passed"]), "started_at": row["started_at"],
                "finished_at": row["finished_at"]}

    def task_of(self, task_id):
        return self.task_record(self.task_row(task_id))

    def session_of(self, session_id):
        return self.session_record(self.session_row(session_id))

    def claims_of(self, task_id, claim_ids):
        task = self.task_row(task_id)
        labels = self.run_labels(task["workspace_id"])
        return [self.claim_record(self.one(CLAIMS_SQL + " WHERE c.id = ?", claim_id), labels)
                for claim_id in claim_ids]


# ---------------------------------------------------------------------------
# Operations: one small function each, (store, request) -> (status, answer).
# Writes run inside a transaction the dispatcher opens and commits.
# ---------------------------------------------------------------------------

def resolve_workspace(store, req):
    body = check_object(req.body, "The body", {"root": absolute_path})
    row = store.one("SELECT * FROM workspaces WHERE root = ?", body["root"])
    if row is None:
        workspace_id, now = new_id(), utc_now()
        store.run("INSERT INTO workspaces (id, root, created_at) VALUES (?, ?, ?)",
                  workspace_id, body["root"], now)
        store.append("resolveWorkspace", {"workspace_id": workspace_id, "root": body["root"],
                                          "at": now})
        row = store.one("SELECT * FROM workspaces WHERE id = ?", workspace_id)
    return 200, {"workspace": store.workspace_record(row)}


def list_tasks(store, req):
    query = check_query(req.query, {"workspace": absolute_path},
                        {"status": one_of("open", "active", "done")})
    workspace = store.one("SELECT * FROM workspaces WHERE root = ?", query["workspace"])
    if workspace is None:
        return 200, {"workspace": None, "tasks": []}
    sql, args = TASKS_SQL + " WHERE t.workspace_id = ?", [workspace["id"]]
    if "status" in query:
        sql, args = sql + " AND t.status = ?", args + [query["status"]]
    tasks = [store.task_record(row) for row in store.all(sql + " ORDER BY t.number", *args)]
    return 200, {"workspace": store.workspace_record(workspace), "tasks": tasks}


def create_task(store, req):
    body = check_object(req.body, "The body", {"workspace_id": identifier, "title": text(200)})
    workspace = store.one("SELECT * FROM workspaces WHERE id = ?", body["workspace_id"])
    if workspace is None:
        raise Problem("not_found", "No Workspace has that id.")
    task_id, now = new_id(), utc_now()
    task_number = store.next_number("tasks", "workspace_id", workspace["id"])
    store.run("INSERT INTO tasks (id, workspace_id, number, title, status, created_at, updated_at)"
              " VALUES (?, ?, ?, ?, 'open', ?, ?)",
              task_id, workspace["id"], task_number, body["title"], now, now)
    store.append("createTask", {"task_id": task_id, "workspace_id": workspace["id"],
                                "number": task_number, "title": body["title"], "at": now})
    return 201, {"task": store.task_of(task_id)}


def get_task_capsule(store, req):
    check_query(req.query, {}, {})
    task = store.task_row(req.ids["task_id"])
    if task is None:
        raise Problem("not_found", "No Task has that id.")
    labels = store.run_labels(task["workspace_id"])
    sessions = store.all(SESSIONS_SQL + " WHERE s.task_id = ? ORDER BY s.number", task["id"])
    claims = store.all(CLAIMS_SQL + " WHERE c.task_id = ? ORDER BY c.number", task["id"])
    runs = store.all(RUNS_SQL + " WHERE r.task_id = ? ORDER BY r.number", task["id"])
    return 200, {"capsule": {
        "task": store.task_record(task),
        "sessions": [store.session_record(row) for row in sessions],
        "claims": [store.claim_record(row, labels) for row in claims],
        "runs": [store.run_record(row) for row in runs],
        "ledger": store.head()}}


TRANSITIONS = {("open", "active"), ("open", "done"), ("active", "done")}


def transition_task(store, req):
    body = check_object(req.body, "The body", {
        "to": one_of("open", "active", "done"), "session_id": identifier,
        "evidence": list_of(identifier)})
    task = store.task_row(req.ids["task_id"])
    if task is None:
        raise Problem("not_found", "No Task has that id.")
    session = store.session_row(body["session_id"])
    if session is None or session["task_id"] != task["id"]:
        raise invalid("session_id", "must name a Session of this Task")
    if session["state"] != "open":
        raise Problem("session_not_open", "The Session is %s." % session["state"])
    if (task["status"], body["to"]) not in TRANSITIONS:
        raise Problem("invalid_transition", "%s to %s." % (task["status"], body["to"]))
    evidence = unique(body["evidence"])
    if body["to"] == "done":
        if not evidence:
            raise Problem("evidence_invalid", "Completing a Task needs passed Runs as evidence.")
        for run_id in evidence:
            run = store.one("SELECT task_id, passed FROM runs WHERE id = ?", run_id)
            if run is None or run["task_id"] != task["id"] or not run["passed"]:
                raise Problem("evidence_invalid", "Each Run must be a passed Run of this Task.")
    now = utc_now()
    store.run("UPDATE tasks SET status = ?, updated_at = ? WHERE id = ?",
              body["to"], now, task["id"])
    store.append("transitionTask", {"task_id": task["id"], "from": task["status"],
                                    "to": body["to"], "session_id": session["id"],
                                    "evidence": evidence, "at": now})
    return 200, {"task": store.task_of(task["id"])}


def list_sessions(store, req):
    query = check_query(req.query, {"workspace": absolute_path},
                        {"task_id": identifier, "state": one_of("open")})
    workspace = store.one("SELECT * FROM workspaces WHERE root = ?", query["workspace"])
    if workspace is None:
        return 200, {"sessions": []}
    sql, args = SESSIONS_SQL + " WHERE s.workspace_id = ?", [workspace["id"]]
    if "task_id" in query:
        sql, args = sql + " AND s.task_id = ?", args + [query["task_id"]]
    if "state" in query:
        sql, args = sql + " AND s.state = ?", args + [query["state"]]
    rows = store.all(sql + " ORDER BY s.number", *args)
    return 200, {"sessions": [store.session_record(row) for row in rows]}


def create_session(store, req):
    body = check_object(req.body, "The body", {
        "task_id": identifier, "agent": obj({"name": text(64), "role": role}),
        "parent_session_id": nullable(identifier)})
    roles = req.token["roles"]
    if roles != "*" and body["agent"]["role"] not in roles:
        raise Problem("role_forbidden", "The token may not act as that role.")
    task = store.task_row(body["task_id"])
    if task is None:
        raise Problem("not_found", "No Task has that id.")
    parent_id = body["parent_session_id"]
    if parent_id is not None:
        parent = store.one("SELECT workspace_id FROM sessions WHERE id = ?", parent_id)
        if parent is None or parent["workspace_id"] != task["workspace_id"]:
            raise invalid("parent_session_id", "must name a Session of this Workspace")
    session_id, now = new_id(), utc_now()
    session_number = store.next_number("sessions", "workspace_id", task["workspace_id"])
    store.run("INSERT INTO sessions (id, workspace_id, task_id, number, agent_name, agent_role,"
              " parent_session_id, state, started_at, ended_at)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, 'open', ?, NULL)",
              session_id, task["workspace_id"], task["id"], session_number,
              body["agent"]["name"], body["agent"]["role"], parent_id, now)
    store.touch_task(task["id"], now)
    store.append("createSession", {"session_id": session_id, "task_id": task["id"],
                                   "number": session_number, "agent": body["agent"],
                                   "parent_session_id": parent_id, "at": now})
    return 201, {"session": store.session_of(session_id)}


def end_session(store, req):
    body = check_object(req.body, "The body", {"outcome": one_of("ended", "abandoned")})
    session = store.open_session(req.ids["session_id"])
    now = utc_now()
    store.run("UPDATE sessions SET state = ?, ended_at = ? WHERE id = ?",
              body["outcome"], now, session["id"])
    store.touch_task(session["task_id"], now)
    store.append("endSession", {"session_id": session["id"], "outcome": body["outcome"],
                                "at": now})
    return 200, {"session": store.session_of(session["id"])}


def checked_claims(store, task, numbers, field):
    """Claim numbers named in `field`: each must exist in the Task and be active."""
    rows = []
    for claim_number in numbers:
        row = store.claim_row(task["id"], claim_number)
        if row is None:
            raise Problem("claim_not_found", "%s names claim %d." % (field, claim_number))
        if row["state"] != "active":
            raise Problem("claim_not_active", "%s names claim %d." % (field, claim_number))
        rows.append(row)
    return rows


def session_task(store, req, task_id):
    """The open Session of the path and its Task, which must be `task_id`."""
    session = store.open_session(req.ids["session_id"])
    if session["task_id"] != task_id:
        raise invalid("task_id", "must be the Session's Task")
    return session, store.task_row(task_id)


def create_checkpoint(store, req):
    body = check_object(req.body, "The body", {
        "task_id": identifier,
        "facts": list_of(obj({"text": text(2000), "evidence": list_of(identifier)})),
        "open_items": list_of(obj({"text": text(2000)})),
        "reaffirm": list_of(number), "withdraw": list_of(number),
        "next_action": nullable(obj({"text": text(2000)})),
        "evidence": list_of(identifier)})
    if not (body["facts"] or body["open_items"] or body["reaffirm"] or body["withdraw"]
            or body["next_action"]):
        raise invalid("The body", "records nothing (facts, open_items, reaffirm, withdraw and"
                      " next_action are all empty)")
    reaffirm, withdraw = unique(body["reaffirm"]), unique(body["withdraw"])
    if set(reaffirm) & set(withdraw):
        raise invalid("reaffirm", "names a claim that withdraw names too")
    session, task = session_task(store, req, body["task_id"])
    checked_claims(store, task, reaffirm, "reaffirm")
    checked_claims(store, task, withdraw, "withdraw")
    workspace_id = task["workspace_id"]
    common = store.evidence_runs(workspace_id, body["evidence"])
    facts = [(fact["text"], store.evidence_runs(workspace_id, fact["evidence"]))
             for fact in body["facts"]]

    checkpoint_id, now = new_id(), utc_now()
    checkpoint_number = store.next_number("checkpoints", "task_id", task["id"])
    store.run("INSERT INTO checkpoints (id, task_id, session_id, number, created_at, reaffirmed,"
              " withdrawn) VALUES (?, ?, ?, ?, ?, ?, ?)", checkpoint_id, task["id"],
              session["id"], checkpoint_number, now, json.dumps(reaffirm), json.dumps(withdraw))
    for claim_number in reaffirm:
        store.run("UPDATE claims SET reaffirmed_at = ? WHERE task_id = ? AND number = ?",
                  now, task["id"], claim_number)
    for claim_number in withdraw:
        store.run("UPDATE claims SET state = 'withdrawn' WHERE task_id = ? AND number = ?",
                  task["id"], claim_number)
    new = [("fact", fact_text, unique(evidence + common)) for fact_text, evidence in facts]
    new += [("open_item", item["text"], common) for item in body["open_items"]]
    superseded = []
    if body["next_action"] is not None:
        for row in store.all("SELECT number FROM claims WHERE task_id = ? AND"
                             " kind = 'next_action' AND state = 'active'", task["id"]):
            superseded.append(row["number"])
        store.run("UPDATE claims SET state = 'superseded' WHERE task_id = ? AND"
                  " kind = 'next_action' AND state = 'active'", task["id"])
        new.append(("next_action", body["next_action"]["text"], common))
    claim_ids, logged = [], []
    for kind, claim_text, evidence in new:
        claim_id, claim_number = store.add_claim(task, session, kind, claim_text, evidence, now,
                                                 checkpoint_id)
        claim_ids.append(claim_id)
        logged.append({"number": claim_number, "kind": kind, "text": claim_text,
                       "evidence": evidence})
    store.touch_task(task["id"], now)
    store.append("createCheckpoint", {
        "checkpoint_id": checkpoint_id, "task_id": task["id"], "session_id": session["id"],
        "number": checkpoint_number, "claims": logged, "reaffirmed": reaffirm,
        "withdrawn": withdraw, "superseded": superseded, "at": now})
    return 201, {"checkpoint": {
        "id": checkpoint_id, "number": checkpoint_number, "session_number": session["number"],
        "claims": store.claims_of(task["id"], claim_ids), "reaffirmed": reaffirm,
        "withdrawn": withdraw}}


def propose_decision(store, req):
    body = check_object(req.body, "The body", {
        "task_id": identifier, "text": text(2000), "rationale": nullable(text(2000)),
        "alternatives": list_of(text(2000)), "evidence": list_of(identifier),
        "supersedes": nullable(number)})
    session, task = session_task(store, req, body["task_id"])
    if body["supersedes"] is not None:
        old = store.claim_row(task["id"], body["supersedes"])
        if old is None or old["kind"] != "decision":
            raise Problem("claim_not_found", "supersedes names no decision claim.")
        if old["state"] != "active":
            raise Problem("claim_not_active", "supersedes names an inactive decision claim.")
    evidence = store.evidence_runs(task["workspace_id"], body["evidence"])
    now = utc_now()
    if body["supersedes"] is not None:
        store.run("UPDATE claims SET state = 'superseded' WHERE task_id = ? AND number = ?",
                  task["id"], body["supersedes"])
    claim_id, claim_number = store.add_claim(
        task, session, "decision", body["text"], evidence, now,
        decision={"rationale": body["rationale"], "alternatives": body["alternatives"],
                  "decision_state": "proposed", "supersedes": body["supersedes"]})
    store.touch_task(task["id"], now)
    store.append("proposeDecision", {
        "claim_id": claim_id, "task_id": task["id"], "session_id": session["id"],
        "number": claim_number, "text": body["text"], "rationale": body["rationale"],
        "alternatives": body["alternatives"], "evidence": evidence,
        "supersedes": body["supersedes"], "at": now})
    return 201, {"decision": {"id": claim_id, "claim": store.claims_of(task["id"], [claim_id])[0]}}


def verify_ledger(store, req):
    check_object(req.body, "The body", {})
    return 200, store.verify()


def record_run(store, req):
    body = check_object(req.body, "The body", {
        "command": text(10000), "exit_code": integer, "started_at": timestamp,
        "finished_at": timestamp})
    session = store.open_session(req.ids["session_id"])
    run_id, now = new_id(), utc_now()
    run_number = store.next_number("runs", "workspace_id", session["workspace_id"])
    passed = body["exit_code"] == 0
    store.run("INSERT INTO runs (id, workspace_id, task_id, session_id, number, command,"
              " exit_code, passed, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              run_id, session["workspace_id"], session["task_id"], session["id"], run_number,
              body["command"], body["exit_code"], int(passed), body["started_at"],
              body["finished_at"])
    store.touch_task(session["task_id"], now)
    store.append("recordRun", {
        "run_id": run_id, "label": "r%d" % run_number, "task_id": session["task_id"],
        "session_id": session["id"], "command": body["command"], "exit_code": body["exit_code"],
        "passed": passed, "started_at": body["started_at"], "finished_at": body["finished_at"],
        "at": now})
    return 201, {"run": store.run_record(store.one(RUNS_SQL + " WHERE r.id = ?", run_id))}


class Route:
    def __init__(self, method, template, op, scope, handler, write):
        self.method, self.template, self.op = method, template, op
        self.scope, self.handler, self.write = scope, handler, write
        pieces = re.split(r"\{(\w+)\}", template)   # literal, name, literal, ...
        self.pattern = re.compile("".join(
            "(?P<%s>[^/]+)" % piece if index % 2 else re.escape(piece)
            for index, piece in enumerate(pieces)) + r"\Z")


# (method, path pattern) -> (operationId, scope, handler); `write` = needs an Idempotency-Key
# and runs in a transaction.  verifyLedger is a POST but a read.
ROUTES = [
    Route("POST", "/v1/workspaces/resolve", "resolveWorkspace", "mcp-write", resolve_workspace,
          True),
    Route("GET", "/v1/tasks", "listTasks", "mcp-read", list_tasks, False),
    Route("POST", "/v1/tasks", "createTask", "mcp-write", create_task, True),
    Route("GET", "/v1/tasks/{task_id}/capsule", "getTaskCapsule", "mcp-read", get_task_capsule,
          False),
    Route("POST", "/v1/tasks/{task_id}/transition", "transitionTask", "mcp-write",
          transition_task, True),
    Route("GET", "/v1/sessions", "listSessions", "mcp-read", list_sessions, False),
    Route("POST", "/v1/sessions", "createSession", "mcp-write", create_session, True),
    Route("POST", "/v1/sessions/{session_id}/end", "endSession", "mcp-write", end_session, True),
    Route("POST", "/v1/sessions/{session_id}/checkpoints", "createCheckpoint", "mcp-write",
          create_checkpoint, True),
    Route("POST", "/v1/sessions/{session_id}/decisions", "proposeDecision", "mcp-write",
          propose_decision, True),
    Route("POST", "/v1/ledger/verify", "verifyLedger", "mcp-read", verify_ledger, False),
    Route("POST", "/v1/sessions/{session_id}/runs", "recordRun", "mcp-write", record_run, True),
]
OPERATION_IDS = tuple(route.op for route in ROUTES)


def match_route(method, path):
    """(Route, path ids percent-decoded) or (None, {}).  A route is found by path alone so that
    a fault aimed at an operation also hits a wrong method (it answers not_found)."""
    for route in ROUTES:
        found = route.pattern.match(path)
        if found and route.method == method:
            return route, dict((name, unquote(value)) for name, value in found.groupdict().items())
    return None, {}


class Request:
    def __init__(self, ids, query, body, token):
        self.ids, self.query, self.body, self.token = ids, query, body, token


# ---------------------------------------------------------------------------
# Test controls
# ---------------------------------------------------------------------------

class Gate:
    """Holds requests of one operation before they execute, until release()."""

    def __init__(self, op):
        self.op = op
        self._arrivals = 0
        self._changed = threading.Condition()
        self._released = threading.Event()

    def release(self):
        self._released.set()

    def wait_arrived(self, timeout=10, count=1):
        """True once `count` requests of the operation have arrived at the gate (a barrier:
        two writers held until both are there, then released together)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._arrivals >= count, timeout)

    def _pass(self):
        with self._changed:
            self._arrivals += 1
            self._changed.notify_all()
        self._released.wait()


class _Flight:
    """A write in progress under an idempotency key."""

    def __init__(self, fingerprint):
        self.fingerprint = fingerprint
        self.done = threading.Event()


class LedgerdError(Exception):
    """memprove_run's error: the daemon answered something other than 201."""

    def __init__(self, status, code, body):
        Exception.__init__(self, "recordRun answered %s %s" % (status, code))
        self.status, self.code, self.body = status, code, body


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------

class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # The default backlog of 5 resets connections when many clients connect at once on a
    # loaded machine (16 concurrent writers in test_ledgerd did).
    request_queue_size = 128
    ledgerd = None  # the Daemon this server belongs to

    def handle_error(self, request, client_address):
        # A client hanging up mid-answer is part of the faults; anything else is logged.
        kind = sys.exc_info()[0]
        if kind is not None and issubclass(kind, (ConnectionError, TimeoutError)):
            return
        self.ledgerd._log("".join(traceback.format_exception(*sys.exc_info())))


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "ledgerd/1"
    protocol_version = "HTTP/1.0"   # one request a connection; a close ends every answer

    def do_GET(self):
        self._serve()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def log_message(self, format, *args):
        self.server.ledgerd._log("%s - %s" % (self.address_string(), format % args))

    def _send_head(self, status, content_type, length, message=None):
        """The status line and headers of an answer that closes its connection."""
        self.send_response(status, message)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()

    def send_error(self, code, message=None, explain=None):
        # Errors http.server finds itself (a malformed request line...) as Problems too.
        self.close_connection = True
        body = to_json({"type": "urn:memprove:problem:validation_failed", "title": "Bad request.",
                        "status": code, "code": "validation_failed",
                        "detail": message or ""}).encode("utf-8")
        self._send_head(code, "application/problem+json", len(body), message)
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def _serve(self):
        daemon = self.server.ledgerd
        self.close_connection = True
        split = urlsplit(self.path)
        pairs = parse_qsl(split.query, keep_blank_values=True)
        headers = dict((name.lower(), value) for name, value in self.headers.items())
        route, ids = match_route(self.command, split.path)
        raw, body, body_problem = self._read_body(headers)
        op = route.op if route else None
        entry = daemon._arrive({"op": op, "method": self.command, "path": split.path,
                                "query": dict(pairs), "headers": headers, "body": body,
                                "status": None})
        fault = daemon._take_fault(op)
        kind = fault["fault"] if fault else None
        if kind == "drop_before":
            return
        if kind in ("status500", "garbage", "huge", "redirect"):
            entry["status"] = self._send_fault(kind)
            return
        if kind == "problem":
            problem = Problem(fault["code"], "Injected.")
            status, content_type, payload = daemon._encode(problem.status, problem.body())
            entry["status"] = status
            self._send_head(status, content_type, len(payload))
            self.wfile.write(payload)
            return
        if kind == "delay":
            time.sleep(fault["seconds"])
        status, content_type, payload = daemon._answer(route, ids, self.command, split.path,
                                                       pairs, raw, body, body_problem, headers)
        if op is not None:
            payload = daemon._rewritten(op, status, payload)
        if kind == "drop_after":
            return
        entry["status"] = status
        self._send_head(status, content_type, len(payload))
        if self.command == "HEAD":
            return
        self.wfile.write(payload[:len(payload) // 2] if kind == "truncated" else payload)

    def _read_body(self, headers):
        """(raw bytes, parsed JSON or None, Problem or None)."""
        if "transfer-encoding" in headers:
            return b"", None, invalid("The request", "must carry a Content-Length, not chunks")
        length = headers.get("content-length", "0").strip()
        if not length.isdigit():
            return b"", None, invalid("Content-Length", "must be a number")
        if int(length) > MAX_REQUEST_BODY:
            return b"", None, invalid("The body", "is larger than %d bytes" % MAX_REQUEST_BODY)
        raw = self.rfile.read(int(length)) if int(length) else b""
        if not raw:
            return raw, None, None
        try:
            return raw, json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates,
                                   parse_constant=_no_constant), None
        except (ValueError, RecursionError):
            return raw, None, None   # not JSON: the operation's check refuses it

    def _send_fault(self, kind):
        if kind == "status500":
            payload = b"Internal Server Error (injected)\n"
            self.send_response(500)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return 500
        if kind == "garbage":
            payload = b"<html>this is not JSON\x00\xff"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return 200
        if kind == "redirect":
            self.send_response(302)
            self.send_header("Location", REDIRECT_TARGET)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return 302
        # huge: announce HUGE_LENGTH bytes and stream zeros until the client hangs up.
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(HUGE_LENGTH))
        self.end_headers()
        chunk, sent = b"\x00" * 65536, 0
        try:
            while sent < HUGE_LENGTH:
                piece = chunk[:min(len(chunk), HUGE_LENGTH - sent)]
                self.wfile.write(piece)
                sent += len(piece)
        except OSError:
            pass
        return 200


def _no_duplicates(pairs):
    found = {}
    for name, value in pairs:
        if name in found:
            raise ValueError("duplicate key")
        found[name] = value
    return found


def _no_constant(name):
    raise ValueError("not JSON: " + name)


# ---------------------------------------------------------------------------
# The daemon
# ---------------------------------------------------------------------------

class Daemon:
    """The daemon, run in a background thread of the test process (or by main())."""

    def __init__(self, data_dir, port=0, log=None):
        self.data_dir = Path(data_dir).resolve()
        # A new data directory is private whatever the umask (Ubuntu's 002 would make it
        # writable by the group, and the server would not believe its daemon.json).
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.port = port
        self.url = None
        self.tokens_path = self.data_dir / "tokens.json"
        self.daemon_json_path = self.data_dir / "daemon.json"
        self.db_path = self.data_dir / "ledger.sqlite3"
        self.store = None
        self._log_file = log
        self._server = None
        self._thread = None
        self._lock = threading.Lock()          # ops, faults, gates, capsules
        self._tokens_lock = threading.Lock()
        self._ops = []
        self._faults = []
        self._gates = {}
        self._capsules = {}
        self._rewrites = []
        self._flights = {}
        self._flights_lock = threading.Lock()
        self._waiters = 0
        self._waiters_changed = threading.Condition()

    # -- life ------------------------------------------------------------
    def start(self):
        if self._server is not None:
            return self
        self.store = Store(self.db_path)
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.ledgerd = self
        self._server = server
        self.port = server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        # stop() waits for the loop's next look at its flag: a short look keeps the ~600
        # tests that start a daemon from waiting 50 ms each at their end.
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="ledgerd", daemon=True)
        self._thread.start()
        _write_atomically(self.daemon_json_path, to_json({"url": self.url, "pid": os.getpid()}))
        return self

    def stop(self):
        if self._server is None:
            return
        with self._lock:
            gates = list(self._gates.values())
        for gate in gates:
            gate.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = None
        try:
            self.daemon_json_path.unlink()
        except OSError:
            pass
        self.store.close()

    def close_listener(self):
        """Stop listening: a new connection is refused, while requests already in progress
        (held at a gate, say) still run.  stop() ends the rest."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- tokens ----------------------------------------------------------
    def add_token(self, token, scopes=ALL_SCOPES, roles="*", revoked=False):
        roles = roles if roles == "*" else list(roles)
        self._edit_tokens(lambda tokens: tokens.__setitem__(token, {
            "scopes": list(scopes), "roles": roles, "revoked": bool(revoked)}))

    def revoke_token(self, token):
        self._edit_tokens(lambda tokens: tokens[token].__setitem__("revoked", True))

    def remove_token(self, token):
        self._edit_tokens(lambda tokens: tokens.pop(token))

    def _edit_tokens(self, change):
        with self._tokens_lock:
            tokens = self._read_tokens()
            change(tokens)
            _write_atomically(self.tokens_path, json.dumps({"tokens": tokens}, indent=2), 0o600)

    def _read_tokens(self):
        """tokens.json as {token: {"scopes", "roles", "revoked"}}; unreadable means none."""
        try:
            with open(str(self.tokens_path), encoding="utf-8") as file:
                tokens = json.load(file)["tokens"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        if not isinstance(tokens, dict):
            return {}
        kept = {}
        for token, entry in tokens.items():
            if not isinstance(entry, dict):
                continue
            scopes = entry.get("scopes", [])
            roles = entry.get("roles", [])
            kept[token] = {"scopes": list(scopes) if isinstance(scopes, list) else [],
                           "roles": roles if roles == "*" or isinstance(roles, list) else [],
                           "revoked": entry.get("revoked") is True}
        return kept

    # -- test controls -----------------------------------------------------
    @property
    def ops(self):
        """The requests received, in arrival order (status None until answered, or if dropped)."""
        with self._lock:
            return list(self._ops)

    def clear_ops(self):
        with self._lock:
            del self._ops[:]

    def serve_capsule(self, task_id, body):
        """getTaskCapsule for `task_id` answers `body` with 200 (None: back to the store)."""
        with self._lock:
            if body is None:
                self._capsules.pop(task_id, None)
            else:
                self._capsules[task_id] = body

    def inject(self, fault, op=None, count=1, seconds=None, code=None):
        """The next `count` requests (of operation `op`, or any; count None: all) get `fault`;
        the `problem` fault answers the Problem `code` without executing the request."""
        if fault not in FAULTS:
            raise ValueError("unknown fault %r; one of %s" % (fault, ", ".join(FAULTS)))
        if op is not None and op not in OPERATION_IDS:
            raise ValueError("unknown operation %r" % op)
        if fault == "delay" and seconds is None:
            raise ValueError("the delay fault needs seconds")
        if (fault == "problem") != (code in PROBLEMS):
            raise ValueError("the problem fault, and it alone, needs a code of PROBLEMS")
        with self._lock:
            self._faults.append({"fault": fault, "op": op, "count": count, "seconds": seconds,
                                 "code": code})

    def set_task_status(self, task_id, status):
        """The Task's status changed in the store alone (no ledger entry), as another agent's
        transition would leave it between a server's read and its write."""
        if status not in ("open", "active", "done"):
            raise ValueError("unknown status %r" % status)
        with self.store.lock:
            self.store.run("UPDATE tasks SET status = ? WHERE id = ?", status, task_id)

    def clear_faults(self):
        with self._lock:
            del self._faults[:]
            del self._rewrites[:]

    def rewrite(self, op, path, value, count=1):
        """The next `count` 2xx answers of `op` (count None: all) carry `value` at `path` (a
        tuple of keys and list indexes, e.g. ("capsule", "task", "number")) instead of the
        real one; REMOVE deletes it.  The operation itself runs as usual."""
        if op not in OPERATION_IDS:
            raise ValueError("unknown operation %r" % op)
        if not path:
            raise ValueError("rewrite needs a path")
        with self._lock:
            self._rewrites.append({"op": op, "path": tuple(path), "value": value,
                                   "count": count})

    def _take_rewrite(self, op):
        with self._lock:
            for rewrite in self._rewrites:
                if rewrite["op"] == op:
                    if rewrite["count"] is not None:
                        rewrite["count"] -= 1
                        if rewrite["count"] <= 0:
                            self._rewrites.remove(rewrite)
                    return rewrite
        return None

    def _rewritten(self, op, status, payload):
        """payload with this operation's pending rewrite applied (2xx answers only)."""
        if not 200 <= status < 300:
            return payload
        rewrite = self._take_rewrite(op)
        if rewrite is None:
            return payload
        answer = json.loads(payload.decode("utf-8", "surrogatepass"))
        place = answer
        try:
            for key in rewrite["path"][:-1]:
                place = place[key]
            last = rewrite["path"][-1]
            if rewrite["value"] is REMOVE:
                del place[last]
            else:
                place[last] = rewrite["value"]
        except (KeyError, IndexError, TypeError):
            return payload          # this answer has no such field (an empty list, say)
        return to_json(answer).encode("utf-8")

    def hold(self, op):
        """Requests of `op` wait before executing until the returned gate is released."""
        if op not in OPERATION_IDS:
            raise ValueError("unknown operation %r" % op)
        gate = Gate(op)
        with self._lock:
            self._gates[op] = gate
        return gate

    def wait_for_waiters(self, count=1, timeout=10):
        """True once `count` requests in all have waited for a write in flight under their key."""
        with self._waiters_changed:
            return self._waiters_changed.wait_for(lambda: self._waiters >= count, timeout)

    # -- inside the server -------------------------------------------------
    def _log(self, line):
        if self._log_file is not None:
            self._log_file.write(line.rstrip("\n") + "\n")
            self._log_file.flush()

    def _arrive(self, entry):
        with self._lock:
            self._ops.append(entry)
        return entry

    def _take_fault(self, op):
        with self._lock:
            for fault in self._faults:
                if fault["op"] is None or fault["op"] == op:
                    if fault["count"] is not None:
                        fault["count"] -= 1
                        if fault["count"] <= 0:
                            self._faults.remove(fault)
                    return dict(fault)
        return None

    def _pass_gate(self, op):
        with self._lock:
            gate = self._gates.get(op)
        if gate is not None:
            gate._pass()

    def _encode(self, status, answer):
        content_type = "application/problem+json" if status >= 400 else "application/json"
        return status, content_type, to_json(answer).encode("utf-8")

    def _authenticate(self, headers):
        scheme, _, token = headers.get("authorization", "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Problem("unauthenticated", "No bearer token was sent.")
        entry = self._read_tokens().get(token)
        if entry is None:
            raise Problem("unauthenticated", "The token is unknown.")
        if entry["revoked"]:
            raise Problem("token_revoked", "The token has been revoked.")
        return entry

    def _answer(self, route, ids, method, path, pairs, raw, body, body_problem, headers):
        """Authenticate, authorise, then execute (writes under their idempotency key)."""
        try:
            token = self._authenticate(headers)
            if route is None:
                raise Problem("not_found", "No operation has that method and path.")
            if route.scope not in token["scopes"]:
                raise Problem("scope_missing", "%s needs the scope %s." % (route.op, route.scope))
            if body_problem is not None:
                raise body_problem
            req = Request(ids, pairs, body, token)
            if route.write:
                key = headers.get("idempotency-key", "").strip()
                if not key or len(key) > 200:
                    raise invalid("Idempotency-Key", "must be sent with every write")
                request_text = canonical(body) if body is not None else raw.hex()
                fingerprint = hashlib.sha256(
                    utf8("%s %s\n%s" % (method, path, request_text))).hexdigest()
                return self._idempotent(key, fingerprint, route, req)
            self._pass_gate(route.op)
            with self._lock:
                served = self._capsules.get(ids.get("task_id")) \
                    if route.op == "getTaskCapsule" else None
            if served is not None:
                return self._encode(200, served)
            with self.store.lock:
                return self._encode(*route.handler(self.store, req))
        except Problem as problem:
            return self._encode(problem.status, problem.body())
        except Exception:
            self._log(traceback.format_exc())
            problem = Problem("internal_error", "See the daemon's log.")
            return self._encode(problem.status, problem.body())

    def _idempotent(self, key, fingerprint, route, req):
        """The first answer under `key`, executing the write only once."""
        while True:
            with self._flights_lock:
                with self.store.lock:
                    kept = self.store.remembered(key)
                if kept is not None:
                    if kept["fingerprint"] != fingerprint:
                        raise Problem("idempotency_key_reused", "That key was used for another"
                                      " request.")
                    return self._encode(kept["status"], json.loads(kept["body"]))
                flight = self._flights.get(key)
                if flight is None:
                    flight = self._flights[key] = _Flight(fingerprint)
                    break
                if flight.fingerprint != fingerprint:
                    raise Problem("idempotency_key_reused", "That key is in use for another"
                                  " request.")
            with self._waiters_changed:
                self._waiters += 1
                self._waiters_changed.notify_all()
            flight.done.wait()
        try:
            self._pass_gate(route.op)
            return self._execute_write(key, fingerprint, route, req)
        finally:
            with self._flights_lock:
                del self._flights[key]
            flight.done.set()

    def _execute_write(self, key, fingerprint, route, req):
        store = self.store
        with store.lock:
            store.run("BEGIN IMMEDIATE")
            try:
                status, answer = route.handler(store, req)
            except Problem as problem:
                store.run("ROLLBACK")
                status, answer = problem.status, problem.body()
                store.run("BEGIN IMMEDIATE")
            except BaseException:
                store.run("ROLLBACK")
                raise
            try:
                store.remember(key, fingerprint, status, to_json(answer))
                store.run("COMMIT")
            except BaseException:
                store.run("ROLLBACK")
                raise
        return self._encode(status, answer)


def _write_atomically(path, content, mode=0o644):
    """Write `content` to `path` through a temporary file, with `mode` whatever the umask:
    a daemon.json others could write is not believed (contract.md §6 rule 19)."""
    path = Path(path)
    temporary = path.with_name(".%s.%s.tmp" % (path.name, uuid.uuid4().hex))
    with open(str(temporary), "w", encoding="utf-8") as file:
        os.chmod(str(temporary), mode)
        file.write(content)
        file.flush()
        os.fsync(file.fileno())
    os.replace(str(temporary), str(path))


# ---------------------------------------------------------------------------
# memprove run, as tests and the demo need it
# ---------------------------------------------------------------------------

def memprove_run(url, token, workspace_root, session_id, command, exit_code, started_at=None,
                 finished_at=None):
    """Record a Run as `memprove run` does: recordRun, then one line in .memprove/runs.jsonl."""
    finished_at = finished_at or utc_now()
    started_at = started_at or finished_at
    parts = urlsplit(url)
    payload = to_json({"command": command, "exit_code": exit_code, "started_at": started_at,
                       "finished_at": finished_at}).encode("utf-8")
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
    try:
        connection.request("POST", "%s/v1/sessions/%s/runs" % (parts.path.rstrip("/"),
                                                               quote(session_id, safe="")),
                           body=payload,
                           headers={"Authorization": "Bearer " + token,
                                    "Accept": "application/json",
                                    "Content-Type": "application/json",
                                    "Idempotency-Key": new_id(),
                                    "User-Agent": "memprove-run/ledgerd"})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        answer = None
    if response.status != 201 or not isinstance(answer, dict) or "run" not in answer:
        code = answer.get("code") if isinstance(answer, dict) else None
        raise LedgerdError(response.status, code, answer)
    run = answer["run"]
    line = dict((name, run[name]) for name in (
        "label", "id", "task_id", "session_id", "command", "exit_code", "passed", "started_at",
        "finished_at"))
    try:
        append_run_line(Path(workspace_root), to_json(line) + "\n")
    except OSError as error:
        raise RunLineRefused(run, error)
    return run


class RunLineRefused(OSError):
    """The daemon recorded the Run, but its line was not written to runs.jsonl."""

    def __init__(self, run, error):
        OSError.__init__(self, str(error))
        self.run = run


def append_run_line(root, text):
    """Append `text` to root/.memprove/runs.jsonl as the server writes its own files there
    (contract.md §6 rules 6 and 35): `.memprove` a folder of the user's that is no link, and
    runs.jsonl a regular file reached without a link, opened without blocking; OSError
    saying why otherwise (a repository's `runs.jsonl` link once made this append to
    ~/.gitconfig)."""
    import stat
    directory = root / ".memprove"
    directory.mkdir(parents=True, exist_ok=True)
    status = os.lstat(str(directory))
    if not stat.S_ISDIR(status.st_mode):
        raise OSError("%s is a link or not a folder, so runs.jsonl is not written" % directory)
    if hasattr(os, "geteuid") and status.st_uid != os.geteuid():
        raise OSError("%s belongs to another user, so runs.jsonl is not written" % directory)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if os.open in os.supports_dir_fd:
        folder = os.open(str(directory), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) |
                         getattr(os, "O_NOFOLLOW", 0))
        try:
            descriptor = _open_run_file(lambda: os.open("runs.jsonl", flags, 0o666, dir_fd=folder),
                                        directory)
        finally:
            os.close(folder)
    else:                                            # Windows: no dir_fd, no O_NOFOLLOW
        path = str(directory / "runs.jsonl")
        if os.path.islink(path):
            raise OSError("%s is a link, so it is not written" % path)
        descriptor = _open_run_file(lambda: os.open(path, flags, 0o666), directory)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:
            # A hard link would make the append land in another file of the user's.
            raise OSError("%s is not a regular file with one name, so it is not written"
                          % (directory / "runs.jsonl"))
        data = text.encode("utf-8")
        while data:
            data = data[os.write(descriptor, data):]
    finally:
        os.close(descriptor)


def _open_run_file(opening, directory):
    try:
        return opening()
    except OSError as error:
        # ELOOP (a link), ENXIO (a FIFO nobody reads): say which file and why.
        raise OSError("%s cannot be appended to (%s: a link, or not a regular file)"
                      % (directory / "runs.jsonl", error.strerror or "error"))


# ---------------------------------------------------------------------------
# `run -- COMMAND`: memprove run by hand
# ---------------------------------------------------------------------------
# The memprove CLI's `memprove run -- COMMAND` runs a command and records it as a Run of the
# Workspace's context Session.  This is the same for trying the MCP server by hand: the
# configuration and the Workspace are found as the server finds them (contract.md §1 and §2),
# the Session is the one in .memprove/context.json, the Run is recorded by memprove_run.

RUN_USAGE = "ledgerd.py run [--workspace DIR] [--config-dir DIR] -- COMMAND [ARG...]"
RUN_NOT_RECORDED = 125      # as env(1) and nice(1): the runner's own failure, not the command's


class RunSetupError(Exception):
    """Why `ledgerd.py run` cannot record a Run (said on standard error)."""


def _first_line(path, what):
    try:
        with open(str(path), encoding="utf-8-sig") as file:
            line = file.readline().strip()
    except OSError as error:
        raise RunSetupError("%s %s cannot be read (%s)" % (what, path, error.strerror))
    if not line:
        raise RunSetupError("%s %s is empty" % (what, path))
    return line


def _set(name):
    return os.environ.get(name) or None


def run_configuration(config_dir=None):
    """(daemon URL, token): contract.md §1's sources, first set wins."""
    if config_dir:
        directory = Path(config_dir)
    elif _set("MEMPROVE_CONFIG_DIR"):
        directory = Path(os.environ["MEMPROVE_CONFIG_DIR"])
    elif _set("XDG_CONFIG_HOME"):
        directory = Path(os.environ["XDG_CONFIG_HOME"]) / "memprove"
    elif os.name == "nt" and _set("APPDATA"):
        directory = Path(os.environ["APPDATA"]) / "memprove"
    else:
        directory = Path.home() / ".config" / "memprove"
    if _set("MEMPROVE_TOKEN"):
        token = os.environ["MEMPROVE_TOKEN"].strip()
    elif _set("MEMPROVE_TOKEN_FILE"):
        token = _first_line(os.environ["MEMPROVE_TOKEN_FILE"], "the token file")
    elif (directory / "token").exists():
        token = _first_line(directory / "token", "the token file")
    else:
        raise RunSetupError("no token: set MEMPROVE_TOKEN_FILE, or put the token in %s"
                            % (directory / "token"))
    if _set("MEMPROVE_DATA_DIR"):
        data_dir = Path(os.environ["MEMPROVE_DATA_DIR"])
    elif (directory / "data-dir").exists():
        data_dir = directory / _first_line(directory / "data-dir", "the data-dir file")
    else:
        raise RunSetupError("no data directory: set MEMPROVE_DATA_DIR, or write its path into %s"
                            % (directory / "data-dir"))
    try:
        with open(str(data_dir / "daemon.json"), encoding="utf-8") as file:
            url = json.load(file)["url"]
    except (OSError, ValueError, KeyError, TypeError):
        raise RunSetupError("no daemon: %s cannot be read; start one with: python3 %s "
                            "--data-dir %s" % (data_dir / "daemon.json",
                                               shlex.quote(os.path.abspath(__file__)),
                                               shlex.quote(str(data_dir))))
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme != "http" or parts.hostname not in (
            "127.0.0.1", "localhost", "::1"):
        raise RunSetupError("%s names %r, not a loopback http address: the token is not sent"
                            % (data_dir / "daemon.json", url))
    return url, token


def run_workspace(given=None):
    """The Workspace root, found as the server finds it (contract.md §2): from the first set
    of --workspace, MEMPROVE_WORKSPACE, CLAUDE_PROJECT_DIR and the working directory, the
    nearest folder upwards holding .memprove/, stopping at a repository root (.git) and
    below the home directory (unless the start is there or above); else that repository
    root, else the start."""
    start = next((value for value in (given, _set("MEMPROVE_WORKSPACE"),
                                      _set("CLAUDE_PROJECT_DIR")) if value and "${" not in value),
                 None) or os.getcwd()
    if not os.path.isdir(start):
        raise RunSetupError("the Workspace %s is not a directory" % start)
    start = Path(start).resolve()
    home = Path.home().resolve()
    above_home = start == home or start in home.parents
    place, repository = start, None
    while True:
        if (place / ".memprove").is_dir():
            return place
        if (place / ".git").exists():
            repository = place
            break
        parent = place.parent
        if parent == place or (not above_home and (parent == home or parent in home.parents)):
            break
        place = parent
    return repository or start


def run_session(root):
    """The context Session's id, from <root>/.memprove/context.json."""
    path = root / ".memprove" / "context.json"
    try:
        with open(str(path), encoding="utf-8") as file:
            context = json.load(file)
    except FileNotFoundError:
        context = {}
    except (OSError, ValueError) as error:
        raise RunSetupError("%s cannot be read (%s)" % (path, error))
    if not isinstance(context, dict):
        raise RunSetupError("%s is not a context file" % path)
    workspace = context.get("workspace")
    if context and (not isinstance(workspace, dict) or workspace.get("root") != str(root)):
        raise RunSetupError("%s names another Workspace: call `begin`, which starts afresh"
                            % path)
    session = context.get("session")
    if not isinstance(session, dict) or not isinstance(session.get("id"), str):
        raise RunSetupError("the context in %s has no Session: call `begin` first (the agent's"
                            " tool, or by hand through `mcp serve`)" % root)
    return session["id"]


def _command_text(argv):
    """The command as runs.jsonl and the Pack show it: one line a shell would run."""
    if os.name == "nt":
        import subprocess
        return subprocess.list2cmdline(argv)
    return " ".join(shlex.quote(word) for word in argv)


def run_main(argv):
    """`ledgerd.py run [options] -- COMMAND...`: exit with the command's status, having
    recorded it (RUN_NOT_RECORDED, and nothing run, when it cannot be recorded).  Called
    from the main thread (it hands SIGINT to the command while it runs)."""
    import subprocess
    if "--" in argv:
        options, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    else:
        options, command = argv, []
    parser = argparse.ArgumentParser(
        prog="ledgerd.py run", usage=RUN_USAGE,
        description="Run COMMAND in the Workspace and record it as a Run of the context's"
                    " Session, as the memprove CLI's `memprove run` does: the daemon's"
                    " recordRun, then a line in .memprove/runs.jsonl. Exits with COMMAND's"
                    " status; %d when nothing could be recorded (nothing is run then)."
                    % RUN_NOT_RECORDED)
    parser.add_argument("--workspace", metavar="DIR", help="the project (default: as the"
                        " server finds it, from the working directory)")
    parser.add_argument("--config-dir", metavar="DIR", help="as given to `mcp serve`")
    args = parser.parse_args(options)
    if not command:
        parser.error("no COMMAND after --")
    try:
        url, token = run_configuration(args.config_dir)
        root = run_workspace(args.workspace)
        session_id = run_session(root)
    except RunSetupError as error:
        print("ledgerd.py run: %s; nothing was run" % error, file=sys.stderr)
        return RUN_NOT_RECORDED
    # In the working directory when it is in the Workspace (as a shell runs it), else at
    # the Workspace's root.
    here = Path(os.getcwd()).resolve()
    cwd = here if here == root or root in here.parents else root
    started_at = utc_now()
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the command's
    try:
        status = subprocess.call(command, cwd=str(cwd))
    except FileNotFoundError:
        print("ledgerd.py run: %s: command not found" % command[0], file=sys.stderr)
        status = 127
    except OSError as error:
        print("ledgerd.py run: %s: %s" % (command[0], error.strerror), file=sys.stderr)
        status = 126
    finally:
        signal.signal(signal.SIGINT, interrupt)
    if status < 0:
        status = 128 - status                                   # killed by signal N: 128 + N
    try:
        run = memprove_run(url, token, root, session_id, _command_text(command), status,
                           started_at=started_at, finished_at=utc_now())
    except RunLineRefused as refused:
        # The daemon has the Run, but no tool can cite a label runs.jsonl does not hold.
        print("ledgerd.py run: %s %s (exit %d) was recorded by the daemon, but not written to "
              "runs.jsonl: %s" % (refused.run["label"], "passed" if refused.run["passed"]
                                  else "failed", status, refused), file=sys.stderr)
        return RUN_NOT_RECORDED
    except (LedgerdError, OSError) as error:
        print("ledgerd.py run: the run was not recorded: %s" % error, file=sys.stderr)
        return RUN_NOT_RECORDED
    print("ledgerd.py run: %s %s (exit %d), recorded in %s" % (
        run["label"], "passed" if run["passed"] else "failed", status,
        root / ".memprove" / "runs.jsonl"), file=sys.stderr)
    return status


# ---------------------------------------------------------------------------
# By hand
# ---------------------------------------------------------------------------

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        return run_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="ledgerd.py",
        description="The reference memprove daemon: HTTP on 127.0.0.1, a SQLite ledger with a"
                    " SHA-256 hash chain, tokens with scopes and roles. Serves until SIGINT or"
                    " SIGTERM.",
        epilog="%s: run a command and record it as the memprove CLI's `memprove run` does"
               " (`ledgerd.py run --help`)." % RUN_USAGE)
    parser.add_argument("--data-dir", required=True, metavar="DIR",
                        help="where daemon.json, tokens.json, token and ledger.sqlite3 live")
    parser.add_argument("--port", type=int, default=0, metavar="N",
                        help="the port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--token", metavar="TOKEN",
                        help="the token to accept (default: a new one); written to DIR/token")
    parser.add_argument("--verbose", action="store_true",
                        help="log one line per request on standard error")
    args = parser.parse_args(argv)

    daemon = Daemon(args.data_dir, port=args.port, log=sys.stderr if args.verbose else None)
    token = args.token or secrets.token_urlsafe(32)
    token_path = daemon.data_dir / "token"
    descriptor = os.open(str(token_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token + "\n")
    os.chmod(str(token_path), 0o600)
    daemon.add_token(token)

    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    daemon.start()
    try:
        directory = str(daemon.data_dir)
        print("ledgerd listening on %s (data dir %s)" % (daemon.url, directory), flush=True)
        print("point the MCP server at it: export MEMPROVE_DATA_DIR=%s MEMPROVE_TOKEN_FILE=%s"
              % (shlex.quote(directory), shlex.quote(str(token_path))), flush=True)
        while not stopping.wait(1.0):
            pass
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
