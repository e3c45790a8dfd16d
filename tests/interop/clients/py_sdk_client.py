"""Drive a stdio MCP server with the official Python SDK (PyPI `mcp` 2.x), run by the interop tier.

    <venv>/bin/python py_sdk_client.py --mode auto|legacy|2026-07-28 [--handshake-version V]
        --plan PLAN.json --env ENV.json --cwd DIR -- SERVER_COMMAND [ARGS...]

PLAN.json is a list of steps: {"tool": NAME, "args": {...}} calls a tool through
`Client.call_tool` (which validates `structuredContent` against the tool's `outputSchema`);
{"hook": NAME} prints a hook event and waits for one line on standard input, so the test
can act between two calls (record a Run, say).  ENV.json is the server's whole environment
(passed explicitly: the SDK passes only a few variables by default).

Standard output: one JSON object a line, an `event` each: `connected` (the negotiated version,
the era, the server's name), `tools` (the listing, as the SDK parsed it), `call` (a tool's
result, as the SDK returns it), `hook`, `done`; or `error` and exit 1.
"""

import argparse
import json
import sys

import anyio
import anyio.to_thread
import mcp.client.session as session_module
from mcp import Client
from mcp.client.stdio import StdioServerParameters


try:
    GROUPS = (BaseExceptionGroup,)
except NameError:                   # Python 3.10: anyio brings the backport
    from exceptiongroup import BaseExceptionGroup as _Group
    GROUPS = (_Group,)


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def drive(options, command, plan, env):
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=options.cwd)
    with anyio.fail_after(options.timeout):
        async with Client(params, mode=options.mode) as client:
            session = client.session
            info = client.server_info
            emit(event="connected", protocol_version=client.protocol_version,
                 era="modern" if session.discover_result is not None else "legacy",
                 server_name=info.name if info else None)
            listing = await client.list_tools()
            emit(event="tools", tools=[dump(tool) for tool in listing.tools])
            for step in plan:
                if "hook" in step:
                    emit(event="hook", name=step["hook"])
                    answer = await anyio.to_thread.run_sync(sys.stdin.readline)
                    if answer.strip() != "continue":
                        raise RuntimeError("the test did not let the hook continue: %r" % answer)
                    continue
                result = await client.call_tool(step["tool"], step.get("args", {}))
                emit(event="call", tool=step["tool"], result=dump(result))
    emit(event="done")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    parser.add_argument("--handshake-version", default=None)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if options.handshake_version:
        # The version `initialize` offers is a module constant with no public setting.
        session_module.LATEST_HANDSHAKE_VERSION = options.handshake_version
    with open(options.plan, encoding="utf-8") as handle:
        plan = json.load(handle)
    with open(options.env, encoding="utf-8") as handle:
        env = json.load(handle)
    try:
        anyio.run(drive, options, command, plan, env)
    except BaseException as error:  # anyio raises exception groups out of its task groups
        while isinstance(error, GROUPS) and error.exceptions:
            error = error.exceptions[0]
        if isinstance(error, KeyboardInterrupt):
            raise
        emit(event="error", type=type(error).__name__, message=str(error) or repr(error))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
