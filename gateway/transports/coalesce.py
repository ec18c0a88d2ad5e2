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


class CoalescingTransport:
    __slots__ = ("_buffer", "_loop", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._buffer: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes) -> None:
        if self._buffer:
            # The second write of the iteration (uvicorn's body after its headers): send both now
            # rather than one loop iteration later.
            self._buffer.append(data)
            self.flush()
            return
        self._buffer.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._deferred_flush)

    def _deferred_flush(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
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


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    # Like uvicorn's own, this narrows asyncio.Protocol's BaseTransport parameter to a Transport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's signature
        coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(coalescing)  # type: ignore[arg-type]  # a duck-typed Transport: __getattr__ forwards

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # A door that must drop a client which stopped reading cannot finish its response (the
        # send is blocked on a full socket); aborting the connection is the clean way out.
        # The scope is a plain dict at runtime; uvicorn's HTTPScope TypedDict lists only the ASGI spec's keys.
        cast(dict[str, Any], self.scope)[ABORT_KEY] = self.transport.abort
