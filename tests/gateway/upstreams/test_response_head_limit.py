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
from gateway.config import Limits
from gateway.upstreams.connection import BackendConnection
from gateway.upstreams.httpclient import MAX_HEAD_BYTES
from tests.support import RawBackend, call_tool, http_backend, raw_mcp_backend, text_of, until_in

pytestmark = pytest.mark.timeout(60)

WAIT_S = 10.0  # a bound for every await
TIMEOUT_S = 30.0  # the backend's timeout_s: far beyond what a call refused on its head may take
FAST_S = 5.0  # what such a call may take at most (on a loaded machine; about 0.1 s on an idle one)
LIMIT = 65536
INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "heads"}}


@dataclass
class Server(RawBackend):
    limit: int = LIMIT
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


def _serve(limit: int = LIMIT) -> contextlib.AbstractAsyncContextManager[Server]:
    seen = Server(limit=limit)

    async def on_call(name: str, rpc_id: Any, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        return await _misbehave(name, rpc_id, writer, seen)

    return raw_mcp_backend(on_call, INIT, seen)


def _connected(server: Server, limits: Limits) -> contextlib.AbstractAsyncContextManager[BackendConnection]:
    """A legacy-era connection to ``server``, its carrier made as the gateway makes it (``limits``)."""
    return http_backend(server.url, limits=limits, timeout_s=TIMEOUT_S, name="heads", wait_s=WAIT_S)


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
            assert text_of(await call_tool(conn, "warm")) == "warm"
        started = time.monotonic()
        answer = await call_tool(conn, name)
        took = time.monotonic() - started
        assert (name in quick) == warm  # the path this case meant to test
        error = answer["error"]
        assert error["code"] == errors.PAYLOAD_TOO_LARGE, answer
        assert error["message"] == f"backend heads sent a response head over {LIMIT} bytes", answer
        assert took < FAST_S  # on the limit, not at the call's deadline (TIMEOUT_S)
        await until_in(server.closed, name)  # the connection is closed, never returned to the pool
        if name in server.sent:
            assert server.sent[name] < 16 * LIMIT  # the client stopped reading: what it held stayed bounded
        assert text_of(await call_tool(conn, "after")) == "after"
        carried = next(names for names in server.connections if name in names)
        assert carried[-1] == name  # nothing went on the refused connection after it
        assert conn.inflight == 0


@pytest.mark.parametrize("warm", [False, True], ids=["awaited-path", "quick-path"])
async def test_a_head_unfinished_at_the_limit_is_answered(warm: bool, quick: list[str]) -> None:
    async with _serve() as server, _connected(server, Limits()) as conn:
        if warm:
            assert text_of(await call_tool(conn, "warm")) == "warm"
        assert text_of(await call_tool(conn, "at-limit")) == "at-limit"
        assert ("at-limit" in quick) == warm
        assert text_of(await call_tool(conn, "after")) == "after"


async def test_the_configured_limit_is_the_one_applied() -> None:
    limit = 4096
    async with _serve(limit) as server, _connected(server, Limits(max_response_head_bytes=limit)) as conn:
        assert text_of(await call_tool(conn, "at-limit")) == "at-limit"
        answer = await call_tool(conn, "endless-lines")
        assert answer["error"]["message"] == f"backend heads sent a response head over {limit} bytes", answer
        assert server.sent["endless-lines"] < 16 * limit
