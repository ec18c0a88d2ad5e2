"""The client limits of the gateway's HTTP/1.1 server protocol (transports/http_protocol.py, which
subclasses this): one keep-alive timer per idle period, the request head and body timeouts, the exact
request head cap, a client that reads nothing, and the protocol's own refusals with their lingering close.

The limits cost no timer or clock read for a request that arrives whole: a connection that sends
nothing is closed silently after ``keep_alive_timeout_s``, as is one idle that long between requests
(empty lines between requests are no activity); a request head, then its body, that does not arrive
within ``request_head_timeout_s`` / ``request_body_timeout_s`` gets a 408; a head over
``max_request_head_bytes`` a 431; a connection beyond ``max_client_connections`` a 503 (each then
closes); a client that reads nothing for ``response_send_timeout_s`` while its socket is full, or while
a close waits on it, is aborted (ADR 0023). A refusal of the protocol's own (400, 408, 431, 503) is sent
with the end of our side, and what the client still sends is read and dropped for ``LINGER_S`` at most (a
lingering close): closed at once with the client's bytes unread, the kernel would reset the connection
and the client lose the refusal. An answer that closes the connection while its client still sends the
body closes it the same way. A refusal behind answers still under way waits for them (nothing more is
read meanwhile), so that the requests before it are answered whole and in order.

The head limit is exact: a head is counted from the first byte of its request line through the LF of
the blank line that ends it, CRLFs included (empty lines before a request line are no head's), and
one of ``max_request_head_bytes`` is parsed, one byte more gets the 431 (its app never runs; it is
not parsed past the limit), however it arrives: in one read with others (pipelined), or over many.
A head within one segment no larger than the limit, begun in it, is within the limit, so such a
segment costs one comparison of its length. The head gauge (head_gauge.py), which knows where each
head begins and ends, reads first a segment larger than the limit and one that begins within a head
or a chunked body; a segment that ends within one of those is measured once parsed (it began between
requests, or within a body whose length is known). A request whose head comes whole and whose body
follows in other segments meets no gauge.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import cast

import httptools
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config import Limits
from gateway.errors import INVALID_REQUEST
from gateway.transports.coalesce import CoalescingTransport
from gateway.transports.head_gauge import HeadGauge
from gateway.transports.refused_upgrade import body_framing


class PerConnection:
    """What the gateway's protocol keeps per client connection beyond uvicorn's own attributes, in one
    slotted object rather than a dozen instance attributes: CPython 3.11 shares an instance dict's keys
    among a class's instances only up to 29 attributes, and uvicorn's protocol has 28 of its own. Past
    that each connection carries a whole dict of its own, about 1.3 KB more per connection (10,000 idle
    streams hold as many; tests/gateway/transports/test_lean_cycle.py holds the protocol to the limit)."""

    __slots__ = (
        "abort",
        "body_left",
        "fast_max",
        "gauge",
        "idle_since",
        "lean_allowed",
        "lean_limit",
        "lean_posts",
        "limits",
        "owed",
        "owed_since",
        "refusal",
        "socket",
        "stalled_since",
        "watch_lost",
    )

    def __init__(
        self,
        socket: asyncio.Transport,
        watch_lost: Callable[[], asyncio.Future[None]],
        lean_allowed: bool,
        lean_posts: dict[bytes, tuple[str, ASGI3Application]],
        lean_limit: int,
        limits: Limits,
        idle_since: float,
    ) -> None:
        self.socket = socket  # asked is_closing() after every response: one call, not two
        # Per connection, not per request: bound methods put in every request's scope.
        self.abort = socket.abort
        self.watch_lost = watch_lost
        self.lean_allowed = lean_allowed
        self.lean_posts = lean_posts
        self.lean_limit = lean_limit  # the lean cycle's body limit
        # The limits object itself, not copies of its fields: read only when a client is slow.
        self.limits = limits
        self.idle_since: float | None = idle_since  # None while a request is under way
        # Where the connection's bytes are at the end of a segment, as far as the head limit needs
        # (head_gauge.py): between requests (no gauge, body_left 0), within a body with a Content-Length
        # (body_left of its bytes still to come: a request sent in more than one segment, its head in
        # the first, costs no gauge), or, with a gauge, within a head or a chunked body.
        self.gauge: HeadGauge | None = None
        self.body_left = 0
        # The largest segment data_received parses without the gauge measuring it first: the head limit,
        # or -1 while a gauge is under way (every segment then); UNMEASURED while a measured segment is
        # parsed, and once nothing is read as requests any more (a refused head waiting for the answers
        # before it).
        self.fast_max = limits.max_request_head_bytes
        self.owed = OWES_NOTHING  # what of a request the client still owes (see data_received)
        self.owed_since = 0.0
        self.stalled_since = 0.0  # when the socket last filled up (pause_writing)
        # A refusal (status, message) waiting for the earlier answers under way to be sent first.
        self.refusal: tuple[bytes, str] | None = None


class ClientLimitsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol holding its clients to the gateway's limits (see the module docstring);
    the gateway's protocol (http_protocol.py) makes ``_conn`` in ``connection_made`` and serves the requests."""

    _conn: PerConnection

    def _gauged(self, data: bytes) -> None:
        """A segment that may hold a request head over ``max_request_head_bytes``: one larger than the limit,
        or one that goes on with a request begun in an earlier segment. The head gauge (head_gauge.py)
        reads it first; it is parsed up to the first head over the limit, which gets the 431 (its app never
        runs, its head is never parsed whole)."""
        conn = self._conn
        gauge = conn.gauge or HeadGauge(conn.limits.max_request_head_bytes, conn.body_left)
        over = gauge.measure(data)
        conn.fast_max = UNMEASURED
        self.data_received(data if over is None else data[:over])
        self._gauge_after(gauge)
        if over is not None and self.parser is not None and self in self.connections:
            self._head_too_large()  # (unless the parse ended the connection: a 400, or a WebSocket handed over)

    def _gauge_after(self, gauge: HeadGauge) -> None:
        """Where ``gauge`` says a segment ended: kept for a head or a chunked body under way, else let go."""
        conn = self._conn
        if gauge.idle or gauge.body_left:
            conn.gauge, conn.body_left, conn.fast_max = None, gauge.body_left, conn.limits.max_request_head_bytes
        else:
            conn.gauge, conn.body_left, conn.fast_max = gauge, 0, -1

    def _unparsable(self, exc: httptools.HttpParserError) -> None:
        self.logger.warning("Invalid HTTP request received.")
        self.send_400_response(str(exc))  # llhttp's reason, e.g. "Invalid header token"

    # ---- keep-alive and client timeouts: one timer per idle period ----------------------------
    # uvicorn cancels its keep-alive timer on every segment received and arms a new one after every
    # response: a timer handle per request. Here a response only notes when the connection went
    # idle; the timer, armed once, closes the connection if it stayed idle long enough, else waits on.
    # The same timer watches a client that owes part of a request (request_head_timeout_s,
    # request_body_timeout_s) or reads nothing of a response (response_send_timeout_s): those arm or
    # advance it only when they begin, which a request arriving whole never does.

    def _unset_keepalive_if_required(self) -> None:
        # Busy: the pending timer will not close (uvicorn's hook; data_received inlines it).
        self._conn.idle_since = None

    def _owe(self, owed: int, data: bytes) -> None:
        """A segment (``data``) left a request unfinished: from now the client has the head or body timeout
        to send the rest (the clock starts at the first segment of each). A segment parsed without the
        head gauge began between requests or within a body with a Content-Length (PerConnection.body_left):
        one that ends within such a body (the head whole, the body to come) only updates what is left of
        it; one that ends within a head or a chunked body is measured now by a gauge made for where it
        began, which then measures every next segment until one ends between requests: a head that goes
        on past ``limits.max_request_head_bytes`` is refused (431) the moment it holds more."""
        conn = self._conn
        if conn.fast_max == conn.limits.max_request_head_bytes and self._unmeasured_end(owed, data):
            return
        if owed == conn.owed:
            return
        conn.owed = owed
        # An answer that closes the connection while the client still sends its body closes it lingering.
        cast(CoalescingTransport, self.transport).close_while_sending = (
            self._close_while_client_sends if owed == OWES_BODY else None
        )
        conn.owed_since = now = self.loop.time()
        self._due_by(now + self._allowed(owed))

    def _unmeasured_end(self, owed: int, data: bytes) -> bool:
        """:meth:`_owe`'s account of a segment parsed without the gauge; True: a head over the limit, refused."""
        conn = self._conn
        left = conn.body_left
        if owed == OWES_BODY:
            if len(data) < left:  # all of it the body under way since an earlier segment
                conn.body_left = left - len(data)
                return False
            # The body of a request begun in this segment (its cycle has every byte of it read so far).
            framing = body_framing(self.headers)
            if framing is not None and framing.startswith(b"content-length:"):
                conn.body_left = int(framing[15:]) - len(self.cycle.body)
                return False
        gauge = HeadGauge(conn.limits.max_request_head_bytes, left)  # from where the segment began
        if gauge.measure(data) is not None:  # a segment of the limit's size, all of it an unfinished head
            self._head_too_large()
            return True
        self._gauge_after(gauge)
        return False

    def _allowed(self, owed: int) -> float:
        """The time a client has to send the head or body it owes."""
        limits = self._conn.limits
        return limits.request_head_timeout_s if owed == OWES_HEAD else limits.request_body_timeout_s

    def _due_by(self, when: float) -> None:
        """Have the timer due no later than ``when``."""
        timer = self.timeout_keep_alive_task
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self.timeout_keep_alive_task = self.loop.call_at(when, self._keep_alive_due)

    def pause_writing(self) -> None:
        # The socket's buffer is full: the client reads slower than we write, or not at all.
        super().pause_writing()
        conn = self._conn
        conn.stalled_since = now = self.loop.time()
        self._due_by(now + conn.limits.response_send_timeout_s)

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        conn = self._conn
        if conn.socket.is_closing():
            return
        conn.idle_since = None
        refusal = conn.refusal
        if refusal is None:
            flow = self.flow
            if flow.read_paused:  # FlowControl.resume_reading's own test, without the call
                flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        if refusal is not None:  # every answer before it is sent (_refuse_after_earlier_answers)
            conn.refusal = None
            self._refuse(*refusal)
            return
        conn.idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        conn = self._conn
        if self.flow.write_paused:
            send_timeout = conn.limits.response_send_timeout_s
            due = conn.stalled_since + send_timeout
            if due <= self.loop.time():
                self.logger.info("Client read nothing for %.0f s: connection dropped.", send_timeout)
                self.transport.abort()  # a close would wait for the buffer to drain, which it never does
                return
            self._due_by(due)
        owed = conn.owed
        if owed:
            now = self.loop.time()
            if self.flow.read_paused:
                conn.owed_since = now  # we stopped reading (pipelining, a body not taken yet): not the client's delay
            due = conn.owed_since + self._allowed(owed)
            if due > now:
                self._due_by(due)
            else:
                self._request_timed_out(owed)
            return
        idle_since = conn.idle_since
        if idle_since is None:
            return  # a request is under way; its response arms the timer again
        due = idle_since + self.timeout_keep_alive
        if due > self.loop.time():
            self._due_by(due)
        else:
            self.timeout_keep_alive_handler()

    def _head_too_large(self) -> None:
        """A request head over ``max_request_head_bytes`` (none of it parsed past the limit, its app never
        run): a 431, then the close, after the answers still under way (:meth:`_refuse_request`), during
        which nothing more is read, so the gauge is done with."""
        conn = self._conn
        head_limit = conn.limits.max_request_head_bytes
        self.logger.info("Request head over %d bytes: 431, connection closed.", head_limit)
        conn.gauge, conn.body_left, conn.fast_max = None, 0, UNMEASURED
        self._refuse_request(OWES_HEAD, b"431 Request Header Fields Too Large", f"Request head over {head_limit} bytes")

    def _request_timed_out(self, owed: int) -> None:
        """The client did not send the rest of a request in time: a 408 (:meth:`_refuse_request`)."""
        what = "head" if owed == OWES_HEAD else "body"
        limit = self._allowed(owed)
        self.logger.info("Request %s not received within %g s: 408, connection closed.", what, limit)
        self._refuse_request(owed, b"408 Request Timeout", f"Request {what} not received within {limit:g} s")

    def _refuse_request(self, owed: int, status: bytes, message: str) -> None:
        """Refuse the request whose head or body (``owed``) the client was sending: ``status`` (:meth:`_refuse`),
        after the answers still under way on this connection (:meth:`_refuse_after_earlier_answers`); if
        this request's own answer has begun, it cannot be refused, and the connection closes alone."""
        cycle = self.cycle
        self._conn.owed = OWES_NOTHING
        cast(CoalescingTransport, self.transport).close_while_sending = None
        if owed == OWES_BODY:
            # The request's app (uvicorn's cycle may run it while the body streams in) reads
            # http.disconnect from now on, and anything it sends is dropped.
            cycle.disconnected = True
            cycle.keep_alive = False
            cycle.message_event.set()
            if cycle.response_started:
                self._refuse(status, message, answer=False)  # its own answer has begun: it cannot be given
                return
            queued = [item for item in self.pipeline if item[0] is cycle]
            if not queued:
                self._refuse(status, message)
                return
            self.pipeline.remove(queued[0])  # pipelined behind answers under way: it never runs
        elif cycle is None or cycle.response_complete:
            self._refuse(status, message)
            return
        self._refuse_after_earlier_answers(status, message)

    def _refuse_after_earlier_answers(self, status: bytes, message: str) -> None:
        """Refuse once the answers under way on this connection (the one running, those pipelined
        behind it) are sent: the client sent those requests correctly and must not lose them (nginx
        answers a bad request after the ones before it too). Nothing more is read meanwhile: every
        earlier request was whole before the refused one began, so none waits for more bytes, and
        the client's further bytes wait in the kernel for the lingering close. The socket is paused
        itself, not through uvicorn's flow control, which an app reading its request would resume.
        ``on_response_complete`` runs what is pipelined, then sends the refusal."""
        conn = self._conn
        conn.refusal = (status, message)
        self.flow.read_paused = False  # (what uvicorn's flow control paused is paused for good below)
        conn.socket.pause_reading()

    def send_400_response(self, msg: str) -> None:
        """A request httptools cannot parse (``msg``: llhttp's reason). uvicorn's writes a plain-text 400 and
        closes at once, which resets a connection whose client is still sending (a body, or a large head in
        one write), and the client loses the 400. Here it is one of the protocol's own refusals
        (:meth:`_refuse_request`): a JSON-RPC error, then the lingering close, whose ``connection_lost``
        does what uvicorn's close led to (the cycle told, the connection forgotten); the parser is fed
        nothing more."""
        if self.transport.is_closing():
            # Under TLS (closed at once) data can still arrive while the close is under way, and the
            # parser, stuck on its error, fails again: refused already.
            return
        cycle = self.cycle
        owed = OWES_BODY if cycle is not None and cycle.scope is self.scope and cycle.more_body else OWES_HEAD
        reason = f": {msg}" if msg.isascii() and msg.isprintable() and len(msg) <= 100 else ""
        self._refuse_request(owed, b"400 Bad Request", f"Request could not be parsed{reason}")

    def _refuse(self, status: bytes, message: str, answer: bool = True) -> None:
        """The protocol's own refusal: ``status`` with a JSON-RPC error of id null (no request was read)
        saying ``message``, unless not ``answer``; then the connection closes (:meth:`_close_after_refusal`)."""
        if answer:
            error = {"code": INVALID_REQUEST, "message": message}
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
            head = [b"HTTP/1.1 ", status, b"\r\n"]
            head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
            head.append(
                b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            )
            self.transport.write(b"".join(head) + body)
        self._close_after_refusal()

    def _close_while_client_sends(self) -> None:
        """An answer that ends the connection (the request said ``Connection: close``, or was HTTP/1.0) came
        while its client still sends the request's body (an early 413, 401 or 411): the cycle asked the
        transport to close (``CoalescingTransport.close_while_sending``). Closed at once, the client's
        unread bytes would make the kernel reset the connection and the client lose the answer (Python's
        urllib sends ``Connection: close`` on every request), so the close lingers as a refusal's does. On
        the next callback: the cycle's own ``on_response`` runs first, as after any close."""
        self._conn.owed = OWES_NOTHING
        self.loop.call_soon(self._close_after_refusal)

    def _close_after_refusal(self) -> None:
        """Close a connection the protocol refused itself (400, 408, 431, 503) so that the client can read the
        refusal: a close with bytes of the client's still unread makes the kernel send a reset, and the
        client's kernel then drops the refusal unread (a client sending its head or body slowly is still
        sending). So the refusal is sent with the end of our side (FIN), and the socket is handed to a
        protocol that drops what the client still sends until it closes, for ``LINGER_S`` at most (nginx's
        lingering close). TLS has no half-close (no ``write_eof``), but its close lingers the same way:
        asyncio's and uvloop's SSL transports send close_notify after the refusal, then read and drop what
        the client sends until its own close_notify, for their SSL shutdown timeout (30 s) at most; here
        ``LINGER_S`` at most, as without TLS."""
        socket = self._conn.socket
        transport = cast(CoalescingTransport, self.transport)
        if transport.is_closing():
            return
        if not socket.is_reading():  # paused by flow control or a refusal that waited: the lingering reads
            socket.resume_reading()
        if not socket.can_write_eof():
            transport.close()
            self.loop.call_later(LINGER_S, transport.abort_unless_lost)
            return
        self.transport.write_eof()  # what is buffered leaves first (CoalescingTransport.write_eof)
        socket.set_protocol(_Lingering(socket, self.loop))
        # This protocol is done with the connection: uvicorn's bookkeeping and ours, with an exception
        # because uvicorn's would otherwise close the socket at once (what the lingering avoids).
        self.connection_lost(_REFUSED)


class _Lingering(asyncio.Protocol):
    """A refused connection's last seconds (``_close_after_refusal``): what the client sends is dropped,
    its end closes the socket, and ``LINGER_S`` after the refusal it is aborted."""

    __slots__ = ("_timer",)

    def __init__(self, socket: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(LINGER_S, socket.abort)

    def data_received(self, data: bytes) -> None:
        pass  # the refusal is given; nothing the client sends now is read

    def eof_received(self) -> bool:
        return False  # the client has read and closed: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()


# How long a refused connection is kept reading and dropping what its client still sends (nginx's
# lingering_timeout is 5 s between reads, 30 s in all; a refused client gets less).
LINGER_S = 2.0
_REFUSED = ConnectionAbortedError("refused by the gateway (lingering close)")
UNMEASURED = sys.maxsize  # PerConnection.fast_max: no segment is measured
OWES_NOTHING, OWES_HEAD, OWES_BODY = 0, 1, 2  # what of a request a client owes (PerConnection.owed)
