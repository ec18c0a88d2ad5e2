"""The built-in demo backend: a small, honest MCP server living in the gateway's process.

It exists so that ``switchboard run`` with no config shows every feature at once: tools with plain
and structured results, progress and log notifications during a call, a resource and a prompt.
It speaks JSON-RPC dicts, exactly like a real backend, through :class:`BuiltinCarrier`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from adapters.mcp import LEGACY_VERSIONS, LOG_LEVELS
from gateway import jsonrpc
from gateway.upstreams.base import Carrier, CarrierClosed, Inbound

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = LEGACY_VERSIONS  # the demo is a legacy-era server
_LEVELS = LOG_LEVELS

TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "title": "Echo",
        "description": "Return the given text unchanged.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {
        "name": "add",
        "title": "Add",
        "description": "Add two numbers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]},
    },
    {
        "name": "slow_count",
        "title": "Slow count",
        "description": "Count to n, one step every delay_s seconds, reporting progress and logging each step.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5},
                "delay_s": {"type": "number", "minimum": 0, "maximum": 10, "default": 0.2},
            },
        },
    },
]
README_URI = "demo://readme"
README_TEXT = "Switchboard demo backend. Try tools/call echo, add and slow_count."
PROMPTS: list[dict[str, Any]] = [
    {
        "name": "greet",
        "description": "A greeting for someone.",
        "arguments": [{"name": "name", "description": "Who to greet", "required": True}],
    }
]

Emit = Callable[[dict[str, Any], Any], None]


class DemoServer:
    def __init__(self) -> None:
        self._level = "info"

    async def handle(self, message: dict[str, Any], emit: Emit) -> dict[str, Any] | None:
        method = message.get("method")
        rpc_id = message.get("id")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        try:
            match method:
                case "initialize":
                    requested = params.get("protocolVersion")
                    version = requested if requested in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[-1]
                    value: Any = {
                        "protocolVersion": version,
                        "capabilities": {"tools": {}, "resources": {}, "prompts": {}, "logging": {}},
                        "serverInfo": {"name": "switchboard-demo", "version": "1.0.0"},
                        "instructions": "A demo backend built into Switchboard.",
                    }
                case "ping":
                    value = {}
                case "logging/setLevel":
                    level = params.get("level")
                    if level not in _LEVELS:
                        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"unknown log level {level!r}")
                    self._level = level
                    value = {}
                case "tools/list":
                    value = {"tools": TOOLS}
                case "tools/call":
                    value = await self._call(rpc_id, params, emit)
                case "resources/list":
                    value = {"resources": [{"uri": README_URI, "name": "readme", "mimeType": "text/plain"}]}
                case "resources/templates/list":
                    value = {"resourceTemplates": []}
                case "resources/read":
                    if params.get("uri") != README_URI:
                        raise jsonrpc.RpcError(
                            jsonrpc.RESOURCE_NOT_FOUND, "Resource not found", {"uri": params.get("uri")}
                        )
                    value = {"contents": [{"uri": README_URI, "mimeType": "text/plain", "text": README_TEXT}]}
                case "prompts/list":
                    value = {"prompts": PROMPTS}
                case "prompts/get":
                    if params.get("name") != "greet":
                        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"unknown prompt {params.get('name')!r}")
                    arguments = params.get("arguments") or {}
                    if not isinstance(arguments, dict):
                        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "prompt arguments must be an object")
                    who = arguments.get("name", "there")
                    value = {
                        "description": "A greeting",
                        "messages": [{"role": "user", "content": {"type": "text", "text": f"Say hello to {who}."}}],
                    }
                case _:
                    if rpc_id is None:
                        return None
                    raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {method}")
        except jsonrpc.RpcError as exc:
            return jsonrpc.error_from(rpc_id, exc)
        return None if rpc_id is None else jsonrpc.result(rpc_id, value)

    async def _call(self, rpc_id: Any, params: dict[str, Any], emit: Emit) -> dict[str, Any]:
        name = params.get("name")
        args = params.get("arguments") or {}
        if not isinstance(args, dict):
            return _tool_error("arguments must be an object")
        if name == "echo":
            text = args.get("text")
            if not isinstance(text, str):
                return _tool_error("echo needs a string argument 'text'")
            return {"content": [{"type": "text", "text": text}]}
        if name == "add":
            a, b = args.get("a"), args.get("b")
            if not (_number(a) and _number(b)):
                return _tool_error("add needs numbers 'a' and 'b'")
            total = a + b
            return {"content": [{"type": "text", "text": str(total)}], "structuredContent": {"sum": total}}
        if name == "slow_count":
            n, delay = args.get("n", 5), args.get("delay_s", 0.2)
            if (
                not isinstance(n, (int, float))
                or isinstance(n, bool)
                or not isinstance(delay, (int, float))
                or isinstance(delay, bool)
                or not 1 <= n <= 1000
                or not 0 <= delay <= 10
            ):
                return _tool_error("slow_count needs 1 <= n <= 1000 and 0 <= delay_s <= 10")
            n = int(n)
            meta = params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            for i in range(1, n + 1):
                await asyncio.sleep(delay)
                if _LEVELS.index(self._level) <= _LEVELS.index("info"):
                    emit(
                        jsonrpc.notification(
                            "notifications/message",
                            {"level": "info", "logger": "demo", "data": f"count {i}/{n}"},
                        ),
                        rpc_id,
                    )
                if token is not None:
                    emit(
                        jsonrpc.notification(
                            "notifications/progress",
                            {"progressToken": token, "progress": i, "total": n, "message": f"step {i}"},
                        ),
                        rpc_id,
                    )
            return {"content": [{"type": "text", "text": f"counted to {n}"}]}
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"Unknown tool: {name}")


def _tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class BuiltinCarrier(Carrier):
    """Connects the gateway to an in-process server with the same message contract as a real carrier."""

    def __init__(self, name: str, server: DemoServer) -> None:
        self._name = name
        self._server = server
        self._inbound: Inbound | None = None
        self._tasks: dict[Any, asyncio.Task[None]] = {}
        self._closed = asyncio.Event()

    def describe(self) -> str:
        return f"builtin:{self._name}"

    async def open(self, inbound: Inbound) -> None:
        self._inbound = inbound
        self._closed.clear()

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        if self._inbound is None or self._closed.is_set():
            raise CarrierClosed("closed")
        if message.get("method") == "notifications/cancelled" and "id" not in message:
            params = message.get("params")
            request_id = params.get("requestId") if isinstance(params, dict) else None
            task = self._tasks.get(request_id) if isinstance(request_id, (str, int, float)) else None
            if task is not None:
                task.cancel()
            return
        if "method" not in message:
            return  # the demo never asks the client anything, so responses have no one to reach
        rpc_id = message.get("id")
        task = asyncio.create_task(self._run(message))
        if rpc_id is not None:
            self._tasks[rpc_id] = task
            task.add_done_callback(lambda _t: self._tasks.pop(rpc_id, None))

    async def _run(self, message: dict[str, Any]) -> None:
        assert self._inbound
        inbound = self._inbound
        rpc_id = message.get("id")
        with contextlib.suppress(asyncio.CancelledError):
            try:
                reply = await self._server.handle(message, inbound)
            except Exception:
                # A real server answers a request it choked on; so does this one, or the call would hang.
                log.exception("demo backend failed on %s", message.get("method"))
                reply = None if rpc_id is None else jsonrpc.error(rpc_id, jsonrpc.INTERNAL_ERROR, "demo backend error")
            if reply is not None:
                inbound(reply, rpc_id)

    async def wait_closed(self) -> str:
        await self._closed.wait()
        return "closed"

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        self._closed.set()
