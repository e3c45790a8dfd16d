#!/usr/bin/env python3
"""memprove-mcp: the Model Context Protocol server of the memprove ledger.

An agent (Claude Code or any MCP client) starts this module as a subprocess
and speaks MCP to it over standard input and output; the server turns each
tool call into requests to the local memprove daemon over loopback HTTP and
into reads of the Workspace's context files.  It keeps nothing between calls:
every call reads the configuration, the token and the context files again, so
a `memprove run` in a shell and a tool call see each other at once.

    python3 memprove_mcp.pyz mcp serve [--config-dir DIR] [--workspace DIR]
    python3 memprove_mcp.pyz mcp print-config [--config-dir DIR] [--python] [--hook]
                                              [--client NAME] [--workspace DIR]
    python3 memprove_mcp.pyz mcp doctor [--config-dir DIR] [--workspace DIR]
                                        [--client NAME] [--json]
    python3 memprove_mcp.pyz mcp plugin DIR [--config-dir DIR] [--workspace DIR]
    python3 memprove_mcp.pyz mcp hook session-start|stop [--config-dir DIR] [--workspace DIR]
                                                         [--client NAME]
    python3 memprove_mcp.pyz --version | --help

Two protocol eras are served side by side, decided for each message on its
own: the 2026-07-28 revision (no handshake; the version rides in every
request's `_meta`) and the `initialize` handshake of 2025-11-25 and
2025-06-18 (and, for older clients, 2025-03-26 and 2024-11-05).  Standard
output carries protocol messages only; standard error carries one line per
message received, never a token or an argument value.

The module is in two parts, each read top to bottom in the order data flows
through it.  First the server, as `mcp serve` meets it:

    1. Constants and Problems       limits, versions, the platform table, the one error type
    2. Command line                 main(), the options, serve
    3. Transport                    bounded line reader, writer, workers, log, roots
    4. Protocol eras                classify a message, answer it per era
    5. Tool dispatch                the tool table, argument validation
    6. Tools                        one function per tool
    7. The per-call object          what one call knows: Workspace, agent
    8. Configuration and Workspace  config dir, token, data dir, root
    9. Context files                context.json, runs.jsonl
   10. Daemon client                one table of operations, one send()
   11. The Pack                     pure functions of a Capsule

Then the operator's commands, which a person runs (and the hook, which a
client runs when a session starts); `mcp serve` never runs them:

   12. Words and files              a word as each shell reads it back; JSON,
                                    TOML and YAML written and read by hand
   13. The clients                  one record per client: its entry and files,
                                    the environment it gives a server, its kit
                                    and its commands, its hook
   14. mcp print-config             a client's entry, or its hook entry
   15. The kit                      `mcp plugin`: the plugin, extension and bundle
   16. The hooks                    `mcp hook session-start`: the Pack, or nothing;
                                    `mcp hook stop`: a request to record, or nothing
   17. mcp doctor                   the path from shell to ledger, checked, with fix
                                    lines for the platform's shell

Only the standard library is used, from Python 3.6 on.  Importing the
module loads `_thread`, `os`, `sys`, `time` and the json package's
accelerator `_json` (where the interpreter has it), and nothing else:
modules that only a tool call needs (json and re among them) are imported
where they are used, so that start-up stays close to the interpreter's own.

The rules the comments cite by file name (`contract.md §6 rule 17`,
`tools.md`, `pack.md` ...) are the files of the repository's docs/ folder,
and a bare `§6 rule 4` is a rule of contract.md there.
"""

import _thread
import os
import sys
import time

# `json`, `re` and `threading` are imported where they are needed, not here:
# on a clean interpreter `import json` (which brings re, enum, functools and
# collections) costs as much as the interpreter's own start, and answering
# `server/discover`, `initialize` or `tools/list` needs none of them (see
# load_json, dump_json and Pattern; _thread gives the locks).


# ---------------------------------------------------------------------------
# 1. Constants and Problems
# ---------------------------------------------------------------------------

# The one version: pyproject.toml reads it, a release is the tag v<VERSION>
# with its dated section in CHANGELOG.md (CONTRIBUTING.md "How to release").
VERSION = "0.2.0"
SERVER_NAME = "memprove"
MODERN_VERSION = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LEGACY_DEFAULT = "2025-11-25"
# What an older revision's schema lacks, left out of its tools and results
# (clients.md, "Older handshakes"); a tool's `_meta` stays in every revision.
REVISION_LACKS = {
    "2025-03-26": ("title", "outputSchema", "structuredContent"),
    "2024-11-05": ("title", "outputSchema", "structuredContent", "annotations"),
}

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT = "io.modelcontextprotocol/clientInfo"
META_SERVER = "io.modelcontextprotocol/serverInfo"

MAX_LINE = 16 * 1024 * 1024          # bytes in one input line, newline excluded
MAX_BODY = 64 * 1024 * 1024          # bytes in one daemon answer
MAX_CONTEXT_FILE = 1024 * 1024       # bytes of context.json worth parsing
DEFAULT_TIMEOUT = 10.0               # seconds per daemon request
LIST_TTL_MS = 3600000                # the tool list never changes in a process
PACK_BUDGET = 6000                   # UTF-16 code units of a Pack when `pack` is given none
WORKERS = 8                          # tool calls running at once
WAITING = 64                         # tool calls waiting; past that no input is read
ROOTS_WAIT = 2.0                     # seconds a call waits for an unanswered roots/list
MAX_ROOTS = 1000                     # roots of one answer looked at
MAX_ROOT_URI = 4096                  # bytes of a root's URI worth resolving
LOG_FIELD = 64                       # characters of a client-chosen log field

# What differs between Linux, macOS and Windows (contract.md §5), in one
# place: a rule that depends on the platform reads its fact here rather than
# testing os.name, and the rules a test checks for another platform than its
# own (paths, shells, file modes, locks, share modes) take the platform as an
# argument; the rest the Windows tier checks under the Windows interpreter.
#   config_base        where the configuration directory's default lives
#   interpreter_first  an entry names the interpreter, the .pyz its first
#                      argument: Windows starts no .pyz (WinError 193, EFTYPE)
#   shell              how a doctor fix line is written (SHELLS below)
#   posix_files        POSIX owners and permission bits mean something
#   drive_letters      a file: URI's path may start with /C:/
#   system_path        the PATH a client started from the Dock gives its servers
#   socket_tables      where the system lists each socket with its owner (§6
#                      rule 17), or None where it cannot tell who listens
#   home               the variable that names the user's home to clients
#   versioned_python   the command that runs a given Python version
#   file_lock          how context.lock is locked: flock, or msvcrt's byte lock
#   opener             the command that opens a file as a double-click would,
#                      where Claude Desktop runs
#   hook_shell         the shell every client runs a hook's command with, or None
#                      where each runs it its own way (HOOK_FORMS)
#   separator          what joins a folder and a name in a path printed for the platform
#   share_modes        a file another process has open cannot be opened or
#                      replaced for a while: a refusal is waited out, not
#                      reported (the C runtime's open gives no winerror, so
#                      a sharing violation is a plain PermissionError there)
#   terminates_itself  leaving at once is TerminateProcess, not ExitProcess:
#                      ExitProcess detaches the DLLs after ending the other
#                      threads, and can wait forever for a lock a thread
#                      ended inside a read of standard input held (under Wine
#                      half of such exits hung until wineserver's SIGKILL)
PLATFORMS = {
    "linux": {"config_base": "xdg", "interpreter_first": False, "shell": "sh",
              "home": "HOME", "versioned_python": "python{0}",
              "posix_files": True, "drive_letters": False, "system_path": None,
              "socket_tables": ("/proc/net/tcp", "/proc/net/tcp6"), "share_modes": False,
              "file_lock": "flock", "opener": None, "hook_shell": "sh",
              "separator": "/", "terminates_itself": False},
    "darwin": {"config_base": "xdg", "interpreter_first": False, "shell": "sh",
               "home": "HOME", "versioned_python": "python{0}",
               "posix_files": True, "drive_letters": False,
               "system_path": "/usr/bin:/bin:/usr/sbin:/sbin", "socket_tables": None,
               "share_modes": False, "file_lock": "flock", "opener": "open",
               "hook_shell": "sh", "separator": "/", "terminates_itself": False},
    "win32": {"config_base": "appdata", "interpreter_first": True, "shell": "powershell",
              "home": "USERPROFILE", "versioned_python": "py -{0}",
              "posix_files": False, "drive_letters": True, "system_path": None,
              "socket_tables": None, "share_modes": True, "file_lock": "msvcrt",
              "opener": "Invoke-Item -LiteralPath", "hook_shell": None,
              "separator": "\\", "terminates_itself": True},
}


def platform_name(name=sys.platform):
    """The PLATFORMS key of a sys.platform value; every other Unix is run as Linux."""
    return name if name in ("win32", "darwin") else "linux"


PLATFORM = platform_name()


def leave_at_once():
    """Exit 0 now, whatever other threads are doing (a read of standard input,
    a daemon exchange): what had to be said was written and flushed."""
    if PLATFORMS[PLATFORM]["terminates_itself"]:
        import _winapi
        _winapi.TerminateProcess(_winapi.GetCurrentProcess(), 0)
    os._exit(0)


INSTRUCTIONS = (
    "memprove keeps each Task's working memory in a hash-chained ledger: call "
    "`pack` to resume a Task (`tasks` lists them), then `begin` to open your "
    "Session, and record what you learn with `checkpoint` and your choices "
    "with `decide` as you work. Run tests in a shell with `memprove run` and "
    "cite the run labels it prints (r1, r2, ...); `complete` the Task only on "
    "passed runs, and `end` your Session when you stop."
)

# contract.md §4's table, in its two parts: the codes the server raises, and
# the daemon's (a code from the daemon that is also the server's own is shown
# with DAEMON_REFUSED, so that the agent is never told a local cause).
SERVER_PROBLEMS = {
    "invalid_params": "The arguments do not match the tool's input schema.",
    "token_missing": "No token was found in MEMPROVE_TOKEN, MEMPROVE_TOKEN_FILE or the configuration directory.",
    "token_malformed": "The token has characters a bearer token cannot have.",
    "data_dir_missing": "No data directory is configured in MEMPROVE_DATA_DIR or the configuration directory.",
    "daemon_unavailable": "The memprove daemon is not running or cannot be reached.",
    "daemon_address_refused": "The daemon address is not a loopback HTTP address, so the token was not sent.",
    "daemon_timeout": "The memprove daemon did not answer in time; a write may have been made, so look before repeating it.",
    "daemon_error": "The memprove daemon failed without a Problem.",
    "context_unreadable": "The Workspace's context file cannot be read; `begin` starts a fresh one.",
    "workspace_unusable": "The Workspace directory does not exist or its path cannot be used.",
    "context_foreign": "The Workspace's context file belongs to another Workspace; `begin` starts a fresh one.",
    "no_task": "The context names no Task; call `begin`, or pass `task` where the tool takes one.",
    "no_session": "The context names no open Session; call `begin` first.",
    "task_not_found": "No Task of this Workspace has that number.",
    "session_not_found": "No Session of this Workspace has that number.",
    "run_label_unknown": "A cited run label is not recorded in this Workspace's context.",
    "no_passed_runs": "The context has no passed run for this Task; record one with `memprove run`.",
    "runs_failing": "The latest run of a recorded command failed, so the Task cannot be completed.",
    "internal_error": "The server failed unexpectedly.",
}
DAEMON_PROBLEMS = {
    "unauthenticated": "The daemon did not accept the token.",
    "token_revoked": "The token has been revoked.",
    "scope_missing": "The token lacks a scope this tool needs.",
    "role_forbidden": "The token's role may not perform this operation.",
    "not_found": "The daemon has no such record.",
    "claim_not_found": "No Claim of this Task has that number.",
    "claim_not_active": "That Claim is already withdrawn or superseded.",
    "session_not_open": "That Session has already ended.",
    "invalid_transition": "The Task cannot move to that status from its current one.",
    "evidence_invalid": "A cited Run does not belong to this Task or did not pass.",
    "validation_failed": "The daemon rejected a field of the request.",
    "idempotency_key_reused": "The daemon saw that write key with a different request.",
}
PROBLEMS = dict(SERVER_PROBLEMS, **DAEMON_PROBLEMS)
DAEMON_REFUSED = "The memprove daemon refused the request."
class Pattern:
    """A regular expression compiled when first used, so start-up imports no `re`."""

    def __init__(self, source):
        self.source = source

    def __getattr__(self, name):
        import re
        compiled = re.compile(self.source)
        for method in ("match", "search", "sub"):
            setattr(self, method, getattr(compiled, method))   # later uses skip this
        return getattr(compiled, name)


PROBLEM_CODE = Pattern(r"[a-z][a-z0-9_]*\Z")
DIGITS = Pattern(r"[0-9]+\Z")       # ASCII digits only: str.isdigit() takes any script's
# str.isascii() is 3.7's; on 3.6 the widest character tells the same.
ascii_only = getattr(str, "isascii", None) or (lambda text: not text or max(text) < "\x80")


class Problem(Exception):
    """The one error a tool call ends in: a code, its fixed sentence, a hint.

    The hint names an argument, a next step, or the labels and numbers at
    fault; never a value the agent wrote, a path, or the token.
    """

    def __init__(self, code, hint=None, from_daemon=False):
        Exception.__init__(self, code)
        self.code = code
        self.hint = hint
        self.from_daemon = from_daemon

    def text(self):
        sentence = PROBLEMS.get(self.code, DAEMON_REFUSED)
        if self.from_daemon and self.code in SERVER_PROBLEMS:
            sentence = DAEMON_REFUSED   # the daemon's word, not one of the server's own problems
        if self.hint:
            return "%s: %s %s" % (self.code, sentence, self.hint)
        return "%s: %s" % (self.code, sentence)


def shown_path(path):
    """A path, or any value from a file, a client's configuration or the
    environment, on one line of its own: one holding a C0 or C1 control, DEL,
    a line break (U+2028, U+2029 too) or a character that hides or reorders
    text (HIDDEN) is shown JSON-quoted, in ASCII, so that no value can start
    a line, hide the rest of one, or say what is not shown (§6 rules 23, 33)."""
    if NOT_SHOWN_AS_IS.search(path):
        return dump_json(path)
    return path


# ---------------------------------------------------------------------------
# 2. Command line
# ---------------------------------------------------------------------------

USAGE = """\
usage: memprove_mcp.pyz mcp serve [--config-dir DIR] [--workspace DIR]
       memprove_mcp.pyz mcp print-config [--config-dir DIR] [--python] [--hook]
                                         [--client NAME] [--workspace DIR]
       memprove_mcp.pyz mcp doctor [--config-dir DIR] [--workspace DIR] [--client NAME]
                                   [--json]
       memprove_mcp.pyz mcp plugin DIR [--config-dir DIR] [--workspace DIR]
       memprove_mcp.pyz mcp hook session-start|stop [--config-dir DIR] [--workspace DIR]
                                                    [--client NAME]
       memprove_mcp.pyz --version | --help

  mcp serve         serve MCP on standard input and output until end of input
  mcp print-config  print the entry that starts this server in a client's configuration;
                    writes nothing
  mcp doctor        check the whole path from this shell to the ledger, as the next tool
                    call will take it, and say what to fix; writes nothing
  mcp plugin DIR    write into DIR the kit the clients install the server from
                    (%s), and print the commands that do it
  mcp hook session-start
                    (run by a client's SessionStart hook) print the Pack of the context's
                    Task for the model's first request, or nothing; writes nothing
  mcp hook stop     (run by a client's Stop or AfterAgent hook) ask the model to record
                    what it learned before it stops, when its Session recorded nothing for
                    MEMPROVE_CHECKPOINT_MINUTES (default 30; 0: never); writes nothing
  --config-dir DIR  the memprove configuration directory (token, data-dir)
  --workspace DIR   start the Workspace search in DIR (for a client whose working
                    directory is not the project)
  --python          name this interpreter as the command and the .pyz as its first argument
  --hook            (print-config) print the client's session-start hook entry instead
  --client NAME     the client whose format to print, or whose entry to check
                    (default %s), or that runs the hook: %s
  --json            (doctor) one JSON object instead of lines
"""


def usage():
    """USAGE with what the client records say: the kit's clients, the default, the names."""
    kit = [record.label for record in CLIENTS.values() if record.install]
    return USAGE % (", ".join(kit[:-1]) + " and " + kit[-1], DEFAULT_CLIENT,
                    ", ".join(CLIENT_NAMES))


class Refusal(Exception):
    """The one error of the operator's commands (the command line,
    print-config, plugin): one line on standard error saying what is refused
    and why, then `status` (doctor's checks, which go on, say theirs as a
    Check instead; the server's tools, as a Problem)."""

    def __init__(self, line, status=1):
        Exception.__init__(self, line)
        self.line, self.status = line, status


class UsageError(Refusal):
    """A command line that cannot be read: exit status 2, and a pointer to --help."""

    def __init__(self, line):
        Refusal.__init__(self, line + " (see --help)", 2)


NOT_UTF8 = "a path in the entry is not valid UTF-8; no client could read it."


def main(argv=None):
    """Run the command line; return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    utf8_stderr()
    try:
        return run_command(*parse_command_line(argv))
    except Refusal as refusal:
        sys.stderr.write("memprove-mcp: %s\n" % refusal.line)
        return refusal.status


def run_command(command, options):
    if command == "help":
        write_stdout_bytes(usage().encode("utf-8"))
        return 0
    if command == "version":
        write_stdout_bytes(version_text().encode("utf-8"))
        return 0
    if command == "print-config":
        return print_config(options)
    if command == "doctor":
        return doctor(options)
    if command == "plugin":
        return plugin(options)
    if command == "hook":
        return HOOKS[options["event"]](options)
    return serve(options)


COMMANDS = ("serve", "print-config", "doctor", "plugin", "hook")
HOOK_EVENTS = ("session-start", "stop")   # the word `mcp hook` takes

# Every option: its key in `options`, the commands that take it, and what its
# value must be (None for a flag).
OPTIONS = {
    "--config-dir": ("config_dir", ("serve", "print-config", "doctor", "plugin", "hook"),
                     "a directory"),
    "--workspace": ("workspace", ("serve", "print-config", "doctor", "plugin", "hook"),
                    "a directory"),
    "--client": ("client", ("print-config", "doctor", "hook"), "a client name"),
    "--python": ("python", ("print-config",), None),
    "--hook": ("hook", ("print-config",), None),
    "--json": ("json", ("doctor",), None),
}


def parse_command_line(argv):
    # `--help` anywhere in an `mcp` command, `mcp --help` too, is help, never a usage error.
    if argv in (["--help"], ["-h"]) or argv[:1] == ["mcp"] and ("--help" in argv or "-h" in argv):
        return "help", {}
    if argv == ["--version"]:
        return "version", {}
    if len(argv) < 2 or argv[0] != "mcp" or argv[1] not in COMMANDS:
        raise UsageError("expected 'mcp serve', 'mcp print-config', 'mcp doctor', "
                         "'mcp plugin DIR', 'mcp hook session-start|stop', --version or --help")
    command, rest = argv[1], argv[2:]
    options = dict((key, None) for key, _, _ in OPTIONS.values())
    options["folder"] = None
    if command == "hook":
        if not rest or rest[0] not in HOOK_EVENTS:
            raise UsageError("'mcp hook' takes the event: %s" % ", ".join(HOOK_EVENTS))
        options["event"] = rest.pop(0)
    while rest:
        word = rest.pop(0)
        name = word.partition("=")[0]
        if command == "plugin" and options["folder"] is None and word and \
                not word.startswith("-"):
            options["folder"] = word         # the one word `mcp plugin` takes
            continue
        if name not in OPTIONS or command not in OPTIONS[name][1]:
            raise UsageError("unexpected argument for 'mcp %s'" % command)
        key, _, needs = OPTIONS[name]
        if needs is None:
            if "=" in word:
                raise UsageError("%s takes no value" % name)
            options[key] = True
            continue
        value = word.partition("=")[2] if "=" in word else (rest.pop(0) if rest else "")
        if not value:
            raise UsageError("%s needs %s" % (name, needs))
        options[key] = value
    if options["client"] is not None and options["client"] not in CLIENTS:
        # The names, never the value typed: it may hold anything, a newline too.
        raise UsageError("--client must be one of: %s" % ", ".join(CLIENT_NAMES))
    if command == "plugin" and options["folder"] is None:
        raise UsageError("'mcp plugin' needs the folder to write the kit into")
    return command, options


def source_digest():
    """SHA-256 of this module's source, whether it runs from a file or a .pyz.

    In a .pyz the module may have come from bytecode: the archive's entry
    gives the digest the build wrote into it (SOURCE_SHA256), so that nothing
    is read from the archive's path, which may hold another file by now;
    imported from an archive otherwise, the source is read from its root.
    """
    import hashlib
    given = globals().get("SOURCE_SHA256")
    if isinstance(given, str) and len(given) == 64 and not given.strip("0123456789abcdef"):
        return given
    loader = globals().get("__loader__")
    if getattr(loader, "archive", None):
        data = loader.get_data("memprove_mcp.py")
    else:
        with open(__file__, "rb") as handle:
            data = handle.read()
    return hashlib.sha256(data).hexdigest()


def archive_digest():
    """(path, SHA-256 hex) of the .pyz this runs from, or None run from the
    module's file: which build runs, for a fleet to tell.  It is the file now
    at the archive's path, read as a kit's is (§6 rule 28: a FIFO or a device
    put there since must not block), at most MAX_ARCHIVE bytes; OSError when
    that cannot be.  The archive computes it, so it is no check of itself:
    the check that counts is the user's, of the file against a sum."""
    path = getattr(globals().get("__loader__"), "archive", None)
    if not path:
        return None
    path = os.path.abspath(path)
    return path, archive_sum(read_regular(path, MAX_ARCHIVE + 1)[0])


def archive_sum(data):
    """The SHA-256 of an archive read as at most MAX_ARCHIVE + 1 bytes;
    OSError when it is larger than MAX_ARCHIVE."""
    import hashlib
    if len(data) > MAX_ARCHIVE:
        raise OSError(27, "larger than %d MiB" % (MAX_ARCHIVE >> 20))      # EFBIG
    return hashlib.sha256(data).hexdigest()


def unreadable_archive(error):
    """Why the archive's sum is unknown, in a few words."""
    return error.strerror or "not a regular file"


def version_text():
    """`--version`: the version and the source's digest, then, run from an
    archive, its SHA-256 in full and its path, as a SHA256SUMS line has them."""
    text = "memprove-mcp %s (%s)\n" % (VERSION, source_digest()[:12])
    try:
        archive = archive_digest()
    except OSError as error:
        return text + "sha256 unknown: %s\n" % unreadable_archive(error)
    if archive:
        text += "sha256 %s  %s\n" % (archive[1], shown_path(archive[0]))
    return text


def this_program():
    """The absolute path of the running .pyz (or module), even with no working directory."""
    try:
        return os.path.abspath(sys.argv[0])
    except OSError:
        return sys.argv[0]


def utf8_stderr():
    """Standard error in UTF-8 whatever the locale, as standard output is: to a
    pipe, a Windows Python writes the ANSI code page, which a client reading
    UTF-8 garbles (a project folder `café` came out as `caf\xe9`)."""
    stream = sys.stderr
    if stream is None or (getattr(stream, "encoding", None) or "").lower() in ("utf-8", "utf8"):
        return
    try:
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")
        else:       # 3.6: a new wrapper on the same buffer, the old one detached, not closed
            import io
            stream.flush()
            sys.stderr = io.TextIOWrapper(stream.detach(), "utf-8", "backslashreplace",
                                          line_buffering=True)
    except (AttributeError, OSError, ValueError):      # io.UnsupportedOperation is both
        pass


def write_stdout_bytes(data):
    """UTF-8 on standard output whatever the locale: every format printed is."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def serve(options):
    install_signal_handlers()
    if stdin_is_a_terminal():
        # A person ran it by hand: say what this is.  A pipe gets nothing (protocol.md).
        sys.stderr.write(TERMINAL_NOTICE)
        sys.stderr.flush()
    transport = Transport(options)
    transport.run(sys.stdin.buffer)
    # Every answer was flushed as it was written; leave without the interpreter's
    # own final flush, which exits 120 when the client has closed standard error.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    leave_at_once()


TERMINAL_NOTICE = (
    "memprove-mcp: this is the memprove MCP server; a client starts it (see `mcp plugin` or "
    "`mcp print-config`) and speaks JSON-RPC to it, one message a line; Ctrl-D ends it.\n")


def stdin_is_a_terminal():
    try:
        return os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def install_signal_handlers():
    """Leave at once, without a traceback, on SIGTERM or SIGINT: a client that
    stops us wants us gone.

    Where the platform allows, the signals are blocked in every thread and one
    thread waits for them, so they are acted on even while the main thread is
    inside a long C-level read (a Python handler would wait for it to return).
    """
    try:
        import _signal as signal         # `signal` wraps it in enums, which cost a start
    except ImportError:
        import signal
    wanted = [getattr(signal, name) for name in ("SIGTERM", "SIGINT") if hasattr(signal, name)]

    def leave(signum, frame):
        leave_at_once()

    for signum in wanted:
        signal.signal(signum, leave)     # also undoes an inherited SIG_IGN
    if hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigwait"):
        signal.pthread_sigmask(signal.SIG_BLOCK, wanted)

        def wait_for_signal():
            signal.sigwait(wanted)
            leave_at_once()

        _thread.start_new_thread(wait_for_signal, ())


# ---------------------------------------------------------------------------
# 3. Transport
# ---------------------------------------------------------------------------
# One thread reads and classifies lines in arrival order and answers the
# quick methods itself; tool calls go to a few worker threads, so that `ping`
# and `tools/list` are answered while a call waits on the daemon.  One lock
# keeps output lines whole.

def read_line(stream):
    """Return (line, oversized); line is None at end of input.

    A line longer than MAX_LINE is read through and dropped, so memory stays
    bounded whatever the client sends.
    """
    line = stream.readline(MAX_LINE + 1)
    if not line:
        return None, False
    if len(line) <= MAX_LINE or line.endswith(b"\n"):
        return line, False
    while True:
        rest = stream.readline(1 << 20)
        if not rest or rest.endswith(b"\n"):
            return b"", True


def encode_message(message):
    data = json_bytes(message)
    # JSON allows raw U+2028/U+2029, but some line splitters break on them.
    return data.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029") + b"\n"


def json_bytes(value):
    """Compact JSON in UTF-8, for the client and for the daemon."""
    try:
        return dump_json(value, ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (an echoed id, an agent's text) cannot be UTF-8: escape it.
        return dump_json(value).encode("ascii")


def log_field(value):
    """A client-chosen method or id as it goes into the log: JSON, cut short."""
    if value is ABSENT:
        return "-"
    return dump_json(value)[:LOG_FIELD]


# -- JSON through the json package's own C accelerator ------------------------
# json.loads and json.dumps hand their work to `_json` when it exists (with
# no indent); calling it directly does the same work without importing the
# package.  The interface used here is the same from 3.6 to 3.15; where the
# accelerator is missing (another implementation), the package is used.

try:
    import _json
    SCANNER, ENCODER = _json.make_scanner, _json.make_encoder
    QUOTE, QUOTE_ASCII = _json.encode_basestring, _json.encode_basestring_ascii
except (ImportError, AttributeError):
    SCANNER = ENCODER = None


class ScanOptions:
    """What the scanner reads from a json.JSONDecoder: numbers as Python's,
    NaN and Infinity refused (they are not JSON), and no hook (3.15 added
    `array_hook`; a hook a later release adds is None here too)."""

    strict = True
    parse_float = float
    # 3.11 and later refuse a number of over 4,300 digits themselves, at C speed.
    parse_int = int if hasattr(sys, "get_int_max_str_digits") else \
        staticmethod(lambda digits: bounded_int(digits))

    @staticmethod
    def parse_constant(name):
        return reject_constant(name)

    def __getattr__(self, name):
        if name.endswith("_hook"):
            return None
        raise AttributeError(name)


MAX_DIGITS = 4300                    # 3.11's own limit, kept by every interpreter


def bounded_int(digits):
    """int(digits), refused past MAX_DIGITS digits: Python 3.11 and later (and
    3.7 to 3.10 with the CVE-2020-10735 fix) refuse them, and the others would
    spend quadratic time (3.6.15: 298 ms for 200,000); every one answers alike."""
    if len(digits) - digits.startswith("-") > MAX_DIGITS:
        raise ValueError("a number with too many digits")
    return int(digits)


def load_json(text, quick=False):
    """json.loads(text), NaN and Infinity refused; ValueError for anything not
    JSON.  quick: a refusal is not explained (the json package's explanation
    costs ten times the parse), for callers that only skip what is not JSON."""
    try:
        scan = SCANNER(ScanOptions())
    except (TypeError, AttributeError):  # no accelerator, or one that wants more
        import json
        return json.loads(text, parse_constant=reject_constant, parse_int=ScanOptions.parse_int)
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        value, end = scan(text, start)
        if not text[end:].strip(" \t\n\r"):
            return value
    except (StopIteration, ValueError, SystemError):
        # The accelerator reports some errors through json.decoder, which may
        # not be loaded yet (3.11 then raises SystemError): let the package
        # read what is not JSON, and say why.
        pass
    if quick:
        raise ValueError("not JSON")
    import json
    return json.loads(text, parse_constant=reject_constant, parse_int=ScanOptions.parse_int)


def dump_json(value, ascii=True, separators=(",", ":")):
    """json.dumps(value, ensure_ascii=ascii, separators=separators, allow_nan=False)."""
    try:
        encode = ENCODER(None, not_json, QUOTE_ASCII if ascii else QUOTE, None,
                         separators[1], separators[0], False, False, False)
    except (TypeError, NameError):       # no accelerator, or one that wants more
        import json
        return json.dumps(value, ensure_ascii=ascii, separators=separators, allow_nan=False)
    return "".join(encode(value, 0))


def not_json(value):
    raise TypeError("%s is not JSON" % type(value).__name__)


ABSENT = object()


class Transport:
    """The stdio connection: reading, writing, workers, cancellation, log."""

    def __init__(self, options):
        self.options = options
        try:
            self.out = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):
            self.out = None          # no standard output: nobody is listening
        self.write_lock = _thread.allocate_lock()
        self.log_lock = _thread.allocate_lock()
        self.flight_lock = _thread.allocate_lock()
        self.in_flight = {}          # request key -> {"cancelled": bool}
        self.legacy = None           # {"version", "client"} once initialize is answered
        self.queue = None
        self.workers = []
        self.roots = Roots(self)

    # -- reading ------------------------------------------------------------

    def run(self, stream):
        while True:
            line, oversized = read_line(stream)
            if line is None:
                break
            started = time.monotonic()
            if oversized:
                self.log("-", ABSENT, ABSENT, "-", "-32600", started)
                self.reply_error(ABSENT, -32600, "Invalid Request: the line is longer than 16 MiB")
                continue
            if line.endswith(b"\n"):
                line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line.strip():
                continue
            self.handle_line(line, started)
        self.finish()

    def finish(self):
        """End of input: let every call in flight answer, then return.

        The workers are left waiting for work, not ended: a thread still on its
        way out when the process leaves (Python's join returns before the thread
        is gone) can crash the process under Wine, which kills it mid-exit."""
        if self.queue is not None:
            self.queue.join()

    def handle_line(self, line, started):
        try:
            message = load_json(line.decode("utf-8"))
        except (ValueError, RecursionError):
            self.log("-", ABSENT, ABSENT, "-", "-32700", started)
            self.reply_error(ABSENT, -32700, "Parse error: the line is not a JSON-RPC message in UTF-8 JSON")
            return
        try:
            handle_message(self, message, started)
        except Exception:
            # No message may stop the server; what slipped through is ours.
            record_internal_error(sys.exc_info())
            request_id = message.get("id", ABSENT) if isinstance(message, dict) else ABSENT
            if not is_valid_id(request_id):
                request_id = ABSENT
            self.log("-", ABSENT, request_id, "-", "-32603", started)
            self.reply_error(request_id, -32603, "Internal error")

    # -- writing ------------------------------------------------------------

    def write(self, message):
        data = encode_message(message)
        with self.write_lock:
            try:
                write_all(self.out, data)
            except (TypeError, ValueError, OSError):
                # The client closed our standard output: nobody is listening.
                leave_at_once()

    def reply(self, request_id, result):
        self.write({"jsonrpc": "2.0", "id": request_id, "result": result})

    def reply_error(self, request_id, code, message, data=None):
        error = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        response = {"jsonrpc": "2.0"}
        if request_id is not ABSENT:
            response["id"] = request_id
        response["error"] = error
        self.write(response)

    def log(self, era, method, request_id, tool, outcome, started, warning=None):
        elapsed = int((time.monotonic() - started) * 1000)
        line = "memprove-mcp %s %s id=%s tool=%s %s %dms" % (
            era, log_field(method), log_field(request_id), tool, outcome, elapsed)
        if warning:
            line += " warning=" + warning
        with self.log_lock:
            try:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    # -- tool calls in flight -----------------------------------------------

    def submit(self, job):
        if self.queue is None:
            import queue
            # A full queue blocks this, the reading thread: the client's pipe
            # holds what we cannot, and memory stays bounded (§6 rule 4).
            self.queue = queue.Queue(WAITING)
            import_what_calls_share()
        with self.flight_lock:
            self.in_flight[request_key(job["id"])] = job
            waiting = len(self.in_flight)
        # One more worker whenever every worker is taken, up to WORKERS.
        if waiting > len(self.workers) and len(self.workers) < WORKERS:
            import threading
            worker = threading.Thread(target=self.work, name="memprove-call", daemon=True)
            self.workers.append(worker)
            worker.start()
        self.queue.put(job)

    def work(self):
        while True:
            job = self.queue.get()
            try:
                self.answer(job)
            finally:
                self.queue.task_done()

    def answer(self, job):
        if not job["cancelled"]:
            outcome = run_tool_call(self, job)
        with self.flight_lock:
            self.in_flight.pop(request_key(job["id"]), None)
            cancelled = job["cancelled"]
        # The log line goes first: a client may stop us as soon as it has its answer.
        if cancelled:
            self.log(job["era"], job["method"], job["id"], job["tool"], "cancelled", job["started"])
        else:
            self.log(job["era"], job["method"], job["id"], job["tool"], outcome["code"],
                     job["started"], outcome.get("warning"))
            self.reply(job["id"], outcome["result"])

    def cancel(self, request_id):
        with self.flight_lock:
            job = self.in_flight.get(request_key(request_id))
            if job is not None:
                job["cancelled"] = True

    def in_flight_now(self, request_id):
        with self.flight_lock:
            return request_key(request_id) in self.in_flight


def import_what_calls_share():
    """Import, once and in the reading thread, the modules that calls import
    where they use them: Python 3.8 under Windows was seen to hand a second
    thread a module another thread was still importing (`re` without its
    functions, the `idna` codec missing from getaddrinfo)."""
    import bisect  # noqa: F401
    import encodings.idna  # noqa: F401  (socket.getaddrinfo("localhost") looks it up)
    import heapq  # noqa: F401
    import ipaddress  # noqa: F401
    import itertools  # noqa: F401
    import json  # noqa: F401
    import operator  # noqa: F401
    import re  # noqa: F401
    import socket  # noqa: F401
    import struct  # noqa: F401
    import urllib.parse  # noqa: F401


def write_all(descriptor, data):
    """Write every byte: a short write is continued, and a non-blocking pipe
    that is full (EAGAIN) is waited out (contract.md §6 rule 5)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(descriptor, view)
        except BlockingIOError:
            import select
            select.select([], [descriptor], [])
            continue
        view = view[written:]


class Roots:
    """The client's MCP roots, asked for in the legacy era (clients.md).

    The one request the server sends: `roots/list` after
    `notifications/initialized` when the client declared `roots`, and again
    on `notifications/roots/list_changed`.  Only the newest request is
    pending, and an answer to any other id is dropped unread, so a storm of
    notifications or of forged answers costs the reading thread nothing
    (contract.md §6 rule 18).  The newest good answer is kept; a call waits
    for a pending one until ROOTS_WAIT after the call itself arrived.  The
    answer's paths are resolved by the first call that uses them, in its
    worker, and only as far as needed (§6 rule 24): resolving a thousand deep
    paths on the reading thread would hold every message behind it.
    """

    PREFIX = "memprove-roots-"

    def __init__(self, transport):
        self.transport = transport
        self.changed = None          # a Condition, made when a client first declares roots
        self.declared = False
        self.asked = 0               # requests sent, numbering their ids
        self.pending = None          # the number of the one request awaited, or None
        self.paths = None            # the file: roots of the newest good answer, unresolved
        self.resolved = (None, None)     # (those paths, the start directory they give)
        self.resolving = _thread.allocate_lock()

    def declare(self, capabilities):
        """An initialize (again): the new session's capability, nothing kept."""
        declared = isinstance(capabilities, dict) and isinstance(capabilities.get("roots"), dict)
        if not declared and self.changed is None:
            return                       # never declared in this process: nothing to undo
        if self.changed is None:
            import threading
            self.changed = threading.Condition()
        with self.changed:
            self.declared = declared
            self.pending, self.paths = None, None
            self.changed.notify_all()

    def ask(self):
        if not self.declared:
            return
        with self.changed:
            self.asked += 1
            self.pending = number = self.asked   # an earlier request's answer is stale now
        self.transport.write({"jsonrpc": "2.0", "id": self.PREFIX + str(number),
                              "method": "roots/list"})

    def take(self, message):
        """A client's response: used only when it answers the pending request."""
        if self.changed is None:
            return                       # we never asked
        with self.changed:
            number = self.pending
        if number is None or message.get("id") != self.PREFIX + str(number):
            return
        try:
            paths = root_paths(message.get("result"))
        except ValueError:
            paths = None                 # an error answer or a malformed one
        with self.changed:
            if self.pending != number:
                return                   # a list_changed made it stale meanwhile
            # Pending until the answer is in force: a waiting call must not
            # wake between the two and take the previous roots.
            self.pending = None
            if paths is not None:
                self.paths = paths
            self.changed.notify_all()

    def for_call(self, arrived):
        """The start directory roots give a call that arrived at `arrived`
        (time.monotonic()), or None."""
        if not self.declared:
            return None
        with self.changed:
            while self.pending is not None:
                remaining = arrived + ROOTS_WAIT - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            paths = self.paths
        if not paths:
            return None
        with self.resolving:             # one resolution per answer, shared by the calls
            if self.resolved[0] is not paths:
                self.resolved = (paths, start_directory(paths))
            return self.resolved[1]


def root_paths(result):
    """The paths of a roots/list result's `file:` roots, unresolved, in order;
    ValueError for a result of the wrong shape."""
    roots = result.get("roots") if isinstance(result, dict) else None
    if not isinstance(roots, list):
        raise ValueError("not a roots/list result")
    roots = roots[:MAX_ROOTS]            # §6 rule 18: what a client sends past these is not looked at
    if not all(isinstance(root, dict) and isinstance(root.get("uri"), str) for root in roots):
        raise ValueError("not a roots/list result")
    return [path for path in map(file_uri_path, (root["uri"] for root in roots)) if path]


def start_directory(paths):
    """The first of `paths` holding the working directory, resolved, else
    the first as written (find_workspace resolves it); None for none.

    §6 rule 24: resolving a path costs a look per component, and a client
    may send 1,000 paths of 2,000 components.  So a root is first judged by
    one stat (the kernel walks the path), and only a root that is the same
    folder as the working directory or one above it is resolved."""
    if not paths:
        return None
    here = working_directory()
    if here is not None:
        here = os.path.join(os.path.realpath(here), "")
        above = folders_above(here)
        for path in dict.fromkeys(paths):    # a root sent twice is judged once
            if may_hold(path, above):
                resolved = os.path.realpath(path)
                if here.startswith(os.path.join(resolved, "")):
                    return resolved
    return paths[0]


def folders_above(path):
    """The (device, inode) of `path` and of each folder above it; a folder
    that cannot be looked at is left out."""
    return set(identity for identity in map(folder_identity, path_and_parents(path)) if identity)


def path_and_parents(path):
    """`path`, then each folder above it up to the root."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def folder_identity(path):
    """(device, inode) of the folder at `path`, or None when it is no folder;
    the inode is 0 where the file system numbers none."""
    import stat
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISDIR(status.st_mode):
        return None
    return status.st_dev, status.st_ino


def may_hold(path, above):
    """Whether the root at `path` may hold the working directory: it is one
    of the folders `above` it (or cannot be told apart by inode).  A root
    that cannot be looked at cannot be the Workspace's either."""
    identity = folder_identity(path)
    return identity is not None and (not identity[1] or identity in above)


def file_uri_path(uri):
    """The local path of a `file:` URI, unresolved, or None for any other URI
    and for one over MAX_ROOT_URI bytes (resolving a path costs more the
    longer it is)."""
    if len(uri) > MAX_ROOT_URI or len(uri.encode("utf-8", "surrogatepass")) > MAX_ROOT_URI:
        return None
    from urllib.parse import unquote, urlsplit
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme.lower() != "file" or parts.netloc.lower() not in ("", "localhost"):
        return None
    path = unquote(parts.path, errors="surrogateescape")
    if PLATFORMS[PLATFORM]["drive_letters"] and path[:1] == "/" and path[2:3] == ":" and \
            path[1:2].isalpha():
        path = path[1:]
    if not path or "\x00" in path or not os.path.isabs(path):
        return None
    return path


def request_key(request_id):
    # 1 and "1" are different requests.
    return (type(request_id).__name__, request_id)


def reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def is_valid_id(value):
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def record_internal_error(exc_info):
    """Append a traceback's frames and type to MEMPROVE_MCP_LOG, if it is set.

    Only file, line, function and the exception's type are written: an
    exception's message or a frame's locals could carry a token or a value.
    """
    if not os.environ.get("MEMPROVE_MCP_LOG"):
        return
    import traceback
    kind, _, tb = exc_info
    lines = ["%s internal_error %s" % (utc_now(), kind.__name__)]
    for frame in traceback.extract_tb(tb):
        lines.append('  File "%s", line %d, in %s' % (frame.filename, frame.lineno, frame.name))
    append_to_log("\n".join(lines) + "\n")


def append_to_log(text):
    """Append `text` to MEMPROVE_MCP_LOG, where it names a file this may write
    (§6 rule 35): an absolute path (a relative one would land in whatever
    project the client started in), its folder reached as reach_folder
    reaches one (another user's link on the way, or a link in a folder
    others can write, is refused), the file opened there without following
    a link and without blocking, and written only when it is a regular file
    of the user's with no other name (a repository's `mcp.log` FIFO hung
    the hook; a link, or a hard link, appended to a file of the user's)."""
    path = log_path(os.environ)
    if not path:
        return
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | NO_FOLLOW | getattr(os, "O_NONBLOCK", 0) | \
        getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOINHERIT", 0)
    folder, name = os.path.split(path)
    try:
        if PLATFORMS[PLATFORM]["posix_files"]:
            descriptor = reach_folder(folder, "the log")[1]
            try:
                handle = os.open(name, flags, 0o600, dir_fd=descriptor)
            finally:
                os.close(descriptor)
        else:
            if os.path.lexists(path) and is_link(os.lstat(path)):
                return                   # Windows: no O_NOFOLLOW, so a link is looked for first
            handle = os.open(path, flags, 0o600)
    except (OSError, ValueError, Distrusted):
        return
    try:
        if appendable(os.fstat(handle)):
            # Lines end as the platform's text files do (CR LF on Windows), as a text-mode
            # open would write them.
            data = text.replace("\n", os.linesep).encode("utf-8", "backslashreplace")
            while data:
                data = data[os.write(handle, data):]
    except OSError:
        pass
    finally:
        os.close(handle)


def appendable(status):
    """Whether a file opened to append to is a regular file of the user's (or
    root's) with one name: no FIFO, device or folder, no hard link that makes
    the append land in another file of the user's."""
    import stat
    return stat.S_ISREG(status.st_mode) and status.st_nlink == 1 and owned_by_user(status)


def log_path(environ, platform=PLATFORM):
    """MEMPROVE_MCP_LOG when it names a file from a root, else None: on
    Windows a path from the current drive's root (`\\logs\\mcp.log`) is one,
    whatever `os.path.isabs` of the Python says (3.13 says no), since no
    project chooses the drive's root; `C:mcp.log` and `mcp.log` are not."""
    path = environ.get("MEMPROVE_MCP_LOG")
    if not path:
        return None
    if PLATFORMS[platform]["drive_letters"]:
        import ntpath
        return path if ntpath.splitdrive(path)[1][:1] in ("/", "\\") else None
    return path if path.startswith("/") else None


# ---------------------------------------------------------------------------
# 4. Protocol eras
# ---------------------------------------------------------------------------
# protocol.md, "Deciding the era of a request": an `initialize` with a string
# protocolVersion is the legacy handshake; a request whose _meta holds the
# protocol-version key is modern and stands alone; anything else is legacy
# once an `initialize` has been answered in this process.

def handle_message(transport, message, started):
    if isinstance(message, list):
        transport.log("-", ABSENT, ABSENT, "-", "-32600", started)
        transport.reply_error(ABSENT, -32600, "Invalid Request: batches are not supported")
        return
    if not isinstance(message, dict):
        transport.log("-", ABSENT, ABSENT, "-", "-32600", started)
        transport.reply_error(ABSENT, -32600, "Invalid Request: a message is a JSON object")
        return
    request_id = message.get("id", ABSENT)
    method = message.get("method", ABSENT)
    echo_id = request_id if is_valid_id(request_id) else ABSENT
    logged_method = method if isinstance(method, str) else ABSENT

    def invalid(reason):
        transport.log("-", logged_method, echo_id, "-", "-32600", started)
        transport.reply_error(echo_id, -32600, "Invalid Request: " + reason)

    if message.get("jsonrpc") != "2.0":
        return invalid('"jsonrpc" must be "2.0"')
    if method is ABSENT:
        if request_id is not ABSENT and ("result" in message or "error" in message):
            transport.roots.take(message)     # the only request we send is roots/list
            transport.log("-", ABSENT, echo_id, "-", "response", started)
            return
        return invalid('a request needs a "method"')
    if not isinstance(method, str):
        return invalid('"method" must be a string')
    if request_id is ABSENT:
        handle_notification(transport, method, message.get("params"))
        transport.log("-", method, ABSENT, "-", "notification", started)
        return
    if echo_id is ABSENT:
        return invalid('"id" must be a string or an integer')
    handle_request(transport, method, request_id, message.get("params"), started)


def handle_notification(transport, method, params):
    if method == "notifications/cancelled" and isinstance(params, dict):
        request_id = params.get("requestId", ABSENT)
        if is_valid_id(request_id):
            transport.cancel(request_id)
    elif method in ("notifications/initialized", "notifications/roots/list_changed") and \
            transport.legacy is not None:
        transport.roots.ask()
    # Every other notification (progress...) needs nothing.


def handle_request(transport, method, request_id, params, started):
    if transport.in_flight_now(request_id):
        # §6 rule 8: an answer carrying that id would be taken for the first request's.
        transport.log("-", method, request_id, "-", "-32600", started)
        transport.reply_error(None, -32600, "Invalid Request: a request with this id is "
                              "still being served")
        return
    fields = params if isinstance(params, dict) else {}
    meta = fields.get("_meta")
    claims_modern = isinstance(meta, dict) and META_VERSION in meta

    if method == "initialize" and isinstance(fields.get("protocolVersion"), str):
        era, answer = "legacy", answer_initialize(transport, fields)
    elif claims_modern:
        era, answer = "modern", answer_modern(method, fields, meta)
    elif method in ("server/discover", "subscriptions/listen"):
        era, answer = "-", error_answer(-32602, "Invalid params: %s needs params._meta with %s and %s"
                                        % (method, META_VERSION, META_CAPABILITIES))
    elif method == "ping":
        era, answer = ("legacy" if transport.legacy else "-"), {"result": {}}
    elif transport.legacy is not None:
        era, answer = "legacy", answer_legacy(transport, method, fields)
    else:
        era, answer = "-", error_answer(-32602, "Invalid params: this request needs either "
                                        "initialize first or the 2026-07-28 _meta fields (%s, %s)"
                                        % (META_VERSION, META_CAPABILITIES))

    if params is not None and not isinstance(params, dict) and "error" not in answer:
        answer = error_answer(-32602, "Invalid params: params must be an object")

    if "call" in answer:
        call = answer["call"]
        call.update(id=request_id, method=method, era=era, started=started, cancelled=False,
                    revision=transport.legacy["version"] if era == "legacy" else MODERN_VERSION)
        transport.submit(call)
        return
    # The log line goes first: a client may stop us as soon as it has its answer.
    if "error" in answer:
        error = answer["error"]
        transport.log(era, method, request_id, tool_label(method, fields), str(error["code"]), started)
        transport.reply_error(request_id, error["code"], error["message"], error.get("data"))
    else:
        transport.log(era, method, request_id, tool_label(method, fields), "ok", started)
        result = answer["result"]
        transport.reply(request_id, modern_result(result) if era == "modern" else result)


def error_answer(code, message, data=None):
    error = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"error": error}


def tool_label(method, fields):
    """What the log names as the tool: a tools/call's tool, `?` if it names none of ours."""
    if method != "tools/call":
        return "-"
    name = fields.get("name")
    return name if isinstance(name, str) and name in TOOLS_BY_NAME else "?"


def modern_result(result):
    decorated = {"resultType": "complete"}
    decorated.update(result)
    meta = dict(result.get("_meta") or {})
    meta[META_SERVER] = {"name": SERVER_NAME, "version": VERSION}
    decorated["_meta"] = meta
    return decorated


def answer_initialize(transport, fields):
    asked = fields["protocolVersion"]
    version = asked if asked in LEGACY_VERSIONS else LEGACY_DEFAULT
    transport.legacy = {"version": version, "client": client_name(fields.get("clientInfo"))}
    transport.roots.declare(fields.get("capabilities"))
    return {"result": {
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": SERVER_NAME, "version": VERSION},
        "instructions": INSTRUCTIONS,
    }}


def answer_legacy(transport, method, fields):
    if method == "tools/list":
        return {"result": {"tools": tool_listing(transport.legacy["version"])}}
    if method == "tools/call":
        return prepare_tool_call(fields, transport.legacy["client"])
    if method == "initialize":
        return error_answer(-32602, "Invalid params: initialize needs a string params.protocolVersion")
    return error_answer(-32601, "Method not found: %s" % method[:LOG_FIELD])


def answer_modern(method, fields, meta):
    """The 2026-07-28 envelope ladder, then the method; first failure wins."""
    if META_CAPABILITIES not in meta:
        return error_answer(-32602, "Invalid params: params._meta is missing %s" % META_CAPABILITIES)
    if not isinstance(meta[META_CAPABILITIES], dict):
        return error_answer(-32602, "Invalid params: %s must be an object" % META_CAPABILITIES)
    version = meta[META_VERSION]
    if not isinstance(version, str):
        return error_answer(-32602, "Invalid params: %s must be a string" % META_VERSION)
    if version != MODERN_VERSION:
        return error_answer(-32022, "Unsupported protocol version",
                            {"supported": [MODERN_VERSION], "requested": version})
    if method == "server/discover":
        return {"result": {
            "supportedVersions": [MODERN_VERSION],
            "capabilities": {"tools": {}},
            "instructions": INSTRUCTIONS,
            "ttlMs": LIST_TTL_MS,
            "cacheScope": "public",
        }}
    if method == "tools/list":
        return {"result": {"tools": tool_listing(), "ttlMs": LIST_TTL_MS, "cacheScope": "public"}}
    if method == "tools/call":
        return prepare_tool_call(fields, client_name(meta.get(META_CLIENT)))
    return error_answer(-32601, "Method not found: %s" % method[:LOG_FIELD])


def client_name(info):
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        name = fold(info["name"])[:64]
        return name or None
    return None


# ---------------------------------------------------------------------------
# 5. Tool dispatch
# ---------------------------------------------------------------------------
# The tool table is the one place a tool is declared: its schemas, its
# annotations and its handler.  Arguments are checked against the input
# schema by one validator, before anything is read or sent.

def prepare_tool_call(fields, client):
    name = fields.get("name")
    if not isinstance(name, str):
        return error_answer(-32602, "Invalid params: tools/call needs a string name")
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        return error_answer(-32602, "Invalid params: no tool has that name")
    arguments = fields.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return error_answer(-32602, "Invalid params: arguments must be an object")
    # The arguments are checked before the call waits for a worker, so a
    # waiting call holds only what its schema allows, however large the line.
    try:
        checked_arguments, problem = validate(tool["inputSchema"], arguments), None
    except Problem as error:
        # Its traceback's frames would keep the arguments alive while it waits.
        checked_arguments, problem = None, error.with_traceback(None)
    return {"call": {"tool": name, "arguments": checked_arguments, "problem": problem,
                     "client": client}}


def run_tool_call(transport, job):
    """Run one tool call; return {"result", "code", "warning"} for the answer and the log."""
    tool = TOOLS_BY_NAME[job["tool"]]
    call = None
    try:
        # The arguments first: bad ones must not cause a single read or request.
        if job["problem"] is not None:
            raise job["problem"]
        roots = transport.roots.for_call(job["started"]) if job["era"] == "legacy" else None
        call = Call(transport.options, job["client"], roots)
        value = tool["handler"](call, job["arguments"])
        if "outputSchema" in tool:
            result = {"content": [{"type": "text", "text": dump_json(value, False, (", ", ": "))}],
                      "structuredContent": value, "isError": False}
        else:
            # The text is what the model must read; the object is for programs.
            value, text = value
            result = {"content": [{"type": "text", "text": text}], "isError": False,
                      "_meta": {"memprove/" + job["tool"]: value}}
        code = "ok"
    except Exception as error:
        if not isinstance(error, Problem):
            record_internal_error(sys.exc_info())
            error = Problem("internal_error")
        result = {"content": [{"type": "text", "text": error.text()}], "isError": True}
        code = error.code
    for key in REVISION_LACKS.get(job["revision"], ()):
        result.pop(key, None)
    if job["era"] == "modern":
        result = modern_result(result)
    too_open = call is not None and call.token_too_open
    return {"result": result, "code": code, "warning": "token_file_too_open" if too_open else None}


# -- schema building blocks (keywords that mean the same in draft-07 and 2020-12)

NUMBER = {"type": "integer", "minimum": 1}


def nullable(schema):
    widened = dict(schema)
    widened["type"] = [schema["type"], "null"]
    return widened


def text(max_length, min_length=1):
    return {"type": "string", "minLength": min_length, "maxLength": max_length}


def listing(items, max_items=50, min_items=0):
    schema = {"type": "array", "items": items, "maxItems": max_items}
    if min_items:
        schema["minItems"] = min_items
    return schema


def inputs(properties, required=()):
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


def outputs(properties):
    """An output schema: every property is always present, in this order."""
    return {"type": "object", "properties": properties, "required": list(properties)}


ID = {"type": ["string", "null"]}
AGENT = outputs({"name": {"type": "string"}, "role": {"type": "string"}})
STRING = {"type": "string"}
INTEGER = {"type": "integer"}
BOOLEAN = {"type": "boolean"}
TASK_STATUS = {"type": "string", "enum": ["open", "active", "done"]}
LABEL = {"type": "string", "pattern": "^r[1-9][0-9]*$", "maxLength": 20}

# Where an agent finds the number an argument takes, for the "never a UUID" hint.
NUMBER_SOURCES = {"task": "tasks", "numbers": "pack", "session": "begin",
                  "parent_session": "begin", "abandoned": "pack",
                  "reaffirm": "pack", "withdraw": "pack", "supersedes": "pack"}


def tool(name, title, description, input_schema, output_schema, handler, read_only,
         meta=None):
    """One entry of the tool table.  A tool without an output schema (`pack`)
    answers with its text alone, so clients hand the model that text."""
    annotations = {"title": title, "readOnlyHint": read_only}
    if not read_only:
        annotations.update(destructiveHint=False, idempotentHint=False)
    annotations["openWorldHint"] = False
    entry = {"name": name, "title": title, "description": description,
             "inputSchema": input_schema}
    if output_schema is not None:
        entry["outputSchema"] = output_schema
    entry["annotations"] = annotations
    if meta:
        entry["_meta"] = meta
    entry["handler"] = handler
    return entry


# Claude Code moves a result over 50,000 characters to a file and shows the
# model a preview, unless the tool's definition raises the limit.
WHOLE_RESULTS = {"anthropic/maxResultSizeChars": 200000}


def tool_listing(revision=MODERN_VERSION):
    """The tools as a revision's schema has them (REVISION_LACKS)."""
    left_out = ("handler",) + REVISION_LACKS.get(revision, ())
    return [dict((key, value) for key, value in entry.items() if key not in left_out)
            for entry in TOOLS]


def validate(schema, value, name=None):
    """Check `value` against the schema subset the tool table uses.

    Returns the value with numbers normalised (tools.md takes 3.0 and "3" as
    the integer 3).  Raises Problem("invalid_params") naming the argument and
    never repeating its value.
    """
    where = "`%s`" % name if name else "The arguments"
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if value is None and "null" in kinds:
        return None
    if "integer" in kinds:
        value = as_integer(value, name)
        if "minimum" in schema and value < schema["minimum"] or \
                "maximum" in schema and value > schema["maximum"]:
            raise invalid("%s must be %s." % (where, integer_range(schema)))
    elif "string" in kinds:
        if not isinstance(value, str):
            raise invalid("%s must be a string." % where)
        if len(value) > schema.get("maxLength", len(value)):
            raise invalid("%s is longer than %d characters." % (where, schema["maxLength"]))
        if len(value) < schema.get("minLength", 0):
            raise invalid("%s must not be empty." % where)
        if "pattern" in schema and not matches_whole(schema["pattern"], value):
            raise invalid("%s must match %s." % (where, schema["pattern"]))
    elif "boolean" in kinds:
        if not isinstance(value, bool):
            raise invalid("%s must be true or false." % where)
    elif "array" in kinds:
        if not isinstance(value, list):
            raise invalid("%s must be a list." % where)
        if len(value) > schema.get("maxItems", len(value)):
            raise invalid("%s has more than %d items." % (where, schema["maxItems"]))
        if len(value) < schema.get("minItems", 0):
            raise invalid("%s needs at least %d item." % (where, schema["minItems"]))
        value = [validate(schema["items"], item, "%s[%d]" % (name, index))
                 for index, item in enumerate(value)]
    elif "object" in kinds:
        value = validate_object(schema, value, name)
    if "enum" in schema and value not in schema["enum"]:
        raise invalid("%s must be one of: %s." % (where, ", ".join(map(str, schema["enum"]))))
    return value


def matches_whole(pattern, value):
    # In JSON Schema (ECMA-262) `$` ends the string; Python's also matches before a final newline.
    import re
    found = re.search(pattern, value)
    return found is not None and found.end() == len(value)


def validate_object(schema, value, name):
    where = "`%s`" % name if name else "The arguments"
    if not isinstance(value, dict):
        raise invalid("%s must be an object." % where)
    properties = schema.get("properties", {})
    for key in value:
        if key not in properties and schema.get("additionalProperties") is False:
            if ARGUMENT_NAME.match(key):
                raise invalid("`%s` is not an argument of this tool." % key)
            raise invalid("An argument this tool does not take was given.")
    for key in schema.get("required", ()):
        if key not in value:
            raise invalid("`%s` is required." % (key if not name else "%s.%s" % (name, key)))
    checked = {}
    for key, item in value.items():
        checked[key] = validate(properties[key], item, key if not name else "%s.%s" % (name, key))
    return checked


ARGUMENT_NAME = Pattern(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
UUID_SHAPE = Pattern(r"\{?[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                        r"[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\}?\Z")


def as_integer(value, name):
    where = "`%s`" % name
    if isinstance(value, bool):
        raise invalid("%s must be a whole number." % where)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        if DIGITS.match(value):
            try:
                return bounded_int(value)   # as long as the same number written bare
            except ValueError:
                raise invalid("%s has too many digits." % where)
        if UUID_SHAPE.match(value.strip()):
            base = (name or "").split("[")[0].split(".")[0]
            source = NUMBER_SOURCES.get(base)
            if source:
                raise invalid("%s takes a number from `%s`, never a UUID." % (where, source))
            raise invalid("%s takes a number, never a UUID." % where)
    raise invalid("%s must be a whole number." % where)


def integer_range(schema):
    low, high = schema.get("minimum"), schema.get("maximum")
    if high is None:
        return "%d or more" % low
    return "from %d to %d" % (low, high)


def invalid(hint):
    return Problem("invalid_params", hint)


# ---------------------------------------------------------------------------
# 6. Tools
# ---------------------------------------------------------------------------
# Each takes the per-call object and the validated arguments and returns the
# result object, whose first keys are always `task_id` and `session_id`; or
# (object, text) when the text content is not the object as JSON.

def tool_context(call, args):
    workspace = call.workspace
    context, error = ({}, None) if workspace.problem else call.context_or_error()
    task, session = context.get("task"), context.get("session")
    result = {"task_id": task["id"] if task else None,
              "session_id": session["id"] if session else None}
    if error:
        result["context_error"] = error.code
    result["workspace"] = {"root": shown_root(workspace.root), "found_by": workspace.found_by,
                           "marked": workspace.marked, "problem": workspace.problem}
    result["task"] = {"number": task["number"], "title": fold(task.get("title"))} if task else None
    if session:
        agent = session.get("agent") or {}
        parent = session.get("parent") or {}
        result["session"] = {"number": session["number"],
                             "agent": {"name": fold(agent.get("name")), "role": fold(agent.get("role"))},
                             "parent": parent.get("number")}
    else:
        result["session"] = None
    result["agent"] = call.agent(context)
    newest, skipped = newest_runs(call.runs(shaped=False) if task else (), task)
    result["runs"] = [{"label": run["label"], "passed": run.get("passed") is True,
                       "exit_code": run["exit_code"], "command": fold(run["command"]),
                       "finished_at": fold(run["finished_at"])} for run in newest]
    result["runs_skipped"] = skipped
    result["config"] = call.config_report()
    return result


def newest_runs(runs, task, count=50):
    """(the `count` newest runs of the Task that `context` may show, newest
    first; how many of the Task's runs it may not), holding no more than
    `count` runs however long the file."""
    import heapq
    newest, skipped = [], 0
    for index, run in enumerate(runs):
        if run.get("task_id") != task["id"]:
            continue
        if not shown_run(run):
            skipped += 1
        elif len(newest) < count:
            heapq.heappush(newest, (run["finished_at"], index, run))
        else:
            heapq.heappushpop(newest, (run["finished_at"], index, run))
    return [run for _, _, run in sorted(newest, reverse=True)], skipped


def tool_tasks(call, args):
    context = call.context()
    query = {"workspace": call.root}
    if args.get("status"):
        query["status"] = args["status"]
    answer = call.send("listTasks", query=query)
    current = (context.get("task") or {}).get("id")
    tasks = [{"number": task["number"], "title": fold(task["title"]), "status": task["status"],
              "open_items": field(task, "open_items", int),
              "sessions_open": field(task, "sessions_open", int),
              "current": task["id"] == current}
             for task in records(answer, "tasks", TASK_FIELDS)]
    return dict(call.ids(context), workspace=shown_root(call.root), tasks=tasks)


def shown_root(root):
    """The Workspace root as a result shows it: a folder's name (a clone's) that
    holds a character that hides text is shown JSON-quoted, as doctor shows
    it (§6 rule 33), never as it is.  (A control or a line break is escaped
    by the result's JSON wherever it is read, and kept: rule 30.)"""
    return root if root is None or not HIDING.search(root) else shown_path(root)


def tool_ledger_verify(call, args):
    context = call.context()
    answer = call.send("verifyLedger", body={})
    first_bad = answer.get("first_bad")
    if first_bad is not None:
        first_bad = {"seq": field(first_bad, "seq", int),
                     "reason": field(first_bad, "reason", LEDGER_FAULTS)}
    return dict(call.ids(context), ok=field(answer, "ok", bool), entries=field(answer, "entries", int),
                head=field(answer, "head", LEDGER_HASH), first_bad=first_bad)


def tool_pack(call, args):
    context = call.context()
    task_id = call.task_id(args.get("task"), context)
    capsule = call.capsule(task_id)
    budget = args.get("budget", PACK_BUDGET)
    opening, rendered = opened_pack(call, context, capsule, budget, args.get("query"))
    result = dict(call.ids(context, task_id), task=capsule["task"]["number"], budget=budget)
    for key in ("units", "claims_shown", "claims_left_out", "runs_left_out", "lines_cut"):
        result[key] = rendered[key]
    return result, opening + "\n\n" + rendered["pack"]


def opened_pack(call, context, capsule, budget, query=None, now=None):
    """(opening statement, render_pack's figures): what `pack` and the
    session-start hook show, the agent named as the call names it."""
    agent = call.agent(context)
    try:
        rendered = render_pack(capsule, budget, query)
        opening = opening_statement(capsule, now or utc_now(), agent["name"], agent["role"])
    except CAPSULE_MISREAD:
        raise Problem("daemon_error", "Its Capsule could not be read.")
    return opening, rendered


def tool_claims(call, args):
    context = call.context()
    task_id = call.task_id(args.get("task"), context)
    capsule = call.capsule(task_id)
    try:
        by_number = dict((claim["number"], claim) for claim in capsule["claims"])
        wanted = []
        for number in args["numbers"]:
            if number not in wanted:
                wanted.append(number)
        given, missing, left_out, units = [], [], [], 0
        for number in wanted:
            claim = by_number.get(number)
            if claim is None:
                missing.append(number)
                continue
            line = claim_line(claim)
            size = utf16_len(line)
            if left_out or (given and units + size > CLAIMS_BUDGET):
                left_out.append(number)
                continue
            units += size
            given.append({"number": number, "kind": fold(claim.get("kind")),
                          "state": fold(claim.get("state")), "line": line})
    except CAPSULE_MISREAD:
        raise Problem("daemon_error", "Its Capsule could not be read.")
    return dict(call.ids(context, task_id), task=capsule["task"]["number"], claims=given,
                missing=missing, left_out=left_out)


CLAIMS_BUDGET = 60000


def tool_begin(call, args):
    if "task" in args and "new_task" in args:
        raise invalid("Pass `task` or `new_task`, not both.")
    new_task = args.get("new_task")
    if new_task is not None and not fold(new_task):
        raise invalid("`new_task` must not be empty.")
    agent_name = fold(args.get("agent_name"))
    if len(agent_name) > 64:
        raise invalid("`agent_name` is longer than 64 characters.")
    context, error = call.context_or_error()
    if error is not None and error.hint:
        raise error      # a link or a wrong file type in .memprove/ (§6 rules 6 and 14)
    # Otherwise begin moves an unreadable or foreign context.json aside and starts afresh.
    task = context.get("task")
    if "task" not in args and new_task is None and not task:
        raise Problem("no_task")
    agent = call.agent(context, agent_name or None, args.get("agent_role"))
    parent_number = args.get("parent_session") or parent_setting(call.environ)
    own = context.get("session")

    sessions = records(call.send("listSessions", query={"workspace": call.root}), "sessions",
                       SESSION_FIELDS)
    parent = None
    if parent_number is not None:
        parent = find_record(sessions, parent_number)
        if parent is None:
            raise Problem("session_not_found", "`parent_session` takes a number from `begin`.")
    elif own:
        record = find_record(sessions, own["number"], own["id"])
        if record is not None and record.get("state") == "open":
            parent = record
    workspace_id = field(field(call.send("resolveWorkspace", body={"root": call.root}),
                               "workspace", dict), "id", "id")
    made = []
    with call.naming(made):
        if new_task is not None:
            task = call.send("createTask", body={"workspace_id": workspace_id, "title": new_task})
            number = field(field(task, "task", dict), "number", "number")
            made.append("Task %d was created." % number)
            task = daemon_task(task["task"])
        else:
            number = args["task"] if "task" in args else task["number"]
            tasks = records(call.send("listTasks", query={"workspace": call.root}), "tasks",
                            TASK_FIELDS)
            task = find_record(tasks, number, None if "task" in args else task["id"])
            if task is None:
                raise Problem("task_not_found", "`task` takes a number from `tasks`.")
        session = field(call.send("createSession", body={
            "task_id": task["id"],
            "agent": {"name": agent["name"], "role": agent["role"]},
            "parent_session_id": parent["id"] if parent else None}), "session", dict)
        made.append("Session %d is open." % field(session, "number", "number"))
        checked(session, *SESSION_FIELDS)
        status = task["status"]
        if status == "open":
            status = activate(call, task, session)

    moved = []
    deadline = time.monotonic() + call.timeout()

    def change(current, problem):
        if problem is not None:     # unusable now, whether or not it was at the start
            moved.append(move_aside(call.root, problem, deadline))
        fresh = current
        fresh["version"] = 1
        fresh["workspace"] = {"id": workspace_id, "root": call.root}
        fresh["task"] = {"id": task["id"], "number": task["number"], "title": task["title"]}
        fresh["session"] = context_session(session, parent)
        fresh["updated_at"] = utc_now()
        return fresh

    call.write_context(change, made)
    result = {"task_id": task["id"], "session_id": session["id"],
              "task": {"number": task["number"], "title": fold(task["title"]), "status": status},
              "session": {"number": session["number"],
                          "agent": {"name": agent["name"], "role": agent["role"]},
                          "parent": parent["number"] if parent else None}}
    if moved:
        result["moved_aside"] = moved[0]
    return result


def activate(call, task, session):
    """transitionTask to `active`; return the Task's status.  Another agent
    that began the same Task at once may have moved it first: the daemon then
    refuses the move, and a Task found `active` on a second look is what this
    begin wanted (tools.md, `begin` step 6)."""
    try:
        moved_on = call.send("transitionTask", path={"task_id": task["id"]}, body={
            "to": "active", "session_id": session["id"], "evidence": []})
    except Problem as problem:
        if problem.code != "invalid_transition":
            raise
        tasks = records(call.send("listTasks", query={"workspace": call.root}), "tasks", TASK_FIELDS)
        now = find_record(tasks, None, task["id"])
        if now is None or now["status"] != "active":
            raise problem
        return now["status"]
    return daemon_task(field(moved_on, "task", dict))["status"]


def tool_checkpoint(call, args):
    facts = args.get("facts", [])
    for index, fact in enumerate(facts):
        if not fold(fact["text"]):
            raise invalid("`facts[%d].text` must not be empty." % index)
    open_items = [item for item in args.get("open_items", []) if fold(item)]
    next_action = args.get("next_action") if fold(args.get("next_action")) else None
    reaffirm, withdraw = args.get("reaffirm", []), args.get("withdraw", [])
    if not (facts or open_items or reaffirm or withdraw or next_action):
        raise invalid("Give at least one of `facts`, `open_items`, `reaffirm`, `withdraw` "
                      "or `next_action`.")
    context = call.context()
    task_id, session_number = call.working_session(context, args.get("session"))
    runs = call.run_ids([label for fact in facts for label in fact.get("runs", [])] +
                        args.get("runs", []))
    session_id = call.session_id(context, task_id, session_number)
    capsule = call.capsule(task_id)
    claims = check_session_and_claims(capsule, session_id, reaffirm + withdraw)
    body = {"task_id": task_id,
            "facts": [{"text": fact["text"], "evidence": [runs[l] for l in fact.get("runs", [])]}
                      for fact in facts],
            "open_items": [{"text": item} for item in open_items],
            "reaffirm": reaffirm, "withdraw": withdraw,
            "next_action": {"text": next_action} if next_action is not None else None,
            "evidence": [runs[label] for label in args.get("runs", [])]}
    answer = call.send("createCheckpoint", path={"session_id": session_id}, body=body)
    with call.naming(["The checkpoint was recorded."]):
        checkpoint = field(answer, "checkpoint", dict)
        new = [checked(claim, ("number", "number"), ("kind", CLAIM_KINDS))
               for claim in field(checkpoint, "claims", list)]
        number = field(checkpoint, "number", "number")
    still_open = [n for n, c in claims.items()
                  if c.get("kind") == "open_item" and c.get("state") == "active" and n not in withdraw]
    return {"task_id": task_id, "session_id": session_id, "checkpoint": number,
            "claims": [{"number": c["number"], "kind": c["kind"]} for c in new],
            "reaffirmed": list(reaffirm), "withdrawn": list(withdraw),
            "open_items": len(still_open) + sum(1 for c in new if c["kind"] == "open_item")}


def tool_decide(call, args):
    decision = args["decision"]
    if not fold(decision):
        raise invalid("`decision` must not be empty.")
    rationale = args.get("rationale") if fold(args.get("rationale")) else None
    alternatives = [alt for alt in args.get("alternatives", []) if fold(alt)]
    context = call.context()
    task_id, session_number = call.working_session(context, args.get("session"))
    runs = call.run_ids(args.get("runs", []))
    session_id = call.session_id(context, task_id, session_number)
    capsule = call.capsule(task_id)
    supersedes = args.get("supersedes")
    claims = check_session_and_claims(capsule, session_id, [])
    if supersedes is not None:
        claim = claims.get(supersedes)
        if claim is None or claim.get("kind") != "decision":
            raise Problem("claim_not_found", "`supersedes` takes the number of an active decision.")
        if claim.get("state") != "active":
            raise Problem("claim_not_active", "`supersedes`: c%d." % supersedes)
    answer = call.send("proposeDecision", path={"session_id": session_id}, body={
        "task_id": task_id, "text": decision, "rationale": rationale,
        "alternatives": alternatives, "evidence": [runs[label] for label in args.get("runs", [])],
        "supersedes": supersedes})
    with call.naming(["The decision was recorded."]):
        claim = checked(field(field(answer, "decision", dict), "claim", dict),
                        ("number", "number"), ("decision_state", DECISION_STATES))
    return {"task_id": task_id, "session_id": session_id, "claim": claim["number"],
            "decision_state": claim["decision_state"]}


def tool_end(call, args):
    if "session" in args and "abandoned" in args:
        raise invalid("Pass `session` or `abandoned`, not both.")
    context = call.context()
    own = context.get("session")
    if "abandoned" in args:
        number, outcome = args["abandoned"], "abandoned"
    elif "session" in args:
        if not context.get("task"):
            raise Problem("no_task")
        number, outcome = args["session"], "ended"
    else:
        if not own:
            raise Problem("no_session")
        number, outcome = own["number"], "ended"
    sessions = records(call.send("listSessions", query={"workspace": call.root}), "sessions",
                       SESSION_FIELDS + (("task_id", "id"),))
    known_id = own["id"] if own and own["number"] == number else None
    target = find_record(sessions, number, known_id)
    if target is None or ("session" in args and target.get("task_id") != context["task"]["id"]):
        raise Problem("session_not_found", "`%s` takes a Session number." %
                      ("abandoned" if "abandoned" in args else "session"))
    ended = call.send("endSession", path={"session_id": target["id"]}, body={"outcome": outcome})
    made = ["Session %d was ended." % number]
    with call.naming(made):
        outcome = field(field(ended, "session", dict), "state", SESSION_STATES)
        capsule = call.capsule(target["task_id"])
        parent_id = target.get("parent_session_id")
        parent = find_record(sessions, None, parent_id) if parent_id else None
        if parent is not None and parent.get("state") != "open":
            parent = None
        grandparent = None
        if parent is not None and parent.get("parent_session_id"):
            grandparent = find_record(sessions, None, parent["parent_session_id"])
        parent_task = None
        if parent is not None and parent["task_id"] != target["task_id"]:
            # §6 rule 10: the context never names a Session of another Task.
            parent_task = find_record(records(call.send("listTasks", query={"workspace": call.root}),
                                              "tasks", TASK_FIELDS), None, parent["task_id"])
            if parent_task is None:
                raise Problem("daemon_error", "It did not list the parent Session's Task.")
    open_items = sum(1 for claim in capsule["claims"]
                     if claim.get("kind") == "open_item" and claim.get("state") == "active")

    def change(current, problem):
        if problem is not None or (current.get("session") or {}).get("id") != target["id"]:
            return None    # the context is on another Session: leave it be
        current["session"] = context_session(parent, grandparent) if parent else None
        if parent_task is not None:
            current["task"] = {"id": parent_task["id"], "number": parent_task["number"],
                               "title": parent_task["title"]}
        current["updated_at"] = utc_now()
        return current

    after = call.write_context(change, made)
    if after is not None:
        context_number = (after.get("session") or {}).get("number")
    else:
        context_number = own["number"] if own and own["id"] != target["id"] else None
    return {"task_id": target["task_id"], "session_id": target["id"], "session": number,
            "outcome": outcome, "open_items": open_items,
            "context_session": context_number}


def tool_complete(call, args):
    context = call.context()
    task_id, session_number = call.working_session(context, args.get("session"))
    latest = passed_runs(call.runs(), task_id)
    if not latest:
        raise Problem("no_passed_runs")
    failing = [run["label"] for run in latest if run.get("passed") is not True]
    if failing:
        raise Problem("runs_failing", "Failing: %s." % ", ".join(failing))
    session_id = call.session_id(context, task_id, session_number)
    capsule = call.capsule(task_id)
    check_session_and_claims(capsule, session_id, [])
    recorded = dict((run.get("id"), run) for run in capsule.get("runs") or () if isinstance(run, dict))
    unproven = [run["label"] for run in latest
                if recorded.get(run.get("id"), {}).get("passed") is not True]
    if unproven:
        raise Problem("evidence_invalid", "Not recorded as passed by the daemon: %s." % ", ".join(unproven))
    answer = call.send("transitionTask", path={"task_id": task_id}, body={
        "to": "done", "session_id": session_id, "evidence": [run["id"] for run in latest]})
    with call.naming(["The Task was completed."]):
        number = field(field(answer, "task", dict), "number", "number")
    return {"task_id": task_id, "session_id": session_id, "task": number,
            "status": "done", "evidence": [run["label"] for run in latest]}


def check_session_and_claims(capsule, session_id, numbers):
    """The Session must be open and the claim numbers active; return claims by number."""
    try:
        sessions = dict((s["id"], s) for s in capsule.get("sessions") or ())
        claims = dict((c["number"], c) for c in capsule.get("claims") or ())
    except (KeyError, TypeError):
        raise Problem("daemon_error", "Its Capsule could not be read.")
    session = sessions.get(session_id)
    if session is None:
        raise Problem("session_not_found", "The Session is not one of this Task's.")
    if session.get("state") != "open":
        raise Problem("session_not_open", "Call `begin` to open a new Session.")
    unknown = [n for n in numbers if n not in claims]
    if unknown:
        raise Problem("claim_not_found", "Unknown: %s." % ", ".join("c%d" % n for n in unknown))
    inactive = [n for n in numbers if claims[n].get("state") != "active"]
    if inactive:
        raise Problem("claim_not_active", "Not active: %s." % ", ".join("c%d" % n for n in inactive))
    return claims


def find_record(checked_records, number, record_id=None):
    """The Task or Session with that id, else with that number; None if neither."""
    for record in checked_records:
        if record_id is not None and record["id"] == record_id:
            return record
    if record_id is None:
        for record in checked_records:
            if record["number"] == number:
                return record
    return None


def context_session(session, parent):
    """A Session as context.json holds it."""
    agent = session.get("agent") or {}
    return {"id": session["id"], "number": session["number"],
            "agent": {"name": agent.get("name"), "role": agent.get("role")},
            "parent": {"id": parent["id"], "number": parent["number"]} if parent else None}


def field(record, key, kind):
    """A field of a daemon answer, or daemon_error: its records are not ours to trust.

    `kind` is a type, or "id" (DAEMON_ID: §6 rule 30) or "number" (an integer
    of 1 or more), or a tuple of the strings contract.md §3 allows, or a
    Pattern they match, as it types the records (§6 rule 3): a value a
    result shows as the daemon gave it can never start a line of its own
    there (rule 21).
    """
    value = record.get(key) if isinstance(record, dict) else None
    if kind == "id":
        sound = isinstance(value, str) and DAEMON_ID.match(value) is not None
    elif kind == "number":
        sound = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    elif isinstance(kind, tuple):
        sound = isinstance(value, str) and value in kind
    elif isinstance(kind, Pattern):
        sound = isinstance(value, str) and kind.match(value) is not None
    else:
        sound = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not sound:
        raise Problem("daemon_error", "Its answer lacked a field or gave one of the wrong type.")
    return value


# §6 rule 30: an id is shown and stored as it came, so it must be a plain word.
DAEMON_ID = Pattern(r"[!-~]{1,128}\Z")


def checked(record, *fields):
    """The record, once each (key, kind) of it is as contract.md §3 says."""
    for key, kind in fields:
        field(record, key, kind)
    return record


# contract.md §3's enumerations, for the fields a result shows as they are.
TASK_STATES = ("open", "active", "done")
SESSION_STATES = ("open", "ended", "abandoned")
CLAIM_KINDS = ("fact", "open_item", "decision", "next_action")
DECISION_STATES = ("proposed", "accepted", "rejected")
LEDGER_FAULTS = ("seq_mismatch", "prev_mismatch", "hash_mismatch")
LEDGER_HASH = Pattern(r"[0-9a-fA-F]{64}\Z")
TASK_FIELDS = (("id", "id"), ("number", "number"), ("title", str), ("status", TASK_STATES))
SESSION_FIELDS = (("id", "id"), ("number", "number"), ("agent", dict))
RUN_FIELDS = (("label", str), ("command", str), ("exit_code", int), ("finished_at", str))


def daemon_task(record):
    return checked(record, *TASK_FIELDS)


def records(answer, key, fields):
    """A list of records from a daemon answer, every one checked."""
    return [checked(record, *fields) for record in field(answer, key, list)]


# -- the tool table ----------------------------------------------------------

RESULT_IDS = {"task_id": ID, "session_id": ID}

TOOLS = [
    tool("pack", "Resume a Task from its Pack",
         "Resume a Task: returns its Pack, the digest a fresh session reads first "
         "(the Task, its open Sessions, the ledger head, then the next action, open items, "
         "decisions, facts and test runs), after one opening line. Call it when you start or "
         "resume work. `task` is a number from `tasks` (default: the context's Task); `budget` "
         "caps the Pack in UTF-16 code units (500-60000, default %d); `query` keeps only lines "
         "containing every word of it. A footer counts what was left out or cut; fetch those "
         "claims in full with `claims`." % PACK_BUDGET,
         inputs({"task": NUMBER,
                 "budget": {"type": "integer", "minimum": 500, "maximum": 60000,
                            "default": PACK_BUDGET},
                 "query": {"type": "string", "maxLength": 200},
                 "manifest": {"type": "boolean", "description": "Accepted and ignored."}}),
         None, tool_pack, True, WHOLE_RESULTS),
    tool("claims", "Read claims in full",
         "Give the full, uncut lines of claims by number (c12 in the Pack is number 12), "
         "withdrawn and superseded ones too, with their kind and state. Use it when the Pack "
         "cut a line (it ends in ...) or its footer says claims were left out. `task` defaults "
         "to the context's Task. Numbers the Task lacks are listed in `missing`; lines past "
         "60000 UTF-16 code units in `left_out`.",
         inputs({"numbers": listing(NUMBER, 50, 1), "task": NUMBER}, ["numbers"]),
         outputs(dict(RESULT_IDS, task=INTEGER,
                      claims={"type": "array", "items": outputs({
                          "number": INTEGER, "kind": STRING, "state": STRING, "line": STRING})},
                      missing={"type": "array", "items": INTEGER},
                      left_out={"type": "array", "items": INTEGER})),
         tool_claims, True, WHOLE_RESULTS),
    tool("context", "Show the local context",
         "Show what this server sees on this machine, without asking the daemon: the Workspace "
         "root, the context's Task and Session, the agent name and role it acts as, the Task's "
         "recorded test runs (the labels to cite, newest first), and where the token and data "
         "directory come from. Call it first when another tool reports a configuration or "
         "context problem.",
         inputs({}),
         outputs(dict(RESULT_IDS,
                      workspace=outputs({"root": nullable(STRING), "found_by": STRING,
                                         "marked": BOOLEAN, "problem": nullable(STRING)}),
                      task={"type": ["object", "null"]},
                      session={"type": ["object", "null"]},
                      agent=outputs({"name": STRING, "role": STRING, "name_from": STRING,
                                     "role_from": STRING}),
                      runs={"type": "array", "items": {"type": "object"}},
                      runs_skipped=INTEGER,
                      config=outputs({"config_dir": STRING, "token_from": nullable(STRING),
                                      "token_file_mode": nullable(STRING),
                                      "data_dir": nullable(STRING), "data_dir_from": nullable(STRING),
                                      "daemon_url": nullable(STRING),
                                      "warnings": {"type": "array", "items": STRING}}))),
         tool_context, True),
    tool("tasks", "List the Workspace's Tasks",
         "List the Tasks of this Workspace by number, with status, open items and open Sessions; "
         "`current` marks the context's Task. Use a number from here as `task` in `pack`, "
         "`claims` or `begin`. `status` filters: open, active or done.",
         inputs({"status": TASK_STATUS}),
         outputs(dict(RESULT_IDS, workspace=STRING,
                      tasks={"type": "array", "items": outputs({
                          "number": INTEGER, "title": STRING, "status": STRING,
                          "open_items": INTEGER, "sessions_open": INTEGER, "current": BOOLEAN})})),
         tool_tasks, True),
    tool("ledger_verify", "Verify the ledger's hash chain",
         "Recompute the daemon's hash-chained ledger and say whether it holds: the number of "
         "entries, the head hash (the Pack's Ledger line shows its first 12 digits) and the "
         "first entry that does not hold, if any.",
         inputs({}),
         outputs(dict(RESULT_IDS, ok=BOOLEAN, entries=INTEGER, head=STRING,
                      first_bad={"type": ["object", "null"]})),
         tool_ledger_verify, True),
    tool("begin", "Open a Session on a Task",
         "Open your Session on a Task before you record anything: `task` (a number from `tasks`) "
         "or `new_task` (a title) to start one; with neither, the context's Task. `agent_name` and "
         "`agent_role` say who you are (default: the environment, the context's agent, or this "
         "client's name as implementer); a sub-agent passes its parent's Session number as "
         "`parent_session` (default: the context's Session while it is open). Returns the Task and "
         "the new Session's number: when several agents work side by side in one Workspace, pass "
         "that number as `session` to `checkpoint`, `decide`, `complete` and `end`.",
         inputs({"task": NUMBER, "new_task": text(200), "agent_name": text(200),
                 "agent_role": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,31}$"},
                 "parent_session": NUMBER}),
         outputs(dict(RESULT_IDS,
                      task=outputs({"number": INTEGER, "title": STRING, "status": STRING}),
                      session=outputs({"number": INTEGER, "agent": AGENT,
                                       "parent": nullable(INTEGER)}))),
         tool_begin, False),
    tool("checkpoint", "Record what you learned",
         "Record what you learned in your Session, as you go: `facts` (each with the `runs` labels "
         "that show it, like r4 from `memprove run`), `open_items` still to resolve, `reaffirm` "
         "(claim numbers still true), `withdraw` (claim numbers no longer true, or open items now "
         "resolved), and one `next_action`. `runs` cites labels for the whole checkpoint. Give at "
         "least one of facts, open_items, reaffirm, withdraw or next_action. Pass `session` when "
         "you work beside other agents. Returns the new claim numbers and the open items left.",
         inputs({"facts": listing(inputs({"text": text(2000), "runs": listing(LABEL)}, ["text"])),
                 "open_items": listing(text(2000, 0)), "reaffirm": listing(NUMBER),
                 "withdraw": listing(NUMBER), "next_action": text(2000, 0),
                 "runs": listing(LABEL), "session": NUMBER}),
         outputs(dict(RESULT_IDS, checkpoint=INTEGER,
                      claims={"type": "array", "items": outputs({"number": INTEGER, "kind": STRING})},
                      reaffirmed={"type": "array", "items": INTEGER},
                      withdrawn={"type": "array", "items": INTEGER}, open_items=INTEGER)),
         tool_checkpoint, False),
    tool("decide", "Record a decision",
         "Record a decision you made, with its `rationale`, the `alternatives` you rejected and the "
         "`runs` labels that support it. `supersedes` names an active decision claim it replaces. "
         "Pass `session` when you work beside other agents. Returns the decision's claim number.",
         inputs({"decision": text(2000), "rationale": text(2000, 0),
                 "alternatives": listing(text(2000, 0)), "runs": listing(LABEL),
                 "supersedes": NUMBER, "session": NUMBER}, ["decision"]),
         outputs(dict(RESULT_IDS, claim=INTEGER, decision_state=STRING)),
         tool_decide, False),
    tool("end", "End a Session",
         "End your Session when you stop working; the context goes back to the parent Session if "
         "that is still open. `session` ends another Session of the Task (for an agent working "
         "beside others); `abandoned` closes, as abandoned, a Session a crashed agent left open. "
         "Returns the open items the Task still has.",
         inputs({"session": NUMBER, "abandoned": NUMBER}),
         outputs(dict(RESULT_IDS, session=INTEGER, outcome=STRING, open_items=INTEGER,
                      context_session=nullable(INTEGER))),
         tool_end, False),
    tool("complete", "Complete the Task on passed runs",
         "Mark the context's Task done, proven by its test runs: the latest run of every command "
         "recorded for the Task with `memprove run` must have passed, and the daemon must have "
         "recorded it so. Run the tests in a shell first; if one fails, fix it and run it again. "
         "Pass `session` when you work beside other agents.",
         inputs({"session": NUMBER}),
         outputs(dict(RESULT_IDS, task=INTEGER, status=STRING,
                      evidence={"type": "array", "items": STRING})),
         tool_complete, False),
]
TOOLS_BY_NAME = dict((entry["name"], entry) for entry in TOOLS)


# ---------------------------------------------------------------------------
# 7. The per-call object
# ---------------------------------------------------------------------------
# Built fresh for every tool call: this is where "nothing is kept between
# calls" lives.  The Workspace is found at once (it is cheap and every tool
# needs it); the token, the data directory and the daemon's address only when
# the first daemon request is about to be sent (contract.md §4's order).

class Call:
    def __init__(self, options, client, roots=None, environ=None):
        self.environ = dict(os.environ if environ is None else environ)
        self.config_dir = config_directory(options.get("config_dir"), self.environ)
        self.client = client
        self.warnings = []
        self.workspace = find_workspace(self.environ, options.get("workspace"), roots,
                                        self.warnings)
        self.root = self.workspace.root
        self.token_too_open = False
        self.daemon = None
        self._context = None
        self.most = MAX_TIMEOUT          # seconds a wait may take, whatever MEMPROVE_TIMEOUT says
        self.most_body = MAX_BODY        # bytes of one answer worth reading

    # -- context files ------------------------------------------------------

    def context_or_error(self):
        """(context, None), or ({}, the Problem that makes it unreadable).

        Raises workspace_unusable first: contract.md §4 finds the Workspace's
        problem before the context file's.
        """
        if self.workspace.problem:
            raise Problem(self.workspace.problem)
        if self._context is None:
            # A share-mode refusal is waited out as long as a write would wait.
            self._context = read_context(self.root, time.monotonic() + self.timeout())
        return self._context

    def context(self):
        """The context, or context_unreadable for every tool but context and begin."""
        context, error = self.context_or_error()
        if error:
            raise error
        return context

    def runs(self, shaped=True):
        """The Workspace's runs, read from the file as they are used (see each_run)."""
        return each_run(self.root, shaped)

    def ids(self, context, task_id=ABSENT):
        task, session = context.get("task"), context.get("session")
        if task_id is ABSENT:
            task_id = task["id"] if task else None
        return {"task_id": task_id, "session_id": session["id"] if session else None}

    def agent(self, context, name=None, role=None):
        """The agent a call acts as, each of name and role resolved on its own:
        argument, else environment, else the context's Session, else the
        client's name (role implementer), else agent/implementer."""
        recorded = (context.get("session") or {}).get("agent") or {}
        environ_name = fold(self.environ.get("MEMPROVE_AGENT_NAME"))
        environ_role = self.environ.get("MEMPROVE_AGENT_ROLE") or ""
        recorded_name = fold(recorded.get("name")) if isinstance(recorded.get("name"), str) else ""
        recorded_role = recorded.get("role") if isinstance(recorded.get("role"), str) else ""
        names = ((name, "argument"), (environ_name if len(environ_name) <= 64 else "", "environment"),
                 (recorded_name[:64], "context"), (self.client, "client"), ("agent", "default"))
        roles = ((role, "argument"), (environ_role if ROLE.match(environ_role) else "", "environment"),
                 (recorded_role if ROLE.match(recorded_role) else "", "context"),
                 ("implementer" if self.client else "", "client"), ("implementer", "default"))
        name, name_from = next(pair for pair in names if pair[0])
        role, role_from = next(pair for pair in roles if pair[0])
        return {"name": name, "role": role, "name_from": name_from, "role_from": role_from}

    def working_session(self, context, number):
        """(Task id, Session number) a checkpoint-like call works in; the local checks."""
        task, own = context.get("task"), context.get("session")
        if not task:
            raise Problem("no_task")
        if number is None:
            if not own:
                raise Problem("no_session")
            number = own["number"]
        return task["id"], number

    def session_id(self, context, task_id, number):
        """The id of Session `number` of the Task: the context's, or asked of the daemon."""
        own = context.get("session")
        if own and own["number"] == number:
            return own["id"]
        answer = self.send("listSessions", query={"workspace": self.root, "task_id": task_id})
        found = find_record(records(answer, "sessions", SESSION_FIELDS), number)
        if found is None or found.get("task_id") != task_id:
            raise Problem("session_not_found", "`session` takes a number from `begin`.")
        return found["id"]

    def run_ids(self, labels):
        """Run ids for the labels an agent cites, from runs.jsonl."""
        if not labels:
            return {}
        wanted = set(labels)
        known = dict((run["label"], run.get("id")) for run in self.runs()
                     if run["label"] in wanted and isinstance(run.get("id"), str))
        unknown = sorted(set(label for label in labels if label not in known),
                         key=lambda label: int(label[1:]))
        if unknown:
            raise Problem("run_label_unknown", "Unknown: %s." % ", ".join(unknown))
        return known

    def naming(self, made):
        """While it is open, a Problem's hint also names what the call already made."""
        return NamingWhatWasMade(made)

    def timeout(self):
        return min(timeout_setting(self.environ) or DEFAULT_TIMEOUT, self.most)

    def write_context(self, change, made):
        try:
            return update_context(self.root, change, self.timeout())
        except Exception as error:
            if not isinstance(error, OSError):   # a file system's refusal is no bug of ours
                record_internal_error(sys.exc_info())
            raise Problem("internal_error", " ".join(
                ["The context file could not be written."] + made))

    # -- configuration --------------------------------------------------------

    def config_report(self):
        """What `context` says of the configuration; never the token itself."""
        report = {"config_dir": self.config_dir, "token_from": None, "token_file_mode": None,
                  "data_dir": None, "data_dir_from": None, "daemon_url": None, "warnings": []}
        warnings = report["warnings"]
        warnings.extend(self.warnings)
        source, path = token_source(self.environ, self.config_dir)
        report["token_from"] = source
        if path:
            try:
                self.token_too_open = read_token_file(path, source=source)[1]
                report["token_file_mode"] = "too_open" if self.token_too_open else "ok"
            except Problem:
                warnings.append(source if source != "config" else "token")
                self.token_too_open = token_file_too_open(path)   # whatever it holds
                if self.token_too_open:
                    report["token_file_mode"] = "too_open"
        try:
            data_dir, report["data_dir_from"] = data_directory(self.environ, self.config_dir)
        except Problem as problem:
            data_dir = None
            if problem.hint:             # §6 rule 31: there, but not to be believed
                warnings.append(UNTRUSTED_DATA_DIR)
        if data_dir:
            report["data_dir"] = data_dir
            try:
                report["daemon_url"] = read_daemon(data_dir)[0]
            except Problem as problem:
                if problem.hint:         # §6 rule 19: there, but not to be believed
                    warnings.append(UNTRUSTED_DAEMON)
        if self.environ.get("MEMPROVE_TIMEOUT") and timeout_setting(self.environ) is None:
            warnings.append("MEMPROVE_TIMEOUT")
        if self.environ.get("MEMPROVE_PARENT_SESSION") and parent_setting(self.environ) is None:
            warnings.append("MEMPROVE_PARENT_SESSION")
        role = self.environ.get("MEMPROVE_AGENT_ROLE")
        if role and not ROLE.match(role):
            warnings.append("MEMPROVE_AGENT_ROLE")
        name = self.environ.get("MEMPROVE_AGENT_NAME")
        if name and not fold(name) or len(fold(name)) > 64:
            warnings.append("MEMPROVE_AGENT_NAME")
        return report

    # -- the daemon ---------------------------------------------------------

    def send(self, operation, path=None, query=None, body=None):
        if self.daemon is None:
            try:
                token, self.token_too_open = read_token(self.environ, self.config_dir)
            except Problem:
                # §6 rule 11: a too-open file is reported whatever it holds.
                self.token_too_open = token_file_too_open(
                    token_source(self.environ, self.config_dir)[1])
                raise
            data_dir = data_directory(self.environ, self.config_dir)[0]
            self.daemon = DaemonClient(*read_daemon(data_dir), token=token,
                                       timeout=self.timeout(), most_body=self.most_body)
        return self.daemon.send(operation, path, query, body)

    def task_id(self, number, context):
        """The id of Task `number` of this Workspace, or of the context's Task."""
        if number is None:
            task = context.get("task")
            if not task:
                raise Problem("no_task")
            return task["id"]
        answer = self.send("listTasks", query={"workspace": self.root})
        found = find_record(records(answer, "tasks", TASK_FIELDS), number)
        if found is None:
            raise Problem("task_not_found", "`task` takes a number from `tasks`.")
        return found["id"]

    def capsule(self, task_id):
        """The Task's Capsule, its parts checked once for every tool that reads it."""
        answer = self.send("getTaskCapsule", path={"task_id": task_id})
        capsule = field(answer, "capsule", dict)
        try:
            daemon_task(field(capsule, "task", dict))
            for key in ("sessions", "claims", "runs"):
                if not all(isinstance(item, dict) for item in field(capsule, key, list)):
                    raise Problem("daemon_error")
            for claim in capsule["claims"]:
                field(claim, "number", "number")
            for session in capsule["sessions"]:
                checked(session, *SESSION_FIELDS)
            for run in capsule["runs"]:
                # §6 rule 21: an exit code of text could write a line of its own into the Pack.
                checked(run, *RUN_FIELDS)
        except Problem:
            raise Problem("daemon_error", "Its Capsule could not be read.")
        return capsule


ROLE = Pattern(r"[a-z][a-z0-9-]{0,31}\Z")


class NamingWhatWasMade:
    def __init__(self, made):
        self.made = made

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is None or not self.made or not isinstance(error, Exception):
            return False
        if not isinstance(error, Problem):
            # contract.md §6 rule 1: after a write, never a bare internal_error.
            record_internal_error((kind, error, traceback))
            raise Problem("internal_error", " ".join(self.made))
        error.hint = " ".join(([error.hint] if error.hint else []) + self.made)
        return False


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---------------------------------------------------------------------------
# 8. Configuration and Workspace
# ---------------------------------------------------------------------------
# contract.md §1: the first source that is set wins, and a set source that
# cannot be used is an error, never a reason to try the next one.

def config_directory(option, environ, with_source=False, platform=PLATFORM):
    """The configuration directory; with_source: (directory, where it came from)."""
    if option:
        chosen, source = option, "--config-dir"
    elif environ.get("MEMPROVE_CONFIG_DIR"):
        chosen, source = environ["MEMPROVE_CONFIG_DIR"], "MEMPROVE_CONFIG_DIR"
    elif environ.get("XDG_CONFIG_HOME"):
        chosen, source = os.path.join(environ["XDG_CONFIG_HOME"], "memprove"), "XDG_CONFIG_HOME"
    elif PLATFORMS[platform]["config_base"] == "appdata" and environ.get("APPDATA"):
        chosen, source = os.path.join(environ["APPDATA"], "memprove"), "APPDATA"
    else:
        chosen, source = os.path.join(os.path.expanduser("~"), ".config", "memprove"), "default"
    directory = os.path.abspath(os.path.expanduser(chosen))
    return (directory, source) if with_source else directory


def token_source(environ, config_dir):
    """(source name, file to read or None) of the token, without reading it."""
    if environ.get("MEMPROVE_TOKEN"):
        return "MEMPROVE_TOKEN", None
    if environ.get("MEMPROVE_TOKEN_FILE"):
        return "MEMPROVE_TOKEN_FILE", os.path.expanduser(environ["MEMPROVE_TOKEN_FILE"])
    path = os.path.join(config_dir, "token")
    if os.path.lexists(path):
        return "config", path
    return None, None


def read_token(environ, config_dir, platform=PLATFORM):
    """Return (token, file_too_open).  Raises token_missing or token_malformed."""
    source, path = token_source(environ, config_dir)
    if source is None:
        raise Problem("token_missing")
    if path is None:
        token, too_open = environ["MEMPROVE_TOKEN"].strip(), False
    else:
        token, too_open = read_token_file(path, platform, source)
    if not token:
        raise Problem("token_missing")
    if not all("!" <= char <= "~" for char in token):
        # Never let it near a header, where an exception would repeat it.
        raise Problem("token_malformed")
    return token, too_open


def token_file_too_open(path, platform=PLATFORM):
    """Whether a token file grants group or others any access; read or not,
    valid or not, that is worth a warning (contract.md §6 rule 11)."""
    if path is None or not PLATFORMS[platform]["posix_files"]:
        return False
    try:
        return bool(os.stat(path).st_mode & 0o077)
    except OSError:
        return False


TOKEN_UNREADABLE = "The token file cannot be read."
TOKEN_EMPTY = "The token file is empty."


def read_token_file(path, platform=PLATFORM, source="config"):
    try:
        data, status = read_believed(path, source, platform)
    except Distrusted as doubt:
        raise Problem("token_missing", doubt.sentence)
    except (OSError, ValueError):
        raise Problem("token_missing", TOKEN_UNREADABLE)
    token = user_text(data).split("\n", 1)[0].strip()
    if not token:
        raise Problem("token_missing", TOKEN_EMPTY)
    return token, PLATFORMS[platform]["posix_files"] and bool(status.st_mode & 0o077)


def user_text(data, errors="replace"):
    """The text of a small file a person wrote, whatever wrote it: UTF-8 with or
    without a byte order mark, or UTF-16 with one (what PowerShell 5.1's `>`
    and Out-File write).  Lines may end in CR LF: callers strip each line."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors)          # the mark says which order
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    return data.decode("utf-8", errors)


def data_directory(environ, config_dir):
    """Return (data dir, source name).  Raises data_dir_missing."""
    if environ.get("MEMPROVE_DATA_DIR"):
        return os.path.abspath(os.path.expanduser(environ["MEMPROVE_DATA_DIR"])), "MEMPROVE_DATA_DIR"
    try:
        data = read_believed(os.path.join(config_dir, "data-dir"), "config")[0]
        line = user_text(data).strip().split("\n")[0].strip()
    except Distrusted as doubt:
        raise Problem("data_dir_missing", doubt.sentence)
    except (OSError, ValueError):
        raise Problem("data_dir_missing")
    if not line:
        raise Problem("data_dir_missing")
    return os.path.abspath(os.path.join(config_dir, os.path.expanduser(line))), "config"


# §6 rule 31: the token file and data-dir choose where the token goes, so
# they are judged as daemon.json is (rule 19), by who can write them, and
# every folder above them too.  What a sentence calls each, by the token's
# or the data directory's source: (its folder, the file).
BELIEVED_NAMES = {
    "config": ("the configuration directory", "the file %s in the configuration directory"),
    "MEMPROVE_TOKEN_FILE": ("the folder of the file MEMPROVE_TOKEN_FILE names",
                            "the file MEMPROVE_TOKEN_FILE names"),
}
ABOVE = "the folder %s above %s"


def read_believed(path, source, platform=PLATFORM, limit=65536):
    """(up to `limit` bytes, status) of the token file or data-dir at `path`
    (`source`: a key of BELIEVED_NAMES), or Distrusted when someone besides
    the user and root could have written it (§6 rule 31): the file, its
    folder and every folder above belong to the user or root and no other
    can write them; a folder above that is root's and sticky (/tmp) is
    passed, since no one else may rename what is in it and what they make
    there is theirs.  Links are judged as reach_folder judges them and
    followed, the folder a link leads to then named by its path; a missing
    file is FileNotFoundError."""
    if not PLATFORMS[platform]["posix_files"]:
        return read_regular(path, limit)
    import stat
    path = os.path.abspath(path)          # reach_folder walks from the root
    folder_name, file_name = BELIEVED_NAMES[source]
    file_name = file_name % os.path.basename(path) if "%s" in file_name else file_name
    for _ in range(MAX_LINKS):
        folder, name = os.path.split(path)
        real, descriptor, passed = reach_folder(folder, folder_name)
        try:
            judge_folders(passed, folder_name, platform)
            held = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
            if stat.S_ISLNK(held.st_mode):
                if changed_by_others(held, platform, mode=False):
                    raise Distrusted(LINK_OWNER % (shown_path(os.path.join(real, name)),
                                                   file_name, held.st_uid))
                path = os.path.join(real, os.readlink(name, dir_fd=descriptor))
                folder_name = "the folder %s" % shown_path(os.path.dirname(path))
                continue
            handle, status = open_regular(name, follow=False, dir_fd=descriptor)
        finally:
            os.close(descriptor)
        with handle:
            judge(status, file_name, os.path.join(real, name), platform)
            return handle.read(limit), status
    raise OSError("too many links")


def judge_folders(passed, name, platform=PLATFORM):
    """Distrusted when the folders `passed` on the way to `name` (reach_folder's,
    the folder itself last) are not to be believed."""
    import stat
    for index, (place, status) in enumerate(passed):
        if index == len(passed) - 1:
            judge(status, name, place, platform)
            return
        sticky = status.st_mode & stat.S_ISVTX and status.st_uid == 0
        judge(status, ABOVE % (shown_path(place), name), place, platform, mode=not sticky)


def judge(status, name, path, platform=PLATFORM, mode=True):
    """Distrusted when a file or folder called `name`, at `path`, is not to be
    believed; a chmod by the user fixes it when the user owns it."""
    why = changed_by_others(status, platform, mode=mode)
    if why:
        # The user's own file fails on its mode alone: a chmod of theirs fixes it.
        raise Distrusted(sentence("%s %s." % (name, why)), path, status.st_uid == os.geteuid())


def sentence(text):
    return text[:1].upper() + text[1:]


def config_dir_doubt(config_dir, names=("token", "data-dir"), platform=PLATFORM):
    """Distrusted for the configuration directory, or for one of the files
    `names` in it (those a call would read), when it is not believed (§6
    rule 31); None when all is well or nothing is there to judge."""
    if not PLATFORMS[platform]["posix_files"]:
        return None
    folder_name = BELIEVED_NAMES["config"][0]
    try:
        real, descriptor, passed = reach_folder(config_dir, folder_name)
        os.close(descriptor)
        judge_folders(passed, folder_name, platform)
        for name in names:
            try:
                read_believed(os.path.join(config_dir, name), "config", platform, 0)
            except Distrusted:
                raise
            except (OSError, ValueError):
                pass                     # missing or unreadable: its own check says so
    except Distrusted as doubt:
        return doubt
    except OSError:
        pass                             # not there: the check says so itself
    return None


def read_daemon(data_dir, platform=PLATFORM):
    """(the daemon's URL, the uid its listener must belong to, whether that
    owner must be confirmed): the token goes only to a daemon whose
    daemon.json the user can trust (contract.md §6 rules 17 and 19)."""
    try:
        if PLATFORMS[platform]["posix_files"]:
            real, directory, data, status = read_daemon_file(data_dir)
        else:
            real, directory = data_dir, os.stat(data_dir)
            data, status = read_regular(os.path.join(data_dir, "daemon.json"), 65536)
    except (OSError, ValueError):
        raise Problem("daemon_unavailable")
    doubt, confirm = daemon_file_doubt(directory, status, platform)
    if confirm and not private_folder(os.path.dirname(real), directory.st_uid):
        # A folder anyone can write (/tmp) is where an attacker's data directory, theirs
        # like a service account's, would be made: one of those is kept where no one
        # else could have made it (/var/lib...).
        doubt, confirm = DIRECTORY_OWNER % directory.st_uid, False
    if doubt:
        raise Problem("daemon_unavailable", doubt)
    try:
        record = load_json(user_text(data, "strict"))
    except (ValueError, RecursionError):
        raise Problem("daemon_unavailable")
    if not isinstance(record, dict) or not isinstance(record.get("url"), str):
        raise Problem("daemon_unavailable")
    return record["url"], status.st_uid, confirm


MAX_LINKS = 40                       # links followed on one path, as the kernel's ELOOP


class Distrusted(Exception):
    """A file that whoever could write chose, not the user: its sentence says
    which and why (a Problem's hint, never a value read from it); `path` is
    what is at fault, and `chmod` whether the user, its owner, fixes it by
    taking away group's and others' write."""

    def __init__(self, sentence, path=None, chmod=False):
        Exception.__init__(self, sentence)
        self.sentence, self.path, self.chmod = sentence, path, chmod


def reach_folder(path, what):
    """(the folder's path without links, a descriptor open on it, the
    [(path, status)] of every folder passed on the way, itself last), on a
    POSIX system.

    The path is walked one folder at a time from the root without following
    links, each link judged where it is met (§6 rules 19 and 31): a link
    another user owns, or one in a folder others can write, is a place
    someone else chose (Distrusted, naming the link and `what` it leads to).
    A file opened relative to the descriptor is then the one judged, whatever
    is swapped on the way after the judging.
    """
    import stat
    folder_flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NO_FOLLOW
    real, pending, links = os.sep, [part for part in path.split(os.sep)], 0
    descriptor = os.open(os.sep, folder_flags)
    passed = [(real, os.fstat(descriptor))]
    try:
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                real = os.path.dirname(real)
                os.close(descriptor)
                descriptor = os.open(real, folder_flags)
                passed.append((real, os.fstat(descriptor)))
                continue
            held = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
            if stat.S_ISLNK(held.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise OSError("too many links")
                if changed_by_others(held, mode=False):
                    raise Distrusted(LINK_OWNER % (
                        shown_path(os.path.join(real, name)), what, held.st_uid),
                        os.path.join(real, name))
                if others_can_write(os.fstat(descriptor)):
                    raise Distrusted(LINK_FOLDER % (shown_path(os.path.join(real, name)), what),
                                     os.path.join(real, name))
                target = os.readlink(name, dir_fd=descriptor)
                if target.startswith(os.sep):
                    real = os.sep
                    os.close(descriptor)
                    descriptor = os.open(os.sep, folder_flags)
                pending[:0] = target.split(os.sep)
                continue
            inner = os.open(name, folder_flags, dir_fd=descriptor)
            os.close(descriptor)
            descriptor, real = inner, os.path.join(real, name)
            passed.append((real, os.fstat(descriptor)))
    except BaseException:
        os.close(descriptor)
        raise
    return real, descriptor, passed


def read_daemon_file(data_dir):
    """(the data directory's path without links, its status, up to 64 KiB of
    its daemon.json, that file's status), on a POSIX system: §6 rule 19
    through links (reach_folder), daemon.json opened relative to the folder
    reached."""
    try:
        real, descriptor, passed = reach_folder(data_dir, "the data directory")
    except Distrusted as doubt:
        raise Problem("daemon_unavailable", doubt.sentence)
    try:
        handle, status = open_regular("daemon.json", follow=False, dir_fd=descriptor)
    finally:
        os.close(descriptor)
    with handle:
        return real, passed[-1][1], handle.read(65536), status


def daemon_file_doubt(directory, status, platform=PLATFORM):
    """(why daemon.json is not believed, or None; whether its owner must be
    confirmed as the listener's).  SSH's StrictModes for daemon.json (§6 rule
    19): whoever can write it chooses where the token goes, so it and the data
    directory holding it must be the user's or root's, or both one other
    user's (a daemon's service account, believed only where that user is seen
    to listen, and, by read_daemon, only in a folder no one else can write),
    and neither writable by group or others."""
    if not PLATFORMS[platform]["posix_files"]:
        return None, False
    service = directory.st_uid == status.st_uid and not owned_by_user(directory, platform)
    if service and not PLATFORMS[platform]["socket_tables"]:
        return DIRECTORY_OWNER % directory.st_uid, False   # no way to see who listens
    owners = (directory.st_uid,) if service else ()
    for name, held in (("The data directory", directory), ("The file daemon.json", status)):
        why = changed_by_others(held, platform, owners)
        if why:
            return "%s %s." % (name, why), False
    return None, service


def private_folder(path, owner):
    """Whether `path` and every folder above it belong to the user, root or
    `owner`, and none can be written by group or others (as SSH asks of the
    folders above authorized_keys)."""
    while True:
        try:
            status = os.stat(path)
        except OSError:
            return False
        if changed_by_others(status, owners=(owner,)):
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def changed_by_others(status, platform=PLATFORM, owners=(), mode=True):
    """What lets someone besides the user and root (and `owners`) change a
    file, said as the rest of a sentence whose subject is the file ("belongs
    to another user (uid N)", "can be written by group or others (mode
    NNNN)"), or None.  The one judge of owner and mode for §6 rules 15, 19, 25,
    31 and 35 (`mode`=False: the owner alone, for a link, whose mode means
    nothing); the archive's entry and its bytecode cache, which run before
    this module is loaded, keep their own (stricter) test."""
    if not PLATFORMS[platform]["posix_files"]:
        return None
    if status.st_uid not in (os.geteuid(), 0) + tuple(owners):
        return OWNER_PHRASE % status.st_uid
    if mode and others_can_write(status, platform):
        return MODE_PHRASE % (status.st_mode & 0o7777)
    return None


OWNER_PHRASE = "belongs to another user (uid %d)"
MODE_PHRASE = "can be written by group or others (mode %04o)"


def others_can_write(status, platform=PLATFORM):
    """Whether anyone but the file's owner (and root) can write it: others
    can, or a group that is not the user's own private group (§6 rule 36)."""
    if not PLATFORMS[platform]["posix_files"]:
        return False
    if status.st_mode & 0o002:
        return True
    return bool(status.st_mode & 0o020) and not private_group(status.st_gid)


def private_group(gid):
    """Whether `gid` is the user's own private group (Debian's and Ubuntu's
    umask 002 makes every folder of such a user 0775): the user's primary
    group, named as the user, whose member lists name no one but the user,
    and no other account's primary group.  Debian's OpenSSH lists every
    account for the last part, and so must this: a group several users share
    as their primary group (`users`, as openSUSE gives everyone) lists no
    member at all."""
    try:
        import grp
        import pwd
        user = pwd.getpwuid(os.geteuid())
        if user.pw_gid != gid or grp.getgrgid(gid).gr_name != user.pw_name:
            return False
        if any(entry.gr_gid == gid and set(entry.gr_mem) - {user.pw_name}
               for entry in grp.getgrall()):
            return False
        return not any(entry.pw_gid == gid and entry.pw_uid != user.pw_uid
                       for entry in pwd.getpwall())
    except (ImportError, KeyError, OSError):
        return False


UNTRUSTED_DAEMON = "daemon.json not trusted"     # context's config.warnings
UNTRUSTED_DATA_DIR = "data-dir not trusted"
DIRECTORY_OWNER = "The data directory " + OWNER_PHRASE + "."
LINK_OWNER = "The link %s on the way to %s " + OWNER_PHRASE + "."
LINK_FOLDER = "The link %s on the way to %s is in a folder group or others can write."


MAX_TIMEOUT = 86400.0                # contract.md §6 rule 7: a day at most


def timeout_setting(environ):
    """MEMPROVE_TIMEOUT in seconds, or None when unset or out of bounds."""
    raw = environ.get("MEMPROVE_TIMEOUT")
    if not raw or not ascii_only(raw) or "_" in raw:
        return None                      # float() would also read "1_0" and full-width digits
    try:
        seconds = float(raw)
    except ValueError:
        return None
    if 0 < seconds <= MAX_TIMEOUT:
        return seconds
    return None


def parent_setting(environ):
    """MEMPROVE_PARENT_SESSION as a Session number, or None when unset or unusable."""
    raw = environ.get("MEMPROVE_PARENT_SESSION") or ""
    if DIGITS.match(raw) and len(raw) <= 18 and int(raw) >= 1:
        return int(raw)
    return None


class Workspace:
    """Where a call works: the root, the source of its start directory,
    whether a `.memprove/` marks it, and `workspace_unusable` or None."""

    def __init__(self, root, found_by, marked=False, problem=None):
        self.root, self.found_by, self.marked, self.problem = root, found_by, marked, problem

    def __repr__(self):
        return "Workspace(%r, %r, %r, %r)" % (self.root, self.found_by, self.marked, self.problem)


def workspace_start(option, environ, roots=None, warnings=None):
    """(start directory or None, its source) in contract.md §2's order.

    A `--workspace` or MEMPROVE_WORKSPACE still holding `${` is a variable
    the client did not expand: it can never be meant, so the next source is
    used and `warnings` says so.  `roots` is the start directory the client's
    roots gave (the legacy era only), or None.
    """
    for value, source in ((option, "--workspace"),
                          (environ.get("MEMPROVE_WORKSPACE"), "MEMPROVE_WORKSPACE")):
        if value and "${" in value:
            if warnings is not None:
                warnings.append(source + " not expanded")
        elif value:
            return value, source
    if environ.get("CLAUDE_PROJECT_DIR"):
        return environ["CLAUDE_PROJECT_DIR"], "CLAUDE_PROJECT_DIR"
    if roots:
        return roots, "roots"
    return working_directory(), "working directory"


def working_directory():
    """The working directory, or None when it was deleted under us."""
    try:
        return os.getcwd()
    except OSError:
        return None


def find_workspace(environ, option=None, roots=None, warnings=None):
    """The Workspace per contract.md §2; never raises."""
    start, found_by = workspace_start(option, environ, roots, warnings)
    try:
        start = os.path.abspath(os.path.expanduser(start))
        usable = os.path.isdir(start)
        if usable:
            start = os.path.realpath(start)
    except (OSError, TypeError, ValueError):  # a relative start with no working directory
        return Workspace(None, found_by, problem="workspace_unusable")
    if not usable:
        # Shown as given: resolving what does not exist costs a look per
        # component (§6 rule 24), and the user knows the path they wrote.
        return Workspace(start, found_by, problem="workspace_unusable")
    root, marked = climb_to_root(start, warnings)
    if not utf8_path(root):
        # It could not be sent to the daemon as the same string in a query and a body.
        return Workspace(root, found_by, marked, "workspace_unusable")
    return Workspace(root, found_by, marked)


def climb_to_root(start, warnings=None):
    """(root, marked): the nearest directory holding `.memprove/`, the climb
    stopping after a repository's root and below the home directory.  A
    `.memprove/` owned by neither the user nor root is passed over, as git
    passes over another user's repository (§6 rule 15): in a shared directory
    it would make another user's folder the Workspace."""
    off_limits = set(path_and_parents(os.path.realpath(os.path.expanduser("~"))))
    repository = None
    place = start
    while True:
        owned = marker_owned(os.path.join(place, ".memprove"))
        if owned:
            return place, True
        if owned is False and warnings is not None and FOREIGN_MARKER not in warnings:
            warnings.append(FOREIGN_MARKER)
        if os.path.exists(os.path.join(place, ".git")):
            repository = place
            break
        parent = os.path.dirname(place)
        if parent == place or parent in off_limits:
            break
        place = parent
    return repository or start, False


FOREIGN_MARKER = ".memprove owned by another user"


def marker_owned(path):
    """True for a `.memprove/` directory of the user's (or root's), False for
    another user's, None when there is no directory there.

    Judged by lstat (§6 rule 22): another user's link to a directory of
    root's (`.memprove -> /etc`) is theirs, not root's.  A link of the user's
    own to a directory still marks the Workspace, where it is refused as a
    link (rule 14)."""
    import stat
    try:
        status = os.lstat(path)
        if is_link(status) and owned_by_user(status):
            status = os.stat(path)
    except (OSError, ValueError):
        return None
    if is_link(status):
        return False
    if not stat.S_ISDIR(status.st_mode):
        return None
    return owned_by_user(status)


def owned_by_user(status, platform=PLATFORM):
    """Whether a file is the user's or root's, where POSIX owners mean something."""
    return changed_by_others(status, platform, mode=False) is None


def utf8_path(path):
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:           # bytes the file system decoding could not read
        return False
    return True


# ---------------------------------------------------------------------------
# 9. Context files
# ---------------------------------------------------------------------------
# Nothing in `.memprove/` is trusted: a link, a file where a directory
# belongs, another Workspace's context (a copied project, a clone) or a
# repository's enormous runs file must neither redirect a write nor stall a
# call (contract.md §6 rules 6, 14 and 16).  Writes hold the lock, retry
# while Windows refuses to replace a file another process has open, and give
# up at the call's timeout.

def open_regular(path, follow=True, dir_fd=None):
    """(binary file, its status) when `path` (in the folder `dir_fd` is open
    on, if given) is a regular file.  Raises OSError for anything else: a
    FIFO or a device where a file belongs must not block or flood a call, and
    with follow=False neither may a link redirect it."""
    import stat
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    descriptor = os.open(path, flags if follow else flags | NO_FOLLOW, dir_fd=dir_fd)
    handle = os.fdopen(descriptor, "rb")
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise IsADirectoryError(path) if stat.S_ISDIR(status.st_mode) else OSError(path)
    except BaseException:
        handle.close()
        raise
    return handle, status


def read_regular(path, limit, follow=True):
    """(up to `limit` bytes, status) of a regular file; see open_regular."""
    handle, status = open_regular(path, follow)
    with handle:
        return handle.read(limit), status


def is_link(status):
    """A symbolic link, or on Windows a reparse point that names another path
    (a symbolic link, a junction: the tag's name-surrogate bit).  A OneDrive
    placeholder or a deduplicated file is a reparse point too, but the file
    itself: a project under OneDrive must not read as linked.  Where the tag
    is not reported (Windows Python 3.6 and 3.7), every reparse point is."""
    import stat
    if stat.S_ISLNK(status.st_mode):
        return True
    if not getattr(status, "st_file_attributes", 0) & 0x400:     # FILE_ATTRIBUTE_REPARSE_POINT
        return False
    tag = getattr(status, "st_reparse_tag", None)
    return tag is None or bool(tag & 0x20000000)                  # IsReparseTagNameSurrogate


def read_context(root, deadline=None):
    """Return (context, None): an empty context when the file is missing; or
    ({}, Problem) when it cannot be used: context_unreadable when it is not a
    version-1 context (with a hint when a link or a wrong file type in
    `.memprove/` is the reason), context_foreign when it names another
    Workspace's root.  Where another process has the file open, the read is
    tried again until `deadline` (a writer's, under the lock: a refusal that
    outlasts a reader's short wait must not make `begin` move a sound file
    aside; a call's, as long as its writes would wait) or for SHARED_READ_WAIT
    seconds (doctor, which promises an answer in time)."""
    import stat
    unsafe = unsafe_context_directory(root)
    if unsafe:
        return {}, Problem("context_unreadable", unsafe)
    path = os.path.join(root, ".memprove", "context.json")
    try:
        status = os.lstat(path)
        if is_link(status):
            # §6 rule 14: a link can make two Workspaces share one context.
            return {}, Problem("context_unreadable", "The file context.json is a link.")
        if not stat.S_ISREG(status.st_mode):
            # Refused now: Windows' refusal to open a directory would be waited out.
            return {}, Problem("context_unreadable")
        data = while_shared(lambda: read_regular(path, MAX_CONTEXT_FILE + 1, follow=False)[0],
                            deadline or time.monotonic() + SHARED_READ_WAIT)
    except FileNotFoundError:
        return {"version": 1, "task": None, "session": None}, None
    except (OSError, ValueError):
        return {}, Problem("context_unreadable")
    try:
        if len(data) > MAX_CONTEXT_FILE:
            raise ValueError("too large")
        context = load_json(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return {}, Problem("context_unreadable")
    if not context_is_sound(context):
        return {}, Problem("context_unreadable")
    if not names_workspace(context, root):
        return {}, Problem("context_foreign")
    return context, None


def unsafe_context_directory(root):
    """A hint naming what in `.memprove/` a write would follow or fail on, or None.

    contract.md §6 rules 6, 14 and 15: a link there could make a write create
    a file outside the Workspace, or make two Workspaces share one context,
    and another user's `.memprove/` where the Workspace's would be (the walk
    up passed over it, and the Workspace came to be its folder) is theirs to
    write, not ours; so it is found with the context file, before any daemon
    request, rather than when the write comes.  (A context.json of the wrong
    type is no danger to a write, which renames over it; read_context refuses
    a linked one.)
    """
    import stat
    directory = os.path.join(root, ".memprove")
    for path, name, wanted in ((directory, ".memprove", stat.S_ISDIR),
                               (os.path.join(directory, "context.lock"), "context.lock",
                                stat.S_ISREG)):
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError:
            return "The file %s cannot be examined." % name
        if is_link(status):
            return "The file %s is a link." % name
        if not wanted(status.st_mode):
            return "The file %s is not a %s." % (
                name, "directory" if name == ".memprove" else "regular file")
        if name == ".memprove" and not owned_by_user(status):
            return FOREIGN_DIRECTORY
    return None


FOREIGN_DIRECTORY = "The folder .memprove belongs to another user."


def context_is_sound(context):
    """A version-1 context whose records have the shapes the tools rely on."""
    if not isinstance(context, dict) or context.get("version") != 1 or \
            isinstance(context.get("version"), bool):
        return False
    task, session = context.get("task"), context.get("session")
    if not all(record is None or is_record(record) for record in (task, session)):
        return False
    if session is not None:
        parent, agent = session.get("parent"), session.get("agent")
        if parent is not None and not is_record(parent):
            return False
        if agent is not None and not isinstance(agent, dict):
            return False
    return True


def names_workspace(context, root):
    """Whether a context belongs to the Workspace at `root` (§6 rules 14 and
    20).  Only a context that records this very root is this Workspace's: one
    that records none may have come with a clone, and would make its agent
    name and runs this Workspace's."""
    workspace = context.get("workspace")
    recorded = workspace.get("root") if isinstance(workspace, dict) else None
    return isinstance(recorded, str) and os.path.normcase(recorded) == os.path.normcase(root)


def is_record(record):
    """A Task or Session reference: a string id and a whole number."""
    return isinstance(record, dict) and isinstance(record.get("id"), str) and \
        isinstance(record.get("number"), int) and not isinstance(record.get("number"), bool)


MAX_RUN_LINE = 64 * 1024             # bytes of one runs.jsonl line worth parsing
LABEL_KEY = b'"label"'


def shown_run(run):
    """Whether a line of runs.jsonl has the one shape every tool takes (§6
    rules 20 and 27): a file from a repository chooses every field, so only a
    label, exit code, command and end time of the shapes `memprove run`
    writes are read, shown or named in an error, with an id of text."""
    label, exit_code = run.get("label"), run.get("exit_code")
    return isinstance(label, str) and RUN_LABEL.match(label) is not None and \
        isinstance(exit_code, int) and \
        not isinstance(exit_code, bool) and isinstance(run.get("command"), str) and \
        isinstance(run.get("finished_at"), str) and isinstance(run.get("id", ""), str)


RUN_LABEL = Pattern(r"r[0-9]+\Z")


def each_run(root, shaped=True):
    """The runs `memprove run` recorded, in file order, one at a time: with
    `shaped`, those of the one shape (shown_run); else every JSON object (for
    `context`, which counts the rest, §6 rule 20).

    contract.md §6 rule 16: the file is a repository's to make as large as it
    likes, so it is read in chunks, holding at most one line; a line over
    MAX_RUN_LINE is skipped unread; only lines holding a "label" key are
    parsed, so blank and foreign lines cost a byte search, and a line that is
    not JSON is refused without the json package's explanation.
    """
    try:
        handle, _ = open_regular(os.path.join(root, ".memprove", "runs.jsonl"))
    except (OSError, ValueError):
        return
    with handle:
        lines = labelled_lines(handle)
        while True:
            try:
                line = next(lines)
            except (StopIteration, OSError):   # a read that fails ends the file, as a failed open
                return
            try:
                run = load_json(line.decode("utf-8"), quick=True)
            except (ValueError, RecursionError):
                continue                 # a torn line, or one that is no run
            if isinstance(run, dict) and (not shaped or shown_run(run)):
                yield run


def labelled_lines(handle, chunk_size=1 << 20):
    """The lines of a file that hold LABEL_KEY, each of at most MAX_RUN_LINE
    bytes, read `chunk_size` bytes at a time."""
    partial, skipping = b"", False     # a line the last chunk cut; inside a long one
    while True:
        chunk = handle.read(chunk_size)
        if not chunk:
            break
        if skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            chunk, skipping = chunk[newline + 1:], False
        block = partial + chunk
        last = block.rfind(b"\n")
        partial = block[last + 1:]
        if len(partial) > MAX_RUN_LINE:
            partial, skipping = b"", True
        for line in lines_holding(block, last + 1, LABEL_KEY):
            yield line
    if not skipping:
        for line in lines_holding(partial + b"\n", len(partial) + 1, LABEL_KEY):
            yield line


def lines_holding(block, end, needle):
    """The whole lines of block[:end] (which ends a line) that hold `needle`,
    found by byte search so that a line without it is never looked at whole."""
    found = block.find(needle, 0, end)
    while found >= 0:
        start = block.rfind(b"\n", 0, found) + 1
        stop = block.find(b"\n", found, end)
        if stop - start <= MAX_RUN_LINE:
            yield block[start:stop]
        found = block.find(needle, stop, end)


def passed_runs(runs, task_id):
    """contract.md §2: the latest run of each command recorded for the Task.

    Returns those runs in file order; "latest" is by finished_at, then by
    place in the file, and commands are compared with white space folded.
    """
    latest = {}
    for index, run in enumerate(runs):
        if run.get("task_id") != task_id:
            continue
        command = fold(run.get("command"))
        rank = (str(run.get("finished_at") or ""), index)
        if command not in latest or rank >= latest[command][0]:
            latest[command] = (rank, run)
    return [run for _, run in sorted(latest.values(), key=lambda pair: pair[0][1])]


def update_context(root, change, timeout=DEFAULT_TIMEOUT):
    """Apply change(context, problem) to context.json under the lock; return
    what change returned.

    The lock is held while the file is read again, changed and replaced, so
    no change is applied to a stale copy and keys it does not touch survive;
    the replace is atomic, so a reader never sees a torn file.  `change` gets
    what read_context gives (a context and None, or {} and the Problem that
    makes the file unusable) and returns the new context, or None to leave
    the file as it is.  Waiting for the lock and for Windows to let the file
    be replaced ends `timeout` seconds from now, with an OSError.
    """
    deadline = time.monotonic() + timeout
    directory = os.path.join(root, ".memprove")
    make_context_directory(directory)
    refuse_unsafe(root)                  # before context.lock is made in it
    lock_path = os.path.join(directory, "context.lock")
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | NO_FOLLOW | getattr(os, "O_BINARY", 0),
                         0o666)
    with os.fdopen(descriptor, "r+b") as lock:
        lock_exclusively(lock, deadline)
        try:
            refuse_unsafe(root)          # again: it may have changed while we waited
            remove_stale_temporaries(directory)
            replacement = change(*read_context(root, deadline))
            if replacement is not None:
                # ASCII JSON: a lone surrogate an agent sent is written as its \\u escape.
                import json
                replace_file(os.path.join(directory, "context.json"),
                             (json.dumps(replacement, indent=2) + "\n").encode("ascii"), deadline)
            return replacement
        finally:
            unlock(lock)


def refuse_unsafe(root):
    unsafe = unsafe_context_directory(root)
    if unsafe:
        raise OSError(unsafe)


TEMPORARY_PREFIX = ".context."
# Seconds a reader with no deadline of its own (doctor) waits while Windows
# refuses to open a context.json another process is renaming over (a
# writer's rename takes milliseconds).
SHARED_READ_WAIT = 0.5
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW | getattr(os, "O_BINARY", 0)


def make_context_directory(directory):
    """Create `.memprove/` when it is missing, with a `.gitignore` holding `*`
    (contract.md §2), so that a context is never committed and cloned into
    another Workspace; a `.memprove/` that exists is left as it is."""
    try:
        os.mkdir(directory)
    except FileExistsError:
        return
    descriptor = os.open(os.path.join(directory, ".gitignore"), NEW_FILE, 0o666)
    try:
        write_all(descriptor, b"*\n")
    finally:
        os.close(descriptor)


def remove_stale_temporaries(directory):
    """Delete what a writer killed mid-write left: under the lock, no other
    writer can have a temporary file of its own in the making."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(TEMPORARY_PREFIX) and name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def replace_file(path, data, deadline):
    """Write `data` to a temporary file, then rename it over `path`; the new
    file keeps the mode of the one it replaces (a new one: the umask's)."""
    temporary = os.path.join(os.path.dirname(path), "%s%s.tmp" % (TEMPORARY_PREFIX, os.urandom(6).hex()))
    handle = os.open(temporary, NEW_FILE, 0o666)
    try:
        with os.fdopen(handle, "wb") as stream:
            keep_mode(stream.fileno(), path)
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        while_shared(lambda: os.replace(temporary, path), deadline)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def while_shared(action, deadline, platform=PLATFORM):
    """action(), tried again while Windows refuses it because another process
    has the file open (another server reading or replacing it, `memprove run`,
    an editor, a virus scanner), until the deadline.  os.replace says so with
    WinError 5 or 32; os.open, through the C runtime, only with EACCES, which
    there cannot be told from a denial that lasts."""
    pause = 0.001
    while True:
        try:
            return action()
        except PermissionError:
            if not PLATFORMS[platform]["share_modes"] or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def keep_mode(descriptor, path):
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        return                           # no file to replace
    if hasattr(os, "fchmod"):
        os.fchmod(descriptor, mode)


def lock_exclusively(handle, deadline):
    """Take the context lock, waiting for another writer until the deadline
    (then OSError).  The lock is tried without blocking and tried again here:
    msvcrt's own wait gives up after about ten seconds (Wine's after ten
    milliseconds), and a writer stuck elsewhere must not hold a call forever."""
    pause = 0.001
    while not try_lock(handle):
        if time.monotonic() >= deadline:
            raise OSError("another writer holds the context lock")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def try_lock(handle, platform=PLATFORM):
    if PLATFORMS[platform]["file_lock"] == "msvcrt":
        import msvcrt
        handle.seek(0)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(handle, platform=PLATFORM):
    if PLATFORMS[platform]["file_lock"] == "msvcrt":
        import msvcrt
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
        return
    import fcntl
    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def move_aside(root, problem, deadline):
    """Rename an unusable context.json out of the way; return the new name:
    context.json.corrupt-<time>, or .foreign-<time> for another Workspace's."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    directory = os.path.join(root, ".memprove")
    kind = "foreign" if problem.code == "context_foreign" else "corrupt"
    name, count = "context.json.%s-%s" % (kind, stamp), 1
    while os.path.lexists(os.path.join(directory, name)):   # never lose an earlier copy
        count += 1
        name = "context.json.%s-%s-%d" % (kind, stamp, count)
    while_shared(lambda: os.replace(os.path.join(directory, "context.json"),
                                    os.path.join(directory, name)), deadline)
    return name


# ---------------------------------------------------------------------------
# 10. Daemon client
# ---------------------------------------------------------------------------
# One HTTP/1.1 request per connection, written on a plain socket to a checked
# loopback address: no proxy and no redirect can carry the token anywhere
# else.  The client is our own rather than http.client so that the timeout
# bounds the whole exchange, not each read (a daemon trickling its answer is
# cut off in time), and so that no call pays for http.client's imports.
# Writes carry an idempotency key and are retried once, with the same key,
# when their answer is lost.

OPERATIONS = {
    "resolveWorkspace": ("POST", "/v1/workspaces/resolve", True),
    "listTasks": ("GET", "/v1/tasks", False),
    "createTask": ("POST", "/v1/tasks", True),
    "getTaskCapsule": ("GET", "/v1/tasks/{task_id}/capsule", False),
    "transitionTask": ("POST", "/v1/tasks/{task_id}/transition", True),
    "listSessions": ("GET", "/v1/sessions", False),
    "createSession": ("POST", "/v1/sessions", True),
    "endSession": ("POST", "/v1/sessions/{session_id}/end", True),
    "createCheckpoint": ("POST", "/v1/sessions/{session_id}/checkpoints", True),
    "proposeDecision": ("POST", "/v1/sessions/{session_id}/decisions", True),
    "verifyLedger": ("POST", "/v1/ledger/verify", False),
}
MAX_HEAD = 64 * 1024                 # bytes of status line and headers
MAYBE_WRITTEN = ("The first attempt's answer was lost, so the write may have been made; "
                 "look (`pack`) before repeating it.")


# The hint of a daemon_address_refused for a port someone else took (§6 rule 17).
FOREIGN_LISTENER = "Another user listens on that port."


class LostAnswer(Exception):
    """The request went out and no whole answer came back."""

    def __init__(self, code):
        Exception.__init__(self, code)
        self.code = code


class DaemonClient:
    def __init__(self, url, owner=None, confirm=False, token=None, timeout=DEFAULT_TIMEOUT,
                 most_body=MAX_BODY):
        self.host, self.port, self.addresses, self.base = check_daemon_url(url)
        self.most_body = most_body
        self.token = token
        self.timeout = timeout
        self.owner = owner           # the uid the listener must belong to, if known
        self.confirm = confirm       # a listener whose owner cannot be told is refused too

    def send(self, operation, path=None, query=None, body=None):
        method, template, is_write = OPERATIONS[operation]
        target = self.base + template.format(**dict(
            (key, percent_encode(value)) for key, value in (path or {}).items()))
        if query:
            target += "?" + "&".join(percent_encode(key) + "=" + percent_encode(value)
                                     for key, value in query.items())
        head = ["%s %s HTTP/1.1" % (method, target), "Host: " + self.host,
                "Authorization: Bearer " + self.token, "Accept: application/json",
                "Accept-Encoding: identity", "User-Agent: memprove-mcp/" + VERSION,
                "Connection: close"]
        payload = b""
        if body is not None:
            payload = json_bytes(body)
            head.append("Content-Type: application/json")
        if method == "POST":
            head.append("Content-Length: %d" % len(payload))
        if is_write:
            head.append("Idempotency-Key: " + random_uuid())
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload
        if not is_write:
            try:
                return interpret_answer(*self.exchange(request))
            except LostAnswer as lost:
                raise Problem(lost.code)
        try:
            return interpret_answer(*self.exchange(request))
        except LostAnswer:
            pass
        # The same key again: the daemon answers a repeat without writing twice.
        try:
            return interpret_answer(*self.exchange(request))
        except (LostAnswer, Problem) as failed:
            # §6 rule 9: whatever stops the retry, the first attempt may have written.
            raise Problem(failed.code, ("%s %s" % (failed.hint, MAYBE_WRITTEN)) if getattr(
                failed, "hint", None) else MAYBE_WRITTEN, getattr(failed, "from_daemon", False))

    def exchange(self, request):
        """Send one request; return (status, body) within the timeout."""
        import socket
        deadline = time.monotonic() + self.timeout
        connection = None
        for address in self.addresses:     # `localhost` may be ::1 first, the daemon on 127.0.0.1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Problem("daemon_timeout")
            try:
                connection = socket.create_connection((address, self.port), timeout=remaining)
                break
            except socket.timeout:
                raise Problem("daemon_timeout")
            except OSError:
                continue
        if connection is None:
            raise Problem("daemon_unavailable")
        try:
            answer = Answer(connection, deadline, self.most_body)
            try:
                # A connection gone before a byte was sent (getpeername's ENOTCONN) is
                # a lost answer like any other: nothing was written.
                if self.owner is not None:
                    self.check_listener(peer_owner(connection, deadline))
                answer.settle_timeout()
                connection.sendall(request)
                return answer.read()
            except socket.timeout:
                raise LostAnswer("daemon_timeout")
            except (OSError, ValueError):
                raise LostAnswer("daemon_error")
        finally:
            connection.close()

    def check_listener(self, listener):
        """§6 rules 17 and 19: the token goes only to the owner of daemon.json."""
        if listener is not None and listener != self.owner:
            # The daemon stopped and someone else took its port.
            raise Problem("daemon_address_refused", FOREIGN_LISTENER)
        if listener is None and self.confirm:
            raise Problem("daemon_unavailable", DIRECTORY_OWNER % self.owner)


class Answer:
    """An HTTP/1.1 answer read from a socket before a deadline (RFC 9112).

    Raises socket.timeout past the deadline, ValueError for a malformed or
    cut-short answer (so a write is retried), and Problem for one too large.
    """

    def __init__(self, connection, deadline, most_body=MAX_BODY):
        self.connection = connection
        self.deadline = deadline
        self.most_body = most_body
        self.buffer = bytearray()

    def read(self):
        while True:
            status, headers = self.read_head()
            if not 100 <= status < 200:
                break                      # 1xx answers are interim: the real one follows
        if status in (204, 304):
            return status, b""
        codings = headers.get("transfer-encoding")
        if codings is not None:
            if codings.replace(" ", "").lower() != "chunked":
                raise ValueError("a transfer coding other than chunked")   # we asked for none
            return status, self.read_chunked()
        length = headers.get("content-length")
        if length is None:
            return status, self.read_to_close()
        if not DIGITS.match(length):
            raise ValueError("bad Content-Length")
        return status, self.read_exactly(int(length))

    def read_head(self):
        lines = []
        while True:
            line = self.read_line(MAX_HEAD)
            if not line.strip():
                if lines:
                    break
                continue                   # stray empty lines before a status line
            lines.append(line)
            if len(lines) > 100:
                raise ValueError("too many header lines")
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit() or \
                rest[3:4] not in (b"", b" ", b"\r", b"\n"):
            raise ValueError("not an HTTP/1.x status line")
        headers = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise ValueError("malformed header line")
            name = name.decode("latin-1").lower()
            value = value.strip().decode("latin-1")
            if name in headers and name == "content-length" and headers[name] != value:
                raise ValueError("conflicting Content-Length")
            headers[name] = value if name not in headers or name == "content-length" \
                else headers[name] + ", " + value
        return int(code), headers

    def read_chunked(self):
        body = bytearray()
        while True:
            size = self.read_line(MAX_HEAD).split(b";")[0].strip()
            if not size or not all(char in b"0123456789abcdefABCDEF" for char in size):
                raise ValueError("bad chunk size")
            size = int(size, 16)
            if size == 0:
                break
            if len(body) + size > self.most_body:
                raise Problem("daemon_error", "Its answer was too large.")
            body += self.read_exactly(size)
            if self.read_line(2).strip():
                raise ValueError("chunk not followed by a line end")
        while self.read_line(MAX_HEAD).strip():
            pass                           # trailer fields, unused
        return body

    def read_exactly(self, size):
        if size > self.most_body:
            raise Problem("daemon_error", "Its answer was too large.")
        body = bytearray(size)
        view = memoryview(body)
        taken = min(size, len(self.buffer))
        view[:taken] = self.buffer[:taken]
        del self.buffer[:taken]
        while taken < size:
            self.settle_timeout()
            got = self.connection.recv_into(view[taken:])
            if not got:
                raise ValueError("the answer was cut short")
            taken += got
        return body

    def read_to_close(self):
        body, self.buffer = self.buffer, bytearray()
        while self.receive():
            body += self.buffer
            self.buffer = bytearray()
            if len(body) > self.most_body:
                raise Problem("daemon_error", "Its answer was too large.")
        return body

    def read_line(self, limit):
        """One line, its end included; ValueError past `limit` bytes or at the end."""
        start = 0
        while True:
            end = self.buffer.find(b"\n", start)
            if end >= 0:
                line = bytes(self.buffer[:end + 1])
                del self.buffer[:end + 1]
                return line
            if len(self.buffer) > limit:
                raise ValueError("line too long")
            start = len(self.buffer)
            if not self.receive():
                raise ValueError("the answer was cut short")

    def receive(self):
        self.settle_timeout()
        data = self.connection.recv(65536)
        self.buffer += data
        return bool(data)

    def settle_timeout(self):
        import socket
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("the daemon's time is up")
        self.connection.settimeout(remaining)


def peer_owner(connection, deadline, platform=PLATFORM):
    """The uid that owns the daemon's end of a loopback connection, or None
    where the system does not say (PLATFORMS' socket_tables); OSError when
    the connection is gone.  Linux answers a sock_diag query for the one
    socket (what `ss` asks), at the same cost however many sockets the
    machine holds; where that is refused or finds nothing (an old or
    sandboxed kernel, no inet_diag), the same row is looked for in
    /proc/net/tcp and tcp6, which list every socket with its owner."""
    tables = PLATFORMS[platform]["socket_tables"]
    if not tables:
        return None
    # The daemon's end: its local address is the one connected to, its remote ours.
    near, far = connection.getpeername()[:2], connection.getsockname()[:2]
    try:
        return diagnosed_owner(connection.family, near, far, deadline)
    except (OSError, ValueError):
        return tables_owner(tables, near, far)


def tables_owner(tables, near, far):
    """The uid /proc/net/tcp or tcp6 gives the socket from `near` to `far`, or None."""
    for table, address in zip(tables, (socket_row_address, socket_row_address6)):
        try:
            owner = table_owner(table, " %s %s " % (address(*near), address(*far)))
        except (OSError, ValueError):
            continue                  # no such table, or no IPv4 form of the address
        if owner is not None:
            return owner
    return None


NETLINK_SOCK_DIAG = 4                 # linux/netlink.h
SOCK_DIAG_BY_FAMILY = 20              # linux/sock_diag.h


def diagnosed_owner(family, near, far, deadline):
    """The uid of the TCP socket whose local end is `near` and remote end
    `far`, from one sock_diag request (struct inet_diag_req_v2; the answer is
    a struct inet_diag_msg, idiag_uid at byte 64), asked for at most a second
    and never past `deadline`.  OSError or ValueError for any other answer:
    an error (NLMSG_ERROR; -ENOENT also when no inet_diag module is there to
    find the socket that this very connection holds), a short one, none."""
    import socket
    import struct
    family_netlink = getattr(socket, "AF_NETLINK", None)
    if family_netlink is None:
        raise OSError("no netlink here")         # another Unix, run as Linux
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + \
        struct.pack("!HH", near[1], far[1]) + raw_address(family, near[0]) + \
        raw_address(family, far[0]) + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
    header = struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, 1, 1, 0)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OSError("the daemon's time is up")
    with socket.socket(family_netlink, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as channel:
        channel.settimeout(min(1.0, remaining))
        channel.sendto(header + request, (0, 0))
        answer = channel.recv(8192)
    if len(answer) >= 16 + 72 and struct.unpack_from("=H", answer, 4)[0] == SOCK_DIAG_BY_FAMILY:
        return struct.unpack_from("=I", answer, 16 + 64)[0]
    raise ValueError("sock_diag did not say")


def raw_address(family, host):
    """An address as inet_diag_sockid holds it: 16 bytes, network order."""
    import socket
    return socket.inet_pton(family, host).ljust(16, b"\0")


def table_owner(table, row):
    """The uid of the line of /proc/net/tcp(6) that holds `row` (" local remote "),
    read 64 KiB at a time: a machine may hold tens of thousands of sockets."""
    wanted, tail = row.encode("ascii"), b""
    handle, _ = open_regular(table)
    with handle:
        while True:
            chunk = handle.read(65536)
            if not chunk:
                return None
            block = tail + chunk
            found = block.find(wanted)
            if found >= 0:
                while b"\n" not in block[found:]:
                    more = handle.read(4096)
                    if not more:
                        break
                    block += more
                fields = block[found:].split(b"\n", 1)[0].split()
                return int(fields[6]) if len(fields) > 6 and fields[6].isdigit() else None
            tail = block[-len(wanted):]


def socket_row_address(host, port):
    """An IPv4 address and port as /proc/net/tcp writes them: the address's
    32 bits read in the machine's byte order, then the port, in hex."""
    import socket
    return "%08X:%04X" % (int.from_bytes(socket.inet_aton(host), sys.byteorder), port)


def socket_row_address6(host, port):
    """An address and port as /proc/net/tcp6 writes them: four 32-bit words,
    each in the machine's byte order; an IPv4 address in its mapped form."""
    import socket
    packed = socket.inet_pton(socket.AF_INET6, host if ":" in host else "::ffff:" + host)
    return "".join("%08X" % int.from_bytes(packed[index:index + 4], sys.byteorder)
                   for index in range(0, 16, 4)) + ":%04X" % port


def percent_encode(value):
    """RFC 3986 percent-encoding of everything but unreserved characters."""
    return "".join(chr(byte) if byte in UNRESERVED else "%%%02X" % byte
                   for byte in str(value).encode("utf-8", "surrogatepass"))


UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def random_uuid():
    """A version-4 UUID, as uuid.uuid4() makes it, without importing uuid."""
    digits = bytearray(os.urandom(16))
    digits[6] = digits[6] & 0x0F | 0x40
    digits[8] = digits[8] & 0x3F | 0x80
    text = digits.hex()
    return "%s-%s-%s-%s-%s" % (text[:8], text[8:12], text[12:16], text[16:20], text[20:])


def interpret_answer(status, data):
    try:
        answer = decode_answer(data)
    except (ValueError, RecursionError):
        answer = None
    if 200 <= status < 300:
        if not isinstance(answer, dict):
            raise Problem("daemon_error", "Its answer was not a JSON object.")
        return answer
    if 300 <= status < 400:
        raise Problem("daemon_error", "It answered with a redirect, which is not followed.")
    code = answer.get("code") if isinstance(answer, dict) else None
    if isinstance(code, str) and PROBLEM_CODE.match(code) and len(code) <= 64:
        raise Problem(code, from_daemon=True)
    raise Problem("daemon_error")


def decode_answer(data):
    """The JSON of an answer body.  A large one (a Capsule of thousands of
    claims) is decoded with the cyclic garbage collector paused: it holds no
    cycles, and the collections its many new objects would set off cost a
    tenth of the decode.  Its objects then go straight to the oldest
    generation (freeze, then unfreeze: two list splices), or the next young
    collection would walk all of them once more, a tenth of the decode again,
    in every call that reads the Capsule; a full collection still sees them."""
    if len(data) < 1 << 20:
        return load_json(data.decode("utf-8"))
    import gc
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return load_json(data.decode("utf-8"))
    finally:
        if hasattr(gc, "freeze"):          # Python 3.7 and later
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


def check_daemon_url(url):
    """Return (Host header, port, addresses to connect to, base path) or refuse."""
    from urllib.parse import urlsplit
    if not all("!" <= char <= "~" for char in url):
        raise Problem("daemon_address_refused")   # it would not fit in a request line
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, 80 if parts.port is None else parts.port
    except ValueError:
        raise Problem("daemon_address_refused")
    if parts.scheme != "http" or not host or "@" in parts.netloc or port == 0:
        raise Problem("daemon_address_refused")
    if host == "localhost":
        addresses = resolve_loopback(host, port)
    elif is_loopback(host):
        addresses = (host,)
    else:
        raise Problem("daemon_address_refused")
    return parts.netloc, port, addresses, parts.path.rstrip("/")


def is_loopback(host):
    import ipaddress
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_loopback(host, port):
    """The loopback addresses `host` resolves to, in order; any other is never used."""
    import socket
    try:
        found = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except OSError:
        raise Problem("daemon_unavailable")
    addresses = []
    for family, _, _, _, sockaddr in found:
        if is_loopback(sockaddr[0]) and sockaddr[0] not in addresses:
            addresses.append(sockaddr[0])
    if not addresses:
        raise Problem("daemon_address_refused")
    return tuple(addresses)


# ---------------------------------------------------------------------------
# 11. The Pack
# ---------------------------------------------------------------------------
# pack.md, byte for byte: pure functions of a Capsule.  Lengths are UTF-16
# code units, the unit JavaScript clients measure strings in.

# What a text shown to the model may not hold (pack.md, "folding"): controls,
# lone surrogates, and the characters that hide or reorder text (§6 rule 33):
# bidi embeddings, overrides and isolates, zero-width space, word joiner and
# the invisible operators, the byte order mark, interlinear annotations, the
# tag characters (which spell hidden ASCII) and the variation selectors of
# the supplementary plane (which smuggle bytes).  A fixed list rather than a
# Unicode category, so that every Python reads a text alike, and one that
# spares what scripts and emoji need (U+200C, U+200D, U+FE0F, the direction
# marks U+200E and U+200F, the soft hyphen).
HIDDEN = ("\u200b\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb"
          "\U000e0000-\U000e007f\U000e0100-\U000e01ef")
CONTROLS = Pattern("[\x00-\x1f\x7f-\x9f\ud800-\udfff" + HIDDEN + "]")
# The first character at or above which str.isprintable() may pass a hidden
# one (the variation selectors are marks, not format characters).
PRINTABLE_HIDDEN = "\U000e0100"
HIDING = Pattern("[" + HIDDEN + "]")
# Surrogates too: a path's undecodable bytes (surrogateescape), which UTF-8 cannot write.
NOT_SHOWN_AS_IS = Pattern("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff" + HIDDEN + "]")
MAX_TEXT = 20000      # characters of one text worth folding: ten times the longest a tool takes
LINE_CAP = 300
# What reading a Capsule whose fields have the wrong shape raises.
CAPSULE_MISREAD = (KeyError, TypeError, ValueError, AttributeError)
SECTIONS = ("Next action:", "Open items:", "Decisions:", "Facts:", "Runs:")
DECISIONS, RUNS = 2, 4                # sections 0 to 3 hold claims, 4 the Runs
FOOTER = ("(Claims left out: %d. Runs left out: %d. Lines cut: %d. "
          "The claims tool gives any claim in full.)")


def fold(text):
    """White space folded as str.split() sees it; controls, lone surrogates
    and hidden characters made U+FFFD; a text over MAX_TEXT characters cut
    first (§6 rule 34: what a text costs is bounded by what can be shown)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT - 1] + "\u2026"
    # Most texts are already folded.  A printable string holds no control, no
    # surrogate, no hidden character below PRINTABLE_HIDDEN and no white space
    # but U+0020, so checking the spaces and the widest character suffices.
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " " and \
            (ascii_only(text) or max(text) < PRINTABLE_HIDDEN):
        return text
    return CONTROLS.sub("\ufffd", " ".join(text.split()))


def utf16_len(text):
    if ascii_only(text):
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) >> 1


def cap_line(line):
    """(line, False) when it fits in LINE_CAP units; else the cut line and True."""
    if len(line) <= LINE_CAP // 2 or utf16_len(line) <= LINE_CAP:
        return line, False
    if utf16_len(line) == len(line):      # no astral character: units are characters
        return line[:LINE_CAP - 1] + "\u2026", True
    units = 0
    for index, char in enumerate(line):
        units += 2 if char > "\uffff" else 1
        if units > LINE_CAP - 1:
            return line[:index] + "\u2026", True
    return line, False


# The words a Pack line puts around its texts (pack.md), spelt once: the
# lines built one by one, the same lines in bulk, and the query's sifting
# (which words and characters a line adds to its texts) all read them here.
LINE = {
    "claim": "- c%d ",                          # then the claim's text
    "state": " (%s)",                           # a decision's state
    "because": " Because: ",                    # then its rationale
    "instead": " Instead of: ",                 # then its alternatives, ALTERNATIVES-joined
    "evidence": " [%s]",                        # the labels, EVIDENCE-joined
    "passed": "- %s passed %s (%s)",            # label, command, finishing time
    "failed": "- %s failed (exit %s) %s (%s)",  # label, exit code, command, finishing time
}
ALTERNATIVES, EVIDENCE = "; ", ", "


def line_words(key):
    """The words LINE[key] adds to a line, casefolded and joined by spaces."""
    bare = LINE[key].replace("%s", " ").replace("%d", " ")
    return " ".join("".join(char if char.isalpha() else " " for char in bare).casefold().split())


def claim_line(claim):
    line = LINE["claim"] % claim["number"] + fold(claim.get("text"))
    if claim.get("kind") == "decision":
        line += LINE["state"] % fold(claim.get("decision_state"))
        rationale = fold(claim.get("rationale"))
        if rationale:
            line += LINE["because"] + rationale
        alternatives = [alt for alt in map(fold, claim.get("alternatives") or ()) if alt]
        if alternatives:
            line += LINE["instead"] + ALTERNATIVES.join(alternatives)
    evidence = claim.get("evidence")
    if evidence:
        line += LINE["evidence"] % EVIDENCE.join(map(fold, evidence))
    return line


def run_line(run):
    if run.get("passed") is True:
        return LINE["passed"] % (fold(run["label"]), fold(run.get("command")),
                                 fold(run.get("finished_at")))
    return LINE["failed"] % (fold(run["label"]), run.get("exit_code"), fold(run.get("command")),
                             fold(run.get("finished_at")))


def candidate_line(section, record):
    return run_line(record) if section == RUNS else claim_line(record)


# -- the same lines in bulk ----------------------------------------------------
# A query must search every candidate, and one Python call per line and per
# text is most of what that costs on a Task of 10,000 claims.  These build the
# lines (and what a query searches) of many records at once, field by field,
# and must give exactly what claim_line and run_line give
# (tests/test_pack.py holds them to it).

CONTROLS_MARKED = bytes(0xFF if code < 0x20 or code == 0x7F else code for code in range(256))
FOLD_CHUNK = 256      # texts checked together: one that needs folding costs its chunk a closer look
BUILD_CHUNK = 64      # lines built together when the budget, not a query, decides how many
MATCH_CHUNK = 256     # candidates searched together for a query
SIFT_CHUNK = 1024     # candidates sifted together for a query


def folded_already(texts):
    """Whether fold would give back every one of `texts` as it is.

    Joined by single spaces, a text's leading or trailing space becomes a
    double space, so one search finds both; empty texts (already folded) are
    left out of the join for that reason.
    """
    present = list(filter(None, texts))
    if len(present) + texts.count("") != len(texts):
        return False                                  # None, 0, [] ...: fold makes text of them
    try:
        joined = " ".join(present)
    except TypeError:                                 # a value that is not text
        return False
    if present and max(map(len, present)) > MAX_TEXT:
        return False                                  # fold cuts it
    if "  " in joined or joined[:1] == " " or joined[-1:] == " ":
        return False
    # str.isprintable looks every character up in the Unicode database; ASCII
    # only has to be free of its 33 controls.  A table that changes nothing
    # else leaves the bytes equal exactly when there is none, and
    # bytes.translate without deletions is its quickest loop.  (Encoding tells
    # ASCII apart on 3.6 too, which has no str.isascii.)
    try:
        data = joined.encode("ascii")
    except UnicodeEncodeError:
        return joined.isprintable() and max(joined) < PRINTABLE_HIDDEN
    return data.translate(CONTROLS_MARKED) == data


def fold_all(values):
    """[fold(value) for value in values], the values it leaves alone found in bulk."""
    folded = []
    for start in range(0, len(values), FOLD_CHUNK):
        chunk = values[start:start + FOLD_CHUNK]
        folded += chunk if folded_already(chunk) else map(fold, chunk)
    return folded


def candidate_lines(sections, records):
    """candidate_line of every candidate (`sections` ascends)."""
    lines = []
    for section, group in section_groups(sections, records):
        lines += run_lines(group) if section == RUNS else claim_lines(group, section == DECISIONS)
    return lines


def section_groups(sections, records):
    """(section, its records) for each section among the candidates (`sections` ascends)."""
    from bisect import bisect_left
    start = 0
    while start < len(records):
        stop = bisect_left(sections, sections[start] + 1, start)
        yield sections[start], records[start:stop]
        start = stop


def claim_lines(claims, decisions=False):
    """claim_line of every claim; `decisions`: they are all decisions, else none is."""
    texts = fold_all([claim.get("text") for claim in claims])
    tails = claim_tails(claims, decisions)
    # Concatenation copies a long text once; "%s" formatting grows its buffer
    # as it goes, and an empty tail costs `+` nothing.
    prefixes = [LINE["claim"] % claim["number"] for claim in claims]
    return [prefix + text + tail for prefix, text, tail in zip(prefixes, texts, tails)]


def claim_tails(claims, decisions):
    """What follows each claim's text: a decision's part, then the evidence."""
    tails = evidence_tails([claim.get("evidence") for claim in claims])
    if decisions:
        return [decided + cited for decided, cited in zip(decision_tails(claims), tails)]
    return tails


def evidence_tails(evidences):
    """The ` [labels]` ending each claim's line, or "" for a claim without evidence."""
    from itertools import chain
    if folded_already(list(chain.from_iterable(filter(None, evidences)))):
        return [LINE["evidence"] % EVIDENCE.join(evidence) if evidence else ""
                for evidence in evidences]
    return [LINE["evidence"] % EVIDENCE.join(map(fold, evidence)) if evidence else ""
            for evidence in evidences]


def decision_tails(decisions):
    """What follows each decision's text: its state, then its rationale and alternatives if any."""
    states = fold_all([decision.get("decision_state") for decision in decisions])
    rationales = fold_all([decision.get("rationale") for decision in decisions])
    alternatives = [decision.get("alternatives") or () for decision in decisions]
    every = [alternative for listed in alternatives for alternative in listed]
    if not folded_already(every):
        instead = [ALTERNATIVES.join(filter(None, map(fold, listed))) for listed in alternatives]
    elif "" in every:
        instead = [ALTERNATIVES.join(filter(None, listed)) for listed in alternatives]
    else:
        instead = list(map(ALTERNATIVES.join, alternatives))
    return [LINE["state"] % state + (LINE["because"] + because if because else "") +
            (LINE["instead"] + others if others else "")
            for state, because, others in zip(states, rationales, instead)]


def run_lines(runs):
    """run_line of every Run."""
    labels = fold_all([run["label"] for run in runs])
    commands = fold_all([run.get("command") for run in runs])
    ends = fold_all([run.get("finished_at") for run in runs])
    return [LINE["passed"] % (label, command, end) if run.get("passed") is True
            else LINE["failed"] % (label, run.get("exit_code"), command, end)
            for run, label, command, end in zip(runs, labels, commands, ends)]


def capped_lines(lines):
    """[cap_line(line) for line in lines], and the units each capped line costs
    with its newline.  Lines all of ASCII, the usual case, are priced in bulk:
    their units are their characters (the cut's ellipsis is one unit too), so
    only a line longer than the cap needs a look."""
    if ascii_only("".join(lines)):
        capped = [(line, False) if len(line) <= LINE_CAP else cap_line(line) for line in lines]
        return capped, [len(line) + 1 for line, _ in capped]
    capped = list(map(cap_line, lines))
    return capped, [utf16_len(line) + 1 for line, _ in capped]


def cut_count(lines):
    """How many of these uncut lines the cap would cut (cap_line's second value)."""
    return sum(1 for line in lines if len(line) > LINE_CAP // 2 and utf16_len(line) > LINE_CAP)


# -- the steps of pack.md --------------------------------------------------------

def render_pack(capsule, budget=PACK_BUDGET, query=None):
    """The Pack of pack.md and its figures: pack, units, claims_shown,
    claims_left_out, runs_left_out, lines_cut.

    pack.md's steps in its order.  Lines are built, capped and priced only as
    far as the budget reaches, and a query searches every candidate without
    building its line (see matching_candidates), so a large Capsule costs
    little more than its filtering.
    """
    header = pack_header(capsule)
    candidates = Candidates(*pack_candidates(capsule))
    folded_query = fold(query)
    if folded_query:
        everyone = len(candidates)
        candidates = candidates.matching(folded_query.casefold().split(" "))
        header.append("Query: %s (%d of %d lines match)" % (folded_query, len(candidates), everyone))
    header_text = "".join(line + "\n" for line in header)
    shown, reserved = fill_budget(candidates, budget - utf16_len(header_text))
    return laid_out(header_text, candidates, shown, reserved)


def pack_header(capsule):
    task = capsule["task"]
    sessions = capsule.get("sessions") or ()
    open_sessions = sorted((s for s in sessions if s.get("state") == "open"), key=lambda s: s["number"])
    closed = sum(1 for s in sessions if s.get("state") in ("ended", "abandoned"))
    lines = ["Task %d: %s [%s]" % (task["number"], fold(task.get("title")), fold(task.get("status")))]
    if open_sessions:
        listed = ", ".join("s%d %s/%s" % (s["number"], fold((s.get("agent") or {}).get("name")),
                                          fold((s.get("agent") or {}).get("role")))
                           for s in open_sessions)
        lines.append("Sessions: %d open (%s), %d closed" % (len(open_sessions), listed, closed))
    else:
        lines.append("Sessions: 0 open, %d closed" % closed)
    ledger = capsule.get("ledger") or {}
    lines.append("Ledger: %d entries, head %s" % (ledger["entries"], fold(ledger.get("head"))[:12]))
    return lines


def pack_candidates(capsule):
    """(sections, records): every candidate in the Pack's order, and its section.

    Two flat lists rather than a tuple per candidate: a Capsule of 100,000
    claims then allocates next to nothing, so no garbage collection walks it
    while the Pack is made.
    """
    by_kind = {"next_action": ([], []), "open_item": ([], []), "decision": ([], []), "fact": ([], [])}
    of_kind = by_kind.get
    for claim in capsule["claims"]:
        if claim.get("state") == "active":
            found = of_kind(claim.get("kind"))
            if found is not None:
                found[0].append(claim["number"])
                found[1].append(claim)
    ordered = (
        by_number(*by_kind["next_action"])[-1:],
        by_number(*by_kind["open_item"]),
        by_number(*by_kind["decision"], descending=True),
        by_number(*by_kind["fact"], descending=True),
        capsule["runs"][::-1],
    )
    sections, records = [], []
    for section, found in enumerate(ordered):
        sections += [section] * len(found)
        records += found
    return sections, records


def by_number(numbers, claims, descending=False):
    """The claims ordered by their numbers, as a stable sort orders them.

    A daemon lists claims in number order, so that is checked first; sorting
    by the numbers already gathered spares a second visit to every claim.
    """
    from operator import lt
    if all(map(lt, numbers, numbers[1:])):
        return claims[::-1] if descending else claims
    order = sorted(range(len(numbers)), key=numbers.__getitem__, reverse=descending)
    return [claims[index] for index in order]


# -- the query ------------------------------------------------------------------
# A candidate matches when every token of the casefolded query is in its
# casefolded uncut line (pack.md).  A token holds no white space, so it is in
# a line exactly when it is in one of the line's parts that spaces separate.
# A claim's line is `- c12 `, its text, and a tail that is empty or starts
# with a space (` (accepted)...`, ` [r1]`): a claim is searched in its text
# and tail, and in its `- c12 ` too only for a token made of `-`, `c` and
# digits.  Its text need not be folded either: folding changes white space,
# and controls, which become U+FFFD; no token holds either (casefolding makes
# none), and a token that holds U+FFFD is searched for in folded texts.
# Checking that 10,000 texts are folded costs more than searching them, and
# most lines do not match: a line is built only when the budget reaches it.

# The characters of a claim's `- c12 ` but its spaces; what a line puts
# between its texts, but words (its templates' and joiners' other characters);
# the words it adds, by what adds them.
NUMBERED = frozenset(LINE["claim"].replace("%d", "0123456789")) - {" "}
JOINING = frozenset(char for char in "".join(LINE.values()).replace("%s", "").replace("%d", "")
                    + ALTERNATIVES + EVIDENCE if not char.isalpha()) - NUMBERED
LINE_WORDS = dict((key, line_words(key)) for key in ("because", "instead", "passed", "failed"))


def matching_candidates(sections, records, tokens):
    """The indices of the candidates whose casefolded line holds every token.

    The candidates are sifted first, a field of all of them at a time
    (possible_matches); what sifting cannot tell is then searched for in the
    lines of those it leaves, so the answer is the one searching every
    candidate's line gives.
    """
    try:
        sifted = possible_matches(sections, records, tokens)
    except CAPSULE_MISREAD:
        sifted = None           # a record sifting cannot read: search every line, as before
    if sifted is None:
        return searched_matches(sections, records, tokens)
    possible, exact = sifted
    if exact:
        return possible
    found = searched_matches([sections[index] for index in possible], [records[index] for index in possible],
                             tokens)
    return [possible[index] for index in found]


def searched_matches(sections, records, tokens):
    """The indices of the candidates whose casefolded line holds every token,
    each line searched.

    A chunk at a time: the lines of a large Task, made all at once and then
    read again to match them, outgrow the processor's caches (twice the cache
    misses of the line-by-line way).
    """
    texts_folded = any("\ufffd" in token for token in tokens)
    numbered = any(NUMBERED.issuperset(token) for token in tokens)
    found = []
    for start in range(0, len(records), MATCH_CHUNK):
        searched = searched_lines(sections[start:start + MATCH_CHUNK], records[start:start + MATCH_CHUNK],
                                  texts_folded, numbered)
        found += [start + index for index in holding_every(searched, tokens)]
    return found


def searched_lines(sections, records, texts_folded, numbered):
    """For each candidate, a casefolded text that holds a token exactly when
    its casefolded line does."""
    lines = []
    for section, group in section_groups(sections, records):
        if section == RUNS:
            lines += [line.casefold() for line in run_lines(group)]
        else:
            lines += claims_searched(group, section == DECISIONS, texts_folded, numbered)
    return lines


def claims_searched(claims, decisions, texts_folded, numbered):
    """Each claim's text and tail casefolded, its text unfolded unless
    `texts_folded`, after its `- c12 ` if `numbered`.

    Every field is read as the claim's line reads it, so a record that
    cannot be read fails the query as building its line would: a number
    that is not an int is put through "%d" too.
    """
    texts = [claim.get("text") for claim in claims]
    if texts_folded or not all_text(texts) or longest(texts) > MAX_TEXT:
        texts = fold_all(texts)
    tails = claim_tails(claims, decisions)
    numbers = [claim["number"] for claim in claims]
    if numbered or set(map(type, numbers)) - {int}:
        texts = [LINE["claim"] % number + text for number, text in zip(numbers, texts)]
    return [(text + tail).casefold() for text, tail in zip(texts, tails)]


def longest(texts):
    """The length of the longest of `texts` (strings), 0 for none."""
    return max(map(len, texts)) if texts else 0


def all_text(values):
    """Whether every one of `values` is a string."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def holding_every(texts, tokens):
    """The indices of the texts that hold every token."""
    hits = range(len(texts))
    for token in tokens:
        hits = [index for index in hits if token in texts[index]]
    return hits


# -- sifting ---------------------------------------------------------------------
# A token that holds nothing of JOINING and no U+FFFD, and is not made of
# `-`, `c` and digits, is in a line exactly when it is inside one of the
# texts the line is made of: a claim's text and evidence labels; a
# decision's state, rationale (after the word `Because`), alternatives
# (after `Instead of`); a Run's label, command, finishing time, and `passed`
# or `failed` with `exit` and its exit code.  What a line puts between them
# is made of JOINING, and its prefix (`- c12 `, `- `) of spaces, `-`, `c`
# and digits.  As above, such a token is in a folded text exactly when it
# is in the text as it stands; a text that folds to nothing holds no token.
# So the texts of one field, casefolded together, are searched for such a
# token in C loops, and no line is built.

def possible_matches(sections, records, tokens):
    """(indices, exact): the indices, ascending, of the candidates whose
    texts hold every token that sifts, and whether every token sifts (the
    indices are then those of the matching candidates); None when none does.

    A candidate sifting leaves out is never read for its line, so it must be
    one whose line can be built, or leaving it out would spare a call that
    must fail: claims with int numbers, texts, and
    lists of texts for evidence and alternatives; Runs with a label, and
    texts or None for their fields.  A value that is not text where text is
    read raises TypeError, and so does one that is not None, empty or
    iterable where a list is read (text or a mapping there is read as its
    letters or keys, as the line reads it).
    """
    sifting = [token for token in tokens
               if not NUMBERED.issuperset(token) and not JOINING.intersection(token) and "\ufffd" not in token]
    if not sifting:
        return None
    from bisect import bisect_left
    from operator import itemgetter
    if set(map(type, map(itemgetter("number"), records[:bisect_left(sections, RUNS)]))) - {int}:
        return None             # "%d" reads 2.5 as 2: such a claim's line must be built
    possible = []
    for start in range(0, len(records), SIFT_CHUNK):
        found = sifted(sections[start:start + SIFT_CHUNK], records[start:start + SIFT_CHUNK], sifting)
        possible += [start + index for index in found]
    return possible, len(sifting) == len(tokens)


def sifted(sections, records, tokens):
    """The indices, ascending, of the candidates whose texts hold every
    token (all sift).  A chunk at a time, for the processor's caches.

    Each candidate is searched in one text: a claim's text, but a
    decision's text, state, rationale and alternatives, and a Run's label,
    command, finishing time and exit code if it failed, joined by U+001F
    (white space, which no token holds).  Evidence labels and the words of
    the lines are looked at only for a token they hold.
    """
    from bisect import bisect_left
    from itertools import chain, repeat
    runs_start = bisect_left(sections, RUNS)
    claims = records[:runs_start]
    evidences = list(map(dict.get, claims, repeat("evidence")))
    labels = "\n".join(chain.from_iterable(filter(None, evidences))).casefold()
    texts = list(map(dict.get, claims, repeat("text")))
    start, stop = bisect_left(sections, DECISIONS), bisect_left(sections, DECISIONS + 1)
    decisions = claims[start:stop]
    alternatives = [value or () for value in map(dict.get, decisions, repeat("alternatives"))]
    rationales = texts_of(decisions, "rationale")
    texts[start:stop] = map("\x1f".join, zip(texts[start:stop], texts_of(decisions, "decision_state"), rationales,
                                             map("\x1f".join, alternatives)))
    runs = records[runs_start:]
    passed = [value is True for value in map(dict.get, runs, repeat("passed"))]
    exits = ["" if ok else str(code) for ok, code in zip(passed, map(dict.get, runs, repeat("exit_code")))]
    texts += map("\x1f".join, zip(map(dict.__getitem__, runs, repeat("label")), texts_of(runs, "command"),
                                  texts_of(runs, "finished_at"), exits))
    if longest(texts) > MAX_TEXT or labels and longest(list(chain.from_iterable(
            filter(None, evidences)))) > MAX_TEXT:
        raise TypeError("a text fold cuts: its line must be searched")
    texts = list(map(str.casefold, texts))
    found = [index for index, text in enumerate(texts) if tokens[0] in text]
    words = " ".join(LINE_WORDS.values())
    if not any(token in labels or token in words for token in tokens):
        for token in tokens[1:]:              # each candidate's one text holds every token, or it is out
            found = [index for index in found if token in texts[index]]
        return found
    possible = None
    for token in tokens:
        if possible is not None:
            found = [index for index in possible if token in texts[index]]
        if token in labels:
            found += [index for index, evidence in enumerate(evidences)
                      if evidence and token in "\n".join(evidence).casefold()]
        if token in LINE_WORDS["because"]:
            found += [start + index for index, rationale in enumerate(rationales) if rationale.strip()]
        if token in LINE_WORDS["instead"]:
            found += [start + index for index, listed in enumerate(alternatives)
                      if any(alternative.strip() for alternative in listed)]
        if token in LINE_WORDS["passed"]:
            found += [runs_start + index for index, ok in enumerate(passed) if ok]
        if token in LINE_WORDS["failed"]:
            found += [runs_start + index for index, ok in enumerate(passed) if not ok]
        possible = set(found) if possible is None else possible.intersection(found)
    return sorted(possible)


def texts_of(records, field):
    """Each record's `field`, "" for None as fold reads it."""
    from itertools import repeat
    values = list(map(dict.get, records, repeat(field)))
    return ["" if value is None else value for value in values] if None in values else values


# -- the budget -----------------------------------------------------------------

class Candidates:
    """The Pack's candidates in order, with their lines as far as they are needed.

    `sections` and `records` run side by side.  Lines are built a chunk at a
    time when first needed (`uncut`, always a prefix of the candidates), then
    capped and priced: `capped` holds (line, cut) and `totals` what the
    candidates up to each one cost together, as rule 2 prices them.  A record
    is read for its line only when the budget reaches it, so one it does not
    reach cannot fail the call (a query reads them all to search them).
    """

    def __init__(self, sections, records):
        self.sections = sections
        self.records = records
        self.uncut = []
        self.capped = []
        self.totals = []

    def __len__(self):
        return len(self.records)

    def matching(self, tokens):
        """The candidates whose line holds every token of a query."""
        found = matching_candidates(self.sections, self.records, tokens)
        return Candidates([self.sections[index] for index in found], [self.records[index] for index in found])

    def build(self, stop):
        """Build the lines of the candidates before `stop`."""
        while len(self.uncut) < stop:
            start = len(self.uncut)
            end = min(start + BUILD_CHUNK, len(self.records))
            try:
                self.uncut += candidate_lines(self.sections[start:end], self.records[start:end])
            except CAPSULE_MISREAD:
                # A record the chunk cannot read fails the call only if the
                # budget reaches it, as when lines were built one by one.
                self.uncut.append(candidate_line(self.sections[start], self.records[start]))

    def fitting(self, room):
        """How many candidates, taken in order, fit in `room` units."""
        from bisect import bisect_right
        while len(self.totals) < len(self.records) and (not self.totals or self.totals[-1] <= room):
            self.price_next()
        return bisect_right(self.totals, room)

    def price_next(self):
        """Cap and price the next chunk of candidates, or only the next one
        when a record in the chunk cannot be read."""
        start = len(self.totals)
        stop = min(start + BUILD_CHUNK, len(self.records))
        try:
            self.build(stop)
        except CAPSULE_MISREAD:
            stop = start + 1
            self.build(stop)
        capped, costs = capped_lines(self.uncut[start:stop])
        used = self.totals[-1] if self.totals else 0
        for index, cost in enumerate(costs, start):
            if index == 0 or self.sections[index - 1] != self.sections[index]:
                cost += 2 + len(SECTIONS[self.sections[index]])       # "\n", heading, "\n"
            used += cost
            self.totals.append(used)
        self.capped += capped

    def cut_so_far(self):
        """How many of the lines built so far the cap cuts."""
        return sum(cut for _, cut in self.capped) + cut_count(self.uncut[len(self.capped):])


def fill_budget(candidates, room):
    """(shown, reserved): how many candidates go in, and whether rule 2 reserved the footer."""
    shown = candidates.fitting(room)
    if shown == len(candidates) and not candidates.cut_so_far():
        return shown, False                           # rule 1: everything, and nothing cut
    return fill_beside_footer(candidates, room), True


def fill_beside_footer(candidates, room):
    """Rule 2: how many candidates fit in `room` with the footer's reserve.

    The reserve counts the cut lines of every candidate, but only its number
    of digits matters.  When the fewest and the most cut lines the unbuilt
    candidates could hold give the same filling, that is the filling, and
    those lines are never built.
    """
    runs = candidates.sections.count(RUNS)
    claims = len(candidates) - runs

    def beside(cut):
        return candidates.fitting(room - 2 - utf16_len(FOOTER % (claims, runs, cut)))

    known = candidates.cut_so_far()
    unbuilt = len(candidates) - len(candidates.uncut)
    shown = beside(known)
    if unbuilt and shown != beside(known + unbuilt):
        candidates.build(len(candidates))
        shown = beside(candidates.cut_so_far())
    return shown


def laid_out(header_text, candidates, shown, reserved):
    """The Pack's text, the first `shown` candidates after the header, and its figures."""
    runs_left_out = candidates.sections[shown:].count(RUNS)
    claims_left_out = len(candidates) - shown - runs_left_out
    lines_cut = sum(cut for _, cut in candidates.capped[:shown])
    pack = header_text + pack_sections(candidates, shown)
    # Rule 3: the footer only when something was left out or cut; a header
    # over the budget with no candidate at all has nothing to report.
    if reserved and (claims_left_out or runs_left_out or lines_cut):
        pack += "\n" + FOOTER % (claims_left_out, runs_left_out, lines_cut) + "\n"
    return {"pack": pack, "units": utf16_len(pack),
            "claims_shown": shown - candidates.sections[:shown].count(RUNS),
            "claims_left_out": claims_left_out, "runs_left_out": runs_left_out,
            "lines_cut": lines_cut}


def pack_sections(candidates, shown):
    """The first `shown` candidates' lines, each section after an empty line and its heading."""
    from bisect import bisect_right
    sections, parts, start = candidates.sections, [], 0
    while start < shown:
        stop = min(bisect_right(sections, sections[start], start), shown)
        parts.append("\n%s\n%s\n" % (SECTIONS[sections[start]],
                                      "\n".join([line for line, _ in candidates.capped[start:stop]])))
        start = stop
    return "".join(parts)


def open_item_sentence(capsule):
    numbers = sorted([claim["number"] for claim in capsule["claims"]
                      if claim.get("kind") == "open_item" and claim.get("state") == "active"])
    if not numbers:
        return "No open items."
    listed = ", ".join("c%d" % number for number in numbers)
    if len(numbers) == 1:
        return "1 open item (%s) must be resolved or carried forward." % listed
    return "%d open items (%s) must be resolved or carried forward." % (len(numbers), listed)


def opening_statement(capsule, now, agent_name, agent_role, sentence=open_item_sentence):
    task = capsule["task"]
    return "Resuming Task %d: %s at %s as %s (%s). %s" % (
        task["number"], fold(task.get("title")), now, fold(agent_name), fold(agent_role),
        sentence(capsule))


# ===========================================================================
# Part two: the operator's commands
# ===========================================================================
# What a person runs to connect a client and to see why it does not work
# (print-config, plugin, doctor), and the hook a client runs when a session
# starts.  `mcp serve` never runs this code: it is here, after the server,
# because it shares the server's rules (configuration, Workspace, context
# files, the daemon client, the Pack) and so cannot disagree with it.


# ---------------------------------------------------------------------------
# 12. Words and files
# ---------------------------------------------------------------------------
# What every operator's command writes or reads: a word as each shell reads
# it back, and the three formats of a client's files, written by hand and read
# by hand (the server imports no parser).


# -- a word as each shell reads it back ---------------------------------------------

POWERSHELL_BARE = Pattern(r"-{0,2}[A-Za-z][A-Za-z0-9_.-]*\Z")


def sh_word(value):
    """A word as POSIX sh reads it back: bare when it holds only
    [A-Za-z0-9_@%+=:,./-], else single-quoted (shlex.quote, the same on every
    Python from 3.6; only the operator's commands import it)."""
    import shlex
    return shlex.quote(value)


POWERSHELL_QUOTES = "'\u2018\u2019\u201a\u201b"     # what PowerShell takes for a single quote


def powershell_word(value):
    """A word as PowerShell reads it back: bare when it is a plain word or
    option (a number would be read as a number), else single-quoted with
    every single quote doubled (PowerShell takes the typographic ones, U+2018
    to U+201B, for quotes too)."""
    if POWERSHELL_BARE.match(value):
        return value
    return "'" + "".join(char * 2 if char in POWERSHELL_QUOTES else char
                         for char in value) + "'"


def cmd_line(words):
    """A command line for `cmd /C`, which takes the first and the last double
    quote off a line that starts with one: a quoted program gets one more
    pair around the whole line (as `cmd /?` says)."""
    line = " ".join(cmd_word(word) for word in words)
    return '"%s"' % line if line.startswith('"') else line


def cmd_word(word):
    """A word as cmd.exe passes it on: double-quoted when it holds a space or
    one of cmd's own characters (a path of Windows holds no double quote, and
    mcp plugin refuses one holding %, which cmd expands even there)."""
    return word if word and not any(char in word for char in ' \t&|<>^()",;=') else '"%s"' % word


# The same words read back from a line (doctor vouches only for a hook whose
# line runs exactly those words, §6 rule 32): each reader takes only the
# quoting its writer above may give, and answers None for a line that would
# make its shell do anything more than run words.

SH_BARE = Pattern(r"[A-Za-z0-9_@%+=:,./-]\Z")


def sh_words(line):
    """The words POSIX sh reads in `line`: bare characters sh_word leaves
    bare (and any other letter), single-quoted text, double-quoted text
    without `$`, backquote or backslash; None for anything else."""
    if not isinstance(line, str):
        return None
    words, word, index = [], None, 0
    while index < len(line):
        char = line[index]
        if char in " \t":
            if word is not None:
                words.append(word)
            word, index = None, index + 1
            continue
        if char in "'\"":
            end = line.find(char, index + 1)
            inner = line[index + 1:end]
            if end < 0 or char == '"' and any(special in inner for special in "$`\\"):
                return None
            word, index = (word or "") + inner, end + 1
            continue
        if not (SH_BARE.match(char) or char > "\x7f" and shown_path(char) is char):
            return None
        word, index = (word or "") + char, index + 1
    return words + ([word] if word is not None else [])


CMD_WORD = Pattern(r'"([^"%!\x00-\x1f]*)"|([^ \t&|<>^()",;=%!\x00-\x1f]+)')


def cmd_words(line):
    """The words cmd_line wrote: `cmd /C` takes the first and last double
    quote off a line that starts with one, then each word is bare or
    double-quoted, holding no `%` or `!`, one space between words; None for
    anything else."""
    if not isinstance(line, str):
        return None
    if line.startswith('"'):
        if not line.endswith('"') or len(line) < 2:
            return None
        line = line[1:-1]
    words, index = [], 0
    while index < len(line):
        word = CMD_WORD.match(line, index)
        if not word:
            return None
        words.append(word.group(1) if word.group(1) is not None else word.group(2))
        index = word.end()
        if index < len(line):
            if line[index] != " ":
                return None
            index += 1
    return words


def powershell_words(line):
    """The words of `& word word ...` as PowerShell reads them, each bare
    (POWERSHELL_BARE) or single-quoted with its quotes doubled; None for
    anything else."""
    if not isinstance(line, str) or not line.startswith("& "):
        return None
    words, index, line = [], 0, line[2:]
    while index < len(line):
        if line[index] in POWERSHELL_QUOTES:
            word, index = [], index + 1
            while True:
                if index >= len(line):
                    return None
                if line[index] in POWERSHELL_QUOTES:
                    if index + 1 < len(line) and line[index + 1] in POWERSHELL_QUOTES:
                        word.append(line[index])
                        index += 2
                        continue
                    index += 1
                    break
                word.append(line[index])
                index += 1
            words.append("".join(word))
        else:
            end = line.find(" ", index)
            end = len(line) if end < 0 else end
            if not POWERSHELL_BARE.match(line[index:end]):
                return None
            words.append(line[index:end])
            index = end
        if index < len(line):
            if line[index] != " ":
                return None
            index += 1
    return words


# How a fix line is written in each shell of PLATFORMS: templates whose
# {placeholders} are filled with quoted words, and the example paths shown
# where the user must put their own.
SHELLS = {
    "sh": {
        "word": sh_word, "python": "python3",
        "run": "{python} {program}",
        "set": "export {name}={value}",
        "unset": "unset {name}",
        "mkdir": "mkdir -p -m 700 {path}",
        "private": "chmod 600 {path}",
        "private_folder": "chmod 700 {path}",
        "unshared": "chmod go-w {path}",
        "move": "mv {path} {target}",
        "write": "echo {value} > {path}",
        "in": "cd {path} && {name}",
        "examples": {"token": "/path/to/your/memprove/token",
                     "data_dir": "/path/to/the/daemons/data-dir",
                     "project": "/path/to/your/project",
                     "kit": "/path/to/your/kit",
                     "log": "/path/to/memprove-mcp.log"},
    },
    "powershell": {
        "word": powershell_word, "python": None,      # None: this interpreter, by its path
        "run": "& {python} {program}",
        "set": "$env:{name} = {value}",
        "unset": "Remove-Item Env:{name}",
        "mkdir": "New-Item -ItemType Directory -Force -Path {path}",
        "private": None,                               # no POSIX modes: nothing to fix
        "private_folder": None, "unshared": None,
        "move": "Move-Item -LiteralPath {path} -Destination {target}",
        "write": "Set-Content -LiteralPath {path} -Value {value} -Encoding utf8",
        "in": "Set-Location -LiteralPath {path}; {name}",
        "examples": {"token": "C:\\path\\to\\your\\memprove\\token",
                     "data_dir": "C:\\path\\to\\the\\daemons\\data-dir",
                     "project": "C:\\path\\to\\your\\project",
                     "kit": "C:\\path\\to\\your\\kit",
                     "log": "C:\\path\\to\\memprove-mcp.log"},
    },
}


def shell_word(shell, value):
    """A value as `shell` reads it back.  One holding a control or a line
    break no quoting of sh or PowerShell keeps on one line (§6 rule 23): it
    is shown escaped, as JSON escapes it, and single-quoted, so that the line
    pasted runs exactly what it shows or fails, never a `$(...)` of the
    value's (§6 rule 29); such a path is one to rename, not to paste."""
    shown = shown_path(value)
    if shown is value:
        return shell["word"](value)
    escaped = shown[1:-1]                # JSON's escapes, in ASCII, without its double quotes
    word = shell["word"](escaped)
    return word if word[:1] == "'" else "'" + escaped + "'"


def utf8_text(path):
    """A path as the UTF-8 text a client's file holds.  Python 3.6 under an
    ASCII locale decodes paths with surrogate escapes, which still stand for
    the UTF-8 bytes; a path that is not UTF-8 keeps its escapes (refused)."""
    try:
        return os.fsencode(path).decode("utf-8")
    except UnicodeError:
        return path


# -- the three file formats ----------------------------------------------------
# Documents are dicts (insertion order kept), lists, strings, booleans and
# integers.  TOML and YAML are written by hand because the server imports no
# parser; every string is quoted with the escapes its format defines, so any
# path survives: spaces, quotes, backslashes, `#`, `: `, tabs, control
# characters, non-ASCII and characters outside the basic plane (written as
# themselves: JSON's `\ud83d\ude80` pairs are valid in neither TOML nor YAML).

def json_text(document):
    # The form print-config has always printed: the default stays byte for byte.
    import json
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def reject_surrogates(text):
    """A lone surrogate (an undecodable byte of a path) has no UTF-8 form."""
    if any("\ud800" <= char <= "\udfff" for char in text):
        raise ValueError("not valid UTF-8")


TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                "\f": "\\f", "\r": "\\r"}


def quoted(value, escapes, also=""):
    """A double-quoted TOML or YAML string: `escapes` gives the short escapes;
    every other control character (and those in `also`) becomes \\uXXXX, valid
    in both; the rest, astral characters included, is written as itself."""
    reject_surrogates(value)
    out = []
    for char in value:
        if char in escapes:
            out.append(escapes[char])
        elif char < " " or "\x7f" <= char <= "\x9f" or char in also:
            out.append("\\u%04X" % ord(char))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def scalar_text(value, string):
    """A boolean, an integer or (through `string`) a string, as TOML and YAML write them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return string(value)


def toml_string(value):
    # TOML forbids control characters (but tab) raw; C1 controls are escaped
    # too, so that a terminal shows what is there.
    return quoted(value, TOML_ESCAPES)


def toml_key(key):
    return key if TOML_BARE_KEY.match(key) else toml_string(key)


TOML_BARE_KEY = Pattern(r"[A-Za-z0-9_-]+\Z")


def toml_value(value):
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return scalar_text(value, toml_string)


def toml_text(document, path=()):
    """Key/value pairs under the table's header, then each sub-table after them
    (a key written after a sub-table's header would belong to that sub-table)."""
    simple = [(key, value) for key, value in document.items() if not isinstance(value, dict)]
    tables = [(key, value) for key, value in document.items() if isinstance(value, dict)]
    lines = []
    if simple and path:
        lines.append("[%s]" % ".".join(toml_key(key) for key in path))
    lines += ["%s = %s" % (toml_key(key), toml_value(value)) for key, value in simple]
    text = "\n".join(lines) + "\n" if lines else ""
    for key, value in tables:
        sub = toml_text(value, path + (key,))
        text += ("\n" if text and sub else "") + sub
    return text


# YAML 1.1 (PyYAML) and 1.2 agree on these escapes in a double-quoted scalar.
YAML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\0": "\\0", "\a": "\\a", "\b": "\\b",
                "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r",
                "\x1b": "\\e", "\x85": "\\N", "\xa0": "\\_", "\u2028": "\\L",
                "\u2029": "\\P"}


def yaml_string(value):
    # YAML allows neither controls nor the BOM and U+FFFE/U+FFFF raw, and a
    # parser would fold NEL, U+2028 and U+2029: all are escaped.
    return quoted(value, YAML_ESCAPES, "\ufeff\ufffe\uffff")


def yaml_key(key):
    return key if YAML_PLAIN_KEY.match(key) else yaml_string(key)


YAML_PLAIN_KEY = Pattern(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def yaml_scalar(value):
    return scalar_text(value, yaml_string)


def yaml_lines(value, indent):
    """Block style: a mapping as `key: value` lines, a sequence as `- item`
    lines; a mapping inside a sequence starts on the dash's line."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append("%s%s:" % (pad, yaml_key(key)))
                lines += yaml_lines(item, indent + 2)
            else:
                lines.append("%s%s: %s" % (pad, yaml_key(key), yaml_inline(item)))
    else:
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = yaml_lines(item, indent + 2)
                lines.append("%s- %s" % (pad, inner[0][indent + 2:]))
                lines += inner[1:]
            else:
                lines.append("%s- %s" % (pad, yaml_inline(item)))
    return lines


def yaml_inline(value):
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return yaml_scalar(value)


def yaml_text(document):
    return "\n".join(yaml_lines(document, 0)) + "\n"


WRITERS = {"json": json_text, "toml": toml_text, "yaml": yaml_text}


# -- reading a client's entry ------------------------------------------------------
# Only the entry named memprove is kept: nothing else in these files is
# printed or held.  An entry is {"command", "args", "env", "keyed", "text"}:
# `keyed` is every (key, value) it holds, `text` everything it holds, for the
# token's value.  These files may come from a repository (a project's
# .continue/, .gemini/...), so reading one costs time in proportion to its
# size whatever it holds (contract.md §6 rule 16).

MAX_CLIENT_FILE = 64 * 1024 * 1024   # ~/.claude.json keeps history and grows large
# §6 rule 34: tomllib is pure Python and quadratic in a key's dotted parts (each
# part rebuilds the key, each prefix is walked and flagged) and in a table
# header's depth times the statements under it.  Within these limits the worst
# file built took 0.18 s on 3.11 (0.12-0.16 s on 3.12 to 3.15); a realistic
# config.toml of 64 KiB (1,000 trusted projects) 0.014 s.  Past them, the line
# scanner reads the file, and says when it cannot tell.
MAX_TOML = 64 * 1024                 # characters of a TOML file worth parsing whole
MAX_TOML_LINE_DOTS = 32              # dots on one line that can be in a key or header
MAX_TOML_DOTS = 4096                 # such dots in the whole file
MAX_CLIENT_LINE = 4096               # longer TOML and YAML lines are skipped (§6 rule 16)
# A value that only names a variable, which the client expands when it starts
# the server: how print-config --client gemini passes MEMPROVE_TOKEN_FILE.
VARIABLE_REFERENCE = Pattern(r"(\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\}"
                             r"|\{env:[A-Za-z_][A-Za-z0-9_]*\})\Z")


def read_client_entry(path, keys):
    try:
        data = user_text(read_regular(path, MAX_CLIENT_FILE)[0])
    except (OSError, ValueError):
        return None
    if path.endswith(".json"):
        return json_client_entry(data, keys)
    if path.endswith(".toml"):
        # tomllib is pure Python: past MAX_TOML it would cost more than doctor's promise (§6
        # rule 28), and the line scanner, which skips long lines, reads it instead.
        return parsed_toml_entry(data, keys) if toml_parser() and toml_within_limits(data) else \
            honest(toml_client_entry(data), data, TOML_UNREAD)
    return honest(yaml_client_entry(data), data, YAML_UNREAD)


def small_json(path):
    """A client's small JSON state file, or None."""
    try:
        return load_json(user_text(read_regular(path, MAX_CLIENT_FILE)[0]))
    except (OSError, ValueError, RecursionError):
        return None


def listing_or_none(path, endings=(".yaml", ".yml")):
    try:
        return [item for item in os.listdir(path) if item.endswith(endings)]
    except OSError:
        return []


def toml_parser():
    """The standard library's TOML parser (Python 3.11 on), or None."""
    try:
        import tomllib
    except ImportError:
        return None
    return tomllib


def toml_within_limits(data):
    """Whether tomllib reads `data` within doctor's second (MAX_TOML and the dot
    counts).  A dot can be in a key only before a line's last `=` (a key and its
    `=` share a line), or anywhere on a header line; lines are split on "\n"
    alone, as tomllib splits them (U+2028 may sit inside a quoted key)."""
    if len(data) > MAX_TOML:
        return False
    total = 0
    for line in data.split("\n"):
        if line.lstrip().startswith("["):
            dots = line.count(".")
        else:
            dots = line.count(".", 0, max(line.rfind("="), 0))
        total += dots
        if dots > MAX_TOML_LINE_DOTS or total > MAX_TOML_DOTS:
            return False
    return True


def parsed_toml_entry(data, keys):
    """The entry of a TOML file read whole by tomllib, as Codex reads it: any
    layout TOML allows (inline tables, dotted keys, multi-line arrays,
    literal strings); a file that is no TOML is refused, saying so."""
    tomllib = toml_parser()
    try:
        document = tomllib.loads(data)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError):
        raise Refusal("it is not valid TOML")
    try:
        return mapped_entry(document, ("mcp_servers", KIT_NAME))
    except RecursionError:               # an entry nested deeper than JSON can write it back
        raise Refusal("its memprove entry is nested too deeply")


# Where no parser reads the file, layouts the line scanner cannot read as the
# client would (dotted keys, an inline table, a multi-line array or string;
# YAML's flow mappings, anchors and block scalars): met near a memprove
# entry, doctor says it cannot tell rather than give a wrong verdict.
TOML_UNREAD = Pattern("(?m)^\\s*(mcp_servers\\s*\\.\\s*[\"']?memprove\\b|memprove\\s*[.=])"
                      "|'''|\"\"\"|=\\s*\\[[^\\]\\n]*$")
YAML_UNREAD = Pattern("(?m)[\"']?memprove[\"']?\\s*:\\s*[{&*]|:\\s*[|>&*{]|^\\s*-\\s*\\{")
UNREADABLE = ("its layout is not one doctor reads without a parser for its format "
              "(this Python has none)")


def honest(entry, data, unread):
    """A scanned entry, or Refusal (why) where the scanner met a layout
    it cannot read near the entry (or anywhere, when it found none but the
    file names memprove)."""
    near = entry["text"] if entry else data
    if (entry or KIT_NAME in data) and unread.search(near):
        raise Refusal(UNREADABLE)
    return entry


def json_client_entry(data, keys):
    try:
        value = load_json(data)
    except (ValueError, RecursionError):
        return None
    return mapped_entry(value, keys)


def mapped_entry(value, keys):
    """The entry at `keys` of a parsed document (JSON, or TOML through tomllib)."""
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    if not isinstance(value, dict):
        return None
    command = value.get("command", value.get("cmd"))
    args = value.get("args") if isinstance(value.get("args"), list) else []
    if isinstance(command, list):              # opencode: [command, ...args]
        command, args = (command[0] if command else None), command[1:]
    env = value.get("env", value.get("environment", value.get("envs")))
    try:
        text = dump_json(value, ascii=False)
    except (TypeError, ValueError):      # a TOML date, which JSON has no form for
        text = str(value)
    return {"command": command if isinstance(command, str) else None,
            "args": [arg for arg in args if isinstance(arg, str)],
            "env": env if isinstance(env, dict) else {},
            "keyed": keyed_values(value), "text": text}


def keyed_values(value):
    """(key, value) for every scalar in a JSON entry, nested ones included
    (a list's items under the list's key), walked without recursion so that a
    deep entry costs no more than a wide one."""
    pairs, pending = [], [(None, value)]
    while pending:
        key, item = pending.pop()
        if isinstance(item, dict):
            pending.extend(reversed(list(item.items())))
        elif isinstance(item, list):
            pending.extend((key, element) for element in reversed(item))
        else:
            pairs.append((key, item))
    return pairs


# TOML and YAML: the server imports no parser, so the memprove block is found
# by its lines as print-config writes them, and only presence, the command
# and the token rule are checked (doctor.md).  Lines over MAX_CLIENT_LINE are
# skipped, and each line is read by a scanner that only moves forward.

TOML_TABLE = Pattern(r"""\s*\[\s*mcp_servers\s*\.\s*["']?memprove["']?\s*(\]|\.)""")
YAML_KEYED = Pattern(r"""(\s*)(-\s+)?["']?memprove["']?\s*:\s*(#.*)?\Z""")
YAML_NAMED = Pattern(r"""(\s*)-\s+(\{[^}]*)?name\s*:\s*["']?memprove["']?\s*[,}]?""")


def client_lines(data):
    """The lines of a TOML or YAML file, each over MAX_CLIENT_LINE made empty."""
    return [line if len(line) <= MAX_CLIENT_LINE else "" for line in data.splitlines()]


def toml_client_entry(data, table_pattern=TOML_TABLE):
    """The block of the table `table_pattern` matches (its group 1 "]" for the
    table itself, "." for a sub-table, which belongs to the block)."""
    lines = client_lines(data)
    for index, line in enumerate(lines):
        table = table_pattern.match(line)
        if table and table.group(1) == "]":
            block = [line]
            for rest in lines[index + 1:]:
                if rest.lstrip().startswith("[") and not table_pattern.match(rest):
                    break
                block.append(rest)
            return lines_entry(block)
    return None


def yaml_client_entry(data):
    """The memprove block: goose's `memprove:` key, or Continue's list item `name: memprove`."""
    lines = client_lines(data)
    for index, line in enumerate(lines):
        found = YAML_KEYED.match(line) or YAML_NAMED.match(line)
        if not found:
            continue
        indent = len(found.group(1))
        block = [line]
        for rest in lines[index + 1:]:
            stripped = rest.strip()
            if stripped and not stripped.startswith("#") and len(rest) - len(rest.lstrip()) <= indent:
                break
            block.append(rest)
        return lines_entry(block)
    return None


def lines_entry(block):
    """command, args and env keys of a TOML or YAML block, read line by line in
    one pass: `args` as a flow list, or as the `- item` lines under `args:`."""
    command, args, env, keyed = None, [], {}, []
    collecting = None                  # the indentation of an `args:` whose items follow
    for line in block:
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if collecting is not None and stripped.startswith("- ") and indent >= collecting:
            args.append(scalar_at(stripped, 2)[0])
            continue
        collecting = None
        for key, value in line_pairs(line):
            if key == "args" and isinstance(value, list):
                args = value
            elif key == "args" and value == "":
                args, collecting = [], indent
            elif key in ("command", "cmd") and command is None and isinstance(value, str):
                command = value
            elif isinstance(value, str):
                env[key] = value
            keyed.append((key, value))
    return {"command": command, "args": args, "env": env, "keyed": keyed, "text": "\n".join(block)}


KEY_CHARACTERS = Pattern(r"""[^\s:=#,{}\[\]"']+""")
PLAIN_VALUE = Pattern(r"""[^,{}\[\]#]*""")


def line_pairs(line):
    """(key, value) of every `key = value` or `key: value` on a line, flow
    mappings included; a value is a string, a list of strings (a flow
    sequence), or None (a flow mapping, whose pairs come next).  Every step
    moves forward, so a line costs time in proportion to its length."""
    pairs, index, end = [], 0, len(line)
    while index < end:
        char = line[index]
        if char == "#":
            break
        if char in " \t-{},[]":
            index += 1
            continue
        if char in "\"'":
            key, index = scalar_at(line, index)
        else:
            match = KEY_CHARACTERS.match(line, index)
            if match is None:
                index += 1               # a character no key holds
                continue
            key, index = match.group(), match.end()
        index = skip_blanks(line, index)
        if index >= end or line[index] not in ":=":
            continue
        value, index = value_at(line, skip_blanks(line, index + 1))
        pairs.append((key, value))
    return pairs


def skip_blanks(line, index):
    while index < len(line) and line[index] in " \t":
        index += 1
    return index


def value_at(line, index):
    """(value, index after it) of the value starting at line[index]."""
    if index >= len(line) or line[index] == "#":
        return "", len(line)
    if line[index] == "{":
        return None, index + 1
    if line[index] != "[":
        return scalar_at(line, index)
    items, index = [], index + 1
    while True:
        index = skip_blanks(line, index)
        if index >= len(line) or line[index] == "]":
            return items, index + 1
        if line[index] == ",":
            index += 1
            continue
        item, after = scalar_at(line, index)
        items.append(item)
        index = max(after, index + 1)


DOUBLE_QUOTED = Pattern(r'"((?:[^"\\]|\\.)*)"')


def scalar_at(line, index):
    """(string, index after it): double-quoted (JSON's escapes, which TOML and
    YAML share for what print-config writes), single-quoted, or plain up to a
    flow separator or a comment.  An unclosed quote takes the rest of the line."""
    char = line[index:index + 1]
    if char == '"':
        match = DOUBLE_QUOTED.match(line, index)
        if not match:
            return line[index + 1:], len(line)
        try:
            return load_json(match.group(), quick=True), match.end()
        except ValueError:
            return match.group(1), match.end()
    if char == "'":
        close = line.find("'", index + 1)
        if close < 0:
            return line[index + 1:], len(line)
        return line[index + 1:close], close + 1
    match = PLAIN_VALUE.match(line, index)
    return match.group().strip(), match.end()


# ---------------------------------------------------------------------------
# 13. The clients
# ---------------------------------------------------------------------------
# Everything the module knows of one client is one record of CLIENTS (the
# Client class says what each attribute holds): the entry print-config prints
# and where the client keeps it, the environment it gives a server and the
# command that adds one, its files in the kit and the commands that install,
# update, enable and remove the kit, how doctor finds the kit it installed,
# and its session-start hook.  What only one client needs is written just
# above the table, under that client's name; what several share comes first.

KIT_NAME = "memprove"                  # the marketplace's, the plugin's and the extension's
KIT_PLUGIN_ID = KIT_NAME + "@" + KIT_NAME
KIT_ARCHIVE = "memprove_mcp.pyz"


class Client(object):
    """One client's record.  Every attribute but `label` may be left out.

    Its MCP entry (print-config, doctor):
      format        json, toml or yaml (WRITERS), or None for a client with
                    no configuration file of ours (Claude Desktop: the kit only)
      shape         server -> the document print-config prints
      env           (environ, workspace) -> more (name, value) pairs for the
                    entry's environment, or None
      where         print-config's standard-error line's place: {project} stands
                    for the project file, {user} for the first user file
      project_file  path parts of its project file under the Workspace root
      user_files    (base, path parts, keys before the client's own) of each of
                    its user files, the base one of PLACES or a function of their
                    shape, and "<root>" in the keys the Workspace root; a tuple, or
                    a dict by platform ("posix" for Linux and any platform not named)
      block_folder  path parts of one of those that is a folder of files of one
                    entry each (YAML), or None
      expands       what it replaces in its configuration's values (refused in a path)
      agent         the name it sends as clientInfo.name
      passes        (environ, the entry's env, the names env_vars lists) -> the
                    environment it starts a server with
      adds          (interpreter, .pyz, configuration directory, environ) -> the
                    words of its own command that adds the entry, or None
    Its plugin kit (mcp plugin):
      label         its name in the commands printed
      kit_server    kit -> the server entry of its kit files, or None
      kit_expands   what it expands in the kit's values (refused in a path)
      kit_files     ((path parts, kit -> a document or bytes), ...) of its own files
      kit_hooks     path parts of the hooks file it reads in the kit, or None
      install, update, remove   its commands ({folder}, {bundle}, {open} filled in)
      enable        its command that enables a kit it disabled
      kit_notes     what `mcp plugin` tells the user of it before the commands
      kit_token_variables  whether the kit's server gets MEMPROVE_TOKEN and
                    MEMPROVE_TOKEN_FILE from the user's shell (else only the
                    token file of the configuration directory serves it)
      find_kit      found -> where it recorded the kit it installed, or None
    Its session-start hook:
      hook_variable the variable it sets for the hooks it runs, or None (no hook)
      hook_files    (base, path parts) of its files that may hold a hook entry,
                    the user's last (print-config --hook names that one)
      hook_form     how its handler names the command on Windows (HOOK_FORMS)
      hook_inherited  whether every program started under it inherits its
                    hook_variable (then the others are tried first)
      hook_stop_event the event it runs when the agent ends its turn (Stop,
                    Gemini CLI's AfterAgent), the stop hook's
      hook_distrust (found, handler) -> (why, fix) when it would skip the kit's
                    hook until the user trusts it, or None
    """

    def __init__(self, label, **facts):
        self.label = label
        self.format = self.shape = self.env = self.where = self.project_file = None
        self.user_files, self.expands, self.agent, self.adds = (), (), None, None
        self.block_folder = None
        self.passes = passes_everything
        self.kit_server = self.kit_hooks = self.find_kit = self.enable = None
        self.kit_expands, self.kit_files = (), ()
        self.install, self.update, self.remove = (), (), ()
        self.kit_notes, self.kit_token_variables = (), True
        self.hook_variable, self.hook_files = None, ()
        self.hook_form = self.hook_distrust = None
        self.hook_inherited = False
        self.hook_stop_event = "Stop"
        for name, value in facts.items():
            if not hasattr(self, name):
                raise TypeError("a client has no %r" % name)
            setattr(self, name, value)
        if not isinstance(self.user_files, dict):
            self.user_files = {"posix": self.user_files}

    def places(self, platform=PLATFORM):
        """(base, path parts, keys) of every file the client keeps its entry in
        on `platform`: the project file first, then the user files."""
        user = self.user_files.get(platform) or self.user_files["posix"]
        return ([("root", self.project_file, ())] if self.project_file else []) + list(user)


# -- where clients keep their files ---------------------------------------------

def home_directory(environ, platform=PLATFORM):
    """The user's home as clients find it: %USERPROFILE% on Windows, $HOME elsewhere."""
    return environ.get(PLATFORMS[platform]["home"]) or os.path.expanduser("~")


def xdg_config_home(environ, platform=PLATFORM):
    value = environ.get("XDG_CONFIG_HOME")
    return value if value and os.path.isabs(value) else \
        os.path.join(home_directory(environ, platform), ".config")


def roaming_app_data(environ, platform=PLATFORM):
    return environ.get("APPDATA") or os.path.join(home_directory(environ, platform), "AppData",
                                                  "Roaming")


# The directories clients keep their files under: (environ, Workspace root,
# platform) -> a directory, or None.  A client that keeps its own (Codex's
# CODEX_HOME) names a function of that shape as its base instead.
PLACES = {
    "root": lambda environ, root, platform: root,
    "home": lambda environ, root, platform: home_directory(environ, platform),
    "xdg": lambda environ, root, platform: xdg_config_home(environ, platform),
    "appdata": lambda environ, root, platform: roaming_app_data(environ, platform),
}


def place_path(base, parts, environ, root, platform=PLATFORM):
    """The path of a client's file (see PLACES), or None when it has no base here."""
    directory = (PLACES[base] if isinstance(base, str) else base)(environ, root, platform)
    return os.path.join(directory, *parts) if directory else None


# -- what several clients share ---------------------------------------------------
# Nothing in an entry ever holds a token, a data directory or a value the
# user set: only variable names.

# Codex hands a server only a short list of variables plus those named in
# `env_vars`: these are the ones the server reads from a user's shell.
SHELL_VARIABLES = ("MEMPROVE_TOKEN", "MEMPROVE_TOKEN_FILE", "MEMPROVE_DATA_DIR",
                   "MEMPROVE_WORKSPACE", "MEMPROVE_TIMEOUT", "MEMPROVE_AGENT_NAME",
                   "MEMPROVE_AGENT_ROLE", "MEMPROVE_PARENT_SESSION", "MEMPROVE_MCP_LOG")


def servers_entry(top, stdio_type=False, trailing=()):
    """The common JSON shape `{top: {"memprove": {[type,] command, args, env, ...}}}`."""
    def shape(server):
        entry = {"type": "stdio"} if stdio_type else {}
        entry["command"] = server["command"]
        entry["args"] = server["args"]
        entry["env"] = server["env"]
        entry.update(trailing)
        return {top: {"memprove": entry}}
    return shape


def workspace_folder(environ, workspace):
    """Cursor and VS Code expand ${workspaceFolder} in `env`; --workspace already
    names the project, and two sources would only confuse a reader."""
    return [] if workspace else [("MEMPROVE_WORKSPACE", "${workspaceFolder}")]


# What the server reads from its environment (the token, the data directory,
# the Workspace) is only what the client passes on (its record's `passes`);
# doctor --client judges those in that environment (clients-verified.md,
# measured).
def passes_everything(environ, entry_env, names=()):
    return dict(environ, **entry_env)


# A record's `adds`, measured with the pinned clients: run as printed, each
# writes the entry doctor then finds (Claude Code's local scope:
# ~/.claude.json for the repository's root; Codex: config.toml, without
# `env_vars`, which its command cannot write; Gemini CLI's user settings,
# which need no trusted folder).  Claude Code and Codex take the server's
# words after `--`; Gemini CLI its command before `--` and the arguments
# after it.
def adds_after_dashes(client, env_option):
    """The add command of a client that takes the server's words after `--`."""
    def adds(python, program, config_dir, environ):
        return [client, "mcp", "add", KIT_NAME, env_option, "MEMPROVE_CONFIG_DIR=" + config_dir,
                "--", python, program, "mcp", "serve", "--config-dir", config_dir]
    return adds


def kit_server(root, stdio_type=False, trailing=(), env=None):
    """The server entry of a kit file: this interpreter, the kit's .pyz
    through `root` (a client's root variable, or a function of the kit that
    gives the folder), and print-config's arguments and environment (with
    `env`, the client's record's: Gemini's passes the token file by reference)."""
    def shape(kit):
        entry = {"type": "stdio"} if stdio_type else {}
        entry["command"] = kit["python"]
        entry["args"] = [(root if isinstance(root, str) else root(kit)) + KIT_ARCHIVE] + kit["args"]
        entry["env"] = {"MEMPROVE_CONFIG_DIR": kit["config_dir"]}
        if env:
            entry["env"].update(env(kit["environ"], None))
        entry.update(trailing)
        return entry
    return shape


def kit_plugin_folder(kit):
    return os.path.join(kit["folder"], KIT_NAME, "")


# -- Claude Code -------------------------------------------------------------------
# A record's `find_kit` (plugin.md): Claude Code, Codex and Gemini CLI each
# record a kit they installed in a place of their own; doctor finds what the
# client runs from there, its root variable replaced by the folder it stands
# for, and checks it as a configured entry, but for the .pyz it names: a
# copy, the same bytes as this one.  Each gives the server file ("path"), the
# root variables' folders ("roots"), the kit's folder, the manifest that
# holds the installed version, the plugin's folder, and (why, fix) when the
# client disabled it; or None.

def claude_kit_entry(found):
    """Claude Code: enabledPlugins in settings.json (false once disabled), the
    marketplace's folder in known_marketplaces.json; it runs the kit's own
    .mcp.json, in place."""
    base = os.path.join(home_directory(found.environ, found.platform), ".claude")
    settings_path = os.path.join(base, "settings.json")
    settings = small_json(settings_path)
    enabled = settings.get("enabledPlugins") if isinstance(settings, dict) else None
    state = enabled.get(KIT_PLUGIN_ID) if isinstance(enabled, dict) else None
    if state is not True and state is not False:
        return None
    known = small_json(os.path.join(base, "plugins", "known_marketplaces.json"))
    marketplace = known.get(KIT_NAME) if isinstance(known, dict) else None
    folder = marketplace.get("installLocation") if isinstance(marketplace, dict) else None
    if not isinstance(folder, str):
        return None
    plugin = os.path.join(folder, KIT_NAME)
    return {"path": os.path.join(plugin, ".mcp.json"), "roots": {"${CLAUDE_PLUGIN_ROOT}": plugin},
            "folder": folder, "manifest": os.path.join(plugin, ".claude-plugin", "plugin.json"),
            "plugin": plugin,
            "disabled": None if state else (
                "disabled in %s (enabledPlugins)" % shown_path(settings_path),
                CLIENTS["claude-code"].enable)}


# -- Codex CLI ---------------------------------------------------------------------

def codex_home(environ, root, platform):
    """Where Codex keeps its files: $CODEX_HOME, else ~/.codex, on every platform."""
    return environ.get("CODEX_HOME") or os.path.join(home_directory(environ, platform), ".codex")


def codex_entry(server):
    # TOML: the writer puts the scalars and arrays under [mcp_servers.memprove]
    # and the env table after them as [mcp_servers.memprove.env].
    return {"mcp_servers": {"memprove": {
        "command": server["command"], "args": server["args"],
        "env_vars": list(SHELL_VARIABLES), "env": server["env"]}}}


# Codex passes a few variables of its own, then those `env_vars` names.
CODEX_PASSES = ("HOME", "LANG", "LC_ALL", "PATH", "SHELL", "TERM", "TMPDIR", "USER", "LOGNAME",
                "SSL_CERT_FILE", "SSL_CERT_DIR", "USERPROFILE", "APPDATA", "LOCALAPPDATA",
                "SYSTEMROOT", "PATHEXT", "TEMP", "TMP")


def passes_what_codex_names(environ, entry_env, names=()):
    kept = dict((name, environ[name]) for name in CODEX_PASSES + tuple(names) if name in environ)
    return dict(kept, **entry_env)


# The lines of config.toml where Codex records the plugin and its marketplace.
TOML_PLUGIN = Pattern(r"""\s*\[\s*plugins\s*\.\s*["']memprove@memprove["']\s*(\])""")
TOML_MARKETPLACE = Pattern(r"""\s*\[\s*marketplaces\s*\.\s*["']?memprove["']?\s*(\])""")


def codex_kit_entry(found):
    """Codex: the plugin in config.toml (`enabled = false` once disabled), the
    marketplace's folder there too; it runs its copy's server file, in
    plugins/cache."""
    base = codex_home(found.environ, None, found.platform)
    config_path = os.path.join(base, "config.toml")
    try:
        config = user_text(read_regular(config_path, MAX_CLIENT_FILE)[0])
    except (OSError, ValueError):
        return None
    plugin = toml_client_entry(config, TOML_PLUGIN)
    marketplace = toml_client_entry(config, TOML_MARKETPLACE)
    state = plugin and plugin["env"].get("enabled")
    if state not in ("true", "false") or not marketplace:
        return None
    cache = os.path.join(base, "plugins", "cache", KIT_NAME, KIT_NAME)
    copies = sorted(listing_or_none(cache, ""))
    if len(copies) != 1:                 # `codex plugin add` keeps one
        return None
    copy = os.path.join(cache, copies[0], ".codex-plugin")
    return {"path": os.path.join(copy, "mcp.json"), "roots": {},
            "folder": marketplace["env"].get("source"),
            "manifest": os.path.join(copy, "plugin.json"), "plugin": os.path.dirname(copy),
            "disabled": None if state == "true" else (
                "disabled in %s (enabled = false)" % shown_path(config_path),
                CLIENTS["codex"].enable)}


# Codex keeps the hooks the user trusted in config.toml, each under a key
# naming the plugin, the file, the event and the handler's place: its
# `trusted_hash`, the SHA-256 of the handler as Codex sees it (its defaults
# filled in), and since 0.164.0 its `trusted_content_hash`, a SHA-256 of the
# whole installed plugin folder.  A hook whose first differs from what Codex
# computes now was never trusted; whose second differs, was trusted for an
# earlier kit (`modified`, after every update).  Both measured against
# Codex 0.171.0's own values (session-start.md, codex-hook-trust.md).
CODEX_EVENT_LABELS = {"session-start": "session_start", "stop": "stop"}


def codex_hook_state(label):
    """The pattern of config.toml's table of the kit's `label` hook."""
    key = "%s:hooks/hooks.json:%s:0:0" % (KIT_PLUGIN_ID, label)
    return Pattern(r"""\s*\[\s*hooks\s*\.\s*state\s*\.\s*["']%s["']\s*(\])"""
                   % key.replace(".", "\\."))


def codex_hook_distrust(found, kit, handlers):
    """(why, fix) when Codex would skip one of the kit's hooks `handlers`
    ([(event, handler)]): never trusted, or trusted for an earlier kit; or
    None (trusted, or a handler whose hash is not known: a Windows one)."""
    config = os.path.join(codex_home(found.environ, None, found.platform), "config.toml")
    try:
        text = user_text(read_regular(config, MAX_CLIENT_FILE)[0])
    except (OSError, ValueError):
        text = ""
    content = ABSENT
    for event, handler in handlers:
        if set(handler) != {"type", "command"} or not isinstance(handler["command"], str):
            continue
        label = CODEX_EVENT_LABELS[event]
        state = toml_client_entry(text, codex_hook_state(label))
        trusted = state["env"] if state else {}
        if trusted.get("trusted_hash") != codex_identity_hash(label, handler["command"]):
            modified = trusted.get("trusted_hash") is not None
            break
        if trusted.get("trusted_content_hash") is not None:
            content = codex_bundle_hash(kit["plugin"]) if content is ABSENT else content
            # A folder it cannot fingerprint (too large, unreadable) says nothing either way.
            if content is not None and trusted["trusted_content_hash"] != content:
                modified = True
                break
    else:
        return None
    trust = "start `codex` in %s once and choose to trust the hooks" % shown_path(
        found.root or "your project")
    if modified:
        return ("were trusted by Codex for an earlier kit (modified), so it skips them without "
                "a word", trust + " again")
    return "are not trusted by Codex, which skips them without a word", trust


def codex_identity_hash(label, command):
    """Codex's `trusted_hash` of a command handler of the event `label`."""
    import hashlib
    # Codex hashes compact JSON with sorted keys: these are written in that order.
    seen = {"event_name": label, "hooks": [{"async": False, "command": command,
                                            "timeout": 600, "type": "command"}]}
    return "sha256:" + hashlib.sha256(dump_json(seen, ascii=False).encode(
        "utf-8", "surrogatepass")).hexdigest()


def codex_bundle_hash(root):
    """Codex's `trusted_content_hash` of the installed plugin folder `root`:
    "codex-plugin-bundle-v1", then each entry of a depth-first walk, the
    root first as "", children by name: its '/'-joined path's length (u64,
    little-endian) and path, then "directory", or "file", its size and its
    bytes.  At most MAX_KIT_ENTRIES entries and MAX_ARCHIVE bytes in all (§6
    rule 28: a kit's worth, so that doctor keeps its second); past that, or
    a file that cannot be read, None."""
    import hashlib
    import stat
    import struct
    digest = hashlib.sha256(b"codex-plugin-bundle-v1")
    pending, seen, left = [""], 0, MAX_ARCHIVE
    while pending:
        relative = pending.pop()
        seen += 1
        path = os.path.join(root, *relative.split("/")) if relative else root
        try:
            status = os.lstat(path)
            name = relative.encode("utf-8", "surrogateescape")
            digest.update(struct.pack("<Q", len(name)) + name)
            if stat.S_ISDIR(status.st_mode):
                digest.update(b"directory")
                names = sorted(os.listdir(path), reverse=True)
                pending += [relative + "/" + item if relative else item for item in names]
            else:
                if status.st_size > left:
                    return None
                data = read_regular(path, left + 1, follow=False)[0]
                left -= len(data)
                if left < 0:
                    return None
                digest.update(b"file" + struct.pack("<Q", len(data)) + data)
        except (OSError, ValueError):
            return None
        if seen > MAX_KIT_ENTRIES:
            return None
    return "sha256:" + digest.hexdigest()


# -- Gemini CLI --------------------------------------------------------------------

# Gemini CLI drops every inherited variable whose name holds one of these
# (its environment sanitising), then expands `$VAR` in the entry's env from
# its own environment.
GEMINI_DROPS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "AUTH", "CREDENTIAL", "CREDS",
                "PRIVATE", "CERT")


def passes_what_gemini_keeps(environ, entry_env, names=()):
    kept = dict((name, value) for name, value in environ.items()
                if not any(word in name.upper() for word in GEMINI_DROPS))
    for name, value in entry_env.items():
        reference = VARIABLE_REFERENCE.match(value)
        kept[name] = environ.get(value.strip("${}"), "") if reference else value
    return kept


def gemini_adds(python, program, config_dir, environ):
    reference = []
    for name, value in token_file_reference(environ, None):
        reference += ["-e", "%s=%s" % (name, value)]
    return ["gemini", "mcp", "add", "-s", "user", KIT_NAME, "-e",
            "MEMPROVE_CONFIG_DIR=" + config_dir] + reference + [
        python, "--", program, "mcp", "serve", "--config-dir", config_dir]


def token_file_reference(environ, workspace):
    """Gemini drops inherited variables whose names hold TOKEN; it expands
    `$VAR` in `env`, so a reference (a name, never the value) passes the
    token file the user set.  Only when one is set: an unset reference would
    reach the server as a literal `$MEMPROVE_TOKEN_FILE`."""
    return [("MEMPROVE_TOKEN_FILE", "$MEMPROVE_TOKEN_FILE")] if environ.get("MEMPROVE_TOKEN_FILE") else []


def kit_gemini_extension(kit):
    return {"name": KIT_NAME, "version": kit["version"],
            "mcpServers": {KIT_NAME: CLIENTS["gemini"].kit_server(kit)},
            "contextFileName": KIT_GEMINI_CONTEXT}


# Gemini's context file stays through a compression, which drops what the
# hook gave; Gemini runs no hook after one.
KIT_GEMINI_CONTEXT = "GEMINI.md"
KIT_GEMINI_TEXT = """# memprove

This project keeps its working memory in the memprove ledger. If no memprove Pack (a text
opening with "Resuming Task") is in this conversation, call the `pack` tool of the memprove
server before anything else.
"""


def gemini_kit_entry(found):
    """Gemini CLI: its extension folder, a copy of the kit's (or, linked, the
    kit's own: .gemini-extension-install.json says which).  The extension
    may be disabled for the Workspace by extension-enablement.json."""
    extensions = os.path.join(home_directory(found.environ, found.platform), ".gemini",
                              "extensions")
    extension = os.path.join(extensions, KIT_NAME)
    install = small_json(os.path.join(extension, ".gemini-extension-install.json"))
    source = install.get("source") if isinstance(install, dict) else None
    source = source if isinstance(source, str) else None
    root = source if source and install.get("type") == "link" else extension
    path = os.path.join(extension, "gemini-extension.json")
    rules = os.path.join(extensions, "extension-enablement.json")
    here = found.root or working_directory()
    return {"path": path, "roots": {"${extensionPath}": root, "${/}": os.sep},
            "folder": source and kit_folder_of(source), "manifest": path, "plugin": root,
            "disabled": None if not here or gemini_enabled(small_json(rules), here) else (
                "disabled for %s by %s" % (shown_path(here), shown_path(rules)),
                fix(found, "in", path=here, name=CLIENTS["gemini"].enable))}


def gemini_enabled(rules, directory):
    """Whether Gemini CLI runs the kit's extension in `directory`, by its
    extension-enablement.json ({name: {"overrides": [rule, ...]}}, any other
    shape ignored, as Gemini does): the last rule that matches decides, a
    rule starting `!` disables, and with none the extension is enabled."""
    entry = rules.get(KIT_NAME) if isinstance(rules, dict) else None
    overrides = entry.get("overrides") if isinstance(entry, dict) else None
    if not isinstance(overrides, list) or not all(isinstance(rule, str) for rule in overrides):
        return True
    # Gemini compares folders written with / and a / at each end.
    here = directory.replace("\\", "/")
    here = ("" if here.startswith("/") else "/") + here + ("" if here.endswith("/") else "/")
    enabled = True
    for rule in overrides:
        disables = rule[:1] == "!"
        if folder_glob_matches(rule[1:] if disables else rule, here):
            enabled = not disables
    return enabled


def folder_glob_matches(glob, path):
    """Whether Gemini's folder glob matches `path` whole: `/*` matches nothing
    or a / and anything after it (a folder and those below it), any other
    `*` anything.  Run as a set of positions in the glob, kept as the bits of
    an integer and moved one character of `path` at a time, so no rule costs
    more than its length times the path's (a regular expression of many
    stars would backtrack)."""
    tokens = []                          # characters, "*" and "/*"
    for character in glob:
        if character != "*":
            tokens.append(character)
            continue
        star = "*"
        if tokens[-1:] == ["/"]:
            star = tokens.pop() + "*"
        if tokens[-1:] in (["*"], ["/*"]):   # two stars in a row match what one of them would
            star = "/*" if tokens.pop() == star == "/*" else "*"
        tokens.append(star)
    # The masks are built as bytes and made integers once: OR-ing bits into an
    # integer one at a time would cost the rule's length squared (§6 rule 28).
    # Only the path's characters can match, so only theirs are made.
    size = len(tokens) // 8 + 1
    masks = dict((character, bytearray(size)) for character in set(path) | {"*", "/*"})
    for index, token in enumerate(tokens):
        mask = masks.get(token)
        if mask is not None:
            mask[index >> 3] |= 1 << (index & 7)
    literal = dict((key, int.from_bytes(bytes(mask), "little")) for key, mask in masks.items())
    stars, slash_stars = literal.pop("*"), literal.pop("/*")
    # Bit i of `at`: before token i; of `inside`: within the "/*" at i, past its /.
    # No two star tokens are neighbours, so one step of skipping is the whole closure.
    at, inside = 1, 0
    at |= (at & (stars | slash_stars)) << 1
    for character in path:
        if character == "/":
            inside |= at & slash_stars
        at = ((at & literal.get(character, 0)) << 1) | (at & stars)
        at |= ((at & (stars | slash_stars)) | inside) << 1
        if not at and not inside:
            return False
    return bool(at >> len(tokens) & 1)


def kit_folder_of(source):
    """The kit's folder from the extension's source: the kit's own folder, or
    (a kit written before the extension moved to the kit's root) its plugin's."""
    if os.path.isfile(os.path.join(source, ".claude-plugin", "marketplace.json")):
        return source
    return os.path.dirname(source)


# -- Claude Desktop: the kit's bundle alone -------------------------------------------

def kit_bundle_manifest(kit):
    """Claude Desktop's MCP Bundle manifest (mcpb 0.3): the bundle is made on
    this machine for this machine, so its command is this interpreter."""
    server = CLIENTS["claude-desktop"].kit_server(kit)
    return {"manifest_version": "0.3", "name": KIT_NAME, "version": kit["version"],
            "description": KIT_DESCRIPTION, "author": KIT_AUTHOR,
            "server": {"type": "python", "entry_point": KIT_ARCHIVE,
                       "mcp_config": {"command": server["command"], "args": server["args"],
                                      "env": server["env"]}},
            "compatibility": {"platforms": [PLATFORM],
                              "runtimes": {"python": ">=3.6"}}}


def bundle_file(kit):
    return zip_bytes([("manifest.json", json_text(kit_bundle_manifest(kit)).encode("utf-8")),
                      (KIT_ARCHIVE, kit["archive"])])


# -- OpenCode, Continue, Goose ---------------------------------------------------------

def opencode_entry(server):
    # OpenCode takes the command and its arguments as one list.
    return {"mcp": {"memprove": {
        "type": "local", "command": [server["command"]] + server["args"],
        "environment": server["env"], "enabled": True}}}


def continue_entry(server):
    # Continue's mcpServers is a list of named blocks, not a map.
    return {"mcpServers": [{
        "name": "memprove", "type": "stdio", "command": server["command"],
        "args": server["args"], "env": server["env"]}]}


def goose_entry(server):
    return {"extensions": {"memprove": {
        "name": "memprove", "type": "stdio", "cmd": server["command"],
        "args": server["args"], "envs": server["env"], "enabled": True, "timeout": 300}}}


# -- the table ----------------------------------------------------------------------

CLIENTS = {
    "claude-code": Client(
        "Claude Code", agent="claude-code",
        format="json", shape=servers_entry("mcpServers", stdio_type=True),
        where="{project} (project scope) or in {user} (local or user scope)",
        project_file=(".mcp.json",),
        user_files=(("home", (".claude.json",), ("projects", "<root>")),
                    ("home", (".claude.json",), ())),
        expands=("${",), adds=adds_after_dashes("claude", "-e"),
        kit_server=kit_server("${CLAUDE_PLUGIN_ROOT}/", stdio_type=True), kit_expands=("${",),
        kit_files=(((KIT_NAME, ".claude-plugin", "plugin.json"), lambda kit: kit_plugin(kit)),
                   ((KIT_NAME, ".mcp.json"), lambda kit: kit_servers(kit, "claude-code"))),
        kit_hooks=(KIT_NAME, "hooks", "hooks.json"),
        install=("claude plugin marketplace add {folder}", "claude plugin install " + KIT_PLUGIN_ID),
        update=("claude plugin update " + KIT_PLUGIN_ID,),
        enable="claude plugin enable " + KIT_PLUGIN_ID,
        remove=("claude plugin uninstall " + KIT_PLUGIN_ID, "claude plugin marketplace remove memprove"),
        kit_notes=("Claude Code reads it in place: keep the folder where it is; /mcp lists the "
                   "server.",),
        find_kit=claude_kit_entry,
        hook_variable="CLAUDECODE", hook_files=(("root", (".claude", "settings.json")),
                                                ("home", (".claude", "settings.json"))),
        hook_form="exec", hook_inherited=True),
    "codex": Client(
        "Codex CLI", agent="codex-mcp-client",
        format="toml", shape=codex_entry, where="{user}",
        user_files=((codex_home, ("config.toml",), ()),),
        passes=passes_what_codex_names, adds=adds_after_dashes("codex", "--env"),
        # Codex 0.171.0 refuses an Agent Plugins server that names an interpreter by
        # its path, and starts one in its copy of the plugin, where no Workspace is
        # found: its own manifest (.codex-plugin/) starts the server in the session's
        # folder, and passes the variables `env_vars` names, as its config.toml does.
        kit_server=kit_server(kit_plugin_folder, trailing=(("env_vars", list(SHELL_VARIABLES)),)),
        kit_expands=("${",),
        kit_files=(((KIT_NAME, ".codex-plugin", "plugin.json"),
                    lambda kit: kit_plugin(kit, servers="./.codex-plugin/mcp.json")),
                   ((KIT_NAME, ".codex-plugin", "mcp.json"), lambda kit: kit_servers(kit, "codex"))),
        kit_hooks=(KIT_NAME, "hooks", "hooks.json"),
        install=("codex plugin marketplace add {folder}", "codex plugin add " + KIT_PLUGIN_ID),
        # Codex has no enable command: adding the plugin again sets `enabled = true`.
        update=("codex plugin add " + KIT_PLUGIN_ID,), enable="codex plugin add " + KIT_PLUGIN_ID,
        remove=("codex plugin remove " + KIT_PLUGIN_ID, "codex plugin marketplace remove memprove"),
        kit_notes=("Codex reads it in place: keep the folder where it is. It runs the kit's hook "
                   "only once you trust it, and again after each update: start `codex` once "
                   "and trust the hooks.",),
        find_kit=codex_kit_entry,
        hook_variable="PLUGIN_ROOT", hook_files=((codex_home, ("hooks.json",)),), hook_form="cmd",
        hook_distrust=codex_hook_distrust),
    "gemini": Client(
        "Gemini CLI", agent="gemini-cli-mcp-client",
        format="json", shape=servers_entry("mcpServers"),
        where="{project} (project) or in {user} (user); Gemini starts it only in a trusted folder",
        project_file=(".gemini", "settings.json"), env=token_file_reference,
        user_files=(("home", (".gemini", "settings.json"), ()),), expands=("$",),
        passes=passes_what_gemini_keeps, adds=gemini_adds,
        kit_server=kit_server("${extensionPath}${/}" + KIT_NAME + "${/}",
                              env=token_file_reference),
        kit_expands=("$",),
        # Gemini CLI's extension is the kit's folder itself: its hooks file cannot be the
        # plugin's, whose Windows handler Gemini would run without its arguments.
        kit_files=((("gemini-extension.json",), kit_gemini_extension),
                   ((KIT_GEMINI_CONTEXT,), lambda kit: KIT_GEMINI_TEXT.encode("utf-8"))),
        kit_hooks=("hooks", "hooks.json"),
        install=("gemini extensions install {folder} --consent",),
        update=("gemini extensions update memprove",),
        enable="gemini extensions enable memprove --scope workspace",     # in the Workspace
        remove=("gemini extensions uninstall memprove",),   # it keeps its enablement file
        kit_notes=("Gemini CLI asks whether to trust the folder, and whether to update: "
                   "answer y.",),
        # It passes its servers no variable whose name holds TOKEN.
        kit_token_variables=False,
        find_kit=gemini_kit_entry,
        hook_variable="GEMINI_SESSION_ID", hook_files=(("root", (".gemini", "settings.json")),
                                                       ("home", (".gemini", "settings.json"))),
        hook_form="powershell", hook_stop_event="AfterAgent"),
    "opencode": Client(
        "OpenCode", format="json", shape=opencode_entry,
        where="{project} (project) or in {user} (user)", project_file=("opencode.json",),
        # OpenCode keeps the XDG layout on every platform, Windows too.
        user_files=(("xdg", ("opencode", "opencode.json"), ()),), expands=("{env:", "{file:")),
    "cline": Client(
        "Cline", format="json",
        shape=servers_entry("mcpServers", stdio_type=True, trailing=(("disabled", False),)),
        where="{user}",
        user_files=(("home", (".cline", "data", "settings", "cline_mcp_settings.json"), ()),)),
    "continue": Client(
        "Continue", format="yaml", shape=continue_entry,
        # The `cn` CLI (1.5.47, tried) reads no block file in .continue/mcpServers/.
        where="{user}, or a file you pass to `cn --config`",
        user_files=(("root", (".continue", "mcpServers"), ()),
                    ("home", (".continue", "config.yaml"), ())),
        block_folder=(".continue", "mcpServers")),
    "amp": Client(
        "Amp", format="json", shape=servers_entry("amp.mcpServers"),
        where="{project} (workspace, then `amp mcp approve memprove`) or in {user} (user)",
        project_file=(".amp", "settings.json"),
        user_files=(("home", (".config", "amp", "settings.json"), ()),)),
    "cursor": Client(
        "Cursor", format="json", shape=servers_entry("mcpServers", stdio_type=True),
        where="{project} (project) or in {user} (user)",
        project_file=(".cursor", "mcp.json"), env=workspace_folder,
        user_files=(("home", (".cursor", "mcp.json"), ()),), expands=("${",)),
    "vscode": Client(
        "VS Code", format="json", shape=servers_entry("servers", stdio_type=True),
        where="{project} (workspace) or in {user} (user, the default profile)",
        project_file=(".vscode", "mcp.json"), env=workspace_folder,
        user_files={"posix": (("xdg", ("Code", "User", "mcp.json"), ()),),
                    "darwin": (("home", ("Library", "Application Support", "Code", "User",
                                         "mcp.json"), ()),),
                    "win32": (("appdata", ("Code", "User", "mcp.json"), ()),)},
        expands=("${",)),
    "windsurf": Client(
        "Windsurf", format="json", shape=servers_entry("mcpServers"), where="{user}",
        user_files=(("home", (".codeium", "windsurf", "mcp_config.json"), ()),)),
    "zed": Client(
        "Zed", format="json", shape=servers_entry("context_servers"),
        where="{project} (project) or in {user} (user)", project_file=(".zed", "settings.json"),
        # Zed reads XDG_CONFIG_HOME on Linux only.
        user_files={"posix": (("xdg", ("zed", "settings.json"), ()),),
                    "darwin": (("home", (".config", "zed", "settings.json"), ()),),
                    "win32": (("appdata", ("Zed", "settings.json"), ()),)}),
    "goose": Client(
        "Goose", format="yaml", shape=goose_entry, where="{user}",
        user_files={"posix": (("xdg", ("goose", "config.yaml"), ()),),
                    # etcetera's Windows strategy: <home>\AppData\Roaming, whatever %APPDATA% says.
                    "win32": (("home", ("AppData", "Roaming", "Block", "goose", "config",
                                        "config.yaml"), ()),)}),
    "claude-desktop": Client(
        "Claude Desktop", kit_server=kit_server("${__dirname}/"), kit_expands=("${",),
        kit_files=(((KIT_NAME + ".mcpb",), bundle_file),),
        install=("{open} {bundle}",)),
}
# The clients print-config and doctor know, in the order of clients.md's table.
CLIENT_NAMES = tuple(name for name, record in CLIENTS.items() if record.format)
DEFAULT_CLIENT = "claude-code"       # print-config's and doctor's without --client


# ---------------------------------------------------------------------------
# 14. mcp print-config
# ---------------------------------------------------------------------------
# clients.md: every form names the same server (the command, the arguments
# `mcp serve --config-dir DIR [--workspace DIR]`, MEMPROVE_CONFIG_DIR in the
# environment) in the shape and file format its client reads (its record's
# `format` and `shape`).  Nothing here ever holds a token, a data directory or
# a value the user set: only variable names.


def print_config(options):
    """Print the client entry that starts this server; write nothing anywhere."""
    config_dir = config_directory(options.get("config_dir"), os.environ)
    program = this_program()
    args = ["mcp", "serve", "--config-dir", config_dir]
    workspace = options.get("workspace")
    if workspace:
        workspace = os.path.abspath(os.path.expanduser(workspace))
        args += ["--workspace", workspace]
    if options.get("hook"):
        return print_hook_config(options.get("client") or DEFAULT_CLIENT, program, args[2:])
    if options.get("python") or PLATFORMS[PLATFORM]["interpreter_first"]:
        command, args = os.path.abspath(sys.executable), [program] + args
    else:
        command = program
    root = find_workspace(os.environ, workspace).root
    command, args, config_dir = utf8_text(command), [utf8_text(arg) for arg in args], \
        utf8_text(config_dir)
    name = options.get("client") or DEFAULT_CLIENT
    expanded = expanded_by(name, [command] + args)
    if expanded:
        raise Refusal(expansion_refusal(name, *expanded))
    try:
        text, where = client_entry(name, command, args, config_dir, os.environ,
                                   workspace and utf8_text(workspace), root)
        data = text.encode("utf-8")
    except ValueError:                 # UnicodeEncodeError too: a lone surrogate
        raise Refusal(NOT_UTF8)
    write_stdout_bytes(data)
    sys.stderr.write(where)
    return 0


def print_hook_config(name, program, options):
    """Print client `name`'s session-start hook entry for its own file."""
    record = CLIENTS[name]
    if not record.hook_variable:
        raise Refusal("%s runs no session-start hook; its model reads the server's "
                      "instructions, which say to call pack first." % name)
    words = [utf8_text(os.path.abspath(sys.executable)), utf8_text(program), "mcp", "hook",
             "session-start"] + [utf8_text(word) for word in options]
    refusal = hook_refusal(name, words)
    if refusal:
        raise Refusal(refusal)
    try:
        data = json_text(hook_document(words + ["--client", name], (name,))).encode("utf-8")
    except ValueError:
        raise Refusal(NOT_UTF8)
    path = place_path(*record.hook_files[-1], environ=os.environ, root=None)
    write_stdout_bytes(data)
    sys.stderr.write("memprove-mcp: merge this into %s: its SessionStart and %s lists, beside "
                     "any hook already there.\n" % (shown_path(path), record.hook_stop_event))
    return 0


def hook_refusal(name, words, platform=PLATFORM):
    """The line refusing client `name`'s hook entry for `words`, or None: a
    word the client expands in its configuration, or, where its hook runs
    under cmd.exe (Codex on Windows), a `%`, which cmd expands even between
    double quotes (§6 rule 36)."""
    expanded = expanded_by(name, words)
    if expanded:
        return expansion_refusal(name, *expanded)
    held = cmd_expands(words, (name,), platform)
    return held and cmd_refusal(*held)


def expansion_refusal(name, value, marker):
    """The line refusing `value`, which holds `marker`, which client `name` expands."""
    return ("%s holds %s, which %s would expand in its configuration; use a path without it."
            % (shown_path(value), marker, CLIENTS[name].label))


def cmd_expands(words, clients, platform=PLATFORM):
    """(the first of `words` holding `%`, the client) where one of `clients`
    runs its hook under cmd.exe on `platform`, or None."""
    if PLATFORMS[platform]["hook_shell"] is not None:
        return None
    runs_cmd = [name for name in clients if CLIENTS[name].hook_form == "cmd"]
    held = next((word for word in words if "%" in word), None)
    return (held, runs_cmd[0]) if runs_cmd and held is not None else None


def cmd_refusal(value, name):
    """The line refusing `value`, whose `%` cmd.exe would expand in client `name`'s hook."""
    return ("%s holds %%, which cmd.exe would expand in %s's hook; use a path without it."
            % (shown_path(value), CLIENTS[name].label))


def expanded_by(name, values):
    """(value, what) for the first value holding what client `name` expands in
    its configuration (`${` for Claude Code, `$` for Gemini...), else None: a
    path the client rewrites would start another server than the one printed."""
    for value in values:
        for marker in CLIENTS[name].expands:
            if marker in value:
                return value, marker
    return None


def client_entry(name, command, args, config_dir, environ, workspace=None, root=None):
    """(standard output text, standard-error line) of `name`'s entry.

    `environ` is read only to know whether MEMPROVE_TOKEN_FILE is set (gemini)
    and where the client's files are, never for a value that goes into the
    entry; `workspace` is the absolute --workspace or None; `root` is the
    Workspace root for the client's project file (None when there is none to
    give, as for a deleted working directory).
    """
    record = CLIENTS[name]
    env = {"MEMPROVE_CONFIG_DIR": config_dir}
    env.update(record.env(environ, workspace) if record.env else [])
    document = record.shape({"command": command, "args": list(args), "env": env})
    text = WRITERS[record.format](document)
    places = record.places()
    user = next(place_path(base, parts, environ, root) for base, parts, _ in places
                if base != "root")
    project = os.path.join(root or "<project>", *record.project_file) if record.project_file else None
    place = record.where.format(project=shown_path(project or ""), user=shown_path(user))
    return text, "memprove-mcp: put this entry in %s.\n" % place


# ---------------------------------------------------------------------------
# 15. The kit: mcp plugin
# ---------------------------------------------------------------------------
# plugin.md: the kit is written on the user's own machine, so every entry can
# name this interpreter by its path, and the .pyz through the root variable of
# the client that installed it (servers start in the session's directory, so
# a relative path would not do), or, for Codex, whose plugin servers have no
# such variable, by its path in the kit, which is read in place.  Each client
# reads only its own files of the folder (its record's `kit_files`), so each
# ends with exactly one `memprove` server.

KIT_DESCRIPTION = ("The memprove ledger for coding agents: resume a Task from its Pack, record "
                   "what you learn and decide, complete it on passed test runs.")
KIT_AUTHOR = {"name": KIT_NAME}


def kit_marketplace(kit):
    # Claude Code and Codex read the same local marketplace.
    return {"name": KIT_NAME, "owner": KIT_AUTHOR, "description": KIT_DESCRIPTION,
            "plugins": [{"name": KIT_NAME, "source": "./" + KIT_NAME,
                         "description": KIT_DESCRIPTION, "version": kit["version"]}]}


def kit_plugin(kit, servers=None):
    """A plugin manifest, Claude Code's (its servers in .mcp.json beside it) or
    Codex's (`servers`: the file that holds them)."""
    plugin = {"name": KIT_NAME, "version": kit["version"], "description": KIT_DESCRIPTION,
              "author": KIT_AUTHOR}
    if servers:
        plugin["mcpServers"] = servers
    return plugin


def kit_servers(kit, client):
    """The file of `client`'s server entry in the kit."""
    return {"mcpServers": {KIT_NAME: CLIENTS[client].kit_server(kit)}}


def kit_hooks(*clients):
    """A hooks/hooks.json for `clients`, which read it from a plugin (Claude
    Code and Codex from the plugin's folder, Gemini CLI from the extension's,
    the kit's root): a SessionStart entry and the clients' stop entry, with no
    matcher (every source runs them; an alternation made Gemini 0.61.0 run
    nothing) and no timeout (Claude Code reads seconds, Gemini milliseconds;
    the command bounds itself)."""
    return lambda kit: hook_document(kit["hook_words"], clients,
                                     "The memprove Pack of the context's Task at every session "
                                     "start, and a request to record before a long silence ends")


def hook_document(words, clients, description=None, platform=PLATFORM):
    """The hooks of `clients` running `words` (the session-start hook's; the
    stop hook's are the same with `stop` for `session-start`): SessionStart,
    then each client's stop event (Stop, or Gemini CLI's AfterAgent)."""
    at = words.index("session-start")
    stop = words[:at] + ["stop"] + words[at + 1:]
    document = {"description": description} if description else {}
    document["hooks"] = {"SessionStart": [{"hooks": [hook_handler(words, clients, platform)]}]}
    for event in sorted(set(CLIENTS[name].hook_stop_event for name in clients)):
        document["hooks"][event] = [{"hooks": [hook_handler(stop, clients, platform)]}]
    return document


# How a hook handler names the command on Windows, where each client runs
# hooks its own way (its record's `hook_form` names one of these): with no
# shell when the handler has `args` (Claude Code; the one form that runs under
# Wine, whose PowerShell is a stub); through cmd.exe, from `commandWindows`
# (Codex); through PowerShell, where a quoted program needs the call operator
# (Gemini CLI).  Each form is written and read back in one place: the keys it
# writes from the words, and the words it reads from a handler (None: the
# shell would do more than run words; doctor vouches only for those, §6 rule
# 32).  Elsewhere every client runs `command` with POSIX sh (Codex: $SHELL -lc).
HOOK_FORMS = {
    "exec": (lambda words: {"command": words[0], "args": words[1:]},
             lambda handler: exec_words(handler)),
    "cmd": (lambda words: {"commandWindows": cmd_line(words)},
            lambda handler: cmd_words(handler.get("commandWindows") or handler.get("command"))),
    "powershell": (lambda words: {"command": "& " + " ".join(map(powershell_word, words))},
                   lambda handler: powershell_words(handler.get("command"))),
}


def exec_words(handler):
    """The words of a handler with `args`, run with no shell; one without is
    run in a shell (Claude Code's Git Bash), read as sh reads it."""
    command, args = handler.get("command"), handler.get("args")
    if args is None:
        return sh_words(command)
    if not isinstance(command, str) or not isinstance(args, list) or \
            not all(isinstance(arg, str) for arg in args):
        return None
    return [command] + args


def hook_handler(words, clients, platform=PLATFORM):
    """The handler that runs `words` for every one of `clients`: one command
    for POSIX sh, or on Windows each client's form (HOOK_FORMS) side by side,
    each client reading its own keys and leaving the others'.  Forms that
    would write one key two ways are never read from one file (each hooks
    file's clients are chosen so): that is a ValueError, not a silent choice."""
    handler = {"type": "command"}
    if PLATFORMS[platform]["hook_shell"] == "sh":
        handler["command"] = " ".join(sh_word(word) for word in words)
        return handler
    for form in sorted(set(CLIENTS[name].hook_form for name in clients)):
        for key, value in HOOK_FORMS[form][0](words).items():
            if handler.setdefault(key, value) != value:
                raise ValueError("the hook forms of %s disagree on %s" % (clients, key))
    handler.setdefault("command", handler.get("commandWindows"))
    return handler


def kit_readme(kit):
    return KIT_README.format(version=kit["version"], commands=kit["commands"])


KIT_README = """\
# memprove, as a plugin

This folder was written by `memprove_mcp.pyz mcp plugin` (version {version}) for
this machine: every entry names its interpreter by its path and the configuration
directory the server reads its token from (never the token). Claude Code and Codex
read the folder in place: keep it where it is. To update, write it again with the
same command, then run the update commands below.

{commands}"""


def kit_files():
    """(path parts, kit -> bytes) of every file of the kit: the marketplace
    Claude Code and Codex read, each client's own files, one hooks file for
    the clients that read it, the .pyz and the README."""
    files = [((".claude-plugin", "marketplace.json"), kit_marketplace)]
    hooks = {}
    for name, record in CLIENTS.items():
        files += list(record.kit_files)
        if record.kit_hooks:
            hooks.setdefault(record.kit_hooks, []).append(name)
    files += [(parts, kit_hooks(*names)) for parts, names in hooks.items()]
    files += [((KIT_NAME, KIT_ARCHIVE), lambda kit: kit["archive"]),
              ((KIT_NAME, "README.md"), lambda kit: kit_readme(kit).encode("utf-8"))]
    return [(parts, as_bytes(make)) for parts, make in files]


def as_bytes(make):
    """A kit file's maker that gives bytes: a document is written as JSON."""
    def made(kit):
        data = make(kit)
        return data if isinstance(data, bytes) else json_text(data).encode("utf-8")
    return made


def zip_bytes(entries):
    """A zip of (name, bytes) entries that is the same for the same entries on
    every Python and zlib: build_zipapp.py's fixed date, host and mode, and
    stored rather than deflated, as the .pyz is (deflate's output may change
    with the zlib a Python carries)."""
    import io
    import zipfile
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as bundle:
        for name, data in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = 0o644 << 16
            bundle.writestr(info, data)
    return buffer.getvalue()


def plugin(options):
    """Write the kit into options["folder"] and print how to install it."""
    folder = os.path.abspath(os.path.expanduser(options["folder"]))
    kit = kit_values(options, folder)
    refusal = kit_folder_refusal(folder)
    if refusal:
        raise Refusal(refusal)
    try:
        write_kit(kit, folder)
    except OSError as error:
        raise Refusal("the kit could not be written in %s (%s); nothing changed there."
                      % (shown_path(folder), error.strerror or "error"))
    write_stdout_bytes(kit["commands"].encode("utf-8"))
    token = os.path.join(kit["config_dir"], "token")
    without = [client.label for client in CLIENTS.values()
               if client.install and not client.kit_token_variables]
    if not os.path.isfile(token) and without:
        # The one place every client's server finds the token.
        sys.stderr.write("memprove-mcp: %s does not exist: put your token there (only you may "
                         "read it), or the kit's server has none under %s.\n"
                         % (shown_path(token), " or ".join(without)))
    return 0


def kit_values(options, folder):
    """What every file of the kit is made from; Refusal when it cannot be
    made here, or a value in it is one no client could read as written."""
    loader = globals().get("__loader__")
    if not getattr(loader, "archive", None):
        raise Refusal("mcp plugin copies the .pyz it runs from: run it as "
                      "`python3 memprove_mcp.pyz mcp plugin DIR`.")
    with open(loader.archive, "rb") as handle:
        archive = handle.read()
    config_dir = utf8_text(config_directory(options.get("config_dir"), os.environ))
    args = ["mcp", "serve", "--config-dir", config_dir]
    workspace = options.get("workspace")
    if workspace:
        args += ["--workspace", utf8_text(os.path.abspath(os.path.expanduser(workspace)))]
    kit = {"python": utf8_text(os.path.abspath(sys.executable)), "config_dir": config_dir,
           "args": args, "archive": archive, "folder": utf8_text(folder),
           "environ": dict(os.environ)}
    kit["hook_words"] = [kit["python"], os.path.join(kit["folder"], KIT_NAME, KIT_ARCHIVE),
                         "mcp", "hook", "session-start"] + args[2:]
    refusal = kit_value_refusal(kit, folder)
    if refusal:
        raise Refusal(refusal)
    kit["version"] = kit_version(kit)
    kit["commands"] = kit_commands(folder, kit["version"])
    return kit


def kit_version(kit):
    """The archive's version, and a digest of every other file that does not
    name the version: whatever changes in the kit, a client sees an update."""
    import hashlib
    digest = hashlib.sha256()
    for parts, make in kit_files():
        if parts[-1] in KIT_UNVERSIONED:
            digest.update("/".join(parts).encode("utf-8") + b"\0" + make(kit) + b"\0")
    return "%s.%s" % (archive_version(kit["archive"]), digest.hexdigest()[:8])


KIT_UNVERSIONED = (".mcp.json", "mcp.json", KIT_GEMINI_CONTEXT, "hooks.json")


def kit_value_refusal(kit, folder):
    """The line that refuses a value of the kit, or None."""
    for value in [kit["python"], kit["config_dir"]] + kit["args"] + [folder]:
        try:
            reject_surrogates(value)
        except ValueError:
            return "%s is not valid UTF-8; no client could read it." % shown_path(value)
        if shown_path(value) is not value:
            # §6 rules 29 and 33: no quoting keeps it on one line of the commands printed,
            # or shows what it hides.
            return ("%s holds a control character, a line break or a character that hides "
                    "text; use a path without it." % shown_path(value))
        held = cmd_expands([value], CLIENTS)
        if held:
            return cmd_refusal(*held)
        for name, client in CLIENTS.items():
            marker = next((marker for marker in client.kit_expands if marker in value), None)
            # The folder too: every client reads it in the hook's command.
            if marker:
                return expansion_refusal(name, value, marker)
    return None


def kit_folder_refusal(folder, platform=PLATFORM):
    """Why the kit may not be written into `folder`, or None (plugin.md): it
    must be where no one else can change it (§6 rule 25), and not exist, be
    empty, or hold only what a kit holds (§6 rule 26: writing the kit again
    replaces the folder whole, so nothing else may be in it)."""
    changeable = folder_others_can_change(folder, platform)
    if changeable:
        return ("%s: clients run the kit in place, so whoever can change it runs code as you; "
                "give a folder only you can change." % changeable)
    try:
        status = os.lstat(folder)
    except FileNotFoundError:
        return None
    except OSError:
        status = None
    import stat
    if status is None or not stat.S_ISDIR(status.st_mode):
        return "%s is not a folder the kit can be written into." % shown_path(folder)
    if not os.access(folder, os.W_OK) or not os.access(os.path.dirname(folder), os.W_OK):
        # Moving it aside would fail half-way (a folder's `..` is written when it moves).
        return "%s cannot be replaced: you may not write it or the folder it is in." % (
            shown_path(folder))
    other = not_of_a_kit(folder)
    if other:
        return ("%s holds %s, which no kit holds: give a new or empty folder, or one an "
                "earlier `mcp plugin` wrote." % (shown_path(folder), shown_path(other)))
    if os.listdir(folder) and not earlier_kit(folder):
        return ("%s holds another marketplace: give a new or empty folder, or one an earlier "
                "`mcp plugin` wrote." % shown_path(folder))
    return None


def earlier_kit(folder):
    """Whether `folder`'s marketplace names memprove."""
    try:
        data = read_regular(os.path.join(folder, ".claude-plugin", "marketplace.json"), 65536)[0]
        marketplace = load_json(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(marketplace, dict) and marketplace.get("name") == KIT_NAME


def folder_others_can_change(folder, platform=PLATFORM):
    """The first of `folder` (if it exists) and the folders above it that
    another user (not root) owns or that group or others can write (a
    sticky one like /tmp too: once the kit is gone, another user can make it
    again), said in words; None where the system has no POSIX modes."""
    places = list(path_and_parents(folder)) + list(path_and_parents(os.path.realpath(folder)))
    for place in places:
        try:
            status = os.stat(place)
        except OSError:
            continue                     # not made yet: `mcp plugin` makes it, as its own
        why = changed_by_others(status, platform, mode=place != folder)
        if why:
            return "%s %s" % (shown_path(place), why)
    return None


def not_of_a_kit(folder):
    """The first path in `folder` that is not a file or folder the kit
    writes, of the kind it writes it (links never are), or None."""
    import stat
    files = set(os.path.join(*parts) for parts, _ in kit_files())
    folders = set(os.path.dirname(name) for name in files) - {""}
    folders |= set(os.path.dirname(name) for name in folders) - {""}
    pending, seen = [""], 0
    while pending:
        relative = pending.pop()
        for name in os.listdir(os.path.join(folder, relative)):
            seen += 1
            path = os.path.join(relative, name)
            if seen > MAX_KIT_ENTRIES:
                return path
            mode = os.lstat(os.path.join(folder, path)).st_mode
            if stat.S_ISDIR(mode) and path in folders:
                pending.append(path)
            elif not (stat.S_ISREG(mode) and path in files):
                return os.path.join(folder, path)
    return None


def make_folders(path, mode):
    """os.makedirs(path), each folder it makes given `mode` whatever the umask."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for path in reversed(missing):
        os.mkdir(path, mode)
        os.chmod(path, mode)


def write_kit(kit, folder):
    """Write the kit beside `folder` and rename it into place, so that no
    client ever reads half a kit; an earlier kit (or an empty folder) is
    moved aside first and removed after."""
    import shutil
    import tempfile
    parent = os.path.dirname(folder)
    # Modes as any the user makes (mkdtemp's 0700 would hide the kit from the other users
    # of a workstation an administrator seeds it for), never writable by group or others,
    # whatever the umask: doctor fails a kit others can change (§6 rule 25), and under
    # Debian's umask 002 the folders made above it would make `mcp plugin` refuse its own
    # update (§6 rule 36).
    mask = os.umask(0o022)
    os.umask(mask)
    make_folders(parent, 0o755 & ~mask)
    fresh, old = tempfile.mkdtemp(prefix=".memprove-kit-", dir=parent), None
    try:
        for parts, make in kit_files():
            path = os.path.join(fresh, *parts)
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path), 0o755 & ~mask)
            with open(path, "wb") as handle:
                handle.write(make(kit))
            os.chmod(path, 0o644 & ~mask)
        for directory, folders, _ in os.walk(fresh):
            for name in folders:
                os.chmod(os.path.join(directory, name), 0o755 & ~mask)
        os.chmod(fresh, 0o755 & ~mask)
        if os.path.lexists(folder):
            old = tempfile.mkdtemp(prefix=".memprove-kit-old-", dir=parent)
            os.rename(folder, os.path.join(old, "kit"))
        try:
            os.rename(fresh, folder)
        except OSError:
            if old:
                os.rename(os.path.join(old, "kit"), folder)
            raise
    except BaseException:
        # §6 rule 26: a failed run leaves nothing of its own beside the folder.
        shutil.rmtree(fresh, ignore_errors=True)
        if old and not os.path.lexists(os.path.join(old, "kit")):
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old:
        shutil.rmtree(old, ignore_errors=True)


# What standard output says before the commands: this, then each kit client's
# `kit_notes`, then the closing lines, each paragraph wrapped to KIT_WIDTH.
KIT_OPENING = "The memprove kit, version {version}, is in {folder}."
KIT_CLOSING = ("Each session then starts with the Pack of the Task you work on (the kit's hook).",
               "To check it inside an agent: ask it to call the memprove tool `context`.")
KIT_WIDTH = 88


def kit_preface(version, folder):
    """The lines before the commands: what to expect of each kit client."""
    import textwrap
    paragraphs = [KIT_OPENING.format(version=version, folder=shown_path(folder))]
    paragraphs += [note for client in CLIENTS.values() for note in client.kit_notes]
    paragraphs += KIT_CLOSING
    return [line for paragraph in paragraphs for line in textwrap.wrap(
        paragraph, KIT_WIDTH, break_long_words=False, break_on_hyphens=False)] + [""]


def kit_commands(folder, version, platform=PLATFORM):
    """What standard output says after the kit is written: per client, the
    commands that install it (its record's), in the platform's shell, then
    those that make a client take a kit written again (Claude Code and Codex
    read the folder in place, Gemini CLI copies it) and those that remove it.
    {folder} and {bundle} are the kit's paths quoted for that shell, {open}
    the platform's opener; a client whose commands need one the platform lacks
    (Claude Desktop on Linux) is left out."""
    shell, separator = SHELLS[PLATFORMS[platform]["shell"]], PLATFORMS[platform]["separator"]
    paths = {"folder": shell_word(shell, folder),
             "bundle": shell_word(shell, folder.rstrip(separator) + separator + KIT_NAME + ".mcpb"),
             "open": PLATFORMS[platform]["opener"]}
    lines = kit_preface(version, folder)
    kit_clients = [client for client in CLIENTS.values() if client.install]
    for client in kit_clients:
        if "{open}" in "".join(client.install) and not paths["open"]:
            continue
        lines.append(client.label + ":")
        lines += ["  " + command.format(**paths) for command in client.install]
    lines.append("To update after writing the kit again:")
    lines += ["  " + command for client in kit_clients for command in client.update]
    lines.append("To remove it (then delete the folder):")
    lines += ["  " + command for client in kit_clients for command in client.remove]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# 16. The hooks: mcp hook session-start, mcp hook stop
# ---------------------------------------------------------------------------
# session-start.md: a client runs `mcp hook session-start` whenever a session
# starts, resumes, is cleared or compacted, and puts what it prints into the
# model's first request, so the Pack reaches the model whether or not it thinks
# of calling `pack`.  The hook speaks only when it has the Pack: any other
# outcome is silence on both streams and exit status 0 (Gemini shows standard
# error to the user and reads exit 2 as a refusal; every client drops a failing
# hook's output anyway), and doctor's `hook` check is where the user learns why.
# It runs the very code of a `pack` call with no arguments, a read alone.

HOOK_TEXT_LIMIT = 9000       # UTF-16 units: Claude Code moves a text over 10,000 to a file
HOOK_TIME = 2.5              # seconds of work: with the interpreter's start and exit, under 3
HOOK_MARGIN = 0.2            # of them kept for writing the answer
HOOK_INPUT = 64 * 1024       # bytes of the client's JSON worth reading
HOOK_INPUT_WAIT = 1.0        # seconds the client's JSON is waited for
# Bytes of a Capsule worth reading: json.loads of the 64 MiB a tool reads holds
# the interpreter lock for 1.5 s, past what the hook's bound leaves (§6 rule 34).
HOOK_BODY = 16 * 1024 * 1024
HOOK_TOO_LARGE = "The Pack is larger than a session start carries: call pack to read it."


def run_hook(options, event, decide, answer):
    """The frame every hook runs in: `decide(options, started, outcome)`
    fills `outcome` with the text to give ("text") and what happened ("log")
    within the hook's time, `answer(text)` is the JSON object printed; any
    other outcome is silence on both streams.  Exit 0 always."""
    started = time.monotonic()
    sys.stderr = open(os.devnull, "w")   # whatever goes wrong, standard error stays empty
    outcome = {}

    def work():
        try:
            decide(options, started, outcome)
        except Exception:
            record_internal_error(sys.exc_info())
            outcome["log"] = "internal_error"

    answered = finished_by(started + HOOK_TIME - HOOK_MARGIN, work)
    # Unanswered, the worker may still write to `outcome`: what is said is fixed here.
    said = dict(outcome) if answered else {
        "log": "no answer within %g s" % (HOOK_TIME - HOOK_MARGIN), "source": outcome.get("source")}
    if said.get("text"):
        try:
            write_stdout_bytes(json_bytes(answer(said["text"])) + b"\n")
        except (AttributeError, OSError, ValueError):    # no standard output, or closed
            said["log"] = "standard output closed"
    log_hook(event, said, started)
    # Leave at once: a read of standard input or a daemon exchange may still be waiting.
    leave_at_once()


def session_start_hook(options):
    """Print the Pack as the client's hook output, or nothing; exit 0 always."""
    run_hook(options, "session-start", hook_outcome, lambda text: {"hookSpecificOutput": {
        "hookEventName": "SessionStart", "additionalContext": text}})


def hook_outcome(options, started, outcome):
    """Fill `outcome` with the text to print ("text") and what happened ("log")."""
    given = hook_input(started + HOOK_INPUT_WAIT)
    outcome["source"] = given.get("source")
    call = hook_call(options, given, started)
    try:
        outcome["text"], outcome["log"] = session_start_text(call)
    except Problem as problem:
        outcome["log"] = problem.code


def hook_call(options, given, started):
    """The per-call object a hook reads with: the client's agent, the input's
    cwd as its roots, the hook's time left, HOOK_BODY bytes of an answer."""
    name = options.get("client") or hook_client(os.environ)
    call = Call(options, CLIENTS[name].agent if name else None, roots=given.get("cwd"))
    call.most = max(0.1, started + HOOK_TIME - HOOK_MARGIN - time.monotonic())
    call.most_body = HOOK_BODY
    return call


def hook_input(deadline, limit=HOOK_INPUT):
    """The client's JSON object on standard input ({"cwd", "source",
    "stop_hook_active"}), or {}: read to its end, within `limit` bytes and
    the deadline; an input not whole by then is {}."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return {}
    chunks = []

    def read():
        try:
            size = 0
            while size <= limit:
                chunk = stream.read1(limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except (OSError, ValueError):
            pass

    if not finished_by(deadline, read):
        return {}
    data = b"".join(chunks)
    if len(data) > limit:
        return {}
    try:
        given = load_json(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return {}
    if not isinstance(given, dict):
        return {}
    cwd, active = given.get("cwd"), given.get("stop_hook_active")
    return {"cwd": cwd if isinstance(cwd, str) and cwd and "\0" not in cwd else None,
            "source": given.get("source") if isinstance(given.get("source"), str) else None,
            "stop_hook_active": active if isinstance(active, bool) else None}


def finished_by(deadline, action):
    """Run `action()` in a thread of its own; whether it returned by `deadline`
    (time.monotonic()).  The thread, running or done, is left to the exit:
    done, it waits rather than ends (see Transport.finish)."""
    done = _thread.allocate_lock()
    done.acquire()

    def run():
        try:
            action()
        finally:
            done.release()
            never = _thread.allocate_lock()
            never.acquire()
            never.acquire()

    _thread.start_new_thread(run, ())
    return done.acquire(True, max(0.0, deadline - time.monotonic()))


def hook_client(environ):
    """The client running the hook, told by the variable it sets for its
    hooks, or None.  A variable every program started under the client
    inherits (its record's `hook_inherited`: Claude Code's CLAUDECODE, set in
    the shell where a user may start Codex or Gemini) is tried after the
    others."""
    order = sorted(CLIENT_NAMES, key=lambda name: CLIENTS[name].hook_inherited)
    return next((name for name in order if CLIENTS[name].hook_variable and
                 environ.get(CLIENTS[name].hook_variable)), None)


def session_start_text(call):
    """(text, what happened): what `pack` with no arguments shows, within
    HOOK_TEXT_LIMIT; a Pack that does not fit is rendered again at the
    largest budget that does, and where none does, the opening's count and
    HOOK_TOO_LARGE stand for it."""
    context = call.context()
    capsule = call.capsule(call.task_id(None, context))
    now = utc_now()
    opening, rendered = opened_pack(call, context, capsule, PACK_BUDGET, now=now)
    if utf16_len(opening) + 2 + rendered["units"] <= HOOK_TEXT_LIMIT:
        return opening + "\n\n" + rendered["pack"], "pack"
    room = HOOK_TEXT_LIMIT - utf16_len(opening) - 2
    low, high, best = 1, PACK_BUDGET - 1, None
    while low <= high:                   # the Pack grows with its budget
        budget = (low + high) // 2
        rendered = opened_pack(call, context, capsule, budget, now=now)[1]
        if rendered["units"] <= room:
            best, low = rendered, budget + 1
        else:
            high = budget - 1
    if best is not None:
        return opening + "\n\n" + best["pack"], "pack cut to fit"
    agent = call.agent(context)
    opening = opening_statement(capsule, now, agent["name"], agent["role"], open_item_count)
    text = opening + "\n\n" + HOOK_TOO_LARGE
    if utf16_len(text) > HOOK_TEXT_LIMIT:
        raise Problem("daemon_error", "The Task's title is longer than a session start carries.")
    return text, "pack too large"


def open_item_count(capsule):
    count = sum(1 for claim in capsule["claims"]
                if claim.get("kind") == "open_item" and claim.get("state") == "active")
    return "{:,} open item{} must be resolved or carried forward.".format(
        count, "" if count == 1 else "s") if count else "No open items."


def log_hook(event, outcome, started):
    """One line in MEMPROVE_MCP_LOG, where it is set: what the hook did."""
    source = outcome.get("source")
    append_to_log("%s memprove-mcp hook %s%s %s %dms\n" % (
        utc_now(), event, " source=%s" % (log_field(source) if source else "-")
        if event == "session-start" else "", outcome["log"],
        int((time.monotonic() - started) * 1000)))


# -- the stop hook: mcp hook stop ----------------------------------------------
# stop-hook.md: Claude Code and Codex run it when the agent is about to end
# its turn (Stop), Gemini CLI after each agent turn (AfterAgent); all three
# give the model one more turn when it answers {"decision":"block","reason":R}.
# It blocks only when the client says this stop is not one it caused
# (stop_hook_active false), the context's Session is open, its Task not done,
# and nothing was recorded for MEMPROVE_CHECKPOINT_MINUTES: the ledger keeps
# the time of the last record, so the hook keeps nothing.  R holds numbers
# only, never a text from the ledger: Claude Code tells the model to follow a
# hook's reason as the user's standing instruction.

STOP_INPUT = 1024 * 1024     # bytes: a stop's input carries the model's last message
CHECKPOINT_MINUTES = 30      # MEMPROVE_CHECKPOINT_MINUTES unset or unusable
MAX_CHECKPOINT_MINUTES = 1440
STOP_REASON = ("memprove: Session s%d of Task %d has recorded nothing in the ledger for %d "
               "minutes. Before you stop: if this work found a fact, opened or closed an open "
               "item, made a decision or changed the next action, record it with memprove's "
               "`checkpoint` (or `decide`). %s Then stop.")
REAFFIRM = "If nothing changed, call `checkpoint` reaffirming the next action c%d."
NO_NEXT_ACTION = "If nothing changed, call `checkpoint` with the next action."


def stop_hook(options):
    """Ask the model to record before it stops, or say nothing; exit 0 always."""
    run_hook(options, "stop", stop_outcome, lambda reason: {"decision": "block",
                                                            "reason": reason})


def checkpoint_minutes(environ):
    """MEMPROVE_CHECKPOINT_MINUTES: 0 (off), or a whole number of minutes, 1 to
    1440; unset or anything else is CHECKPOINT_MINUTES."""
    raw = environ.get("MEMPROVE_CHECKPOINT_MINUTES") or ""
    if raw == "0":
        return 0
    if DIGITS.match(raw) and raw[0] != "0" and len(raw) <= 4 and int(raw) <= MAX_CHECKPOINT_MINUTES:
        return int(raw)
    return CHECKPOINT_MINUTES            # "00", "+30", " 30", "3e1" ...: not a setting


def stop_outcome(options, started, outcome):
    """Fill `outcome` with the reason to block ("text") and what happened ("log")."""
    given = hook_input(started + HOOK_INPUT_WAIT, STOP_INPUT)
    if given.get("stop_hook_active") is not False:
        # Never twice in a row, and never without knowing this stop is not one it caused.
        outcome["log"] = "again" if given.get("stop_hook_active") else "input_unread"
        return
    minutes = checkpoint_minutes(os.environ)
    if not minutes:
        outcome["log"] = "off"
        return
    call = hook_call(options, given, started)
    try:
        context = call.context()
        task, session = context.get("task"), context.get("session")
        if not task or not session:
            outcome["log"] = "no_session"
            return
        capsule = call.capsule(task["id"])
        if capsule["task"].get("id") != task["id"]:
            raise Problem("daemon_error", "Its Capsule is another Task's.")
        outcome["text"], outcome["log"] = stop_reason(capsule, session["number"], minutes,
                                                      time.time())
    except Problem as problem:
        outcome["log"] = problem.code


def stop_reason(capsule, number, minutes, now):
    """(R, "blocked Nmin") when Session `number` of the Capsule is open, its
    Task not done, and its last record at least `minutes` before `now`;
    else (None, why not)."""
    held = [one for one in capsule["sessions"] if one.get("number") == number]
    if not held:
        return None, "no_session"
    if held[0].get("state") != "open" or capsule["task"].get("status") == "done":
        return None, "session_not_open" if held[0].get("state") != "open" else "task_done"
    last = last_record(capsule, held[0])
    if last is None:
        return None, "daemon_error"
    age = max(0, int((now - last) // 60))      # a daemon's clock ahead of ours: just now
    if age < minutes:
        return None, "recorded %dmin ago" % age
    active = [claim["number"] for claim in capsule["claims"]
              if claim.get("kind") == "next_action" and claim.get("state") == "active"]
    then = REAFFIRM % max(active) if active else NO_NEXT_ACTION
    return STOP_REASON % (number, capsule["task"]["number"], age, then), "blocked %dmin" % age


def last_record(capsule, session):
    """The time (seconds since the epoch) of the Session's last record: the
    latest `created_at` of its Claims, `reaffirmed_at` of any Claim of the
    Task (a reaffirmation keeps its Claim's first Session), or the Session's
    `started_at`; None when none can be read.  Runs do not count."""
    number = session.get("number")
    stamps = [session.get("started_at")]
    for claim in capsule["claims"]:
        if claim.get("session_number") == number:
            stamps.append(claim.get("created_at"))
        stamps.append(claim.get("reaffirmed_at"))
    times = [seconds for seconds in map(stamp_seconds, stamps) if seconds is not None]
    return max(times) if times else None


STAMP = Pattern(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z\Z")


def stamp_seconds(value):
    """Seconds since the epoch of a daemon's UTC time (§3's form), or None."""
    if not isinstance(value, str) or not STAMP.match(value):
        return None
    import calendar
    fields = (value[0:4], value[5:7], value[8:10], value[11:13], value[14:16], value[17:19])
    year, month, day, hour, minute, second = map(int, fields)
    if not (1 <= year and 1 <= month <= 12 and hour < 24 and minute < 60 and second < 61):
        return None
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    return calendar.timegm((year, month, day, hour, minute, second))


HOOKS = {"session-start": session_start_hook, "stop": stop_hook}


# ---------------------------------------------------------------------------
# 17. mcp doctor
# ---------------------------------------------------------------------------
# doctor.md: the whole path from shell to ledger, checked the way the next
# tool call will take it.  Every rule comes from the server's own functions
# (the configuration of section 8, the context files of section 9, the
# per-call object's daemon request) and the clients' records, so doctor and
# the server cannot disagree.  Each check returns a Check, or None where it
# does not apply to the client, and may note what it resolved on the
# Findings for a later check; a check whose inputs failed (the checks its row
# of DOCTOR_CHECKS needs) is `skip`, or says they failed.  Doctor writes no
# file, sends one read, and never shows the token: it is held only to be
# compared and sent.  Fix lines are written for the
# shell of the platform (SHELLS), with real paths.

NEWEST_TESTED = (3, 15)              # the newest Python this release was tested on
INTERPRETER = Pattern(r"(?i)(python|pypy|py)[0-9.]*w?(\.exe)?\Z")   # pythonw.exe, pyw.exe too


class Check(object):
    """What one doctor check found: `ok`, `warn`, `fail` or `skip`; the
    Problem's code or one of doctor's own (None for none); the detail; the
    fix (None: nothing to do)."""
    __slots__ = ("status", "code", "detail", "fix")

    def __init__(self, status, code, detail, fix=None):
        self.status, self.code, self.detail, self.fix = status, code, detail, fix


class Findings(object):
    """What doctor knows when a check runs: what it was asked, and what the
    checks before it found (None until one has)."""

    def __init__(self, options, environ, platform=PLATFORM):
        self.options = options                     # the command line's
        self.environ = environ                     # this shell's
        self.platform = platform
        self.shell = SHELLS[PLATFORMS[platform]["shell"]]
        self.client = options.get("client") or DEFAULT_CLIENT
        self.program = this_program()              # the .pyz doctor runs from
        self.server_environ = environ              # what the client starts a server with
        self.failed = set()                        # the names of the checks that failed
        self.unmet = []                            # those of them the running check needs
        self.config_dir = None                     # check_config_dir
        self.token = self.token_file = None        # check_token: the token, its file
        self.data_dir = None                       # check_data_dir
        self.root = self.task = None               # check_workspace: the root, the Task's number
        self.archive = None                        # the running .pyz's bytes, read once

    def where(self, root):
        """A copy that knows the Workspace root `root` (what a check before
        check_workspace looks with)."""
        import copy
        probe = copy.copy(self)
        probe.root = root
        return probe


def doctor(options, platform=PLATFORM):
    """Run the checks of doctor.md in order, print them; return the exit status."""
    found = Findings(options, dict(os.environ), platform)
    found.server_environ = server_environment(found)
    checks = []
    for name, check, needs in DOCTOR_CHECKS:
        found.unmet = [need for need in needs if need in found.failed]
        try:
            outcome = check(found)
            if outcome is None:          # a check that does not apply to this client
                continue
        except Exception as error:
            # A doctor that dies hides every later check; say which broke, never
            # the message (it could hold a value).
            outcome = Check("fail", "internal_error", "the check failed unexpectedly (%s)"
                            % type(error).__name__, "report this as a bug in mcp doctor")
        if outcome.status == "fail":
            found.failed.add(name)
        checks.append({"name": name, "status": outcome.status, "code": outcome.code,
                       "detail": one_line(without_token(outcome.detail, found)),
                       "fix": one_line(without_token(outcome.fix, found))})
    failed = any(check["status"] == "fail" for check in checks)
    if options.get("json"):
        text = json_text({"ok": not failed, "checks": checks})
    else:
        text = "".join(doctor_lines(checks))
    # backslashreplace: a path that is not UTF-8 shows as \udcXX, which is still JSON.
    write_stdout_bytes(text.encode("utf-8", "backslashreplace"))
    return 1 if failed else 0


def server_environment(found):
    """The environment the client starts this server with (its `passes`), from
    this shell's and the memprove entry's, or print-config's entry where it
    has none yet: what the token, data directory and Workspace are judged in."""
    name, shell = found.client, found.environ
    record = CLIENTS[name]
    workspace = found.options.get("workspace")
    probe = found.where(find_workspace(shell, workspace).root)
    try:
        entry = find_client_entry(name, probe)[1] or find_kit_entry(name, probe)[1]
    except Exception:                    # the client check says what is wrong with it
        entry = None
    if entry:
        entry_env = dict((key, value) for key, value in entry["env"].items()
                         if isinstance(value, str))
        names = [value for key, value in entry["keyed"] if key == "env_vars" and
                 isinstance(value, str)]
    else:
        # The entry the fix will write: print-config's environment, and its env_vars only
        # where the fix is print-config's (a client's own add command writes none).
        entry_env = dict(record.env(shell, workspace) if record.env else [])
        names = () if record.adds else SHELL_VARIABLES
    passed = record.passes(shell, entry_env, names)
    # The configuration directory is the one doctor is asked about (the client check says
    # when the entry names another): resolved as in this shell.
    for variable in ("MEMPROVE_CONFIG_DIR", "XDG_CONFIG_HOME", "APPDATA"):
        passed.pop(variable, None)
        if shell.get(variable):
            passed[variable] = shell[variable]
    return passed


def doctor_lines(checks):
    for check in checks:
        yield "%-4s  %-10s  %s\n" % (check["status"], check["name"], check["detail"])
        if check["fix"] is not None:
            yield "      fix: %s\n" % check["fix"]


def one_line(text):
    """The last guard of one line per value (§6 rule 23), as without_token is
    of the token: every value is shown through shown_path where it is put
    into a line, and a line that still holds a control is shown whole
    JSON-quoted rather than printed as it is."""
    return text if text is None else shown_path(text)


def without_token(text, found):
    """The last guard of "never the token": a value read from a file the user
    wrote (daemon.json's url, a client entry) could hold it."""
    token = found.token
    if text is None or not token or token not in text:
        return text
    return "(not shown: it would contain the token)"


# -- fix lines, in the platform's shell -----------------------------------------

def fix(found, template, **values):
    """A line of the platform's shell: SHELLS' `template` with each value
    quoted as that shell quotes it (a name is inserted as it is)."""
    shell = found.shell
    quoted = dict((key, value if key == "name" else shell_word(shell, value))
                  for key, value in values.items())
    return shell[template].format(**quoted)


def example(found, what):
    return found.shell["examples"][what]


def doctor_command(found, *words, **python):
    """This very program with `words`, as a line to paste into the shell;
    `python` names another interpreter (a command name, used as it is)."""
    shell = found.shell
    interpreter = python.get("python") or shell["python"] or shell_word(shell, sys.executable)
    line = shell["run"].format(python=interpreter, program=shell_word(shell, found.program))
    return " ".join([line] + [shell_word(shell, word) for word in words])


def print_config_line(found):
    """The print-config line that writes the entry this doctor expects."""
    options = found.options
    words = ["mcp", "print-config"]
    if options.get("client"):
        words += ["--client", options["client"]]
    if options.get("config_dir"):
        words += ["--config-dir", found.config_dir]
    return doctor_command(found, *words)


def add_entry_line(found, name):
    """The fix for a missing entry: the client's own command that adds it, so
    that doctor then finds it; for a client without one, the print-config
    line and the file its entry goes in."""
    adds = CLIENTS[name].adds
    if adds is None:
        base, parts, _ = next(place for place in CLIENTS[name].places(found.platform)
                              if place[1] != CLIENTS[name].block_folder)
        path = place_path(base, parts, found.environ, found.root, found.platform)
        return "%s, and put what it prints in %s" % (print_config_line(found),
                                                     shown_path(path or "the client's file"))
    python = os.path.abspath(sys.executable)
    words = adds(python, found.program, found.config_dir, found.environ)
    return " ".join(shell_word(found.shell, word) for word in words)


# -- the checks, in doctor.md's order -----------------------------------------

def check_python(found):
    import platform
    detail = "%s; Python %s (%s) at %s%s, bytecode: %s" % (
        running_build(found), platform.python_version(), platform.python_implementation(),
        shown_path(sys.executable),
        interpreter_origin(found), globals().get("BYTECODE_ORIGIN") or "source")
    if sys.version_info[:2] > NEWEST_TESTED:
        newest = "%d.%d" % NEWEST_TESTED
        python = PLATFORMS[found.platform]["versioned_python"].format(newest)
        return Check("warn", None, detail + ", newer than the newest this release was tested on (%s)"
                % newest, doctor_command(found, "mcp", "print-config", "--python", python=python))
    return Check("ok", None, detail, None)


def running_build(found):
    """Which memprove-mcp runs: the version and, from an archive, its SHA-256,
    of the bytes doctor reads once and compares a kit's copy with."""
    if not getattr(globals().get("__loader__"), "archive", None):
        return "memprove-mcp %s run from its source, not an archive" % VERSION
    try:
        digest = archive_sum(running_archive(found))
    except OSError as error:
        return "memprove-mcp %s, its archive unreadable (%s)" % (VERSION, unreadable_archive(error))
    return "memprove-mcp %s, archive sha256 %s" % (VERSION, digest)


def interpreter_origin(found):
    """Where the interpreter came from, and on macOS which one a client
    started from the Dock would run a .pyz entry with: such a client gives
    its servers the system PATH, whose python3 is the Command Line Tools'."""
    import shutil
    on_path = shutil.which("python3", path=found.environ.get("PATH") or os.defpath)
    same = on_path is not None and os.path.realpath(on_path) == os.path.realpath(sys.executable)
    origin = " (python3 on PATH)" if same else ""
    system_path = PLATFORMS[found.platform]["system_path"]
    if system_path:
        dock = shutil.which("python3", path=system_path)
        origin += "; a client started from the Dock runs a .pyz entry with %s (PATH %s)" % (
            shown_path(dock or "no python3"), system_path)
    return origin


def check_environment(found):
    """Only when there is something to say: a MEMPROVE_MCP_LOG the server and
    the hook will not write (§6 rule 35)."""
    value = found.server_environ.get("MEMPROVE_MCP_LOG")
    if not value:
        return None
    remedy = fix(found, "set", name="MEMPROVE_MCP_LOG", value=example(found, "log"))
    if not log_path(found.server_environ, found.platform):
        return Check("warn", None, "MEMPROVE_MCP_LOG is %s, a relative path, so nothing is logged: "
                "it would land in whatever project a client starts in" % shown_path(value), remedy)
    try:
        status = os.lstat(value)
    except OSError:
        if os.path.isdir(os.path.dirname(value)):
            return None                  # made by the first line written
        return Check("warn", None, "MEMPROVE_MCP_LOG names %s, whose folder does not exist, so "
                "nothing is logged" % shown_path(value), remedy)
    if is_link(status) or not appendable(status):
        return Check("warn", None, "MEMPROVE_MCP_LOG names %s, which is not a regular file of yours "
                "with one name (a link, a hard link, a FIFO, a folder, a device or another "
                "user's file), so nothing is logged" % shown_path(value), remedy)
    return None


def check_config_dir(found):
    directory, source = config_directory(found.options.get("config_dir"),
                                         found.server_environ, True, found.platform)
    found.config_dir = directory
    detail = "%s (from %s)" % (shown_path(directory), source)
    if not os.path.isdir(directory):
        return Check("warn", None, detail + " does not exist", fix(found, "mkdir", path=directory))
    environ = found.server_environ
    read = [name for name, used in (("token", token_source(environ, directory)[0] == "config"),
                                    ("data-dir", not environ.get("MEMPROVE_DATA_DIR"))) if used]
    doubt = config_dir_doubt(directory, read, found.platform)
    if doubt:
        # §6 rule 31: whoever can write data-dir or token chooses where the token goes.
        why, path = doubt.sentence, doubt.path
        if doubt.chmod and path:
            remedy = fix(found, "private_folder" if path == directory else
                         "unshared" if os.path.isdir(path) else "private", path=path)
        else:                            # another's, or a folder above: a directory of your own
            private = os.path.join(home_directory(found.environ, found.platform), ".config",
                                   "memprove")
            remedy = "use a configuration directory only you can change: %s, then %s" % (
                fix(found, "mkdir", path=private),
                fix(found, "set", name="MEMPROVE_CONFIG_DIR", value=private))
        return Check("fail", "config_dir_unsafe", "%s is not believed, so what it holds counts as "
                "absent: %s" % (detail, why[0].lower() + why[1:]), remedy)
    return Check("ok", None, detail, None)


def check_token(found):
    environ, config_dir = found.server_environ, found.config_dir
    source, path = token_source(environ, config_dir)
    where = source if path is None else "%s (%s)" % (source, shown_path(path))
    try:
        token, too_open = read_token(environ, config_dir, found.platform)
    except Problem as problem:
        return Check("fail", problem.code, *token_failure(found, problem, source, path, where))
    found.token, found.token_file = token, path
    if too_open:
        return Check("warn", None, "from %s, well formed, but the file is open to group or others"
                % where, fix(found, "private", path=path))
    return Check("ok", None, "from %s, well formed" % where, None)


def token_failure(found, problem, source, path, where):
    """(detail, fix) of a token that cannot be used; never a word of the token."""
    own_file = os.path.join(found.config_dir, "token")
    point_at_file = fix(found, "set", name="MEMPROVE_TOKEN_FILE", value=example(found, "token"))
    if problem.code == "token_malformed":
        remedy = ("%s, and put the token on one line in %s" % (
            fix(found, "unset", name="MEMPROVE_TOKEN"), shown_path(own_file))
            if path is None else "write the token again, alone on the first line of %s"
            % shown_path(path))
        return ("the token from %s has white space or a character outside printable ASCII"
                % where, remedy)
    dropped = [name for name in ("MEMPROVE_TOKEN", "MEMPROVE_TOKEN_FILE")
               if found.environ.get(name) and not found.server_environ.get(name)]
    if source is None and dropped:
        # Set in this shell, but the client does not pass it on: the file works for every client.
        private = found.shell["private"] and fix(found, "private", path=own_file)
        return ("%s is set in this shell, but %s does not pass it to its servers, and %s does "
                "not exist" % (" and ".join(dropped), found.client, shown_path(own_file)),
                "write the token into %s%s" % (shown_path(own_file),
                                               ", then: " + private if private else ""))
    if source is None:
        return ("not set: MEMPROVE_TOKEN and MEMPROVE_TOKEN_FILE are empty and %s does not exist"
                % shown_path(own_file), point_at_file)
    if path is None:
        return "MEMPROVE_TOKEN holds only white space", fix(found, "unset", name="MEMPROVE_TOKEN")
    reason = {TOKEN_EMPTY: "is empty", TOKEN_UNREADABLE: "cannot be read"}.get(
        problem.hint) or "is not believed: " + problem.hint[0].lower() + problem.hint[1:]
    if source == "MEMPROVE_TOKEN_FILE":
        return "MEMPROVE_TOKEN_FILE names %s, which %s" % (shown_path(path), reason), point_at_file
    private = found.shell["private"] and fix(found, "private", path=path)
    return "%s %s" % (shown_path(path), reason), "write the token into %s%s" % (
        shown_path(path), ", then: " + private if private else "")


def check_data_dir(found):
    environ, config_dir = found.server_environ, found.config_dir
    set_it = fix(found, "set", name="MEMPROVE_DATA_DIR", value=example(found, "data_dir"))
    try:
        data_dir, source = data_directory(environ, config_dir)
    except Problem as problem:
        named = os.path.join(config_dir, "data-dir")
        if found.environ.get("MEMPROVE_DATA_DIR"):
            # Set in this shell, but the client does not pass it on: the file works for all.
            return Check("fail", "data_dir_missing", "MEMPROVE_DATA_DIR is set in this shell, but %s "
                    "does not pass it to its servers, and %s names none" % (
                        found.client, shown_path(named)),
                    fix(found, "write", value=found.environ["MEMPROVE_DATA_DIR"], path=named))
        if problem.hint:                 # §6 rule 31: there, but not believed
            return Check("fail", "data_dir_missing", "%s is not believed: %s" % (
                shown_path(named), problem.hint[0].lower() + problem.hint[1:]),
                "see the fix of the config_dir check above")
        return Check("fail", "data_dir_missing", "not set: MEMPROVE_DATA_DIR is empty and %s names none"
                % shown_path(named), set_it)
    found.data_dir = data_dir
    detail = "%s (from %s)" % (shown_path(data_dir), source)
    if not os.path.isdir(data_dir):
        remedy = set_it if source != "config" else fix(
            found, "write", value=example(found, "data_dir"),
            path=os.path.join(config_dir, "data-dir"))
        return Check("fail", "data_dir_missing", detail + " is not a directory", remedy)
    return Check("ok", None, detail, None)


def check_workspace(found):
    warnings = []
    # As the per-call object finds it; doctor has no client, so no roots.
    workspace = find_workspace(found.server_environ, found.options.get("workspace"), None,
                               warnings)
    ignored = "".join(", %s (ignored)" % warning for warning in warnings)
    project = example(found, "project")
    elsewhere = "cd %s, or give it: --workspace %s" % (project, project)
    if workspace.problem:
        return Check("fail", workspace.problem, "%s (found by %s)%s cannot be used: it does not exist, "
                "is not a directory, or its path is not UTF-8"
                % (shown_path(workspace.root or "the start directory"), workspace.found_by, ignored),
                elsewhere)
    root = found.root = workspace.root
    detail = "%s (found by %s)%s" % (shown_path(root), workspace.found_by, ignored)
    if not workspace.marked and marker_owned(os.path.join(root, ".memprove")) is not False:
        return Check("warn", None, detail + ", no .memprove/ yet (the first `begin` makes it)",
                "call `begin` from your agent in %s" % shown_path(root))
    context, error = read_context(root)
    if error:
        path = os.path.join(root, ".memprove", "context.json")
        whose = "another Workspace's context" if error.code == "context_foreign" else \
            "its context cannot be read"
        if error.hint == FOREIGN_DIRECTORY:
            remedy = elsewhere             # theirs to remove, not ours
        elif error.hint:
            remedy = "remove what the detail names from %s" % shown_path(
                os.path.join(root, ".memprove"))
        else:
            remedy = "call `begin` from your agent (it moves the file aside), or: " + \
                fix(found, "move", path=path, target=path + ".bad")
        return Check("fail", error.code, "%s, but %s%s" % (
            detail, whose, ": " + error.hint if error.hint else ""), remedy)
    task, session = context.get("task"), context.get("session")
    found.task = task["number"] if task else None
    return Check("ok", None, "%s, .memprove/ present, %s, %s, %d runs in runs.jsonl" % (
        detail, "Task %d" % task["number"] if task else "no Task",
        "Session %d" % session["number"] if session else "no Session",
        sum(1 for _ in each_run(root))), None)


DAEMON_FIXES = {
    "daemon_unavailable": "start the memprove daemon (its daemon.json may be left from one that stopped)",
    "daemon_address_refused": "daemon.json must name http://127.0.0.1:<port>; restart the memprove daemon",
    "daemon_timeout": "restart the memprove daemon, or give it longer: {longer}",
    "daemon_error": "restart the memprove daemon and read its log",
    "unauthenticated": "the daemon does not know this token: use one it issued",
    "token_revoked": "the token was revoked: get a new one from the daemon",
    "scope_missing": "the token lacks the scope mcp-read: get one with mcp-read and mcp-write",
}


def check_daemon(found):
    # A context file that cannot be read leaves the Workspace usable (`begin`
    # still works), so only a Workspace without a root stops the request.
    missing = found.unmet + (["workspace"] if found.root is None else [])
    if missing:
        return Check("skip", None, "not tried: the %s check failed" % " and ".join(missing), None)
    try:
        url = shown_path(read_daemon(found.data_dir, found.platform)[0])
    except Problem as problem:
        if problem.hint:
            return Check("fail", problem.code, *untrusted_daemon(found, problem.hint))
        return Check("fail", problem.code, "no readable daemon.json in %s: the daemon is not running"
                % shown_path(found.data_dir), DAEMON_FIXES[problem.code])
    # The per-call object resolves and sends exactly as a tool call does: one
    # listTasks, a read, never retried, bounded by MEMPROVE_TIMEOUT.
    call = Call(found.options, None, environ=found.server_environ)
    try:
        answer = call.send("listTasks", query={"workspace": call.root})
        tasks = records(answer, "tasks", TASK_FIELDS)
    except Problem as problem:
        seconds = timeout_setting(found.server_environ) or DEFAULT_TIMEOUT
        detail = "%s: %s" % (url, {
            "daemon_unavailable": "nobody answers there",
            "daemon_timeout": "no answer to listTasks within %g s" % seconds,
        }.get(problem.code, "listTasks answered %s" % problem.code))
        remedy = DAEMON_FIXES.get(problem.code, "see the Problem codes in the README's "
                                  "Troubleshooting").format(
            longer=fix(found, "set", name="MEMPROVE_TIMEOUT", value="30"))
        if problem.hint == FOREIGN_LISTENER:
            # §6 rule 17: the daemon stopped, and another user took its port.
            detail = "%s: another user listens there, so the token was not sent" % url
            remedy = DAEMON_FIXES["daemon_unavailable"]
        elif problem.code == "daemon_unavailable" and problem.hint:
            detail, remedy = untrusted_daemon(found, problem.hint)  # §6 rule 19, seen listening
        if problem.code in ("unauthenticated", "token_revoked"):
            remedy += (", and put it in %s" % shown_path(found.token_file)
                       if found.token_file
                       else ": " + fix(found, "set", name="MEMPROVE_TOKEN", value="<the new token>"))
        return Check("fail", problem.code, detail, remedy)
    return Check("ok", None, "%s answered listTasks for this Workspace: %d Task%s" % (
        url, len(tasks), "" if len(tasks) == 1 else "s"))


def untrusted_daemon(found, hint):
    """(detail, fix) of a daemon.json that is not to be believed (§6 rule 19):
    whoever could write it chose where the token would go."""
    path = os.path.join(found.data_dir, "daemon.json")
    private = os.path.join(home_directory(found.environ, found.platform), ".local",
                           "share", "memprove")
    detail = "%s is not believed, so the token was not sent: %s" % (
        shown_path(path), hint[0].lower() + hint[1:])
    remedy = "start the memprove daemon with a data directory of your own (%s), then %s" % (
        fix(found, "mkdir", path=private),
        fix(found, "set", name="MEMPROVE_DATA_DIR", value=private))
    return detail, remedy


def check_client(found):
    name = found.client
    try:
        place, entry, looked = find_client_entry(name, found)
        if entry is None:
            place, entry = find_kit_entry(name, found)
    except Refusal as refusal:
        return Check("warn", None, "the memprove entry in %s cannot be read: %s" % (
            refusal.place, refusal.line), "write it as print-config prints it: %s" %
            print_config_line(found))
    if entry is None:
        kit = " or a plugin kit" if CLIENTS[name].find_kit else ""
        return Check("warn", None, "no memprove entry for %s in %s%s" % (
            name, ", ".join(looked), kit), add_entry_line(found, name))
    holder = token_holder(entry, found.token)
    if holder:
        token_file = os.path.join(found.config_dir, "token")
        private = " (%s)" % fix(found, "private", path=token_file) \
            if found.shell["private"] else ""
        return Check("fail", "token_in_client_config", "the memprove entry in %s holds a token (%s)"
                % (place, holder), "remove it: the token belongs in %s%s; the entry to use "
                "instead: %s" % (shown_path(token_file), private, print_config_line(found)))
    if "kit" in entry and entry["kit"]["disabled"]:
        return disabled_kit(place, entry)     # not run, so not checked further
    loader = next((key for key in entry["env"] if key in LOADER_VARIABLES or
                   key.startswith("DYLD_")), None)
    if loader:
        # §6 rule 25: the variable makes the interpreter or the loader run other code.
        return Check("fail", "client_entry_unsafe", "the memprove entry in %s sets %s, which makes "
                "the server run other code" % (place, shown_name(loader)),
                "remove %s from the entry's env, or write it again: %s" % (
                    shown_name(loader), print_config_line(found) if "kit" not in entry else
                    kit_update_line(found, name, entry["kit"]["folder"])))
    if "kit" in entry:
        # The folder the client runs it from, and the .pyz its entry names (Codex's names
        # the kit's own, outside Codex's copy).
        changeable = kit_changeable(entry["kit"]["plugin"], found.platform) or \
            kit_changeable(entry_program(entry), found.platform)
        if changeable:
            return Check("fail", "client_entry_unsafe", "the memprove entry in %s comes from a kit "
                    "others can change: %s" % (place, changeable),
                    "write the kit again into a folder only you can change: %s" % (
                        doctor_command(found, "mcp", "plugin", example(found, "kit"))))
    command = entry["command"]
    if not command or not command_exists(command, found.environ):
        return Check("fail", "client_command_missing", "the memprove entry in %s runs %s, which does "
                "not exist" % (place, shown_path(command or "no command")), print_config_line(found))
    interpreter = INTERPRETER.match(os.path.basename(command))
    if not interpreter and PLATFORMS[found.platform]["interpreter_first"] and \
            command.lower().endswith(".pyz"):
        return Check("fail", "client_command_missing", "the memprove entry in %s runs %s itself, "
                "which Windows cannot start: it must name the interpreter" % (
                    place, shown_path(command)),
                print_config_line(found))
    program = entry_program(entry)
    if interpreter and not os.path.exists(program):
        return Check("fail", "client_command_missing", "the memprove entry in %s runs %s, which does "
                "not exist" % (place, shown_path(program)), print_config_line(found))
    if "kit" in entry:
        stale = stale_kit(found, name, place, entry, program)
        if stale:
            return stale
    elif os.path.realpath(os.path.expanduser(program)) != os.path.realpath(found.program):
        return Check("warn", None, "the memprove entry in %s runs another copy of the server: %s"
                % (place, shown_path(program)), print_config_line(found))
    config_dir = entry_config_dir(entry)
    if config_dir is not None and \
            os.path.abspath(os.path.expanduser(config_dir)) != found.config_dir:
        return Check("warn", None, "the memprove entry in %s uses the configuration directory %s"
                % (place, shown_path(config_dir)), print_config_line(found))
    copy = ", version %s" % archive_version(running_archive(found)) \
        if "kit" in entry else ""
    return Check("ok", None, "the memprove entry in %s runs this server%s" % (place, copy), None)


def check_hook(found):
    """Whether the client runs the two hooks, and whether the session-start
    hook would give the Pack now or stay silent (and why), with the stop
    hook's minutes in force: the hooks say nothing to the model when they
    cannot, so this is where the user learns of it.  Only handlers that run
    this server's hook and nothing else are vouched for (§6 rule 32).  It
    sends no request: the daemon check's is the one doctor makes."""
    name = found.client
    if not CLIENTS[name].hook_variable:
        return None
    start, stop = find_hooks(name, found, "session-start"), find_hooks(name, found, "stop")
    print_hook = doctor_command(found, "mcp", "print-config", "--hook", "--client", name)
    if not start:
        return Check("warn", None, "%s runs no memprove session-start hook: a session starts "
                     "without the Pack unless the model calls pack" % name,
                     "write the plugin kit (%s) or add the hooks: %s" % (
                         doctor_command(found, "mcp", "plugin", "<folder>"), print_hook))
    for event, hooks in (("session-start", start), ("stop", stop)):
        for place, handler, kit in hooks:
            runs = foreign_hook(handler, name, found, kit, event)
            if runs:
                return Check("warn", None, "the %s hook in %s runs %s, not this server's hook "
                             "alone" % (event, place, runs),
                             "remove that handler; the hooks to use: %s" % print_hook)
    place, handler, kit = start[0]
    if kit and kit.get("disabled"):
        disabled = kit["disabled"]
        return Check("warn", None, "the session-start hook in %s is %s" % (place, disabled[0]),
                     disabled[1])
    distrust = CLIENTS[name].hook_distrust
    untrusted = distrust and kit and distrust(found, kit, [(event, hooks[0][1]) for event, hooks
                                                          in (("session-start", start),
                                                              ("stop", stop))
                                                          if hooks and hooks[0][2]])
    if untrusted:
        return Check("warn", None, "the hooks in %s %s" % (place, untrusted[0]), untrusted[1])
    why = found.unmet
    if why:
        return Check("warn", None, "%s runs the hook in %s, but it would stay silent: the %s "
                     "check%s failed" % (name, place, " and ".join(why),
                                         "s" if len(why) > 1 else ""),
                     "see the fix of the %s check above" % why[0])
    if not found.task:
        return Check("warn", None, "%s runs the hook in %s, but it stays silent until the "
                     "context names a Task" % (name, place),
                     "call `begin` from your agent in %s" % shown_path(found.root or "the project"))
    if not stop:
        return Check("warn", None, "%s runs the session-start hook in %s, but no stop hook: "
                     "what an agent finds is recorded only when it thinks of it" % (name, place),
                     "write the plugin kit again, or add the hooks: %s" % print_hook)
    minutes = checkpoint_minutes(found.environ)
    asked = "after %d minutes without a record, the agent is asked to record before it stops" \
        % minutes if minutes else "the stop hook is off (MEMPROVE_CHECKPOINT_MINUTES=0)"
    return Check("ok", None, "%s runs the hooks in %s: the next session starts with the Pack of "
                 "Task %d; %s" % (name, place, found.task, asked))


def find_hooks(name, found, event):
    """[(where, handler, kit)] of every memprove handler of `event` (a word of
    HOOK_EVENTS) client `name` runs: its own files' (the repository's named
    as such), then its kit's hooks/hooks.json (`kit`: what its record's
    find_kit found; None for its own files)."""
    key = "SessionStart" if event == "session-start" else CLIENTS[name].hook_stop_event
    hooks = []
    for base, parts in CLIENTS[name].hook_files:
        path = place_path(base, parts, found.environ, found.root, found.platform)
        where = ("the repository's %s" if base == "root" else "%s") % shown_path(path or "")
        for handler in hook_handlers(small_json(path) if path else None, key, event):
            hooks.append((where, handler, None))
    kit = CLIENTS[name].find_kit(found) if CLIENTS[name].find_kit else None
    if kit is not None:
        path = os.path.join(kit["plugin"], "hooks", "hooks.json")
        for handler in hook_handlers(small_json(path), key, event):
            hooks.append(("%s (from a plugin kit)" % shown_path(path), handler, kit))
    return hooks


def hook_handlers(document, key, event):
    """The handlers of a hooks document's `key` entries that name `mcp hook
    EVENT`: in their command, its arguments (the form with no shell) or
    Codex's Windows command."""
    hooks = document.get("hooks") if isinstance(document, dict) else None
    entries = hooks.get(key) if isinstance(hooks, dict) else None
    found = []
    for entry in entries if isinstance(entries, list) else ():
        for hook in (entry.get("hooks") if isinstance(entry, dict) else None) or ():
            if not isinstance(hook, dict):
                continue
            args = hook.get("args") if isinstance(hook.get("args"), list) else []
            words = [hook.get("command"), hook.get("commandWindows")] + args
            if "mcp hook " + event in " ".join(word for word in words if isinstance(word, str)):
                found.append(hook)
    return found


HOOK_OPTIONS = ("--config-dir", "--workspace", "--client")


def foreign_hook(handler, name, found, kit=None, event="session-start"):
    """What `handler` runs, in words, when it is not exactly this server's
    hook (§6 rule 32); None when it is: read as the shell client `name` runs
    it with on the platform reads it, its words are an interpreter that
    exists, a .pyz with this archive's bytes (or the kit's own copy, which
    the client check compares), then `mcp hook session-start` and only the
    options that command takes."""
    words = hook_words(handler, name, found.platform)
    shown = shown_path(" ".join(str(word) for word in
                                [handler.get("command")] + list(handler.get("args") or ())
                                if word is not None)[:200])
    if words is None:
        return "%s, which its shell would not read as plain words" % shown
    base = ntpath_or_posixpath(found.platform).basename
    if len(words) < 5 or words[2:5] != ["mcp", "hook", event] or \
            not INTERPRETER.match(base(words[0])):
        return shown
    if not program_exists(words[0], found.environ, found.platform):
        return "%s, whose interpreter does not exist or is not named by an absolute path" % shown
    if not is_absolute(words[1], found.platform):
        return "%s, whose .pyz is not named by an absolute path" % shown
    rest = words[5:]
    for index in range(0, len(rest), 2):
        option, value = rest[index], rest[index + 1:index + 2]
        if option not in HOOK_OPTIONS or not value or \
                option == "--client" and value[0] not in CLIENT_NAMES:
            return shown
    program = words[1]
    own_copy = kit and isinstance(kit.get("folder"), str) and \
        os.path.abspath(program) == os.path.join(os.path.abspath(kit["folder"]), KIT_NAME,
                                                 KIT_ARCHIVE)
    try:
        same = read_regular(program, MAX_ARCHIVE + 1)[0] == running_archive(found)
    except (OSError, ValueError):
        return "%s, whose .pyz is missing or not a regular file" % shown
    if not same and not own_copy:
        return "%s, whose .pyz is not this server" % shown
    return None


def program_exists(program, environ, platform=PLATFORM):
    """Whether `program` is a file named by an absolute path, or (where the
    shell is sh) a bare name PATH resolves to one: a relative path, or a name
    cmd.exe would look for in the working directory first, runs whatever the
    repository the client starts in holds."""
    if is_absolute(program, platform):
        return os.path.isfile(program)
    if os.path.dirname(program) or "=" in program or \
            PLATFORMS[platform]["hook_shell"] != "sh":
        return False
    import shutil
    found = shutil.which(program, path=environ.get("PATH"))
    return found is not None and os.path.isabs(found)


def ntpath_or_posixpath(platform=PLATFORM):
    """The os.path of `platform`: ntpath reads both separators of a Windows path."""
    if PLATFORMS[platform]["drive_letters"]:
        import ntpath
        return ntpath
    import posixpath
    return posixpath


def is_absolute(path, platform=PLATFORM):
    """Whether `path` is absolute on `platform` (a drive and a root on Windows)."""
    if PLATFORMS[platform]["drive_letters"]:
        import ntpath
        drive, rest = ntpath.splitdrive(path)
        return bool(drive) and rest[:1] in ("\\", "/")
    return path.startswith("/")


def hook_words(handler, name, platform=PLATFORM):
    """The words of a hook handler as the shell client `name` runs it with on
    `platform` reads them (POSIX sh; on Windows the form of HOOK_FORMS the
    client reads), or None when that shell would do more than run words:
    an operator, an expansion, a redirection or a glob."""
    if PLATFORMS[platform]["hook_shell"] == "sh":
        return sh_words(handler.get("command"))
    return HOOK_FORMS[CLIENTS[name].hook_form][1](handler)


# §6 rule 25: variables that make the interpreter or the loader run other
# code (DYLD_* too), which no entry of this server needs.
LOADER_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                    "PYTHONINSPECT", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")
MAX_ARCHIVE = 64 * 1024 * 1024       # bytes of a kit's .pyz worth comparing
MAX_KIT_ENTRIES = 1000               # a kit holds a score; a folder of more is no kit of ours


def entry_program(entry):
    """The program an entry runs: its first argument after an interpreter, else its command."""
    command, args = entry["command"] or "", entry["args"]
    return args[0] if INTERPRETER.match(os.path.basename(command)) and args else command


def kit_changeable(folder, platform=PLATFORM):
    """What of a kit's folder another user can change, said in words, or
    None (§6 rule 25): the folder, or anything in it, that belongs to
    another user (not root) or that group or others can write.  Links are
    judged, not followed; a folder of more than MAX_KIT_ENTRIES entries is
    judged no kit."""
    if not PLATFORMS[platform]["posix_files"] or not folder:
        return None
    import stat
    seen = 0
    for directory, folders, files in os.walk(folder) if os.path.isdir(folder) else [(folder, (), ())]:
        for path in [directory] + [os.path.join(directory, name) for name in folders + files]:
            seen += 1
            if seen > MAX_KIT_ENTRIES:
                return "%s holds more than %d files" % (shown_path(folder), MAX_KIT_ENTRIES)
            try:
                status = os.lstat(path)
            except OSError:
                continue
            why = changed_by_others(status, platform, mode=not stat.S_ISLNK(status.st_mode))
            if why:
                return "%s %s" % (shown_path(path), why)
    return None


def disabled_kit(place, entry):
    """The warning for a kit the client installed but disabled (for this
    Workspace), with the client's command that enables it."""
    where, enable = entry["kit"]["disabled"]
    return Check("warn", None, "the memprove entry in %s is %s" % (place, where), enable)


def running_archive(found):
    """The bytes of the .pyz doctor runs from, read once (a kit's is compared with it)."""
    if found.archive is None:
        found.archive = read_regular(found.program, MAX_ARCHIVE + 1)[0]
    return found.archive


def stale_kit(found, name, place, entry, program):
    """The warning for a kit whose .pyz is not this one's bytes (plugin.md), or None."""
    try:
        # §6 rule 28: a FIFO or a device in the .pyz's place must not block or flood doctor.
        installed = read_regular(program, MAX_ARCHIVE + 1)[0]
        running = running_archive(found)
    except OSError as error:
        what = "is not a regular file" if not isinstance(error, (FileNotFoundError,
                                                                  PermissionError)) else \
            "cannot be read"
        return Check("fail", "client_command_missing", "the memprove entry in %s runs %s, which "
                "%s" % (place, shown_path(program), what), print_config_line(found))
    if installed == running:
        return None
    # The versions of the archives themselves: Codex's entry runs the kit's .pyz, which a
    # kit written again replaces, while its copy's manifest keeps the version it was made of.
    return Check("warn", None, "the memprove entry in %s runs the kit's server, version %s, not this "
            "one, version %s" % (place, archive_version(installed, archive_module_version(
                installed)), archive_version(running)),
            kit_update_line(found, name, entry["kit"]["folder"]))


# doctor.md's checks in order: (name, check, the earlier checks whose failure
# it cannot go past: it skips, or says they failed).
DOCTOR_CHECKS = [
    ("python", check_python, ()),
    ("environment", check_environment, ()),
    ("config_dir", check_config_dir, ()),
    ("token", check_token, ()),
    ("data_dir", check_data_dir, ()),
    ("workspace", check_workspace, ()),
    ("daemon", check_daemon, ("token", "data_dir")),
    ("client", check_client, ()),
    ("hook", check_hook, ("token", "data_dir", "workspace", "daemon")),
]


# -- finding the client's entry, configured or from a kit ------------------------------
# Where the client keeps it comes from its record (its files, or its
# `find_kit`); an entry found is {"command", "args", "env", "keyed", "text"}
# (section 12), and one from a kit also names the kit's folder and version.

def find_client_entry(name, found):
    """(file, entry, files looked at) of the first memprove entry, or (None, None, looked)."""
    looked, root = [], found.root
    for base, parts, prefix in CLIENTS[name].places(found.platform):
        path = place_path(base, parts, found.environ, root, found.platform)
        if path is None:
            continue
        keys = tuple(root if key == "<root>" else key for key in prefix) + entry_keys(name)
        label = shown_path(path) + (" (projects[root])" if prefix else "")
        looked.append(label)
        if prefix and root is None:
            continue
        files = [path] if parts != CLIENTS[name].block_folder else \
            sorted(os.path.join(path, item) for item in listing_or_none(path))
        for one in files:
            place = label if one == path else shown_path(one)
            entry = read_entry_in(place, one, keys)
            if entry is not None:
                return place, entry, looked
    return None, None, looked


def read_entry_in(place, path, keys):
    """read_client_entry, a Refusal naming `place` (the file as doctor shows it)."""
    try:
        return read_client_entry(path, keys)
    except Refusal as refusal:
        refusal.place = place
        raise


def find_kit_entry(name, found):
    """(file, entry) of the memprove server a kit installed in client `name`,
    or (None, None); the entry's "kit" holds the kit's folder and version."""
    finder = CLIENTS[name].find_kit
    kit = finder(found) if finder else None
    entry = kit and kit_server_entry(kit["path"], kit["roots"])
    if not entry:
        return None, None
    manifest = small_json(kit["manifest"])
    version = manifest.get("version") if isinstance(manifest, dict) else None
    entry["kit"] = {"folder": kit["folder"] if isinstance(kit["folder"], str) else None,
                    "version": version if isinstance(version, str) else "unknown",
                    "disabled": kit.get("disabled"), "plugin": kit["plugin"]}
    return "%s (from a plugin kit)" % shown_path(kit["path"]), entry


def kit_server_entry(path, roots):
    """The memprove entry of a kit's server file, each root variable in its
    command and arguments replaced by the folder the client gives it."""
    entry = read_entry_in("%s (from a plugin kit)" % shown_path(path), path,
                          ("mcpServers", KIT_NAME))
    if entry is None:
        return None

    def rooted(value):
        for variable, folder in roots.items():
            value = value.replace(variable, folder)
        return value
    entry["command"] = entry["command"] and rooted(entry["command"])
    entry["args"] = [rooted(arg) for arg in entry["args"]]
    return entry


def archive_version(data, module_version=VERSION):
    """The version of the archive `data` (of this module's VERSION unless
    another is given): its bytes decide it, so that a client sees an update
    as one."""
    import hashlib
    return "%s+%s" % (module_version, hashlib.sha256(data).hexdigest()[:12])


ARCHIVE_VERSION = Pattern(r'(?m)^VERSION = "([0-9A-Za-z.+-]{1,32})"$')


def archive_module_version(data):
    """The VERSION another archive's module holds, read from its source (at most
    64 KiB of it), or "unknown"."""
    import io
    import zipfile
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            with archive.open("memprove_mcp.py") as source:
                found = ARCHIVE_VERSION.search(source.read(65536).decode("utf-8", "replace"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, RuntimeError, EOFError):
        return "unknown"
    return found.group(1) if found else "unknown"


def kit_update_line(found, name, folder):
    """Write the kit again from this .pyz, then the client's update command."""
    again = doctor_command(found, "mcp", "plugin", folder or "<the kit's folder>")
    return "%s, then: %s" % (again, " && ".join(CLIENTS[name].update))


def entry_keys(name):
    """The keys down to the memprove entry, from the very shape print-config
    writes: {"mcpServers": {"memprove": ...}} gives ("mcpServers", "memprove")."""
    document = CLIENTS[name].shape({"command": "", "args": [], "env": {}})
    keys = []
    while isinstance(document, dict) and len(document) == 1:
        key = next(iter(document))
        keys.append(key)
        if key == "memprove":
            break
        document = document[key]
    return tuple(keys)


def token_holder(entry, token):
    """What in the entry holds a token, by name (never the value), or None:
    a key, an argument or a word of the command whose name holds TOKEN (a
    `NAME=VALUE` word, as in `env MEMPROVE_TOKEN=... python3`, or an option
    and the word after it), or the token's own value anywhere."""
    for key, value in entry["keyed"]:
        if isinstance(key, str) and "token" in key.lower() and value not in (None, False, "", []) \
                and not (isinstance(value, str) and VARIABLE_REFERENCE.match(value)):
            return "the key %s" % shown_name(key)
    for place, words in (("the command", (entry["command"] or "").split()),
                         ("the arguments", entry["args"])):
        name = token_word(words)
        if name:
            return "%s in %s" % (shown_name(name), place)
    # The value anywhere: in the text as written, or in a string once unescaped.
    if token and (token in entry["text"] or any(
            isinstance(value, str) and token in value for _, value in entry["keyed"])):
        return "this token's value"
    return None


def token_word(words):
    """The name of the first `NAME=VALUE` word, or option followed by a value,
    whose name holds TOKEN and whose value is no variable reference."""
    for index, word in enumerate(words):
        name, equals, value = word.partition("=")
        if not equals:
            if not word.startswith("-"):
                continue
            value = words[index + 1] if index + 1 < len(words) else ""
        if "token" in name.lower() and value and not VARIABLE_REFERENCE.match(value):
            return name
    return None


def shown_name(name):
    """A key or variable name from a user's file, on one line and short."""
    return shown_path(name[:LOG_FIELD])


def command_exists(command, environ):
    if "${" in command:
        return True                    # the client expands it; nothing to look at here
    if os.path.dirname(command):
        return os.path.exists(os.path.expanduser(command))
    import shutil
    return shutil.which(command, path=environ.get("PATH")) is not None


def entry_config_dir(entry):
    """The configuration directory an entry gives its server, or None."""
    args = entry["args"]
    for index, arg in enumerate(args):
        if arg == "--config-dir" and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--config-dir="):
            return arg.partition("=")[2]
    value = entry["env"].get("MEMPROVE_CONFIG_DIR")
    return value if isinstance(value, str) and value else None


if __name__ == "__main__":
    sys.exit(main())
