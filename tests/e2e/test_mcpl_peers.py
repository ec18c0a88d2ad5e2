"""The MCPL test peers work on their own, without the gateway.

The gateway's MCPL tests trust tests/e2e/backends/mcpl_server/ (the server side) and
tests/e2e/mcpl_host.py (the host side); these quick checks make sure a failure there is the gateway's.
The server is driven over stdio and over Streamable HTTP; the host is connected to the server through a
tiny WebSocket↔stdio relay written here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.server import ServerConnection, serve

from tests.e2e.mcpl_host import HOST_CAPABILITIES, McplHost
from tests.support import (
    JSON_HEADERS as HEADERS,
    LEGACY_VERSION as VERSION,
    LinePeer,
    http_server,
    initialize_params,
    spawn_module,
)

pytestmark = pytest.mark.timeout(60)

SERVER_MODULE = "tests.e2e.backends.mcpl_server"

MEMORY_MCPL = {
    "version": "0.4",
    "contextHooks": {"beforeInference": True, "afterInference": {"blocking": False}},
    "inferenceRequest": {"streaming": True},
    "pushEvents": True,
    "featureSets": {
        "memory.retrieval": {"description": "Retrieve relevant memories", "uses": ["contextHooks.beforeInference"]},
        "memory.extraction": {"description": "Learn from conversations", "uses": ["contextHooks.afterInference"]},
        "memory.consolidation": {"description": "Summarize memories using AI", "uses": ["inferenceRequest"]},
        "memory.proactive": {"description": "Surface reminders proactively", "uses": ["pushEvents"]},
    },
    "modelInfo": True,
}


class StdioServer(LinePeer):
    """The MCPL server as a subprocess, spoken to line by line."""

    next_id = 0

    async def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return self.next_id

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Request and its response (nothing else may arrive in between)."""
        rpc_id = await self.request(method, params)
        response = await self.recv()
        assert response.get("id") == rpc_id, response
        return response

    async def initialize(self, mcpl: dict[str, Any] | None) -> dict[str, Any]:
        capabilities: dict[str, Any] = {"experimental": {"mcpl": mcpl}} if mcpl is not None else {}
        response = await self.call("initialize", initialize_params(capabilities=capabilities))
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response["result"]

    async def tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        response = await self.call("tools/call", {"name": name, "arguments": arguments or {}})
        text = response["result"]["content"][0]["text"]
        try:
            return json.loads(text)
        except ValueError:
            return text


@contextlib.asynccontextmanager
async def stdio_server(*args: str) -> AsyncIterator[StdioServer]:
    async with spawn_module(SERVER_MODULE, *args) as proc:
        yield StdioServer(proc)


async def test_initialize_advertises_mcpl_only_to_mcpl_hosts() -> None:
    async with stdio_server("--role", "memory") as server:
        result = await server.initialize(HOST_CAPABILITIES)
        assert result["protocolVersion"] == VERSION
        assert result["serverInfo"] == {"name": "memory", "version": "1"}
        assert result["capabilities"] == {"tools": {}, "experimental": {"mcpl": MEMORY_MCPL}}
    async with stdio_server("--role", "memory", "--name", "mem2") as server:
        result = await server.initialize(None)
        assert result["capabilities"] == {"tools": {}}
        assert result["serverInfo"]["name"] == "mem2"


