"""The Redis bus: many replicas share channels, keys and counters through one Redis."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

from redis import asyncio as aioredis
from redis.commands.core import AsyncScript

from gateway.bus.base import Bus, check_bucket

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
    def __init__(self, url: str, prefix: str = "switchboard:", connect_timeout_s: float = 5.0) -> None:
        self._url = url
        self._prefix = prefix
        self._timeout = connect_timeout_s
        self._redis: aioredis.Redis | None = None
        self._incr: AsyncScript | None = None
        self._take: AsyncScript | None = None

    @property
    def redis(self) -> aioredis.Redis:
        if self._redis is None:
            raise RuntimeError("RedisBus.start() was not called")
        return self._redis

    async def start(self) -> None:
        self._redis = aioredis.from_url(
            self._url, socket_connect_timeout=self._timeout, socket_timeout=self._timeout, health_check_interval=30
        )
        await self._redis.ping()
        self._incr = self._redis.register_script(_INCR_WITH_TTL)
        self._take = self._redis.register_script(_TAKE)

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    def _key(self, key: str) -> str:
        return self._prefix + key

    async def publish(self, channel: str, data: bytes) -> int:
        return int(await self.redis.publish(self._key(channel), data))

    async def subscribe(self, channel: str, max_queue: int = 1024) -> AsyncIterator[bytes]:
        # Redis itself bounds a slow subscriber (client-output-buffer-limit pubsub) by dropping it;
        # the reader below never holds more than one message.
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(self._key(channel))
        try:
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is None:
                    await asyncio.sleep(0)
                    continue
                data = message.get("data")
                if isinstance(data, bytes):
                    yield data
        finally:
            with contextlib.suppress(Exception):
                await pubsub.unsubscribe(self._key(channel))
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves PubSub.aclose unannotated

    async def get(self, key: str) -> bytes | None:
        value = await self.redis.get(self._key(key))
        return value if isinstance(value, bytes) else None

    async def set(self, key: str, value: bytes, ttl_s: float | None = None, only_if_absent: bool = False) -> bool:
        px = int(ttl_s * 1000) if ttl_s else None
        return bool(await self.redis.set(self._key(key), value, px=px, nx=only_if_absent))

    async def delete(self, key: str) -> None:
        await self.redis.delete(self._key(key))

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        assert self._incr is not None
        px = int(ttl_s * 1000) if ttl_s else 0
        return int(await self._incr(keys=[self._key(key)], args=[amount, px]))

    async def take(self, key: str, per_s: float, burst: float, cost: float = 1.0) -> float:
        check_bucket(per_s, burst, cost)
        if cost > burst:
            return math.inf
        assert self._take is not None
        result = await self._take(keys=[self._key(key)], args=[repr(per_s), repr(burst), repr(cost)])
        return float(result.decode() if isinstance(result, bytes) else result)
