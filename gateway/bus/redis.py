"""The Redis bus: many replicas share channels, keys and counters through one Redis.

When Redis goes away (see ``redis_health``): the bus says so (``healthy``, ``problem``,
``on_health``), no operation waits longer than its timeouts, and each one degrades as ``Bus``
documents: buckets and claims go local (``fallback.Local``), publishes wait in the outbox and are
sent once Redis is back, subscriptions come back by themselves (``redis_pubsub``), and the rest
raises ``BusUnavailable`` at once. Connecting (TLS, passwords, Sentinel) is ``redis_urls``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TypeVar

from redis import asyncio as aioredis
from redis.commands.core import AsyncScript

from gateway.bus import redis_pubsub
from gateway.bus.base import Bus, BusUnavailable, HealthCallback, check_bucket
from gateway.bus.fallback import Counters, Local, Outbox
from gateway.bus.redis_health import UNAVAILABLE, Health, describe
from gateway.bus.redis_pubsub import BACKOFF_CAP_S
from gateway.bus.redis_urls import RedisConnection, RedisOptions

T = TypeVar("T")

log = logging.getLogger("gateway.bus")

# After Redis is back, queued publishes wait this long, so that the subscriptions of every replica
# (reconnecting with a backoff capped at BACKOFF_CAP_S) stand again before the messages are sent.
SETTLE_S = 1.5 * BACKOFF_CAP_S

# INCRBY, and set the TTL only when this call created the key (one round trip, atomic).
_INCR_WITH_TTL = """
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
if value == tonumber(ARGV[1]) and tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return value
"""

# Token bucket (see Bus.take), one atomic round trip. The clock is Redis's own TIME, so replicas with
# skewed clocks still share one bucket. TIME's seconds and microseconds are stored as Redis gave
# them: joined into one Lua double they would lose the microseconds. Numbers leave Lua as %.17g
# strings, because Lua numbers become Redis integers (truncated) and tostring() keeps 14 digits.
# The key expires when the bucket would be full again (an absent key means a full bucket), capped
# at ~30 years: PEXPIRE refuses a time past its range ("not an integer or out of range").
_TAKE = """
if redis.replicate_commands then redis.replicate_commands() end
local per_s, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = redis.call('TIME')
local tokens = burst
local state = redis.call('HMGET', KEYS[1], 't', 's', 'u')
if state[1] and state[2] and state[3] then
  local elapsed = (tonumber(now[1]) - tonumber(state[2])) + (tonumber(now[2]) - tonumber(state[3])) / 1e6
  if elapsed < 0 then elapsed = 0 end
  tokens = math.min(burst, tonumber(state[1]) + elapsed * per_s)
end
local wait = 0
if tokens >= cost then
  tokens = tokens - cost
else
  wait = (cost - tokens) / per_s
