"""gateway/mcpx/door.py without a socket: one frame through the chain, and how each denial is answered.

The door is built from its collaborators (a topic hub, a chain, audit, metrics), so a frame can be fed
straight to it; what the sender gets back is read from its inbox in the hub.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from adapters import mcpx
from gateway.audit import AuditLog
from gateway.bus.memory import MemoryBus
from gateway.config import AuditConfig, Mcpx
from gateway.events import Event
from gateway.mcpx.door import McpxDoor
from gateway.mcpx.hub import Participant, Topic, TopicHub
from gateway.metrics import Metrics
from policies import CapabilityPolicy, CapabilitySet, PolicyChain, Principal
from policies.auth import AuthError, Credentials
from policies.chain import Decision, Outcome, Stage, Target
from policies.envelope_rate import EnvelopeRatePolicy
from policies.mcpx_envelope import McpxReservedKindPolicy, McpxSenderPolicy


@dataclass
class Fixed:
    """A policy that denies every MCPx event with one decision."""

    answer: Decision
    name: str = "fixed"
    stage: Stage = "admission"

    async def check(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        return self.answer


@dataclass
class Harness:
    door: McpxDoor
    hub: TopicHub
    metrics: Metrics
    records: list[dict[str, Any]] = field(default_factory=list)
    inboxes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def join(self, pid: str, *capabilities: str) -> tuple[Topic, Participant]:
        inbox = self.inboxes.setdefault(pid, [])

        def deliver(envelope: dict[str, Any], _text: str) -> bool:
            inbox.append(envelope)
            return True

        participant = Participant(pid, CapabilitySet(list(capabilities)), deliver, "all")
        return self.hub.join("room", participant), participant

    async def send(self, topic: Topic, participant: Participant, envelope: dict[str, Any]) -> None:
        await self.door._on_frame(topic, participant, orjson.dumps(envelope).decode())

    def errors(self, pid: str) -> list[dict[str, Any]]:
        return [e for e in self.inboxes[pid] if e["kind"] == "system/error"]

    def counted(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value("switchboard_mcpx_envelopes_total", {"outcome": outcome})
        return value or 0.0


def refuse_auth(_scope: Any, _token: str | None = None) -> Credentials:
    raise AuthError("not in these tests")


def harness(*extra: Any, burst: float = 100.0) -> Harness:
    metrics = Metrics()
    audit = AuditLog(AuditConfig(), metrics)
    hub = TopicHub(10)
    chain = PolicyChain(
        [
            McpxSenderPolicy(),
            McpxReservedKindPolicy(),
            CapabilityPolicy(),
            *extra,
            EnvelopeRatePolicy(0.001, burst, MemoryBus()),
        ]
    )
    door = McpxDoor(
        Mcpx(),
        queue_size=8,
        topics=hub,
        chain=chain,
        audit=audit,
        metrics=metrics,
        authenticate=refuse_auth,
        principal_of=lambda credentials: Principal(credentials.name, CapabilitySet([])),
    )
    h = Harness(door, hub, metrics)
    audit.add_listener(lambda record: h.records.append(dict(record)))
    return h


async def test_a_spoofed_from_is_an_invalid_envelope_answered_to_the_sender_alone() -> None:
    h = harness()
    topic, alice = h.join("alice", "chat")
    h.join("bob", "chat")
    spoof = mcpx.envelope("bob", "chat", {"text": "it is me, bob"})
    await h.send(topic, alice, spoof)
    [error] = h.errors("alice")
    assert error["correlation_id"] == spoof["id"] and error["to"] == ["alice"]
    assert error["payload"] == {"error": "invalid_envelope", "message": "from must be your participant id 'alice'"}
    assert all(e["kind"] != "chat" for e in h.inboxes["bob"])  # it reached nobody
    [record] = h.records  # an impersonation attempt is audited
    assert (record["outcome"], record["principal"], record["action"]) == ("spoofed", "alice", "chat")
    assert h.counted("invalid") == 1 and h.counted("refused") == 0


@pytest.mark.parametrize("kind", ["system/welcome", "system/presence", "system/error"])
async def test_a_reserved_kind_is_refused_with_the_attempted_kind(kind: str) -> None:
    h = harness()
    topic, alice = h.join("alice", "system/*", "chat")  # no capability opens the gateway's namespace
    sent = mcpx.envelope("alice", kind, {})
    await h.send(topic, alice, sent)
    [error] = h.errors("alice")
    assert error["correlation_id"] == sent["id"]
    assert error["payload"] == {
        "error": "reserved_kind",
        "message": "the system/* namespace is reserved to the gateway",
        "attempted_kind": kind,
    }
    [record] = h.records
    assert (record["outcome"], record["principal"], record["action"]) == ("reserved", "alice", kind)
    assert h.counted("refused") == 1


async def test_a_capability_denial_has_the_capability_violation_shape_and_is_audited() -> None:
    h = harness()
    topic, alice = h.join("alice", "chat")
    sent = mcpx.envelope("alice", "mcp/proposal:tools/call", {"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
    await h.send(topic, alice, sent)
    [error] = h.errors("alice")
    assert error["correlation_id"] == sent["id"]
    assert error["payload"] == {
        "error": "capability_violation",
        "message": "You lack capability for 'mcp/proposal:tools/call'",
        "attempted_kind": "mcp/proposal:tools/call",
        "your_capabilities": alice.capabilities.describe(),
    }
    [record] = h.records
    assert record["outcome"] == "denied" and record["action"] == "mcp/proposal:tools/call"
    assert (record["transport"], record["principal"], record["topic"]) == ("mcpx", "alice", "room")
    assert h.counted("refused") == 1


async def test_over_the_envelope_rate_is_rate_limited_with_retry_after() -> None:
    h = harness(burst=1.0)
    topic, alice = h.join("alice", "chat")
    await h.send(topic, alice, mcpx.envelope("alice", "chat", {"text": "one"}))
    second = mcpx.envelope("alice", "chat", {"text": "two"})
    await h.send(topic, alice, second)
    [error] = h.errors("alice")
    assert error["correlation_id"] == second["id"]
    assert error["payload"]["error"] == "rate_limited"
    assert error["payload"]["message"] == "more than 0.001 envelopes/s; envelope not delivered"
    assert error["payload"]["retry_after_ms"] > 0
    assert [r["outcome"] for r in h.records] == ["rate_limited"]
    assert h.counted("routed") == 1 and h.counted("refused") == 1


async def test_a_denial_without_an_mcpx_code_is_answered_with_the_policy_name() -> None:
    pinned = Decision(False, "pinning", 1, "awaits approval", {"tool": "x"}, outcome=Outcome.PINNED)
    h = harness(Fixed(pinned))
    topic, alice = h.join("alice", "chat")
    sent = mcpx.envelope("alice", "chat", {"text": "hi"})
    await h.send(topic, alice, sent)
    [error] = h.errors("alice")
    assert error["payload"] == {"error": "pinning", "message": "awaits approval"}
    assert [r["outcome"] for r in h.records] == ["pinned"]


async def test_an_allowed_envelope_is_routed() -> None:
    h = harness()
    topic, alice = h.join("alice", "chat")
    h.join("bob", "chat")
    sent = mcpx.envelope("alice", "chat", {"text": "hi"})
    await h.send(topic, alice, sent)
    assert h.errors("alice") == []
    assert [e["id"] for e in h.inboxes["bob"] if e["kind"] == "chat"] == [sent["id"]]
    assert h.counted("routed") == 1
