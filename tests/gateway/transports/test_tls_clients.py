"""The gateway's HTTP protocol (transports/http_protocol.py, with its coalescing transport) under TLS, as an
app embedded in uvicorn with ``ssl_certfile``/``ssl_keyfile`` serves it: the transport underneath is then
the loop's SSL protocol transport, not a socket's, on both loops the gateway may run (asyncio, uvloop).

Real HTTPS requests over loopback with a throwaway CA (tests/support_tls.py): kept-alive requests, a
client that leaves mid-response, an idle connection the server closes, a response far larger than the
buffers (flow control), an SSE stream, the protocol's own refusals (400, 408, 431), a client that never
reads. Every connection must end without the loop reporting an error (an exception in a callback, which
asyncio logs with its traceback), and every response must arrive whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import uvloop
from websockets.asyncio.client import connect as ws_connect
from websockets.typing import Subprotocol

from adapters import mcp_modern
from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway
from gateway.errors import INVALID_REQUEST
from gateway.transports.client_limits import LINGER_S
from gateway.transports.http_protocol import CoalescingHttpToolsProtocol
from gateway.transports.ws_server import SafeWebSocketProtocol
from tests.gateway.transports.modern_door_support import META, headers_for, rpc
from tests.gateway.transports.test_lean_cycle import read_response
from tests.support import served_by_gateway_protocol
from tests.support_tls import make_pki

pytestmark = pytest.mark.timeout(60)

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
WAIT_S = 10.0
HEAD_S = 0.5  # limits.request_head_timeout_s
IDLE_S = 1  # limits.keep_alive_timeout_s (whole seconds)
LARGE = 8 << 20  # a response far larger than the socket and TLS buffers together


@dataclass
class Served:
    """A real Gateway (the builtin demo backend) under uvicorn over TLS, and what its loop reported."""

    gateway: Gateway
    server: uvicorn.Server
    port: int
    client_context: ssl.SSLContext
    problems: list[dict[str, Any]] = field(default_factory=list)  # the loop's exception handler's contexts

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.client_context)

    async def all_closed(self) -> None:
        """Every client connection has ended (uvicorn's connection_lost has run for each)."""
        async with asyncio.timeout(WAIT_S):
            while self.server.server_state.connections:  # noqa: ASYNC110 (uvicorn's set has no event)
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # callbacks the losses scheduled (asyncio's SSL protocol calls connection_lost soon)


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


def serve_tls(
    loop: str,
    tmp_path: Path,
    test: Callable[[Served], Awaitable[None]],
    limits: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``test`` against a gateway served over TLS on ``loop``; every connection is over when it returns.
    What the loop's exception handler was given (nothing, if all went well)."""
    pki = make_pki(tmp_path)
    problems: list[dict[str, Any]] = []

    def report(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        problems.append(context)
        loop.default_exception_handler(context)  # logged as ever (with its traceback), and counted

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(report)
        cfg = Config.model_validate(
            {"backends": {"demo": {"transport": "builtin"}}, "limits": {"keep_alive_timeout_s": 60, **(limits or {})}}
        )
        gateway = Gateway(cfg)
        app = build_app(cfg, gateway)
        options = {
            "ssl_certfile": str(pki.server_cert),
            "ssl_keyfile": str(pki.server_key),
            # as gateway/cli.py
            "timeout_keep_alive": cfg.limits.keep_alive_timeout_s,
            "ws": SafeWebSocketProtocol,
        }
        async with served_by_gateway_protocol(app, gateway, "demo", **options) as (server, port):
            served = Served(gateway, server, port, ssl.create_default_context(cafile=str(pki.ca_file)), problems)
            await test(served)
            await served.all_closed()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())
    return problems


def assert_clean(problems: list[dict[str, Any]], logged: pytest.LogCaptureFixture) -> None:
    """Nothing given to the loop's exception handler, nothing logged as an error, and no warning of asyncio's
    (its SSL protocol warns of writes to a closed connection)."""
    assert not problems, [(p.get("message"), p.get("exception")) for p in problems]
    bad = [
        r
        for r in logged.records
        if r.levelno >= logging.ERROR or (r.name == "asyncio" and r.levelno >= logging.WARNING)
    ]
    assert not bad, [(r.name, r.getMessage()) for r in bad]


def call_bytes(message: dict[str, Any], name: str) -> bytes:
    """A 2026-07-28 ``tools/call`` as a raw HTTP/1.1 POST (kept alive)."""
    body = json.dumps(message).encode()
    head = ["POST /mcp HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in headers_for("tools/call", name).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def echo(text: str, rpc_id: Any) -> bytes:
    return call_bytes(rpc("tools/call", {"name": "echo", "arguments": {"text": text}}, rpc_id), "echo")


def counting(n: int, delay_s: float, rpc_id: Any) -> bytes:
    """A ``slow_count`` that streams its progress (SSE)."""
    meta = {**META, "progressToken": "tok", mcp_modern.LOG_LEVEL_KEY: "info"}
    message = rpc("tools/call", {"name": "slow_count", "arguments": {"n": n, "delay_s": delay_s}}, rpc_id, meta=meta)
    return call_bytes(message, "slow_count")


def echoed(body: bytes | str, rpc_id: Any) -> str:
    answer = json.loads(body)
    assert answer["id"] == rpc_id, answer
    text: str = answer["result"]["content"][0]["text"]
    return text


async def closed_by_server(reader: asyncio.StreamReader, within_s: float = WAIT_S) -> bytes:
    """What the server sent until its end of the connection (TLS close_notify, then the close)."""
    async with asyncio.timeout(within_s):
        return await reader.read()


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
        async with asyncio.timeout(WAIT_S):
            await writer.wait_closed()


# ---- responses ------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_kept_alive_requests_then_the_client_closes(
    loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """Several calls on one connection, answered whole; then the client closes (close_notify, then FIN):
    the server's protocol is told the connection is lost, and nothing is reported. (Before, asyncio's SSL
    transport, closed twice, forgot its protocol, and the wrapper's close raised in connection_lost.)"""

    async def test(served: Served) -> None:
        reader, writer = await served.connect()
        try:
            for rpc_id in range(1, 6):
                writer.write(echo(f"hi {rpc_id}", rpc_id))
                status, headers, body = await read_response(reader)
                assert status == 200 and headers["content-type"] == "application/json"
                assert echoed(body, rpc_id) == f"hi {rpc_id}"
            assert len(served.server.server_state.connections) == 1
        finally:
            await close(writer)

    assert_clean(serve_tls(loop, tmp_path, test), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_httpx_over_tls(loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    """An ordinary HTTPS client: its pool keeps the connection alive between calls, then closes it."""

    async def test(served: Served) -> None:
        url = f"https://127.0.0.1:{served.port}/mcp"
        async with httpx.AsyncClient(verify=served.client_context, timeout=WAIT_S) as client:
            for rpc_id in range(1, 4):
                call = rpc("tools/call", {"name": "echo", "arguments": {"text": "over tls"}}, rpc_id)
                answer = await client.post(url, headers=headers_for("tools/call", "echo"), json=call)
                assert answer.status_code == 200 and echoed(answer.content, rpc_id) == "over tls"
            assert len(served.server.server_state.connections) == 1

    assert_clean(serve_tls(loop, tmp_path, test), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_large_responses_arrive_whole(
    loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sixteen answers of 1 MiB pipelined, then 8 MiB in one answer, each read only after a pause: the socket
    and the TLS layer fill up and the answers' sender waits (pause_writing, then resume_writing); all
    arrive whole and in order, and the connection serves the next call. (A write alone is not paused
    under TLS: the SSL transport hands it all to the socket's transport and counts only what it still
    holds itself; the writes after it are. Pipelined first: once loopback's buffers have grown for a
    large answer, what follows may fit in them.)"""
    paused: list[bool] = []
    pause_writing = CoalescingHttpToolsProtocol.pause_writing

    def counted(protocol: CoalescingHttpToolsProtocol) -> None:
        paused.append(True)
        pause_writing(protocol)

    monkeypatch.setattr(CoalescingHttpToolsProtocol, "pause_writing", counted)
    large = "x" * LARGE
    texts = [letter * (1 << 20) for letter in "abcdefghijklmnop"]  # more than loopback buffers hold (~10 MiB)

    async def test(served: Served) -> None:
        reader, writer = await served.connect()
        try:
            writer.write(b"".join(echo(text, i) for i, text in enumerate(texts)))
            await asyncio.sleep(0.5)  # the server writes into full buffers meanwhile
            async with asyncio.timeout(WAIT_S):
                answers = [await read_response(reader) for _ in texts]
            assert [echoed(body, i) for i, (_status, _headers, body) in enumerate(answers)] == texts
            assert paused, "the TLS transport held the sender (flow control)"
            writer.write(echo(large, "big"))
            await asyncio.sleep(0.5)
            async with asyncio.timeout(WAIT_S):
                status, _headers, body = await read_response(reader)
            assert status == 200 and echoed(body, "big") == large
            writer.write(echo("after", "after"))
            assert echoed((await read_response(reader))[2], "after") == "after"
        finally:
            await close(writer)

    assert_clean(serve_tls(loop, tmp_path, test, {"max_body_bytes": 2 * LARGE}), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_sse_stream_arrives_whole(loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    async def test(served: Served) -> None:
        reader, writer = await served.connect()
        try:
            writer.write(counting(20, 0.005, "s"))
            status, headers, body = await read_response(reader)
            assert status == 200 and headers["content-type"] == "text/event-stream"
            lines = body.decode().splitlines()
            events = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
            progress = [e["params"]["progress"] for e in events if e.get("method") == "notifications/progress"]
            assert progress == list(range(1, 21))
            assert events[-1]["id"] == "s" and events[-1]["result"]["content"][0]["text"] == "counted to 20"
            writer.write(echo("after", 2))  # the connection is kept alive after a stream
            assert echoed((await read_response(reader))[2], 2) == "after"
        finally:
            await close(writer)

    assert_clean(serve_tls(loop, tmp_path, test), logged)


# ---- either side ends the connection --------------------------------------------------------------


@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_that_leaves_mid_stream_cancels_its_call(
    loop: str, how: str, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """An SSE stream the client leaves after its first event, with a TLS close (close_notify) or an abort:
    the call is cancelled upstream (the wrapper learns of the loss) and nothing is reported."""

    async def test(served: Served) -> None:
        demo = served.gateway.connections["demo"]
        reader, writer = await served.connect()
        writer.write(counting(200, 0.05, "long"))
        async with asyncio.timeout(WAIT_S):
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"text/event-stream" in head
            await reader.readuntil(b"\n\n")  # the first event
        assert demo.inflight == 1
        if how == "abort":
            writer.transport.abort()
        else:
            await close(writer)
        async with asyncio.timeout(WAIT_S):
            while demo.inflight:  # noqa: ASYNC110 (polled: the count has no event)
                await asyncio.sleep(0.01)

    assert_clean(serve_tls(loop, tmp_path, test), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_that_leaves_mid_response_is_let_go(
    loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """A large response the client stops reading and closes: the rest is dropped, the connection ends."""

    async def test(served: Served) -> None:
        reader, writer = await served.connect()
        writer.write(echo("y" * LARGE, "big"))
        async with asyncio.timeout(WAIT_S):
            await reader.readexactly(1 << 16)  # some of it
        await close(writer)

    assert_clean(serve_tls(loop, tmp_path, test, {"max_body_bytes": 2 * LARGE}), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_idle_connection_is_closed_by_the_server(
    loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """limits.keep_alive_timeout_s, after an answer and on a connection that never sent anything."""

    async def test(served: Served) -> None:
        reader, writer = await served.connect()
        try:
            writer.write(echo("hi", 1))
            assert echoed((await read_response(reader))[2], 1) == "hi"
            assert await closed_by_server(reader, IDLE_S + 5) == b""
        finally:
            await close(writer)
        reader, writer = await served.connect()
        try:
            assert await closed_by_server(reader, IDLE_S + 5) == b""
        finally:
            await close(writer)

    assert_clean(serve_tls(loop, tmp_path, test, {"keep_alive_timeout_s": IDLE_S}), logged)


# ---- the protocol's own refusals ------------------------------------------------------------------


async def _assert_refused(reader: asyncio.StreamReader, status: int, message: str) -> None:
    """The refusal, a JSON-RPC error of id null, then the server's end of the connection."""
    got, headers, body = await read_response(reader)
    assert got == status and headers["connection"] == "close" and headers["content-type"] == "application/json"
    assert json.loads(body) == {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    assert await closed_by_server(reader) == b""


_REFUSALS: dict[str, tuple[bytes, int, str]] = {
    # A head far over max_request_head_bytes in one write: refused while most of it is still on its way.
    "431-while-sending": (
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * (4 << 20),
        431,
        "Request head over 16384 bytes",
    ),
    "408-half-head": (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le",
        408,
        "Request head not received within 0.5 s",
    ),
    "400-unparsable": (
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad\x01: y\r\n\r\n",
        400,
        "Request could not be parsed: Invalid header token",
    ),
    "400-unparsable-while-sending": (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad\x01: y\r\nContent-Length: 4194304\r\n\r\n" + b"z" * (4 << 20),
        400,
        "Request could not be parsed: Invalid header token",
    ),
}


@pytest.mark.parametrize("case", _REFUSALS)
@pytest.mark.parametrize("loop", LOOPS)
def test_a_refusal_is_read_by_the_client(
    loop: str, case: str, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """TLS has no half-close, so no lingering close with our FIN: the refusal is sent, then the TLS close,
    which reads and drops what the client still sends until its close_notify."""
    payload, status, message = _REFUSALS[case]

    async def test(served: Served) -> None:
        reader, writer = await served.connect()
        try:
            writer.write(payload)
            with contextlib.suppress(ConnectionError):
                async with asyncio.timeout(WAIT_S):
                    await writer.drain()
            await _assert_refused(reader, status, message)
        finally:
            await close(writer)
        reader, writer = await served.connect()  # the server goes on serving
        try:
            writer.write(echo("fine", 1))
            assert echoed((await read_response(reader))[2], 1) == "fine"
        finally:
            await close(writer)

    limits = {"request_head_timeout_s": HEAD_S, "max_request_head_bytes": 16384}
    assert_clean(serve_tls(loop, tmp_path, test, limits), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_refused_client_that_stays_is_let_go_after_the_linger(
    loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """A client that neither reads its refusal nor closes: the TLS close waits for a close_notify that never
    comes, for the SSL shutdown timeout (30 s) unless the protocol holds it to ``LINGER_S``, as it holds a
    plain connection's lingering close. (A blocking TLS socket in a thread: asyncio's own client answers
    a close_notify by itself.)"""

    async def test(served: Served) -> None:
        def refused_client() -> ssl.SSLSocket:
            raw = socket.create_connection(("127.0.0.1", served.port))
            tls = served.client_context.wrap_socket(raw, server_hostname="127.0.0.1")
            tls.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")  # half a head: 408
            return tls

        tls = await asyncio.to_thread(refused_client)
        try:
            start = time.monotonic()
            async with asyncio.timeout(WAIT_S):
                while not served.server.server_state.connections:  # noqa: ASYNC110 (uvicorn's set has no event)
                    await asyncio.sleep(0.01)
            await served.all_closed()
            assert time.monotonic() - start < HEAD_S + LINGER_S + 2
        finally:
            tls.close()

    assert_clean(serve_tls(loop, tmp_path, test, {"request_head_timeout_s": HEAD_S}), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_that_never_reads_is_dropped(loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    """A large response its client never reads: past response_send_timeout_s the connection is aborted
    (under TLS the abort goes through the SSL transport to the socket's)."""

    async def test(served: Served) -> None:
        _reader, writer = await served.connect()
        try:
            writer.write(echo("z" * LARGE, "big"))
            async with asyncio.timeout(WAIT_S):
                while served.server.server_state.connections:  # noqa: ASYNC110 (uvicorn's set has no event)
                    await asyncio.sleep(0.05)
        finally:
            writer.transport.abort()

    limits = {"max_body_bytes": 2 * LARGE, "response_send_timeout_s": 0.5}
    assert_clean(serve_tls(loop, tmp_path, test, limits), logged)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_websocket_over_tls(loop: str, tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    """wss: uvicorn hands the wrapped transport to the WebSocket protocol; a session, a call, a close."""

    async def test(served: Served) -> None:
        url = f"wss://127.0.0.1:{served.port}/mcp/ws"
        async with ws_connect(url, ssl=served.client_context, subprotocols=[Subprotocol("mcp")]) as ws:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}))
            assert json.loads(await ws.recv())["id"] == 0
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            call = {"name": "echo", "arguments": {"text": "over wss"}}
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}))
            assert echoed(await ws.recv(), 1) == "over wss"

    assert_clean(serve_tls(loop, tmp_path, test), logged)
