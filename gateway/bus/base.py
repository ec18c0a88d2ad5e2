"""The Bus: the spine that lets one replica or many share topics, sessions and counters.

Every piece of state that replicas must share goes through this interface, so that the in-memory
bus (one replica) and the Redis bus (many) are interchangeable.

Health: a bus whose store went away says so (``healthy``, ``problem``, ``on_health``) and keeps
serving what it can locally; what it cannot serve raises :class:`BusUnavailable` at once, never
hangs. Each operation documents what it does then.
"""

from __future__ import annotations

import abc
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import orjson

HealthCallback = Callable[[bool, "str | None"], None]
"""``callback(healthy, problem)``: see :meth:`Bus.on_health`."""


class BusUnavailable(ConnectionError):
    """The shared store cannot answer now (down, unreachable, too slow); nothing was done, or it is
    unknown whether it was. Raised at once while the bus knows it is down."""


def check_bucket(per_s: float, burst: float, cost: float) -> None:
    """Reject bucket parameters no implementation could honour (NaN fails every comparison)."""
    if not (0 < per_s < math.inf and 0 < burst < math.inf and 0 <= cost < math.inf):
        raise ValueError(f"token bucket needs finite per_s > 0, burst > 0, cost >= 0 (got {per_s}, {burst}, {cost})")


class Bus(abc.ABC):
    async def start(self) -> None:  # noqa: B027 - optional
        """Connect; called once before use."""

    async def close(self) -> None:  # noqa: B027 - optional
        """Release connections and subscriptions."""

    @property
    def healthy(self) -> bool:
        """True while the shared store answers (the in-memory bus always does)."""
        return True

    @property
    def problem(self) -> str | None:
        """Why the bus is not healthy (no secrets in it), None while it is."""
        return None

    def on_health(self, callback: HealthCallback) -> None:
        """Call ``callback(healthy, problem)`` now with the current state, then on every change.
        Callbacks run synchronously on the event loop and must not raise."""
        callback(self.healthy, self.problem)

    def stats(self) -> Mapping[str, int]:
        """Monotonic counters of degraded operation (names in ``gateway.bus.fallback.STATS``)."""
        return {}

    @abc.abstractmethod
    async def publish(self, channel: str, data: bytes) -> int:
        """Deliver ``data`` to current subscribers of ``channel``; returns how many got it (locally known).

        While the store is down the message is queued (bounded, oldest dropped first, counted) and
        sent once it is back, before any later publish: a publish that returned is not lost to a
        short outage. It may then arrive twice (at least once), and 0 is returned."""

    @abc.abstractmethod
    def subscribe(self, channel: str, max_queue: int = 1024) -> AsyncIterator[bytes]:
        """Messages published to ``channel`` from now on. A subscriber that falls ``max_queue`` behind
        loses the oldest messages (a slow reader must not stall publishers). The iterator never ends
        by itself: across an outage of the store it reconnects and subscribes again."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes | None:
        """The value, None if absent. Raises :class:`BusUnavailable` while the store is down."""

    @abc.abstractmethod
    async def set(self, key: str, value: bytes, ttl_s: float | None = None, only_if_absent: bool = False) -> bool:
        """Store; with ``only_if_absent`` it is an atomic claim (de-duplication) and says if it won.

        While the store is down a claim is made in this replica only (so a duplicate that reaches
        another replica may pass); a plain store raises :class:`BusUnavailable`."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Forget ``key`` (also a claim made locally); raises :class:`BusUnavailable` while down."""

    @abc.abstractmethod
    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        """Atomic counter; the TTL is set when the key is created. Raises :class:`BusUnavailable`
        while the store is down: a counter numbered locally would collide with the shared one."""

    @abc.abstractmethod
    async def take(self, key: str, per_s: float, burst: float, cost: float = 1.0) -> float:
        """Atomically take ``cost`` tokens from the token bucket ``key``.

        A bucket is created full (``burst`` tokens), refills at ``per_s`` tokens a second and never
        holds more than ``burst``. Returns 0.0 when the tokens were taken; otherwise takes nothing and
        returns the seconds until enough tokens will be there (``math.inf`` when ``cost > burst``: it
        never will). A bucket is forgotten once idle long enough to be full again, so keys do not
        accumulate. Bucket keys are their own namespace: do not use them with get/set/incr.

        While the store is down the bucket is this replica's own (fail-open to local limits): each
        replica then allows up to the whole limit, and the count is kept (``stats()``).
        """


def json_object(raw: bytes | None) -> dict[str, Any] | None:
    """A bus payload read as a JSON object; None if empty, malformed or not an object (skipped by
    every listener: another replica's junk never stops one)."""
    if not raw:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
