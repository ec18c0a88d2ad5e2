"""Slow, silent and malformed HTTP clients against the gateway's own protocol (transports/http_protocol.py).

A real ``switchboard run`` with small client timeouts (limits.request_head_timeout_s,
request_body_timeout_s) for the head and body cases, and an in-process server with the same
protocol for the ones that need an app of their own (a response the client never reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gateway.config import Limits
from gateway.errors import INVALID_REQUEST
from gateway.transports.coalesce import HOLD_KEY
from tests.gateway.transports.test_lean_cycle import post, read_response
from tests.support import RunningGateway, answer_lifespan, initialize_request, run_gateway, served_by_protocol

pytestmark = pytest.mark.timeout(60)

HEAD_S = 0.5
BODY_S = 0.5
IDLE_S = 1


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    limits = {
        "request_head_timeout_s": HEAD_S,
        "request_body_timeout_s": BODY_S,
        "max_request_head_bytes": 16384,
        "keep_alive_timeout_s": IDLE_S,
    }
    with run_gateway({"limits": limits, "backends": {}}) as running:
        yield running


def _port(gw: RunningGateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def _initialize() -> bytes:
    body = json.dumps(initialize_request(1)).encode()
    return post("/mcp", body, "Content-Type: application/json", "Accept: application/json, text/event-stream")


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _closed_after(reader: asyncio.StreamReader, within_s: float) -> bytes:
    """Everything the server sent until it closed (which must happen within ``within_s``)."""
    async with asyncio.timeout(within_s):
        return await reader.read()


async def _closed_when_idle(reader: asyncio.StreamReader) -> None:
    """The server closes without a word once the connection has been idle for keep_alive_timeout_s (from
    now), and not before."""
    loop = asyncio.get_running_loop()
    idle_since = loop.time()
    assert await _closed_after(reader, IDLE_S + 3) == b""
    assert loop.time() - idle_since >= IDLE_S * 0.9, "closed by the configured idle timeout, not before"


async def _assert_408(reader: asyncio.StreamReader, what: str) -> None:
    status, headers, body = await read_response(reader)
    assert status == 408 and headers["connection"] == "close" and headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["id"] is None and answer["error"]["code"] == -32600
    assert answer["error"]["message"] == f"Request {what} not received within {HEAD_S:g} s"
    assert await _closed_after(reader, 2) == b""


async def _next_call_fine(port: int) -> None:
    reader, writer = await _connect(port)
    try:
        writer.write(_initialize())
        status, _, body = await read_response(reader)
        assert status == 200 and json.loads(body)["id"] == 1
    finally:
        writer.close()


async def test_a_connection_that_sends_nothing_is_closed_silently(gateway: RunningGateway) -> None:
    reader, writer = await _connect(_port(gateway))
    try:
        # limits.keep_alive_timeout_s applies to a new connection too; before, it stayed open for good.
        await _closed_when_idle(reader)
    finally:
        writer.close()
    await _next_call_fine(_port(gateway))


async def test_a_connection_idle_after_its_answer_is_closed_after_the_keep_alive_timeout(
    gateway: RunningGateway,
) -> None:
    reader, writer = await _connect(_port(gateway))
    try:
        writer.write(_initialize())
        status, _headers, _body = await read_response(reader)
        assert status == 200
        await _closed_when_idle(reader)
    finally:
        writer.close()


async def test_empty_lines_after_an_answer_do_not_keep_a_connection_open(gateway: RunningGateway) -> None:
    """Empty lines before a request line are skipped (RFC 9112 §2.2) and are no activity: a client sending
    a CRLF now and then is closed once idle for keep_alive_timeout_s since its last answer. It was never
    closed: each CRLF marked the connection busy, and only an answer marked it idle again."""
    reader, writer = await _connect(_port(gateway))
    try:
        writer.write(_initialize())
        status, _headers, _body = await read_response(reader)
        assert status == 200
        answered = asyncio.get_running_loop().time()
        with contextlib.suppress(ConnectionError):
            for _ in range(int(IDLE_S * 4 / 0.2)):
                writer.write(b"\r\n")
                await writer.drain()
                await asyncio.sleep(0.2)
                if reader.at_eof():
                    break
        assert await _closed_after(reader, 1) == b""
        assert asyncio.get_running_loop().time() - answered < IDLE_S * 2.5, "closed by the idle timeout"
    finally:
        writer.close()
    await _next_call_fine(_port(gateway))


@pytest.mark.parametrize(
    "part",
    [b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le", b"G", b"GET /healthz HTTP/1.1\r\n"],
    ids=["half-head", "one-byte", "request-line-only"],
)
async def test_a_half_sent_head_gets_408(gateway: RunningGateway, part: bytes) -> None:
    reader, writer = await _connect(_port(gateway))
    try:
        writer.write(part)
        await _assert_408(reader, "head")
    finally:
        writer.close()
    await _next_call_fine(_port(gateway))


async def test_a_head_trickled_byte_by_byte_gets_408(gateway: RunningGateway) -> None:
    """The head's timeout is for the whole head, not between segments: a trickle cannot hold on."""
    port = _port(gateway)
    reader, writer = await _connect(port)
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
    try:
        for byte in head:
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)  # 100 bytes at 20 a second: 5 s, ten times the timeout
            if reader.at_eof() or reader._buffer:  # type: ignore[attr-defined]  # stop once answered
                break
        await _assert_408(reader, "head")
    finally:
        writer.close()


