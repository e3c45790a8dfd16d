"""End-to-end tests of protocol.md: the built .pyz under every supported
interpreter, driven over real pipes (see conftest.Server).

Every server is also checked at close: only compact JSON-RPC responses on
standard output, one log line per message on standard error, no planted value
on either."""

import json
import os
import signal

import pytest

from harness import (EXPECTED_TOOLS, LEGACY_VERSIONS, META_CAPABILITIES, META_SERVER, META_VERSION,
                     MODERN_VERSION, READ_TOOLS, SAFETY_TIMEOUT, TOOL_SAMPLES, WRITE_TOOLS,
                     initialize_params, log_text, make_workspace, modern_meta, modern_params,
                     schema_errors, schema_keyword_problems, server_path)

INVALID_PARAMS_TEXT = "invalid_params: The arguments do not match the tool's input schema."
MODERN_ONLY_KEYS = {"resultType", "ttlMs", "cacheScope", "_meta"}
TOOL_KEYS = {"name", "title", "description", "inputSchema", "outputSchema", "annotations"}
# tools.md: the model must read `pack`'s text, so it alone declares no outputSchema; it and
# `claims` raise Claude Code's 50,000-character preview limit.
NO_OUTPUT_SCHEMA = {"pack"}
SIZE_HINT = {"anthropic/maxResultSizeChars": 200000}
WHOLE_RESULT_TOOLS = {"pack", "claims"}
ANNOTATION_KEYS = {"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}


@pytest.fixture
def serve(start_server, server_python):
    """serve(env=None, cwd=None, args=()) -> a Server under this test's interpreter."""
    def start(**options):
        return start_server(python=server_python, **options)
    return start


# -- helpers ------------------------------------------------------------------

def result_of(response):
    assert "result" in response and "error" not in response, response
    return response["result"]


def assert_error(response, code, request_id=None, has_id=True):
    assert "error" in response and "result" not in response, response
    assert response["error"]["code"] == code, response
    assert isinstance(response["error"]["message"], str) and response["error"]["message"]
    if has_id:
        assert "id" in response and response["id"] == request_id, response
        assert type(response["id"]) is type(request_id), response
    else:
        assert "id" not in response, response
    return response["error"]


def assert_modern(result, version):
    assert result["resultType"] == "complete", result
    assert result["_meta"] == {META_SERVER: {"name": "memprove", "version": version}}, result


def assert_legacy(result):
    assert not (set(result) & MODERN_ONLY_KEYS), result


def logs_by_id(server, request_id):
    return [record for record in server.log_records() if record["id"] == log_text(request_id)]


def one_log(server, request_id):
    found = logs_by_id(server, request_id)
    assert len(found) == 1, (request_id, server.stderr_lines)
    return found[0]


def context_result(response):
    """The `context` tool's structuredContent, checked against its text content."""
    result = result_of(response)
    assert result["isError"] is False, result
    content = result["content"]
    assert isinstance(content, list) and len(content) == 1 and content[0]["type"] == "text", result
    structured = result["structuredContent"]
    assert list(structured)[:2] == ["task_id", "session_id"], structured
    assert json.loads(content[0]["text"]) == structured
    return structured


def tool_list(server, era="legacy"):
    if era == "modern":
        return result_of(server.modern("tools/list"))["tools"]
    return result_of(server.request("tools/list"))["tools"]


PING = b'{"jsonrpc":"2.0","id":"after","method":"ping"}\n'


def assert_still_serving(server, request_id="after"):
    """The server answers a claim-less ping (sent by the caller) with {}."""
    assert result_of(server.response(request_id)) == {}


# =============================================================================
# Each era's opening
# =============================================================================

def test_server_discover_opening(serve, server_version):
    server = serve()
    response = server.modern("server/discover", id="server-discover-probe-1")
    result = result_of(response)
    assert response["id"] == "server-discover-probe-1"
    assert set(result) == {"resultType", "supportedVersions", "capabilities", "instructions",
                           "ttlMs", "cacheScope", "_meta"}, result
    assert_modern(result, server_version)
    assert result["supportedVersions"] == [MODERN_VERSION]
    assert result["capabilities"] == {"tools": {}}
    assert isinstance(result["instructions"], str) and result["instructions"].strip()
    assert type(result["ttlMs"]) is int and result["ttlMs"] >= 0
    assert result["cacheScope"] == "public"
    # A dual-era client that probed may fall back to initialize on the same stdin.
    fallback = result_of(server.request("initialize", initialize_params("2025-11-25")))
    assert fallback["protocolVersion"] == "2025-11-25"
    assert server.close() == 0
    record = one_log(server, "server-discover-probe-1")
    assert (record["era"], record["method"], record["outcome"]) == ("modern", '"server/discover"', "ok")


@pytest.mark.parametrize("asked, answered", [
    ("2025-11-25", "2025-11-25"),
    ("2025-06-18", "2025-06-18"),
    ("2026-07-28", "2025-11-25"),
    ("2099-01-01", "2025-11-25"),
    ("2025-03-26", "2025-03-26"),   # clients.md, "Older handshakes"
    ("2024-11-05", "2024-11-05"),
    ("not-a-version", "2025-11-25"),
], ids=["2025-11-25", "2025-06-18", "2026-07-28", "unknown-date", "2025-03-26", "2024-11-05",
        "garbage"])
def test_initialize_opening(serve, server_version, asked, answered):
    server = serve()
    response = server.request("initialize", initialize_params(asked), id=0)
    result = result_of(response)
    assert response["id"] == 0 and type(response["id"]) is int
    assert set(result) == {"protocolVersion", "capabilities", "serverInfo", "instructions"}, result
    assert result["protocolVersion"] == answered
    assert result["capabilities"] == {"tools": {}}
    assert result["serverInfo"] == {"name": "memprove", "version": server_version}
    assert isinstance(result["instructions"], str) and result["instructions"].strip()
    server.notify("notifications/initialized")
    listed = result_of(server.request("tools/list", id=1))
    assert_legacy(listed)
    assert [tool["name"] for tool in listed["tools"]] == list(EXPECTED_TOOLS)
    assert server.close() == 0
    assert [message.get("id") for message in server.messages] == [0, 1]
    record = one_log(server, 0)
    assert (record["era"], record["method"], record["tool"], record["outcome"]) == (
        "legacy", '"initialize"', "-", "ok")


def test_the_tool_samples_cover_every_listed_tool(serve):
    """harness.TOOL_SAMPLES, the one table a test's "every tool" is made from, holds a
    sample call of each tool the server lists, in its order, each valid for the tool's
    input schema: a new tool fails here until its sample is written."""
    server = serve()
    listed = result_of(server.request("tools/list", modern_params()))["tools"]
    assert list(TOOL_SAMPLES) == [tool["name"] for tool in listed]
    for tool in listed:
        assert schema_errors(tool["inputSchema"], TOOL_SAMPLES[tool["name"]][0]) == [], tool
    assert server.close() == 0


def test_instructions_same_in_both_eras_and_name_the_workflow(serve):
    server = serve()
    modern = result_of(server.modern("server/discover"))["instructions"]
    legacy = server.initialize()["instructions"]
    assert modern == legacy
    for word in ("pack", "begin", "checkpoint", "decide", "memprove run", "complete", "end"):
        assert word in modern, word
    sentences = [part for part in modern.replace("\n", " ").split(". ") if part.strip()]
    assert 2 <= len(sentences) <= 3, modern
    assert server.close() == 0


# =============================================================================
# The modern envelope ladder
# =============================================================================

def _meta_variants():
    base = modern_meta()
    no_caps = dict(base)
    del no_caps[META_CAPABILITIES]
    no_caps_bad_version = dict(no_caps)
    no_caps_bad_version[META_VERSION] = "1999-01-01"
    return [
        ("capabilities missing", no_caps),
        ("capabilities missing, version unsupported", no_caps_bad_version),
        ("capabilities a list", dict(base, **{META_CAPABILITIES: []})),
        ("capabilities a string", dict(base, **{META_CAPABILITIES: "all"})),
        ("capabilities null", dict(base, **{META_CAPABILITIES: None})),
        ("capabilities a list, version unsupported",
         dict(base, **{META_CAPABILITIES: [], META_VERSION: "1999-01-01"})),
        ("version a number", dict(base, **{META_VERSION: 20260728})),
        ("version null", dict(base, **{META_VERSION: None})),
        ("version an object", dict(base, **{META_VERSION: {"v": MODERN_VERSION}})),
        ("version a list", dict(base, **{META_VERSION: [MODERN_VERSION]})),
    ]


@pytest.mark.parametrize("initialized", [False, True], ids=["fresh", "after-initialize"])
def test_modern_envelope_invalid_params(serve, initialized):
    server = serve()
    if initialized:
        server.initialize()
    methods = ["server/discover", "tools/list", "tools/call", "ping", "logging/setLevel",
               "no/such/method"]
    for label, meta in _meta_variants():
        for method in methods:
            params = {"_meta": meta}
            if method == "tools/call":
                params.update(name="context", arguments={})
            response = server.request(method, params, id="%s|%s" % (label, method))
            assert_error(response, -32602, "%s|%s" % (label, method))
    assert server.close() == 0
    for record in server.log_records()[2 if initialized else 0:]:
        assert (record["era"], record["outcome"]) == ("modern", "-32602"), record


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2027-01-15", "", "2026-07-28 ",
                                     "2026-07-27"])
