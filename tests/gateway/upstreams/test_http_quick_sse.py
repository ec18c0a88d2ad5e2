"""SSE answers handled in the HTTP parser's callbacks (gateway/upstreams/quick.py), end to end through
``BackendConnection`` against a raw HTTP/1.1 server on loopback that writes its chunked streams step by step.

Invariants checked: each event reaches the caller as it arrives (never held until the answer); the
response answers the call while the stream is still open; what follows it on the stream is still
relayed and the connection goes back to the pool once the stream ends (or is closed when it does
not end within the drain time); events split anywhere between reads are parsed; a stream that ends
unanswered is resumed with Last-Event-ID; an event over the size limit fails the call (-32603) and
closes the connection, as does an event that cannot be relayed (a bug: the call fails at once, not
at its deadline); a connection lost mid-stream fails the call (-32090); a call cancelled mid-stream
closes its connection.
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
from gateway.upstreams import quick as quick_module
from gateway.upstreams.connection import BackendConnection, CallOwner
from tests.support import http_backend, raw_http_server, read_http_request

WAIT_S = 5.0
MAX_BYTES = 4096
INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "raw"}}
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _log(data: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": data}}


def _event(message: dict[str, Any], event_id: str | None = None) -> bytes:
    head = b"id: %s\n" % event_id.encode() if event_id else b""
    return head + b"event: message\ndata: %s\n\n" % orjson.dumps(message)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _response(status: int, ctype: bytes, data: bytes) -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (status, ctype, len(data), data)


@dataclass
class Server:
    url: str = ""
    opened: int = 0
    closed: int = 0
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    resumed_with: list[str] = field(default_factory=list)
    resumed_id: Any = None  # the id of the latest streamed call (a resumed stream answers it)

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())


@contextlib.asynccontextmanager
async def _serve() -> AsyncIterator[Server]:
    seen = Server()

    async def stream(writer: asyncio.StreamWriter, reader: asyncio.StreamReader, name: str, rpc_id: Any) -> bool:
        """Answer one call as a chunked SSE stream; False: the connection is to be closed."""
        result = jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": name}]})
        writer.write(SSE_HEAD)
        if name == "progress":
            writer.write(_chunk(_event(_log("first"))))
            await writer.drain()
            await seen.gate("answer").wait()
            writer.write(_chunk(_event(result)))
            await writer.drain()
            await seen.gate("trailer").wait()
            writer.write(_chunk(_event(_log("after"))) + b"0\r\n\r\n")
        elif name == "split":
            data = _event(_log("split")) + _event(result)
            writer.write(b"".join(_chunk(data[i : i + 1]) for i in range(len(data))) + b"0\r\n\r\n")
        elif name == "unanswered":
            writer.write(_chunk(b"id: e1\nretry: 10\ndata: \n\n" + _event(_log("before"), "e2")) + b"0\r\n\r\n")
        elif name == "asks":
            ask = {"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {}}
            writer.write(_chunk(_event(ask) + _event(result)) + b"0\r\n\r\n")
        elif name == "big":
            writer.write(_chunk(_event(_log("x" * (2 * MAX_BYTES)))) + b"0\r\n\r\n")
        elif name in ("lost", "held"):
            writer.write(_chunk(_event(_log(name))))
            await writer.drain()
            seen.gate(name).set()
            if name == "held":
                await reader.read()  # until the gateway closes the connection
            return False
        elif name == "linger":
            writer.write(_chunk(_event(result)))
            await writer.drain()
            await reader.read()
            return False
        await writer.drain()
        return True

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.opened += 1
        try:
            while True:
                lines, headers, body = await read_http_request(reader)
                if lines[0].startswith("GET") and "last-event-id" in headers:
                    seen.resumed_with.append(headers["last-event-id"])
                    done = jsonrpc.result(seen.resumed_id, {"content": [{"type": "text", "text": "resumed"}]})
                    writer.write(_response(200, b"text/event-stream", _event(done, "e3")))
                    continue
                if not lines[0].startswith("POST"):
                    writer.write(_response(405, b"text/plain", b""))
                    continue
                message = orjson.loads(body)
                if "id" not in message:
                    writer.write(_response(202, b"text/plain", b""))
                    continue
                rpc_id = message["id"]
                if message["method"] == "initialize":
                    writer.write(_response(200, b"application/json", orjson.dumps(jsonrpc.result(rpc_id, INIT))))
                    continue
                name = message["params"]["name"]
                if name.startswith("warm"):
                    result = jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": name}]})
                    writer.write(_response(200, b"application/json", orjson.dumps(result)))
                    continue
                seen.resumed_id = rpc_id
                if not await stream(writer, reader, name, rpc_id):
                    return
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

    def logs(self) -> list[Any]:
        return [m["params"]["data"] for m in self.delivered if m.get("method") == "notifications/message"]


class _Handler:
    def __init__(self, broken: bool = False) -> None:
        self.notifications: list[dict[str, Any]] = []
        self.broken = broken

    def on_connected(self, conn: BackendConnection) -> None: ...
    def on_disconnected(self, conn: BackendConnection, reason: str) -> None: ...
    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None:
        if self.broken:
            raise RuntimeError("a bug in the handler")

    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self.notifications.append(message)

    def on_mcpc_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None: ...


@contextlib.asynccontextmanager
async def _connected(
    server: Server, quick: list[str], handler: _Handler | None = None
) -> AsyncIterator[BackendConnection]:
    async with http_backend(server.url, max_bytes=MAX_BYTES, handler=handler or _Handler(), wait_s=WAIT_S) as conn:
        async with asyncio.timeout(WAIT_S):
            await conn.request("tools/call", {"name": "warm1", "arguments": {}})
            await conn.request("tools/call", {"name": "warm2", "arguments": {}})
        assert quick[-1:] == ["warm2"]  # from here on calls find an idle connection: the quick way
        yield conn


async def _until(condition: Any) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():  # noqa: ASYNC110 (the raw server offers counters, not events)
            await asyncio.sleep(0.005)


def _text(answer: dict[str, Any]) -> str:
    return str(answer["result"]["content"][0]["text"])


async def test_events_are_relayed_as_they_arrive_and_the_stream_is_drained(quick: list[str]) -> None:
    handler = _Handler()
    async with _serve() as server, _connected(server, quick, handler) as conn:
        owner = _Owner()
        call = asyncio.create_task(conn.request("tools/call", {"name": "progress", "arguments": {}}, owner))
        await _until(lambda: owner.logs() == ["first"])  # before the answer was even written
        assert not call.done()
        opened, closed = server.opened, server.closed
        server.gate("answer").set()
        async with asyncio.timeout(WAIT_S):
            assert _text(await call) == "progress"  # while the stream is still open
        assert quick[-1] == "progress"
        server.gate("trailer").set()
        # The call is over, so what follows its answer is news for every session (as before).
        await _until(lambda: [n["params"]["data"] for n in handler.notifications] == ["after"])
        # The drained connection went back to the pool: the next call reuses it.
        async with asyncio.timeout(WAIT_S):
            assert _text(await conn.request("tools/call", {"name": "warm3", "arguments": {}})) == "warm3"
        assert (server.opened, server.closed) == (opened, closed)
        assert quick[-1] == "warm3"


async def test_events_split_anywhere_are_parsed(quick: list[str]) -> None:
    async with _serve() as server, _connected(server, quick) as conn:
        owner = _Owner()
        async with asyncio.timeout(WAIT_S):
            assert _text(await conn.request("tools/call", {"name": "split", "arguments": {}}, owner)) == "split"
        assert owner.logs() == ["split"] and quick[-1] == "split"


async def test_a_stream_ended_unanswered_is_resumed_with_last_event_id(quick: list[str]) -> None:
    async with _serve() as server, _connected(server, quick) as conn:
        owner = _Owner()
        async with asyncio.timeout(WAIT_S):
            answer = await conn.request("tools/call", {"name": "unanswered", "arguments": {}}, owner)
        assert _text(answer) == "resumed"
        assert server.resumed_with == ["e2"] and owner.logs() == ["before"]
        assert quick[-1] == "unanswered"


async def test_an_event_over_the_limit_fails_the_call_and_closes_the_connection(quick: list[str]) -> None:
    async with _serve() as server, _connected(server, quick) as conn:
        closed = server.closed
        async with asyncio.timeout(WAIT_S):
            answer = await conn.request("tools/call", {"name": "big", "arguments": {}})
        assert answer["error"]["code"] == errors.INTERNAL_ERROR
        assert "malformed stream" in answer["error"]["message"]
        await _until(lambda: server.closed > closed)
        async with asyncio.timeout(WAIT_S):
            assert _text(await conn.request("tools/call", {"name": "warm3", "arguments": {}})) == "warm3"


async def test_a_connection_lost_mid_stream_fails_the_call(quick: list[str]) -> None:
    async with _serve() as server, _connected(server, quick) as conn:
        owner = _Owner()
        async with asyncio.timeout(WAIT_S):
            answer = await conn.request("tools/call", {"name": "lost", "arguments": {}}, owner)
        assert answer["error"]["code"] == errors.BACKEND_UNAVAILABLE
        assert "transport error" in answer["error"]["message"]
        assert owner.logs() == ["lost"]


async def test_a_call_cancelled_mid_stream_closes_its_connection(quick: list[str]) -> None:
    async with _serve() as server, _connected(server, quick) as conn:
        owner = _Owner()
        pending = conn.begin("tools/call", {"name": "held", "arguments": {}}, owner)
        call = asyncio.create_task(conn.call(pending))
        async with asyncio.timeout(WAIT_S):
            await server.gate("held").wait()
            await _until(lambda: owner.logs() == ["held"])
            closed = server.closed
            conn.cancel(pending, "bye")
            answer = await call
        assert answer["error"]["code"] == errors.REQUEST_CANCELLED
        await _until(lambda: server.closed > closed)
        assert conn.inflight == 0


async def test_an_answered_stream_that_never_ends_is_closed_after_the_drain_time(
    quick: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quick_module, "DRAIN_S", 0.2)
    async with _serve() as server, _connected(server, quick) as conn:
        closed = server.closed
        async with asyncio.timeout(WAIT_S):
            assert _text(await conn.request("tools/call", {"name": "linger", "arguments": {}})) == "linger"
        assert server.closed == closed
        await _until(lambda: server.closed > closed)  # the gateway gave up on the rest of it


async def test_an_event_that_cannot_be_relayed_fails_the_call_at_once(quick: list[str]) -> None:
    async with _serve() as server, _connected(server, quick, _Handler(broken=True)) as conn:
        closed = server.closed
        async with asyncio.timeout(WAIT_S):
            answer = await conn.request("tools/call", {"name": "asks", "arguments": {}})
        assert answer["error"]["code"] == errors.INTERNAL_ERROR
        assert "answer not handled" in answer["error"]["message"]
        await _until(lambda: server.closed > closed)  # never reused half-read
