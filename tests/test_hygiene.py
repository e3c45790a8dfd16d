"""The repository's own hygiene: what the README, CONTRIBUTING.md and docs/ tell a person to
run is what CI runs and works as written (the quick start, the lines to paste), their examples
name private directories only (contract.md §6 rule 19), and CONTRIBUTING.md names every test
file."""

import json
import os
import re
import shlex
import subprocess
import sys

from harness import REPO


# §6 rule 19: a data directory in a folder every user can write is one another user can make
# first, with a daemon.json of theirs in it.  The README's quick start once named
# /tmp/memprove-data; every data directory or token file an example names is a private one.
SHARED_FOLDERS = ("/tmp/", "/var/tmp/", "/dev/shm/", "$TMPDIR", "${TMPDIR")


NAMED_PATH = re.compile(r"(?:--data-dir[= ]+|MEMPROVE_DATA_DIR=|MEMPROVE_TOKEN_FILE=)['\"]?(\S+)")


def example_lines(text):
    """The lines of a Markdown text's fenced code blocks."""
    inside, lines = False, []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            lines.append(line)
    return lines


def test_rule19_the_examples_use_private_directories():
    """The README's, CONTRIBUTING.md's and docs/'s examples, and ledgerd's run-by-hand lines."""
    documents = [REPO / "README.md", REPO / "CONTRIBUTING.md"] + sorted((REPO / "docs").glob("*.md"))
    lines = [line for path in documents for line in example_lines(path.read_text("utf-8"))]
    lines += (REPO / "tests" / "ledgerd.py").read_text("utf-8").splitlines()
    named = [(match.group(1), line) for line in lines for match in NAMED_PATH.finditer(line)]
    assert named, "no example names a data directory any more: update this test"
    shared = [line for path, line in named if path.startswith(SHARED_FOLDERS)]
    assert shared == [], "an example puts a data directory or token file in a folder every " \
        "user can write:\n" + "\n".join(shared)


# Issue 31: the README's test command works on a distro's own python3 ("externally managed",
# PEP 668) because it installs into a virtual environment; CI runs that very command.
def readme_test_command():
    """The README's one example line that runs pytest, its comment dropped."""
    found = [line.split("  #")[0].strip()
             for line in example_lines((REPO / "README.md").read_text("utf-8"))
             if "-m pytest" in line]
    assert len(found) == 1, found
    return found[0]


def test_ci_and_contributing_run_the_readme_test_command():
    command = readme_test_command()
    assert command.startswith("python3 -m venv .venv && "), command
    assert "-m pip install -e '.[test]'" in command and " python3 -m pip" not in command
    ci = (REPO / ".ci" / "run").read_text("utf-8").splitlines()
    assert [line for line in ci if line in (command, command + " || exit 1")], \
        ".ci/run does not run the README's test command"
    contributing = example_lines((REPO / "CONTRIBUTING.md").read_text("utf-8"))
    assert command in [line.split("  #")[0].strip() for line in contributing]
    ignored = (REPO / ".gitignore").read_text("utf-8").splitlines()
    assert "/.venv/" in ignored