async def test_a_client_still_sending_after_its_refusal_reads_it(gateway: RunningGateway) -> None:
    """The refusal survives bytes the client is still sending: the gateway sends it with its end of the
    connection and then reads and drops the rest (a lingering close). Closed at once with those bytes
    unread, the kernel sends a reset instead, which discards the refusal on the client's side."""
    # One write far over the head limit: the 431 comes while most of it is still on its way.
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * (4 << 20)
    await _refused_while_sending(gateway, head, 431)


async def _refused_while_sending(gateway: RunningGateway, payload: bytes, status: int) -> None:
    """``payload`` in one write; its refusal (``status``, then the close) is read whole all the same."""
    reader, writer = await _connect(_port(gateway))
    try:
        writer.write(payload)
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(10):
                await writer.drain()
        got, headers, _body = await read_response(reader)
        assert got == status and headers["connection"] == "close"
        assert await _closed_after(reader, 5) == b""
    finally:
        writer.close()


# ---- an answer that closes while its client still sends the body (an early 413) -----------------

_OVERSIZE = 8 << 20  # over limits.max_body_bytes (4 MiB by default): the door answers 413 from the head


@pytest.mark.parametrize("version", ["1.1", "1.0"])
async def test_an_early_answer_that_closes_is_read_whole(gateway: RunningGateway, version: str) -> None:
    """``Connection: close`` (or HTTP/1.0) and a body over the limit in one write: the 413 comes from the
    head while most of the body is on its way, and the close that follows lingers as a refusal's does.
    Closed at once, as uvicorn's cycle does after such an answer, the client got a reset instead."""
    body = b"x" * _OVERSIZE
    close = ("Connection: close",) if version == "1.1" else ()
    accept = "Accept: application/json, text/event-stream"
    request = post("/mcp", body, "Content-Type: application/json", accept, *close, version=version)
    await _refused_while_sending(gateway, request, 413)


async def test_urllib_gets_its_413(gateway: RunningGateway) -> None:
    """The real client behind that case: Python's urllib sends ``Connection: close`` on every request."""
    import urllib.error
    import urllib.request

    def call() -> int:
        request = urllib.request.Request(
            gateway.url + "/mcp",
            data=b"x" * _OVERSIZE,
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            assert exc.headers["content-type"] == "application/json"
            return exc.code

    assert await asyncio.to_thread(call) == 413


# ---- a request httptools cannot parse (uvicorn's 400, sent as the protocol's own refusals) ----------

_UNPARSABLE = {
    "invalid-method": b"G@T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    "header-name-char": b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad\x01: y\r\n",
}


@pytest.mark.parametrize("head", _UNPARSABLE.values(), ids=_UNPARSABLE.keys())
async def test_a_client_still_sending_after_its_400_reads_it(gateway: RunningGateway, head: bytes) -> None:
    """A head httptools cannot parse, and 4 MiB of body in the same write: the 400 comes while most of it
    is on its way. uvicorn closed at once with those bytes unread, and the client got a reset instead."""
    size = 4 << 20
    await _refused_while_sending(gateway, head + b"Content-Length: %d\r\n\r\n" % size + b"x" * size, 400)


async def test_the_400_is_a_json_rpc_error(gateway: RunningGateway) -> None:
    reader, writer = await _connect(_port(gateway))
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad\x01: y\r\n\r\n")
        answer = await _closed_after(reader, 5)  # the whole answer, then the end
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    assert status_line == "HTTP/1.1 400 Bad Request"
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    error = {"code": INVALID_REQUEST, "message": "Request could not be parsed: Invalid header token"}
    assert json.loads(body) == {"jsonrpc": "2.0", "id": None, "error": error}


_CHUNKED = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"G@T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\x01b\r\n\r\n",
        (_CHUNKED + "Accept: application/json, text/event-stream\r\n\r\nzz\r\n").encode(),
    ],
    ids=["invalid-method", "header-value-char", "chunk-size-in-body"],
)
async def test_a_small_unparsable_request_gets_400_and_the_end(gateway: RunningGateway, request_bytes: bytes) -> None:
    """Head or body (uvicorn's cycle already runs the app for a chunked body): answered, then closed."""
    port = _port(gateway)
    reader, writer = await _connect(port)
    try:
        writer.write(request_bytes)
        status, headers, body = await read_response(reader)
        assert status == 400 and headers["connection"] == "close"
        assert json.loads(body)["error"]["message"].startswith("Request could not be parsed")
        assert await _closed_after(reader, 5) == b""
    finally:
        writer.close()
    await _next_call_fine(port)


