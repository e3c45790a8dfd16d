"""The client's roots (spec/clients.md, "Roots (legacy era only)"): the one
request the server ever sends, and what it does with the answers.

The test is the client: it reads the server's `roots/list` request from the
pipe and answers it (or not) on the pipe.  The server's working directory is
never the project, so `context`'s `workspace` shows whether roots were used.
"""

from urllib.parse import quote

import pytest

from conftest import make_workspace, modern_params, server_file_uri, server_path

ROOTS_REQUEST = {"jsonrpc": "2.0", "method": "roots/list"}


def roots_result(*paths_or_uris):
    return {"roots": [{"uri": item if isinstance(item, str) else server_file_uri(item)}
                      for item in paths_or_uris]}


@pytest.fixture
def elsewhere(tmp_path):
    """A working directory outside every project (its own repository root)."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    (path / ".git").mkdir()
    return path


@pytest.fixture
def projects(tmp_path):
    return [make_workspace(tmp_path / ("project %d" % n)) for n in range(1, 4)]


def handshake(server, capabilities, version="2025-06-18"):
    params = {"protocolVersion": version, "capabilities": capabilities,
              "clientInfo": {"name": "pytest-client", "version": "1.0"}}
    assert "result" in server.request("initialize", params)
    server.notify("notifications/initialized")


def expect_request(server, number):
    request = server.server_request()
    assert request == dict(ROOTS_REQUEST, id="memprove-roots-%d" % number), request
    return request


def declared(server, number=1, capabilities=None):
    """Handshake declaring roots; returns the first roots/list request."""
    handshake(server, {"roots": {"listChanged": True}} if capabilities is None else capabilities)
    return expect_request(server, number)


def workspace_of(server, era="legacy"):
    result = server.call("context", era=era)["result"]
    assert result["isError"] is False, result
    return result["structuredContent"]["workspace"]


def found(server, root, found_by="roots"):
    workspace = workspace_of(server)
    assert (workspace["root"], workspace["found_by"]) == (server_path(root), found_by), workspace
    assert workspace["problem"] is None


def roots_requests(server):
    return [message for message in server.server_requests() if message["method"] == "roots/list"]


def response_logged(server, request_id):
    """The client's response got its own log line, outcome `response`."""
    quoted = '"%s"' % request_id
    return [record for record in server.log_records()
            if record["id"] == quoted and record["outcome"] == "response"]


# -- when the request is sent --------------------------------------------------------

@pytest.mark.parametrize("capabilities", [{"roots": {}}, {"roots": {"listChanged": True}},
                                          {"roots": {"listChanged": False}, "sampling": {}}])
def test_one_request_after_initialized(start_server, elsewhere, projects, capabilities):
    server = start_server(cwd=elsewhere)
    params = {"protocolVersion": "2025-06-18", "capabilities": capabilities,
              "clientInfo": {"name": "pytest-client", "version": "1.0"}}
    assert "result" in server.request("initialize", params)
    # Not before `notifications/initialized`: this ping is answered first.
    ping = server.request_message("ping")
    server.send(ping)
    server.notify("notifications/initialized")
    request = expect_request(server, 1)
    order = server.messages
    assert order.index(request) > next(index for index, message in enumerate(order)
                                       if message.get("id") == ping["id"])
    server.answer(request, roots_result(projects[0]))
    found(server, projects[0])
    found(server, projects[0])                        # kept: no second request
    assert server.close() == 0
    assert len(roots_requests(server)) == 1
    assert len(response_logged(server, "memprove-roots-1")) == 1


def test_again_on_list_changed(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    found(server, projects[0])
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), roots_result(projects[1]))
    found(server, projects[1])
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 3), roots_result(projects[2], projects[0]))
    found(server, projects[2])
    assert server.close() == 0
    assert [m["id"] for m in roots_requests(server)] == ["memprove-roots-%d" % n for n in (1, 2, 3)]


def test_ids_count_on_across_a_second_initialize(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    found(server, projects[0])
    server.answer(declared(server, number=2), roots_result(projects[1]))
    found(server, projects[1])
    assert server.close() == 0


@pytest.mark.parametrize("capabilities", [{}, {"roots": True}, {"roots": None}, {"roots": []},
                                          {"sampling": {}, "elicitation": {}}])
def test_no_request_without_roots(start_server, elsewhere, capabilities):
    server = start_server(cwd=elsewhere)
    handshake(server, capabilities)
    server.notify("notifications/roots/list_changed")   # not declared: nothing to ask
    assert workspace_of(server)["found_by"] == "working directory"
    assert server.close() == 0
    assert server.server_requests() == []


def test_no_request_before_initialized(start_server, elsewhere):
    """Roots declared, but `notifications/initialized` never sent: no request."""
    server = start_server(cwd=elsewhere)
    params = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
              "clientInfo": {"name": "pytest-client", "version": "1.0"}}
    assert "result" in server.request("initialize", params)
    assert workspace_of(server)["found_by"] == "working directory"
    assert server.close() == 0
    assert server.server_requests() == []


