"""gateway/channels.py: ordering, waiting reads, close, overflow, replay window and resumption."""

from __future__ import annotations

import asyncio

import pytest

from gateway.channels import Channel, ChannelOverflow


def m(n: int) -> dict[str, int]:
    return {"n": n}


def seqs(batch: list[tuple[int, dict[str, int]]]) -> list[int]:
    return [seq for seq, _ in batch]


async def test_messages_keep_their_order_and_sequence_numbers() -> None:
    channel = Channel("c", max_pending=100, replay=100)
    channel.attached = True
    for i in range(5):
        assert channel.push(m(i))
    assert channel.last_seq == 5
    batch = await channel.read(0)
    assert batch == [(1, m(0)), (2, m(1)), (3, m(2)), (4, m(3)), (5, m(4))]
    channel.push(m(5))
    assert await channel.read(5) == [(6, m(5))]


async def test_read_after_returns_only_later_messages() -> None:
    channel = Channel("c", 100, 100)
    for i in range(4):
        channel.push(m(i))
    assert seqs(await channel.read(2)) == [3, 4]


async def test_read_waits_then_wakes_on_push() -> None:
    channel = Channel("c", 10, 10)
    channel.attached = True
    reader = asyncio.create_task(channel.read(0))
    await asyncio.sleep(0.01)
    assert not reader.done()
    channel.push(m(1))
    assert await asyncio.wait_for(reader, 1) == [(1, m(1))]


async def test_read_wakes_on_close_with_empty_list() -> None:
    channel = Channel("c", 10, 10)
    reader = asyncio.create_task(channel.read(0))
    await asyncio.sleep(0.01)
    assert not reader.done()
    channel.close()
    assert await asyncio.wait_for(reader, 1) == []


async def test_read_keeps_waiting_when_only_older_messages_exist() -> None:
    channel = Channel("c", 10, 10)
    channel.push(m(1))
    reader = asyncio.create_task(channel.read(1))
    await asyncio.sleep(0.01)
    assert not reader.done()
    channel.push(m(2))
    assert await asyncio.wait_for(reader, 1) == [(2, m(2))]


async def test_close_refuses_pushes_but_drains_what_is_queued() -> None:
    channel = Channel("c", 10, 10)
    channel.push(m(1))
    channel.push(m(2))
    channel.close()
    assert channel.closed
    assert not channel.push(m(3))
    assert channel.last_seq == 2
    assert seqs(await channel.read(0)) == [1, 2]
    assert await channel.read(2) == []
    # Closing twice is harmless.
    channel.close()
    assert await channel.read(2) == []


async def test_finish_waits_for_an_owed_answer_which_is_the_last_message() -> None:
    channel = Channel("c", 10, 10)
    channel.attached = True
    reader = asyncio.create_task(channel.read(0))
    channel.owe_answer(8)
    channel.finish()  # the request that owes the answer ended the session
    assert not channel.closed
    assert channel.push({"jsonrpc": "2.0", "method": "notifications/message"})  # not the answer
    assert channel.push({"jsonrpc": "2.0", "id": 8, "result": None})
    assert channel.closed
    assert not channel.push(m(1))
    assert seqs(await asyncio.wait_for(reader, 1)) == [1, 2]
    assert await channel.read(2) == []


async def test_finish_without_an_owed_answer_closes_at_once() -> None:
    channel = Channel("c", 10, 10)
    channel.owe_answer(1)
    channel.push({"jsonrpc": "2.0", "id": 1, "result": {}})  # paid before the finish
    channel.finish()
    assert channel.closed
    plain = Channel("d", 10, 10)
    plain.finish()
    assert plain.closed


async def test_overflow_when_attached_raises_from_read() -> None:
    channel = Channel("c", max_pending=3, replay=10)
    channel.attached = True
    channel.writing = True  # the writer is stuck in a send: the client is not keeping up
    assert all(channel.push(m(i)) for i in range(3))
    assert not channel.overflowed
    assert channel.push(m(3)) is False  # the fourth undelivered message is one too many
    assert channel.overflowed and channel.closed
    assert not channel.push(m(4))
    with pytest.raises(ChannelOverflow) as info:
        await channel.read(0)
    assert str(info.value) == "c"


async def test_overflow_wakes_a_waiting_reader() -> None:
    channel = Channel("c", max_pending=1, replay=10)
    channel.attached = True
    channel.writing = True
    channel.push(m(0))
    assert seqs(await channel.read(0)) == [1]
    reader = asyncio.create_task(channel.read(1))
    await asyncio.sleep(0)
    # Both pushes happen before the reader runs again: two pending where one is allowed.
    channel.push(m(1))
    channel.push(m(2))
    with pytest.raises(ChannelOverflow):
        await asyncio.wait_for(reader, 1)


async def test_a_burst_to_an_attentive_client_is_allowed_up_to_eight_times_the_bound() -> None:
    channel = Channel("c", max_pending=4, replay=100)
    channel.attached = True  # attached, but its writer is not blocked in a send
    assert all(channel.push(m(i)) for i in range(32))
    assert not channel.overflowed
    assert channel.push(m(32)) is False
    assert channel.overflowed and channel.closed


