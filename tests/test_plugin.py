"""`mcp plugin DIR` (docs/plugin.md) through the built .pyz: the kit's files, their entries,
the version, the folders it refuses and replaces, the commands it prints, per platform.

That the clients themselves install the kit and reach the server from it is shown by the
interop tier (tests/interop/test_plugin_kit.py); here the kit is read as files.
"""

import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

from harness import (HOST_IS_WINDOWS, INSTALLED, REPO, SAFETY_TIMEOUT, clean_env,
                     gemini_installed, gemini_rules, pasted_in_sh, run_cli, server_path, snapshot,
                     stderr_line_ending)
from hardening_support import OTHER_UID, needs_root

sys.path.insert(0, str(REPO))
import memprove_mcp as mp  # noqa: E402  (kit_commands, given a platform)

KIT_FILES = {
    ".claude-plugin/marketplace.json",
    "memprove/.claude-plugin/plugin.json",
    "memprove/.mcp.json",
    "memprove/.codex-plugin/plugin.json",
    "memprove/.codex-plugin/mcp.json",
    "memprove/hooks/hooks.json",
    "gemini-extension.json",
    "GEMINI.md",
    "hooks/hooks.json",
    "memprove/memprove_mcp.pyz",
    "memprove/README.md",
    "memprove.mcpb",
}
# The server entry of each client's file: where it is, the keys down to it, and the
# root variable through which it names the .pyz (None: by its path in the kit, for Codex,
# whose plugin servers have no such variable).
SERVER_ENTRIES = {
    "claude-code": ("memprove/.mcp.json", ("mcpServers", "memprove"), "${CLAUDE_PLUGIN_ROOT}/"),
    "codex": ("memprove/.codex-plugin/mcp.json", ("mcpServers", "memprove"), None),
    "gemini": ("gemini-extension.json", ("mcpServers", "memprove"),
               "${extensionPath}${/}memprove${/}"),
}
VERSIONED = ("memprove/.claude-plugin/plugin.json", "memprove/.codex-plugin/plugin.json",
             "gemini-extension.json")
HEADINGS = ("Claude Code:", "Codex CLI:", "Gemini CLI:", "Claude Desktop:",
            "To update after writing the kit again:", "To remove it (then delete the folder):")


def write_kit(python, pyz, folder, env, cwd, *options):
    return run_cli(python, pyz, ["mcp", "plugin", folder] + list(options), env, cwd)


def kit_files(folder):
    return sorted(str(path.relative_to(folder)).replace(os.sep, "/")
                  for path in folder.rglob("*") if path.is_file())


def read_json(folder, name):
    return json.loads((folder / name).read_text(encoding="utf-8"))


def bundle(folder):
    with zipfile.ZipFile(str(folder / "memprove.mcpb")) as archive:
        return dict((info.filename, (info, archive.read(info))) for info in archive.infolist())


def blocks(stdout):
    """{heading: [command, ...]} of the printed commands, and the lines before them."""
    found, current, preface = {}, None, []
    for line in stdout.splitlines():
        if line in HEADINGS:
            current = found.setdefault(line, [])
        elif current is not None and line.startswith("  "):
            current.append(line[2:])
        elif current is None:
            preface.append(line)
        else:
            raise AssertionError("a line outside any block: %r" % line)
    return found, preface


@pytest.fixture
def tmp_path(private_place):
    """Each test's folder, private: a kit is refused where another user could change it,
    as under /tmp, where pytest's own folders are (contract.md §6 rule 25)."""
    return private_place


@pytest.fixture
def kit_config(tmp_path):
    directory = tmp_path / "config"
    directory.mkdir()
    return directory


# -- the files ---------------------------------------------------------------------

def test_the_kit_holds_exactly_the_files_of_plugin_md(pyz, server_python, make_env, tmp_path,
                                                     kit_config):
    folder = tmp_path / "kit"
    (kit_config / "token").write_text("a-token\n")
    done = write_kit(server_python, pyz, folder, make_env(), tmp_path,
                     "--config-dir", kit_config)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    assert kit_files(folder) == sorted(KIT_FILES)
    assert (folder / "memprove" / "memprove_mcp.pyz").read_bytes() == pyz.read_bytes()
    assert sorted(bundle(folder)) == ["manifest.json", "memprove_mcp.pyz"]
    assert bundle(folder)["memprove_mcp.pyz"][1] == pyz.read_bytes()
    # Nothing of the writing is left beside the kit.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config", "home", "kit"]


