"""gateway/channels.py, what an idle stream waits on: Channel.next_batch (messages, end, keep-alive,
disconnect, without a task per wait) and the loop's one KeepAliveWheel."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.channels import Channel, ChannelOverflow, KeepAliveWheel


def m(n: int) -> dict[str, int]:
    return {"n": n}


async def test_next_batch_returns_what_is_pushed_before_the_keepalive() -> None:
    channel = Channel("c", 10, 10)
    channel.attached = True
    reader = asyncio.create_task(channel.next_batch(0, keepalive=30))
    await asyncio.sleep(0.01)
    assert not reader.done()
    channel.push(m(1))
    async with asyncio.timeout(1):
        assert await reader == [(1, m(1))]


async def test_next_batch_gives_an_empty_batch_when_the_keepalive_is_due() -> None:
    channel = Channel("c", 10, 10)
    started = time.monotonic()
    async with asyncio.timeout(2):
        assert await channel.next_batch(0, keepalive=0.2) == []
    waited = time.monotonic() - started
    assert 0.19 <= waited < 0.2 + KeepAliveWheel.TICK + 0.3
    assert not channel.closed  # a keep-alive, not the end
    channel.push(m(1))  # and the channel still works
    async with asyncio.timeout(1):
        assert await channel.next_batch(0, keepalive=0.2) == [(1, m(1))]


async def test_next_batch_gives_an_empty_batch_at_the_end_after_what_is_queued() -> None:
    channel = Channel("c", 10, 10)
    channel.push(m(1))
    channel.close()
    async with asyncio.timeout(1):
        assert await channel.next_batch(0, keepalive=30) == [(1, m(1))]
        assert await channel.next_batch(1, keepalive=30) == []
    assert channel.closed


async def test_next_batch_is_none_once_the_client_is_gone_and_messages_come_first() -> None:
    loop = asyncio.get_running_loop()
    channel = Channel("c", 10, 10)
    gone: asyncio.Future[None] = loop.create_future()
    reader = asyncio.create_task(channel.next_batch(0, keepalive=30, gone=gone))
    await asyncio.sleep(0.01)
    gone.set_result(None)
    async with asyncio.timeout(1):
        assert await reader is None
    channel.push(m(1))
    async with asyncio.timeout(1):
        assert await channel.next_batch(0, keepalive=30, gone=gone) == [(1, m(1))]  # messages win
        assert await channel.next_batch(1, keepalive=30, gone=gone) is None


async def test_next_batch_leaves_no_callback_on_the_disconnect_future() -> None:
    loop = asyncio.get_running_loop()
    channel = Channel("c", 10_000, 10)
    channel.attached = True
    gone: asyncio.Future[None] = loop.create_future()
    for n in range(1, 201):
        reader = asyncio.create_task(channel.next_batch(n - 1, keepalive=30, gone=gone))
        await asyncio.sleep(0)
        channel.push(m(n))
        async with asyncio.timeout(1):
            assert await reader == [(n, m(n))]
    # Each wait took its callback back off: none is left to run (or to pile up on a long stream).
    assert gone.remove_done_callback(lambda _f: None) == 0
    woken: list[bool] = []
    gone.add_done_callback(lambda _f: woken.append(True))
    gone.set_result(None)
    await asyncio.sleep(0)
    assert woken == [True]


async def test_next_batch_raises_on_overflow() -> None:
    channel = Channel("c", 8, 8)
    channel.attached = True
    channel.writing = True  # its writer is stuck in a send
    for n in range(9):
        channel.push(m(n))
    assert channel.overflowed
    with pytest.raises(ChannelOverflow):
        await channel.next_batch(0, keepalive=30)


async def test_a_cancelled_wait_leaves_the_channel_readable() -> None:
    channel = Channel("c", 10, 10)
    channel.attached = True
    reader = asyncio.create_task(channel.next_batch(0, keepalive=30))
    await asyncio.sleep(0.01)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert len(KeepAliveWheel.of(asyncio.get_running_loop())) == 0
    again = asyncio.create_task(channel.read(0))
    await asyncio.sleep(0.01)
    channel.push(m(1))
    async with asyncio.timeout(1):
        assert await again == [(1, m(1))]


async def test_a_second_reader_is_woken_too() -> None:
    channel = Channel("c", 10, 10)
    channel.attached = True
    first = asyncio.create_task(channel.read(0))
    second = asyncio.create_task(channel.next_batch(0, keepalive=30))
    await asyncio.sleep(0.01)
    channel.push(m(1))
    async with asyncio.timeout(1):
        assert await first == [(1, m(1))]
        assert await second == [(1, m(1))]


async def test_many_idle_streams_share_one_wheel_and_all_get_their_keepalive() -> None:
    channels = [Channel(f"c{n}", 10, 10) for n in range(2000)]
    wheel = KeepAliveWheel.of(asyncio.get_running_loop())
    readers = [asyncio.create_task(c.next_batch(0, keepalive=0.3)) for c in channels]
    await asyncio.sleep(0.05)
    assert len(wheel) == 2000
    channels[0].push(m(1))  # one gets a message: its future leaves the wheel at once
    await asyncio.sleep(0.01)
    assert len(wheel) == 1999
    async with asyncio.timeout(3):
        results = await asyncio.gather(*readers)
    assert results[0] == [(1, m(1))]
    assert all(r == [] for r in results[1:])
    assert len(wheel) == 0


async def test_a_busy_stream_files_nothing_that_outlives_its_waits() -> None:
    channel = Channel("c", 100_000, 10)
    channel.attached = True
    wheel = KeepAliveWheel.of(asyncio.get_running_loop())
    for n in range(1, 1001):
        reader = asyncio.create_task(channel.next_batch(n - 1, keepalive=60))
        await asyncio.sleep(0)
        assert len(wheel) == 1
        channel.push(m(n))
        assert await reader == [(n, m(n))]
    assert len(wheel) == 0  # each woken waiter left its bucket (none waits 60 s to be dropped)
