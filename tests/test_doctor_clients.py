"""`mcp doctor` reading a client's entry from the client's own files, whatever they hold:
lines of 5,000 to 300,000 characters in a TOML or YAML file (contract.md §6 rule 16: doctor
finds the entry within MEMPROVE_TIMEOUT plus a second), and a repository's `.mcp.json` whose
entry holds line breaks and controls (§6 rule 23: one line per value, never a forged status
line), fixed cases and fuzzed ones, against the built .pyz.
"""

import json
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest

import memprove_mcp
from hardening_support import FUZZ_EXAMPLES, LINE_BREAKERS, NO_SHRINK, hypothesis_or_fail, report
from harness import HOST_IS_WINDOWS, clean_env, make_workspace, run_cli

hypothesis_or_fail()
from hypothesis import given, settings, strategies as st  # noqa: E402


# -- long lines in a client's TOML or YAML file (doctor; contract.md §6 rule 16) --------

LONG_LINE_FILES = {"codex": ("home", ".codex/config.toml"),
                   "continue": ("root", ".continue/mcpServers/memprove.yaml"),
                   "goose": ("home", "AppData/Roaming/Block/goose/config/config.yaml"
                             if HOST_IS_WINDOWS else ".config/goose/config.yaml")}


PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7e)


def still_toml(text):
    """Whether `text` is TOML for a parser (the test's Python has one, tomllib, as doctor
    running under it does), or, with no parser, whether the line scanner reads it."""
    try:
        import tomllib
    except ImportError:
        return True
    if not memprove_mcp.toml_within_limits(text):   # past them doctor's line scanner reads it
        return True
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def test_client_file_long_line_fuzz(pyz, make_env, home, workspace, config, daemon, planted):
    """print-config's entry for codex, continue or goose with lines of 5,000 to 300,000
    printable characters put anywhere (comments, keys, `[` and `-` and quotes, a token
    assignment): lines over 4 KiB are skipped, so doctor finds the entry as print-config
    wrote it (`ok`), within its promise of MEMPROVE_TIMEOUT plus a second."""
    env = make_env({"MEMPROVE_CONFIG_DIR": config.dir, "MEMPROVE_TIMEOUT": "2",
                    "XDG_CACHE_HOME": home / ".cache"})
    texts = {}
    for name in LONG_LINE_FILES:
        done = run_cli(sys.executable, pyz, ["mcp", "print-config", "--client", name], env,
                       workspace)
        assert done.returncode == 0, done.stderr
        texts[name] = done.stdout.decode("utf-8")
    tally = Counter()

    @settings(max_examples=max(10, FUZZ_EXAMPLES // 10), **NO_SHRINK)
    @given(name=st.sampled_from(sorted(LONG_LINE_FILES)),
           insertions=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 12),
                                         st.text(PRINTABLE, min_size=1, max_size=40)
                                         | st.sampled_from(["x", "# ", "a=", "- ", "[", '"',
                                                            "MEMPROVE_TOKEN=" + config.token]),
                                         st.integers(5000, 300000)),
                               min_size=1, max_size=3))
    def run(name, insertions):
        lines = texts[name].splitlines(True)
        for position, indent, unit, length in insertions:
            text = (unit * (length // len(unit) + 1))[:length]
            lines.insert(position % (len(lines) + 1), " " * indent + text + "\n")
        base, relative = LONG_LINE_FILES[name]
        path = (workspace if base == "root" else home) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes("".join(lines).encode("ascii"))
        try:
            done = run_cli(sys.executable, pyz, ["mcp", "doctor", "--json", "--client", name],
                           env, workspace, timeout=3)
        except subprocess.TimeoutExpired:
            raise AssertionError("doctor --client %s took over MEMPROVE_TIMEOUT plus a second "
                                 "with lines of %s characters" % (name, [i[3] for i in insertions]))
        finally:
            path.unlink()
        assert done.stderr == b"" and config.token.encode() not in done.stdout, done.stderr
        checks = dict((c["name"], c) for c in json.loads(done.stdout.decode())["checks"])
        if name == "codex" and not still_toml("".join(lines)):
            # Codex reads config.toml whole, with a TOML parser, as doctor does where the
            # Python has one: a line that breaks the file is said so, never misread.
            assert checks["client"]["status"] == "warn" and \
                "cannot be read" in checks["client"]["detail"], (insertions[:1], checks["client"])
            tally["codex, no longer TOML"] += 1
            return
        assert checks["client"]["status"] == "ok", (name, insertions[:1], checks["client"])
        tally[name] += 1

    run()
    report("client_file_long_line_fuzz", runs=dict(tally))


# -- what tomllib is given (contract.md §6 rule 34) -----------------------------------------

def dotted(parts):
    return ".".join(["a"] * parts)


def test_rule34_tomllib_is_given_only_a_file_within_its_measured_limits():
    """tomllib is quadratic in a key's dotted parts and in a header's depth times the
    statements under it: it reads a file of at most 64 KiB whose lines hold at most 32
    dots that can be in a key (before the line's last `=`, or on a header line) and the
    file 4,096; anything else goes to the line scanner.  Dots in values do not count,
    and lines are split on "\n" alone (tomllib takes U+2028 inside a quoted key part)."""
    within = memprove_mcp.toml_within_limits
    codex = ('[mcp_servers.memprove]\ncommand = "/usr/bin/python3"\n'
             '[hooks.state."memprove@memprove:hooks/hooks.json:session_start:0:0"]\n'
             'trusted_hash = "sha256:00"\nenv = { NO_PROXY = "%s" }\n'
             % ",".join("h%d.corp.example.com" % i for i in range(40)))
    assert within(codex)
    assert within("[%s]\n" % dotted(33)) and not within("[%s]\n" % dotted(34))
    assert within("%s = 1\n" % dotted(33)) and not within("%s = 1\n" % dotted(34))
    assert within('k = "%s"\n' % ("x." * 1000))               # a value's dots
    lines = "".join("%s = 1\n" % ("k%d." % n + dotted(32)) for n in range(129))   # 32 dots each
    assert within(lines[:-(len(lines) - lines.rfind("k128"))]) and not within(lines)
    evasion = ".".join(("a." * 30) + '"\u2028"' for _ in range(250)) + "=1\n"
    assert not within(evasion)
    assert not within("# " + "x" * (64 * 1024))


def test_rule34_doctor_reads_a_hostile_codex_config_within_its_second(
        pyz, make_env, home, workspace, config, daemon):
    """A config.toml within doctor's size limit holding one dotted key of 16,000 parts
    (32 KiB: 2 to 7 s in tomllib) beside print-config's entry: the line scanner reads it
    (the long line skipped), doctor finds the entry, `ok`, within MEMPROVE_TIMEOUT plus a
    second, as every client file (§6 rule 28).  (Before: tomllib read it whole, past the
    bound.)"""
    env = make_env({"MEMPROVE_CONFIG_DIR": config.dir, "MEMPROVE_TIMEOUT": "2",
                    "XDG_CACHE_HOME": home / ".cache"})
    done = run_cli(sys.executable, pyz, ["mcp", "print-config", "--client", "codex"], env,
                   workspace)
    assert done.returncode == 0, done.stderr
    path = home / ".codex" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    for hostile in ("%s = 1\n" % dotted(16000), "[%s]\n%s\n" % (dotted(2000), "k.a = 1\n" * 3000)):
        path.write_text(done.stdout.decode("utf-8") + hostile, "utf-8")
        try:
            checked = run_cli(sys.executable, pyz, ["mcp", "doctor", "--json", "--client",
                                                    "codex"], env, workspace, timeout=3)
        except subprocess.TimeoutExpired:
            raise AssertionError("doctor --client codex took over MEMPROVE_TIMEOUT plus a "
                                 "second on %r..." % hostile[:40])
        checks = dict((c["name"], c) for c in json.loads(checked.stdout.decode())["checks"])
        assert checks["client"]["status"] == "ok", checks["client"]


# -- a repository's client entry holding controls, as doctor shows it (§6 rule 23) --------

DOCTOR_LINE = re.compile(r"(ok  |warn|fail|skip)  [a-z_]+ +\S|      fix: \S")


ENTRY_TEXT = st.text(st.one_of(st.sampled_from(LINE_BREAKERS + "\x00\x07\x08\x1a\u0085"),
                               st.characters(min_codepoint=0x20, max_codepoint=0x2030)),
                     min_size=1, max_size=40)


def test_doctor_client_entry_fuzz(pyz, make_env, home, tmp_path):
    """A project's `.mcp.json` whose memprove entry's command, arguments and configuration
    directory hold line breaks, ESC, NEL, CSI, U+2028 and any other text: every line
    doctor prints is a check's or its fix, no control reaches standard output, and
    `--json` holds none raw either."""
    project = make_workspace(tmp_path / "project")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    env = make_env({"MEMPROVE_CONFIG_DIR": config_dir})
    tally = Counter()

    @settings(max_examples=max(10, FUZZ_EXAMPLES // 5), **NO_SHRINK)
    @given(command=ENTRY_TEXT, args=st.lists(ENTRY_TEXT, max_size=4), config=ENTRY_TEXT)
    def run(command, args, config):
        entry = {"command": command, "args": args + ["--config-dir", config],
                 "env": {"MEMPROVE_CONFIG_DIR": config}}
        (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"memprove": entry}}),
                                           encoding="utf-8")
        for json_output in (False, True):
            done = run_cli(sys.executable, pyz,
                           ["mcp", "doctor"] + (["--json"] if json_output else []), env, project)
            text = done.stdout.decode("utf-8")
            raw = [char for char in text if (char < " " and char != "\n") or
                   "\x7f" <= char <= "\x9f" or char in "\u2028\u2029"]
            assert raw == [], (entry, text)
            if json_output:
                json.loads(text)
            else:
                assert all(DOCTOR_LINE.match(line) for line in text.splitlines()), (entry, text)
        tally["entries"] += 1

    run()
    report("doctor_client_entry_fuzz", **tally)


# =============================================================================
# Rule 23: doctor prints one line per value
# =============================================================================

HOSTILE = "/bin/sh\nok    client      the memprove entry runs this server\x1b[8m"


STATUS_LINE = re.compile(r"(ok  |warn|fail|skip)  [a-z_]+ +\S")


def hostile_project(tmp_path):
    project = tmp_path / "repo\u2028ok    daemon"
    project.mkdir()
    (project / ".git").mkdir()
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"memprove": {
        "command": HOSTILE, "args": ["mcp\x85ok    token", "serve\u2029", "--config-dir",
                                     "/x\rok    data_dir"],
        "env": {"MEMPROVE_CONFIG_DIR": "/x\x1b]0;title\x07"}}}}), encoding="utf-8")
    return project


