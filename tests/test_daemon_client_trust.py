"""Which daemon the token goes to (contract.md §6 rules 17 and 19), against the built .pyz over
real pipes, real files, the reference daemon over real HTTP and real other uids.

- Rule 17: the token goes only to a listener of the user who owns daemon.json (or root):
  another user on a dead daemon's port gets `daemon_address_refused` and not a byte, and the
  owner is read from sock_diag or /proc's tables alike, a row across a read boundary found.
- Rule 19: the token goes only to a daemon.json the user can trust: it and its data
  directory the user's or root's (or both one service account's in a folder no one else can
  write), with no link another user made on the way; the controls (the user's own daemon,
  link, a service account's) still work.
- Rule 31: nor to a data directory that a data-dir someone else could write names (a team's
  configuration directory, a folder above it anyone can write, another user's link on the
  way): the hook, the tools and doctor send nothing; the user's own folder under /tmp works.
"""

import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest

from hardening_support import (UserDaemon, UserListener, call_tool, doctor_as, victims_daemon,
                               victims_project, victims_token)
from harness import SAFETY_TIMEOUT, clean_env, run_cli
import memprove_mcp as mp


# =============================================================================
# Rule 17: the token goes to the daemon's owner only
# =============================================================================

REFUSED_HINT = "Another user listens on that port."


def test_rule17_a_dead_daemons_port_taken_by_another_user(local_users, start_server, planted):
    """The victim's daemon dies (killed: its daemon.json stays) and another user listens on
    its port.  `tasks` answers `daemon_address_refused` (hint: another user listens there)
    and doctor's `daemon` check fails (exit 1): neither sends the listener a byte."""
    users = local_users
    victim = users.victim
    daemon, env = victims_daemon(users, planted)
    project = victims_project(users)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "tasks")
    assert code == "ok", value                     # the victim's own daemon gets the token
    daemon.crash()
    listener = UserListener(users, users.other, port=daemon.port)
    try:
        code, text = call_tool(server, "tasks")
        status, checks, output = doctor_as(users, victim, env, project)
    finally:
        received = listener.stop()
    assert code == "daemon_address_refused" and REFUSED_HINT in text, text
    assert (status, checks["daemon"]["status"], checks["daemon"]["code"]) == \
        (1, "fail", "daemon_address_refused"), checks["daemon"]
    assert all(data == b"" for data in received), "the listener received %r" % received
    assert server.close() == 0
    for secret in planted:
        assert secret.encode() not in output