def test_modern_unsupported_version_is_32022(serve, version):
    server = serve()
    supported = result_of(server.modern("server/discover"))["supportedVersions"]
    for index, method in enumerate(["server/discover", "tools/list", "tools/call", "ping",
                                    "initialize", "logging/setLevel", "no/such/method"]):
        params = {"name": "context", "arguments": {}} if method == "tools/call" else {}
        response = server.request(method, modern_params(params, version=version), id=index)
        error = assert_error(response, -32022, index)
        assert error["data"] == {"supported": ["2026-07-28"], "requested": version}, error
        assert set(error["data"]["supported"]) <= set(supported)
    assert server.close() == 0
    for record in server.log_records()[1:]:
        assert (record["era"], record["outcome"]) == ("modern", "-32022"), record


REMOVED_METHODS = ["ping", "logging/setLevel", "resources/list", "resources/read",
                   "resources/subscribe", "resources/templates/list", "prompts/list", "prompts/get",
                   "subscriptions/listen", "tasks/get", "tasks/list", "tasks/result",
                   "completion/complete", "roots/list", "sampling/createMessage", "no/such/method",
                   "notifications/initialized"]


def test_modern_removed_and_unknown_methods_are_32601(serve):
    server = serve()
    for method in REMOVED_METHODS:
        assert_error(server.modern(method, id=method), -32601, method)
    # initialize without a string protocolVersion is not the handshake: modern, removed.
    assert_error(server.modern("initialize", id="init-meta-only"), -32601, "init-meta-only")
    assert_error(server.modern("initialize", {"protocolVersion": 20251125}, id="init-number"),
                 -32601, "init-number")
    assert_error(server.modern("initialize", {"protocolVersion": None}, id="init-null"),
                 -32601, "init-null")
    # The method rung comes after the version rung and before per-method params.
    assert_error(server.modern("tools/call", {"name": "no_such_tool"}, id="unknown-tool"),
                 -32602, "unknown-tool")
    assert server.close() == 0
    for record in server.log_records():
        assert record["era"] == "modern", record
    assert one_log(server, "ping")["outcome"] == "-32601"


def test_modern_removed_methods_after_initialize(serve):
    server = serve()
    server.initialize()
    for method in ("ping", "logging/setLevel", "resources/list", "prompts/list",
                   "subscriptions/listen", "tasks/get"):
        assert_error(server.modern(method, id=method), -32601, method)
    assert server.close() == 0


# =============================================================================
# Deciding the era of a request (rules 1-5)
# =============================================================================

