#!/usr/bin/env python3
"""Carry loopback TCP ports into a loopback-only network namespace (standard library only).

A process in a new network namespace (`unshare -n`) has a loopback of its own: the test's
servers on the outer 127.0.0.1 (the reference daemon, the scripted model endpoint) are out of
its reach.  A Unix socket with a path in the file system is reachable from both sides, so:

  - inside the namespace, this script listens on 127.0.0.1:PORT for each PORT=SOCKET given,
    then runs COMMAND as its child; every connection to PORT is relayed to SOCKET; it exits
    with COMMAND's exit status once COMMAND has ended (the child is killed if this script
    dies first):

        loopback_bridge.py PORT=SOCKET [PORT=SOCKET ...] -- COMMAND [ARGS...]

  - outside, `UnixToTcp(SOCKET, PORT)` (imported by the test) accepts on SOCKET and relays
    each connection to the outer 127.0.0.1:PORT.

So a URL http://127.0.0.1:PORT means the same server on both sides, and nothing but
loopback is reachable from inside.
"""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading

CHUNK = 65536
PR_SET_PDEATHSIG = 1
IDLE_TIMEOUT = 600.0          # a relayed connection idle this long is closed


def pump(source, target):
    """Copy source to target until end of input, then pass the end on."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def relay(accepted, connect):
    """Relay one accepted connection to a new one made by connect(), both ways."""
    try:
        other = connect()
    except OSError:
        accepted.close()
        return
    for sock in (accepted, other):
        sock.settimeout(IDLE_TIMEOUT)
    back = threading.Thread(target=pump, args=(other, accepted), daemon=True)
    back.start()
    pump(accepted, other)
    back.join(IDLE_TIMEOUT)
    accepted.close()
    other.close()


def serve(listener, connect, stopped=None):
    """Accept on listener until it is closed (or `stopped` is set), relaying each connection."""
    while stopped is None or not stopped.is_set():
        try:
            accepted, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=relay, args=(accepted, connect), daemon=True).start()


class UnixToTcp:
    """Outside the namespace: accept on the Unix socket `path`, relay to 127.0.0.1:port."""

    def __init__(self, path, port):
        self.path = str(path)
        self.port = port
        self.stopped = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.thread = threading.Thread(target=serve, args=(self.listener, self._connect,
                                                           self.stopped), daemon=True)
        self.thread.start()

    def _connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def close(self):
        self.stopped.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(10)
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv):
    if "--" not in argv or argv.index("--") == 0 or argv.index("--") == len(argv) - 1:
        sys.stderr.write("usage: loopback_bridge.py PORT=SOCKET [...] -- COMMAND [ARGS...]\n")
        return 2
    split = argv.index("--")
    for spec in argv[:split]:
        port, path = spec.split("=", 1)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)

        def connect(path=path):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(30)
            sock.connect(path)
            return sock
        threading.Thread(target=serve, args=(listener, connect), daemon=True).start()
    child = subprocess.Popen(argv[split + 1:], preexec_fn=_die_with_parent)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda signum, frame: child.send_signal(signum))
    while True:
        try:
            return child.wait()
        except InterruptedError:
            continue


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.exit(code if code >= 0 else 128 - code)
