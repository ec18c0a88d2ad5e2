"""Who hears a backend connection's HTTP parser events (gateway/upstreams/httpclient.py): one response's
head, body and end, and how it fails. A connection serves one exchange at a time; the exchange is a
``Response`` (the awaited path) or a ``QuickExchange`` (gateway/upstreams/quick.py). A 1xx answer before
the final one (RFC 9110 §15.2) reaches the exchange only as :meth:`Exchange.on_informational`.
"""

from __future__ import annotations

from typing import Protocol


class Exchange(Protocol):
    """Who hears the parser's events of one response (a :class:`Response`, or a caller's own).

    ``received_any`` is set by the connection when the first bytes of the answer arrive. The headers go
    to :meth:`on_header` and the body to :meth:`on_body` only on :meth:`_Connection.start`'s exchanges. A
    :meth:`ConnectionPool.try_start` exchange has its connection's quick parser: its connection keeps the
    one header it needs, ``content_type``, and its body pieces go into the connection's ``body`` list by a
    C-level call; it reads ``content_type`` at :meth:`on_headers_complete`, and the body pieces after each
    read (``after_read``) or at :meth:`on_message_complete`."""

    received_any: bool
    status: int  # 0 until the head is complete (on_headers_complete)
    head_bytes: int  # the reads that left the head unfinished, added up by the connection (_head_read)

    def on_header(self, name: bytes, value: bytes) -> None: ...
    def on_headers_complete(self, status: int) -> None: ...
    def on_informational(self) -> None: ...  # a 1xx answer ended: forget its header lines
    def on_body(self, body: bytes) -> None: ...
    def on_message_complete(self, keep_alive: bool) -> None: ...
    def fail(self, exc: Exception) -> None: ...


class AfterRead(Protocol):
    """An exchange that hears when each read that fed its parser is done (``_Connection.after_read``)."""

    def after_read(self) -> None: ...
