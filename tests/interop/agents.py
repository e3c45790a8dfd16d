"""The agent tier's world, shared by tests/interop/test_agent_clients.py and
test_plugin_kit.py: a network namespace with only loopback (LoopbackNamespace), one agent
client with a throwaway HOME and a memprove configuration (Agent), and what to read in what
the model got back.  The fixtures built from these (netns, ns_daemon, make_agent,
endpoint_in) are in tests/interop/conftest.py.

Each client runs with a throwaway HOME in a network namespace that has only loopback; the
model endpoint and the reference daemon listen on 127.0.0.1 *inside* that namespace (their
sockets are made by a thread that joined it), so nothing the client does can leave the
machine.  Where no namespace can be made here, everything runs on the host's loopback.
Every process left behind by a client (found by its HOME) is ended by its id.
"""

import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness import make_workspace
from interop.support import TEE

RUN_TIMEOUT = 240            # one client command, at most


CLONE_NEWNET = 0x40000000


EXPECTED_VERSION = {         # the protocol version each asks in `initialize` (and gets back)
    "codex": "2025-06-18", "gemini": "2025-06-18", "opencode": "2025-11-25",
    "cline": "2024-11-05", "continue": "2025-11-25", "amp": "2025-11-25",
}


EXPECTED_AGENT = {           # clientInfo.name (docs/clients-verified.md), the agent name `context` shows
    "codex": "codex-mcp-client", "gemini": "gemini-cli-mcp-client", "opencode": "opencode",
    "cline": "@cline/core", "continue": "continue-cli-client", "amp": "amp-mcp-client",
}


