"""gateway/write_batch.py: the writes of one loop iteration leave together, in order, at its end."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from gateway.write_batch import WriteBatch, write_batch

pytestmark = pytest.mark.timeout(30)


class Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = b""

    def data_received(self, data: bytes) -> None:
        self.data += data


async def pair() -> tuple[asyncio.Transport, Sink]:
    """A real socket pair: the write end's transport and what the read end received."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    sink = Sink()
    await loop.create_connection(lambda: sink, sock=theirs)
    return transport, sink


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 - polled: a socket has no "received" event
            await asyncio.sleep(0.001)


async def test_writes_wait_for_the_end_of_the_iteration_and_keep_their_order() -> None:
    batch = write_batch()
    assert write_batch() is batch  # one per loop
    (a, sink_a), (b, sink_b) = await pair(), await pair()
    batch.write(a, b"1")
    batch.write(b, b"x")
    batch.write(a, b"2")
    await asyncio.sleep(0)  # the flush runs in the next iteration, before anything received
    await until(lambda: sink_a.data == b"12" and sink_b.data == b"x")
    a.close()
    b.close()


async def test_a_closing_transport_gets_nothing_and_a_broken_one_holds_nobody_back() -> None:
    batch = WriteBatch(asyncio.get_running_loop())
    (closing, sink_closing), (good, sink_good) = await pair(), await pair()

    class Broken:
        def flush(self) -> None:
            raise RuntimeError("broken")

    batch.write(closing, b"lost")
    closing.close()
    batch.flush_later(Broken())
    batch.write(good, b"kept")
    await until(lambda: sink_good.data == b"kept")
    assert sink_closing.data == b""
    good.close()


async def test_flush_later_calls_flush_once_per_request() -> None:
    batch = WriteBatch(asyncio.get_running_loop())
    flushed: list[int] = []

    class Buffered:
        def flush(self) -> None:
            flushed.append(1)

    batch.flush_later(Buffered())
    assert flushed == []
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert flushed == [1]
