"""The wire, fuzzed (issue 5, item 1), against the built .pyz: what the bounded line reader and
the eras' classification make of any line a client writes.

Hypothesis-generated JSON-RPC messages of both eras with wrong types in every field,
duplicate keys, NaN/Infinity, huge numbers and strings, batches; a seeded generator of raw
mutated bytes (invalid UTF-8, truncated lines, deep nesting, stray CR and NUL); and fixed cases
for the edges (lines of exactly 16 MiB and one byte more, 100,000-deep nesting).  Each case is
followed by a ping; the answers must be exactly what protocol.md says (an oracle counts them:
one answer per request id, one id-less -32700/-32600 per line that is not a request), never
-32603, and standard output stays pure (conftest.Server.check at close).  One server process
per interpreter serves every case.
"""

import json
import random
from collections import Counter

import pytest

from hardening_support import (Expectation, FUZZ_EXAMPLES, MAX_LINE, SETTINGS, check_wire_response,
                               claim_response, hypothesis_or_fail, id_key, python_version, report,
                               split_lines, take_noid)
from harness import EXPECTED_TOOLS, META_CAPABILITIES, META_CLIENT, META_VERSION, MODERN_VERSION

hypothesis_or_fail()
from hypothesis import given, settings, strategies as st  # noqa: E402


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
