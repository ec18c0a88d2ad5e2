"""A call to an HTTP backend answered in the HTTP parser's callbacks (gateway/upstreams/quick.py's
QuickExchange), end to end through ``BackendConnection`` against a raw HTTP/1.1 server on loopback.

Invariants checked: JSON and SSE answers reach their caller and the connection is kept alive and
reused; a cancelled or timed-out call closes its exchange's connection (over HTTP that is the
cancellation) and a legacy backend also hears ``notifications/cancelled``; the timeout's error and
message are those of the task-based path; a kept-alive connection the backend closed before
answering is retried once on a fresh one; a connection lost mid-answer fails the call with -32090.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from gateway import errors, jsonrpc
from gateway.upstreams.connection import BackendConnection
from tests.support import http_backend, raw_http_server, read_http_request

WAIT_S = 5.0
INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "raw"}}


@dataclass
class Server:
    """What the raw server saw: connections opened and closed, and every JSON-RPC message."""

    url: str = ""
    opened: int = 0
    closed: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    drops_left: int = 0  # connections to close on receiving a call to "drop", without answering

    def methods(self) -> list[str]:
        return [m["method"] for m in self.messages if "method" in m]


def _response(status: int, ctype: bytes, data: bytes) -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (status, ctype, len(data), data)


def _sse(*messages: dict[str, Any]) -> bytes:
    return b"".join(b"event: message\r\ndata: %s\r\n\r\n" % orjson.dumps(m) for m in messages)


@contextlib.asynccontextmanager
async def _serve() -> AsyncIterator[Server]:
    seen = Server()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.opened += 1
        try:
            while True:
                lines, _headers, body = await read_http_request(reader)
                if not lines[0].startswith("POST"):
                    writer.write(_response(405, b"text/plain", b""))
                    continue
                message = orjson.loads(body)
                seen.messages.append(message)
                method = message.get("method")
                if "id" not in message:
                    writer.write(_response(202, b"text/plain", b""))
                    continue
                rpc_id = message["id"]
                if method == "initialize":
                    writer.write(_response(200, b"application/json", orjson.dumps(jsonrpc.result(rpc_id, INIT))))
                    continue
                name = message["params"]["name"]
                if name == "hold":
                    seen.held.set()
                    await reader.read()  # until the gateway closes the connection
                    return
                if name == "drop" and seen.drops_left > 0:
                    seen.drops_left -= 1
                    return  # closed without a byte of answer
                if name == "half":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{")
                    await writer.drain()
                    return
                result = jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": name}]})
                if name == "sse":
                    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}
                    data = _sse(log, result)
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
                        % (len(data), data)
                    )
                else:
                    writer.write(_response(200, b"application/json", orjson.dumps(result)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            seen.closed += 1
            writer.close()

    async with raw_http_server(handle) as seen.url:
        yield seen


pytestmark = pytest.mark.usefixtures("quick")


class _Owner:
    session_id = "s"

    def __init__(self) -> None:
        self.delivered: list[dict[str, Any]] = []

    def deliver(self, message: dict[str, Any]) -> None:
        self.delivered.append(message)


@contextlib.asynccontextmanager
async def _connected(server: Server, timeout_s: float = 30.0) -> AsyncIterator[BackendConnection]:
    async with http_backend(server.url, timeout_s=timeout_s, wait_s=WAIT_S) as conn:
        yield conn


async def _until(condition: Any) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():  # noqa: ASYNC110 (the raw server offers counters, not events)
            await asyncio.sleep(0.005)


async def _quick_warm(conn: BackendConnection, quick: list[str]) -> bool:
    """One call more, which finds the first one's connection idle: the next call goes the quick way."""
    await conn.request("tools/call", {"name": "warm2", "arguments": {}})
    return quick[-1:] == ["warm2"]


def _text(answer: dict[str, Any]) -> str:
    return str(answer["result"]["content"][0]["text"])


async def test_json_answers_reuse_one_kept_alive_connection(quick: list[str]) -> None:
    async with _serve() as server, _connected(server) as conn:
        for name in ("a", "b", "c"):
            async with asyncio.timeout(WAIT_S):
                assert _text(await conn.request("tools/call", {"name": name, "arguments": {}})) == name
        # initialize, initialized and the GET share the pool; three calls need no new connection
        opened = server.opened
        assert _text(await conn.request("tools/call", {"name": "d", "arguments": {}})) == "d"
        assert server.opened == opened and conn.inflight == 0
        assert quick[-3:] == ["b", "c", "d"]  # at the latest once the first call left its connection idle


