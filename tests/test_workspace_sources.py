"""Where the Workspace search starts (contract.md §2; clients.md, "Finding the
Workspace under any client"): `mcp serve --workspace DIR`, MEMPROVE_WORKSPACE,
CLAUDE_PROJECT_DIR, the client's roots, the working directory, the first set
one winning; an unexpanded `${...}` in the first two is skipped with a warning;
a relative value is relative to the working directory.  Seen through
`context`'s `workspace` object and `config.warnings`, over real pipes.

Also what makes a Workspace unusable (§2: a start directory that does not exist, is a file,
or is deleted, a root whose name is not UTF-8, fuzzed), and the walk up judging `.memprove`
without following links or taking another user's (contract.md §6 rules 15 and 22).
"""

import json
import os
import sys
from collections import Counter

import pytest

from hardening_support import (FUZZ_EXAMPLES, SETTINGS, UserDaemon, call_tool, context_path,
                               doctor_as, hypothesis_or_fail, outcome_of, read_json, report,
                               victims_daemon, victims_token)
from harness import make_workspace, run_cli, server_file_uri, server_path, snapshot

hypothesis_or_fail()
from hypothesis import given, settings, strategies as st  # noqa: E402

SOURCES = ("--workspace", "MEMPROVE_WORKSPACE", "CLAUDE_PROJECT_DIR", "roots",
           "working directory")


@pytest.fixture
def places(tmp_path):
    """One Workspace per source, and a working directory that is a Workspace too."""
    return {source: make_workspace(tmp_path / ("ws for " + source.strip("-")))
            for source in SOURCES}


def start(start_server, places, given, env=None, cwd=None):
    """A server where the sources in `given` are set to their places."""
    extra = dict(env or {})
    args = []
    if "--workspace" in given:
        args += ["--workspace", str(places["--workspace"])]
    for name in ("MEMPROVE_WORKSPACE", "CLAUDE_PROJECT_DIR"):
        if name in given:
            extra[name] = str(places[name])
    return start_server(env=extra, args=args, cwd=cwd or places["working directory"])


def legacy_with_roots(server, roots_dir):
    """The legacy handshake declaring roots, answering the roots/list request."""
    params = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": True}},
              "clientInfo": {"name": "pytest-client", "version": "1.0"}}
    assert "result" in server.request("initialize", params)
    server.notify("notifications/initialized")
    request = server.server_request()
    assert request["method"] == "roots/list"
    server.answer(request, {"roots": [{"uri": server_file_uri(roots_dir), "name": "project"}]})


def context(server, era="legacy"):
    result = server.call("context", era=era)["result"]
    assert result["isError"] is False, result
    return result["structuredContent"]


# -- the order -----------------------------------------------------------------------

@pytest.mark.parametrize("first", range(len(SOURCES)))
def test_the_first_set_source_wins(start_server, places, first):
    """Every source from `first` on is set; the first of them is used."""
    given = SOURCES[first:]
    server = start(start_server, places, given)
    if "roots" in given:
        legacy_with_roots(server, places["roots"])
    else:
        server.initialize()
    found = context(server)
    assert found["workspace"]["found_by"] == SOURCES[first]
    assert found["workspace"]["root"] == server_path(places[SOURCES[first]])
    assert found["workspace"]["marked"] is True
    assert found["workspace"]["problem"] is None
    assert found["config"]["warnings"] == []
    assert server.close() == 0


@pytest.mark.parametrize("given", [("--workspace",), ("MEMPROVE_WORKSPACE",),
                                   ("CLAUDE_PROJECT_DIR",), ()])
def test_the_modern_era_has_the_same_order_without_roots(start_server, places, given):
    server = start(start_server, places, given)
    found = context(server, era="modern")
    expected = given[0] if given else "working directory"
    assert found["workspace"]["found_by"] == expected
    assert found["workspace"]["root"] == server_path(places[expected])
    assert server.close() == 0


