"""`mcp doctor` (doctor.md) through the built .pyz: the eight checks in order, every
status of every check, the token-in-client-config rule in each form, the reference
daemon running, stopped, absent, revoking the token, or hanging; `--json`; exit
statuses 0, 1 and 2; one `listTasks` and nothing else sent; no file written; the
token on neither output stream, in either format."""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from harness import (HOST_IS_WINDOWS, INSTALLED, REPO, SAFETY_TIMEOUT, gemini_rules,
                     installed_kit_paths, make_workspace, pasted_in_sh, require_python, run_cli,
                     snapshot)
from hardening_support import OTHER_UID, RawDaemon, daemon_post, needs_root

sys.path.insert(0, str(REPO))
import memprove_mcp as mp  # noqa: E402  (the PowerShell fix templates, given a platform)

CHECKS = ("python", "config_dir", "token", "data_dir", "workspace", "daemon", "client", "hook")
# The clients that run a session-start hook get the eighth check, `hook`; the others seven.
HOOKLESS = CHECKS[:-1]
# Shown second, and only when MEMPROVE_MCP_LOG names what nothing is logged to (rule 35).
ENVIRONMENT = "environment"
STATUSES = ("ok", "warn", "fail", "skip")
# Goose's user file (clients.md): under %APPDATA% on Windows.
GOOSE_FILE = "AppData/Roaming/Block/goose/config/config.yaml" if HOST_IS_WINDOWS \
    else ".config/goose/config.yaml"
ORIGINS = ("shipped", "cached", "compiled", "source")
TEXT_LINE = re.compile(r"(ok|warn|fail|skip) +(%s) +(.+)\Z" % "|".join(CHECKS + (ENVIRONMENT,)))
FIX_LINE = re.compile(r" +fix: (.+)\Z")
# A runs.jsonl line of the one shape every tool reads (contract.md §6 rule 27).
RUN_LINE = ('{"label": "%s", "id": "%s", "exit_code": 0, "command": "pytest", '
            '"finished_at": "2026-01-01T00:00:00Z"}\n')


# ---------------------------------------------------------------------------
# Running doctor
# ---------------------------------------------------------------------------

class Outcome:
    """One `mcp doctor` run: exit status, both streams, and the checks it printed."""

    def __init__(self, done, json_mode):
        self.code = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr
        self.out = done.stdout.decode("utf-8")
        self.err = done.stderr.decode("utf-8")
        self.checks = parse_json(self.out) if json_mode else parse_text(self.out)

    def __getitem__(self, name):
        return self.checks[name]

    def status(self, name):
        return self.checks[name]["status"]


def assert_in_order(names):
    """The checks in doctor.md's order: CHECKS or HOOKLESS, `environment` second if shown."""
    names = tuple(names)
    if ENVIRONMENT in names:
        assert names.index(ENVIRONMENT) == 1, names
        names = names[:1] + names[2:]
    assert names in (CHECKS, HOOKLESS), names


def parse_text(out):
    """doctor.md's text output: one line per check in order, a `fix:` line under each
    warn and fail and under nothing else."""
    lines = out.splitlines()
    assert out.endswith("\n"), out
    checks, order = {}, []
    index = 0
    while index < len(lines):
        match = TEXT_LINE.match(lines[index])
        assert match, "not a check line: %r" % lines[index]
        status, name, detail = match.groups()
        fix = None
        if index + 1 < len(lines):
            follows = FIX_LINE.match(lines[index + 1])
            if follows:
                fix = follows.group(1)
                index += 1
        assert (fix is not None) == (status in ("warn", "fail")), (name, status, fix)
        checks[name] = {"name": name, "status": status, "detail": detail, "fix": fix}
        order.append(name)
        index += 1
    assert_in_order(order)
    return checks


def parse_json(out):
    """doctor.md's `--json`: one object {"ok", "checks": [{name, status, code, detail, fix}]}."""
    report = json.loads(out)
    assert set(report) == {"ok", "checks"}, report
    assert isinstance(report["ok"], bool)
    assert_in_order(check["name"] for check in report["checks"])
    for check in report["checks"]:
        assert set(check) == {"name", "status", "code", "detail", "fix"}, check
        assert check["status"] in STATUSES, check
        assert isinstance(check["detail"], str) and check["detail"], check
        if check["status"] == "fail":
            assert isinstance(check["code"], str) and re.match(r"[a-z][a-z0-9_]*\Z", check["code"])
        if check["status"] in ("ok", "skip"):
            assert check["code"] is None, check
            assert check["fix"] is None, check
        else:
            assert isinstance(check["fix"], str) and check["fix"], check
    assert report["ok"] == all(check["status"] != "fail" for check in report["checks"])
    return dict((check["name"], check) for check in report["checks"])


@pytest.fixture
def doctor_pyz(pyz):
    return pyz


@pytest.fixture
def cache_home(tmp_path):
    """The bytecode cache (contract.md §5) lives here, outside every snapshot."""
    return tmp_path / "cache"


@pytest.fixture
def base_env(config, cache_home):
    return {"MEMPROVE_CONFIG_DIR": config.dir, "XDG_CACHE_HOME": cache_home}


