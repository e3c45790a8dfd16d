"""The command line of the built .pyz (tools.md, "The command line"; contract.md
§1 and §5): --version, --help, usage errors, MEMPROVE_MCP_LOG, what importing the
module costs.  print-config has its own file, test_print_config.py."""

import hashlib
import json
import os
import re
import subprocess
import zipfile

import pytest

import memprove_mcp

from harness import (REPO, SAFETY_TIMEOUT, initialize_params, one_stderr_line, run_cli,
                     server_path, snapshot)

# The version and the source's digest, then the archive's SHA-256 and path (issue 41).
VERSION_LINE = re.compile(r"memprove-mcp (\S+) \(([0-9a-f]{12})\)\nsha256 ([0-9a-f]{64})  (.+)\n\Z")


# -- what importing the module costs ---------------------------------------------

def docstring_imports():
    """The modules the module's docstring says importing it loads."""
    import ast
    docstring = ast.get_docstring(ast.parse((REPO / "memprove_mcp.py").read_text(encoding="utf-8")))
    sentence = re.search(r"Importing the\s+module loads (.*?):", docstring, re.S).group(1)
    return re.findall(r"`(\w+)`", sentence)


def test_importing_the_module_loads_only_what_its_docstring_says(server_python, make_env,
                                                                   workspace, tmp_path):
    named = docstring_imports()
    folder = tmp_path / "module"       # under /tmp, where every interpreter of the tiers can read
    folder.mkdir()
    (folder / "memprove_mcp.py").write_bytes((REPO / "memprove_mcp.py").read_bytes())
    assert {"os", "sys", "_json"} <= set(named), named
    # In an interpreter without site (which would load much more first): what the named
    # modules bring with them (os brings stat, posixpath...) is the baseline.
    probe = ("import sys; sys.path.insert(0, sys.argv[1])\n"
             "for name in sys.argv[2:]:\n"
             "    try: __import__(name)\n"
             "    except ImportError: pass\n"
             "before = set(sys.modules)\n"
             "import memprove_mcp\n"
             "print(' '.join(sorted(set(sys.modules) - before - {'memprove_mcp'})))\n")
    done = subprocess.run([server_python, "-I", "-S", "-c", probe, server_path(folder)] + named,
                          env=make_env(), cwd=str(workspace), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split() == []


# -- --version and --help -------------------------------------------------------

def test_version(pyz, server_python, make_env, start_server, workspace):
    done = run_cli(server_python, pyz, ["--version"], make_env(), workspace)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    match = VERSION_LINE.match(done.stdout.decode())
    assert match, done.stdout
    with zipfile.ZipFile(str(pyz)) as archive:
        source = archive.read("memprove_mcp.py")
    assert match.group(2) == hashlib.sha256(source).hexdigest()[:12]
    assert match.group(3) == hashlib.sha256(pyz.read_bytes()).hexdigest()
    assert match.group(4) == server_path(pyz, server_python)
    server = start_server(python=server_python)
    info = server.request("initialize", initialize_params())["result"]["serverInfo"]
    assert info == {"name": "memprove", "version": match.group(1)}
    assert server.close() == 0


def test_help(pyz, newest_python, make_env, workspace):
    done = run_cli(newest_python, pyz, ["--help"], make_env(), workspace)
    assert done.returncode == 0
    assert done.stderr == b""
    usage = done.stdout.decode()
    for word in ("mcp serve", "mcp print-config", "--config-dir", "--python", "--version", "--help"):
        assert word in usage, word


# Issue 31 item 8: `--help` anywhere in an `mcp` command is the usage, never a usage error.
HELP_ANYWHERE = {
    "mcp": ["mcp", "--help"],
    "serve": ["mcp", "serve", "--help"],
    "print-config": ["mcp", "print-config", "--help"],
    "doctor": ["mcp", "doctor", "--help"],
    "doctor-client": ["mcp", "doctor", "--client", "codex", "-h"],
    "plugin": ["mcp", "plugin", "{kit}", "--help"],
    "hook": ["mcp", "hook", "session-start", "--help"],
}


@pytest.mark.parametrize("name", sorted(HELP_ANYWHERE))
def test_help_after_every_command_prints_the_usage(pyz, newest_python, make_env, workspace,
                                                   home, tmp_path, name):
    usage = run_cli(newest_python, pyz, ["--help"], make_env(), workspace)
    assert usage.returncode == 0 and usage.stdout, usage
    kit = tmp_path / "kit"
    before = snapshot(workspace, home)
    done = run_cli(newest_python, pyz, [word.format(kit=kit) for word in HELP_ANYWHERE[name]],
                   make_env(), workspace)
    assert (done.returncode, done.stderr) == (0, b""), (done.returncode, done.stderr)
    assert done.stdout == usage.stdout
    # Help does nothing else: no kit written, no file touched.
    assert not kit.exists()
    assert snapshot(workspace, home) == before


def test_serve_says_what_it_is_to_a_terminal_and_nothing_to_a_pipe(pyz, server_python,
                                                                  make_env, workspace):
    import pty
    master, slave = pty.openpty()
    try:
        server = subprocess.Popen([server_python, str(pyz), "mcp", "serve"], stdin=slave,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=make_env(), cwd=str(workspace))
    finally:
        os.close(slave)
    try:
        os.write(master, b"\x04")         # Ctrl-D at the start of a line: the end of input
        out, err = server.communicate(timeout=SAFETY_TIMEOUT)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        os.close(master)
    assert (server.returncode, out) == (0, b""), (server.returncode, out, err)
    text = err.decode("utf-8")
    assert text.endswith("\n") and text.count("\n") == 1, text
    line = text.rstrip("\r\n")
    assert line.startswith("memprove-mcp: ") and "MCP server" in line, line
    assert "print-config" in line or "plugin" in line, line
    # A pipe, as every client gives it: not a byte on either stream.
    done = run_cli(server_python, pyz, ["mcp", "serve"], make_env(), workspace, stdin=b"")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_pyz_runs_by_its_shebang(pyz, newest_python, make_env, workspace):
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert os.access(str(pyz), os.X_OK)
    direct = subprocess.run([str(pyz), "--version"], env=make_env(), cwd=str(workspace),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert direct.returncode == 0, direct.stderr
    assert VERSION_LINE.match(direct.stdout.decode())


def test_version_quotes_an_archive_path_utf8_cannot_write(pyz, newest_python, make_env, tmp_path):
    """The attack on issue 41: a path with undecodable bytes crashed --version; it is shown
    JSON-quoted, in ASCII, like every path that cannot be shown as is (§6 rule 33)."""
    odd = os.path.join(os.fsencode(str(tmp_path)), b"d\xff\xfe.pyz")
    with open(odd, "wb") as handle:
        handle.write(pyz.read_bytes())
    done = subprocess.run([newest_python, odd, "--version"], env=make_env(), cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr
    match = VERSION_LINE.match(done.stdout.decode("ascii"))
    assert match, done.stdout
    assert match.group(3) == hashlib.sha256(pyz.read_bytes()).hexdigest()
    assert match.group(4) == json.dumps(os.fsdecode(odd)), match.group(4)


# The archive imported, then its path given to something that is no regular file, then
# --version: what a file swapped in after the start would do, without waiting for a start.
SWAPPED_ARCHIVE = """
import os, sys
path = sys.argv[1]
sys.path.insert(0, path)
import memprove_mcp
memprove_mcp.SOURCE_SHA256 = sys.argv[3]       # as the archive's __main__.py hands it on
os.unlink(path)
os.mkfifo(path) if sys.argv[2] == "fifo" else os.symlink(sys.argv[2], path)
sys.exit(memprove_mcp.main(["--version"]))
"""


@pytest.mark.parametrize("swapped", ["fifo", "/dev/zero", "/nonexistent"])
def test_version_says_unknown_for_an_archive_it_cannot_read(pyz, newest_python, make_env,
                                                            tmp_path, swapped):
    """The attack on issue 41: a FIFO or /dev/zero at the archive's path hung --version;
    it is read as a kit's .pyz is (§6 rule 28), and the sum is unknown, saying why."""
    copy = tmp_path / "memprove_mcp.pyz"
    copy.write_bytes(pyz.read_bytes())
    with zipfile.ZipFile(str(pyz)) as archive:
        digest = hashlib.sha256(archive.read("memprove_mcp.py")).hexdigest()
    done = subprocess.run([newest_python, "-c", SWAPPED_ARCHIVE, str(copy), swapped, digest],
                          env=make_env(), cwd=str(tmp_path), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr
    reason = "No such file or directory" if swapped == "/nonexistent" else "not a regular file"
    assert done.stdout.decode().splitlines() == [
        "memprove-mcp %s (%s)" % (memprove_mcp.VERSION, digest[:12]),
        "sha256 unknown: " + reason], done.stdout


@pytest.mark.parametrize("args", [
    [],
    ["serve"],
    ["mcp"],
    ["bogus"],
    ["--bogus"],
    ["mcp", "bogus"],
    ["mcp", "serve", "--bogus"],
    ["mcp", "serve", "extra"],
    ["mcp", "serve", "--config-dir"],
    ["mcp", "serve", "--python"],
    ["mcp", "print-config", "--config-dir"],
    ["mcp", "print-config", "--bogus"],
    ["mcp", "print-config", "extra"],
    ["--version", "extra"],
    ["--help", "extra"],
], ids=["nothing", "serve-alone", "mcp-alone", "unknown-command", "unknown-option",
        "mcp-unknown", "serve-unknown-option", "serve-extra-word", "serve-config-dir-no-value",
        "serve-python", "print-config-config-dir-no-value", "print-config-unknown-option",
        "print-config-extra-word", "version-extra", "help-extra"])
def test_usage_error_exits_2_with_one_line(pyz, newest_python, make_env, workspace, args):
    done = run_cli(newest_python, pyz, args, make_env(), workspace)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == b""
    one_stderr_line(done)


# -- serve's options and the diagnostics log ---------------------------------------

def test_serve_config_dir_option_wins(start_server, config, tmp_path):
    other = tmp_path / "other-config"
    server = start_server(args=["--config-dir", str(config.dir)],
                          env={"MEMPROVE_CONFIG_DIR": other})
    server.request("initialize", initialize_params())
    result = server.request("tools/call", {"name": "context", "arguments": {}})["result"]
    report = result["structuredContent"]["config"]
    assert report["config_dir"] == server_path(config.dir)
    assert report["token_from"] == "config"
    assert report["data_dir"] == server_path(config.data_dir)
    assert server.close() == 0


def test_mcp_log_is_not_created_by_a_normal_run(pyz, newest_python, start_server, make_env,
                                                workspace, tmp_path):
    log = tmp_path / "logs" / "mcp.log"
    (tmp_path / "logs").mkdir()
    server = start_server(env={"MEMPROVE_MCP_LOG": log})
    server.send_raw(b"{not json\n")
    server.request("server/discover", {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}})
    server.request("initialize", initialize_params())
    server.notify("notifications/initialized")
    server.request("tools/list")
    server.request("tools/call", {"name": "context", "arguments": {}})
    server.request("tools/call", {"name": "context", "arguments": {"bogus": 1}})
    server.request("tools/call", {"name": "no_such_tool"})
    server.request("tools/call", {"name": "tasks", "arguments": {}})   # token_missing
    server.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    server.request("ping")
    assert server.close() == 0
    env = make_env({"MEMPROVE_MCP_LOG": log})
    for args in (["--version"], ["--help"], ["mcp", "print-config"], ["mcp", "bogus"]):
        run_cli(newest_python, pyz, args, env, workspace)
    assert not log.exists()
    assert list((tmp_path / "logs").iterdir()) == []


# -- §6 rule 35: MEMPROVE_MCP_LOG only as a regular file reached without a link ----------

def log_not_written(kind, tmp_path, workspace):
    """(MEMPROVE_MCP_LOG's value, a check that nothing was written through it) for `kind`:
    a relative path (it would land in the project), a FIFO nobody reads, a link or a hard
    link to another file of the user's."""
    if kind == "relative":
        return "mcp.log", lambda: not (workspace / "mcp.log").exists()
    if kind == "fifo":
        fifo = tmp_path / "mcp.fifo"
        os.mkfifo(str(fifo))

        def nothing_in_it():
            reader = os.open(str(fifo), os.O_RDONLY | os.O_NONBLOCK)
            try:
                return os.read(reader, 4096) == b""
            finally:
                os.close(reader)
        return str(fifo), nothing_in_it
    precious = tmp_path / "gitconfig"
    precious.write_bytes(b"[user]\n\tname = Ana\n")
    link = workspace / "mcp.log"
    if kind == "hard link":
        os.link(str(precious), str(link))
        return str(link), lambda: (precious.read_bytes() == b"[user]\n\tname = Ana\n" and
                                   os.stat(str(link)).st_ino == os.stat(str(precious)).st_ino)
    os.symlink(str(precious), str(link))
    return str(link), lambda: (precious.read_bytes() == b"[user]\n\tname = Ana\n" and
                               os.readlink(str(link)) == str(precious))


@pytest.mark.parametrize("kind", ["relative", "fifo", "link", "hard link"])
def test_rule35_a_log_no_command_may_write_gets_nothing_and_holds_none_up(
        pyz, newest_python, start_server, make_env, workspace, tmp_path, kind):
    """MEMPROVE_MCP_LOG relative, a FIFO, a link or a hard link: the server, the hook,
    print-config and doctor each run as usual from the project, end by themselves (the
    safety bound is generous), and nothing is written through it; doctor's `environment`
    check warns that nothing is logged.  (Before: the hook, whose one line per run is the
    log's most frequent, made mcp.log in the project, appended through the link or the hard
    link, and waited for ever on the FIFO; doctor took a hard link for a log it could use.)"""
    value, nothing_written = log_not_written(kind, tmp_path, workspace)
    server = start_server(env={"MEMPROVE_MCP_LOG": value})
    server.request("initialize", initialize_params())
    server.request("tools/call", {"name": "context", "arguments": {}})
    server.request("tools/call", {"name": "tasks", "arguments": {}})   # token_missing
    assert server.close() == 0
    env = make_env({"MEMPROVE_MCP_LOG": value})
    hook = run_cli(newest_python, pyz, ["mcp", "hook", "session-start"], env, workspace)
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, b"", b"")
    for args in (["mcp", "print-config"], ["mcp", "doctor", "--json"]):
        done = run_cli(newest_python, pyz, args, env, workspace)
        assert done.returncode in (0, 1), (args, done.returncode, done.stderr)
    # doctor's `environment` check says so: nothing is logged.
    checks = dict((check["name"], check) for check in json.loads(done.stdout)["checks"])
    check = checks.get("environment")
    assert check and check["status"] == "warn", checks
    assert ("a relative path" if kind == "relative" else
            "which is not a regular file of yours with one name") in check["detail"], check
    assert "so nothing is logged" in check["detail"], check
    assert nothing_written()
