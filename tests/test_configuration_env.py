"""Environment values that do not fit are ignored and named in `context`'s
warnings (contract.md §1), whatever characters they hold."""

import pytest


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