def test_an_empty_variable_is_not_set(start_server, places):
    server = start(start_server, places, ("CLAUDE_PROJECT_DIR",),
                   env={"MEMPROVE_WORKSPACE": ""})
    server.initialize()
    found = context(server)
    assert found["workspace"]["found_by"] == "CLAUDE_PROJECT_DIR"
    assert found["config"]["warnings"] == []
    assert server.close() == 0


# -- ${...} left unexpanded -----------------------------------------------------------

@pytest.mark.parametrize("value", ["${workspaceFolder}", "${ workspaceFolder }",
                                   "${{ workspaceFolder }}", "/home/ana/${project}/src",
                                   "${env:HOME}"])
def test_an_unexpanded_variable_is_skipped_with_a_warning(start_server, places, value):
    server = start(start_server, places, ("CLAUDE_PROJECT_DIR",),
                   env={"MEMPROVE_WORKSPACE": value})
    server.initialize()
    found = context(server)
    assert found["workspace"]["found_by"] == "CLAUDE_PROJECT_DIR"
    assert found["workspace"]["root"] == server_path(places["CLAUDE_PROJECT_DIR"])
    assert found["workspace"]["problem"] is None
    assert found["config"]["warnings"] == ["MEMPROVE_WORKSPACE not expanded"]
    assert server.close() == 0


def check_unexpanded_option_falls_to_the_variable(start_server, places, value, python=None):
    """`--workspace ${workspaceFolder}` is skipped with a warning and MEMPROVE_WORKSPACE
    (set to `value`, naming the place for MEMPROVE_WORKSPACE) is the Workspace."""
    server = start_server(python=python, args=["--workspace", "${workspaceFolder}"],
                          env={"MEMPROVE_WORKSPACE": value}, cwd=places["working directory"])
    server.initialize()
    found = context(server)
    assert found["workspace"]["found_by"] == "MEMPROVE_WORKSPACE"
    assert found["workspace"]["root"] == server_path(places["MEMPROVE_WORKSPACE"], python)
    assert found["config"]["warnings"] == ["--workspace not expanded"]
    assert server.close() == 0


def test_an_unexpanded_option_is_skipped_with_a_warning(start_server, places):
    check_unexpanded_option_falls_to_the_variable(start_server, places,
                                                  str(places["MEMPROVE_WORKSPACE"]))


def test_both_unexpanded_fall_to_roots_then_the_working_directory(start_server, places):
    server = start_server(args=["--workspace", "${workspaceFolder}"],
                          env={"MEMPROVE_WORKSPACE": "${workspaceFolder}"},
                          cwd=places["working directory"])
    legacy_with_roots(server, places["roots"])
    found = context(server)
    assert found["workspace"]["found_by"] == "roots"
    assert found["workspace"]["root"] == server_path(places["roots"])
    assert sorted(found["config"]["warnings"]) == ["--workspace not expanded",
                                                   "MEMPROVE_WORKSPACE not expanded"]
    modern = context(server, era="modern")            # no roots in the modern era
    assert modern["workspace"]["found_by"] == "working directory"
    assert modern["workspace"]["root"] == server_path(places["working directory"])
    assert server.close() == 0


def test_a_warning_never_shows_the_value(start_server, places, plant):
    value = "${" + plant("PLANTED-WS") + "}"
    server = start(start_server, places, (), env={"MEMPROVE_WORKSPACE": value})
    server.initialize()
    found = server.call("context")["result"]
    assert "PLANTED-WS" not in found["content"][0]["text"]
    assert found["structuredContent"]["config"]["warnings"] == ["MEMPROVE_WORKSPACE not expanded"]
    assert server.close() == 0                        # the planted value on neither stream


# -- relative values ------------------------------------------------------------------

