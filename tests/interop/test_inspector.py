"""The MCP Inspector's command line (`@modelcontextprotocol/inspector --cli`) against the .pyz,
in each `--protocol-era`: `tools/list` (with `--strict`, which fails on tool schemas that are
not portable) and one `tools/call`, each a run of its own; then the recorded exchanges are
checked.  In `auto` and `modern` the Inspector probes with `server/discover` (string id
"server-discover-probe-1") on the same server process; every era starts its ids at 0."""

import json
import os
import subprocess

import pytest

from harness import EXPECTED_TOOLS
from interop.support import (
    MODERN_VERSION, PROBE_ID, check_tool_listing, connections, schema_errors,
    server_env, teed_command, transcripts)

ERAS = ("legacy", "auto", "modern")


def run_inspector(inspector, era, method_args, env, workspace, home, command, timeout=60):
    argv = [str(inspector / "node_modules" / ".bin" / "inspector"), "--cli",
            "--protocol-era", era, "--format", "json", "--cwd", str(workspace)]
    for key in ("MEMPROVE_DATA_DIR", "MEMPROVE_TOKEN_FILE", "CLAUDE_PROJECT_DIR", "LANG"):
        argv += ["-e", "%s=%s" % (key, env[key])]
    argv += method_args + ["--"] + command
    own_env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home),
               "LANG": "C.UTF-8", "npm_config_update_notifier": "false"}
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=own_env,
                          stdin=subprocess.DEVNULL, cwd=str(home), timeout=timeout)
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode(
        "utf-8", "replace")


@pytest.mark.parametrize("era", ERAS)
def test_inspector_cli(inspector, pyz, check_wire, daemon, config, workspace, home, tmp_path, era):
    env = server_env(home, workspace, config)
    outputs = {}
    logs = {}
    for step, method_args in (
            ("list", ["--method", "tools/list", "--strict"]),
            ("call", ["--method", "tools/call", "--tool-name", "tasks",
                      "--tool-args-json", json.dumps({"status": "open"})])):
        logs[step] = tmp_path / ("wire-" + step)
        code, out, err = run_inspector(inspector, era, method_args, env, workspace, home,
                                       teed_command(logs[step], pyz))
        conns = connections(logs[step])
        failure = "inspector exit %d\nstdout: %s\nstderr: %s\n%s" % (
            code, out[-3000:], err[-3000:], transcripts(conns))
        assert code == 0, failure
        answer = json.loads(out)
        assert "result" in answer, failure
        outputs[step] = answer["result"]

        # One server process per run, checked against protocol.md.
        assert len(conns) == 1, failure
        served = check_wire(conns[0])
        methods = [s["message"]["method"] for s in served]
        if era == "legacy":
            assert methods[0] == "initialize", failure
            assert served[0]["message"]["id"] == 0, failure
            assert served[0]["response"]["result"]["protocolVersion"] == "2025-11-25", failure
            rest = served[1:]
        else:
            # auto and modern probe on the same process, then speak 2026-07-28.
            assert methods[0] == "server/discover", failure
            assert served[0]["message"]["id"] == PROBE_ID, failure
            assert served[0]["response"]["id"] == PROBE_ID, failure
            assert served[0]["response"]["result"]["supportedVersions"] == [MODERN_VERSION]
            assert "initialize" not in methods, failure
            rest = served[1:]
        ids = [s["message"]["id"] for s in rest]
        want_first = 1 if era == "legacy" else 0
        assert ids == list(range(want_first, want_first + len(ids))), ids
        assert all(type(i) is int for i in ids), ids
        expected = ["tools/list"] if step == "list" else ["tools/list", "tools/call"]
        assert [s["message"]["method"] for s in rest] == expected, failure
        want_era = "legacy" if era == "legacy" else "modern"
        assert {s["era"] for s in rest} == {want_era}, failure

    tools = check_tool_listing(outputs["list"]["tools"])
    result = outputs["call"]
    assert not result.get("isError"), result
    structured = result["structuredContent"]
    assert schema_errors(tools["tasks"]["outputSchema"], structured) == []
    assert structured["tasks"] == [] and structured["workspace"] == str(workspace.resolve())
    assert len(tools) == len(EXPECTED_TOOLS)
