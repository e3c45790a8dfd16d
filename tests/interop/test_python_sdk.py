"""The official Python SDK (PyPI `mcp` 2.x, in its own virtual environment) against the .pyz:
in `mode="auto"` (it must end up modern), pinned to 2026-07-28, and in `mode="legacy"`
offering 2025-11-25 and 2025-06-18.  Each run lists the ten tools, calls every tool with
valid arguments (the SDK validates each `structuredContent` against the tool's
`outputSchema`), completes a Task on a passed Run the test records between two calls, and
makes one call that gives a Problem; then the recorded exchange is checked."""

import json

import pytest

from interop.support import (
    CLIENTS, MODERN_VERSION, check_sdk_run, client_name, connections,
    describe_run, recorder, run_scripted_client, sdk_plan, server_env, teed_command)

RUNS = [
    # (id, mode, offered handshake version, the version it must end up with)
    ("auto", "auto", None, MODERN_VERSION),
    ("modern", MODERN_VERSION, None, MODERN_VERSION),
    ("legacy-2025-11-25", "legacy", None, "2025-11-25"),
    ("legacy-2025-06-18", "legacy", "2025-06-18", "2025-06-18"),
]


@pytest.mark.parametrize("run_id,mode,offer,negotiated", RUNS, ids=[r[0] for r in RUNS])
def test_python_sdk(py_sdk, pyz, check_wire, daemon, config, workspace, home, wire_log,
                    tmp_path, run_id, mode, offer, negotiated):
    plan = sdk_plan("Interop: Python SDK %s" % run_id)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "env.json").write_text(json.dumps(server_env(home, workspace, config)))
    argv = [str(py_sdk), str(CLIENTS / "py_sdk_client.py"), "--mode", mode,
            "--plan", str(tmp_path / "plan.json"), "--env", str(tmp_path / "env.json"),
            "--cwd", str(workspace)]
    if offer:
        argv += ["--handshake-version", offer]
    argv += ["--"] + teed_command(wire_log, pyz)
    events, code, stderr = run_scripted_client(argv, recorder(daemon, config, workspace),
                                               cwd=str(tmp_path))
    conns = connections(wire_log)
    failure = describe_run(events, code, stderr, conns)
    assert code == 0, failure
    connected = next(e for e in events if e["event"] == "connected")
    # A bad server/discover answer makes auto fall back silently: check what it ended up with.
    assert connected["protocol_version"] == negotiated, failure
    assert connected["era"] == ("legacy" if negotiated != MODERN_VERSION else "modern"), failure

    # One server process, all of it checked against protocol.md.
    assert len(conns) == 1, failure
    served = check_wire(conns[0])
    first = served[0]["message"]
    assert first["id"] == 1 and type(first["id"]) is int, failure     # Python starts at 1
    methods = [s["message"]["method"] for s in served]
    if mode == "auto":
        assert methods[0] == "server/discover", failure
        result = served[0]["response"]["result"]
        assert result["supportedVersions"] == [MODERN_VERSION], result
    elif mode == "legacy":
        assert methods[0] == "initialize", failure
        assert served[0]["message"]["params"]["protocolVersion"] == negotiated, failure
        assert served[0]["response"]["result"]["protocolVersion"] == negotiated, failure
    else:
        assert "server/discover" not in methods and "initialize" not in methods, failure
    era = "modern" if negotiated == MODERN_VERSION else "legacy"
    tool_requests = [s for s in served if s["message"]["method"].startswith("tools/")]
    assert {s["era"] for s in tool_requests} == {era}, failure
    calls = [s for s in served if s["message"]["method"] == "tools/call"]
    assert len(calls) >= len([step for step in plan if "tool" in step])

    name = client_name(calls[0]["message"]) or client_name(served[0]["message"])
    check_sdk_run(events, plan, workspace, agent_name=name)
