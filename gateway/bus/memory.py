"""The embedded bus: one process, no dependencies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from gateway.bus.base import Bus


class MemoryBus(Bus):
    def __init__(self) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[bytes]]] = {}
        self._values: dict[str, tuple[bytes, float | None]] = {}

    async def publish(self, channel: str, data: bytes) -> int:
        queues = self._subscribers.get(channel, ())
        for queue in queues:
            if queue.full():
                queue.get_nowait()  # drop the oldest for a slow subscriber
            queue.put_nowait(data)
        return len(queues)

    async def subscribe(self, channel: str, max_queue: int = 1024) -> AsyncIterator[bytes]:  # type: ignore[override]
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
        return True

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
