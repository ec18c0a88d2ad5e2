"""The MCPx outbox's direct path: the frames it builds, and that it finds uvicorn's protocol behind a
Starlette WebSocket on a real server (else fan-out would silently take the slower queue path)."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from gateway.mcpx.outbox import FrameCache, Outbox, server_protocol, text_frame
from gateway.transports.ws_server import SafeWebSocketProtocol

WAIT_S = 10.0


@pytest.mark.parametrize("size", [0, 125, 126, 65_535, 65_536, 200_000])
def test_text_frame_parses_back_as_one_final_text_frame(size: int) -> None:
    payload = ("é" * size).encode()[:size]
    reader = StreamReader()
    reader.feed_data(text_frame(payload))
    parser = Frame.parse(reader.read_exact, mask=False)
    try:
        next(parser)
        raise AssertionError("the frame was incomplete")
    except StopIteration as done:
        frame = done.value
    assert (frame.opcode, frame.fin, frame.data) == (Opcode.TEXT, True, payload)


def test_one_frame_is_built_per_envelope_text() -> None:
    frames = FrameCache()
    text = '{"kind":"chat"}'
    assert frames.frame(text) is frames.frame(text)
    assert frames.frame(text) == text_frame(text.encode())


@pytest.mark.parametrize("compression", [None, "deflate"])
async def test_outbox_writes_directly_on_the_gateways_websocket_server(compression: str | None) -> None:
    found: list[bool] = []

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        outbox = Outbox(8, server_protocol(ws), FrameCache())
        found.append(outbox._direct())
        for text in ("one", "two", "x" * 70_000):
            assert outbox.deliver({}, text)
        assert outbox.queue.empty()  # all three took the direct path
        await ws.receive()  # until the client leaves

    app = Starlette(routes=[WebSocketRoute("/ws", endpoint)])
    # A listening socket of our own: the client's connection waits in its backlog until uvicorn serves.
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, ws=SafeWebSocketProtocol, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(WAIT_S):
            async with connect(f"ws://127.0.0.1:{port}/ws", compression=compression) as client:
                got = [await client.recv() for _ in range(3)]
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(WAIT_S):
                await serving
        sock.close()
    assert found == [True]
    assert got == ["one", "two", "x" * 70_000]