async def test_hooks_and_records() -> None:
    async with stdio_server("--role", "memory") as server:
        await server.initialize(HOST_CAPABILITIES)
        await server.send({"jsonrpc": "2.0", "method": "featureSets/update", "params": {"enabled": ["memory.*"]}})
        await server.tool("remember", {"text": "Alice likes tea"})
        await server.tool("remember", {"text": "Bob ships Friday"})
        hook = {"inferenceId": "inf_1", "conversationId": "c1", "turnIndex": 0, "userMessage": "hi"}
        response = await server.call("context/beforeInference", hook)
        assert response["result"] == {
            "featureSet": "memory.retrieval",
            "contextInjections": [
                {
                    "namespace": "memory",
                    "position": "system",
                    "content": [{"type": "text", "text": "<memories>\nAlice likes tea\nBob ships Friday\n</memories>"}],
                    "metadata": {"memoryIds": ["mem_1", "mem_2"]},
                }
            ],
        }
        after = {**hook, "assistantMessage": "Hello"}
        await server.send({"jsonrpc": "2.0", "method": "context/afterInference", "params": after})
        response = await server.call("no/such/method")
        assert response["error"]["code"] == -32601
        stats = await server.tool("stats")
        assert stats["featureSetUpdates"] == [{"enabled": ["memory.*"]}]
        assert stats["hooks"] == [hook, after]
        assert [call["name"] for call in stats["toolCalls"]] == ["remember", "remember", "stats"]
        assert stats["initialize"]["capabilities"]["experimental"]["mcpl"] == HOST_CAPABILITIES


async def test_push_round_trip_while_other_messages_flow() -> None:
    async with stdio_server("--role", "memory") as server:
        await server.initialize(HOST_CAPABILITIES)
        tool_id = await server.request("tools/call", {"name": "push", "arguments": {"eventId": "e1", "text": "hey"}})
        push = await server.recv()
        assert push["id"] == "s-1" and push["method"] == "push/event"
        params = push["params"]
        assert params["featureSet"] == "memory.proactive" and params["eventId"] == "e1"
        assert params["origin"] == {"server": "memory"}
        assert params["payload"] == {"content": [{"type": "text", "text": "hey"}]}
        assert params["timestamp"].endswith("Z")
        # The tool call is still waiting; the server keeps answering other requests meanwhile.
        assert (await server.call("ping"))["result"] == {}
        await server.send({"jsonrpc": "2.0", "id": "s-1", "result": {"accepted": True, "inferenceId": "inf_9"}})
        response = await server.recv()
        assert response["id"] == tool_id
        answer = json.loads(response["result"]["content"][0]["text"])
        assert answer == {"result": {"accepted": True, "inferenceId": "inf_9"}}


async def test_unanswered_request_times_out_with_an_error() -> None:
    async with stdio_server("--role", "memory", "--ask-timeout", "0.3") as server:
        await server.initialize(HOST_CAPABILITIES)
        tool_id = await server.request("tools/call", {"name": "ask", "arguments": {"method": "model/info"}})
        assert (await server.recv())["method"] == "model/info"
        response = await server.recv()
        assert response["id"] == tool_id
        answer = json.loads(response["result"]["content"][0]["text"])
        assert answer["error"]["data"]["timeout"] is True


