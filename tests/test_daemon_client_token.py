"""The daemon client's token (memprove_mcp.py section 10): token hygiene (issue 5, item 4),
against the built .pyz.

The token goes only to the loopback daemon, in `Authorization: Bearer` alone: not
through any proxy variable, not after a redirect, not to a daemon.json that names
another host (a listener there proves that nothing arrives).  It never appears on
standard output or standard error, in a result, an error text or a traceback, even
when the daemon puts it in its Problem's title and detail; malformed tokens never
reach a header.  Rotating the token file, revoking and removing the token take
effect on the very next call.

Every server here is checked at close by conftest.Server.check for the planted
token and argument values on both streams; `no_internal_error` (MEMPROVE_MCP_LOG)
that no traceback was written; TokenWatch that every request the reference daemon
received carried the token in the Authorization header only.
"""

import json
import os

import pytest

from hardening_support import (FakeDaemon, Spy, TokenWatch, non_loopback_address, outcome_of,
                               report)


PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                   "ALL_PROXY")


def call(server, tool, args, era="legacy"):
    return outcome_of(server.call(tool, args, era=era, id=server.new_id()), era)


@pytest.fixture
def watched(daemon, config, planted):
    watch = TokenWatch(daemon, [config.token], planted)
    yield watch
    watch.check()


@pytest.fixture
def spy():
    listener = Spy()
    yield listener
    listener.close()


@pytest.fixture
def remote_spy():
    """A listener on an address of this machine that is not loopback, when it has one."""
    address = non_loopback_address()
    if address is None:
        yield None
        return
    listener = Spy(address)
    yield listener
    listener.close()


WRITE_AND_READ_CALLS = [("tasks", {}), ("begin", {"new_task": "Hygiene"}),
                        ("checkpoint", {"facts": [{"text": "A fact."}]}), ("ledger_verify", {}),
                        ("pack", {}), ("end", {})]


@pytest.mark.parametrize("no_proxy", [None, "", "example.com"], ids=["unset", "empty", "other"])
def test_proxy_variables_are_never_used(hserve, config, watched, spy, no_proxy):
    env = dict((name, spy.url) for name in PROXY_VARIABLES)
    env["no_proxy"] = env["NO_PROXY"] = no_proxy
    server = hserve(config=config, timeout=5, env=env)
    server.initialize()
    for tool, args in WRITE_AND_READ_CALLS:
        code, value = call(server, tool, args)
        assert code == "ok", (tool, value)
    assert server.close() == 0
    assert spy.received == [], "a request went to the proxy: %r" % spy.received[:1]
    assert watched.seen > 0 and watched.authorized == {config.token: watched.seen}
    report("proxy_ignored", no_proxy=no_proxy, calls=len(WRITE_AND_READ_CALLS),
           requests_to_daemon=watched.seen, requests_to_proxy=len(spy.received))


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_never_followed(hserve, config, spy, remote_spy, status):
    targets = [spy.url + "/v1/tasks", "http://203.0.113.1/v1/tasks"]
    if remote_spy is not None:
        targets.append(remote_spy.url + "/v1/tasks")
    state = {"target": targets[0]}

    def answer(request):
        return status, {"Location": state["target"], "Content-Type": "application/json"}, b"{}"

    fake = FakeDaemon(answer)
    try:
        fake.write_daemon_json(config.data_dir)
        server = hserve(config=config, timeout=2)
        server.initialize()
        for target in targets:
            state["target"] = target
            for tool, args in (("tasks", {}), ("begin", {"new_task": "Redirected"})):
                before = len(fake.requests)
                code, text = call(server, tool, args)
                assert code == "daemon_error", text
                # Answered with a redirect: the write is not retried, nothing else is sent.
                assert len(fake.requests) == before + 1
        assert server.close() == 0
    finally:
        fake.close()
    assert spy.received == [] and (remote_spy is None or remote_spy.received == [])
    for request in fake.requests:
        assert request["headers"]["authorization"] == "Bearer " + config.token


REFUSED_URLS = [
    "http://203.0.113.1:{port}", "http://example.invalid:{port}", "http://10.0.0.1:{port}",
    "http://0.0.0.0:{port}", "https://127.0.0.1:{port}", "ftp://127.0.0.1:{port}",
    "http://user:pw@127.0.0.1:{port}", "http://127.0.0.1.nip.io:{port}",
    "http://localhost.example.invalid:{port}", "http://2130706433:{port}", "http://127.1:{port}",
    "http://[fd00::2]:{port}", "http://127.0.0.1:99999", "http://:{port}", "file:///etc/passwd",
    "//127.0.0.1:{port}", "",
]