end
local fill_ms = math.min(math.ceil((burst - tokens) / per_s * 1000), 1e12)
if fill_ms < 1 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 't', string.format('%.17g', tokens), 's', now[1], 'u', now[2])
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', fill_ms))
end
return string.format('%.17g', wait)
"""


class RedisBus(Bus):
    def __init__(
        self,
        url: str,
        prefix: str = "switchboard:",
        connect_timeout_s: float | None = None,
        *,
        options: RedisOptions = RedisOptions(),
        health_interval_s: float = 1.0,
        publish_queue: int = 1024,
    ) -> None:
        """``connect_timeout_s``, when given, overrides ``options.timeout_s``. The URL is parsed now,
        so a malformed one fails at construction; Redis itself is first asked in :meth:`start`."""
        if connect_timeout_s is not None:
            options = dataclasses.replace(options, timeout_s=connect_timeout_s)
        self._prefix = prefix
        self._timeout = options.timeout_s
        self._interval = health_interval_s
        self._connection = RedisConnection(url, options)
        self._counters = Counters()
        self._health = Health(f"Redis at {self._connection.where}")
        self._local = Local(self._counters)
        self._outbox = Outbox(publish_queue, self._counters)
        client = self._connection.client
        self._incr: AsyncScript = client.register_script(_INCR_WITH_TTL)
        self._take: AsyncScript = client.register_script(_TAKE)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False

    @property
    def redis(self) -> aioredis.Redis:
        if not self._started:
            raise RuntimeError("RedisBus.start() was not called")
        return self._connection.client

    # ---- life and health -----------------------------------------------------------------------

    async def start(self) -> None:
        """Ask Redis once (bounded), then keep watching it. Redis being away is not an error here:
        the bus starts unhealthy, serves locally and connects when Redis answers."""
        if self._tasks:
            return  # several gateways may share one bus (tests do)
        self._started = True
        try:
            await self._bounded(self._connection.client.ping)
        except BusUnavailable:
            pass  # logged by Health; the watch loop keeps trying
        else:
            self._health.back()
        self._tasks = [
            asyncio.create_task(
                self._health.watch(self._probe, self._interval, self._timeout, lambda: self._started),
                name="bus-health",
            ),
            asyncio.create_task(self._flush_when_back(), name="bus-outbox"),
        ]

    async def _probe(self) -> object:
        """The health loop's PING. While down, idle pooled connections from before the outage are
        dropped first: reused after Redis is back, each would fail once and mark the bus down again."""
        if self._health.down:
            with contextlib.suppress(Exception):
                await self.redis.connection_pool.disconnect(inuse_connections=False)
        return await self.redis.ping()

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        started, self._started = self._started, False  # the loops and subscriptions end on this too
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded, and not awaiting the tasks themselves: a cancellation swallowed inside
            # redis-py (asyncio.wait_for in 3.11) must neither hang close nor eat close's own.
            await asyncio.wait(tasks, timeout=2 * self._timeout + self._interval)
        if started:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._timeout):
                    await self._connection.close()
        if self._outbox:
            log.warning("bus: closed with %d publishes still queued for Redis; they are lost", len(self._outbox))

    @property
    def healthy(self) -> bool:
        return self._health.healthy

    @property
    def problem(self) -> str | None:
        return self._health.problem

    def on_health(self, callback: HealthCallback) -> None:
        self._health.on_change(callback)

    def stats(self) -> Mapping[str, int]:
        return {**self._counters.values, "outages": self._health.outages}

    async def command(self, operation: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """``operation(client)``: one Redis operation of code beside the bus (``maps``), with the bus's
        timeouts and health: it raises :class:`BusUnavailable` (at once while down), never hangs."""
        return await self._bounded(lambda: operation(self.redis))

    async def _bounded(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run one Redis operation within the timeouts, or raise BusUnavailable (at once while down)."""
        if self._health.down:
            self._counters.add("unavailable")
            raise BusUnavailable(f"the bus is down: {self._health.problem}")
        try:
            # A connect and a command, each bounded by the socket timeouts; this bounds the whole.
            async with asyncio.timeout(2 * self._timeout):
                return await operation()
        except UNAVAILABLE as exc:
            self._health.lost(describe(exc))
            self._counters.add("unavailable")
            raise BusUnavailable(describe(exc)) from exc

    async def _flush_when_back(self) -> None:
        """Send the outbox once Redis is back and subscriptions had time to stand again."""
        while self._started:
            if not self._health.healthy:
                await self._health.changed()
                continue
            if not self._outbox:
                await asyncio.sleep(self._interval)  # a publish that failed while "healthy" queues too
                continue
            await asyncio.sleep(SETTLE_S)
            log.info("bus: sending %d publishes queued while Redis was away", len(self._outbox))
            try:
                await self._outbox.flush(self._publish_now)
            except BusUnavailable:
                pass  # still queued; Health noted it, and the next recovery sends them
            except Exception:  # Redis refused one (an ACL?): drop it, or it would block the rest forever
                log.exception("bus: Redis refused a queued publish; dropped")
                self._outbox.drop_first()

    # ---- operations ----------------------------------------------------------------------------

    def key(self, name: str) -> str:
        """``name`` in this bus's namespace (its prefix): every key and channel of the bus, and of code
        beside it (``maps``, the replicas' event history) that runs its own commands through :meth:`command`."""
        return self._prefix + name

    async def _publish_now(self, channel: str, data: bytes) -> int:
        return int(await self._bounded(lambda: self.redis.publish(self.key(channel), data)))

    async def publish(self, channel: str, data: bytes) -> int:
        if self._outbox or not self._health.healthy:
            self._outbox.put(channel, data)  # behind older queued messages, in order
            return 0
        try:
            return await self._publish_now(channel, data)
        except BusUnavailable:
            # Redis may have taken it before failing: queued, it may arrive twice (at least once).
            self._outbox.put(channel, data)
            return 0

    def subscribe(self, channel: str, max_queue: int = 1024) -> AsyncIterator[bytes]:
        return redis_pubsub.subscribe(
            self.redis, self.key(channel), self._health, self._counters, self._timeout, lambda: not self._started
        )

    async def get(self, key: str) -> bytes | None:
        value = await self._bounded(lambda: self.redis.get(self.key(key)))
        return value if isinstance(value, bytes) else None

    async def set(self, key: str, value: bytes, ttl_s: float | None = None, only_if_absent: bool = False) -> bool:
        px = int(ttl_s * 1000) if ttl_s else None
        if only_if_absent and await self._local.claimed(key):
            return False  # claimed here while Redis was away, and not expired yet
        try:
            return bool(await self._bounded(lambda: self.redis.set(self.key(key), value, px=px, nx=only_if_absent)))
        except BusUnavailable:
            if not only_if_absent:
                raise
            return await self._local.claim(key, value, ttl_s)

    async def delete(self, key: str) -> None:
        await self._local.forget(key)
        await self._bounded(lambda: self.redis.delete(self.key(key)))

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        px = int(ttl_s * 1000) if ttl_s else 0
        return int(await self._bounded(lambda: self._incr(keys=[self.key(key)], args=[amount, px])))

    async def take(self, key: str, per_s: float, burst: float, cost: float = 1.0) -> float:
        check_bucket(per_s, burst, cost)
        if cost > burst:
            return math.inf
        try:
            result = await self._bounded(
                lambda: self._take(keys=[self.key(key)], args=[repr(per_s), repr(burst), repr(cost)])
            )
        except BusUnavailable:
            return await self._local.take(key, per_s, burst, cost)
        return float(result.decode() if isinstance(result, bytes) else result)
