"""Who is in each topic, across replicas: one registry entry per participant on the bus (ADR 0015).

- ``mcpx:topic:NAME`` is a map: participant id -> entry (JSON: id, capabilities as shown, patterns,
  mode, tools, replica, nonce, joined_at). Claiming a field is the one atomic step that admits a
  participant anywhere: it refuses an id already there ("exists") and a topic already holding
  ``max_participants_per_topic`` entries ("full"), so both hold globally.
- ``mcpx:topics`` is a map of topic names ever joined (listing topics, finding a participant).
- ``mcpx:replica:ID`` is a key each replica sets every ``ttl/3`` seconds with a TTL: an entry is
  live while the key of its replica exists. Entries of a dead replica are removed by whichever
  replica notices first; removal is compare-and-delete, so exactly one of them wins (and announces
  the leave), and an entry written again meanwhile is never removed by a stale look.

Only the owning replica writes its entries (claim, replace, remove); others only remove dead ones.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from gateway.bus.base import json_object
from gateway.bus.maps import Claim, maps_for

if TYPE_CHECKING:
    from gateway.bus.base import Bus
    from gateway.mcpx.hub import Participant

TOPICS = "mcpx:topics"


def topic_key(name: str) -> str:
    return f"mcpx:topic:{name}"


def channel(name: str) -> str:
    return f"mcpx:channel:{name}"


@dataclass(slots=True, frozen=True)
class Entry:
    raw: bytes
    data: dict[str, Any]

    @classmethod
    def parse(cls, raw: bytes) -> Entry | None:
        data = json_object(raw)
        return cls(raw, data) if data is not None and isinstance(data.get("id"), str) else None

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def replica(self) -> str:
        return str(self.data.get("replica", ""))

    @property
    def nonce(self) -> str:
        return str(self.data.get("nonce", ""))

    def public(self) -> dict[str, Any]:
        """How others see it in welcome and presence messages (as ``Participant.entry``)."""
        item: dict[str, Any] = {"id": self.id, "capabilities": list(self.data.get("capabilities") or [])}
        if self.data.get("tools") is not None:
            item["tools"] = self.data["tools"]
        return item


def entry_of(participant: Participant, replica: str, nonce: str | None = None) -> Entry:
    data = {
        "id": participant.id,
        "capabilities": participant.capabilities.describe(),
        "patterns": list(participant.capabilities.patterns),
        "mode": participant.mode,
        "tools": participant.tools,
        "replica": replica,
        "nonce": nonce or uuid.uuid4().hex,
        "joined_at": participant.joined_at,
    }
    return Entry(orjson.dumps(data), data)


class Registry:
    def __init__(self, bus: Bus, replica: str, ttl_s: float) -> None:
        self._bus = bus
        self._maps = maps_for(bus)
        self.replica = replica
        self._ttl = ttl_s

    async def beat(self) -> None:
        """This replica is alive for another TTL."""
        await self._bus.set(f"mcpx:replica:{self.replica}", str(time.time()).encode(), ttl_s=self._ttl)

    async def retire(self) -> None:
        await self._bus.delete(f"mcpx:replica:{self.replica}")

    async def claim(self, topic: str, entry: Entry, max_fields: int | None) -> Claim:
        result = await self._maps.claim(topic_key(topic), entry.id, entry.raw, max_fields)
        if result == "ok":
            await self._maps.claim(TOPICS, topic, b"1")
        return result

    async def remove(self, topic: str, entry: Entry) -> bool:
        """Remove exactly this entry (compare-and-delete): says whether this call removed it."""
        return await self._maps.remove(topic_key(topic), entry.id, entry.raw)

    async def _current(self, topic: str, entry: Entry) -> Entry | None:
        """The entry the registry holds now for the same join (same nonce), whatever it says now."""
        raw = (await self._maps.items(topic_key(topic))).get(entry.id)
        current = Entry.parse(raw) if raw is not None else None
        return current if current is not None and current.nonce == entry.nonce else None

    async def remove_own(self, topic: str, entry: Entry) -> bool:
        """The owner's removal: the entry of that join, even if a rewrite of it did not land."""
        if await self.remove(topic, entry):
            return True
        current = await self._current(topic, entry)
        return current is not None and await self.remove(topic, current)

    async def rewrite_own(self, topic: str, entry: Entry) -> bool:
        """The owner's rewrite (capabilities, tools) of the entry of that join, if it is still there."""
        current = await self._current(topic, entry)
        if current is None or current.raw == entry.raw:
            return current is not None
        return await self._maps.replace(topic_key(topic), entry.id, current.raw, entry.raw)

    async def topics(self) -> list[str]:
        return sorted(await self._maps.items(TOPICS))

    async def live(self, topic: str) -> tuple[dict[str, Entry], list[Entry]]:
        """(live entries by id, dead entries this call removed: the caller announces their leave)."""
        entries = [e for raw in (await self._maps.items(topic_key(topic))).values() if (e := Entry.parse(raw))]
        alive: dict[str, bool] = {self.replica: True}
        for replica in {e.replica for e in entries} - alive.keys():
            alive[replica] = await self._bus.get(f"mcpx:replica:{replica}") is not None
        live = {e.id: e for e in entries if alive[e.replica]}
        reaped = [e for e in entries if not alive[e.replica] and await self.remove(topic, e)]
        if not entries:
            # Forget an ad-hoc topic nobody is in; a joiner racing with this puts it back (see claim)
            # and every replica with participants there re-asserts it each beat (``assert_topic``).
            await self._maps.remove(TOPICS, topic)
        return live, reaped

    async def assert_topic(self, topic: str) -> None:
        await self._maps.claim(TOPICS, topic, b"1")