def loopback_or_skip(host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.bind((host, 0))
    except OSError:
        pytest.skip("%s cannot be bound here" % host)
    finally:
        probe.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
@pytest.mark.parametrize("owner", ["victim", "other", "root"])
def test_rule17_only_the_owner_of_daemon_json_gets_the_token(local_users, start_server, planted,
                                                            host, owner):
    """daemon.json (the victim's) names a loopback port whose listener is the victim's, another
    user's, or root's.  Only the victim's own listener gets the token (the control that
    the listener sees what is sent); any other owner, root included, gets nothing, and the
    call answers `daemon_address_refused` with the hint."""
    users = local_users
    victim = users.victim
    bind = "::1" if host == "::1" else "127.0.0.1"
    loopback_or_skip(bind)
    data, token, env = victims_token(users, planted)
    project = victims_project(users)
    listener = UserListener(users, {"victim": victim, "other": users.other, "root": None}[owner],
                            host=bind)
    url = "http://%s:%d" % ("[::1]" if host == "::1" else host, listener.port)
    (data / "daemon.json").write_text(json.dumps({"url": url, "pid": 4242}))
    victim.own(data / "daemon.json")
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    try:
        code, text = call_tool(server, "tasks")
    finally:
        received = listener.stop()
    assert server.close() == 0
    sent = b"".join(received)
    if owner == "victim":
        assert ("Authorization: Bearer " + token).encode() in sent, received
    else:
        assert code == "daemon_address_refused" and REFUSED_HINT in text, text
        assert sent == b"", "another owner's listener received %r" % received


@pytest.fixture(params=["127.0.0.1", "::1"])
def connection(request):
    """(the connection's far end as the server sees it, its near end) on loopback."""
    if not mp.PLATFORMS[mp.PLATFORM]["socket_tables"]:
        pytest.skip("this platform lists no socket owners (PLATFORMS' socket_tables)")
    loopback_or_skip(request.param)
    family = socket.AF_INET6 if ":" in request.param else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((request.param, 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        try:
            yield family, client.getpeername()[:2], client.getsockname()[:2]
        finally:
            accepted.close()
            client.close()


def test_rule17_sock_diag_and_the_proc_tables_name_the_same_owner(connection):
    family, near, far = connection
    try:
        diagnosed = mp.diagnosed_owner(family, near, far, time.monotonic() + SAFETY_TIMEOUT)
    except (OSError, ValueError) as error:
        diagnosed = error                   # refused here: the tables alone are checked
    listed = mp.tables_owner(mp.PLATFORMS[mp.PLATFORM]["socket_tables"], near, far)
    assert listed == os.geteuid(), listed
    assert diagnosed == os.geteuid() or isinstance(diagnosed, Exception), diagnosed
    # A connection that is not there is no one's, in either.
    gone = (near[0], far[1])
    assert mp.tables_owner(mp.PLATFORMS[mp.PLATFORM]["socket_tables"], gone, far) is None


@pytest.mark.parametrize("offset", [0, 65536 - 40, 65536 - 5, 65536, 3 * 65536 + 17])
def test_rule17_a_row_across_a_read_boundary_is_found(tmp_path, offset):
    """table_owner reads 64 KiB at a time: the row it looks for may start, or be cut,
    anywhere, and the uid after it may lie in the next read."""
    header = b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    row = b"   7: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  4321 0 99\n"
    filler = b"   1: 00000000:0000 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1 0 1\n"
    # Whole lines before the row, as many as start it at or just before `offset`.
    before = header + filler * max(0, (offset - len(header)) // len(filler))
    table = tmp_path / "tcp"
    table.write_bytes(before + row + filler * 3)
    assert mp.table_owner(str(table), " 0100007F:1F90 0100007F:C350 ") == 4321
    assert mp.table_owner(str(table), " 0100007F:1F91 0100007F:C350 ") is None


def test_rule17_a_connection_reset_before_it_is_asked_about_is_an_oserror(connection):
    """The daemon's end reset (SO_LINGER 0) before the server asks who owns it: the
    question raises OSError, which the daemon client reads as a lost answer (nothing
    was sent yet), never another exception that would be internal_error."""
    import select
    import struct
    family, near, far = connection
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((host, 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        accepted.close()
        try:
            assert select.select([client], [], [], SAFETY_TIMEOUT)[0]     # the reset is here
            with pytest.raises(OSError):
                client.recv(1)                                          # ECONNRESET
            with pytest.raises(OSError):
                mp.peer_owner(client, time.monotonic() + SAFETY_TIMEOUT)
        finally:
            client.close()


DIRECTORY_OWNER = "The data directory belongs to another user (uid %d)."


FILE_OWNER = "The file daemon.json belongs to another user (uid %d)."


DIRECTORY_MODE = "The data directory can be written by group or others (mode %s)."


FILE_MODE = "The file daemon.json can be written by group or others (mode %s)."


UNAVAILABLE = "daemon_unavailable: The memprove daemon is not running or cannot be reached. "


# =============================================================================
# Rule 19: the token goes only to a daemon the user trusts with it
# =============================================================================

def plant_daemon_json(directory, url, owner, mode):
    """daemon.json naming `url` in `directory`, of `owner` (a LocalUser; None: root)."""
    path = directory / "daemon.json"
    path.write_text(json.dumps({"url": url, "pid": 4242}))
    os.chmod(str(path), mode)
    if owner is not None:
        owner.own(path)
    return path


# (folder owner, folder mode, daemon.json owner, daemon.json mode, the hint); owners are
# "victim", "other" or "root".  The folders are under /tmp, as the README's old example.
UNTRUSTED = {
    "another user's folder": ("other", 0o755, "other", 0o644, DIRECTORY_OWNER % 54322),
    "a folder others can write": ("victim", 0o777, "other", 0o644, DIRECTORY_MODE % "0777"),
    "a shared folder like /tmp": ("root", 0o1777, "other", 0o644, DIRECTORY_MODE % "1777"),
    "another user's file in a private folder": ("victim", 0o700, "other", 0o644,
                                                FILE_OWNER % 54322),
    "a file others can write": ("victim", 0o700, "victim", 0o666, FILE_MODE % "0666"),
    "a folder the group can write": ("victim", 0o770, "victim", 0o644, DIRECTORY_MODE % "0770"),
    "a file the group can write": ("victim", 0o700, "victim", 0o664, FILE_MODE % "0664"),
    "root's folder others can write": ("root", 0o777, "root", 0o644, DIRECTORY_MODE % "0777"),
    "a third user's file in another's folder": ("other", 0o755, "third", 0o644,
                                                DIRECTORY_OWNER % 54322),
}


def the_victims_calls(start_server, users, env, project, listener):
    """(the victim's server, its `tasks` and `context`, doctor's (status, checks, output),
    what the listener received), all in `env`: every way the token could leave by."""
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=users.victim)
    server.initialize()
    try:
        return (server, call_tool(server, "tasks"), call_tool(server, "context"),
                doctor_as(users, users.victim, env, project), listener.stop())
    except BaseException:
        listener.stop()
        raise


@pytest.mark.parametrize("case", sorted(UNTRUSTED))
def test_rule19_a_daemon_json_someone_else_could_write_gets_no_token(local_users, start_server,
                                                                    planted, case):
    """The attack of the old quick start: another user makes the data directory first (or
    writes daemon.json where they can) and listens on the port it names.  Every tool call
    answers `daemon_unavailable` with a sentence naming the file and its owner or mode,
    doctor's `daemon` check fails with a private data directory as its fix, `context`
    warns, and the listener never gets a connection."""
    users = local_users
    victim, other = users.victim, users.other
    who = {"victim": victim, "other": other, "third": users.third, "root": None}
    folder_owner, folder_mode, file_owner, file_mode, hint = UNTRUSTED[case]
    _, token, env = victims_token(users, planted)
    project = victims_project(users)
    listener = UserListener(users, other)
    shared = users.directory("memprove-data", owner=who[folder_owner], mode=folder_mode)
    plant_daemon_json(shared, listener.url, who[file_owner], file_mode)
    env = dict(env, MEMPROVE_DATA_DIR=str(shared))
    server, tasks, context, (status, checks, output), received = the_victims_calls(
        start_server, users, env, project, listener)
    assert tasks == ("daemon_unavailable", UNAVAILABLE + hint), tasks
    assert context[0] == "ok" and context[1]["config"]["daemon_url"] is None, context
    assert "daemon.json not trusted" in context[1]["config"]["warnings"], context
    daemon = checks["daemon"]
    assert (status, daemon["status"], daemon["code"]) == (1, "fail", "daemon_unavailable"), daemon
    assert hint[0].lower() + hint[1:] in daemon["detail"], daemon
    assert "not sent" in daemon["detail"] and "mkdir -p -m 700" in daemon["fix"], daemon
    assert received == [], "the listener was connected to: %r" % received
    assert server.close() == 0
    assert token.encode() not in output


@pytest.fixture
def service_folder(local_users):
    """A data directory of a service account (`third`), where such a daemon keeps it: in a
    folder no one else can write, all the way up (/var/lib, not /tmp)."""
    base = Path(tempfile.mkdtemp(prefix="memprove-service-", dir="/var/lib"))
    os.chmod(str(base), 0o755)
    data = base / "data"
    data.mkdir(mode=0o755)
    os.chmod(str(data), 0o755)
    local_users.third.own(data)
    yield data
    shutil.rmtree(str(base), ignore_errors=True)


def test_rule19_a_service_accounts_daemon_seen_listening_gets_the_token(local_users, start_server,
                                                                       planted, service_folder):
    """The exception: daemon.json and its folder both of one other user (a service account,
    its folder in /var/lib), who is seen listening on the port (rule 17): believed, and the
    call is answered."""
    users = local_users
    _, token, env = victims_token(users, planted)
    UserDaemon(users, users.third, service_folder, token)
    env = dict(env, MEMPROVE_DATA_DIR=str(service_folder))
    server = start_server(python=users.python, program=users.pyz, env=env,
                          cwd=victims_project(users), user=users.victim)
    server.initialize()
    code, value = call_tool(server, "tasks")
    assert code == "ok" and value["tasks"] == [], value
    assert server.close() == 0


def test_rule19_a_service_accounts_folder_with_another_listener(local_users, start_server, planted,
                                                               service_folder):
    """The service account's daemon.json names a port another user listens on: rule 17's
    refusal, and no byte to that listener."""
    users = local_users
    _, token, env = victims_token(users, planted)
    listener = UserListener(users, users.other)
    plant_daemon_json(service_folder, listener.url, users.third, 0o644)
    env = dict(env, MEMPROVE_DATA_DIR=str(service_folder))
    server = start_server(python=users.python, program=users.pyz, env=env,
                          cwd=victims_project(users), user=users.victim)
    server.initialize()
    try:
        code, text = call_tool(server, "tasks")
    finally:
        received = listener.stop()
    assert code == "daemon_address_refused" and "Another user listens on that port." in text
    assert all(data == b"" for data in received), received
    assert server.close() == 0


def test_rule19_one_accounts_folder_in_a_folder_anyone_can_write_is_not_a_service(
        local_users, start_server, planted):
    """What an attacker can do in /tmp looks like a service account (folder and daemon.json
    their own, their own listener): the folder lies in one anyone can write, so it is
    refused, and the listener never gets a connection."""
    users = local_users
    other = users.other
    _, token, env = victims_token(users, planted)
    listener = UserListener(users, other)
    shared = users.directory("memprove-data", owner=other, mode=0o755)   # under /tmp
    plant_daemon_json(shared, listener.url, other, 0o644)
    env = dict(env, MEMPROVE_DATA_DIR=str(shared))
    server = start_server(python=users.python, program=users.pyz, env=env,
                          cwd=victims_project(users), user=users.victim)
    server.initialize()
    try:
        result = call_tool(server, "tasks")
    finally:
        received = listener.stop()
    assert result == ("daemon_unavailable", UNAVAILABLE + DIRECTORY_OWNER % other.uid), result
    assert received == [], received
    assert server.close() == 0


@pytest.fixture
def others_home(local_users):
    """A folder in another user's home where the victim can look (0755), outside /tmp so
    that no folder above it can be written by others, as a home's is: /var/lib stands for
    /home here."""
    base = Path(tempfile.mkdtemp(prefix="memprove-home-", dir="/var/lib"))
    os.chmod(str(base), 0o755)
    folder = base / "other" / "memprove"
    folder.mkdir(parents=True)
    for path in (folder.parent, folder):
        os.chmod(str(path), 0o755)
    local_users.other.own(folder.parent)
    yield folder
    shutil.rmtree(str(base), ignore_errors=True)


# A folder another user can write: a team's (setgid, the group theirs) or one like /tmp
# (where fs.protected_symlinks is 0, a link there is followed by anyone).
SHARED_FOLDERS = {"a team folder (2775)": 0o2775, "a sticky folder like /tmp (1777)": 0o1777}


@pytest.mark.parametrize("shared", sorted(SHARED_FOLDERS))
def test_rule19_a_link_another_user_made_to_their_home_gets_no_token(local_users, start_server,
                                                                    planted, others_home,
                                                                    shared):
    """The configured data directory is `memprove-data` in a shared folder; another user
    who can write that folder made it a link to a folder in their home, wrote daemon.json
    there and listens on the port it names.  Judged on the resolved path alone, their
    folder looks like a service account's (theirs, in folders no one else can write), so
    every call and doctor sent them the token.  The link is another user's, in a folder
    others can write: no tool call and no doctor run connects to the listener, the call
    is `daemon_unavailable`, `context` warns and doctor's `daemon` check fails."""
    users = local_users
    victim, other = users.victim, users.other
    _, token, env = victims_token(users, planted)
    project = victims_project(users)
    listener = UserListener(users, other)
    plant_daemon_json(others_home, listener.url, other, 0o644)
    team = users.directory("team")
    os.chown(str(team), 0, other.gid)
    os.chmod(str(team), SHARED_FOLDERS[shared])
    link = team / "memprove-data"
    os.symlink(str(others_home), str(link))
    os.lchown(str(link), other.uid, other.gid)
    env = dict(env, MEMPROVE_DATA_DIR=str(link))
    server, tasks, context, (status, checks, output), received = the_victims_calls(
        start_server, users, env, project, listener)
    # Counted, never shown: the bytes carry the token.
    assert len(received) == 0, "the listener was connected to %d times (the token in %d)" % (
        len(received), sum(token.encode() in data for data in received))
    assert tasks[0] == "daemon_unavailable", tasks
    assert context[0] == "ok" and context[1]["config"]["daemon_url"] is None, context
    assert "daemon.json not trusted" in context[1]["config"]["warnings"], context
    assert (status, checks["daemon"]["status"]) == (1, "fail"), checks["daemon"]
    assert server.close() == 0
    assert token.encode() not in output


def test_rule19_the_users_own_link_to_their_data_directory_still_works(local_users,
                                                                        start_server, planted):
    """The control: the victim's own link, in a folder of theirs no one else can write, to
    their own data directory where their daemon runs: believed, the call answered."""
    users = local_users
    victim = users.victim
    daemon_data, token, env = victims_token(users, planted)
    UserDaemon(users, victim, daemon_data, token)
    mine = users.directory("mine", owner=victim, mode=0o700)
    link = mine / "memprove-data"
    os.symlink(str(daemon_data), str(link))
    os.lchown(str(link), victim.uid, victim.gid)
    env = dict(env, MEMPROVE_DATA_DIR=str(link))
    server = start_server(python=users.python, program=users.pyz, env=env,
                          cwd=victims_project(users), user=victim)
    server.initialize()
    code, value = call_tool(server, "tasks")
    assert code == "ok" and value["tasks"] == [], value
    assert server.close() == 0


def test_rule19_the_users_own_daemon_in_a_private_folder_still_works(hserve, config, daemon):
    """The control: the daemon of the tests' own user, in pytest's private folder."""
    server = hserve(config=config, timeout=5)
    server.initialize()
    assert call_tool(server, "tasks")[0] == "ok"
    assert server.close() == 0


# =============================================================================
# Rule 31: the token goes only where a data-dir the user can trust names
# =============================================================================

CONFIG_DIR_MODE = "The configuration directory can be written by group or others (mode %s)."


DATA_DIR_MISSING = ("data_dir_missing: No data directory is configured in MEMPROVE_DATA_DIR or "
                    "the configuration directory. ")


TOKEN_MISSING = ("token_missing: No token was found in MEMPROVE_TOKEN, MEMPROVE_TOKEN_FILE or "
                 "the configuration directory. ")


def write_as(user, path, text, mode=0o644):
    """`text` in `path`, the file `user`'s (None: root's), as that user would have made it."""
    path.write_text(text)
    os.chmod(str(path), mode)
    if user is not None:
        user.own(path)
    return path


def team_folder_anyone_can_write(users, others_home):
    """A team folder (root's, 0777) used as the configuration directory: another user
    wrote its data-dir, naming their own data directory."""
    team = users.directory("team", mode=0o777)
    write_as(users.other, team / "data-dir", str(others_home) + "\n")
    return team, CONFIG_DIR_MODE % "0777"


def team_folder_of_another_users_group(users, others_home):
    """The victim's folder, 0775, whose group is another user's (a team's group): they
    wrote its data-dir."""
    team = users.directory("team", owner=users.victim, mode=0o775)
    os.chown(str(team), users.victim.uid, users.other.gid)
    write_as(users.other, team / "data-dir", str(others_home) + "\n")
    return team, CONFIG_DIR_MODE % "0775"


def below_a_folder_anyone_can_write(users, others_home):
    """The victim's own folder (0700), its data-dir the victim's, in a team folder anyone
    can write (0777, not sticky), where anyone can put a folder of the same name in its
    place: what it says is what another user could have chosen."""
    team = users.directory("team", mode=0o777)
    config = users.directory("team/memprove", owner=users.victim, mode=0o700)
    write_as(users.victim, config / "data-dir", str(others_home) + "\n", 0o600)
    return config, ("The folder %s above the configuration directory can be written by group "
                    "or others (mode 0777)." % team)


def another_users_link_on_the_way(users, others_home):
    """In a shared sticky folder (like /tmp), another user made `memprove` a link to a
    configuration directory of their own, in their home, whose data-dir names their data
    directory: judged on the resolved path alone, all of it one service account's."""
    other = users.other
    theirs = others_home.parent / "config"
    theirs.mkdir(mode=0o755)
    os.chmod(str(theirs), 0o755)
    write_as(other, theirs / "data-dir", str(others_home) + "\n")
    other.own(theirs)
    shared = users.directory("shared", mode=0o1777)
    link = shared / "memprove"
    os.symlink(str(theirs), str(link))
    os.lchown(str(link), other.uid, other.gid)
    return link, ("The link %s on the way to the configuration directory belongs to another "
                  "user (uid %d)." % (link, other.uid))


ATTACKS = {"a team folder anyone can write (0777)": team_folder_anyone_can_write,
           "a team folder of another user's group (0775)": team_folder_of_another_users_group,
           "a folder above anyone can write (0777)": below_a_folder_anyone_can_write,
           "another user's link on the way": another_users_link_on_the_way}


def with_a_task(users, project):
    """The victim's context naming a Task, so that the hook asks the daemon for its
    Capsule (and sends the token with that request)."""
    write_as(users.victim, project / ".memprove" / "context.json", json.dumps({
        "version": 1, "workspace": {"id": "w", "root": str(project)},
        "task": {"id": "0b5e0c1e-7d4f-4a55-9c1e-2f9a4a3e6b01", "number": 1, "title": "T"},
        "session": None}), 0o600)


def hook_as(users, user, env, project):
    """`mcp hook session-start` run by `user` to its end (the harness's safety timeout)."""
    return run_cli(users.python, users.pyz, ["mcp", "hook", "session-start"],
                   clean_env(user.home, env), project, user=user)


# (the attack, where the victim keeps the token): in a team folder, the token file too.
ATTACKS_AND_TOKENS = [(attack, "MEMPROVE_TOKEN_FILE") for attack in sorted(ATTACKS)] + \
    [(attack, "the team folder") for attack in ("a team folder anyone can write (0777)",
                                                "a team folder of another user's group (0775)")]


@pytest.mark.parametrize("attack, token_in", ATTACKS_AND_TOKENS)
def test_rule31_a_data_dir_another_user_could_write_gets_no_token(local_users, start_server,
                                                                 planted, others_home, attack,
                                                                 token_in):
    """The attack: the configuration directory is a team's folder (or lies in one, or is
    reached through another user's link); another user wrote its data-dir naming a data
    directory of their own, with their daemon.json naming a port they listen on (rule 19's
    service-account exception believed that).  The hook, every tool call and doctor send
    them nothing (no connection at all); the call answers `data_dir_missing`, or
    `token_missing` for a token kept in that folder, with the sentence saying why; `context`
    warns "data-dir not trusted"; doctor fails `config_dir_unsafe`.  (Before: the token in
    the listener's Authorization header, from the hook, the call and doctor.)"""
    users = local_users
    victim, other = users.victim, users.other
    _, token, env = victims_token(users, planted)
    project = victims_project(users)
    with_a_task(users, project)
    listener = UserListener(users, other)
    plant_daemon_json(others_home, listener.url, other, 0o644)
    config, hint = ATTACKS[attack](users, others_home)
    env = dict(env, MEMPROVE_CONFIG_DIR=str(config), MEMPROVE_DATA_DIR=None)
    expected = ("data_dir_missing", DATA_DIR_MISSING + hint)
    if token_in != "MEMPROVE_TOKEN_FILE":
        write_as(victim, config / "token", token + "\n", 0o600)
        env["MEMPROVE_TOKEN_FILE"] = None
        expected = ("token_missing", TOKEN_MISSING + hint)
    try:
        hook = hook_as(users, victim, dict(env, MEMPROVE_MCP_LOG=None), project)
    except BaseException:
        listener.stop()
        raise
    server, tasks, context, (status, checks, output), received = the_victims_calls(
        start_server, users, env, project, listener)
    # Counted, never shown (not even by pytest's report of the assertion): the bytes carry
    # the token.
    connections, with_the_token = len(received), sum(token.encode() in data for data in received)
    del received
    assert connections == 0, "the listener was connected to %d times (the token in %d)" % (
        connections, with_the_token)
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, b"", b""), hook
    assert tasks == expected, tasks
    assert context[0] == "ok", context
    report = context[1]["config"]
    assert (report["data_dir"], report["daemon_url"]) == (None, None), report
    assert "data-dir not trusted" in report["warnings"], report
    unsafe = checks["config_dir"]
    assert (status, unsafe["status"], unsafe["code"]) == (1, "fail", "config_dir_unsafe"), unsafe
    assert unsafe["detail"].endswith(hint[0].lower() + hint[1:]), unsafe
    assert (checks["data_dir"]["code"], checks["daemon"]["status"]) == \
        ("data_dir_missing", "skip"), checks
    assert server.close() == 0
    assert token.encode() not in output


def own_folder_under_tmp(users, folder):
    return folder


def own_link_to_it(users, folder):
    mine = users.directory("mine", owner=users.victim, mode=0o700)
    link = mine / "memprove"
    os.symlink(str(folder), str(link))
    os.lchown(str(link), users.victim.uid, users.victim.gid)
    return link


@pytest.mark.parametrize("reached_by", [own_folder_under_tmp, own_link_to_it],
                         ids=["its own folder under /tmp", "its own link to it"])
def test_rule31_the_users_own_config_dir_under_tmp_still_works(local_users, start_server, planted,
                                                              reached_by):
    """The control: the victim's own configuration directory (0700) under /tmp (root's
    sticky folder above it passes), its token and data-dir the victim's, naming the data
    directory where the victim's daemon runs, reached directly or through the victim's own
    link: believed, the call answered, doctor's checks ok."""
    users = local_users
    victim = users.victim
    data, token, env = victims_token(users, planted)
    UserDaemon(users, victim, data, token)
    folder = users.directory("victim-config", owner=victim, mode=0o700)
    write_as(victim, folder / "token", token + "\n", 0o600)
    write_as(victim, folder / "data-dir", str(data) + "\n", 0o600)
    env = dict(env, MEMPROVE_CONFIG_DIR=str(reached_by(users, folder)), MEMPROVE_DATA_DIR=None,
               MEMPROVE_TOKEN_FILE=None)
    project = victims_project(users)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "tasks")
    assert code == "ok" and value["tasks"] == [], value
    assert server.close() == 0
    status, checks, output = doctor_as(users, victim, env, project)
    assert [checks[name]["status"] for name in ("config_dir", "token", "data_dir", "daemon")] == \
        ["ok"] * 4, checks
    assert token.encode() not in output
