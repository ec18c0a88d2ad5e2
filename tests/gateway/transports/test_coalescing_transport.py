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