@pytest.fixture
def doctor(doctor_pyz, make_env, base_env, workspace, planted):
    """doctor(*args, env=None, cwd=None, json_mode=False, python=None, timeout=SAFETY_TIMEOUT)
    -> Outcome; past `timeout` seconds, a failure.

    env is added to the base environment (the `config` fixture's directory; a None
    value removes a key).  Every run is checked: exit 0 or 1 with nothing on standard
    error, and no planted value (the token) on either stream, whatever the format."""
    def run(*args, env=None, cwd=None, json_mode=False, python=None, timeout=SAFETY_TIMEOUT):
        extra = dict(base_env)
        extra.update(env or {})
        argv = ["mcp", "doctor"] + list(args) + (["--json"] if json_mode else [])
        try:
            done = run_cli(python or sys.executable, doctor_pyz, argv, make_env(extra),
                           cwd or workspace, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("doctor %s did not finish within %s s" % (" ".join(args), timeout))
        for secret in planted:
            for form in {secret.encode("utf-8"), json.dumps(secret)[1:-1].encode("utf-8")}:
                assert form not in done.stdout, "the token is on standard output"
                assert form not in done.stderr, "the token is on standard error"
        assert done.stderr == b"", done.stderr
        outcome = Outcome(done, json_mode)
        failed = any(check["status"] == "fail" for check in outcome.checks.values())
        assert outcome.code == (1 if failed else 0), (outcome.code, outcome.out)
        return outcome
    return run


def print_config(doctor_pyz, make_env, base_env, workspace, *args):
    """The entry `mcp print-config` prints (stdout, parsed when JSON)."""
    done = run_cli(sys.executable, doctor_pyz, ["mcp", "print-config"] + list(args),
                   make_env(base_env), workspace)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8")


@pytest.fixture
def claude_entry(doctor_pyz, make_env, base_env, workspace):
    """The project .mcp.json, exactly as print-config writes it."""
    text = print_config(doctor_pyz, make_env, base_env, workspace)
    (workspace / ".mcp.json").write_text(text)
    return json.loads(text)


def write_entry(path, entry, container="mcpServers"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({container: {"memprove": entry}}))


def closed_port():
    """A loopback port nobody listens on (bound, then released)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def point_at(data_dir, url):
    (Path(data_dir) / "daemon.json").write_text(json.dumps({"url": url, "pid": 1}))


# ---------------------------------------------------------------------------
# The whole path working
# ---------------------------------------------------------------------------

def test_all_ok_one_read_no_file_written(doctor, daemon, config, workspace, home, claude_entry,
                                         doctor_pyz):
    daemon.clear_ops()
    before = snapshot(workspace, config.dir, home, config.data_dir / "daemon.json")
    outcome = doctor()
    after = snapshot(workspace, config.dir, home, config.data_dir / "daemon.json")
    assert outcome.code == 0
    assert [outcome.status(name) for name in HOOKLESS] == ["ok"] * 7, outcome.out
    # No hook configured: the eighth check says so, with its fix.
    assert outcome.status("hook") == "warn"
    assert "runs no memprove session-start hook" in outcome["hook"]["detail"]
    assert len(outcome.out.splitlines()) == 9
    assert before == after, "doctor wrote a file"
    # Exactly one daemon request: listTasks (a read, GET) for the Workspace, with the token.
    ops = daemon.ops
    assert [(op["op"], op["method"], op["status"]) for op in ops] == [("listTasks", "GET", 200)]
    assert ops[0]["headers"]["authorization"] == "Bearer " + config.token
    assert "idempotency-key" not in ops[0]["headers"]
    assert dict(ops[0]["query"]) == {"workspace": str(workspace.resolve())}
    assert str(workspace.resolve()) in outcome["workspace"]["detail"]
    assert daemon.url in outcome["daemon"]["detail"]
    assert str(config.dir) in outcome["config_dir"]["detail"]
    assert "MEMPROVE_CONFIG_DIR" in outcome["config_dir"]["detail"]
    assert str(workspace / ".mcp.json") in outcome["client"]["detail"]


def test_json_all_ok(doctor, daemon, claude_entry):
    outcome = doctor(json_mode=True)
    report = json.loads(outcome.out)
    assert report["ok"] is True and outcome.code == 0
    assert [check["status"] for check in report["checks"]] == ["ok"] * 7 + ["warn"]
    assert len(daemon.ops) == 1


def test_json_with_every_status(doctor, config, workspace, home):
    """warn (no client entry), fail (no data directory), skip (daemon), ok (python)."""
    (config.dir / "data-dir").unlink()
    outcome = doctor(json_mode=True)
    assert outcome.code == 1
    assert json.loads(outcome.out)["ok"] is False
    assert outcome.status("python") == "ok"
    assert outcome["data_dir"]["code"] == "data_dir_missing"
    assert outcome.status("daemon") == "skip"
    client = outcome["client"]
    assert client["status"] == "warn" and client["code"] is None


# ---------------------------------------------------------------------------
# python
# ---------------------------------------------------------------------------

def test_python_reports_version_implementation_and_bytecode(doctor, doctor_pyz, server_python,
                                                             daemon, claude_entry):
    outcome = doctor(python=server_python, json_mode=True)
    detail = outcome["python"]["detail"]
    # Issue 41: the first line names the build that runs, its version and archive's SHA-256.
    digest = hashlib.sha256(Path(str(doctor_pyz)).read_bytes()).hexdigest()
    assert detail.startswith("memprove-mcp %s, archive sha256 %s; Python " % (
        mp.VERSION, digest)), detail
    version = subprocess.run([server_python, "-c", "import platform; print(platform.python_version())"],
                             stdout=subprocess.PIPE, timeout=SAFETY_TIMEOUT).stdout.decode().strip()
    assert version in detail and "CPython" in detail, detail
    assert any(origin in detail for origin in ORIGINS), detail
    assert outcome.status("python") == "ok"
    assert outcome.code == 0, outcome.out


def test_python_newer_than_tested_warns(doctor_pyz, tmp_path, make_env, base_env, workspace,
                                        daemon, claude_entry, planted):
    """The same archive with NEWEST_TESTED lowered below this interpreter: a warn with a fix."""
    with zipfile.ZipFile(str(doctor_pyz)) as archive:
        source = archive.read("memprove_mcp.py").decode("utf-8")
    assert source.count("NEWEST_TESTED = (3, 15)") == 1
    module = tmp_path / "older" / "memprove_mcp.py"
    module.parent.mkdir()
    module.write_text(source.replace("NEWEST_TESTED = (3, 15)", "NEWEST_TESTED = (3, 0)"),
                      encoding="utf-8")
    older = tmp_path / "older" / "memprove_mcp.pyz"
    built = subprocess.run([sys.executable, str(REPO / "build_zipapp.py"), "--no-bytecode",
                            "--source", str(module), "--output", str(older)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert built.returncode == 0, built.stderr
    done = run_cli(sys.executable, older, ["mcp", "doctor"], make_env(base_env), workspace)
    outcome = Outcome(done, False)
    assert outcome.status("python") == "warn"
    assert "3.0" in outcome["python"]["detail"]
    assert outcome["python"]["fix"].startswith("& py -3.0 " if HOST_IS_WINDOWS else "python3.0 ")
    assert outcome["python"]["fix"].endswith("mcp print-config --python")
    # A warn is no failure; the client entry names the other archive, also a warn.
    assert outcome.code == 0, outcome.out
    for secret in planted:
        assert secret.encode() not in done.stdout + done.stderr


# ---------------------------------------------------------------------------
# environment (contract.md §6 rule 35): shown only when MEMPROVE_MCP_LOG is set and names
# what the server and the hook will not write (a relative path, a link, a FIFO, a folder)
# ---------------------------------------------------------------------------

LOG_FIX = "export MEMPROVE_MCP_LOG=/path/to/memprove-mcp.log"


def regular_log(tmp_path):
    path = tmp_path / "memprove-mcp.log"
    path.write_text("a line already there\n")
    return path


@pytest.mark.parametrize("value", [None, regular_log, lambda tmp_path: tmp_path / "not-yet.log"],
                         ids=["unset", "a regular file", "an absolute path not made yet"])
def test_rule35_environment_is_absent_when_the_log_can_be_written(doctor, daemon, tmp_path, value):
    """The control: nothing to say, no line: MEMPROVE_MCP_LOG unset, or an absolute path
    (of a regular file, or to be made by the first line written)."""
    env = {"MEMPROVE_MCP_LOG": value(tmp_path) if value else None}
    for json_mode in (False, True):
        outcome = doctor(env=env, json_mode=json_mode)
        assert ENVIRONMENT not in outcome.checks, outcome.out
        assert outcome.status("config_dir") == "ok" and outcome.status("daemon") == "ok"


def log_fifo(tmp_path):
    path = tmp_path / "mcp-log-fifo"
    os.mkfifo(str(path))
    return path


def log_link(tmp_path):
    path = tmp_path / "mcp-log-link"
    path.symlink_to(regular_log(tmp_path))
    return path


def log_folder(tmp_path):
    path = tmp_path / "mcp-log-folder"
    path.mkdir()
    return path


UNLOGGED = {"a FIFO": log_fifo, "a link to a regular file": log_link, "a folder": log_folder}


@pytest.mark.parametrize("kind", sorted(UNLOGGED))
def test_rule35_environment_warns_for_a_log_that_is_not_a_regular_file(doctor, daemon, tmp_path,
                                                                       kind):
    """MEMPROVE_MCP_LOG names a FIFO (no one reading it), a link or a folder: the
    `environment` check, second, warns that nothing is logged, with the fix naming an
    absolute file; doctor ends by itself (the harness's safety timeout) and exits 0 (a
    warn), and the file a link names is left as it was.  (Before: no such check.)"""
    path = UNLOGGED[kind](tmp_path)
    for json_mode in (False, True):
        outcome = doctor(env={"MEMPROVE_MCP_LOG": path}, json_mode=json_mode)
        check = outcome[ENVIRONMENT]
        assert check["status"] == "warn", check
        assert "MEMPROVE_MCP_LOG names %s, which is not a regular file" % path in check["detail"]
        assert "so nothing is logged" in check["detail"] and check["fix"] == LOG_FIX, check
        assert list(outcome.checks)[1] == ENVIRONMENT and outcome.code == 0, outcome.out
    if kind == "a link to a regular file":
        assert (tmp_path / "memprove-mcp.log").read_text() == "a line already there\n"


def test_rule35_environment_warns_for_a_relative_log_path(doctor, daemon, workspace):
    """A relative MEMPROVE_MCP_LOG would land in whatever project a client starts in: the
    check warns (exit 0), naming the value, and no file is made in the working directory.
    (Before: no such check.)"""
    for json_mode in (False, True):
        outcome = doctor(env={"MEMPROVE_MCP_LOG": "mcp.log"}, json_mode=json_mode)
        check = outcome[ENVIRONMENT]
        assert check["status"] == "warn" and check["fix"] == LOG_FIX, check
        assert check["detail"].startswith("MEMPROVE_MCP_LOG is mcp.log, a relative path, so "
                                          "nothing is logged"), check
        assert list(outcome.checks)[1] == ENVIRONMENT and outcome.code == 0, outcome.out
    assert not (workspace / "mcp.log").exists()


# ---------------------------------------------------------------------------
# config_dir
# ---------------------------------------------------------------------------

def test_config_dir_from_option(doctor, config, daemon, tmp_path):
    outcome = doctor("--config-dir", str(config.dir), env={"MEMPROVE_CONFIG_DIR": None})
    assert outcome.status("config_dir") == "ok"
    assert "%s (from --config-dir)" % config.dir in outcome["config_dir"]["detail"]
    # The client fix, Claude Code's own command, gives the server that configuration directory.
    assert outcome["client"]["fix"].endswith(
        "mcp serve --config-dir %s" % config.dir), outcome["client"]["fix"]
    assert "MEMPROVE_CONFIG_DIR=%s" % config.dir in outcome["client"]["fix"]


def test_config_dir_from_xdg(doctor, tmp_path):
    outcome = doctor(env={"MEMPROVE_CONFIG_DIR": None, "XDG_CONFIG_HOME": tmp_path / "xdg"})
    detail = outcome["config_dir"]["detail"]
    assert str(tmp_path / "xdg" / "memprove") in detail and "XDG_CONFIG_HOME" in detail


def test_config_dir_missing_warns(doctor, config, daemon, tmp_path):
    """No configuration directory at all; the token and data directory from the environment."""
    absent = tmp_path / "nowhere"
    outcome = doctor(env={"MEMPROVE_CONFIG_DIR": absent, "MEMPROVE_TOKEN_FILE": config.token_file,
                          "MEMPROVE_DATA_DIR": config.data_dir})
    check = outcome["config_dir"]
    assert check["status"] == "warn" and "does not exist" in check["detail"]
    assert check["fix"] == "mkdir -p -m 700 %s" % absent
    assert outcome.status("token") == "ok" and outcome.status("daemon") == "ok"
    assert not absent.exists()


# ---------------------------------------------------------------------------
# token
# ---------------------------------------------------------------------------

def test_token_from_each_source(doctor, config, daemon, tmp_path, planted):
    assert doctor()["token"]["detail"] == "from config (%s), well formed" % config.token_file
    outcome = doctor(env={"MEMPROVE_TOKEN": config.token})
    assert outcome["token"]["detail"] == "from MEMPROVE_TOKEN, well formed"
    assert outcome.status("daemon") == "ok"
    other = tmp_path / "elsewhere-token"
    other.write_text(config.token + "\n")
    other.chmod(0o600)
    outcome = doctor(env={"MEMPROVE_TOKEN_FILE": other})
    assert outcome["token"]["detail"] == "from MEMPROVE_TOKEN_FILE (%s), well formed" % other


def test_token_file_open_to_others_warns(doctor, config, daemon):
    config.token_file.chmod(0o644)
    outcome = doctor()
    check = outcome["token"]
    assert check["status"] == "warn" and "group or others" in check["detail"]
    assert check["fix"] == "chmod 600 %s" % config.token_file
    # Still used, as by the server.
    assert outcome.status("daemon") == "ok"


def test_token_missing(doctor, config, daemon, tmp_path):
    config.token_file.unlink()
    outcome = doctor(json_mode=True)
    check = outcome["token"]
    assert (check["status"], check["code"]) == ("fail", "token_missing")
    assert check["fix"].startswith("export MEMPROVE_TOKEN_FILE=")
    assert outcome.status("daemon") == "skip" and "token" in outcome["daemon"]["detail"]
    assert daemon.ops == []
    # A set source that cannot be used is an error: no falling through to another.
    config.token_file.write_text(config.token)
    outcome = doctor(env={"MEMPROVE_TOKEN_FILE": tmp_path / "mistyped"}, json_mode=True)
    assert outcome["token"]["code"] == "token_missing"
    assert str(tmp_path / "mistyped") in outcome["token"]["detail"]


def test_token_malformed_is_never_shown(doctor, config, daemon, plant):
    bad = plant("tok bad")              # white space inside: never a header, never printed
    for json_mode in (False, True):
        outcome = doctor(env={"MEMPROVE_TOKEN": bad}, json_mode=json_mode)
        assert outcome.status("token") == "fail"
        if json_mode:
            assert outcome["token"]["code"] == "token_malformed"
        assert outcome.status("daemon") == "skip"
    assert daemon.ops == []


# ---------------------------------------------------------------------------
# data_dir
# ---------------------------------------------------------------------------

def test_data_dir_from_each_source(doctor, config, daemon):
    assert doctor()["data_dir"]["detail"] == "%s (from config)" % config.data_dir
    outcome = doctor(env={"MEMPROVE_DATA_DIR": config.data_dir})
    assert outcome["data_dir"]["detail"] == "%s (from MEMPROVE_DATA_DIR)" % config.data_dir


def test_data_dir_not_set(doctor, config):
    (config.dir / "data-dir").unlink()
    outcome = doctor(json_mode=True)
    assert outcome["data_dir"]["code"] == "data_dir_missing"
    assert outcome["data_dir"]["fix"].startswith("export MEMPROVE_DATA_DIR=")
    assert outcome.status("daemon") == "skip"


def test_data_dir_not_a_directory(doctor, config, tmp_path):
    outcome = doctor(env={"MEMPROVE_DATA_DIR": tmp_path / "no-such-data"}, json_mode=True)
    assert outcome["data_dir"]["code"] == "data_dir_missing"
    assert "not a directory" in outcome["data_dir"]["detail"]
    assert outcome.status("daemon") == "skip"


# ---------------------------------------------------------------------------
# config_dir, token and data_dir when the configuration directory is not believed
# (contract.md §6 rule 31): the token and data-dir in it count as absent
# ---------------------------------------------------------------------------

def config_dir_others_can_write(config, tmp_path):
    os.chmod(str(config.dir), 0o777)
    return config.dir, "the configuration directory can be written by group or others (mode " \
        "0777).", ("token", "data_dir")


def data_dir_file_others_can_write(config, tmp_path):
    os.chmod(str(config.dir / "data-dir"), 0o666)
    return config.dir, "the file data-dir in the configuration directory can be written by " \
        "group or others (mode 0666).", ("data_dir",)


def token_file_others_can_write(config, tmp_path):
    os.chmod(str(config.token_file), 0o666)
    return config.dir, "the file token in the configuration directory can be written by group " \
        "or others (mode 0666).", ("token",)


def a_folder_above_others_can_write(config, tmp_path):
    team = tmp_path / "team"
    team.mkdir()
    os.chmod(str(team), 0o777)
    moved = team / "config"
    os.rename(str(config.dir), str(moved))
    return moved, "the folder %s above the configuration directory can be written by group or " \
        "others (mode 0777)." % team, ("token", "data_dir")


UNSAFE_CONFIG = {"the configuration directory others can write (0777)": config_dir_others_can_write,
                 "data-dir others can write (0666)": data_dir_file_others_can_write,
                 "token others can write (0666)": token_file_others_can_write,
                 "a folder above others can write (0777)": a_folder_above_others_can_write}


@pytest.mark.parametrize("case", sorted(UNSAFE_CONFIG))
def test_rule31_doctor_fails_a_config_dir_others_can_write(doctor, daemon, config, tmp_path, case):
    """The configuration directory, a folder above it or its token or data-dir can be
    written by others: `config_dir` fails `config_dir_unsafe` saying why, its fix a chmod
    of what is the user's to close (`chmod 700` of the directory, `chmod 600` of a file,
    `chmod go-w` of a folder above), or else a directory of their own; the token and data_dir checks read that file as
    absent, saying it is not believed; the daemon is skipped and gets no request; exit 1,
    in text and in --json.  (Before: `ok` throughout, the token sent where data-dir said.)"""
    directory, why, unbelieved = UNSAFE_CONFIG[case](config, tmp_path)
    for json_mode in (False, True):
        outcome = doctor(env={"MEMPROVE_CONFIG_DIR": directory}, json_mode=json_mode)
        check = outcome["config_dir"]
        assert check["status"] == "fail", check
        assert check["detail"].startswith("%s (from MEMPROVE_CONFIG_DIR) is not believed, so "
                                          % directory), check
        assert check["detail"].endswith(": " + why), check
        if case == "a folder above others can write (0777)":
            # The folder above is the user's (the tests run as root, its owner): closed to
            # group and others, not made private, since others may need to pass through it.
            assert check["fix"] == "chmod go-w %s" % (tmp_path / "team"), check
        elif case.startswith("the configuration directory"):
            assert check["fix"] == "chmod 700 %s" % directory, check
        else:
            name = "data-dir" if case.startswith("data-dir") else "token"
            assert check["fix"] == "chmod 600 %s" % (directory / name), check
        token, data_dir = outcome["token"], outcome["data_dir"]
        if "token" in unbelieved:
            assert token["status"] == "fail", token
            assert token["detail"] == "%s is not believed: %s" % (directory / "token", why), token
        else:
            assert token["status"] == "ok", token
        if "data_dir" in unbelieved:
            assert data_dir["status"] == "fail", data_dir
            assert data_dir["detail"] == "%s is not believed: %s" % (directory / "data-dir", why)
            assert data_dir["fix"] == "see the fix of the config_dir check above", data_dir
        else:
            assert data_dir["status"] == "ok", data_dir
        assert outcome.status("daemon") == "skip" and outcome.code == 1, outcome.out
        if json_mode:
            assert check["code"] == "config_dir_unsafe", check
            assert [outcome[name]["code"] for name in unbelieved] == \
                [{"token": "token_missing", "data_dir": "data_dir_missing"}[name]
                 for name in unbelieved], outcome.out
    assert daemon.ops == [], daemon.ops


# ---------------------------------------------------------------------------
# workspace
# ---------------------------------------------------------------------------

def test_workspace_reports_context_and_runs(doctor, daemon, config, workspace):
    memprove = workspace / ".memprove"
    (memprove / "context.json").write_text(json.dumps({
        "version": 1, "workspace": {"id": "w", "root": str(workspace)},
        "task": {"id": "t", "number": 3, "title": "x"},
        "session": {"id": "s", "number": 7, "agent": {"name": "a", "role": "implementer"},
                    "parent": None}}))
    (memprove / "runs.jsonl").write_text(
        RUN_LINE % ("r1", "a") + RUN_LINE % ("r2", "b") + '{"torn')
    check = doctor()["workspace"]
    assert check["status"] == "ok"
    assert check["detail"] == ("%s (found by working directory), .memprove/ present, Task 3, "
                               "Session 7, 2 runs in runs.jsonl" % workspace.resolve())


def test_a_runs_file_of_newlines_keeps_doctors_promise(doctor, daemon, workspace):
    """§6 rule 16: doctor counts the runs a line at a time, blank lines as cheap as any
    (2 MiB of newlines made it overrun its promise): 16 MiB of them between two runs,
    and doctor answers within MEMPROVE_TIMEOUT plus a second, counting both."""
    from hardening_support import append_filler
    path = workspace / ".memprove" / "runs.jsonl"
    path.write_text(RUN_LINE % ("r1", "a"))
    append_filler(path, b"\n", 16 << 20)
    with open(str(path), "ab") as handle:
        handle.write((RUN_LINE % ("r2", "b")).encode())
    outcome = within_its_promise(doctor)
    assert outcome.status("workspace") == "ok", outcome.out
    assert outcome["workspace"]["detail"].endswith(", 2 runs in runs.jsonl"), outcome.out


def test_workspace_from_option_and_project_dir(doctor, daemon, workspace, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outcome = doctor("--workspace", str(workspace), cwd=elsewhere)
    assert outcome["workspace"]["detail"].startswith("%s (found by --workspace)" % workspace.resolve())
    assert dict(daemon.ops[-1]["query"]) == {"workspace": str(workspace.resolve())}
    outcome = doctor(env={"CLAUDE_PROJECT_DIR": workspace}, cwd=elsewhere)
    assert "found by CLAUDE_PROJECT_DIR" in outcome["workspace"]["detail"]


def test_unexpanded_workspace_variable_is_ignored_and_said(doctor, daemon, workspace):
    outcome = doctor("--workspace", "${workspaceFolder}", env={"MEMPROVE_WORKSPACE": "${HOME}/x"})
    detail = outcome["workspace"]["detail"]
    assert outcome.status("workspace") == "ok"
    assert detail.startswith("%s (found by working directory)" % workspace.resolve())
    assert "--workspace not expanded" in detail and "MEMPROVE_WORKSPACE not expanded" in detail


def test_linked_context_lock_is_named(doctor, daemon, workspace, tmp_path):
    (workspace / ".memprove" / "context.lock").symlink_to(tmp_path / "elsewhere")
    outcome = doctor(json_mode=True)
    check = outcome["workspace"]
    assert check["code"] == "context_unreadable"
    assert "context.lock" in check["detail"]
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("name", [".memprove", "context.json"])
def test_linked_memprove_or_context_is_named(doctor, daemon, workspace, tmp_path, name):
    """contract.md §6 rule 14: a `.memprove` or `context.json` that is a link (to a
    sibling's) is `context_unreadable` for reading too; the check names the file."""
    sibling = tmp_path / "sibling"
    (sibling / ".memprove").mkdir(parents=True)
    (sibling / ".memprove" / "context.json").write_text(json.dumps(
        {"version": 1, "workspace": {"id": "w", "root": str(workspace.resolve())},
         "task": None, "session": None}))
    if name == ".memprove":
        (workspace / ".memprove").rmdir()
        (workspace / ".memprove").symlink_to(sibling / ".memprove")
    else:
        (workspace / ".memprove" / "context.json").symlink_to(sibling / ".memprove" / "context.json")
    check = doctor(json_mode=True)["workspace"]
    assert (check["status"], check["code"]) == ("fail", "context_unreadable"), check
    assert "%s is a link" % name in check["detail"], check


def test_workspace_without_memprove_warns(doctor, daemon, tmp_path):
    project = tmp_path / "fresh"
    (project / ".git").mkdir(parents=True)
    outcome = doctor(cwd=project)
    check = outcome["workspace"]
    assert check["status"] == "warn" and "no .memprove/ yet" in check["detail"]
    assert "begin" in check["fix"]
    assert outcome.status("daemon") == "ok" and outcome.code == 0
    assert not (project / ".memprove").exists()


@pytest.mark.parametrize("how", ["option", "CLAUDE_PROJECT_DIR"])
def test_workspace_unusable(doctor, daemon, tmp_path, how):
    missing = tmp_path / "no-such-project"
    if how == "option":
        outcome = doctor("--workspace", str(missing), json_mode=True)
    else:
        outcome = doctor(env={"CLAUDE_PROJECT_DIR": missing}, json_mode=True)
    assert outcome["workspace"]["code"] == "workspace_unusable"
    assert outcome.status("daemon") == "skip" and daemon.ops == []
    assert not missing.exists()


def test_context_unreadable(doctor, daemon, workspace):
    context = workspace / ".memprove" / "context.json"
    context.write_text("{not json")
    outcome = doctor(json_mode=True)
    check = outcome["workspace"]
    assert (check["status"], check["code"]) == ("fail", "context_unreadable")
    assert str(context) in check["fix"]
    assert context.read_text() == "{not json"
    # The daemon needs the Workspace, not its context: it is still asked.
    assert outcome.status("daemon") == "ok"


# ---------------------------------------------------------------------------
# daemon
# ---------------------------------------------------------------------------

def test_daemon_counts_tasks(doctor, daemon, config, workspace):
    root = str(workspace.resolve())
    made = daemon_post(daemon, config.token, "/v1/workspaces/resolve", {"root": root})
    for title in ("one", "two"):
        daemon_post(daemon, config.token, "/v1/tasks",
                     {"workspace_id": made["workspace"]["id"], "title": title})
    daemon.clear_ops()
    outcome = doctor()
    assert outcome["daemon"]["detail"].endswith(": 2 Tasks")
    assert [op["op"] for op in daemon.ops] == ["listTasks"]


@pytest.mark.parametrize("broken", ["token", "data_dir", "workspace"])
def test_daemon_skipped_when_its_inputs_failed(doctor, daemon, config, tmp_path, broken):
    env = {}
    if broken == "token":
        config.token_file.unlink()
    elif broken == "data_dir":
        (config.dir / "data-dir").unlink()
    else:
        env["CLAUDE_PROJECT_DIR"] = tmp_path / "gone"
    outcome = doctor(env=env)
    assert outcome.status(broken) == "fail"
    assert outcome.status("daemon") == "skip"
    assert broken in outcome["daemon"]["detail"]
    assert daemon.ops == []


def test_no_daemon_at_all(doctor, config, workspace, home, claude_entry):
    """Nothing ever started: no daemon.json in the data directory."""
    before = snapshot(workspace, config.dir, config.data_dir, home)
    outcome = doctor(json_mode=True)
    assert snapshot(workspace, config.dir, config.data_dir, home) == before
    check = outcome["daemon"]
    assert (check["status"], check["code"]) == ("fail", "daemon_unavailable")
    assert "daemon" in check["fix"]
    assert [outcome.status(name) for name in HOOKLESS if name != "daemon"] == ["ok"] * 6
    assert outcome.code == 1


def test_daemon_stopped(doctor, daemon):
    assert doctor().status("daemon") == "ok"
    daemon.stop()
    outcome = doctor(json_mode=True)
    assert outcome["daemon"]["code"] == "daemon_unavailable"


def test_daemon_json_left_by_a_dead_daemon(doctor, config):
    url = "http://127.0.0.1:%d" % closed_port()
    point_at(config.data_dir, url)
    outcome = doctor(json_mode=True)
    assert outcome["daemon"]["code"] == "daemon_unavailable"
    assert url in outcome["daemon"]["detail"]


def test_daemon_address_refused_sends_nothing(doctor, config):
    spy = RawDaemon(lambda conn: None)
    try:
        # Same port, but not a loopback name: the token must not be sent.
        point_at(config.data_dir, "http://example.invalid:%s" % spy.url.rsplit(":", 1)[1])
        outcome = doctor(json_mode=True)
    finally:
        spy.close()
    assert outcome["daemon"]["code"] == "daemon_address_refused"
    assert spy.requests == 0


@pytest.mark.parametrize("code", ["token_revoked", "unauthenticated", "scope_missing"])
def test_daemon_refuses_the_token(doctor, daemon, config, code):
    if code == "token_revoked":
        daemon.revoke_token(config.token)
    elif code == "unauthenticated":
        daemon.remove_token(config.token)
    else:
        daemon.add_token(config.token, scopes=("mcp-write",))
    daemon.clear_ops()
    for json_mode in (False, True):
        outcome = doctor(json_mode=json_mode)
        assert outcome.status("daemon") == "fail"
    assert outcome["daemon"]["code"] == code
    assert code in outcome["daemon"]["detail"]
    assert [op["op"] for op in daemon.ops] == ["listTasks", "listTasks"]   # one per run


def test_daemon_error(doctor, daemon):
    daemon.inject("status500", op="listTasks")
    outcome = doctor(json_mode=True)
    assert outcome["daemon"]["code"] == "daemon_error"
    assert [op["op"] for op in daemon.ops] == ["listTasks"]     # a read is never retried


def test_daemon_that_never_answers(doctor, config):
    """A daemon that accepts and never answers: daemon_timeout, after one request, within
    MEMPROVE_TIMEOUT (run_cli's safety timeout would fail the test if it hung)."""
    release = threading.Event()
    hang = RawDaemon(lambda conn: release.wait(SAFETY_TIMEOUT))
    try:
        hang.write_daemon_json(config.data_dir)
        outcome = doctor(env={"MEMPROVE_TIMEOUT": "0.5"}, json_mode=True)
        assert hang.requests == 1
    finally:
        release.set()
        hang.close()
    check = outcome["daemon"]
    assert (check["status"], check["code"]) == ("fail", "daemon_timeout")
    assert "0.5" in check["detail"]


# ---------------------------------------------------------------------------
# client
# ---------------------------------------------------------------------------

def test_client_entry_from_print_config_is_ok(doctor, daemon, claude_entry, doctor_pyz, config):
    entry = claude_entry["mcpServers"]["memprove"]
    assert [entry["command"]] + entry["args"][:len(pyz_words(doctor_pyz)) - 1] == \
        pyz_words(doctor_pyz)
    assert doctor().status("client") == "ok"


def test_client_in_claude_json(doctor, daemon, claude_entry, home, workspace, doctor_pyz, tmp_path):
    entry = dict(claude_entry["mcpServers"]["memprove"])
    (workspace / ".mcp.json").unlink()
    claude = home / ".claude.json"
    # Other servers and settings in the file are not read out.
    claude.write_text(json.dumps({"projects": {str(workspace.resolve()): {"mcpServers": {"memprove": entry}}},
                                  "mcpServers": {"other": {"command": "secret-tool"}}}))
    outcome = doctor()
    assert outcome.status("client") == "ok"
    assert "projects[root]" in outcome["client"]["detail"]
    assert "secret-tool" not in outcome.out
    claude.write_text(json.dumps({"mcpServers": {"memprove": entry}}))
    outcome = doctor()
    assert outcome.status("client") == "ok"
    assert "projects" not in outcome["client"]["detail"]


def test_project_entry_comes_first(doctor, daemon, claude_entry, home, workspace):
    # ~/.claude.json names a missing command, but .mcp.json is read first.
    write_entry(home / ".claude.json", {"command": "/no/such/server"})
    assert doctor().status("client") == "ok"
    (workspace / ".mcp.json").unlink()
    assert doctor().status("client") == "fail"


def test_no_client_entry_warns_with_the_clients_own_command(doctor, daemon, doctor_pyz,
                                                           workspace, config):
    """Issue 31 item 5: the fix is the command of the client that adds the entry (the interop
    tier runs it with the real clients, then doctor says ok), not a line to paste by hand."""
    outcome = doctor()
    check = outcome["client"]
    assert check["status"] == "warn"
    assert str(workspace.resolve() / ".mcp.json") in check["detail"]
    assert check["fix"] == (
        "claude mcp add memprove -e MEMPROVE_CONFIG_DIR={cfg} -- {python} {pyz} mcp serve "
        "--config-dir {cfg}".format(cfg=config.dir, python=os.path.abspath(sys.executable),
                                    pyz=doctor_pyz)), check
    assert outcome.code == 0


@pytest.mark.parametrize("client, command", [
    ("codex", "codex mcp add memprove --env MEMPROVE_CONFIG_DIR={cfg} -- {python} {pyz} mcp serve "
              "--config-dir {cfg}"),
    ("gemini", "gemini mcp add -s user memprove -e MEMPROVE_CONFIG_DIR={cfg} {python} -- {pyz} mcp "
               "serve --config-dir {cfg}")])
def test_client_fix_is_the_named_clients_command(doctor, daemon, doctor_pyz, home, config,
                                                 client, command):
    outcome = doctor("--client", client)
    assert outcome["client"]["fix"] == command.format(
        cfg=config.dir, python=os.path.abspath(sys.executable), pyz=doctor_pyz), outcome["client"]
    assert outcome.status("client") == "warn"


def test_a_client_without_an_add_command_gets_print_config_and_the_file(doctor, daemon,
                                                                        doctor_pyz, workspace):
    outcome = doctor("--client", "cursor")
    assert outcome["client"]["fix"] == "python3 %s mcp print-config --client cursor, and put " \
        "what it prints in %s" % (doctor_pyz, workspace.resolve() / ".cursor" / "mcp.json")


def test_client_command_missing_fails(doctor, daemon, claude_entry, workspace, tmp_path):
    entry = dict(claude_entry["mcpServers"]["memprove"], command=str(tmp_path / "gone.pyz"))
    write_entry(workspace / ".mcp.json", entry)
    outcome = doctor(json_mode=True)
    check = outcome["client"]
    assert check["status"] == "fail" and check["code"]
    assert str(tmp_path / "gone.pyz") in check["detail"]
    assert "mcp print-config" in check["fix"]
    assert outcome.code == 1


def test_client_runs_another_copy_warns(doctor, daemon, claude_entry, workspace, tmp_path, doctor_pyz):
    copy = tmp_path / "old" / "memprove_mcp.pyz"
    copy.parent.mkdir()
    shutil.copy(str(doctor_pyz), str(copy))
    entry = json.loads(json.dumps(claude_entry["mcpServers"]["memprove"]))
    if HOST_IS_WINDOWS:
        entry["args"][0] = str(copy)        # the interpreter first, then the .pyz
    else:
        entry["command"] = str(copy)
    write_entry(workspace / ".mcp.json", entry)
    check = doctor()["client"]
    assert check["status"] == "warn" and str(copy) in check["detail"]


def test_client_python_entry(doctor, daemon, doctor_pyz, make_env, base_env, workspace, tmp_path):
    """A `--python` entry: the interpreter is the command, the .pyz its first argument."""
    text = print_config(doctor_pyz, make_env, base_env, workspace, "--python")
    (workspace / ".mcp.json").write_text(text)
    assert doctor().status("client") == "ok"
    entry = json.loads(text)["mcpServers"]["memprove"]
    entry["args"][0] = str(tmp_path / "moved.pyz")
    write_entry(workspace / ".mcp.json", entry)
    assert doctor().status("client") == "fail"


def test_client_other_config_dir_warns(doctor, daemon, claude_entry, workspace, tmp_path):
    entry = json.loads(json.dumps(claude_entry["mcpServers"]["memprove"]))
    entry["args"][-1] = str(tmp_path / "other-config")
    entry["env"]["MEMPROVE_CONFIG_DIR"] = str(tmp_path / "other-config")
    write_entry(workspace / ".mcp.json", entry)
    check = doctor()["client"]
    assert check["status"] == "warn" and str(tmp_path / "other-config") in check["detail"]


def entry_with_token(entry, form, token):
    entry = json.loads(json.dumps(entry))
    if form == "env MEMPROVE_TOKEN":
        entry["env"]["MEMPROVE_TOKEN"] = token
    elif form == "env key, any case":
        entry["env"]["my_Token_file"] = "/home/ana/.config/memprove/token"
    elif form == "argument":
        entry["args"] += ["--token", token]
    elif form == "argument=":
        entry["args"] += ["--api-TOKEN=" + token]
    elif form == "value in args":
        entry["args"] += [token]
    elif form == "value under another name":
        entry["env"]["AUTH"] = "Bearer " + token
    return entry


TOKEN_FORMS = ["env MEMPROVE_TOKEN", "env key, any case", "argument", "argument=",
               "value in args", "value under another name"]


@pytest.mark.parametrize("form", TOKEN_FORMS)
def test_token_in_client_entry_fails(doctor, daemon, config, claude_entry, workspace, form):
    write_entry(workspace / ".mcp.json",
                entry_with_token(claude_entry["mcpServers"]["memprove"], form, config.token))
    for json_mode in (False, True):        # the `doctor` fixture checks the token is not shown
        outcome = doctor(json_mode=json_mode)
        assert outcome.status("client") == "fail", outcome.out
        assert outcome.code == 1
    assert outcome["client"]["code"]
    assert "token" in outcome["client"]["detail"]


@pytest.mark.parametrize("reference", ["$MEMPROVE_TOKEN_FILE", "${MEMPROVE_TOKEN_FILE}",
                                       "{env:MEMPROVE_TOKEN_FILE}"])
def test_variable_reference_is_no_token(doctor, daemon, claude_entry, workspace, reference):
    entry = json.loads(json.dumps(claude_entry["mcpServers"]["memprove"]))
    entry["env"]["MEMPROVE_TOKEN_FILE"] = reference
    entry["args"] += ["--token-file", reference]
    write_entry(workspace / ".mcp.json", entry)
    assert doctor().status("client") == "ok"


def test_token_in_user_claude_json_fails(doctor, daemon, config, claude_entry, workspace, home):
    entry = entry_with_token(claude_entry["mcpServers"]["memprove"], "env MEMPROVE_TOKEN", config.token)
    (workspace / ".mcp.json").unlink()
    write_entry(home / ".claude.json", entry)
    outcome = doctor(json_mode=True)
    assert outcome.status("client") == "fail"
    assert str(home / ".claude.json") in outcome["client"]["detail"]


# Other clients: the files clients.md names, JSON parsed, TOML and YAML read by lines.

def pyz_words(pyz):
    """What an entry runs `pyz` with, as print-config writes it: the .pyz itself, and on
    Windows (which starts a program by its extension) the interpreter, then the .pyz."""
    if HOST_IS_WINDOWS:
        return [os.path.abspath(sys.executable), str(pyz)]
    return [str(pyz)]


def pyz_entry(pyz, args, **rest):
    """A JSON entry {"command", "args", ...} that runs `pyz` with `args`."""
    words = pyz_words(pyz)
    return dict(rest, command=words[0], args=words[1:] + [str(arg) for arg in args])


def quoted(text):
    """`text` as a TOML basic string (a Windows path's backslashes escaped)."""
    return json.dumps(str(text))


def codex_block(pyz, config_dir, extra=""):
    words = pyz_words(pyz)
    return ('[mcp_servers.memprove]\ncommand = %s\nargs = [%s"mcp", "serve", "--config-dir", %s]\n'
            'env_vars = ["MEMPROVE_TOKEN", "MEMPROVE_TOKEN_FILE", "MEMPROVE_DATA_DIR"]\n%s'
            '\n[mcp_servers.memprove.env]\nMEMPROVE_CONFIG_DIR = %s\n'
            % (quoted(words[0]), "".join(quoted(word) + ", " for word in words[1:]),
               quoted(config_dir), extra, quoted(config_dir)))


def test_codex_toml(doctor, daemon, config, doctor_pyz, home, tmp_path):
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text('model = "o4"\n\n' + codex_block(doctor_pyz, config.dir) + '\n[other]\nx = 1\n')
    assert doctor("--client", "codex").status("client") == "ok"
    codex.write_text(codex_block(doctor_pyz, config.dir).replace(
        'MEMPROVE_CONFIG_DIR = %s\n' % quoted(config.dir),
        'MEMPROVE_CONFIG_DIR = %s\nMEMPROVE_TOKEN = "%s"\n' % (quoted(config.dir), config.token)))
    outcome = doctor("--client", "codex")
    assert outcome.status("client") == "fail"
    # $CODEX_HOME is honoured.
    moved = tmp_path / "codex-home"
    moved.mkdir()
    (moved / "config.toml").write_text(codex_block(doctor_pyz, config.dir))
    assert doctor("--client", "codex", env={"CODEX_HOME": moved}).status("client") == "ok"


def test_gemini_reference_to_token_file(doctor, daemon, config, doctor_pyz, workspace):
    entry = pyz_entry(doctor_pyz, ["mcp", "serve", "--config-dir", config.dir],
                      env={"MEMPROVE_CONFIG_DIR": str(config.dir),
                           "MEMPROVE_TOKEN_FILE": "$MEMPROVE_TOKEN_FILE"})
    write_entry(workspace / ".gemini" / "settings.json", entry)
    assert doctor("--client", "gemini").status("client") == "ok"
    entry["env"]["MEMPROVE_TOKEN_FILE"] = str(config.token_file)
    write_entry(workspace / ".gemini" / "settings.json", entry)
    assert doctor("--client", "gemini").status("client") == "fail"


# The environment each client starts the server with (issue 31 item 2): doctor --client
# judges the token, data directory and Workspace there, not in this shell's.

def token_only_in_the_shell(config, tmp_path):
    """The configuration directory without its token file; the token in a file elsewhere."""
    elsewhere = tmp_path / "shell-token"
    elsewhere.write_text(config.token + "\n")
    elsewhere.chmod(0o600)
    config.token_file.unlink()
    return elsewhere


@pytest.mark.parametrize("variable", ["MEMPROVE_TOKEN_FILE", "MEMPROVE_TOKEN"])
def test_a_token_gemini_drops_fails_and_names_the_config_dirs_token_file(
        doctor, daemon, config, doctor_pyz, workspace, tmp_path, variable):
    elsewhere = token_only_in_the_shell(config, tmp_path)
    shell = {variable: elsewhere if variable == "MEMPROVE_TOKEN_FILE" else config.token}
    # An entry as a user writes it by hand (or an older kit did): no reference to the token.
    entry = pyz_entry(doctor_pyz, ["mcp", "serve", "--config-dir", config.dir],
                      env={"MEMPROVE_CONFIG_DIR": str(config.dir)})
    write_entry(workspace / ".gemini" / "settings.json", entry)
    outcome = doctor("--client", "gemini", env=shell, json_mode=True)
    check = outcome["token"]
    assert (check["status"], check["code"]) == ("fail", "token_missing"), check
    assert "%s is set in this shell, but gemini does not pass it" % variable in check["detail"]
    private = "" if HOST_IS_WINDOWS else ", then: chmod 600 %s" % config.token_file  # no modes
    assert check["fix"] == "write the token into %s%s" % (config.token_file, private), check
    assert outcome.status("daemon") == "skip"
    # Claude Code passes its whole environment: the same shell is fine there.
    claude = doctor("--client", "claude-code", env=shell)
    assert claude.status("token") == "ok", claude.out
    assert claude.status("daemon") == "ok", claude.out


def test_gemini_entrys_reference_passes_the_token_file(doctor, daemon, config, doctor_pyz,
                                                        workspace, tmp_path):
    elsewhere = token_only_in_the_shell(config, tmp_path)
    entry = pyz_entry(doctor_pyz, ["mcp", "serve", "--config-dir", config.dir],
                      env={"MEMPROVE_CONFIG_DIR": str(config.dir),
                           "MEMPROVE_TOKEN_FILE": "$MEMPROVE_TOKEN_FILE"})
    write_entry(workspace / ".gemini" / "settings.json", entry)
    outcome = doctor("--client", "gemini", env={"MEMPROVE_TOKEN_FILE": elsewhere})
    assert outcome["token"]["detail"] == "from MEMPROVE_TOKEN_FILE (%s), well formed" % elsewhere
    assert [outcome.status(name) for name in ("token", "daemon", "client")] == ["ok"] * 3, \
        outcome.out


def test_a_data_dir_codexs_entry_does_not_pass_fails(doctor, daemon, config, doctor_pyz, home):
    (config.dir / "data-dir").unlink()
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text(codex_block(doctor_pyz, config.dir).replace(', "MEMPROVE_DATA_DIR"', ""))
    shell = {"MEMPROVE_DATA_DIR": config.data_dir}
    outcome = doctor("--client", "codex", env=shell, json_mode=True)
    assert (outcome.status("data_dir"), outcome["data_dir"]["code"]) == \
        ("fail", "data_dir_missing"), outcome["data_dir"]
    assert outcome.status("daemon") == "skip"
    # Named in env_vars, Codex passes it on.
    codex.write_text(codex_block(doctor_pyz, config.dir))
    outcome = doctor("--client", "codex", env=shell)
    assert outcome["data_dir"]["detail"] == "%s (from MEMPROVE_DATA_DIR)" % config.data_dir
    assert outcome.status("daemon") == "ok", outcome.out


def test_a_workspace_codexs_entry_does_not_pass_is_not_judged(doctor, daemon, config, doctor_pyz,
                                                              home, workspace, tmp_path):
    """MEMPROVE_WORKSPACE set in this shell, left out of the entry's env_vars: Codex's server
    finds its Workspace by its working directory, and doctor judges that one."""
    elsewhere = make_workspace(tmp_path / "elsewhere")
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text(codex_block(doctor_pyz, config.dir))
    shell = {"MEMPROVE_WORKSPACE": workspace}
    assert "MEMPROVE_WORKSPACE" not in codex.read_text()
    outcome = doctor("--client", "codex", env=shell, cwd=elsewhere)
    assert outcome["workspace"]["detail"].startswith(
        "%s (found by working directory)" % elsewhere.resolve()), outcome["workspace"]
    # Claude Code passes the shell's: the same shell finds the other Workspace.
    outcome = doctor("--client", "claude-code", env=shell, cwd=elsewhere)
    assert outcome["workspace"]["detail"].startswith(
        "%s (found by MEMPROVE_WORKSPACE)" % workspace.resolve()), outcome["workspace"]


def test_opencode_command_list(doctor, daemon, config, doctor_pyz, workspace):
    entry = {"type": "local", "command": pyz_words(doctor_pyz) + ["mcp", "serve", "--config-dir",
                                                                  str(config.dir)],
             "environment": {"MEMPROVE_CONFIG_DIR": str(config.dir)}, "enabled": True}
    write_entry(workspace / "opencode.json", entry, container="mcp")
    assert doctor("--client", "opencode").status("client") == "ok"
    entry["environment"]["MEMPROVE_TOKEN"] = config.token
    write_entry(workspace / "opencode.json", entry, container="mcp")
    assert doctor("--client", "opencode").status("client") == "fail"


def test_goose_yaml(doctor, daemon, config, doctor_pyz, home):
    goose = home / ".config" / "goose" / "config.yaml"
    goose.parent.mkdir(parents=True)
    block = ('extensions:\n  developer:\n    enabled: true\n  memprove:\n    name: memprove\n'
             '    type: stdio\n    cmd: "%s"\n    args:\n    - mcp\n    - serve\n    - --config-dir\n'
             '    - "%s"\n    envs:\n      MEMPROVE_CONFIG_DIR: "%s"\n%s    enabled: true\n    timeout: 300\n'
             'GOOSE_MODEL: x\n')
    goose.write_text(block % (doctor_pyz, config.dir, config.dir, ""))
    assert doctor("--client", "goose").status("client") == "ok"
    goose.write_text(block % (doctor_pyz, config.dir, config.dir,
                              "      MEMPROVE_TOKEN: %s\n" % config.token))
    assert doctor("--client", "goose").status("client") == "fail"


def test_continue_yaml_block_file(doctor, daemon, config, doctor_pyz, workspace):
    folder = workspace / ".continue" / "mcpServers"
    folder.mkdir(parents=True)
    (folder / "memprove.yaml").write_text(
        'name: memprove\nversion: 0.0.1\nschema: v1\nmcpServers:\n  - name: memprove\n'
        '    type: stdio\n    command: "%s"\n    args: ["mcp", "serve", "--config-dir", "%s"]\n'
        '    env:\n      MEMPROVE_CONFIG_DIR: "%s"\n' % (doctor_pyz, config.dir, config.dir))
    assert doctor("--client", "continue").status("client") == "ok"


# Valid TOML and YAML that a user writes by hand (issue 31 item 4): read with tomllib where
# the Python has it; where it has none, a layout the line scanner cannot read is said to be
# so, never given a verdict (another copy, no entry, a failure) it has not read.
HAND_WRITTEN_TOML = {
    "multi-line args": ('[mcp_servers.memprove]\ncommand = "{pyz}"\nargs = [\n  "mcp",\n'
                        '  "serve",\n  "--config-dir",\n  "{cfg}",\n]\n'
                        '[mcp_servers.memprove.env]\nMEMPROVE_CONFIG_DIR = "{cfg}"\n'),
    "inline table": ('[mcp_servers]\nmemprove = {{ command = "{pyz}", args = ["mcp", "serve", '
                     '"--config-dir", "{cfg}"], env = {{ MEMPROVE_CONFIG_DIR = "{cfg}" }} }}\n'),
    "dotted keys": ('mcp_servers.memprove.command = "{pyz}"\nmcp_servers.memprove.args = '
                    '["mcp", "serve", "--config-dir", "{cfg}"]\n'
                    'mcp_servers.memprove.env.MEMPROVE_CONFIG_DIR = "{cfg}"\n'),
    "literal command": ("[mcp_servers.memprove]\ncommand = '''{pyz}'''\nargs = ['mcp', 'serve', "
                        "'--config-dir', '{cfg}']\n[mcp_servers.memprove.env]\n"
                        "MEMPROVE_CONFIG_DIR = '{cfg}'\n"),
}


def said_unreadable(check):
    """The client check of an entry doctor cannot read: a warn that says so, no verdict."""
    assert check["status"] == "warn", check
    assert "cannot be read" in check["detail"], check
    for verdict in ("another copy", "no memprove entry", "runs this server"):
        assert verdict not in check["detail"], check


@pytest.mark.parametrize("layout", sorted(HAND_WRITTEN_TOML))
def test_hand_written_codex_toml(doctor, daemon, config, doctor_pyz, home, layout):
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text('model = "o4"\n\n' + HAND_WRITTEN_TOML[layout].format(
        pyz=doctor_pyz, cfg=config.dir) + '\n[other]\nx = 1\n')
    if sys.version_info >= (3, 11):          # tomllib reads it as Codex does
        check = doctor("--client", "codex")["client"]
        assert check["status"] == "ok", check
        assert check["detail"] == "the memprove entry in %s runs this server" % codex, check
    # A Python without tomllib cannot read it, and says so.
    without = require_python("3.8")
    outcome = doctor("--client", "codex", python=without)
    said_unreadable(outcome["client"])
    assert str(codex) in outcome["client"]["detail"]


HAND_WRITTEN_YAML = {
    "goose": (("home", GOOSE_FILE),
              'extensions:\n  developer:\n    enabled: true\n  memprove: {{name: memprove, '
              'type: stdio, cmd: "{pyz}", args: [mcp, serve, --config-dir, "{cfg}"], envs: '
              '{{MEMPROVE_CONFIG_DIR: "{cfg}"}}, enabled: true, timeout: 300}}\nGOOSE_MODEL: x\n'),
    "continue": (("root", ".continue/mcpServers/memprove.yaml"),
                 'name: memprove\nversion: 0.0.1\nschema: v1\nmcpServers:\n  - {{name: memprove, '
                 'type: stdio, command: "{pyz}", args: [mcp, serve, --config-dir, "{cfg}"], '
                 'env: {{MEMPROVE_CONFIG_DIR: "{cfg}"}}}}\n'),
}


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN_YAML))
def test_a_yaml_entry_in_flow_style_is_said_unreadable(doctor, daemon, config, doctor_pyz,
                                                       workspace, home, name):
    (base, relative), text = HAND_WRITTEN_YAML[name]
    path = (workspace if base == "root" else home) / relative
    path.parent.mkdir(parents=True)
    path.write_text(text.format(pyz=doctor_pyz, cfg=config.dir))
    outcome = doctor("--client", name)
    said_unreadable(outcome["client"])
    assert str(path) in outcome["client"]["detail"]


