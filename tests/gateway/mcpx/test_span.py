"""gateway/mcpx/span.py: one topic over several hubs sharing a bus (each hub = one replica).

Every test runs on the memory bus (several hubs in one process share it) and on a real Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from adapters import mcpx
from gateway.bus.base import Bus
from gateway.bus.maps import maps_for
from gateway.mcpx.hub import JoinRefused, Participant, TopicHub
from gateway.mcpx.registry import topic_key
from policies.patterns import CapabilitySet

pytestmark = [pytest.mark.timeout(30)]

TTL = 0.9


class Inbox:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()

    def deliver(self, envelope: dict[str, Any], _text: str) -> bool:
        self.items.append(envelope)
        self.arrived.set()
        return True

    async def wait(self, test: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                for item in self.items:
                    if test(item):
                        return item
                self.arrived.clear()
                await self.arrived.wait()

    def chats(self) -> list[str]:
        return [e["payload"]["text"] for e in self.items if e["kind"] == "chat"]


def member(pid: str, mode: str = "all", caps: tuple[str, ...] = ("mcp/*", "chat")) -> tuple[Participant, Inbox]:
    inbox = Inbox()
    return Participant(pid, CapabilitySet(list(caps)), inbox.deliver, mode), inbox  # type: ignore[arg-type]


def presence(event: str, pid: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: (
        e["kind"] == "system/presence" and e["payload"]["event"] == event and e["payload"]["participant"]["id"] == pid
    )


@pytest.fixture
async def hubs(bus: Bus) -> AsyncIterator[list[TopicHub]]:
    made = [TopicHub(3, ("kept",), bus=bus, ttl_s=TTL) for _ in range(3)]
    try:
        yield made
    finally:
        for hub in made:
            await hub.close()


async def test_welcome_presence_and_routing_across_hubs(hubs: list[TopicHub]) -> None:
    one, two, _ = hubs
    a, a_in = member("a")
    b, b_in = member("b", "directed")
    c, c_in = member("c", "directed")
    topic_a = await one.enter("t", a)
    topic_b = await two.enter("t", b)
    assert [p["id"] for p in b_in.items[0]["payload"]["participants"]] == ["a"]
    await a_in.wait(presence("join", "b"))
    await one.enter("t", c)  # c is on a's replica, b on the other
    assert {p["id"] for p in c_in.items[0]["payload"]["participants"]} == {"a", "b"}
    await b_in.wait(presence("join", "c"))
    # Broadcast from b reaches a and c once; directed to c: c and the "all" participant a, not b.
    two.route(topic_b, "b", mcpx.envelope("b", "chat", {"text": "hello"}))
    await a_in.wait(lambda e: e["kind"] == "chat")
    await c_in.wait(lambda e: e["kind"] == "chat")
    one.route(topic_a, "a", mcpx.envelope("a", "chat", {"text": "to-c"}, to=["c"]))
    one.route(topic_a, "a", mcpx.envelope("a", "chat", {"text": "to-b"}, to=["b"]))
    await b_in.wait(lambda e: e.get("payload", {}).get("text") == "to-b")
    await asyncio.sleep(0.2)
    assert a_in.chats() == ["hello"] and c_in.chats() == ["hello", "to-c"] and b_in.chats() == ["to-b"]
    assert topic_a.has("b") and topic_b.has("a") and not topic_b.has("nobody")
    # A leave crosses too, once.
    two.leave("t", b)
    await a_in.wait(presence("leave", "b"))
    await asyncio.sleep(2 * TTL)  # a few beats: reconciling must not announce it again
    assert len([e for e in a_in.items if presence("leave", "b")(e)]) == 1
    assert len([e for e in a_in.items if presence("join", "b")(e)]) == 1


async def test_ids_and_limits_hold_over_all_hubs(hubs: list[TopicHub]) -> None:
    one, two, three = hubs
    await one.enter("full", member("a")[0])
    with pytest.raises(JoinRefused) as dup:
        await two.enter("full", member("a")[0])
    assert dup.value.code == 1008
    await two.enter("full", member("b")[0])
    await three.enter("full", member("c")[0])
    with pytest.raises(JoinRefused) as full:
        await three.enter("full", member("d")[0])
    assert full.value.code == 1013
    # Concurrent joins at the edge: exactly one gets the last seat.
    two.leave("full", two.get("full").participants["b"])  # type: ignore[union-attr]
    await asyncio.sleep(0.3)
    results = await asyncio.gather(
        *(hub.enter("full", member(f"x{i}")[0]) for i, hub in enumerate(hubs)), return_exceptions=True
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, JoinRefused) and r.code == 1013 for r in results if isinstance(r, BaseException))
    assert len(await one.roster("full") or []) == 3


async def test_capabilities_changed_from_another_hub(hubs: list[TopicHub]) -> None:
    one, two, _ = hubs
    p, p_in = member("p", caps=("chat",))
    await two.enter("t", p)
    located = await one.locate("p")
    assert located == [("t", ("chat",), ["chat"])]
    await one.change_capabilities("p", CapabilitySet(["chat", "mcp/request:tools/*"]))
    welcome = await p_in.wait(lambda e: e["kind"] == "system/welcome" and len(e["payload"]["you"]["capabilities"]) == 2)
    assert welcome["payload"]["you"]["capabilities"] == ["chat", "mcp/request:tools/*"]
    assert p.capabilities.allows("mcp/request:tools/call")
    await asyncio.sleep(0.3)
    assert (await one.locate("p"))[0][1] == ("chat", "mcp/request:tools/*")  # the registry follows


async def test_a_hub_that_stops_beating_leaves(bus: Bus) -> None:
    alive = TopicHub(10, bus=bus, ttl_s=TTL)
    doomed = TopicHub(10, bus=bus, ttl_s=TTL)
    try:
        a, a_in = member("a")
        await alive.enter("t", a)
        await doomed.enter("t", member("ghost")[0])
        await a_in.wait(presence("join", "ghost"))
        # Dies without a word: its tasks stop, its entries and channel stay behind.
        assert doomed.span is not None
        for task in doomed.span._tasks:
            task.cancel()
        for link in doomed.span._links.values():
            assert link.task is not None
            link.task.cancel()
        await a_in.wait(presence("leave", "ghost"), timeout=TTL * 4)
        assert "ghost" not in (await maps_for(bus).items(topic_key("t")))
        # Its id is free again, anywhere.
        await alive.enter("t", member("ghost")[0])
    finally:
        await alive.close()


async def test_one_hub_without_a_bus_is_unchanged() -> None:
    hub = TopicHub(10)
    assert hub.span is None and not hub.shared
    a, a_in = member("a")
    topic = await hub.enter("t", a)
    assert a_in.items[0]["kind"] == "system/welcome" and topic.remote == {}
    assert await hub.roster("t") == [{"id": "a", "capabilities": ["mcp/*", "chat"], "mode": "all"}]
    assert await hub.listing() == [{"name": "t", "participants": 1, "configured": False}]
    await hub.close()


async def test_joins_are_refused_1013_while_the_bus_is_away() -> None:
    from gateway.bus.redis import RedisBus
    from tests.support import free_port

    bus = RedisBus(f"redis://127.0.0.1:{free_port()}/0", connect_timeout_s=0.2)
    await bus.start()
    hub = TopicHub(10, bus=bus, ttl_s=TTL)
    try:
        with pytest.raises(JoinRefused) as refused:
            await hub.enter("t", member("a")[0])
        assert refused.value.code == 1013 and hub.get("t") is None
    finally:
        await hub.close()
        await bus.close()
