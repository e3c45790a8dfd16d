"""doctor's fix for a missing entry (issue 31 item 5), run with the real clients: in a fresh
HOME and a project that `git init` made, `mcp doctor --client NAME` finds no entry and names
the client's own command that adds it; that command, run exactly as printed (`sh -c FIX`,
the pinned client first on PATH, in the project), writes the entry doctor then finds:
`ok  client ... runs this server`.  The clients run as the agent tier runs them
(interop/agents.py): a throwaway HOME, a network namespace with only loopback."""

import subprocess

import pytest

from interop.agents import describe
from interop.support import QUIET
from interop.test_plugin_kit import doctor_client

# What each client needs in its environment to stay quiet offline.
CLIENT_ENV = {"claude-code": QUIET, "codex": None, "gemini": {"GEMINI_CLI_NO_RELAUNCH": "true"}}


@pytest.mark.parametrize("client", sorted(CLIENT_ENV))
def test_doctors_fix_for_no_entry_adds_it_with_the_clients_command(make_agent, pyz, client):
    agent = make_agent(client, env=CLIENT_ENV[client])
    (agent.project / ".git").rmdir()           # a real repository, as a user's project is
    subprocess.run(["git", "init", "-q", str(agent.project)], check=True, timeout=60,
                   stdin=subprocess.DEVNULL)
    before = doctor_client(pyz, client, agent.home, agent.project, agent.config_dir)
    assert before["status"] == "warn" and "no memprove entry" in before["detail"], before
    command = {"claude-code": "claude", "codex": "codex", "gemini": "gemini"}[client]
    assert before["fix"].startswith(command + " mcp add "), before
    code, out, err = agent.run("sh", "-c", before["fix"])
    assert code == 0, describe(code, out, err)
    after = doctor_client(pyz, client, agent.home, agent.project, agent.config_dir)
    assert after["status"] == "ok" and "runs this server" in after["detail"], after
