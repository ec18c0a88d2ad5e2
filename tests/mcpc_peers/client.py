"""An MCPC client built with the real ``mcpc`` 0.2.6 library (``MCPCHandler.wrap_streams`` on SDK
1.6's ``ClientSession``): a CLI that prints what it sees as JSON lines, for tests to drive. Runs only
under the library's environment (``tests/mcpc_peers/venv.py``)::

    .cache/peers/mcpc/bin/python tests/mcpc_peers/client.py --stdio CMD [ARG ...] \\
        --call slow_task '{"steps": 2}' [--call sync_echo '{"text": "x"}' ...] [--session S] [--list]
    .cache/peers/mcpc/bin/python tests/mcpc_peers/client.py --sse http://HOST:PORT/sse --call ...

SDK 1.6 has the stdio and HTTP+SSE (legacy) transports; its Streamable HTTP client came later.
``--stdio`` takes the rest of the command line up to the first option of this CLI (``--call``,
``--session``, ``--list``, ``--until``, ``--timeout``, ``--provider``); the child inherits the environment.

Lines on stdout, one JSON object each, in the order things happen:

- ``{"kind": "handshake", "supported": bool, "version": V}`` (``MCPCHandler.init_mcpc``: ``_mcpc_init``);
- ``{"kind": "tools", "tools": [names]}`` with ``--list``;
- per ``--call``: ``{"kind": "call", "tool", "arguments"}`` (the arguments as sent, with
  ``mcpc_params`` when the handshake succeeded), then ``{"kind": "result", "tool", "result"}``;
- ``{"kind": "mcpc", "message": {...}}`` for every MCPC message the library's listener delivers
  (callbacks, and MCPC messages inside ordinary results, ``created`` included);
- ``{"kind": "error", "tool", "error"}`` when a call fails, ``{"kind": "timeout", "tool"}`` when
  ``--until final`` waited ``--timeout`` seconds in vain, and ``{"kind": "done"}`` last.

``--until final`` (the default) waits after each call whose result holds an MCPC message for a
``complete``/``failed`` message of that call's task (of any task without the handshake, where the
task id is the server's); ``--until result`` goes on as soon as the result is in. Exit code 0
unless the connection failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcpc import MCPCHandler, MCPCMessage

_OPTIONS = ("--call", "--session", "--list", "--until", "--timeout", "--provider", "--sse")


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def split_stdio(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the --stdio command, the remaining options): the command ends at the first option of ours."""
    if "--stdio" not in argv:
        return [], argv
    at = argv.index("--stdio")
    end = next((i for i in range(at + 1, len(argv)) if argv[i] in _OPTIONS), len(argv))
    return argv[at + 1 : end], argv[:at] + argv[end:]


def parse_args(argv: list[str]) -> tuple[list[str], argparse.Namespace]:
    command, rest = split_stdio(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sse", help="URL of an HTTP+SSE endpoint (legacy transport)")
    parser.add_argument("--call", nargs=2, action="append", default=[], metavar=("TOOL", "JSON_ARGS"))
    parser.add_argument("--session", default="peer-session", help="MCPC session id to send")
    parser.add_argument("--provider", default="mcpc-peer-client", help="MCPC provider name to announce")
    parser.add_argument("--list", action="store_true", help="print the tools/list names")
    parser.add_argument("--until", choices=("final", "result"), default="final")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a final message")
    args = parser.parse_args(rest)
    if not command and not args.sse:
        parser.error("one of --stdio CMD or --sse URL is required")
    return command, args


def transport(command: list[str], args: argparse.Namespace) -> AbstractAsyncContextManager[Any]:
    if command:
        params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
        return stdio_client(params)
    return sse_client(args.sse)


async def run(command: list[str], args: argparse.Namespace) -> None:
    handler = MCPCHandler(args.provider)
    finals: list[MCPCMessage] = []
    arrived = asyncio.Event()

    async def listener(message: MCPCMessage) -> None:
        emit({"kind": "mcpc", "message": json.loads(message.model_dump_json())})
        if message.type == "task" and message.event in ("complete", "failed"):
            finals.append(message)
            arrived.set()

    handler.add_event_listener(listener)
    async with transport(command, args) as (read, write):
        wrapped_read, wrapped_write = await handler.wrap_streams(read, write)
        async with ClientSession(wrapped_read, wrapped_write) as session:
            await session.initialize()
            # init_mcpc must run even against a server without MCPC: the handler reads
            # session internals after notifying listeners and drops the rest of a result before.
            supported = await handler.init_mcpc(session)
            emit({"kind": "handshake", "supported": supported, "version": handler.protocol_version})
            if args.list:
                listed = await session.list_tools()
                emit({"kind": "tools", "tools": [tool.name for tool in listed.tools]})
            for tool, raw in args.call:
                await call(session, handler, args, tool, json.loads(raw), finals, arrived)
    emit({"kind": "done"})


async def call(
    session: ClientSession,
    handler: MCPCHandler,
    args: argparse.Namespace,
    tool: str,
    arguments: dict[str, Any],
    finals: list[MCPCMessage],
    arrived: asyncio.Event,
) -> None:
    sent = handler.add_metadata(arguments, args.session)
    params = sent.get("mcpc_params")
    task_id = getattr(params, "task_id", None)
    shown = {key: (value.model_dump() if key == "mcpc_params" else value) for key, value in sent.items()}
    emit({"kind": "call", "tool": tool, "arguments": shown})
    try:
        result = await session.call_tool(tool, sent)
    except Exception as exc:  # the peer reports what happened, the test decides
        emit({"kind": "error", "tool": tool, "error": str(exc)})
        return
    emit({"kind": "result", "tool": tool, "result": result.model_dump(mode="json", exclude_none=True)})
    if args.until == "result" or not carries_mcpc(result.model_dump(mode="json")):
        return  # an ordinary tool (or an error): no task to wait for

    def done() -> bool:
        return any(task_id is None or message.task_id == task_id for message in finals)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout
    while not done():
        arrived.clear()
        try:
            await asyncio.wait_for(arrived.wait(), max(deadline - loop.time(), 0))
        except TimeoutError:
            emit({"kind": "timeout", "tool": tool})
            return
    finals.clear()


def carries_mcpc(result: dict[str, Any]) -> bool:
    """Whether a result holds an MCPC message (a ``created``, or a fallback's whole run)."""
    for block in result.get("content") or []:
        try:
            if json.loads(block.get("text") or "").get("protocol") == "mcpc":
                return True
        except (ValueError, AttributeError):
            continue
    return False


def main() -> None:
    command, args = parse_args(sys.argv[1:])
    asyncio.run(run(command, args))


if __name__ == "__main__":
    main()
