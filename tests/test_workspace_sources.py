"""Where the Workspace search starts (contract.md §2; clients.md, "Finding the
Workspace under any client"): `mcp serve --workspace DIR`, MEMPROVE_WORKSPACE,
CLAUDE_PROJECT_DIR, the client's roots, the working directory, the first set
one winning; an unexpanded `${...}` in the first two is skipped with a warning;
a relative value is relative to the working directory.  Seen through
`context`'s `workspace` object and `config.warnings`, over real pipes.
"""

import sys

import pytest

from harness import make_workspace, run_cli, server_file_uri, server_path

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
