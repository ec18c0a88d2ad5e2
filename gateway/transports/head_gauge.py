"""The exact size of every request head, however the client's bytes are cut into segments (ADR 0023).

What is counted: a request head's bytes as sent, from the first byte of its request line through the LF of
the blank line that ends it (request line, header lines and blank line, each with its CRLF). Empty lines
a client sends before a request line (RFC 9112 §2.2 has servers ignore them; llhttp skips them) belong
to no head. ``limits.max_request_head_bytes`` is the largest such head the gateway's protocol
(http_protocol.py) parses; a longer one gets a 431 and is never parsed to its end.

httptools says what a head holds (its url, its header lines) but not where in the bytes it began or
ended, so the parser that serves the requests cannot measure them. Nor need it, most of the time: a head
that begins and ends in one segment of at most the limit's size holds at most the limit. The protocol
asks this gauge only about a segment larger than the limit and about every segment of a request that
goes on over more than one (one that ended within a request brings the gauge in; one that ends between
requests lets it go). The gauge reads the segment first, with an llhttp parser of its own configured as
the protocol's, fed in pieces cut wherever a head or a message can end: after every blank line
(``\\r\\n\\r\\n``, which ends every head and every chunked body; one begun in the previous segment is
found too), where a ``Content-Length`` body ends, and where a head under way reaches the limit. So every
head's first and last byte is known exactly: the first is where the empty lines after the previous
message end, the last ends the piece in which the parser saw the head complete. A head that has not
ended once it holds the limit's bytes is over it: its offset is what :meth:`HeadGauge.measure` returns,
and the protocol parses the segment only up to there. Pieces in a body are parsed without callbacks.

An upgrade request is followed as the protocol follows one it does not take (refused_upgrade.py): a new
parser, fed a made-up head with the request's framing, reads the body and what comes after. One the
protocol does take (WebSocket) hands the connection over, and what the gauge says of the rest is moot.
"""

from __future__ import annotations

import re

import httptools

from gateway.transports.refused_upgrade import body_framing, framing_head

_BLANK_LINE = b"\r\n\r\n"
_EMPTY_LINES = re.compile(rb"[\r\n]*")  # what llhttp skips before a request line
# Where the gauge is in the bytes of the connection.
_BETWEEN, _HEAD, _LENGTH, _CHUNKED, _DONE = range(5)


