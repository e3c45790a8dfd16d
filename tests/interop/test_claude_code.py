"""Claude Code (`@anthropic-ai/claude-code`) against the .pyz: its MCP health check
(`claude mcp list`, `claude mcp get memprove`: connect, then `tools/list`), which needs no
login and no network.

Claude Code runs with a throwaway HOME whose settings approve the project's `.mcp.json`
servers, with its auto-updater, telemetry and error reporting switched off, and, where this
machine allows it (`unshare -n`), in a network namespace that has only loopback.  The
project's `.mcp.json` is exactly what `mcp print-config` prints; a second run puts the tee in
front of that same entry to record the exchange.  The README's `claude mcp add` line is run
as printed, from the root of a clone, and must give the same entry and connect too.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, make_workspace
from interop.conftest import NPM_CLIENTS
from interop.support import (
    MODERN_VERSION, PROBE_ID, TEE, check_tool_listing, connections, transcripts)

CONNECTED_LIST = re.compile(r"^memprove: .* - \u2714 Connected$", re.M)
CONNECTED_GET = "Status: \u2714 Connected"
QUIET = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "MCP_TIMEOUT": "30000"}


@pytest.fixture(scope="session")
def loopback_only(request):
    """argv prefix that runs a command in a new network namespace with only `lo` (up), or
    [] where namespaces cannot be made here (then the switches in QUIET are all there is)."""
    unshare = shutil.which("unshare")
    script = 'ip link set lo up 2>/dev/null; exec "$@"'
    for flags in (["-n"], ["-rn"]):
        if not unshare:
            break
        prefix = [unshare] + flags + ["sh", "-c", script, "sh"]
        try:
            done = subprocess.run(prefix + ["cat", "/proc/net/dev"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        interfaces = [line.split(b":")[0].strip() for line in done.stdout.splitlines()[2:]]
        if done.returncode == 0 and interfaces == [b"lo"]:
            return prefix
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("INTEROP: no network namespace here (unshare -n failed); Claude Code "
                            "runs with its updater, telemetry and error reporting off",
                            yellow=True, bold=True)
    return []


class Claude:
    """`claude` with a throwaway HOME that approves project .mcp.json servers, and a
    memprove configuration directory in that HOME that points at the test's daemon."""

    def __init__(self, project_dir, home, bin_dir, prefix, config):
        self.home = home
        self.bin_dir = bin_dir
        self.prefix = prefix
        (home / ".claude").mkdir(parents=True)
        (home / ".claude" / "settings.json").write_text(
            json.dumps({"enableAllProjectMcpServers": True}))
        self.config_dir = home / ".config" / "memprove"
        self.config_dir.mkdir(parents=True)
        (self.config_dir / "data-dir").write_text(str(config.data_dir) + "\n")
        token_file = self.config_dir / "token"
        fd = os.open(str(token_file), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(config.token + "\n")
        self.env = dict(QUIET, PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", os.defpath),
                        HOME=str(home), LANG="C.UTF-8")
        self.project_dir = project_dir

    def run(self, *args, cwd=None, shell=None, timeout=120):
        argv = ["sh", "-c", shell] if shell else [str(self.bin_dir / "claude")] + list(args)
        done = subprocess.run(self.prefix + argv, cwd=str(cwd or self.project_dir), env=self.env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)
        out = done.stdout.decode("utf-8", "replace")
        return done.returncode, out, done.stderr.decode("utf-8", "replace")


def print_config(pyz, home, cwd):
    """`mcp print-config` as a user runs it: its standard output, and where it says to put it."""
    done = subprocess.run([sys.executable, str(pyz), "mcp", "print-config"], cwd=str(cwd),
                          env={"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home),
                               "LANG": "C.UTF-8"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr.decode()


@pytest.fixture
def claude(claude_code, loopback_only, config, daemon, tmp_path):
    project = make_workspace(tmp_path / "project")
    made = Claude(project, tmp_path / "claude-home", claude_code / "node_modules" / ".bin",
                  loopback_only, config)
    code, out, err = made.run("--version")
    version = NPM_CLIENTS["claude-code"][1]
    assert code == 0 and out.startswith(version + " (Claude Code)"), (code, out, err)
    return made


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


def readme_add_line():
    """The README's `claude mcp add` command, its continuation lines joined."""
    text = (REPO / "README.md").read_text()
    match = re.search(r"^(claude mcp add (?:[^\n]*\\\n)*[^\n]*)$", text, re.M)
    assert match, "README.md has no `claude mcp add` line"
    return match.group(1)


def test_readme_claude_mcp_add_line(claude, pyz, tmp_path):
    clone = make_workspace(tmp_path / "clone")
    (clone / "dist").mkdir()
    shutil.copy2(str(pyz), str(clone / "dist" / "memprove_mcp.pyz"))
    line = readme_add_line()
    code, out, err = claude.run(shell=line, cwd=clone)
    assert code == 0, "the README line failed (%d):\n%s\n%s\n%s" % (code, line, out, err)
    written = json.loads((clone / ".mcp.json").read_text())["mcpServers"]["memprove"]
    printed, _ = print_config(clone / "dist" / "memprove_mcp.pyz", claude.home, clone)
    entry = json.loads(printed.decode())["mcpServers"]["memprove"]
    for key in ("command", "args", "env"):
        assert written.get(key) == entry[key], (key, written, entry)
    assert_connected(claude, cwd=clone)
