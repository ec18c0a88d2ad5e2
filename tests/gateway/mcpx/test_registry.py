"""gateway/bus/maps.py and gateway/mcpx/registry.py on the memory bus and a real Redis: atomic claims
bounded by size, compare-and-set, compare-and-delete, and entries of replicas that stopped beating."""

from __future__ import annotations

import asyncio
import uuid

from gateway.bus.base import Bus
from gateway.bus.maps import maps_for
from gateway.bus.memory import MemoryBus
from gateway.mcpx.hub import Participant
from gateway.mcpx.registry import Registry, entry_of
from policies.patterns import CapabilitySet


async def test_map_operations_are_atomic_and_bounded(bus: Bus) -> None:
    maps = maps_for(bus)
    key = f"m-{uuid.uuid4().hex}"
    if isinstance(bus, MemoryBus):
        assert maps_for(bus) is maps  # hubs on one memory bus share its maps
    results = await asyncio.gather(*(maps.claim(key, f"f{i}", b"v", 5) for i in range(20)))
    assert sorted(results).count("ok") == 5 and set(results) == {"ok", "full"}
    assert len(await maps.items(key)) == 5
    field = next(iter(await maps.items(key)))
    assert await maps.claim(key, field, b"other") == "exists"
    assert not await maps.replace(key, field, b"wrong", b"new")
    assert await maps.replace(key, field, b"v", b"new")
    assert (await maps.items(key))[field] == b"new"
    assert not await maps.remove(key, field, b"v")  # not what it holds now
    assert await maps.remove(key, field, b"new")
    assert not await maps.remove(key, field)  # gone already: exactly one remover wins
    for name in list(await maps.items(key)):
        assert await maps.remove(key, name)
    assert await maps.items(key) == {}
    await asyncio.gather(*(maps.put(key, f"p{i}", b"%d" % i) for i in range(10)))  # unconditional, per field
    await maps.put(key, "p3", b"again")
    assert await maps.items(key) == {**{f"p{i}": b"%d" % i for i in range(10)}, "p3": b"again"}


async def test_entries_of_a_replica_that_stops_beating_are_reaped_once(bus: Bus) -> None:
    ttl = 0.4
    alive, dead, other = (Registry(bus, f"r-{uuid.uuid4().hex[:6]}", ttl) for _ in range(3))
    for registry in (alive, dead):
        await registry.beat()
    topic = f"t-{uuid.uuid4().hex}"
    mine = entry_of(Participant("a", CapabilitySet(["chat"]), lambda e, t: True), alive.replica)
    theirs = entry_of(Participant("g", CapabilitySet(["chat"]), lambda e, t: True), dead.replica)
    assert await alive.claim(topic, mine, 10) == "ok"
    assert await dead.claim(topic, theirs, 10) == "ok"
    assert await dead.claim(topic, theirs, 10) == "exists"
    assert await alive.claim(topic, entry_of(Participant("x", CapabilitySet([]), lambda e, t: True), "r"), 2) == "full"
    live, reaped = await other.live(topic)
    assert set(live) == {"a", "g"} and reaped == []
    assert topic in await other.topics()
    await asyncio.sleep(ttl * 1.5)
    await alive.beat()  # only "alive" keeps beating
    (live_a, reaped_a), (live_b, reaped_b) = await asyncio.gather(alive.live(topic), other.live(topic))
    assert set(live_a) == set(live_b) == {"a"}
    assert [e.id for e in reaped_a + reaped_b] == ["g"]  # one of them removed it, and says so
    assert await alive.remove(topic, mine)
    assert (await other.live(topic))[0] == {}
    await other.live(topic)
    assert topic not in await other.topics()


async def test_the_owner_removes_and_rewrites_its_join_whatever_landed(bus: Bus) -> None:
    registry = Registry(bus, f"r-{uuid.uuid4().hex[:6]}", 5.0)
    topic = f"t-{uuid.uuid4().hex}"
    participant = Participant("a", CapabilitySet(["chat"]), lambda e, t: True)
    first = entry_of(participant, registry.replica)
    assert await registry.claim(topic, first, None) == "ok"
    participant.capabilities = CapabilitySet(["chat", "mcp/*"])
    second = entry_of(participant, registry.replica, first.nonce)
    assert await registry.rewrite_own(topic, second)
    assert (await registry.live(topic))[0]["a"].data["patterns"] == ["chat", "mcp/*"]
    # Removing by the entry it first wrote still removes that join (same nonce)...
    assert await registry.remove_own(topic, first)
    # ...but never another join of the same id.
    other = entry_of(Participant("a", CapabilitySet([]), lambda e, t: True), registry.replica)
    assert await registry.claim(topic, other, None) == "ok"
    assert not await registry.remove_own(topic, second) and not await registry.rewrite_own(topic, second)
    assert await registry.remove_own(topic, other)
