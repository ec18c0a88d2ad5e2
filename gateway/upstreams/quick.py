"""One POST to an HTTP backend answered in the HTTP parser's callbacks (issue 15's hot path).

:meth:`HttpCarrier.start_request <gateway.upstreams.http.HttpCarrier.start_request>` writes a
request on an idle kept-alive connection and hands the parser's events to a :class:`QuickExchange`;
no task, coroutine or ``Response`` is made for the common answers:

- ``application/json`` (or any answer that is no stream): the body is gathered and handled at its
  end by :meth:`HttpCarrier._answer`, the connection back to the pool first;
- ``text/event-stream`` (what the official SDKs answer by default): the events of each read are
  parsed once the read is (``after_read``: every chunk of the read at once) and relayed at once
  (progress, logs and server requests related to the call reach the client while the call runs,
  never held until its end); the response event is the call's
  answer; what follows it on the same stream is still read and relayed, for at most ``DRAIN_S``,
  and the connection goes back to the pool when the stream ends (closed if it never does).

Invariants: the exchange holds its pool connection (and slot) from the start until the answer's
message is complete (the connection back to the pool), the connection fails, or :meth:`abort`;
after that ``conn`` is None and the parser's events no longer reach it. An event over the carrier's
``max_message_bytes`` fails the call (-32603, as the awaited path's parser refusal does) and closes
the connection; so does a body that is no stream once it is over that size (-32095), checked after
each read that leaves it unfinished, and a head over ``max_response_head_bytes`` (-32095 too; the
connection counts it: httpclient.py's ``_head_read``). The rare paths stay tasks (``task``): a
stream that ended before its response is resumed with Last-Event-ID
(gateway/upstreams/post_stream.py's ``resume``), and a request whose kept-alive connection proved
closed before any byte of the answer is sent once more, afresh. Nothing is buffered beyond the
parser's one unfinished event, so there is nothing to pause reading for (the awaited path pauses
only when its own reading task falls behind, which cannot happen here).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from gateway import jsonrpc, sse
from gateway.sse import SSEParser
from gateway.upstreams.deadlines import Slot
from gateway.upstreams.httpclient import ConnectionPool, HttpError, _Connection

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.upstreams.http import HttpCarrier

log = logging.getLogger(__name__)

DRAIN_S = 30.0  # how long the rest of an answered stream may take to end


class QuickExchange:
    """The parser's events of one POST's answer, handled as they come (see the module docstring)."""

    __slots__ = (
        "_answered",
        "_carrier",
        "_drain_key",
        "_last_id",
        "_pool",
        "_retry_ms",
        "_sse",
        "conn",
        "head_bytes",
        "headers",
        "message",
        "received_any",
        "status",
        "task",
    )

    def __init__(
        self, carrier: HttpCarrier, pool: ConnectionPool, message: dict[str, Any], headers: Mapping[str, str] | None
    ) -> None:
        self._carrier = carrier
        self._pool = pool
        self.message = message
        self.headers = headers
        self.conn: _Connection | None = None
        self.task: asyncio.Task[None] | None = None
        self.status = 0  # 0 until the answer's head is complete
        self.received_any = False  # set by the connection at the answer's first bytes
        self.head_bytes = 0  # counted by the connection while the head is unfinished after a read
        self._sse: SSEParser | None = None  # set at the headers of a stream
        self._answered = False  # the stream carried the response (what follows is drained)
        self._last_id: str | None = None
        self._retry_ms: int | None = None
        self._drain_key: Slot | None = None  # its slot in the carrier's drain deadlines while draining

    def abort(self) -> None:
        """The call was cancelled or timed out: its exchange ends now (over HTTP, closing the
        stream is the cancellation), the connection is closed, never reused half-read. Once the
        response came, the rest of its stream is left to be drained (as it is when answered)."""
        if self._answered:
            return
        conn = self.conn
        if conn is not None:
            self.conn = None
            self._pool.abandon(conn)
        elif self.task is not None and not self.task.done():
            self.task.cancel()  # resuming the stream, or sending once more

    # -- the parser's events
    def on_header(self, name: bytes, value: bytes) -> None:
        """Not called: the connection's quick parser keeps the header lines (try_start's exchange)."""

    def on_body(self, body: bytes) -> None:
        """Not called: the connection's quick parser keeps the body pieces (try_start's exchange)."""

    def on_informational(self) -> None:
        """Nothing kept: the connection's own Content-Type is reset by it."""

    def on_headers_complete(self, status: int) -> None:
        self.status = status
        conn = self.conn
        if status < 400 and conn is not None and conn.content_type.startswith(b"text/event-stream"):
            self._carrier.last_status = status
            self._sse = SSEParser(self._carrier._max)
            conn.after_read = self  # the events of each read, parsed once it is whole
        elif conn is not None:
            # A body that does not end in this read is measured after each read (after_read); one that
            # does (the common answer) releases the connection first, which unsets this unheard.
            conn.after_read = self

    def after_read(self) -> None:
        """A read of the stream was parsed: its events (every chunk of the read at once) are handled now,
        before the loop runs anything else, as they would be chunk by chunk."""
        conn = self.conn
        if conn is None:
            return
        pieces = conn.body
        if self._sse is None:
            # A body that is no stream, gathered whole for its end: within max_message_bytes, else
            # the call fails now and the connection is closed (a backend sending without end holds
            # no more than that, and not until the call's deadline).
            limit = self._carrier._max
            if sum(map(len, pieces)) > limit:
                pieces.clear()
                self._stream_failed(
                    jsonrpc.PAYLOAD_TOO_LARGE, f"backend {self._carrier._name} sent more than {limit} bytes"
                )
            return
        if pieces:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            self._events(conn, body)
        if self._answered and self._drain_key is None and self.conn is not None:
            # The rest of an answered stream is still to come (the stream did not end in this read: the
            # common answer, whose end comes in the same read, never enters the drain deadlines at all);
            # it may take at most DRAIN_S. A timer slice shared with the other drains
            # (gateway/upstreams/deadlines.py), not a timer of its own: arming and cancelling one per call
            # cost more than the parsing.
            self._drain_key = self._carrier._drains.add(DRAIN_S, self)

    def _events(self, conn: _Connection, body: bytes) -> None:
        """A stream's bytes: each complete event relayed, the response the call's answer."""
        parser = self._sse
        assert parser is not None
        carrier = self._carrier
        rpc_id = self.message["id"]
        try:
            events = parser.feed(body)
        except ValueError as exc:  # the parser's refusal: an event or line over the limit
            self._stream_failed(jsonrpc.INTERNAL_ERROR, f"backend {carrier._name} sent a malformed stream: {exc}")
            return
        inbound = carrier._inbound
        assert inbound is not None
        try:
            for event in events:
                if event.id is not None:
                    self._last_id = event.id
                if event.retry_ms is not None:
                    self._retry_ms = event.retry_ms
                if not event.data or event.event != "message":
                    continue  # no message (a priming event, an id or retry alone): message_of's None, without the call
                msg = sse.message_of(event, carrier._source)
                if msg is None:
                    continue
                # jsonrpc.is_response, inline
                answers = (
                    not self._answered
                    and "method" not in msg
                    and ("result" in msg or "error" in msg)
                    and msg.get("id") == rpc_id
                )
                inbound(msg, rpc_id)
                if answers:
                    self._answered = True  # only once delivered: a failure before fails the call below
        except Exception:
            # Inside the connection's callback nobody else would hear of it (and the caller would wait
            # for its deadline): the call fails now, as it would have where send() is awaited.
            log.exception("backend %s: relaying a stream's event failed", carrier._name)
            self._stream_failed(jsonrpc.INTERNAL_ERROR, f"backend {carrier._name}: answer not handled")

    def on_message_complete(self, keep_alive: bool) -> None:
        conn = self.conn
        if conn is None:
            return
        pieces = conn.body
        if self._sse is not None:
            if pieces:  # the last events, in the read that ends the stream
                body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
                pieces.clear()
                self._events(conn, body)
                if self.conn is None:
                    return  # the stream failed on them: its connection is closed
            self.conn = None
            self._pool.release(conn, keep_alive)
            self._end_drain()
            if not self._answered:
                self._carrier._quick_resume(self, self._last_id, self._retry_ms)
            return
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        self.conn = None
        carrier = self._carrier
        # A body over the limit (the call fails in _answer) closes its connection, as on the awaited path.
        self._pool.release(conn, keep_alive and len(data) <= carrier._max)
        carrier.last_status = self.status
        try:
            carrier._answer(self.message, self.status, data)
        except Exception:
            # As in _events: the call fails now rather than at its deadline.
            log.exception("backend %s: handling an answer failed", carrier._name)
            carrier._fail(self.message["id"], jsonrpc.INTERNAL_ERROR, f"backend {carrier._name}: answer not handled")

    def fail(self, exc: Exception) -> None:
        conn = self.conn
        if conn is None:
            return
        self.conn = None
        self._pool.abandon(conn)
        self._end_drain()
        if self._answered:
            return  # the rest of an answered stream is lost; the call has its answer
        self._carrier._quick_failed(
            self, HttpError(str(exc)) if not isinstance(exc, HttpError) else exc, not self.received_any
        )

    # -- a stream's ends other than its message's
    def _stream_failed(self, code: int, text: str) -> None:
        """The stream cannot be read on: the connection is closed, and the call fails if unanswered."""
        conn = self.conn
        if conn is not None:
            self.conn = None
            self._pool.abandon(conn)
        self._end_drain()
        if not self._answered:
            self._answered = True  # one answer per call: nothing after this one
            self._carrier._fail(self.message["id"], code, text)

    def _end_drain(self) -> None:
        key = self._drain_key
        if key is not None:
            self._drain_key = None
            key.pop(self, None)  # Deadlines.remove

    def expire(self) -> None:
        """An answered stream that did not end within DRAIN_S: its connection is closed."""
        self._drain_key = None
        conn = self.conn
        if conn is not None:
            self.conn = None
            self._pool.abandon(conn)
