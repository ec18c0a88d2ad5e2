"""MCPx topics: who is in each topic, and who receives each envelope (MCPx §3.4-3.5, §6.3).

The hub is synchronous and never blocks: delivering means handing the already-serialized frame to
each recipient's bounded outbox (``Participant.deliver``). A recipient whose outbox is full is a slow
consumer; it is removed from the topic and told why (``on_drop``) instead of stalling the sender or
everyone else. Envelopes from participants are forwarded as the exact text received (§8.1: preserve
the envelope without modification); the gateway's own envelopes are serialized once per send.

Many replicas (ADR 0015): given a shared bus, the hub joins through a ``ReplicaSpan``
(gateway/mcpx/span.py): admission is a claim in the shared registry (ids and the per-topic limit hold
over all replicas), welcomes list the participants of every replica (``Topic.remote``), and routed
envelopes are published for the other replicas, which route them to their own participants with the
same rules. Without a bus (one replica) the hub is exactly the in-process hub it always was.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

from adapters import mcpx
from gateway.mcpx.span import DEFAULT_TTL_S, ReplicaSpan, SpanUnavailable
from policies.patterns import CapabilitySet

if TYPE_CHECKING:
    from gateway.bus.base import Bus
    from gateway.mcpx.registry import Entry
    from gateway.telemetry.observe import Tracing

log = logging.getLogger(__name__)

Mode = Literal["all", "directed"]
# (parsed envelope, its JSON text) -> False when the participant can take no more (slow consumer).
Deliver = Callable[[dict[str, Any], str], bool]

_PROPOSALS_KEPT = 4096  # proposals remembered per topic, to send fulfilment responses to proposers


# An admitted envelope routed by this replica: (topic, sender, envelope, how many here received it).
EnvelopeWatcher = Callable[[str, str, dict[str, Any], int], None]


class JoinRefused(Exception):
    """A join the hub cannot accept; ``code`` is the WebSocket close code to answer with."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(eq=False)
class Participant:
    id: str
    capabilities: CapabilitySet
    deliver: Deliver
    mode: Mode = "all"
    tools: list[dict[str, Any]] | None = None  # announced for MCP backends bridged into the topic
    on_drop: Callable[[str], None] | None = None  # the hub removed it (too slow); close its connection
    joined_at: float = field(default_factory=time.time)

    def entry(self) -> dict[str, Any]:
        """How others see this participant in welcome and presence messages."""
        item: dict[str, Any] = {"id": self.id, "capabilities": self.capabilities.describe()}
        if self.tools is not None:
            item["tools"] = self.tools
        return item


@dataclass(eq=False)
class Topic:
    name: str
    configured: bool
    participants: dict[str, Participant] = field(default_factory=dict)
    # proposal envelope id -> proposer id, oldest first (bounded)
    proposals: OrderedDict[str, str] = field(default_factory=OrderedDict)
    remote: dict[str, Entry] = field(default_factory=dict)  # participants on other replicas (ADR 0015)
    joining: int = 0  # joins waiting on the shared registry: the topic must not be dropped under them

    def has(self, participant_id: str) -> bool:
        """In the topic, on this replica or another."""
        return participant_id in self.participants or participant_id in self.remote

    def others(self, participant: Participant) -> list[dict[str, Any]]:
        """Everyone but ``participant``, as its welcome lists them: this replica's, then the others'."""
        local = [p.entry() for p in self.participants.values() if p is not participant]
        remote = sorted(self.remote.values(), key=lambda e: float(e.data.get("joined_at") or 0))
        return local + [e.public() for e in remote if e.id != participant.id]

    def proposer_of(self, proposal_id: str | None) -> str | None:
        return self.proposals.get(proposal_id) if proposal_id else None