def test_daemon_json_naming_another_host_gets_no_request(hserve, config, daemon, spy, remote_spy,
                                                         planted):
    port = daemon.port
    urls = [url.format(port=port) for url in REFUSED_URLS]
    if remote_spy is not None:
        urls.insert(0, remote_spy.url)
        urls.insert(1, "http://%s:%d" % (remote_spy.host, spy.port))
    server = hserve(config=config, timeout=2)
    server.initialize()
    refused = 0
    for url in urls:
        (config.data_dir / "daemon.json").write_text(json.dumps({"url": url, "pid": 1}))
        for tool, args in (("tasks", {}), ("checkpoint", {"facts": [{"text": "x"}]}),
                           ("begin", {"new_task": "Elsewhere"}), ("ledger_verify", {})):
            before = len(daemon.ops)
            code, text = call(server, tool, args)
            expected = "no_task" if tool == "checkpoint" else "daemon_address_refused"
            assert code == expected, (url, tool, text)
            assert len(daemon.ops) == before
            refused += code == "daemon_address_refused"
    assert server.close() == 0
    assert spy.received == [] and (remote_spy is None or remote_spy.received == [])
    report("daemon_address_refused", urls=len(urls), calls_refused=refused,
           non_loopback_listener=remote_spy is not None, requests_received=0)


def test_localhost_is_loopback_and_accepted(hserve, config, daemon):
    (config.data_dir / "daemon.json").write_text(
        json.dumps({"url": "http://localhost:%d" % daemon.port, "pid": 1}))
    server = hserve(config=config, timeout=5)
    server.initialize()
    assert call(server, "tasks", {})[0] == "ok"
    assert server.close() == 0
    assert [entry["op"] for entry in daemon.ops] == ["listTasks"]


# =============================================================================
# The token never shows
# =============================================================================

def test_problem_bodies_carrying_the_token_are_never_shown(hserve, config, plant, monkeypatch):
    """contract.md §3: title and detail are never shown; the text comes from `code`.
    §4: an unknown daemon code is kept, so the log's outcome may be one harness does
    not list."""
    import harness
    monkeypatch.setattr(harness, "PROBLEM_CODES", harness.PROBLEM_CODES | {"weird_new_code"})
    secret = plant("PLANTED-DETAIL")
    answers = [
        (401, {"code": "unauthenticated", "title": config.token, "detail": secret}, "unauthenticated"),
        (403, {"code": "scope_missing", "detail": "token=" + config.token}, "scope_missing"),
        (422, {"code": "weird_new_code", "title": secret, "detail": config.token}, "weird_new_code"),
        (409, {"code": "Bad-Code " + config.token, "detail": secret}, "daemon_error"),
        (500, {"code": "x" * 65, "detail": config.token}, "daemon_error"),
        (400, {"detail": config.token}, "daemon_error"),
        (404, [config.token], "daemon_error"),
    ]
    state = {}

    def answer(request):
        status, body, _ = answers[state["n"]]
        return status, {"Content-Type": "application/problem+json"}, json.dumps(body).encode()

    fake = FakeDaemon(answer)
    try:
        fake.write_daemon_json(config.data_dir)
        server = hserve(config=config, timeout=5)
        server.initialize()
        for era in ("legacy", "modern"):
            for n, (_, _, expected) in enumerate(answers):
                state["n"] = n
                for tool, args in (("tasks", {}), ("begin", {"new_task": "Shown?"})):
                    code, text = call(server, tool, args, era)
                    assert code == expected, (n, text)
                    if expected == "weird_new_code":
                        assert text == "weird_new_code: The memprove daemon refused the request."
        assert server.close() == 0                 # the planted token and detail: on neither stream
    finally:
        fake.close()


MALFORMED = [("space", "tok with space"), ("tab", "tok\twith-tab"),
             ("non-ascii", "tok\u00e9-non-ascii"), ("del", "tok\x7f-del"),
             ("crlf", "tok\r\nX-Injected: 1"), ("line-separator", "tok\u2028sep"),
             ("cjk", "\u4e2d\u6587-token")]


