"""A small HTTP/1.1 client for talking to backends: asyncio protocol, httptools parser, keep-alive pool.

Why not httpx: on the 2-core reference machine httpx managed about 800 requests/s sequentially
and fewer under concurrency, which alone caps the gateway far below its backends (ADR 0005).
This client does only what backends need: HTTP/1.1 (plain or TLS), one write per request,
streamed bodies (JSON or SSE, chunked or not) with flow control, and a pool of kept-alive
connections. No redirects (a 3xx is an answer like any other; gateway/upstreams/fetch.py follows
same-origin ones for control-plane requests) and no HTTP/2. Proxies and TLS settings come as one
:class:`~gateway.upstreams.egress.Route` per pool (gateway/upstreams/tunnel.py opens its connections):
through a proxy, https goes in a CONNECT tunnel and plain http in absolute form (RFC 9112 §3.2.2),
with the proxy's credentials in the pre-encoded request start, so a request costs the same either way.

Two ways to make a request: :meth:`ConnectionPool.request` (a coroutine that returns a
:class:`Response` once its headers arrived) and :meth:`ConnectionPool.try_start` (synchronous: on
an idle kept-alive connection, with the parser's events going straight to the caller's
:class:`Exchange`; the backend client's hot path, gateway/upstreams/http.py). Invariants of both:
at most ``max_connections`` exchanges at once (a slot is held from the start of an exchange until
its connection is released); a connection serves one exchange at a time and goes back to the pool
only when its response ended cleanly and kept alive, else it is closed; a response head still
unfinished past ``max_head_bytes`` fails its exchange and closes its connection (ADR 0023).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncGenerator, Mapping
from urllib.parse import urlsplit

import httptools

from gateway.upstreams.egress import Route, default_context
from gateway.upstreams.exchange import AfterRead, Exchange
from gateway.upstreams.slots import Slots
from gateway.upstreams.tunnel import TunnelError, open_connection, reset_hint, tls_alert
from gateway.write_batch import WriteBatch, write_batch

_HIGH_WATER = 1024 * 1024  # pause reading a response body once this much is unread
_LOW_WATER = 256 * 1024
MAX_HEAD_BYTES = 64 * 1024  # a response head's default cap (Limits.max_response_head_bytes)


class HttpError(Exception):
    """The exchange failed at the HTTP or connection level (no usable response)."""


class ConnectError(HttpError):
    """The backend could not be reached at all."""


class BodyTooLarge(HttpError):
    """A response body over the reader's limit (:meth:`Response.read`); its connection is closed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


