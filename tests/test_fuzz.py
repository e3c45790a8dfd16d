"""Fuzzing the wire and the tools (issue 5, items 1 and 2), against the built .pyz.

The wire: hypothesis-generated JSON-RPC messages of both eras with wrong types in
every field, duplicate keys, NaN/Infinity, huge numbers and strings, batches; a
seeded generator of raw mutated bytes (invalid UTF-8, truncated lines, deep
nesting, stray CR and NUL); and fixed cases for the edges (lines of exactly 16 MiB
and one byte more, 100,000-deep nesting).  Each case is followed by a ping; the
answers must be exactly what protocol.md says (an oracle counts them: one answer
per request id, one id-less -32700/-32600 per line that is not a request), never
-32603, and standard output stays pure (conftest.Server.check at close).  One
server process per interpreter serves every case.

The tools: generated arguments for each of the ten tools, valid, boundary and
invalid per its input schema and tools.md's rules, against the reference daemon
with a real Task: every call ends in a result or a Problem (never a JSON-RPC
error, never internal_error); a successful result satisfies the outputSchema; an
invalid one is `invalid_params`, sends no daemon request and writes no file, and
its planted string values appear on neither output stream.  Texts include lone
surrogates (contract.md §6 rule 2), and before a call the context file may carry an
unknown key holding some: whatever happens, context.json stays ASCII JSON and keeps the key.

Issue 11's input classes have fuzzers of their own: Workspace roots whose names are
arbitrary bytes, valid UTF-8 or not (§2: `workspace_unusable` before any daemon operation
exactly when the name is not UTF-8), and daemon answers with a field of the wrong type
(§6 rule 3: never internal_error, never a wrong value in a result or in context.json).

Issue 18's too: the client's answers to roots/list (storms of list_changed, responses to
requests never sent or no longer pending holding roots of up to 2 MiB, lists of every kind of
root, past 1,000 roots and 4,096 bytes) against a model of clients.md and §6 rule 18;
hostile `.memprove/` trees (links to a sibling's, a foreign context, another user's directory
above the project) against §6 rules 6, 14 and 15; and client files with lines of up to
300,000 characters against doctor's time promise (§6 rule 16).
"""

import json
import os
import random
import re
import subprocess
import sys
import uuid
from collections import Counter

import pytest

from harness import (EXPECTED_TOOLS, META_CAPABILITIES, META_CLIENT, META_VERSION, MODERN_VERSION,
                     PROBLEM_CODES, make_workspace, run_cli, sample_calls, schema_errors,
                     server_file_uri, server_path, snapshot)
from hardening_support import (FUZZ_EXAMPLES, MAX_LINE, THIRD_UID, Expectation, TokenWatch,
                               check_wire_response, claim_response, hypothesis_or_fail, id_key,
                               outcome_of, python_version, report, split_lines, take_noid)


hypothesis_or_fail()
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))
RAW_SEED = 20261202


# =============================================================================
# The wire
# =============================================================================

class Wire:
    """One server, many cases: each case is sent with a probe ping behind it and
    checked against the oracle."""

    def __init__(self, server):
        self.server = server
        self.cases = 0
        self.messages = 0          # fuzz messages (non-blank lines), probes excluded
        self.probes = 0
        self.answers = 0
        self.maybe = set()
        self.next_id = 0
        self.outcomes = Counter()

    def tally(self, message):
        check_wire_response(message)
        if "error" in message:
            self.outcomes[str(message["error"]["code"])] += 1
        elif isinstance(message["result"], dict) and message["result"].get("isError") is True:
            self.outcomes[message["result"]["content"][0]["text"].split(":")[0]] += 1
        else:
            self.outcomes["result"] += 1

    def fresh_id(self, as_string):
        self.next_id += 1
        return "w%d" % self.next_id if as_string else 7000000 + self.next_id

    def exchange(self, data):
        assert data.endswith(b"\n")
        server = self.server
        expected = Expectation()
        for line in split_lines(data):
            expected.add_line(line)
        expected.settle()
        self.probes += 1
        probe = "\u2603probe-%d" % self.probes
        try:
            server.send_raw(data + json.dumps({"jsonrpc": "2.0", "id": probe, "method": "ping"})
                            .encode("ascii") + b"\n")
            answer = server.response(probe)
        except AssertionError:
            raise AssertionError("the server stopped answering after the case %r (exit %r)"
                                 % (data[:300], server.proc.poll()))
        assert answer.get("result") == {}, answer
        noid = take_noid(server)
        assert len(noid) == expected.noid, (
            "case %r: %d id-less errors, expected %d: %r"
            % (data[:300], len(noid), expected.noid, noid[:3]))
        for message in noid:
            self.tally(message)
        for key, count in expected.must.items():
            for _ in range(count):
                self.tally(claim_response(server, key))
                self.answers += 1
        self.maybe |= expected.maybe
        self.answers += len(noid)
        self.cases += 1
        self.messages += expected.messages

    def finish(self):
        """End of input: exit 0, nothing unexpected left over, streams pure."""
        server = self.server
        assert server.close() == 0
        leftovers = [m for m in server.unclaimed() if id_key(m.get("id")) not in self.maybe]
        while True:
            try:
                message = server.next_message(timeout=1)
            except AssertionError:
                break
            if id_key(message.get("id")) not in self.maybe:
                leftovers.append(message)
        assert leftovers == [], leftovers[:5]


# -- fixed cases for the edges --------------------------------------------------

def _ping(request_id, params=None):
    message = {"jsonrpc": "2.0", "id": request_id, "method": "ping"}
    if params is not None:
        message["params"] = params
    return json.dumps(message, separators=(",", ":")).encode("utf-8")


def edge_cases(big):
    """(name, bytes) pairs; `big` adds the lines of 16 MiB and more."""
    cases = [
        ("deep-array", b"[" * 100000 + b"]" * 100000),
        ("deep-object", b'{"a":' * 50000 + b"1" + b"}" * 50000),
        ("deep-in-params", b'{"jsonrpc":"2.0","id":"deep","method":"ping","params":{"x":'
         + b"[" * 100000 + b"]" * 100000 + b"}}"),
        ("moderately-deep-params", _ping("nest50", {"x": json.loads("[" * 50 + "]" * 50)})),
        ("nan", b'{"jsonrpc":"2.0","id":"n","method":"ping","params":{"x":NaN}}'),
        ("infinity-id", b'{"jsonrpc":"2.0","id":Infinity,"method":"ping"}'),
        ("minus-infinity", b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[-Infinity]}'),
        ("1e400", b'{"jsonrpc":"2.0","id":"e400","method":"ping","params":{"x":1e400}}'),
        ("huge-int-id", _ping(10 ** 100)),
        ("negative-huge-int-id", _ping(-(10 ** 60))),
        ("float-id", b'{"jsonrpc":"2.0","id":1.0,"method":"ping"}'),
        ("exponent-id", b'{"jsonrpc":"2.0","id":1e2,"method":"ping"}'),
        ("5000-digit-number", b'{"jsonrpc":"2.0","id":"d","method":"ping","params":{"x":'
         + b"9" * 5000 + b"}}"),
        ("huge-string", _ping("hs", {"s": "x" * (4 * 1024 * 1024)})),
        ("huge-string-id", _ping("i" * (1024 * 1024))),
        ("duplicate-id", b'{"jsonrpc":"2.0","id":"first","id":"second","method":"ping"}'),
        ("duplicate-method", b'{"jsonrpc":"2.0","id":"dm","method":"nope","method":"ping"}'),
        ("duplicate-jsonrpc", b'{"jsonrpc":"2.0","jsonrpc":"1.0","id":"dj","method":"ping"}'),
        ("batch", b"[" + _ping("b1") + b"," + _ping("b2") + b"]"),
        ("empty-batch", b"[]"),
        ("nested-batch", b"[[" + _ping("b3") + b"]]"),
        ("invalid-utf8", b'{"jsonrpc":"2.0","id":"u","method":"ping","params":{"x":"\xff\xfe"}}'),
        ("overlong-utf8", b'{"jsonrpc":"2.0","id":"o","method":"p\xc0\xafing"}'),
        ("utf8-surrogate", b'{"jsonrpc":"2.0","id":"s","method":"\xed\xa0\x80"}'),
        ("cut-multibyte", b'{"jsonrpc":"2.0","id":"c","method":"\xe2\x82'),
        ("escaped-lone-surrogate-id", b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}'),
        ("line-separators-id", _ping("a\u2028b\u2029c")),
        ("bom", b"\xef\xbb\xbf" + _ping("bom")),
        ("nul-in-line", b'{"jsonrpc":"2.0","id":"z","method":"ping"}\x00'),
        ("raw-control-in-string", b'{"jsonrpc":"2.0","id":"a\x01b","method":"ping"}'),
        ("truncated", _ping("t")[:-7]),
        ("only-brace", b"{"),
        ("crlf", _ping("crlf") + b"\r"),
        ("cr-inside", b'{"jsonrpc":"2.0",\r"id":"cr","method":"ping"}'),
        ("two-on-one-line", _ping("x1") + _ping("x2")),
        ("whitespace-around", b"  \t" + _ping("ws") + b" \t "),
        ("null", b"null"), ("number", b"42"), ("string", b'"ping"'), ("true", b"true"),
        ("modern-call-bad-meta", b'{"jsonrpc":"2.0","id":"m1","method":"tools/call","params":'
         b'{"name":"context","_meta":{"' + META_VERSION.encode() + b'":[]}}}'),
        ("cancel-unknown", b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":'
         b'{"requestId":{"x":1}}}'),
        ("client-response", b'{"jsonrpc":"2.0","id":"r","result":{"x":NaN}}'),
    ]
    if big:
        pad = MAX_LINE - len(_ping("exact16"))
        cases += [
            ("exactly-16MiB", _ping("exact16")[:-1] + b" " * pad + b"}"),
            ("16MiB-plus-one", _ping("over16")[:-1] + b" " * (pad + 1) + b"}"),
            ("20MiB-garbage", bytes(random.Random(RAW_SEED).getrandbits(8) | 0x80
                                    for _ in range(1024)) * (20 * 1024)),
        ]
    return cases


