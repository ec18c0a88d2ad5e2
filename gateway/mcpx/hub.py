"""MCPx topics: who is in each topic, and who receives each envelope (MCPx §3.4-3.5, §6.3).

The hub is synchronous and never blocks: delivering means handing the already-serialized frame to
each recipient's bounded outbox (``Participant.deliver``). A recipient whose outbox is full is a slow
consumer; it is removed from the topic and told why (``on_drop``) instead of stalling the sender or
everyone else. Envelopes from participants are forwarded as the exact text received (§8.1: preserve
the envelope without modification); the gateway's own envelopes are serialized once per send.

One replica only: topics live in this process (see docs/adr for the multi-replica plan via the bus).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from adapters import mcpx
from policies.patterns import CapabilitySet

log = logging.getLogger(__name__)

Mode = Literal["all", "directed"]
# (parsed envelope, its JSON text) -> False when the participant can take no more (slow consumer).
Deliver = Callable[[dict[str, Any], str], bool]

_PROPOSALS_KEPT = 4096  # proposals remembered per topic, to send fulfilment responses to proposers


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

    def proposer_of(self, proposal_id: str | None) -> str | None:
        return self.proposals.get(proposal_id) if proposal_id else None


class TopicHub:
    def __init__(self, max_participants: int, configured: tuple[str, ...] = ()) -> None:
        self._max = max_participants
        self._configured = frozenset(configured)
        self._topics: dict[str, Topic] = {name: Topic(name, True) for name in configured}
        self.delivered = 0  # envelopes handed to recipients, for metrics and the benchmark

    # ---- membership --------------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._topics.values()))

    def join(self, topic_name: str, participant: Participant) -> Topic:
        """Admit; the joiner gets ``system/welcome`` first, then the others get ``system/presence``."""
        if participant.id.startswith("system:"):
            raise JoinRefused(1008, "participant ids starting with 'system:' are reserved")
        topic = self._topics.get(topic_name)
        if topic is None:
            topic = self._topics[topic_name] = Topic(topic_name, topic_name in self._configured)
        if participant.id in topic.participants:
            self._drop_if_empty(topic)
            raise JoinRefused(1008, f"participant {participant.id!r} is already connected to topic {topic_name!r}")
        if len(topic.participants) >= self._max:
            self._drop_if_empty(topic)
            raise JoinRefused(1013, f"topic {topic_name!r} is full ({self._max} participants)")
        others = [p.entry() for p in topic.participants.values()]
        # Welcome before joining the topic: nothing routed can reach the joiner ahead of it.
        self._send(topic, participant, mcpx.welcome(participant.entry(), others))
        topic.participants[participant.id] = participant
        self._broadcast_gateway(topic, mcpx.presence("join", participant.entry()), exclude=participant.id)
        return topic

    def reannounce(self, topic_name: str, participant: Participant) -> None:
        """A participant's description changed (a backend's tools): presence has only join and
        leave (§3.4), so it is announced again as a join of the same id, which peers key by."""
        topic = self._topics.get(topic_name)
        if topic is not None and topic.participants.get(participant.id) is participant:
            self._broadcast_gateway(topic, mcpx.presence("join", participant.entry()), exclude=participant.id)

    def leave(self, topic_name: str, participant: Participant) -> None:
        topic = self._topics.get(topic_name)
        # Only this very participant: a refused duplicate must not remove the one connected.
        if topic is None or topic.participants.get(participant.id) is not participant:
            return
        del topic.participants[participant.id]
        self._broadcast_gateway(topic, mcpx.presence("leave", {"id": participant.id}))
        self._drop_if_empty(topic)

    def _drop_if_empty(self, topic: Topic) -> None:
        if not topic.participants and not topic.configured:
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
            participant.capabilities = capabilities
            others = [p.entry() for p in topic.participants.values() if p is not participant]
            self._send(topic, participant, mcpx.welcome(participant.entry(), others))
        return len(changed)

    # ---- delivery ----------------------------------------------------------------------------

    def route(self, topic: Topic, sender: str, envelope: dict[str, Any], raw: str | None = None) -> int:
        """Deliver an admitted envelope; returns how many received it. The sender never gets it back."""
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