@pytest.mark.parametrize("source", ["--workspace", "MEMPROVE_WORKSPACE", "CLAUDE_PROJECT_DIR"])
def test_a_relative_value_is_relative_to_the_working_directory(start_server, tmp_path, source):
    cwd = make_workspace(tmp_path / "cwd")
    target = make_workspace(tmp_path / "sibling project")
    nested = make_workspace(cwd / "sub" / "inner")
    for value, expected in (("../sibling project", target), ("sub/inner", nested),
                            ("./sub/../sub/inner", nested)):
        if source == "--workspace":
            server = start_server(args=["--workspace", value], cwd=cwd)
        else:
            server = start_server(env={source: value}, cwd=cwd)
        server.initialize()
        found = context(server)
        assert found["workspace"]["found_by"] == source
        assert found["workspace"]["root"] == server_path(expected), value
        assert server.close() == 0


def test_a_start_directory_climbs_to_its_workspace(start_server, places):
    """The source gives the start directory; the root is found from there up."""
    deep = places["MEMPROVE_WORKSPACE"] / "src" / "pkg"
    deep.mkdir(parents=True)
    server = start_server(env={"MEMPROVE_WORKSPACE": str(deep)}, cwd=places["working directory"])
    server.initialize()
    found = context(server)
    assert found["workspace"]["root"] == server_path(places["MEMPROVE_WORKSPACE"])
    assert found["workspace"]["found_by"] == "MEMPROVE_WORKSPACE"
    assert server.close() == 0


# -- a set source that cannot be used -------------------------------------------------

@pytest.mark.parametrize("source", ["--workspace", "MEMPROVE_WORKSPACE"])
def test_a_missing_directory_is_unusable_never_the_next_source(start_server, places, tmp_path,
                                                               source):
    missing = tmp_path / "no such project"
    if source == "--workspace":
        server = start_server(args=["--workspace", str(missing)], cwd=places["working directory"])
    else:
        server = start_server(env={source: str(missing)}, cwd=places["working directory"])
    server.initialize()
    found = context(server)
    assert found["workspace"]["found_by"] == source
    assert found["workspace"]["problem"] == "workspace_unusable"
    assert found["workspace"]["root"] == server_path(missing)
    assert not missing.exists()                        # never created
    assert server.close() == 0


def test_serve_workspace_needs_a_value(pyz, make_env, workspace):
    for args in (["mcp", "serve", "--workspace"], ["mcp", "serve", "--workspace="]):
        done = run_cli(sys.executable, pyz, args, make_env(), workspace)
        assert done.returncode == 2, args
        assert done.stdout == b""
        assert done.stderr.decode().count("\n") == 1


def test_the_sources_under_every_python(start_server, server_python, places):
    # A relative value, too: relative to the working directory.
    check_unexpanded_option_falls_to_the_variable(start_server, places,
                                                  "../ws for MEMPROVE_WORKSPACE", server_python)


# =============================================================================
# Workspace roots of arbitrary bytes (contract.md §2, issue 11)
# =============================================================================

PATH_CALLS = [("begin", {"new_task": "Path fuzz"}), ("tasks", {}), ("pack", {}),
              ("end", {}), ("checkpoint", {"next_action": "Go on."}), ("context", {})]


@pytest.fixture
def linked_server(hserve, config, daemon, tmp_path):
    """A server whose CLAUDE_PROJECT_DIR is a symlink the test re-points between calls: the
    server resolves it (§2: paths are resolved), so each call meets another root."""
    link = tmp_path / "project-link"
    home = tmp_path / "roots"
    home.mkdir()
    first = home / "first"
    first.mkdir()
    link.symlink_to(first)
    server = hserve(config=config, timeout=5, env={"CLAUDE_PROJECT_DIR": str(link)})
    server.initialize()
    return server, link, home


def _point(link, target):
    fresh = os.fsencode(str(link)) + b".new"
    os.symlink(target, fresh)
    os.rename(fresh, os.fsencode(str(link)))


