"""gateway/write_batch.py on a quiet loop: after lone flushes a write leaves at once, and company in
the batch (a busy loop) brings batching back; nothing overtakes what is pending."""

from __future__ import annotations

import asyncio

import pytest

from gateway.transports.coalesce import CoalescingTransport
from gateway.write_batch import PROBE_EVERY, QUIET_AFTER, WriteBatch

pytestmark = pytest.mark.timeout(30)


class Recorder:
    """A transport that records what it was given, synchronously (no socket between)."""

    def __init__(self, log: list[bytes] | None = None, fail: bool = False) -> None:
        self.log: list[bytes] = [] if log is None else log
        self.closing = False
        self.fail = fail

    def write(self, data: bytes) -> None:
        if self.fail:
            raise RuntimeError("broken")
        self.log.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0  # what it is given is written at once (CoalescingTransport.close asks)


async def next_iteration() -> None:
    await asyncio.sleep(0)  # a flush scheduled before this runs before the task resumes


async def quiet_batch(transport: Recorder) -> WriteBatch:
    """A batch made quiet by ``QUIET_AFTER`` lone flushes (each a write of its own iteration)."""
    batch = WriteBatch(asyncio.get_running_loop())
    for i in range(QUIET_AFTER):
        batch.write(transport, b"lone%d" % i)  # type: ignore[arg-type]
        assert transport.log[-1:] != [b"lone%d" % i]  # still batched
        await next_iteration()
    assert transport.log == [b"lone%d" % i for i in range(QUIET_AFTER)]
    transport.log.clear()
    return batch


async def test_a_quiet_loop_writes_at_once() -> None:
    sink = Recorder()
    batch = await quiet_batch(sink)
    batch.write(sink, b"now")  # type: ignore[arg-type]
    assert sink.log == [b"now"]
    batch.write(sink, b"again")  # type: ignore[arg-type]
    assert sink.log == [b"now", b"again"]


async def test_a_busy_loop_keeps_batching() -> None:
    sink = Recorder()
    batch = WriteBatch(asyncio.get_running_loop())
    for i in range(QUIET_AFTER * 3):
        batch.write(sink, b"a")  # type: ignore[arg-type]
        batch.write(sink, b"b")  # type: ignore[arg-type]  # company: never quiet
        assert len(sink.log) == 2 * i  # both wait for the end of the iteration
        await next_iteration()
    batch.write(sink, b"later")  # type: ignore[arg-type]
    assert sink.log[-1:] != [b"later"]
    await next_iteration()
    assert sink.log[-1] == b"later"


async def test_nothing_overtakes_what_is_pending() -> None:
    log: list[bytes] = []
    first, second = Recorder(log), Recorder(log)
    batch = await quiet_batch(first)

    class Buffered:
        def flush(self) -> None:
            log.append(b"buffered")

    batch.flush_later(Buffered())
    batch.write(second, b"after")  # type: ignore[arg-type]  # something pending: batched behind it
    assert log == []
    await next_iteration()
    assert log == [b"buffered", b"after"]


async def test_a_probe_with_company_ends_the_quiet_spell() -> None:
    sink = Recorder()
    batch = await quiet_batch(sink)
    for i in range(PROBE_EVERY - 1):
        batch.write(sink, b"%d" % i)  # type: ignore[arg-type]
    assert len(sink.log) == PROBE_EVERY - 1  # all at once
    batch.write(sink, b"probe")  # type: ignore[arg-type]
    batch.write(sink, b"company")  # type: ignore[arg-type]
    assert sink.log[-1] == b"%d" % (PROBE_EVERY - 2)  # the probe and its company wait for the flush
    await next_iteration()
    assert sink.log[-2:] == [b"probe", b"company"]
    batch.write(sink, b"batched")  # type: ignore[arg-type]  # busy again: batched
    assert sink.log[-1] == b"company"
    await next_iteration()
    assert sink.log[-1] == b"batched"


async def test_a_lone_probe_keeps_the_loop_quiet() -> None:
    sink = Recorder()
    batch = await quiet_batch(sink)
    for i in range(PROBE_EVERY - 1):
        batch.write(sink, b"%d" % i)  # type: ignore[arg-type]
    batch.write(sink, b"probe")  # type: ignore[arg-type]
    assert sink.log[-1] != b"probe"
    await next_iteration()
    assert sink.log[-1] == b"probe"
    batch.write(sink, b"now")  # type: ignore[arg-type]
    assert sink.log[-1] == b"now"


async def test_a_direct_write_to_a_closing_or_broken_transport_raises_nothing() -> None:
    sink = Recorder()
    batch = await quiet_batch(sink)
    sink.closing = True
    batch.write(sink, b"lost")  # type: ignore[arg-type]
    assert sink.log == []
    broken = Recorder(fail=True)
    batch.write(broken, b"lost")  # type: ignore[arg-type]
    assert batch.send_now(broken, b"lost")  # type: ignore[arg-type]


async def test_send_now_declines_when_busy_or_pending() -> None:
    sink = Recorder()
    batch = WriteBatch(asyncio.get_running_loop())
    assert not batch.send_now(sink, b"x")  # type: ignore[arg-type]  # not quiet yet
    batch = await quiet_batch(sink)
    batch.flush_later(Recorder())  # type: ignore[arg-type]  # has no flush: logged, not raised
    assert not batch.send_now(sink, b"x")  # type: ignore[arg-type]
    assert sink.log == []
    await next_iteration()


async def test_a_whole_response_leaves_at_once_on_a_quiet_loop() -> None:
    sink = Recorder()
    coalescing = CoalescingTransport(sink, asyncio.get_running_loop())  # type: ignore[arg-type]
    for i in range(QUIET_AFTER):
        coalescing.write_whole(b"r%d" % i)
        await next_iteration()
    sink.log.clear()
    coalescing.write_whole(b"whole")
    assert sink.log == [b"whole"]
    # uvicorn's writes (headers, then body) are still gathered into one.
    coalescing.write(b"head")
    coalescing.write(b"body")
    coalescing.write_whole(b"next")  # behind what is buffered, in order
    assert sink.log == [b"whole"]
    await next_iteration()
    assert sink.log == [b"whole", b"headbodynext"]


async def test_a_whole_response_then_close_still_leaves_when_busy() -> None:
    sink = Recorder()
    coalescing = CoalescingTransport(sink, asyncio.get_running_loop())  # type: ignore[arg-type]
    coalescing.write_whole(b"last")  # not quiet: buffered
    coalescing.close()  # Connection: close right after the answer
    assert sink.log == [b"last"]
    assert sink.closing
