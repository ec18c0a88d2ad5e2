"""The dashboard's event tail (gateway/ui/tail.py) with real buses: the memory bus shared by two
"replicas" in one process, and a real redis-server.

- a viewer's feed is bounded: a slow viewer loses the oldest events and is told how many;
- nobody watching costs nothing: no audit listener, nothing published, nothing subscribed;
- a viewer on one replica hears every replica's events; the others publish only while some viewer
  exists (announced), and stop within the presence TTL after the last one leaves;
- stop() ends every viewer's feed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from adapters import mcpx
from gateway.audit import AuditLog
from gateway.bus import Bus, MemoryBus
from gateway.bus.redis import RedisBus
from gateway.config import AuditConfig
from gateway.mcpx.hub import Participant, TopicHub
from gateway.metrics import Metrics
from gateway.ui.tail import EventTail, Feed, TooManyViewers, shown
from policies.patterns import CapabilitySet

pytestmark = pytest.mark.timeout(30)


def audit_log() -> AuditLog:
    return AuditLog(AuditConfig(), Metrics())


def listeners(audit: AuditLog) -> int:
    return len(audit._listeners)


async def next_events(feed: Feed, want: int = 1, timeout: float = 5.0) -> list[dict[str, object]]:
    got: list[dict[str, object]] = []
    async with asyncio.timeout(timeout):
        while len(got) < want:
            events, _ = await feed.take(0.05)
            got += events
    return got


async def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Polled: the tail's state changes in its own tasks and has no event to wait on."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - polled, bounded
            await asyncio.sleep(0.02)


async def test_a_slow_viewer_loses_the_oldest_events_and_is_told_how_many() -> None:
    feed = Feed(3)
    for n in range(5):
        feed.push({"n": n})
    events, dropped = await feed.take(0.01)
    assert [e["n"] for e in events] == [2, 3, 4] and dropped == 2
    assert await feed.take(0.01) == ([], 0), "told once; an empty wait ends after its bound"


async def test_a_viewer_sees_only_the_shown_fields() -> None:
    record = {"ts": "t", "outcome": "denied", "principal": "bob", "reason": "no", "token": "x", "grants": {}}
    assert shown(record, "r1") == {"ts": "t", "outcome": "denied", "principal": "bob", "reason": "no", "replica": "r1"}


async def test_nobody_watching_costs_nothing_and_a_viewer_hears_its_replica() -> None:
    audit = audit_log()
    tail = EventTail(audit, MemoryBus(), "r1", shared=False)
    await tail.start()
    assert listeners(audit) == 0, "no viewer: the audit log calls nobody"
    feed = tail.open()
    assert listeners(audit) == 1
    audit.record("denied", principal="bob", action="mcp/request:tools/call:x", reason="capability not granted")
    [event] = await next_events(feed)
    assert event["principal"] == "bob" and event["reason"] == "capability not granted" and event["replica"] == "r1"
    tail.close(feed)
    assert listeners(audit) == 0
    await tail.stop()


async def test_envelopes_routed_in_topics_are_shown_while_watched() -> None:
    hub = TopicHub(10)
    inbox: list[dict[str, object]] = []
    for pid in ("a", "b"):
        topic = hub.join("room", Participant(pid, CapabilitySet(["chat"]), lambda e, _t: inbox.append(e) or True))
    tail = EventTail(audit_log(), MemoryBus(), "r1", shared=False, topics=hub)
    hub.route(topic, "a", mcpx.envelope("a", "chat", {"text": "unseen"}))
    assert hub._watchers == (), "no viewer: the hub calls nobody"
    feed = tail.open()
    hub.route(topic, "a", mcpx.envelope("a", "chat", {"text": "hi"}))
    [event] = await next_events(feed)
    assert event["principal"] == "a" and event["action"] == "chat" and event["topic"] == "room"
    assert event["outcome"] == "allowed" and event["result"] == "delivered to 1" and "payload" not in event
    tail.close(feed)
    assert hub._watchers == ()
    await tail.stop()


async def test_too_many_viewers_are_refused() -> None:
    tail = EventTail(audit_log(), MemoryBus(), "r1", shared=False, max_viewers=1)
    tail.open()
    with pytest.raises(TooManyViewers):
        tail.open()
    await tail.stop()


async def test_stop_ends_every_feed() -> None:
    tail = EventTail(audit_log(), MemoryBus(), "r1", shared=False)
    feed = tail.open()
    await tail.stop()
    assert feed.closed and tail.viewers == 0


@pytest.fixture
async def replicas(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Bus, Bus]]:
    """Two replicas' buses: one memory bus shared by both, or two connections to a real Redis
    (``redis_url``: tests/conftest.py's redis-server, skipped when it is not installed)."""
    if request.param == "memory":
        bus = MemoryBus()
        yield bus, bus
        return
    url = request.getfixturevalue("redis_url")
    one, two = RedisBus(url, prefix="ui-tail:"), RedisBus(url, prefix="ui-tail:")
    await one.start()
    await two.start()
    try:
        yield one, two
    finally:
        await one.close()
        await two.close()


@pytest.mark.parametrize("replicas", ["memory", "redis"], indirect=True)
async def test_a_viewer_hears_every_replica_and_others_publish_only_while_it_watches(
    replicas: tuple[Bus, Bus],
) -> None:
    bus_a, bus_b = replicas
    audit_a, audit_b = audit_log(), audit_log()
    fast = {"announce_every_s": 0.1, "presence_ttl_s": 0.5}
    a = EventTail(audit_a, bus_a, "a", shared=True, **fast)
    b = EventTail(audit_b, bus_b, "b", shared=True, **fast)
    await a.start()
    await b.start()
    try:
        audit_b.record("allowed", principal="early")
        await asyncio.sleep(0.2)
        assert listeners(audit_b) == 0 and b.published == 0, "no viewer anywhere: b neither listens nor publishes"

        feed = a.open()
        await eventually(lambda: b.publishing)
        audit_b.record("denied", principal="bob", backend="fx", reason="capability not granted")
        audit_a.record("allowed", principal="alice")
        events = await next_events(feed, 2)
        assert {(e["replica"], e["principal"]) for e in events} == {("b", "bob"), ("a", "alice")}
        assert b.published == 1 and a.published == 0, "a has no viewer elsewhere: it publishes nothing"

        a.close(feed)
        await eventually(lambda: not b.publishing and listeners(audit_b) == 0, timeout=3)
        audit_b.record("allowed", principal="late")
        await asyncio.sleep(0.1)
        assert b.published == 1, "the last viewer left: b stopped publishing within the TTL"
    finally:
        await a.stop()
        await b.stop()


async def test_a_replica_started_while_someone_watches_publishes_at_once() -> None:
    bus = MemoryBus()
    a = EventTail(audit_log(), bus, "a", shared=True, announce_every_s=10, presence_ttl_s=5)
    await a.start()
    feed = a.open()
    audit_b = audit_log()
    b = EventTail(audit_b, bus, "b", shared=True, announce_every_s=10, presence_ttl_s=5)
    try:
        await eventually(lambda: bus._live("ui:viewers") is not None)
        await b.start()  # reads the presence key: no need to wait for the next announcement
        assert b.publishing
        audit_b.record("denied", principal="bob")
        [event] = await next_events(feed)
        assert event["replica"] == "b"
    finally:
        await a.stop()
        await b.stop()


async def test_events_another_replica_could_not_publish_are_counted_for_the_viewer() -> None:
    """A burst beyond the publisher's outbox (2048) on one replica: the viewer on the other is told
    how many it lost, as it is for its own queue."""
    bus = MemoryBus()
    audit_b = audit_log()
    # this viewer's own queue holds it all: only the publisher's outbox overflows
    a = EventTail(audit_log(), bus, "a", shared=True, feed_size=10_000, announce_every_s=0.1, presence_ttl_s=5)
    b = EventTail(audit_b, bus, "b", shared=True, announce_every_s=0.1, presence_ttl_s=5)
    await a.start()
    await b.start()
    try:
        feed = a.open()
        await eventually(lambda: b.publishing)
        for n in range(2100):  # no await in between: the publisher cannot drain meanwhile
            audit_b.record("allowed", principal=f"p{n}")
        got, lost = 0, 0
        async with asyncio.timeout(5):
            while got + lost < 2100:
                events, dropped = await feed.take(0.1)
                got, lost = got + len(events), lost + dropped
        assert (got, lost) == (2048, 52)
    finally:
        await a.stop()
        await b.stop()
