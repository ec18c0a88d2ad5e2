"""One write syscall per response instead of two.

uvicorn writes the status line and headers, then the body, as separate ``transport.write`` calls.
On loopback each write is a syscall that also runs the receiver's TCP processing, which made it the
largest single cost of a proxied call (ADR 0005). The transport below gathers the writes made in
one event-loop iteration and sends them together on the next: no added latency beyond that
iteration, and SSE events still leave as soon as they are produced.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.write_batch import write_batch


class CoalescingTransport:
    # Slots: one per client connection, and what it carries beyond writes (the disconnect watchers)
    # lives here rather than in uvicorn's protocol object, whose instance dict would grow for it.
    __slots__ = ("_batch", "_buffer", "_lost", "_lost_watchers", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._batch = write_batch(loop)
        self._buffer: list[bytes] = []
        self._scheduled = False
        self._lost = False
        self._lost_watchers: list[asyncio.Future[None]] | None = None

    def watch_lost(self) -> asyncio.Future[None]:
        """A future done once the connection is lost (``LOST_KEY``)."""
        watcher: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._lost:
            watcher.set_result(None)
            return watcher
        # A kept-alive connection serves many requests: forget the watchers of finished ones.
        kept = [w for w in self._lost_watchers or () if not w.done()]
        kept.append(watcher)
        self._lost_watchers = kept
        return watcher

    def lost(self) -> None:
        self._lost = True
        watchers, self._lost_watchers = self._lost_watchers or [], None
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)

    def write(self, data: bytes) -> None:
        # Sent at the end of this loop iteration, with every other connection's writes of the
        # iteration (gateway/write_batch.py): uvicorn's headers and body leave as one.
        self._buffer.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._batch.flush_later(self)

    def flush(self) -> None:
        self._scheduled = False
        if self._buffer:
            data = b"".join(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
            self._buffer.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


ABORT_KEY = "switchboard.abort"
# A scope's ``LOST_KEY`` makes a future that resolves when the client's connection is lost: what a
# task blocked on ``receive()`` would learn, without a task per request (gateway/transports/http_common.py).
LOST_KEY = "switchboard.lost"


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    # Like uvicorn's own, this narrows asyncio.Protocol's BaseTransport parameter to a Transport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's signature
        coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(coalescing)  # type: ignore[arg-type]  # a duck-typed Transport: __getattr__ forwards

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        cast(CoalescingTransport, self.transport).lost()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # A door that must drop a client which stopped reading cannot finish its response (the
        # send is blocked on a full socket); aborting the connection is the clean way out.
        # The scope is a plain dict at runtime; uvicorn's HTTPScope TypedDict lists only the ASGI spec's keys.
        scope = cast(dict[str, Any], self.scope)
        scope[ABORT_KEY] = self.transport.abort
        scope[LOST_KEY] = cast(CoalescingTransport, self.transport).watch_lost
