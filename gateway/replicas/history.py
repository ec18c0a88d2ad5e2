"""A legacy session's standalone events, kept in Redis so that ``Last-Event-ID`` resumes on any
replica (issue 14, ADR 0016).

The replica holding the stream appends every event it queues for the client, with the sequence
number its id carries (``<stream>-<seq>``); a replica that pushes to the session while nobody holds
the stream appends the message unsent (no number). A client that reconnects with ``Last-Event-ID``
to any replica gets what follows that event in the history: what was sent after it and what was
pushed while nobody held the stream. The new holder numbers on above every number in the history,
so event ids stay unique and increasing across holders.

Invariants: the history is bounded (``keep`` newest entries, Redis ``LTRIM``) and expires with the
session (``ttl_s``); appends go through the bus's own bounded operations and never block a push
(they are queued by the caller); an entry that does not decode is skipped.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.bus import Bus

_APPEND = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

Entry = tuple[int | None, dict[str, Any]]


class History:
    def __init__(self, bus: Bus, keep: int, ttl_s: float) -> None:
        from gateway.bus.redis import RedisBus

        # Shared sessions run on the Redis bus; any other bus (unit tests) keeps the history here.
        self._redis = bus if isinstance(bus, RedisBus) else None
        self._keep = max(keep, 1)
        self._ttl_ms = int(ttl_s * 1000)
        self._memory: dict[str, list[bytes]] = {}

    async def append(self, session_id: str, seq: int | None, message: dict[str, Any]) -> None:
        data = orjson.dumps([seq, message])
        if self._redis is None:
            kept = self._memory.setdefault(session_id, [])
            kept.append(data)
            del kept[: -self._keep]
            return
        key = self._redis.key(f"events:{session_id}")
        await self._redis.command(lambda r: r.eval(_APPEND, 1, key, data, self._keep, self._ttl_ms))

    async def entries(self, session_id: str) -> list[Entry]:
        if self._redis is None:
            raw: list[bytes | str] = list(self._memory.get(session_id, []))
        else:
            key = self._redis.key(f"events:{session_id}")
            raw = list(await self._redis.command(lambda r: r.lrange(key, 0, -1)))
        out: list[Entry] = []
        for item in raw:
            try:
                seq, message = orjson.loads(item)
            except (orjson.JSONDecodeError, TypeError, ValueError):
                continue
            if (seq is None or isinstance(seq, int)) and isinstance(message, dict):
                out.append((seq, message))
        return out


def missed(entries: list[Entry], last_seen: int) -> tuple[list[dict[str, Any]], int] | None:
    """(what follows event ``last_seen``, the highest number in the history), or None when the
    history does not hold that event (expired, trimmed, or never sent)."""
    numbers = [seq for seq, _ in entries if seq is not None]
    at = next((i for i in range(len(entries) - 1, -1, -1) if entries[i][0] == last_seen), None)
    if at is None:
        return None
    return [message for _, message in entries[at + 1 :]], max(numbers, default=0)
