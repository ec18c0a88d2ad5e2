"""One topic across replicas (ADR 0015): the bridge between this replica's TopicHub and the bus.

Each replica keeps its own participants (their sockets) in its hub; the span adds:

- the shared registry (gateway/mcpx/registry.py): a join is admitted by claiming the participant's
  entry, so duplicate ids and ``max_participants_per_topic`` hold over all replicas;
- a per-topic bus channel, subscribed while this replica has participants in the topic (or joins
  pending). Envelopes routed here are published there as the exact text received; every other
  replica routes them to its own participants with the hub's rules (``to``, mode), so each
  participant gets an envelope once and a sender never gets its own back;
- a mirror of the others' entries per topic (``Topic.remote``, gateway/mcpx/mirror.py), kept by the
  presence messages on the channel and reconciled with the registry every beat; local participants
  hear a ``join`` when an id appears there (or its tools change) and a ``leave`` when it goes;
- a beat (``ttl/3``) that keeps this replica alive in the registry and removes the entries of replicas
  that stopped beating (their participants leave within the TTL plus one beat).

Everything this replica publishes (registry writes included) goes through one ordered queue, so a
participant's join is announced before its first envelope, and its entry is gone before its leave
is announced (a reconcile never resurrects it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from gateway.mcpx.mirror import Link, mirror, unmirror
from gateway.mcpx.registry import Entry, Registry, channel, entry_of
from policies.patterns import CapabilitySet

if TYPE_CHECKING:
    from gateway.bus.base import Bus
    from gateway.mcpx.hub import Participant, Topic, TopicHub

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 6.0
_LINK_TIMEOUT_S = 5.0
_PING_EVERY_S = 0.1
_FLUSH_S = 2.0
_MAX_PENDING = 10_000  # writes waiting for the bus, beyond which routed envelopes are not published


class SpanUnavailable(Exception):
    """The bus could not be reached for a join: the door answers 1013 (try again later)."""


class ReplicaSpan:
    def __init__(self, hub: TopicHub, bus: Bus, ttl_s: float = DEFAULT_TTL_S, replica: str | None = None) -> None:
        self._hub = hub
        self._bus = bus
        self.replica = replica or uuid.uuid4().hex[:12]
        self.ttl_s = ttl_s
        self.beat_s = ttl_s / 3
        self._registry = Registry(bus, self.replica, ttl_s)
        self._links: dict[str, Link] = {}
        self._mine: dict[tuple[str, str], Entry] = {}  # (topic, id) -> the entry held for a local participant
        self._orphans: dict[tuple[str, str, str], Entry] = {}  # entries of gone participants still to remove
        self._dirty: set[tuple[str, str]] = set()  # local entries whose rewrite is still to do
        self._queue: asyncio.Queue[Callable[[], Awaitable[object]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self.dropped = 0  # envelopes not published because the bus was too slow

    # ---- lifecycle ---------------------------------------------------------------------------

    async def _start(self) -> None:
        if self._started:
            return
        await self._registry.beat()
        self._started = True
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work()), loop.create_task(self._beat())]

    async def close(self) -> None:
        if not self._started:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_FLUSH_S):
                await self._queue.join()  # the leaves of those who just went
        for task in [*self._tasks, *(link.task for link in self._links.values() if link.task)]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._links.clear()
        with contextlib.suppress(Exception):
            await self._registry.retire()
        self._started = False

    def _later(self, action: Callable[[], Awaitable[object]]) -> None:
        if self._started:
            self._queue.put_nowait(action)

    async def _work(self) -> None:
        failing = False
        while True:
            action = await self._queue.get()
            try:
                await action()
                failing = False
            except Exception as exc:
                if not failing:  # once per outage, not once per envelope
                    log.warning("MCPx: a write to the bus failed (%s); registry writes are retried each beat", exc)
                failing = True
            finally:
                self._queue.task_done()

    async def _publish(self, topic: str, message: dict[str, Any]) -> None:
        await self._bus.publish(channel(topic), orjson.dumps({"r": self.replica, **message}))

    # ---- joining -----------------------------------------------------------------------------

    async def admit(self, topic: Topic, participant: Participant, max_participants: int) -> str | None:
        """Claim the participant's entry; None when admitted, else the refusal ("exists" or "full").
        Raises SpanUnavailable when the bus cannot be reached. On success the mirror is up to date
        and the caller must call ``joined`` without awaiting in between."""
        if not self._bus.healthy:
            raise SpanUnavailable(self._bus.problem or "the bus is down")
        if topic.name not in self._links and await self._taken(topic.name, participant.id):
            return "exists"  # refused without subscribing (a standing-by bridge asks every beat)
        link = self._links.get(topic.name)
        if link is None:
            link = self._links[topic.name] = Link()
        link.pending += 1
        key = (topic.name, participant.id)
        entry = entry_of(participant, self.replica)
        claim: str = "exists"
        try:
            await self._start()
            await self._linked(topic.name, link)
            for _ in range(2):
                seq = link.seq
                claim = await self._registry.claim(topic.name, entry, max_participants)
                if claim == "ok":
                    self._mine[key] = entry
                live, reaped = await self._registry.live(topic.name)
                self._announce_reaped(topic.name, reaped)
                if claim == "ok":
                    link.sync(self._hub, topic, live, seq, self.replica)
                    return None
                if not reaped:
                    break  # nobody dead made room: the refusal stands
            return claim
        except BaseException as exc:
            if self._mine.pop(key, None) is not None:
                self._later(partial(self._drop_own, topic.name, entry))
            if isinstance(exc, (OSError, TimeoutError)) or type(exc).__module__.startswith("redis"):
                raise SpanUnavailable(str(exc) or type(exc).__name__) from exc
            raise
        finally:
            link.pending -= 1

    async def _taken(self, name: str, pid: str) -> bool:
        try:
            await self._start()
            live, reaped = await self._registry.live(name)
        except Exception as exc:
            raise SpanUnavailable(str(exc) or type(exc).__name__) from exc
        self._announce_reaped(name, reaped)
        return pid in live

    def joined(self, topic: Topic, participant: Participant) -> None:
        entry = self._mine.get((topic.name, participant.id))
        if entry is not None:
            self._later(partial(self._publish, topic.name, {"k": "join", "e": entry.data}))

    def left(self, topic: Topic, participant: Participant) -> None:
        entry = self._mine.pop((topic.name, participant.id), None)
        if entry is not None:
            self._later(partial(self._drop_own, topic.name, entry))
        self.unlink_if_idle(topic)

    def changed(self, topic: Topic, participant: Participant) -> None:
        """Its capabilities or tools changed: rewrite its entry, and tell the others' mirrors."""
        old = self._mine.get((topic.name, participant.id))
        if old is not None:
            self._mine[(topic.name, participant.id)] = entry_of(participant, self.replica, old.nonce)
            self._later(partial(self._rewrite_own, topic.name, participant.id))

    async def _drop_own(self, name: str, entry: Entry) -> None:
        # Gone from the registry before the leave is told: no reconcile brings it back. A removal
        # the bus refused is retried each beat: a leave must never leave a ghost behind.
        try:
            await self._registry.remove_own(name, entry)
        except Exception:
            self._orphans[(name, entry.id, entry.nonce)] = entry
            raise
        await self._publish(name, {"k": "leave", "id": entry.id, "n": entry.nonce})

    async def _rewrite_own(self, name: str, pid: str) -> None:
        entry = self._mine.get((name, pid))
        if entry is None:
            return  # it left meanwhile
        try:
            await self._registry.rewrite_own(name, entry)
        except Exception:
            self._dirty.add((name, pid))
            raise
        await self._publish(name, {"k": "join", "e": entry.data})

    async def _retry_writes(self) -> None:
        for key, entry in list(self._orphans.items()):
            del self._orphans[key]
            await self._drop_own(key[0], entry)
        for name, pid in list(self._dirty):
            self._dirty.discard((name, pid))
            await self._rewrite_own(name, pid)

    def routed(self, topic: Topic, sender: str, text: str) -> None:
        # Delivery is best effort (MCPx §2.2): with the bus stalled, envelopes are dropped rather than
        # piling up; registry writes (joins, leaves) are never dropped.
        if self._queue.qsize() < _MAX_PENDING:
            self._later(partial(self._publish, topic.name, {"k": "env", "s": sender, "e": text}))
        else:
            self.dropped += 1

    def unlink_if_idle(self, topic: Topic) -> None:
        link = self._links.get(topic.name)
        if link is not None and link.pending == 0 and not topic.participants:
            del self._links[topic.name]
            if link.task is not None:
                link.task.cancel()
            topic.remote.clear()

    async def _linked(self, name: str, link: Link) -> None:
        """Subscribed for sure: a ping of ours came back through the channel."""
        if link.task is None:
            link.task = asyncio.get_running_loop().create_task(self._listen(name, link))
        async with asyncio.timeout(_LINK_TIMEOUT_S):
            while not link.ready.is_set():
                await self._bus.publish(channel(name), orjson.dumps({"r": self.replica, "k": "ping", "n": link.nonce}))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_PING_EVERY_S):
                        await link.ready.wait()

    # ---- what other replicas say -------------------------------------------------------------

    async def _listen(self, name: str, link: Link) -> None:
        try:
            async for data in self._bus.subscribe(channel(name)):
                try:
                    message = orjson.loads(data)
                    self._on_message(name, link, message)
                except Exception:
                    log.exception("MCPx: bad message on the channel of topic %s", name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("MCPx: lost the bus channel of topic %s", name)
            if self._links.get(name) is link:
                del self._links[name]  # the next join or beat links again

    def _on_message(self, name: str, link: Link, message: dict[str, Any]) -> None:
        kind = message.get("k")
        if kind == "ping":
            if message.get("n") == link.nonce:
                link.ready.set()
            return
        if message.get("r") == self.replica:
            return  # ours: delivered here already
        topic = self._hub.get(name)
        if topic is None:
            return
        if kind == "env":
            text = message["e"]
            self._hub.relay(topic, str(message["s"]), orjson.loads(text), text)
        elif kind == "join":
            entry = Entry(orjson.dumps(message["e"]), message["e"])
            link.touch(entry.id)
            mirror(self._hub, topic, entry, self.replica)
        elif kind == "leave":
            link.touch(str(message["id"]))
            unmirror(self._hub, topic, str(message["id"]), message.get("n"))
        elif kind == "caps":
            participant = topic.participants.get(str(message["id"]))
            if participant is not None:
                self._hub.apply_capabilities(topic, participant, CapabilitySet(message["p"]))

    def _announce_reaped(self, name: str, reaped: list[Entry]) -> None:
        """Entries of a dead replica this replica removed: the leave is this replica's to tell."""
        topic = self._hub.get(name)
        for entry in reaped:
            log.info("MCPx: %s left topic %s with its replica %s (no beat)", entry.id, name, entry.replica)
            if topic is not None:
                unmirror(self._hub, topic, entry.id, entry.nonce)
            self._later(partial(self._publish, name, {"k": "leave", "id": entry.id, "n": entry.nonce}))

    # ---- the beat ----------------------------------------------------------------------------

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.beat_s)
            if not self._bus.healthy:
                continue  # the bus reports its outage; our entries are claimed back when it is over
            try:
                await self._registry.beat()
                await self._retry_writes()
                await self._relink()
                for name, link in list(self._links.items()):
                    topic = self._hub.get(name)
                    if topic is None or not link.ready.is_set():
                        continue
                    seq = link.seq
                    await self._registry.assert_topic(name)
                    live, reaped = await self._registry.live(name)
                    self._announce_reaped(name, reaped)
                    if self._links.get(name) is link:
                        link.sync(self._hub, topic, live, seq, self.replica)
                    await self._reclaim(name, live)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("MCPx: the replica beat failed (will retry)")

    async def _relink(self) -> None:
        """A channel lost (the bus went away) is subscribed again while participants are here."""
        for topic in self._hub:
            if topic.participants and topic.name not in self._links:
                link = self._links[topic.name] = Link()
                try:
                    await self._linked(topic.name, link)
                except Exception:
                    log.warning("MCPx: the bus channel of topic %s is still unavailable", topic.name)
                    if self._links.get(topic.name) is link:
                        del self._links[topic.name]
                    if link.task is not None:
                        link.task.cancel()

    async def _reclaim(self, name: str, live: dict[str, Entry]) -> None:
        """Our own entries removed while this replica looked dead (a long stall): claim them again."""
        for (topic, pid), entry in list(self._mine.items()):
            if topic == name and pid not in live and await self._registry.claim(name, entry, None) == "ok":
                await self._publish(name, {"k": "join", "e": entry.data})

    # ---- participants anywhere (admin API) ---------------------------------------------------

    async def locate(self, pid: str) -> list[tuple[str, Entry]]:
        found = []
        for name in await self._registry.topics():
            live, reaped = await self._registry.live(name)
            self._announce_reaped(name, reaped)
            if pid in live:
                found.append((name, live[pid]))
        return found

    async def roster(self, name: str) -> list[Entry]:
        live, reaped = await self._registry.live(name)
        self._announce_reaped(name, reaped)
        return sorted(live.values(), key=lambda e: float(e.data.get("joined_at") or 0))

    async def topics(self) -> list[str]:
        return await self._registry.topics()

    async def set_capabilities(self, name: str, entry: Entry, capabilities: CapabilitySet) -> None:
        """Applied by the replica the participant is connected to (here, or told through the channel)."""
        if entry.replica == self.replica:
            topic = self._hub.get(name)
            participant = topic.participants.get(entry.id) if topic is not None else None
            if topic is not None and participant is not None:
                self._hub.apply_capabilities(topic, participant, capabilities)
            return
        await self._publish(name, {"k": "caps", "id": entry.id, "p": list(capabilities.patterns)})