def test_rule1_initialize_with_modern_meta_is_the_legacy_handshake(serve):
    server = serve()
    params = initialize_params("2025-06-18")
    params["_meta"] = modern_meta(client="enveloped")
    result = result_of(server.request("initialize", params))
    assert result["protocolVersion"] == "2025-06-18"
    assert_legacy(result)
    # Even a modern _meta naming an unsupported version does not stop rule 1.
    params["_meta"] = modern_meta(version="1999-01-01")
    params["protocolVersion"] = "2025-11-25"
    result = result_of(server.request("initialize", params))
    assert result["protocolVersion"] == "2025-11-25"
    assert_legacy(result)
    assert server.close() == 0
    assert all(record["era"] == "legacy" for record in server.log_records())


@pytest.mark.parametrize("method", ["server/discover", "subscriptions/listen"])
def test_rule3_modern_only_methods_without_the_claim(serve, method):
    server = serve()
    without_claim = [
        ("no params", None),
        ("empty params", {}),
        ("no _meta key", {"other": 1}),
        ("_meta empty", {"_meta": {}}),
        ("_meta a string", {"_meta": "x"}),
        ("_meta a list", {"_meta": [META_VERSION]}),
        ("_meta null", {"_meta": None}),
        ("_meta with capabilities only", {"_meta": {META_CAPABILITIES: {}}}),
    ]

    def probe(state):
        for label, params in without_claim:
            request_id = "%s|%s" % (state, label)
            message = server.request_message(method, id=request_id)
            if params is not None:
                message["params"] = params
            server.send(message)
            error = assert_error(server.response(request_id), -32602, request_id)
            assert META_VERSION in error["message"], error

    probe("fresh")
    server.initialize()
    probe("after-initialize")
    result_of(server.modern("server/discover"))
    probe("after-modern")
    assert server.close() == 0
    for record in server.log_records():
        if record["outcome"] == "-32602":
            assert record["era"] == "-", record


def test_rule4_ping_without_the_claim(serve):
    server = serve()
    assert result_of(server.request("ping", id="bare")) == {}
    assert result_of(server.request("ping", {}, id="empty")) == {}
    assert result_of(server.request("ping", {"_meta": {META_CAPABILITIES: {}}}, id="meta")) == {}
    assert result_of(server.request("ping", {"_meta": "x"}, id="meta-string")) == {}
    server.initialize()
    assert result_of(server.request("ping", id="legacy")) == {}
    assert result_of(server.modern("tools/list", id="modern"))["resultType"] == "complete"
    assert result_of(server.request("ping", id="after-modern")) == {}
    assert server.close() == 0
    assert one_log(server, "bare")["era"] == "-"
    assert one_log(server, "legacy")["era"] == "legacy"
    assert one_log(server, "after-modern")["era"] == "legacy"


@pytest.mark.parametrize("method, params", [
    ("tools/list", None),
    ("tools/list", {}),
    ("tools/call", {"name": "context", "arguments": {}}),
    ("tools/list", {"_meta": {META_CAPABILITIES: {}}}),
    ("tools/list", {"_meta": "not-an-object"}),
    ("resources/list", None),
    ("no/such/method", None),
    ("initialize", {"capabilities": {}}),
    ("initialize", {"protocolVersion": 20251125, "capabilities": {}}),
], ids=["tools-list", "tools-list-empty-params", "tools-call", "meta-without-version",
        "meta-string", "resources-list", "unknown", "initialize-no-version",
        "initialize-number-version"])
def test_rule5_claimless_request_before_initialize_is_32602(serve, method, params):
    server = serve()
    message = server.request_message(method, id=7)
    if params is not None:
        message["params"] = params
    server.send(message)
    error = assert_error(server.response(7), -32602, 7)
    assert "initialize" in error["message"], error
    assert "_meta" in error["message"] or META_VERSION in error["message"], error
    # Not initialized by it: a tools/list is still refused.
    assert_error(server.request("tools/list", id=8), -32602, 8)
    assert server.close() == 0
    record = one_log(server, 7)
    assert (record["era"], record["outcome"]) == ("-", "-32602"), record


def test_rule5_claimless_request_after_initialize_is_legacy(serve):
    server = serve()
    server.initialize("2025-06-18")
    listed = result_of(server.request("tools/list", id=1))
    assert_legacy(listed)
    assert_error(server.request("no/such/method", id=2), -32601, 2)
    assert_error(server.request("resources/list", id=3), -32601, 3)
    assert_error(server.request("logging/setLevel", {"level": "debug"}, id=4), -32601, 4)
    assert_error(server.request("server/discover", id=5), -32602, 5)
    assert server.close() == 0
    for request_id, outcome in ((1, "ok"), (2, "-32601"), (3, "-32601"), (4, "-32601")):
        record = one_log(server, request_id)
        assert (record["era"], record["outcome"]) == ("legacy", outcome), record


def test_initialize_without_string_version_after_initialize_is_32602(serve):
    server = serve()
    server.initialize()
    assert_error(server.request("initialize", {"capabilities": {}}, id=1), -32602, 1)
    assert_error(server.request("initialize", {"protocolVersion": 5, "capabilities": {}}, id=2),
                 -32602, 2)
    assert server.close() == 0


def test_era_decided_per_message_on_one_process(serve, server_version):
    server = serve()
    init = server.initialize("2025-06-18")
    assert init["protocolVersion"] == "2025-06-18"
    modern = result_of(server.modern("tools/list", id="m1"))
    assert_modern(modern, server_version)
    legacy = result_of(server.request("tools/list", id="l1"))
    assert_legacy(legacy)
    assert legacy["tools"] == modern["tools"]
    modern_call = result_of(server.call("context", {}, era="modern", client="pytest-client", id="m2"))
    assert_modern(modern_call, server_version)
    legacy_call = result_of(server.call("context", {}, id="l2"))
    assert_legacy(legacy_call)
    assert modern_call["structuredContent"] == legacy_call["structuredContent"]
    assert result_of(server.modern("server/discover", id="m3"))["resultType"] == "complete"
    assert_legacy(result_of(server.request("tools/list", id="l3")))
    assert server.close() == 0
    for request_id in ("m1", "m2", "m3"):
        assert one_log(server, request_id)["era"] == "modern"
    for request_id in ("l1", "l2", "l3"):
        assert one_log(server, request_id)["era"] == "legacy"


