"""Configuration (memprove_mcp.py section 8): values that do not fit are ignored and named
in `context`'s warnings
(contract.md §1), whatever characters they hold: environment values, MEMPROVE_TIMEOUT out of
bounds and a parent session of many digits (§6 rule 7), a token file open to others or an
agent name over 64 characters (§6 rule 11).  And the configuration files Windows tools write
(a byte order mark, UTF-16, CR LF) read as meant under the Windows Python.
"""

import json
import os

import pytest

from hardening_support import call_tool, ok_value, warned_about


@pytest.mark.parametrize("name, value", [
    ("MEMPROVE_PARENT_SESSION", "\u00b2"),     # str.isdigit() says yes, int() says no
    ("MEMPROVE_PARENT_SESSION", "\u0663"),     # an Arabic-Indic three
    ("MEMPROVE_PARENT_SESSION", "0"),
    ("MEMPROVE_PARENT_SESSION", "x"),
    ("MEMPROVE_TIMEOUT", "nan"),
    ("MEMPROVE_TIMEOUT", "-1"),
    ("MEMPROVE_AGENT_ROLE", "Reviewer"),
])
def test_an_ignored_value_is_a_warning_never_a_crash(start_server, name, value):
    server = start_server(env={name: value})
    server.initialize()
    result = server.call("context")["result"]
    assert result["isError"] is False, result
    assert result["structuredContent"]["config"]["warnings"] == [name]
    assert server.close() == 0


# =============================================================================
# Rule 7: numbers from outside have bounds
# =============================================================================

@pytest.mark.parametrize("value", ["1e10", "inf", "86401", "1" * 5000],
                         ids=["1e10", "inf", "86401", "5000-digits"])
def test_rule7_timeout_out_of_bounds_is_ignored_with_a_warning(hserve, config, daemon, workspace,
                                                                value):
    """§6 rule 7: MEMPROVE_TIMEOUT past 86,400 seconds (or not finite) is ignored with a
    warning in `context`'s config.warnings, and the daemon tools still work."""
    server, _ = warned_about(hserve, config, "MEMPROVE_TIMEOUT", value)
    code, value_ = call_tool(server, "begin", {"new_task": "Timeout bounds"})
    assert code == "ok", value_
    assert call_tool(server, "tasks")[0] == "ok"
    assert server.close() == 0


def test_rule7_timeout_at_the_bound_is_used(hserve, config, daemon, workspace):
    """§6 rule 7: 86400 is within bounds: no warning."""
    server = hserve(config=config, env={"MEMPROVE_TIMEOUT": "86400"})
    server.initialize()
    code, shown = call_tool(server, "context")
    assert code == "ok" and "MEMPROVE_TIMEOUT" not in shown["config"]["warnings"], shown
    assert call_tool(server, "tasks")[0] == "ok"
    assert server.close() == 0


@pytest.mark.parametrize("value", ["1" * 5000, "1" * 19], ids=["5000-digits", "19-digits"])
def test_rule7_parent_session_of_many_digits_is_a_warning(hserve, config, daemon, workspace, value):
    """§6 rule 7: MEMPROVE_PARENT_SESSION has at most 18 digits; a longer one is ignored with
    a warning, never raised on, and `begin` still works."""
    server, _ = warned_about(hserve, config, "MEMPROVE_PARENT_SESSION", value, timeout=5)
    code, begun = call_tool(server, "begin", {"new_task": "Parent digits"})
    assert code == "ok", begun
    assert begun["session"]["parent"] is None
    assert server.close() == 0


# =============================================================================
# Rule 11: every unusable setting is reported
# =============================================================================

@pytest.mark.parametrize("content, codes", [
    (b"", ("token_missing",)), (b"two words\n", ("token_malformed",)),
    # Not UTF-8: unreadable as text (token_missing) or a character a token cannot have.
    (b"\xff\xfe\n", ("token_missing", "token_malformed")),
], ids=["empty", "white-space-inside", "not-utf8"])
def test_rule11_too_open_token_file_warns_whatever_it_holds(hserve, config, daemon, workspace,
                                                           content, codes):
    """§6 rule 11: a token file readable by others that is empty or malformed still gives the
    log suffix `warning=token_file_too_open` and `token_file_mode: too_open`."""
    config.token_file.write_bytes(content)
    os.chmod(str(config.token_file), 0o644)
    server = hserve(config=config, timeout=5)
    server.initialize()
    code, text = call_tool(server, "tasks")
    assert code in codes, text
    code, shown = call_tool(server, "context")
    assert code == "ok", shown
    assert shown["config"]["token_file_mode"] == "too_open", shown["config"]
    assert server.close() == 0
    records = server.log_records()
    tasks_line = [r for r in records if r["tool"] == "tasks"]
    assert tasks_line and tasks_line[0]["warning"], server.stderr_lines