# Every client: print-config's entry, put where clients.md says, is what doctor finds.
CLIENT_FILE = {
    "claude-code": ("root", ".mcp.json"), "codex": ("home", ".codex/config.toml"),
    "gemini": ("root", ".gemini/settings.json"), "opencode": ("root", "opencode.json"),
    "cline": ("home", ".cline/data/settings/cline_mcp_settings.json"),
    "continue": ("home", ".continue/config.yaml"), "amp": ("root", ".amp/settings.json"),
    "cursor": ("root", ".cursor/mcp.json"), "vscode": ("root", ".vscode/mcp.json"),
    "windsurf": ("home", ".codeium/windsurf/mcp_config.json"),
    "zed": ("root", ".zed/settings.json"), "goose": ("home", GOOSE_FILE),
}


def with_token_key(text, token):
    """The same entry text with MEMPROVE_TOKEN set to the token in its environment."""
    if text.lstrip().startswith("{"):
        document = json.loads(text)
        entry = next(iter(document.values()))["memprove"]
        entry[next(key for key in ("env", "environment") if key in entry)]["MEMPROVE_TOKEN"] = token
        return json.dumps(document, indent=2)
    if text.startswith("[mcp_servers.memprove]"):
        return text + 'MEMPROVE_TOKEN = "%s"\n' % token       # the env table comes last
    changed = re.sub(r"(?m)^( +)(MEMPROVE_CONFIG_DIR: .*)$",
                     lambda m: '%s%s\n%sMEMPROVE_TOKEN: "%s"' % (m.group(1), m.group(2), m.group(1), token),
                     text)
    assert changed != text
    return changed


