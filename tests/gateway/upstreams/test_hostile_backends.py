"""Hostile and broken HTTP backends against the gateway's HTTP client (gateway/upstreams/httpclient.py,
through ``BackendConnection`` and ``HttpCarrier`` as the gateway uses them).

A raw asyncio server on loopback misbehaves on purpose, chosen by the called tool's name: a head
sent slowly and never finished, a Content-Length larger than what follows, an endless chunked body,
an invalid chunk size, a body over the message limit, an SSE stream with one line that never ends,
a connection closed mid-response, and bytes sent on an idle kept-alive connection that no request
asked for. For each: the call ends with a JSON-RPC error (within the backend's ``timeout_s`` at the
latest), the connection it used is closed (never reused), and the next call is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from gateway import errors, jsonrpc
from gateway.upstreams.connection import BackendConnection
from tests.support import RawBackend, call_tool, http_backend, raw_mcp_backend, text_of, until_in

pytestmark = pytest.mark.timeout(60)

WAIT_S = 10.0  # a bound for every await: the calls themselves end within TIMEOUT_S
TIMEOUT_S = 1.0  # the backend's timeout_s
MAX_BYTES = 64 * 1024  # the carrier's max_message_bytes
INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile"}}


@dataclass
class Server(RawBackend):
    sent: dict[str, int] = field(default_factory=dict)  # bytes written per misbehaviour, until the peer left
    served: list[str] = field(default_factory=list)  # the tool calls answered properly
    unsolicited_sent: asyncio.Event = field(default_factory=asyncio.Event)


def _response(ctype: bytes, data: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (ctype, len(data), data)


async def _trickle(writer: asyncio.StreamWriter, server: Server, name: str, piece: bytes, every_s: float) -> None:
    """Write ``piece`` again and again until the client leaves (counted in ``server.sent``)."""
    server.sent[name] = 0
    while not writer.is_closing():
        writer.write(piece)
        await writer.drain()
        server.sent[name] += len(piece)
        await asyncio.sleep(every_s)


async def _misbehave(
    name: str, rpc_id: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
) -> bool:
    """Answer the call ``name`` the hostile way; False once the connection is done with."""
    if name == "head-never-finished":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        await _trickle(writer, server, name, b"x-slow: 1\r\n", 0.05)
    elif name == "short-body":
        writer.write(b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"jsonrpc"')
        await reader.read()  # silence until the client leaves
    elif name == "endless-chunked":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        await _trickle(writer, server, name, b"400\r\n" + b" " * 1024 + b"\r\n", 0.001)
    elif name == "slow-chunked":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        await _trickle(writer, server, name, b"1\r\n \r\n", 0.05)
    elif name == "bad-chunk-size":
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n"
        )
        await reader.read()
    elif name == "oversize":
        data = orjson.dumps(jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": "a" * (2 * MAX_BYTES)}]}))
        writer.write(_response(b"application/json", data))
        await reader.read()
    elif name == "sse-endless-line":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"6\r\ndata: \r\n")
        await _trickle(writer, server, name, b"400\r\n" + b"a" * 1024 + b"\r\n", 0.001)
    elif name == "sse-silent":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await reader.read()
    elif name == "closed-mid-head":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-ty")
    elif name == "closed-mid-body":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{")
    elif name == "unsolicited":
        result = jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": name}]})
        writer.write(_response(b"application/json", orjson.dumps(result)))
        await writer.drain()
        await asyncio.sleep(0.05)  # the connection is idle in the client's pool by now
        stray = jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": "stray"}]})
        writer.write(_response(b"application/json", orjson.dumps(stray)))
        await writer.drain()
        server.unsolicited_sent.set()
        return True  # if the client kept it, the next request would read the stray answer
    else:
        return True
    return False


def _serve() -> contextlib.AbstractAsyncContextManager[Server]:
    seen = Server()

    async def on_call(name: str, rpc_id: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if not await _misbehave(name, rpc_id, reader, writer, seen):
            return False
        if name != "unsolicited":
            seen.served.append(name)
            result = jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": name}]})
            writer.write(_response(b"application/json", orjson.dumps(result)))
        return True

    return raw_mcp_backend(on_call, INIT, seen)


@contextlib.asynccontextmanager
async def _connected(server: Server) -> AsyncIterator[BackendConnection]:
    async with http_backend(
        server.url, max_bytes=MAX_BYTES, timeout_s=TIMEOUT_S, name="hostile", wait_s=WAIT_S
    ) as conn:
        yield conn


HOSTILE = {
    # name: the JSON-RPC error code the call ends with, and a part of its message
    "head-never-finished": (errors.BACKEND_TIMEOUT, "did not answer within"),
    "short-body": (errors.BACKEND_TIMEOUT, "did not answer within"),
    "endless-chunked": (errors.PAYLOAD_TOO_LARGE, "bytes"),
    "slow-chunked": (errors.BACKEND_TIMEOUT, "did not answer within"),
    "bad-chunk-size": (errors.BACKEND_UNAVAILABLE, "malformed HTTP response"),
    "oversize": (errors.PAYLOAD_TOO_LARGE, "bytes"),
    "sse-endless-line": (jsonrpc.INTERNAL_ERROR, "SSE line exceeds the size limit"),
    "sse-silent": (errors.BACKEND_TIMEOUT, "did not answer within"),
    "closed-mid-head": (errors.BACKEND_UNAVAILABLE, "closed"),
    "closed-mid-body": (errors.BACKEND_UNAVAILABLE, "closed"),
}


@pytest.mark.parametrize("warm", [False, True], ids=["awaited-path", "quick-path"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_a_hostile_answer_fails_the_call_and_the_next_call_works(name: str, warm: bool, quick: list[str]) -> None:
    """``warm``: a call answered first leaves a kept-alive connection, so that the hostile call goes
    the quick way (gateway/upstreams/quick.py); else it goes the awaited way (a ``Response``, post_stream.py)."""
    code, words = HOSTILE[name]
    async with _serve() as server, _connected(server) as conn:
        if warm:
            assert text_of(await call_tool(conn, "warm")) == "warm"
        answer = await call_tool(conn, name)
        assert (name in quick) == warm  # the path this case meant to test
        assert answer["error"]["code"] == code and words in answer["error"]["message"], answer
        await until_in(server.closed, name)  # the connection it used is closed, never reused
        if name in server.sent:
            assert server.sent[name] < 16 * MAX_BYTES  # the client stopped reading: memory stayed bounded
        assert text_of(await call_tool(conn, "after")) == "after"
        assert conn.inflight == 0


async def test_bytes_on_an_idle_kept_alive_connection_close_it() -> None:
    """A response no request asked for must not be taken as the next request's answer."""
    async with _serve() as server, _connected(server) as conn:
        assert text_of(await call_tool(conn, "unsolicited")) == "unsolicited"
        async with asyncio.timeout(WAIT_S):
            await server.unsolicited_sent.wait()
        # The client closes that connection as the stray bytes arrive. (Bytes that arrive after the next
        # request went out on it cannot be told from its answer: HTTP/1.1 has no request ids. A stray
        # answer of another id is then dropped by id, and that call ends at its deadline.)
        await until_in(server.closed, "unsolicited")
        for name in ("one", "two", "three"):
            answer = await call_tool(conn, name)
            assert text_of(answer) == name, answer  # never "stray"