def test_modern_request_stands_alone(serve):
    server = serve()
    result_of(server.modern("tools/list", id=1))
    server.initialize()
    # Nothing from the earlier requests fills in a missing envelope field.
    meta = modern_meta()
    del meta[META_CAPABILITIES]
    assert_error(server.request("tools/list", {"_meta": meta}, id=2), -32602, 2)
    # A legacy revision in the envelope is not served legacy, whatever initialize said.
    response = server.request("tools/list", modern_params(version="2025-11-25"), id=3)
    assert assert_error(response, -32022, 3)["data"]["requested"] == "2025-11-25"
    assert server.close() == 0


# =============================================================================
# Modern results
# =============================================================================

def test_modern_tools_list_shape_and_stability(serve, server_version):
    server = serve()
    first = result_of(server.modern("tools/list"))
    assert set(first) == {"resultType", "tools", "ttlMs", "cacheScope", "_meta"}, first
    assert_modern(first, server_version)
    assert first["cacheScope"] == "public"
    assert type(first["ttlMs"]) is int and first["ttlMs"] >= 0
    assert [tool["name"] for tool in first["tools"]] == list(EXPECTED_TOOLS)
    for _ in range(3):
        assert result_of(server.modern("tools/list", client="other")) == first
    assert server.close() == 0


def test_modern_tools_call_shape(serve, server_version):
    server = serve()
    result = result_of(server.call("context", {}, era="modern"))
    assert set(result) == {"resultType", "content", "structuredContent", "isError", "_meta"}, result
    assert_modern(result, server_version)
    structured = context_result({"result": result})
    declared = {tool["name"]: tool for tool in tool_list(server, "modern")}["context"]
    assert schema_errors(declared["outputSchema"], structured) == []
    assert server.close() == 0


def test_modern_input_responses_and_request_state_ignored(serve):
    server = serve()
    plain = context_result(server.call("context", {}, era="modern"))
    extra = {"inputResponses": {"elicit-1": {"action": "accept", "content": {"x": 1}}},
             "requestState": "opaque-state-from-an-earlier-round"}
    response = server.call("context", {}, era="modern", extra=extra)
    assert context_result(response) == plain
    assert server.close() == 0


# =============================================================================
# Legacy results
# =============================================================================

@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_legacy_results_carry_no_modern_fields(serve, version):
    server = serve()
    init = server.initialize(version)
    assert_legacy(init)
    assert init["protocolVersion"] == version
    ping = server.request("ping", id="p")
    assert ping["result"] == {} and set(ping) == {"jsonrpc", "id", "result"}
    listed = result_of(server.request("tools/list"))
    assert set(listed) == {"tools"}, listed
    called = result_of(server.call("context", {}))
    assert set(called) == {"content", "structuredContent", "isError"}, called
    failed = result_of(server.call("context", {"bogus": 1}))
    assert set(failed) == {"content", "isError"}, failed
    assert server.close() == 0


def test_second_initialize_renegotiates(serve):
    server = serve()
    first = server.initialize("2025-11-25", client="first-client")
    assert first["protocolVersion"] == "2025-11-25"
    assert context_result(server.call("context", {}))["agent"]["name"] == "first-client"
    second = server.initialize("2025-06-18", client="second-client")
    assert second["protocolVersion"] == "2025-06-18"
    assert set(second) == set(first)
    assert context_result(server.call("context", {}))["agent"]["name"] == "second-client"
    third = server.initialize("2026-07-28", client="third-client")
    assert third["protocolVersion"] == "2025-11-25"
    assert_legacy(result_of(server.request("tools/list")))
    assert server.close() == 0


def test_legacy_task_parameter_ignored(serve):
    server = serve()
    server.initialize("2025-11-25")
    plain = result_of(server.call("context", {}))
    tasked = result_of(server.call("context", {}, extra={"task": {"ttl": 60000}}))
    assert set(tasked) == {"content", "structuredContent", "isError"}, tasked
    assert tasked == plain
    assert server.close() == 0


def test_notifications_initialized_accepted_silently(serve):
    server = serve()
    server.request("initialize", initialize_params(), id=1)
    server.notify("notifications/initialized")
    server.notify("notifications/initialized", {})
    assert result_of(server.request("ping", id=2)) == {}
    assert server.unclaimed() == []
    assert server.close() == 0
    assert [message["id"] for message in server.messages] == [1, 2]


# =============================================================================
# Tools, in every era
# =============================================================================

def test_tool_declarations(serve):
    server = serve()
    modern = tool_list(server, "modern")
    server.initialize("2025-06-18")
    legacy_0618 = tool_list(server)
    server.initialize("2025-11-25")
    legacy_1125 = tool_list(server)
    assert modern == legacy_0618 == legacy_1125
    assert [tool["name"] for tool in modern] == list(EXPECTED_TOOLS)
    for tool in modern:
        name = tool["name"]
        keys = TOOL_KEYS - ({"outputSchema"} if name in NO_OUTPUT_SCHEMA else set())
        if name in WHOLE_RESULT_TOOLS:
            keys = keys | {"_meta"}
            assert tool["_meta"] == SIZE_HINT, name
        assert set(tool) == keys, (name, sorted(tool))
        assert isinstance(tool["title"], str) and tool["title"].strip(), name
        assert isinstance(tool["description"], str) and len(tool["description"]) > 40, name
        for key in sorted(keys & {"inputSchema", "outputSchema"}):
            schema = tool[key]
            assert schema["type"] == "object", (name, key)
            assert schema_keyword_problems(schema) == [], (name, key)
        assert tool["inputSchema"]["additionalProperties"] is False, name
        annotations = tool["annotations"]
        assert set(annotations) <= ANNOTATION_KEYS, (name, annotations)
        assert annotations["openWorldHint"] is False, name
        if name in READ_TOOLS:
            assert annotations["readOnlyHint"] is True, name
        else:
            assert name in WRITE_TOOLS
            assert annotations["readOnlyHint"] is False, name
            assert annotations["destructiveHint"] is False, name
            assert annotations["idempotentHint"] is False, name
    assert server.close() == 0