def example_blocks(text):
    """The fenced code blocks of a Markdown text, each as one string."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_readme_by_hand_lines_speak_mcp(pyz, config, daemon, workspace, make_env):
    """The README's lines to paste (issue 31, item 8), run by sh with the built .pyz in place
    of dist/'s: server/discover's answer, then the `tasks` tool's, from the daemon."""
    found = [block for block in example_blocks((REPO / "README.md").read_text("utf-8"))
             if "server/discover" in block]
    assert len(found) == 1, found
    assert found[0].count("python3 dist/memprove_mcp.pyz mcp serve") == 1, found[0]
    script = found[0].replace("python3 dist/memprove_mcp.pyz", "%s %s" % (
        shlex.quote(sys.executable), shlex.quote(str(pyz))))
    done = subprocess.run(["sh", "-c", script], env=make_env(config.env()), cwd=str(workspace),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    assert [answer["id"] for answer in answers] == [1, 2], answers
    assert "2026-07-28" in answers[0]["result"]["supportedVersions"]
    tasks = answers[1]["result"]
    assert tasks.get("isError") is not True, tasks
    assert tasks["structuredContent"]["tasks"] == []
    assert [op["op"] for op in daemon.ops] == ["listTasks"]


def test_the_readme_stays_short_and_names_no_dist_in_an_entry():
    """Issue 31: at most 400 lines, for users first; an entry written from an example must
    not name the clone's dist/, which the next build replaces."""
    text = (REPO / "README.md").read_text("utf-8")
    assert len(text.splitlines()) <= 400
    writes_an_entry = ("print-config", "mcp plugin", "claude mcp add", "mcp serve --config-dir")
    named = [line for line in example_lines(text)
             if any(word in line for word in writes_an_entry) and "dist/" in line]
    assert named == [], named


def test_the_readme_quick_start_runs_as_written(config, daemon, tmp_path, private_place):
    """The Quick start block run by `sh -e` in a copy of the clone (the build must not write
    into this one) with a fresh HOME (in a private place: a kit under /tmp is refused, §6
    rule 25): the token pasted on standard input, the data-dir line naming a real daemon's
    folder. doctor finds token, data directory and daemon ok; the kit is written where the
    block says, holding the copy of the .pyz that stays."""
    found = [block for block in example_blocks((REPO / "README.md").read_text("utf-8"))
             if "build_zipapp.py" in block and "mcp plugin" in block]
    assert len(found) == 1, found
    placeholder = "/path/to/the/daemons/data-dir"
    assert found[0].count(placeholder) == 1
    script = found[0].replace(placeholder, shlex.quote(str(config.data_dir)))
    clone = tmp_path / "clone"
    (clone / "pyz").mkdir(parents=True)
    for name in ("build_zipapp.py", "memprove_mcp.py", "pyz/__main__.py", "pyz/bytecode_cache.py"):
        (clone / name).write_bytes((REPO / name).read_bytes())
    home, bin_dir = private_place / "home", tmp_path / "bin"
    home.mkdir()
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    env = {"PATH": "%s:%s" % (bin_dir, os.environ.get("PATH", os.defpath)), "HOME": str(home),
           "LANG": "C.UTF-8"}
    done = subprocess.run(["sh", "-ec", script], cwd=str(clone), env=env,
                          input=(config.token + "\n").encode(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)
    out = done.stdout.decode("utf-8", "replace")
    assert done.returncode == 0, (out, done.stderr.decode("utf-8", "replace"))
    for check in ("config_dir", "token", "data_dir", "daemon"):
        assert re.search(r"^ok +%s " % check, out, re.M), (check, out)
    token = home / ".config" / "memprove" / "token"
    assert token.read_text() == config.token + "\n"
    assert os.stat(str(token)).st_mode & 0o077 == 0
    kept = home / ".local" / "share" / "memprove" / "memprove_mcp.pyz"
    assert (home / ".local" / "share" / "memprove" / "kit" / "memprove" /
            "memprove_mcp.pyz").read_bytes() == kept.read_bytes()
    assert "claude plugin install memprove@memprove" in out
    assert [op["op"] for op in daemon.ops if op["op"] != "listTasks"] == []


def test_contributing_names_every_test_file():
    """CONTRIBUTING.md's "Where the tests are" names every tests/**/test_*.py by its path,
    and every test file CONTRIBUTING.md names exists (issue 34, item 4)."""
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = re.search(r"^## Where the tests are\n(.*?)^## ", text, re.S | re.M)
    assert section, "CONTRIBUTING.md has no section \"Where the tests are\""
    listed = set(re.findall(r"`(tests/(?:[\w-]+/)*test_\w+\.py)`", section.group(1)))
    present = {path.relative_to(REPO).as_posix() for path in (REPO / "tests").rglob("test_*.py")}
    assert sorted(present - listed) == [], "test files CONTRIBUTING.md does not name"
    named = set(re.findall(r"\btests/(?:[\w-]+/)*test_\w+\.py\b", text))
    assert sorted(named - present) == [], "test files CONTRIBUTING.md names that do not exist"
