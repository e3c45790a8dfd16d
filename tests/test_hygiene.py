"""The repository's own hygiene: what the README, CONTRIBUTING.md and docs/ tell a person to
run is what CI runs and works as written (the quick start, the lines to paste), their examples
name private directories only (contract.md §6 rule 19), and CONTRIBUTING.md names every test
file."""

import json
import os
import re
import shlex
import shutil
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


def assert_set_up(out, home, token):
    """What the Quick start block leaves in `home`, its output `out`: doctor finds
    configuration directory, token, data directory and daemon ok; the token is the one
    pasted, private; the kit holds the copy of the .pyz that stays, whose path it returns."""
    for check in ("config_dir", "token", "data_dir", "daemon"):
        assert re.search(r"^ok +%s " % check, out, re.M), (check, out)
    pasted = home / ".config" / "memprove" / "token"
    assert pasted.read_text() == token + "\n"
    assert os.stat(str(pasted)).st_mode & 0o077 == 0
    kept = home / ".local" / "share" / "memprove" / "memprove_mcp.pyz"
    assert (home / ".local" / "share" / "memprove" / "kit" / "memprove" /
            "memprove_mcp.pyz").read_bytes() == kept.read_bytes()
    return kept


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
    if shutil.which("sha256sum") is None:        # macOS has shasum only: its line, as the comment says
        script = script.replace("sha256sum -c SHA256SUMS", "shasum -a 256 -c SHA256SUMS", 1)
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
    assert_set_up(out, home, config.token)
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


# Issue 41: the workflows GitHub runs.  ci.yml runs the README's test command on Linux and
# macOS (Windows has its own form of it); every action is pinned to a full commit SHA, its
# release named in a comment; the token only reads, but in the one job that publishes; every
# job has a time limit.  (.ci/run lints both with actionlint.)
WORKFLOWS = REPO / ".github" / "workflows"
PINNED_USES = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def workflow(name):
    import yaml      # pyproject.toml's test extra
    loaded = yaml.safe_load((WORKFLOWS / name).read_text("utf-8"))
    loaded["on"] = loaded.pop(True, loaded.get("on"))      # YAML 1.1 reads a bare `on` as true
    return loaded


def test_ci_yml_runs_the_readme_test_command_on_linux_and_macos():
    ci = workflow("ci.yml")
    assert set(ci["on"]) == {"push", "pull_request"}
    job = ci["jobs"]["tests"]
    assert job["runs-on"] == "${{ matrix.os }}"
    assert set(job["strategy"]["matrix"]["os"]) == {"ubuntu-latest", "macos-latest", "windows-latest"}
    command = readme_test_command()
    steps = [step for step in job["steps"] if step.get("run", "").strip() == command]
    assert [step.get("if") for step in steps] == ["runner.os != 'Windows'"], steps
    windows = [step["run"] for step in job["steps"] if step.get("if") == "runner.os == 'Windows'"]
    assert any(r".venv\Scripts\python -m pytest -q" in run for run in windows), windows
    assert workflow("release.yml")["on"] == {"push": {"tags": ["v*"]}}


def test_workflows_pin_every_action_and_write_only_where_they_publish():
    for name in ("ci.yml", "release.yml"):
        text = (WORKFLOWS / name).read_text("utf-8")
        uses = [line for line in text.splitlines() if re.match(r"^\s*(?:- )?uses:", line)]
        assert uses, name
        assert [line for line in uses if not PINNED_USES.match(line)] == [], name
        loaded = workflow(name)
        assert loaded["permissions"] == {"contents": "read"}, name
        for job_name, job in loaded["jobs"].items():
            assert isinstance(job.get("timeout-minutes"), int), (name, job_name)
            granted = job.get("permissions", {})
            if (name, job_name) == ("release.yml", "publish"):
                assert granted == {"contents": "write", "id-token": "write",
                                   "attestations": "write"}
            else:
                assert granted == {}, (name, job_name)
    release = (WORKFLOWS / "release.yml").read_text("utf-8")
    assert '--repo "${{ github.repository }}"' in release


# Issue 41, item 6: the README's air-gapped path, pasted as a user on the workstation would:
# in the folder holding the carried memprove_mcp.pyz and SHA256SUMS, the Quick start block from
# its second line (its first builds in a clone), and for an upgrade the block that checks a new
# pair, copies it over the old one and writes the kit again.  It all runs in a network namespace
# that has only loopback, where the reference daemon listens too.
import pytest  # noqa: E402  (the fixture below; the tests above need none)

