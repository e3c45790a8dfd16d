"""The client's roots (clients.md, "Roots (legacy era only)"): the one
request the server ever sends, and what it does with the answers.

The test is the client: it reads the server's `roots/list` request from the
pipe and answers it (or not) on the pipe.  The server's working directory is
never the project, so `context`'s `workspace` shows whether roots were used.

Also fuzzed (contract.md §6 rule 18): lists of roots of every kind, list_changed storms, and
responses the server never asked for, against a model of clients.md; and a thousand deep roots
cost in proportion to their size (rule 24).
"""

import os
import time
from collections import Counter
from urllib.parse import quote

import pytest

from hardening_support import (FUZZ_EXAMPLES, NO_SHRINK, claim_response, hypothesis_or_fail,
                               id_key, report)
from harness import (HOST_IS_WINDOWS, depth, make_workspace, modern_params, server_file_uri,
                     server_is_windows, server_path)

hypothesis_or_fail()
from hypothesis import given, settings, strategies as st  # noqa: E402

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


# -- what a client's messages may cost (contract.md §6 rule 18) -----------------------

def huge_root_response(request_id, size=4 << 20):
    """An answer with one root of `size` bytes of `a/` components, a path whose realpath
    costs time in the square of its length (the review measured 800 KB taking 23 s)."""
    return {"jsonrpc": "2.0", "id": request_id,
            "result": {"roots": [{"uri": "file:///" + "a/" * (size // 2)}]}}


@pytest.mark.parametrize("which", ["never-sent", "already-answered", "superseded"])
def test_a_response_to_no_pending_request_is_dropped_unread(start_server, elsewhere, projects,
                                                            which):
    """§6 rule 18: a response whose id is not that of the pending roots/list is dropped
    before anything inside it is looked at, so a ping right behind one holding a 4 MB root
    is answered at once (within the harness's safety timeout; looking at the root took
    minutes), and the roots in force stay."""
    server = start_server(cwd=elsewhere)
    first = declared(server)
    if which == "superseded":
        server.notify("notifications/roots/list_changed")
        pending = expect_request(server, 2)
        stale = first["id"]
    else:
        server.answer(first, roots_result(projects[0]))
        found(server, projects[0])
        pending = None
        stale = "memprove-roots-99" if which == "never-sent" else first["id"]
    started = time.monotonic()
    server.send(huge_root_response(stale))
    assert server.request("ping")["result"] == {}
    report("roots_stray_answer", which=which, root_bytes=4 << 20,
           seconds_to_ping=round(time.monotonic() - started, 3))
    if pending is not None:
        server.answer(pending, roots_result(projects[0]))
    found(server, projects[0])
    assert server.close() == 0


def test_at_most_1000_roots_are_looked_at(start_server, elsewhere, projects):
    """Of an answer, the first 1,000 roots are looked at: a file root in 1,000th place is
    used, one in 1,001st is not (the answer then gives no usable root: the next source)."""
    server = start_server(cwd=elsewhere)
    others = ["vscode-remote://wsl+Ubuntu/home/%d" % n for n in range(1000)]
    server.answer(declared(server), roots_result(*(others[:999] + [projects[0]])))
    found(server, projects[0])
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), roots_result(*(others + [projects[1]])))
    found(server, elsewhere, "working directory")
    assert server.close() == 0


def test_an_answer_of_250000_roots_costs_what_1000_do(start_server, elsewhere, projects):
    """250,000 roots in one answer (7 s when each was looked at): the server looks at the
    first 1,000, so the call behind it finds the first root; the seconds from the answer
    to that call's result are reported, not asserted."""
    server = start_server(cwd=elsewhere)
    request = declared(server)
    others = ["vscode-remote://wsl+Ubuntu/home/%d" % n for n in range(250000)]
    started = time.monotonic()
    server.answer(request, roots_result(projects[0], *others))
    found(server, projects[0])
    report("roots_many", roots=250001, seconds=round(time.monotonic() - started, 3))
    assert server.close() == 0


def uri_of_length(path, length):
    """A file: URI of exactly `length` bytes naming `path` (padded with `/.` segments)."""
    uri = server_file_uri(path)
    pad = length - len(uri.encode())
    assert pad >= 0
    return uri + "/." * (pad // 2) + "/" * (pad % 2)


def test_a_uri_over_4096_bytes_is_skipped(start_server, elsewhere, projects):
    """A URI of 4,096 bytes is used; one of 4,097 is skipped and the next root is used."""
    server = start_server(cwd=elsewhere)
    longest = uri_of_length(projects[0], 4096)
    assert len(longest.encode()) == 4096
    server.answer(declared(server), roots_result(longest, projects[1]))
    found(server, projects[0])
    too_long = uri_of_length(projects[0], 4097)
    assert len(too_long.encode()) == 4097
    server.notify("notifications/roots/list_changed")
    server.answer(expect_request(server, 2), roots_result(too_long, projects[1]))
    found(server, projects[1])
    assert server.close() == 0


def test_only_the_newest_request_is_pending(start_server, elsewhere, projects):
    """A list_changed replaces the pending roots/list: after twenty, an answer to one of the
    older requests is dropped (the call waits for the newest, then goes on with the roots
    in force), and the answer to the newest is used."""
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    found(server, projects[0])
    for _ in range(20):
        server.notify("notifications/roots/list_changed")
    requests = [expect_request(server, number) for number in range(2, 22)]
    server.answer(requests[3], roots_result(projects[1]))
    found(server, projects[0])
    server.answer(requests[-1], roots_result(projects[2]))
    found(server, projects[2])
    assert server.close() == 0


def test_a_call_during_a_list_changed_storm_is_answered(start_server, elsewhere, projects):
    """A client that sends list_changed every 10 ms and never answers: a `context` call sent
    mid-storm waits at most 2 s from its own arrival, then goes on with the roots in force
    (it waited without end when each notification moved its deadline).  It must be
    answered while the storm goes on, within the harness's safety timeout."""
    import threading
    server = start_server(cwd=elsewhere)
    server.answer(declared(server), roots_result(projects[0]))
    found(server, projects[0])
    call = server.request_message("tools/call", {"name": "context"})
    stop = threading.Event()

    def storm():
        # The one writer to the pipe while it runs: the call goes out from here, mid-storm.
        for sent in range(1000000):
            if sent == 50:
                server.send(call)
            server.notify("notifications/roots/list_changed")
            if stop.wait(0.01):
                return

    storming = threading.Thread(target=storm, daemon=True)
    storming.start()
    try:
        # One deadline for the whole wait: roots/list requests keep arriving meanwhile.
        answer = claim_response(server, id_key(call["id"]))
        still_storming = storming.is_alive()
    finally:
        stop.set()
        storming.join(10)
    assert still_storming
    workspace = answer["result"]["structuredContent"]["workspace"]
    assert (workspace["root"], workspace["found_by"]) == (server_path(projects[0]), "roots"), \
        workspace
    assert server.close() == 0


# list_changed notifications in the storm: 250,000 at CI depth (each costs the server
# a message read and a log line, ~140 µs), a fifth in the quick run; the memory allowed
# scales with them: 6 MiB for 250,000 (a kept request was ~64 bytes: 16 MB there).
STORM = depth(250000)
STORM_BOUND_KIB = 6 * 1024 * STORM // 250000


def test_a_list_changed_storm_holds_one_request(start_server, elsewhere, projects):
    """STORM list_changed and no answer: the server holds one pending request, so its
    peak memory (VmHWM) grows by no more than STORM_BOUND_KIB (each pending request kept
    added ~64 bytes: 1,000,000 grew it by 64 MiB).  The growth is reported."""
    from hardening_support import (MALLOC_PLAIN, needs_proc, peak_kib, report)
    needs_proc()
    server = start_server(cwd=elsewhere, env=MALLOC_PLAIN)
    server.answer(declared(server), roots_result(projects[0]))
    notification = b'{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}\n'

    def storm(count):
        for _ in range(count // 10000):
            server.send_raw(notification * 10000)
        assert server.request("ping")["result"] == {}     # every notification has been read

    storm(10000)                                          # the buffers a storm needs, warmed
    idle_kib = peak_kib(server.proc.pid)
    storm(STORM)
    storm_kib = peak_kib(server.proc.pid)
    found(server, projects[0])
    assert server.close() == 0
    report("roots_storm_memory", notifications=STORM, idle_hwm_kib=idle_kib,
           peak_hwm_kib=storm_kib, growth_kib=storm_kib - idle_kib)
    assert storm_kib - idle_kib <= STORM_BOUND_KIB, (idle_kib, storm_kib)


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


# =============================================================================
# Rule 24: a roots answer costs in proportion to its size
# =============================================================================

def deep_uri(size=4096):
    """A file: URI of `size` bytes whose path has as many components as fit: resolving it
    costs a look at each of them.  A Windows server gets it on a drive, as a client there
    would send it."""
    start = "file:///Z:/" if server_is_windows() else "file:///C:/" if HOST_IS_WINDOWS else \
        "file:///"
    return start + "a/" * ((size - len(start)) // 2)


def roots_answer(request, uris):
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"roots": [{"uri": uri}
                                                                        for uri in uris]}}


def declared_roots(server):
    params = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": True}},
              "clientInfo": {"name": "pytest-client", "version": "1.0"}}
    assert "result" in server.request("initialize", params)
    server.notify("notifications/initialized")
    request = server.server_request()
    assert request["method"] == "roots/list", request
    return request


def test_rule24_a_thousand_deep_roots_hold_no_message_behind_them(start_server, workspace):
    """1,000 roots of 4,096 bytes, each a path of some two thousand components (about 9 s
    to resolve them all): the ping right behind the answer is answered in under a second,
    and so is one sent while a call that needs them is in flight."""
    inside = workspace / "src"
    inside.mkdir()
    server = start_server(cwd=inside)
    request = declared_roots(server)
    started = time.monotonic()
    server.send(roots_answer(request, [deep_uri()] * 1000))
    assert server.request("ping")["result"] == {}
    behind_the_answer = time.monotonic() - started
    call = server.request_message("tools/call", server.call_params("context", {}))
    server.send(call)
    started = time.monotonic()
    assert server.request("ping")["result"] == {}
    beside_the_call = time.monotonic() - started
    answer = server.response(call["id"])
    to_the_call = time.monotonic() - started
    report("roots_deep", roots=1000, uri_bytes=4096,
           seconds_to_ping=round(behind_the_answer, 3), seconds_beside_a_call=round(beside_the_call, 3),
           seconds_to_the_call=round(to_the_call, 3))
    assert behind_the_answer < 1.0 and beside_the_call < 1.0, (behind_the_answer, beside_the_call)
    # None of them holds the working directory: each is judged by one stat, the call does
    # not resolve them all (it took ~9 s when it did).
    assert to_the_call < 1.0, to_the_call
    assert answer["result"]["structuredContent"]["workspace"]["found_by"] == "roots", answer
    assert server.close() == 0


def test_rule24_the_root_holding_the_working_directory_is_found_among_them(start_server,
                                                                            workspace):
    """The project, as the 1,000th root behind 999 deep ones, holds the working directory:
    it is the start directory, found without resolving the others."""
    inside = workspace / "src"
    inside.mkdir()
    server = start_server(cwd=inside)
    seconds = workspace_by_roots(server, [deep_uri()] * 999 + [server_file_uri(workspace)],
                                 workspace)
    report("roots_deep_used", roots=1000, seconds_to_context=round(seconds, 3))
    assert server.close() == 0


def workspace_by_roots(server, uris, workspace):
    """Answer the server's roots/list with `uris`, then call `context`: the Workspace must be
    `workspace`, found by roots.  The seconds from the answer to the result."""
    request = declared_roots(server)
    started = time.monotonic()
    server.send(roots_answer(request, uris))
    result = server.call("context")["result"]
    seconds = time.monotonic() - started
    assert result["isError"] is False, result
    found = result["structuredContent"]["workspace"]
    assert (found["root"], found["found_by"]) == (server_path(workspace), "roots"), found
    return seconds


@pytest.fixture
def deep_folder(tmp_path):
    """A real folder as many components deep as a root's 4,096-byte URI holds (resolving
    it looks at each of them), made and removed a component at a time: shutil.rmtree would
    recurse past Python's limit."""
    base = tmp_path / "deep"
    base.mkdir()
    depth = (4096 - len(server_file_uri(base)) - 1) // 2
    folders = [os.open(str(base), os.O_RDONLY)]
    try:
        for _ in range(depth):
            os.mkdir("a", dir_fd=folders[-1])
            folders.append(os.open("a", os.O_RDONLY, dir_fd=folders[-1]))
        os.close(folders.pop())
        yield base.joinpath(*["a"] * depth)
    finally:
        while folders:
            folder = folders.pop()
            os.rmdir("a", dir_fd=folder)
            os.close(folder)


def test_rule24_a_link_to_the_project_is_found_behind_deep_folders(start_server, workspace,
                                                                     tmp_path, request):
    """999 roots that are real folders, each a different one some two thousand deep
    (resolving one costs some 0.1 s), then a link to the project: the link holds the working
    directory (it is the same folder as one above it), so it is the start directory, resolved
    to the project, and the deep ones are each looked at once, never resolved.  Under Wine a
    stat itself walks such a path a component at a time (~0.15 s each, where Windows asks
    the file system once), so a Windows server gets 999 shallow folders: the link must still
    be told apart by what it is, not by how it is written."""
    inside = workspace / "src"
    inside.mkdir()
    link = tmp_path / "project-link"
    link.symlink_to(workspace, target_is_directory=True)
    if server_is_windows() or HOST_IS_WINDOWS:      # (and os.open opens no folder there)
        others = [tmp_path / "others" / str(number) for number in range(999)]
        for folder in others:
            folder.mkdir(parents=True)
    else:
        others = list(request.getfixturevalue("deep_folder").parents)[:999]
    server = start_server(cwd=inside)
    seconds = workspace_by_roots(server, [server_file_uri(folder, resolved=False)
                                          for folder in others + [link]], workspace)
    report("roots_deep_folders_then_a_link", roots=1000, seconds_to_context=round(seconds, 3))
    assert seconds < 10.0, seconds     # resolving the 999 took ~110 s
    assert server.close() == 0