async def test_concurrent_calls_each_get_their_own_answer() -> None:
    async with _serve() as server, _connected(server) as conn:
        names = [f"n{i}" for i in range(40)]
        async with asyncio.timeout(WAIT_S):
            answers = await asyncio.gather(*(conn.request("tools/call", {"name": n, "arguments": {}}) for n in names))
        assert [_text(a) for a in answers] == names


async def test_an_sse_answer_relays_its_notification_and_answers_the_call(quick: list[str]) -> None:
    async with _serve() as server, _connected(server) as conn:
        await conn.request("tools/call", {"name": "warm", "arguments": {}})  # a kept-alive connection now
        owner = _Owner()
        async with asyncio.timeout(WAIT_S):
            answer = await conn.request("tools/call", {"name": "sse", "arguments": {}}, owner)
            assert _text(answer) == "sse"
            assert [m["method"] for m in owner.delivered] == ["notifications/message"]
            assert _text(await conn.request("tools/call", {"name": "after", "arguments": {}})) == "after"
        assert quick[-2:] == ["sse", "after"]


async def test_a_timed_out_call_closes_its_connection_and_is_cancelled_upstream(quick: list[str]) -> None:
    async with _serve() as server, _connected(server) as conn:
        await conn.request("tools/call", {"name": "warm", "arguments": {}})
        assert await _quick_warm(conn, quick)
        closed = server.closed
        started = time.monotonic()
        with pytest.raises(jsonrpc.RpcError) as timed_out:
            await conn.request("tools/call", {"name": "hold", "arguments": {}}, timeout=0.2)
        elapsed = time.monotonic() - started
        assert timed_out.value.code == errors.BACKEND_TIMEOUT
        assert timed_out.value.message == "backend raw did not answer within 0.2s"
        assert 0.2 <= elapsed < 1.5
        await _until(lambda: server.closed > closed)  # the held exchange's connection is gone
        await _until(lambda: "notifications/cancelled" in server.methods())
        assert conn.inflight == 0
        assert _text(await conn.request("tools/call", {"name": "next", "arguments": {}})) == "next"


async def test_a_cancelled_call_answers_32800_and_closes_its_connection(quick: list[str]) -> None:
    async with _serve() as server, _connected(server) as conn:
        await conn.request("tools/call", {"name": "warm", "arguments": {}})
        assert await _quick_warm(conn, quick)
        closed = server.closed
        pending = conn.begin("tools/call", {"name": "hold", "arguments": {}}, _Owner())
        call = asyncio.create_task(conn.call(pending))
        async with asyncio.timeout(WAIT_S):
            await server.held.wait()
            conn.cancel(pending, "bye")
            answer = await call
        assert answer["error"]["code"] == errors.REQUEST_CANCELLED
        await _until(lambda: server.closed > closed)
        await _until(lambda: "notifications/cancelled" in server.methods())
        assert conn.inflight == 0


async def test_a_caller_that_goes_away_closes_its_exchange(quick: list[str]) -> None:
    async with _serve() as server, _connected(server) as conn:
        await conn.request("tools/call", {"name": "warm", "arguments": {}})
        assert await _quick_warm(conn, quick)
        closed = server.closed
        call = asyncio.create_task(conn.request("tools/call", {"name": "hold", "arguments": {}}))
        async with asyncio.timeout(WAIT_S):
            await server.held.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await _until(lambda: server.closed > closed)
        await _until(lambda: "notifications/cancelled" in server.methods())
        assert conn.inflight == 0


async def test_a_kept_alive_connection_closed_before_answering_is_retried_once(quick: list[str]) -> None:
    async with _serve() as server, _connected(server) as conn:
        await conn.request("tools/call", {"name": "warm", "arguments": {}})
        assert await _quick_warm(conn, quick)
        server.drops_left = 1
        async with asyncio.timeout(WAIT_S):
            assert _text(await conn.request("tools/call", {"name": "drop", "arguments": {}})) == "drop"
        assert server.methods().count("tools/call") == 4  # warm, warm2, the dropped one, its retry


async def test_a_connection_lost_mid_answer_fails_the_call(quick: list[str]) -> None:
    async with _serve() as server, _connected(server) as conn:
        await conn.request("tools/call", {"name": "warm", "arguments": {}})
        assert await _quick_warm(conn, quick)
        async with asyncio.timeout(WAIT_S):
            answer = await conn.request("tools/call", {"name": "half", "arguments": {}})
        assert answer["error"]["code"] == errors.BACKEND_UNAVAILABLE
        assert "transport error" in answer["error"]["message"]
        assert _text(await conn.request("tools/call", {"name": "next", "arguments": {}})) == "next"
