"""A backend that answers ``initialize`` on an SSE stream (the official SDK's default) is told the negotiated
version on every later request (``MCP-Protocol-Version``), as one that answers with JSON is.

The backend is a real HTTP server (uvicorn) in this process; the gateway is a real Gateway connecting to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import orjson
import pytest
import uvicorn

from gateway.config import Config
from gateway.core import Gateway
from tests.raw_asgi import read_body

pytestmark = pytest.mark.timeout(30)

VERSION = "2025-11-25"
WAIT_S = 10.0


class RecordingBackend:
    """Streamable HTTP, answering requests on SSE (or JSON), recording each request's version header."""

    def __init__(self, sse: bool) -> None:
        self.sse = sse
        self.seen: list[tuple[str, str | None]] = []  # (method, MCP-Protocol-Version)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["method"] != "POST":
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        request = orjson.loads(body)
        headers = dict(scope["headers"])
        version = headers.get(b"mcp-protocol-version")
        self.seen.append((request.get("method", ""), version.decode() if version else None))
        if "id" not in request:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if request["method"] == "initialize":
            reply["result"] = {"protocolVersion": VERSION, "capabilities": {"tools": {}}, "serverInfo": {"name": "rec"}}
        elif request["method"] in ("tools/list", "ping"):
            reply["result"] = {"tools": []} if request["method"] == "tools/list" else {}
        else:  # a legacy server: the modern era's server/discover (the gateway's first probe) is unknown
            reply["error"] = {"code": -32601, "message": "Method not found"}
        answer = orjson.dumps(reply)
        if self.sse:
            ctype, payload = b"text/event-stream", b"event: message\ndata: " + answer + b"\n\n"
        else:
            ctype, payload = b"application/json", answer
        extra = [(b"mcp-session-id", b"s-1")] if request["method"] == "initialize" else []
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", ctype), *extra]})
        await send({"type": "http.response.body", "body": payload})


@pytest.mark.parametrize("sse", [True, False], ids=["sse", "json"])
async def test_requests_after_initialize_declare_the_negotiated_version(sse: bool) -> None:
    backend = RecordingBackend(sse)
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(backend, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    config = Config.model_validate({"backends": {"rec": {"transport": "http", "url": f"http://127.0.0.1:{port}/mcp"}}})
    gateway = Gateway(config)
    try:
        await gateway.start()
        assert await gateway.connections["rec"].wait_ready(WAIT_S)
        async with asyncio.timeout(WAIT_S):
            while not any(method == "notifications/initialized" for method, _ in backend.seen):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        await gateway.stop()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(WAIT_S):
                await serving
        sock.close()
    legacy = [seen for seen in backend.seen if seen[0] != "server/discover"]
    assert legacy[0] == ("initialize", None)
    after = legacy[1:]
    assert after and all(version == VERSION for _, version in after), backend.seen