def test_rule11_agent_name_over_64_characters_is_a_warning(hserve, config, daemon, workspace):
    """§6 rule 11: MEMPROVE_AGENT_NAME over 64 characters is ignored with a warning."""
    server, shown = warned_about(hserve, config, "MEMPROVE_AGENT_NAME", "n" * 65, timeout=5)
    assert shown["agent"]["name_from"] != "environment"
    code, begun = call_tool(server, "begin", {"new_task": "Long agent name"})
    assert code == "ok" and begun["session"]["agent"]["name"] != "n" * 65, begun
    assert server.close() == 0


# ---------------------------------------------------------------------------
# Under Windows: files written by Windows tools
# ---------------------------------------------------------------------------

def utf8_bom(text):
    return b"\xef\xbb\xbf" + text.encode("utf-8")


def utf16_le(text):
    return b"\xff\xfe" + text.encode("utf-16-le")


def utf16_be(text):
    return b"\xfe\xff" + text.encode("utf-16-be")


# How Windows tools write a one-line file: Notepad (UTF-8 with a BOM), PowerShell 5.1's
# `>` and Out-File (UTF-16 LE with a BOM, CR LF), Set-Content -Encoding UTF8 / Unicode /
# BigEndianUnicode, with and without -NoNewline, and a plain CR LF.
FORMS = {
    "utf8-bom": lambda text: utf8_bom(text + "\n"),
    "utf8-bom-crlf": lambda text: utf8_bom(text + "\r\n"),
    "utf8-bom-no-newline": utf8_bom,
    "crlf": lambda text: (text + "\r\n").encode("utf-8"),
    "utf16-le-crlf": lambda text: utf16_le(text + "\r\n"),
    "utf16-le-no-newline": utf16_le,
    "utf16-be-crlf": lambda text: utf16_be(text + "\r\n"),
}


def reaches_the_daemon(server, daemon, config):
    """One tool call that needs the token, the data directory and daemon.json, answered
    by the daemon with the token as it is."""
    daemon.clear_ops()
    ok_value(server.call("tasks"))
    ops = daemon.ops
    assert [entry["op"] for entry in ops] == ["listTasks"], ops
    assert ops[0]["headers"]["authorization"] == "Bearer " + config.token


@pytest.mark.parametrize("form", sorted(FORMS))
def test_token_file_written_by_windows_tools(win_server, daemon, config, form):
    config.token_file.write_bytes(FORMS[form](config.token))
    server = win_server()
    server.initialize()
    reaches_the_daemon(server, daemon, config)
    assert server.close() == 0


@pytest.mark.parametrize("form", sorted(FORMS))
def test_data_dir_written_by_windows_tools(win, win_server, daemon, config, form):
    """PowerShell 5.1's `echo C:\\... > data-dir` is the utf16-le-crlf form."""
    (config.dir / "data-dir").write_bytes(FORMS[form](win.path(config.data_dir)))
    server = win_server()
    server.initialize()
    reaches_the_daemon(server, daemon, config)
    assert server.close() == 0


@pytest.mark.parametrize("form", ["utf8-bom", "utf8-bom-crlf", "utf16-le-crlf", "utf16-be-crlf"])
def test_daemon_json_written_by_windows_tools(win_server, daemon, config, form):
    record = json.dumps({"url": daemon.url, "pid": os.getpid()}, indent=2)
    daemon.daemon_json_path.write_bytes(FORMS[form](record.replace("\n", "\r\n")
                                                    if form.endswith("crlf") else record))
    server = win_server()
    server.initialize()
    reaches_the_daemon(server, daemon, config)
    assert server.close() == 0
