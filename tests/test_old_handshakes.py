"""Older handshakes (clients.md, "Older handshakes"; protocol.md, "Legacy").

A client asking `initialize` for 2025-03-26 or 2024-11-05 gets that version,
and its session gets no field its revision's schema lacks.  The allowed keys
below are taken from `schema/<revision>/schema.json` of
modelcontextprotocol/modelcontextprotocol (commit b0f60ba5409d, read
2026-12-03): the `properties` of each definition.  None of these definitions
sets `additionalProperties: false`, so an extra key is not a schema error, but
a client built against the revision does not know it; the spec rules them out.
The one deliberate exception is a tool's `_meta` (the size hint of tools.md),
kept in every revision although Tool gained `_meta` only in 2025-06-18.
"""

import json

import pytest

from harness import EXPECTED_TOOLS, initialize_params

SCHEMA_KEYS = {
    "2024-11-05": {
        "InitializeResult": {"_meta", "capabilities", "instructions", "protocolVersion",
                             "serverInfo"},
        "ServerCapabilities": {"experimental", "logging", "prompts", "resources", "tools"},
        "ServerCapabilities.tools": {"listChanged"},
        "Implementation": {"name", "version"},
        "ListToolsResult": {"_meta", "nextCursor", "tools"},
        "Tool": {"description", "inputSchema", "name"},
        "ToolAnnotations": None,                       # no annotations in this revision
        "CallToolResult": {"_meta", "content", "isError"},
        "TextContent": {"annotations", "text", "type"},
    },
    "2025-03-26": {
        "InitializeResult": {"_meta", "capabilities", "instructions", "protocolVersion",
                             "serverInfo"},
        "ServerCapabilities": {"completions", "experimental", "logging", "prompts", "resources",
                               "tools"},
        "ServerCapabilities.tools": {"listChanged"},
        "Implementation": {"name", "version"},
        "ListToolsResult": {"_meta", "nextCursor", "tools"},
        "Tool": {"annotations", "description", "inputSchema", "name"},
        "ToolAnnotations": {"destructiveHint", "idempotentHint", "openWorldHint", "readOnlyHint",
                            "title"},
        "CallToolResult": {"_meta", "content", "isError"},
        "TextContent": {"annotations", "text", "type"},
    },
    "2025-06-18": {
        "InitializeResult": {"_meta", "capabilities", "instructions", "protocolVersion",
                             "serverInfo"},
        "ServerCapabilities": {"completions", "experimental", "logging", "prompts", "resources",
                               "tools"},
        "ServerCapabilities.tools": {"listChanged"},
        "Implementation": {"name", "title", "version"},
        "ListToolsResult": {"_meta", "nextCursor", "tools"},
        "Tool": {"_meta", "annotations", "description", "inputSchema", "name", "outputSchema",
                 "title"},
        "ToolAnnotations": {"destructiveHint", "idempotentHint", "openWorldHint", "readOnlyHint",
                            "title"},
        "CallToolResult": {"_meta", "content", "isError", "structuredContent"},
        "TextContent": {"_meta", "annotations", "text", "type"},
    },
    "2025-11-25": {
        "InitializeResult": {"_meta", "capabilities", "instructions", "protocolVersion",
                             "serverInfo"},
        "ServerCapabilities": {"completions", "experimental", "logging", "prompts", "resources",
                               "tasks", "tools"},
        "ServerCapabilities.tools": {"listChanged"},
        "Implementation": {"description", "icons", "name", "title", "version", "websiteUrl"},
        "ListToolsResult": {"_meta", "nextCursor", "tools"},
        "Tool": {"_meta", "annotations", "description", "execution", "icons", "inputSchema", "name",
                 "outputSchema", "title"},
        "ToolAnnotations": {"destructiveHint", "idempotentHint", "openWorldHint", "readOnlyHint",
                            "title"},
        "CallToolResult": {"_meta", "content", "isError", "structuredContent"},
        "TextContent": {"_meta", "annotations", "text", "type"},
    },
}
REVISIONS = tuple(SCHEMA_KEYS)
OLD = ("2025-03-26", "2024-11-05")

# tools.md: the tools whose whole result Claude Code must not cut, in every revision.
SIZE_HINT = "anthropic/maxResultSizeChars"


def extra_keys(value, allowed):
    return sorted(set(value) - allowed)


def check_initialize(result, version):
    keys = SCHEMA_KEYS[version]
    assert result["protocolVersion"] == version
    assert extra_keys(result, keys["InitializeResult"]) == []
    assert extra_keys(result["capabilities"], keys["ServerCapabilities"]) == []
    assert result["capabilities"] == {"tools": {}}
    assert extra_keys(result["serverInfo"], keys["Implementation"]) == []
    assert result["serverInfo"]["name"] == "memprove"
    assert isinstance(result["instructions"], str) and result["instructions"]


def check_tools(listing, version):
    keys = SCHEMA_KEYS[version]
    assert extra_keys(listing, keys["ListToolsResult"]) == []
    tools = listing["tools"]
    assert [tool["name"] for tool in tools] == list(EXPECTED_TOOLS)
    for tool in tools:
        # `_meta` is kept in every revision (clients.md): the one allowed extra.
        assert extra_keys(tool, keys["Tool"] | {"_meta"}) == [], (version, tool["name"])
        assert tool["inputSchema"]["type"] == "object"
        assert isinstance(tool["description"], str) and tool["description"]
        if keys["ToolAnnotations"] is None:
            assert "annotations" not in tool, (version, tool["name"])
        else:
            assert extra_keys(tool["annotations"], keys["ToolAnnotations"]) == []
            assert isinstance(tool["annotations"]["readOnlyHint"], bool)
        if "title" in keys["Tool"]:
            assert isinstance(tool["title"], str), (version, tool["name"])
        else:
            assert "title" not in tool and "outputSchema" not in tool, (version, tool["name"])
    return {tool["name"]: tool for tool in tools}