def test_a_second_initialize_without_roots_stops_using_them(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    found(server, projects[0])
    handshake(server, {})
    found(server, elsewhere, "working directory")
    server.notify("notifications/roots/list_changed")
    assert server.close() == 0
    assert len(roots_requests(server)) == 1


def test_no_request_and_no_roots_in_the_modern_era(start_server, elsewhere):
    server = start_server(cwd=elsewhere)
    capabilities = {"roots": {"listChanged": True}}
    answer = server.request("server/discover", modern_params(capabilities=capabilities))
    assert "result" in answer
    server.notify("notifications/roots/list_changed")
    call = server.request("tools/call", modern_params({"name": "context"},
                                                      capabilities=capabilities))
    assert call["result"]["structuredContent"]["workspace"]["found_by"] == "working directory"
    assert server.close() == 0
    assert server.server_requests() == []


def test_the_modern_era_ignores_a_legacy_sessions_roots(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    found(server, projects[0])
    assert workspace_of(server, era="modern")["found_by"] == "working directory"
    assert server.close() == 0


# -- the answers -----------------------------------------------------------------------

def test_answers_out_of_order_the_newest_request_wins(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    first = declared(server)
    server.notify("notifications/roots/list_changed")
    second = expect_request(server, 2)
    server.answer(second, roots_result(projects[1]))
    server.answer(first, roots_result(projects[0]))   # late: an older list
    found(server, projects[1])
    assert server.close() == 0
    assert len(response_logged(server, "memprove-roots-1")) == 1
    assert len(response_logged(server, "memprove-roots-2")) == 1


def test_an_error_answer_leaves_the_latest_good_one(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), error={"code": -32601, "message": "Method not found"})
    found(server, elsewhere, "working directory")     # no good answer ever: the next source
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), roots_result(projects[0]))
    found(server, projects[0])
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 3), error={"code": -32603, "message": "Internal error"})
    found(server, projects[0])                        # the latest good answer stays
    assert server.close() == 0


@pytest.mark.parametrize("result", [
    {"roots": "not a list"},
    {"roots": [{"name": "no uri"}]},
    {"roots": [{"uri": 42}]},
    {"roots": [None]},
    {},
    [],
    "roots",
    None,
], ids=["roots-string", "no-uri", "uri-number", "root-null", "empty-object", "array", "string",
        "null"])
def test_a_malformed_answer_leaves_the_latest_good_one(start_server, elsewhere, projects, result):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), result)
    found(server, elsewhere, "working directory")
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), roots_result(projects[0]))
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 3), result)
    found(server, projects[0])
    assert server.close() == 0


@pytest.mark.parametrize("bad", ["file://%zz%", "file:", "file://", "file:relative/path",
                                 "file://remote-host/share/x", "not a uri at all", "::::",
                                 "file:///tmp/\u0000nul", ""])
def test_a_malformed_uri_is_skipped(start_server, elsewhere, projects, bad):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(bad, projects[1]))
    found(server, projects[1])
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), roots_result(bad))
    # A good answer with no usable root: roots give nothing, the next source is used.
    found(server, elsewhere, "working directory")
    assert server.close() == 0


def test_only_file_uris_are_used(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    others = ["vscode-remote://wsl+Ubuntu" + quote(str(projects[0])),
              "https://example.com" + quote(str(projects[0])),
              "git://example.com/repo", "urn:isbn:0451450523"]
    server.answer(declared(server), roots_result(*(others + [projects[2]])))
    found(server, projects[2])
    assert server.close() == 0


def test_file_uri_forms(start_server, elsewhere, tmp_path):
    """Percent-encoding (a space, non-ASCII) and `file://localhost/` are file roots."""
    project = make_workspace(tmp_path / "caf\u00e9 & co #1")
    server = start_server(cwd=elsewhere)
    with_host = server_file_uri(project).replace("file://", "file://localhost", 1)
    server.answer(declared(server), roots_result(with_host))
    found(server, project)
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), roots_result(project))
    found(server, project)
    assert server.close() == 0


def test_the_root_holding_the_working_directory_is_preferred(start_server, projects):
    inside = projects[1] / "src" / "pkg"
    inside.mkdir(parents=True)
    server = start_server(cwd=inside)
    server.answer(declared(server), roots_result(projects[0], projects[1], projects[2]))
    found(server, projects[1])
    server.notify("notifications/roots/list_changed")
    # No file root holds the working directory: the first file root.
    server.answer(expect_request(server, 2), roots_result("vscode-remote://x/y", projects[2],
                                                          projects[0]))
    found(server, projects[2])
    assert server.close() == 0


def test_a_root_is_a_start_directory_that_climbs(start_server, elsewhere, projects):
    deep = projects[0] / "a" / "b"
    deep.mkdir(parents=True)
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(deep))
    found(server, projects[0])
    assert server.close() == 0


def test_higher_sources_win_over_roots(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere, env={"CLAUDE_PROJECT_DIR": str(projects[2])})
    server.answer(declared(server), roots_result(projects[0]))
    found(server, projects[2], "CLAUDE_PROJECT_DIR")
    assert server.close() == 0


