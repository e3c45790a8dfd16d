"""Unit tests of configuration resolution (memprove_mcp.py's "Configuration and Workspace").

No subprocess, no daemon: the functions are called directly.  Every expected value is written
out by hand from contract.md (§1 configuration, §2 Workspace); nothing is computed by calling
the function under test.  (Argument validation is in test_tool_dispatch.py.)
"""

import os
import threading
from pathlib import Path

import pytest

from harness import PLANTED, raises_problem
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
def config(tmp_path):
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
def test_token_source_order(tmp_path, config, env_keys, expected):
    write(config / "token", "config-token")
    path = write(tmp_path / "t", "file-token")
    env = {"MEMPROVE_TOKEN": "env-token", "MEMPROVE_TOKEN_FILE": path}
    env = dict((key, env[key]) for key in env_keys)
    files = {"MEMPROVE_TOKEN": None, "MEMPROVE_TOKEN_FILE": path, "config": str(config / "token")}
    tokens = {"MEMPROVE_TOKEN": "env-token", "MEMPROVE_TOKEN_FILE": "file-token", "config": "config-token"}
    assert mp.token_source(env, str(config)) == (expected, files[expected])
    assert mp.read_token(env, str(config)) == (tokens[expected], False)


def test_token_nothing_set_is_missing(config):
    assert mp.token_source({"MEMPROVE_TOKEN": "", "MEMPROVE_TOKEN_FILE": ""}, str(config)) == (None, None)
    raises_problem("token_missing", mp.read_token, {}, str(config))


@pytest.mark.parametrize("env", [
    {"MEMPROVE_TOKEN_FILE": "no-such-file"},     # a mistyped file never falls through
    {"MEMPROVE_TOKEN": " \t "},                  # nor does a blank variable
    {"MEMPROVE_TOKEN_FILE": "."},                 # a directory is no token file
])
def test_token_set_source_unusable_never_falls_through(tmp_path, config, env):
    write(config / "token", "config-token")
    if "MEMPROVE_TOKEN_FILE" in env:
        env = {"MEMPROVE_TOKEN_FILE": str(tmp_path / env["MEMPROVE_TOKEN_FILE"])}
    raises_problem("token_missing", mp.read_token, env, str(config))


@pytest.mark.parametrize("content", ["", "\nsecond-line-token\n"])
def test_read_token_empty_first_line_is_missing(tmp_path, config, content):
    env = {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", content)}
    raises_problem("token_missing", mp.read_token, env, str(config))


def test_read_token_variable_stripped_printable_bounds_kept(config):
    assert mp.read_token({"MEMPROVE_TOKEN": "  !tok-123~\t\n"}, str(config)) == ("!tok-123~", False)


@pytest.mark.parametrize("content", ["first-token\nsecond-token\n", "  first-token  \r\nsecond-token"])
def test_read_token_file_first_line_stripped(tmp_path, config, content):
    env = {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", content)}
    assert mp.read_token(env, str(config))[0] == "first-token"


@pytest.mark.parametrize("raw", ["tok en", "t\u00f6ken", "tok\x7f", b"tok\xffen\n"])
def test_read_token_outside_printable_ascii_is_malformed(tmp_path, config, raw):
    env = {"MEMPROVE_TOKEN": raw} if isinstance(raw, str) else \
        {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", raw)}      # bytes: from a file
    raises_problem("token_malformed", mp.read_token, env, str(config))


@POSIX_ONLY
def test_read_token_fifo_is_missing_without_blocking(tmp_path, config):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    outcome = []
    worker = threading.Thread(daemon=True, target=lambda: outcome.append(
        code_of(mp.read_token, {"MEMPROVE_TOKEN_FILE": str(fifo)}, str(config))))
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "read_token blocked on a FIFO"
    assert outcome == ["token_missing"]


@POSIX_ONLY
@pytest.mark.parametrize("mode, too_open", [(0o600, False), (0o640, True), (0o604, True)])
def test_read_token_file_mode_flags_group_or_others(tmp_path, config, mode, too_open):
    env = {"MEMPROVE_TOKEN_FILE": write(tmp_path / "t", "mode-token\n", mode)}
    assert mp.read_token(env, str(config)) == ("mode-token", too_open)


@pytest.mark.parametrize("content", [PLANTED + " with space", "\n" + PLANTED])
def test_token_problems_never_show_token_or_path(tmp_path, config, content):
    path = write(tmp_path / "secret-token-file", content)
    problem = raises_problem(
        "token_malformed" if not content.startswith("\n") else "token_missing",
        mp.read_token, {"MEMPROVE_TOKEN_FILE": path}, str(config))
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
def test_data_dir_sources(tmp_path, config, variable, line, expected, source):
    where = dict(T=str(tmp_path.resolve()), C=str(config))
    write(config / "data-dir", line.format(**where))
    env = {} if variable is None else {"MEMPROVE_DATA_DIR": variable.format(**where)}
    assert mp.data_directory(env, str(config)) == (os.path.normpath(expected.format(**where)), source)


@pytest.mark.parametrize("content", [None, "  \n\n", "directory"])
def test_data_dir_missing_or_empty(config, content):
    write(config / "data-dir", content)
    raises_problem("data_dir_missing", mp.data_directory, {}, str(config))


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


def status(uid, mode):
    return os.stat_result((mode, 0, 0, 1, uid, uid, 0, 0, 0, 0))


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
    ((ME, 0o40775), (ME, 0o100644),
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