def test_workspace_path_fuzz(linked_server, daemon):
    """§2: a root whose name is not valid UTF-8 is `workspace_unusable` from every tool that
    needs the Workspace, before any daemon operation, and `context` says so; a root whose
    name is valid UTF-8, however odd, is used (never workspace_unusable, never internal_error)."""
    server, link, home = linked_server
    serial = [0]
    tally = Counter()

    @settings(max_examples=max(20, FUZZ_EXAMPLES // 3), **SETTINGS)
    @given(name=st.binary(min_size=1, max_size=12).filter(
               lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b"..")),
           call=st.sampled_from(PATH_CALLS))
    def run(name, call):
        serial[0] += 1
        root = os.fsencode(str(home)) + b"/%d-" % serial[0] + name
        os.mkdir(root)
        os.mkdir(root + b"/.memprove")
        os.mkdir(root + b"/.git")
        _point(link, root)
        try:
            root.decode("utf-8")
            usable = True
        except UnicodeDecodeError:
            usable = False
        tool, args = call
        ops_before = len(daemon.ops)
        code, value = outcome_of(server.call(tool, args, id="p%d" % serial[0]))
        assert code != "internal_error", (root, tool, value)
        tally[(usable, code)] += 1
        if tool == "context":
            assert code == "ok", value
            assert value["workspace"]["problem"] == (None if usable else "workspace_unusable"), value
        elif usable:
            assert code != "workspace_unusable", (root, tool, value)
        else:
            assert code == "workspace_unusable", (root, tool, value)
            assert len(daemon.ops) == ops_before, [op["op"] for op in daemon.ops[ops_before:]]
            assert os.listdir(root + b"/.memprove") == []

    run()
    assert server.close() == 0
    report("workspace_path_fuzz", calls=sum(tally.values()),
           outcomes=dict(("%s %s" % ("utf8" if k[0] else "not-utf8", k[1]), n)
                         for k, n in tally.items()))


def test_rule11_deleted_working_directory(hserve, config, daemon, tmp_path):
    """§6 rule 11 and §2: a deleted working directory gives `workspace_unusable` from the tools
    (before any daemon operation) and a working `context` (`workspace.root` null, problem
    `workspace_unusable`)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    server = hserve(config=config, timeout=5, cwd=gone)
    server.initialize()
    gone.rmdir()
    daemon.clear_ops()
    for tool, args in (("begin", {"new_task": "Nowhere"}), ("tasks", {}), ("checkpoint",
                       {"next_action": "x"}), ("pack", {}), ("end", {})):
        code, text = call_tool(server, tool, args)
        assert code == "workspace_unusable", (tool, text)
    assert daemon.ops == []
    code, shown = call_tool(server, "context")
    assert code == "ok", shown
    assert shown["workspace"]["root"] is None
    assert shown["workspace"]["problem"] == "workspace_unusable"
    assert not gone.exists()
    assert server.close() == 0


# =============================================================================
# §2: a Workspace that cannot be used
# =============================================================================

@pytest.mark.parametrize("variable", ["CLAUDE_PROJECT_DIR", "MEMPROVE_WORKSPACE"])
def test_s2_start_directory_that_does_not_exist(hserve, config, daemon, workspace, tmp_path, variable):
    """§2: CLAUDE_PROJECT_DIR or MEMPROVE_WORKSPACE naming a directory that does not exist:
    `workspace_unusable` before any daemon operation, nothing created; `context` answers with
    the path and the problem."""
    missing = tmp_path / "no" / "such" / "project"
    server = hserve(config=config, timeout=5, env={variable: str(missing)})
    server.initialize()
    daemon.clear_ops()
    for tool, args in (("begin", {"new_task": "Mistyped"}), ("tasks", {}), ("end", {})):
        code, text = call_tool(server, tool, args)
        assert code == "workspace_unusable", (tool, text)
    assert daemon.ops == []
    assert not (tmp_path / "no").exists()
    code, shown = call_tool(server, "context")
    assert code == "ok", shown
    assert shown["workspace"]["problem"] == "workspace_unusable"
    assert shown["workspace"]["found_by"] == variable
    assert shown["workspace"]["root"] == server_path(missing)
    assert server.close() == 0


def test_s2_start_directory_that_is_a_file(hserve, config, daemon, workspace, tmp_path):
    """§2: a start directory that is a file is `workspace_unusable` too."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    server = hserve(config=config, timeout=5, env={"CLAUDE_PROJECT_DIR": str(a_file)})
    server.initialize()
    code, text = call_tool(server, "begin", {"new_task": "A file"})
    assert code == "workspace_unusable", text
    assert daemon.ops == [] and a_file.read_text() == "x"
    assert server.close() == 0


@pytest.mark.parametrize("how", ["working-directory", "CLAUDE_PROJECT_DIR"])
def test_s2_workspace_path_not_utf8(hserve, config, daemon, tmp_path, how):
    """§2: a Workspace root whose name is not valid UTF-8 (`ws\\xff`) cannot be sent to the
    daemon as the same string in a query and a body: `workspace_unusable` before any daemon
    operation, while `context` answers with `"problem": "workspace_unusable"`."""
    raw = os.fsencode(str(tmp_path)) + b"/ws\xff"
    os.mkdir(raw)
    os.mkdir(raw + b"/.memprove")
    os.mkdir(raw + b"/.git")
    root = os.fsdecode(raw)
    if how == "working-directory":
        server = hserve(config=config, timeout=5, cwd=root)
    else:
        server = hserve(config=config, timeout=5, env={"CLAUDE_PROJECT_DIR": root})
    server.initialize()
    daemon.clear_ops()
    for tool, args in (("begin", {"new_task": "Not UTF-8"}), ("tasks", {}), ("begin", {"task": 1})):
        code, text = call_tool(server, tool, args)
        assert code == "workspace_unusable", (tool, text)
    assert daemon.ops == []
    assert os.listdir(raw + b"/.memprove") == []
    code, shown = call_tool(server, "context")
    assert code == "ok", shown
    assert shown["workspace"]["problem"] == "workspace_unusable"
    assert server.close() == 0


def test_s2_usable_workspace_reports_no_problem(hserve, config, daemon, workspace):
    """§2: a usable Workspace: `context`'s workspace.problem is null."""
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, shown = call_tool(server, "context")
    assert code == "ok" and shown["workspace"]["problem"] is None, shown
    assert server.close() == 0


# =============================================================================
# Rule 15: another user's .memprove/ is not a Workspace
# =============================================================================

@pytest.mark.parametrize("owner", ["third", "root", "victim"])
def test_rule15_another_users_memprove_above_a_project(local_users, start_server, planted, owner):
    """A shared directory without `.git` (here 01777, like /tmp) holds a `.memprove/` of
    another user (0777, so that a write would succeed) and the victim's project below it.
    The walk up passes over it: the project is its own Workspace, `context` warns
    `.memprove owned by another user`, and `begin` writes the victim's context in the
    project, nothing in the other user's directory.  One of root, or of the victim, is a
    Workspace as before."""
    users = local_users
    victim = users.victim
    shared = users.directory("shared", mode=0o1777)
    found = users.directory("shared/.memprove", mode=0o777,
                            owner={"third": users.third, "root": None, "victim": victim}[owner])
    project = users.directory("shared/project", owner=victim)
    daemon, env = victims_daemon(users, planted)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "context")
    assert code == "ok", value
    warned = ".memprove owned by another user" in value["config"]["warnings"]
    workspace = value["workspace"]
    if owner == "third":
        assert (workspace["root"], workspace["marked"], warned) == (str(project), False, True), value
    else:
        assert (workspace["root"], workspace["marked"], warned) == (str(shared), True, False), value
    code, value = call_tool(server, "begin", {"new_task": "The victim's work"})
    assert code == "ok", value
    assert server.close() == 0
    if owner == "third":
        assert os.listdir(str(found)) == []
        written = context_path(project)
        assert os.stat(str(written)).st_uid == victim.uid
        assert read_json(written)["workspace"]["root"] == str(project)
    else:
        assert read_json(found / "context.json")["task"]["id"] == value["task_id"]


