"""What this replica knows of a topic's participants on other replicas (ADR 0015), and its channel link.

``Topic.remote`` mirrors the registry entries of the other replicas. It is fed from two sides: the
presence messages on the topic's channel, and a reconcile with the registry each beat. Both go
through ``mirror``/``unmirror``, which announce to this replica's participants only what changes:
a ``join`` when an id appears (or its nonce or tools change), a ``leave`` when it goes, never twice.
A reconcile reads the registry before it applies it, so ids a presence message moved after that read
(``Link.touched``) are left as the message put them.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.mcpx.hub import Topic, TopicHub
    from gateway.mcpx.registry import Entry


def mirror(hub: TopicHub, topic: Topic, entry: Entry, replica: str) -> None:
    """An entry seen (``replica`` is this one: its own entries are not mirrored)."""
    if entry.replica == replica:
        return
    old = topic.remote.get(entry.id)
    topic.remote[entry.id] = entry
    if old is None or old.nonce != entry.nonce or old.data.get("tools") != entry.data.get("tools"):
        hub.announce(topic, "join", entry.public())


def unmirror(hub: TopicHub, topic: Topic, pid: str, nonce: Any = None) -> None:
    """An entry gone (only that join's, when ``nonce`` is given)."""
    old = topic.remote.get(pid)
    if old is not None and (nonce is None or old.nonce == nonce):
        del topic.remote[pid]
        hub.announce(topic, "leave", {"id": pid})


@dataclass(eq=False)
class Link:
    """This replica's subscription to one topic's channel."""

    task: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex)  # of our pings through the channel
    pending: int = 0  # joins in progress: the link must outlive them
    seq: int = 0  # presence messages handled, to keep a reconcile from undoing a newer one
    touched: dict[str, int] = field(default_factory=dict)

    def touch(self, pid: str) -> None:
        self.seq += 1
        self.touched[pid] = self.seq

    def sync(self, hub: TopicHub, topic: Topic, live: dict[str, Entry], seq: int, replica: str) -> None:
        """Make the mirror what the registry said when ``seq`` was current, except for ids moved since."""
        fresh = {pid for pid, at in self.touched.items() if at > seq}
        for pid in [p for p in topic.remote if p not in live and p not in fresh]:
            unmirror(hub, topic, pid)
        for pid, entry in live.items():
            if pid not in fresh:
                mirror(hub, topic, entry, replica)
        self.touched = {pid: at for pid, at in self.touched.items() if at > seq}