# -- no answer, and list_changed while a call runs ------------------------------------

def test_no_answer_a_call_goes_on_with_the_next_source(start_server, elsewhere):
    """The call waits for the unanswered request (at most 2 s), then uses the
    working directory; the request is never answered."""
    server = start_server(cwd=elsewhere)
    declared(server)
    found(server, elsewhere, "working directory")
    assert server.close() == 0


def test_no_answer_a_call_goes_on_with_the_previous_answer(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    server.notify("notifications/roots/list_changed")
    expect_request(server, 2)                         # never answered
    found(server, projects[0])
    assert server.close() == 0


def test_a_waiting_call_gets_the_answer_and_ping_is_not_held_up(start_server, elsewhere,
                                                                 projects):
    """A call that arrives while the request is unanswered waits for the answer,
    and the connection goes on meanwhile: ping is answered first."""
    server = start_server(cwd=elsewhere)
    request = declared(server)
    call = server.request_message("tools/call", {"name": "context"})
    server.send(call)
    assert server.request("ping")["result"] == {}
    server.answer(request, roots_result(projects[0]))
    result = server.response(call["id"])["result"]["structuredContent"]["workspace"]
    assert (result["root"], result["found_by"]) == (server_path(projects[0]), "roots")
    assert server.close() == 0


def test_list_changed_mid_call(start_server, elsewhere, projects):
    """Roots declared and answered; a call is sent and `list_changed` right
    behind it, before the answer to the new request.  The call ends with one
    of the two lists (whichever was in force when it looked), nothing hangs,
    and every later call sees the new list."""
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    call = server.request_message("tools/call", {"name": "context"})
    server.send(call)
    server.notify("notifications/roots/list_changed")
    second = expect_request(server, 2)
    server.answer(second, roots_result(projects[1]))
    during = server.response(call["id"])["result"]["structuredContent"]["workspace"]
    assert during["found_by"] == "roots"
    assert during["root"] in (server_path(projects[0]), server_path(projects[1]))
    found(server, projects[1])
    # And again, with the call sent after the notification: it must wait for the answer.
    server.notify("notifications/roots/list_changed")
    call = server.request_message("tools/call", {"name": "context"})
    server.send(call)
    server.answer(expect_request(server, 3), roots_result(projects[2]))
    after = server.response(call["id"])["result"]["structuredContent"]["workspace"]
    assert after["root"] == server_path(projects[2])
    assert server.close() == 0


# -- responses the server did not ask for --------------------------------------------

@pytest.mark.parametrize("response", [
    {"jsonrpc": "2.0", "id": "memprove-roots-7", "result": {"roots": []}},
    {"jsonrpc": "2.0", "id": "memprove-roots-x", "result": {"roots": []}},
    {"jsonrpc": "2.0", "id": 5, "result": {}},
    {"jsonrpc": "2.0", "id": "other", "error": {"code": -32601, "message": "no"}},
], ids=["unasked-number", "not-a-number", "integer-id", "error"])
def test_an_unasked_response_is_logged_and_ignored(start_server, elsewhere, projects, response):
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    server.send(response)
    found(server, projects[0])
    assert server.close() == 0
    outcomes = [record["outcome"] for record in server.log_records()]
    assert outcomes.count("response") == 2            # ours to roots/list, and this one
    # Nothing was written for it: only our calls' and the handshake's answers.
    assert all("method" in m or m.get("id") != response["id"] for m in server.messages)


def test_a_second_answer_to_the_same_request_is_ignored(start_server, elsewhere, projects):
    server = start_server(cwd=elsewhere)
    request = declared(server)
    server.answer(request, roots_result(projects[0]))
    found(server, projects[0])
    server.answer(request, roots_result(projects[1]))
    found(server, projects[0])
    assert server.close() == 0
    assert len(response_logged(server, "memprove-roots-1")) == 2


def test_the_response_is_logged_without_the_paths(start_server, elsewhere, tmp_path, plant):
    secret_dir = make_workspace(tmp_path / plant("PLANTED-ROOT"))
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(secret_dir))
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), {"roots": []})
    assert workspace_of(server)["found_by"] == "working directory"
    assert server.close() == 0                        # the path on neither stream
    assert len(response_logged(server, "memprove-roots-1")) == 1


def test_roots_under_every_python(start_server, server_python, elsewhere, projects):
    server = start_server(python=server_python, cwd=elsewhere)
    request = declared(server)
    call = server.request_message("tools/call", {"name": "context"})
    server.send(call)
    assert server.request("ping")["result"] == {}
    server.answer(request, roots_result("vscode-remote://x/y", projects[0]))
    result = server.response(call["id"])["result"]["structuredContent"]["workspace"]
    assert (result["root"], result["found_by"]) == (server_path(projects[0]), "roots")
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), error={"code": -32603, "message": "no"})
    found(server, projects[0])
    assert server.close() == 0
    assert len(response_logged(server, "memprove-roots-2")) == 1