class SseReader:
    """Reads `data:` events off a GET stream into a queue."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.opened = asyncio.Event()

    async def run(self, http: httpx.AsyncClient, url: str, session: str) -> None:
        headers = {"accept": "text/event-stream", "mcp-session-id": session}
        async with http.stream("GET", url, headers=headers, timeout=httpx.Timeout(30, read=None)) as response:
            assert response.status_code == 200
            self.opened.set()
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    await self.events.put(json.loads(line[5:]))


async def test_http_files_role_push_over_the_get_stream() -> None:
    argv = [sys.executable, "-m", SERVER_MODULE, "--role", "files", "--http"]
    with http_server(lambda port: [*argv, str(port)]) as url:
        async with httpx.AsyncClient(timeout=15) as http:
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": VERSION, "capabilities": {"experimental": {"mcpl": HOST_CAPABILITIES}}},
            }
            response = await http.post(url, headers=HEADERS, json=init)
            assert response.status_code == 200
            session = response.headers["mcp-session-id"]
            mcpl = response.json()["result"]["capabilities"]["experimental"]["mcpl"]
            assert mcpl["channels"] is True and [fs["name"] for fs in mcpl["featureSets"]] == [
                "files.edit",
                "files.watch",
            ]

            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            assert (await http.post(url, headers=HEADERS, json=ping)).status_code == 400
            assert (await http.post(url, headers={**HEADERS, "mcp-session-id": "nope"}, json=ping)).status_code == 404
            with_session = {**HEADERS, "mcp-session-id": session}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(url, headers=with_session, json=initialized)).status_code == 202

            # The push/event request is queued until a GET stream opens, then delivered on it.
            call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
            call["params"] = {"name": "push", "arguments": {"eventId": "e7", "text": "changed"}}
            tool_call = asyncio.create_task(http.post(url, headers=with_session, json=call))
            sse = SseReader()
            stream = asyncio.create_task(sse.run(http, url, session))
            try:
                push = await asyncio.wait_for(sse.events.get(), 10)
                assert push["method"] == "push/event" and push["id"] == "s-1"
                assert push["params"]["featureSet"] == "files.watch"
                answer = {"jsonrpc": "2.0", "id": "s-1", "result": {"accepted": False, "reason": "duplicate"}}
                reply = await http.post(url, headers=with_session, json=answer)
                assert reply.status_code == 202 and reply.content == b""
                result = (await asyncio.wait_for(tool_call, 10)).json()
                assert json.loads(result["result"]["content"][0]["text"]) == {
                    "result": {"accepted": False, "reason": "duplicate"}
                }
                scoped = {"name": "edit_file", "arguments": {"path": "/p/a.py"}, "scope": {"label": "/p/a.py"}}
                edit = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": scoped}
                edited = (await http.post(url, headers=with_session, json=edit)).json()
                assert edited["result"]["content"][0]["text"] == "edited /p/a.py"
            finally:
                stream.cancel()
                with contextlib.suppress(BaseException):
                    await stream
            assert (await http.delete(url, headers=with_session)).status_code == 200
            assert (await http.post(url, headers=with_session, json=ping)).status_code == 404


@contextlib.asynccontextmanager
async def ws_relay(*args: str) -> AsyncIterator[str]:
    """ws://… URL of a relay that spawns one stdio MCPL server per WebSocket connection."""

    async def relay(ws: ServerConnection) -> None:
        assert ws.subprotocol == "mcp"
        async with stdio_server(*args) as server:
            assert server.proc.stdout is not None

            async def downstream() -> None:
                assert server.proc.stdout is not None
                while line := await server.proc.stdout.readline():
                    await ws.send(line.decode())

            pump = asyncio.create_task(downstream())
            try:
                async for frame in ws:
                    await server.send(json.loads(frame))
            finally:
                pump.cancel()

    async with serve(relay, "127.0.0.1", 0, subprotocols=["mcp"]) as ws_server:  # type: ignore[list-item]
        port = next(iter(ws_server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/"


async def test_host_against_server_through_a_websocket_relay() -> None:
    async with ws_relay("--role", "memory") as url, McplHost.connect(url) as host:
        assert host.server_mcpl == MEMORY_MCPL
        assert await host.call_tool("push", {"eventId": "e1", "text": "hi"}) == {
            "result": {"accepted": True, "inferenceId": "inf_1"}
        }
        push = await host.wait_request("push/event")
        assert push["params"]["eventId"] == "e1"
        infer = await host.call_tool("infer", {"featureSet": "memory.consolidation", "stream": True})
        assert infer["answer"]["result"]["content"] == "Consolidated memory summary"
        assert [chunk["index"] for chunk in infer["chunks"]] == [0, 1, 2]
        assert infer["sentParams"]["stream"] is True
        await host.call_tool("notify", {"method": "featureSets/changed", "params": {"removed": ["memory.proactive"]}})
        changed = await host.wait_notification("featureSets/changed")
        assert changed["params"] == {"removed": ["memory.proactive"]}
        assert (await host.request("no/such"))["error"]["code"] == -32601