async def test_an_unparsable_request_behind_an_answer_under_way_is_refused_after_it(gateway: RunningGateway) -> None:
    """Pipelined in one write behind a request not yet answered: that request's answer first, then the
    400, then the close (the client sent the first request correctly and must not lose it; more cases in
    test_pipelined_refusals.py)."""
    reader, writer = await _connect(_port(gateway))
    try:
        writer.write(_initialize() + b"G@T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, _headers, body = await read_response(reader)
        assert status == 200 and json.loads(body)["result"]["serverInfo"]
        status, headers, body = await read_response(reader)
        assert status == 400 and headers["connection"] == "close"
        assert json.loads(body)["error"]["message"].startswith("Request could not be parsed")
        assert await _closed_after(reader, 5) == b""
    finally:
        writer.close()


async def test_a_head_that_never_ends_gets_431(gateway: RunningGateway) -> None:
    """Within its timeout, a head sent as fast as the socket takes it stops at the head limit."""
    port = _port(gateway)
    reader, writer = await _connect(port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sent = 0
        with contextlib.suppress(ConnectionError):
            while not reader.at_eof() and not reader._buffer and sent < 1 << 20:  # type: ignore[attr-defined]
                writer.write(b"X-More: " + b"m" * 1000 + b"\r\n")  # separate segments: a write, then a pause
                await writer.drain()
                sent += 1010
                await asyncio.sleep(0.005)
        status, headers, body = await read_response(reader)
        assert status == 431 and headers["connection"] == "close"
        assert json.loads(body)["error"]["message"] == "Request head over 16384 bytes"
        assert sent < 1 << 20
    finally:
        writer.close()
    await _next_call_fine(port)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length-lean", "chunked-uvicorn"])
async def test_a_half_sent_body_gets_408(gateway: RunningGateway, chunked: bool) -> None:
    """Both request cycles: the lean one (a plain POST with Content-Length) and uvicorn's (chunked)."""
    port = _port(gateway)
    reader, writer = await _connect(port)
    common = "Host: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    if chunked:
        data = f'POST /mcp HTTP/1.1\r\n{common}Transfer-Encoding: chunked\r\n\r\n10\r\n{{"jsonrpc": "2.'.encode()
    else:
        data = f'POST /mcp HTTP/1.1\r\n{common}Content-Length: 100\r\n\r\n{{"jsonrpc":'.encode()
    try:
        writer.write(data)
        await _assert_408(reader, "body")
    finally:
        writer.close()
    await _next_call_fine(port)


async def test_a_kept_alive_connection_then_half_a_head_gets_408(gateway: RunningGateway) -> None:
    port = _port(gateway)
    reader, writer = await _connect(port)
    try:
        writer.write(_initialize())
        assert (await read_response(reader))[0] == 200
        writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        await _assert_408(reader, "head")
    finally:
        writer.close()


async def test_requests_in_time_are_untouched(gateway: RunningGateway) -> None:
    """A request split over segments, each well within the timeouts, is served; so is the next one."""
    port = _port(gateway)
    reader, writer = await _connect(port)
    data = _initialize()
    try:
        for start in range(0, len(data), 40):
            writer.write(data[start : start + 40])
            await asyncio.sleep(0.02)
        assert (await read_response(reader))[0] == 200
        writer.write(_initialize())
        assert (await read_response(reader))[0] == 200
    finally:
        writer.close()


# ---- a client that never reads its response --------------------------------------------------------


class _BigAnswer:
    """An app whose every response is 32 MiB: far more than the socket buffers hold."""

    def __init__(self, limits: Limits) -> None:
        self.client_limits = limits  # what the gateway's FastPath offers the protocol
        self.ended = asyncio.Event()
        self.connections: set[Any] = set()  # the server's open client connections (uvicorn's server_state)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        try:
            if scope["path"] == "/small":
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": b"small"})
                return
            if scope["path"] == "/close":
                # A socket that holds little (as on a slow link), and an answer that does not fit in it
                # but stays under the transport's high-water mark: the app never waits, and the close
                # after it must wait for the bytes to leave, which they never do.
                scope[HOLD_KEY].get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                headers = [(b"content-type", b"text/plain"), (b"connection", b"close")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": b"x" * 48 * 1024})
                return
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            for _ in range(32):
                await send({"type": "http.response.body", "body": b"x" * (1 << 20), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.ended.set()


@pytest.fixture
async def big_answers() -> AsyncIterator[tuple[_BigAnswer, int]]:
    async for served in _serve(_BigAnswer(Limits(response_send_timeout_s=0.5, max_client_connections=3))):
        yield served


async def _serve(app: _BigAnswer) -> AsyncIterator[tuple[_BigAnswer, int]]:
    async with served_by_protocol(app) as (server, port):
        app.connections = server.server_state.connections
        yield app, port


async def test_a_client_that_never_reads_is_dropped(big_answers: tuple[_BigAnswer, int]) -> None:
    app, port = big_answers
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        # The app's send waits on the full socket (flow control: memory stays bounded) until the
        # send timeout drops the connection; then its task ends instead of waiting for good.
        async with asyncio.timeout(10):
            await app.ended.wait()
        sock.setblocking(False)
        received = 0
        async with asyncio.timeout(5):  # what the socket buffers held, then the end (or a reset)
            with contextlib.suppress(ConnectionResetError):
                while chunk := await asyncio.get_running_loop().sock_recv(sock, 1 << 20):
                    received += len(chunk)
        assert received < 32 << 20  # the response was cut: the connection was dropped, not drained
    finally:
        sock.close()
    # The server still serves others.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, _, body = await read_response(reader)
        assert status == 200 and len(body) == 32 << 20
    finally:
        writer.close()


async def test_connections_over_the_limit_get_503(big_answers: tuple[_BigAnswer, int]) -> None:
    _app, port = big_answers  # max_client_connections=3
    held = [await _connect(port) for _ in range(3)]
    try:
        reader, writer = await _connect(port)
        try:
            status, headers, body = await read_response(reader)
            assert status == 503 and headers["connection"] == "close"
            assert json.loads(body)["error"]["message"] == "Over 3 client connections; try again later"
            assert await _closed_after(reader, 2) == b""
        finally:
            writer.close()
        # The held ones are served; once one leaves, a new connection is too.
        held[0][1].write(b"GET /small HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await read_response(held[0][0]))[0] == 200
        held.pop()[1].close()
        status = 503
        async with asyncio.timeout(5):
            while status == 503:  # until the server has seen that connection closed
                reader, writer = await _connect(port)
                try:
                    writer.write(b"GET /small HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    status = (await read_response(reader))[0]
                finally:
                    writer.close()
        assert status == 200
    finally:
        for _, held_writer in held:
            held_writer.close()


async def test_a_close_that_cannot_drain_becomes_an_abort(big_answers: tuple[_BigAnswer, int]) -> None:
    """A response with Connection: close to a client that reads nothing: asyncio's close waits for the
    unsent bytes for good; past response_send_timeout_s the connection is aborted (its socket freed)."""
    app, port = big_answers
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    try:
        sock.sendall(b"GET /close HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        async with asyncio.timeout(10):
            await app.ended.wait()
            while app.connections:  # noqa: ASYNC110 (uvicorn's set of connections offers no event)
                await asyncio.sleep(0.05)
    finally:
        sock.close()


def test_the_connection_cap_defaults_to_the_open_file_limit_less_a_reserve() -> None:
    import resource

    from gateway.transports.http_protocol import connection_cap

    assert connection_cap(3) == 3, "a configured cap is the cap"
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    derived = connection_cap(None)
    if soft != resource.RLIM_INFINITY:
        assert derived == max(1, soft - max(64, soft // 10))
        assert derived < soft, "the 503 comes before accept() runs out of descriptors"
    assert Limits().max_client_connections is None
