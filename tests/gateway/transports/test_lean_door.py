"""The lean entrance to /mcp (gateway/app.py ``FastPath.lean_doors``) under the real gateway and uvicorn.

A plain POST to /mcp is served by the lean cycle straight from the Streamable HTTP door's POST
path, which returns the call's own coroutine (transports/streamable_http.py). What dispatch does
for every other request must still happen there: the Host/Origin rule, the session checks, the
acknowledgement of a notification, and a whole session on one kept-alive connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest

from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway
from tests.support import initialize_request, served_by_gateway_protocol

pytestmark = pytest.mark.timeout(30)


LEAN: list[str] = []  # the requests the lean door served, in order (the fixture counts them)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    cfg = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}})
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    assert set(app.lean_doors) == {b"/mcp", b"/messages"}
    path, serve = app.lean_doors[b"/mcp"]

    def counted(scope: Any, receive: Any, send: Any) -> Awaitable[None]:
        LEAN.append(scope["path"])
        return serve(scope, receive, send)

    app.lean_doors[b"/mcp"] = (path, counted)
    LEAN.clear()
    async with served_by_gateway_protocol(app, gateway, "demo") as (_server, served_port):
        yield served_port


class Client:
    """One kept-alive connection speaking raw HTTP/1.1."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(
        self, message: dict[str, Any], *headers: str, host: str = "127.0.0.1"
    ) -> tuple[int, dict[str, str], bytes]:
        body = json.dumps(message).encode()
        head = [
            "POST /mcp HTTP/1.1",
            f"Host: {host}",
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
            f"Content-Length: {len(body)}",
            *headers,
        ]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        async with asyncio.timeout(10):
            raw = await self.reader.readuntil(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            fields = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            answer = await self.reader.readexactly(int(fields["content-length"]))
        return int(lines[0].split()[1]), fields, answer


async def connect(port: int) -> Client:
    return Client(*await asyncio.open_connection("127.0.0.1", port))


async def test_a_whole_session_on_one_connection(port: int) -> None:
    client = await connect(port)
    status, fields, body = await client.post(initialize_request(1, client="lean"))
    assert status == 200 and json.loads(body)["result"]["protocolVersion"]
    session = (f"Mcp-Session-Id: {fields['mcp-session-id']}", "MCP-Protocol-Version: 2025-11-25")
    status, _, body = await client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, *session)
    assert (status, body) == (202, b"")
    for rpc_id in range(2, 5):
        status, _, body = await client.post({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/list"}, *session)
        answer = json.loads(body)
        assert status == 200 and answer["id"] == rpc_id and answer["result"]["tools"]
    # The session's checks, on the same connection: another version, an unknown session, none at all.
    status, _, body = await client.post(
        {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, session[0], "MCP-Protocol-Version: 1999-01-01"
    )
    assert status == 400 and b"Unsupported MCP-Protocol-Version" in body
    status, _, _ = await client.post({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}, "Mcp-Session-Id: nope")
    assert status == 404
    status, _, body = await client.post({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
    assert status == 400 and b"Mcp-Session-Id header is required" in body
    assert LEAN == ["/mcp"] * 8  # every one of them came in by the lean door
    client.writer.close()


async def test_the_host_rule_still_guards_the_lean_door(port: int) -> None:
    client = await connect(port)
    status, _, body = await client.post(initialize_request(1), host="rebound.example")
    assert status == 421 and b"Invalid Host header" in body
    status, _, body = await client.post(initialize_request(2), "Origin: https://evil.example")
    assert status == 403 and b"Invalid Origin header" in body
    status, _, _ = await client.post(initialize_request(3))  # the connection goes on serving
    assert status == 200
    assert len(LEAN) == 3
    client.writer.close()
