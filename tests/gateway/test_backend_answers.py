"""How the gateway reads what HTTP backends answer: liberal in what it accepts.

A tiny raw HTTP server plays backends that real peers resemble: one that answers a call with several
newline-separated JSON messages in an ``application/json`` body (the official conformance fixture),
and one that refuses ``server/discover`` with HTTP 400 and ``"id": "server-error"`` (SDK 1.x,
FastMCP 2.x). Invariants: every message of such a body reaches the gateway in order and the response
answers the call; a refused probe ends at once, so the backend is ready long before the probe timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from gateway import jsonrpc
from gateway.config import Backend
from gateway.upstreams.connection import BackendConnection
from gateway.upstreams.http import HttpCarrier
from tests.support import QuietHandler, raw_http_server, read_http_request

Answer = Callable[[dict[str, Any]], tuple[int, bytes]]


@contextlib.asynccontextmanager
async def _serve(answer: Answer) -> AsyncIterator[str]:
    """An HTTP/1.1 server on a free loopback port; each POST body is one JSON-RPC message."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                lines, _headers, body = await read_http_request(reader)
                if lines[0].startswith("POST"):
                    status, data = answer(orjson.loads(body))
                else:
                    status, data = 405, b""
                ctype = b"application/json" if data else b"text/plain"
                writer.write(
                    b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
                    % (status, ctype, len(data), data)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async with raw_http_server(handle) as url:
        yield url


def _lines(*messages: dict[str, Any]) -> bytes:
    return b"\n".join(orjson.dumps(m) for m in messages) + b"\n"


def _several_lines(message: dict[str, Any]) -> tuple[int, bytes]:
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}}
    result = {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": "ok"}]}}
    return 200, _lines(log, result)


async def _carrier_answer(url: str, method: str) -> list[dict[str, Any]]:
    carrier = HttpCarrier("t", url, {}, 1 << 20)
    seen: list[dict[str, Any]] = []
    await carrier.open(lambda message, related: seen.append(message))
    try:
        await asyncio.wait_for(carrier.send(jsonrpc.request(7, method, {})), 5)
    finally:
        await carrier.close()
    return seen


async def test_several_json_lines_in_one_body_are_each_relayed() -> None:
    async with _serve(_several_lines) as url:
        seen = await _carrier_answer(url, "tools/call")
        assert [m.get("method") for m in seen] == ["notifications/message", None]
        assert seen[-1] == {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "ok"}]}}


async def test_a_body_without_any_response_fails_the_call() -> None:
    def only_a_log(message: dict[str, Any]) -> tuple[int, bytes]:
        return 200, _lines({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x"}})

    async with _serve(only_a_log) as url:
        seen = await _carrier_answer(url, "tools/call")
        assert seen[0]["method"] == "notifications/message"
        assert seen[-1]["id"] == 7 and seen[-1]["error"]["code"] == jsonrpc.INTERNAL_ERROR


async def test_a_web_framework_error_is_no_json_rpc_answer() -> None:
    def unauthorized(message: dict[str, Any]) -> tuple[int, bytes]:
        return 401, b'{"error": "Unauthorized"}'

    async with _serve(unauthorized) as url:
        seen = await _carrier_answer(url, "tools/call")
        assert len(seen) == 1 and seen[0]["id"] == 7 and seen[0]["error"]["code"] == jsonrpc.INTERNAL_ERROR
        assert "HTTP 401" in seen[0]["error"]["message"]


def _sdk1_like(message: dict[str, Any]) -> tuple[int, bytes]:
    """Refuses everything before initialize the way SDK 1.x Streamable HTTP servers do."""
    if message.get("method") == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "s"}}
        return 200, orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
    if "id" not in message:
        return 202, b""
    error = {"code": -32600, "message": "Bad Request: Missing session ID"}
    return 400, orjson.dumps({"jsonrpc": "2.0", "id": "server-error", "error": error})


async def test_an_error_with_a_foreign_id_answers_the_request_it_refused() -> None:
    async with _serve(_sdk1_like) as url:
        seen = await _carrier_answer(url, "server/discover")
        assert seen == [
            {"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "Bad Request: Missing session ID"}}
        ]


@pytest.mark.timeout(30)
async def test_a_refused_probe_is_a_decisive_no_at_once() -> None:
    async with _serve(_sdk1_like) as url:
        config = Backend(transport="http", url=url)
        conn = BackendConnection(
            "t", config, lambda: HttpCarrier("t", url, {}, 1 << 20), QuietHandler(), {"name": "sb"}
        )
        started = time.monotonic()
        await conn.start()
        try:
            assert await conn.wait_ready(10)
            elapsed = time.monotonic() - started
        finally:
            await conn.close()
        assert conn.era == "legacy"
        assert elapsed < 1.5, f"ready after {elapsed:.2f}s: the refused probe was waited out"