def test_rule15_another_users_memprove_in_the_start_directory_itself(local_users, start_server,
                                                                     planted):
    """The server starts in the shared directory itself (no `.git`), so the Workspace is
    that directory, whose `.memprove/` is another user's (0777, holding their context):
    it is neither read nor written.  `context` reports `context_unreadable` with the hint,
    `begin` fails with it, and doctor's workspace check fails
    with a fix that names another folder, not the removal of theirs."""
    users = local_users
    victim = users.victim
    shared = users.directory("shared", mode=0o1777)
    theirs = users.directory("shared/.memprove", mode=0o777, owner=users.third)
    their_context = {"version": 1, "workspace": {"id": "w", "root": str(shared)},
                     "task": {"id": "their-task", "number": 7, "title": "Theirs"}, "session": None}
    (theirs / "context.json").write_text(json.dumps(their_context))
    users.third.own(theirs / "context.json")
    before = snapshot(theirs)
    daemon, env = victims_daemon(users, planted)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=shared,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "context")
    assert code == "ok", value
    assert (value["workspace"]["root"], value.get("context_error")) == \
        (str(shared), "context_unreadable"), value
    assert value["task"] is None, value                # their Task is not shown as ours
    # Refused with the context file, before any daemon request (as a link in .memprove/ is).
    code, text = call_tool(server, "begin", {"new_task": "The victim's work"})
    assert code == "context_unreadable" and "belongs to another user" in text, text
    status, checks, _ = doctor_as(users, victim, env, shared)
    assert (status, checks["workspace"]["code"]) == (1, "context_unreadable"), checks["workspace"]
    assert "--workspace" in checks["workspace"]["fix"], checks["workspace"]
    assert server.close() == 0
    assert snapshot(theirs) == before


