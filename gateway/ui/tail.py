"""The live events of the dashboard: the audit stream and the MCPx envelopes routed in topics, tailed
for whoever watches, on every replica.

Cost when nobody watches: nothing. The audit log calls its listeners only when there are some
(``AuditLog.record``: ``if self._listeners``), the topic hub its envelope watchers likewise
(``TopicHub.route``), and this tail registers with both only while a viewer is connected here, or
while a viewer elsewhere in the deployment wants this replica's events. An envelope is shown as an
allowed event of its sender (``action``: its kind, ``result``: how many here received it); a
refused one is already in the audit stream.

Per viewer: a bounded queue (:class:`Feed`). The listener appends and never waits; a slow browser
loses the oldest events and is told how many (``dropped``), the gateway never blocks on it.

Many replicas (a shared bus): a replica with viewers announces it every ``announce_every_s`` on
``ui:presence`` and keeps the key ``ui:viewers`` alive (TTL ``presence_ttl_s``). Every replica
listens to that channel (one idle subscription) and reads the key once at start; for ``presence_ttl_s``
after an announcement it publishes its audit records, batched, to ``ui:events``. The replicas with
viewers subscribe to ``ui:events`` while they have viewers and hand other replicas' events to them
(their own events reach their viewers directly, also while the bus is away). A deployment with no
viewer publishes nothing. The publisher's outbox is bounded too (oldest dropped): what it drops is
counted in the next batch and told to the viewers like their own losses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from gateway.bus.base import Bus, BusUnavailable, json_object
from gateway.clock import rfc3339_ms

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.mcpx.hub import TopicHub

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "ui:events"
PRESENCE_CHANNEL = "ui:presence"
PRESENCE_KEY = "ui:viewers"

# What a viewer is shown of an audit record: enough to say who did what where, and why it was refused.
# A whitelist, so that a field added to audit records later never reaches a page unreviewed.
_SHOWN = (
    "ts",
    "outcome",
    "principal",
    "action",
    "method",
    "backend",
    "tool",
    "reason",
    "result",
    "latency_ms",
    "session",
    "dialect",
    "transport",
    "topic",
    "feature_set",
)
_OUTBOX = 2048  # events waiting to be published for other replicas' viewers (oldest dropped beyond)
_BATCH = 256


def shown(record: Mapping[str, Any], replica: str) -> dict[str, Any]:
    """The part of an audit record a viewer sees, tagged with the replica that made it."""
    event = {key: record[key] for key in _SHOWN if key in record}
    event["replica"] = replica
    return event


class Feed:
    """One viewer's queue: bounded, oldest dropped first and counted; never blocks the producer."""

    __slots__ = ("_events", "_size", "_wake", "closed", "dropped")

    def __init__(self, size: int) -> None:
        self._events: deque[dict[str, Any]] = deque()
        self._size = size
        self._wake = asyncio.Event()
        self.dropped = 0  # lost since the viewer was last told
        self.closed = False

    def push(self, event: dict[str, Any]) -> None:
        if len(self._events) >= self._size:
            self._events.popleft()
            self.dropped += 1
        self._events.append(event)
        self._wake.set()

    async def take(self, wait_s: float) -> tuple[list[dict[str, Any]], int]:
        """(events, how many were dropped before them) once there are some, or empty after ``wait_s``."""
        if not self._events and not self.closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._wake.wait()
        self._wake.clear()
        events, self._events = list(self._events), deque()
        dropped, self.dropped = self.dropped, 0
        return events, dropped

    def lost(self, count: int) -> None:
        """``count`` events were lost before they reached this feed (another replica's outbox)."""
        self.dropped += count
        self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()


class TooManyViewers(Exception):
    """More viewers than the tail serves (each holds a queue and a connection)."""