PROTOCOL_ERROR_CALLS = [
    ("name-missing", {"arguments": {}}, "?"),
    ("name-number", {"name": 5}, "?"),
    ("name-null", {"name": None}, "?"),
    ("name-unknown", {"name": "no_such_tool"}, "?"),
    ("name-case", {"name": "Context"}, "?"),
    ("arguments-list", {"name": "context", "arguments": []}, "context"),
    ("arguments-string", {"name": "context", "arguments": "{}"}, "context"),
    ("arguments-number", {"name": "context", "arguments": 0}, "context"),
    ("arguments-true", {"name": "context", "arguments": True}, "context"),
]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_tools_call_protocol_errors(serve, era):
    server = serve()
    if era == "legacy":
        server.initialize()
    for label, params, _ in PROTOCOL_ERROR_CALLS:
        if era == "modern":
            params = modern_params(params)
        assert_error(server.request("tools/call", params, id=label), -32602, label)
    # arguments absent or null count as {}
    for label, params in (("absent", {"name": "context"}),
                          ("null", {"name": "context", "arguments": None})):
        if era == "modern":
            params = modern_params(params)
        context_result(server.request("tools/call", params, id=label))
    assert server.close() == 0
    for label, _, tool in PROTOCOL_ERROR_CALLS:
        record = one_log(server, label)
        assert (record["era"], record["tool"], record["outcome"]) == (era, tool, "-32602"), record


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_arguments_failing_the_schema_are_a_tool_error(serve, plant, server_version, era):
    server = serve()
    if era == "legacy":
        server.initialize()
    calls = [
        ("context", {"bogus": plant()}),
        ("tasks", {"status": plant()}),
        ("tasks", {"status": 5}),
        ("pack", {"budget": 10}),
        ("pack", {"query": plant() * 20}),
        ("claims", {}),
        ("ledger_verify", {"extra": plant()}),
    ]
    for index, (name, arguments) in enumerate(calls):
        result = result_of(server.call(name, arguments, era=era, id=index))
        assert result["isError"] is True, result
        assert "structuredContent" not in result, result
        assert len(result["content"]) == 1 and result["content"][0]["type"] == "text", result
        assert result["content"][0]["text"].startswith(INVALID_PARAMS_TEXT), result
        if era == "modern":
            assert_modern(result, server_version)
            assert set(result) == {"resultType", "content", "isError", "_meta"}, result
        else:
            assert set(result) == {"content", "isError"}, result
    assert server.close() == 0
    for index, (name, _) in enumerate(calls):
        record = one_log(server, index)
        assert (record["era"], record["tool"], record["outcome"]) == (era, name, "invalid_params")


def test_client_name_from_initialize_and_from_each_modern_request(serve):
    server = serve(env={"MEMPROVE_AGENT_NAME": None})
    server.initialize(client="legacy-client-name")
    agent = context_result(server.call("context", {}))["agent"]
    assert (agent["name"], agent["name_from"]) == ("legacy-client-name", "client")
    agent = context_result(server.call("context", {}, era="modern", client="modern-client-name"))["agent"]
    assert (agent["name"], agent["name_from"]) == ("modern-client-name", "client")
    # Stateless: neither the initialize nor the earlier modern request lends its name.
    agent = context_result(server.call("context", {}, era="modern"))["agent"]
    assert (agent["name"], agent["name_from"]) == ("agent", "default")
    agent = context_result(server.call("context", {}))["agent"]
    assert (agent["name"], agent["name_from"]) == ("legacy-client-name", "client")
    assert server.close() == 0


def test_client_name_modern_without_any_initialize(serve):
    server = serve()
    agent = context_result(server.call("context", {}, era="modern", client="only-modern"))["agent"]
    assert (agent["name"], agent["name_from"]) == ("only-modern", "client")
    agent = context_result(server.call("context", {}, era="modern"))["agent"]
    assert (agent["name"], agent["name_from"]) == ("agent", "default")
    assert server.close() == 0


# =============================================================================
# Framing
# =============================================================================

@pytest.mark.parametrize("line", [
    b"{not json",
    b"\xff\xfe\xfd",
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xff"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":Infinity}}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":-Infinity}}',
    b'{"jsonrpc":"2.0","id":1,"meth',
    b'{"jsonrpc":"2.0","id":1,"method":"ping"} trailing',
    b"'single quotes'",
], ids=["garbage", "invalid-utf8", "invalid-utf8-in-string", "nan", "infinity",
        "minus-infinity", "truncated", "trailing-data", "quotes"])
def test_parse_error(serve, line):
    server = serve()
    server.send_raw(line + b"\n" + PING)
    first = server.next_message()
    assert first == {"jsonrpc": "2.0", "error": first["error"]}, first
    assert_error(first, -32700, has_id=False)
    assert_still_serving(server)
    assert server.close() == 0
    assert len(server.messages) == 2
    record = server.log_records()[0]
    assert (record["era"], record["method"], record["id"], record["tool"], record["outcome"]) == (
        "-", "-", "-", "-", "-32700")


@pytest.mark.parametrize("batch", [
    [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}],
    [],
    [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}],
    [{"jsonrpc": "2.0", "method": "notifications/initialized"}],
    [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
      "params": modern_params({"name": "context", "arguments": {}})}],
], ids=["two-pings", "empty", "initialize", "notification", "modern-call"])
def test_batch_is_one_invalid_request_and_nothing_runs(serve, batch):
    server = serve()
    server.send(batch)
    first = server.next_message()
    assert_error(first, -32600, has_id=False)
    # Nothing was executed: in particular no initialize, so this is still refused.
    assert_error(server.request("tools/list", id="probe"), -32602, "probe")
    assert server.close() == 0
    assert len(server.messages) == 2
    assert server.log_records()[0]["outcome"] == "-32600"


