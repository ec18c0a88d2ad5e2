"""Rules that differ by dialect, decided in policies/: MCPx responses are checked; the envelope
rate applies to MCPx participants only."""

from __future__ import annotations

from gateway.bus.memory import MemoryBus
from gateway.events import Dialect, Event, Kind
from policies.capabilities import CapabilityPolicy
from policies.envelope_rate import EnvelopeRatePolicy
from policies.patterns import CapabilitySet
from policies.principal import Principal

ASKER = Principal("asker", CapabilitySet(["mcp/request:*", "chat"]))


def response(dialect: Dialect) -> Event:
    return Event(kind=Kind.RESPONSE, method="tools/call", payload={}, dialect=dialect, context="echo")


async def test_an_mcp_clients_response_is_not_checked_but_an_mcpx_participants_is() -> None:
    policy = CapabilityPolicy()
    assert await policy.check(response(Dialect.MCP), ASKER) is None, "it answers a relayed, checked request"
    denied = await policy.check(response(Dialect.MCPX), ASKER)
    assert denied is not None and not denied.allowed
    assert denied.data == {"action": "mcp/response:tools/call:echo", "principal": "asker"}
    responder = Principal("responder", CapabilitySet(["mcp/response:*"]))
    assert await policy.check(response(Dialect.MCPX), responder) is None


async def test_the_envelope_rate_counts_mcpx_events_only() -> None:
    policy = EnvelopeRatePolicy(messages_per_s=0.001, burst=2, bus=MemoryBus())
    chat = Event(kind=Kind.CHAT, method=None, payload={}, dialect=Dialect.MCPX)
    assert await policy.check(chat, ASKER) is None
    assert await policy.check(chat, ASKER) is None
    limited = await policy.check(chat, ASKER)
    assert limited is not None and limited.outcome == "rate_limited"
    assert isinstance(limited.data, dict) and limited.data["retry_after_ms"] > 0
    mcp = Event(kind=Kind.REQUEST, method="tools/call", payload={}, dialect=Dialect.MCP, context="echo")
    assert await policy.check(mcp, ASKER) is None, "MCP requests have their own limits"
    other = Principal("other", ASKER.capabilities)
    assert await policy.check(chat, other) is None, "buckets are per participant"
