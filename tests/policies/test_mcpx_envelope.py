"""policies/mcpx_envelope.py: the MCPx sender (``from``) and reserved ``system/*`` kinds, as chain members."""

from __future__ import annotations

from typing import Any

import pytest

from adapters import mcpx
from gateway.bus.memory import MemoryBus
from gateway.config import Config
from gateway.core import Gateway
from gateway.errors import CAPABILITY_DENIED, INVALID_REQUEST
from gateway.events import Dialect, Event, Kind
from policies import CapabilityPolicy, CapabilitySet, PolicyChain, Principal
from policies.chain import ALLOW, Outcome
from policies.envelope_rate import EnvelopeRatePolicy
from policies.mcpx_envelope import McpxReservedKindPolicy, McpxSenderPolicy


def envelope_event(sender: str, kind: str, payload: dict[str, Any] | None = None) -> Event:
    return mcpx.decode(mcpx.envelope(sender, kind, payload if payload is not None else {}))


ALICE = Principal("alice", CapabilitySet(["chat", "mcp/*", "system/*"]))


# ---- McpxSenderPolicy ------------------------------------------------------------------------


async def test_sender_who_is_the_principal_passes() -> None:
    assert await McpxSenderPolicy().check(envelope_event("alice", "chat"), ALICE) is None


async def test_spoofed_from_is_denied_with_a_typed_outcome() -> None:
    decision = await McpxSenderPolicy().check(envelope_event("bob", "chat"), ALICE)
    assert decision is not None and not decision.allowed
    assert decision.outcome is Outcome.SPOOFED and decision.outcome == "spoofed"
    assert decision.policy == "mcpx_sender" and decision.code == INVALID_REQUEST
    assert decision.reason == "from must be your participant id 'alice'"
    assert decision.data == {"from": "bob", "principal": "alice"}


async def test_sender_check_is_for_mcpx_only() -> None:
    # Another dialect's event with a source of its own (an MCPL backend, say) is not the policy's business.
    event = Event(kind=Kind.REQUEST, method="tools/call", payload={}, dialect=Dialect.MCPL, source="bob")
    assert await McpxSenderPolicy().check(event, ALICE) is None


# ---- McpxReservedKindPolicy ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["system/welcome", "system/presence", "system/error", "system/anything:at:all"])
async def test_system_kinds_are_reserved_whatever_the_capabilities(kind: str) -> None:
    assert ALICE.capabilities.allows(envelope_event("alice", kind).action)  # the capability would let it through
    decision = await McpxReservedKindPolicy().check(envelope_event("alice", kind), ALICE)
    assert decision is not None and not decision.allowed
    assert decision.outcome is Outcome.RESERVED and decision.outcome == "reserved"
    assert decision.policy == "mcpx_reserved_kind" and decision.code == CAPABILITY_DENIED
    assert decision.reason == "the system/* namespace is reserved to the gateway"
    assert decision.data == {"action": kind, "principal": "alice"}


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("chat", {"text": "hi"}),
        ("mcp/request:tools/call:echo", {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
        ("mcp/proposal:tools/call", {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
        ("mcp/response:tools/call", {"jsonrpc": "2.0", "id": 1, "result": {}}),
    ],
)
async def test_other_kinds_are_not_reserved(kind: str, payload: dict[str, Any]) -> None:
    assert await McpxReservedKindPolicy().check(envelope_event("alice", kind, payload), ALICE) is None


async def test_reserved_check_is_for_mcpx_only() -> None:
    event = Event(kind=Kind.SYSTEM, method="welcome", payload={}, dialect=Dialect.MCP)
    assert await McpxReservedKindPolicy().check(event, ALICE) is None


# ---- in the chain ----------------------------------------------------------------------------


def mcpx_chain(bus: MemoryBus, burst: float = 1.0) -> PolicyChain:
    """The gateway's MCPx admission order: sender, reserved kinds, capabilities, envelope rate."""
    return PolicyChain(
        [McpxSenderPolicy(), McpxReservedKindPolicy(), CapabilityPolicy(), EnvelopeRatePolicy(0.001, burst, bus)]
    )


async def test_spoofing_is_judged_before_the_reserved_namespace_and_capabilities() -> None:
    nobody = Principal("alice", CapabilitySet([]))
    chain = mcpx_chain(MemoryBus())
    assert (await chain.admit(envelope_event("bob", "system/welcome"), nobody)).outcome is Outcome.SPOOFED
    assert (await chain.admit(envelope_event("alice", "system/welcome"), nobody)).outcome is Outcome.RESERVED
    assert (await chain.admit(envelope_event("alice", "chat"), nobody)).outcome is Outcome.DENIED


async def test_a_refused_envelope_costs_no_rate_token() -> None:
    chain = mcpx_chain(MemoryBus(), burst=1.0)
    for _ in range(3):
        assert (await chain.admit(envelope_event("mallory", "chat"), ALICE)).outcome is Outcome.SPOOFED
        assert (await chain.admit(envelope_event("alice", "system/presence"), ALICE)).outcome is Outcome.RESERVED
    assert await chain.admit(envelope_event("alice", "chat"), ALICE) is ALLOW  # the one token is still there
    assert (await chain.admit(envelope_event("alice", "chat"), ALICE)).outcome is Outcome.RATE_LIMITED


def test_the_gateway_chain_runs_them_first() -> None:
    names = [policy.name for policy in Gateway(Config()).chain.policies]
    assert names.index("mcpx_sender") < names.index("mcpx_reserved_kind") < names.index("capabilities")
    assert names.index("mcpx_reserved_kind") < names.index("envelope_rate")