@pytest.mark.parametrize("message, echoed_id", [
    (1, None), ("ping", None), (None, None), (True, None), ({}, None),
    ({"jsonrpc": "2.0"}, None),
    ({"id": 7, "method": "ping"}, 7),
    ({"jsonrpc": "1.0", "id": 7, "method": "ping"}, 7),
    ({"jsonrpc": 2.0, "id": "seven", "method": "ping"}, "seven"),
    ({"jsonrpc": "2.0", "id": 8, "method": 5}, 8),
    ({"jsonrpc": "2.0", "id": 8, "method": None}, 8),
    ({"jsonrpc": "2.0", "id": "m", "method": {"name": "ping"}}, "m"),
    ({"jsonrpc": "2.0", "id": 9}, 9),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": False, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": 1.0, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": {"n": 1}, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": [1], "method": "ping"}, None),
], ids=["number", "string", "null", "true", "empty-object", "no-method-no-id",
        "jsonrpc-missing", "jsonrpc-1.0", "jsonrpc-number", "method-number", "method-null",
        "method-object", "neither-request-nor-response", "id-true", "id-false", "id-float",
        "id-float-integral", "id-null", "id-object", "id-list"])
def test_invalid_request(serve, message, echoed_id):
    server = serve()
    server.send(message)
    server.send_raw(PING)
    first = server.next_message()
    if echoed_id is None:
        assert_error(first, -32600, has_id=False)
    else:
        assert_error(first, -32600, echoed_id)
    assert_still_serving(server)
    assert server.close() == 0
    assert len(server.messages) == 2
    assert server.log_records()[0]["outcome"] == "-32600"


@pytest.mark.parametrize("request_id", [
    0, "0", "server-discover-probe-1", -1, -9007199254740993, 2 ** 63, "", "a\u2028b\u2029c",
    "\u00e9\u4e2d", "x" * 200,
], ids=["zero", "string-zero", "probe", "minus-one", "big-negative", "two-to-63", "empty-string",
        "line-separators", "non-ascii", "long"])
def test_id_echoed_with_its_json_type(serve, server_version, request_id):
    server = serve()
    for method, modern in (("ping", False), ("tools/list", False), ("server/discover", True)):
        if modern:
            response = server.modern(method, id=request_id)
            assert_modern(result_of(response), server_version)
        else:
            response = server.request(method, id=request_id)
        assert type(response["id"]) is type(request_id) and response["id"] == request_id
    raw = server.raw_stdout[0].decode("utf-8")
    if isinstance(request_id, int):
        assert '"id":%d' % request_id in raw, raw
    else:
        assert '"id":"' in raw, raw
    assert server.close() == 0
    forms = {log_text(request_id), json.dumps(request_id, ensure_ascii=False)[:64]}
    for record in server.log_records():
        assert record["id"] in forms, record


def test_number_and_string_ids_are_different_requests(serve):
    server = serve()
    server.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
                    b'{"jsonrpc":"2.0","id":"1","method":"tools/list"}\n')
    by_type = {type(message["id"]): message for message in (server.next_message(), server.next_message())}
    assert by_type[int]["result"] == {}
    assert_error(by_type[str], -32602, "1")
    assert server.close() == 0


def test_line_over_16_mib_is_refused_and_serving_goes_on(serve):
    server = serve()
    big = (b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"'
           + b"x" * (17 * 1024 * 1024) + b'"}}\n')
    server.send_raw(big + PING)
    first = server.next_message()
    assert_error(first, -32600, has_id=False)
    assert_still_serving(server)
    assert server.close() == 0
    assert len(server.messages) == 2
    record = server.log_records()[0]
    assert (record["id"], record["outcome"]) == ("-", "-32600"), record


def test_line_under_16_mib_is_served(serve):
    server = serve()
    big = (b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"'
           + b"x" * (15 * 1024 * 1024) + b'"}}\n')
    server.send_raw(big)
    assert result_of(server.response("big")) == {}
    assert server.close() == 0


def _peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_memory_stays_bounded_on_a_huge_line(serve):
    server = serve()
    huge = b'{"jsonrpc":"2.0","id":"huge","method":"ping","params":{"pad":"'
    chunk = b"x" * (1024 * 1024)
    server.send_raw(huge)
    for _ in range(128):
        server.send_raw(chunk)
    server.send_raw(b'"}}\n' + PING)
    assert_error(server.next_message(), -32600, has_id=False)
    assert_still_serving(server)
    peak = _peak_rss_kib(server.proc.pid)
    assert peak is not None and peak < 96 * 1024, "peak RSS %d KiB after a 128 MiB line" % peak
    assert server.close() == 0


def test_notifications_are_never_answered(serve):
    server = serve()
    notifications = [
        ("notifications/initialized", None),
        ("notifications/cancelled", {"requestId": 12345, "reason": "nothing in flight"}),
        ("notifications/cancelled", {"requestId": "x"}),
        ("notifications/cancelled", None),
        ("notifications/progress", {"progressToken": "p", "progress": 1}),
        ("notifications/roots/list_changed", None),
        ("notifications/no-such-notification", {"a": 1}),
        ("ping", None),
        ("tools/list", None),
        ("initialize", initialize_params()),
        ("server/discover", modern_params()),
    ]
    for method, params in notifications:
        if params is None:
            server.notify(method)
        else:
            server.notify(method, params)
    assert result_of(server.request("ping", id="only")) == {}
    assert server.unclaimed() == []
    # The notification `initialize` initialized nothing.
    assert_error(server.request("tools/list", id="still-fresh"), -32602, "still-fresh")
    assert server.close() == 0
    assert [message["id"] for message in server.messages] == ["only", "still-fresh"]
    records = server.log_records()
    assert len(records) == len(notifications) + 2
    for record in records[:len(notifications)]:
        assert (record["era"], record["id"], record["tool"], record["outcome"]) == (
            "-", "-", "-", "notification"), record


def test_client_responses_are_ignored(serve):
    server = serve()
    server.send({"jsonrpc": "2.0", "id": 77, "result": {}})
    server.send({"jsonrpc": "2.0", "id": "r", "error": {"code": -32601, "message": "no"}})
    server.send({"jsonrpc": "2.0", "id": 78, "result": {"roots": []}})
    assert result_of(server.request("ping", id="only")) == {}
    assert server.unclaimed() == []
    assert server.close() == 0
    assert [message["id"] for message in server.messages] == ["only"]
    outcomes = [record["outcome"] for record in server.log_records()]
    assert outcomes == ["response", "response", "response", "ok"]
    assert server.log_records()[0]["id"] == "77"