def raw_controls(text):
    return [char for char in text if (char < " " and char != "\n") or "\x7f" <= char <= "\x9f"
            or char in "\u2028\u2029"]


@pytest.mark.parametrize("command", ["missing", "present"])
def test_rule23_a_repositorys_mcp_json_cannot_write_a_doctor_line(pyz, newest_python, home,
                                                                  tmp_path, command):
    """Line breaks, ESC, NEL, U+2028/U+2029 in the entry's command and arguments, in the
    project's path and in the configuration directory's: every line doctor prints is a
    check's or its fix, and no control reaches the terminal; `--json` neither."""
    project = hostile_project(tmp_path)
    config_dir = tmp_path / "config\nok    config_dir  forged"
    config_dir.mkdir()
    if command == "present":                           # the command exists: checked further
        shutil.copyfile("/bin/sh", str(project / "sh\nok    client   forged"))
        entry = json.loads((project / ".mcp.json").read_text("utf-8"))
        entry["mcpServers"]["memprove"]["command"] = str(project / "sh\nok    client   forged")
        (project / ".mcp.json").write_text(json.dumps(entry), encoding="utf-8")
    env = clean_env(home, {"MEMPROVE_CONFIG_DIR": str(config_dir),
                           "MEMPROVE_DATA_DIR": str(tmp_path / "data\u2028fail  forged"),
                           "MEMPROVE_TOKEN_FILE": str(tmp_path / "token\x85file")})
    done = run_cli(newest_python, pyz, ["mcp", "doctor"], env, project)
    text = done.stdout.decode("utf-8")
    as_json = run_cli(newest_python, pyz, ["mcp", "doctor", "--json"], env, project)
    # The start directory from the environment, and from --workspace, named with a line break.
    elsewhere = tmp_path / "elsewhere\nok    workspace  forged"
    elsewhere.mkdir()
    for extra, args in (({"CLAUDE_PROJECT_DIR": str(elsewhere)}, []),
                        ({}, ["--workspace", str(elsewhere / "missing\r")])):
        again = run_cli(newest_python, pyz, ["mcp", "doctor"] + args, dict(env, **extra), project)
        shown = again.stdout.decode("utf-8")
        assert raw_controls(shown) == [] and all(
            STATUS_LINE.match(line) or line.startswith("      fix: ")
            for line in shown.splitlines()), shown
    checks = json.loads(as_json.stdout.decode("utf-8"))["checks"]
    lines = text.splitlines()
    assert raw_controls(text) == [], text
    assert [line[:4].strip() for line in lines if STATUS_LINE.match(line)] == \
        [check["status"] for check in checks], text
    fixes = [check for check in checks if check["fix"] is not None]
    assert len(lines) == len(checks) + len(fixes), text
    assert all(STATUS_LINE.match(line) or line.startswith("      fix: ") for line in lines), text
    client = [check for check in checks if check["name"] == "client"][0]
    assert client["status"] in ("warn", "fail"), client
    assert raw_controls(as_json.stdout.decode("utf-8")) == []
