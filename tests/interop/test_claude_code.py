"""Claude Code (`@anthropic-ai/claude-code`) against the .pyz: its MCP health check
(`claude mcp list`, `claude mcp get memprove`: connect, then `tools/list`), which needs no
login and no network.

Claude Code runs with a throwaway HOME whose settings approve the project's `.mcp.json`
servers, with its auto-updater, telemetry and error reporting switched off, and, where this
machine allows it (`unshare -n`), in a network namespace that has only loopback.  The
project's `.mcp.json` is exactly what `mcp print-config` prints; a second run puts the tee in
front of that same entry to record the exchange.  (`claude mcp add`, the command doctor
prints for a missing entry, is run as printed in test_doctor_fix.py.)
"""

import json
import os
import re
import sys

from interop.support import (
    MODERN_VERSION, PROBE_ID, TEE, check_tool_listing, connections, print_config, transcripts)

CONNECTED_LIST = re.compile(r"^memprove: .* - \u2714 Connected$", re.M)
CONNECTED_GET = "Status: \u2714 Connected"


def assert_connected(claude, cwd=None, conns_dir=None):
    """`claude mcp list` and `claude mcp get memprove` both report it connected (they exit 0
    whatever the status, so the status is read from what they print); their outputs."""
    outputs = []
    for args, connected in ((("mcp", "list"), lambda out: CONNECTED_LIST.search(out)),
                            (("mcp", "get", "memprove"), lambda out: CONNECTED_GET in out)):
        code, out, err = claude.run(*args, cwd=cwd)
        outputs.append(out)
        if code != 0 or not connected(out):
            raise AssertionError("claude %s exited %d\nstdout:\n%s\nstderr:\n%s\n%s" % (
                " ".join(args), code, out, err,
                transcripts(connections(conns_dir)) if conns_dir else ""))
    return outputs


def test_claude_code_connects_with_print_config(claude, pyz, check_wire, tmp_path):
    stdout, stderr = print_config(pyz, claude.home, claude.project_dir)
    assert str(claude.project_dir.resolve() / ".mcp.json") in stderr, stderr
    (claude.project_dir / ".mcp.json").write_bytes(stdout)        # exactly what it printed
    entry = json.loads(stdout.decode())["mcpServers"]["memprove"]
    assert entry["command"] == str(pyz) and os.access(str(pyz), os.X_OK), entry
    assert entry["env"] == {"MEMPROVE_CONFIG_DIR": str(claude.config_dir)}, entry
    _, got = assert_connected(claude)
    assert "Scope: Project config" in got and "Command: %s" % pyz in got, got

    # The same entry once more, with the tee in front of it, to record what Claude Code sends.
    wire = tmp_path / "wire"
    teed = dict(entry, command=sys.executable,
                args=[str(TEE), str(wire), "--", entry["command"]] + entry["args"])
    (claude.project_dir / ".mcp.json").write_text(json.dumps({"mcpServers": {"memprove": teed}}))
    assert_connected(claude, conns_dir=wire)
    conns = connections(wire)
    assert len(conns) == 2, transcripts(conns)          # one server for `list`, one for `get`
    for conn in conns:
        served = check_wire(conn)
        failure = conn.transcript()
        methods = [s["message"]["method"] for s in served]
        # Claude Code probes first, on the same process, then speaks 2026-07-28.
        assert methods == ["server/discover", "tools/list"], failure
        assert served[0]["message"]["id"] == PROBE_ID, failure
        assert served[0]["response"]["id"] == PROBE_ID, failure
        assert served[0]["response"]["result"]["supportedVersions"] == [MODERN_VERSION], failure
        listed = served[1]
        assert listed["message"]["id"] == 0 and type(listed["response"]["id"]) is int, failure
        assert {s["era"] for s in served} == {"modern"}, failure
        check_tool_listing(listed["response"]["result"]["tools"])
        start = conn.event("start")
        assert start["argv"] == [entry["command"]] + entry["args"], start