@pytest.mark.parametrize("name", sorted(CLIENT_FILE))
def test_every_clients_print_config_entry(doctor, daemon, config, doctor_pyz, make_env, base_env,
                                          workspace, home, name):
    text = print_config(doctor_pyz, make_env, base_env, workspace, "--client", name)
    base, relative = CLIENT_FILE[name]
    path = (workspace if base == "root" else home) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    args = [] if name == "claude-code" else ["--client", name]
    assert doctor(*args).status("client") == "warn"
    path.write_text(text)
    outcome = doctor(*args)
    assert outcome.status("client") == "ok", outcome.out
    assert str(path) in outcome["client"]["detail"]
    path.write_text(with_token_key(text, config.token))
    outcome = doctor(*args, json_mode=True)
    assert outcome.status("client") == "fail", outcome.out
    assert "MEMPROVE_TOKEN" in outcome["client"]["detail"]


# ---------------------------------------------------------------------------
# Exit statuses and usage errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--frobnicate"], ["--client", "no-such-client"], ["--client"],
                                  ["--workspace"], ["--config-dir"], ["--python"]])
def test_usage_error_exits_2(doctor_pyz, make_env, base_env, workspace, args):
    done = run_cli(sys.executable, doctor_pyz, ["mcp", "doctor"] + args, make_env(base_env), workspace)
    assert done.returncode == 2
    assert done.stdout == b""
    err = done.stderr.decode("utf-8")
    assert err.endswith("\n") and err.count("\n") == 1, err


