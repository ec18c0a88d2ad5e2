"""``limits.max_request_head_bytes`` holds exactly, however the client's bytes arrive (ADR 0023; the gateway's
protocol, transports/http_protocol.py and its base client_limits.py, with its head gauge, transports/head_gauge.py).

A head is counted from the first byte of its request line through the blank line that ends it. One of
exactly the limit is served, one byte more gets the 431 (a JSON-RPC error, then the close) and its app
never runs: in one write (asyncio reads up to 256 KiB at once; before, the limit was only counted from
a head's second segment), split over writes, pipelined behind a request in the same write or beginning
near the end of one. A body is no head: a large one behind a small head is served.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gateway.config import Limits
from gateway.errors import INVALID_REQUEST
from tests.gateway.transports.test_lean_cycle import read_response
from tests.support import RunningGateway, answer_lifespan, initialize_request, run_gateway, served_by_protocol

pytestmark = pytest.mark.timeout(60)

LIMIT = 2048


def head_of(size: int, body: bytes = b"", path: str = "/mcp", *headers: str) -> bytes:
    """A POST head of exactly ``size`` bytes (request line through the blank line) for ``body``."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", *headers]
    lines.append(f"Content-Length: {len(body)}")
    bare = len("\r\n".join([*lines, "X-Pad: "]) + "\r\n\r\n")
    assert size >= bare
    head = ("\r\n".join([*lines, "X-Pad: " + "p" * (size - bare)]) + "\r\n\r\n").encode()
    assert len(head) == size
    return head