# -- raw mutation ---------------------------------------------------------------

INTERESTING = [b"\x00", b"\xff", b"\xc3", b"\xe2\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
               b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"NaN", b"Infinity",
               b"-Infinity", b"1e999", b"-0", b"9" * 400, b"\r", b"\t", b"\x1b", b"\\u0000",
               b"\\ud800", b"null", b"true", b'"id":', b'"method":"tools/call"',
               "\u2028".encode(), b"\xef\xbb\xbf"]


def corpus():
    meta = {META_VERSION: MODERN_VERSION, META_CAPABILITIES: {},
            META_CLIENT: {"name": "fuzz", "version": "1"}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "a", "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "fuzz", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta}},
        {"jsonrpc": "2.0", "id": 4, "method": "server/discover", "params": {"_meta": meta}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
         "params": {"name": "context", "arguments": {}, "_meta": meta}},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call",
         "params": {"name": "checkpoint", "arguments": {"facts": [{"text": "x", "runs": ["r1"]}]}}},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
         "params": {"name": "pack", "arguments": {"task": "3", "budget": 500.0}, "_meta": meta}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "zz"}},
        {"jsonrpc": "2.0", "id": 8, "result": {}},
        {"jsonrpc": "2.0", "id": 9, "method": "resources/list", "params": {"_meta": meta}},
    ]
    return [json.dumps(m, separators=(",", ":")).encode("utf-8") for m in messages]


def mutate(rng, lines):
    data = bytearray(rng.choice(lines))
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(11)
        where = rng.randrange(len(data) + 1)
        if choice == 0 and data:                                 # flip bits
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif choice == 1 and data:                               # delete a slice
            end = min(len(data), where + rng.randint(1, 16))
            del data[where:end]
        elif choice == 2:                                        # insert something odd
            data[where:where] = rng.choice(INTERESTING)
        elif choice == 3:                                        # insert random bytes
            data[where:where] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 8)))
        elif choice == 4:                                        # truncate
            del data[where:]
        elif choice == 5 and data:                               # duplicate a slice
            end = min(len(data), where + rng.randint(1, 32))
            data[where:where] = data[where:end]
        elif choice == 6:                                        # splice another message
            other = rng.choice(lines)
            cut = rng.randrange(len(other) + 1)
            data[where:] = other[cut:]
        elif choice == 7:                                        # nest it
            depth = rng.choice([1, 2, 30, 200, 5000, 200000])
            data[:] = b"[" * depth + bytes(data) + b"]" * depth
        elif choice == 8:                                        # a number becomes odd
            data[:] = bytes(data).replace(b"1", rng.choice(
                [b"NaN", b"Infinity", b"1e999", b"9" * 5000, b"-0.0", b"1.5", b"true"]), 1)
        elif choice == 9:                                        # a line break inside
            data[where:where] = rng.choice([b"\n", b"\r\n", b"\n\n", b"\r"])
        else:                                                    # wrong types for a key
            data[:] = bytes(data).replace(rng.choice([b'"id":', b'"method":', b'"params":',
                                                      b'"jsonrpc":', b'"name":', b'"arguments":']),
                                          rng.choice([b'"id":[', b'"method":{"x":', b'"params":"',
                                                      b'"jsonrpc":2.0,"x":', b'"name":null,"n":',
                                                      b'"arguments":[1,']), 1)
    data = bytes(data)
    # No oversized blank line: the counting of messages would differ from the log's.
    return data + b"\n"


# -- hypothesis strategies ------------------------------------------------------

METHODS = ["ping", "initialize", "tools/list", "tools/call", "server/discover",
           "subscriptions/listen", "notifications/initialized", "notifications/cancelled",
           "logging/setLevel", "resources/list", "prompts/list", "tasks/get", "completion/complete"]
VERSIONS = [MODERN_VERSION, "2025-11-25", "2025-06-18", "2024-11-05", "", "2026-07-28 "]

json_leaf = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
             | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
             | st.sampled_from(["", "\u2028", "\ud800", "0", "3", "r1", "x" * 300, "context"]))
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
odd_id = st.sampled_from([None, True, False, 1.5, 1.0, [], {}, [1], {"id": 1}, 1e400])


@st.composite
def arguments(draw):
    tool = draw(st.sampled_from(EXPECTED_TOOLS + ("nope", "")))
    value = draw(st.one_of(
        st.just({}),
        st.dictionaries(st.sampled_from(["task", "numbers", "budget", "query", "new_task",
                                         "facts", "runs", "session", "abandoned", "status",
                                         "decision", "agent_role", "x"]), json_value, max_size=4),
        json_value))
    return tool, value