def test_exit_statuses(doctor, daemon, config, claude_entry, workspace):
    assert doctor().code == 0
    (workspace / ".mcp.json").unlink()
    warned = doctor()
    assert warned.status("client") == "warn" and warned.code == 0
    daemon.revoke_token(config.token)
    assert doctor().code == 1


def test_token_nowhere_in_any_output(doctor, daemon, config, claude_entry, workspace, home):
    """The token in the environment, in the client entries, refused by the daemon: on
    neither stream, in either format (the `doctor` fixture checks each run)."""
    write_entry(workspace / ".mcp.json", entry_with_token(
        claude_entry["mcpServers"]["memprove"], "value under another name", config.token))
    (config.data_dir / "daemon.json").write_text(json.dumps(
        {"url": "http://user:%s@127.0.0.1:%d" % (config.token, daemon.port)}))
    for env in ({}, {"MEMPROVE_TOKEN": config.token}):
        for json_mode in (False, True):
            outcome = doctor(env=env, json_mode=json_mode)
            assert outcome.status("client") == "fail"
            assert outcome.status("daemon") == "fail"


# ---------------------------------------------------------------------------
# What a repository's or another party's files may cost (issue 18)
# ---------------------------------------------------------------------------
# doctor.md: the whole process finishes within MEMPROVE_TIMEOUT plus a second.  That is
# the spec's own bound, so these runs are given exactly that long.

