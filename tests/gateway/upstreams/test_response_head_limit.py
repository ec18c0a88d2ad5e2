"""A backend's response head is bounded as it arrives (ADR 0023, ``limits.max_response_head_bytes``).

httptools keeps an unfinished header line whole, and the awaited path's ``Response`` keeps every header
line: a backend that never ends its head would hold memory until the call's ``timeout_s``. A raw asyncio
server on loopback answers each tool call the way its name says: one header line without end, small
header lines without end, a head whose first ``limit`` bytes arrive before its last one (answered:
at the limit, not over it) and one whose first ``limit + 1`` do (refused). What is counted is what
arrives while the head is unfinished: the read that ends a head (one read at most, 256 KiB) is not.
Both paths are tested: the quick one (a kept-alive connection idle, gateway/upstreams/quick.py) and the
awaited one (``ConnectionPool.request``). The call timeout is long, so a call that ends at once ended
on the limit, not on its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pydantic
import pytest

from gateway import errors, jsonrpc
from gateway.config import Backend, Limits
from gateway.upstreams import make_carrier
from gateway.upstreams.connection import BackendConnection
from gateway.upstreams.httpclient import MAX_HEAD_BYTES
from tests.support import QuietHandler, raw_http_server, read_http_request

pytestmark = pytest.mark.timeout(60)

WAIT_S = 10.0  # a bound for every await
TIMEOUT_S = 30.0  # the backend's timeout_s: far beyond what a call refused on its head may take
FAST_S = 5.0  # what such a call may take at most (on a loaded machine; about 0.1 s on an idle one)
LIMIT = 65536
INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "heads"}}


@dataclass
class Server:
    limit: int
    url: str = ""
    connections: list[list[str]] = field(default_factory=list)  # the calls of each connection, in order
    closed: set[str] = field(default_factory=set)  # the calls whose connection has ended
    sent: dict[str, int] = field(default_factory=dict)  # bytes of an endless head written until the peer left


def _answer(rpc_id: Any, text: str) -> bytes:
    return orjson.dumps(jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": text}]}))


def _response(data: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data)


def _head_of(size: int, body: bytes) -> bytes:
    """A response head of exactly ``size`` bytes (status line, header lines, the empty line) for ``body``."""
    start = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % len(body)
    lines = [start]
    left = size - len(start) - 2
    while left > 0:
        name = b"x-pad-%d: " % len(lines)
        length = left if left < 2000 else 1000  # the last line takes the rest (100 bytes at least)
        lines.append(name + b"a" * (length - len(name) - 2) + b"\r\n")
        left -= length
    head = b"".join(lines) + b"\r\n"
    assert len(head) == size
    return head


async def _endless(writer: asyncio.StreamWriter, server: Server, name: str, pieces: AsyncIterator[bytes]) -> None:
    server.sent[name] = 0
    async for piece in pieces:
        writer.write(piece)
        await writer.drain()  # raises once the client has closed the connection
        server.sent[name] += len(piece)
        await asyncio.sleep(0.001)


async def _one_line() -> AsyncIterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-endless: "
    while True:
        yield b"a" * 1024


async def _many_lines() -> AsyncIterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    for block in range(1_000_000):
        yield b"".join(b"x-h%d-%d: 1\r\n" % (block, i) for i in range(64))


async def _misbehave(name: str, rpc_id: Any, writer: asyncio.StreamWriter, server: Server) -> bool:
    """Answer the call ``name``; False once the connection is done with."""
    if name == "endless-line":
        await _endless(writer, server, name, _one_line())
        return False
    if name == "endless-lines":
        await _endless(writer, server, name, _many_lines())
        return False
    if name in ("at-limit", "over-limit"):
        body = _answer(rpc_id, name)
        head = _head_of(server.limit + (2 if name == "over-limit" else 1), body)
        writer.write(head[:-1])  # every byte of the head but its last, counted as unfinished (limit or limit + 1)
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(head[-1:] + body)
        return True
    writer.write(_response(_answer(rpc_id, name)))
    return True


@contextlib.asynccontextmanager
async def _serve(limit: int = LIMIT) -> AsyncIterator[Server]:
    seen = Server(limit)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        names: list[str] = []
        seen.connections.append(names)
        try:
            while True:
                lines, _headers, body = await read_http_request(reader)
                message = orjson.loads(body) if lines[0].startswith("POST") else {}
                if not message:
                    writer.write(b"HTTP/1.1 405 X\r\ncontent-length: 0\r\n\r\n")  # no GET stream
                elif "id" not in message:
                    writer.write(b"HTTP/1.1 202 X\r\ncontent-length: 0\r\n\r\n")
                elif message["method"] == "initialize":
                    writer.write(_response(orjson.dumps(jsonrpc.result(message["id"], INIT))))
                else:
                    names.append(message["params"]["name"])
                    if not await _misbehave(names[-1], message["id"], writer, seen):
                        return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            seen.closed.update(names)
            writer.close()

    async with raw_http_server(handle) as seen.url:
        yield seen


@contextlib.asynccontextmanager
async def _connected(server: Server, limits: Limits) -> AsyncIterator[BackendConnection]:
    """A legacy-era connection to ``server``, its carrier made as the gateway makes it (``limits``)."""
    config = Backend(transport="http", url=server.url, era="legacy", timeout_s=TIMEOUT_S, mcpc="off")
    conn = BackendConnection(
        "heads", config, lambda: make_carrier("heads", config, limits), QuietHandler(), {"name": "sb"}
    )
    await conn.start()
    try:
        assert await conn.wait_ready(WAIT_S)
        yield conn
    finally:
        async with asyncio.timeout(WAIT_S):
            await conn.close()


async def _call(conn: BackendConnection, name: str) -> dict[str, Any]:
    """The call's answer, or its error as the JSON-RPC answer the client gets."""
    async with asyncio.timeout(WAIT_S):
        try:
            return await conn.request("tools/call", {"name": name, "arguments": {}})
        except jsonrpc.RpcError as exc:
            return {"jsonrpc": "2.0", "error": exc.to_error()}