class HeadTooLarge(HttpError):
    """A response head (status line and headers) still unfinished past the pool's ``max_head_bytes``; the
    exchange fails with it and its connection is closed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a response head over {limit} bytes")
        self.limit = limit


class _QuickCallbacks:
    """The callbacks of a connection's quick parser (:meth:`ConnectionPool.try_start`'s exchanges): the body
    pieces go into the connection's list by a C-level call, not a Python call per chunk relayed to the
    exchange (httptools takes each callback once, when the parser is made)."""

    __slots__ = ("on_body", "on_header", "on_headers_complete", "on_message_complete")

    def __init__(self, conn: _Connection) -> None:
        self.on_header = conn.quick_header
        self.on_body = conn.body.append
        self.on_headers_complete = conn.quick_headers_complete
        self.on_message_complete = conn.quick_message_complete


class _Connection(asyncio.Protocol):
    """One TCP connection; serves one exchange at a time."""

    __slots__ = (
        "_parser",
        "_quick",
        "after_read",
        "body",
        "closed",
        "content_type",
        "interim",
        "max_head",
        "relay_headers",
        "response",
        "transport",
    )

    def __init__(self, max_head: int = MAX_HEAD_BYTES) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.max_head = max_head  # bytes of a response head (status line and headers) at most
        self.interim = False  # parsing a 1xx answer, which comes before the exchange's own (_informational)
        self.response: Exchange | None = None
        self.relay_headers = False  # start()'s exchange: the relaying parser, else the quick one
        # A quick exchange's response (try_start): its Content-Type, its body pieces not yet taken.
        self.content_type = b""
        self.body: list[bytes] = []
        # An exchange to tell each time the parser has had a read (gateway/upstreams/quick.py: a stream's
        # events, parsed once per read, and its drain deadline); cleared when the exchange ends.
        self.after_read: AfterRead | None = None
        # Two parsers per connection, each resetting itself between kept-alive responses; an exchange
        # starts only once the previous response ended, so whichever parses it starts afresh. The
        # relaying one's callbacks land here and go on to start()'s exchange; the quick one keeps
        # ``content_type`` and fills ``body`` without a Python call per chunk.
        self._parser = httptools.HttpResponseParser(self)
        self._quick = httptools.HttpResponseParser(_QuickCallbacks(self))

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self.transport = transport  # type: ignore[assignment]  # a stream's, which asyncio types as BaseTransport

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:
            # Bytes outside of an exchange: the server is confused; do not reuse this connection.
            self.close()
            return
        response.received_any = True
        try:
            (self._parser if self.relay_headers else self._quick).feed_data(data)
        except httptools.HttpParserError as exc:
            if self.response is not None:  # a callback may have ended the exchange already
                self.response.fail(HttpError(f"malformed HTTP response: {exc}"))
            self.close()
        if not response.status:  # the read left the head unfinished (rare: a head is one read)
            self._head_read(response, len(data))
        after = self.after_read
        if after is not None:
            after.after_read()

    def _head_read(self, response: Exchange, size: int) -> None:
        """A read left the head unfinished, so all of it was the head's (an exchange's first read begins
        with it). Past ``max_head`` bytes the exchange fails and the connection closes: httptools keeps an
        unfinished header line whole, a ``Response`` every header line (the read that ends a head is not
        counted: what is held stays within the limit and one read)."""
        if self.response is not response or self.closed:
            return  # the read ended the exchange (a malformed answer)
        response.head_bytes += size
        if response.head_bytes > self.max_head:
            response.fail(HeadTooLarge(self.max_head))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            if isinstance(exc, ssl.SSLError):  # TLS 1.3: a refused client certificate is known only now
                self.response.fail(HttpError(tls_alert(exc, "the backend ended TLS")))
            else:
                self.response.fail(HttpError(f"connection closed by the backend{f': {exc}' if exc else ''}"))

    def pause_writing(self) -> None:  # the request is written at once; nothing to pause
        pass

    def resume_writing(self) -> None:
        pass

    # -- the relaying parser's callbacks, relayed to start()'s exchange (no on_message_begin:
    # data_received marks the exchange's received_any, a Python call less per response)
    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response.on_header(name, value)

    def on_headers_complete(self) -> None:
        if self.response is not None:
            status = self._parser.get_status_code()
            if status < 200 and status != 101:  # a 1xx before the answer: a call only then
                self._informational()
            else:
                self.response.on_headers_complete(status)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response.on_body(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
        elif self.response is not None:
            # httptools forgets keep-alive once the message is done, so it is read here.
            self.response.on_message_complete(self._parser.should_keep_alive())

    # -- the quick parser's own callbacks (the others are _QuickCallbacks' C-level ones)
    def quick_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 12 and name.lower() == b"content-type":
            self.content_type = value

    def quick_headers_complete(self) -> None:
        if self.response is not None:
            status = self._quick.get_status_code()
            if status < 200 and status != 101:  # as on_headers_complete
                self._informational()
            else:
                self.response.on_headers_complete(status)

    def quick_message_complete(self) -> None:
        if self.interim:
            self.interim = False
        elif self.response is not None:
            self.response.on_message_complete(self._quick.should_keep_alive())

    def _informational(self) -> None:
        """The head just parsed is a 1xx answer (100 Continue, 103 Early Hints: RFC 9110 §15.2), which
        comes before the final one on the same exchange and is not it: its end is skipped, and what its
        header lines left (a ``Response``'s headers, a quick exchange's Content-Type) forgotten. A 101
        (an upgrade, never asked for) is not one: it is a final answer, refused as any other non-2xx."""
        self.interim = True
        self.content_type = b""
        assert self.response is not None
        self.response.on_informational()

    # -- exchange
    def start(self, response: Exchange) -> None:
        self.response = response
        self.relay_headers = True

    def finish(self) -> None:
        self.response = None
        self.relay_headers = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


class Response:
    """Headers arrive first; the body is read whole (:meth:`read`) or streamed (:meth:`iter_raw`)."""

    def __init__(self, conn: _Connection, pool: ConnectionPool) -> None:
        self._conn = conn
        self._pool = pool
        self.status = 0
        self.headers: dict[str, str] = {}
        self._headers_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._wake: asyncio.Event | None = None  # only a streamed body ever waits
        self._complete = False
        self._error: Exception | None = None
        self._paused = False
        self._released = False
        self._keep_alive = False
        self.received_any = False
        self.head_bytes = 0  # counted by the connection while the head is unfinished after a read

    # -- parser events (relayed by the connection)
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_informational(self) -> None:
        self.headers.clear()

    def on_headers_complete(self, status: int) -> None:
        self.status = status
        if not self._headers_done.done():
            self._headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._wake is not None:
            self._wake.set()
        if self._buffered > _HIGH_WATER and not self._paused and self._conn.transport is not None:
            self._paused = True
            self._conn.transport.pause_reading()

    def on_message_complete(self, keep_alive: bool) -> None:
        self._keep_alive = keep_alive
        self._complete = True
        if self._wake is not None:
            self._wake.set()

    def fail(self, exc: Exception) -> None:
        if self._complete:
            return
        self._error = exc
        if not self._headers_done.done():
            self._headers_done.set_exception(exc)
        if self._wake is not None:
            self._wake.set()

    # -- consumer side
    async def _wait_headers(self) -> None:
        await self._headers_done

    async def iter_raw(self) -> AsyncGenerator[bytes, None]:
        try:
            while True:
                while self._chunks:
                    chunk = self._chunks.popleft()
                    self._buffered -= len(chunk)
                    if self._paused and self._buffered < _LOW_WATER and self._conn.transport is not None:
                        self._paused = False
                        self._conn.transport.resume_reading()
                    yield chunk
                if self._complete:
                    return
                if self._error is not None:
                    raise self._error
                if self._wake is None:
                    self._wake = asyncio.Event()
                self._wake.clear()
                await self._wake.wait()
        finally:
            self.release()

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body; past ``limit`` bytes :class:`BodyTooLarge` (the connection closed, the rest
        unread: a backend that sends without end holds no more than that)."""
        if self._complete and not self._paused:  # the common case: the whole body is here already
            body = b"".join(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            if limit is not None and len(body) > limit:
                self._keep_alive = False  # not reused: a backend that sent that much is not trusted to be done
                self.release()
                raise BodyTooLarge(limit)
            self.release()
            return body
        chunks = []
        size = 0
        stream = self.iter_raw()
        try:
            async for chunk in stream:
                size += len(chunk)
                if limit is not None and size > limit:
                    raise BodyTooLarge(limit)
                chunks.append(chunk)
        finally:
            await stream.aclose()  # releases the connection: closed unless the body was read to its end
        return b"".join(chunks)

    def release(self) -> None:
        """Give the connection back to the pool if the exchange ended cleanly, else close it."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        reusable = self._complete and self._keep_alive and not conn.closed and not self._paused
        conn.finish()
        self._pool._release(conn, reusable)

    async def aclose(self) -> None:
        self.release()


class ConnectionPool:
    """Kept-alive connections to one origin, at most ``max_connections`` at a time."""

    def __init__(
        self,
        url: str,
        max_connections: int = 256,
        connect_timeout_s: float = 10.0,
        route: Route | None = None,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        """``route``: the proxy and TLS context for this origin (gateway/upstreams/egress.py); None:
        directly, with the system's CAs. ``max_head_bytes``: a response head still unfinished past that
        many bytes fails its exchange (:class:`HeadTooLarge`) and closes its connection."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        if route is None:
            route = Route(ssl=default_context() if parts.scheme == "https" else None)
        elif (route.ssl is not None) != (parts.scheme == "https"):
            raise ValueError(f"the route's TLS setting does not fit {parts.scheme}: {url!r}")
        self.route = route
        self.ssl: ssl.SSLContext | None = route.ssl
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        host_header = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = host_header if default_port else f"{host_header}:{self.port}"
        self._connect_to = f"{host_header}:{self.port}"  # as written in CONNECT
        self._tls_hint = reset_hint(route.client_cert)
        # What every request line carries besides method and path: through a proxy, plain http is
        # addressed in absolute form with the proxy's credentials (decided here, once).
        self._prefix = b""
        self._host_block = b"host: %s\r\n" % self.authority.encode("latin-1")
        proxy = route.proxy
        if proxy is not None and route.ssl is None:
            self._prefix = f"http://{self.authority}".encode("latin-1")
            if proxy.authorization:
                self._host_block += b"proxy-authorization: %s\r\n" % proxy.authorization.encode("latin-1")
        self._idle: list[_Connection] = []
        self._slots = Slots(max_connections)
        self._connect_timeout = connect_timeout_s
        self._max_head = max_head_bytes
        self._closed = False
        self._all: set[_Connection] = set()
        self._batch: WriteBatch | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self._connect_timeout):
                _transport, conn = await open_connection(
                    lambda: _Connection(self._max_head), self.host, self.port, self.route, self._connect_to
                )
        except TunnelError as exc:
            raise ConnectError(str(exc)) from None
        except TimeoutError:
            via = f" through proxy {self.route.proxy.display}" if self.route.proxy else ""
            raise ConnectError(
                f"cannot connect to {self.authority}{via}: no connection within {self._connect_timeout:g} s"
            ) from None
        except OSError as exc:
            via = f" (proxy {self.route.proxy.display})" if self.route.proxy else ""
            raise ConnectError(f"cannot connect to {self.authority}{via}: {exc or type(exc).__name__}") from None
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._all.add(conn)
        return conn

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
            self._all.discard(conn)
        return None

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()
            self._all.discard(conn)
        self._slots.give()

    async def request(
        self, method: str, target: str, headers: Mapping[str, str] | bytes, body: bytes = b""
    ) -> Response:
        """Send one request; return once the response headers arrived (the body streams after).

        ``headers`` may be pre-encoded (:func:`encode_headers`) when the same ones go with every
        request, as they do on the hot path.
        """
        if self._closed:
            raise HttpError("client is closed")
        block = headers if isinstance(headers, bytes) else encode_headers(headers)
        length = b"content-length: %d\r\n" % len(body) if body or method in ("POST", "PUT", "PATCH") else b""
        data = b"%s %s%s HTTP/1.1\r\n%s%s%s\r\n%s" % (
            method.encode(),
            self._prefix,
            target.encode("latin-1"),
            self._host_block,
            block,
            length,
            body,
        )
        await self._slots.take()
        acquired = True
        try:
            for attempt in (1, 2):
                conn = self._take_idle()
                reused = conn is not None
                if conn is None:
                    conn = await self._connect()
                response = Response(conn, self)
                conn.start(response)
                assert conn.transport is not None
                write_batch().write(conn.transport, data)  # with the iteration's other writes
                try:
                    await response._wait_headers()
                except HttpError as exc:
                    # A kept-alive connection the server had already closed: nothing was processed,
                    # so one retry on a fresh connection is safe.
                    conn.finish()
                    conn.close()
                    self._all.discard(conn)
                    if reused and not response.received_any and attempt == 1:
                        continue
                    if not reused and not response.received_any and self.ssl is not None and "tls." not in str(exc):
                        raise HttpError(f"{exc}{self._tls_hint}") from None
                    raise
                except BaseException:
                    conn.finish()
                    conn.close()
                    self._all.discard(conn)
                    raise
                acquired = False  # the response now owns the slot until release()
                return response
            raise HttpError("unreachable")
        finally:
            if acquired:
                self._slots.give()

    def head(self, method: str, target: str, block: bytes) -> bytes:
        """The start of a request with a body, up to its ``content-length`` value (:meth:`try_start`)."""
        return b"%s %s%s HTTP/1.1\r\n%s%scontent-length: " % (
            method.encode(),
            self._prefix,
            target.encode("latin-1"),
            self._host_block,
            block,
        )

    def try_start(self, head: bytes, body: bytes, exchange: Exchange) -> _Connection | None:
        """Send a request on an idle kept-alive connection now, its response's events to ``exchange``;
        None when no connection is idle or no slot free (then use :meth:`request`). ``head`` is
        :meth:`head`'s. The exchange owns the slot and the connection until it calls :meth:`release`
        with them; :meth:`abandon` ends an exchange that will not finish."""
        if self._closed:
            raise HttpError("client is closed")
        idle = self._idle
        slots = self._slots
        if not idle or slots._free <= 0 or slots._waiters:  # Slots.try_take's test, inline
            return None
        slots._free -= 1
        conn = idle.pop()  # _take_idle, inline for its common case (the newest idle connection is open)
        if conn.closed:
            self._all.discard(conn)
            found = self._take_idle()
            if found is None:
                slots.give()
                return None
            conn = found
        conn.response = exchange
        conn.content_type = b""  # (its body list is empty: every exchange that ends with it reusable took its pieces)
        assert conn.transport is not None
        batch = self._batch
        if batch is None:
            batch = self._batch = write_batch()  # a pool lives on one loop
        batch.write(conn.transport, b"%s%d\r\n\r\n%s" % (head, len(body), body))
        return conn

    def release(self, conn: _Connection, reusable: bool) -> None:
        """The end of a :meth:`try_start` exchange: the connection back to the pool (or closed)."""
        conn.response = None
        conn.after_read = None
        if reusable and not conn.closed and not self._closed:  # _release, inline for the common case
            self._idle.append(conn)
            slots = self._slots
            if slots._waiters:
                slots.give()
            else:
                slots._free += 1  # Slots.give with nobody waiting
            return
        self._release(conn, False)

    def abandon(self, conn: _Connection) -> None:
        """A :meth:`try_start` exchange that will not be read to its end: its connection is closed."""
        conn.response = None
        conn.after_read = None
        conn.close()
        self._release(conn, False)

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """Header lines ready for :meth:`ConnectionPool.request`; CR/LF in names or values are refused."""
    lines = []
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:  # not any() over a generator: 2.5x faster
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1")


def target_of(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