SUM_CHECK = "sha256sum -c SHA256SUMS"
MACOS_SUM_CHECK = re.compile(r"macOS: `(shasum -a 256 -c SHA256SUMS)`")
DATA_DIR_PLACEHOLDER = "/path/to/the/daemons/data-dir"


def readme_blocks(*markers):
    """The README's example blocks holding every marker."""
    return [block for block in example_blocks((REPO / "README.md").read_text("utf-8"))
            if all(marker in block for marker in markers)]


def carried_pair(folder, data, sums=None):
    """folder/memprove_mcp.pyz holding data, and folder/SHA256SUMS: `sums`, else the one line
    build_zipapp.py writes for data.  Returns data's SHA-256."""
    import hashlib
    folder.mkdir()
    (folder / "memprove_mcp.pyz").write_bytes(bytes(data))
    digest = hashlib.sha256(bytes(data)).hexdigest()
    (folder / "SHA256SUMS").write_text(sums or "%s  memprove_mcp.pyz\n" % digest)
    return digest


def one_byte_changed(data):
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x01
    return bytes(changed)


@pytest.fixture
def offline(config, tmp_path):
    """run(script, cwd, home, stdin=b"") -> (status, stdout, stderr) of `sh -ec script` in a
    network namespace with only loopback (up), with HOME=home and python3 first on PATH; the
    reference daemon, on config's data directory, listens inside it.  Needs root on Linux
    (unshare -n): skipped elsewhere, saying so (failed when strict)."""
    from hardening_support import skip_or_fail
    from harness import started_daemon
    from interop.agents import LoopbackNamespace
    space = LoopbackNamespace()
    if not space.prefix:
        space.close()
        skip_or_fail("the README's air-gapped lines run in a network namespace with only "
                     "loopback: that needs Linux, root (unshare -n), nsenter and ip")
    bin_dir = tmp_path / "offline-bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    daemon = started_daemon(config, space.inside)

    def run(script, cwd, home, stdin=b"", errexit=True):
        env = {"PATH": "%s:%s" % (bin_dir, os.environ.get("PATH", os.defpath)),
               "HOME": str(home), "LANG": "C.UTF-8"}
        done = subprocess.run(space.prefix + ["sh", "-ec" if errexit else "-c", script],
                              cwd=str(cwd), env=env,
                              input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=300)
        return (done.returncode, done.stdout.decode("utf-8", "replace"),
                done.stderr.decode("utf-8", "replace"))

    run.daemon = daemon
    try:
        yield run
    finally:
        daemon.stop()
        space.close()