def check_call_result(result, version):
    keys = SCHEMA_KEYS[version]
    assert extra_keys(result, keys["CallToolResult"]) == [], version
    assert isinstance(result["content"], list) and result["content"]
    for item in result["content"]:
        assert item["type"] == "text"
        assert extra_keys(item, keys["TextContent"]) == [], version
    assert isinstance(result["isError"], bool)


def legacy_session(start_server, version, client="pytest-client"):
    server = start_server()
    result = server.initialize(version, client=client)
    return server, result


# -- initialize -------------------------------------------------------------------

@pytest.mark.parametrize("version", REVISIONS)
def test_initialize_answers_the_version_asked(start_server, version):
    server, result = legacy_session(start_server, version)
    check_initialize(result, version)
    assert server.close() == 0


@pytest.mark.parametrize("asked", ["2024-10-07", "2026-07-28", "1.0", ""])
def test_any_other_version_is_answered_with_2025_11_25(start_server, asked):
    server = start_server()
    result = server.request("initialize", initialize_params(asked))["result"]
    check_initialize(result, "2025-11-25")
    assert server.close() == 0


# -- what a session of each revision gets ------------------------------------------

@pytest.mark.parametrize("version", REVISIONS)
def test_tools_list_has_only_the_revisions_fields(start_server, version):
    server, _ = legacy_session(start_server, version)
    tools = check_tools(server.request("tools/list")["result"], version)
    # The size hint survives in every revision.
    for name in ("pack", "claims"):
        assert tools[name]["_meta"][SIZE_HINT] >= 50000, (version, name)
    if version in OLD:
        assert all("outputSchema" not in tool for tool in tools.values())
    else:
        assert all("outputSchema" in tool for name, tool in tools.items() if name != "pack")
    assert server.close() == 0


@pytest.mark.parametrize("version", REVISIONS)
def test_a_tool_result_has_only_the_revisions_fields(start_server, version):
    """`context` needs no daemon; its text content is the JSON result in every
    revision, and the old ones get it without structuredContent."""
    server, _ = legacy_session(start_server, version)
    result = server.call("context")["result"]
    check_call_result(result, version)
    assert result["isError"] is False
    value = json.loads(result["content"][0]["text"])
    assert value["workspace"]["found_by"] == "working directory"
    if version in OLD:
        assert "structuredContent" not in result
    else:
        assert result["structuredContent"] == value
    assert server.close() == 0


@pytest.mark.parametrize("version", REVISIONS)
def test_an_error_result_has_only_the_revisions_fields(start_server, version):
    server, _ = legacy_session(start_server, version)
    result = server.call("claims", {"numbers": "not a list"})["result"]
    check_call_result(result, version)
    assert result["isError"] is True
    assert "invalid_params" in result["content"][0]["text"]
    if version in OLD:
        assert "structuredContent" not in result
    assert server.close() == 0


@pytest.mark.parametrize("version", OLD)
def test_the_same_text_as_a_newer_session(start_server, version):
    """The old session's text is what a 2025-11-25 session's text is."""
    old, _ = legacy_session(start_server, version)
    old_text = old.call("context")["result"]["content"][0]["text"]
    new, _ = legacy_session(start_server, "2025-11-25")
    new_text = new.call("context")["result"]["content"][0]["text"]
    assert json.loads(old_text) == json.loads(new_text)
    assert old.close() == 0
    assert new.close() == 0


# -- renegotiation and the modern era -----------------------------------------------

def test_a_second_initialize_renegotiates_the_fields(start_server):
    server, _ = legacy_session(start_server, "2024-11-05")
    check_tools(server.request("tools/list")["result"], "2024-11-05")
    check_initialize(server.initialize("2025-11-25"), "2025-11-25")
    tools = check_tools(server.request("tools/list")["result"], "2025-11-25")
    assert all("title" in tool and "annotations" in tool for tool in tools.values())
    assert "structuredContent" in server.call("context")["result"]
    check_initialize(server.initialize("2025-03-26"), "2025-03-26")
    check_tools(server.request("tools/list")["result"], "2025-03-26")
    check_call_result(server.call("context")["result"], "2025-03-26")
    assert server.close() == 0


def test_the_modern_era_is_not_trimmed_by_an_old_session(start_server):
    server, _ = legacy_session(start_server, "2024-11-05")
    modern = server.modern("tools/list")["result"]
    assert all("title" in tool and "annotations" in tool for tool in modern["tools"])
    assert all("outputSchema" in tool for tool in modern["tools"] if tool["name"] != "pack")
    call = server.modern("tools/call", {"name": "context"})["result"]
    assert "structuredContent" in call
    # ... and the legacy session is still the old one.
    check_tools(server.request("tools/list")["result"], "2024-11-05")
    assert server.close() == 0


@pytest.mark.parametrize("version", OLD)
def test_old_handshakes_under_every_python(start_server, server_python, version):
    server = start_server(python=server_python)
    check_initialize(server.initialize(version), version)
    check_tools(server.request("tools/list")["result"], version)
    check_call_result(server.call("context")["result"], version)
    assert server.close() == 0
