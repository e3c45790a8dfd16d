#!/usr/bin/env python3
"""A recording tee for a stdio MCP server (standard library only, Python 3.8+).

    python3 mcp_tee.py LOG_DIR -- SERVER_COMMAND [ARGS...]

A client starts this instead of the server.  It starts the real server with the same
environment and working directory, relays both directions byte for byte, and records one
connection in LOG_DIR under a name of its own, `conn-<ns>-<pid>`:

    .in       every byte the client wrote, as written (client -> server)
    .out      every byte the server wrote on standard output (server -> client)
    .err      the server's standard error (the server writes this file itself)
    .events   JSON lines: start (pids, argv), client_eof, signal, server_exit
    .wire     both directions interleaved in arrival order, `> ` and `< ` per line

A signal to the tee (SIGTERM, SIGINT or SIGHUP: a client stopping its server) is recorded and
passed on to the server; the tee ends when the server does, with its exit code.  A tee that
is killed outright records nothing more, and the server then sees end of input.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time


def main():
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: mcp_tee.py LOG_DIR -- SERVER_COMMAND [ARGS...]\n")
        return 2
    log_dir, command = argv[0], argv[2:]
    os.makedirs(log_dir, exist_ok=True)
    base = os.path.join(log_dir, "conn-%d-%d" % (time.time_ns(), os.getpid()))
    lock = threading.Lock()
    wire = open(base + ".wire", "ab", buffering=0)
    events = open(base + ".events", "a", buffering=1, encoding="utf-8")
    inbound = open(base + ".in", "ab", buffering=0)
    outbound = open(base + ".out", "ab", buffering=0)
    errors = open(base + ".err", "ab", buffering=0)

    def event(kind, **fields):
        fields.update(event=kind, t=round(time.time(), 6))
        with lock:
            events.write(json.dumps(fields, sort_keys=True) + "\n")

    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=errors, bufsize=0)
    event("start", tee_pid=os.getpid(), server_pid=server.pid, argv=command, cwd=os.getcwd())

    def close_server_input():
        try:
            server.stdin.close()
        except OSError:
            pass

    def on_signal(number, frame):
        # Pass the client's signal on, so the server is stopped as the client meant to.
        event("signal", signal=number)
        try:
            server.send_signal(number)
        except OSError:
            pass

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, on_signal)

    def upstream():
        source = sys.stdin.buffer
        while True:
            try:
                line = source.readline()
            except (OSError, ValueError):
                break
            if not line:
                break
            with lock:
                inbound.write(line)
                wire.write(b"> " + line + (b"" if line.endswith(b"\n") else b"\n"))
            try:
                server.stdin.write(line)
                server.stdin.flush()
            except (OSError, ValueError):
                break
        event("client_eof")
        close_server_input()

    threading.Thread(target=upstream, daemon=True).start()
    client_gone = False
    while True:
        line = server.stdout.readline()
        if not line:
            break
        with lock:
            outbound.write(line)
            wire.write(b"< " + line + (b"" if line.endswith(b"\n") else b"\n"))
        if not client_gone:
            try:
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
            except OSError:
                client_gone = True
                event("client_stdout_closed")
    code = server.wait()
    event("server_exit", returncode=code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    status = main()
    try:
        sys.stdout.flush()
    except OSError:
        pass
    # Not sys.exit: the thread reading the client may sit in a read of standard input, and
    # interpreter shutdown would wait on that stream's lock; a client that stopped us
    # expects us gone at once.
    os._exit(status)