@pytest.mark.parametrize("source, token", [("env", token) for _, token in MALFORMED]
                         + [("file", token) for _, token in MALFORMED if "\n" not in token]
                         + [("file", "tok\x00nul"), ("file", "\x01tok\x02")],
                         ids=["env-" + name for name, _ in MALFORMED]
                         + ["file-" + name for name, token in MALFORMED if "\n" not in token]
                         + ["file-nul", "file-controls"])
def test_malformed_token_never_reaches_a_header(hserve, config, daemon, planted, token, source,
                                                tmp_path):
    marked = token + "-PLANTED-" + os.urandom(4).hex()
    planted.add(marked)
    env = {}
    if source == "env":
        env["MEMPROVE_TOKEN"] = marked
    else:
        path = tmp_path / "token-file"
        path.write_bytes(marked.encode("utf-8") + b"\n")
        os.chmod(str(path), 0o600)
        env["MEMPROVE_TOKEN_FILE"] = str(path)
    server = hserve(config=config, timeout=5, env=env)
    server.initialize()
    for tool, args in (("tasks", {}), ("begin", {"new_task": "Malformed"}), ("context", {})):
        code, value = call(server, tool, args)
        assert code == ("ok" if tool == "context" else "token_malformed"), value
    assert server.close() == 0
    assert daemon.ops == []


def test_token_only_in_the_authorization_header_of_every_request(hserve, config, watched):
    server = hserve(config=config, timeout=5)
    server.initialize()
    for era in ("legacy", "modern"):
        for tool, args in WRITE_AND_READ_CALLS + [("begin", {"new_task": "Again"}),
                                                  ("decide", {"decision": "Yes."}),
                                                  ("claims", {"numbers": [1]})]:
            code, value = call(server, tool, args, era)
            assert code == "ok", (tool, value)
    assert server.close() == 0
    assert watched.seen > 0 and watched.authorized == {config.token: watched.seen}


# =============================================================================
# Rotation and revocation
# =============================================================================

def _bearer(daemon):
    return daemon.ops[-1]["headers"]["authorization"]


@pytest.mark.parametrize("how", ["config-file", "MEMPROVE_TOKEN_FILE"])
def test_rotation_and_revocation_take_effect_on_the_next_call(hserve, config, daemon, planted,
                                                              tmp_path, how):
    new = "tok-ROTATED-PLANTED-" + os.urandom(8).hex()
    planted.add(new)
    env = {}
    token_file = config.token_file
    if how == "MEMPROVE_TOKEN_FILE":
        token_file = tmp_path / "elsewhere" / "token"
        token_file.parent.mkdir()
        token_file.write_text(config.token + "\n")
        os.chmod(str(token_file), 0o600)
        env["MEMPROVE_TOKEN_FILE"] = str(token_file)
    watch = TokenWatch(daemon, [config.token, new], planted)
    server = hserve(config=config, timeout=5, env=env)
    server.initialize()
    assert call(server, "begin", {"new_task": "Rotation"})[0] == "ok"
    assert _bearer(daemon) == "Bearer " + config.token

    daemon.add_token(new)
    temporary = token_file.with_name("token.new")
    temporary.write_text(new + "\n")
    os.chmod(str(temporary), 0o600)
    os.replace(str(temporary), str(token_file))           # rotated atomically
    daemon.revoke_token(config.token)
    assert call(server, "tasks", {})[0] == "ok"
    assert _bearer(daemon) == "Bearer " + new

    daemon.revoke_token(new)
    for tool, args in (("tasks", {}), ("checkpoint", {"facts": [{"text": "Revoked."}]})):
        assert call(server, tool, args)[0] == "token_revoked"
    daemon.remove_token(new)
    assert call(server, "tasks", {})[0] == "unauthenticated"
    daemon.add_token(new)
    assert call(server, "tasks", {})[0] == "ok"

    token_file.write_text(new + "\n")                      # rewritten in place
    os.chmod(str(token_file), 0o600)
    assert call(server, "checkpoint", {"facts": [{"text": "Back."}]})[0] == "ok"
    token_file.unlink()
    assert call(server, "tasks", {})[0] == "token_missing"
    assert server.close() == 0
    watch.check()
    assert set(watch.authorized) == {config.token, new}