class _Counted:
    """Answers every request with what it received, and counts the calls: a refused head's never comes."""

    def __init__(self, limits: Limits, delay_s: float = 0.0) -> None:
        self.client_limits = limits  # what the gateway's FastPath offers the protocol
        self.lean_posts = (b"/mcp",)  # plain POSTs there take the lean cycle, as the MCP doors' do
        self.delay_s = delay_s
        self.calls: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        self.calls.append(scope["path"])
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await asyncio.sleep(self.delay_s)  # an answer still under way while what follows is read
        answer = json.dumps({"path": scope["path"], "received": len(body)}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture
async def served() -> AsyncIterator[tuple[_Counted, int]]:
    app = _Counted(Limits(max_request_head_bytes=LIMIT))
    async with served_by_protocol(app) as (_server, port):
        yield app, port


@pytest.fixture
async def served_slowly() -> AsyncIterator[tuple[_Counted, int]]:
    app = _Counted(Limits(max_request_head_bytes=LIMIT), delay_s=0.2)
    async with served_by_protocol(app) as (_server, port):
        yield app, port


async def _send(port: int, *writes: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Each of ``writes`` in a segment of its own (no delay, and a pause between them)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for index, data in enumerate(writes):
        if index:
            await asyncio.sleep(0.02)
        writer.write(data)
        await writer.drain()
    return reader, writer


async def _answered(reader: asyncio.StreamReader, received: int) -> None:
    status, _headers, body = await read_response(reader)
    assert status == 200 and json.loads(body) == {"path": "/mcp", "received": received}


async def _refused(reader: asyncio.StreamReader) -> None:
    """The 431, whole and readable (JSON-RPC error, id null), then the end of the connection."""
    status, headers, body = await read_response(reader)
    assert status == 431 and headers["connection"] == "close" and headers["content-type"] == "application/json"
    error = {"code": INVALID_REQUEST, "message": f"Request head over {LIMIT} bytes"}
    assert json.loads(body) == {"jsonrpc": "2.0", "id": None, "error": error}
    async with asyncio.timeout(5):
        assert await reader.read() == b""


async def test_a_head_over_the_limit_in_one_write_gets_431(served: tuple[_Counted, int]) -> None:
    """The defect: a 10 KB head in one sendall was served under a 2 KiB limit."""
    app, port = served
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    reader, writer = await _send(port, head_of(10_000, body) + body)
    try:
        await _refused(reader)
    finally:
        writer.close()
    assert app.calls == []


@pytest.mark.parametrize("split", [None, 1, 100, LIMIT - 4, LIMIT - 1, LIMIT], ids=lambda split: f"split-{split}")
async def test_a_head_of_the_limit_is_served_one_byte_more_gets_431(
    served: tuple[_Counted, int], split: int | None
) -> None:
    app, port = served
    body = b"{}"
    for size, fits in ((LIMIT, True), (LIMIT + 1, False)):
        data = head_of(size, body) + body
        writes = [data] if split is None else [data[:split], data[split:]]
        reader, writer = await _send(port, *writes)
        try:
            if fits:
                await _answered(reader, len(body))
            else:
                await _refused(reader)
        finally:
            writer.close()
    assert app.calls == ["/mcp"]


async def test_a_pipelined_head_over_the_limit_gets_431_after_the_answer_before_it(
    served_slowly: tuple[_Counted, int],
) -> None:
    """A small request, then a head over the limit, in one write: the first is answered (its answer still
    under way when the second head is read), then the 431 comes, and the second's app never runs."""
    app, port = served_slowly
    small = head_of(200, b"{}") + b"{}"
    reader, writer = await _send(port, small + head_of(LIMIT + 1, b"{}") + b"{}")
    try:
        await _answered(reader, 2)
        await _refused(reader)
    finally:
        writer.close()
    assert app.calls == ["/mcp"]


@pytest.mark.parametrize("size", [LIMIT, LIMIT + 1])
@pytest.mark.parametrize("begun", [1, 100, LIMIT - 1, LIMIT], ids=lambda begun: f"begun-{begun}")
async def test_a_head_begun_at_the_end_of_a_segment_behind_a_request(
    served: tuple[_Counted, int], size: int, begun: int
) -> None:
    """The first segment holds a whole request and the first ``begun`` bytes of the next head, the second
    the rest of it: counted from its own first byte, that head is served at the limit and refused one
    byte over (the first segment's earlier bytes are not its)."""
    app, port = served
    small = head_of(300, b"{}") + b"{}"
    second = head_of(size, b"[]") + b"[]"
    reader, writer = await _send(port, small + second[:begun], second[begun:])
    try:
        await _answered(reader, 2)
        if size <= LIMIT:
            await _answered(reader, 2)
        else:
            await _refused(reader)
    finally:
        writer.close()
    assert app.calls == ["/mcp"] * (2 if size <= LIMIT else 1)


def _chunked(body: bytes) -> bytes:
    lines = ["POST /mcp HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", "Transfer-Encoding: chunked"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("size", [LIMIT, LIMIT + 1])
@pytest.mark.parametrize("cut", [None, 1000], ids=["rest-whole", "rest-cut"])
async def test_a_head_behind_a_body_sent_apart(
    served: tuple[_Counted, int], framing: str, size: int, cut: int | None
) -> None:
    """A request's head in one write, its body in the next with the next request's head (or its first
    1000 bytes, the rest in a third write): that head is counted from its first byte, which the body's
    framing places (a Content-Length body's end is kept without the gauge; a chunked body has it)."""
    app, port = served
    body = b'{"x": "' + b"y" * 100 + b'"}'
    first = head_of(300, body) + body if framing == "content-length" else _chunked(body)
    split = first.index(b"\r\n\r\n") + 4 + (0 if framing == "content-length" else 10)
    second = head_of(size, b"[]") + b"[]"
    writes = [first[:split], first[split:] + second]
    if cut is not None:
        writes[1:] = [first[split:] + second[:cut], second[cut:]]
    reader, writer = await _send(port, *writes)
    try:
        await _answered(reader, len(body))
        if size <= LIMIT:
            await _answered(reader, 2)
        else:
            await _refused(reader)
    finally:
        writer.close()
    assert app.calls == ["/mcp"] * (2 if size <= LIMIT else 1)


async def test_a_head_over_the_limit_over_many_writes_gets_431(served: tuple[_Counted, int]) -> None:
    app, port = served
    data = head_of(LIMIT + 1, b"{}") + b"{}"
    reader, writer = await _send(port, *(data[start : start + 500] for start in range(0, len(data), 500)))
    try:
        await _refused(reader)
    finally:
        writer.close()
    assert app.calls == []


@pytest.mark.parametrize("pipelined", [False, True])
async def test_a_body_is_no_head(served: tuple[_Counted, int], pipelined: bool) -> None:
    """A small head and a body far over the head limit, in one write (and another request behind it):
    served whole."""
    app, port = served
    body = b'{"pad": "' + b"b\r\n\r\n" * 40_000 + b'"}'  # blank lines too, as a body may hold them
    data = head_of(500, body) + body
    reader, writer = await _send(port, data + data if pipelined else data)
    try:
        await _answered(reader, len(body))
        if pipelined:
            await _answered(reader, len(body))
    finally:
        writer.close()
    assert app.calls == ["/mcp"] * (2 if pipelined else 1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(LIMIT - 2, LIMIT + 2),
    before=st.sampled_from([0, 300]),
    cuts=st.lists(st.integers(1, LIMIT + 350), max_size=4, unique=True),
)
def test_the_verdict_depends_on_the_head_alone(size: int, before: int, cuts: list[int]) -> None:
    """Any segmentation of a head near the limit, alone or behind a request: served if and only if it
    holds at most the limit's bytes."""
    asyncio.run(_one_verdict(size, before, cuts))


async def _one_verdict(size: int, before: int, cuts: list[int]) -> None:
    app = _Counted(Limits(max_request_head_bytes=LIMIT))
    first = head_of(before, b"{}") + b"{}" if before else b""
    data = first + head_of(size, b"[]") + b"[]"
    points = [0, *sorted(cut for cut in cuts if cut < len(data)), len(data)]
    async with served_by_protocol(app) as (_server, port):
        reader, writer = await _send(port, *(data[a:b] for a, b in itertools.pairwise(points)))
        try:
            if before:
                await _answered(reader, 2)
            if size <= LIMIT:
                await _answered(reader, 2)
            else:
                await _refused(reader)
        finally:
            writer.close()
    assert len(app.calls) == bool(before) + (size <= LIMIT)


# ---- a real gateway ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway({"limits": {"max_request_head_bytes": LIMIT}, "backends": {}}) as running:
        yield running


async def test_the_gateway_refuses_a_head_over_its_configured_limit_in_one_write(gateway: RunningGateway) -> None:
    """The defect as found: ``max_request_head_bytes: 2048`` and one sendall of a POST to /mcp with a 10 KB
    header; then a head of exactly the limit is served."""
    port = int(gateway.url.rsplit(":", 1)[1])
    body = json.dumps(initialize_request(1)).encode()
    accept = "Accept: application/json, text/event-stream"
    for size, fits in ((10_000, False), (LIMIT + 1, False), (LIMIT, True)):
        data = head_of(size, body, "/mcp", accept) + body
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(data)
            reader, writer = await asyncio.open_connection(sock=sock.dup())
            try:
                if fits:
                    status, _headers, answer = await read_response(reader)
                    assert status == 200 and json.loads(answer)["id"] == 1
                else:
                    await _refused(reader)
            finally:
                writer.close()


async def test_the_gauge_comes_only_when_a_head_may_be_over_and_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """What keeps the hot path cheap: a request in one write, or its head in one and its body in the next
    (as HTTP clients write them), meets no gauge; a head split over writes does, and the connection is
    back on the fast path (segments up to the limit parsed at once) after that request."""
    from gateway.transports import client_limits
    from gateway.transports.head_gauge import HeadGauge

    made: list[HeadGauge] = []

    class Counted(HeadGauge):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(client_limits, "HeadGauge", Counted)
    app = _Counted(Limits(max_request_head_bytes=LIMIT))
    body = b"{}" * 500
    data = head_of(500, body) + body
    async with served_by_protocol(app) as (server, port):
        # Whole; head and body apart; body cut; head cut (the gauge); whole again.
        reader, writer = await _send(port, data, data[:500], data[500:], data[:600], data[600:])
        try:
            for _ in range(3):
                await _answered(reader, len(body))
            assert not made
            for part in (data[:250], data[250:], data):
                await asyncio.sleep(0.02)
                writer.write(part)
            await _answered(reader, len(body))
            await _answered(reader, len(body))
            (protocol,) = server.server_state.connections
            conn = protocol._conn
            assert len(made) == 1, "the head split over two writes, only"
            assert conn.gauge is None and conn.fast_max == LIMIT and conn.body_left == 0
        finally:
            writer.close()