class HeadGauge:
    """Measures the request heads of one connection from a point between requests on, segment by segment
    (:meth:`measure`), as long as the protocol asks; see the module docstring."""

    __slots__ = (
        "_at",
        "_begun",
        "_ended",
        "_headed",
        "_headers",
        "_left",
        "_limit",
        "_parser",
        "_seen",
        "_start",
        "_tail",
    )

    def __init__(self, limit: int, body_left: int = 0) -> None:
        """A gauge for a connection between requests, or (``body_left``) within a body with a Content-Length
        of which that many bytes are still to come."""
        self._limit = limit
        self._parser = httptools.HttpRequestParser(self)
        self._parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's parser
        self._at = _BETWEEN
        self._start = 0  # in a head: its offset in this segment (0 for one begun in an earlier segment)
        self._seen = 0  # in a head: its bytes in earlier segments
        self._left = 0  # in a body with a Content-Length: its bytes still to come
        self._tail = b""  # the last bytes of the previous segment (a blank line may begin there)
        self._headers: list[tuple[bytes, bytes]] = []
        self._begun = self._headed = self._ended = False
        if body_left:
            self._parser.feed_data(framing_head(b"content-length: %d" % body_left))  # into such a body
            self._at, self._left = _LENGTH, body_left

    @property
    def idle(self) -> bool:
        """Whether the bytes measured so far end between requests (the next segment needs no gauge)."""
        return self._at == _BETWEEN

    @property
    def body_left(self) -> int:
        """Within a body with a Content-Length: its bytes still to come (a gauge made with them can go on
        from there); else 0."""
        return self._left if self._at == _LENGTH else 0

    def measure(self, data: bytes) -> int | None:
        """Read the connection's next segment. The offset in it of the first request head over the limit (0
        for a head begun in an earlier segment), or None: no head in it is over the limit, the one under
        way at its end included. Once a head is over the limit, or the bytes cannot be parsed (the
        protocol's parser answers 400 on the same byte), the gauge measures nothing more."""
        view = memoryview(data)
        size = len(data)
        pos = 0
        try:
            while pos < size:
                at = self._at
                if at == _BETWEEN:
                    empty = _EMPTY_LINES.match(data, pos)
                    start = empty.end() if empty else pos
                    if start > pos:
                        self._feed(view[pos:start])
                        pos = start
                    if pos < size:
                        self._at, self._start, self._seen = _HEAD, pos, 0
                        self._begun = self._headed = self._ended = False
                elif at == _HEAD:
                    reach = self._start + self._limit - self._seen  # where the head would hold the limit's bytes
                    cut = min(self._blank_line_end(data, pos), reach, size)
                    self._feed(view[pos:cut])
                    pos = cut
                    if not self._begun:  # llhttp reads nothing after a request that closes the connection
                        self._at = _DONE
                    elif self._headed:  # the head ended with this piece
                        self._body()
                    elif cut == reach:
                        self._at = _DONE
                        return self._start
                    else:  # goes on in the next segment
                        self._seen += size - self._start
                        self._start = 0
                elif at == _LENGTH:
                    cut = min(pos + self._left, size)
                    self._feed(view[pos:cut])
                    self._left -= cut - pos
                    pos = cut
                    if not self._left:
                        self._at = _BETWEEN
                elif at == _CHUNKED:
                    cut = min(self._blank_line_end(data, pos), size)
                    self._feed(view[pos:cut])
                    pos = cut
                    if self._ended:
                        self._at = _BETWEEN
                else:
                    break
        except httptools.HttpParserError:
            self._at = _DONE
        self._tail = (self._tail + data[-3:])[-3:]
        return None

    def _blank_line_end(self, data: bytes, pos: int) -> int:
        """Where the first ``\\r\\n\\r\\n`` that ends after ``pos`` ends (it may begin in the previous
        segment), or past the segment's end if none does."""
        if pos < 3 and self._tail:
            tail = self._tail
            probe = tail + data[:3]
            found = probe.find(_BLANK_LINE)
            while found >= 0:
                end = found + 4 - len(tail)
                if end > pos:
                    return end
                found = probe.find(_BLANK_LINE, found + 1)
        found = data.find(_BLANK_LINE, max(pos - 3, 0))  # one that begins from there ends after pos
        return found + 4 if found >= 0 else len(data) + 1

    def _body(self) -> None:
        """The head just ended: what comes next, after its body (by its framing, as llhttp reads it)."""
        if self._ended:
            self._at = _BETWEEN
            return
        for name, _value in self._headers:
            if name == b"transfer-encoding":  # llhttp took it for chunked (a request's only framing by it)
                self._at = _CHUNKED
                return
        for name, value in self._headers:
            if name == b"content-length":
                self._at, self._left = _LENGTH, int(value)
                return
        self._at = _BETWEEN  # (llhttp ended a message without framing at its head)

    def _feed(self, piece: memoryview) -> None:
        try:
            self._parser.feed_data(piece)
        except httptools.HttpParserUpgrade as exc:
            # An upgrade request ends with its head, which ends the piece. The protocol serves one it does
            # not take as HTTP/1.1 (refused_upgrade.py): so does the gauge, with a new parser as its own
            # (no lenience set), fed the same made-up head.
            if exc.args[0] != len(piece):
                raise httptools.HttpParserError("upgrade within a piece") from exc  # not met; measure no more
            framing = body_framing(self._headers)
            self._parser = httptools.HttpRequestParser(self)
            self._ended = framing is None
            if framing is not None:
                # Its callbacks: the framing's header, then the head's end (the body's framing is read there).
                self._parser.feed_data(framing_head(framing))

    # ---- the parser's callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._begun = True
        self._headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._headed = True

    def on_message_complete(self) -> None:
        self._ended = True
