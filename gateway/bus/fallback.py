"""What a Redis bus does on its own while Redis is away: local buckets and claims, and an outbox.

Invariants: the local state is an ordinary :class:`MemoryBus` of this replica, used only for token
buckets and claims (``set(only_if_absent=True)``); a local claim is forgotten by ``delete`` like a
shared one and is honoured after Redis is back until it expires, so that a duplicate reaching this
replica again is still refused. The outbox holds at most ``limit`` messages in publish order,
dropping the oldest (counted) when full; a message leaves it only after Redis took it, and a
publish never overtakes an older message still in it.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.bus.memory import MemoryBus

# The counters of Bus.stats(), all monotonic.
STATS = (
    "outages",  # times the bus went from healthy to down
    "take_local",  # token buckets taken locally (fail-open to per-replica limits)
    "claim_local",  # claims (set only_if_absent) made locally
    "unavailable",  # operations refused with BusUnavailable
    "publish_queued",  # publishes put in the outbox
    "publish_dropped",  # queued publishes dropped, oldest first, because the outbox was full
    "publish_flushed",  # queued publishes sent once Redis was back
    "resubscribed",  # subscriptions established again after an outage
)


@dataclass(slots=True)
class Counters:
    values: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATS, 0))

    def add(self, name: str, amount: int = 1) -> None:
        self.values[name] += amount


class Local:
    """Token buckets and claims of this replica alone."""

    def __init__(self, counters: Counters) -> None:
        self._memory = MemoryBus()
        self._counters = counters
        self._claims = 0  # claims ever made locally: while 0, shared claims need no local look

    async def take(self, key: str, per_s: float, burst: float, cost: float) -> float:
        self._counters.add("take_local")
        return await self._memory.take(key, per_s, burst, cost)

    async def claim(self, key: str, value: bytes, ttl_s: float | None) -> bool:
        self._counters.add("claim_local")
        self._claims += 1
        return await self._memory.set(key, value, ttl_s, only_if_absent=True)

    async def claimed(self, key: str) -> bool:
        return self._claims > 0 and await self._memory.get(key) is not None

    async def forget(self, key: str) -> None:
        await self._memory.delete(key)


class Outbox:
    """Publishes waiting for Redis to come back."""

    def __init__(self, limit: int, counters: Counters) -> None:
        self._limit = limit
        self._counters = counters
        self._queue: collections.deque[tuple[int, str, bytes]] = collections.deque()
        self._numbers = itertools.count()

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, channel: str, data: bytes) -> None:
        if self._limit == 0:
            self._counters.add("publish_dropped")  # no outbox: at most once
            return
        if len(self._queue) >= self._limit:
            self._queue.popleft()
            self._counters.add("publish_dropped")
        self._queue.append((next(self._numbers), channel, data))
        self._counters.add("publish_queued")

    def drop_first(self) -> None:
        if self._queue:
            self._queue.popleft()
            self._counters.add("publish_dropped")

    async def flush(self, publish: Callable[[str, bytes], Awaitable[object]]) -> None:
        """Send every queued message in order; a failure propagates and leaves it (and the rest) queued."""
        while self._queue:
            number, channel, data = self._queue[0]
            await publish(channel, data)
            # Leave it in the queue while it is sent, so that a new publish waits behind it; the
            # queue may have dropped it meanwhile (it was full), then there is nothing to remove.
            if self._queue and self._queue[0][0] == number:
                self._queue.popleft()
            self._counters.add("publish_flushed")
