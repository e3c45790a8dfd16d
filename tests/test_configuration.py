"""Unit tests of configuration resolution (memprove_mcp.py's "Configuration and Workspace").

Most call the functions directly, with no subprocess and no daemon; the tests of which token
file and data-dir are believed (§6 rules 31 and 36) go through the .pyz and the reference
daemon, as root for files of another uid.  Every expected value is written out by hand from
contract.md (§1 configuration, §2 Workspace, §6); nothing is computed by calling the function
under test.  (Argument validation is in test_tool_dispatch.py.)
"""

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from hardening_support import THIRD_UID, call_tool, needs_root, skip_or_fail
from harness import PLANTED, default_server_python, raises_problem
import memprove_mcp as mp

REPO_ROOT = Path(__file__).resolve().parent.parent

POSIX_ONLY = pytest.mark.skipif(os.name == "nt", reason="POSIX file modes, FIFOs and symlinks")


def code_of(function, *args):
    try:
        function(*args)
    except mp.Problem as problem:
        return problem.code
    return "no problem"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh home directory for `~` (HOME on POSIX, USERPROFILE on Windows)."""
    place = tmp_path.resolve() / "home"
    place.mkdir()
    monkeypatch.setenv("HOME", str(place))
    monkeypatch.setenv("USERPROFILE", str(place))
    return place


@pytest.fixture
def config_folder(tmp_path):
    place = tmp_path.resolve() / "config"
    place.mkdir()
    return place


# --------------------------------------------------------------------------
# config_directory: --config-dir > MEMPROVE_CONFIG_DIR > XDG_CONFIG_HOME/memprove
# > (Windows) APPDATA\memprove > ~/.config/memprove
# --------------------------------------------------------------------------

@pytest.mark.parametrize("option, env_names, expected", [
    ("opt", ("MEMPROVE_CONFIG_DIR", "XDG_CONFIG_HOME", "APPDATA"), ("opt",)),   # option first
    (None, ("MEMPROVE_CONFIG_DIR", "XDG_CONFIG_HOME", "APPDATA"), ("env",)),    # then the variable
    (None, ("XDG_CONFIG_HOME", "APPDATA"), ("xdg", "memprove")),                # then XDG
    ("", ("EMPTY_CONFIG_DIR", "XDG_CONFIG_HOME"), ("xdg", "memprove")),         # empty = unset
])
def test_config_directory_order(tmp_path, home, option, env_names, expected):
    values = {"MEMPROVE_CONFIG_DIR": str(tmp_path / "env"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
              "APPDATA": str(tmp_path / "appdata"), "EMPTY_CONFIG_DIR": ""}
    env = dict((name.replace("EMPTY_", "MEMPROVE_"), values[name]) for name in env_names)
    option = str(tmp_path / option) if option else option
    assert mp.config_directory(option, env) == str(tmp_path.joinpath(*expected))


@POSIX_ONLY
def test_config_default_is_dot_config_under_home(home):
    assert mp.config_directory(None, {}) == str(home / ".config" / "memprove")


def test_config_appdata_on_windows(tmp_path, home):
    assert mp.config_directory(None, {"APPDATA": str(tmp_path / "appdata")}, False, "win32") == \
        str(tmp_path / "appdata" / "memprove")
    # Elsewhere APPDATA means nothing (a Wine or Cygwin leftover).
    assert mp.config_directory(None, {"APPDATA": str(tmp_path / "appdata")}, False, "linux") == \
        str(home / ".config" / "memprove")


@pytest.mark.parametrize("option, env, tail", [
    ("~/opt", {}, ("opt",)),
    (None, {"XDG_CONFIG_HOME": "~/xdg"}, ("xdg", "memprove")),
])
def test_config_tilde_is_expanded(home, option, env, tail):
    assert mp.config_directory(option, env) == str(home.joinpath(*tail))


def test_config_relative_option_becomes_absolute(tmp_path, home, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = mp.config_directory("relative-cfg", {})
    assert os.path.isabs(result)
    assert result == os.path.join(os.getcwd(), "relative-cfg")


# --------------------------------------------------------------------------
# token_source / read_token: MEMPROVE_TOKEN > MEMPROVE_TOKEN_FILE > <config>/token
# --------------------------------------------------------------------------

def write(path, data, mode=0o600):
    """Make `path`: None leaves it absent, "directory" makes a directory, else a file."""
    if data == "directory":
        Path(path).mkdir()
    elif data is not None:
        Path(path).write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        os.chmod(path, mode)
    return str(path)


@pytest.mark.parametrize("env_keys, expected", [
    (("MEMPROVE_TOKEN", "MEMPROVE_TOKEN_FILE"), "MEMPROVE_TOKEN"),
    (("MEMPROVE_TOKEN_FILE",), "MEMPROVE_TOKEN_FILE"),
    ((), "config"),
])
def test_token_source_order(tmp_path, config_folder, env_keys, expected):
    write(config_folder / "token", "config-token")
    path = write(tmp_path / "t", "file-token")
    env = {"MEMPROVE_TOKEN": "env-token", "MEMPROVE_TOKEN_FILE": path}
    env = dict((key, env[key]) for key in env_keys)
    files = {"MEMPROVE_TOKEN": None, "MEMPROVE_TOKEN_FILE": path, "config": str(config_folder / "token")}
    tokens = {"MEMPROVE_TOKEN": "env-token", "MEMPROVE_TOKEN_FILE": "file-token", "config": "config-token"}
    assert mp.token_source(env, str(config_folder)) == (expected, files[expected])
    assert mp.read_token(env, str(config_folder)) == (tokens[expected], False)


def test_token_nothing_set_is_missing(config_folder):
    assert mp.token_source({"MEMPROVE_TOKEN": "", "MEMPROVE_TOKEN_FILE": ""}, str(config_folder)) == (None, None)
    raises_problem("token_missing", mp.read_token, {}, str(config_folder))


@pytest.mark.parametrize("env", [
    {"MEMPROVE_TOKEN_FILE": "no-such-file"},     # a mistyped file never falls through
    {"MEMPROVE_TOKEN": " \t "},                  # nor does a blank variable
    {"MEMPROVE_TOKEN_FILE": "."},                 # a directory is no token file
])
def test_token_set_source_unusable_never_falls_through(tmp_path, config_folder, env):
    write(config_folder / "token", "config-token")
    if "MEMPROVE_TOKEN_FILE" in env:
        env = {"MEMPROVE_TOKEN_FILE": str(tmp_path / env["MEMPROVE_TOKEN_FILE"])}
    raises_problem("token_missing", mp.read_token, env, str(config_folder))


@pytest.mark.parametrize("content", ["", "\nsecond-line-token\n"])
def test_read_token_empty_first_line_is_missing(tmp_path, config_folder, content):
    env = {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", content)}
    raises_problem("token_missing", mp.read_token, env, str(config_folder))


def test_read_token_variable_stripped_printable_bounds_kept(config_folder):
    assert mp.read_token({"MEMPROVE_TOKEN": "  !tok-123~\t\n"}, str(config_folder)) == ("!tok-123~", False)


@pytest.mark.parametrize("content", ["first-token\nsecond-token\n", "  first-token  \r\nsecond-token"])
def test_read_token_file_first_line_stripped(tmp_path, config_folder, content):
    env = {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", content)}
    assert mp.read_token(env, str(config_folder))[0] == "first-token"


@pytest.mark.parametrize("raw", ["tok en", "t\u00f6ken", "tok\x7f", b"tok\xffen\n"])
def test_read_token_outside_printable_ascii_is_malformed(tmp_path, config_folder, raw):
    env = {"MEMPROVE_TOKEN": raw} if isinstance(raw, str) else \
        {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", raw)}      # bytes: from a file
    raises_problem("token_malformed", mp.read_token, env, str(config_folder))


@POSIX_ONLY
def test_read_token_fifo_is_missing_without_blocking(tmp_path, config_folder):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    outcome = []
    worker = threading.Thread(daemon=True, target=lambda: outcome.append(
        code_of(mp.read_token, {"MEMPROVE_TOKEN_FILE": str(fifo)}, str(config_folder))))
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "read_token blocked on a FIFO"
    assert outcome == ["token_missing"]


@POSIX_ONLY
@pytest.mark.parametrize("mode, too_open", [(0o600, False), (0o640, True), (0o604, True)])
def test_read_token_file_mode_flags_group_or_others(tmp_path, config_folder, mode, too_open):
    env = {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", "mode-token\n", mode)}
    assert mp.read_token(env, str(config_folder)) == ("mode-token", too_open)


@pytest.mark.parametrize("content", [PLANTED + " with space", "\n" + PLANTED])
def test_token_problems_never_show_token_or_path(tmp_path, config_folder, content):
    path = write(tmp_path / "secret-token-file", content)
    problem = raises_problem(
        "token_malformed" if not content.startswith("\n") else "token_missing",
        mp.read_token, {"MEMPROVE_TOKEN_FILE": path}, str(config_folder))
    for shown in (problem.text(), problem.hint or ""):
        assert PLANTED not in shown
        assert "secret-token-file" not in shown


# --------------------------------------------------------------------------
# data_directory: MEMPROVE_DATA_DIR, else <config>/data-dir (relative to config)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("variable, line, expected, source", [
    ("{T}/from-env", "{T}/from-file\n", "{T}/from-env", "MEMPROVE_DATA_DIR"),   # the variable wins
    ("", "{T}/from-file\n", "{T}/from-file", "config"),                         # empty = unset
    (None, " nested/data \nsecond-line\n", "{C}/nested/data", "config"),        # relative to config
    (None, "\t{T}/abs-data \r\n", "{T}/abs-data", "config"),                     # absolute, stripped
])
def test_data_dir_sources(tmp_path, config_folder, variable, line, expected, source):
    where = dict(T=str(tmp_path.resolve()), C=str(config_folder))
    write(config_folder / "data-dir", line.format(**where))
    env = {} if variable is None else {"MEMPROVE_DATA_DIR": variable.format(**where)}
    assert mp.data_directory(env, str(config_folder)) == (os.path.normpath(expected.format(**where)), source)


@pytest.mark.parametrize("content", [None, "  \n\n", "directory"])
def test_data_dir_missing_or_empty(config_folder, content):
    write(config_folder / "data-dir", content)
    raises_problem("data_dir_missing", mp.data_directory, {}, str(config_folder))


# --------------------------------------------------------------------------
# read_daemon: <data dir>/daemon.json's "url", and who owns the file
# --------------------------------------------------------------------------

def test_daemon_url_read_from_daemon_json(tmp_path):
    write(tmp_path / "daemon.json", '{"url": "http://127.0.0.1:47311", "pid": 4242}')
    url, owner, confirm = mp.read_daemon(str(tmp_path))
    assert url == "http://127.0.0.1:47311" and owner == os.stat(str(tmp_path / "daemon.json")).st_uid
    assert confirm is False         # the user's own file: no listener to confirm beyond rule 17's


# daemon_file_doubt (contract.md §6 rule 19): the owners and modes of daemon.json and its
# data directory, judged for each platform of the table (the e2e tests with real other
# users are in tests/test_daemon_client_trust.py).

ME, OTHER, THIRD = os.geteuid() if hasattr(os, "geteuid") else 1000, 54321, 54322


def status(uid, mode, gid=None):
    return os.stat_result((mode, 0, 0, 1, uid, uid if gid is None else gid, 0, 0, 0, 0))


@pytest.mark.parametrize("directory, daemon_file, expected", [
    ((ME, 0o40700), (ME, 0o100600), (None, False)),
    ((ME, 0o40755), (ME, 0o100644), (None, False)),
    ((0, 0o40755), (0, 0o100644), (None, False)),                   # a root daemon
    ((ME, 0o40700), (0, 0o100644), (None, False)),
    ((OTHER, 0o40755), (OTHER, 0o100644), (None, True)),             # a service account
    ((OTHER, 0o40755), (ME, 0o100644),
     ("The data directory belongs to another user (uid 54321).", False)),
    ((ME, 0o40700), (OTHER, 0o100644),
     ("The file daemon.json belongs to another user (uid 54321).", False)),
    ((OTHER, 0o40755), (THIRD, 0o100644),
     ("The data directory belongs to another user (uid 54321).", False)),
    ((ME, 0o41777), (ME, 0o100644),
     ("The data directory can be written by group or others (mode 1777).", False)),
    ((ME, 0o40775, THIRD), (ME, 0o100644),                           # a group of others (rule 36)
     ("The data directory can be written by group or others (mode 0775).", False)),
    ((ME, 0o40700), (ME, 0o100666),
     ("The file daemon.json can be written by group or others (mode 0666).", False)),
    ((OTHER, 0o40755), (OTHER, 0o100664),
     ("The file daemon.json can be written by group or others (mode 0664).", False)),
    ((0, 0o41777), (OTHER, 0o100644),                                # another user's, in /tmp
     ("The data directory can be written by group or others (mode 1777).", False)),
])
def test_daemon_json_believed_only_from_the_user_root_or_one_service_account(
        directory, daemon_file, expected):
    assert mp.daemon_file_doubt(status(*directory), status(*daemon_file), "linux") == expected


def test_a_service_account_is_refused_where_no_one_can_tell_who_listens():
    # macOS lists no socket's owner (the platform table's socket_tables): a daemon.json of
    # another user could never be confirmed, so it is never believed.
    doubt = mp.daemon_file_doubt(status(OTHER, 0o40755), status(OTHER, 0o100644), "darwin")
    assert doubt == ("The data directory belongs to another user (uid 54321).", False)


def test_windows_has_no_owners_or_modes_to_judge():
    assert mp.daemon_file_doubt(status(OTHER, 0o40777), status(THIRD, 0o100666), "win32") == \
        (None, False)


@pytest.mark.parametrize("content", [None, "not json", "[1, 2]", '{"url": 47311}', "directory",
                                     "[" * 60000])
def test_daemon_url_unusable_file_is_unavailable(tmp_path, content):
    write(tmp_path / "daemon.json", content)
    raises_problem("daemon_unavailable", mp.read_daemon, str(tmp_path))


# --------------------------------------------------------------------------
# §6 rule 31: the token file and data-dir are believed only from the user or root, in folders
# no one else can write (a folder above that is root's and sticky, as /tmp, passes), with no
# link another user made on the way; otherwise they count as absent, with a sentence saying
# why.  Through the .pyz: a tool call's Problem text, `context`'s config report and what the
# daemon received.  (The attack with real other users: tests/test_daemon_client_trust.py.)
# --------------------------------------------------------------------------

DATA_DIR_MISSING = ("data_dir_missing: No data directory is configured in MEMPROVE_DATA_DIR or "
                    "the configuration directory. ")
TOKEN_MISSING = ("token_missing: No token was found in MEMPROVE_TOKEN, MEMPROVE_TOKEN_FILE or the "
                 "configuration directory. ")
FOLDER_MODE = "The configuration directory can be written by group or others (mode %s)."


def configured_calls(hserve, config, env=None):
    """`tasks` and `context` of a server given the `config` fixture's directory and `env`:
    (tasks' outcome, context's config report)."""
    server = hserve(config=config, timeout=5, env=env)
    server.initialize()
    tasks = call_tool(server, "tasks")
    code, shown = call_tool(server, "context")
    assert code == "ok", shown
    assert server.close() == 0
    return tasks, shown["config"]


def own_token_file(config, tmp_path):
    """The token in a file of the user's own, 0600, in pytest's private folder."""
    path = tmp_path / "own-token"
    path.write_text(config.token + "\n")
    os.chmod(str(path), 0o600)
    return {"MEMPROVE_TOKEN_FILE": str(path)}


def moved_config(config, folder, mode, owner=0):
    """The configuration directory moved into `folder` (made with `mode`, of `owner`):
    the environment naming it there."""
    folder.mkdir()
    os.chmod(str(folder), mode)
    os.chown(str(folder), owner, owner)
    moved = folder / "config"
    os.rename(str(config.dir), str(moved))
    return {"MEMPROVE_CONFIG_DIR": str(moved)}


def linked(link, target, owner=0):
    os.symlink(str(target), str(link))
    os.lchown(str(link), owner, owner)
    return str(link)


def data_dir_in_a_folder_others_can_write(config, tmp_path):
    os.chmod(str(config.dir), 0o777)
    return {}, FOLDER_MODE % "0777"


def data_dir_of_another_user(config, tmp_path):
    os.chown(str(config.dir / "data-dir"), THIRD_UID, THIRD_UID)
    return {}, ("The file data-dir in the configuration directory belongs to another user "
                "(uid %d)." % THIRD_UID)


def data_dir_others_can_write(config, tmp_path):
    os.chmod(str(config.dir / "data-dir"), 0o666)
    return {}, "The file data-dir in the configuration directory can be written by group or " \
        "others (mode 0666)."


def a_folder_above_others_can_write(config, tmp_path):
    env = moved_config(config, tmp_path / "team", 0o777)
    return env, ("The folder %s above the configuration directory can be written by group or "
                 "others (mode 0777)." % (tmp_path / "team"))


def a_folder_above_of_another_user(config, tmp_path):
    env = moved_config(config, tmp_path / "theirs", 0o755, THIRD_UID)
    return env, ("The folder %s above the configuration directory belongs to another user "
                 "(uid %d)." % (tmp_path / "theirs", THIRD_UID))


def a_link_of_another_user(config, tmp_path):
    link = linked(tmp_path / "their-link", config.dir, THIRD_UID)
    return {"MEMPROVE_CONFIG_DIR": link}, (
        "The link %s on the way to the configuration directory belongs to another user "
        "(uid %d)." % (link, THIRD_UID))


def a_link_in_a_sticky_folder(config, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    link = linked(shared / "config", config.dir)
    return {"MEMPROVE_CONFIG_DIR": link}, (
        "The link %s on the way to the configuration directory is in a folder group or others "
        "can write." % link)


def data_dir_a_link_of_another_user(config, tmp_path):
    elsewhere = tmp_path / "elsewhere-data-dir"
    os.rename(str(config.dir / "data-dir"), str(elsewhere))
    link = linked(config.dir / "data-dir", elsewhere, THIRD_UID)
    return {}, ("The link %s on the way to the file data-dir in the configuration directory "
                "belongs to another user (uid %d)." % (link, THIRD_UID))


UNBELIEVED_DATA_DIR = {
    "the configuration directory others can write (0777)": data_dir_in_a_folder_others_can_write,
    "data-dir another user's": data_dir_of_another_user,
    "data-dir others can write (0666)": data_dir_others_can_write,
    "a folder above others can write (0777, not sticky)": a_folder_above_others_can_write,
    "a folder above another user's": a_folder_above_of_another_user,
    "a link on the way another user's": a_link_of_another_user,
    "a link on the way in a folder others can write": a_link_in_a_sticky_folder,
    "data-dir a link another user's": data_dir_a_link_of_another_user,
}


@POSIX_ONLY
@pytest.mark.parametrize("case", sorted(UNBELIEVED_DATA_DIR))
def test_rule31_a_data_dir_someone_else_could_write_counts_as_absent(hserve, config, daemon,
                                                                      tmp_path, case):
    """The token from a file of the user's own; the data-dir of the configuration directory
    someone else could have written (or chosen by a link of theirs): `tasks` answers
    `data_dir_missing` with the sentence naming what and why, the daemon it named gets no
    request, and `context` reports no data directory, warning "data-dir not trusted".
    (Before: believed, and the token sent where it named.)"""
    needs_root("give files and links to another uid")
    env, hint = UNBELIEVED_DATA_DIR[case](config, tmp_path)
    tasks, report = configured_calls(hserve, config, dict(own_token_file(config, tmp_path), **env))
    assert tasks == ("data_dir_missing", DATA_DIR_MISSING + hint), tasks
    assert daemon.ops == [], daemon.ops
    assert (report["data_dir"], report["data_dir_from"], report["daemon_url"]) == \
        (None, None, None), report
    assert report["warnings"] == ["data-dir not trusted"], report


def token_in_a_folder_others_can_write(config, tmp_path):
    os.chmod(str(config.dir), 0o777)
    return {}, FOLDER_MODE % "0777", ["token", "data-dir not trusted"]


def token_of_another_user(config, tmp_path):
    os.chown(str(config.token_file), THIRD_UID, THIRD_UID)
    return {}, ("The file token in the configuration directory belongs to another user "
                "(uid %d)." % THIRD_UID), ["token"]


def token_others_can_write(config, tmp_path):
    os.chmod(str(config.token_file), 0o666)
    return {}, ("The file token in the configuration directory can be written by group or "
                "others (mode 0666)."), ["token"]


def token_file_others_can_write(config, tmp_path):
    env = own_token_file(config, tmp_path)
    os.chmod(env["MEMPROVE_TOKEN_FILE"], 0o666)
    return env, "The file MEMPROVE_TOKEN_FILE names can be written by group or others " \
        "(mode 0666).", ["MEMPROVE_TOKEN_FILE"]


def token_file_of_another_user(config, tmp_path):
    env = own_token_file(config, tmp_path)
    os.chown(env["MEMPROVE_TOKEN_FILE"], THIRD_UID, THIRD_UID)
    return env, "The file MEMPROVE_TOKEN_FILE names belongs to another user (uid %d)." \
        % THIRD_UID, ["MEMPROVE_TOKEN_FILE"]


def token_file_in_a_folder_others_can_write(config, tmp_path):
    folder = tmp_path / "team"
    folder.mkdir()
    os.chmod(str(folder), 0o777)
    path = folder / "token"
    os.rename(own_token_file(config, tmp_path)["MEMPROVE_TOKEN_FILE"], str(path))
    return {"MEMPROVE_TOKEN_FILE": str(path)}, (
        "The folder of the file MEMPROVE_TOKEN_FILE names can be written by group or others "
        "(mode 0777)."), ["MEMPROVE_TOKEN_FILE"]


def token_file_below_a_folder_others_can_write(config, tmp_path):
    folder = tmp_path / "team"
    (folder / "mine").mkdir(parents=True)
    os.chmod(str(folder), 0o777)
    os.chmod(str(folder / "mine"), 0o700)
    path = folder / "mine" / "token"
    os.rename(own_token_file(config, tmp_path)["MEMPROVE_TOKEN_FILE"], str(path))
    return {"MEMPROVE_TOKEN_FILE": str(path)}, (
        "The folder %s above the folder of the file MEMPROVE_TOKEN_FILE names can be written "
        "by group or others (mode 0777)." % folder), ["MEMPROVE_TOKEN_FILE"]


UNBELIEVED_TOKEN = {
    "the configuration directory others can write (0777)": token_in_a_folder_others_can_write,
    "token another user's": token_of_another_user,
    "token others can write (0666)": token_others_can_write,
    "MEMPROVE_TOKEN_FILE others can write (0666)": token_file_others_can_write,
    "MEMPROVE_TOKEN_FILE another user's": token_file_of_another_user,
    "MEMPROVE_TOKEN_FILE in a folder others can write": token_file_in_a_folder_others_can_write,
    "MEMPROVE_TOKEN_FILE below a folder others can write":
        token_file_below_a_folder_others_can_write,
}


@POSIX_ONLY
@pytest.mark.parametrize("case", sorted(UNBELIEVED_TOKEN))
def test_rule31_a_token_file_someone_else_could_write_counts_as_absent(hserve, config, daemon,
                                                                        tmp_path, case):
    """A token file (the configuration directory's or MEMPROVE_TOKEN_FILE's) someone else
    could have written: `tasks` answers `token_missing` with the sentence, the daemon gets
    no request, and `context` warns about the token source (and data-dir, from the same
    folder).  (Before: the token read and sent.)"""
    needs_root("give files to another uid")
    env, hint, warnings = UNBELIEVED_TOKEN[case](config, tmp_path)
    tasks, report = configured_calls(hserve, config, env)
    assert tasks == ("token_missing", TOKEN_MISSING + hint), tasks
    assert daemon.ops == [], daemon.ops
    assert report["warnings"] == warnings, report


def sticky_folder_of_roots(config, tmp_path):
    return moved_config(config, tmp_path / "shared", 0o1777), "ok"


def token_others_can_read(config, tmp_path):
    os.chmod(str(config.token_file), 0o644)
    return {}, "too_open"


def own_link_to_the_config_dir(config, tmp_path):
    return {"MEMPROVE_CONFIG_DIR": linked(tmp_path / "my-link", config.dir)}, "ok"


def data_dir_own_link(config, tmp_path):
    elsewhere = tmp_path / "elsewhere-data-dir"
    os.rename(str(config.dir / "data-dir"), str(elsewhere))
    linked(config.dir / "data-dir", elsewhere)
    return {}, "ok"


BELIEVED = {
    "the configuration directory in a sticky folder of root's (as in /tmp)":
        sticky_folder_of_roots,
    "a token file others can read (0644): used, rule 11's warning": token_others_can_read,
    "the user's own link to the configuration directory": own_link_to_the_config_dir,
    "data-dir the user's own link": data_dir_own_link,
}


@POSIX_ONLY
@pytest.mark.parametrize("case", sorted(BELIEVED))
def test_rule31_the_users_own_files_links_and_roots_sticky_folders_are_believed(
        hserve, config, daemon, tmp_path, case):
    """The controls: what no one else could have written is believed, and the call reaches
    the daemon with the token (a token file others can only read is used, with rule 11's
    `token_file_mode`)."""
    env, mode = BELIEVED[case](config, tmp_path)
    tasks, report = configured_calls(hserve, config, env)
    assert tasks[0] == "ok", tasks
    assert [entry["headers"]["authorization"] for entry in daemon.ops] == \
        ["Bearer " + config.token], daemon.ops
    assert report["warnings"] == [] and report["token_file_mode"] == mode, report
    assert report["data_dir"] == str(config.data_dir) and report["daemon_url"] == daemon.url, \
        report


# --------------------------------------------------------------------------
# §6 rule 36: a folder the user's private group can write is the user's alone.  As root:
# root's primary group, gid 0, names no member, so 0775 root:root is private; a group of
# another uid (54322, no passwd entry) never is.
# --------------------------------------------------------------------------

def roots_private_group():
    needs_root("judge root's own private group")
    import grp
    import pwd
    if pwd.getpwuid(0).pw_gid != 0 or grp.getgrgid(0).gr_mem not in ([], ["root"]):
        pytest.skip("root's primary group here is not gid 0 with no other member")


@POSIX_ONLY
@pytest.mark.parametrize("which", ["the data directory", "the configuration directory"])
def test_rule36_a_folder_of_the_users_private_group_0775_is_believed(hserve, config, daemon,
                                                                     tmp_path, which):
    """0775 root:root, as Debian's umask 002 makes every folder of a user: believed, the
    call answered.  (Before: the data directory refused, `daemon_unavailable` naming mode
    0775.)"""
    roots_private_group()
    folder = config.data_dir if which == "the data directory" else config.dir
    os.chown(str(folder), 0, 0)
    os.chmod(str(folder), 0o775)
    tasks, report = configured_calls(hserve, config)
    assert tasks[0] == "ok", tasks
    assert report["warnings"] == [] and report["daemon_url"] == daemon.url, report


@POSIX_ONLY
@pytest.mark.parametrize("which, expected", [
    ("the data directory", ("daemon_unavailable", "daemon_unavailable: The memprove daemon is "
                            "not running or cannot be reached. The data directory can be "
                            "written by group or others (mode 0775).")),
    ("the configuration directory", ("data_dir_missing", DATA_DIR_MISSING + FOLDER_MODE % "0775")),
])
def test_rule36_a_folder_another_group_can_write_is_not_believed(hserve, config, daemon, tmp_path,
                                                                which, expected):
    """0775 with the group of another uid: not believed, the sentence naming the mode, and
    the daemon gets no request.  (Before: the configuration directory's data-dir believed.)"""
    needs_root("give a folder to another group")
    folder = config.data_dir if which == "the data directory" else config.dir
    os.chown(str(folder), 0, THIRD_UID)
    os.chmod(str(folder), 0o775)
    tasks, report = configured_calls(hserve, config, own_token_file(config, tmp_path))
    assert tasks == expected, tasks
    assert daemon.ops == [], daemon.ops
    assert report["daemon_url"] is None, report


ACCOUNTS = {
    "the real accounts (copied as they are)": (lambda passwd: passwd, lambda group: group),
    "another account whose primary group is root's (useradd -g root mate)":
        (lambda passwd: passwd + "mate:x:54329:0::/nonexistent:/bin/false\n",
         lambda group: group),
    "a second entry of gid 0 that lists another user":
        (lambda passwd: passwd, lambda group: group + "team:x:0:mate\n"),
    "root's group named other than root":
        (lambda passwd: passwd,
         lambda group: "".join("wheelz" + line[4:] if line.startswith("root:") else line
                               for line in group.splitlines(True))),
}


def with_accounts(tmp_path, case):
    """An interpreter for hserve(python=...): the server's own, started in a mount namespace
    of its own where /etc/passwd and /etc/group are ACCOUNTS[case]'s copies (bind mounts no
    other process sees: the machine's accounts are not changed, tests in parallel rely on
    them).  Skipped, saying why, where unshare(1) is missing or cannot make the namespace
    (failed under MEMPROVE_TEST_STRICT=1)."""
    if shutil.which("unshare") is None:
        skip_or_fail("needs unshare(1) to give the server accounts of its own")
    tried = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if tried.returncode != 0:
        skip_or_fail("unshare --mount fails here: %s" % tried.stderr.decode("utf-8", "replace"))
    make_passwd, make_group = ACCOUNTS[case]
    passwd, group = tmp_path / "passwd", tmp_path / "group"
    passwd.write_text(make_passwd(Path("/etc/passwd").read_text("utf-8")), "utf-8")
    group.write_text(make_group(Path("/etc/group").read_text("utf-8")), "utf-8")
    # The /etc the server reads: the host's, or that of the chroot tests/pythons.sh's
    # wrapper of 3.14 and 3.15 runs it in (its line `exec chroot DIR ...`).
    python = default_server_python()
    found = re.search(r"exec chroot (\S+) ", Path(python).read_text("utf-8", "replace")) \
        if os.path.isfile(python) and os.path.getsize(python) < 4096 else None
    etc = (found.group(1) if found else "") + "/etc"
    wrapper = tmp_path / "python-with-accounts"
    wrapper.write_text(
        "#!/bin/sh\nexec unshare --mount --propagation private sh -c 'mount --bind \"$1\" "
        "%s/passwd && mount --bind \"$2\" %s/group && shift 2 && exec \"$@\"' sh "
        "'%s' '%s' '%s' \"$@\"\n" % (etc, etc, passwd, group, python), "utf-8")
    os.chmod(str(wrapper), 0o755)
    return str(wrapper)


@POSIX_ONLY
@pytest.mark.parametrize("case", sorted(ACCOUNTS))
@pytest.mark.parametrize("which", ["the data directory", "the configuration directory"])
def test_rule36_roots_group_is_private_only_named_as_root_and_shared_with_no_one(
        hserve, config, daemon, tmp_path, which, case):
    """A folder 0775 root:root, the server seeing accounts where gid 0 is not root's alone:
    another account has it as its primary group (its files then belong to it too, so that
    account could write data-dir in the configuration directory and take the token), a
    second group entry of gid 0 lists another user, or the group is not named root: not
    believed, the sentence naming mode 0775, and the daemon gets no request.  With the real
    accounts, the control: believed, the call answered.  (Before: gid 0 was judged private
    whatever other entries said.)"""
    roots_private_group()
    python = with_accounts(tmp_path, case)
    folder = config.data_dir if which == "the data directory" else config.dir
    os.chown(str(folder), 0, 0)
    os.chmod(str(folder), 0o775)
    server = hserve(python=python, config=config, timeout=5, env=own_token_file(config, tmp_path))
    server.initialize()
    tasks = call_tool(server, "tasks")
    assert server.close() == 0
    if case.startswith("the real accounts"):
        assert tasks[0] == "ok", tasks
        assert [entry["headers"]["authorization"] for entry in daemon.ops] == \
            ["Bearer " + config.token], daemon.ops
        return
    assert tasks == {
        "the data directory": ("daemon_unavailable", "daemon_unavailable: The memprove daemon "
                               "is not running or cannot be reached. The data directory can be "
                               "written by group or others (mode 0775)."),
        "the configuration directory": ("data_dir_missing",
                                        DATA_DIR_MISSING + FOLDER_MODE % "0775")}[which], tasks
    assert daemon.ops == [], daemon.ops


# --------------------------------------------------------------------------
# A relative MEMPROVE_TOKEN_FILE is read from the server's working directory
# --------------------------------------------------------------------------

@POSIX_ONLY
@pytest.mark.parametrize("relative", ["private/token", "./private/token", "../own-token"])
def test_a_relative_token_file_is_read_from_the_servers_working_directory(
        hserve, config, daemon, workspace, tmp_path, relative):
    """MEMPROVE_TOKEN_FILE relative (to the server's working directory, the Workspace
    here): the token is read from there and sent.  (Before the fix in read_believed, rule
    31's walk from the root did not make it absolute first, and the call answered
    token_missing.)"""
    os.remove(str(config.token_file))
    target = workspace / relative
    target.parent.mkdir(exist_ok=True)
    os.chmod(str(target.parent), 0o700)
    target.write_text(config.token + "\n")
    os.chmod(str(target), 0o600)
    tasks, report = configured_calls(hserve, config, {"MEMPROVE_TOKEN_FILE": relative})
    assert tasks[0] == "ok", tasks
    assert [entry["headers"]["authorization"] for entry in daemon.ops] == \
        ["Bearer " + config.token], daemon.ops
    assert report["token_from"] == "MEMPROVE_TOKEN_FILE" and report["warnings"] == [], report


# --------------------------------------------------------------------------
# timeout_setting: MEMPROVE_TIMEOUT, a positive finite number of seconds
# --------------------------------------------------------------------------

def test_timeout_positive_number_accepted():
    assert mp.timeout_setting({"MEMPROVE_TIMEOUT": "5"}) == 5.0
    assert mp.timeout_setting({"MEMPROVE_TIMEOUT": "0.25"}) == 0.25


@pytest.mark.parametrize("raw", [None, "", "abc", "0", "-1", "inf", "nan", "1_0", "\uff11\uff10"])
def test_timeout_unset_or_unfit_is_none(raw):
    assert mp.timeout_setting({} if raw is None else {"MEMPROVE_TIMEOUT": raw}) is None


# --------------------------------------------------------------------------
# find_workspace: nearest .memprove/ wins, a .git stops the climb, home is off limits
# --------------------------------------------------------------------------

def found(environ):
    """find_workspace's root, source and marker, as the tests below name them."""
    workspace = mp.find_workspace(environ)
    assert workspace.problem is None, workspace
    return workspace.root, workspace.found_by, workspace.marked


@pytest.fixture
def tree(tmp_path, home):
    """tmp/w/a/b with HOME at tmp/home (so the climb stops below tmp)."""
    base = tmp_path.resolve() / "w"
    (base / "a" / "b").mkdir(parents=True)
    return base


def test_workspace_start_is_claude_project_dir(tree, monkeypatch):
    (tree / "a" / ".memprove").mkdir()
    monkeypatch.chdir(tree)
    env = {"CLAUDE_PROJECT_DIR": str(tree / "a" / "b")}
    assert found(env) == (str(tree / "a"), "CLAUDE_PROJECT_DIR", True)


def test_workspace_start_is_working_directory(tree, monkeypatch):
    (tree / "a" / ".memprove").mkdir()
    monkeypatch.chdir(tree / "a" / "b")
    assert found({"CLAUDE_PROJECT_DIR": ""}) == (str(tree / "a"), "working directory", True)


# (markers made under tmp/w: path -> "dir" or "file"), start, expected root, marked
@pytest.mark.parametrize("markers, start, root, marked", [
    ({".memprove": "dir", "a/.memprove": "dir"}, "a/b", "a", True),        # nearest wins
    ({"a/b/.memprove": "dir"}, "a/b", "a/b", True),                        # the start itself
    ({"a/.git": "dir", "a/.memprove": "dir"}, "a/b", "a", True),           # beside the repo root
    ({".git": "dir", "a/.memprove": "dir"}, "a/b", "a", True),             # below the repo root
    ({".memprove": "dir", "a/.git": "dir"}, "a/b", "a", False),            # .git stops the climb
    ({"a/.git": "file"}, "a/b", "a", False),                               # a worktree's .git file
    ({"a/.memprove": "file"}, "a/b", "a/b", False),                        # a file is no marker
    ({}, "a/b", "a/b", False),                                             # nothing: the start
])
def test_workspace_root_search(tree, markers, start, root, marked):
    for relative, kind in markers.items():
        if kind == "dir":
            (tree / relative).mkdir()
        else:
            (tree / relative).write_text("gitdir: /elsewhere/.git/worktrees/a\n")
    assert found({"CLAUDE_PROJECT_DIR": str(tree / start)}) == \
        (str(tree / root), "CLAUDE_PROJECT_DIR", marked)


# HOME is tmp/home: markers under tmp, start, expected root, marked
@pytest.mark.parametrize("markers, start, root, marked", [
    (["home/.memprove"], "home/proj/sub", "home/proj/sub", False),   # never climbs into home
    (["home/.git"], "home/proj/sub", "home/proj/sub", False),        # not even for a dotfiles repo
    ([".memprove"], "home/proj", "home/proj", False),                # nor above it
    (["home/.memprove"], "home", "home", True),                      # unless the start is there
])
def test_workspace_home_is_off_limits(home, markers, start, root, marked):
    base = home.parent
    (base / start).mkdir(parents=True, exist_ok=True)
    for relative in markers:
        (base / relative).mkdir()
    assert found({"CLAUDE_PROJECT_DIR": str(base / start)}) == \
        (str(base / root), "CLAUDE_PROJECT_DIR", marked)


@POSIX_ONLY
def test_workspace_symlinks_are_resolved(tree, tmp_path):
    (tree / "a" / ".memprove").mkdir()
    link = tmp_path.resolve() / "w" / "link"
    link.symlink_to(tree / "a" / "b", target_is_directory=True)
    assert found({"CLAUDE_PROJECT_DIR": str(link)})[::2] == (str(tree / "a"), True)


# --------------------------------------------------------------------------
# check_daemon_url: only http:// to loopback; [1] is the port, [3] the base path
# --------------------------------------------------------------------------

@pytest.mark.parametrize("url, port, base", [
    ("http://127.0.0.1:47311", 47311, ""),
    ("http://127.0.0.1:47311/", 47311, ""),
    ("http://127.0.0.1:8080/api/", 8080, "/api"),
    ("http://127.255.255.254:65535/x/", 65535, "/x"),
    ("http://[::1]:9000/base/", 9000, "/base"),
    ("http://localhost:4000/", 4000, ""),
])
def test_daemon_url_loopback_http_accepted(url, port, base):
    checked = mp.check_daemon_url(url)
    assert checked[1] == port
    assert checked[3] == base


@pytest.mark.parametrize("url", [
    "https://127.0.0.1:47311", "http://10.0.0.1:47311", "http://%s.example:47311" % PLANTED.lower(),
    "http://[::2]:47311", "http://u:p@127.0.0.1:47311", "http://127.0.0.1:65536", "garbage",
    "http://127.0.0.1:0", "http://@127.0.0.1:47311", "http://:@127.0.0.1:47311",
    "http://127.0.0.1:47311/a b", "http://127.0.0.1:47311/\u00e9",
])
def test_daemon_url_other_addresses_refused(url):
    problem = raises_problem("daemon_address_refused", mp.check_daemon_url, url)
    assert url not in problem.text() and PLANTED.lower() not in problem.text()
