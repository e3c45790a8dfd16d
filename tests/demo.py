#!/usr/bin/env python3
"""A first run of memprove-mcp, needing nothing but this clone and python3.

It builds dist/memprove_mcp.pyz, starts the reference daemon (tests/ledgerd.py)
in a temporary folder, and walks one agent's day through the .pyz over its
real standard input and output: find the Tasks, begin a Session on a new
Task, record a failing test run, checkpoint what it showed, decide, record a
passing run, complete the Task, end the Session, and read the Pack a later
session would resume from.  Every call is printed with a compact view of its
result.  It ends as a user setting up a client would: `mcp print-config`
writes the project's .mcp.json, and `mcp doctor` checks the whole path from
shell to ledger.  Everything is removed afterwards but the .pyz.

    python3 tests/demo.py [--output PATH]     # the .pyz: default dist/memprove_mcp.pyz
"""

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import ledgerd  # noqa: E402  (the reference daemon, beside this file)

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": {"name": "demo-agent", "version": "1"}}
COMMAND = "pytest -q tests/test_upload.py"


class Client:
    """Just enough of an MCP client: one request at a time, modern era."""

    def __init__(self, argv, env, cwd):
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=env, cwd=cwd)
        self.next_id = 0

    def request(self, method, params=None):
        self.next_id += 1
        params = dict(params or {}, _meta=MODERN)
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.process.stdin.write(line.encode("utf-8") + b"\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if answer.get("id") != self.next_id or "result" not in answer:
            raise SystemExit("demo: unexpected answer to %s: %s" % (method, answer))
        return answer["result"]

    def call(self, tool, arguments=None):
        shown = json.dumps(arguments or {}, ensure_ascii=False)
        print("\n> %s %s" % (tool, shown))
        result = self.request("tools/call", {"name": tool, "arguments": arguments or {}})
        if result.get("isError"):
            raise SystemExit("demo: %s failed: %s" % (tool, result["content"][0]["text"]))
        return result

    def close(self):
        self.process.stdin.close()
        log = self.process.stderr.read().decode("utf-8", "replace").splitlines()
        self.process.stdout.close()
        self.process.stderr.close()
        return self.process.wait(), log


def compact(value, width=150):
    """One line of a result, without the ids a person does not need."""
    shown = dict((k, v) for k, v in value.items() if k not in ("task_id", "session_id"))
    text = json.dumps(shown, ensure_ascii=False)
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def build(pyz):
    subprocess.run([sys.executable, os.path.join(ROOT, "build_zipapp.py"), "--output", pyz],
                   check=True)
    return pyz


def memprove_run(daemon, token, workspace, session_id, exit_code):
    run = ledgerd.memprove_run(daemon.url, token, workspace, session_id, COMMAND, exit_code)
    print("\n$ memprove run -- %s\n  %s %s (exit %d)"
          % (COMMAND, run["label"], "passed" if run["passed"] else "failed", exit_code))
    return run["label"]


def agent_day(client, daemon, token, workspace):
    result = client.call("tasks")
    print("  %s" % compact(result["structuredContent"]))

    result = client.call("begin", {"new_task": "Fix flaky upload retries"})
    begun = result["structuredContent"]
    print("  %s" % compact(begun))

    failing = memprove_run(daemon, token, workspace, begun["session_id"], 1)
    result = client.call("checkpoint", {
        "facts": [{"text": "Uploads fail when the S3 mock drops Content-MD5.", "runs": [failing]}],
        "open_items": ["The S3 mock ignores Content-MD5."],
        "next_action": "Retry with exponential backoff."})
    checkpoint = result["structuredContent"]
    print("  %s" % compact(checkpoint))
    open_item = next(c["number"] for c in checkpoint["claims"] if c["kind"] == "open_item")

    result = client.call("decide", {
        "decision": "Use exponential backoff with jitter.",
        "rationale": "Fixed delays synchronise the clients.",
        "alternatives": ["Fixed 1 s delay"], "runs": [failing]})
    print("  %s" % compact(result["structuredContent"]))

    passing = memprove_run(daemon, token, workspace, begun["session_id"], 0)
    result = client.call("checkpoint", {
        "facts": [{"text": "Backoff with jitter makes the upload suite pass.", "runs": [passing]}],
        "withdraw": [open_item]})
    print("  %s" % compact(result["structuredContent"]))

    for tool in ("complete", "end"):
        result = client.call(tool)
        print("  %s" % compact(result["structuredContent"]))

    result = client.call("pack", {"task": begun["task"]["number"]})
    print("\n".join("  | " + line for line in result["content"][0]["text"].splitlines()))

    result = client.call("ledger_verify")
    print("  %s" % compact(result["structuredContent"]))


def check_setup(pyz, env, workspace):
    """What a user does next: write the client entry, then ask doctor."""
    entry = subprocess.run([sys.executable, pyz, "mcp", "print-config"], env=env, cwd=workspace,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    with open(os.path.join(workspace, ".mcp.json"), "wb") as handle:
        handle.write(entry)
    print("\n$ python3 memprove_mcp.pyz mcp print-config > .mcp.json")
    hook = subprocess.run([sys.executable, pyz, "mcp", "print-config", "--hook"], env=env,
                          cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          check=True).stdout
    os.makedirs(os.path.join(env["HOME"], ".claude"))
    with open(os.path.join(env["HOME"], ".claude", "settings.json"), "wb") as handle:
        handle.write(hook)
    print("$ python3 memprove_mcp.pyz mcp print-config --hook > ~/.claude/settings.json")
    started = subprocess.run([sys.executable, pyz, "mcp", "hook", "session-start"], env=env,
                             cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             check=True).stdout
    opening = json.loads(started)["hookSpecificOutput"]["additionalContext"].splitlines()[0]
    print("  the next session starts with: %s" % opening)
    print("\n$ python3 memprove_mcp.pyz mcp doctor")
    done = subprocess.run([sys.executable, pyz, "mcp", "doctor"], env=env, cwd=workspace,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print("\n".join("  " + line for line in done.stdout.decode("utf-8", "replace").splitlines()))
    return done.returncode


def main(argv=None):
    parser = argparse.ArgumentParser(prog="demo.py", description=(
        "Build the .pyz and walk one agent's day through it with the reference daemon."))
    parser.add_argument("-o", "--output", metavar="PATH",
                        default=os.path.join(ROOT, "dist", "memprove_mcp.pyz"),
                        help="where the .pyz is built (default: dist/memprove_mcp.pyz)")
    pyz = build(os.path.abspath(parser.parse_args(argv).output))
    folder = tempfile.mkdtemp(prefix="memprove-demo-")
    daemon = None
    try:
        data_dir = os.path.join(folder, "data")
        workspace = os.path.join(folder, "shop")
        config_dir = os.path.join(folder, "config")
        os.makedirs(os.path.join(workspace, ".memprove"))
        os.makedirs(config_dir, 0o700)
        token = "demo-" + secrets.token_hex(16)
        daemon = ledgerd.Daemon(data_dir).start()
        daemon.add_token(token)
        print("reference daemon on %s; Workspace %s" % (daemon.url, workspace))
        env = {"PATH": os.environ.get("PATH", ""), "HOME": folder,
               "MEMPROVE_TOKEN": token, "MEMPROVE_DATA_DIR": data_dir,
               "CLAUDE_PROJECT_DIR": workspace, "MEMPROVE_CONFIG_DIR": config_dir}
        if os.name == "nt":
            # What a Windows process needs (SYSTEMROOT: sockets), and its home in this folder
            # too: Windows programs find the user's folders by USERPROFILE and APPDATA.
            for key in ("SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "TEMP", "TMP"):
                if os.environ.get(key):
                    env[key] = os.environ[key]
            env.update(USERPROFILE=folder, APPDATA=os.path.join(folder, "AppData", "Roaming"),
                       LOCALAPPDATA=os.path.join(folder, "AppData", "Local"))
        client = Client([sys.executable, pyz, "mcp", "serve"], env, workspace)
        try:
            discovered = client.request("server/discover")
            print("server/discover: %s" % ", ".join(discovered["supportedVersions"]))
            agent_day(client, daemon, token, workspace)
        finally:
            status, log = client.close()
        print("\nserver exited %d after %d messages, one log line each on standard error:" % (status, len(log)))
        print("\n".join("  " + line for line in log[-3:]))
        return status or check_setup(pyz, env, workspace)
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
