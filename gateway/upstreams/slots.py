"""The connection pool's slots (gateway/upstreams/httpclient.py): at most ``max_connections`` exchanges
at once, a slot held from the start of an exchange until its connection is released.

``ConnectionPool.try_start`` and ``release`` read and change ``_free`` and ``_waiters`` inline for their
common case (a call less per exchange on the backend client's hot path).
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """A counting semaphore that can also be taken without waiting (:meth:`try_take`)."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, count: int) -> None:
        self._free = count
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        if self._free > 0 and not self._waiters:  # waiters first: nobody overtakes a queue
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot just as the wait was cancelled: pass it on
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
