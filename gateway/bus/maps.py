"""Maps on the bus: small tables of fields under one key, with atomic claim / compare-and-set / remove.

A registry of members spread over replicas (MCPx topics, docs/adr/0015) must be listed, which plain
keys cannot do. Maps add that and nothing else, beside the Bus rather than inside it so that the
Bus interface stays as it is: ``maps_for(bus)`` gives the implementation matching the bus (a Redis
hash for ``RedisBus``, a dict shared by everyone holding the same ``MemoryBus``).

Invariants: every operation is atomic (one Lua script or no await); a field's value is opaque bytes;
an empty map does not exist (Redis drops empty hashes, the memory maps drop them too).
"""

from __future__ import annotations

import abc
import weakref
from typing import Literal

from gateway.bus.base import Bus

Claim = Literal["ok", "exists", "full"]

# HSETNX bounded by HLEN, in one atomic round trip.
_CLAIM = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 'exists' end
local most = tonumber(ARGV[3])
if most > 0 and redis.call('HLEN', KEYS[1]) >= most then return 'full' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 'ok'
"""

_REPLACE = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
"""

_REMOVE_IF = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""


class Maps(abc.ABC):
    @abc.abstractmethod
    async def claim(self, key: str, field: str, value: bytes, max_fields: int | None = None) -> Claim:
        """Add ``field`` unless it is there ("exists") or the map holds ``max_fields`` fields ("full")."""

    @abc.abstractmethod
    async def put(self, key: str, field: str, value: bytes) -> None:
        """``field`` becomes ``value``, whatever it held (other fields untouched)."""

    @abc.abstractmethod
    async def replace(self, key: str, field: str, old: bytes, new: bytes) -> bool:
        """Compare-and-set: ``field`` becomes ``new`` only if it is ``old`` now."""

    @abc.abstractmethod
    async def remove(self, key: str, field: str, value: bytes | None = None) -> bool:
        """Remove ``field`` (only if it holds ``value``, when given); says whether this call removed it."""

    @abc.abstractmethod
    async def items(self, key: str) -> dict[str, bytes]: ...


class MemoryMaps(Maps):
    def __init__(self) -> None:
        self._maps: dict[str, dict[str, bytes]] = {}

    async def claim(self, key: str, field: str, value: bytes, max_fields: int | None = None) -> Claim:
        table = self._maps.setdefault(key, {})
        if field in table:
            return "exists"
        if max_fields is not None and len(table) >= max_fields:
            if not table:
                del self._maps[key]
            return "full"
        table[field] = value
        return "ok"

    async def put(self, key: str, field: str, value: bytes) -> None:
        self._maps.setdefault(key, {})[field] = value

    async def replace(self, key: str, field: str, old: bytes, new: bytes) -> bool:
        table = self._maps.get(key)
        if table is None or table.get(field) != old:
            return False
        table[field] = new
        return True

    async def remove(self, key: str, field: str, value: bytes | None = None) -> bool:
        table = self._maps.get(key)
        if table is None or field not in table or (value is not None and table[field] != value):
            return False
        del table[field]
        if not table:
            del self._maps[key]
        return True

    async def items(self, key: str) -> dict[str, bytes]:
        return dict(self._maps.get(key, {}))


class RedisMaps(Maps):
    """Redis hashes under the bus's key prefix, through the bus's own connection, timeouts and health
    (``RedisBus.command``: raises ``BusUnavailable`` while Redis is away, never hangs)."""

    def __init__(self, bus: Bus) -> None:
        from gateway.bus.redis import RedisBus

        assert isinstance(bus, RedisBus)
        self._bus = bus

    def _key(self, key: str) -> str:
        return self._bus.key(key)  # the bus's prefix: maps live in the same namespace as its keys

    async def _eval(self, script: str, key: str, *args: bytes | str | int) -> object:
        name = self._key(key)
        return await self._bus.command(lambda r: r.eval(script, 1, name, *args))

    async def claim(self, key: str, field: str, value: bytes, max_fields: int | None = None) -> Claim:
        result = await self._eval(_CLAIM, key, field, value, max_fields or 0)
        text = result.decode() if isinstance(result, bytes) else str(result)
        return "ok" if text == "ok" else "full" if text == "full" else "exists"

    async def put(self, key: str, field: str, value: bytes) -> None:
        name = self._key(key)
        await self._bus.command(lambda r: r.hset(name, field, value))

    async def replace(self, key: str, field: str, old: bytes, new: bytes) -> bool:
        return bool(await self._eval(_REPLACE, key, field, old, new))

    async def remove(self, key: str, field: str, value: bytes | None = None) -> bool:
        if value is None:
            name = self._key(key)
            return bool(await self._bus.command(lambda r: r.hdel(name, field)))
        return bool(await self._eval(_REMOVE_IF, key, field, value))

    async def items(self, key: str) -> dict[str, bytes]:
        name = self._key(key)
        raw = await self._bus.command(lambda r: r.hgetall(name))
        return {
            (k.decode() if isinstance(k, bytes) else str(k)): (v if isinstance(v, bytes) else str(v).encode())
            for k, v in raw.items()
        }


# Everyone holding the same MemoryBus shares its maps (several hubs on one bus = several replicas in tests).
_memory: weakref.WeakKeyDictionary[Bus, MemoryMaps] = weakref.WeakKeyDictionary()


def maps_for(bus: Bus) -> Maps:
    from gateway.bus.memory import MemoryBus

    if isinstance(bus, MemoryBus):
        maps = _memory.get(bus)
        if maps is None:
            maps = _memory[bus] = MemoryMaps()
        return maps
    return RedisMaps(bus)