def test_a_kit_for_a_configuration_directory_without_a_token_says_where_it_goes(
        pyz, newest_python, make_env, tmp_path, kit_config):
    """Issue 31 item 2: Gemini CLI passes its servers no variable whose name holds TOKEN, and
    Codex only those its entry names: the token file in the configuration directory is the one
    place every client's server finds it.  A kit written for a configuration directory without
    one is written, and standard error says so in one line, naming the file.  (It said
    nothing, and the kit's server had no token under Gemini.)"""
    done = write_kit(newest_python, pyz, tmp_path / "kit", make_env(), tmp_path,
                     "--config-dir", kit_config)
    assert done.returncode == 0, done.stderr
    line = done.stderr.decode("utf-8")
    assert line.count("\n") == 1 and str(kit_config / "token") in line, line
    assert "Gemini" in line, line


def test_every_entry_names_this_interpreter_and_the_pyz_through_the_clients_root(
        pyz, server_python, make_env, tmp_path, kit_config):
    folder = tmp_path / "kit"
    env = make_env()
    assert write_kit(server_python, pyz, folder, env, tmp_path, "--config-dir", kit_config,
                     "--workspace", tmp_path).returncode == 0
    python = interpreter(server_python, env)
    config_dir = server_path(kit_config, server_python)
    tail = ["mcp", "serve", "--config-dir", config_dir, "--workspace",
            server_path(tmp_path, server_python)]
    in_kit = os.path.join(server_path(folder, server_python), "memprove", "memprove_mcp.pyz")
    for client, (name, keys, root) in SERVER_ENTRIES.items():
        entry = read_json(folder, name)
        for key in keys:
            entry = entry[key]
        assert entry["command"] == python, client
        assert os.path.isabs(entry["command"]) or re.match(r"[A-Za-z]:\\", entry["command"])
        assert entry["args"] == [root + "memprove_mcp.pyz" if root else in_kit] + tail, client
        assert entry["env"] == {"MEMPROVE_CONFIG_DIR": config_dir}, client
        assert "cwd" not in entry, client   # the server finds the Workspace from where it starts
    # Codex hands a server only the variables its entry lists: print-config's list.
    codex = read_json(folder, SERVER_ENTRIES["codex"][0])["mcpServers"]["memprove"]
    assert codex["env_vars"] == ["MEMPROVE_TOKEN", "MEMPROVE_TOKEN_FILE", "MEMPROVE_DATA_DIR",
                                 "MEMPROVE_WORKSPACE", "MEMPROVE_TIMEOUT", "MEMPROVE_AGENT_NAME",
                                 "MEMPROVE_AGENT_ROLE", "MEMPROVE_PARENT_SESSION",
                                 "MEMPROVE_MCP_LOG"]
    assert read_json(folder, "memprove/.codex-plugin/plugin.json")["mcpServers"] == \
        "./.codex-plugin/mcp.json"
    manifest = json.loads(bundle(folder)["manifest.json"][1].decode("utf-8"))
    mcp_config = manifest["server"]["mcp_config"]
    assert mcp_config["command"] == python
    assert mcp_config["args"] == ["${__dirname}/memprove_mcp.pyz"] + tail
    assert mcp_config["env"] == {"MEMPROVE_CONFIG_DIR": config_dir}
    assert manifest["server"]["entry_point"] == "memprove_mcp.pyz"


def interpreter(python, env):
    import subprocess
    done = subprocess.run([str(python), "-c", "import os, sys; print(os.path.abspath(sys.executable))"],
                          env=env, stdout=subprocess.PIPE, timeout=60, cwd="/tmp")
    return done.stdout.decode().strip()


def test_the_kit_holds_no_token_no_data_directory_and_no_value_from_the_environment(
        pyz, newest_python, make_env, tmp_path, kit_config, plant):
    token, data_dir, token_file, other = (plant("TOKEN"), plant("DATA"), plant("TOKENFILE"),
                                          plant("WORKSPACE"))
    env = make_env({"MEMPROVE_TOKEN": token, "MEMPROVE_DATA_DIR": "/tmp/" + data_dir,
                    "MEMPROVE_TOKEN_FILE": "/tmp/" + token_file, "MEMPROVE_WORKSPACE": "/tmp/" + other,
                    "MEMPROVE_AGENT_NAME": plant("AGENT")})
    folder = tmp_path / "kit"
    done = write_kit(newest_python, pyz, folder, env, tmp_path, "--config-dir", kit_config)
    assert done.returncode == 0, done.stderr
    everything = b"".join(path.read_bytes() for path in folder.rglob("*") if path.is_file())
    everything += b"".join(data for _, data in bundle(folder).values())
    everything += done.stdout + done.stderr
    for value in (token, data_dir, token_file, other):
        assert value.encode() not in everything