class TopicHub:
    def __init__(
        self,
        max_participants: int,
        configured: tuple[str, ...] = (),
        bus: Bus | None = None,
        ttl_s: float = DEFAULT_TTL_S,
        tracing: Tracing | None = None,
    ) -> None:
        """``bus``: a bus shared with other replicas (topics span them); None for one replica.
        ``tracing``: a span per routed envelope (gateway/telemetry/); None: off."""
        self._max = max_participants
        self._configured = frozenset(configured)
        self._topics: dict[str, Topic] = {name: Topic(name, True) for name in configured}
        self.delivered = 0  # envelopes handed to recipients, for metrics and the benchmark
        self.span = ReplicaSpan(self, bus, ttl_s) if bus is not None else None
        self._tracing = tracing
        self._watchers: tuple[EnvelopeWatcher, ...] = ()  # the dashboard's live events, while watched

    @property
    def shared(self) -> bool:
        return self.span is not None

    async def close(self) -> None:
        if self.span is not None:
            await self.span.close()

    # ---- membership --------------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._topics.values()))

    def _duplicate(self, topic: Topic, participant: Participant) -> JoinRefused:
        self._drop_if_empty(topic)
        return JoinRefused(1008, f"participant {participant.id!r} is already connected to topic {topic.name!r}")

    def _full(self, topic: Topic) -> JoinRefused:
        self._drop_if_empty(topic)
        return JoinRefused(1013, f"topic {topic.name!r} is full ({self._max} participants)")

    def _topic_for(self, topic_name: str, participant: Participant) -> Topic:
        if participant.id.startswith("system:"):
            raise JoinRefused(1008, "participant ids starting with 'system:' are reserved")
        topic = self._topics.get(topic_name)
        if topic is None:
            topic = self._topics[topic_name] = Topic(topic_name, topic_name in self._configured)
        if participant.id in topic.participants:
            raise self._duplicate(topic, participant)
        return topic

    def join(self, topic_name: str, participant: Participant) -> Topic:
        """Admit on this replica alone; the joiner gets ``system/welcome`` first, then the others get
        ``system/presence``. With a shared bus, use ``enter``."""
        if self.span is not None:
            raise RuntimeError("a hub spanning replicas admits through enter(), which asks the registry")
        topic = self._topic_for(topic_name, participant)
        if len(topic.participants) >= self._max:
            raise self._full(topic)
        self._admitted(topic, participant)
        return topic

    async def enter(self, topic_name: str, participant: Participant) -> Topic:
        """Admit, on every replica's terms when the bus is shared (``join`` otherwise)."""
        if self.span is None:
            return self.join(topic_name, participant)
        topic = self._topic_for(topic_name, participant)
        topic.joining += 1
        try:
            refusal = await self.span.admit(topic, participant, self._max)
        except SpanUnavailable as exc:
            log.warning("MCPx: join of %s to %s refused, bus unavailable: %s", participant.id, topic_name, exc)
            refusal = "unavailable"
        except BaseException:  # cancelled (the gateway stops): leave nothing behind
            topic.joining -= 1
            self.span.unlink_if_idle(topic)
            self._drop_if_empty(topic)
            raise
        topic.joining -= 1
        if refusal is not None:
            self.span.unlink_if_idle(topic)
            if refusal == "full":
                raise self._full(topic)
            if refusal == "exists":
                raise self._duplicate(topic, participant)
            self._drop_if_empty(topic)
            raise JoinRefused(1013, "topics are unavailable, try again later")
        self._admitted(topic, participant)
        self.span.joined(topic, participant)
        return topic

    def _admitted(self, topic: Topic, participant: Participant) -> None:
        # Welcome before joining the topic: nothing routed can reach the joiner ahead of it.
        self._send(topic, participant, mcpx.welcome(participant.entry(), topic.others(participant)))
        topic.participants[participant.id] = participant
        self._broadcast_gateway(topic, mcpx.presence("join", participant.entry()), exclude=participant.id)

    def reannounce(self, topic_name: str, participant: Participant) -> None:
        """A participant's description changed (a backend's tools): presence has only join and
        leave (§3.4), so it is announced again as a join of the same id, which peers key by."""
        topic = self._topics.get(topic_name)
        if topic is not None and topic.participants.get(participant.id) is participant:
            self._broadcast_gateway(topic, mcpx.presence("join", participant.entry()), exclude=participant.id)
            if self.span is not None:
                self.span.changed(topic, participant)

    def leave(self, topic_name: str, participant: Participant) -> None:
        topic = self._topics.get(topic_name)
        # Only this very participant: a refused duplicate must not remove the one connected.
        if topic is None or topic.participants.get(participant.id) is not participant:
            return
        del topic.participants[participant.id]
        self._broadcast_gateway(topic, mcpx.presence("leave", {"id": participant.id}))
        if self.span is not None:
            self.span.left(topic, participant)
        self._drop_if_empty(topic)

    def announce(self, topic: Topic, event: str, entry: dict[str, Any]) -> None:
        """Presence of a participant of another replica, to this replica's participants."""
        self._broadcast_gateway(topic, mcpx.presence(event, entry))

    def _drop_if_empty(self, topic: Topic) -> None:
        if not topic.participants and not topic.configured and not topic.joining:
            self._topics.pop(topic.name, None)

    def find(self, participant_id: str) -> list[tuple[Topic, Participant]]:
        """Every live connection of a participant (the same id may be in several topics)."""
        return [
            (topic, topic.participants[participant_id])
            for topic in self._topics.values()
            if participant_id in topic.participants
        ]

    def set_capabilities(self, participant_id: str, capabilities: CapabilitySet) -> int:
        """Apply new capabilities to every live connection of the participant and welcome it again."""
        changed = self.find(participant_id)
        for topic, participant in changed:
            self.apply_capabilities(topic, participant, capabilities)
        return len(changed)

    def apply_capabilities(self, topic: Topic, participant: Participant, capabilities: CapabilitySet) -> None:
        participant.capabilities = capabilities
        self._send(topic, participant, mcpx.welcome(participant.entry(), topic.others(participant)))
        if self.span is not None:
            self.span.changed(topic, participant)

    # ---- participants on any replica (the REST API) ------------------------------------------

    async def locate(self, participant_id: str) -> list[tuple[str, tuple[str, ...], list[str]]]:
        """(topic, capability patterns, capabilities as shown) of every connection of a participant."""
        if self.span is None:
            return [(t.name, p.capabilities.patterns, p.capabilities.describe()) for t, p in self.find(participant_id)]
        return [
            (name, tuple(e.data.get("patterns") or ()), list(e.data.get("capabilities") or ()))
            for name, e in await self.span.locate(participant_id)
        ]

    async def change_capabilities(self, participant_id: str, capabilities: CapabilitySet) -> None:
        """Wherever it is connected: here at once, on another replica through the topic's channel."""
        if self.span is None:
            self.set_capabilities(participant_id, capabilities)
            return
        for name, entry in await self.span.locate(participant_id):
            await self.span.set_capabilities(name, entry, capabilities)

    async def listing(self) -> list[dict[str, Any]]:
        """Topics with their participant counts, over all replicas."""
        if self.span is None:
            return [{"name": t.name, "participants": len(t.participants), "configured": t.configured} for t in self]
        names = list(dict.fromkeys([*self._configured, *await self.span.topics()]))
        counts = {name: len(await self.span.roster(name)) for name in names}
        return [
            {"name": n, "participants": counts[n], "configured": n in self._configured}
            for n in names
            if counts[n] or n in self._configured
        ]

    async def roster(self, name: str) -> list[dict[str, Any]] | None:
        """Participants of a topic (with their mode) over all replicas; None when there is no such topic."""
        if self.span is None:
            topic = self._topics.get(name)
            return None if topic is None else [dict(p.entry(), mode=p.mode) for p in topic.participants.values()]
        entries = await self.span.roster(name)
        if not entries and name not in self._configured:
            return None
        return [dict(e.public(), mode=e.data.get("mode", "all")) for e in entries]

    # ---- delivery ----------------------------------------------------------------------------

    def route(self, topic: Topic, sender: str, envelope: dict[str, Any], raw: str | None = None) -> int:
        """Deliver an admitted envelope; returns how many received it. The sender never gets it back.
        With a shared bus, the other replicas deliver it to theirs."""
        text = raw if raw is not None else orjson.dumps(envelope).decode()
        if self._tracing is None:
            count = self.relay(topic, sender, envelope, text)
            if self.span is not None:
                self.span.routed(topic, sender, text)
        else:
            traced, count = self._tracing.envelope(topic.name, sender, envelope), 0
            try:
                count = self.relay(topic, sender, envelope, text)
                if self.span is not None:
                    self.span.routed(topic, sender, text)
            finally:
                traced.end(count)  # the envelope's span is current until then (gateway/telemetry/otel.py)
        if self._watchers:
            for watcher in self._watchers:
                watcher(topic.name, sender, envelope, count)
        return count

    def watch(self, watcher: EnvelopeWatcher) -> None:
        """Call ``watcher(topic, sender, envelope, recipients here)`` for every envelope routed from this
        replica from now on. It runs in ``route`` on the event loop: it must not block nor raise."""
        self._watchers = (*self._watchers, watcher)

    def unwatch(self, watcher: EnvelopeWatcher) -> None:
        self._watchers = tuple(w for w in self._watchers if w != watcher)

    def relay(self, topic: Topic, sender: str, envelope: dict[str, Any], raw: str | None = None) -> int:
        """Deliver to this replica's participants only (what ``route`` does here, and what it asks of
        the other replicas)."""
        kind = envelope.get("kind", "")
        if kind.startswith("mcp/proposal:") and isinstance(envelope.get("id"), str):
            topic.proposals[envelope["id"]] = sender
            if len(topic.proposals) > _PROPOSALS_KEPT:
                topic.proposals.popitem(last=False)
        text = raw if raw is not None else orjson.dumps(envelope).decode()
        to = envelope.get("to") or ()
        count = 0
        slow: list[Participant] = []
        for participant in list(topic.participants.values()):
            if participant.id == sender:
                continue
            # §6.3: "all" receives everything; "directed" only broadcasts and what names it.
            if to and participant.mode == "directed" and participant.id not in to:
                continue
            if participant.deliver(envelope, text):
                count += 1
            else:
                slow.append(participant)
        self.delivered += count
        for participant in slow:
            self._drop(topic, participant)
        return count

    def send(self, topic: Topic, participant_id: str, envelope: dict[str, Any]) -> bool:
        """A gateway envelope to one participant (errors, welcomes)."""
        participant = topic.participants.get(participant_id)
        return participant is not None and self._send(topic, participant, envelope)

    def _send(self, topic: Topic, participant: Participant, envelope: dict[str, Any]) -> bool:
        if participant.deliver(envelope, orjson.dumps(envelope).decode()):
            self.delivered += 1
            return True
        self._drop(topic, participant)
        return False

    def _broadcast_gateway(self, topic: Topic, envelope: dict[str, Any], exclude: str | None = None) -> None:
        # Serialized once for every recipient; presence goes to everyone whatever their mode.
        text = orjson.dumps(envelope).decode()
        slow = [p for p in list(topic.participants.values()) if p.id != exclude and not p.deliver(envelope, text)]
        for participant in slow:
            self._drop(topic, participant)

    def _drop(self, topic: Topic, participant: Participant) -> None:
        if topic.participants.get(participant.id) is not participant:
            return
        log.warning("MCPx participant %s dropped from topic %s: too slow to read", participant.id, topic.name)
        callback, participant.on_drop = participant.on_drop, None
        self.leave(topic.name, participant)
        if callback is not None:
            callback("client too slow")
