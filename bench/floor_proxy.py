"""The least any CPython HTTP proxy must do per call: the floor Switchboard is measured against (issue 15).

A reverse proxy for one Streamable HTTP backend written to be as cheap as CPython allows and nothing
more: uvloop, httptools on both sides, callbacks only (no task, no coroutine, no ASGI), one keep-alive
backend connection per client connection, each request forwarded as soon as it is parsed and each
answer written back in one ``write``. No policy, no session, no id remapping, no audit, no limits: it
is not a gateway and must never serve anything but the benchmark.

``--json`` adds the one piece of work a gateway cannot skip, decoding and re-encoding both bodies
(orjson), so the table shows the floor with and without it. Whatever Switchboard spends above the
``--json`` row is its own work (routing, policies, sessions, audit, both eras); whatever the floor
itself spends is the loopback syscalls, the HTTP parsing and the interpreter's callback dispatch.

Only what the benchmark's requests need is handled: POST with Content-Length, JSON answers (the echo
backend never streams), the MCP session and version headers passed through both ways.

Run: ``python bench/floor_proxy.py --port P --backend http://127.0.0.1:B/mcp [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import urlsplit

import httptools
import orjson

# Request headers forwarded to the backend and answer headers forwarded to the client (lower case).
FORWARDED = frozenset({b"mcp-session-id", b"mcp-protocol-version", b"mcp-method", b"mcp-name"})
REASONS = {200: b"OK", 202: b"Accepted", 400: b"Bad Request", 404: b"Not Found"}


def _reencode(body: bytes) -> bytes:
    return orjson.dumps(orjson.loads(body)) if body else body


class BackendSide(asyncio.Protocol):
    """One keep-alive connection to the backend, serving one client connection's requests in order."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[bytes] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.client.backend_ready()

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.backend_lost()

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-type" or lowered in FORWARDED:
            self.headers.append(lowered + b": " + value + b"\r\n")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        body = b"".join(self.body)
        if self.client.reencode:
            body = _reencode(body)
        head = b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"OK"))
        self.client.answer(head + b"".join(self.headers) + b"content-length: %d\r\n\r\n" % len(body) + body)
        self.headers = []
        self.body = []


class ClientSide(asyncio.Protocol):
    """One client connection: parse requests, forward them on this connection's own backend connection."""

    def __init__(self, backend: tuple[str, int, bytes], reencode: bool) -> None:
        self.backend_address = backend
        self.reencode = reencode
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.backend: BackendSide | None = None
        self.connecting: asyncio.Task[object] | None = None
        self.waiting: list[bytes] = []  # requests parsed before the backend connection stood
        self.headers: list[bytes] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        host, port, _ = self.backend_address

        def backend_side() -> BackendSide:
            self.backend = BackendSide(self)
            return self.backend

        loop = asyncio.get_running_loop()
        self.connecting = loop.create_task(loop.create_connection(backend_side, host, port))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.backend is not None and self.backend.transport is not None:
            self.backend.transport.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered in FORWARDED:
            self.headers.append(lowered + b": " + value + b"\r\n")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        if self.reencode:
            body = _reencode(body)
        _, port, path = self.backend_address
        request = (
            b"POST "
            + path
            + b" HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n" % port
            + b"accept: application/json, text/event-stream\r\n"
            + b"".join(self.headers)
            + b"content-length: %d\r\n\r\n" % len(body)
            + body
        )
        self.headers = []
        self.body = []
        if self.backend is not None and self.backend.transport is not None:
            self.backend.transport.write(request)
        else:
            self.waiting.append(request)

    def backend_ready(self) -> None:
        # Called from BackendSide.connection_made: the BackendSide is the one this client made.
        for request in self.waiting:
            assert self.backend is not None and self.backend.transport is not None
            self.backend.transport.write(request)
        self.waiting.clear()

    def backend_lost(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def answer(self, response: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(response)


async def serve(port: int, backend_url: str, reencode: bool) -> None:
    parts = urlsplit(backend_url)
    address = (parts.hostname or "127.0.0.1", parts.port or 80, (parts.path or "/").encode())
    loop = asyncio.get_running_loop()

    server = await loop.create_server(lambda: ClientSide(address, reencode), "127.0.0.1", port, backlog=1024)
    print(f"floor proxy on 127.0.0.1:{port} -> {backend_url} (json={'on' if reencode else 'off'})", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", required=True, help="the backend's Streamable HTTP URL")
    parser.add_argument("--json", action="store_true", help="decode and re-encode both bodies")
    args = parser.parse_args()
    import uvloop

    uvloop.run(serve(args.port, args.backend, args.json))


if __name__ == "__main__":
    main()