def test_the_version_follows_the_archives_bytes(pyz, newest_python, make_env, tmp_path,
                                                kit_config, server_version):
    folder = tmp_path / "kit"
    assert write_kit(newest_python, pyz, folder, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    # The archive's version, then a digest of the files that do not name it.
    version = read_json(folder, VERSIONED[0])["version"]
    assert re.match(r"%s\+%s\.[0-9a-f]{8}\Z" % (
        re.escape(server_version), hashlib.sha256(pyz.read_bytes()).hexdigest()[:12]), version)
    for name in VERSIONED:
        assert read_json(folder, name)["version"] == version, name
    assert read_json(folder, ".claude-plugin/marketplace.json")["plugins"][0]["version"] == version
    assert json.loads(bundle(folder)["manifest.json"][1].decode())["version"] == version
    # Another archive (one byte more), another version.
    other = tmp_path / "other.pyz"
    other.write_bytes(pyz.read_bytes() + b"\0")
    again = tmp_path / "again"
    assert write_kit(newest_python, other, again, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    assert read_json(again, VERSIONED[0])["version"] != version
    # The same archive with another configuration directory: its hook and entries
    # change, and so does the version.
    other_config = tmp_path / "other-config"
    other_config.mkdir()
    assert write_kit(newest_python, pyz, folder, make_env(), tmp_path,
                     "--config-dir", other_config).returncode == 0
    assert read_json(folder, VERSIONED[0])["version"] != version


def test_the_bundle_is_the_same_zip_every_time(pyz, newest_python, make_env, tmp_path,
                                               kit_config):
    made = []
    for _ in range(2):                   # the same kit written twice into one folder
        assert write_kit(newest_python, pyz, tmp_path / "one", make_env(), tmp_path,
                         "--config-dir", kit_config).returncode == 0
        made.append((tmp_path / "one" / "memprove.mcpb").read_bytes())
    assert made[0] == made[1]
    for info, _ in bundle(tmp_path / "one").values():
        assert info.date_time == (1980, 1, 1, 0, 0, 0)
        assert info.compress_type == zipfile.ZIP_STORED
        assert info.external_attr == 0o644 << 16


# -- the folder ----------------------------------------------------------------------

def test_an_empty_folder_or_an_earlier_kit_is_replaced_whole(pyz, newest_python, make_env,
                                                              tmp_path, kit_config):
    folder = tmp_path / "kit"
    folder.mkdir()
    assert write_kit(newest_python, pyz, folder, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    (folder / "memprove" / "memprove_mcp.pyz").write_bytes(b"an older archive")
    (folder / "memprove" / "hooks" / "hooks.json").unlink()     # a kit from before the hook
    done = write_kit(newest_python, pyz, folder, make_env(), tmp_path, "--config-dir", kit_config)
    assert done.returncode == 0, done.stderr
    assert kit_files(folder) == sorted(KIT_FILES)
    assert (folder / "memprove" / "memprove_mcp.pyz").read_bytes() == pyz.read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config", "home", "kit"]


@pytest.mark.parametrize("what", ["a file", "another folder", "a file in place of DIR",
                                  "a marketplace of another name"])
def test_a_folder_that_is_neither_new_empty_nor_a_kit_is_refused_and_nothing_written(
        pyz, newest_python, make_env, tmp_path, kit_config, what):
    folder = tmp_path / "kit"
    if what == "a file in place of DIR":
        folder.write_text("mine")
    else:
        folder.mkdir()
        if what == "a file":
            (folder / "notes.txt").write_text("mine")
        elif what == "another folder":
            (folder / "src").mkdir()
        else:
            (folder / ".claude-plugin").mkdir()
            (folder / ".claude-plugin" / "marketplace.json").write_text('{"name": "tools"}')
    before = snapshot(tmp_path)
    done = write_kit(newest_python, pyz, folder, make_env(), tmp_path, "--config-dir", kit_config)
    assert done.returncode == 1
    assert done.stdout == b""
    assert done.stderr.count(b"\n") == 1 and done.stderr.startswith(b"memprove-mcp: ")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("value, marker, label", [("cfg-${HOME}", "${", "Claude Code"),
                                                  ("cfg-$HOME", "$", "Gemini CLI")])
def test_a_path_a_client_would_expand_is_refused(pyz, newest_python, make_env, tmp_path, value,
                                                 marker, label):
    """The refusal names the path, what in it is expanded, and the first client that would
    expand it by its label (issue 39: it once named `<memprove_mcp.Client object at 0x…>`)."""
    before = snapshot(tmp_path)
    done = write_kit(newest_python, pyz, tmp_path / "kit", make_env(), tmp_path,
                     "--config-dir", tmp_path / value)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr == (
        "memprove-mcp: %s holds %s, which %s would expand in its configuration; use a path "
        "without it." % (tmp_path / value, marker, label)).encode() + stderr_line_ending(newest_python)
    assert snapshot(tmp_path) == before


def test_run_from_source_it_says_it_copies_the_pyz(newest_python, make_env, tmp_path, kit_config):
    done = run_cli(newest_python, REPO / "memprove_mcp.py",
                   ["mcp", "plugin", tmp_path / "kit", "--config-dir", kit_config],
                   make_env(), tmp_path)
    assert done.returncode == 1 and done.stdout == b""
    assert b".pyz" in done.stderr and done.stderr.count(b"\n") == 1
    assert not (tmp_path / "kit").exists()


@pytest.mark.parametrize("args", [["mcp", "plugin"], ["mcp", "plugin", "a", "b"],
                                  ["mcp", "plugin", "kit", "--python"],
                                  ["mcp", "plugin", "kit", "--client", "codex"]])
def test_usage_errors(pyz, newest_python, make_env, tmp_path, args):
    done = run_cli(newest_python, pyz, args, make_env(), tmp_path)
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.count(b"\n") == 1
    assert not (tmp_path / "kit").exists()


# -- standard output -----------------------------------------------------------------

def test_standard_output_gives_each_clients_commands_for_this_shell(
        pyz, newest_python, make_env, tmp_path, kit_config):
    folder = tmp_path / "my kits" / "memprove kit"        # spaces: quoted as sh quotes
    folder.parent.mkdir()
    done = write_kit(newest_python, pyz, folder, make_env(), tmp_path, "--config-dir", kit_config)
    assert done.returncode == 0, done.stderr
    found, preface = blocks(done.stdout.decode("utf-8"))
    quoted = "'%s'" % folder
    assert found == {
        "Claude Code:": ["claude plugin marketplace add " + quoted,
                         "claude plugin install memprove@memprove"],
        "Codex CLI:": ["codex plugin marketplace add " + quoted,
                       "codex plugin add memprove@memprove"],
        "Gemini CLI:": ["gemini extensions install '%s' --consent" % folder],
        # No Claude Desktop block: it runs on macOS and Windows only.
        "To update after writing the kit again:": ["claude plugin update memprove@memprove",
                                                   "codex plugin add memprove@memprove",
                                                   "gemini extensions update memprove"],
        "To remove it (then delete the folder):": [
            "claude plugin uninstall memprove@memprove", "claude plugin marketplace remove memprove",
            "codex plugin remove memprove@memprove", "codex plugin marketplace remove memprove",
            "gemini extensions uninstall memprove"],
    }
    assert any("in place" in line and "keep" in line for line in preface)
    assert any("Gemini" in line and "answer y" in line for line in preface)
    # The kit's README carries the same commands.
    readme = (folder / "memprove" / "README.md").read_text(encoding="utf-8")
    assert done.stdout.decode("utf-8") in readme


def test_windows_python_writes_the_kit_and_powershell_commands(pyz, windows_python, make_env,
                                                               tmp_path, kit_config):
    folder = tmp_path / "my kit"
    env = make_env()
    done = write_kit(windows_python, pyz, folder, env, tmp_path, "--config-dir", kit_config)
    assert done.returncode == 0, done.stderr
    found, _ = blocks(done.stdout.decode("utf-8"))
    windows_folder = server_path(folder, windows_python)
    assert found["Claude Code:"][0] == "claude plugin marketplace add '%s'" % windows_folder
    assert found["Claude Desktop:"] == ["Invoke-Item -LiteralPath '%s\\memprove.mcpb'" %
                                        windows_folder]
    entry = read_json(folder, "memprove/.mcp.json")["mcpServers"]["memprove"]
    assert entry["command"].lower().endswith("python.exe"), entry
    assert entry["args"][0] == "${CLAUDE_PLUGIN_ROOT}/memprove_mcp.pyz"


def test_macos_prints_claude_desktops_command_and_linux_none():
    # No Mac here: the platform is given to the function that applies its rule.
    darwin, _ = blocks(mp.kit_commands("/Users/ana/memprove kit", "0.1.0+x", "darwin"))
    assert darwin["Claude Desktop:"] == ["open '/Users/ana/memprove kit/memprove.mcpb'"]
    linux, _ = blocks(mp.kit_commands("/home/ana/kit", "0.1.0+x", "linux"))
    assert "Claude Desktop:" not in linux and "Claude Code:" in linux


# -- doctor finds what a client installed from a kit ------------------------------------
# Each client's record of an installed kit, as the pinned clients write it, is
# harness.INSTALLED (docs/plugin.md, "doctor"); the interop tier checks doctor against the
# real clients.

def doctor_client(python, pyz, client, env, cwd, kit_config):
    done = run_cli(python, pyz, ["mcp", "doctor", "--client", client, "--json",
                                 "--config-dir", kit_config], env, cwd)
    return dict((check["name"], check) for check in json.loads(done.stdout)["checks"])["client"]


@pytest.mark.parametrize("client", sorted(INSTALLED))
def test_doctor_finds_the_kit_a_client_installed(pyz, newest_python, make_env, home, tmp_path,
                                                 kit_config, client):
    kit = tmp_path / "kit"
    assert write_kit(newest_python, pyz, kit, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    INSTALLED[client](home, kit)
    check = doctor_client(newest_python, pyz, client, make_env(), tmp_path, kit_config)
    assert check["status"] == "ok", check
    assert "(from a plugin kit)" in check["detail"], check
    assert "version %s" % archive_version(pyz) in check["detail"], check


def archive_version(pyz):
    """The version of the archive itself, which doctor names for the server that runs."""
    import memprove_mcp
    return "%s+%s" % (memprove_mcp.VERSION, hashlib.sha256(pyz.read_bytes()).hexdigest()[:12])


def test_doctor_names_the_version_codex_will_run_after_the_kit_is_written_again(
        pyz, newest_python, make_env, home, tmp_path, kit_config):
    """Issue 31 item 6: Codex's entry names the kit's own .pyz, outside its copy, so a kit
    written again from a newer archive runs at once while the copy's manifest keeps the old
    version: doctor names the version that will run, not the copy's.  (It said `ok ...
    version OLD`.)"""
    kit = tmp_path / "kit"
    older = tmp_path / "older.pyz"
    older.write_bytes(pyz.read_bytes() + b"\0")
    assert write_kit(newest_python, older, kit, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    INSTALLED["codex"](home, kit)
    old = read_json(kit, VERSIONED[1])["version"]
    assert write_kit(newest_python, pyz, kit, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    check = doctor_client(newest_python, pyz, "codex", make_env(), tmp_path, kit_config)
    assert check["status"] == "ok", check
    assert "runs this server, version %s" % archive_version(pyz) in check["detail"], check
    assert "version " + old not in check["detail"], check
    assert "version " + archive_version(older) not in check["detail"], check


@pytest.mark.parametrize("client, update", [
    ("claude-code", "claude plugin update memprove@memprove"),
    ("codex", "codex plugin add memprove@memprove"),
    ("gemini", "gemini extensions update memprove")])
def test_doctor_warns_of_a_kit_from_other_bytes_with_the_update_commands(
        pyz, newest_python, make_env, home, tmp_path, kit_config, client, update):
    kit = tmp_path / "kit"
    older = tmp_path / "older.pyz"
    older.write_bytes(pyz.read_bytes() + b"\0")        # another archive, another version
    assert write_kit(newest_python, older, kit, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    INSTALLED[client](home, kit)
    check = doctor_client(newest_python, pyz, client, make_env(), tmp_path, kit_config)
    assert check["status"] == "warn", check
    assert "version %s, not this one, version %s" % (archive_version(older), archive_version(pyz)) \
        in check["detail"], check
    assert "%s mcp plugin %s, then: %s" % (pyz, kit, update) in check["fix"], check


@pytest.mark.parametrize("client, where, enable", [
    ("claude-code", "in {home}/.claude/settings.json (enabledPlugins)",
     "claude plugin enable memprove@memprove"),
    ("codex", "in {home}/.codex/config.toml (enabled = false)",
     "codex plugin add memprove@memprove")])
def test_doctor_says_a_kit_the_client_disabled_is_disabled(pyz, newest_python, make_env, home,
                                                           tmp_path, kit_config, client, where,
                                                           enable):
    """`claude plugin disable` writes false into enabledPlugins; Codex's `enabled = false` is
    written by hand (it has no disable command), and `codex plugin add` sets it true again."""
    kit = tmp_path / "kit"
    assert write_kit(newest_python, pyz, kit, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    INSTALLED[client](home, kit, enabled=False)
    check = doctor_client(newest_python, pyz, client, make_env(), tmp_path, kit_config)
    assert check["status"] == "warn", check
    assert check["detail"].endswith(" is disabled " + where.format(home=home).replace("/", os.sep)), \
        check
    assert check["fix"] == enable, check


# Gemini's extension-enablement.json: per extension, folder rules, the last one that matches
# the folder Gemini runs in deciding; `/*` takes the folders below, `!` disables.
@pytest.mark.parametrize("overrides, enabled", [
    (["!{project}/*"], False),                        # `disable --scope workspace` there
    (["!{home}/*"], False),                           # `disable`, the project in the home folder
    (["!{project}/*", "{project}/*"], True),          # then `enable --scope workspace`
    (["!{project}/"], False),                         # the folder alone, written by hand
    (["!{project}/sub/*"], True),                     # a folder below the project only
    (["!{project}x/*"], True),                        # a folder whose name only begins the same
    (["!/*"], False),                                 # every folder
    (["!{project}/*", "*"], True),
    (["{project}/*", 7], True),                       # not Gemini's shape: no rule at all
])
def test_doctor_reads_geminis_enablement_rules_for_the_workspace(
        pyz, newest_python, make_env, home, kit_config, overrides, enabled):
    project = home / "project"
    project.mkdir()
    kit = home / "kit"
    assert write_kit(newest_python, pyz, kit, make_env(), project,
                     "--config-dir", kit_config).returncode == 0
    gemini_installed(home, kit)
    gemini_rules(home, [rule.format(home=gemini_folder(home), project=gemini_folder(project))
                        if isinstance(rule, str) else rule for rule in overrides])
    check = doctor_client(newest_python, pyz, "gemini", make_env(), project, kit_config)
    if enabled:
        assert check["status"] == "ok", check
        return
    assert check["status"] == "warn", check
    assert "is disabled for %s by %s" % (
        server_path(project), home / ".gemini" / "extensions" / "extension-enablement.json") \
        in check["detail"], check
    enable = "gemini extensions enable memprove --scope workspace"
    if HOST_IS_WINDOWS:
        assert check["fix"] == "Set-Location -LiteralPath %s; %s" % (
            mp.powershell_word(server_path(project)), enable), check
    else:
        assert check["fix"] == "cd %s && %s" % (server_path(project), enable), check


def gemini_folder(path):
    """A folder as Gemini CLI writes it in its rules: with / (and on Windows a / before
    the drive, /C:/Users/ana)."""
    text = str(path).replace("\\", "/")
    return text if text.startswith("/") else "/" + text


def test_doctor_judges_no_gemini_rule_from_a_deleted_working_directory(
        pyz, newest_python, make_env, home, tmp_path, kit_config):
    """No Workspace and no working directory to judge the rules by: the extension is taken
    as enabled, and doctor still answers (§6 rule 11)."""
    kit = tmp_path / "kit"
    assert write_kit(newest_python, pyz, kit, make_env(), tmp_path,
                     "--config-dir", kit_config).returncode == 0
    gemini_installed(home, kit, enabled=False)
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(
        ["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone),
         str(newest_python), str(pyz), "mcp", "doctor", "--client", "gemini", "--json",
         "--config-dir", str(kit_config)],
        env=make_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, timeout=SAFETY_TIMEOUT)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    checks = dict((check["name"], check) for check in json.loads(done.stdout)["checks"])
    assert checks["workspace"]["code"] == "workspace_unusable", checks["workspace"]
    assert checks["client"]["status"] == "ok", checks["client"]


def gemini_glob_as_a_regular_expression(glob):
    """Gemini's reading of a folder glob, as its enablement code writes it: every `*`, with
    the / before it if there is one, an optional group of that / and anything."""
    escaped = re.sub(r"[.+?^${}()|[\]\\]", r"\\\g<0>", glob)   # what Gemini escapes
    return re.compile(re.sub(r"(/?)\*", r"(\1.*)?", escaped) + r"\Z")


def every_text(alphabet, longest):
    return ["".join(letters) for size in range(longest + 1)
            for letters in itertools.product(alphabet, repeat=size)]


def test_the_folder_glob_reads_as_geminis_regular_expression():
    """The server matches Gemini's globs a character at a time, with no regular expression
    (one of many stars would backtrack): it agrees with Gemini's on every glob of up to five
    of `/`, `a`, `*` and `.` and every path of up to five of `/`, `a` and `.`."""
    paths = every_text("/a.", 5)
    for glob in every_text("/a*.", 5):
        expected = gemini_glob_as_a_regular_expression(glob)
        for path in paths:
            assert mp.folder_glob_matches(glob, path) == (expected.match(path) is not None), \
                (glob, path)


def test_a_glob_of_many_stars_costs_its_length_times_the_paths():
    """`*a` 2,000 times against a 4,000-character path: answered, with no backtracking (a
    regular expression of it takes longer than any test would wait)."""
    assert mp.folder_glob_matches("*a" * 2000 + "b", "/" + "a" * 4000 + "/") is False
    assert mp.folder_glob_matches("*a" * 2000 + "/*", "/" + "a" * 4000 + "/") is True


# -- who may change the kit, what writing it removes, what its commands run --------------
# contract.md §6 rules 25, 26 and 29 (issue 32).  Clients run a kit's entry in place at
# every session, so whoever can change the kit's folder runs code as the user; writing a
# kit again must not take a user's files with it; a command printed to be pasted must run
# exactly what it shows.

def refused_in_one_line(done):
    """Exit status 1, nothing on standard output, one line on standard error: the line."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == b"", done.stdout
    line = done.stderr.decode("utf-8")
    assert line.count("\n") == 1 and line.startswith("memprove-mcp: "), line
    return line


@pytest.mark.parametrize("mode, depth", [(0o777, 1), (0o1777, 1), (0o777, 2)],
                         ids=["others-can-write", "sticky-like-tmp", "two-folders-up"])
def test_rule25_a_kit_below_a_folder_others_can_write_is_refused(
        pyz, newest_python, make_env, private_place, kit_config, mode, depth):
    """A folder above DIR that others (or the group) can write, a sticky one like /tmp
    included (another user can make the folder again once it is gone): another user can put
    a kit of theirs in DIR's place, whose entry runs their code at the user's next session.
    `mcp plugin` refuses in one line naming that folder, and writes nothing.  (Today it
    writes the kit there, exit 0.)"""
    shared = private_place / "shared"
    shared.mkdir()
    os.chmod(str(shared), mode)
    parent = shared
    if depth == 2:
        parent = shared / "mine"
        parent.mkdir()
        os.chmod(str(parent), 0o755)
    before = snapshot(private_place)
    done = write_kit(newest_python, pyz, parent / "kit", make_env(), private_place,
                     "--config-dir", kit_config)
    line = refused_in_one_line(done)
    assert str(shared) in line, line
    assert snapshot(private_place) == before


def test_rule36_a_folder_its_group_can_write_is_refused_unless_the_group_is_the_users_own(
        pyz, newest_python, make_env, private_place, kit_config):
    """Rule 25's folder above DIR, mode 0775: of a group others are in (here another uid's,
    54322), refused in rule 25's sentence naming it, nothing written; of the user's own
    private group (root's gid 0, which lists no member), accepted.  (Before: 0775 was
    refused whatever its group.)"""
    needs_root("give a folder to another group")
    import grp
    import pwd
    if pwd.getpwuid(0).pw_gid != 0 or grp.getgrgid(0).gr_mem not in ([], ["root"]):
        pytest.skip("root's group 0 names other members here, so it is no private group")
    shared = private_place / "shared"
    shared.mkdir()
    os.chown(str(shared), 0, OTHER_UID)
    os.chmod(str(shared), 0o775)
    before = snapshot(private_place)
    line = refused_in_one_line(write_kit(newest_python, pyz, shared / "kit", make_env(),
                                         private_place, "--config-dir", kit_config))
    assert "%s can be written by group or others (mode 0775)" % shared in line, line
    assert snapshot(private_place) == before
    os.chown(str(shared), 0, 0)
    done = write_kit(newest_python, pyz, shared / "kit", make_env(), private_place,
                     "--config-dir", kit_config)
    assert done.returncode == 0, done.stderr
    assert (shared / "kit" / "memprove" / "memprove_mcp.pyz").read_bytes() == pyz.read_bytes()


def test_rule36_under_umask_002_the_folders_made_are_0755_and_the_update_is_written(
        pyz, make_env, private_place, kit_config):
    """Debian's and Ubuntu's umask 002: `mcp plugin <private>/a/b/kit` makes a and b 0755
    (not 0775), and writing the kit again (the update) succeeds.  (Before: a and b were
    0775, and the second run refused its own folders.)"""
    from hardening_support import wrapper
    python = wrapper(private_place, "python-umask-002", "os.umask(0o002)")
    kit = private_place / "a" / "b" / "kit"
    for _ in range(2):
        done = write_kit(python, pyz, kit, make_env(), private_place, "--config-dir", kit_config)
        assert done.returncode == 0, done.stderr
        for folder in (private_place / "a", private_place / "a" / "b"):
            assert stat_mode(folder) == 0o755, (folder, oct(stat_mode(folder)))
    assert (kit / "memprove" / "memprove_mcp.pyz").read_bytes() == pyz.read_bytes()


def stat_mode(path):
    return os.stat(str(path)).st_mode & 0o7777


def test_rule25_a_folder_of_another_user_is_refused(pyz, newest_python, make_env,
                                                    private_place, kit_config):
    """DIR exists, empty, and belongs to another user (a real other uid): they could fill
    it again after the kit is written.  Refused in one line naming it, nothing written.
    (Today the empty folder is replaced by the kit, exit 0.)"""
    needs_root("give a folder to another uid")
    folder = private_place / "kit"
    folder.mkdir()
    os.chown(str(folder), OTHER_UID, OTHER_UID)
    refused_naming_it(newest_python, pyz, folder, make_env(), private_place, kit_config)


def refused_naming_it(python, pyz, folder, env, place, kit_config):
    """`mcp plugin folder` refused in one line naming the folder, nothing under `place`
    changed."""
    before = snapshot(place)
    line = refused_in_one_line(write_kit(python, pyz, folder, env, place, "--config-dir",
                                         kit_config))
    assert str(folder) in line, line
    assert snapshot(place) == before


def hand_made_marketplace(folder):
    """What decides today that DIR holds "an earlier kit": a marketplace naming memprove."""
    (folder / ".claude-plugin").mkdir(parents=True)
    (folder / ".claude-plugin" / "marketplace.json").write_text(
        json.dumps({"name": "memprove", "owner": {"name": "me"}, "plugins": []}))


def git_repository(folder):
    (folder / ".git" / "objects").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


def notes(folder):
    (folder / "NOTES.md").write_text("A month of notes.\n")


def sources(folder):
    (folder / "src").mkdir()
    (folder / "src" / "main.py").write_text("print('a clone of my own')\n")


def bundle_folder(folder):
    """A name the kit writes, of another kind: memprove.mcpb a folder of the user's."""
    (folder / "memprove.mcpb").mkdir()
    (folder / "memprove.mcpb" / "keep.txt").write_text("mine\n")


MORE_THAN_A_KIT = {"a .git": git_repository, "notes": notes, "a clone's sources": sources,
                   "all three": lambda folder: [make(folder) for make in
                                                (git_repository, notes, sources)],
                   "a kit's name of another kind": bundle_folder}


@pytest.mark.parametrize("extra", sorted(MORE_THAN_A_KIT))
def test_rule26_a_folder_holding_more_than_a_kit_is_refused_and_nothing_moved(
        pyz, newest_python, make_env, private_place, kit_config, extra):
    """DIR's marketplace names memprove, but DIR also holds a `.git`, notes, a clone's
    sources, or a folder where the kit writes a file: `mcp plugin DIR` refuses in one line,
    exit status 1, naming DIR; nothing in DIR is moved or removed and nothing is left beside
    it.  (Today the whole folder is moved aside and deleted, exit 0: data loss.)"""
    folder = private_place / "kit"
    hand_made_marketplace(folder)
    MORE_THAN_A_KIT[extra](folder)
    refused_naming_it(newest_python, pyz, folder, make_env(), private_place, kit_config)


def test_rule26_a_failed_run_leaves_nothing_beside_the_folder(local_users, private_place,
                                                              kit_config, make_env):
    """An earlier kit that the user (a real uid, not root) cannot move: its folder is
    0555, so renaming it aside fails.  The run fails with exit status 1 and says nothing
    changed, and nothing changed: the kit is as it was and no `.memprove-kit-*` folder is
    left beside it.  (Today one `.memprove-kit-old-*` folder stays per try.)"""
    users = local_users
    victim = users.victim
    parent = private_place / "kits"
    parent.mkdir()
    folder = parent / "kit"
    # The earlier kit, written as root where root's kit may be, then given to the victim.
    assert run_cli(users.python, users.pyz, ["mcp", "plugin", folder, "--config-dir",
                                             kit_config], make_env(), private_place).returncode == 0
    env = clean_env(victim.home, victim.env())
    victim.own(parent)
    os.chmod(str(folder), 0o555)
    before = snapshot(parent)
    for _ in range(2):
        done = run_cli(users.python, users.pyz, ["mcp", "plugin", folder, "--config-dir",
                                                 kit_config], env, parent, user=victim)
        refused_in_one_line(done)
    assert sorted(os.listdir(str(parent))) == ["kit"], os.listdir(str(parent))
    assert snapshot(parent) == before


def command_lines(stdout):
    """Every command `mcp plugin` printed to be pasted."""
    found, _ = blocks(stdout.decode("utf-8"))
    return [command for commands in found.values() for command in commands]


@pytest.mark.parametrize("control", ["\t", "\n", "\x1b", "\u2028"],
                         ids=["tab", "newline", "escape", "u2028"])
def test_rule29_a_kit_folder_whose_name_holds_a_command_never_runs_it(
        pyz, newest_python, make_env, private_place, kit_config, control):
    """DIR named `kit<control>$(touch pwned)`: a control makes the path JSON-quoted, in
    double quotes, where sh runs `$(…)`.  Either `mcp plugin` refuses it (one line, nothing
    written), or every install and update line it prints, pasted into sh, runs no `touch`.
    (Today the lines run it.)"""
    folder = private_place / ("kit%s$(touch pwned)" % control)
    done = write_kit(newest_python, pyz, folder, make_env(), private_place,
                     "--config-dir", kit_config)
    if done.returncode != 0:
        refused_in_one_line(done)
        assert not os.path.lexists(str(folder))
    else:
        scratch = private_place / "scratch"
        scratch.mkdir()
        lines = command_lines(done.stdout)
        assert lines, done.stdout
        pasted_in_sh(lines, scratch)
    assert [str(path) for path in private_place.rglob("pwned")] == []


def test_rule29_powershell_lines_name_paths_literally():
    """PowerShell's `-Path` (and a path given without a parameter name) expands wildcards:
    `[x]` in a folder's name would name another file.  The Windows commands that take a
    path give it as `-LiteralPath`.  (Today: `Invoke-Item 'C:\\...\\memprove.mcpb'`.)"""
    found, _ = blocks(mp.kit_commands("C:\\Users\\ana\\kits [1]", "0.1.0+x", "win32"))
    assert found["Claude Desktop:"] == [
        "Invoke-Item -LiteralPath 'C:\\Users\\ana\\kits [1]\\memprove.mcpb'"], found