async def test_overflow_calls_on_overflow_once() -> None:
    calls: list[str] = []
    channel = Channel("c", max_pending=1, replay=10)
    channel.attached = True
    channel.writing = True
    channel.on_overflow = lambda: calls.append("overflow")
    channel.push(m(0))
    assert calls == []
    assert channel.push(m(1)) is False
    assert not channel.push(m(2))
    assert calls == ["overflow"]
    assert channel.on_overflow is None


async def test_overflow_interrupts_the_bound_writer() -> None:
    channel = Channel("c", max_pending=1, replay=10)
    channel.attached = True
    bound = asyncio.Event()

    async def writer() -> None:
        channel.bind_writer()
        channel.writing = True
        bound.set()
        await asyncio.sleep(30)  # a send blocked on a full socket

    task = asyncio.create_task(writer())
    await bound.wait()
    channel.push(m(0))
    channel.push(m(1))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert channel.overflowed


async def test_on_first_push_fires_once() -> None:
    calls: list[int] = []
    channel = Channel("c", 10, 10)
    channel.on_first_push = lambda: calls.append(channel.last_seq)
    channel.push(m(0))
    channel.push(m(1))
    assert calls == [1]


async def test_reading_makes_room_so_a_keeping_up_consumer_never_overflows() -> None:
    channel = Channel("c", max_pending=2, replay=0)
    channel.attached = True
    channel.writing = True
    after = 0
    for i in range(50):
        assert channel.push(m(i))
        batch = await channel.read(after)
        after = batch[-1][0]
    assert not channel.overflowed
    assert after == 50


async def test_unattached_channel_keeps_only_the_newest_replay_messages() -> None:
    channel = Channel("c", max_pending=2, replay=3)
    for i in range(10):
        assert channel.push(m(i))  # nobody attached: never an overflow, however many
    assert not channel.overflowed
    assert channel.last_seq == 10
    assert seqs(await channel.read(0)) == [8, 9, 10]


async def test_unattached_channel_with_zero_replay_still_keeps_the_newest_message() -> None:
    channel = Channel("c", max_pending=2, replay=0)
    for i in range(5):
        channel.push(m(i))
    assert await channel.read(0) == [(5, m(4))]


async def test_delivered_messages_are_kept_only_within_the_replay_window() -> None:
    channel = Channel("c", max_pending=100, replay=2)
    channel.attached = True
    for i in range(6):
        channel.push(m(i))
    assert seqs(await channel.read(0)) == [1, 2, 3, 4, 5, 6]
    # Delivered up to 6: only 5 and 6 stay for a replay.
    assert seqs(await channel.read(0)) == [5, 6]


def test_can_resume_windows() -> None:
    channel = Channel("c", max_pending=100, replay=3)
    assert channel.can_resume(0)  # nothing sent yet
    for i in range(10):
        channel.push(m(i))
    # Unattached: 8, 9, 10 are held.
    assert channel.can_resume(10)
    assert channel.can_resume(9)
    assert channel.can_resume(7)  # needs 8.. — held
    assert not channel.can_resume(6)  # needs 7 — gone
    assert not channel.can_resume(0)
    assert channel.can_resume(11)  # nothing after it was ever sent


async def test_can_resume_after_delivery_trimming() -> None:
    channel = Channel("c", max_pending=100, replay=2)
    channel.attached = True
    for i in range(5):
        channel.push(m(i))
    await channel.read(0)
    assert channel.can_resume(3)
    assert not channel.can_resume(2)


def test_can_resume_with_an_empty_log() -> None:
    channel = Channel("c", max_pending=100, replay=0)
    channel.attached = True
    assert channel.can_resume(0)
    channel.push(m(0))
    assert not channel.can_resume(-1)
    assert channel.can_resume(1)


async def test_replay_after_reconnect_from_a_given_seq() -> None:
    channel = Channel("s-1", max_pending=100, replay=10)
    # First connection reads 1..3, then the client drops.
    channel.attached = True
    for i in range(3):
        channel.push(m(i))
    first = await channel.read(0)
    assert seqs(first) == [1, 2, 3]
    channel.attached = False
    # Messages go on arriving while nobody listens.
    channel.push(m(3))
    channel.push(m(4))
    # The client only saw up to 2 (3 was lost in flight) and reconnects with Last-Event-ID s-1-2.
    assert channel.can_resume(2)
    channel.attached = True
    again = await channel.read(2)
    assert again == [(3, m(2)), (4, m(3)), (5, m(4))]
    # And then carries on live.
    reader = asyncio.create_task(channel.read(5))
    await asyncio.sleep(0)
    channel.push(m(5))
    assert await asyncio.wait_for(reader, 1) == [(6, m(5))]


async def test_reconnect_too_late_cannot_resume() -> None:
    channel = Channel("s-1", max_pending=100, replay=2)
    channel.attached = True
    channel.push(m(0))
    await channel.read(0)
    channel.attached = False
    for i in range(1, 6):
        channel.push(m(i))
    assert not channel.can_resume(1)  # 2, 3, 4 are gone; only 5 and 6 are held
    assert channel.can_resume(4)
    assert seqs(await channel.read(4)) == [5, 6]