# =============================================================================
# Rule 22: the walk up judges .memprove without following links
# =============================================================================

@pytest.mark.parametrize("owner", ["other", "victim"])
def test_rule22_a_linked_memprove_above_the_project(local_users, start_server, planted, owner):
    """A shared folder (01777, like /tmp, no `.git`) holds `.memprove -> /etc`, a directory
    of root's, above the victim's project (no `.git` either).  Another user's link is passed
    over with rule 15's warning: the project is its own Workspace and `begin` works there.
    The victim's own link makes the shared folder the Workspace, refused as a link."""
    users = local_users
    victim = users.victim
    shared = users.directory("shared", mode=0o1777)
    link = shared / ".memprove"
    os.symlink("/etc", str(link))
    who = {"other": users.other, "victim": victim}[owner]
    os.lchown(str(link), who.uid, who.gid)
    project = users.directory("shared/project", owner=victim)
    daemon_data, token, env = victims_token(users, planted)
    UserDaemon(users, victim, daemon_data, token)
    server = start_server(python=users.python, program=users.pyz, env=env, cwd=project,
                          user=victim)
    server.initialize()
    code, value = call_tool(server, "context")
    assert code == "ok", value
    if owner == "other":
        assert value["workspace"]["root"] == str(project) and not value["workspace"]["marked"]
        assert ".memprove owned by another user" in value["config"]["warnings"], value
        code, begun = call_tool(server, "begin", {"new_task": "Below a shared folder"})
        assert code == "ok", begun
        assert (project / ".memprove" / "context.json").is_file()
    else:
        assert value["workspace"]["root"] == str(shared) and value["workspace"]["marked"], value
        code, text = call_tool(server, "begin", {"new_task": "Through my own link"})
        assert code == "context_unreadable" and "The file .memprove is a link." in text, text
    assert os.path.islink(str(link)) and not os.path.exists("/etc/context.json")
    assert server.close() == 0