def _text(answer: dict[str, Any]) -> str:
    return str(answer["result"]["content"][0]["text"])


async def _closed(server: Server, name: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while name not in server.closed:  # noqa: ASYNC110 (the raw server offers a set, not events)
            await asyncio.sleep(0.005)


def test_the_limit_is_a_documented_field_of_64_kib() -> None:
    assert Limits().max_response_head_bytes == LIMIT == MAX_HEAD_BYTES
    assert "status line and headers" in (Limits.model_fields["max_response_head_bytes"].description or "")
    with pytest.raises(pydantic.ValidationError):
        Limits(max_response_head_bytes=0)


@pytest.mark.parametrize("warm", [False, True], ids=["awaited-path", "quick-path"])
@pytest.mark.parametrize("name", ["endless-line", "endless-lines", "over-limit"])
async def test_a_head_over_the_limit_fails_the_call_at_once_and_closes_its_connection(
    name: str, warm: bool, quick: list[str]
) -> None:
    async with _serve() as server, _connected(server, Limits()) as conn:
        if warm:
            assert _text(await _call(conn, "warm")) == "warm"
        started = time.monotonic()
        answer = await _call(conn, name)
        took = time.monotonic() - started
        assert (name in quick) == warm  # the path this case meant to test
        error = answer["error"]
        assert error["code"] == errors.PAYLOAD_TOO_LARGE, answer
        assert error["message"] == f"backend heads sent a response head over {LIMIT} bytes", answer
        assert took < FAST_S  # on the limit, not at the call's deadline (TIMEOUT_S)
        await _closed(server, name)  # the connection is closed, never returned to the pool
        if name in server.sent:
            assert server.sent[name] < 16 * LIMIT  # the client stopped reading: what it held stayed bounded
        assert _text(await _call(conn, "after")) == "after"
        carried = next(names for names in server.connections if name in names)
        assert carried[-1] == name  # nothing went on the refused connection after it
        assert conn.inflight == 0


@pytest.mark.parametrize("warm", [False, True], ids=["awaited-path", "quick-path"])
async def test_a_head_unfinished_at_the_limit_is_answered(warm: bool, quick: list[str]) -> None:
    async with _serve() as server, _connected(server, Limits()) as conn:
        if warm:
            assert _text(await _call(conn, "warm")) == "warm"
        assert _text(await _call(conn, "at-limit")) == "at-limit"
        assert ("at-limit" in quick) == warm
        assert _text(await _call(conn, "after")) == "after"


async def test_the_configured_limit_is_the_one_applied() -> None:
    limit = 4096
    async with _serve(limit) as server, _connected(server, Limits(max_response_head_bytes=limit)) as conn:
        assert _text(await _call(conn, "at-limit")) == "at-limit"
        answer = await _call(conn, "endless-lines")
        assert answer["error"]["message"] == f"backend heads sent a response head over {limit} bytes", answer
        assert server.sent["endless-lines"] < 16 * limit
