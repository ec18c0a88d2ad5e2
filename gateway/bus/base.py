"""The Bus: the spine that lets one replica or many share topics, sessions and counters.

Every piece of state that replicas must share goes through this interface, so that the in-memory
bus (one replica) and the Redis bus (many) are interchangeable.
"""

from __future__ import annotations

import abc
import math
from collections.abc import AsyncIterator


def check_bucket(per_s: float, burst: float, cost: float) -> None:
    """Reject bucket parameters no implementation could honour (NaN fails every comparison)."""
    if not (0 < per_s < math.inf and 0 < burst < math.inf and 0 <= cost < math.inf):
        raise ValueError(f"token bucket needs finite per_s > 0, burst > 0, cost >= 0 (got {per_s}, {burst}, {cost})")


class Bus(abc.ABC):
    async def start(self) -> None:  # noqa: B027 - optional
        """Connect; called once before use."""

    async def close(self) -> None:  # noqa: B027 - optional
        """Release connections and subscriptions."""

    @abc.abstractmethod
    async def publish(self, channel: str, data: bytes) -> int:
        """Deliver ``data`` to current subscribers of ``channel``; returns how many got it (locally known)."""

    @abc.abstractmethod
    def subscribe(self, channel: str, max_queue: int = 1024) -> AsyncIterator[bytes]:
        """Messages published to ``channel`` from now on. A subscriber that falls ``max_queue`` behind
        loses the oldest messages (a slow reader must not stall publishers)."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    async def set(self, key: str, value: bytes, ttl_s: float | None = None, only_if_absent: bool = False) -> bool:
        """Store; with ``only_if_absent`` it is an atomic claim (de-duplication) and says if it won."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None: ...

    @abc.abstractmethod
    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        """Atomic counter; the TTL is set when the key is created."""

    @abc.abstractmethod
    async def take(self, key: str, per_s: float, burst: float, cost: float = 1.0) -> float:
        """Atomically take ``cost`` tokens from the token bucket ``key``.

        A bucket is created full (``burst`` tokens), refills at ``per_s`` tokens a second and never
        holds more than ``burst``. Returns 0.0 when the tokens were taken; otherwise takes nothing and
        returns the seconds until enough tokens will be there (``math.inf`` when ``cost > burst``: it
        never will). A bucket is forgotten once idle long enough to be full again, so keys do not
        accumulate. Bucket keys are their own namespace: do not use them with get/set/incr.
        """
