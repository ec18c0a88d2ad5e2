"""Call deadlines on one timer per time slice (gateway/upstreams/deadlines.py).

Invariants: an item expires never before its deadline and soon after it; removed items never
expire; items of one slice expire in the order they were added; a fired slice is forgotten.
"""

from __future__ import annotations

import asyncio

from gateway.upstreams.deadlines import GRAIN_S, Deadlines


class Item:
    def __init__(self, log: list[tuple[str, float]], name: str) -> None:
        self.log = log
        self.name = name

    def expire(self) -> None:
        self.log.append((self.name, asyncio.get_running_loop().time()))


async def test_items_expire_after_their_deadline_in_order_and_removed_ones_never() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    log: list[tuple[str, float]] = []
    start = loop.time()
    a, b, c = Item(log, "a"), Item(log, "b"), Item(log, "c")
    slot_a = deadlines.add(0.05, a)
    deadlines.add(0.05, b)
    slot_c = deadlines.add(0.02, c)
    deadlines.remove(slot_c, c)
    assert len(deadlines) == 2
    async with asyncio.timeout(2):
        while len(log) < 2:  # noqa: ASYNC110 - polled: the items record, they do not signal
            await asyncio.sleep(0.01)
    await asyncio.sleep(3 * GRAIN_S)
    assert [name for name, _ in log] == ["a", "b"]
    assert all(0.05 <= when - start < 0.05 + GRAIN_S + 0.2 for _, when in log)
    assert len(deadlines) == 0
    deadlines.remove(slot_a, a)  # after the slice fired: nothing to do


async def test_an_item_removed_before_its_slice_fires_is_dropped_from_it() -> None:
    deadlines = Deadlines(asyncio.get_running_loop())
    log: list[tuple[str, float]] = []
    items = [Item(log, str(i)) for i in range(100)]
    slots = [deadlines.add(0.03, item) for item in items]
    for slot, item in zip(slots[::2], items[::2], strict=True):
        slot.pop(item, None)  # what a hot path does inline instead of remove()
    await asyncio.sleep(0.03 + 5 * GRAIN_S)
    assert [name for name, _ in log] == [str(i) for i in range(1, 100, 2)]


async def test_a_long_timeout_shares_a_slice_a_thousandth_of_it_wide() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    log: list[tuple[str, float]] = []
    before = loop.time()
    for i in range(50):
        deadlines.add(300.0, Item(log, str(i)))
    after = loop.time()
    keys = set(deadlines._slices)  # the slices' ends, in ms
    assert all(key % 300 == 0 for key in keys), "300 ms slices for a 300 s timeout"
    assert all(before + 300.0 <= key / 1000 <= after + 300.0 + 0.3 for key in keys)
    assert len(keys) <= 2
    deadlines.add(0.5, Item(log, "short"))
    (short,) = set(deadlines._slices) - keys
    assert short % int(GRAIN_S * 1000) == 0 and short / 1000 >= before + 0.5
