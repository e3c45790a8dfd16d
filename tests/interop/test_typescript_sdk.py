"""The official TypeScript SDKs against the .pyz, from a small Node script
(clients/ts_sdk_client.mjs): v1 (`@modelcontextprotocol/sdk` 1.32.x, legacy only) offering
2025-11-25 and 2025-06-18, and v2 (`@modelcontextprotocol/client` 2.x) in `auto`, pinned to
2026-07-28, and legacy.  The same plan as the Python SDK's: the ten tools listed, every tool
called with valid arguments (the SDK validates `structuredContent` against `outputSchema`),
a Task completed on a passed Run, one Problem; then the recorded exchange is checked,
including the ids the TypeScript clients use: they start at 0, and v2 probes with the string
id "server-discover-probe-1" in a throwaway server process of its own."""

import json
import shutil

import pytest

from interop.conftest import node_script
from interop.support import (
    MODERN_VERSION, PROBE_ID, check_sdk_run, client_name, connections,
    describe_run, recorder, run_scripted_client, sdk_plan, server_env, session_connections,
    teed_command)

RUNS = [
    # (id, sdk, mode, offered handshake version, the version it must end up with)
    ("v1-legacy-2025-11-25", "v1", "legacy", None, "2025-11-25"),
    ("v1-legacy-2025-06-18", "v1", "legacy", "2025-06-18", "2025-06-18"),
    ("v2-auto", "v2", "auto", None, MODERN_VERSION),
    ("v2-modern", "v2", MODERN_VERSION, None, MODERN_VERSION),
    ("v2-legacy-2025-11-25", "v2", "legacy", None, "2025-11-25"),
    ("v2-legacy-2025-06-18", "v2", "legacy", "2025-06-18", "2025-06-18"),
]


@pytest.fixture
def ts_project(request):
    """The node project of the SDK a run needs (installed on first use)."""
    def get(sdk):
        return request.getfixturevalue("ts_sdk_" + sdk)
    return get


@pytest.mark.parametrize("run_id,sdk,mode,offer,negotiated", RUNS, ids=[r[0] for r in RUNS])
def test_typescript_sdk(ts_project, pyz, check_wire, daemon, config, workspace, home, wire_log,
                        tmp_path, run_id, sdk, mode, offer, negotiated):
    project = ts_project(sdk)
    plan = sdk_plan("Interop: TypeScript SDK %s" % run_id)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "env.json").write_text(json.dumps(server_env(home, workspace, config)))
    argv = [shutil.which("node"), str(node_script(project, "ts_sdk_client.mjs")),
            "--sdk", sdk, "--mode", mode, "--plan", str(tmp_path / "plan.json"),
            "--env", str(tmp_path / "env.json"), "--cwd", str(workspace)]
    if offer:
        argv += ["--handshake-version", offer]
    argv += ["--"] + teed_command(wire_log, pyz)
    events, code, stderr = run_scripted_client(argv, recorder(daemon, config, workspace),
                                               cwd=str(tmp_path))
    conns = connections(wire_log)
    failure = describe_run(events, code, stderr, conns)
    assert code == 0, failure
    connected = next(e for e in events if e["event"] == "connected")
    if sdk == "v2":
        # A bad server/discover answer makes auto fall back silently: check what it ended up with.
        assert connected["protocol_version"] == negotiated, failure
    assert connected["server_name"] == "memprove", failure

    served_by_conn = [check_wire(conn) for conn in conns]
    sessions = session_connections(conns)
    assert len(sessions) == 1, failure
    session = served_by_conn[conns.index(sessions[0])]
    first = session[0]["message"]
    assert first["id"] == 0 and type(first["id"]) is int, failure     # TypeScript starts at 0
    methods = [s["message"]["method"] for s in session]
    era = "modern" if negotiated == MODERN_VERSION else "legacy"
    if mode == "legacy":
        assert len(conns) == 1, failure
        assert methods[0] == "initialize", failure
        assert session[0]["message"]["params"]["protocolVersion"] == negotiated, failure
        assert session[0]["response"]["result"]["protocolVersion"] == negotiated, failure
    else:
        # v2 on stdio: the probe runs in a throwaway server process, then the session starts
        # a second one that never sees server/discover or initialize.
        assert len(conns) == 2, failure
        probe = served_by_conn[0]
        assert [s["message"]["method"] for s in probe] == ["server/discover"], failure
        assert probe[0]["message"]["id"] == PROBE_ID, failure
        assert probe[0]["response"]["id"] == PROBE_ID, failure      # echoed as a string
        assert probe[0]["era"] == "modern", failure
        assert probe[0]["response"]["result"]["supportedVersions"] == [MODERN_VERSION], failure
        assert "server/discover" not in methods and "initialize" not in methods, failure
    tool_requests = [s for s in session if s["message"]["method"].startswith("tools/")]
    assert {s["era"] for s in tool_requests} == {era}, failure
    ids = [s["message"]["id"] for s in session]
    assert ids == list(range(len(ids))), "ids are not 0, 1, 2, ...: %r" % ids

    name = client_name(tool_requests[0]["message"]) or client_name(session[0]["message"])
    assert name == "memprove-interop-ts-" + sdk, name
    try:
        check_sdk_run(events, plan, workspace, agent_name=name)
    except AssertionError as error:
        raise AssertionError("%s\n%s" % (error, failure))