def test_trailing_carriage_return_is_dropped(serve):
    server = serve()
    server.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\r\n')
    assert result_of(server.response(1)) == {}
    server.send_raw(b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":'
                    + json.dumps(initialize_params()).encode() + b"}\r\n")
    assert result_of(server.response(2))["protocolVersion"] == "2025-11-25"
    assert server.close() == 0


def test_blank_lines_are_skipped(serve):
    server = serve()
    server.send_raw(b"\n\n   \n\r\n\t\n" + PING + b"\n\r\n")
    assert_still_serving(server)
    assert server.close() == 0
    assert len(server.messages) == 1
    assert len(server.stderr_lines) == 1


def test_a_line_split_across_writes(serve):
    server = serve()
    server.send_raw(b'{"jsonrpc":"2.0",')
    server.send_raw(b'"id":"split","method":"ping"}\n')
    assert result_of(server.response("split")) == {}
    assert server.close() == 0


def test_last_line_without_newline_is_served(serve):
    server = serve()
    server.send_raw(b'{"jsonrpc":"2.0","id":"last","method":"ping"}')
    assert server.close() == 0
    assert [message["id"] for message in server.messages] == ["last"]


def test_end_of_input_without_messages_exits_zero(serve):
    server = serve()
    assert server.close() == 0
    assert server.messages == [] and server.stderr_lines == []


def test_tools_list_pipelined_behind_initialize_is_legacy(serve):
    server = serve()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "context"}}
    server.send_raw(b"".join(json.dumps(message).encode() + b"\n" for message in (
        init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, listing, call)))
    assert result_of(server.response(1))["protocolVersion"] == "2025-11-25"
    listed = result_of(server.response(2))
    assert_legacy(listed)
    assert [tool["name"] for tool in listed["tools"]] == list(EXPECTED_TOOLS)
    context_result(server.response(3))
    assert server.close() == 0
    assert one_log(server, 2)["era"] == "legacy"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_line_separators_are_escaped(serve, tmp_path, era):
    root = make_workspace(tmp_path / "odd\u2028name\u2029dir")
    server = serve(env={"CLAUDE_PROJECT_DIR": str(root)})
    if era == "legacy":
        server.initialize()
    structured = context_result(server.call("context", {}, era=era, id="sep"))
    assert structured["workspace"]["root"] == server_path(root)
    assert structured["workspace"]["found_by"] == "CLAUDE_PROJECT_DIR"
    raw = b"".join(server.raw_stdout)
    assert b"\xe2\x80\xa8" not in raw and b"\xe2\x80\xa9" not in raw
    assert b"\\u2028" in raw and b"\\u2029" in raw
    assert server.close() == 0


# =============================================================================
# Standard error
# =============================================================================

def test_stderr_log_lines(serve, plant):
    server = serve()
    long_method = "m" * 100
    long_id = "i" * 100
    expected = []

    def expect(era, method, request_id, tool, outcome):
        expected.append((era, "-" if method is None else log_text(method),
                         "-" if request_id is None else log_text(request_id), tool, outcome))

    server.send_raw(b"{oops\n")
    expect("-", None, None, "-", "-32700")
    assert "error" in server.next_message()
    server.request("ping", id=1)
    expect("-", "ping", 1, "-", "ok")
    server.request("tools/list", id="a")
    expect("-", "tools/list", "a", "-", "-32602")
    server.request("server/discover", id=3)
    expect("-", "server/discover", 3, "-", "-32602")
    server.modern("server/discover", id=4)
    expect("modern", "server/discover", 4, "-", "ok")
    server.request("tools/list", modern_params(version="2025-11-25"), id=5)
    expect("modern", "tools/list", 5, "-", "-32022")
    server.modern("ping", id=6)
    expect("modern", "ping", 6, "-", "-32601")
    server.modern("tools/call", {"name": "nope"}, id=8)
    expect("modern", "tools/call", 8, "?", "-32602")
    server.call("context", {}, era="modern", id=9)
    expect("modern", "tools/call", 9, "context", "ok")
    server.call("context", {"bogus": plant()}, era="modern", id=10)
    expect("modern", "tools/call", 10, "context", "invalid_params")
    server.notify("notifications/progress", {"progressToken": 1, "progress": 1})
    expect("-", "notifications/progress", None, "-", "notification")
    server.send({"jsonrpc": "2.0", "id": 77, "result": {}})
    expect("-", None, 77, "-", "response")
    server.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    expect("-", None, None, "-", "-32600")
    assert "error" in server.next_message()
    server.request("initialize", initialize_params(), id=11)
    expect("legacy", "initialize", 11, "-", "ok")
    server.request("ping", id=12)
    expect("legacy", "ping", 12, "-", "ok")
    server.request("tools/list", id=13)
    expect("legacy", "tools/list", 13, "-", "ok")
    server.request("tools/call", {"arguments": {}}, id=14)
    expect("legacy", "tools/call", 14, "?", "-32602")
    server.call("context", {}, id=15)
    expect("legacy", "tools/call", 15, "context", "ok")
    server.request("no/such/method", id=16)
    expect("legacy", "no/such/method", 16, "-", "-32601")
    server.request(long_method, id=long_id)
    expect("legacy", long_method, long_id, "-", "-32601")
    server.call("tasks", {"status": plant()}, id=17)
    expect("legacy", "tools/call", 17, "tasks", "invalid_params")
    server.call("context", [], id=18)
    expect("legacy", "tools/call", 18, "context", "-32602")
    assert server.close() == 0
    records = server.log_records()
    got = sorted((r["era"], r["method"], r["id"], r["tool"], r["outcome"]) for r in records)
    assert got == sorted(expected)
    assert all(record["warning"] is None for record in records)
    assert len(log_text(long_method)) == 64 and len(log_text(long_id)) == 64