class EventTail:
    def __init__(
        self,
        audit: AuditLog,
        bus: Bus,
        replica: str,
        *,
        shared: bool,
        topics: TopicHub | None = None,
        max_viewers: int = 32,
        feed_size: int = 1000,
        announce_every_s: float = 5.0,
        presence_ttl_s: float = 15.0,
    ) -> None:
        """``shared``: the bus spans replicas (Redis); with the memory bus the tail stays local.
        ``topics``: the MCPx hub whose routed envelopes are shown too (None: audit records only)."""
        self._audit = audit
        self._topics = topics
        self._bus = bus
        self.replica = replica
        self._shared = shared
        self._max_viewers = max_viewers
        self._feed_size = feed_size
        self._announce_every_s = announce_every_s
        self._presence_ttl_s = presence_ttl_s
        self._feeds: set[Feed] = set()
        self._listening = False
        self._publish_until = 0.0  # monotonic: publish for other replicas' viewers until then
        self._outbox: deque[dict[str, Any]] = deque(maxlen=_OUTBOX)
        self._outbox_ready = asyncio.Event()
        self._outbox_dropped = 0
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopped = False
        self.published = 0  # events this replica published for others (tests and the overview read it)

    # ---- viewers -----------------------------------------------------------------------------

    @property
    def viewers(self) -> int:
        return len(self._feeds)

    @property
    def publishing(self) -> bool:
        return time.monotonic() < self._publish_until

    def open(self) -> Feed:
        """A new viewer's feed; raises TooManyViewers."""
        if len(self._feeds) >= self._max_viewers:
            raise TooManyViewers(f"{self._max_viewers} dashboard viewers already watch this replica")
        feed = Feed(self._feed_size)
        self._feeds.add(feed)
        self._sync_listener()
        if self._shared and not self._stopped:
            self._spawn("announce", self._announce())
            self._spawn("subscribe", self._subscribe())
        return feed

    def close(self, feed: Feed) -> None:
        """The viewer left (idempotent: its response's end and ``stop`` may both close it)."""
        feed.close()
        if feed not in self._feeds:
            return
        self._feeds.discard(feed)
        if not self._feeds:
            for name in ("announce", "subscribe"):
                task = self._tasks.pop(name, None)
                if task is not None:
                    task.cancel()
            if self._shared and not self._stopped:
                self._spawn("withdraw", self._withdraw())
        self._sync_listener()

    # ---- the audit listener ------------------------------------------------------------------

    def _sync_listener(self) -> None:
        want = bool(self._feeds) or self.publishing
        if want and not self._listening:
            self._audit.add_listener(self._heard)
            if self._topics is not None:
                self._topics.watch(self._routed)
        elif not want and self._listening:
            self._audit.remove_listener(self._heard)
            if self._topics is not None:
                self._topics.unwatch(self._routed)
        self._listening = want

    def _routed(self, topic: str, sender: str, envelope: dict[str, Any], recipients: int) -> None:
        """Runs in ``TopicHub.route`` on the event loop, for an admitted envelope: appends, never waits."""
        kind = envelope.get("kind")
        self._show(
            {
                "ts": rfc3339_ms(time.time()),
                "outcome": "allowed",
                "principal": sender,
                "action": kind if isinstance(kind, str) else "",
                "method": kind if isinstance(kind, str) else "",
                "topic": topic,
                "result": f"delivered to {recipients}",
                "dialect": "mcpx",
                "replica": self.replica,
            }
        )

    def _heard(self, record: Mapping[str, Any]) -> None:
        """Runs in ``AuditLog.record`` on the event loop: appends, never waits."""
        self._show(shown(record, self.replica))

    def _show(self, event: dict[str, Any]) -> None:
        for feed in self._feeds:
            feed.push(event)
        if self._publish_until and time.monotonic() < self._publish_until:
            if len(self._outbox) == _OUTBOX:
                self._outbox_dropped += 1  # the deque drops the oldest; remote viewers are told how many
            self._outbox.append(event)
            self._outbox_ready.set()

    # ---- many replicas -----------------------------------------------------------------------

    async def start(self) -> None:
        """With a shared bus: hear other replicas' viewers (and learn of one already watching)."""
        if not self._shared:
            return
        self._spawn("presence", self._hear_presence())
        try:
            watching = await self._bus.get(PRESENCE_KEY)
        except BusUnavailable:
            watching = None
        if watching is not None and watching.decode(errors="replace") != self.replica:
            self._viewer_elsewhere()

    async def stop(self) -> None:
        self._stopped = True
        for feed in list(self._feeds):
            feed.close()  # their responses end
        self._feeds.clear()
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._publish_until = 0.0
        self._sync_listener()

    def _spawn(self, name: str, coro: Any) -> None:
        task = self._tasks.get(name)
        if task is not None and not task.done():
            coro.close()
            return
        task = asyncio.create_task(coro, name=f"ui-tail-{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._tasks.pop(name, None) if self._tasks.get(name) is t else None)

    async def _announce(self) -> None:
        """While this replica has viewers: tell every replica, and keep the presence key alive."""
        me = self.replica.encode()
        while self._feeds:
            try:
                await self._bus.set(PRESENCE_KEY, me, ttl_s=self._presence_ttl_s)
                await self._bus.publish(PRESENCE_CHANNEL, me)
            except BusUnavailable:
                pass  # the bus queues publishes while away; the key comes back at the next round
            await asyncio.sleep(self._announce_every_s)

    async def _withdraw(self) -> None:
        """The last viewer here left: drop the key if it is ours (others re-set theirs within a round)."""
        with contextlib.suppress(BusUnavailable):
            if await self._bus.get(PRESENCE_KEY) == self.replica.encode():
                await self._bus.delete(PRESENCE_KEY)

    async def _hear_presence(self) -> None:
        async for raw in self._bus.subscribe(PRESENCE_CHANNEL, max_queue=16):
            if raw.decode(errors="replace") != self.replica:
                self._viewer_elsewhere()

    def _viewer_elsewhere(self) -> None:
        self._publish_until = time.monotonic() + self._presence_ttl_s
        self._sync_listener()
        if not self._stopped:
            self._spawn("publish", self._publish())

    async def _publish(self) -> None:
        """Batches of this replica's events to the replicas with viewers, until none announced for a TTL."""
        try:
            while True:
                left = self._publish_until - time.monotonic()
                if left <= 0:
                    break
                if not self._outbox:
                    self._outbox_ready.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(left):
                            await self._outbox_ready.wait()
                    continue
                batch = [self._outbox.popleft() for _ in range(min(_BATCH, len(self._outbox)))]
                message = {"replica": self.replica, "events": batch, "dropped": self._outbox_dropped}
                self._outbox_dropped = 0
                try:
                    await self._bus.publish(EVENTS_CHANNEL, orjson.dumps(message))
                    self.published += len(batch)
                except BusUnavailable:
                    log.debug("dashboard events of this replica not published: the bus is away")
        finally:
            self._outbox.clear()
            if time.monotonic() >= self._publish_until:
                self._publish_until = 0.0
            self._sync_listener()

    async def _subscribe(self) -> None:
        """While this replica has viewers: other replicas' events, handed to them."""
        async for raw in self._bus.subscribe(EVENTS_CHANNEL, max_queue=1024):
            message = json_object(raw)
            if message is None or message.get("replica") == self.replica:
                continue
            events = message.get("events")
            if not isinstance(events, list):
                continue
            lost = message.get("dropped")
            for feed in self._feeds:
                if isinstance(lost, int) and lost > 0:
                    feed.lost(lost)  # that replica fell behind publishing: its viewers are told all the same
                for event in events:
                    if isinstance(event, dict):
                        feed.push(event)
