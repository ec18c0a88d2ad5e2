"""A request the protocol refuses (400, 408, 431) behind a response still under way on the same
connection (transports/http_protocol.py): the earlier responses are sent whole first, in order, then
the refusal, then the close. Closing at once, as before, cut the earlier answers off and the client
lost requests it had sent correctly.

An in-process server with the gateway's protocol and an app whose responses wait until the test lets
them go, so that the refused request surely arrives while they are under way.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Limits
from tests.gateway.transports.test_lean_cycle import read_response
from tests.support import answer_lifespan, served_by_protocol
from tests.support_tls import make_pki

pytestmark = pytest.mark.timeout(30)

HEAD_S = 0.5
BODY_S = 0.5


class HeldApp:
    """``GET /held/N``: answers ``N`` once the test sets ``release``; ``GET /stream``: three chunks, the
    last after ``release``; anything else at once. ``client_limits`` is what the protocol holds clients to."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.client_limits = Limits(
            request_head_timeout_s=HEAD_S, request_body_timeout_s=BODY_S, max_request_head_bytes=4096
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        path = scope["path"]
        self.started.append(path)
        start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        if path == "/stream":
            await send(start)
            await send({"type": "http.response.body", "body": b"one,", "more_body": True})
            await self.release.wait()
            await send({"type": "http.response.body", "body": b"two", "more_body": False})
            return
        if path.startswith("/held/"):
            await self.release.wait()
        body = path.rsplit("/", 1)[1].encode()
        await send({**start, "headers": [*start["headers"], (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@dataclass
class Served:
    app: HeldApp
    port: int
    client_context: ssl.SSLContext | None  # None: plain TCP

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.client_context)


@pytest.fixture(params=["tcp", "tls"])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Served]:
    """Plain TCP (the FIN and the lingering close) and TLS (no half-close: close_notify, then the close)."""
    app = HeldApp()
    options: dict[str, Any] = {}
    context = None
    if request.param == "tls":
        pki = make_pki(tmp_path)
        options = {"ssl_certfile": str(pki.server_cert), "ssl_keyfile": str(pki.server_key)}
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        context.check_hostname = False
    async with served_by_protocol(app, **options) as (_server, port):
        yield Served(app, port, context)


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


async def _refusal_then_close(reader: asyncio.StreamReader, status: int, message_start: str) -> None:
    got, headers, body = await read_response(reader)
    assert got == status and headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["code"] == -32600 and error["message"].startswith(message_start), error
    async with asyncio.timeout(5):
        assert await reader.read() == b""


async def _held_answer(reader: asyncio.StreamReader, expected: bytes) -> None:
    got, _headers, body = await read_response(reader)
    assert (got, body) == (200, expected)


async def _started(app: HeldApp, path: str) -> None:
    async with asyncio.timeout(5):
        while path not in app.started:  # noqa: ASYNC110 (the app's own record; no event to wait on)
            await asyncio.sleep(0.01)


async def _release_later(app: HeldApp, after_s: float) -> None:
    await asyncio.sleep(after_s)
    app.release.set()


async def test_unparsable_request_in_the_same_write(served: Served) -> None:
    app = served.app
    reader, writer = await served.connect()
    try:
        writer.write(get("/held/first") + b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n")
        await _started(app, "/held/first")
        await asyncio.sleep(0.2)  # the refusal is decided meanwhile; the answer under way is still held
        app.release.set()
        await _held_answer(reader, b"first")
        await _refusal_then_close(reader, 400, "Request could not be parsed")
    finally:
        writer.close()


async def test_unparsable_request_behind_two_pipelined(served: Served) -> None:
    app = served.app
    reader, writer = await served.connect()
    try:
        writer.write(get("/held/first") + get("/second"))
        await _started(app, "/held/first")
        writer.write(b"POST /x HTTP/1.1\r\nX-Bad\x01: y\r\n\r\n")
        await asyncio.sleep(0.2)
        app.release.set()
        await _held_answer(reader, b"first")
        await _held_answer(reader, b"second")
        await _refusal_then_close(reader, 400, "Request could not be parsed")
        assert app.started == ["/held/first", "/second"]
    finally:
        writer.close()


async def test_bad_body_of_a_request_pipelined_behind_an_answer(served: Served) -> None:
    """The refused request was queued behind the held one (its body is the bad part): it never runs, and
    its 400 comes after the held answer."""
    app = served.app
    reader, writer = await served.connect()
    try:
        chunked = b"POST /queued HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
        writer.write(get("/held/first") + chunked)
        await _started(app, "/held/first")
        await asyncio.sleep(0.2)
        app.release.set()
        await _held_answer(reader, b"first")
        await _refusal_then_close(reader, 400, "Request could not be parsed")
        assert "/queued" not in app.started
    finally:
        writer.close()


async def test_head_over_the_limit_behind_a_response_under_way(served: Served) -> None:
    app = served.app
    reader, writer = await served.connect()
    try:
        writer.write(get("/held/first"))
        await _started(app, "/held/first")
        writer.write(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(8):  # over the 4096-byte head limit, in several segments
            writer.write(b"X-Pad: " + b"p" * 1000 + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.02)
        app.release.set()
        await _held_answer(reader, b"first")
        await _refusal_then_close(reader, 431, "Request head over 4096 bytes")
        assert "/big" not in app.started
    finally:
        writer.close()


async def test_head_timeout_behind_a_response_under_way(served: Served) -> None:
    """A head begun while an earlier answer is still held: its clock runs out before that answer is
    done, and the 408 comes after it."""
    app = served.app
    reader, writer = await served.connect()
    try:
        writer.write(get("/held/first"))
        await _started(app, "/held/first")
        writer.write(b"GET /never HTTP/1.1\r\nHost: 12")
        release = asyncio.create_task(_release_later(app, HEAD_S * 4))
        await _held_answer(reader, b"first")
        await _refusal_then_close(reader, 408, "Request head not received")
        await release
    finally:
        writer.close()


async def test_a_streamed_answer_is_finished_before_the_refusal(served: Served) -> None:
    app = served.app
    reader, writer = await served.connect()
    try:
        writer.write(get("/stream"))
        await _started(app, "/stream")
        writer.write(b"\x00\x01 nonsense\r\n\r\n")
        await asyncio.sleep(0.2)
        app.release.set()
        got, _headers, body = await read_response(reader)
        assert (got, body) == (200, b"one,two")
        await _refusal_then_close(reader, 400, "Request could not be parsed")
    finally:
        writer.close()


async def test_nothing_under_way_is_refused_at_once(served: Served) -> None:
    """The old path is unchanged: with every earlier answer sent, the refusal comes at once."""
    reader, writer = await served.connect()
    try:
        writer.write(get("/quick"))
        await _held_answer(reader, b"quick")
        writer.write(b"G@T / HTTP/1.1\r\n\r\n")
        await _refusal_then_close(reader, 400, "Request could not be parsed")
    finally:
        writer.close()
