"""The embedded bus: one process, no dependencies."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator

from gateway.bus.base import Bus, check_bucket

# Idle buckets are swept when the table doubles since the last sweep, or a minute has passed:
# amortized O(1) per take, and the table stays within about twice the buckets still refilling.
_SWEEP_MIN_SIZE = 1024
_SWEEP_INTERVAL_S = 60.0


class MemoryBus(Bus):
    def __init__(self) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[bytes]]] = {}
        self._values: dict[str, tuple[bytes, float | None]] = {}
        # key -> (tokens, when they were counted, when the bucket will be full again)
        self._buckets: dict[str, tuple[float, float, float]] = {}
        self._sweep_size = _SWEEP_MIN_SIZE
        # Values with a TTL are forgotten when read after expiry, and swept when the table doubles,
        # so that keys written once and never read again (de-duplication claims) cannot pile up.
        self._value_sweep_size = _SWEEP_MIN_SIZE
        self._sweep_at = time.monotonic() + _SWEEP_INTERVAL_S

    async def publish(self, channel: str, data: bytes) -> int:
        queues = self._subscribers.get(channel, ())
        for queue in queues:
            if queue.full():
                queue.get_nowait()  # drop the oldest for a slow subscriber
            queue.put_nowait(data)
        return len(queues)

    async def subscribe(self, channel: str, max_queue: int = 1024) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[bytes] = asyncio.Queue(max_queue)
        self._subscribers.setdefault(channel, set()).add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            subs = self._subscribers.get(channel)
            if subs is not None:
                subs.discard(queue)
                if not subs:
                    del self._subscribers[channel]

    def _live(self, key: str) -> bytes | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        value, expires = entry
        if expires is not None and expires <= time.monotonic():
            del self._values[key]
            return None
        return value

    async def get(self, key: str) -> bytes | None:
        return self._live(key)

    async def set(self, key: str, value: bytes, ttl_s: float | None = None, only_if_absent: bool = False) -> bool:
        if only_if_absent and self._live(key) is not None:
            return False
        self._values[key] = (value, time.monotonic() + ttl_s if ttl_s else None)
        if len(self._values) > self._value_sweep_size:
            self._sweep_values()
        return True

    def _sweep_values(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, expires) in self._values.items() if expires is not None and expires <= now]:
            del self._values[key]
        self._value_sweep_size = max(_SWEEP_MIN_SIZE, 2 * len(self._values))

    async def delete(self, key: str) -> None:
        self._values.pop(key, None)

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        current = self._live(key)
        if current is None:
            self._values[key] = (str(amount).encode(), time.monotonic() + ttl_s if ttl_s else None)
            return amount
        value = int(current) + amount
        self._values[key] = (str(value).encode(), self._values[key][1])
        return value

    async def take(self, key: str, per_s: float, burst: float, cost: float = 1.0) -> float:
        check_bucket(per_s, burst, cost)
        if cost > burst:
            return math.inf
        # No await below: the read-modify-write is atomic with respect to other tasks.
        now = time.monotonic()
        self._sweep_buckets(now)
        entry = self._buckets.get(key)
        if entry is None or entry[2] <= now:
            tokens = burst
        else:
            tokens = min(burst, entry[0] + (now - entry[1]) * per_s)
        wait = 0.0
        if tokens >= cost:
            tokens -= cost
        else:
            wait = (cost - tokens) / per_s
        if tokens >= burst:
            self._buckets.pop(key, None)  # full: a missing bucket means the same
        else:
            self._buckets[key] = (tokens, now, now + (burst - tokens) / per_s)
        return wait

    def _sweep_buckets(self, now: float) -> None:
        if len(self._buckets) < self._sweep_size and now < self._sweep_at:
            return
        self._buckets = {key: entry for key, entry in self._buckets.items() if entry[2] > now}
        self._sweep_size = max(_SWEEP_MIN_SIZE, 2 * len(self._buckets))
        self._sweep_at = now + _SWEEP_INTERVAL_S