PROMISE_TIMEOUT = 2


def within_its_promise(doctor, *args, **options):
    env = dict(options.pop("env", None) or {}, MEMPROVE_TIMEOUT=str(PROMISE_TIMEOUT))
    return doctor(*args, env=env, timeout=PROMISE_TIMEOUT + 1, **options)


LONG_CLIENT_FILES = {"codex": ("home", ".codex/config.toml"),
                     "continue": ("root", ".continue/mcpServers/memprove.yaml"),
                     "goose": ("home", GOOSE_FILE)}


def with_a_long_line(text, place, length=200000):
    """The entry's text with a comment line of `length` characters: inside the memprove
    block (indented under its first line) or before it."""
    lines = text.splitlines(True)
    if place == "before-the-block":
        return "#" + "x" * length + "\n" + text
    index = next(i for i, line in enumerate(lines) if "memprove" in line)
    indent = len(lines[index]) - len(lines[index].lstrip()) + 4
    lines.insert(index + 1, " " * indent + "# " + "x" * length + "\n")
    return "".join(lines)


@pytest.mark.parametrize("place", ["in-the-block", "before-the-block"])
@pytest.mark.parametrize("name", sorted(LONG_CLIENT_FILES))
def test_a_long_line_in_a_toml_or_yaml_client_file(doctor, daemon, doctor_pyz, make_env, base_env,
                                                   workspace, home, name, place):
    """§6 rule 16: the TOML and YAML client files are read in time linear in their size,
    lines over 4 KiB skipped (a 16,000-character line took 6 s, 32,000 over 10 s): with a
    200,000-character line, doctor keeps its promise (MEMPROVE_TIMEOUT plus a second) and
    finds the entry print-config wrote, as without the line."""
    text = print_config(doctor_pyz, make_env, base_env, workspace, "--client", name)
    base, relative = LONG_CLIENT_FILES[name]
    path = (workspace if base == "root" else home) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(with_a_long_line(text, place))
    outcome = within_its_promise(doctor, "--client", name)
    assert outcome.status("client") == "ok", outcome.out
    assert str(path) in outcome["client"]["detail"]