class LoopbackNamespace:
    """A network namespace with only `lo` (up), held open by one `unshare -n` process;
    `prefix` runs a command inside it, `inside(fn)` runs fn in a thread that joined it (the
    sockets fn makes stay there).  `prefix` is [] when no namespace can be made here."""

    def __init__(self):
        self.holder = None
        self.prefix = []
        self.path = None
        unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
        if not (unshare and nsenter and sys.platform.startswith("linux")):
            return
        try:
            holder = subprocess.Popen(
                [unshare, "-n", "sh", "-c", "ip link set lo up && cat /proc/net/dev && "
                 "echo READY && exec cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL)
        except OSError:
            return
        lines = []
        for raw in iter(holder.stdout.readline, b""):
            if raw.strip() == b"READY":
                break
            lines.append(raw)
        interfaces = [line.split(b":")[0].strip() for line in lines[2:]]
        if holder.poll() is not None or interfaces != [b"lo"]:
            self._end(holder)
            return
        self.holder = holder
        self.path = "/proc/%d/ns/net" % holder.pid
        self.prefix = [nsenter, "--net=" + self.path, "--"]

    def inside(self, fn):
        if self.path is None:
            return fn()
        got, failed = [], []

        def run():
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                finally:
                    os.close(fd)
                got.append(fn())
            except BaseException as error:          # handed to the caller below
                failed.append(error)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        if failed:
            raise failed[0]
        return got[0]

    @staticmethod
    def _end(holder):
        try:
            holder.stdin.close()
        except OSError:
            pass
        try:
            holder.wait(10)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()

    def close(self):
        if self.holder is not None:
            self._end(self.holder)
            self.holder = None


def processes_with_home(home):
    """pids of the processes whose environment has HOME=<home> (only what this test started)."""
    wanted = b"HOME=" + str(home).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as handle:
                if wanted in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def command_line(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


class Agent:
    """An agent client with a throwaway HOME whose memprove configuration directory
    (`~/.config/memprove`: data-dir, token 0600) points at the test's daemon."""

    def __init__(self, name, folder, tmp_path, pyz, config, netns, env=None):
        self.name = name
        self.folder = folder
        self.bin_dir = folder / "node_modules" / ".bin"
        self.pyz = pyz
        self.netns = netns
        self.home = tmp_path / ("%s-home" % name)
        self.config_dir = self.home / ".config" / "memprove"
        self.config_dir.mkdir(parents=True)
        (self.config_dir / "data-dir").write_text(str(config.data_dir) + "\n")
        fd = os.open(str(self.config_dir / "token"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(config.token + "\n")
        self.project = make_workspace(tmp_path / ("%s-project" % name))
        self.env = {"PATH": str(self.bin_dir) + os.pathsep + os.environ.get("PATH", os.defpath),
                    "HOME": str(self.home), "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1",
                    "CI": "1", "DO_NOT_TRACK": "1", "NO_UPDATE_NOTIFIER": "1"}
        self.env.update(env or {})
        self.leftovers = []          # command lines of processes the client left running
        self.wire = tmp_path / ("%s-wire" % name)
        self.wire.mkdir()
        self._shim_python()

    def _shim_python(self):
        """The .pyz starts through its shebang, `/usr/bin/env python3`: a `python3` first on
        the client's PATH puts the tee (mcp_tee.py) in front of that one program, so the
        exchange is recorded while the client's configuration stays exactly as printed."""
        shim = self.home.parent / ("%s-shim" % self.name)
        shim.mkdir()
        script = shim / "python3"
        script.write_text(
            '#!/bin/sh\nif [ "$1" = %s ]; then\n  exec %s %s %s -- %s "$@"\nfi\nexec %s "$@"\n'
            % tuple(shlex.quote(str(part)) for part in (
                self.pyz, sys.executable, TEE, self.wire, sys.executable, sys.executable)))
        script.chmod(0o755)
        self.env["PATH"] = str(shim) + os.pathsep + self.env["PATH"]

    def print_config(self, *extra, cwd=None):
        """`python3 <pyz> mcp print-config --client NAME ...` as a user runs it, in the
        project: (standard output as bytes, standard error as text)."""
        done = subprocess.run(
            [sys.executable, str(self.pyz), "mcp", "print-config", "--client", self.name]
            + list(extra), cwd=str(cwd or self.project),
            env={"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.home),
                 "LANG": "C.UTF-8"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert done.returncode == 0, (done.returncode, done.stderr)
        assert done.stdout, "print-config --client %s printed nothing" % self.name
        return done.stdout, done.stderr.decode("utf-8", "replace")

    def write(self, path, data):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, (dict, list)):
            data = json.dumps(data, indent=2)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        return path

    def run(self, *argv, cwd=None, env=None, timeout=RUN_TIMEOUT, stdin=b""):
        """Run one client command inside the namespace; (exit code, stdout, stderr).  Every
        process it leaves behind is ended by its id and remembered in `leftovers`."""
        environment = dict(self.env, **(env or {}))
        cwd = str(cwd or self.project)
        environment.setdefault("PWD", cwd)
        proc = subprocess.Popen(self.netns.prefix + list(argv), cwd=cwd, env=environment,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += b"\n[killed after %ds]" % timeout
        self.end_leftovers()
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def end_leftovers(self, grace=10.0):
        """Wait (bounded) for the processes with this HOME to go, then end the rest."""
        deadline = time.monotonic() + grace
        while True:
            pids = processes_with_home(self.home)
            if not pids or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for pid in pids:
            self.leftovers.append(command_line(pid))
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def check_no_server_left(self):
        servers = [line for line in self.leftovers if str(self.pyz) in line]
        assert not servers, "a memprove server outlived its client: %s" % servers


def json_values(value, depth=0):
    """Every JSON object inside value: value itself, its members, and the JSON documents
    that its strings hold (a tool result is JSON text inside the client's own wrapping)."""
    if depth > 6:
        return
    if isinstance(value, dict):
        yield value
        for member in value.values():
            yield from json_values(member, depth + 1)
    elif isinstance(value, list):
        for member in value:
            yield from json_values(member, depth + 1)
    elif isinstance(value, str):
        decoder = json.JSONDecoder()
        for match in re.finditer(r"[{\[]", value):
            try:
                inner, _ = decoder.raw_decode(value, match.start())
            except ValueError:
                continue
            yield from json_values(inner, depth + 1)
            if isinstance(inner, (dict, list)):
                break


def result_object(result, key):
    """The tool's JSON result (the object with `key`) inside what the client handed the model."""
    for found in json_values(result.content):
        if isinstance(found, dict) and key in found:
            return found
    raise AssertionError("no JSON object with %r in the %s result the model got: %r" % (
        key, result.name, result.text[:3000]))


def describe(code, out, err, endpoint=None):
    text = "exit %r\nstdout:\n%s\nstderr:\n%s" % (code, out[-6000:], err[-6000:])
    if endpoint is not None:
        text += "\nendpoint:\n%s" % endpoint.recorder.summary()
    return text


GEMINI_MODEL = "gemini-2.5-pro"     # named, or its model router retries for ~100 s


def gemini_agent(make_agent, endpoint, trusted):
    """Gemini with an API key pointed at the endpoint, its user settings selecting that key,
    quiet, and `trusted` folders trusted (stdio servers start only in trusted folders)."""
    agent = make_agent("gemini", env={"GEMINI_API_KEY": "x", "GOOGLE_GEMINI_BASE_URL": endpoint.url,
                                      "GEMINI_CLI_NO_RELAUNCH": "true"})
    agent.write(agent.home / ".gemini" / "settings.json", {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "telemetry": {"enabled": False}, "privacy": {"usageStatisticsEnabled": False}})
    agent.write(agent.home / ".gemini" / "trustedFolders.json",
                {str(folder): "TRUST_FOLDER" for folder in trusted(agent)})
    return agent
