"""A participant's way out: frames toward its WebSocket, written directly while the socket keeps up.

Fan-out made every delivery cost a queue put, a writer task's wake-up, Starlette's and uvicorn's
ASGI send and a frame serialisation, then a write syscall: per recipient, per envelope. Here, when
the connection is uvicorn's websockets-sansio protocol (the gateway's own server) and its transport
is writable, ``deliver`` appends the finished frame to the participant's batch, and the loop's write
batch (gateway/write_batch.py) writes each batch with one ``transport.write`` at the end of the
iteration: no task, no ASGI, and, without
a negotiated extension (permessage-deflate), the frame bytes built once per envelope for every
recipient (a server's frames are unmasked, so they are the same bytes for all).

Invariants:
- Order: frames leave in ``deliver`` order. The direct path is taken only while nothing waits in the
  queue and the writer holds nothing; once a batch is open, everything joins it until it is written.
- Bounds: the batch and the queue together hold at most ``size`` frames; beyond, ``deliver`` says
  False (a slow consumer, dropped by the hub), as the queue alone did. While the transport is paused
  (its buffer over the high-water mark: the client is not reading), frames go to the bounded queue
  and the writer task sends them through ASGI, which waits for the socket.
- Anything else (another server, a test client) takes the queue-and-writer path, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from gateway.transports.ws_server import PROTOCOL_KEY
from gateway.write_batch import write_batch

_TEXT_FIN = 0x81


def text_frame(payload: bytes) -> bytes:
    """An unmasked, final text frame (RFC 6455 §5.2) holding ``payload``."""
    size = len(payload)
    if size < 126:
        return bytes((_TEXT_FIN, size)) + payload
    if size < 1 << 16:
        return struct.pack("!BBH", _TEXT_FIN, 126, size) + payload
    return struct.pack("!BBQ", _TEXT_FIN, 127, size) + payload


def server_protocol(ws: WebSocket) -> WebSocketsSansIOProtocol | None:
    """uvicorn's protocol object behind ``ws``, as the gateway's WebSocket server puts it in the scope
    (gateway/transports/ws_server.py), or None under another server (then frames take the ASGI path)."""
    protocol = ws.scope.get(PROTOCOL_KEY)
    return protocol if isinstance(protocol, WebSocketsSansIOProtocol) else None


class FrameCache:
    """The last envelope's text and its frame / UTF-8 bytes: fan-out hands the same str object to
    every recipient in turn, so one entry is the whole cache (one per door)."""

    __slots__ = ("_encoded", "_frame", "_text")

    def __init__(self) -> None:
        self._text: str | None = None
        self._frame = b""
        self._encoded = b""

    def frame(self, text: str) -> bytes:
        if text is not self._text:
            self._text = text
            self._encoded = text.encode()
            self._frame = text_frame(self._encoded)
        return self._frame

    def encoded(self, text: str) -> bytes:
        self.frame(text)
        return self._encoded


class Outbox:
    """A participant's frames toward its socket: a direct batch while the socket keeps up, else a
    bounded queue drained by one writer task (``write``)."""

    __slots__ = ("_batch", "_busy", "_frames", "_proto", "_size", "queue")

    def __init__(self, size: int, proto: WebSocketsSansIOProtocol | None, frames: FrameCache) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=size)
        self._size = size
        self._proto = proto
        self._frames = frames
        self._batch: list[bytes] = []
        self._busy = False  # the writer holds a frame it took from the queue

    def _direct(self) -> bool:
        proto = self._proto
        return (
            proto is not None
            and not self._busy
            and self.queue.empty()
            and proto.writable.is_set()
            and not proto.close_sent
            and not proto.disconnected
            and proto.conn.state is State.OPEN
        )

    def deliver(self, _envelope: dict[str, Any], text: str) -> bool:
        batch = self._batch
        if batch or self._direct():
            if len(batch) >= self._size:
                return False
            proto = self._proto
            assert proto is not None
            if proto.conn.state is not State.OPEN:
                return True  # closing (a close frame crossed this batch): its door ends the participant
            if not batch:
                # Written at the end of this loop iteration with every other write of it (gateway/write_batch.py).
                write_batch().flush_later(self)
            if proto.conn.extensions:
                # A compressing extension keeps per-connection state: the frame is this connection's own.
                proto.conn.send_text(self._frames.encoded(text))
                batch.extend(proto.conn.data_to_send())
            else:
                batch.append(self._frames.frame(text))
            return True
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:
            return False
        return True

    def flush(self) -> None:
        batch = self._batch
        if not batch:
            return
        data = b"".join(batch) if len(batch) > 1 else batch[0]
        batch.clear()
        proto = self._proto
        if (
            proto is None
            or proto.close_sent
            or proto.disconnected
            or proto.conn.state is not State.OPEN
            or proto.transport.is_closing()
        ):
            return  # the connection is ending: no data frame may follow its close frame
        proto.transport.write(data)

    async def write(self, ws: WebSocket) -> None:
        """The writer task: what the direct path could not take, through ASGI (which waits for the socket)."""
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            while True:
                text = await self.queue.get()
                self._busy = True
                try:
                    await ws.send_text(text)
                finally:
                    self._busy = False
