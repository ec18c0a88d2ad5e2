"""An MCPC server built with the real ``mcpc`` 0.2.6 library: ``MCPCHelper`` on SDK 1.6's low-level
server, over stdio. Runs only under the library's environment (``tests/mcpc_peers/venv.py``)::

    .cache/peers/mcpc/bin/python tests/mcpc_peers/server.py [--name N] [--show-plumbing]

Tools:

- ``slow_task {steps, delay_s}``: answers ``created`` at once, then sends ``steps`` ``update``
  callbacks (``{"step": i, "of": steps}``) ``delay_s`` apart, then ``complete`` (``{"steps": n}``);
- ``fails {delay_s}``: ``created``, one ``update``, then ``failed`` (``"boom"``);
- ``sync_echo {text}``: an ordinary tool, answers ``text`` (no MCPC message);
- ``emit_event {event, result}``: sends a ``server_event`` callback, answers ``"sent"``.

As the library decides it, a client that never called ``_mcpc_init`` gets no callbacks: the task
runs to its end inside the call and every message comes back as one text block each. The handshake
tool is served but not listed, and ``mcpc_params`` is not in any schema, unless ``--show-plumbing``
(which lists both, as a careless server would, for tests of the gateway's hiding).

Like every SDK 1.6 stdio server it does not exit when its input ends: stop it with SIGTERM. Its
callbacks are written by ``MCPCHelper`` straight to ``sys.stdout``, beside the SDK's own writer
(a worker thread), so an ``update`` may come out before the ``created`` result of its call.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import TextContent, Tool
from mcpc import MCPCHelper, MCPCMessage

INIT_TOOL = "_mcpc_init"


def _schema(properties: dict[str, Any], show_plumbing: bool) -> dict[str, Any]:
    props = dict(properties)
    required: list[str] = []
    if show_plumbing:
        props["mcpc_params"] = {"type": "object"}
        required.append("mcpc_params")
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


def build(name: str, show_plumbing: bool) -> tuple[Server[Any], MCPCHelper]:
    server: Server[Any] = Server(name)
    helper = MCPCHelper(server)
    number = {"type": "number"}

    @server.list_tools()
    async def list_tools() -> list[Tool]:
        tools = [
            Tool(
                name="slow_task",
                description="A task that reports progress by MCPC callbacks.",
                inputSchema=_schema({"steps": {"type": "integer"}, "delay_s": number}, show_plumbing),
            ),
            Tool(
                name="fails", description="A task that fails.", inputSchema=_schema({"delay_s": number}, show_plumbing)
            ),
            Tool(
                name="sync_echo",
                description="An ordinary tool.",
                inputSchema=_schema({"text": {"type": "string"}}, show_plumbing),
            ),
            Tool(
                name="emit_event",
                description="Sends a server_event.",
                inputSchema=_schema({"event": {"type": "string"}, "result": {}}, show_plumbing),
            ),
        ]
        if show_plumbing:
            tools.append(Tool(name=INIT_TOOL, description="MCPC handshake", inputSchema={"type": "object"}))
        return tools

    def task_message(event: str, tool: str, session_id: str, task_id: str, result: Any) -> MCPCMessage:
        return helper.create_message(
            type="task", event=event, tool_name=tool, session_id=session_id, task_id=task_id, result=result
        )

    async def run_task(
        tool: str, session_id: str, task_id: str, work: Callable[[], AsyncIterator[MCPCMessage]], limit: float
    ) -> list[TextContent]:
        # start_task wants the async generator *function* (it tests inspect.isasyncgenfunction).
        created = task_message("created", tool, session_id, task_id, f"{tool} started")
        collected = await helper.start_task(task_id, work, timeout=limit)
        if collected:  # a client without the handshake: the whole run, one text block per message
            return helper.messages_to_text_content(collected)
        return [TextContent(type="text", text=created.model_dump_json())]

    @server.call_tool()
    async def call_tool(tool: str, arguments: dict[str, Any]) -> list[TextContent]:
        if tool == INIT_TOOL:
            return helper.handle_protocol_info_request(arguments.get("mcpc_info") or {})
        params = arguments.pop("mcpc_params", None) or {}
        session_id = str(params.get("session_id") or "default")
        task_id = str(params.get("task_id") or uuid.uuid4())
        if tool == "sync_echo":
            return [TextContent(type="text", text=str(arguments.get("text", "")))]
        if tool == "emit_event":
            event = helper.create_server_event(
                event=str(arguments.get("event") or "notification"),
                session_id=session_id,
                result=arguments.get("result"),
            )
            await helper.send(event)
            return [TextContent(type="text", text="sent")]
        if tool == "slow_task":
            steps = int(arguments.get("steps", 3))
            delay_s = float(arguments.get("delay_s", 0.05))

            async def slow() -> AsyncIterator[MCPCMessage]:
                for step in range(1, steps + 1):
                    await asyncio.sleep(delay_s)
                    yield task_message("update", tool, session_id, task_id, {"step": step, "of": steps})
                yield task_message("complete", tool, session_id, task_id, {"steps": steps})

            return await run_task(tool, session_id, task_id, slow, steps * delay_s + 30)
        if tool == "fails":
            delay_s = float(arguments.get("delay_s", 0.05))

            async def failing() -> AsyncIterator[MCPCMessage]:
                yield task_message("update", tool, session_id, task_id, "about to fail")
                await asyncio.sleep(delay_s)
                yield task_message("failed", tool, session_id, task_id, "boom")

            return await run_task(tool, session_id, task_id, failing, delay_s + 30)
        raise ValueError(f"Unknown tool: {tool}")

    return server, helper


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="mcpc-peer")
    parser.add_argument("--show-plumbing", action="store_true")
    args = parser.parse_args()
    server, _ = build(args.name, args.show_plumbing)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(main())
