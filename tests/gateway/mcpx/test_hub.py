"""gateway/mcpx/hub.py: membership, welcome/presence order, routing modes, slow consumers, proposals."""

from __future__ import annotations

from typing import Any

import pytest

from adapters import mcpx
from gateway.mcpx.hub import JoinRefused, Participant, TopicHub
from policies.patterns import CapabilitySet


class Inbox:
    def __init__(self, capacity: int = 1000) -> None:
        self.items: list[dict[str, Any]] = []
        self.capacity = capacity
        self.dropped: list[str] = []

    def deliver(self, envelope: dict[str, Any], _text: str) -> bool:
        if len(self.items) >= self.capacity:
            return False
        self.items.append(envelope)
        return True

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.items]


def member(pid: str, mode: str = "all", capacity: int = 1000) -> tuple[Participant, Inbox]:
    inbox = Inbox(capacity)
    participant = Participant(pid, CapabilitySet(["mcp/*", "chat"]), inbox.deliver, mode)  # type: ignore[arg-type]
    participant.on_drop = inbox.dropped.append
    return participant, inbox


def chat(sender: str, to: list[str] | None = None) -> dict[str, Any]:
    return mcpx.envelope(sender, "chat", {"text": "hi"}, to=to)


def test_welcome_first_then_presence_to_others_only() -> None:
    hub = TopicHub(10)
    a, a_in = member("a")
    b, b_in = member("b")
    hub.join("t", a)
    hub.join("t", b)
    assert a_in.kinds() == ["system/welcome", "system/presence"]
    assert b_in.kinds() == ["system/welcome"]
    welcome = b_in.items[0]
    assert welcome["to"] == ["b"] and welcome["from"] == mcpx.GATEWAY_ID
    assert welcome["payload"]["participants"] == [{"id": "a", "capabilities": ["mcp/*", "chat"]}]
    hub.leave("t", b)
    assert a_in.items[-1]["payload"] == {"event": "leave", "participant": {"id": "b"}}


def test_routing_modes_and_sender_exclusion() -> None:
    hub = TopicHub(10)
    members = {pid: member(pid, mode) for pid, mode in (("a", "all"), ("d", "directed"), ("e", "directed"))}
    for participant, _ in members.values():
        topic = hub.join("t", participant)
    for _, inbox in members.values():
        inbox.items.clear()
    assert hub.route(topic, "a", chat("a")) == 2  # broadcast: everyone but the sender
    assert hub.route(topic, "d", chat("d", to=["e"])) == 2  # e (named) and a (mode all)
    assert [len(inbox.items) for _, inbox in members.values()] == [1, 1, 2]


def test_topic_lifecycle_and_limits() -> None:
    hub = TopicHub(2, configured=("kept",))
    a, _ = member("a")
    hub.join("tmp", a)
    with pytest.raises(JoinRefused) as dup:
        hub.join("tmp", member("a")[0])
    assert dup.value.code == 1008
    hub.join("tmp", member("b")[0])
    with pytest.raises(JoinRefused) as full:
        hub.join("tmp", member("c")[0])
    assert full.value.code == 1013
    with pytest.raises(JoinRefused):
        hub.join("tmp", member("system:x")[0])
    hub.leave("tmp", a)
    hub.leave("tmp", hub.get("tmp").participants["b"])  # type: ignore[union-attr]
    assert hub.get("tmp") is None
    assert hub.get("kept") is not None and [t.name for t in hub] == ["kept"]


def test_slow_consumer_is_dropped_not_blocking() -> None:
    hub = TopicHub(10)
    a, _ = member("a")
    slow, slow_in = member("slow", capacity=3)
    topic = hub.join("t", slow)
    hub.join("t", a)
    for _ in range(5):
        hub.route(topic, "a", chat("a"))
    assert slow_in.dropped == ["client too slow"]
    assert "slow" not in topic.participants


def test_proposals_remembered_and_capabilities_changed_live() -> None:
    hub = TopicHub(10)
    p, p_in = member("p")
    topic = hub.join("t", p)
    proposal = mcpx.envelope("p", "mcp/proposal:tools/call:x", {"method": "tools/call"})
    hub.route(topic, "p", proposal)
    assert topic.proposer_of(proposal["id"]) == "p" and topic.proposer_of(None) is None
    assert hub.set_capabilities("p", CapabilitySet(["chat"])) == 1
    assert p_in.items[-1]["kind"] == "system/welcome"
    assert p_in.items[-1]["payload"]["you"]["capabilities"] == ["chat"]
    assert hub.set_capabilities("nobody", CapabilitySet([])) == 0


@pytest.mark.parametrize(
    ("kind", "payload", "ok"),
    [
        ("mcp/request:tools/call:echo", {"method": "tools/call", "params": {"name": "echo"}}, True),
        ("mcp/request:tools/call:echo", {"method": "tools/call", "params": {"name": "rm"}}, False),
        ("mcp/request:tools/call", {"method": "tools/list"}, False),
        ("mcp/request:resources/read:file:///a", {"method": "resources/read", "params": {"uri": "file:///a"}}, True),
        ("mcp/proposal:tools/call:x", {"method": "tools/call", "params": {"name": "y"}}, False),
        ("mcp/response:tools/call:x", {"result": {}}, True),
        ("chat", {"text": "hi"}, True),
    ],
)
def test_kind_mismatch(kind: str, payload: dict[str, Any], ok: bool) -> None:
    assert (mcpx.kind_mismatch(kind, payload) is None) is ok
