"""The connection pool's slots (gateway/upstreams/slots.py, used by httpclient.py): at most ``max_connections``
exchanges at once, taken with or without waiting, handed on in order, never lost to a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from gateway.upstreams.slots import Slots


async def test_slots_are_taken_without_waiting_until_none_is_free() -> None:
    slots = Slots(2)
    assert slots.try_take() and slots.try_take()
    assert not slots.try_take()
    slots.give()
    assert slots.try_take()


async def test_waiters_are_served_in_order_and_nobody_overtakes_them() -> None:
    slots = Slots(1)
    assert slots.try_take()
    order: list[int] = []

    async def wait(i: int) -> None:
        await slots.take()
        order.append(i)

    tasks = [asyncio.create_task(wait(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert not slots.try_take(), "a waiter is queued: the slot given back is theirs"
    for expected in range(3):
        slots.give()
        async with asyncio.timeout(2):
            while len(order) <= expected:  # noqa: ASYNC110 - a few loop steps, bounded
                await asyncio.sleep(0)
    assert order == [0, 1, 2]
    await asyncio.gather(*tasks)


async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    slots.give()  # to the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    async with asyncio.timeout(2):
        await second  # the slot went on to the next waiter
    slots.give()
    assert slots.try_take()
