"""An HTTP upgrade the gateway does not take, served as HTTP/1.1 (RFC 9110 §7.8: a server may ignore it).

Clients on plain HTTP offer HTTP/2 by upgrade on ordinary requests: ``curl --http2``, the JDK's
``HttpClient`` (HTTP/2 is its default version), Ktor: an ordinary POST with a body, and
``Connection: Upgrade, HTTP2-Settings`` and ``Upgrade: h2c``. httptools takes such a request as complete
at the end of its head (its headers callback asks llhttp to skip the body), then hands everything after the head to its
caller as the new protocol's data (MagicStack/httptools#124). uvicorn drops those bytes for any upgrade
but WebSocket. So the request ran with an empty body (the door's 400 parse error), a body sent in a
later write was parsed as a request of its own (a 400 from the parser), and a request pipelined behind
it was lost.

The gateway's protocol (http_protocol.py) gives those bytes to a new parser instead. It is fed first a
made-up head that carries the request's own framing (its ``Transfer-Encoding`` or ``Content-Length``),
so it reads the body into the request under way, whose cycle is told that more body is coming. Then it
parses the connection's next requests, as the connection's parser from then on. Its target,
:class:`AfterRefusedUpgrade`, ignores the made-up head and hands every other callback to the protocol.

Invariants: the body is framed by llhttp exactly as it would be without the upgrade headers (the same
framing header, the same parser), so no byte of it is taken for a request; the made-up head is never
seen by the app; a connection that never offers an upgrade never meets this module.
"""

from __future__ import annotations

from typing import Protocol


class ParserTarget(Protocol):
    """The parser callbacks of uvicorn's HTTP protocol that the new parser's target hands on."""

    def on_message_begin(self) -> None: ...
    def on_url(self, url: bytes) -> None: ...
    def on_header(self, name: bytes, value: bytes) -> None: ...
    def on_headers_complete(self) -> None: ...
    def on_body(self, body: bytes) -> None: ...
    def on_message_complete(self) -> None: ...


def body_framing(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The request's framing header line, from its headers (lowercase names, as uvicorn keeps them), or
    None for a request without a body. ``Transfer-Encoding`` wins over ``Content-Length``, as in HTTP/1.1;
    llhttp refused a request with both, or with two different lengths, before its upgrade was seen."""
    length = encoding = None
    for name, value in headers:
        if name == b"transfer-encoding":
            encoding = value
        elif name == b"content-length":
            length = value
    if encoding is not None:
        return b"transfer-encoding: " + encoding
    if length is not None and length.strip(b" \t") not in (b"", b"0"):
        return b"content-length: " + length
    return None


def framing_head(framing: bytes) -> bytes:
    """The made-up head that makes a new parser read a body framed by ``framing``."""
    return b"POST / HTTP/1.1\r\n" + framing + b"\r\n\r\n"


class AfterRefusedUpgrade:
    """The new parser's target. While ``replaying``, the head callbacks are the made-up head's and are
    dropped; the body and its end are the upgrade request's and go to the protocol, and so does every
    callback of the requests that follow."""

    __slots__ = ("_protocol", "_replaying")

    def __init__(self, protocol: ParserTarget, replaying: bool) -> None:
        self._protocol = protocol
        self._replaying = replaying

    def on_message_begin(self) -> None:
        if not self._replaying:
            self._protocol.on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._replaying:
            self._protocol.on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._replaying:
            self._protocol.on_header(name, value)

    def on_headers_complete(self) -> None:
        if not self._replaying:
            self._protocol.on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._protocol.on_body(body)

    def on_message_complete(self) -> None:
        self._replaying = False
        self._protocol.on_message_complete()
