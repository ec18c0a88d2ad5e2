"""CoalescingTransport stands for the whole asyncio transport (uvicorn hands it to the WebSocket
protocol on an upgrade) without ``__getattr__``: every method is its own, over a real socket here."""

from __future__ import annotations

import asyncio
import socket

from gateway.transports.coalesce import CoalescingTransport


def test_it_defines_every_method_of_an_asyncio_transport_itself() -> None:
    own = vars(CoalescingTransport)
    missing = [name for name in dir(asyncio.Transport) if not name.startswith("_") and name not in own]
    assert missing == []
    assert "__getattr__" not in vars(CoalescingTransport)  # attribute reads stay plain (ADR 0017, h2)


async def test_the_transport_methods_reach_the_socket_and_keep_the_order_of_writes() -> None:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    protocol = asyncio.Protocol()
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, ours)
    reader, writer = await asyncio.open_connection(sock=theirs)
    coalescing = CoalescingTransport(transport, loop)  # type: ignore[arg-type]  # a selector transport is one
    try:
        assert coalescing.get_extra_info("socket") is not None
        assert coalescing.get_extra_info("no-such-thing", 7) == 7
        assert coalescing.get_protocol() is protocol
        other = asyncio.Protocol()
        coalescing.set_protocol(other)
        assert coalescing.get_protocol() is other and transport.get_protocol() is other
        assert coalescing.is_reading()
        coalescing.pause_reading()
        assert not coalescing.is_reading() and not transport.is_reading()
        coalescing.resume_reading()
        assert coalescing.is_reading()
        coalescing.set_write_buffer_limits(high=4096, low=1024)
        assert coalescing.get_write_buffer_limits() == (1024, 4096)
        assert coalescing.get_write_buffer_size() == 0
        assert coalescing.can_write_eof()
        coalescing.write(b"a")  # buffered until the end of the iteration ...
        coalescing.writelines([b"b", b"c"])  # ... and these behind it ...
        coalescing.write_eof()  # ... and the end after all of them
        async with asyncio.timeout(5):
            assert await reader.read() == b"abc"
    finally:
        coalescing.abort()
        writer.close()
    assert transport.is_closing()


class _ForgetsWhenClosedTwice:
    """asyncio's SSL transport (sslproto.py) as a close sees it: closed a second time it forgets its protocol,
    and every later call on it but is_closing() and abort() raises AttributeError."""

    def __init__(self) -> None:
        self.closing = False
        self.forgot = False

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.forgot = self.closing
        self.closing = True

    def get_write_buffer_size(self) -> int:
        if self.forgot:
            raise AttributeError("'NoneType' object has no attribute '_get_write_buffer_size'")
        return 0


async def test_a_transport_closed_already_is_not_closed_again() -> None:
    """uvicorn's connection_lost closes the transport once more after the loss (the SSL transport has marked
    itself closed by then), and a close of ours may follow another: neither reaches the transport again."""
    loop = asyncio.get_running_loop()
    underneath = _ForgetsWhenClosedTwice()
    coalescing = CoalescingTransport(underneath, loop)  # type: ignore[arg-type]  # the part of a transport a close uses
    coalescing.close()
    coalescing.close()
    assert underneath.closing and not underneath.forgot
    lost = _ForgetsWhenClosedTwice()
    lost.closing = True  # the connection is lost: the transport marked itself closed
    CoalescingTransport(lost, loop).close()  # type: ignore[arg-type]
    assert not lost.forgot