@pytest.mark.parametrize("name", sorted(LONG_CLIENT_FILES))
def test_many_lines_just_under_4_kib_cost_linear_time(doctor, daemon, doctor_pyz, make_env,
                                                      base_env, workspace, home, name):
    """Skipping lines over 4 KiB is not all: the lines that are read are read in linear
    time too.  Forty comment lines of 4,000 characters in the block (160 KB; each took
    0.7 s with the quadratic expressions): doctor keeps its promise."""
    text = print_config(doctor_pyz, make_env, base_env, workspace, "--client", name)
    for _ in range(40):
        text = with_a_long_line(text, "in-the-block", length=4000)
    base, relative = LONG_CLIENT_FILES[name]
    path = (workspace if base == "root" else home) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    outcome = within_its_promise(doctor, "--client", name)
    assert outcome.status("client") == "ok", outcome.out


TOKEN_COMMANDS = ["env MEMPROVE_TOKEN={token} python3", "MEMPROVE_TOKEN={token} python3",
                  "/usr/bin/env -S my_api_Token={token} python3"]


@pytest.mark.parametrize("doctors_token", ["none", "another", "the same"])
@pytest.mark.parametrize("command", TOKEN_COMMANDS, ids=["env", "assignment", "env -S"])
def test_a_token_in_the_command_fails_and_is_never_shown(doctor, daemon, config, claude_entry,
                                                         workspace, doctor_pyz, plant, command,
                                                         doctors_token):
    """doctor.md: a word of `command` that is a NAME=VALUE whose NAME holds TOKEN is a token,
    whatever token doctor has (none, another, or that one): the check fails with
    `token_in_client_config`, and its line names the file and the key, never the command,
    the arguments or the value (it printed the command whole, token and all)."""
    entry = json.loads(json.dumps(claude_entry["mcpServers"]["memprove"]))
    entry["command"] = command.format(token=config.token)
    entry["args"] = [str(doctor_pyz)] + entry["args"]
    write_entry(workspace / ".mcp.json", entry)
    env = {}
    if doctors_token == "none":
        config.token_file.unlink()
    elif doctors_token == "another":
        env["MEMPROVE_TOKEN"] = plant("tok-ANOTHER")
    for json_mode in (False, True):     # the `doctor` fixture checks the token is not shown
        outcome = doctor(env=env, json_mode=json_mode)
        check = outcome["client"]
        assert check["status"] == "fail", outcome.out
        detail = check["detail"]
        assert str(workspace.resolve() / ".mcp.json") in detail and \
            re.search(r"\bcommand\b", detail), detail
        for shown in (entry["command"], "python3", "serve", str(doctor_pyz), str(config.dir)):
            assert shown not in detail, (shown, detail)
    assert check["code"] == "token_in_client_config", check


# -- what held and must keep holding ----------------------------------------------------

FIFO_FILES = {"claude-code": ("root", ".mcp.json"), "codex": ("home", ".codex/config.toml"),
              "continue": ("root", ".continue/mcpServers/memprove.yaml"),
              "goose": ("home", GOOSE_FILE)}


@pytest.mark.parametrize("name", sorted(FIFO_FILES))
def test_a_fifo_as_a_client_file_never_blocks(doctor, daemon, workspace, home, name):
    """A FIFO where a client's configuration belongs (nobody ever writes to it): doctor
    keeps its promise and reports no entry there."""
    base, relative = FIFO_FILES[name]
    path = (workspace if base == "root" else home) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(str(path))
    args = [] if name == "claude-code" else ["--client", name]
    outcome = within_its_promise(doctor, *args)
    assert outcome.status("client") in ("warn", "fail"), outcome.out


def test_doctor_never_runs_the_entrys_command(doctor, daemon, claude_entry, workspace, tmp_path):
    """The entry's command (and, for an interpreter entry, its first argument) is looked at,
    never run."""
    marker = tmp_path / "it ran"
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\ntouch '%s'\n" % marker)
    os.chmod(str(script), 0o755)
    entry = json.loads(json.dumps(claude_entry["mcpServers"]["memprove"]))
    for command, args in ((str(script), entry["args"]),
                          (sys.executable, [str(script)] + entry["args"])):
        write_entry(workspace / ".mcp.json", dict(entry, command=command, args=args))
        assert doctor().status("client") == "warn"
        assert not marker.exists()