@st.composite
def message(draw, fresh_id):
    method = draw(st.sampled_from(METHODS + ["tools/call"] * 4) | st.text(max_size=30))
    msg = {"jsonrpc": "2.0"}
    id_kind = draw(st.sampled_from(["int", "int", "str", "str", "str", "absent", "odd"]))
    if id_kind in ("int", "str"):
        msg["id"] = fresh_id(id_kind == "str")
    elif id_kind == "odd":
        msg["id"] = draw(odd_id)
    msg["method"] = method
    params = {}
    if method == "initialize":
        params = {"protocolVersion": draw(st.sampled_from(VERSIONS) | json_value),
                  "capabilities": {}, "clientInfo": {"name": draw(st.text(max_size=20)), "version": "1"}}
    elif method == "tools/call":
        tool, args = draw(arguments())
        params = {"name": tool, "arguments": args}
    elif method == "notifications/cancelled":
        params = {"requestId": draw(st.sampled_from(["gone", 99999999999, None, [], "x"]))}
    era = draw(st.sampled_from(["modern", "modern", "none", "broken"]))
    if era == "modern":
        meta = {META_VERSION: draw(st.sampled_from([MODERN_VERSION] * 6 + VERSIONS)),
                META_CAPABILITIES: {}}
        if draw(st.booleans()):
            meta[META_CLIENT] = {"name": draw(st.text(max_size=20)), "version": "1"}
        params["_meta"] = meta
    elif era == "broken":
        params["_meta"] = draw(st.one_of(json_value, st.fixed_dictionaries(
            {META_VERSION: json_value}, optional={META_CAPABILITIES: json_value})))
    if params or draw(st.booleans()):
        msg["params"] = params
    # Wrong types in any field, fields dropped, fields added.
    for _ in range(draw(st.sampled_from([0, 0, 0, 0, 1, 1, 2, 3]))):
        action = draw(st.sampled_from(["retype", "drop", "add", "retype-param"]))
        if action == "retype":
            key = draw(st.sampled_from(["jsonrpc", "method", "params"]))
            msg[key] = draw(json_value)
        elif action == "drop":
            key = draw(st.sampled_from(["jsonrpc", "method", "params", "id"]))
            msg.pop(key, None)
        elif action == "add":
            msg[draw(st.sampled_from(["result", "error", "x", "_meta"]))] = draw(json_value)
        elif isinstance(msg.get("params"), dict) and msg["params"]:
            key = draw(st.sampled_from(sorted(msg["params"])))
            msg["params"][key] = draw(json_value)
    return msg


