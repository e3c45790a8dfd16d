"""The tier's own instruments: the tee relays both directions byte for byte, and the checks
of a recorded exchange catch each deviation they are there for (so a client run that
passes them has really been checked).  Needs no client: a few raw lines drive the .pyz."""

import json
import re
import shutil
import subprocess

import pytest

from interop.support import check_connection, connections, server_env, teed_command

LINES = [
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": "s-1", "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
     "params": {"name": "claims", "arguments": {"numbers": [1], "task": 99}}},
]


@pytest.fixture
def recorded(pyz, daemon, config, workspace, home, tmp_path):
    """One exchange through the tee: (its log folder, what the client received)."""
    wire = tmp_path / "wire"
    data = b"".join(json.dumps(line).encode() + b"\n" for line in LINES)
    done = subprocess.run(teed_command(wire, pyz), input=data, stdout=subprocess.PIPE,
                          env=server_env(home, workspace, config), cwd=str(workspace),
                          timeout=60)
    assert done.returncode == 0
    return wire, done.stdout


def test_the_tee_is_transparent_and_the_exchange_passes(recorded, check_wire):
    wire, received = recorded
    (conn,) = connections(wire)
    assert conn.outbound == received
    assert conn.inbound == b"".join(json.dumps(line).encode() + b"\n" for line in LINES)
    served = check_wire(conn)
    assert [(s["message"]["id"], s["era"]) for s in served] == [
        (0, "legacy"), (1, "legacy"), ("s-1", "modern"), (2, "legacy")]
    assert served[0]["response"]["result"]["protocolVersion"] == "2025-06-18"
    assert served[3]["log"]["outcome"] == "task_not_found"


MUTATIONS = {
    # name: (stream, mutation of its bytes, what the failure says)
    "banner": ("out", lambda b, t: b"memprove starting\n" + b, "standard output is not pure"),
    "pretty": ("out", lambda b, t: b.replace(b'{"jsonrpc":"2.0",', b'{"jsonrpc": "2.0",', 1),
               "not compact"),
    "id-retyped": ("out", lambda b, t: b.replace(b'"id":0,', b'"id":"0",', 1),
                   "a response to no request"),
    "answered-twice": ("out", lambda b, t: b + b.splitlines(keepends=True)[0], "2 answers to id"),
    "unanswered": ("out", lambda b, t: b"".join(b.splitlines(keepends=True)[1:]),
                   "0 answers to id"),
    "legacy-field": ("out", lambda b, t: b.replace(b'"result":{"tools"',
                                                   b'"result":{"ttlMs":0,"tools"', 1),
                     "a legacy result carries"),
    "wrong-era": ("err", lambda b, t: b.replace(b'legacy "tools/list" id=1',
                                                b'modern "tools/list" id=1'),
                  "served in era modern, protocol.md says legacy"),
    "log-line-missing": ("err", lambda b, t: b"".join(b.splitlines(keepends=True)[:-1]),
                         "5 messages received, 4 log lines"),
    "server-version": ("out", lambda b, t: b.replace(b'"name":"memprove","version":"',
                                                     b'"name":"memprove","version":"9', 1),
                       "'serverInfo': {'name': 'memprove', 'version': '9"),
    "token-on-the-wire": ("in", lambda b, t: b.replace(b'"name": "raw"',
                                                       b'"name": "%s"' % t.encode()),
                          "the token is on the wire"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_deviation_is_caught(recorded, config, server_version, tmp_path, name):
    stream, mutate, says = MUTATIONS[name]
    wire, _ = recorded
    (conn,) = connections(wire)
    original = (wire / (conn.name + "." + stream)).read_bytes()
    data = mutate(original, config.token)
    assert data != original
    copy = tmp_path / "mutated"
    shutil.copytree(str(wire), str(copy))
    (copy / (conn.name + "." + stream)).write_bytes(data)
    (mutated,) = connections(copy)
    with pytest.raises(AssertionError, match=re.escape(says)):
        check_connection(mutated, secrets=[config.token], server_version=server_version)