@pytest.mark.parametrize("request_id, name", [(20, "context"), (21, "pack")])
def test_stderr_names_the_tool_even_when_the_envelope_fails(serve, request_id, name):
    """protocol.md: `<tool>` is the tool a tools/call names, whatever its outcome."""
    server = serve()
    server.request("tools/call", modern_params({"name": name, "arguments": {}},
                                               version="2025-11-25"), id=request_id)
    meta = modern_meta()
    del meta[META_CAPABILITIES]
    server.request("tools/call", {"name": name, "_meta": meta}, id=request_id + 100)
    server.request("tools/call", {"name": name}, id=request_id + 200)     # before initialize
    assert server.close() == 0
    shown = [one_log(server, request_id + offset)["tool"] for offset in (0, 100, 200)]
    assert shown == [name, name, name], server.stderr_lines


# =============================================================================
# Requests in flight: concurrency, cancellation, end of input, signals
# =============================================================================

def _send_call(server, name, request_id, era):
    server.send(server.request_message("tools/call", server.call_params(name, {}, era=era),
                                       id=request_id))


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_ping_and_tools_list_answered_while_a_call_waits(serve, config, daemon, era):
    server = serve(env=config.env())
    server.initialize()
    gate = daemon.hold("listTasks")
    try:
        _send_call(server, "tasks", 60, era)
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        assert result_of(server.request("ping", id=61)) == {}
        assert [t["name"] for t in tool_list(server, "legacy")] == list(EXPECTED_TOOLS)
        assert [t["name"] for t in tool_list(server, "modern")] == list(EXPECTED_TOOLS)
        assert result_of(server.modern("server/discover"))["resultType"] == "complete"
        assert server.unclaimed() == []          # the call has not answered yet
    finally:
        gate.release()
    result = result_of(server.response(60))
    assert result["isError"] is False, result
    assert result["structuredContent"]["tasks"] == []
    assert server.close() == 0
    assert [op["op"] for op in daemon.ops] == ["listTasks"]
    assert one_log(server, 60)["outcome"] == "ok"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_cancelled_call_is_never_answered(serve, config, daemon, era):
    server = serve(env=config.env())
    if era == "legacy":
        server.initialize(id="init")
    gate = daemon.hold("listTasks")
    try:
        _send_call(server, "tasks", 50, era)
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        server.notify("notifications/cancelled", {"requestId": 50, "reason": "user stopped it"})
        assert result_of(server.request("ping", id=51)) == {}    # the cancel has been read
    finally:
        gate.release()
    assert result_of(server.request("ping", id=52)) == {}
    assert server.close() == 0
    expected = (["init"] if era == "legacy" else []) + [51, 52]
    assert [message["id"] for message in server.messages] == expected
    assert [op["op"] for op in daemon.ops] == ["listTasks"]
    record = one_log(server, 50)
    assert (record["era"], record["tool"], record["outcome"]) == (era, "tasks", "cancelled")


def test_cancel_matches_the_id_with_its_type(serve, config, daemon):
    server = serve(env=config.env())
    server.initialize()
    gate = daemon.hold("listTasks")
    try:
        _send_call(server, "tasks", 10, "legacy")
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        server.notify("notifications/cancelled", {"requestId": "10"})
        assert result_of(server.request("ping", id=11)) == {}
    finally:
        gate.release()
    assert result_of(server.response(10))["isError"] is False
    assert server.close() == 0


def test_end_of_input_answers_the_call_in_flight(serve, config, daemon):
    server = serve(env=config.env())
    server.initialize()
    gate = daemon.hold("listTasks")
    try:
        _send_call(server, "tasks", 70, "legacy")
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        server.shut_input()
    finally:
        gate.release()
    assert server.wait() == 0
    server.check()
    assert result_of(server.response(70))["isError"] is False
    assert one_log(server, 70)["outcome"] == "ok"


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_signal_exits_promptly_and_quietly(serve, signame):
    server = serve()
    assert result_of(server.request("ping", id=1)) == {}
    server.wait_stderr_lines(1)
    server.proc.send_signal(getattr(signal, signame))
    server.wait()
    server.check()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_signal_exits_promptly_with_a_call_in_flight(serve, config, daemon, signame):
    server = serve(env=config.env())
    server.initialize()
    gate = daemon.hold("listTasks")
    try:
        _send_call(server, "tasks", 80, "legacy")
        assert gate.wait_arrived(SAFETY_TIMEOUT)
        server.wait_stderr_lines(2)        # initialize, notifications/initialized
        server.proc.send_signal(getattr(signal, signame))
        server.wait()
    finally:
        gate.release()
    server.check(count=False)              # the call in flight never finished
    assert [message["id"] for message in server.messages] == [server.messages[0]["id"]]


def test_token_file_too_open_warning_on_a_daemon_call(serve, config, daemon):
    os.chmod(str(config.token_file), 0o644)
    server = serve(env=config.env())
    server.initialize()
    assert result_of(server.call("tasks", {}, id="t"))["isError"] is False
    assert result_of(server.request("ping", id="p")) == {}
    assert server.close() == 0
    assert one_log(server, "t")["warning"] == " warning=token_file_too_open"
    assert one_log(server, "p")["warning"] is None
    assert one_log(server, "t")["outcome"] == "ok"


def test_no_token_warning_for_a_private_token_file(serve, config, daemon):
    server = serve(env=config.env())
    server.initialize()
    assert result_of(server.call("tasks", {}, id="t"))["isError"] is False
    assert server.close() == 0
    assert one_log(server, "t")["warning"] is None


def test_token_file_too_open_warning_on_context(serve, config):
    """contract.md §1: every call that read the token file warns; `context` reads it
    (it reports token_file_mode)."""
    os.chmod(str(config.token_file), 0o604)
    server = serve(env=config.env())
    server.initialize()
    structured = context_result(server.call("context", {}, id="c"))
    assert structured["config"]["token_file_mode"] == "too_open"
    assert server.close() == 0
    assert one_log(server, "c")["warning"] == " warning=token_file_too_open"