def test_the_readme_air_gapped_lines_run_offline(pyz, server_version, config, offline,
                                                 tmp_path, private_place):
    """On the workstation, with no network: the carried pair (the suite's built archive, its
    SHA256SUMS line as the build writes it) passes `sha256sum -c` and the macOS line; the
    archive is put in place, `--version` names its SHA-256, the token is pasted on standard
    input, the data-dir line names the daemon's real folder, doctor finds token, data
    directory and daemon ok (its `python` line naming the SHA-256), and `mcp plugin` writes
    the kit and prints the install commands.  A changed byte stops the block at the check
    (sh -e), with nothing put in place, under either checker.  The upgrade block then takes a
    new build (another VERSION) only once its sum checks, and writes the kit again from it."""
    readme = " ".join((REPO / "README.md").read_text("utf-8").split())
    assert "the Quick start block from its second line" in readme
    # The connected machine's lines: the sum and the origin, both checked there.
    fetched = readme_blocks("gh attestation verify")
    assert len(fetched) == 1, fetched
    assert "gh release download" in fetched[0] and SUM_CHECK in fetched[0]
    assert "gh attestation verify memprove_mcp.pyz --repo OWNER/NAME" in fetched[0]

    # The workstation's lines: the Quick start block without its build line.
    quick = readme_blocks("build_zipapp.py", "mcp plugin")
    assert len(quick) == 1, quick
    build_line, lines = quick[0].split("\n", 1)
    assert build_line.startswith("python3 build_zipapp.py"), build_line
    check_line = lines.split("\n", 1)[0]
    assert check_line.startswith(SUM_CHECK), check_line
    assert lines.count(DATA_DIR_PLACEHOLDER) == 1
    script = lines.replace(DATA_DIR_PLACEHOLDER, shlex.quote(str(config.data_dir)))
    # The check guards the copy on the same line (the attack on issue 41: pasted without
    # `sh -e`, a check on a line of its own let the next line copy a changed archive).
    assert check_line.startswith(SUM_CHECK + " && ") and " cp memprove_mcp.pyz " in check_line
    macos = MACOS_SUM_CHECK.search(readme)
    assert macos, "the README names no macOS form of the sum check"
    macos_script = script.replace(SUM_CHECK, macos.group(1), 1)
    archive = pyz.read_bytes()
    if (pyz.parent / "SHA256SUMS").is_file():          # built here: the build's own line
        built_sums = (pyz.parent / "SHA256SUMS").read_text()
    else:                                              # MEMPROVE_TEST_PYZ: a copy alone
        built_sums = None
    carried = tmp_path / "carried"
    digest = carried_pair(carried, archive, built_sums)
    assert (carried / "SHA256SUMS").read_text() == "%s  memprove_mcp.pyz\n" % digest

    # Offline indeed: the namespace has loopback alone.
    status, out, err = offline("cat /proc/net/dev", carried, private_place)
    assert status == 0, err
    assert [line.split(":")[0].strip() for line in out.splitlines()[2:]] == ["lo"], out

    # The macOS line on the carried pair, then a changed byte under either checker.
    status, out, err = offline(macos.group(1), carried, private_place)
    assert (status, out) == (0, "memprove_mcp.pyz: OK\n"), (out, err)
    for name, changed_script in (("sha256sum", script), ("shasum", macos_script)):
        tampered, home = tmp_path / ("tampered-" + name), private_place / ("home-" + name)
        home.mkdir()
        carried_pair(tampered, one_byte_changed(archive), (carried / "SHA256SUMS").read_text())
        status, out, err = offline(changed_script, tampered, home,
                                   (config.token + "\n").encode())
        assert status != 0 and "memprove_mcp.pyz: FAILED" in out, (name, out, err)
        assert "memprove-mcp" not in out, (name, out)          # stopped at the check
        assert list(home.iterdir()) == [], (name, list(home.rglob("*")))
        # Pasted into a shell that goes on after a failure, no line runs a changed archive.
        status, out, err = offline(changed_script, tampered, home, (config.token + "\n").encode(),
                                   errexit=False)
        assert "memprove_mcp.pyz: FAILED" in out and "memprove-mcp" not in out, (name, out, err)
        assert [path for path in home.rglob("*.pyz")] == [], (name, list(home.rglob("*")))
        shutil.rmtree(str(home))
        home.mkdir()

    # The whole block on the carried pair.
    home = private_place / "home"
    home.mkdir()
    status, out, err = offline(script, carried, home, (config.token + "\n").encode())
    assert status == 0, (out, err)
    assert out.startswith("memprove_mcp.pyz: OK\n"), out
    kept = home / ".local" / "share" / "memprove" / "memprove_mcp.pyz"
    assert kept.read_bytes() == archive
    assert re.search(r"^memprove-mcp %s \([0-9a-f]{12}\)\nsha256 %s  \S*%s$" % (
        re.escape(server_version), digest, re.escape("/.local/share/memprove/memprove_mcp.pyz")),
        out, re.M), out
    assert re.search(r"^ok +python .*\b%s\b" % digest, out, re.M), out
    assert assert_set_up(out, home, config.token) == kept
    kit = home / ".local" / "share" / "memprove" / "kit"
    for install in ("claude plugin marketplace add", "codex plugin marketplace add",
                    "gemini extensions install"):
        assert install + " " + str(kit) in out, (install, out)
    ops = [op["op"] for op in offline.daemon.ops]
    assert ops and set(ops) == {"listTasks"}, ops          # doctor's alone: it got there

    # The upgrade: a new build (the next patch VERSION), carried the same way.
    upgrade = readme_blocks(SUM_CHECK + " && cp ")
    assert len(upgrade) == 1, upgrade
    assert "mcp plugin ~/.local/share/memprove/kit" in upgrade[0], upgrade[0]
    source = (REPO / "memprove_mcp.py").read_text("utf-8")
    version = re.search(r'^VERSION = "(\d+)\.(\d+)\.(\d+)"$', source, re.M)
    assert version, "memprove_mcp.py holds no VERSION = \"X.Y.Z\" line"
    newer = "%s.%s.%d" % (version.group(1), version.group(2), int(version.group(3)) + 1)
    (tmp_path / "next").mkdir()
    (tmp_path / "next" / "memprove_mcp.py").write_text(
        source.replace(version.group(0), 'VERSION = "%s"' % newer), "utf-8")
    built = tmp_path / "built" / "memprove_mcp.pyz"
    done = subprocess.run([sys.executable, str(REPO / "build_zipapp.py"), "--no-bytecode",
                           "--source", str(tmp_path / "next" / "memprove_mcp.py"),
                           "--output", str(built)], cwd=str(REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)
    assert done.returncode == 0, done.stderr
    new_archive = built.read_bytes()
    new_sums = (built.parent / "SHA256SUMS").read_text()

    changed = tmp_path / "next-tampered"
    carried_pair(changed, one_byte_changed(new_archive), new_sums)
    status, out, err = offline(upgrade[0], changed, home)
    assert status != 0 and "memprove_mcp.pyz: FAILED" in out, (out, err)
    assert kept.read_bytes() == archive
    assert (kit / "memprove" / "memprove_mcp.pyz").read_bytes() == archive

    arrived = tmp_path / "next-carried"
    new_digest = carried_pair(arrived, new_archive, new_sums)
    assert new_sums == "%s  memprove_mcp.pyz\n" % new_digest
    status, out, err = offline(upgrade[0], arrived, home)
    assert status == 0, (out, err)
    assert out.startswith("memprove_mcp.pyz: OK\n"), out
    assert kept.read_bytes() == new_archive
    assert (kit / "memprove" / "memprove_mcp.pyz").read_bytes() == new_archive
    assert "The memprove kit, version %s" % newer in out, out
    assert "To update after writing the kit again:" in out, out
    assert "claude plugin update memprove@memprove" in out, out
    status, out, err = offline("python3 ~/.local/share/memprove/memprove_mcp.pyz --version",
                               arrived, home)
    assert status == 0, err
    assert re.match(r"memprove-mcp %s \([0-9a-f]{12}\)\nsha256 %s  " % (
        re.escape(newer), new_digest), out), out


def test_the_readme_powershell_sum_check_copies_only_a_matching_archive(pyz, tmp_path):
    """The README's PowerShell statement ("On Windows") comparing Get-FileHash with
    SHA256SUMS's first word copies the carried archive into $env:LOCALAPPDATA\\memprove and
    says OK, and once a byte changed copies nothing and says FAILED (the attack on issue 41:
    a check whose result only prints let the next line copy anyway).  It runs where
    PowerShell is installed (GitHub's runners have it on all three systems); skipped here
    otherwise, saying so."""
    import shutil
    lines = [line for block in example_blocks((REPO / "README.md").read_text("utf-8"))
             for line in block.splitlines() if "Get-FileHash" in block]
    first = [index for index, line in enumerate(lines) if "Get-FileHash" in line]
    assert len(first) == 1, lines
    last = next(index for index in range(first[0], len(lines)) if lines[index].startswith("} else"))
    statement = "\n".join(lines[first[0]:last + 1])
    assert "Copy-Item" in statement and "Write-Error" in statement, statement
    shell = shutil.which("pwsh") or shutil.which("powershell")
    if shell is None:
        pytest.skip("PowerShell (pwsh) is not installed here: the README's Get-FileHash statement "
                    "is run where it is")
    archive = pyz.read_bytes()
    carried, changed = tmp_path / "carried", tmp_path / "changed"
    carried_pair(carried, archive)
    carried_pair(changed, one_byte_changed(archive), (carried / "SHA256SUMS").read_text())
    for folder, matches in ((changed, False), (carried, True)):
        local = tmp_path / ("local-" + folder.name)
        local.mkdir()
        env = dict(os.environ, LOCALAPPDATA=str(local))
        done = subprocess.run([shell, "-NoProfile", "-NonInteractive", "-Command", statement],
                              cwd=str(folder), env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        out = done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")
        copied = local / "memprove" / "memprove_mcp.pyz"
        if matches:
            assert done.returncode == 0 and "memprove_mcp.pyz: OK" in out, (folder, out)
            assert copied.read_bytes() == archive
        else:
            assert "memprove_mcp.pyz: FAILED" in out, (folder, out)
            assert not copied.exists()