@st.composite
def wire_case(draw, fresh_id):
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        value = draw(message(fresh_id))
        if draw(st.sampled_from([False] * 9 + [True])):
            value = [value] + draw(st.lists(message(fresh_id), max_size=2))    # a batch
        text = json.dumps(value, ensure_ascii=draw(st.booleans()),
                          separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
        trick = draw(st.sampled_from([None] * 6 + [0, 1, 2, 3, 4, 5]))
        if trick == 0 and text.startswith("{") and len(text) > 2:        # a duplicate key first
            text = '{"id":"dup-shadowed",' + text[1:]
        elif trick == 1:
            text = text.replace("0", "NaN", 1) if "0" in text else text + " NaN"
        elif trick == 2:
            text = text + "\r"
        elif trick == 3:
            text = text[:draw(st.integers(0, max(0, len(text) - 1)))]   # truncated
        elif trick == 4 and text.startswith("{"):
            text = '{"pad":"%s",%s' % ("p" * draw(st.sampled_from([1000, 70000, 1 << 20])), text[1:])
        elif trick == 5:
            text = text.replace("1", "1" + "0" * 400, 1)                # a huge number
        lines.append(text.encode("utf-8", "surrogatepass"))
    return b"\n".join(lines) + b"\n"


@pytest.fixture
def wire(hserve, server_python, workspace):
    server = hserve(python=server_python)
    driver = Wire(server)
    yield driver
    # The fuzzed tool calls had no configuration: nothing may have been written.
    assert sorted(p.name for p in (workspace / ".memprove").iterdir()) == []


def test_wire_edges(wire, server_python):
    for name, data in edge_cases(big=True):
        wire.exchange(data + b"\n")
    wire.finish()
    report("wire_edges", python=python_version(server_python), cases=wire.cases, messages=wire.messages,
           outcomes=dict(wire.outcomes))


def test_wire_fuzz_structured(wire, server_python):
    @settings(max_examples=FUZZ_EXAMPLES, **SETTINGS)
    @given(case=wire_case(wire.fresh_id))
    def run(case):
        wire.exchange(case)

    run()
    wire.finish()
    report("wire_fuzz_structured", python=python_version(server_python), cases=wire.cases,
           messages=wire.messages, answers=wire.answers, outcomes=dict(wire.outcomes))


def test_wire_fuzz_raw_bytes(wire, server_python):
    rng = random.Random(RAW_SEED)
    lines = corpus()
    for _ in range(FUZZ_EXAMPLES * 10):
        wire.exchange(mutate(rng, lines))
    wire.finish()
    report("wire_fuzz_raw", python=python_version(server_python), seed=RAW_SEED, cases=wire.cases,
           messages=wire.messages, answers=wire.answers, outcomes=dict(wire.outcomes))


# =============================================================================
# The tools
# =============================================================================
# Arguments are drawn from each tool's own inputSchema (as tools/list gives it):
# every property valid, at a boundary or invalid, plus unknown and missing keys.
# The oracle below decides from tools.md alone whether a set of arguments is
# valid, invalid, or in a corner the spec leaves open (then only "no crash").


UUID_TEXT = "0b9d6c1e-7c1e-4e2f-a911-5d0c3f4e2f41"
# A JSON-Schema `pattern` is an ECMA-262 regex: `$` is the end of the string, never
# "before a final newline" as in Python; ecma_search below reads it so, and so must
# the server (values ending in a newline are fuzzed like any other).


def fold(text):
    return " ".join(text.split())


def ecma_search(pattern, value):
    if pattern.endswith("$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, value) is not None


def as_number(value):
    """tools.md: an integer, an integral JSON number, or a string of decimal digits;
    None when it is none of them, "open" for a digit string past the 4,300 digits
    Python 3.11+ converts (the server refuses it, earlier interpreters take it)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and value and all("0" <= c <= "9" for c in value):
        return int(value) if len(value) <= 4300 else "open"
    return None


def input_errors(schema, value, where="$"):
    """Where `value` breaks an input schema, tools.md's lenient integers included;
    "open" entries mark corners the spec does not settle."""
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "integer" in kinds:
        number = as_number(value)
        if number == "open":
            return ["open"]
        if number is None:
            return ["%s: not a number" % where]
        if number < schema.get("minimum", number) or number > schema.get("maximum", number):
            return ["%s: out of range" % where]
        return []
    if "string" in kinds:
        if not isinstance(value, str):
            return ["%s: not a string" % where]
        errors = []
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            errors.append("%s: length" % where)
        if "pattern" in schema and not ecma_search(schema["pattern"], value):
            errors.append("%s: pattern" % where)
        if "enum" in schema and value not in schema["enum"]:
            errors.append("%s: enum" % where)
        return errors
    if "boolean" in kinds:
        return [] if isinstance(value, bool) else ["%s: not a boolean" % where]
    if "array" in kinds:
        if not isinstance(value, list):
            return ["%s: not a list" % where]
        errors = []
        if len(value) > schema.get("maxItems", len(value)) or len(value) < schema.get("minItems", 0):
            errors.append("%s: items" % where)
        for index, item in enumerate(value):
            errors += input_errors(schema["items"], item, "%s[%d]" % (where, index))
        return errors
    if "object" in kinds:
        if not isinstance(value, dict):
            return ["%s: not an object" % where]
        errors = []
        properties = schema.get("properties", {})
        for key in value:
            if key not in properties:
                errors.append("%s.%s: unknown" % (where, key))
        for key in schema.get("required", []):
            if key not in value:
                errors.append("%s.%s: missing" % (where, key))
        for key, item in value.items():
            if key in properties:
                errors += input_errors(properties[key], item, "%s.%s" % (where, key))
        return errors
    raise AssertionError("a schema type the oracle does not know: %r" % kinds)


def classify(tool, schema, args):
    """'valid', 'invalid' or 'open' (a corner tools.md does not settle)."""
    errors = input_errors(schema, args)
    if any(error != "open" for error in errors):
        return "invalid"
    if errors:
        return "open"
    if tool == "begin":
        if "task" in args and "new_task" in args:
            return "invalid"
        if "new_task" in args and not fold(args["new_task"]):
            return "invalid"
        if len(fold(args.get("agent_name", ""))) > 64:
            return "invalid"
    if tool == "end" and "session" in args and "abandoned" in args:
        return "invalid"
    if tool == "decide" and not fold(args["decision"]):
        return "invalid"
    if tool == "checkpoint":
        if any(not fold(fact["text"]) for fact in args.get("facts", [])):
            return "invalid"
        items = [item for item in args.get("open_items", []) if fold(item)]
        if not (args.get("facts") or items or args.get("reaffirm") or args.get("withdraw")
                or fold(args.get("next_action", ""))):
            # A list of blank open items is "non-empty" by one reading only.
            return "open" if args.get("open_items") else "invalid"
    return "valid"


class Texts:
    """Free texts carry a fresh marker, planted when the call turns out invalid."""

    def __init__(self):
        self.markers = []

    def planted(self):
        marker = "PLANTED-ARG-%s" % uuid.uuid4().hex[:12]
        self.markers.append(marker)
        return marker

    def make(self, draw, max_length, min_length):
        shape = draw(st.sampled_from(["plain", "plain", "blank", "max", "over", "unicode", "empty",
                                      "surrogate"]))
        marker = "PLANTED-ARG-%s" % uuid.uuid4().hex[:12]
        if shape == "empty":
            return ""
        if shape == "blank":
            return draw(st.sampled_from([" ", "\t\n", "\u3000 \u2028"]))
        if shape == "max":
            self.markers.append(marker)
            return (marker + " " + "m" * max_length)[:max_length]
        if shape == "over":
            self.markers.append(marker)
            return (marker + " " + "o" * max_length)[:max_length + 1]
        if shape == "unicode":
            self.markers.append(marker)
            return marker + " \u00e9\u4e2d\U0001F600 \u2028x\x00"
        if shape == "surrogate":
            # JSON allows a lone surrogate: a client that cuts a string inside an emoji
            # sends one (contract.md §6 rule 2).  It is a valid text.
            self.markers.append(marker)
            return marker + draw(st.sampled_from([" \ud83d", " \ud800 x", " \udfff", "\udc00\ud800"]))
        self.markers.append(marker)
        return marker + " " + draw(st.text(max_size=20)).replace("\n", " ").replace("\r", " ")


WRONG_TYPES = [None, True, False, 0, -1, 1.5, "", "abc", [], {}, [1], {"a": 1}, UUID_TEXT]


def value_for(draw, schema, texts, labels, mode):
    """A value for one schema node; mode 'valid' stays valid (boundaries included),
    'invalid' breaks this node."""
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if mode == "invalid":
        if "integer" in kinds:
            low, high = schema.get("minimum", 1), schema.get("maximum")
            options = [low - 1, -5, 2.5, "1.0", " 3", "3 ", "three", UUID_TEXT, "-1", "0x10",
                       True, None, [], {}, 1e400 if False else float(low) + 0.5]
            if high is not None:
                options += [high + 1, str(high + 1)]
            return draw(st.sampled_from(options))
        if "string" in kinds:
            options = list(WRONG_TYPES[:4]) + [5, 1.0, [], {}]
            if "maxLength" in schema:
                options.append(texts.planted() + " " + "x" * schema["maxLength"])
            if "pattern" in schema:
                options += ["r0", "R1", "r01", "r", "1", "r-1", " r1", "Implementer", "1abc",
                            "a" * 33, "a b", "r1 "]
                if schema["pattern"].startswith("^r"):
                    # contract.md §6 rule 7: at most 20 characters; no digit string raises.
                    options += ["r" + "1" * 20, "r" + "9" * 5000]
            if "enum" in schema:
                options += ["Open", "closed", "open ", ""]
            if schema.get("minLength", 0) >= 1:
                options.append("")
            return draw(st.sampled_from(options))
        if "boolean" in kinds:
            return draw(st.sampled_from([0, 1, "true", None, [], "false"]))
        if "array" in kinds:
            choice = draw(st.sampled_from(["type", "too-many", "bad-item"]))
            if choice == "type":
                return draw(st.sampled_from(["r1", 3, None, {"0": 1}, True]))
            if choice == "too-many":
                item = value_for(draw, schema["items"], texts, labels, "valid")
                return [item] * (schema.get("maxItems", 50) + 1)
            return [value_for(draw, schema["items"], texts, labels, "invalid")]
        if "object" in kinds:
            choice = draw(st.sampled_from(["type", "unknown", "missing", "bad"]))
            if choice == "type":
                return draw(st.sampled_from(["text", 1, None, []]))
            value = value_for(draw, schema, texts, labels, "valid")
            if choice == "unknown":
                value["evidence"] = ["r1"]
            elif choice == "missing":
                value.pop(schema["required"][0], None)
            else:
                key = draw(st.sampled_from(sorted(schema["properties"])))
                value[key] = value_for(draw, schema["properties"][key], texts, labels, "invalid")
            return value
    # valid (and boundary) values
    if "integer" in kinds:
        low, high = schema.get("minimum", 1), schema.get("maximum")
        top = high if high is not None else 12
        number = draw(st.sampled_from([low, low, top, low + 1, (low + top) // 2]
                                      + ([] if high is not None else [10 ** 17, 999])))
        form = draw(st.sampled_from(["int", "int", "int", "float", "str", "zeros"]))
        if form == "float":
            return float(number)
        if form == "str":
            return str(number)
        if form == "zeros":
            return "00" + str(number)
        return number
    if "string" in kinds:
        if "enum" in schema:
            return draw(st.sampled_from(schema["enum"]))
        if "pattern" in schema:
            if schema["pattern"].startswith("^r"):
                return draw(st.sampled_from(labels + ["r999", "r1234567"]))
            return draw(st.sampled_from(["implementer", "reviewer", "a", "a" + "b" * 31,
                                         "x-1", "tester-2"]))
        text = texts.make(draw, schema.get("maxLength", 200), schema.get("minLength", 0))
        if len(text) > schema.get("maxLength", len(text)):
            text = text[:schema["maxLength"]]
        if len(text) < schema.get("minLength", 0):
            text = "t"
        return text
    if "boolean" in kinds:
        return draw(st.booleans())
    if "array" in kinds:
        low, high = schema.get("minItems", 0), schema.get("maxItems", 50)
        size = draw(st.sampled_from([low, low, max(low, 1), max(low, 2), high]))
        return [value_for(draw, schema["items"], texts, labels, "valid") for _ in range(size)]
    if "object" in kinds:
        value = {}
        for key, sub in schema["properties"].items():
            if key in schema.get("required", []) or draw(st.booleans()):
                value[key] = value_for(draw, sub, texts, labels, "valid")
        return value
    raise AssertionError(kinds)


@st.composite
def tool_arguments(draw, schema, labels):
    texts = Texts()
    mode = draw(st.sampled_from(["valid", "valid", "invalid", "invalid", "unknown", "missing"]))
    args = {}
    properties = schema["properties"]
    for key, sub in properties.items():
        if key in schema.get("required", []) or draw(st.sampled_from([False, False, True])):
            args[key] = value_for(draw, sub, texts, labels, "valid")
    if mode == "invalid" and properties:
        key = draw(st.sampled_from(sorted(properties)))
        args[key] = value_for(draw, properties[key], texts, labels, "invalid")
    elif mode == "unknown":
        args[draw(st.sampled_from(["x", "task_id", "session_id", "Task", "argument with space",
                                   "\u00e9", "evidence"]))] = draw(st.sampled_from(
                                       [1, texts.planted(), None, [], {"text": texts.planted()}]))
    elif mode == "missing" and schema.get("required"):
        args.pop(schema["required"][0], None)
    return args, texts.markers


def ascii_context(path):
    """context.json parsed, once it is seen to be ASCII (contract.md §6 rule 2); None when
    there is no file to read."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    assert data.isascii(), data[:300]
    context = json.loads(data.decode("ascii"))
    assert isinstance(context, dict), context
    return context


class World:
    """A server and the reference daemon with a Task, a Session, claims of every kind
    and two Runs (r1 failed, r2 passed), for the tool fuzz."""

    def __init__(self, server, daemon, config, workspace):
        self.server, self.daemon, self.config, self.workspace = server, daemon, config, workspace
        self.serial = 0
        self.begin("Fuzz world")
        import ledgerd
        session_id = self.context()["session"]["id"]
        for code in (1, 0):
            ledgerd.memprove_run(daemon.url, config.token, str(workspace), session_id,
                                 "pytest -q", code)
        self.labels = ["r1", "r2"]
        code, value = self.call("checkpoint", {
            "facts": [{"text": "A fact.", "runs": ["r1"]}, {"text": "Another fact."}],
            "open_items": ["An open item.", "Another open item."],
            "next_action": "Do the next thing."})
        assert code == "ok", value
        code, value = self.call("decide", {"decision": "A decision.", "rationale": "Because."})
        assert code == "ok", value

    def context(self):
        return json.loads((self.workspace / ".memprove" / "context.json").read_text("utf-8"))

    def call(self, tool, args, era="legacy"):
        self.serial += 1
        self.last_response = self.server.call(tool, args, era=era, id="t%d" % self.serial)
        return outcome_of(self.last_response, era)

    def begin(self, title):
        code, value = self.call("begin", {"new_task": title})
        assert code == "ok", value

    def poison_context(self, value):
        """Another tool's key in context.json, holding lone surrogates (as \\u escapes)."""
        path = self.workspace / ".memprove" / "context.json"
        try:
            context = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, ValueError):
            return
        context["x-fuzz-other-tool"] = value
        path.write_bytes(json.dumps(context, indent=2).encode("ascii"))

    def check_context(self, poison):
        """contract.md §6 rule 2: context.json is ASCII JSON, and keeps unknown keys."""
        context = ascii_context(self.workspace / ".memprove" / "context.json")
        if context is not None and poison is not None:
            assert context.get("x-fuzz-other-tool") == poison, context

    def ensure_session(self):
        try:
            context = self.context()
        except (OSError, ValueError):
            context = {}
        if not context.get("session"):
            code, value = self.call("begin", {})
            if code != "ok":
                self.begin("Fuzz world again")


@pytest.fixture
def world(hserve, config, daemon, workspace, planted):
    watch = TokenWatch(daemon, [config.token], planted)
    server = hserve(config=config, timeout=5)
    server.initialize()
    built = World(server, daemon, config, workspace)
    yield built
    watch.check()


@pytest.mark.parametrize("tool", EXPECTED_TOOLS)
def test_tool_fuzz(world, tool, planted, config, workspace):
    server = world.server
    tools = dict((entry["name"], entry) for entry in server.request("tools/list")["result"]["tools"])
    # `pack` alone declares none: its result object rides in _meta (tools.md).
    schema, output_schema = tools[tool]["inputSchema"], tools[tool].get("outputSchema")
    tally = {"calls": 0, "valid": 0, "invalid": 0, "open": 0, "ok": 0, "problems": Counter()}

    @settings(max_examples=FUZZ_EXAMPLES, **SETTINGS)
    @given(drawn=tool_arguments(schema, world.labels), era=st.sampled_from(["legacy", "modern"]),
           poison=st.sampled_from([None, None, "\ud800", "cut \ud83d", ["\udfff", {"k": "\udc00"}]]))
    def run(drawn, era, poison):
        args, markers = drawn
        kind = classify(tool, schema, args)
        if tool in ("checkpoint", "decide", "end", "complete"):
            world.ensure_session()
        if poison is not None:
            world.poison_context(poison)
        if kind == "invalid":
            planted.update(markers)
        ops_before = len(world.daemon.ops)
        files_before = snapshot(workspace, config.dir)
        code, value = world.call(tool, args, era)
        tally["calls"] += 1
        tally[kind] += 1
        assert code != "internal_error", (args, value)
        if code == "ok":
            tally["ok"] += 1
            if output_schema is not None:
                assert schema_errors(output_schema, value) == [], (args, value)
        else:
            assert code in PROBLEM_CODES, value
            tally["problems"][code] += 1
        if kind == "invalid":
            assert code == "invalid_params", (tool, args, code, value)
            assert len(world.daemon.ops) == ops_before, (
                "an invalid call sent %r" % [op["op"] for op in world.daemon.ops[ops_before:]])
            assert snapshot(workspace, config.dir) == files_before, "an invalid call wrote a file"
        elif kind == "valid":
            assert code != "invalid_params", (tool, args, value)
        world.check_context(poison)

    run()
    assert tally["valid"] > 0 and tally["invalid"] > 0, tally
    assert server.close() == 0
    report("tool_fuzz", tool=tool, calls=tally["calls"], valid=tally["valid"],
           invalid=tally["invalid"], open=tally["open"], ok=tally["ok"],
           problems=dict(tally["problems"]))


@pytest.mark.parametrize("tool, args", [
    ("begin", {"new_task": "Trailing newline role", "agent_role": "implementer\n"}),
    ("checkpoint", {"facts": [{"text": "A fact.", "runs": ["r1\n"]}]}),
    ("decide", {"decision": "A decision.", "runs": ["r2\n"]}),
], ids=["begin-agent_role", "checkpoint-label", "decide-label"])
def test_pattern_rejects_a_trailing_newline(world, tool, args, workspace, config):
    """tools.md: labels match `^r[1-9][0-9]*$` and roles `^[a-z][a-z0-9-]{0,31}$` as JSON
    Schema patterns (ECMA-262: `$` is the end of input); bad arguments send nothing."""
    world.ensure_session()
    ops_before = len(world.daemon.ops)
    code, value = world.call(tool, args)
    assert (code, len(world.daemon.ops)) == ("invalid_params", ops_before), (code, value)


# =============================================================================
# Workspace roots of arbitrary bytes (contract.md §2, issue 11)
# =============================================================================

PATH_CALLS = [("begin", {"new_task": "Path fuzz"}), ("tasks", {}), ("pack", {}),
              ("end", {}), ("checkpoint", {"next_action": "Go on."}), ("context", {})]


@pytest.fixture
def linked_server(hserve, config, daemon, tmp_path):
    """A server whose CLAUDE_PROJECT_DIR is a symlink the test re-points between calls: the
    server resolves it (§2: paths are resolved), so each call meets another root."""
    link = tmp_path / "project-link"
    home = tmp_path / "roots"
    home.mkdir()
    first = home / "first"
    first.mkdir()
    link.symlink_to(first)
    server = hserve(config=config, timeout=5, env={"CLAUDE_PROJECT_DIR": str(link)})
    server.initialize()
    return server, link, home


def _point(link, target):
    fresh = os.fsencode(str(link)) + b".new"
    os.symlink(target, fresh)
    os.rename(fresh, os.fsencode(str(link)))


def test_workspace_path_fuzz(linked_server, daemon):
    """§2: a root whose name is not valid UTF-8 is `workspace_unusable` from every tool that
    needs the Workspace, before any daemon operation, and `context` says so; a root whose
    name is valid UTF-8, however odd, is used (never workspace_unusable, never internal_error)."""
    server, link, home = linked_server
    serial = [0]
    tally = Counter()

    @settings(max_examples=max(20, FUZZ_EXAMPLES // 3), **SETTINGS)
    @given(name=st.binary(min_size=1, max_size=12).filter(
               lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b"..")),
           call=st.sampled_from(PATH_CALLS))
    def run(name, call):
        serial[0] += 1
        root = os.fsencode(str(home)) + b"/%d-" % serial[0] + name
        os.mkdir(root)
        os.mkdir(root + b"/.memprove")
        os.mkdir(root + b"/.git")
        _point(link, root)
        try:
            root.decode("utf-8")
            usable = True
        except UnicodeDecodeError:
            usable = False
        tool, args = call
        ops_before = len(daemon.ops)
        code, value = outcome_of(server.call(tool, args, id="p%d" % serial[0]))
        assert code != "internal_error", (root, tool, value)
        tally[(usable, code)] += 1
        if tool == "context":
            assert code == "ok", value
            assert value["workspace"]["problem"] == (None if usable else "workspace_unusable"), value
        elif usable:
            assert code != "workspace_unusable", (root, tool, value)
        else:
            assert code == "workspace_unusable", (root, tool, value)
            assert len(daemon.ops) == ops_before, [op["op"] for op in daemon.ops[ops_before:]]
            assert os.listdir(root + b"/.memprove") == []

    run()
    assert server.close() == 0
    report("workspace_path_fuzz", calls=sum(tally.values()),
           outcomes=dict(("%s %s" % ("utf8" if k[0] else "not-utf8", k[1]), n)
                         for k, n in tally.items()))


# =============================================================================
# Daemon answers with a field of the wrong type (contract.md §6 rule 3, issue 11)
# =============================================================================

# (operation, path in its answer) for every field the server may read, with the tool
# calls that send the operation.
ANSWER_FIELDS = {
    "resolveWorkspace": [("workspace",), ("workspace", "id")],
    "createTask": [("task",), ("task", "id"), ("task", "number"), ("task", "title"),
                   ("task", "status")],
    "listTasks": [("tasks",), ("tasks", 0), ("tasks", 0, "id"), ("tasks", 0, "number"),
                  ("tasks", 0, "title"), ("tasks", 0, "status"), ("tasks", 0, "open_items"),
                  ("tasks", 0, "sessions_open")],
    "createSession": [("session",), ("session", "id"), ("session", "number"),
                      ("session", "agent"), ("session", "agent", "name")],
    "transitionTask": [("task",), ("task", "id"), ("task", "number"), ("task", "status")],
    "listSessions": [("sessions",), ("sessions", 0), ("sessions", 0, "id"),
                     ("sessions", 0, "number"), ("sessions", 0, "state"),
                     ("sessions", 0, "task_id"), ("sessions", 0, "parent_session_id"),
                     ("sessions", 0, "parent_number")],
    "endSession": [("session",), ("session", "state"), ("session", "number")],
    "getTaskCapsule": [("capsule",), ("capsule", "task"), ("capsule", "task", "id"),
                       ("capsule", "task", "number"), ("capsule", "task", "title"),
                       ("capsule", "task", "status"), ("capsule", "claims"),
                       ("capsule", "claims", 0), ("capsule", "claims", 0, "number"),
                       ("capsule", "claims", 0, "kind"), ("capsule", "claims", 0, "text"),
                       ("capsule", "claims", 0, "state"), ("capsule", "claims", 0, "evidence"),
                       ("capsule", "runs"), ("capsule", "runs", 0), ("capsule", "runs", 0, "id"),
                       ("capsule", "runs", 0, "label"), ("capsule", "runs", 0, "passed"),
                       # §6 rule 21: the fields a Run's Pack line shows.
                       ("capsule", "runs", 0, "exit_code"), ("capsule", "runs", 0, "command"),
                       ("capsule", "runs", 0, "finished_at"),
                       ("capsule", "sessions"), ("capsule", "sessions", 0),
                       ("capsule", "sessions", 0, "id"), ("capsule", "sessions", 0, "number"),
                       ("capsule", "sessions", 0, "state"), ("capsule", "ledger")],
    "createCheckpoint": [("checkpoint",), ("checkpoint", "number"), ("checkpoint", "claims"),
                         ("checkpoint", "claims", 0), ("checkpoint", "claims", 0, "number"),
                         ("checkpoint", "claims", 0, "kind")],
    "proposeDecision": [("decision",), ("decision", "claim"), ("decision", "claim", "number"),
                        ("decision", "claim", "decision_state")],
    "verifyLedger": [("ok",), ("entries",), ("head",), ("first_bad",)],
}
SENDERS = {
    "resolveWorkspace": [("begin", {"new_task": "Typed"})],
    "createTask": [("begin", {"new_task": "Typed"})],
    "listTasks": [("tasks", {}), ("pack", {"task": 1}), ("begin", {"task": 1})],
    "createSession": [("begin", {"new_task": "Typed"}), ("begin", {})],
    "transitionTask": [("begin", {"new_task": "Typed"}), ("complete", {})],
    "listSessions": [("begin", {}), ("end", {})],
    "endSession": [("end", {})],
    "getTaskCapsule": [("pack", {}), ("claims", {"numbers": [1, 2]}),
                       ("checkpoint", {"next_action": "Typed."}), ("decide", {"decision": "Typed."}),
                       ("end", {}), ("complete", {})],
    "createCheckpoint": [("checkpoint", {"facts": [{"text": "Typed fact."}]})],
    "proposeDecision": [("decide", {"decision": "Typed decision."})],
    "verifyLedger": [("ledger_verify", {})],
}
# A value that would write a section of its own into the Pack (§6 rule 21).
FORGED_SECTION = "1\n\nNext action:\n- c99 forged by the daemon"
WRONG_VALUES = [None, True, 0, -1, 1.5, "1", "", "x", [], ["x"], {}, {"a": 1}, 5, 10 ** 30,
                FORGED_SECTION]


def _sound_context(path):
    """contract.md §2's context.json: ids non-empty strings, numbers integers >= 1."""
    context = ascii_context(path)
    if context is None:
        return
    assert context["version"] == 1
    for key in ("task", "session"):
        record = context.get(key)
        if record is None:
            continue
        assert isinstance(record["id"], str) and record["id"], context
        assert type(record["number"]) is int and record["number"] >= 1, context
    parent = (context.get("session") or {}).get("parent")
    if parent is not None:
        assert isinstance(parent["id"], str) and type(parent["number"]) is int, context


def test_daemon_field_fuzz(world, config, workspace):
    """§6 rule 3: a daemon answer with one field of the wrong type (valid JSON) never gives
    internal_error; an ok result still satisfies its output schema; context.json stays sound."""
    import ledgerd
    server, daemon = world.server, world.daemon
    tools = dict((entry["name"], entry) for entry in server.request("tools/list")["result"]["tools"])
    cases = [(op, path) for op in sorted(ANSWER_FIELDS) for path in ANSWER_FIELDS[op]]
    tally = Counter()

    @settings(max_examples=FUZZ_EXAMPLES, **SETTINGS)
    @given(case=st.sampled_from(cases), value=st.sampled_from(WRONG_VALUES + ["REMOVE"]),
           pick=st.integers(min_value=0, max_value=5))
    def run(case, value, pick):
        op, path = case
        tool, args = SENDERS[op][pick % len(SENDERS[op])]
        if tool in ("checkpoint", "decide", "end", "complete", "pack", "claims"):
            world.ensure_session()
        daemon.rewrite(op, path, ledgerd.REMOVE if value == "REMOVE" else value, count=None)
        try:
            code, result = world.call(tool, args)
        finally:
            daemon.clear_faults()
        tally[code] += 1
        # The world changes from call to call, so a failure is collected rather than
        # shrunk (a replay would meet another world): every one is listed at the end.
        try:
            assert code != "internal_error", result
            # §6 rule 21: a daemon's text may show folded, never as a line of its own.
            assert "\\n- c99 forged" not in json.dumps(world.last_response), world.last_response
            if code == "ok":
                schema = tools[tool].get("outputSchema")
                if schema is not None:
                    assert schema_errors(schema, result) == [], result
            _sound_context(workspace / ".memprove" / "context.json")
        except AssertionError as error:
            failures.append((op, path, value, tool, str(error)[:300]))

    failures = []
    run()
    assert failures == [], "%d of %d calls broke §6 rule 3: %r" % (
        len(failures), sum(tally.values()), failures[:10])
    assert world.server.close() == 0
    report("daemon_field_fuzz", calls=sum(tally.values()), outcomes=dict(tally))


# =============================================================================
# Issue 18's input classes: client responses, hostile .memprove/ trees, client files
# =============================================================================
# Each of these fuzzers shares one world (a server, the daemon, files) between its
# examples, so a failure is not shrunk (a replay would meet another world, and a server
# stuck on one case fails every later one): the first failure stops the test, naming its
# case.

NO_SHRINK = dict(SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate])


# -- the client's answers to roots/list (clients.md; contract.md §6 rule 18) ------------

def _file_uri(path):
    return server_file_uri(path)


def _uri_of_length(path, length):
    uri = _file_uri(path)
    pad = length - len(uri.encode())
    return uri + "/." * (pad // 2) + "/" * (pad % 2)


class RootsWorld:
    """A legacy session that declared roots, its working directory outside three projects,
    and a model of what clients.md and §6 rule 18 make of the client's messages: only the
    newest roots/list is pending; its good answer gives the start directory (the first
    usable root of the first 1,000 that holds the working directory, else the first
    usable one, else none); any other response is dropped unread."""

    def __init__(self, server, elsewhere, projects):
        self.server, self.elsewhere, self.projects = server, elsewhere, projects
        deep = projects[0] / "a" / "b"
        deep.mkdir(parents=True)
        # (URI, the start directory it gives or None, the Workspace root that start gives),
        # paths as the server computes them (under Windows: Z:\...)
        at = dict((str(path), server_path(path)) for path in list(projects) + [deep, elsewhere])
        self.here = at[str(elsewhere)]
        self.pool = [(_file_uri(p), at[str(p)], at[str(p)]) for p in projects] + [
            (_file_uri(deep), at[str(deep)], at[str(projects[0])]),
            ("file://localhost" + _file_uri(projects[1])[len("file://"):], at[str(projects[1])],
             at[str(projects[1])]),
            (_file_uri(elsewhere), self.here, self.here),
            (_uri_of_length(projects[2], 4096), at[str(projects[2])], at[str(projects[2])]),
            (_uri_of_length(projects[2], 5000), None, None),
            ("vscode-remote://wsl+Ubuntu" + _file_uri(projects[0])[len("file://"):], None, None),
            ("https://example.com/x", None, None), ("file://remote-host/share/x", None, None),
            ("file:relative/path", None, None), ("file:///tmp/\u0000nul", None, None),
            ("file:///tmp/%00nul", None, None), ("", None, None), ("::::", None, None)]
        self.asked, self.pending, self.start = 1, 1, None
        self.serial = 0

    def request_id(self, number):
        return "memprove-roots-%d" % number

    def expected(self):
        if self.start is None:
            return self.here, "working directory"
        return dict((start, root) for _, start, root in self.pool if start)[self.start], "roots"

    def changed(self, count):
        for _ in range(count):
            self.server.notify("notifications/roots/list_changed")
        for number in range(self.asked + 1, self.asked + count + 1):
            request = self.server.server_request()
            assert request["id"] == self.request_id(number), (request, number)
        self.asked += count
        self.pending = self.asked

    def stray(self, kind, payload, size_log2):
        if kind == "older" and self.asked > 1:
            number = self.asked - 1 if self.pending == self.asked else self.asked
            request_id = self.request_id(number)
        elif kind in ("never-sent", "older"):
            request_id = self.request_id(self.asked + 1000)
        else:
            request_id = {"not-a-number": "memprove-roots-x", "integer": 7, "other": "other"}[kind]
        message = {"jsonrpc": "2.0", "id": request_id}
        if payload == "huge":
            message["result"] = {"roots": [{"uri": "file:///" + "a/" * (2 ** size_log2 // 2)}]}
        elif payload == "good":
            message["result"] = {"roots": [{"uri": _file_uri(self.projects[2])}]}
        else:
            message["error"] = {"code": -32603, "message": "no"}
        self.server.send(message)

    def answer(self, answer):
        if self.pending is None:
            return
        message = {"jsonrpc": "2.0", "id": self.request_id(self.pending)}
        self.pending = None
        if answer[0] == "roots":
            _, junk, picks = answer
            entries = [("vscode-remote://x/%d" % n, None, None) for n in range(junk)] + \
                [self.pool[index] for index in picks]
            message["result"] = {"roots": [{"uri": uri} for uri, _, _ in entries]}
            starts = [start for _, start, _ in entries[:1000] if start]
            holding = [start for start in starts if start == self.here]
            self.start = (holding or starts or [None])[0]
        elif answer[0] == "error":
            message["error"] = {"code": -32601, "message": "Method not found"}
        else:
            message["result"] = answer[1]
        self.server.send(message)


MALFORMED_ROOTS = [{"roots": "x"}, {"roots": [{"name": "no uri"}]}, {"roots": [{"uri": 42}]},
                   {"roots": [None]}, {}, [], "roots", None]
ROOTS_ANSWER = st.one_of(
    st.tuples(st.just("roots"), st.sampled_from([0, 0, 0, 999, 1000]),
              st.lists(st.integers(0, 15), max_size=6)),
    st.just(("error",)),
    st.tuples(st.just("malformed"), st.sampled_from(MALFORMED_ROOTS)))
ROOTS_STEP = st.one_of(
    st.tuples(st.just("changed"), st.integers(1, 30)),
    st.tuples(st.just("stray"), st.sampled_from(["never-sent", "older", "not-a-number",
                                                 "integer", "other"]),
              st.sampled_from(["huge", "good", "error"]), st.integers(10, 21)),
    st.tuples(st.just("answer"), ROOTS_ANSWER))


def test_roots_fuzz(hserve, tmp_path):
    """Lists of roots of every kind, list_changed storms, and responses the server never
    asked for (or no longer waits for) holding roots of up to 2 MiB: after each case a
    ping is answered (within the harness's safety timeout) and `context` finds the
    Workspace the model says."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".git").mkdir(parents=True)
    projects = [make_workspace(tmp_path / ("project %d" % n)) for n in range(3)]
    server = hserve(cwd=elsewhere)
    params = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": True}},
              "clientInfo": {"name": "roots-fuzz", "version": "1.0"}}
    assert "result" in server.request("initialize", params)
    server.notify("notifications/initialized")
    assert server.server_request()["id"] == "memprove-roots-1"
    world = RootsWorld(server, elsewhere, projects)
    tally = Counter()

    @settings(max_examples=FUZZ_EXAMPLES, **NO_SHRINK)
    @given(steps=st.lists(ROOTS_STEP, min_size=1, max_size=6))
    def run(steps):
        for step in steps:
            getattr(world, step[0])(*step[1:])
            tally[step[0]] += 1
        world.answer(("error",))                 # nothing left pending: no call waits
        assert server.request("ping")["result"] == {}, steps
        result = server.call("context")["result"]
        workspace = result["structuredContent"]["workspace"]
        assert (workspace["root"], workspace["found_by"]) == world.expected(), (steps, workspace)
        tally["cases"] += 1

    run()
    assert server.close() == 0
    report("roots_fuzz", cases=tally["cases"], steps=dict(tally))


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


# -- long lines in a client's TOML or YAML file (doctor; contract.md §6 rule 16) --------

LONG_LINE_FILES = {"codex": ("home", ".codex/config.toml"),
                   "continue": ("root", ".continue/mcpServers/memprove.yaml"),
                   "goose": ("home", ".config/goose/config.yaml")}
PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7e)


MAX_TOML = 256 * 1024                    # memprove_mcp.MAX_TOML: what doctor parses whole


def still_toml(text):
    """Whether `text` is TOML for a parser (the test's Python has one, tomllib, as doctor
    running under it does), or, with no parser, whether the line scanner reads it."""
    try:
        import tomllib
    except ImportError:
        return True
    if len(text) > MAX_TOML:             # past it doctor's line scanner reads it
        return True
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def test_client_file_long_line_fuzz(pyz, make_env, home, workspace, config, daemon, planted):
    """print-config's entry for codex, continue or goose with lines of 5,000 to 300,000
    printable characters put anywhere (comments, keys, `[` and `-` and quotes, a token
    assignment): lines over 4 KiB are skipped, so doctor finds the entry as print-config
    wrote it (`ok`), within its promise of MEMPROVE_TIMEOUT plus a second."""
    env = make_env({"MEMPROVE_CONFIG_DIR": config.dir, "MEMPROVE_TIMEOUT": "2",
                    "XDG_CACHE_HOME": home / ".cache"})
    texts = {}
    for name in LONG_LINE_FILES:
        done = run_cli(sys.executable, pyz, ["mcp", "print-config", "--client", name], env,
                       workspace)
        assert done.returncode == 0, done.stderr
        texts[name] = done.stdout.decode("utf-8")
    tally = Counter()

    @settings(max_examples=max(10, FUZZ_EXAMPLES // 10), **NO_SHRINK)
    @given(name=st.sampled_from(sorted(LONG_LINE_FILES)),
           insertions=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 12),
                                         st.text(PRINTABLE, min_size=1, max_size=40)
                                         | st.sampled_from(["x", "# ", "a=", "- ", "[", '"',
                                                            "MEMPROVE_TOKEN=" + config.token]),
                                         st.integers(5000, 300000)),
                               min_size=1, max_size=3))
    def run(name, insertions):
        lines = texts[name].splitlines(True)
        for position, indent, unit, length in insertions:
            text = (unit * (length // len(unit) + 1))[:length]
            lines.insert(position % (len(lines) + 1), " " * indent + text + "\n")
        base, relative = LONG_LINE_FILES[name]
        path = (workspace if base == "root" else home) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes("".join(lines).encode("ascii"))
        try:
            done = run_cli(sys.executable, pyz, ["mcp", "doctor", "--json", "--client", name],
                           env, workspace, timeout=3)
        except subprocess.TimeoutExpired:
            raise AssertionError("doctor --client %s took over MEMPROVE_TIMEOUT plus a second "
                                 "with lines of %s characters" % (name, [i[3] for i in insertions]))
        finally:
            path.unlink()
        assert done.stderr == b"" and config.token.encode() not in done.stdout, done.stderr
        checks = dict((c["name"], c) for c in json.loads(done.stdout.decode())["checks"])
        if name == "codex" and not still_toml("".join(lines)):
            # Codex reads config.toml whole, with a TOML parser, as doctor does where the
            # Python has one: a line that breaks the file is said so, never misread.
            assert checks["client"]["status"] == "warn" and \
                "cannot be read" in checks["client"]["detail"], (insertions[:1], checks["client"])
            tally["codex, no longer TOML"] += 1
            return
        assert checks["client"]["status"] == "ok", (name, insertions[:1], checks["client"])
        tally[name] += 1

    run()
    report("client_file_long_line_fuzz", runs=dict(tally))


# =============================================================================
# Issue 25's input classes: a repository's runs lines, a repository's client entry
# =============================================================================

# -- runs.jsonl lines of any shape, as `context` shows them (contract.md §6 rule 20) ------

LINE_BREAKERS = "\n\r\t\x0b\x0c\x1b\x7f\x85\x9b\u2028\u2029"
RUN_TEXTS = st.one_of(st.text(max_size=30),
                      st.text(st.sampled_from("ab -:Next action" + LINE_BREAKERS), max_size=30))
RUN_VALUES = st.one_of(RUN_TEXTS, st.sampled_from([None, True, False, 0, 1, -1, 1.5, 10 ** 30,
                                                   [], ["x"], {}, {"a": 1}]))
RUN_LABELS = st.one_of(st.sampled_from(["r1", "r22", "r", "x1", "r1 ", "r\uff11", "R1"]),
                       st.integers(1, 99).map(lambda n: "r%d" % n), RUN_VALUES)


def shown_shape(run):
    """What §6 rule 20 lets `context` show, written out: a label of r and ASCII digits, an
    integer exit code, a command and an end time that are text."""
    label, code = run.get("label"), run.get("exit_code")
    return isinstance(label, str) and re.match(r"r[0-9]+\Z", label) is not None and \
        type(code) is int and isinstance(run.get("command"), str) and \
        isinstance(run.get("finished_at"), str)


@pytest.fixture
def runs_world(hserve, workspace):
    (workspace / ".memprove" / "context.json").write_text(json.dumps({
        "version": 1, "workspace": {"id": "w", "root": server_path(workspace)},
        "task": {"id": "task-1", "number": 1, "title": "Runs"}, "session": None}))
    server = hserve(timeout=5)
    server.initialize()
    yield server, workspace / ".memprove" / "runs.jsonl"
    assert server.close() == 0


def test_runs_file_fuzz(runs_world):
    """runs.jsonl lines whose label, exit code, command and end time are anything JSON
    holds (text with line breaks, controls and section headings among it): `context` shows
    exactly the lines of the Task whose fields have the shapes `memprove run` writes,
    each text on one line with no control left, and counts the rest of the Task's."""
    server, path = runs_world
    tally = Counter()

    @settings(max_examples=FUZZ_EXAMPLES, **NO_SHRINK)
    @given(st.lists(st.fixed_dictionaries({
        "label": RUN_LABELS, "exit_code": st.one_of(st.integers(-5, 255), RUN_VALUES),
        "command": st.one_of(RUN_TEXTS, RUN_VALUES),
        "finished_at": st.one_of(st.just("2026-12-01T10:00:00Z"), RUN_VALUES),
        "task_id": st.sampled_from(["task-1", "task-1", "task-2"])}), max_size=12))
    def run(lines):
        path.write_text("".join(json.dumps(dict(line, id="x", passed=False)) + "\n"
                                for line in lines))
        result = server.call("context")["result"]
        value = result["structuredContent"]
        own = [line for line in lines if line["task_id"] == "task-1"]
        wanted = sorted(line["label"] for line in own if shown_shape(line))
        assert sorted(run["label"] for run in value["runs"]) == wanted, (lines, value["runs"])
        assert value["runs_skipped"] == len(own) - len(wanted), (lines, value)
        for shown in value["runs"]:
            for key in ("command", "finished_at"):
                assert not any(char < " " or "\x7f" <= char <= "\x9f" or char in "\u2028\u2029"
                               for char in shown[key]), shown
            assert type(shown["exit_code"]) is int, shown
        tally["lines"] += len(lines)
        tally["shown"] += len(value["runs"])

    run()
    report("runs_file_fuzz", **tally)


# -- a repository's client entry holding controls, as doctor shows it (§6 rule 23) --------

DOCTOR_LINE = re.compile(r"(ok  |warn|fail|skip)  [a-z_]+ +\S|      fix: \S")
ENTRY_TEXT = st.text(st.one_of(st.sampled_from(LINE_BREAKERS + "\x00\x07\x08\x1a\u0085"),
                               st.characters(min_codepoint=0x20, max_codepoint=0x2030)),
                     min_size=1, max_size=40)


def test_doctor_client_entry_fuzz(pyz, make_env, home, tmp_path):
    """A project's `.mcp.json` whose memprove entry's command, arguments and configuration
    directory hold line breaks, ESC, NEL, CSI, U+2028 and any other text: every line
    doctor prints is a check's or its fix, no control reaches standard output, and
    `--json` holds none raw either."""
    project = make_workspace(tmp_path / "project")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    env = make_env({"MEMPROVE_CONFIG_DIR": config_dir})
    tally = Counter()

    @settings(max_examples=max(10, FUZZ_EXAMPLES // 5), **NO_SHRINK)
    @given(command=ENTRY_TEXT, args=st.lists(ENTRY_TEXT, max_size=4), config=ENTRY_TEXT)
    def run(command, args, config):
        entry = {"command": command, "args": args + ["--config-dir", config],
                 "env": {"MEMPROVE_CONFIG_DIR": config}}
        (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"memprove": entry}}),
                                           encoding="utf-8")
        for json_output in (False, True):
            done = run_cli(sys.executable, pyz,
                           ["mcp", "doctor"] + (["--json"] if json_output else []), env, project)
            text = done.stdout.decode("utf-8")
            raw = [char for char in text if (char < " " and char != "\n") or
                   "\x7f" <= char <= "\x9f" or char in "\u2028\u2029"]
            assert raw == [], (entry, text)
            if json_output:
                json.loads(text)
            else:
                assert all(DOCTOR_LINE.match(line) for line in text.splitlines()), (entry, text)
        tally["entries"] += 1

    run()
    report("doctor_client_entry_fuzz", **tally)