def _trickle_forever(conn):
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{")
    try:
        for _ in range(100000):
            conn.sendall(b" ")
            time.sleep(0.05)                     # a daemon that answers, but never finishes
    except OSError:
        pass


def _enormous(conn):
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1099511627776\r\n\r\n")
    try:
        while True:
            conn.sendall(b" " * 65536)
    except OSError:
        pass


@pytest.mark.parametrize("answer, codes", [(_trickle_forever, ("daemon_timeout",)),
                                           (_enormous, ("daemon_error", "daemon_timeout"))],
                         ids=["trickling", "enormous"])
def test_a_trickling_or_enormous_answer_is_cut_in_time(doctor, config, answer, codes):
    fake = RawDaemon(answer)
    try:
        fake.write_daemon_json(config.data_dir)
        outcome = within_its_promise(doctor, json_mode=True)
    finally:
        fake.close()
    check = outcome["daemon"]
    assert (check["status"], check["code"] in codes) == ("fail", True), check


# ---------------------------------------------------------------------------
# A kit a client installed: who can change it, what its entry loads, what reading it
# costs, what its fixes run (contract.md §6 rules 25, 28 and 29; issue 32)
# ---------------------------------------------------------------------------

@pytest.fixture
def installed(doctor_pyz, make_env, base_env, workspace, home, private_place, config):
    """installed(client) -> (the folder the client runs the kit's server from, its server
    file, the .pyz it names) of a kit written for this configuration directory into a
    folder no one else can change, then installed in `client` as the pinned clients record
    it (harness.INSTALLED)."""
    def install(client):
        kit = private_place / "kit"
        done = run_cli(sys.executable, doctor_pyz, ["mcp", "plugin", kit, "--config-dir",
                                                    config.dir], make_env(base_env), workspace)
        assert done.returncode == 0, done.stderr
        INSTALLED[client](home, kit)
        return installed_kit_paths(client, home, kit)
    return install


def kit_check(doctor, client, **options):
    return doctor("--client", client, json_mode=True, **options)["client"]


def others_can_write(mode):
    def change(path):
        os.chmod(str(path), mode)
    return change


def another_group_can_write(mode):
    """`mode` with the group of another uid: a group that is not the user's private one
    (contract.md §6 rule 36: 0775 of the user's own private group is the user's alone)."""
    def change(path):
        needs_root("give a kit's file to another uid's group")
        os.chown(str(path), -1, OTHER_UID)
        os.chmod(str(path), mode)
    return change


def another_users(path):
    needs_root("give a kit's file to another uid")
    os.chown(str(path), OTHER_UID, OTHER_UID)


# What is changed (0: the kit's folder, 1: its server file, 2: the .pyz), and how.
KIT_CHANGES = {"its folder others can write": (0, others_can_write(0o777)),
               "its folder another group can write": (0, another_group_can_write(0o775)),
               "its server file another group can write": (1, another_group_can_write(0o664)),
               "its .pyz others can write": (2, others_can_write(0o666)),
               "its .pyz another user's": (2, another_users)}


@pytest.mark.parametrize("change", sorted(KIT_CHANGES))
@pytest.mark.parametrize("client", sorted(INSTALLED))
def test_rule25_doctor_fails_a_kit_others_can_change(doctor, installed, client, change):
    """The client runs the kit's entry in place (or its copy) at every session: a kit whose
    folder or any file of it another user can change runs their code as the user.  The
    `client` check fails naming what others can change, with a fix.  (Today: `ok ... runs
    this server`.)"""
    paths = installed(client)
    which, make = KIT_CHANGES[change]
    make(paths[which])
    check = kit_check(doctor, client)
    assert check["status"] == "fail", check
    assert str(paths[which]) in check["detail"] or str(paths[which].parent) in check["detail"], \
        check


@pytest.mark.parametrize("client", sorted(INSTALLED))
def test_rule36_a_kit_folder_of_the_users_private_group_is_no_change_by_others(doctor, installed,
                                                                            client):
    """0775 root:root, as root: root's primary group names no other member, so the kit's
    folder is root's alone and the `client` check is ok (rule 36, as Debian's umask 002
    makes every folder of a user).  (Before: fail, "can be written by group or others".)"""
    needs_root("judge root's private group")
    import grp
    import pwd
    if pwd.getpwuid(0).pw_gid != 0 or grp.getgrgid(0).gr_mem not in ([], ["root"]):
        pytest.skip("root's primary group here is not gid 0 with no other member")
    folder = installed(client)[0]
    os.chown(str(folder), 0, 0)
    os.chmod(str(folder), 0o775)
    check = kit_check(doctor, client)
    assert check["status"] == "ok", check


# The variables that make the interpreter or the loader run other code (the draft's list,
# DYLD_* by two of its names).
LOADER_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                    "PYTHONINSPECT", "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES",
                    "DYLD_LIBRARY_PATH")


@pytest.mark.parametrize("client, variable",
                         [("claude-code", name) for name in LOADER_VARIABLES] +
                         [("codex", "PYTHONPATH"), ("gemini", "PYTHONPATH")])
def test_rule25_doctor_fails_a_kit_entry_whose_env_loads_other_code(doctor, installed, tmp_path,
                                                                    client, variable):
    """Another user's kit (or a repository's) keeps the server's command and sets
    PYTHONPATH (LD_PRELOAD, ...) to their code in the entry's `env`: the `client` check
    fails naming the variable.  (Today: `ok ... runs this server`.)"""
    _, server_file, _ = installed(client)
    entry = json.loads(server_file.read_text(encoding="utf-8"))
    entry["mcpServers"]["memprove"].setdefault("env", {})[variable] = str(tmp_path / "theirs")
    server_file.write_text(json.dumps(entry), encoding="utf-8")
    check = kit_check(doctor, client)
    assert check["status"] == "fail" and variable in check["detail"], check


@pytest.mark.parametrize("client", sorted(INSTALLED))
def test_rule28_a_fifo_as_the_kits_pyz_never_blocks(doctor, installed, client):
    """The .pyz a kit's entry names is a FIFO nobody writes to: doctor opens it without
    blocking, keeps its promise (MEMPROVE_TIMEOUT plus a second) and says it is not a
    regular file.  (Today doctor blocks in open() until it is killed.)"""
    _, _, program = installed(client)
    program.unlink()
    os.mkfifo(str(program))
    check = within_its_promise(doctor, "--client", client, json_mode=True)["client"]
    assert check["status"] == "fail" and "regular" in check["detail"], check


ADDRESS_SPACE = 512 * 1024 * 1024


def limited_address_space():
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.parametrize("client", sorted(INSTALLED))
def test_rule28_a_kits_pyz_linked_to_dev_zero_costs_bounded_memory(
        doctor_pyz, installed, make_env, base_env, workspace, client):
    """The .pyz is a link to /dev/zero: doctor reads only a regular file, at most a fixed
    size, so it finishes within 512 MiB of address space (a limit the test sets, so that
    today's reading until memory runs out fails at once rather than taking the machine's),
    and says the file is not regular.  (Today: MemoryError, `the check failed
    unexpectedly`.)"""
    _, _, program = installed(client)
    program.unlink()
    program.symlink_to("/dev/zero")
    done = subprocess.run([sys.executable, str(doctor_pyz), "mcp", "doctor", "--client", client,
                           "--json"], env=make_env(base_env), cwd=str(workspace),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT,
                          preexec_fn=limited_address_space)
    assert done.stderr == b"", done.stderr[-2000:]
    check = parse_json(done.stdout.decode("utf-8"))["client"]
    assert check["status"] == "fail" and check["code"] != "internal_error", check
    assert "regular" in check["detail"], check


def test_rule28_a_long_gemini_rule_costs_linear_time(doctor, installed, home):
    """One rule of 4 MiB (`*a` two million times) in Gemini's extension-enablement.json.
    Matching it is linear in its length (times the path's); today building the matcher is
    quadratic (2 MiB: about 15 s on the review's machine, 28 s on a 2-CPU test VM; 4 MiB
    four times that).  This is the one place where a time bound is the failure itself:
    30 s is far above what linear time takes (well under a second) and far below today's
    two minutes, so the bound is generous on a loaded machine and still fails today."""
    installed("gemini")
    gemini_rules(home, ["!/nowhere/" + "*a" * (2 * 1024 * 1024)])
    check = kit_check(doctor, "gemini", timeout=30)
    assert check["status"] == "ok", check


@pytest.mark.parametrize("control", ["\t", "\n", "\x1b", "\u2028"],
                         ids=["tab", "newline", "escape", "u2028"])
def test_rule29_doctors_fixes_never_run_a_command_from_a_path(doctor, installed, home, tmp_path,
                                                              control):
    """A configuration directory and a Workspace named `...<control>$(touch pwned)`, the
    kit disabled there for Gemini: each fix line doctor prints (the `mkdir` of the
    configuration directory, the `cd ROOT && gemini extensions enable ...`), pasted into
    sh, runs no `touch`.  (Today a path holding a control is printed JSON-quoted, in
    double quotes, where sh runs `$(…)`.)"""
    payload = "%s$(touch pwned)" % control
    project = make_workspace(tmp_path / ("project" + payload))
    installed("gemini")
    gemini_rules(home, ["!%s/*" % project])
    outcome = doctor("--client", "gemini", "--config-dir", str(tmp_path / ("config" + payload)),
                     cwd=project)
    fixes = [check["fix"] for check in outcome.checks.values() if check["fix"]]
    assert outcome["client"]["status"] == "warn" and outcome["config_dir"]["status"] == "warn", \
        outcome.out
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    pasted_in_sh(fixes, scratch)
    assert [str(path) for path in tmp_path.rglob("pwned")] == []


def test_rule29_powershell_fixes_name_paths_literally():
    """The control of PowerShell's half: `-Path` expands wildcards (`[1]` in a folder's name
    names another folder) in every cmdlet but New-Item, which has no `-LiteralPath` and whose
    `-Path` takes none (its documentation, 2.0 to 7.6).  Every fix that takes a path gives it
    as `-LiteralPath`, or to New-Item's `-Path`.  (This held already; the kit's `Invoke-Item`
    did not: test_plugin.py.)"""
    words = {"path": "'C:\\kits [1]\\memprove'", "target": "'C:\\kits [1]\\x'",
             "value": "'v'", "name": "NAME"}
    for name, template in sorted(mp.SHELLS["powershell"].items()):
        if isinstance(template, str) and "{path}" in template:
            line = template.format(**words)
            assert "-LiteralPath " in line or line.startswith("New-Item "), (name, line)
