"""Deadlines of many calls on a few timers: one timer per slice of time, not one per call.

An ``asyncio.timeout`` per call (a context object, a timer scheduled and cancelled, the task's
cancellation counters) was the largest fixed cost of waiting for a backend's answer (issue 15).
Here a call's deadline is an entry in the set of its time slice; the slice's one timer expires
whatever is still in it. A slice is ``GRAIN_S`` wide, or a thousandth of the timeout when that is
more, so that the long timeouts of a busy gateway (300 s by default) keep about a thousand slices
(and timers) alive, not one per 10 ms.

An item's entry is taken out through the slot :meth:`Deadlines.add` returned (``slot.pop(item, None)``
inline on a hot path, or :meth:`Deadlines.remove`): no lookup of its slice again.

Invariants: an item expires never before its deadline and at most one slice after it (plus the
loop's own lateness): ``max(GRAIN_S, timeout / 1000)``; an item removed before its slice's timer
fires never expires; items of one slice expire in the order they were added; nothing is held
after its slice fired.
"""

from __future__ import annotations

import asyncio
from math import ceil
from typing import Protocol

GRAIN_S = 0.01
_GRAIN_MS = int(GRAIN_S * 1000)
_LONG_S = _GRAIN_MS  # from here on a slice is a thousandth of the timeout (timeout s -> timeout ms)


class Expiring(Protocol):
    def expire(self) -> None: ...


Slot = dict[Expiring, None]  # the items of one slice (insertion-ordered)


class Deadlines:
    """The deadlines of one event loop's calls (one instance per loop, or per owner)."""

    __slots__ = ("_loop", "_slices", "_time")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._time = loop.time  # bound once: add() runs per call
        self._slices: dict[int, Slot] = {}  # by the slice's end, in ms

    def add(self, timeout: float, item: Expiring) -> Slot:
        """``item.expire()`` once ``timeout`` seconds have passed; its slot, to :meth:`remove` it from."""
        grain = _GRAIN_MS if timeout < _LONG_S else int(timeout)  # in ms: a thousandth of the timeout
        key = ceil((self._time() + timeout) * 1000 / grain) * grain  # the slice's end, in ms
        items = self._slices.get(key)
        if items is None:
            items = self._slices[key] = {}
            self._loop.call_at(key / 1000, self._fire, key)
        items[item] = None
        return items

    @staticmethod
    def remove(slot: Slot, item: Expiring) -> None:
        """``item`` will not expire (nothing to do once its slice fired: the slot is forgotten)."""
        slot.pop(item, None)

    def __len__(self) -> int:
        return sum(len(items) for items in self._slices.values())

    def _fire(self, key: int) -> None:
        if self._loop.time() < key / 1000:  # a timer may round its delay down by a millisecond
            self._loop.call_at(key / 1000, self._fire, key)
            return
        items = self._slices.pop(key, None)
        if items:
            for item in items:
                item.expire()
